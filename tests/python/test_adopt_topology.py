"""`magnum-conductor adopt` of vexxhost magnum-cluster-api 0.38 clusters:
CAPI Clusters run by a ClusterClass topology, taken over as topologies.

On a real apiserver (v1beta1 CRDs: the driver writes v1beta1), capi-sim's
topology controller making the control plane and MachineDeployments from
the class (tests/capi-sim/src/controllers/topology.rs, after cluster-api
`exp/topology/desiredstate/desired_state.go`) and its other controllers the
Machines. The driver's objects are built from its code (vexxhost/
magnum-cluster-api 0.38.1, cited per object below): they cannot be
rendered by the driver itself here (it needs Nova, Glance, Cinder and
Keystone to build a Cluster).

A cluster whose topology says what its rows say is adopted writing nothing
CAPI acts on (no Machine replaced). Then, through Magnum's own client
paths: a resize changes the entry's replicas only (the old machines stay);
a new nodegroup is a new topology entry, and deleting it removes the entry
and its machines; `--undo` hands the cluster back and a second adoption
takes it again; an upgrade writes the topology's version and image in one
write and CAPI replaces the machines; a delete leaves nothing of it (its
driver's Secrets and ClusterResourceSets included). A cluster whose
topology disagrees with its rows is refused, with the reasons, writing
nothing.
"""
import json
import os
import subprocess
import sys
import time

import pytest

import rbac
from test_adopt import adopt, line_of, twin_row
from test_foreign import CAPI, VEXX, create, ensure_namespace
from test_lifecycle import HERE, TEMPLATE, Env

NS = "magnum-system"
CLASS = "magnum-v0.38.1"
INFRA = "infrastructure.cluster.x-k8s.io/v1beta1"
KCP = "controlplane.cluster.x-k8s.io/v1beta1"
BOOT = "bootstrap.cluster.x-k8s.io/v1beta1"
ADDONS = "addons.cluster.x-k8s.io/v1beta1"
IMAGE_1 = "3a1b2c3d-0000-4000-8000-000000000130"
IMAGE_2 = "3a1b2c3d-0000-4000-8000-000000000131"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    # The conductor (and its `adopt`) under its shipped identity (issue 53).
    tmp = tmp_path_factory.mktemp("adopt-topology")
    with rbac.conductor_env("v1beta1", tmp, audited=True) as (cp, kubeconfig):
        e = Env(tmp, "v1beta1", cp=cp, kubeconfig=kubeconfig)
        try:
            e.vexx_template = None
            ensure_namespace(e, NS)
            cluster_class(e)
            e.cp = cp
            yield e
        finally:
            e.close()


