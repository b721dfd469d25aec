"""A delete leaves nothing of the cluster's in OpenStack, and nothing else
is touched (issue 29), against a real Keystone (30.0.0) and the real
Neutron (29.0.0), Octavia (19.0.0) and Cinder (29.0.0) in its catalog
(the run's, tests/python/shared_cloud.py: this module's tenant is its own,
and another tenant's resources named as a pre-identity cluster's must
survive every module's clean-ups), on both CAPI lines (v1beta2:
test_cloud_cleanup_v1beta2.py, the same tests).

The conductor creates the cluster's application credential (per cluster,
as in production); its addons carry the cluster's identity (its uuid) as
OCCM's `cluster.name` and Cinder CSI's `clusterID`. capi-sim
(`--openstack --workload-apiservers`, tests/capi-sim/src/cloud.rs, each
step cited there) plays CAPO with that credential: the cluster's network,
subnet, router, security groups and API load balancer with its floating
IP are made in Neutron and Octavia, and on delete removed in CAPO's
order, Neutron refusing the network (409) while a port is on it. In each
workload cluster's real apiserver it plays OCCM and Cinder CSI with the
addons' values: a Service of type LoadBalancer gets its load balancer
`kube_service_<cluster>_<ns>_<svc>` on the cluster's subnet, whose VIP
port is a real Neutron port (the suite's Octavia provider makes it as
Octavia's allowed-address-pairs driver does), a listener, a pool of the
cluster's `octavia_lb_algorithm` and, with `octavia_lb_healthcheck`, a
TCP health monitor (Octavia's API validates each), and its floating IP; a
claim gets its Cinder volume with `cinder.csi.openstack.org/cluster`.

Made here through the real APIs with OCCM's and CSI's names and texts
(cloud-provider-openstack `pkg/openstack/loadbalancer.go`,
`pkg/csi/cinder/controllerserver.go`): what the simulation does not
cover (OCCM's security groups, made only with `manage-security-groups`;
CSI snapshots, whose VolumeSnapshot kinds the workload apiservers lack),
and the resources that must survive: another cluster's identity, one that
extends ours, a pre-identity cluster's (`kubernetes`) and the project's
own."""
import base64
import json
import subprocess
import sys
import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor

import pytest

import helm_charts
import shared_cloud
from test_lifecycle import Env
from test_lifecycle_keystone import call, password_token
from test_lifecycle_restart import died

CSI_KEY = "cinder.csi.openstack.org/cluster"
FINALIZER = "magnum.openstack.org/cloud-cleanup"


class Stalls:
    """The suite's Octavia provider holding deletions of this module's load
    balancers (shared_cloud.Cloud.octavia_stall): only its own are let go."""

    def __init__(self, shared):
        self.shared, self.held = shared, set()

    def stall(self, lb_id):
        self.shared.octavia_stall(lb_id)
        self.held.add(lb_id)

    def release(self, lb_id):
        self.shared.octavia_release(lb_id)
        self.held.discard(lb_id)

    def release_all(self):
        for lb in list(self.held):
            self.release(lb)


@pytest.fixture(scope="module")
def cloud():
    """The run's Keystone, Neutron, Octavia and Cinder (shared_cloud.py):
    alice and her project are this module's own."""
    shared = shared_cloud.get()
    t = shared.tenant("alice", "alice-pw")
    project, url = t["project"], shared.keystone_url
    c = dict(url=url, admin_pw=shared.admin_pw, project=project, user=t["user"], user_name=t["user_name"],
             neutron=shared.neutron, octavia=shared.octavia, lbaas=Stalls(shared),
             cinder=f"{shared.cinder}/{project}", public=shared.public)
    c["token"], _ = password_token(url, t["user_name"], "alice-pw", project_id=c["project"])
    c["admin"] = shared.admin_token()
    # A tenant network for load balancer VIPs (alice's).
    c["tenant"] = api(c, "neutron", "POST", "/v2.0/networks", {"network": {
        "name": "tenant", "project_id": c["project"]}})["network"]["id"]
    api(c, "neutron", "POST", "/v2.0/subnets", {"subnet": {"network_id": c["tenant"], "cidr": "10.9.0.0/24",
                                                           "ip_version": 4, "project_id": c["project"]}})
    yield c
    c["lbaas"].release_all()
    # Nothing of this module's reached another project.
    shared.check_untouched()


def api(c, service, method, path, body=None, ok=(200, 201, 202, 204), admin=False):
    """A Neutron, Octavia or Cinder request with alice's token (a member of
    the tenant project, as OCCM and CSI act with the cluster's credential),
    or the cloud admin's."""
    status, _, b = call(method, c[service] + path, c["admin"] if admin else c["token"], body)
    assert status in ok, (service, method, path, status, b)
    return b


def line_env(cloud, tmp_path_factory, line):
    """The conductor and capi-sim (with OpenStack) on `line`."""
    token, body = password_token(cloud["url"], cloud["user_name"], "alice-pw", project_id=cloud["project"])
    # The clean-up's timeout: long enough for a loaded CI machine's
    # Octavia to finish deleting, short enough to reach DELETE_FAILED.
    conf = (f"cloud_cleanup_timeout = 60\n\n[keystone_auth]\nauth_url = {cloud['url']}\nusername = admin\n"
            f"password = {cloud['admin_pw']}\nuser_domain_name = Default\nsystem_scope = all\n")
    e = Env(tmp_path_factory.mktemp("cleanup"), line, credentials="", extra=conf, cloud_cleanup=True,
            openstack=True, client_env=dict(MC_USER=cloud["user"], MC_TOKEN=token, MC_TOKEN_INFO=json.dumps(body)))
    yield e
    e.close()


@pytest.fixture(scope="module", params=["v1beta1"])
def env(cloud, tmp_path_factory, request):
    """The v1beta1 line here; test_cloud_cleanup_v1beta2.py runs these
    tests on v1beta2 (a module of its own, so that the two lines run in two
    test processes at once: this was the suite's longest module, ~30
    minutes of a loaded machine for both lines in one process)."""
    yield from line_env(cloud, tmp_path_factory, request.param)


