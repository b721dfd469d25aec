"""Every HelmChartProxy the conductor writes, rendered as CAAPH installs it,
by the real Helm engine from the upstream chart at the proxy's version
(issue 47).

- **The engine**: PyPI's helm-python-sdk (Helm v4's own Go code as a shared
  library; no helm binary), `Chart.load(dir).render(values, name,
  namespace)`: what `helm template` gives, one manifest per template. It
  runs in a venv of its own (`HELM_VENV`, 244 MB: scripts/setup-env.sh),
  one process per batch of renders (tests/helm_render.py).
- **The charts**: scripts/charts.lock, fetched and verified by
  scripts/fetch-charts.sh (`HELM_CHARTS_DIR`), assembled as `helm dependency
  build` would (tests/helm_render.py, `chart_path`, which capi-sim's CAAPH
  uses too).
- **The values**: CAAPH runs `valuesTemplate` through Go's text/template
  with sprig against the Cluster and its control plane
  (cluster-api-addon-provider-helm `internal/value_substitutions.go`,
  `ParseValues`); a template without actions (`{{`) comes out as it is, and
  the conductor writes none: asserted here, the text is the values. Release
  name and namespace are the proxy's `releaseName` and `namespace`
  (`internal/helm_operations.go`).
"""
import json
import os
import subprocess
import sys
import time

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import helm_render  # noqa: E402 - the chart table and assembly, shared with capi-sim's engine


