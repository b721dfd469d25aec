"""The conductor's Kubernetes identity as shipped (issue 53):
deploy/kubernetes/magnum-conductor-rbac.yaml (a ServiceAccount, its
ClusterRole and binding) applied to a real kube-apiserver, the conductor
given a token of that ServiceAccount and nothing else, and a cluster's
whole lifecycle run through it: create, resize, node groups, upgrade,
delete.

The apiserver audits every request of that identity
(`--audit-policy-file`, Metadata level). The test asserts:
- nothing it asked was refused (no 403): the role grants enough;
- every rule the role grants (each verb on each resource) was used by some
  request of that lifecycle: the role grants nothing more, and removing any
  one verb would have the apiserver refuse a request the lifecycle makes
  (the audit names which).

`MC_RBAC_DISCOVER=1` runs the same lifecycle with the ServiceAccount bound
to cluster-admin and prints the rules it used, in the role's YAML shape: what
a maintainer pastes when the conductor starts using a new resource."""
import json
import subprocess

import pytest

import k8s
import rbac
from conftest import CONDUCTOR_BIN
from test_day2 import T131, settled
from test_lifecycle import NAMESPACE, TEMPLATE, Env

CONDUCTOR = rbac.Identity("magnum-conductor")
SA = (CONDUCTOR.namespace, CONDUCTOR.name)
DISCOVER = rbac.DISCOVER
HOLD = "test.magnum.openstack.org/hold"


def conductor_kubeconfig(cp, tmp):
    """The shipped identity applied (or, discovering, the ServiceAccount
    bound to cluster-admin), and a kubeconfig holding only a token of it."""
    docs = rbac.discovering(CONDUCTOR) if DISCOVER else CONDUCTOR.docs()
    CONDUCTOR.apply(cp, tmp, docs)
    return CONDUCTOR.kubeconfig(cp, tmp)


@pytest.fixture(scope="module", params=["v1beta2"])
def env(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"rbac-{request.param}")
    cp = k8s.control_plane(request.param)
    plain = rbac.audit(cp, tmp, [CONDUCTOR.user])
    # A create held 3 s at its crash point outlives a third of the 5 s
    # Lease: the Lease is renewed (update) as a long operation's is.
    kubeconfig = conductor_kubeconfig(cp, tmp)
    e = Env(tmp, request.param, cp=cp, kubeconfig=kubeconfig, extra="update_timeout = 5\n",
            failpoint="create.after_rows:sleep=3000")
    e.cp, e.conductor_kubeconfig = cp, kubeconfig
    yield e
    try:
        e.close()
    finally:
        rbac.unaudit(cp, plain)
        cp.stop()


def test_check_names_each_permission_an_identity_lacks(env):
    """`check` asks the apiserver (SelfSubjectAccessReview) for every
    permission the conductor needs: an identity lacking some is told which,
    and where they are granted, before a cluster fails on them."""
    if DISCOVER:
        pytest.skip("discovering")
    docs = CONDUCTOR.docs()
    less = []
    for d in docs:
        d = json.loads(json.dumps(d))
        if d["kind"] in ("Namespace", "ServiceAccount"):
            continue
        if d.get("subjects"):
            d["subjects"] = [dict(d["subjects"][0], name="magnum-conductor-less")]
        d["metadata"]["name"] += "-less"
        if d.get("roleRef"):
            d["roleRef"]["name"] += "-less"
        for rule in d.get("rules", []):
            if rule["apiGroups"] == ["coordination.k8s.io"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "update"]
            if rule["apiGroups"] == ["apps"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "delete"]
        less.append(d)
    less.append({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "magnum-conductor-less", "namespace": SA[0]}})
    manifest = env.tmp / "less.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": less}))
    env.cp.kubectl("apply", "-f", str(manifest))
    less_kubeconfig = CONDUCTOR.kubeconfig(env.cp, env.tmp, sa="magnum-conductor-less")
    conf = env.tmp / "less.conf"
    conf.write_text(open(env.conf).read().replace(env.conductor_kubeconfig, less_kubeconfig))
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", str(conf), "check"], capture_output=True, text=True,
                       timeout=120)
    lines = p.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.split()[1:2] == ["rights"])
    assert lines[i].split()[0] == "FAIL", p.stdout
    assert lines[i].split(None, 2)[2] == \
        f"not granted: delete apps/deployments, update coordination.k8s.io/leases in {SA[0]}", lines[i]
    assert "deploy/kubernetes/magnum-conductor-rbac.yaml" in lines[i + 1], lines[i + 1]
    assert p.returncode != 0


