"""An Octavia provider driver for the suite (tests/python/openstack_services.py).

Octavia's API hands every request to the provider driver registered
under `octavia.api.drivers` (octavia `api/drivers/utils.py`,
`call_provider`); a real provider (amphora, OVN) does the work elsewhere
and reports the outcome through octavia-lib's `DriverLibrary`
(`update_loadbalancer_status`), which `octavia-driver-agent` receives on
its status socket and writes to Octavia's database
(`api/drivers/driver_agent/driver_updater.py`). This one does no work: it
reports each create ACTIVE/ONLINE and each delete DELETED (a cascade
delete's listeners, pools, members and monitors with it), a moment later,
from a thread, through that same path (load balancers, listeners, pools,
health monitors; Octavia's API has validated the request first, e.g. a
pool's `lb_algorithm` and a monitor's type and timings).

The VIP port is a real Neutron port when OCTAVIA_TEST_PROVIDER_NEUTRON
names the Neutron API (noauth): made on the VIP subnet (or network) as
Octavia's `allowed_address_pairs` network driver makes it
(`allocate_vip`: name `octavia-lb-<id>`, device_owner `Octavia`,
device_id `lb-<id>`, admin state down, in the load balancer's project),
through the provider hook Octavia's API calls first
(`api/v2/controllers/load_balancer.py`, `driver.create_vip_port`), and
deleted when the load balancer is (`deallocate_vip`: a port Octavia
owns). So a load balancer holds its network as on a real cloud: Neutron
refuses to delete the network while the port is on it.

A load balancer whose id is named by a file `<state dir>/stall/<id>`
(OCTAVIA_TEST_PROVIDER_DIR) is not reported deleted while the file exists:
a provider that never finishes deleting, as in CAPO #1788's discussion.
One named by `<state dir>/fail/<id>` has its next delete fail: the file is
removed and the load balancer reported ERROR (what the amphora driver's
delete flow reverts to when a step fails: octavia
`controller/worker/v2/tasks/lifecycle_tasks.py`,
`LoadBalancerToErrorOnRevertTask`), its VIP port left; the delete after
that succeeds.
"""
import json
import os
import threading
import time
import urllib.error
import urllib.request

from octavia_lib.api.drivers import driver_lib
from octavia_lib.api.drivers import provider_base
from oslo_config import cfg

DELAY = 0.3


def _state_dir():
    return os.environ.get("OCTAVIA_TEST_PROVIDER_DIR", "/tmp/octavia-test-provider")


_session = []


def _token():
    """A token of Octavia's own service user ([service_auth], as its
    allowed-address-pairs driver authenticates to Neutron through
    octavia.common.keystone.KeystoneSession) when
    OCTAVIA_TEST_PROVIDER_SERVICE_AUTH is set, else None (a Neutron without
    authentication)."""
    if not os.environ.get("OCTAVIA_TEST_PROVIDER_SERVICE_AUTH"):
        return None
    if not _session:
        from octavia.common import keystone
        _session.append(keystone.KeystoneSession().get_session())
    return _session[0].get_token()


def _neutron(method, path, body=None):
    """A request to the Neutron API named by OCTAVIA_TEST_PROVIDER_NEUTRON,
    with the service user's token; its JSON answer (None for 404)."""
    url = os.environ["OCTAVIA_TEST_PROVIDER_NEUTRON"] + path
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    token = _token()
    if token:
        headers["X-Auth-Token"] = token
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return json.loads(raw) if raw else {}
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