def cluster_class(env):
    """The shared ClusterClass and its four templates, all named
    `magnum-<version>` in magnum-system (src/resources.rs
    `ClusterClassBuilder::build`: one control-plane class with an MHC, one
    `default-worker` class; src/features/mod.rs: the templates' fixed
    content, abridged), with the `images` feature's variable and patch
    (src/features/images.rs: `imageUUID` -> the machine templates'
    `/spec/template/spec/image/id`) and the `flavors` feature's variable."""
    ref = lambda api, kind: {"apiVersion": api, "kind": kind, "name": CLASS, "namespace": NS}  # noqa: E731
    mhc = {"maxUnhealthy": "80%", "unhealthyConditions": [
        {"type": "Ready", "status": "False", "timeout": "5m0s"},
        {"type": "Ready", "status": "Unknown", "timeout": "5m0s"}]}
    node = {"name": "{{ local_hostname }}", "kubeletExtraArgs": {"cloud-provider": "external"}}
    create(env, KCP, "kubeadmcontrolplanetemplates", NS, {
        "apiVersion": KCP, "kind": "KubeadmControlPlaneTemplate", "metadata": {"name": CLASS},
        "spec": {"template": {"spec": {"rolloutBefore": {"certificatesExpiryDays": 21}, "kubeadmConfigSpec": {
            "clusterConfiguration": {"controllerManager": {"extraArgs": {"cloud-provider": "external",
                                                                          "profiling": "false"}}},
            "initConfiguration": {"nodeRegistration": node}, "joinConfiguration": {"nodeRegistration": node},
            "preKubeadmCommands": ["rm /var/lib/etcd/lost+found -rf"]}}}}})
    create(env, BOOT, "kubeadmconfigtemplates", NS, {
        "apiVersion": BOOT, "kind": "KubeadmConfigTemplate", "metadata": {"name": CLASS},
        "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": node}}}}})
    create(env, INFRA, "openstackmachinetemplates", NS, {
        "apiVersion": INFRA, "kind": "OpenStackMachineTemplate", "metadata": {"name": CLASS},
        "spec": {"template": {"spec": {"flavor": "PLACEHOLDER", "image": {"id": "00000000-0000-0000-0000-000000000000"},
                                       "identityRef": {"name": "PLACEHOLDER", "cloudName": "default"}}}}})
    create(env, INFRA, "openstackclustertemplates", NS, {
        "apiVersion": INFRA, "kind": "OpenStackClusterTemplate", "metadata": {"name": CLASS},
        "spec": {"template": {"spec": {"identityRef": {"name": "PLACEHOLDER", "cloudName": "default"},
                                       "managedSecurityGroups": {"allowAllInClusterTraffic": True}}}}})
    osmt = "OpenStackMachineTemplate"
    create(env, CAPI, "clusterclasses", NS, {
        "apiVersion": CAPI, "kind": "ClusterClass", "metadata": {"name": CLASS},
        "spec": {
            "controlPlane": {"ref": ref(KCP, "KubeadmControlPlaneTemplate"), "machineHealthCheck": mhc,
                             "machineInfrastructure": {"ref": ref(INFRA, osmt)},
                             "nodeVolumeDetachTimeout": "5m0s"},
            "infrastructure": {"ref": ref(INFRA, "OpenStackClusterTemplate")},
            "workers": {"machineDeployments": [{
                "class": "default-worker", "machineHealthCheck": mhc, "nodeVolumeDetachTimeout": "5m0s",
                "template": {"bootstrap": {"ref": ref(BOOT, "KubeadmConfigTemplate")},
                             "infrastructure": {"ref": ref(INFRA, osmt)}}}]},
            "variables": [{"name": "imageUUID", "required": True,
                           "schema": {"openAPIV3Schema": {"type": "string"}}},
                          {"name": "flavor", "required": True, "schema": {"openAPIV3Schema": {"type": "string"}}}],
            "patches": [{"name": "images", "definitions": [{
                "selector": {"apiVersion": INFRA, "kind": osmt,
                             "matchResources": {"controlPlane": True,
                                                "machineDeploymentClass": {"names": ["default-worker"]}}},
                "jsonPatches": [{"op": "add", "path": "/spec/template/spec/image/id",
                                 "valueFrom": {"variable": "imageUUID"}}]}]}]}})


def entry(name, replicas):
    """A topology entry as `resources.mutate_machine_deployment` makes a
    new one (boot volume and server group overrides left out: they come
    from Cinder and Nova there)."""
    return {"class": "default-worker", "name": name, "replicas": replicas,
            "machineHealthCheck": {"enable": True}, "nodeVolumeDetachTimeout": "5m0s",
            "metadata": {"labels": {"node-role.kubernetes.io/worker": "",
                                    "node.cluster.x-k8s.io/nodegroup": name}, "annotations": {}},
            "variables": {"overrides": [{"name": "flavor", "value": "m1.small"},
                                        {"name": "imageRepository", "value": ""},
                                        {"name": "imageUUID", "value": IMAGE_1}]}}