def at_once(*calls):
    """Each zero-argument callable in a thread of its own; their results in
    order (the first failure raised). For a test's independent requests to
    the run's services (its fixtures' resources, made side by side as a
    cloud's users make them): one after another, each waited its turn on a
    loaded machine (17 requests, 41-47 s in a full run)."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(f) for f in calls]
        return [f.result() for f in futures]


def occm_resources(c, identity, service="default/web"):
    """What OCCM makes for `service` in a cluster whose `--cluster-name` is
    `identity`: (load balancer, floating IP, security group) ids."""
    ns, name = service.split("/")
    lb, fip, sg = at_once(
        lambda: api(c, "octavia", "POST", "/v2/lbaas/loadbalancers", {"loadbalancer": {
            "name": f"kube_service_{identity}_{ns}_{name}", "vip_network_id": c["tenant"],
            "project_id": c["project"],
            "description": f"Kubernetes external service {service} from cluster {identity}"}}),
        lambda: api(c, "neutron", "POST", "/v2.0/floatingips", {"floatingip": {
            "floating_network_id": c["public"], "project_id": c["project"],
            "description": f"Floating IP for Kubernetes external service {service} from cluster {identity}"}}),
        lambda: api(c, "neutron", "POST", "/v2.0/security-groups", {"security_group": {
            "name": f"lb-sg-{uuidlib.uuid4()}-{ns}-{name}", "project_id": c["project"],
            "description": f"Security Group for {service} Service LoadBalancer in cluster {identity}"}}))
    return lb["loadbalancer"]["id"], fip["floatingip"]["id"], sg["security_group"]["id"]


def volume(c, name, identity, keep=False):
    """A volume as Cinder CSI makes it for a claim in cluster `identity`
    (`None`: the project's own), once `available`."""
    meta = {CSI_KEY: identity} if identity else {}
    if keep:
        meta["magnum.openstack.org/keep"] = "true"
    v = api(c, "cinder", "POST", "/volumes", {"volume": {"size": 1, "name": name, "metadata": meta}})["volume"]["id"]
    wait_status(c, f"/volumes/{v}", "volume", "available")
    return v


def snapshot(c, vol, identity):
    s = api(c, "cinder", "POST", "/snapshots", {"snapshot": {"volume_id": vol, "name": f"snap-{vol[:8]}",
                                                             "metadata": {CSI_KEY: identity}}})["snapshot"]["id"]
    wait_status(c, f"/snapshots/{s}", "snapshot", "available")
    return s


def wait_status(c, path, key, want, timeout=180):
    deadline = time.time() + timeout
    while (got := api(c, "cinder", "GET", path)[key]["status"]) != want:
        assert got not in ("error",) and time.time() < deadline, (path, got)
        time.sleep(0.2)


def storage(c):
    """The project's volumes and snapshots, as id sets."""
    vols = api(c, "cinder", "GET", "/volumes/detail")["volumes"]
    snaps = api(c, "cinder", "GET", "/snapshots/detail")["snapshots"]
    return {v["id"] for v in vols if v["status"] != "deleting"}, {s["id"] for s in snaps if s["status"] != "deleting"}


def project_resources(c):
    """What the project has: (load balancers not DELETED, floating IPs,
    security groups but the default one), as id sets."""
    lbs = api(c, "octavia", "GET", f"/v2/lbaas/loadbalancers?project_id={c['project']}")["loadbalancers"]
    fips = api(c, "neutron", "GET", f"/v2.0/floatingips?project_id={c['project']}")["floatingips"]
    sgs = api(c, "neutron", "GET", f"/v2.0/security-groups?project_id={c['project']}")["security_groups"]
    return ({lb["id"] for lb in lbs if lb["provisioning_status"] != "DELETED"}, {f["id"] for f in fips},
            {s["id"] for s in sgs if s["name"] != "default"})


LABELS = {"kube_tag": "v1.30.4", "auto_healing_enabled": "true", "octavia_provider": "test"}


def created(env, c, n=1, labels=None, each=None):
    """`n` clusters of alice's, CREATE_COMPLETE: [(uuid, stack_id)] (one
    pair when n == 1). Their load balancers use the suite's Octavia
    provider (`octavia_provider`). `each`: one cluster per dict, with
    these labels added."""
    each = each or [{}] * n
    uuids = [env.client("create", env.template, json.dumps({
        "master_count": 1, "node_count": 1, "cluster": {"labels": {**LABELS, **(labels or {}), **extra}}}),
        project=c["project"])["uuid"] for extra in each]
    n = len(each)
    out = []
    for uuid in uuids:
        # Two clusters with workload apiservers at once: on a loaded CI
        # machine (three test processes on two cores) more than 120 s was
        # seen.
        got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS", timeout=300)
        assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
        out.append((uuid, got["cluster"]["stack_id"]))
    return out[0] if n == 1 else out


# The releases every cluster of these tests has (its HelmChartProxies'
# release names).
RELEASES = ["cni-calico", "openstack-ccm", "cinder-csi", "metrics-server"]


def osc_path(c, stack_id):
    return f"/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/magnum-{c['project']}/openstackclusters/{stack_id}"


def capo_name(c, stack_id):
    """CAPO's name of the cluster's network, subnet and router
    (`k8s-clusterapi-cluster-<namespace>-<name>`)."""
    return f"k8s-clusterapi-cluster-magnum-{c['project']}-{stack_id}"


def capo_made(c, stack_id):
    """What capi-sim's CAPO made for the cluster, found by CAPO's
    description ("Created by cluster-api-provider-openstack cluster
    <ns>-<name>"): (load balancers, floating IPs, security groups)."""
    d = f"Created by cluster-api-provider-openstack cluster magnum-{c['project']}-{stack_id}"
    lbs = api(c, "octavia", "GET", f"/v2/lbaas/loadbalancers?project_id={c['project']}")["loadbalancers"]
    fips = api(c, "neutron", "GET", f"/v2.0/floatingips?project_id={c['project']}")["floatingips"]
    sgs = api(c, "neutron", "GET", f"/v2.0/security-groups?project_id={c['project']}")["security_groups"]
    return ({x["id"] for x in lbs if x["description"] == d and x["provisioning_status"] != "DELETED"},
            {x["id"] for x in fips if x["description"] == d}, {x["id"] for x in sgs if x["description"] == d})


def network_left(c, stack_id):
    """The cluster's network, subnet, router and the ports on its network
    that Neutron still has (names; empty once CAPO's delete finished)."""
    name = capo_name(c, stack_id)
    left = []
    for kind in ("networks", "subnets", "routers"):
        left += [f"{kind[:-1]} {x['name']}" for x in api(c, "neutron", "GET", f"/v2.0/{kind}?name={name}")[kind]]
    for net in api(c, "neutron", "GET", f"/v2.0/networks?name={name}")["networks"]:
        left += [f"port {p['name']} ({p['device_owner']})"
                 for p in api(c, "neutron", "GET", f"/v2.0/ports?network_id={net['id']}")["ports"]]
    return left


def workload(env, c, stack_id):
    """The administrator kubeconfig of the cluster's workload apiserver."""
    key = f"magnum-{c['project']}/{stack_id}"
    deadline = time.time() + 120
    while (kc := env.sim.get("/_sim/workload-apiservers")["kubeconfigs"].get(key)) is None:
        assert time.time() < deadline, f"no workload apiserver for {key}"
        time.sleep(0.2)
    return kc


def kubectl(kc, *args, manifest=None):
    out = subprocess.run(["kubectl", "--kubeconfig", kc, *args], input=json.dumps(manifest) if manifest else None,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if "-o" in args and "json" in args else out.stdout


def expose(env, c, stack_id, identity, service="default/web", lb_method="ROUND_ROBIN", monitor=True):
    """A Service of type LoadBalancer in the cluster's own apiserver; once
    simulated OCCM has answered it: (load balancer, floating IP) ids, from
    Octavia and Neutron. Its pool has the algorithm of the cluster's
    `octavia_lb_algorithm` and a TCP health monitor when
    `octavia_lb_healthcheck` (OCCM's `lb-method`, `create-monitor` as the
    conductor renders them), as the real Octavia API accepted them."""
    expose_start(env, c, stack_id, service)
    return exposed(env, c, stack_id, identity, service, lb_method, monitor)


def expose_start(env, c, stack_id, service="default/web"):
    """`expose`'s first half: the Service applied (several clusters' OCCMs
    then work at once; `exposed` waits for each)."""
    kc = workload(env, c, stack_id)
    ns, name = service.split("/")
    if ns != "default":
        kubectl(kc, "apply", "-f", "-", manifest={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kubectl(kc, "apply", "-f", "-", manifest={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [{"port": 80, "protocol": "TCP"}]}})


def exposed(env, c, stack_id, identity, service="default/web", lb_method="ROUND_ROBIN", monitor=True):
    """`expose`'s second half (see there)."""
    kc = workload(env, c, stack_id)
    ns, name = service.split("/")
    # OCCM's load balancer: Octavia's, its VIP port and its floating IP from
    # Neutron, which under the full suite's load on two cores took 25-57 s a
    # request (this round's runs); as long as the create's own wait.
    deadline = time.time() + 300
    lb_name = f"kube_service_{identity}_{ns}_{name}"
    while True:
        svc = kubectl(kc, "get", "service", "-n", ns, name, "-o", "json")
        ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress")
        if ingress:
            break
        assert time.time() < deadline, (svc, env.sim.get("/_sim/cloud"))
        # Once a second: each look is a kubectl process (~0.15 CPU s).
        time.sleep(1)
    lb = api(c, "octavia", "GET", f"/v2/lbaas/loadbalancers?name={lb_name}&project_id={c['project']}")["loadbalancers"]
    assert [x["id"] for x in lb] == [svc["metadata"]["annotations"]["loadbalancer.openstack.org/load-balancer-id"]]
    assert lb[0]["description"] == f"Kubernetes external service {service} from cluster {identity}"
    fip = api(c, "neutron", "GET", f"/v2.0/floatingips?port_id={lb[0]['vip_port_id']}")["floatingips"]
    assert [f["floating_ip_address"] for f in fip] == [ingress[0]["ip"]]
    pools = api(c, "octavia", "GET", f"/v2/lbaas/pools?name=pool_0_{lb_name}")["pools"]
    assert [(p["lb_algorithm"], p["protocol"], p["loadbalancers"]) for p in pools] == \
        [(lb_method, "TCP", [{"id": lb[0]["id"]}])], pools
    monitors = api(c, "octavia", "GET", f"/v2/lbaas/healthmonitors?pool_id={pools[0]['id']}")["healthmonitors"]
    assert [(m["name"], m["type"], m["delay"], m["timeout"], m["max_retries"]) for m in monitors] == \
        ([(f"monitor_0_{lb_name}", "TCP", 5, 3, 1)] if monitor else []), monitors
    return lb[0]["id"], fip[0]["id"]


def claim(env, c, stack_id, name, ns="default"):
    """A PersistentVolumeClaim in the cluster's own apiserver; once
    simulated Cinder CSI has bound it: its Cinder volume's id."""
    claim_start(env, c, stack_id, name, ns)
    return claimed(env, c, stack_id, name, ns)


def claim_start(env, c, stack_id, name, ns="default"):
    """`claim`'s first half: the claim applied (Cinder CSI provisions
    several at once, as the external-provisioner's workers do; `claimed`
    waits for each)."""
    kubectl(workload(env, c, stack_id), "apply", "-f", "-", manifest={
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "csi-cinder-sc-delete",
                 "resources": {"requests": {"storage": "1Gi"}}}})


def claimed(env, c, stack_id, name, ns="default"):
    """`claim`'s second half (see there)."""
    kc = workload(env, c, stack_id)
    deadline = time.time() + 120
    while (pvc := kubectl(kc, "get", "pvc", "-n", ns, name, "-o", "json")).get("status", {}).get("phase") != "Bound":
        assert time.time() < deadline, (pvc, env.sim.get("/_sim/cloud"))
        time.sleep(1)
    pv = kubectl(kc, "get", "pv", pvc["spec"]["volumeName"], "-o", "json")
    vol = api(c, "cinder", "GET", f"/volumes/{pv['spec']['csi']['volumeHandle']}")["volume"]
    assert vol["name"] == f"pvc-{pvc['metadata']['uid']}" and vol["status"] == "available", vol
    return vol["id"]


def others(c, uuid):
    """Resources the clean-up of cluster `uuid` must leave: another
    cluster's, an identity extending this one's, a pre-identity cluster's,
    and the project's own load balancer, floating IP and security group."""
    other = str(uuidlib.uuid4())
    *kept, lb, fip, sg = at_once(
        lambda: occm_resources(c, other), lambda: occm_resources(c, uuid + "-2"),
        lambda: occm_resources(c, "kubernetes"),
        lambda: api(c, "octavia", "POST", "/v2/lbaas/loadbalancers", {"loadbalancer": {
            "name": "web", "vip_network_id": c["tenant"], "project_id": c["project"],
            "description": "my web site"}}),
        lambda: api(c, "neutron", "POST", "/v2.0/floatingips", {"floatingip": {
            "floating_network_id": c["public"], "project_id": c["project"],
            "description": "my web site"}}),
        lambda: api(c, "neutron", "POST", "/v2.0/security-groups", {"security_group": {
            "name": "ssh", "project_id": c["project"],
            "description": "ssh from the office"}}))
    own = (lb["loadbalancer"]["id"], fip["floatingip"]["id"], sg["security_group"]["id"])
    return kept + [own]


def as_sets(triples):
    """(load balancers, floating IPs, security groups) of (lb, fip, sg)
    triples (anything after the third ignored); None: not made (OCCM makes
    no group by default)."""
    return tuple({t[i] for t in triples} - {None} for i in range(3))


def hanging_off(c, lb, identity, service="default/web"):
    """What Octavia lists of load balancer `lb`'s listeners, pools and
    health monitors (ids by kind; OCCM names the monitor after the load
    balancer)."""
    ns, name = service.split("/")
    return {kind: [x["id"] for x in api(c, "octavia", "GET", f"/v2/lbaas/{kind}?{query}")[kind]]
            for kind, query in (("listeners", f"loadbalancer_id={lb}"), ("pools", f"loadbalancer_id={lb}"),
                                ("healthmonitors", f"name=monitor_0_kube_service_{identity}_{ns}_{name}"))}


def moved_address(env, c, uuid, uuid2, stack2):
    """A floating IP OCCM made for cluster `uuid`'s Service, kept
    (`keep-floatingip`) and taken by cluster `uuid2`'s Service through
    `loadBalancerIP`: OCCM only moves its port to the new load balancer's
    VIP (cloud-provider-openstack `pkg/openstack/loadbalancer.go`,
    `updateFloatingIP`), its description still names `uuid`. (lb, fip,
    None, the VIP port): `uuid2`'s now."""
    subnet = env.sim.get(osc_path(c, stack2))["status"]["network"]["subnets"][0]["id"]
    lb = api(c, "octavia", "POST", "/v2/lbaas/loadbalancers", {"loadbalancer": {
        "name": f"kube_service_{uuid2}_default_moved", "vip_subnet_id": subnet, "project_id": c["project"],
        "description": f"Kubernetes external service default/moved from cluster {uuid2}"}})["loadbalancer"]
    fip = api(c, "neutron", "POST", "/v2.0/floatingips", {"floatingip": {
        "floating_network_id": c["public"], "project_id": c["project"], "port_id": lb["vip_port_id"],
        "description": f"Floating IP for Kubernetes external service default/web from cluster {uuid}"}})
    return lb["id"], fip["floatingip"]["id"], None, lb["vip_port_id"]


# Cinder's backups with their metadata.
BACKUPS = {"OpenStack-API-Version": "volume 3.43"}


def backed_up(c, vol, identity):
    """A backup of `vol` as Cinder CSI makes one for cluster `identity`
    (cloud-provider-openstack `pkg/csi/cinder/controllerserver.go`,
    `createBackup`: the cluster in its metadata), once the backup service
    is done with it: `error` here, the suite's volumes having no data to
    copy (openstack_services.Cinder), a backup record all the same. Its id."""
    status, _, b = call("POST", f"{c['cinder']}/backups", c["token"], {"backup": {
        "volume_id": vol, "name": f"snapshot-{vol[:8]}", "metadata": {CSI_KEY: identity}}}, BACKUPS)
    assert status == 202, (status, b)
    backup = b["backup"]["id"]
    deadline = time.time() + 120
    while (got := call("GET", f"{c['cinder']}/backups/{backup}", c["token"], None, BACKUPS)[2]["backup"])[
            "status"] == "creating":
        assert time.time() < deadline, got
        time.sleep(0.3)
    assert got["metadata"] == {CSI_KEY: identity}, got
    wait_status(c, f"/volumes/{vol}", "volume", "available")
    return backup


def attached_to_a_gone_server(c, vol):
    """`vol` attached through Cinder's attachments API (3.27; completed,
    3.44) to a server id Nova does not have, as a server deleted while
    Cinder was unreachable leaves it: `in-use`. The volume's id."""
    headers = {"OpenStack-API-Version": "volume 3.44"}
    connector = {"initiator": "iqn.1993-08.org.debian:01:gone", "ip": "10.0.0.9", "host": "gone-node",
                 "multipath": False, "platform": "x86_64", "os_type": "linux2"}
    status, _, b = call("POST", f"{c['cinder']}/attachments", c["token"], {"attachment": {
        "volume_uuid": vol, "instance_uuid": str(uuidlib.uuid4()), "connector": connector}}, headers)
    assert status == 200, (status, b)
    status, _, b = call("POST", f"{c['cinder']}/attachments/{b['attachment']['id']}/action", c["token"],
                        {"os-complete": None}, headers)
    assert status == 204, (status, b)
    wait_status(c, f"/volumes/{vol}", "volume", "in-use")
    return vol


def cleanup_all(c):
    """Remove what a test left in the project (the next test starts empty)."""
    c["lbaas"].release_all()
    for b in call("GET", f"{c['cinder']}/backups/detail", c["token"], None, BACKUPS)[2]["backups"]:
        api(c, "cinder", "DELETE", f"/backups/{b['id']}", ok=(202, 400, 404))  # 400: still creating
    vols, snaps = storage(c)
    for s in snaps:
        api(c, "cinder", "DELETE", f"/snapshots/{s}", ok=(202, 404))
    deadline = time.time() + 60
    while api(c, "cinder", "GET", "/snapshots/detail")["snapshots"] and time.time() < deadline:
        time.sleep(0.2)
    for v in vols:
        api(c, "cinder", "DELETE", f"/volumes/{v}", ok=(202, 404))
    while api(c, "cinder", "GET", "/volumes/detail")["volumes"] and time.time() < deadline:
        time.sleep(0.2)
    # Load balancers: each deleted once it is ACTIVE (Octavia refuses a
    # pending one with 409), then gone.
    while True:
        lbs = [lb for lb in api(c, "octavia", "GET", f"/v2/lbaas/loadbalancers?project_id={c['project']}")[
            "loadbalancers"] if lb["provisioning_status"] != "DELETED"]
        if not lbs:
            break
        assert time.time() < deadline + 60, lbs
        for lb in lbs:
            if lb["provisioning_status"] in ("ACTIVE", "ERROR"):
                api(c, "octavia", "DELETE", f"/v2/lbaas/loadbalancers/{lb['id']}?cascade=true", ok=(204, 404, 409))
        time.sleep(0.3)
    _, fips, sgs = project_resources(c)
    for f in fips:
        api(c, "neutron", "DELETE", f"/v2.0/floatingips/{f}", ok=(204, 404))
    for r in api(c, "neutron", "GET", f"/v2.0/routers?project_id={c['project']}")["routers"]:
        for p in api(c, "neutron", "GET", f"/v2.0/ports?device_id={r['id']}")["ports"]:
            for ip in p["fixed_ips"]:
                api(c, "neutron", "PUT", f"/v2.0/routers/{r['id']}/remove_router_interface",
                    {"subnet_id": ip["subnet_id"]}, ok=(200, 404))
        api(c, "neutron", "DELETE", f"/v2.0/routers/{r['id']}", ok=(204, 404))
    for n in api(c, "neutron", "GET", f"/v2.0/networks?project_id={c['project']}")["networks"]:
        for p in api(c, "neutron", "GET", f"/v2.0/ports?network_id={n['id']}")["ports"]:
            api(c, "neutron", "DELETE", f"/v2.0/ports/{p['id']}", ok=(204, 404))
        if n["id"] != c["tenant"]:
            api(c, "neutron", "DELETE", f"/v2.0/networks/{n['id']}", ok=(204, 404))
    for s in sgs:
        api(c, "neutron", "DELETE", f"/v2.0/security-groups/{s}", ok=(204, 404))


@pytest.fixture(autouse=True)
def empty_project(cloud):
    """Each test starts from an empty project, whatever the one before left."""
    cleanup_all(cloud)
    yield


def on_line(env, line):
    """The variants run on one CAPI line each, the main test on both: the
    clean-up acts on the OpenStackCluster, which is CAPO's v1beta1 on both
    lines, and this module was the suite's longest (CI's budget)."""
    if not env.sim.capi.endswith(line):
        pytest.skip(f"this variant runs on {line}; the variants are split between the lines")


def minus(triple, *others):
    return tuple(triple[i] - set().union(*(o[i] for o in others)) for i in range(3))


@pytest.fixture
def phase(request, tmp_path):
    """`phase(what)`: how long the test has run once `what` is done, on
    stderr (pytest shows it with a failure) and in `phases.log` in the
    test's folder: where a long test's time goes on a loaded machine."""
    t0 = time.time()
    log = tmp_path / "phases.log"

    def mark(what):
        line = f"{request.node.name}: {time.time() - t0:6.1f} s {what}\n"
        sys.stderr.write(line)
        with open(log, "a") as f:
            f.write(line)
    return mark


def test_keep_policy_keeps_volumes_findable_by_the_identity(env, cloud):
    on_line(env, "v1beta1")
    c = cloud
    # ... and OCCM's pools with the cluster's algorithm and no monitor.
    uuid, stack_id = created(env, c, labels={"volumes_policy": "keep", "octavia_lb_algorithm": "LEAST_CONNECTIONS",
                                             "octavia_lb_healthcheck": "false"})
    expose(env, c, stack_id, uuid, lb_method="LEAST_CONNECTIONS", monitor=False)
    occm_resources(c, uuid, "shop/api")
    a_release_the_apiserver_refuses_fails_then_mends(env, c, stack_id)
    vols = {claim(env, c, stack_id, f"data-{i}") for i in range(2)}
    snap = snapshot(c, sorted(vols)[0], uuid)
    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    # The load balancers and their floating IPs and group went; the data
    # stayed, and the operator finds it by the documented metadata.
    assert project_resources(c) == (set(), set(), set()), seen
    assert storage(c) == (vols, {snap})
    found = {v["id"] for v in api(c, "cinder", "GET", "/volumes/detail")["volumes"]
             if v["metadata"].get(CSI_KEY) == uuid}
    assert found == vols
    cleanup_all(c)


def test_what_blocks_is_named_then_delete_failed_then_a_new_delete_finishes(env, cloud):
    on_line(env, "v1beta1")
    c = cloud
    uuid, stack_id = created(env, c)
    lb, fip = expose(env, c, stack_id, uuid)
    failing, _, sg = occm_resources(c, uuid, "shop/api")
    kept = others(c, uuid)
    # The provider never finishes deleting OCCM's load balancer (its VIP
    # port stays on the cluster's network), fails the first delete of
    # another (ERROR), and a port still uses the security group (Neutron's
    # 409 SecurityGroupInUse).
    c["lbaas"].stall(lb)
    c["lbaas"].shared.octavia_fail_once(failing)
    lb_requests = env.conductor.metric("magnum_conductor_cloud_deletions_total", kind="load_balancer",
                                       outcome="requested")
    port = api(c, "neutron", "POST", "/v2.0/ports", {"port": {"network_id": c["tenant"], "project_id": c["project"],
                                                              "security_groups": [sg]}})["port"]["id"]

    env.client("delete", uuid, project=c["project"])

    def blocked(g):
        r = g["cluster"]["status_reason"] or ""
        return (g["cluster"]["status"] == "DELETE_IN_PROGRESS" and f"kube_service_{uuid}_default_web" in r
                and "PENDING_DELETE" in r and sg in r and "409" in r
                and f"{failing}) ERROR: Octavia left it in ERROR after 1 delete request(s); asking again in" in r)
    got, seen = env.wait(uuid, blocked, timeout=120)
    reason = got["cluster"]["status_reason"]
    assert reason.startswith("waiting for OpenStack to delete what the cluster made"), reason
    assert "in use" in reason, reason  # Neutron's own words
    assert env.conductor.metric("magnum_conductor_cloud_cleanup_waiting") == 1
    lbs, fips, sgs = project_resources(c)
    assert fip not in fips and lb in lbs and sg in sgs
    # What the stuck CAPO drivers report: CAPO cannot delete the network
    # while the load balancer's VIP port is on it (Neutron's own 409).
    key = f"magnum-{c['project']}/{stack_id}"
    deadline = time.time() + 60
    while "NetworkInUse" not in (capo := env.sim.get("/_sim/cloud")["infra"].get(key, "")):
        assert time.time() < deadline, capo
        time.sleep(0.3)
    assert "failed to delete network" in capo and "409" in capo and "ports still in use" in capo, capo
    assert f"port octavia-lb-{lb} (Octavia)" in network_left(c, stack_id)

    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "DELETE_IN_PROGRESS", timeout=240)
    assert got["cluster"]["status"] == "DELETE_FAILED", seen
    assert lb in got["cluster"]["status_reason"] and sg in got["cluster"]["status_reason"], seen
    # The network stays held: the OpenStackCluster keeps our finalizer.
    assert FINALIZER in env.sim.get(osc_path(c, stack_id))["metadata"]["finalizers"]

    # The operator unblocks it and deletes again.
    c["lbaas"].release(lb)
    api(c, "neutron", "DELETE", f"/v2.0/ports/{port}")
    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    assert project_resources(c) == as_sets(kept), seen
    assert network_left(c, stack_id) == [], seen
    assert env.conductor.metric("magnum_conductor_cloud_cleanup_waiting") == 0
    # The load balancer in ERROR went on the one retry (before the timeout
    # or with the new delete); the stalled one was asked once.
    assert env.conductor.metric("magnum_conductor_cloud_deletions_total", kind="load_balancer",
                                outcome="requested") - lb_requests == 3, seen
    cleanup_all(c)


def test_a_service_the_cluster_never_used_does_not_hold_up_its_delete(env, cloud):
    """Manila refusing the clusters' credential (403, its policy) does not
    hold up the delete of a cluster without Manila CSI, which cannot have
    made a share there; it holds up one with Manila CSI, named with
    Manila's own answer, until Manila lists again."""
    on_line(env, "v1beta2")
    c = cloud
    shared = c["lbaas"].shared
    (plain, _), (with_manila, _) = created(env, c, each=[{}, {"manila_csi_enabled": "true"}])

    def failures(effect):
        return env.conductor.metric("magnum_conductor_cloud_list_failures_total", service="Manila", effect=effect)
    before = failures("ignored"), failures("blocking")
    shared.manila_refuse(c["project"])
    try:
        env.client("delete", plain, project=c["project"])
        got, seen = env.wait(plain, lambda g: g["cluster"] is None, timeout=180)
        assert failures("ignored") > before[0] and failures("blocking") == before[1], seen

        env.client("delete", with_manila, project=c["project"])

        def named(g):
            r = g["cluster"]["status_reason"] or ""
            return "Manila: Manila share list: HTTP 403: Access was denied to this resource." in r
        got, seen = env.wait(with_manila, named, timeout=120)
        assert got["cluster"]["status"] == "DELETE_IN_PROGRESS", seen
        assert got["cluster"]["status_reason"].startswith("cannot list the cluster's OpenStack resources"), seen
        assert failures("blocking") > before[1]
        # Held: the OpenStackCluster keeps our finalizer meanwhile.
        assert env.conductor.metric("magnum_conductor_cloud_cleanup_waiting") == 1
    finally:
        shared.manila_refuse(c["project"], refuse=False)
    got, seen = env.wait(with_manila, lambda g: g["cluster"] is None or g["cluster"]["status"] == "DELETE_FAILED",
                         timeout=180)
    if got["cluster"] is not None:
        # The clean-up's 60 s ran out first (a loaded machine): a new
        # delete finishes it.
        env.client("delete", with_manila, project=c["project"])
        got, seen = env.wait(with_manila, lambda g: g["cluster"] is None, timeout=180)
    assert env.conductor.metric("magnum_conductor_cloud_cleanup_waiting") == 0
    cleanup_all(c)


def test_kill_9_during_the_cleanup_then_restart_finishes(env, cloud):
    on_line(env, "v1beta2")
    c = cloud
    env.restart()
    uuid, stack_id = created(env, c)
    ours = [expose(env, c, stack_id, uuid) + (None,), occm_resources(c, uuid, "shop/api")]
    kept = others(c, uuid)
    # Frozen right after its first deletion requests, then kill -9.
    env.restart("cleanup.after_delete_requests")
    env.client("delete", uuid, project=c["project"])
    died(env)
    lbs, fips, sgs = project_resources(c)
    assert not any(f in fips for _, f, _ in ours), "the requests were sent before the kill"
    env.restart()
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    assert project_resources(c) == as_sets(kept), seen
    assert network_left(c, stack_id) == [], seen
    assert env.sim.get(osc_path(c, stack_id)) is None
    cleanup_all(c)


def a_release_the_apiserver_refuses_fails_then_mends(env, c, stack_id):
    """A value that renders an object the workload apiserver refuses makes
    the release `failed` with the apiserver's reason, as CAAPH reports it
    (HelmInstallOrUpgradeFailed), and the next revision that renders well
    is deployed again, the object back as its chart renders it."""
    ns = f"magnum-{c['project']}"
    api = "addons.cluster.x-k8s.io/v1alpha1"
    before = helm_charts.deployed(env.sim, ns, stack_id)["metrics-server"]
    values = env.sim.items(api, "helmchartproxies", f"cluster.x-k8s.io/cluster-name={stack_id}", ns=ns)
    hcp = next(h for h in values if h["spec"]["releaseName"] == "metrics-server")
    good = hcp["spec"]["valuesTemplate"]

    def hrp():
        return next(h for h in env.sim.items(api, "helmreleaseproxies", f"cluster.x-k8s.io/cluster-name={stack_id}",
                                              ns=ns) if h["spec"]["releaseName"] == "metrics-server")

    def until(ok, what):
        deadline = time.time() + 60
        while not ok(h := hrp()):
            assert time.time() < deadline, (what, h.get("status"))
            time.sleep(0.3)
        return h

    # The chart puts `replicas` into the Deployment as it is: a word there
    # is not an integer.
    env.sim.patch(api, "helmchartproxies", hcp["metadata"]["name"],
                  {"spec": {"valuesTemplate": good + "replicas: two\n"}}, ns=ns)
    h = until(lambda h: h.get("status", {}).get("status") == "failed", "failed")
    ready = next(x for x in h["status"]["conditions"] if x["type"] == "HelmReleaseReady")
    assert ready["status"] == "False" and ready["reason"] == "HelmInstallOrUpgradeFailed", ready
    assert "Deployment kube-system/metrics-server" in ready["message"] and "replicas" in ready["message"], ready
    assert h["status"]["revision"] == before["revision"] + 1
    env.sim.patch(api, "helmchartproxies", hcp["metadata"]["name"], {"spec": {"valuesTemplate": good}}, ns=ns)
    h = until(lambda h: h.get("status", {}).get("status") == "deployed" and
              h["status"]["revision"] == before["revision"] + 2, "deployed again")
    assert all(x["status"] == "True" for x in h["status"]["conditions"]), h["status"]
    kc = workload(env, c, stack_id)
    d = kubectl(kc, "get", "deployment", "-n", "kube-system", "metrics-server", "-o", "json")
    assert d["spec"]["replicas"] == 1, d["spec"]

    # The release's history, as the real Helm reads it back from the
    # workload cluster (capi-sim's CAAPH stores each revision as Helm's
    # `secret` driver does: tests/capi-sim/src/helm_storage.rs): the
    # revision the failure replaced superseded, the failure, the mend.
    first = before["revision"]
    helm = helm_charts.helm_history(kc, "kube-system", "metrics-server")
    statuses = {r["revision"]: r["status"] for r in helm["history"]}
    assert [statuses.get(first + i) for i in range(3)] == ["superseded", "failed", "deployed"], statuses
    assert max(statuses) == first + 2, statuses
    assert {(r["chart_name"], r["chart_version"]) for r in helm["history"]} == \
        {("metrics-server", hcp["spec"]["version"])}, helm["history"]
    assert helm["values"] == helm_charts.values_of(hcp), helm["values"]
    assert "# Source: metrics-server/templates/deployment.yaml\n" in helm["manifest"], helm["manifest"][:2000]

    def forget_and_reread():
        """The Helm client's memory dropped, as a restarted CAAPH has none:
        it knows the release again only from what the cluster stores."""
        assert env.sim.post("/_sim/releases/forget")["forgotten"] > 0
        key = f"{ns}/{hrp()['metadata']['name']}"
        deadline = time.time() + 60
        while (r := env.sim.get("/_sim/releases")["releases"][key])["forgotten"]:
            assert time.time() < deadline, r
            time.sleep(0.3)
        return r

    # Read back unchanged: the same revision, no new one (CAAPH's
    # shouldUpgradeHelmRelease: same chart version and values).
    again = forget_and_reread()
    assert (again["status"], again["revision"], again["error"]) == ("deployed", first + 2, None), again
    assert max(r["revision"] for r in helm_charts.helm_history(kc, "kube-system", "metrics-server")["history"]) \
        == first + 2
    # An upgrade after a restart prunes what the stored manifest held and
    # the new one does not: a PodDisruptionBudget in, then out again.
    pdb = "podDisruptionBudget:\n  enabled: true\n  minAvailable: 1\n"
    env.sim.patch(api, "helmchartproxies", hcp["metadata"]["name"],
                  {"spec": {"valuesTemplate": good + pdb}}, ns=ns)
    until(lambda h: h.get("status", {}).get("revision") == first + 3, "the PodDisruptionBudget's revision")
    assert kubectl(kc, "get", "pdb", "-n", "kube-system", "metrics-server", "-o", "json")["spec"]["minAvailable"] == 1
    forget_and_reread()
    env.sim.patch(api, "helmchartproxies", hcp["metadata"]["name"], {"spec": {"valuesTemplate": good}}, ns=ns)
    h = until(lambda h: h.get("status", {}).get("revision") == first + 4, "the revision without it")
    assert h["status"]["status"] == "deployed", h["status"]
    deadline = time.time() + 60
    while subprocess.run(["kubectl", "--kubeconfig", kc, "get", "pdb", "-n", "kube-system", "metrics-server"],
                         capture_output=True, text=True).returncode == 0:
        assert time.time() < deadline, "the PodDisruptionBudget outlived the revision that dropped it"
        time.sleep(0.3)
    statuses = {r["revision"]: r["status"]
                for r in helm_charts.helm_history(kc, "kube-system", "metrics-server")["history"]}
    assert [statuses.get(first + i) for i in range(5)] == \
        ["superseded", "failed", "superseded", "superseded", "deployed"], statuses


def test_a_cluster_made_before_identities_keeps_kubernetes(env, cloud):
    """A cluster whose addons were rendered without an identity (by an
    earlier conductor) runs with the charts' default, `kubernetes`: a
    rotation keeps it (OCCM would otherwise look its load balancers up
    under a new name and make them anew), and its delete takes only the
    `kubernetes` load balancers on its own network."""
    on_line(env, "v1beta2")
    c = cloud
    uuid, stack_id = created(env, c)
    ns = f"magnum-{c['project']}"
    base = f"/apis/addons.cluster.x-k8s.io/v1alpha1/namespaces/{ns}/helmchartproxies/{stack_id}"
    for addon, line in (("openstack-ccm", f'cluster:\n  name: "{uuid}"\n'), ("cinder-csi", f'clusterID: "{uuid}"\n')):
        values = env.sim.get(f"{base}-{addon}")["spec"]["valuesTemplate"]
        assert line in values
        # Applied as the conductor applies (server-side apply, its field
        # manager), as an earlier conductor would have.
        hcp = env.sim.get(f"{base}-{addon}")
        env.sim.kube.request("PATCH", f"{base}-{addon}?fieldManager=magnum-conductor&force=true", {
            "apiVersion": hcp["apiVersion"], "kind": hcp["kind"],
            "metadata": {"name": hcp["metadata"]["name"], "namespace": ns},
            "spec": {**{k: v for k, v in hcp["spec"].items()}, "valuesTemplate": values.replace(line, "")}},
            content_type="application/apply-patch+yaml")
    out = env.client("call", "credential_rotate", uuid, project=c["project"])
    assert out == {"ok": True}, out
    assert 'cluster:\n  name: "kubernetes"\n' in env.sim.get(f"{base}-openstack-ccm")["spec"]["valuesTemplate"]
    assert 'clusterID: "kubernetes"\n' in env.sim.get(f"{base}-cinder-csi")["spec"]["valuesTemplate"]

    own_net = env.sim.get(osc_path(c, stack_id))["status"]["network"]["id"]
    mine = api(c, "octavia", "POST", "/v2/lbaas/loadbalancers", {"loadbalancer": {
        "name": "kube_service_kubernetes_default_web", "vip_network_id": own_net, "project_id": c["project"],
        "description": "Kubernetes external service default/web from cluster kubernetes"}})["loadbalancer"]["id"]
    theirs = api(c, "octavia", "POST", "/v2/lbaas/loadbalancers", {"loadbalancer": {
        "name": "kube_service_kubernetes_default_web", "vip_network_id": c["tenant"], "project_id": c["project"],
        "description": "Kubernetes external service default/web from cluster kubernetes"}})["loadbalancer"]["id"]
    legacy_volume = volume(c, "pvc-legacy", "kubernetes")

    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    lbs, _, _ = project_resources(c)
    assert mine not in lbs and theirs in lbs, seen
    # Its volumes cannot be told from another legacy cluster's: kept.
    assert legacy_volume in storage(c)[0]
    cleanup_all(c)


def test_a_credential_that_no_longer_works_is_named_and_the_way_out_works(env, cloud):
    """The cluster's application credential is gone (deleted, or its user
    removed from Keystone, as in vexxhost #270): CAPO cannot delete the
    network either. The reason says so, the delete fails at its timeout,
    and the way out docs/operator-guide.md gives (a working application
    credential of the project into the cluster's credentials Secret, which
    CAPO and the clean-up both read, then delete again) finishes it with
    nothing left."""
    on_line(env, "v1beta2")
    c = cloud
    uuid, stack_id = created(env, c)
    lb, fip = expose(env, c, stack_id, uuid)
    path = f"/api/v1/namespaces/magnum-{c['project']}/secrets/{stack_id}-cloud-credentials"
    clouds = base64.b64decode(env.sim.get(path)["data"]["clouds.yaml"]).decode()
    fields = dict(line.strip().split(": ", 1) for line in clouds.splitlines() if ": " in line)
    ac = fields["application_credential_id"]
    status, _, _ = call("DELETE", f"{c['url']}/users/{c['user']}/application_credentials/{ac}", c["token"])
    assert status == 204

    env.client("delete", uuid, project=c["project"])
    # (The delete is a cast: the cluster may still show CREATE_COMPLETE.)
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] not in ("CREATE_COMPLETE", "DELETE_IN_PROGRESS"),
                         timeout=240)
    reason = got["cluster"]["status_reason"]
    assert got["cluster"]["status"] == "DELETE_FAILED", seen
    # Keystone's own answer (404 Could not find Application Credential).
    assert ac in reason and "HTTP 404" in reason and "removed from Keystone" in reason, reason
    assert (f"cannot clean up the cluster's OpenStack resources: Keystone token for application credential {ac}"
            in reason), reason
    lbs, fips, _ = project_resources(c)
    assert lb in lbs and fip in fips, "nothing deleted without a credential"
    assert network_left(c, stack_id) != []

    # The way out, as the operator guide gives it: a new application
    # credential of the project (made by any member: here alice) into the
    # Secret, then delete again.
    status, _, new = call("POST", f"{c['url']}/users/{c['user']}/application_credentials", c["token"],
                          {"application_credential": {"name": f"magnum-{uuid}-recovery"}})
    assert status == 201, status
    new = new["application_credential"]
    fixed = clouds.replace(ac, new["id"]).replace(fields["application_credential_secret"], new["secret"])
    env.sim.kube.request("PATCH", path, {"data": {"clouds.yaml": base64.b64encode(fixed.encode()).decode()}},
                         content_type="application/merge-patch+json")
    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    assert project_resources(c) == (set(), set(), set()), seen
    assert network_left(c, stack_id) == [], seen
    call("DELETE", f"{c['url']}/users/{c['user']}/application_credentials/{new['id']}", c["token"])
    cleanup_all(c)


