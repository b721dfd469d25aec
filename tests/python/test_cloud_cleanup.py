"""A delete leaves nothing of the cluster's in OpenStack, and nothing else
is touched (issue 29), against a real Keystone (30.0.0) and a real Neutron
API server (29.0.0, tests/python/openstack_services.py) in its catalog.

The conductor creates the cluster's application credential (per-cluster,
as in production); its addons carry the cluster's identity (its uuid) as
OCCM's `cluster.name` and Cinder CSI's `clusterID`. What OCCM would make in
Neutron for a Service of type LoadBalancer is made here with the texts of
cloud-provider-openstack `pkg/openstack/loadbalancer.go`: the floating IP
described `Floating IP for Kubernetes external service <ns>/<svc> from
cluster <name>` (`createFloatingIP`... `ensureFloatingIP`), the security
group `Security Group for <ns>/<svc> Service LoadBalancer in cluster <name>`
(`ensureSecurityGroup`). Beside them: another cluster's, one whose identity
extends ours, and the project's own. Neutron's own 409 (`SecurityGroupInUse`)
blocks one deletion: the reason names it, the delete fails at its timeout,
and a new delete finishes once it is unblocked.

Not yet here: Octavia load balancers and Cinder volumes (their services are
not run by the suite yet; the plan's rules for them are unit-tested in
conductor/src/cloud/identity.rs), and simulated OCCM/CSI in capi-sim."""
import json
import os
import subprocess
import uuid as uuidlib

import pytest

from openstack_services import Neutron
from test_lifecycle import Env
from test_lifecycle_keystone import KEYSTONE, call, password_token, start_keystone

ADMIN_PROJECT = "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0"


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    d = tmp_path_factory.mktemp("keystone")
    url, admin_pw, admin = start_keystone(d)
    neutron = Neutron(tmp_path_factory.mktemp("neutron"), f"neutron_cleanup_{os.getpid()}")
    status, _, svc = call("POST", f"{url}/services", admin, {"service": {"type": "network", "name": "neutron"}})
    assert status == 201
    for iface in ("public", "internal"):
        status, _, _ = call("POST", f"{url}/endpoints", admin, {"endpoint": {
            "service_id": svc["service"]["id"], "interface": iface, "url": neutron.url, "region_id": "RegionOne"}})
        assert status == 201
    _, _, p = call("POST", f"{url}/projects", admin, {"project": {"name": "tenant", "domain_id": "default"}})
    _, _, u = call("POST", f"{url}/users", admin, {"user": {"name": "alice", "domain_id": "default",
                                                          "password": "alice-pw", "default_project_id": p["project"]["id"]}})
    _, _, roles = call("GET", f"{url}/roles?name=member", admin)
    status, _, _ = call("PUT", f"{url}/projects/{p['project']['id']}/users/{u['user']['id']}/roles/{roles['roles'][0]['id']}", admin)
    assert status == 204
    c = dict(url=url, admin_pw=admin_pw, project=p["project"]["id"], user=u["user"]["id"], neutron=neutron.url)
    # The cloud's external network, as an operator makes it.
    c["public"] = net(c, "POST", "/v2.0/networks", {"network": {
        "name": "public", "router:external": True, "provider:network_type": "flat",
        "provider:physical_network": "public", "project_id": ADMIN_PROJECT}})["network"]["id"]
    net(c, "POST", "/v2.0/subnets", {"subnet": {"network_id": c["public"], "cidr": "172.24.4.0/24",
                                                "ip_version": 4, "project_id": ADMIN_PROJECT}})
    yield c
    neutron.stop()
    subprocess.run([KEYSTONE, "stop", str(d)], timeout=30)


def net(c, method, path, body=None, ok=(200, 201, 204)):
    """A Neutron request (noauth: scoped by the project_id it names)."""
    status, _, b = call(method, c["neutron"] + path, None, body)
    assert status in ok, (method, path, status, b)
    return b


@pytest.fixture(scope="module")
def env(cloud, tmp_path_factory):
    token, body = password_token(cloud["url"], "alice", "alice-pw", project_id=cloud["project"])
    conf = (f"cloud_cleanup_timeout = 20\n\n[keystone_auth]\nauth_url = {cloud['url']}\nusername = admin\n"
            f"password = {cloud['admin_pw']}\nuser_domain_name = Default\nsystem_scope = all\n")
    e = Env(tmp_path_factory.mktemp("cleanup"), "v1beta1", credentials="", extra=conf, cloud_cleanup=True,
            client_env=dict(MC_USER=cloud["user"], MC_TOKEN=token, MC_TOKEN_INFO=json.dumps(body)))
    yield e
    e.close()


def occm_resources(c, identity, service="default/web"):
    """A floating IP and a security group as OCCM makes them for `service`
    in a cluster whose `--cluster-name` is `identity`."""
    fip = net(c, "POST", "/v2.0/floatingips", {"floatingip": {
        "floating_network_id": c["public"], "project_id": c["project"],
        "description": f"Floating IP for Kubernetes external service {service} from cluster {identity}"}})
    sg = net(c, "POST", "/v2.0/security-groups", {"security_group": {
        "name": f"lb-sg-{uuidlib.uuid4()}-{service.replace('/', '-')}", "project_id": c["project"],
        "description": f"Security Group for {service} Service LoadBalancer in cluster {identity}"}})
    return fip["floatingip"]["id"], sg["security_group"]["id"]


