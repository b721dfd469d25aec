"""One set of real OpenStack services for the whole test run (issue 48).

Keystone (scripts/keystone.sh), Neutron, Octavia, Cinder, Glance, Nova's
compute API and Manila (openstack_services.py) are started once per run,
as a deployment runs them once for all its tenants, and every test that
needs a cloud works in a project and with a user of its own
(`Cloud.tenant`), each magnum-api in a catalog region of its own
(`Cloud.region`: the user's CLI and tempest find that magnum-api, and the
shared services under the same region, never another test's).

What an operator makes once is made here once: the services' users (admin
and service on `service`), Magnum's trustee domain and its admin, the
external network `public`, the public images (with their `os_distro`, one
without), the flavors and Manila's public share types.

Who starts it:
- scripts/test-all.sh, before the tests (`python shared_cloud.py DIR
  --parent PID`), naming DIR in MC_SHARED_CLOUD for every test process
  (tempest's too); it stops when told (SIGTERM) or when PID is gone;
- otherwise a pytest run starts one the first time a test asks (conftest:
  the first process to ask, under a lock), and stops it when the run ends.

Isolation is checked, not assumed: a sentinel project holds one of each
kind of resource the tests make or delete, named as another cluster's
would be (a pre-identity `kubernetes` cluster's load balancer, floating
IP and volume, a network, a security group, a share). Every tenant's end
checks that they are all still there, unchanged, and that nothing was
added to that project (`Cloud.check_untouched`): a test whose conductor or
capi-sim reached into another project fails there."""
import argparse
import fcntl
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import ROOT, db_url, new_vhost, rabbitmqctl  # noqa: E402
from openstack_services import (Cinder, Glance, Manila, Neutron, Nova, Octavia, drop_databases,  # noqa: E402
                                fresh_database)

ENV = "MC_SHARED_CLOUD"
SERVICE_PW = "magnum-service-pw"
ADMIN_PROJECT = "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0"
MANILA_API = {"X-OpenStack-Manila-API-Version": "2.60"}
IMAGES = [("ubuntu-2204-kube-v1.30.4", "ubuntu"), ("ubuntu-2204-kube-v1.31.1", "ubuntu"),
          ("flatcar-kube-v1.30.4", "flatcar"), ("no-distro", None)]
FLAVORS = [("m1.small", 2, 4096, 20), ("m1.medium", 4, 8192, 40)]
MANILA_SHARE_TYPES = ("default", "Gold NFS")
# Who validates tokens as which user (each service's keystonemiddleware),
# and magnum-api's own.
SERVICE_USERS = ("magnum", "glance", "nova", "neutron", "manila", "octavia", "cinder")
# The interfaces the clients here use (public: users, magnum-api's clients;
# internal: a conductor configured so).
INTERFACES = ("public", "internal")


def _ks():
    # Imported late: test_lifecycle_keystone imports the Env of the
    # lifecycle tests, which the launcher does not need before it runs.
    import test_lifecycle_keystone
    return test_lifecycle_keystone


def _ok(status_body, *codes):
    status, _, body = status_body
    assert status in codes, (status, body)
    return body


