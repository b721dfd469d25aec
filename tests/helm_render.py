"""The real Helm engine (PyPI's helm-python-sdk: Helm v4's own Go code as a
shared library, no helm binary) over the pinned upstream charts, run from
the venv that holds it (scripts/setup-env.sh, HELM_VENV). Standard library
besides the engine; the engine is imported only where a render happens, so
tests/python/helm_charts.py imports the chart table from here too.

- **The charts**: scripts/charts.lock, every file as upstream Git serves it,
  fetched and verified by scripts/fetch-charts.sh into `HELM_CHARTS_DIR`. A
  chart's dependencies are placed under its `charts/` folder as `helm
  dependency build` places them; tigera-operator is given the version
  Calico's release packages it with (`helm package --version v3.29.1
  --app-version v3.29.1`, its Makefile's `chart` target: Git says v0.0), and
  its `crds/calico` link (raw GitHub serves the target's path) is followed.

Two ways to run it:
- batch (tests/python/helm_charts.py): stdin a JSON list of {"chart": path,
  "values": {...}, "name": release, "namespace": ns}; stdout a JSON list, per
  job {"manifests": {template path: text}} or {"error": message};
- `--serve` (capi-sim's CAAPH, tests/capi-sim/src/helm.rs): one JSON
  request a line, {"chart": name, "version": v, "values": {...}, "name":
  release, "namespace": ns}, one answer a line, {"manifests": {...},
  "crds": [text of each CRD file Helm installs first], "chart": the
  chart's metadata (Chart.yaml), kept in the release's record} or
  {"error": ...};
  ends at end of input;
- `--releases` (tests/python/helm_charts.py `helm_history`): what the real
  Helm reads back of a release capi-sim's CAAPH stored in a workload
  cluster (tests/capi-sim/src/helm_storage.rs).
"""
import json
import os
import re
import shutil
import sys
import tempfile

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

_assembled = {}


def chart_path(name, version, charts_dir=None):
    """A folder (or .tgz) Helm loads as chart `name` at `version`, its
    dependencies in place; assembled once per process."""
    key = (name, version)
    if key not in CHARTS:
        raise LookupError(f"no pinned chart {name} {version} (scripts/charts.lock)")
    if key in _assembled:
        return _assembled[key]
    base = charts_dir or os.environ.get("HELM_CHARTS_DIR")
    if not base:
        raise LookupError("HELM_CHARTS_DIR is not set (scripts/fetch-charts.sh)")
    repo, ref, path, deps = CHARTS[key]
    src = os.path.join(base, "github", repo, ref, path)
    if path.endswith(".tgz"):
        _assembled[key] = src
        return src
    out = os.path.join(tempfile.mkdtemp(prefix="mc-chart-"), name)
    shutil.copytree(src, out)
    for d_repo, d_ref, d_path in deps:
        dst = os.path.join(out, "charts", os.path.basename(d_path))
        shutil.copytree(os.path.join(base, "github", d_repo, d_ref, d_path), dst)
    if name == "tigera-operator":
        link = os.path.join(out, "crds", "calico")
        with open(link) as f:
            target = f.read().strip()
        os.remove(link)
        shutil.copytree(os.path.normpath(os.path.join(src, "crds", target)), link)
        chart_yaml = os.path.join(out, "Chart.yaml")
        with open(chart_yaml) as f:
            text = re.sub(r"(?m)^(app)?[vV]ersion:.*\n?", "", f.read())
        with open(chart_yaml, "w") as f:
            f.write(text.rstrip("\n") + f"\nversion: {version}\nappVersion: {version}\n")
    for root, dirs, files in os.walk(out):  # the cache's files are read-only
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755)
    _assembled[key] = out
    return out


def crd_files(name, version, charts_dir=None):
    """The CustomResourceDefinitions Helm installs before the chart's
    templates: the files of its `crds/` folder and of its subcharts'
    (a packaged chart's are not looked at: the two pinned have none)."""
    chart = chart_path(name, version, charts_dir)
    if chart.endswith(".tgz"):
        return []
    found = []
    for root, _, files in os.walk(chart):
        rel = os.path.relpath(root, chart).split(os.sep)
        if rel == ["crds"] or (len(rel) >= 3 and rel[0] == "charts" and rel[2] == "crds") or \
                (len(rel) >= 2 and rel[0] == "crds"):
            found += [os.path.join(root, f) for f in sorted(files) if f.endswith((".yaml", ".yml", ".json"))]
    return sorted(found)


def _render(loaded, chart, values, name, namespace):
    from helm_python.chart import Chart
    c = loaded.get(chart) or loaded.setdefault(chart, Chart.load(chart))
    return c.render(values=values, name=name, namespace=namespace)


def batch():
    jobs = json.load(sys.stdin)
    loaded = {}
    out = []
    for job in jobs:
        try:
            out.append({"manifests": _render(loaded, job["chart"], job["values"], job["name"], job["namespace"])})
        except Exception as e:  # noqa: BLE001 - each job's failure is its answer
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


def serve():
    loaded = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            job = json.loads(line)
            chart = chart_path(job["chart"], job["version"])
            crds = []
            for p in crd_files(job["chart"], job["version"]):
                with open(p) as f:
                    crds.append(f.read())
            answer = {"manifests": _render(loaded, chart, job["values"], job["name"], job["namespace"]),
                      "crds": crds, "chart": loaded[chart].metadata}
        except Exception as e:  # noqa: BLE001 - each request's failure is its answer
            answer = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def releases():
    """What Helm itself reads of a release in a cluster (its `secret`
    storage driver, as CAAPH configures it): stdin {"kubeconfig",
    "namespace", "release"}; stdout {"history": [summary, oldest first],
    "values": the latest revision's user values, "manifest": its manifest}
    or {"error": Helm's message}."""
    from helm_python.config import Config
    job = json.load(sys.stdin)
    try:
        with Config(kubeconfig_path=job["kubeconfig"], namespace=job["namespace"]) as c:
            out = {"history": c.history(job["release"]), "values": c.get_values(job["release"]),
                   "manifest": c.status(job["release"]).get("manifest", "")}
    except Exception as e:  # noqa: BLE001 - Helm's refusal is the answer
        out = {"error": f"{type(e).__name__}: {e}"}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    mode = sys.argv[1:]
    serve() if mode == ["--serve"] else releases() if mode == ["--releases"] else batch()
