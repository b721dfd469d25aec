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
import collections
import json
import os
import subprocess

import pytest
import yaml

from conftest import CONDUCTOR_BIN, ROOT
from k8s import ControlPlane
from test_day2 import T131, settled
from test_lifecycle import NAMESPACE, TEMPLATE, Env

RBAC = os.path.join(ROOT, "deploy", "kubernetes", "magnum-conductor-rbac.yaml")
SA = ("magnum-system", "magnum-conductor")
USER = f"system:serviceaccount:{SA[0]}:{SA[1]}"
DISCOVER = os.environ.get("MC_RBAC_DISCOVER") == "1"
HOLD = "test.magnum.openstack.org/hold"


def audited_control_plane(line, tmp):
    """A control plane of its own whose apiserver audits the conductor's
    identity (its requests only: Metadata level, to a JSON log)."""
    cp = ControlPlane(line)
    policy = tmp / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": [USER]}, {"level": "None"}]}))
    cp.audit_log = tmp / "audit.log"
    argv = cp.stop_apiserver()
    cp.start_apiserver(argv + [f"--audit-policy-file={policy}", f"--audit-log-path={cp.audit_log}",
                               "--audit-log-format=json", "--audit-log-mode=blocking"])
    return cp


def conductor_kubeconfig(cp, tmp):
    """The shipped identity applied (or, discovering, the ServiceAccount
    bound to cluster-admin), and a kubeconfig holding only a token of it."""
    docs = shipped()
    if DISCOVER:
        docs = [d for d in docs if d["kind"] in ("Namespace", "ServiceAccount")] + [{
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "magnum-conductor-discover"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "namespace": SA[0], "name": SA[1]}]}]
    manifest = tmp / "rbac.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    cp.kubectl("apply", "-f", str(manifest))
    token = cp.kubectl("create", "token", SA[1], "-n", SA[0], "--duration=4h").strip()
    path = tmp / "conductor.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "m", "cluster": {"server": cp.server,
                                               "certificate-authority": os.path.join(cp.dir, "pki", "ca.crt")}}],
        "users": [{"name": "conductor", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "m", "user": "conductor"}}]}))
    return str(path)


def shipped():
    """The shipped RBAC documents; with MC_RBAC_DROP=GROUP/RESOURCE:VERB
    (GROUP empty for the core group), without that one verb: the test must
    then fail, the apiserver refusing a request of the lifecycle."""
    docs = list(yaml.safe_load_all(open(RBAC)))
    drop = os.environ.get("MC_RBAC_DROP")
    if drop:
        target, verb = drop.rsplit(":", 1)
        group, resource = target.split("/", 1)
        found = False
        for d in docs:
            if d["kind"] not in ("ClusterRole", "Role"):
                continue
            rules = []
            for rule in d["rules"]:
                if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                    found = True
                    rules.append(dict(rule, resources=[r for r in rule["resources"] if r != resource]))
                    rules.append(dict(rule, resources=[resource], verbs=[v for v in rule["verbs"] if v != verb]))
                else:
                    rules.append(rule)
            d["rules"] = [r for r in rules if r["resources"] and r["verbs"]]
        assert found, f"MC_RBAC_DROP={drop}: no such rule"
    return docs


def granted(docs):
    """Every (apiGroup, resource, verb) the shipped roles grant."""
    out = set()
    for d in docs:
        if d["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in d["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add((g, r, v))
    return out


def used(audit_log):
    """(apiGroup, resource[/subresource], verb) -> [codes] of the
    conductor's requests, and the refused ones."""
    seen = collections.defaultdict(list)
    refused = []
    with open(audit_log) as f:
        for line in f:
            e = json.loads(line)
            # A watch is audited when its answer starts (it may never end
            # while the conductor runs); every other request when complete.
            stage = "ResponseStarted" if e.get("verb") == "watch" else "ResponseComplete"
            if e.get("user", {}).get("username") != USER or e.get("stage") != stage:
                continue
            ref = e.get("objectRef")
            code = e.get("responseStatus", {}).get("code")
            if not ref:
                continue  # discovery (non-resource URLs), which every authenticated user may read
            resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            key = (ref.get("apiGroup", ""), resource, e["verb"])
            seen[key].append(code)
            if e["verb"] == "patch" and code == 201:
                # A server-side apply that made the object: the apiserver
                # authorizes it as a create too.
                seen[(key[0], key[1], "create")].append(code)
            if code == 403:
                refused.append((key, ref.get("namespace"), ref.get("name")))
    return seen, refused


@pytest.fixture(scope="module", params=["v1beta2"])
def env(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"rbac-{request.param}")
    cp = audited_control_plane(request.param, tmp)
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
        cp.destroy()


def test_check_names_each_permission_an_identity_lacks(env):
    """`check` asks the apiserver (SelfSubjectAccessReview) for every
    permission the conductor needs: an identity lacking some is told which,
    and where they are granted, before a cluster fails on them."""
    if DISCOVER:
        pytest.skip("discovering")
    docs = shipped()
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
    token = env.cp.kubectl("create", "token", "magnum-conductor-less", "-n", SA[0], "--duration=1h").strip()
    kc = yaml.safe_load(open(env.conductor_kubeconfig))
    kc["users"][0]["user"]["token"] = token
    (env.tmp / "less.kubeconfig").write_text(yaml.safe_dump(kc))
    conf = env.tmp / "less.conf"
    conf.write_text(open(env.conf).read().replace(env.conductor_kubeconfig, str(env.tmp / "less.kubeconfig")))
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
    delegated = granted([dict(role, kind="Role")])
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
    assert rights.split()[0] == "OK" and f"all {len(granted(shipped()))} permissions granted" in rights, rights

    # Blocking audit mode: a request is in the log before its answer.
    seen_rules, refused = used(env.cp.audit_log)
    docs = shipped()
    if DISCOVER:
        by = collections.defaultdict(set)
        for (g, r, v) in seen_rules:
            by[(g, r)].add(v)
        rules = [{"apiGroups": [g], "resources": [r], "verbs": sorted(v)} for (g, r), v in sorted(by.items())]
        print(yaml.safe_dump(rules, sort_keys=False))
        return
    assert refused == [], f"the shipped role refused requests of the lifecycle: {refused}"
    unused = sorted(granted(docs) - set(seen_rules) - delegated)
    assert unused == [], f"rules the lifecycle never needed (remove them, or drive the path that does): {unused}"
