"""Magnum's own API test suite, unmodified: magnum-tempest-plugin 2.12.0
through tempest 47.0.0 (pinned in scripts/setup-env.sh), as Magnum's CI runs
it on devstack.

What it runs against, nothing of ours standing in for Magnum or OpenStack's
identity:
- the real magnum-api 23.0.0 as a WSGI application, our driver package
  installed as an operator installs it, behind keystonemiddleware;
- the run's real Keystone (scripts/keystone.sh, shared_cloud.py); tempest
  makes its users and projects there itself (dynamic credentials, as in the
  gate), and finds everything in its magnum-api's catalog region;
- the run's real Glance 33 and Nova 34 APIs and Neutron 29 (shared_cloud.py:
  the images, flavors and external network the plugin's templates name;
  tempest's users make and delete their keypairs in that Nova themselves);
- this conductor, on a real kube-apiserver with the v1beta2 line's CRDs
  (scripts/k8s-up.sh), CAPI's controllers simulated by capi-sim, which with
  `--workload-apiservers` starts a **real kube-apiserver for each workload
  cluster** from its `<name>-ca` Secret (tests/capi-sim/src/workload.rs). So
  `test_create_list_sign_delete_clusters` checks end to end that the CA
  magnum-api hands out and a certificate our conductor signs open the
  apiserver at the cluster's `api_address` (list nodes and pods with the
  kubernetes client, then the plugin's copy_pod_logs.sh with
  /opt/stack/bin/kubectl, devstack's path, which setup-env.sh links).

How it is run: ClusterTest makes its credentials in setUpClass but registers
them for per-test cleanup (tests/api/base.py: `class_cleanup=False` puts
them on `ic_method_list`, cleared in every tearDown), so after its first test
its user is deleted and the next test of the class cannot authenticate;
each ClusterTest test therefore runs in a tempest run of its own, as a
fresh class. The positive test sleeps 600 s by itself (the plugin's
`time.sleep(300)` and copy_pod_logs.sh's `sleep 300`): scripts/test-all.sh
runs this module beside the rest of the suite, not after it (the tests
that stop a RabbitMQ stop one of their own: conftest.private_broker).

The one test allowed to fail is one magnum-api itself fails:
`test_create_cluster_with_zero_nodes` posts node_count 0 without a
microversion header, and magnum-api refuses it before any conductor is
asked (magnum/api/controllers/v1/cluster.py: ZeroNodeCountNotSupported
below API version 1.10); the test checks it fails for that reason only.
"""
import csv
import io
import json
import os
import shutil
import subprocess

import pytest

import shared_cloud
from api_env import ApiEnv, CACHE
from conftest import free_port

