"""`magnum-conductor adopt CLUSTER [--dry-run | --undo]`: clusters other
drivers made, taken over with no machine replaced.

On a real apiserver (v1beta1 CRDs, capi-sim's controllers making the
Machines), beside one cluster of ours:

- magnum-capi-helm 1.4 clusters, their objects built from the
  openstack-cluster chart's templates (azimuth-cloud/capi-helm-charts at
  2c557a9a, charts/openstack-cluster/templates: cluster.yaml,
  cluster-openstack.yaml, control-plane/*.yaml, node-group/*.yaml; names
  `<release>-<component>`, templates `<release>-<component>-<checksum>`,
  the chart's `capi.stackhpc.com/*` labels), the Secrets the driver writes
  (`magnum_capi_helm/driver.py`, 1.4.0: `<release>-cloud-credentials`,
  `<release>-ca`) and Helm's release record. The chart renders
  cluster.x-k8s.io/v1beta1 only: the v1beta1 line.

vexxhost magnum-cluster-api clusters (ClusterClass topologies) are adopted
as topologies: test_adopt_topology.py.

A capi-helm cluster running the version its rows say is adopted: the plan
lists what is owned, created and kept and replaces no machine; after the
switch its status stays, no Machine is replaced, a resize adds one machine
beside the old ones, `--undo` hands it back and a second adoption takes it
again, an upgrade replaces every machine with ours (as any upgrade does)
while its kubeadm configuration stays its own, and a delete leaves nothing
of it. A capi-helm cluster whose machines run another version than its rows
say (our upgrade would replace them) is refused with that reason, writing
no row and no object.
"""
import json
import subprocess
import time

import pytest

import rbac
from test_foreign import CAPI, HELM, create, ensure_namespace
from test_lifecycle import NAMESPACE, PROJECT, TEMPLATE, Env
from conftest import CONDUCTOR_BIN, mysql_admin

INFRA = "infrastructure.cluster.x-k8s.io/v1beta1"
KCP = "controlplane.cluster.x-k8s.io/v1beta1"
BOOT = "bootstrap.cluster.x-k8s.io/v1beta1"
KINDS = [(CAPI, "clusters"), (INFRA, "openstackclusters"), (KCP, "kubeadmcontrolplanes"),
         (CAPI, "machinedeployments"), (CAPI, "machines"), (CAPI, "machinehealthchecks"),
         (INFRA, "openstackmachinetemplates"), (BOOT, "kubeadmconfigtemplates"), ("v1", "secrets")]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    # The conductor (and its `adopt`) under its shipped identity (issue 53).
    tmp = tmp_path_factory.mktemp("adopt")
    with rbac.conductor_env("v1beta1", tmp) as (cp, kubeconfig):
        e = Env(tmp, "v1beta1", cp=cp, kubeconfig=kubeconfig)
        e.foreign = {}
        e.templates = {}
        try:
            yield e
        finally:
            e.close()


def adopt(env, cluster, *flags):
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", env.conf, "adopt", cluster, *flags],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def rows(env, driver, status="CREATE_COMPLETE", stack=None):
    if driver not in env.templates:
        env.templates[driver] = env.client("template", json.dumps(dict(TEMPLATE, name=driver, driver=driver)))["uuid"]
    template = env.templates[driver]
    uuid = env.client("python-create", template, json.dumps({"master_count": 1, "node_count": 2}))["uuid"]
    stack = stack or env.client("get", uuid)["cluster"]["stack_id"]
    for ng in ("default-master", "default-worker"):
        env.client("set", uuid, json.dumps({"stack_id": stack, "status": status}), ng,
                   json.dumps({"stack_id": stack, "status": status}))
    return uuid, template, stack