def charts_dir():
    """`HELM_CHARTS_DIR`, from scripts/fetch-charts.sh once per process."""
    if not os.environ.get("HELM_CHARTS_DIR"):
        p = subprocess.run([os.path.join(ROOT, "scripts", "fetch-charts.sh")], capture_output=True, text=True,
                           timeout=1800, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise RuntimeError(f"scripts/fetch-charts.sh failed: {p.stderr[-2000:]}")
        line = p.stdout.strip().splitlines()[-1]
        assert line.startswith("export HELM_CHARTS_DIR="), line
        os.environ["HELM_CHARTS_DIR"] = line.split("=", 1)[1]
    return os.environ["HELM_CHARTS_DIR"]


def chart_path(name, version):
    """A folder (or .tgz) Helm loads as chart `name` at `version`, its
    dependencies in place (tests/helm_render.py), once per process."""
    return helm_render.chart_path(name, version, charts_dir())


def crd_files(name, version):
    """The CRD files Helm installs before the chart's templates."""
    return helm_render.crd_files(name, version, charts_dir())


def engine_python():
    """The Python of the Helm engine's venv (`HELM_VENV`)."""
    venv = os.environ.get("HELM_VENV") or os.path.expanduser(
        "~/.cache/magnum-conductor-rs/venv-helm-python-sdk-0.2.2")
    python = os.path.join(venv, "bin", "python")
    assert os.path.exists(python), f"{venv}: run scripts/setup-env.sh (the Helm engine's venv)"
    return python


def engine_args():
    """capi-sim's arguments for its CAAPH to install every release with the
    real Helm engine (tests/capi-sim/src/helm.rs); the charts fetched here
    when `HELM_CHARTS_DIR` is not set (capi-sim inherits it)."""
    charts_dir()
    return ["--helm-engine", engine_python(), "--helm-script", os.path.join(ROOT, "tests", "helm_render.py")]


def values_of(hcp):
    """The values CAAPH gives Helm for this proxy (see the module)."""
    text = hcp["spec"].get("valuesTemplate") or ""
    assert "{{" not in text, f"{hcp['metadata']['name']}: a Go template action in the values: {text}"
    return yaml.safe_load(text) or {}


def render_many(jobs):
    """Render (name, version, values, release, namespace) jobs in one
    process of the engine's venv: [{template path: manifest text}]; a
    chart Helm refuses raises, naming it and Helm's reason."""
    python = engine_python()
    body = [{"chart": chart_path(n, v), "values": vals, "name": rel, "namespace": ns}
            for n, v, vals, rel, ns in jobs]
    p = subprocess.run([python, os.path.join(ROOT, "tests", "helm_render.py")], input=json.dumps(body),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = []
    for (n, v, _, rel, _), r in zip(jobs, json.loads(p.stdout)):
        if "error" in r:
            raise AssertionError(f"Helm could not render {n} {v} as release {rel}: {r['error']}")
        out.append(r["manifests"])
    return out


def helm_history(kubeconfig, namespace, release):
    """The release as the real Helm reads it from a cluster (`helm history`,
    `get values`, `status`): {"history": [{"revision", "status",
    "description", "chart", ...}], "values", "manifest"}; an error names
    Helm's reason."""
    p = subprocess.run([engine_python(), os.path.join(ROOT, "tests", "helm_render.py"), "--releases"],
                       input=json.dumps({"kubeconfig": kubeconfig, "namespace": namespace, "release": release}),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert "error" not in out, f"Helm could not read release {namespace}/{release}: {out['error']}"
    return out


def render_chart(name, version, values, release, namespace):
    """{template path: manifest text}, as `helm template` renders them."""
    return render_many([(name, version, values, release, namespace)])[0]


def objects(rendered):
    """The Kubernetes objects of a render, each with its template's path."""
    out = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml", ".tpl")) or path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind"):
                out.append((path, doc))
    return out


def render(hcp):
    """The objects CAAPH's release of `hcp` installs: [(template, object)]."""
    s = hcp["spec"]
    return objects(render_chart(s["chartName"], s["version"], values_of(hcp), s["releaseName"], s["namespace"]))


def leaves(values, prefix=()):
    """Every leaf of a values tree as a key path (a list is a leaf)."""
    if isinstance(values, dict) and values:
        for k, v in values.items():
            yield from leaves(v, prefix + (k,))
    else:
        yield prefix


def without(values, path):
    """A copy of `values` without the key at `path`."""
    if len(path) == 1:
        return {k: v for k, v in values.items() if k != path[0]}
    return {k: (without(v, path[1:]) if k == path[0] else v) for k, v in values.items()}


def declared(name, version, path):
    """Whether the chart's default values (or, for a subchart's key, the
    subchart's) hold `path`: a key the chart knows."""
    chart = chart_path(name, version)
    if chart.endswith(".tgz"):
        import tarfile
        with tarfile.open(chart) as t:
            member = next(m for m in t.getmembers() if m.name.count("/") == 1 and m.name.endswith("/values.yaml"))
            defaults = yaml.safe_load(t.extractfile(member))
    else:
        defaults = yaml.safe_load(open(os.path.join(chart, "values.yaml"))) or {}
        sub = os.path.join(chart, "charts", path[0], "values.yaml")
        if len(path) > 1 and path[0] not in defaults and os.path.exists(sub):
            defaults = {path[0]: yaml.safe_load(open(sub)) or {}}
    node = defaults
    for k in path:
        if not isinstance(node, dict) or k not in node:
            return False
        node = node[k]
    return True


def unread_keys(hcp):
    """The value keys of `hcp` the chart never reads: a key is read when
    the render without it differs, or when the chart declares it in its
    default values (a key set to its default changes nothing). A key the
    conductor misspells or a chart renamed is neither."""
    s = hcp["spec"]
    values = values_of(hcp)
    paths = [p for p in leaves(values) if not declared(s["chartName"], s["version"], p)]
    job = (s["chartName"], s["version"])
    full, *each = render_many([(*job, values, s["releaseName"], s["namespace"])] +
                              [(*job, without(values, p), s["releaseName"], s["namespace"]) for p in paths])
    return [".".join(map(str, p)) for p, r in zip(paths, each) if r == full]


def images(objs):
    """Every container image of the rendered objects (init containers too)."""
    found = []
    for _, o in objs:
        spec = o.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or (spec if o["kind"] == "Pod" else {})
        for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
            found.append(c["image"])
    return found


def pod_reads(objs, kind, name_part):
    """What the pods of the (first) `kind` whose name holds `name_part`
    read: {container: {"args", "env", "mounts": {path: (volume source)}}}."""
    o = next((o for _, o in objs if o["kind"] == kind and name_part in o["metadata"]["name"]), None)
    assert o is not None, f"no {kind} *{name_part}* in {[(x['kind'], x['metadata']['name']) for _, x in objs]}"
    pod = o["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    out = {}
    for c in pod["containers"]:
        mounts = {m["mountPath"]: volumes.get(m["name"], {}) for m in c.get("volumeMounts") or []}
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        out[c["name"]] = {"args": c.get("args") or [], "env": env, "mounts": mounts, "image": c["image"]}
    return out


def deployed(sim, ns, cluster, timeout=120):
    """The cluster's releases as capi-sim's CAAPH installed them in its
    workload apiserver with the real Helm engine (tests/capi-sim/src/
    helm.rs), once every HelmReleaseProxy of the cluster is deployed and
    says so in its status (what the conductor reads): {release name: the
    simulator's record}. A release that failed fails here with Helm's
    message."""
    hrps = f"/apis/addons.cluster.x-k8s.io/v1alpha1/namespaces/{ns}/helmreleaseproxies"
    deadline = time.time() + timeout
    while True:
        items = [h for h in sim.get(hrps)["items"]
                 if h["metadata"]["labels"].get("cluster.x-k8s.io/cluster-name") == cluster]
        got = sim.get("/_sim/releases")
        assert got["errors"] == [], got["errors"]
        mine = {h["spec"]["releaseName"]: got["releases"].get(f"{ns}/{h['metadata']['name']}") for h in items}
        failed = {k: r["error"] for k, r in mine.items() if r and r["error"]}
        assert not failed, failed
        if items and all(r and r["status"] == "deployed" and r["objects"] > 0 for r in mine.values()) and \
                all(h.get("status", {}).get("status") == "deployed" for h in items):
            return mine
        assert time.time() < deadline, (mine, [h.get("status") for h in items])
        time.sleep(0.3)
