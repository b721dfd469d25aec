"""Day-2 operations on Cluster API, driven by Magnum 23.0.0's own client code.

For each CAPI line the management cluster is our simulator. Requests are
sent as magnum-api sends them (tests/python/lifecycle_client.py), and the
rows our conductor writes are compared with what Magnum's own conductor
handlers write for the same request (run in process with a driver that
does nothing, or raises):

- resize workers 2 -> 4 -> 3 -> 1 with `nodes_to_remove`: exactly the named
  machines go; rows, statuses and node addresses as Magnum's;
- `cluster_update` of node_count and health only; a resize out of
  UPDATE_FAILED; control-plane resizes (odd counts only);
- upgrade v1.30 -> v1.31: control plane first, then workers in batches of
  `max_batch_size`; `cluster_template_id`, `kube_tag`, `coe_version`; the
  new template's flavors roll every machine onto them (vertical resize);
  downgrade, minor skip, unrollable change and a concurrent upgrade
  refused with nothing changed in the DB or the simulator;
- an upgrade to a template whose other labels differ: inherited labels
  follow it (control plane rolled, addons switched on and off), the
  cluster's own values and what cannot change stay, named at UPDATE_COMPLETE;
- node groups: create (own flavor, labels, taints, bounds), resize, update,
  delete; deleting a default group refused;
- autoscaling: annotations, the autoscaler's count reflected and not reverted;
- a stuck rollout: UPDATE_FAILED with the CAPI reason after `update_timeout`,
  the stalled machine named;
- on both lines, no status_reason ever names a condition of normal-False
  polarity (v1beta2's RollingOut, ScalingUp, ScalingDown, Remediating,
  Deleting, Paused: capi-sim writes them as cluster-api v1.14 does).
"""
import json
import os
import subprocess
import sys
import time

import pytest

from test_lifecycle import HERE, NAMESPACE, TEMPLATE, Env

NG_LABEL = "magnum.openstack.org/nodegroup"
UUID_LABEL = "magnum.openstack.org/cluster-uuid"
INFRA = "infrastructure.cluster.x-k8s.io/v1beta1"
T131 = dict(TEMPLATE, name="k8s-v1.31", image_id="ubuntu-2204-kube-v1.31.2",
            labels={"kube_tag": "v1.31.2", "auto_healing_enabled": "true"})


@pytest.fixture(scope="module", params=["v1beta1", "v1beta2"])
def env(request, tmp_path_factory):
    # update.after_health: a health-only cluster_update holds the cluster
    # for 5 s after saving (see test_resize_and_update).
    e = Env(tmp_path_factory.mktemp("day2-" + request.param), request.param, extra="update_timeout = 1\n",
            failpoint="update.after_health:sleep=5000")
    e.kcp_api = "controlplane.cluster.x-k8s.io/" + request.param
    e.boot_api = "bootstrap.cluster.x-k8s.io/" + request.param
    yield e
    e.close()


# CAPI v1beta2 conditions that are False on a healthy object (cluster-api
# v1.14; capi-sim writes them as upstream does): never a blocker (issue 34).
NORMAL_FALSE = ("RollingOut", "ScalingUp", "ScalingDown", "Remediating", "Deleting", "Paused")


@pytest.fixture(autouse=True)
def no_normal_false_blocker(env):
    """Every status_reason a test sees (cluster and node groups, every
    poll) names no condition of normal-False polarity as what it waits for."""
    original, reasons = env.wait, []

    def recording(uuid, done, **kw):
        def check(g):
            if g.get("cluster"):
                reasons.append(g["cluster"].get("status_reason") or "")
                reasons.extend(n.get("status_reason") or "" for n in g.get("nodegroups") or [])
            return done(g)
        return original(uuid, check, **kw)
    env.wait = recording
    yield
    env.wait = original
    named = sorted({r for r in reasons for ty in NORMAL_FALSE if f"{ty}: " in r or f"Not{ty}" in r})
    assert not named, named


def status_is(*statuses):
    return lambda g: g["cluster"] and g["cluster"]["status"] in statuses


def settled(g):
    """The cluster and every node group are out of progress, in one read.
    (An operation writes its node group's row before the cluster's: a read
    between the two sees the new count beside the last operation's
    `*_COMPLETE` cluster status, which is not this operation's end.)"""
    return (g["cluster"] and not g["cluster"]["status"].endswith("_IN_PROGRESS")
            and not any(n["status"].endswith("_IN_PROGRESS") for n in g["nodegroups"]))