def vexx_cluster(env, version="v1.30.4"):
    """Rows as Magnum's conductor handler writes them for the driver
    (`k8s_cluster_api_ubuntu`), and the driver's objects for them."""
    if env.vexx_template is None:
        env.vexx_template = env.client("template", json.dumps(dict(
            TEMPLATE, name="vexx", driver=VEXX, image_id=IMAGE_1)))["uuid"]
    uuid = env.client("python-create", env.vexx_template,
                      json.dumps({"master_count": 1, "node_count": 2}))["uuid"]
    # `utils.generate_cluster_api_name`: "kube-" + 5 random [a-z0-9].
    stack = "kube-" + uuid.replace("-", "")[:5]
    for ng in ("default-master", "default-worker"):
        env.client("set", uuid, json.dumps({"stack_id": stack, "status": "CREATE_COMPLETE"}), ng,
                   json.dumps({"stack_id": stack, "status": "CREATE_COMPLETE"}))
    by_uuid = {"cluster-uuid": uuid}
    # resources.CloudConfigSecret: `<stack>-cloud-config`, labelled cluster-uuid.
    create(env, "v1", "secrets", NS, {"apiVersion": "v1", "kind": "Secret",
                                      "metadata": {"name": f"{stack}-cloud-config", "labels": by_uuid},
                                      "stringData": {"clouds.yaml": "clouds: {}\n", "cacert": ""}})
    # resources.CertificateAuthoritySecret and its four kinds.
    for suffix in ("ca", "etcd", "proxy", "sa"):
        create(env, "v1", "secrets", NS, {"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
                                          "metadata": {"name": f"{stack}-{suffix}",
                                                       "labels": {"cluster.x-k8s.io/cluster-name": stack}},
                                          "stringData": {"tls.crt": "c", "tls.key": "k"}})
    # resources.LegacyClusterResourcesSecret (named by the uuid) and
    # CloudProviderClusterResourcesSecret, each with its ClusterResourceSet
    # selecting the Cluster by its cluster-uuid label.
    for name, strategy in ((uuid, "ApplyOnce"), (f"{stack}-cloud-provider", "Reconcile")):
        create(env, "v1", "secrets", NS, {"apiVersion": "v1", "kind": "Secret",
                                          "type": "addons.cluster.x-k8s.io/resource-set",
                                          "metadata": {"name": name, "labels": by_uuid},
                                          "stringData": {"manifests.yaml": "# addons\n"}})
        create(env, ADDONS, "clusterresourcesets", NS, {
            "apiVersion": ADDONS, "kind": "ClusterResourceSet", "metadata": {"name": name, "labels": by_uuid},
            "spec": {"clusterSelector": {"matchLabels": by_uuid}, "strategy": strategy,
                     "resources": [{"name": name, "kind": "Secret"}]}})
    # resources.ClusterAutoscalerHelmRelease (auto_scaling_enabled): release
    # `<stack>` of the bundled cluster-autoscaler chart in magnum-system; its
    # Deployment and Helm's record, labelled as the chart and Helm label them
    # (charts/cluster-autoscaler/templates/_helpers.tpl: app.kubernetes.io/instance).
    chart = {"app.kubernetes.io/instance": stack, "app.kubernetes.io/name": "clusterapi-cluster-autoscaler"}
    create(env, "apps/v1", "deployments", NS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"{stack}-autoscaler", "labels": chart},
        "spec": {"replicas": 0, "selector": {"matchLabels": chart},
                 "template": {"metadata": {"labels": chart},
                              "spec": {"containers": [{"name": "autoscaler", "image": "registry.k8s.io/autoscaling/"
                                                       "cluster-autoscaler:v1.30.2"}]}}}})
    create(env, "v1", "secrets", NS, {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                                      "metadata": {"name": f"sh.helm.release.v1.{stack}.v1",
                                                   "labels": {"owner": "helm", "name": stack, "status": "deployed",
                                                              "version": "1"}},
                                      "stringData": {"release": "H4sI"}})
    # resources.Cluster.get_object: labels, network, the topology.
    create(env, CAPI, "clusters", NS, {
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": stack, "labels": dict(by_uuid, cni="calico-v3.29.2")},
        "spec": {"clusterNetwork": {"serviceDomain": "cluster.local", "pods": {"cidrBlocks": ["10.100.0.0/16"]},
                                    "services": {"cidrBlocks": ["10.254.0.0/16"]}},
                 "topology": {"class": CLASS, "version": version,
                              "controlPlane": {"metadata": {"labels": {"node-role.kubernetes.io/master": ""}},
                                               "replicas": 1, "machineHealthCheck": {"enable": True}},
                              "workers": {"machineDeployments": [entry("default-worker", 2)]},
                              "variables": [{"name": "apiServerLoadBalancer", "value": {"enabled": True}},
                                            {"name": "flavor", "value": "m1.small"},
                                            {"name": "controlPlaneFlavor", "value": "m1.medium"},
                                            {"name": "imageUUID", "value": IMAGE_1},
                                            {"name": "clusterIdentityRefName", "value": f"{stack}-cloud-config"}]}}})
    # CAPI's topology controller (simulated) makes the rest: 1 + 2 machines.
    deadline = time.time() + 90
    while len(running(env, stack)) < 3:
        assert time.time() < deadline, f"capi-sim did not make the topology's machines: {machines(env, stack)}"
        time.sleep(0.3)
    return uuid, stack