def capi_helm_cluster(env, key=HELM, version="v1.30.4"):
    """A cluster as magnum-capi-helm 1.4 and its chart leave it, its
    machines running `version`."""
    uuid, template, rel = rows(env, HELM)
    ns = NAMESPACE
    ensure_namespace(env, ns)
    chart = {"helm.sh/chart": "openstack-cluster-0.27.0", "capi.stackhpc.com/managed-by": "Helm",
             "capi.stackhpc.com/infrastructure-provider": "openstack", "capi.stackhpc.com/cluster": rel}

    def labels(component=None, **extra):
        out = dict(chart)
        if component:
            out["capi.stackhpc.com/component"] = component
        out.update(extra)
        return out

    driver_labels = {"magnum.openstack.org/project-id": PROJECT, "magnum.openstack.org/user-id": "u",
                     "magnum.openstack.org/cluster-uuid": uuid, "cluster.x-k8s.io/cluster-name": rel}
    creds = f"{rel}-cloud-credentials"
    create(env, "v1", "secrets", ns, {"apiVersion": "v1", "kind": "Secret",
                                      "metadata": {"name": creds, "labels": driver_labels},
                                      "stringData": {"clouds.yaml": "clouds: {}", "cacert": ""}})
    create(env, "v1", "secrets", ns, {"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
                                      "metadata": {"name": f"{rel}-ca", "labels": driver_labels},
                                      "stringData": {"tls.crt": "c", "tls.key": "k"}})
    create(env, "v1", "secrets", ns, {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                                      "metadata": {"name": f"sh.helm.release.v1.{rel}.v1",
                                                   "labels": {"owner": "helm", "name": rel, "status": "deployed",
                                                              "version": "1"}},
                                      "stringData": {"release": "H4sI"}})
    identity = {"name": creds, "cloudName": "openstack"}
    cp_mt, w_mt, w_kct = f"{rel}-control-plane-3f2a9c1d", f"{rel}-default-worker-8b7e6d5c", f"{rel}-default-worker-1c2d3e4f"
    create(env, INFRA, "openstackclusters", ns, {
        "apiVersion": INFRA, "kind": "OpenStackCluster",
        "metadata": {"name": rel, "labels": labels(), "annotations": {"helm.sh/resource-policy": "keep"}},
        "spec": {"identityRef": identity, "managedSecurityGroups": {"allowAllInClusterTraffic": True},
                 "externalNetwork": {"id": "3a1b2c3d-0000-4000-8000-000000000001"},
                 "managedSubnets": [{"cidr": "192.168.3.0/24", "dnsNameservers": ["8.8.8.8"]}],
                 "apiServerLoadBalancer": {"enabled": True}}})
    for name, flavor in ((cp_mt, "m1.medium"), (w_mt, "m1.small")):
        create(env, INFRA, "openstackmachinetemplates", ns, {
            "apiVersion": INFRA, "kind": "OpenStackMachineTemplate",
            "metadata": {"name": name, "labels": labels("control-plane" if name == cp_mt else "worker"),
                         "annotations": {"helm.sh/resource-policy": "keep"}},
            "spec": {"template": {"spec": {"identityRef": identity, "flavor": flavor, "sshKeyName": "mykey",
                                           "image": {"filter": {"name": "ubuntu-2204-kube-v1.30.4"}}}}}})
    node = {"kubeletExtraArgs": {"cloud-provider": "external"}, "name": "{{ local_hostname }}"}
    create(env, BOOT, "kubeadmconfigtemplates", ns, {
        "apiVersion": BOOT, "kind": "KubeadmConfigTemplate",
        "metadata": {"name": w_kct, "labels": labels("worker"), "annotations": {"helm.sh/resource-policy": "keep"}},
        "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": node}}}}})
    create(env, KCP, "kubeadmcontrolplanes", ns, {
        "apiVersion": KCP, "kind": "KubeadmControlPlane",
        "metadata": {"name": f"{rel}-control-plane", "labels": labels("control-plane")},
        "spec": {"replicas": 1, "version": version,
                 "machineTemplate": {"infrastructureRef": {"apiVersion": INFRA, "kind": "OpenStackMachineTemplate",
                                                           "name": cp_mt}},
                 "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                 "kubeadmConfigSpec": {"clusterConfiguration": {"apiServer": {"extraArgs": {"cloud-provider": "external"}}},
                                       "initConfiguration": {"nodeRegistration": node},
                                       "joinConfiguration": {"nodeRegistration": node}}}})
    worker = {"capi.stackhpc.com/cluster": rel, "capi.stackhpc.com/component": "worker",
              "capi.stackhpc.com/node-group": "default-worker"}
    create(env, CAPI, "machinedeployments", ns, {
        "apiVersion": CAPI, "kind": "MachineDeployment",
        "metadata": {"name": f"{rel}-default-worker",
                     "labels": labels("worker", **{"capi.stackhpc.com/node-group": "default-worker"})},
        "spec": {"clusterName": rel, "replicas": 2,
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                 "selector": {"matchLabels": dict(worker, **{"cluster.x-k8s.io/cluster-name": rel})},
                 "template": {"metadata": {"labels": worker},
                              "spec": {"clusterName": rel, "version": version,
                                       "bootstrap": {"configRef": {"apiVersion": BOOT, "kind": "KubeadmConfigTemplate",
                                                                   "name": w_kct}},
                                       "infrastructureRef": {"apiVersion": INFRA, "kind": "OpenStackMachineTemplate",
                                                             "name": w_mt},
                                       "nodeDrainTimeout": "5m0s"}}}})
    for name, component, match in ((f"{rel}-control-plane", "control-plane", {"cluster.x-k8s.io/control-plane": ""}),
                                   (f"{rel}-default-worker", "worker", worker)):
        create(env, CAPI, "machinehealthchecks", ns, {
            "apiVersion": CAPI, "kind": "MachineHealthCheck",
            "metadata": {"name": name, "labels": labels(component)},
            "spec": {"clusterName": rel, "selector": {"matchLabels": match}, "maxUnhealthy": 1,
                     "nodeStartupTimeout": "10m0s",
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "timeout": "5m0s"}]}})
    create(env, CAPI, "clusters", ns, {
        "apiVersion": CAPI, "kind": "Cluster", "metadata": {"name": rel, "labels": labels()},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["172.16.0.0/13"]},
                                    "services": {"cidrBlocks": ["172.24.0.0/13"]}},
                 "controlPlaneRef": {"apiVersion": KCP, "kind": "KubeadmControlPlane",
                                     "name": f"{rel}-control-plane", "namespace": ns},
                 "infrastructureRef": {"apiVersion": INFRA, "kind": "OpenStackCluster", "name": rel,
                                       "namespace": ns}}})
    env.foreign[key] = dict(uuid=uuid, template=template, stack=rel, ns=ns, cp_mt=cp_mt, w_mt=w_mt, w_kct=w_kct)
    # The (simulated) controllers make its machines: 1 control plane, 2
    # workers, running (settled: the snapshots below compare their specs).
    deadline = time.time() + 60
    while sum(m.get("status", {}).get("phase") == "Running"
              for m in env.sim.kube.items(CAPI, "machines", f"cluster.x-k8s.io/cluster-name={rel}", ns)) < 3:
        assert time.time() < deadline, "capi-sim did not make the capi-helm cluster's machines"
        time.sleep(0.3)
    return uuid


