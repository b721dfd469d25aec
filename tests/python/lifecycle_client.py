"""Drive cluster operations as magnum-api does, with Magnum 23.0.0's code.

    python lifecycle_client.py <conf> template <json fields>
    python lifecycle_client.py <conf> create <template uuid> <json overrides>
    python lifecycle_client.py <conf> delete <cluster uuid>
    python lifecycle_client.py <conf> get <cluster uuid>
    python lifecycle_client.py <conf> python-create <template uuid> <json overrides>

`template` inserts a ClusterTemplate with Magnum's objects. `create` builds
the Cluster object the way `ClustersController.post` does (template
defaults filled in, project/user from the context, a new uuid) and casts
`cluster_create` through magnum.conductor.api.API; `delete` casts
`cluster_delete`. `get` prints the cluster row, its nodegroups and
x509keypair count as Magnum's objects read them (null once deleted).
MC_PROJECT, MC_USER, MC_TOKEN and MC_TOKEN_INFO (the token body with its
catalog, JSON) set the requesting user's context, as keystonemiddleware
gives it to magnum-api. `python-create` runs Magnum's own conductor handler in process (the driver
replaced by one that only sets stack_id, as the CAPI drivers do first), to
compare the rows it writes with ours. Prints one JSON line.
"""
import json
import os
import sys
import uuid
import warnings

warnings.simplefilter("ignore")

PROJECT = os.environ.get("MC_PROJECT", "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5")
USER = os.environ.get("MC_USER", "2f1c0a6b9c2d4e7f8a1b2c3d4e5f6a7b")
TOKEN = os.environ.get("MC_TOKEN", "gAAAAABtoken")
TOKEN_INFO = json.loads(os.environ.get("MC_TOKEN_INFO", "null"))


def row(o):
    out = {}
    for k in o.fields:
        if k in ("cluster_template",) or not o.obj_attr_is_set(k):
            continue
        v = getattr(o, k)
        out[k] = v.isoformat() if hasattr(v, "isoformat") else v
    return out


def cluster_object(ctx, objects, template, overrides):
    """What ClustersController.post hands to cluster_create_async."""
    d = dict(name="k8s-" + uuid.uuid4().hex[:6], cluster_template_id=template.uuid, keypair=template.keypair_id,
             labels=dict(template.labels or {}), floating_ip_enabled=template.floating_ip_enabled,
             master_lb_enabled=template.master_lb_enabled, docker_volume_size=template.docker_volume_size,
             master_flavor_id=template.master_flavor_id, flavor_id=template.flavor_id,
             fixed_network=template.fixed_network, fixed_subnet=template.fixed_subnet, create_timeout=60,
             discovery_url=None)
    d.update(overrides.pop("cluster", {}))
    d.update(project_id=ctx.project_id, user_id=ctx.user_id, coe_version=None, container_version=None)
    c = objects.Cluster(ctx, **d)
    c.uuid = str(uuid.uuid4())
    return c


def main():
    conf, cmd, *rest = sys.argv[1:]
    from magnum.common import context as mctx
    from magnum.common import service as magnum_service
    from magnum import objects

    magnum_service.prepare_service(["magnum-api", "--config-file", conf])
    ctx = mctx.make_context(user_id=USER, project_id=PROJECT, is_admin=False, auth_token=TOKEN,
                            auth_token_info=TOKEN_INFO, user_name="demo", project_name="demo")
    admin = mctx.make_admin_context(all_tenants=True)
    out = {}
    if cmd == "template":
        fields = json.loads(rest[0])
        t = objects.ClusterTemplate(ctx, uuid=str(uuid.uuid4()), project_id=PROJECT, user_id=USER, **fields)
        t.create()
        out = {"uuid": t.uuid}
    elif cmd in ("create", "python-create"):
        template = objects.ClusterTemplate.get_by_uuid(ctx, rest[0])
        overrides = json.loads(rest[1])
        mc, nc = overrides.pop("master_count", 1), overrides.pop("node_count", 1)
        c = cluster_object(ctx, objects, template, overrides)
        if cmd == "create":
            from magnum.conductor import api
            api.API(context=ctx).cluster_create_async(c, mc, nc, c.create_timeout)
        else:
            from unittest import mock
            from magnum.conductor.handlers import cluster_conductor
            from magnum.conductor import utils as conductor_utils

            class Driver:
                def create_cluster(self, context, cluster, create_timeout):
                    cluster.stack_id = "stack-" + cluster.uuid[:8]
                    cluster.save()

            with mock.patch.object(conductor_utils, "notify_about_cluster_operation"), \
                    mock.patch("magnum.drivers.common.driver.Driver.get_driver_for_cluster",
                               return_value=Driver()):
                cluster_conductor.Handler().cluster_create(ctx, c, mc, nc, c.create_timeout)
        out = {"uuid": c.uuid}
    elif cmd == "delete":
        from magnum.conductor import api
        api.API(context=ctx).cluster_delete_async(rest[0])
        out = {"uuid": rest[0]}
    elif cmd == "get":
        from magnum.common import exception
        try:
            c = objects.Cluster.get_by_uuid(admin, rest[0])
            out = {"cluster": row(c),
                   "nodegroups": [row(n) for n in objects.NodeGroup.list(admin, rest[0])]}
        except exception.ClusterNotFound:
            out = {"cluster": None, "nodegroups": [row(n) for n in objects.NodeGroup.list(admin, rest[0])]}
        out["x509keypairs"] = len(objects.X509KeyPair.list(admin))
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