class Cloud:
    """What a test process knows of the run's cloud (cloud.json), and what
    it may do there."""

    def __init__(self, d, state):
        self.dir = pathlib.Path(d)
        self.state = state
        self.keystone_url = state["keystone"]
        self.admin_pw = state["admin_pw"]
        self.service_pw = state["service_pw"]
        self.public = state["public"]
        s = state["services"]
        self.neutron, self.octavia, self.glance, self.nova = s["network"], s["load-balancer"], s["image"], \
            s["compute"]
        self.cinder, self.manila = s["block-storage"], s["sharev2"]
        self._admin = None
        self._lock = threading.Lock()
        self._n = 0

    def admin_token(self):
        """The cloud admin's token (renewed after half an hour: Keystone's
        tokens live an hour)."""
        with self._lock:
            if self._admin is None or time.time() > self._admin[1]:
                token, _ = _ks().password_token(self.keystone_url, "admin", self.admin_pw, project_name="admin")
                self._admin = (token, time.time() + 1800)
            return self._admin[0]

    def call(self, method, url, body=None, token=None, headers=None, ok=(200, 201, 202, 204)):
        status, _, got = _ks().call(method, url, token or self.admin_token(), body, headers)
        assert status in ok, (method, url, status, got)
        return got

    def _name(self, prefix):
        with self._lock:
            self._n += 1
            return f"{prefix}-{os.getpid()}-{self._n}-{uuid.uuid4().hex[:6]}"

    def tenant(self, prefix, password, role="member", keypair=None):
        """A project and a user with `role` on it, both new and named
        `<prefix>-...`: dict(project, project_name, user, user_name,
        password). `keypair`: (name, public key) made in Nova as that user
        (Nova's keypairs are per user)."""
        name = self._name(prefix)
        project, user = _ks().user_with_role(self.keystone_url, self.admin_token(), name, name, password, role)
        t = dict(project=project, project_name=name, user=user, user_name=name, password=password)
        if keypair:
            token, _ = _ks().password_token(self.keystone_url, name, password, project_id=project)
            self.call("POST", f"{self.nova}/os-keypairs",
                      {"keypair": {"name": keypair[0], "public_key": keypair[1]}}, token=token)
        return t

    def region(self, prefix, copy=(), **extra):
        """A catalog region of its own holding `extra` (service type -> URL,
        e.g. a magnum-api's container-infra) and the cloud's services of
        the types in `copy` (RegionOne's endpoints: for a client that looks
        every service up in its one region, as tempest does): its name.
        `drop_region` takes it out. (Every endpoint is in every token's
        catalog, which Keystone builds anew for each token it issues or
        validates: a region holds only what its clients look up there.)"""
        region = self._name(prefix)
        self.call("POST", f"{self.keystone_url}/regions", {"region": {"id": region}})
        if copy:
            services = {s["id"]: s["type"] for s in self.call("GET", f"{self.keystone_url}/services")["services"]}
            for e in self.call("GET", f"{self.keystone_url}/endpoints")["endpoints"]:
                if e["region_id"] == "RegionOne" and services.get(e["service_id"]) in copy:
                    self.call("POST", f"{self.keystone_url}/endpoints", {"endpoint": {
                        "service_id": e["service_id"], "interface": e["interface"], "url": e["url"],
                        "region_id": region}})
        # One service of each type for every region's endpoints: tempest
        # takes the first service of a type in the catalog and only then
        # filters its endpoints by region, falling back to that service's
        # first endpoint (tempest/lib/auth.py, KeystoneV3AuthProvider
        # `_base_url`); with a service per region it reached another
        # region's magnum-api as soon as other tests registered theirs
        # (tempest's "Connection refused" as the Python stage started).
        with open(self.dir / "services.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for kind, url in extra.items():
                have = self.call("GET", f"{self.keystone_url}/services?type={kind}")["services"]
                sid = min(x["id"] for x in have) if have else self.call(
                    "POST", f"{self.keystone_url}/services", {"service": {"type": kind, "name": kind}})["service"]["id"]
                for interface in INTERFACES:
                    self.call("POST", f"{self.keystone_url}/endpoints", {"endpoint": {
                        "service_id": sid, "interface": interface, "url": url, "region_id": region}})
        return region

    def drop_region(self, region):
        """The region's endpoints, the services only it held, the region
        (under the lock `region` takes: a service another region is about
        to use is not deleted from under it)."""
        with open(self.dir / "services.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            endpoints = self.call("GET", f"{self.keystone_url}/endpoints")["endpoints"]
            mine = [e for e in endpoints if e["region_id"] == region]
            elsewhere = {e["service_id"] for e in endpoints if e["region_id"] != region}
            for e in mine:
                self.call("DELETE", f"{self.keystone_url}/endpoints/{e['id']}")
            for sid in {e["service_id"] for e in mine} - elsewhere:
                self.call("DELETE", f"{self.keystone_url}/services/{sid}")
            self.call("DELETE", f"{self.keystone_url}/regions/{region}")

    def octavia_stall(self, lb_id):
        """The suite's Octavia provider holds `lb_id`'s deletion until
        `octavia_release`."""
        open(os.path.join(self.state["octavia_dir"], "stall", lb_id), "w").close()

    def octavia_release(self, lb_id):
        os.remove(os.path.join(self.state["octavia_dir"], "stall", lb_id))

    def manila_refuse(self, project, refuse=True):
        """Manila's policy refuses to list the shares of `project` (403,
        Manila's own "Policy doesn't allow share:get_all"), as a cloud
        whose Manila does not grant the role a cluster's credential has;
        `refuse=False` takes that back. Other projects keep Manila's
        defaults (`manila.policies.shares`, `share:get_all`)."""
        path = self.state["manila_policy"]
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            listed = path + ".refused"
            refused = set(open(listed).read().split()) if os.path.exists(listed) else set()
            (refused.add if refuse else refused.discard)(project)
            with open(listed, "w") as f:
                f.write("\n".join(sorted(refused)))
            rule = "".join(f"not project_id:{p} and " for p in sorted(refused))
            with open(path + ".new", "w") as f:
                f.write(f'"share:get_all": "{rule}((rule:context_is_admin) or (rule:project-reader))"\n'
                        if refused else "{}\n")
            os.replace(path + ".new", path)

    def octavia_fail_once(self, lb_id):
        """The suite's Octavia provider fails `lb_id`'s next delete (ERROR)."""
        open(os.path.join(self.state["octavia_dir"], "fail", lb_id), "w").close()

    def check_untouched(self):
        """The sentinel project holds exactly what it was given, as it was
        given it (see the module's doc)."""
        want = self.state["sentinel"]
        got = sentinel_view(self, want["project"])
        assert got == want["view"], ("another project's resources were changed", want["view"], got)


def sentinel_view(cloud, project):
    """What `project` holds, as the admin sees it: {kind: sorted [(id,
    name, status)]}."""
    def rows(items, status="status"):
        return sorted([i["id"], i.get("name", ""), i.get(status, "")] for i in items)
    n = cloud.neutron
    view = {
        "networks": rows(cloud.call("GET", f"{n}/v2.0/networks?project_id={project}")["networks"]),
        "ports": rows(cloud.call("GET", f"{n}/v2.0/ports?project_id={project}")["ports"], "device_owner"),
        "floatingips": sorted([f["id"], f.get("description", ""), f.get("port_id") or ""] for f in cloud.call(
            "GET", f"{n}/v2.0/floatingips?project_id={project}")["floatingips"]),
        "security_groups": rows(cloud.call("GET", f"{n}/v2.0/security-groups?project_id={project}")[
            "security_groups"], "description"),
        "loadbalancers": rows(cloud.call("GET", f"{cloud.octavia}/v2/lbaas/loadbalancers?project_id={project}")[
            "loadbalancers"], "provisioning_status"),
        "volumes": rows(cloud.call("GET", f"{cloud.cinder}/{cloud.state['admin_project']}/volumes/detail"
                                          f"?all_tenants=1&project_id={project}")["volumes"]),
        "shares": rows(cloud.call("GET", f"{cloud.manila}/shares/detail?all_tenants=1&project_id={project}",
                                  headers=MANILA_API)["shares"]),
    }
    return view


_cloud = None
_get_lock = threading.Lock()


def get(timeout=900):
    """The run's cloud, started if this run has none yet (see the module's
    doc); waits until it is ready."""
    global _cloud
    with _get_lock:
        if _cloud is not None:
            return _cloud
        d = os.environ.get(ENV)
        assert d, f"{ENV} is not set: conftest sets it for a pytest run, scripts/test-all.sh for the suite"
        os.makedirs(d, exist_ok=True)
        start_once(d)
        state_file = os.path.join(d, "cloud.json")
        deadline = time.time() + timeout
        while not os.path.exists(state_file):
            failed = os.path.join(d, "failed")
            if os.path.exists(failed):
                raise AssertionError(f"the run's cloud did not start:\n{open(failed).read()[-4000:]}")
            assert time.time() < deadline, f"the run's cloud was not ready within {timeout} s: see {d}"
            time.sleep(0.5)
        with open(state_file) as f:
            _cloud = Cloud(d, json.load(f))
        return _cloud


def start_once(d):
    """The launcher, in the background, unless one was started for `d`
    (by this run's first process to ask, or by scripts/test-all.sh)."""
    with open(os.path.join(d, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(d, "pid")):
            return
        parent = os.environ.get("MC_SHARED_CLOUD_PARENT", str(os.getpid()))
        log = open(os.path.join(d, "launcher.log"), "a")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), d, "--parent", parent], stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with open(os.path.join(d, "pid"), "w") as f:
            f.write(str(p.pid))


def stop_started(d):
    """Stop the launcher of `d` (SIGTERM; it stops its services) and wait
    until it is gone."""
    try:
        pid = int(open(os.path.join(d, "pid")).read())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # Reap it when it is this process's child.
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)