def snapshot(env, keys):
    """The rows of these foreign clusters and every object in their
    namespaces, as anyone but the simulated controllers would change them."""
    out = {}
    for driver, f in ((k, env.foreign[k]) for k in keys):
        got = env.client("get", f["uuid"])
        got.pop("x509keypairs")
        out[driver] = got
    for ns in sorted({env.foreign[k]["ns"] for k in keys}):
        for api, plural in KINDS:
            for o in env.sim.kube.items(api, plural, "", ns):
                m = o["metadata"]
                managers = sorted({e["manager"] for e in m.get("managedFields", [])})
                assert "magnum-conductor" not in managers, (plural, m["name"], managers)
                out[(ns, plural, m["name"])] = (m["uid"], m.get("labels"), m.get("annotations"),
                                                m.get("deletionTimestamp"), json.dumps(o.get("spec"), sort_keys=True))
    return out


def line_of(out, start):
    return next((line for line in out.splitlines() if line.strip().startswith(start)), None)


def machines(env, rel):
    return {m["metadata"]["name"]: m["metadata"]["uid"]
            for m in env.sim.kube.items(CAPI, "machines", f"cluster.x-k8s.io/cluster-name={rel}", NAMESPACE)
            if not m["metadata"].get("deletionTimestamp")}


def twin_row(env, uuid):
    db = env.db_url.split("?")[0].rsplit("/", 1)[1]
    with mysql_admin() as c, c.cursor() as cur:
        cur.execute(f"SELECT name, driver, hidden FROM `{db}`.cluster_template WHERE uuid=%s", (uuid,))
        return cur.fetchone()


