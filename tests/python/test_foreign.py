"""Clusters of other drivers beside ours: this conductor leaves them alone.

A cloud that installs this conductor has clusters made by the Python
drivers. Magnum names a cluster's driver in its template
(`cluster_template.driver`, Magnum 23 fills it at template create). Here,
on a real apiserver (v1beta1 CRDs) with capi-sim's controllers, beside one
cluster of ours:

- a magnum-capi-helm 1.4 cluster (template driver `k8s_capi_helm_v1`): its
  rows as Magnum's own conductor handler writes them, its CAPI Cluster named
  by `stack_id` in `magnum-<project>` (the namespace and naming we use too),
  labelled as the openstack-cluster chart labels its objects, and its
  credential Secret labelled as the driver labels it
  (`magnum_capi_helm/driver.py::_k8s_resource_labels`, 1.4.0: it carries
  our `magnum.openstack.org/cluster-uuid` label key too);
- a vexxhost magnum-cluster-api 0.38 cluster (`k8s_cluster_api_ubuntu`): its
  CAPI Cluster `kube-xxxxx` in `magnum-system` labelled `cluster-uuid`, and
  its `<stack_id>-cloud-config` Secret (as its driver names them;
  docs/capi-drivers-survey.md §1.1). The ClusterClass topology is left out:
  these objects are only here to be left alone.

Every cluster RPC method sent as a call on each foreign cluster answers
`ClusterDriverNotSupported` naming the driver (what a Python conductor
without that driver answers) and writes nothing: rows and objects compared
before and after. Casts do nothing either (counted in
`magnum_conductor_foreign_cluster_skips_total`). Our cluster cannot be
upgraded to another driver's template. A conductor restarted with foreign
clusters left UPDATE_IN_PROGRESS and DELETE_IN_PROGRESS resumes neither, and
its status passes do not touch them.
"""
import json
import time

import pytest

from test_lifecycle import NAMESPACE, PROJECT, TEMPLATE, Env

HELM = "k8s_capi_helm_v1"
VEXX = "k8s_cluster_api_ubuntu"
CAPI = "cluster.x-k8s.io/v1beta1"
SKIPS = "magnum_conductor_foreign_cluster_skips_total"
CALLS = ["cluster_update", "cluster_resize", "cluster_upgrade", "nodegroup_create", "nodegroup_update",
         "nodegroup_delete", "credential_rotate", "cluster_delete", "cluster_create"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("foreign"), "v1beta1")
    e.foreign = {}
    yield e
    e.close()


def ensure_namespace(env, ns):
    if env.sim.kube.get(f"/api/v1/namespaces/{ns}") is None:
        env.sim.kube.create_namespace(ns, {})


def create(env, api, plural, ns, body):
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    return env.sim.kube.request("POST", f"{base}/namespaces/{ns}/{plural}", body)