def scaled(g, group, n):
    """`group` has `n` nodes, settled, in one read. After a cluster_update
    (whose node group keeps its status, as in Magnum) settled() alone also
    holds in the moment between the node group's new count and the
    cluster's UPDATE_IN_PROGRESS; its addresses show the machines are there."""
    return settled(g) and ng(g, group)["node_count"] == n and len(ng(g, group)["node_addresses"]) == n


def complete_cluster(env, master=1, workers=2, overrides=None):
    req = {"master_count": master, "node_count": workers}
    if overrides:
        req["cluster"] = overrides
    uuid = env.client("create", env.template, json.dumps(req))["uuid"]
    got, seen = env.wait(uuid, settled)
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    return uuid, got


def ng(got, name):
    return next(n for n in got["nodegroups"] if n["name"] == name)


def machines(env, key, uuid=None):
    sel = f"{NG_LABEL}={key}" + (f",{UUID_LABEL}={uuid}" if uuid else "")
    return [m for m in env.sim.items(env.sim.capi, "machines", sel) if not m["metadata"].get("deletionTimestamp")]


def cp_machines(env, stack_id):
    return env.sim.items(env.sim.capi, "machines", f"cluster.x-k8s.io/cluster-name={stack_id},cluster.x-k8s.io/control-plane")


def md(env, stack_id, key):
    return env.sim.get(f"/apis/{env.sim.capi}/namespaces/{NAMESPACE}/machinedeployments/{stack_id}-{key}")


def paused(env):
    """The simulated controllers stopped: rows stay as the handler wrote them."""
    class P:
        def __enter__(self):
            env.sim.post("/_sim/controllers/pause")  # returns once no controller writes
            # ... and the conductor has taken in what they wrote last (its
            # status pass would otherwise land after the test's own write).
            last, quiet_since = None, time.time()
            while time.time() - quiet_since < 0.5:
                seen = env.conductor.metric("magnum_conductor_watch_events_total")
                if seen != last:
                    last, quiet_since = seen, time.time()
                time.sleep(0.05)

        def __exit__(self, *a):
            env.sim.post("/_sim/controllers/resume")
    return P()