def test_refused_plans_say_why_and_change_nothing(env):
    old = capi_helm_cluster(env, key="old", version="v1.29.9")
    rel = env.foreign["old"]["stack"]
    before = snapshot(env, ["old"])

    rc, out, err = adopt(env, old, "--dry-run")
    assert rc == 1, (out, err)
    assert f"cluster {old} ({rel}), driver {HELM}, CAPI Cluster in namespace {NAMESPACE}" in out, out
    # Its rows say v1.30.4, its machines run v1.29.9: ours would replace them.
    cp = line_of(out, f"KubeadmControlPlane {rel}-control-plane:")
    assert cp and "1 machine(s)" in cp and "Kubernetes version v1.29.9 -> v1.30.4" in cp, out
    assert f"machine template {env.foreign['old']['cp_mt']} -> {rel}-control-plane-" in cp, cp
    md = line_of(out, f"MachineDeployment {rel}-default-worker:")
    assert md and "2 machine(s)" in md and "Kubernetes version v1.29.9 -> v1.30.4" in md, out
    assert out.strip().endswith("refused: 3 machine(s) would be replaced (an adoption replaces none)"), out
    # Without --dry-run: the same refusal.
    assert adopt(env, old)[:2] == (rc, out)

    assert snapshot(env, ["old"]) == before

    # A busy cluster is not adopted either.
    env.client("set", old, json.dumps({"status": "UPDATE_IN_PROGRESS"}))
    rc, out, _ = adopt(env, old, "--dry-run")
    assert rc == 1 and "it is busy (status UPDATE_IN_PROGRESS)" in out, out