# ---------------------------------------------------------------- launcher

def serve(d, parent):
    d = pathlib.Path(d)
    stopping = threading.Event()

    def stop(*_):
        # While starting: give up at once (what started is stopped below).
        if not stopping.is_set() and not (d / "cloud.json").exists():
            stopping.set()
            raise SystemExit("stopped while starting")
        stopping.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started, cleanup = [], []
    try:
        state = launch(d, started, cleanup)
        tmp = d / "cloud.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, d / "cloud.json")
        print(f"[shared cloud] ready at {time.strftime('%H:%M:%S')}", flush=True)
        while not stopping.wait(2):
            if parent:
                try:
                    os.kill(parent, 0)
                except ProcessLookupError:
                    print("[shared cloud] the run is gone: stopping", flush=True)
                    break
    except BaseException:
        (d / "failed").write_text(traceback.format_exc())
        traceback.print_exc()
    finally:
        def stop_one(s):
            try:
                s.stop()
            except Exception:
                traceback.print_exc()
        # Side by side: each waits up to 30 s for its processes.
        with ThreadPoolExecutor(max(1, len(started))) as pool:
            list(pool.map(stop_one, started))
        for f in reversed(cleanup):
            try:
                f()
            except Exception:
                traceback.print_exc()
        print("[shared cloud] stopped", flush=True)