def running(env, stack):
    return [m for m in env.sim.kube.items(CAPI, "machines", f"cluster.x-k8s.io/cluster-name={stack}", NS)
            if m.get("status", {}).get("phase") == "Running"]


def machines(env, stack):
    return {m["metadata"]["name"]: m["metadata"]["uid"]
            for m in env.sim.kube.items(CAPI, "machines", f"cluster.x-k8s.io/cluster-name={stack}", NS)
            if not m["metadata"].get("deletionTimestamp")}


def capi_cluster(env, stack):
    return env.sim.kube.get(f"/apis/{CAPI}/namespaces/{NS}/clusters/{stack}")


def entries(env, stack):
    return {e["name"]: e for e in capi_cluster(env, stack)["spec"]["topology"]["workers"]["machineDeployments"]}


def deployments(env, stack):
    return {md["metadata"]["labels"]["topology.cluster.x-k8s.io/deployment-name"]: md
            for md in env.sim.kube.items(CAPI, "machinedeployments", f"cluster.x-k8s.io/cluster-name={stack}", NS)
            if not md["metadata"].get("deletionTimestamp")}


def state(env, uuid, stack):
    """The rows and every object in magnum-system, as anyone but the
    simulated controllers would change them."""
    got = env.client("get", uuid)
    got.pop("x509keypairs")
    out = {"rows": got}
    for api, plural in ((CAPI, "clusters"), (KCP, "kubeadmcontrolplanes"), (CAPI, "machinedeployments"),
                        (CAPI, "machines"), (INFRA, "openstackmachinetemplates"), ("v1", "secrets"),
                        (ADDONS, "clusterresourcesets")):
        for o in env.sim.kube.items(api, plural, "", NS):
            m = o["metadata"]
            managers = sorted({e["manager"] for e in m.get("managedFields", [])})
            assert "magnum-conductor" not in managers, (plural, m["name"], managers)
            out[(plural, m["name"])] = (m["uid"], m.get("labels"), m.get("annotations"),
                                        json.dumps(o.get("spec"), sort_keys=True))
    return out


def test_a_topology_that_disagrees_with_its_rows_is_refused_and_nothing_is_written(env):
    uuid, stack = vexx_cluster(env, version="v1.29.9")
    before = state(env, uuid, stack)
    rc, out, err = adopt(env, uuid, "--dry-run")
    assert rc == 1, (out, err)
    assert f"driver {VEXX}, CAPI Cluster in namespace {NS}" in out, out
    assert "its topology runs Kubernetes v1.29.9 and its rows say v1.30.4" in out, out
    rc2, out2, _ = adopt(env, uuid)
    assert (rc2, out2) == (rc, out)
    assert state(env, uuid, stack) == before
    assert env.client("call", "cluster_update", uuid).get("error") == "ClusterDriverNotSupported"