def project_resources(c):
    fips = net(c, "GET", f"/v2.0/floatingips?project_id={c['project']}")["floatingips"]
    sgs = net(c, "GET", f"/v2.0/security-groups?project_id={c['project']}")["security_groups"]
    return {f["id"] for f in fips}, {s["id"] for s in sgs if s["name"] != "default"}


def created(env, c):
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}),
                      project=c["project"])["uuid"]
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    return uuid, got["cluster"]["stack_id"]


def test_delete_removes_only_this_clusters_resources(env, cloud):
    c = cloud
    uuid, stack_id = created(env, c)
    # The addons run with the cluster's identity.
    ns = f"magnum-{c['project']}"
    occm = env.sim.get(f"/apis/addons.cluster.x-k8s.io/v1alpha1/namespaces/{ns}/helmchartproxies/{stack_id}-openstack-ccm")
    csi = env.sim.get(f"/apis/addons.cluster.x-k8s.io/v1alpha1/namespaces/{ns}/helmchartproxies/{stack_id}-cinder-csi")
    assert f'cluster:\n  name: "{uuid}"\n' in occm["spec"]["valuesTemplate"]
    assert f'clusterID: "{uuid}"\n' in csi["spec"]["valuesTemplate"]

    ours = [occm_resources(c, uuid), occm_resources(c, uuid, "shop/api")]
    other_cluster = occm_resources(c, str(uuidlib.uuid4()))
    longer = occm_resources(c, uuid + "-2")  # an identity that extends ours
    legacy = occm_resources(c, "kubernetes")  # a pre-identity cluster's
    own_fip = net(c, "POST", "/v2.0/floatingips", {"floatingip": {
        "floating_network_id": c["public"], "project_id": c["project"], "description": "my web site"}})["floatingip"]["id"]
    own_sg = net(c, "POST", "/v2.0/security-groups", {"security_group": {
        "name": "ssh", "project_id": c["project"], "description": "ssh from the office"}})["security_group"]["id"]
    before = env.conductor.metric("magnum_conductor_cloud_deletions_total", kind="floating_ip", outcome="requested")

    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)

    fips, sgs = project_resources(c)
    kept = [other_cluster, longer, legacy]
    assert fips == {f for f, _ in kept} | {own_fip}, seen
    assert sgs == {s for _, s in kept} | {own_sg}, seen
    assert env.conductor.metric("magnum_conductor_cloud_deletions_total", kind="floating_ip",
                                outcome="requested") - before == 2
    assert env.conductor.metric("magnum_conductor_cloud_deletions_total", kind="security_group",
                                outcome="requested") >= 2
    # The OpenStackCluster (our finalizer released) and the CAPI Cluster are gone.
    assert env.sim.get(f"/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/{ns}/openstackclusters/{stack_id}") is None


def test_a_refused_deletion_is_named_then_fails_at_the_timeout_and_a_new_delete_finishes(env, cloud):
    c = cloud
    uuid, stack_id = created(env, c)
    fip, sg = occm_resources(c, uuid)
    # A port still using the security group: Neutron refuses its deletion
    # (409 SecurityGroupInUse) until the port goes.
    tenant = net(c, "POST", "/v2.0/networks", {"network": {"name": "t", "project_id": c["project"]}})["network"]["id"]
    net(c, "POST", "/v2.0/subnets", {"subnet": {"network_id": tenant, "cidr": "10.9.0.0/24", "ip_version": 4,
                                                "project_id": c["project"]}})
    port = net(c, "POST", "/v2.0/ports", {"port": {"network_id": tenant, "project_id": c["project"],
                                                   "security_groups": [sg]}})["port"]["id"]

    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] == "DELETE_IN_PROGRESS"
                         and "security group" in (g["cluster"]["status_reason"] or "")
                         and "409" in (g["cluster"]["status_reason"] or ""), timeout=120)
    reason = got["cluster"]["status_reason"]
    assert sg in reason and "waiting for OpenStack to delete what the cluster made" in reason, reason
    assert env.conductor.metric("magnum_conductor_cloud_cleanup_waiting") == 1
    # The floating IP went meanwhile; the security group is refused.
    fips, sgs = project_resources(c)
    assert fip not in fips and sg in sgs

    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "DELETE_IN_PROGRESS", timeout=120)
    assert got["cluster"]["status"] == "DELETE_FAILED", seen
    assert sg in got["cluster"]["status_reason"], got["cluster"]["status_reason"]
    # The network stays held: the OpenStackCluster keeps our finalizer.
    ns = f"magnum-{c['project']}"
    osc = env.sim.get(f"/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/{ns}/openstackclusters/{stack_id}")
    assert "magnum.openstack.org/cloud-cleanup" in osc["metadata"]["finalizers"]

    net(c, "DELETE", f"/v2.0/ports/{port}")
    env.client("delete", uuid, project=c["project"])
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    fips, sgs = project_resources(c)
    assert sg not in sgs, seen
    net(c, "DELETE", f"/v2.0/networks/{tenant}")
