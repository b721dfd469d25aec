"""The `magnum.drivers` entry point for clusters run by the Rust conductor.

magnum-api loads this class to decide which templates it accepts and to
check control-plane sizes; the work itself is done by the Rust
magnum-conductor, which receives the RPCs. The rules here are the
conductor's own (conductor/src/lifecycle/rows.rs, scale.rs), so a request
refused by the conductor is refused by the API first, with Magnum's
exception.
"""
from magnum.common import exception
import magnum.conf
from magnum.drivers.common import driver

from magnum_capi_rust import conf as driver_conf

CONF = magnum.conf.CONF
driver_conf.register_opts(CONF)

NAME = "k8s_capi_rust"


def _not_here(operation):
    raise NotImplementedError(
        f"{operation} is done by the Rust magnum-conductor; the {NAME} driver only "
        f"serves magnum-api's checks. Is a Python magnum-conductor running on this queue?")


class Driver(driver.Driver):
    """Templates and checks for clusters the Rust conductor runs on Cluster API."""

    @property
    def provides(self):
        return [{"server_type": "vm", "os": os_distro.strip(), "coe": "kubernetes"}
                for os_distro in CONF.capi.os_distros if os_distro.strip()]

    def validate_master_size(self, node_count):
        """An odd number of control-plane nodes, at least 1 (etcd quorum)."""
        if node_count is None or node_count < 1 or node_count % 2 == 0:
            raise exception.MasterNGSizeInvalid(requested_size=node_count)

    def validate_master_resize(self, node_count):
        """Resizing the control plane keeps an odd count, at least 1."""
        self.validate_master_size(node_count)

    # What the conductor does: never called in magnum-api.
    def create_cluster(self, context, cluster, cluster_create_timeout):
        _not_here("create_cluster")

    def update_cluster(self, context, cluster, scale_manager=None, rollback=False):
        _not_here("update_cluster")

    def upgrade_cluster(self, context, cluster, cluster_template, max_batch_size, nodegroup,
                        scale_manager=None, rollback=False):
        _not_here("upgrade_cluster")

    def delete_cluster(self, context, cluster):
        _not_here("delete_cluster")

    def resize_cluster(self, context, cluster, resize_manager, node_count, nodes_to_remove,
                       nodegroup=None):
        _not_here("resize_cluster")

    def create_federation(self, context, federation):
        _not_here("create_federation")

    def update_federation(self, context, federation):
        _not_here("update_federation")

    def delete_federation(self, context, federation):
        _not_here("delete_federation")

    def create_nodegroup(self, context, cluster, nodegroup):
        _not_here("create_nodegroup")

    def update_nodegroup(self, context, cluster, nodegroup):
        _not_here("update_nodegroup")

    def delete_nodegroup(self, context, cluster, nodegroup):
        _not_here("delete_nodegroup")
