"""`magnum-conductor check`: the preflight an operator (or the deploy role's
gate) runs before cutting over. One line per check; a failure names the
problem, says how to fix it, exits non-zero, and prints no secret."""
import json
import os
import re
import subprocess
import time

import pytest

from conftest import CONDUCTOR_BIN, DB_SERVER, mysql_admin
from k8s import artifacts
from test_lifecycle import TEMPLATE, Env


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("check"), "v1beta1")
    # The checks need no running conductor (and none may eat a sim fault).
    e.conductor.stop()
    yield e
    e.close()


def check(conf):
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", conf, "check"], capture_output=True, text=True, timeout=120)
    lines = {m.group(2): (m.group(1), m.group(3))
             for m in re.finditer(r"^(OK|FAIL|SKIP|WARN)\s+(\S+)\s+(.*)$", p.stdout, re.M)}
    return p.returncode, lines, p.stdout + p.stderr


def variant(env, name, old, new):
    text = open(env.conf).read()
    assert old in text
    path = str(env.tmp / f"{name}.conf")
    open(path, "w").write(text.replace(old, new))
    return path


def test_a_good_setup_passes(env):
    rc, lines, out = check(env.conf)
    assert rc == 0, out
    assert {k: v[0] for k, v in lines.items()} == {
        "config": "OK", "startup": "OK", "database": "OK", "clusters": "OK", "broker": "OK", "management": "OK",
        "rights": "OK", "api-proxy": "OK", "leases": "OK", "keystone": "SKIP", "charts": "OK"}, out
    assert "schema revision b3e1cf4a2d5e accepted" in lines["database"][1]
    assert lines["rights"][1].startswith("all ") and lines["rights"][1].endswith(" permissions granted")
    assert "v1beta1 line: all 10 resources served" in lines["management"][1]


def test_clusters_no_proxy_host_reaches_are_named(env):
    """A cluster without an API floating IP (the conductor's proxy Service)
    that no live magnum-capi-proxy host reaches: a WARN naming it, exit 0
    (not a reason to stop a deploy)."""
    ns = "magnum-check-proxy"
    kube = env.sim.kube
    kube.create_namespace(ns, {})
    try:
        kube.request("POST", f"/api/v1/namespaces/{ns}/services", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "k1-abc-apiserver", "labels": {"magnum.openstack.org/api-proxy": "k1-abc"}},
            "spec": {"ports": [{"name": "https", "port": 6443}]}})
        rc, lines, out = check(env.conf)
        assert rc == 0, out
        status, detail = lines["api-proxy"]
        assert status == "WARN", out
        assert f"no proxy path to 1 of 1 cluster(s) without an API floating IP: {ns}/k1-abc" in detail, out
        assert "no proxy host alive" in detail, out
        assert "fix: run magnum-capi-proxy" in out, out
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_database_at_an_unknown_revision(env):
    db = re.search(r"/(mc_\w+)\?", open(env.conf).read()).group(1)
    conn = mysql_admin(database=db)
    try:
        conn.cursor().execute("UPDATE alembic_version SET version_num = 'f00dcafe1234'")
        rc, lines, out = check(env.conf)
    finally:
        conn.cursor().execute("UPDATE alembic_version SET version_num = 'b3e1cf4a2d5e'")
        conn.close()
    assert rc == 1
    assert lines["database"][0] == "FAIL" and "f00dcafe1234" in lines["database"][1], out
    assert "fix: " in out
    assert [k for k, v in lines.items() if v[0] == "FAIL"] == ["database"], out


def test_wrong_broker_password(env):
    conf = variant(env, "badpw", "rabbit://guest:guest@", "rabbit://guest:Wr0ng-s3cret@")
    rc, lines, out = check(conf)
    assert rc == 1
    assert lines["broker"][0] == "FAIL", out
    assert "Wr0ng-s3cret" not in out, "no secret printed"
    assert [k for k, v in lines.items() if v[0] == "FAIL"] == ["broker"], out


def test_missing_crds(env):
    """The Helm addon provider is not installed (its CRDs deleted from the
    real apiserver): its group is not served; put back afterwards."""
    crds = ("helmchartproxies.addons.cluster.x-k8s.io", "helmreleaseproxies.addons.cluster.x-k8s.io")
    env.sim.cp.kubectl("delete", "crd", *crds)
    try:
        deadline = time.time() + 30
        while "addons.cluster.x-k8s.io/v1alpha1" in env.sim.cp.kubectl("api-versions"):
            assert time.time() < deadline, "the CRDs did not go"
            time.sleep(0.5)
        rc, lines, out = check(env.conf)
        assert rc == 1
        assert lines["management"][0] == "FAIL", out
        assert "helmchartproxies.addons.cluster.x-k8s.io/v1alpha1" in lines["management"][1], out
        assert "install or upgrade the Cluster API Helm addon provider" in out
    finally:
        env.sim.cp.kubectl("apply", "--server-side", "-f",
                           os.path.join(artifacts()[1], "cluster-api-addon-provider-helm-v0.4.2"))
        env.sim.cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", *crds)


