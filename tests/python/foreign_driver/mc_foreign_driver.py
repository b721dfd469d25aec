"""A stand-in for another driver, registered under magnum-capi-helm's entry
point name (`k8s_capi_helm_v1`), for a real Python magnum-conductor 23.0.0 in
tests/python/test_foreign.py: each operation appends {"op", "cluster"} to
the JSON-lines file MC_FOREIGN_LOG; `upgrade_cluster` refuses, so a failure
reply is seen passing through. On sys.path by PYTHONPATH only (the
dist-info beside it registers the entry point)."""
import json
import os

from magnum.common import exception
from magnum.drivers.common import driver


def _record(op, cluster, nodegroup=None):
    entry = {"op": op, "cluster": cluster.uuid}
    if nodegroup is not None:
        entry["nodegroup"] = nodegroup.name
    with open(os.environ["MC_FOREIGN_LOG"], "a") as f:
        f.write(json.dumps(entry) + "\n")


class Driver(driver.Driver):
    @property
    def provides(self):
        return [{"server_type": "vm", "os": "ubuntu", "coe": "kubernetes"}]

    def update_cluster_status(self, context, cluster, use_admin_ctx=False):
        pass

    def create_cluster(self, context, cluster, cluster_create_timeout):
        _record("create_cluster", cluster)
        cluster.stack_id = "fwd-" + cluster.uuid[:8]
        cluster.save()

    def update_cluster(self, context, cluster, scale_manager=None, rollback=False):
        _record("update_cluster", cluster)

    def upgrade_cluster(self, context, cluster, cluster_template, max_batch_size, nodegroup,
                        scale_manager=None, rollback=False):
        _record("upgrade_cluster", cluster)
        raise exception.NotSupported(operation="Upgrading in the stand-in driver")

    def delete_cluster(self, context, cluster):
        _record("delete_cluster", cluster)

    def resize_cluster(self, context, cluster, resize_manager, node_count, nodes_to_remove,
                       nodegroup=None):
        _record("resize_cluster", cluster)

    def rotate_credential(self, context, cluster):
        _record("rotate_credential", cluster)

    def create_nodegroup(self, context, cluster, nodegroup):
        _record("create_nodegroup", cluster, nodegroup)

    def update_nodegroup(self, context, cluster, nodegroup):
        _record("update_nodegroup", cluster, nodegroup)

    def delete_nodegroup(self, context, cluster, nodegroup):
        _record("delete_nodegroup", cluster, nodegroup)

    def create_federation(self, context, federation):
        raise NotImplementedError()

    def update_federation(self, context, federation):
        raise NotImplementedError()

    def delete_federation(self, context, federation):
        raise NotImplementedError()