def launch(d, started, cleanup):
    ks = _ks()
    call, password_token = ks.call, ks.password_token
    t0 = time.time()
    kd = d / "keystone"
    kd.mkdir(exist_ok=True)
    # In MariaDB: many processes write at once (SQLite refuses them with
    # "database is locked").
    ks_db = f"shared_{os.getpid()}_keystone"
    fresh_database(ks_db)
    cleanup.append(lambda: drop_databases([ks_db]))
    url, admin_pw, admin = ks.start_keystone(kd, database=db_url(ks_db, ""))
    cleanup.append(lambda: subprocess.run([ks.KEYSTONE, "stop", str(kd)], timeout=60))
    print(f"[shared cloud] Keystone at {url} after {time.time() - t0:.0f} s", flush=True)

    def make(kind, body):
        status, _, got = call("POST", f"{url}/{kind}s", admin, {kind: body})
        assert status == 201, (kind, status, got)
        return got[kind]["id"]

    def role(name):
        _, _, roles = call("GET", f"{url}/roles?name={name}", admin)
        return roles["roles"][0]["id"] if roles["roles"] else make("role", {"name": name})

    def grant(target, user, role_id):
        status, _, _ = call("PUT", f"{url}/{target}/users/{user}/roles/{role_id}", admin)
        assert status == 204, status

    admin_role, service_role = role("admin"), role("service")
    service = make("project", {"name": "service", "domain_id": "default"})
    for name in SERVICE_USERS:
        user = make("user", {"name": name, "domain_id": "default", "password": SERVICE_PW})
        grant(f"projects/{service}", user, admin_role)
        grant(f"projects/{service}", user, service_role)  # keystonemiddleware validates tokens with it
    # The tests' conductors authenticate as the cloud admin ([keystone_auth],
    # system scope) and vouch as a service for what Cinder takes only from
    # one (a stale attachment's delete, sent with X-Service-Token): the
    # `service` role, as a deployment gives Magnum's service user.
    _, _, admins = call("GET", f"{url}/users?name=admin", admin)
    grant("system", admins["users"][0]["id"], service_role)
    # The trustee domain and its admin every Magnum deployment configures
    # ([trust]); Magnum 22's API resolves it on each policy check.
    trustee_domain = make("domain", {"name": "magnum"})
    trustee_admin = make("user", {"name": "trustee_domain_admin", "domain_id": trustee_domain,
                                  "password": SERVICE_PW})
    grant(f"domains/{trustee_domain}", trustee_admin, admin_role)

    vhost = new_vhost("openstack")
    cleanup.append(lambda: rabbitmqctl("delete_vhost", vhost))
    n = f"shared_{os.getpid()}"
    for sub in ("neutron", "octavia", "cinder", "glance", "nova", "manila"):
        (d / sub).mkdir(exist_ok=True)

    def keep(service):
        started.append(service)
        return service

    # Started side by side: each mostly waits on its imports and its
    # database; Octavia needs only Neutron's address.
    with ThreadPoolExecutor(6) as pool:
        neutron_f = pool.submit(lambda: keep(Neutron(d / "neutron", f"{n}_neutron", vhost, url, SERVICE_PW)))
        cinder_f = pool.submit(lambda: keep(Cinder(d / "cinder", f"{n}_cinder", vhost, url, SERVICE_PW)))
        glance_f = pool.submit(lambda: keep(Glance(d / "glance", f"{n}_glance", url, SERVICE_PW)))
        nova_f = pool.submit(lambda: keep(Nova(d / "nova", f"{n}_nova", vhost, url, SERVICE_PW)))
        manila_f = pool.submit(lambda: keep(Manila(d / "manila", f"{n}_manila", vhost, url, SERVICE_PW)))
        octavia_f = pool.submit(lambda: keep(Octavia(d / "octavia", f"{n}_octavia", neutron=neutron_f.result().url,
                                                     keystone_url=url, password=SERVICE_PW)))
        neutron, cinder, glance, nova, manila, octavia = (f.result() for f in (
            neutron_f, cinder_f, glance_f, nova_f, manila_f, octavia_f))
    print(f"[shared cloud] services up after {time.time() - t0:.0f} s", flush=True)

    endpoints = {"network": neutron.url, "load-balancer": octavia.url, "image": glance.url, "compute": nova.url,
                 "sharev2": manila.url, "block-storage": cinder.url}
    names = {"network": "neutron", "load-balancer": "octavia", "image": "glance", "compute": "nova",
             "sharev2": "manilav2", "block-storage": "cinderv3"}
    for kind, where in endpoints.items():
        sid = make("service", {"type": kind, "name": names[kind]})
        # Cinder's catalog URL names the project, as deployments register it.
        where = f"{where}/$(project_id)s" if kind == "block-storage" else where
        for interface in INTERFACES:
            make("endpoint", {"service_id": sid, "interface": interface, "url": where, "region_id": "RegionOne"})

    # What the operator makes once: the external network, public images
    # (with their os_distro; one without), flavors, Manila's share types.
    public = _ok(call("POST", f"{neutron.url}/v2.0/networks", admin, {"network": {
        "name": "public", "router:external": True, "provider:network_type": "flat",
        "provider:physical_network": "public", "project_id": ADMIN_PROJECT}}), 201)["network"]["id"]
    _ok(call("POST", f"{neutron.url}/v2.0/subnets", admin, {"subnet": {
        "network_id": public, "cidr": "172.24.4.0/24", "ip_version": 4, "project_id": ADMIN_PROJECT}}), 201)
    for name, distro in IMAGES:
        body = {"name": name, "visibility": "public", "container_format": "bare", "disk_format": "qcow2"}
        if distro:
            body["os_distro"] = distro
        _ok(call("POST", f"{glance.url}/v2/images", admin, body), 201)
    for name, vcpus, ram, disk in FLAVORS:
        _ok(call("POST", f"{nova.url}/flavors", admin, {"flavor": {
            "name": name, "vcpus": vcpus, "ram": ram, "disk": disk}}), 200)
    for name in MANILA_SHARE_TYPES:
        _ok(call("POST", f"{manila.url}/types", admin, {"share_type": {
            "name": name, "share_type_access:is_public": True,
            "extra_specs": {"driver_handles_share_servers": "false", "snapshot_support": "true"}}}, MANILA_API), 200)

    _, body = password_token(url, "admin", admin_pw, project_name="admin")
    admin_project = body["token"]["project"]["id"]
    state = dict(keystone=url, admin_pw=admin_pw, service_pw=SERVICE_PW, public=public,
                 admin_project=admin_project, octavia_dir=octavia.dir, manila_policy=manila.policy_file,
                 services=endpoints)
    state["sentinel"] = sentinel(Cloud(d, dict(state, sentinel=None)))
    print(f"[shared cloud] ready after {time.time() - t0:.0f} s", flush=True)
    return state