def test_the_lifecycle_runs_under_the_shipped_identity_which_grants_nothing_more(env):
    t131 = env.client("template", json.dumps(T131))["uuid"]
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    got, seen = env.wait(uuid, settled)
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    env.client("resize", uuid, "2", "[]")
    got, seen = env.wait(uuid, lambda g: settled(g) and g["cluster"]["status"] == "UPDATE_COMPLETE"
                         and len(next(n for n in g["nodegroups"] if n["name"] == "default-worker")
                                 ["node_addresses"]) == 2)
    env.client("ng-create", uuid, json.dumps({"name": "gpu-nodes", "node_count": 1}))
    got, seen = env.wait(uuid, lambda g: settled(g) and any(
        n["name"] == "gpu-nodes" and n["status"] == "CREATE_COMPLETE" for n in g["nodegroups"]))
    env.client("ng-delete", uuid, "gpu-nodes")
    got, seen = env.wait(uuid, lambda g: settled(g) and all(n["name"] != "gpu-nodes" for n in g["nodegroups"]))
    r = env.client("upgrade", uuid, t131, "1")
    assert "error" not in r, r
    got, seen = env.wait(uuid, lambda g: settled(g) and g["cluster"]["status"] == "UPDATE_COMPLETE"
                         and all(n["version"] == "v1.31.2" for n in g["nodegroups"]), timeout=240)
    env.client("delete", uuid)
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=240)

    # The labels whose objects are of kinds of their own: the cluster
    # autoscaler (a Deployment and its ServiceAccount, Role and binding),
    # the Keystone webhook (a ClusterResourceSet's ConfigMap), no API
    # floating IP (magnum-capi-proxy's Service).
    t = env.client("template", json.dumps(dict(TEMPLATE, name="every-kind", labels=dict(
        TEMPLATE["labels"], auto_scaling_enabled="true", min_node_count="1", max_node_count="3",
        keystone_auth_enabled="true", master_lb_floating_ip_enabled="false"))))["uuid"]
    other = env.client("create", t, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    # No magnum-capi-proxy runs here: the create waits for one, and says so.
    env.wait(other, lambda g: "no magnum-capi-proxy host reaches network" in (
        (g["cluster"] or {}).get("status_reason") or ""))
    # What the autoscaler's Role grants, the conductor must hold to make it
    # (RBAC's escalation check refuses its create otherwise), as made.
    [role] = env.sim.items("rbac.authorization.k8s.io/v1", "roles", f"magnum.openstack.org/cluster-uuid={other}",
                           ns=NAMESPACE)
    delegated = rbac.granted([dict(role, kind="Role")])
    assert delegated, role

    # The delete's last step deletes what is left of every kind it applied
    # (delete.rs, finish_delete), racing the garbage collector for what
    # the Cluster owns: one object of each kind held by a finalizer of the
    # test's is always left for it, so each of its deletes is made.
    held = []
    for api, plural in ((f"addons.cluster.x-k8s.io/{env.sim.capi.split('/')[1]}", "clusterresourcesets"),
                        ("v1", "configmaps"), ("v1", "secrets"), ("addons.cluster.x-k8s.io/v1alpha1", "helmchartproxies"),
                        (env.sim.capi, "machinehealthchecks"),
                        ("infrastructure.cluster.x-k8s.io/v1beta1", "openstackmachinetemplates"),
                        (f"bootstrap.cluster.x-k8s.io/{env.sim.capi.split('/')[1]}", "kubeadmconfigtemplates"),
                        ("apps/v1", "deployments"), ("rbac.authorization.k8s.io/v1", "rolebindings"),
                        ("rbac.authorization.k8s.io/v1", "roles"), ("v1", "serviceaccounts")):
        objs = env.sim.items(api, plural, f"magnum.openstack.org/cluster-uuid={other}", ns=NAMESPACE)
        assert objs, f"the cluster has no {plural}"
        name = objs[0]["metadata"]["name"]
        env.sim.patch(api, plural, name, {"metadata": {"finalizers": [HOLD]}}, ns=NAMESPACE)
        held.append((api, plural, name))
    env.client("delete", other)
    got, seen = env.wait(other, lambda g: g["cluster"] is None, timeout=240)
    for api, plural, name in held:
        env.sim.patch(api, plural, name, {"metadata": {"finalizers": None}}, ns=NAMESPACE)

    # The preflight under the same identity: the management cluster's
    # lines pass.
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", env.conf, "check"], capture_output=True, text=True,
                       timeout=120)
    management = [ln for ln in p.stdout.splitlines() if ln.split()[1:2] in (["management"], ["leases"], ["rights"])]
    assert len(management) == 3 and not any("FAIL" in ln for ln in management), p.stdout + p.stderr
    rights = next(ln for ln in management if ln.split()[1] == "rights")
    assert rights.split()[0] == "OK" and f"all {len(rbac.granted(CONDUCTOR.docs()))} permissions granted" in rights, rights

    # Blocking audit mode: a request is in the log before its answer.
    seen_rules, refused = CONDUCTOR.used(env.cp.audit_log)
    docs = CONDUCTOR.docs()
    if DISCOVER:
        print(rbac.discovered(seen_rules))
        return
    assert refused == [], f"the shipped role refused requests of the lifecycle: {refused}"
    unused = sorted(rbac.granted(docs) - set(seen_rules) - delegated - set(rbac.ELSEWHERE))
    assert unused == [], f"rules the lifecycle never needed (remove them, or drive the path that does): {unused}"