class Driver(provider_base.ProviderDriver):
    def __init__(self):
        super().__init__()
        agent = cfg.CONF.driver_agent
        self.lib = driver_lib.DriverLibrary(status_socket=agent.status_socket_path,
                                            stats_socket=agent.stats_socket_path,
                                            get_socket=agent.get_socket_path)

    def _later(self, fn):
        t = threading.Thread(target=fn, daemon=True)
        t.start()

    def _report(self, status):
        time.sleep(DELAY)
        self.lib.update_loadbalancer_status(status)

    def create_vip_port(self, loadbalancer_id, project_id, vip_dictionary, additional_vip_dicts):
        if not os.environ.get("OCTAVIA_TEST_PROVIDER_NEUTRON"):
            return super().create_vip_port(loadbalancer_id, project_id, vip_dictionary, additional_vip_dicts)
        subnet = vip_dictionary.get("vip_subnet_id")
        network = vip_dictionary.get("vip_network_id")
        # A request naming only the network gets a subnet id the no-op
        # network driver made up while validating it: not Neutron's.
        found = _neutron("GET", f"/v2.0/subnets/{subnet}") if subnet else None
        if found:
            network = found["subnet"]["network_id"]
        else:
            subnet = None
        port = {"name": f"octavia-lb-{loadbalancer_id}", "network_id": network, "admin_state_up": False,
                "device_id": f"lb-{loadbalancer_id}", "device_owner": "Octavia", "project_id": project_id}
        if subnet:
            port["fixed_ips"] = [{"subnet_id": subnet}]
        made = _neutron("POST", "/v2.0/ports", {"port": port})["port"]
        ip = made["fixed_ips"][0] if made["fixed_ips"] else {}
        out = dict(vip_dictionary, vip_port_id=made["id"], vip_network_id=network,
                   vip_subnet_id=ip.get("subnet_id", subnet), vip_address=ip.get("ip_address"),
                   octavia_owned=True)
        return out, additional_vip_dicts

    def _release_vip_port(self, lb):
        if os.environ.get("OCTAVIA_TEST_PROVIDER_NEUTRON"):
            ports = _neutron("GET", f"/v2.0/ports?device_id=lb-{lb}&device_owner=Octavia") or {"ports": []}
            for p in ports["ports"]:
                _neutron("DELETE", f"/v2.0/ports/{p['id']}")

    def loadbalancer_create(self, loadbalancer):
        lb = loadbalancer.loadbalancer_id
        self._later(lambda: self._report({"loadbalancers": [
            {"id": lb, "provisioning_status": "ACTIVE", "operating_status": "ONLINE"}]}))

    def loadbalancer_update(self, old_loadbalancer, new_loadbalancer):
        lb = new_loadbalancer.loadbalancer_id
        self._later(lambda: self._report({"loadbalancers": [{"id": lb, "provisioning_status": "ACTIVE"}]}))

    def loadbalancer_delete(self, loadbalancer, cascade=False):
        lb = loadbalancer.loadbalancer_id
        stall = os.path.join(_state_dir(), "stall", lb)
        fail = os.path.join(_state_dir(), "fail", lb)
        if os.path.exists(fail):
            os.remove(fail)
            self._later(lambda: self._report({"loadbalancers": [{"id": lb, "provisioning_status": "ERROR"}]}))
            return

        # With `cascade`, what hangs off the load balancer goes with it, as
        # a real provider reports it (the driver agent then deletes their
        # rows: octavia `api/drivers/driver_agent/driver_updater.py`,
        # `_process_status_update`); Octavia's API hands them over in the
        # load balancer (`api/drivers/utils.py`,
        # `db_loadbalancer_to_provider_loadbalancer`).
        gone = {"loadbalancers": [{"id": lb, "provisioning_status": "DELETED"}]}
        if cascade:
            pools = loadbalancer.pools or []
            for key, ids in (
                    ("listeners", [x.listener_id for x in loadbalancer.listeners or []]),
                    ("pools", [p.pool_id for p in pools]),
                    ("members", [m.member_id for p in pools for m in p.members or []]),
                    ("healthmonitors", [p.healthmonitor.healthmonitor_id for p in pools if p.healthmonitor])):
                if ids:
                    gone[key] = [{"id": i, "provisioning_status": "DELETED"} for i in ids]

        def done():
            while os.path.exists(stall):
                time.sleep(0.5)
            self._release_vip_port(lb)
            self._report(gone)
        self._later(done)

    def loadbalancer_failover(self, loadbalancer_id):
        pass

    def listener_create(self, listener):
        self._later(lambda: self._report({
            "listeners": [{"id": listener.listener_id, "provisioning_status": "ACTIVE",
                           "operating_status": "ONLINE"}],
            "loadbalancers": [{"id": listener.loadbalancer_id, "provisioning_status": "ACTIVE"}]}))

    # Pools and health monitors (what OCCM makes per Service port:
    # cloud-provider-openstack `pkg/openstack/loadbalancer.go`,
    # `ensureOctaviaPool`, `ensureOctaviaHealthMonitor`). Octavia's API sets
    # the load balancer, the listener (and the pool, for a monitor)
    # PENDING_UPDATE first (`api/v2/controllers/pool.py`,
    # `health_monitor.py`, `_test_lb_and_listener_statuses`); the provider
    # reports them ACTIVE again. A monitor names only its pool: the rest
    # is read back through octavia-lib's get socket (`get_pool`).
    def _pool_done(self, pool_id, lb, listener, extra=None):
        status = {"pools": [{"id": pool_id, "provisioning_status": "ACTIVE", "operating_status": "ONLINE"}],
                  "loadbalancers": [{"id": lb, "provisioning_status": "ACTIVE"}]}
        if listener:
            status["listeners"] = [{"id": listener, "provisioning_status": "ACTIVE"}]
        status.update(extra or {})
        self._report(status)

    def pool_create(self, pool):
        self._later(lambda: self._pool_done(pool.pool_id, pool.loadbalancer_id, pool.listener_id))

    def pool_delete(self, pool):
        def done():
            self._report({"pools": [{"id": pool.pool_id, "provisioning_status": "DELETED"}],
                          "loadbalancers": [{"id": pool.loadbalancer_id, "provisioning_status": "ACTIVE"}]})
        self._later(done)

    def _monitor_done(self, healthmonitor, status):
        hm, pool_id = healthmonitor.healthmonitor_id, healthmonitor.pool_id

        def done():
            time.sleep(DELAY)
            pool = self.lib.get_pool(pool_id)
            self._pool_done(pool_id, pool.loadbalancer_id, pool.listener_id,
                            {"healthmonitors": [dict(status, id=hm)]})
        self._later(done)

    def health_monitor_create(self, healthmonitor):
        self._monitor_done(healthmonitor, {"provisioning_status": "ACTIVE", "operating_status": "ONLINE"})

    def health_monitor_delete(self, healthmonitor):
        self._monitor_done(healthmonitor, {"provisioning_status": "DELETED"})

    def listener_delete(self, listener):
        self._later(lambda: self._report({
            "listeners": [{"id": listener.listener_id, "provisioning_status": "DELETED"}],
            "loadbalancers": [{"id": listener.loadbalancer_id, "provisioning_status": "ACTIVE"}]}))
