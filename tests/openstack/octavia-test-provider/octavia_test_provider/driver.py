"""An Octavia provider driver for the suite (tests/python/openstack_services.py).

Octavia's API hands every request to the provider driver registered
under `octavia.api.drivers` (octavia `api/drivers/utils.py`,
`call_provider`); a real provider (amphora, OVN) does the work elsewhere
and reports the outcome through octavia-lib's `DriverLibrary`
(`update_loadbalancer_status`), which `octavia-driver-agent` receives on
its status socket and writes to Octavia's database
(`api/drivers/driver_agent/driver_updater.py`). This one does no work: it
reports each create ACTIVE/ONLINE and each delete DELETED, a moment later,
from a thread, through that same path.

A load balancer whose id is named by a file `<state dir>/stall/<id>`
(OCTAVIA_TEST_PROVIDER_DIR) is not reported deleted while the file exists:
a provider that never finishes deleting, as in CAPO #1788's discussion.
"""
import os
import threading
import time

from octavia_lib.api.drivers import driver_lib
from octavia_lib.api.drivers import provider_base
from oslo_config import cfg

DELAY = 0.3


def _state_dir():
    return os.environ.get("OCTAVIA_TEST_PROVIDER_DIR", "/tmp/octavia-test-provider")


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

        def done():
            while os.path.exists(stall):
                time.sleep(0.5)
            self._report({"loadbalancers": [{"id": lb, "provisioning_status": "DELETED"}]})
        self._later(done)

    def loadbalancer_failover(self, loadbalancer_id):
        pass

    def listener_create(self, listener):
        self._later(lambda: self._report({
            "listeners": [{"id": listener.listener_id, "provisioning_status": "ACTIVE",
                           "operating_status": "ONLINE"}],
            "loadbalancers": [{"id": listener.loadbalancer_id, "provisioning_status": "ACTIVE"}]}))

    def listener_delete(self, listener):
        self._later(lambda: self._report({
            "listeners": [{"id": listener.listener_id, "provisioning_status": "DELETED"}],
            "loadbalancers": [{"id": listener.loadbalancer_id, "provisioning_status": "ACTIVE"}]}))