def test_unreachable_apiserver(env):
    kc = open(env.sim.kubeconfig).read()
    bad = env.tmp / "unreachable.kubeconfig"
    bad.write_text(re.sub(r"server: \S+", "server: https://127.0.0.1:9", kc))
    conf = variant(env, "noapi", f"kubeconfig = {env.sim.kubeconfig}", f"kubeconfig = {bad}")
    rc, lines, out = check(conf)
    assert rc == 1
    assert lines["management"][0] == "FAIL", out
    assert [k for k, v in lines.items() if v[0] == "FAIL"] == ["management"], out


def test_clusters_by_owning_driver(env):
    """Clusters counted per driver, as Magnum resolves it from the template;
    a driverless template two installed drivers provide is nobody's: FAIL,
    naming it. (Runs last: it leaves clusters behind.)"""
    helm = env.client("template", json.dumps(dict(TEMPLATE, name="helm", driver="k8s_capi_helm_v1")))["uuid"]
    for t in (env.template, env.template, helm):
        env.client("python-create", t, json.dumps({"master_count": 1, "node_count": 1}))
    rc, lines, out = check(env.conf)
    assert rc == 0, out
    assert lines["clusters"] == ("OK", "3 clusters: 2 k8s_capi_rust (ours), 1 k8s_capi_helm_v1 (another "
                                       "driver's: refused, left untouched; `magnum-conductor adopt --dry-run` "
                                       "tells which can be adopted)"), out
    conf = variant(env, "others", "[capi]\n", "[capi]\nother_drivers = k8s_capi_helm_v1\n")
    rc, lines, out = check(conf)
    assert rc == 1, out
    assert [k for k, v in lines.items() if v[0] == "FAIL"] == ["clusters"], out
    assert f"2 of template {env.template}: template {env.template} has no driver and (vm, ubuntu, " \
           "kubernetes) is provided by k8s_capi_rust, k8s_capi_helm_v1" in lines["clusters"][1], out
    assert "[capi] other_drivers" in out


def startup_and_check(conf):
    """The conductor's own startup on `conf` (it must stop, not hang), then
    `check` on the same file."""
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", conf], capture_output=True, text=True, timeout=90)
    return p.returncode, p.stderr, check(conf)


def test_check_fails_wherever_startup_stops(env):
    """Every configuration startup refuses (issue 23: `check` = startup):
    the conductor exits non-zero, `check` prints FAIL on the matching line
    with a fix and exits 1. (Leases refused by RBAC are not produced here:
    the test kubeconfig is the apiserver's admin.)"""
    import socket

    held = socket.socket()
    # (as the conductor binds: the port may hold TIME_WAIT connections of the stopped one)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    port = int(re.search(r"listen = 127\.0\.0\.1:(\d+)", open(env.conf).read()).group(1))
    cases = [
        ("config", variant(env, "bad-int", "lease_duration = 5", "lease_duration = soon")),
        ("logging", variant(env, "log", "host = test-host", "host = test-host\nlog_dir = /nonexistent/magnum\nlog_file = c.log")),
        ("certificates", variant(env, "barbican", "cert_manager_type = x509keypair", "cert_manager_type = barbican")),
        ("metrics", env.conf),
        ("credentials", variant(env, "creds", "static_application_credential_secret = not-a-real-secret",
                                "static_application_credential_secret =\n[keystone_auth]\ncafile = /nonexistent/ca.pem")),
        ("database", variant(env, "db", f"[database]\nconnection = {DB_SERVER}/",
                             "[database]\nmax_retries = 0\nconnection = mysql+pymysql://root@127.0.0.1:1/")),
        ("management", variant(env, "mgmt", "kubeconfig = ", "kubeconfig = /nonexistent/kubeconfig\n#")),
    ]
    try:
        for name, conf in cases:
            if name == "metrics":
                held.bind(("127.0.0.1", port))
                held.listen(1)
            rc, err, (crc, lines, out) = startup_and_check(conf)
            assert rc != 0, (name, err)
            assert crc == 1, (name, out)
            assert lines.get(name, ("?",))[0] == "FAIL", (name, out)
            assert re.search(rf"^FAIL\s+{name}\s.*\n\s+fix: \S", out, re.M), (name, out)
            if name == "metrics":
                held.close()
    finally:
        held.close()
    # And the good configuration passes both ways (check; startup is every other test).
    rc, lines, out = check(env.conf)
    assert rc == 0 and lines["startup"][0] == "OK", out