def wait_for(what, check, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = check()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def delete(env, uuid):
    env.client("delete", uuid)
    got, _ = env.wait(uuid, lambda g: g["cluster"] is None)
    assert got["nodegroups"] == []


def magnum_rows(env, cmd, uuid, *args, raises=None):
    """Magnum's own handler on a cluster with the same rows: a copy made by
    Magnum's create handler, then marked complete like ours."""
    extra = {"MC_DRIVER_RAISES": raises} if raises else {}
    old = dict(env.client_env)
    env.client_env.update(extra)
    try:
        return env.client(cmd, uuid, *args)
    finally:
        env.client_env.clear()
        env.client_env.update(old)


def twin(env, got):
    """A cluster with our cluster's rows (Magnum's create handler), CREATE_COMPLETE."""
    c = got["cluster"]
    req = {"master_count": ng(got, "default-master")["node_count"],
           "node_count": ng(got, "default-worker")["node_count"],
           "cluster": {"name": c["name"] + "-py", "labels": c["labels"]}}
    uuid = env.client("python-create", env.template, json.dumps(req))["uuid"]
    env.client("set", uuid, json.dumps({"status": "CREATE_COMPLETE"}), "default-master",
               json.dumps({"status": "CREATE_COMPLETE"}))
    env.client("set", uuid, json.dumps({"status": "CREATE_COMPLETE"}), "default-worker",
               json.dumps({"status": "CREATE_COMPLETE"}))
    return uuid


ROW_FIELDS = ("status", "status_reason")
NG_FIELDS = ("status", "status_reason", "node_count", "min_node_count", "max_node_count")


def same_rows(ours, theirs, ng_names, reason=True):
    """The columns Magnum's handler writes. `reason=False`: the cluster's
    status_reason is left out (ours says what CAPI does while in progress)."""
    fields = ROW_FIELDS if reason else ("status",)
    a = {f: ours["cluster"][f] for f in fields}
    b = {f: theirs["cluster"][f] for f in fields}
    assert a == b, (a, b)
    for n in ng_names:
        nf = NG_FIELDS
        a = {f: ng(ours, n)[f] for f in nf}
        b = {f: ng(theirs, n)[f] for f in nf}
        assert a == b, (n, a, b)


def test_resize_and_update(env):
    uuid, got = complete_cluster(env)
    stack = got["cluster"]["stack_id"]
    theirs = twin(env, got)

    # 2 -> 4: the rows as Magnum's handler writes them (controllers paused).
    with paused(env):
        env.client("resize", uuid, "4", "[]")
        mine, _ = env.wait(uuid, lambda g: ng(g, "default-worker")["node_count"] == 4
                           and g["cluster"]["status"] == "UPDATE_IN_PROGRESS")
        assert magnum_rows(env, "python-resize", theirs, "4", "[]") == {"ok": True}
        # (While in progress our status_reason says what CAPI is doing; Magnum's is NULL.)
        same_rows(mine, env.client("get", theirs), ["default-worker", "default-master"], reason=False)
        assert ng(mine, "default-worker")["status"] == "UPDATE_IN_PROGRESS"
    got, seen = env.wait(uuid, settled)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert got["cluster"]["status_reason"] is None
    w = ng(got, "default-worker")
    assert (w["status"], w["node_count"], len(w["node_addresses"])) == ("UPDATE_COMPLETE", 4, 4)
    assert env.conductor.wait_metric("magnum_conductor_cluster_operation_duration_seconds_count", 1,
                                     operation="update", outcome="complete") >= 1
    assert md(env, stack, "default-worker")["spec"]["replicas"] == 4

    # 4 -> 3 naming one machine by its server id: exactly that one goes.
    ms = machines(env, "default-worker", uuid)
    victim = ms[1]
    server = victim["spec"]["providerID"].rsplit("/", 1)[1]
    env.client("resize", uuid, "3", json.dumps([server]))
    got, seen = env.wait(uuid, lambda g: settled(g) and ng(g, "default-worker")["node_count"] == 3)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    left = {m["metadata"]["name"] for m in machines(env, "default-worker", uuid)}
    assert left == {m["metadata"]["name"] for m in ms} - {victim["metadata"]["name"]}
    assert victim["status"]["addresses"][0]["address"] not in ng(got, "default-worker")["node_addresses"]

    # 3 -> 1 naming two by Machine name: exactly those two go.
    ms = machines(env, "default-worker", uuid)
    named = [ms[0]["metadata"]["name"], ms[2]["metadata"]["name"]]
    env.client("resize", uuid, "1", json.dumps(named))
    got, seen = env.wait(uuid, lambda g: settled(g) and ng(g, "default-worker")["node_count"] == 1)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert [m["metadata"]["name"] for m in machines(env, "default-worker", uuid)] == [ms[1]["metadata"]["name"]]
    assert len(ng(got, "default-worker")["node_addresses"]) == 1

    # A resize that cannot be honoured: UPDATE_FAILED, node_count restored, as Magnum.
    with paused(env):
        env.client("resize", uuid, "0", json.dumps(["no-such-node"]))
        mine, _ = env.wait(uuid, status_is("UPDATE_FAILED"))
        msg = 'nodes_to_remove: no node "no-such-node" in this nodegroup'
        assert mine["cluster"]["status_reason"] == msg
        env.client("set", theirs, json.dumps({"status": "UPDATE_COMPLETE"}), "default-worker",
                   json.dumps({"node_count": 1, "status": "UPDATE_COMPLETE"}))
        r = magnum_rows(env, "python-resize", theirs, "0", json.dumps(["no-such-node"]), raises=msg)
        assert r["error"] == "Exception"
        same_rows(mine, env.client("get", theirs), ["default-worker"])
        assert ng(mine, "default-worker")["node_count"] == 1
        assert ng(mine, "default-worker")["status"] == "UPDATE_FAILED"
        assert md(env, stack, "default-worker")["spec"]["replicas"] == 1, "nothing applied"

    # Resizing out of UPDATE_FAILED works (Magnum allows it; it is the retry).
    env.client("resize", uuid, "2", "[]")
    got, seen = env.wait(uuid, lambda g: settled(g) and ng(g, "default-worker")["node_count"] == 2)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert ng(got, "default-worker")["status"] == "UPDATE_COMPLETE"

    # cluster_update: node_count (the worker's status untouched, as Magnum).
    env.client("update", uuid, json.dumps({"node_count": 3}))
    got, seen = env.wait(uuid, lambda g: scaled(g, "default-worker", 3))
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert ng(got, "default-worker")["status"] == "UPDATE_COMPLETE"
    assert len(machines(env, "default-worker", uuid)) == 3
    # Health only: saved, nothing else. The status pass that follows the
    # operation writes the health it computes from CAPI over it (as Magnum's
    # periodic health sync does): in CI under load it did so before a poll
    # saw the saved value. The failpoint holds the cluster's lock for 5 s
    # after the save, so no status pass runs before the polls below.
    with paused(env):
        before = env.client("get", uuid)["cluster"]
        env.client("update", uuid, json.dumps({"health_status": "UNKNOWN", "health_status_reason": {"by": "test"}}))
        got, _ = env.wait(uuid, lambda g: g["cluster"]["health_status"] == "UNKNOWN")
        assert got["cluster"]["health_status_reason"] == {"by": "test"}
        assert got["cluster"]["status"] == before["status"] == "UPDATE_COMPLETE"
        assert ng(got, "default-worker")["node_count"] == 3

    # Control plane: 1 -> 3; an even count is refused (UPDATE_FAILED, nothing applied).
    env.client("resize", uuid, "3", "[]", "default-master")
    got, seen = env.wait(uuid, lambda g: settled(g) and ng(g, "default-master")["node_count"] == 3)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert len(ng(got, "default-master")["node_addresses"]) == 3
    env.client("resize", uuid, "2", "[]", "default-master")
    got, _ = env.wait(uuid, status_is("UPDATE_FAILED"))
    assert "odd number" in got["cluster"]["status_reason"]
    assert ng(got, "default-master")["node_count"] == 3
    kcp = env.sim.items(env.kcp_api, "kubeadmcontrolplanes", f"{UUID_LABEL}={uuid}")[0]
    assert kcp["spec"]["replicas"] == 3

    delete(env, uuid)
    delete(env, theirs)


def test_upgrade(env):
    uuid, got = complete_cluster(env, master=1, workers=3)
    stack = got["cluster"]["stack_id"]
    # Vertical resize rides the upgrade: the new template's flavors.
    t131 = env.client("template", json.dumps(dict(T131, flavor_id="m1.large", master_flavor_id="m1.xlarge")))["uuid"]
    t133 = env.client("template", json.dumps(dict(T131, name="k8s-v1.33", labels={"kube_tag": "v1.33.0"})))["uuid"]
    t130b = env.client("template", json.dumps(dict(TEMPLATE, name="k8s-v1.30.2", labels={"kube_tag": "v1.30.2"})))["uuid"]
    cilium = env.client("template", json.dumps(dict(T131, name="k8s-cilium", network_driver="cilium")))["uuid"]

    def frozen():
        """The rows and our objects' generations: nothing may change on a refusal."""
        g = env.client("get", uuid)
        objs = sorted((o["kind"], o["metadata"]["name"], o["metadata"]["resourceVersion"])
                      for api, plural in ((env.sim.capi, "machinedeployments"), (env.kcp_api, "kubeadmcontrolplanes"),
                                          (env.sim.capi, "clusters"))
                      for o in env.sim.items(api, plural, f"{UUID_LABEL}={uuid}"))
        return g, objs

    before = frozen()
    for t, cls, words in ((t130b, "InvalidClusterTemplateForUpgrade", "downgrades are not supported"),
                          (t133, "InvalidClusterTemplateForUpgrade", "skips a minor version"),
                          (cilium, "InvalidClusterTemplateForUpgrade", "network_driver differs")):
        r = env.client("upgrade", uuid, t, "1")
        assert r.get("error") == cls and words in r["message"] and r["code"] == 409, r
    assert frozen() == before, "a refused upgrade changes nothing"

    # The real one, batches of 2 (controllers paused: the rows as the handler left them).
    with paused(env):
        r = env.client("upgrade", uuid, t131, "2")
        assert "error" not in r, r
        # The status worker sees the new KubeadmControlPlane spec not yet
        # observed by CAPI (its controllers are paused) and says so.
        got, _ = env.wait(uuid, lambda g: g["cluster"]["status_reason"] ==
                          "control plane: waiting for CAPI to observe the change", timeout=30)
        c = got["cluster"]
        assert (c["cluster_template_id"], c["labels"]["kube_tag"], c["status"]) == \
            (t131, "v1.31.2", "UPDATE_IN_PROGRESS")
        assert (c["flavor_id"], c["master_flavor_id"]) == ("m1.large", "m1.xlarge")
        for n in got["nodegroups"]:
            assert (n["status"], n["version"], n["image_id"], n["flavor_id"]) == \
                ("UPDATE_IN_PROGRESS", "v1.31.2", "ubuntu-2204-kube-v1.31.2",
                 "m1.xlarge" if n["role"] == "master" else "m1.large")
        # A second upgrade while this one runs: Magnum's refusal, nothing changed.
        r = env.client("upgrade", uuid, t131, "1")
        assert r.get("error") == "NotSupported" and r["code"] == 400, r
        assert r["message"] == 'Upgrading a cluster when status is "UPDATE_IN_PROGRESS" is not supported.'
        assert env.client("get", uuid)["cluster"] == c
        spec = md(env, stack, "default-worker")["spec"]
        strategy = spec["rollout"]["strategy"] if "rollout" in spec else spec["strategy"]
        assert strategy["rollingUpdate"]["maxSurge"] == 2 and strategy["rollingUpdate"]["maxUnavailable"] == 0
        assert spec["template"]["spec"]["version"] == "v1.30.4", "workers wait for the control plane"
        kcp = env.sim.items(env.kcp_api, "kubeadmcontrolplanes", f"{UUID_LABEL}={uuid}")[0]
        assert kcp["spec"]["version"] == "v1.31.2"

    # Control plane first: no worker runs v1.31 while a control-plane machine runs v1.30;
    # never more than 3 + 2 workers at once (sampled from the simulator, fast).
    most = 0
    deadline = time.time() + 120
    while True:
        cps = cp_machines(env, stack)
        ws = machines(env, "default-worker", uuid)
        most = max(most, len(ws))
        if any(m["spec"].get("version") == "v1.30.4" for m in cps):
            assert not any(m["spec"].get("version") == "v1.31.2" for m in ws), "a worker went before the control plane"
        if len(ws) == 3 and {m["spec"].get("version") for m in ws + cps} == {"v1.31.2"}:
            break
        assert time.time() < deadline, "the machines did not roll"
        time.sleep(0.02)
    g, seen = env.wait(uuid, settled)
    assert g["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert g["cluster"]["coe_version"] == "v1.31.2"
    assert all(n["status"] == "UPDATE_COMPLETE" for n in g["nodegroups"]), g["nodegroups"]
    assert most <= 5
    vers = {m["spec"]["version"] for m in machines(env, "default-worker", uuid) + cp_machines(env, stack)}
    assert vers == {"v1.31.2"}
    # Every machine now runs on a machine template of the new flavor.
    def flavor(m):
        ref = m["spec"]["infrastructureRef"]
        api = ref.get("apiVersion") or INFRA
        osm = env.sim.get(f"/apis/{api}/namespaces/{NAMESPACE}/openstackmachines/{ref['name']}")
        return osm["spec"]["flavor"]
    assert {flavor(m) for m in machines(env, "default-worker", uuid)} == {"m1.large"}
    assert {flavor(m) for m in cp_machines(env, stack)} == {"m1.xlarge"}
    assert len(ng(g, "default-worker")["node_addresses"]) == 3
    delete(env, uuid)


def args_of(v):
    """kubeadm extraArgs in either line's shape, as a dict."""
    return v if isinstance(v, dict) else {a["name"]: a["value"] for a in v}


def test_upgrade_follows_the_new_templates_labels(env):
    """An upgrade to a template whose other labels differ
    (conductor/src/capi/label_upgrade.rs): a label the cluster inherited
    follows the new template (audit logs switched on in the control plane,
    metrics-server's HelmChartProxy and its release gone, the Keystone
    webhook's ClusterResourceSet and ConfigMap gone with its API server
    flags, the monitoring stack's added, a label the new template drops
    dropped); a template with a bad label value is refused with nothing
    changed; a value the
    cluster was given at create stays, and so does an inherited label that
    cannot change on a running cluster (the pod network); both are named in
    status_reason at UPDATE_COMPLETE."""
    a_labels = {"kube_tag": "v1.30.4", "auto_healing_enabled": "true", "audit_log_enabled": "false",
                "metrics_server_enabled": "true", "calico_ipv4pool": "10.100.0.0/16",
                "boot_volume_size": "20", "octavia_lb_algorithm": "ROUND_ROBIN", "keystone_auth_enabled": "true"}
    b_labels = {"kube_tag": "v1.31.2", "auto_healing_enabled": "true", "audit_log_enabled": "true",
                "metrics_server_enabled": "false", "monitoring_enabled": "true",
                "calico_ipv4pool": "10.200.0.0/16", "boot_volume_size": "40"}
    ta = env.client("template", json.dumps(dict(TEMPLATE, name="k8s-labels-a", labels=a_labels)))["uuid"]
    tb = env.client("template", json.dumps(dict(T131, name="k8s-labels-b", labels=b_labels)))["uuid"]
    bad = env.client("template", json.dumps(dict(T131, name="k8s-labels-bad",
                                                 labels=dict(b_labels, audit_log_enabled="perhaps"))))["uuid"]
    # The user's own boot volume size at create (labels merged as magnum-api does).
    req = {"master_count": 1, "node_count": 1, "cluster": {"labels": dict(a_labels, boot_volume_size="30")}}
    uuid = env.client("create", ta, json.dumps(req))["uuid"]
    got, seen = env.wait(uuid, settled)
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    assert got["cluster"]["status_reason"] is None, "no note at create: the user's values are not news"
    stack = got["cluster"]["stack_id"]
    sel = f"{UUID_LABEL}={uuid}"
    hcp_api = "addons.cluster.x-k8s.io/v1alpha1"

    def releases():
        return sorted(h["spec"]["releaseName"] for h in env.sim.items(hcp_api, "helmchartproxies", sel))
    assert "metrics-server" in releases() and "monitoring" not in releases()
    crs_api = "addons.cluster.x-k8s.io/" + env.kcp_api.split("/")[-1]

    def webhook_objects():
        return sorted(f"{kind}/{o['metadata']['name']}" for api, plural, kind in (
            (crs_api, "clusterresourcesets", "ClusterResourceSet"), ("v1", "configmaps", "ConfigMap"))
            for o in env.sim.items(api, plural, sel) if o["metadata"]["name"] == f"{stack}-keystone-auth")
    assert webhook_objects() == [f"ClusterResourceSet/{stack}-keystone-auth", f"ConfigMap/{stack}-keystone-auth"]

    # A new template whose label the cluster would inherit but that cannot
    # be rendered: refused before anything is written, naming the label.
    before = env.client("get", uuid)
    r = env.client("upgrade", uuid, bad, "1")
    assert r.get("error") == "InvalidClusterTemplateForUpgrade" and r["code"] == 409, r
    assert "audit_log_enabled" in r["message"], r
    assert env.client("get", uuid) == before
    assert "metrics-server" in releases() and len(webhook_objects()) == 2

    r = env.client("upgrade", uuid, tb, "1")
    assert "error" not in r, r
    g, seen = env.wait(uuid, lambda g: settled(g) and g["cluster"]["status"] != "CREATE_COMPLETE")
    c = g["cluster"]
    assert c["status"] == "UPDATE_COMPLETE", seen
    assert c["labels"] == {"kube_tag": "v1.31.2", "auto_healing_enabled": "true", "audit_log_enabled": "true",
                           "metrics_server_enabled": "false", "monitoring_enabled": "true",
                           "calico_ipv4pool": "10.100.0.0/16", "boot_volume_size": "30"}, c["labels"]
    assert c["status_reason"] == (
        'complete; labels not as template k8s-labels-b gives them: boot_volume_size="30" (template: "40"); '
        'calico_ipv4pool="10.100.0.0/16" (template: "10.200.0.0/16", kept: the pod network cannot change '
        'on a running cluster)'), c["status_reason"]
    # The control plane rolled with the audit log on.
    kcp = env.sim.items(env.kcp_api, "kubeadmcontrolplanes", sel)[0]
    flags = args_of(kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"])
    assert "audit-log-path" in flags and flags["audit-log-maxage"] == "30", flags
    assert "authentication-token-webhook-config-file" not in flags, flags
    assert webhook_objects() == [], webhook_objects()
    # The addons: metrics-server's proxy and CAAPH's release of it gone
    # (the release is owned by its proxy: the real kube-controller-manager's
    # garbage collector), the monitoring stack's made.
    assert releases() == ["cinder-csi", "cni-calico", "monitoring", "openstack-ccm"], releases()
    deadline = time.time() + 60
    while any(h["spec"]["releaseName"] == "metrics-server"
              for h in env.sim.items(hcp_api, "helmreleaseproxies", f"cluster.x-k8s.io/cluster-name={stack}")):
        assert time.time() < deadline, "metrics-server's HelmReleaseProxy outlived its proxy"
        time.sleep(0.2)
    # Kept: the pod network (Cluster and CNI) and the user's boot volume.
    cl = env.sim.get(f"/apis/{env.sim.capi}/namespaces/{NAMESPACE}/clusters/{stack}")
    assert cl["spec"]["clusterNetwork"]["pods"]["cidrBlocks"] == ["10.100.0.0/16"]
    [calico] = [h for h in env.sim.items(hcp_api, "helmchartproxies", sel) if h["spec"]["releaseName"] == "cni-calico"]
    assert "cidr: 10.100.0.0/16" in calico["spec"]["valuesTemplate"]
    osmts = env.sim.items(INFRA, "openstackmachinetemplates", sel)
    assert osmts and {t["spec"]["template"]["spec"]["rootVolume"]["sizeGiB"] for t in osmts} == {30}, osmts
    delete(env, uuid)


def test_nodegroups(env):
    uuid, got = complete_cluster(env)
    stack = got["cluster"]["stack_id"]
    theirs = twin(env, got)
    fields = {"name": "gpu-nodes", "flavor_id": "m1.gpu", "node_count": 2, "min_node_count": 1, "max_node_count": 3,
              "node_labels": {"gpu": "true"},
              "node_taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
    with paused(env):
        created = env.client("ng-create", uuid, json.dumps(fields))["uuid"]
        mine, _ = env.wait(uuid, lambda g: any(n["name"] == "gpu-nodes" for n in g["nodegroups"])
                           and g["cluster"]["status"] == "UPDATE_IN_PROGRESS")
        r = magnum_rows(env, "python-ng-create", theirs, json.dumps(fields))
        theirs_rows = env.client("get", theirs)
        skip = {"id", "uuid", "cluster_id", "created_at", "updated_at", "stack_id", "node_addresses", "image_id"}
        a = {k: v for k, v in ng(mine, "gpu-nodes").items() if k not in skip}
        b = {k: v for k, v in ng(theirs_rows, "gpu-nodes").items() if k not in skip}
        assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
        assert ng(mine, "gpu-nodes")["uuid"] == created
        same_rows(mine, theirs_rows, ["gpu-nodes"], reason=False)
    got, seen = env.wait(uuid, settled)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    g = ng(got, "gpu-nodes")
    assert (g["status"], len(g["node_addresses"])) == ("CREATE_COMPLETE", 2)
    d = md(env, stack, "gpu-nodes")
    assert d["spec"]["replicas"] == 2
    osmt = env.sim.get(f"/apis/{INFRA}/namespaces/{NAMESPACE}/openstackmachinetemplates/"
                       f"{d['spec']['template']['spec']['infrastructureRef']['name']}")
    assert osmt["spec"]["template"]["spec"]["flavor"] == "m1.gpu"
    kct = env.sim.get(f"/apis/{env.boot_api}/namespaces/{NAMESPACE}/kubeadmconfigtemplates/"
                      f"{d['spec']['template']['spec']['bootstrap']['configRef']['name']}")
    reg = kct["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
    assert reg["taints"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    assert "gpu=true" in json.dumps(reg["kubeletExtraArgs"])
    assert len(env.sim.items(env.sim.capi, "machinehealthchecks", f"{UUID_LABEL}={uuid}")) == 3

    # Its node_count changes through a resize of that group.
    env.client("resize", uuid, "3", "[]", "gpu-nodes")
    got, seen = env.wait(uuid, lambda g: settled(g) and ng(g, "gpu-nodes")["node_count"] == 3)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert len(machines(env, "gpu-nodes", uuid)) == 3
    # nodegroup_update: new bounds and taints (the taints roll the group).
    old_template = md(env, stack, "gpu-nodes")["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"]
    env.client("ng-update", uuid, "gpu-nodes", json.dumps({"max_node_count": 5, "node_taints": []}))
    got, seen = env.wait(uuid, lambda g: settled(g) and ng(g, "gpu-nodes")["max_node_count"] == 5)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert ng(got, "gpu-nodes")["status"] == "UPDATE_COMPLETE"
    assert ng(got, "gpu-nodes")["node_taints"] == []
    assert md(env, stack, "gpu-nodes")["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"] != old_template

    # A default group cannot be deleted (refused by the conductor too).
    before = env.client("get", uuid)
    env.client("ng-delete", uuid, "default-worker")
    time.sleep(1)
    after = env.client("get", uuid)
    assert after["cluster"]["status"] == before["cluster"]["status"]
    assert ng(after, "default-worker")["status"] == ng(before, "default-worker")["status"]
    assert md(env, stack, "default-worker") is not None

    # Delete: the group goes, with its objects and its row.
    env.client("ng-delete", uuid, "gpu-nodes")
    got, seen = env.wait(uuid, lambda g: settled(g) and all(n["name"] != "gpu-nodes" for n in g["nodegroups"]))
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    assert md(env, stack, "gpu-nodes") is None
    assert machines(env, "gpu-nodes", uuid) == []
    sel = f"{UUID_LABEL}={uuid},{NG_LABEL}=gpu-nodes"
    assert env.sim.items(INFRA, "openstackmachinetemplates", sel) == []
    assert env.sim.items(env.boot_api, "kubeadmconfigtemplates", sel) == []
    assert len(env.sim.items(env.sim.capi, "machinehealthchecks", f"{UUID_LABEL}={uuid}")) == 2
    delete(env, uuid)
    delete(env, theirs)


def test_autoscaling(env):
    uuid, got = complete_cluster(env, overrides={"labels": {"kube_tag": "v1.30.4", "auto_scaling_enabled": "true",
                                                            "min_node_count": "1", "max_node_count": "4"}})
    stack = got["cluster"]["stack_id"]
    d = md(env, stack, "default-worker")
    ann = d["metadata"]["annotations"]
    assert ann["cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"] == "1"
    assert ann["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"] == "4"
    deployment = env.sim.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{stack}-autoscaler")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--node-group-auto-discovery=clusterapi:namespace={NAMESPACE},clusterName={stack}" in args
    # "The autoscaler" scales through the scale subresource, as cluster-autoscaler does.
    env.sim.patch(env.sim.capi, "machinedeployments", f"{stack}-default-worker/scale", {"spec": {"replicas": 3}})
    got, _ = env.wait(uuid, lambda g: ng(g, "default-worker")["node_count"] == 3
                      and len(ng(g, "default-worker")["node_addresses"]) == 3)
    assert got["cluster"]["status"] == "CREATE_COMPLETE", "not an operation of ours"
    # Something of ours applies the group again (new bounds): not reverted.
    env.client("ng-update", uuid, "default-worker", json.dumps({"max_node_count": 5}))
    got, seen = env.wait(uuid, lambda g: settled(g) and ng(g, "default-worker")["max_node_count"] == 5)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    d = md(env, stack, "default-worker")
    assert d["metadata"]["annotations"]["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"] == "5"
    assert d["spec"]["replicas"] == 3 and ng(got, "default-worker")["node_count"] == 3
    env.client("update", uuid, json.dumps({"node_count": 4}))
    got, seen = env.wait(uuid, lambda g: scaled(g, "default-worker", 4))
    assert md(env, stack, "default-worker")["spec"]["replicas"] == 4, "a Magnum resize is a scale, too"
    assert len(machines(env, "default-worker", uuid)) == 4
    delete(env, uuid)


def test_stuck_rollout_fails_with_the_capi_reason(env):
    """A rollout whose new machines never come up: UPDATE_FAILED with what CAPI
    says after `update_timeout` (1 minute here) without progress."""
    uuid, got = complete_cluster(env)
    stack = got["cluster"]["stack_id"]
    env.sim.patch(env.sim.capi, "machinedeployments", f"{stack}-default-worker",
                  {"metadata": {"annotations": {"capi-sim/never-ready": "true"}}})
    # A template change (taints) creates a new MachineSet whose machines never come up.
    env.client("ng-update", uuid, "default-worker", json.dumps({"node_taints": [{"key": "x", "value": "y", "effect": "NoSchedule"}]}))
    started = time.time()
    # (ng-update is a cast: a first read under load can still be the create's.)
    got, seen = env.wait(uuid, lambda g: settled(g) and g["cluster"]["status"] != "CREATE_COMPLETE", timeout=150)
    took = time.time() - started
    assert got["cluster"]["status"] == "UPDATE_FAILED", seen
    reason = got["cluster"]["status_reason"]
    assert reason.startswith("No progress for 1 minutes; "), reason
    assert "waiting for the server to become ACTIVE" in reason, reason
    assert "machine " in reason, reason  # the stalled machine, by name
    assert ng(got, "default-worker")["status"] == "UPDATE_FAILED"
    assert took >= 55, took
    delete(env, uuid)