def test_adopt_resize_nodegroups_undo_upgrade_delete(env):
    uuid, stack = vexx_cluster(env)
    born = machines(env, stack)
    md_before = deployments(env, stack)["default-worker"]

    rc, out, err = adopt(env, uuid, "--dry-run")
    assert rc == 0, (out, err)
    assert line_of(out, f"Cluster {stack}") is not None, out
    kcp = capi_cluster(env, stack)["spec"]["controlPlaneRef"]["name"]
    for o, why in ((f"KubeadmControlPlane {kcp}", f"made by CAPI from the topology (ClusterClass {CLASS})"),
                   (f"MachineDeployment {md_before['metadata']['name']}", "made by CAPI from the topology"),
                   (f"Secret {stack}-ca", "certificate authorities"), (f"Secret {stack}-cloud-config", "credential"),
                   (f"ClusterResourceSet {uuid}", "its driver's addons"), ("Machine (3)", "kept"),
                   (f"Deployment {stack}-autoscaler", "cluster autoscaler")):
        line = line_of(out, o + ":")
        assert line and why in line, (o, out)
    assert out.strip().endswith("adoptable: no machine would be replaced"), out
    assert env.client("get", uuid)["cluster"]["cluster_template_id"] == env.vexx_template

    before = state(env, uuid, stack)
    rc, out, err = adopt(env, uuid)
    assert rc == 0 and "adopted: " in out, (out, err)
    row = env.client("get", uuid)["cluster"]
    twin = row["cluster_template_id"]
    assert twin_row(env, twin) == ("vexx-adopted", "k8s_capi_rust", 1), twin_row(env, twin)
    assert row["labels"]["capi_adopted_namespace"] == NS, row["labels"]
    cl = capi_cluster(env, stack)
    assert cl["metadata"]["annotations"]["magnum.openstack.org/adopted-from"] == VEXX
    assert cl["metadata"]["labels"]["magnum.openstack.org/cluster-uuid"] == uuid
    assert cl["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == stack
    assert json.dumps(cl["spec"], sort_keys=True) == before[("clusters", stack)][3], "adoption wrote the spec"
    for name in (f"{stack}-cloud-config", f"{stack}-cloud-provider", uuid):
        s = env.sim.kube.get(f"/api/v1/namespaces/{NS}/secrets/{name}")
        assert s["metadata"]["labels"]["magnum.openstack.org/cluster-uuid"] == uuid, name
    # Ours now: a call is served; nothing rolls; the status stays.
    assert env.client("call", "get_ca_certificate", uuid) == {"ok": True}
    time.sleep(3)
    assert machines(env, stack) == born, "adopting replaced a machine"
    assert env.client("get", uuid)["cluster"]["status"] == "CREATE_COMPLETE"
    rc, out, _ = adopt(env, uuid, "--dry-run")
    assert rc == 0 and "already this conductor's" in out, out

    # Resize: the entry's replicas, nothing else; the old machines stay.
    env.client("resize", uuid, "3", "[]")
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] == "UPDATE_COMPLETE", timeout=120)
    now = machines(env, stack)
    assert set(born.items()) <= set(now.items()) and len(now) == 4, (born, now, seen)
    e = entries(env, stack)["default-worker"]
    assert e == dict(entry("default-worker", 3)), e
    md = deployments(env, stack)["default-worker"]
    assert md["metadata"]["name"] == md_before["metadata"]["name"]
    assert md["spec"]["template"]["spec"] == md_before["spec"]["template"]["spec"]

    # The premise of the conductor's guarded writes, on the real apiserver:
    # a JSON patch whose `test` no longer holds is refused (422), whole.
    stale = [{"op": "test", "path": "/spec/topology/workers/machineDeployments/0/name", "value": "gone"},
             {"op": "replace", "path": "/spec/topology/workers/machineDeployments/0/replicas", "value": 9}]
    with pytest.raises(AssertionError, match="422"):
        env.sim.kube.request("PATCH", f"/apis/{CAPI}/namespaces/{NS}/clusters/{stack}", stale,
                             "application/json-patch+json")
    assert entries(env, stack)["default-worker"]["replicas"] == 3

    # A new nodegroup is a new entry; deleting it takes its entry and machines.
    env.client("ng-create", uuid, json.dumps({"name": "extra", "node_count": 1}))

    def ng(g, name):
        return next((n for n in g["nodegroups"] if n["name"] == name), None)

    got, seen = env.wait(uuid, lambda g: ng(g, "extra") is not None and ng(g, "extra")["status"] == "CREATE_COMPLETE"
                         and g["cluster"]["status"] == "UPDATE_COMPLETE", timeout=120)
    extra = entries(env, stack)["extra"]
    assert extra["class"] == "default-worker" and extra["replicas"] == 1, extra
    assert extra["metadata"]["labels"]["node.cluster.x-k8s.io/nodegroup"] == "extra", extra
    assert {"name": "imageUUID", "value": IMAGE_1} in extra["variables"]["overrides"], extra
    assert "extra" in deployments(env, stack)
    assert set(now.items()) <= set(machines(env, stack).items()) and len(machines(env, stack)) == 5
    env.client("ng-delete", uuid, "extra")
    got, seen = env.wait(uuid, lambda g: ng(g, "extra") is None and g["cluster"]["status"] == "UPDATE_COMPLETE",
                         timeout=120)
    assert set(entries(env, stack)) == {"default-worker"}
    deadline = time.time() + 60
    while machines(env, stack) != now:
        assert time.time() < deadline, (now, machines(env, stack))
        time.sleep(0.5)

    # Undo, then adopt again (the same twin template).
    rc, out, err = adopt(env, uuid, "--undo")
    assert rc == 0 and "undone" in out, (out, err)
    row = env.client("get", uuid)["cluster"]
    assert row["cluster_template_id"] == env.vexx_template and "capi_adopted_namespace" not in row["labels"]
    assert env.client("call", "cluster_update", uuid).get("error") == "ClusterDriverNotSupported"
    rc, out, err = adopt(env, uuid)
    assert rc == 0, (out, err)
    assert env.client("get", uuid)["cluster"]["cluster_template_id"] == twin

    # An upgrade to a template naming its image is refused before anything
    # is written (the topology takes an image id).
    named = env.client("template", json.dumps(dict(TEMPLATE, name="k8s-v1.31-named",
                                                   image_id="ubuntu-2204-kube-v1.31.2",
                                                   labels={"kube_tag": "v1.31.2"})))["uuid"]
    r = env.client("upgrade", uuid, named, "1")
    assert r.get("error") == "InvalidClusterTemplateForUpgrade" and "Glance id" in json.dumps(r), r
    assert env.client("get", uuid)["cluster"]["status"] == "UPDATE_COMPLETE"

    # Upgrade: version and image in the topology; CAPI replaces every machine.
    t131 = env.client("template", json.dumps(dict(TEMPLATE, name="k8s-v1.31", image_id=IMAGE_2,
                                                  labels={"kube_tag": "v1.31.2"})))["uuid"]
    r = env.client("upgrade", uuid, t131, "1")
    assert "error" not in r, r
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] in ("UPDATE_COMPLETE", "UPDATE_FAILED")
                         and g["cluster"]["cluster_template_id"] == t131, timeout=240)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    topo = capi_cluster(env, stack)["spec"]["topology"]
    assert topo["version"] == "v1.31.2" and topo["class"] == CLASS, topo
    assert {"name": "imageUUID", "value": IMAGE_2} in topo["variables"], topo["variables"]
    assert {"name": "imageUUID", "value": IMAGE_2} in entries(env, stack)["default-worker"]["variables"]["overrides"]
    after = machines(env, stack)
    assert len(after) == 4 and not set(after) & set(now), (now, after)
    assert got["cluster"]["labels"]["capi_adopted_namespace"] == NS
    assert {n["name"]: n["node_count"] for n in got["nodegroups"]} == {"default-master": 1, "default-worker": 3}

    # Delete: nothing of it is left, its driver's Secrets and addons included.
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    deadline = time.time() + 60
    while True:
        left = [(plural, o["metadata"]["name"])
                for api, plural in ((CAPI, "clusters"), (KCP, "kubeadmcontrolplanes"), (CAPI, "machinedeployments"),
                                    (CAPI, "machines"), ("v1", "secrets"), (ADDONS, "clusterresourcesets"),
                                    ("apps/v1", "deployments"))
                for sel in (f"cluster-uuid={uuid}", f"magnum.openstack.org/cluster-uuid={uuid}",
                            f"cluster.x-k8s.io/cluster-name={stack}", f"app.kubernetes.io/instance={stack}",
                            f"owner=helm,name={stack}")
                for o in env.sim.kube.items(api, plural, sel, NS)]
        if not left:
            break
        assert time.time() < deadline, f"left behind: {sorted(set(left))}"
        time.sleep(0.5)
    assert env.sim.kube.get(f"/apis/{CAPI}/namespaces/{NS}/clusterclasses/{CLASS}") is not None, \
        "the shared ClusterClass is the driver's, not the cluster's"