TEMPEST_VENV = os.environ.get("TEMPEST_VENV", f"{CACHE}/venv-tempest-47.0.0")
PLUGIN = "magnum_tempest_plugin.tests.api.v1"
CLUSTER_TEST = f"{PLUGIN}.test_cluster.ClusterTest"
# magnum-api's own refusal (see the module docstring).
FAILED_BY_MAGNUM_API = {
    f"{CLUSTER_TEST}.test_create_cluster_with_zero_nodes":
        # magnum.common.exception.ZeroNodeCountNotSupported's message.
        "Resizing a nodegroup to zero is not supported in the provided microversion",
}
NEGATIVE = ["test_create_cluster_for_nonexisting_cluster_template",
            "test_create_cluster_with_nonexisting_flavor",
            "test_create_cluster_with_zero_masters",
            "test_update_cluster_for_nonexisting_cluster",
            "test_delete_cluster_for_nonexisting_cluster",
            "test_create_cluster_with_zero_nodes"]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    tempest = os.path.join(TEMPEST_VENV, "bin", "tempest")
    assert os.path.exists(tempest), f"{TEMPEST_VENV}: run scripts/setup-env.sh"
    assert os.access("/opt/stack/bin/kubectl", os.X_OK), "/opt/stack/bin/kubectl: run scripts/setup-env.sh"
    tmp = tmp_path_factory.mktemp("tempest")
    # magnum-api's default network driver for kubernetes is flannel, which
    # no Cluster API driver serves: operators of CAPI drivers set these (the
    # plugin's templates leave network_driver unset).
    network = ("[cluster_template]\nkubernetes_default_network_driver = calico\n"
               "kubernetes_allowed_network_drivers = calico,cilium\n")
    # Another magnum-api's region, registered first, at an address nothing
    # answers (as every other test's is while tempest runs): tempest takes
    # the first service of a type in the catalog and only then its
    # region's endpoint (tempest/lib/auth.py, KeystoneV3AuthProvider
    # `base_url`), so it must find its own through the one service.
    shared = shared_cloud.get()
    decoy = shared.region("decoy", **{"container-infra": f"http://127.0.0.1:{free_port()}/v1"})
    # Tempest looks every service up in its one region ([identity]
    # region): identity (its admin makes the dynamic credentials), compute
    # (their keypairs), image and network beside magnum-api.
    try:
        env = ApiEnv(tmp, release="23", mode="wsgi", line="v1beta2", workload_apiservers=True,
                     api_conf_extra=network, region_services=("identity", "compute", "image", "network"))
    except BaseException:
        shared.drop_region(decoy)
        raise
    try:
        ws = tmp / "workspace"
        subprocess.run([tempest, "init", "--workspace-path", str(tmp / "workspaces.yaml"), str(ws)],
                       check=True, capture_output=True, timeout=120)
        admin_pw = env.ks["admin_pw"]
        (ws / "etc" / "tempest.conf").write_text(f"""[DEFAULT]
log_file = {ws}/tempest.log
debug = true
[auth]
use_dynamic_credentials = true
create_isolated_networks = false
admin_username = admin
admin_password = {admin_pw}
admin_project_name = admin
admin_domain_name = Default
[identity]
uri_v3 = {env.ks['url']}
auth_version = v3
region = {env.region}
v3_endpoint_type = public
[service_available]
magnum = true
nova = true
glance = true
neutron = false
cinder = false
swift = false
[compute]
region = {env.region}
endpoint_type = publicURL
[magnum]
image_id = ubuntu-2204-kube-v1.30.4
nic_id = public
keypair_name = magnum-test
flavor_id = m1.small
master_flavor_id = m1.small
labels = {{'kube_tag': 'v1.30.4'}}
cluster_creation_timeout = 5
cluster_delete_timeout = 5
copy_logs = false
copy_logs_success = false
[enforce_scope]
magnum = false
""")
        yield dict(env=env, ws=ws, tempest=tempest)
    finally:
        env.close()
        shared.drop_region(decoy)


def run(cloud, regex, name):
    """One `tempest run --serial --regex REGEX`: {test id: (status, details)}."""
    ws = cloud["ws"]
    log = ws / f"run-{name}.log"
    with open(log, "w") as out:
        p = subprocess.run([cloud["tempest"], "run", "--serial", "--regex", regex], cwd=ws, stdout=out,
                           stderr=subprocess.STDOUT, timeout=3600,
                           env=dict(os.environ, PYTHONWARNINGS="ignore"))
    last = subprocess.run([os.path.join(TEMPEST_VENV, "bin", "stestr"), "last", "--subunit"], cwd=ws,
                          capture_output=True, timeout=120)
    table = subprocess.run([os.path.join(TEMPEST_VENV, "bin", "subunit2csv")], input=last.stdout,
                           capture_output=True, timeout=120)
    results = {}
    for row in csv.DictReader(io.StringIO(table.stdout.decode())):
        test = row["test"].split("[", 1)[0]
        results[test] = (row["status"], log.read_text())
    assert results, f"tempest ran nothing (rc {p.returncode}); see {log}"
    return results


