"""Every HelmChartProxy the conductor writes, rendered as CAAPH installs it,
by the real Helm engine from the upstream chart at the proxy's version
(issue 47).

- **The engine**: PyPI's helm-python-sdk (Helm v4's own Go code as a shared
  library; no helm binary), `Chart.load(dir).render(values, name,
  namespace)`: what `helm template` gives, one manifest per template. It
  runs in a venv of its own (`HELM_VENV`, 244 MB: scripts/setup-env.sh),
  one process per batch of renders (tests/helm_render.py).
- **The charts**: scripts/charts.lock, every file as upstream Git serves it,
  fetched and verified by scripts/fetch-charts.sh (`HELM_CHARTS_DIR`). A
  chart's dependencies are placed under its `charts/` folder as `helm
  dependency build` places them; tigera-operator is given the version
  Calico's release packages it with (`helm package --version v3.29.1
  --app-version v3.29.1`, its Makefile's `chart` target: Git says v0.0), and
  its `crds/calico` link (raw GitHub serves the target's path) is followed.
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
import shutil
import subprocess
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (chartName, version) -> (repository, ref, path in it, dependencies as
# (repository, ref, path)); a path ending in .tgz is a packaged chart.
CPO = "kubernetes/cloud-provider-openstack"
PROM = "prometheus-community/helm-charts"
CHARTS = {
    ("openstack-cloud-controller-manager", "2.31.1"):
        (CPO, "openstack-cloud-controller-manager-2.31.1", "charts/openstack-cloud-controller-manager",
         [("bitnami/charts", "common/2.14.1", "bitnami/common")]),
    ("openstack-cinder-csi", "2.31.2"): (CPO, "openstack-cinder-csi-2.31.2", "charts/cinder-csi-plugin", []),
    ("openstack-manila-csi", "2.32.0"): (CPO, "openstack-manila-csi-2.32.0", "charts/manila-csi-plugin", []),
    ("metrics-server", "3.12.2"):
        ("kubernetes-sigs/metrics-server", "metrics-server-helm-chart-3.12.2", "charts/metrics-server", []),
    ("ingress-nginx", "4.11.3"): ("kubernetes/ingress-nginx", "helm-chart-4.11.3", "charts/ingress-nginx", []),
    ("kube-prometheus-stack", "66.3.1"):
        (PROM, "kube-prometheus-stack-66.3.1", "charts/kube-prometheus-stack",
         [(PROM, "kube-state-metrics-5.27.0", "charts/kube-state-metrics"),
          (PROM, "prometheus-node-exporter-4.42.0", "charts/prometheus-node-exporter"),
          (PROM, "prometheus-windows-exporter-0.7.1", "charts/prometheus-windows-exporter"),
          ("grafana/helm-charts", "grafana-8.6.4", "charts/grafana")]),
    ("tigera-operator", "v3.29.1"): ("projectcalico/calico", "v3.29.1", "charts/tigera-operator", []),
    ("cilium", "1.16.5"): ("cilium/charts", "009b5e9582173785abfdedb3fda7a26d85ab7aca", "cilium-1.16.5.tgz", []),
    ("csi-driver-nfs", "v4.9.0"):
        ("kubernetes-csi/csi-driver-nfs", "d3b27c00743a5317325107c1d2fb8fd4cf057a16",
         "charts/v4.9.0/csi-driver-nfs-v4.9.0.tgz", []),
}


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


_assembled = {}


def chart_path(name, version):
    """A folder (or .tgz) Helm loads as chart `name` at `version`, its
    dependencies in place; assembled once per process."""
    key = (name, version)
    assert key in CHARTS, f"no pinned chart {name} {version} (scripts/charts.lock)"
    if key in _assembled:
        return _assembled[key]
    repo, ref, path, deps = CHARTS[key]
    src = os.path.join(charts_dir(), "github", repo, ref, path)
    if path.endswith(".tgz"):
        _assembled[key] = src
        return src
    out = os.path.join(tempfile.mkdtemp(prefix="mc-chart-"), name)
    shutil.copytree(src, out)
    for d_repo, d_ref, d_path in deps:
        dst = os.path.join(out, "charts", os.path.basename(d_path))
        shutil.copytree(os.path.join(charts_dir(), "github", d_repo, d_ref, d_path), dst)
    if name == "tigera-operator":
        link = os.path.join(out, "crds", "calico")
        target = open(link).read().strip()
        os.remove(link)
        shutil.copytree(os.path.normpath(os.path.join(src, "crds", target)), link)
        chart_yaml = os.path.join(out, "Chart.yaml")
        meta = yaml.safe_load(open(chart_yaml))
        meta["version"] = meta["appVersion"] = version
        with open(chart_yaml, "w") as f:
            yaml.safe_dump(meta, f)
    for root, dirs, files in os.walk(out):  # the cache's files are read-only
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755)
    _assembled[key] = out
    return out


def crd_files(name, version):
    """The CustomResourceDefinitions Helm installs before the chart's
    templates: the files of its `crds/` folder and of its subcharts'
    (a packaged chart's are not looked at: the two pinned have none)."""
    chart = chart_path(name, version)
    if chart.endswith(".tgz"):
        return []
    found = []
    for root, _, files in os.walk(chart):
        rel = os.path.relpath(root, chart).split(os.sep)
        if rel == ["crds"] or (len(rel) >= 3 and rel[0] == "charts" and rel[2] == "crds") or \
                (len(rel) >= 2 and rel[0] == "crds"):
            found += [os.path.join(root, f) for f in sorted(files) if f.endswith((".yaml", ".yml", ".json"))]
    return sorted(found)


def values_of(hcp):
    """The values CAAPH gives Helm for this proxy (see the module)."""
    text = hcp["spec"].get("valuesTemplate") or ""
    assert "{{" not in text, f"{hcp['metadata']['name']}: a Go template action in the values: {text}"
    return yaml.safe_load(text) or {}


def render_many(jobs):
    """Render (name, version, values, release, namespace) jobs in one
    process of the engine's venv: [{template path: manifest text}]; a
    chart Helm refuses raises, naming it and Helm's reason."""
    venv = os.environ.get("HELM_VENV") or os.path.expanduser(
        "~/.cache/magnum-conductor-rs/venv-helm-python-sdk-0.2.2")
    python = os.path.join(venv, "bin", "python")
    assert os.path.exists(python), f"{venv}: run scripts/setup-env.sh (the Helm engine's venv)"
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