def test_a_create_cannot_place_itself_in_another_drivers_namespace(env):
    t = env.client("template", json.dumps(dict(TEMPLATE, name="sneaky",
                                               labels={"kube_tag": "v1.30.4", "capi_adopted_namespace": NS})))["uuid"]
    uuid = env.client("create", t, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    got, _ = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_FAILED", got["cluster"]
    assert "set by `magnum-conductor adopt` only" in got["cluster"]["status_reason"], got["cluster"]
    assert env.sim.kube.items(CAPI, "clusters", f"magnum.openstack.org/cluster-uuid={uuid}") == []
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None)


@pytest.mark.parametrize("point", ["resize.after_rows", "upgrade.after_rows"])
def test_an_operation_killed_after_its_rows_finishes_through_the_topology(env, point):
    """kill -9 once the rows ask for the change, before the topology says
    it (as test_day2_restart.py does for our own clusters): the next
    conductor writes the topology (a redelivered request, or the status
    pass's repair) and the operation completes, nothing replaced twice."""
    from test_lifecycle_restart import died
    uuid, stack = vexx_cluster(env)
    rc, out, err = adopt(env, uuid)
    assert rc == 0, (out, err)
    born = machines(env, stack)
    t = env.client("template", json.dumps(dict(TEMPLATE, name=f"k8s-v1.31-{uuid[:8]}", image_id=IMAGE_2,
                                               labels={"kube_tag": "v1.31.2"})))["uuid"]
    env.restart(point)
    call = None
    if point.startswith("resize"):
        env.client("resize", uuid, "3", "[]")
    else:
        # A call: its reply never comes from the killed conductor.
        call = subprocess.Popen([sys.executable, os.path.join(HERE, "lifecycle_client.py"), env.client_conf,
                                 "upgrade", uuid, t, "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def done(g):
        return (g["cluster"]["status"] in ("UPDATE_COMPLETE", "UPDATE_FAILED")
                and all(not n["status"].endswith("_IN_PROGRESS") for n in g["nodegroups"]))

    try:
        died(env)
        env.restart()
        got, seen = env.wait(uuid, done, timeout=240)
    finally:
        if call is not None:
            call.kill()
            call.wait()
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", seen
    topo = capi_cluster(env, stack)["spec"]["topology"]
    now = machines(env, stack)
    if point.startswith("resize"):
        assert entries(env, stack)["default-worker"]["replicas"] == 3
        assert set(born.items()) <= set(now.items()) and len(now) == 4, (born, now)
    else:
        assert topo["version"] == "v1.31.2", topo
        assert {"name": "imageUUID", "value": IMAGE_2} in topo["variables"]
        assert len(now) == 3 and not set(now) & set(born), (born, now)
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)


def test_the_shipped_identity_refused_nothing_and_its_topology_rules_were_used(env):
    """The conductor ran this module under its shipped identity, the
    apiserver auditing it: nothing refused, and the rules of its role that
    only adopted topologies use (rbac.ELSEWHERE) were used here, so
    removing one fails a test above with the apiserver's 403
    (MC_RBAC_DROP=cluster.x-k8s.io/clusters:get). Judged over the whole
    module: run it whole."""
    if rbac.DISCOVER:
        pytest.skip("discovering")
    conductor = rbac.Identity("magnum-conductor")
    seen, refused = conductor.used(env.cp.audit_log)
    assert refused == [], f"the shipped identity refused the conductor's requests: {refused}"
    mine = {rule for rule, module in rbac.ELSEWHERE.items() if module == "test_adopt_topology.py"}
    assert mine and mine <= set(seen), f"not used here: {sorted(mine - set(seen))}"