def missing(cloud, got):
    """What to say when a run's results lack the test it was asked for: a
    class fixture's failure (setUpClass, tearDownClass) is reported under its
    own id, with the test never started."""
    env = cloud["env"]
    rows = {t: s for t, (s, _) in got.items()}
    log = next(iter(got.values()))[1][-4000:] if got else ""
    # None: running; a negative code: the signal that ended it (its output
    # names the sender of any signal but SIGKILL: magnum_api_wsgi.py).
    codes = [p.poll() for p in env.procs]

    def tail(name, n):
        f = env.tmp / name
        return f.read_text(errors="replace")[-n:] if f.exists() else f"(no {name})"
    return (f"results {rows}; magnum-api exit codes {codes}\n--- tempest output\n{log}\n"
            f"--- magnum-api.out\n{tail('magnum-api.out', 1500)}\n--- magnum-api.log\n{tail('magnum-api.log', 3000)}")


def test_cluster_template_and_service_tests_pass(cloud):
    """ClusterTemplateTest, ClusterTemplateAdminTest and MagnumServiceTest,
    in one run (they make their credentials per test or per class)."""
    got = run(cloud, rf"^{PLUGIN}\.(test_cluster_template|test_cluster_template_admin|test_magnum_service)\.",
              "templates")
    bad = {t: s for t, (s, _) in got.items() if s != "success"}
    assert not bad, (bad, next(iter(got.values()))[1][-3000:])
    assert len(got) >= 20, sorted(got)


@pytest.mark.parametrize("test", NEGATIVE)
def test_cluster_negative_tests(cloud, test):
    got = run(cloud, rf"^{CLUSTER_TEST}\.{test}\b", test)
    full = f"{CLUSTER_TEST}.{test}"
    assert list(got) == [full], got
    status, output = got[full]
    if full in FAILED_BY_MAGNUM_API:
        assert status == "failure", (status, output[-3000:])
        # Refused by magnum-api (400 on POST /v1/clusters), nothing else.
        assert "tempest.lib.exceptions.BadRequest" in output, output[-3000:]
        assert FAILED_BY_MAGNUM_API[full] in output, output[-3000:]
    else:
        assert status == "success", output[-3000:]


def test_create_list_sign_delete_clusters(cloud):
    """The plugin's main positive test, against a real workload apiserver."""
    env = cloud["env"]
    full = f"{CLUSTER_TEST}.test_create_list_sign_delete_clusters"
    # Where the plugin and its copy_pod_logs.sh write (fixed paths).
    shutil.rmtree("/tmp/magnum-nodes", ignore_errors=True)
    got = run(cloud, rf"^{full}\b", "positive")
    assert full in got, missing(cloud, got)
    status, output = got[full]
    assert status == "success", output[-3000:]
    # The Kubernetes API step met the real apiserver capi-sim started from
    # the cluster's CA Secret (not the simulated 203.0.113.10), which is
    # gone with the cluster.
    workloads = env.sim.get("/_sim/workload-apiservers")
    assert workloads == {"endpoints": {}, "nodes": {}, "errors": [], "kubeconfigs": {}}, workloads
    with open("/tmp/magnum-nodes/kube.conf") as f:
        assert "'server': 'https://127.0.0.1:" in f.read()
    with open("/tmp/magnum-nodes/api-list-nodes") as f:  # the kubernetes client's V1NodeList
        nodes = f.read()
    # The cluster's two machines (master_count 1, node_count 1), registered
    # as their kubelets would.
    assert "kind='NodeList'" in nodes and nodes.count("'provider_id': 'openstack:///") == 2, nodes
    with open("/tmp/magnum-nodes/kubernetes/kubectl_get_all") as f:
        assert "service/kubernetes" in f.read()
    # The cluster is gone from the management cluster too.
    assert env.sim.items("cluster.x-k8s.io/v1beta2", "clusters") == [], "CAPI Cluster left behind"
    print(json.dumps({"tempest": "ok"}))