def sentinel(cloud):
    """A project of another tenant with what a pre-identity cluster of
    theirs made (OCCM's and Cinder CSI's names with the `kubernetes`
    identity), and a network, a security group and a share: its view."""
    t = cloud.tenant("sentinel", "sentinel-pw")
    token, _ = _ks().password_token(cloud.keystone_url, t["user_name"], "sentinel-pw", project_id=t["project"])
    p = t["project"]
    net = cloud.call("POST", f"{cloud.neutron}/v2.0/networks", {"network": {"name": "sentinel"}},
                     token=token)["network"]["id"]
    cloud.call("POST", f"{cloud.neutron}/v2.0/subnets", {"subnet": {
        "network_id": net, "cidr": "10.77.0.0/24", "ip_version": 4}}, token=token)
    cloud.call("POST", f"{cloud.neutron}/v2.0/security-groups", {"security_group": {
        "name": "lb-sg-sentinel-default-web",
        "description": "Security Group for default/web Service LoadBalancer in cluster kubernetes"}}, token=token)
    lb = cloud.call("POST", f"{cloud.octavia}/v2/lbaas/loadbalancers", {"loadbalancer": {
        "name": "kube_service_kubernetes_default_web", "vip_network_id": net,
        "description": "Kubernetes external service default/web from cluster kubernetes"}},
        token=token)["loadbalancer"]["id"]
    cloud.call("POST", f"{cloud.neutron}/v2.0/floatingips", {"floatingip": {
        "floating_network_id": cloud.public,
        "description": "Floating IP for Kubernetes external service default/web from cluster kubernetes"}},
        token=token)
    # Cinder's scheduler places a volume only on a backend whose volume
    # service has reported its capabilities; one created before that (the
    # scheduler stops waiting 60 s after its start: cinder/scheduler/
    # manager.py, SchedulerManager._wait_for_scheduler) goes to "error",
    # which a loaded machine saw (the volume service slower to start than
    # the scheduler's wait). So the pools first, as for Manila below.
    pools = f"{cloud.cinder}/{cloud.state['admin_project']}/scheduler-stats/get_pools"
    deadline = time.time() + 300
    while not cloud.call("GET", pools)["pools"]:
        assert time.time() < deadline, "Cinder's scheduler knows no backend"
        time.sleep(0.5)
    vol = cloud.call("POST", f"{cloud.cinder}/{p}/volumes", {"volume": {
        "size": 1, "name": "pvc-sentinel", "metadata": {"cinder.csi.openstack.org/cluster": "kubernetes"}}},
        token=token)["volume"]["id"]
    # Manila's scheduler takes shares once the share service has told it
    # its backend (at its start: openstack_services.Manila).
    deadline = time.time() + 300
    while not cloud.call("GET", f"{cloud.manila}/scheduler-stats/pools", headers=MANILA_API)["pools"]:
        assert time.time() < deadline, "Manila's scheduler knows no backend"
        time.sleep(0.5)
    share = cloud.call("POST", f"{cloud.manila}/shares", {"share": {
        "share_proto": "NFS", "size": 1, "name": "pvc-sentinel", "metadata": {"cluster": "kubernetes"}}},
        token=token, headers=MANILA_API)["share"]["id"]
    while True:
        v = cloud.call("GET", f"{cloud.cinder}/{p}/volumes/{vol}", token=token)["volume"]["status"]
        s = cloud.call("GET", f"{cloud.manila}/shares/{share}", token=token, headers=MANILA_API)["share"]["status"]
        b = cloud.call("GET", f"{cloud.octavia}/v2/lbaas/loadbalancers/{lb}", token=token)["loadbalancer"][
            "provisioning_status"]
        if (v, s, b) == ("available", "available", "ACTIVE"):
            break
        assert "error" not in (v, s) and b != "ERROR" and time.time() < deadline, (v, s, b)
        time.sleep(0.5)
    return dict(project=p, view=sentinel_view(cloud, p))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="where the services run and cloud.json is written when they are ready")
    ap.add_argument("--parent", type=int, default=0, help="stop when this process is gone")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "pid"), "w") as f:
        f.write(str(os.getpid()))
    os.chdir(ROOT)
    serve(a.dir, a.parent)


if __name__ == "__main__":
    main()