def test_adopt_resize_undo_upgrade_delete(env):
    uuid = capi_helm_cluster(env)
    f = env.foreign[HELM]
    rel = f["stack"]
    born = machines(env, rel)
    assert len(born) == 3

    rc, out, err = adopt(env, uuid, "--dry-run")
    assert rc == 0, (out, err)
    own = out.split("own (")[1].split("create (")[0] if "create (" in out else out.split("own (")[1].split("keep (")[0]
    for o in (f"Cluster {rel}", f"OpenStackCluster {rel}", f"KubeadmControlPlane {rel}-control-plane",
              f"MachineDeployment {rel}-default-worker"):
        assert o in own, out
    for o, why in ((f"Secret {rel}-ca", "certificate authorities"), (f"Secret {rel}-cloud-credentials", "credential"),
                   (f"Secret sh.helm.release.v1.{rel}.v1", "Helm's record"),
                   (f"MachineHealthCheck {rel}-default-worker", "health check"),
                   (f"OpenStackMachineTemplate {f['w_mt']}", "its machines were made from")):
        line = line_of(out, o + ":")
        assert line and why in line, (o, out)
    assert "machines that would be replaced" not in out, out
    assert out.strip().endswith("adoptable: no machine would be replaced"), out
    assert env.client("get", uuid)["cluster"]["cluster_template_id"] == f["template"], "a dry run switches nothing"

    rc, out, err = adopt(env, uuid)
    assert rc == 0 and "adopted: " in out, (out, err)
    twin = env.client("get", uuid)["cluster"]["cluster_template_id"]
    assert twin != f["template"]
    assert twin_row(env, twin) == (f"{HELM}-adopted", "k8s_capi_rust", 1), twin_row(env, twin)
    cl = env.sim.kube.get(f"/apis/{CAPI}/namespaces/{NAMESPACE}/clusters/{rel}")
    assert cl["metadata"]["annotations"]["magnum.openstack.org/adopted-from"] == HELM
    assert cl["metadata"]["annotations"]["magnum.openstack.org/adopted-template"] == f["template"]
    assert cl["metadata"]["labels"]["magnum.openstack.org/cluster-uuid"] == uuid
    md = env.sim.kube.get(f"/apis/{CAPI}/namespaces/{NAMESPACE}/machinedeployments/{rel}-default-worker")
    assert md["metadata"]["labels"]["magnum.openstack.org/nodegroup"] == "default-worker"
    # Ours now: a call is served, not refused; nothing rolls.
    assert env.client("call", "get_ca_certificate", uuid) == {"ok": True}
    time.sleep(3)
    assert machines(env, rel) == born, "adopting replaced a machine"
    assert env.client("get", uuid)["cluster"]["status"] == "CREATE_COMPLETE"
    rc, out, _ = adopt(env, uuid, "--dry-run")
    assert rc == 0 and "already this conductor's" in out, out

    # Resize: one machine more, the old ones stay, the group keeps its templates.
    env.client("resize", uuid, "3", "[]")
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] == "UPDATE_COMPLETE", timeout=120)
    now = machines(env, rel)
    assert set(born.items()) <= set(now.items()) and len(now) == 4, (born, now, seen)
    md = env.sim.kube.get(f"/apis/{CAPI}/namespaces/{NAMESPACE}/machinedeployments/{rel}-default-worker")
    assert md["spec"]["template"]["spec"]["infrastructureRef"]["name"] == f["w_mt"]
    assert md["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"] == f["w_kct"]
    assert md["spec"]["replicas"] == 3

    # A new node group is ours through and through, beside the adopted one;
    # deleting it takes only its machines.
    env.client("ng-create", uuid, json.dumps({"name": "extra", "node_count": 1}))

    def ng(g, name):
        return next((n for n in g["nodegroups"] if n["name"] == name), None)

    got, seen = env.wait(uuid, lambda g: ng(g, "extra") is not None and ng(g, "extra")["status"] == "CREATE_COMPLETE"
                         and g["cluster"]["status"] == "UPDATE_COMPLETE")
    extra = env.sim.kube.get(f"/apis/{CAPI}/namespaces/{NAMESPACE}/machinedeployments/{rel}-extra")
    assert extra["spec"]["selector"]["matchLabels"]["magnum.openstack.org/nodegroup"] == "extra"
    assert set(now.items()) <= set(machines(env, rel).items()) and len(machines(env, rel)) == 5
    env.client("ng-delete", uuid, "extra")
    got, seen = env.wait(uuid, lambda g: ng(g, "extra") is None and g["cluster"]["status"] == "UPDATE_COMPLETE")
    deadline = time.time() + 60
    while machines(env, rel) != now:
        assert time.time() < deadline, (now, machines(env, rel))
        time.sleep(0.5)

    # Undo, then adopt again (the same twin template).
    rc, out, err = adopt(env, uuid, "--undo")
    assert rc == 0 and "undone" in out, (out, err)
    assert env.client("get", uuid)["cluster"]["cluster_template_id"] == f["template"]
    got = env.client("call", "cluster_update", uuid)
    assert got.get("error") == "ClusterDriverNotSupported", got
    rc, out, err = adopt(env, uuid)
    assert rc == 0, (out, err)
    assert env.client("get", uuid)["cluster"]["cluster_template_id"] == twin

    # Upgrade: every machine replaced by ours; the kubeadm configuration is its own.
    kcp_before = env.sim.kube.get(f"/apis/{KCP}/namespaces/{NAMESPACE}/kubeadmcontrolplanes/{rel}-control-plane")
    t131 = env.client("template", json.dumps(dict(TEMPLATE, name="k8s-v1.31", image_id="ubuntu-2204-kube-v1.31.2",
                                                  labels={"kube_tag": "v1.31.2", "auto_healing_enabled": "true"})))["uuid"]
    r = env.client("upgrade", uuid, t131, "1")
    assert "error" not in r, r
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] in ("UPDATE_COMPLETE", "UPDATE_FAILED")
                         and g["cluster"]["cluster_template_id"] == t131, timeout=240)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    after = machines(env, rel)
    assert len(after) == 4 and not set(after) & set(now), (now, after)
    kcp = env.sim.kube.get(f"/apis/{KCP}/namespaces/{NAMESPACE}/kubeadmcontrolplanes/{rel}-control-plane")
    assert kcp["spec"]["version"] == "v1.31.2"
    assert kcp["spec"]["kubeadmConfigSpec"] == kcp_before["spec"]["kubeadmConfigSpec"]
    assert kcp["spec"]["machineTemplate"]["infrastructureRef"]["name"] != f["cp_mt"]
    rc, out, err = adopt(env, uuid, "--undo")
    assert rc == 2 and "after its adoption (an upgrade)" in err, (out, err)

    # Delete: nothing of it is left.
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None, timeout=120)
    deadline = time.time() + 60
    while True:
        left = [(plural, o["metadata"]["name"]) for api, plural in KINDS
                for sel in (f"capi.stackhpc.com/cluster={rel}", f"magnum.openstack.org/cluster-uuid={uuid}",
                            f"cluster.x-k8s.io/cluster-name={rel}")
                for o in env.sim.kube.items(api, plural, sel, NAMESPACE)]
        if not left:
            break
        assert time.time() < deadline, f"left behind: {sorted(set(left))}"
        time.sleep(0.5)


def test_ours_and_unknown_clusters(env):
    created = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    env.wait(created, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    rc, out, _ = adopt(env, created, "--dry-run")
    assert rc == 0 and "already this conductor's" in out, out
    rc, out, err = adopt(env, "no-such-cluster")
    assert rc == 2 and "no cluster is named no-such-cluster" in err, (out, err)
    env.client("delete", created)
    env.wait(created, lambda g: g["cluster"] is None)