# The main test last in the module (the tests run in this file's order,
# the short keep-policy test first): it makes two clusters with workload
# apiservers and drives the run's Neutron and Octavia hardest, and the
# test processes' first minutes (every process starting its first module,
# tempest and cargo test beside) are the run's busiest: run first, it took
# 308-339 s in full runs; run last, 56-98 s. The module's other tests each
# make one cluster.
def test_delete_removes_only_this_clusters_resources(env, cloud, phase):
    c = cloud
    (uuid, stack_id), (uuid2, stack2) = created(env, c, n=2)
    # The addons run with the cluster's identity: what the real charts
    # installed in its workload apiserver gives OCCM and Cinder CSI their
    # cluster name (what capi-sim's OCCM and CSI read, and nothing else).
    for st, u in ((stack_id, uuid), (stack2, uuid2)):
        assert sorted(helm_charts.deployed(env.sim, f"magnum-{c['project']}", st)) == sorted(RELEASES), st
        kc = workload(env, c, st)
        pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in
                kubectl(kc, "get", "daemonsets,deployments", "-n", "kube-system", "-o", "json")["items"]}
        occm = next(x for x in pods["openstack-cloud-controller-manager"]["containers"]
                    if x["name"] == "openstack-cloud-controller-manager")
        csi = next(x for x in pods["openstack-cinder-csi-controllerplugin"]["containers"]
                   if x["name"] == "cinder-csi-plugin")
        assert {"name": "CLUSTER_NAME", "value": u} in occm["env"] and "--cluster-name=$(CLUSTER_NAME)" in occm["args"]
        assert {"name": "CLUSTER_NAME", "value": u} in csi["env"] and "--cluster=$(CLUSTER_NAME)" in csi["args"]
    # CAPO's network is real: the OpenStackCluster names what Neutron has.
    osc = env.sim.get(osc_path(c, stack_id))["status"]
    net = api(c, "neutron", "GET", f"/v2.0/networks/{osc['network']['id']}")["network"]
    assert net["name"] == capo_name(c, stack_id) == osc["network"]["name"]

    phase("created, addons checked")

    # Both clusters expose default/web: two load balancers, one each (both
    # Services applied first: the two clusters' OCCMs work at once).
    expose_start(env, c, stack_id)
    expose_start(env, c, stack2)
    web, web2 = exposed(env, c, stack_id, uuid), exposed(env, c, stack2, uuid2)
    assert web[0] != web2[0] and web[1] != web2[1]
    phase("exposed")
    api_svc, kept_others, moved = at_once(lambda: occm_resources(c, uuid, "shop/api"), lambda: others(c, uuid),
                                          lambda: moved_address(env, c, uuid, uuid2, stack2))
    ours = [web + (None,), api_svc]
    kept = kept_others + [web2 + (None,), moved]
    phase("other load balancers and addresses made")
    # Three claims' volumes and a snapshot of one (it must go first: Cinder
    # refuses a volume with snapshots); one marked to keep; the other
    # cluster's claim; an identity extending ours; the project's own. The
    # claims applied first, then each waited for.
    for i in range(3):
        claim_start(env, c, stack_id, f"data-{i}")
    claim_start(env, c, stack2, "data-0")
    our_vols = [claimed(env, c, stack_id, f"data-{i}") for i in range(3)]
    phase("claimed")
    # One of ours still attached to a server Nova no longer has (its
    # delete never reached Cinder): nothing else would ever detach it. A
    # backup of another (Cinder CSI's backups carry the cluster as its
    # snapshots do). All made side by side.
    _, stale, backup, theirs, *kept_vols = at_once(
        lambda: snapshot(c, our_vols[0], uuid),
        lambda: attached_to_a_gone_server(c, volume(c, "pvc-stale", uuid)),
        lambda: backed_up(c, our_vols[1], uuid),
        lambda: claimed(env, c, stack2, "data-0"),
        lambda: volume(c, "pvc-keep", uuid, keep=True), lambda: volume(c, "pvc-longer", uuid + "-2"),
        lambda: volume(c, "data", None))
    kept_vols = set(kept_vols) | {theirs}
    capo = capo_made(c, stack_id)
    assert all(capo), capo  # its API load balancer, floating IP and groups
    before = project_resources(c)
    hanging = hanging_off(c, web[0], uuid)
    assert all(hanging.values()), hanging  # its listener, pool and monitor (expose)
    metrics = {k: env.conductor.metric("magnum_conductor_cloud_deletions_total", kind=k, outcome="requested")
               for k in ("load_balancer", "floating_ip", "security_group", "volume_attachment", "backup")}
    phase("storage made, before listed")

    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    phase("deleted")
    # The stale attachment was removed, then its volume deleted (below:
    # not in the project any more).
    assert (env.conductor.metric("magnum_conductor_cloud_deletions_total", kind="volume_attachment",
                                 outcome="requested") - metrics["volume_attachment"]) == 1, seen
    assert stale not in storage(c)[0], seen
    # The backup went with its volume.
    assert call("GET", f"{c['cinder']}/backups/{backup}", c["token"], None, BACKUPS)[0] == 404, seen
    assert (env.conductor.metric("magnum_conductor_cloud_deletions_total", kind="backup", outcome="requested")
            - metrics["backup"]) == 1, seen
    # Octavia's cascade took what hung off the load balancer with it.
    assert not any(hanging_off(c, web[0], uuid).values()), (hanging, seen)
    # B's Service keeps the address that once was ours, on its port.
    moved = kept[-1]
    assert api(c, "neutron", "GET", f"/v2.0/floatingips/{moved[1]}")["floatingip"]["port_id"] == moved[3]

    # Listed from the real APIs: only what this cluster made is gone (ours
    # through the clean-up, CAPO's through CAPO), down to the network.
    assert project_resources(c) == minus(before, as_sets(ours), capo), seen
    assert storage(c) == (kept_vols, set()), seen
    assert network_left(c, stack_id) == [], seen
    assert network_left(c, stack2) != []
    for i, k in enumerate(("load_balancer", "floating_ip", "security_group")):
        assert (env.conductor.metric("magnum_conductor_cloud_deletions_total", kind=k, outcome="requested")
                - metrics[k]) == len({o[i] for o in ours} - {None}), k
    # Our finalizer released: the OpenStackCluster and the Cluster are gone.
    assert env.sim.get(osc_path(c, stack_id)) is None
    assert env.sim.get("/_sim/cloud")["errors"] == []

    phase("listed after the delete")

    env.client("delete", uuid2, project=c["project"])
    got, seen = env.wait(uuid2, lambda g: g["cluster"] is None, timeout=180)
    # The other cluster's own delete takes its load balancer and claim.
    assert network_left(c, stack2) == [] and theirs not in storage(c)[0], seen
    assert web2[0] not in project_resources(c)[0]
    phase("the other cluster deleted")
    cleanup_all(c)