def foreign_cluster(env, driver, status="CREATE_COMPLETE"):
    """Rows as Magnum's conductor handler writes them for `driver`'s
    template, then its CAPI objects as that driver leaves them."""
    template = env.client("template", json.dumps(dict(TEMPLATE, name=driver, driver=driver)))["uuid"]
    uuid = env.client("python-create", template, json.dumps({"master_count": 1, "node_count": 2}))["uuid"]
    if driver == HELM:
        stack, ns = env.client("get", uuid)["cluster"]["stack_id"], NAMESPACE
        labels = {"magnum.openstack.org/project-id": PROJECT, "magnum.openstack.org/user-id": "u",
                  "magnum.openstack.org/cluster-uuid": uuid, "cluster.x-k8s.io/cluster-name": stack}
        cluster_labels = {"capi.stackhpc.com/cluster": stack, "app.kubernetes.io/managed-by": "Helm"}
        secret = f"{stack}-cloud-credentials"
    else:
        stack, ns = "kube-" + uuid[:5].replace("-", "x"), "magnum-system"
        labels = cluster_labels = {"cluster-uuid": uuid}
        secret = f"{stack}-cloud-config"
    for ng in ("default-master", "default-worker"):
        env.client("set", uuid, json.dumps({"stack_id": stack, "status": status}), ng,
                   json.dumps({"stack_id": stack, "status": status}))
    ensure_namespace(env, ns)
    create(env, CAPI, "clusters", ns, {"apiVersion": CAPI, "kind": "Cluster",
                                       "metadata": {"name": stack, "labels": cluster_labels},
                                       "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}}}})
    create(env, "v1", "secrets", ns, {"apiVersion": "v1", "kind": "Secret",
                                      "metadata": {"name": secret, "labels": labels},
                                      "stringData": {"clouds.yaml": "clouds: {}"}})
    env.foreign[driver] = dict(uuid=uuid, template=template, stack=stack, ns=ns, secret=secret)
    return uuid


def snapshot(env):
    """Every foreign cluster's rows, and its objects as far as anyone but
    the simulated CAPI controllers would change them."""
    out = {}
    for driver, f in env.foreign.items():
        got = env.client("get", f["uuid"])
        got.pop("x509keypairs")  # every cluster's: ours come and go
        objs = {}
        for api, plural, name in ((CAPI, "clusters", f["stack"]), ("v1", "secrets", f["secret"])):
            base = "/api/v1" if api == "v1" else f"/apis/{api}"
            o = env.sim.kube.get(f"{base}/namespaces/{f['ns']}/{plural}/{name}")
            assert o is not None, f"{driver}'s {plural}/{name} is gone"
            m = o["metadata"]
            managers = sorted({e["manager"] for e in m.get("managedFields", [])})
            assert "magnum-conductor" not in managers, (driver, plural, managers)
            objs[plural] = dict(uid=m["uid"], labels=m.get("labels"), annotations=m.get("annotations"),
                                deleting=m.get("deletionTimestamp"), spec=o.get("spec"), data=o.get("data"))
        out[driver] = dict(rows=got, objects=objs)
    return out


def test_every_method_on_a_foreign_cluster_is_refused_and_changes_nothing(env):
    for driver in (HELM, VEXX):
        foreign_cluster(env, driver)
    before = snapshot(env)
    keypairs = env.client("get", "no-such")["x509keypairs"]
    for driver in (HELM, VEXX):
        uuid = env.foreign[driver]["uuid"]
        for method in CALLS:
            got = env.client("call", method, uuid)
            assert got.get("error") == "ClusterDriverNotSupported", (driver, method, got)
            assert got["code"] == 400, got
            assert got["message"].startswith(f"Cluster driver ({driver}) not supported."), got
            # (a create names the new cluster)
            assert method == "cluster_create" or uuid in got["message"], got
        # Certificates are Magnum's, not the driver's (Magnum's own
        # conductor serves them for any cluster): served, nothing written.
        assert env.client("call", "get_ca_certificate", uuid) == {"ok": True}
        for method in CALLS:
            assert env.conductor.metric(SKIPS, what=method, driver=driver) >= 1, (driver, method)
    # No cluster (and no keypair) was made for the refused creates.
    assert env.client("get", "no-such")["x509keypairs"] == keypairs
    # Casts: nothing done, counted.
    for driver in (HELM, VEXX):
        uuid = env.foreign[driver]["uuid"]
        seen = env.conductor.metric(SKIPS, what="cluster_delete", driver=driver)
        env.client("delete", uuid)
        env.client("resize", uuid, "5", "[]")
        deadline = time.time() + 30
        while env.conductor.metric(SKIPS, what="cluster_delete", driver=driver) < seen + 1:
            assert time.time() < deadline, "the cast was not taken"
            time.sleep(0.2)
    time.sleep(2)  # what a status pass would have done by now
    assert snapshot(env) == before


def test_ours_beside_them_works_and_cannot_move_to_their_template(env):
    created = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    got, seen = env.wait(created, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    before = snapshot(env)
    got = env.client("call", "cluster_upgrade", created, json.dumps({"template": env.foreign[HELM]["template"]}))
    assert got.get("error") == "ClusterDriverNotSupported", got
    assert "cannot move" in got["message"], got
    assert env.client("get", created)["cluster"]["status"] == "CREATE_COMPLETE"
    env.client("delete", created)
    env.wait(created, lambda g: g["cluster"] is None)
    # Our delete swept what carries our label: not theirs (the capi-helm
    # Secret carries the same label key, with its own cluster's uuid).
    assert snapshot(env) == before


def test_a_restart_resumes_none_of_theirs(env):
    helm, vexx = env.foreign[HELM]["uuid"], env.foreign[VEXX]["uuid"]
    env.client("set", helm, json.dumps({"status": "UPDATE_IN_PROGRESS"}))
    env.client("set", vexx, json.dumps({"status": "DELETE_IN_PROGRESS"}))
    before = snapshot(env)
    env.restart()
    deadline = time.time() + 60
    while (env.conductor.metric_or_none(SKIPS, what="resume") or 0) < 2:
        assert time.time() < deadline, "the resume did not look at the foreign clusters"
        time.sleep(0.2)
    # Events on their objects reach the status worker, which leaves them.
    for driver in (HELM, VEXX):
        f = env.foreign[driver]
        env.sim.kube.patch(CAPI, "clusters", f["stack"], {"metadata": {"annotations": {"poke": "1"}}}, f["ns"])
    time.sleep(3)
    after = snapshot(env)
    for driver in (HELM, VEXX):
        after[driver]["objects"]["clusters"]["annotations"].pop("poke")
        if not after[driver]["objects"]["clusters"]["annotations"]:
            after[driver]["objects"]["clusters"]["annotations"] = None
    assert after == before
