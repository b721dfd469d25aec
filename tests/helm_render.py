"""Render Helm charts with the real Helm engine (PyPI's helm-python-sdk:
Helm v4's own Go code as a shared library), run from the venv that holds it
(scripts/setup-env.sh, HELM_VENV) by tests/python/helm_charts.py.

stdin: a JSON list of {"chart": path, "values": {...}, "name": release,
"namespace": ns}; stdout: a JSON list, per job {"manifests": {template
path: text}} or {"error": message}. Standard library besides the engine."""
import json
import sys

from helm_python.chart import Chart


def main():
    jobs = json.load(sys.stdin)
    loaded = {}
    out = []
    for job in jobs:
        try:
            chart = loaded.get(job["chart"]) or loaded.setdefault(job["chart"], Chart.load(job["chart"]))
            out.append({"manifests": chart.render(values=job["values"], name=job["name"],
                                                  namespace=job["namespace"])})
        except Exception as e:  # noqa: BLE001 - each job's failure is its answer
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
