"""deploy/prometheus: the alerting rules pass promtool (syntax and unit tests),
every metric the rules and the dashboard use is one the conductor defines,
and a real Prometheus scraping a running conductor loads the rules and
returns our series."""
import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, free_port
from test_lifecycle import Env

PROM = os.environ.get("PROMETHEUS_DIR", os.path.expanduser("~/.cache/magnum-conductor-rs/prometheus"))
DEPLOY = os.path.join(ROOT, "deploy", "prometheus")
RULES = os.path.join(DEPLOY, "magnum-conductor.rules.yml")


def tool(name):
    path = os.path.join(PROM, "usr", "bin", name)
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: scripts/setup-env.sh fetches it")
    return path


def test_promtool_checks_and_unit_tests_the_rules():
    p = subprocess.run([tool("promtool"), "check", "rules", RULES], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 11 rules found" in p.stdout
    p = subprocess.run([tool("promtool"), "test", "rules", "magnum-conductor.rules.test.yml"],
                       capture_output=True, text=True, cwd=DEPLOY)
    assert p.returncode == 0, p.stdout + p.stderr


def test_rules_and_dashboard_use_only_metrics_we_define():
    source = open(os.path.join(ROOT, "conductor", "src", "metrics.rs")).read()
    defined = set(re.findall(r'"([a-z_]+)"', source))
    used = set(re.findall(r"magnum_conductor_([a-z_]+)", open(RULES).read()))
    dash = json.load(open(os.path.join(DEPLOY, "magnum-conductor.dashboard.json")))
    for panel in dash["panels"]:
        for t in panel["targets"]:
            used |= set(re.findall(r"magnum_conductor_([a-z_]+)", t["expr"]))
    base = {re.sub(r"_(bucket|sum|count)$", "", u) for u in used}
    assert base - defined == set(), "metrics used by deploy/prometheus but not defined"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("prometheus"), "v1beta1")
    yield e
    e.close()


def query(base, q):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def test_a_real_prometheus_scrapes_the_conductor_and_loads_the_rules(env, tmp_path):
    target = env.conductor.metrics_url.removeprefix("http://")
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{RULES}]
scrape_configs:
  - job_name: magnum-conductor
    static_configs: [{{targets: ["{target}"]}}]
""")
    port = free_port()
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen([tool("prometheus"), f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, open(tmp_path / "prometheus.log").read()[-2000:]
            try:
                got = query(base, 'magnum_conductor_build_info{job="magnum-conductor"}')
                if got:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "no magnum_conductor_build_info scraped"
            time.sleep(0.5)
        assert got[0]["metric"]["version"]
        assert query(base, 'up{job="magnum-conductor"}')[0]["value"][1] == "1"
        # The status leader's census reached Prometheus (one conductor: it leads).
        deadline = time.time() + 60
        while not query(base, "magnum_conductor_leader == 1"):
            assert time.time() < deadline, "magnum_conductor_leader never 1"
            time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=5) as r:
            groups = json.loads(r.read())["data"]["groups"]
        rules = [r for g in groups if g["name"] == "magnum-conductor" for r in g["rules"]]
        assert len(rules) == 11
        deadline = time.time() + 30
        while True:
            with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=5) as r:
                groups = json.loads(r.read())["data"]["groups"]
            rules = [r for g in groups if g["name"] == "magnum-conductor" for r in g["rules"]]
            if all(r.get("health") == "ok" for r in rules):
                break
            assert time.time() < deadline, [(r["name"], r.get("health"), r.get("lastError")) for r in rules]
            time.sleep(0.5)
        # Nothing wrong with this conductor: no alert fires.
        firing = [r["name"] for r in rules if r.get("state") == "firing"]
        assert firing == [], firing
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
