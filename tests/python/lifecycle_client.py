"""Drive cluster operations as magnum-api does, with Magnum 23.0.0's code.

    python lifecycle_client.py <conf> template <json fields>
    python lifecycle_client.py <conf> create <template uuid> <json overrides>
    python lifecycle_client.py <conf> delete <cluster uuid>
    python lifecycle_client.py <conf> get <cluster uuid>
    python lifecycle_client.py <conf> serve     (`get` for each JSON uuid line on stdin)
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

Day-2, as magnum-api sends them (objects loaded the way its controllers do):

    resize <cluster> <node_count> <json nodes_to_remove> [nodegroup]
    update <cluster> <json {"node_count", "health_status", "health_status_reason"}>
    upgrade <cluster> <template uuid> <max_batch_size> [nodegroup]   (a call)
    ng-create <cluster> <json fields>       (defaults filled as the API does)
    ng-update <cluster> <nodegroup> <json fields>
    ng-delete <cluster> <nodegroup>
    set <cluster> <json cluster fields> [<nodegroup> <json nodegroup fields>]

`python-resize`, `python-update`, `python-upgrade`, `python-ng-create`,
`python-ng-update` and `python-ng-delete` take the same arguments and run
Magnum's own handler in process instead, with a driver that does nothing
(or raises MC_DRIVER_RAISES), to compare the rows it writes with ours.
`upgrade` prints {"error": class, "message", "code"} when refused.

    call <method> <cluster> [<json args>]

sends one request as a call (`cluster_create`, with the cluster's template
and a new uuid; `cluster_delete`, `cluster_update`, `cluster_resize`,
`cluster_upgrade` {"template"}, `nodegroup_create` {"fields"},
`nodegroup_update` and `nodegroup_delete` {"nodegroup"},
`credential_rotate`, `get_ca_certificate`) and prints {"ok": true} or
{"error", "remote", "message", "code"}.

    python-notify <cluster> <action> <outcome> [admin]

sends the CADF notification Magnum's conductor sends for that cluster
(`notify_about_cluster_operation`), with the configured driver.
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


def load(ctx, objects, cluster_ident, ng_ident=None):
    """The cluster and nodegroup as magnum-api's controllers load them."""
    cluster = objects.Cluster.get_by_uuid(ctx, cluster_ident)
    if ng_ident:
        ng = objects.NodeGroup.get(ctx, cluster.uuid, ng_ident)
    else:
        ng = cluster.default_ng_worker
    return cluster, ng


def new_nodegroup(ctx, objects, cluster, fields):
    """What NodeGroupController.post hands to nodegroup_create_async."""
    d = dict(fields)
    merge = d.pop("merge_labels", False)
    d.setdefault("role", "worker")
    d.setdefault("node_count", 1)
    d.setdefault("min_node_count", 0)
    if d.get("image_id") is None:
        d["image_id"] = cluster.cluster_template.image_id
    if d.get("flavor_id") is None:
        d["flavor_id"] = cluster.flavor_id
    if d.get("labels") is None:
        d["labels"] = cluster.labels.copy()
    elif merge:
        labels = cluster.labels.copy()
        labels.update(d["labels"])
        d["labels"] = labels
    d["cluster_id"] = cluster.uuid
    d["project_id"] = ctx.project_id
    ng = objects.NodeGroup(ctx, **d)
    ng.uuid = str(uuid.uuid4())
    return ng


class NoDriver:
    """A driver that does what Magnum's conductor needs and nothing else;
    its operations raise MC_DRIVER_RAISES when set."""
    OPERATIONS = {"update_cluster", "resize_cluster", "upgrade_cluster", "create_nodegroup",
                  "update_nodegroup", "delete_nodegroup"}

    def __getattr__(self, name):
        def call(*args, **kwargs):
            msg = os.environ.get("MC_DRIVER_RAISES")
            if msg and name in self.OPERATIONS:
                raise Exception(msg)
            return None
        return call


def run_python_handler(ctx, cmd, rest, objects):
    from unittest import mock
    from magnum.conductor import utils as conductor_utils
    from magnum.conductor.handlers import cluster_conductor, nodegroup_conductor
    from magnum.common import exception
    drv = NoDriver()
    with mock.patch.object(conductor_utils, "notify_about_cluster_operation"), \
            mock.patch("magnum.drivers.common.driver.Driver.get_driver", return_value=drv), \
            mock.patch("magnum.drivers.common.driver.Driver.get_driver_for_cluster", return_value=drv):
        try:
            if cmd == "python-resize":
                cluster, ng = load(ctx, objects, rest[0], rest[3] if len(rest) > 3 else None)
                cluster_conductor.Handler().cluster_resize(ctx, cluster, int(rest[1]), json.loads(rest[2]), ng)
            elif cmd == "python-update":
                cluster, _ = load(ctx, objects, rest[0])
                p = json.loads(rest[1])
                cluster_conductor.Handler().cluster_update(
                    ctx, cluster, p.get("node_count", cluster.default_ng_worker.node_count),
                    p.get("health_status", cluster.health_status),
                    p.get("health_status_reason", cluster.health_status_reason))
            elif cmd == "python-upgrade":
                cluster, ng = load(ctx, objects, rest[0], rest[3] if len(rest) > 3 else None)
                t = objects.ClusterTemplate.get_by_uuid(ctx, rest[1])
                cluster_conductor.Handler().cluster_upgrade(ctx, cluster, t, int(rest[2]), ng)
            elif cmd == "python-ng-create":
                cluster, _ = load(ctx, objects, rest[0])
                ng = new_nodegroup(ctx, objects, cluster, json.loads(rest[1]))
                nodegroup_conductor.Handler().nodegroup_create(ctx, cluster, ng)
                return {"uuid": ng.uuid}
            elif cmd == "python-ng-update":
                cluster, ng = load(ctx, objects, rest[0], rest[1])
                for k, v in json.loads(rest[2]).items():
                    setattr(ng, k, v)
                nodegroup_conductor.Handler().nodegroup_update(ctx, cluster, ng)
            elif cmd == "python-ng-delete":
                cluster, ng = load(ctx, objects, rest[0], rest[1])
                nodegroup_conductor.Handler().nodegroup_delete(ctx, cluster, ng)
        except exception.MagnumException as e:
            return {"error": type(e).__name__, "message": str(e)}
        except Exception as e:  # the driver's exception, re-raised as Magnum does
            return {"error": type(e).__name__, "message": str(e)}
    return {"ok": True}


def call(ctx, objects, method, cluster_uuid, args):
    """One request as a call, through magnum.conductor.api.API."""
    from magnum.conductor import api
    from magnum.common import exception
    a = api.API(context=ctx)
    cluster, ng = load(ctx, objects, cluster_uuid, args.get("nodegroup"))
    try:
        if method == "cluster_create":
            t = objects.ClusterTemplate.get_by_uuid(ctx, cluster.cluster_template_id)
            a.cluster_create(cluster_object(ctx, objects, t, {}), 1, 1, 60)
        elif method == "cluster_delete":
            a.cluster_delete(cluster.uuid)
        elif method == "cluster_update":
            a.cluster_update(cluster, ng.node_count + 1, cluster.health_status, cluster.health_status_reason)
        elif method == "cluster_resize":
            a.cluster_resize(cluster, ng.node_count + 1, [], ng)
        elif method == "cluster_upgrade":
            t = objects.ClusterTemplate.get_by_uuid(ctx, args.get("template", cluster.cluster_template_id))
            a.cluster_upgrade(cluster, t, 1, ng)
        elif method == "nodegroup_create":
            a.nodegroup_create(cluster, new_nodegroup(ctx, objects, cluster, args.get("fields", {"name": "extra"})))
        elif method == "nodegroup_update":
            ng.max_node_count = (ng.max_node_count or ng.node_count) + 1
            a.nodegroup_update(cluster, ng)
        elif method == "nodegroup_delete":
            a.nodegroup_delete(cluster, ng)
        elif method == "credential_rotate":
            a.credential_rotate(cluster)
        elif method == "get_ca_certificate":
            a.get_ca_certificate(cluster)
        else:
            raise SystemExit(f"unknown method {method}")
        return {"ok": True}
    except exception.MagnumException as e:
        return {"error": type(e).__name__.removesuffix("_Remote"), "remote": type(e).__name__,
                "message": str(e).split("\n")[0], "code": e.code}


SERVE_MARK = "@@lifecycle-client@@ "


def get(objects, admin, cluster):
    from magnum.common import exception
    try:
        c = objects.Cluster.get_by_uuid(admin, cluster)
        out = {"cluster": row(c), "nodegroups": [row(n) for n in objects.NodeGroup.list(admin, cluster)]}
    except exception.ClusterNotFound:
        out = {"cluster": None, "nodegroups": [row(n) for n in objects.NodeGroup.list(admin, cluster)]}
    out["x509keypairs"] = len(objects.X509KeyPair.list(admin))
    return out


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
    elif cmd == "resize":
        from magnum.conductor import api
        cluster, ng = load(ctx, objects, rest[0], rest[3] if len(rest) > 3 else None)
        api.API(context=ctx).cluster_resize_async(cluster, int(rest[1]), json.loads(rest[2]), ng)
        out = {"uuid": cluster.uuid, "nodegroup": ng.uuid}
    elif cmd == "update":
        from magnum.conductor import api
        cluster, _ = load(ctx, objects, rest[0])
        p = json.loads(rest[1])
        api.API(context=ctx).cluster_update_async(
            cluster, p.get("node_count", cluster.default_ng_worker.node_count),
            p.get("health_status", cluster.health_status),
            p.get("health_status_reason", cluster.health_status_reason))
        out = {"uuid": cluster.uuid}
    elif cmd == "upgrade":
        from magnum.conductor import api
        from magnum.common import exception
        cluster, ng = load(ctx, objects, rest[0], rest[3] if len(rest) > 3 else None)
        t = objects.ClusterTemplate.get_by_uuid(ctx, rest[1])
        try:
            r = api.API(context=ctx).cluster_upgrade(cluster, t, int(rest[2]), ng)
            out = {"uuid": cluster.uuid, "result": r.uuid if hasattr(r, "uuid") else r}
        except exception.MagnumException as e:
            # Remote exceptions arrive as `<Class>_Remote` subclasses; the
            # message is what the API shows (traceback lines after it).
            out = {"error": type(e).__name__.removesuffix("_Remote"), "remote": type(e).__name__,
                   "message": str(e).split("\n")[0], "code": e.code}
    elif cmd == "call":
        out = call(ctx, objects, rest[0], rest[1], json.loads(rest[2]) if len(rest) > 2 else {})
    elif cmd == "ng-create":
        from magnum.conductor import api
        cluster, _ = load(ctx, objects, rest[0])
        ng = new_nodegroup(ctx, objects, cluster, json.loads(rest[1]))
        api.API(context=ctx).nodegroup_create_async(cluster, ng)
        out = {"uuid": ng.uuid}
    elif cmd == "ng-update":
        from magnum.conductor import api
        cluster, ng = load(ctx, objects, rest[0], rest[1])
        for k, v in json.loads(rest[2]).items():
            setattr(ng, k, v)
        api.API(context=ctx).nodegroup_update_async(cluster, ng)
        out = {"uuid": ng.uuid}
    elif cmd == "ng-delete":
        from magnum.conductor import api
        cluster, ng = load(ctx, objects, rest[0], rest[1])
        api.API(context=ctx).nodegroup_delete_async(cluster, ng)
        out = {"uuid": ng.uuid}
    elif cmd == "set":
        c = objects.Cluster.get_by_uuid(admin, rest[0])
        for k, v in json.loads(rest[1]).items():
            setattr(c, k, v)
        c.save()
        if len(rest) > 2:
            ng = objects.NodeGroup.get(admin, c.uuid, rest[2])
            for k, v in json.loads(rest[3]).items():
                setattr(ng, k, v)
            ng.save()
        out = {"uuid": c.uuid}
    elif cmd.startswith("python-") and cmd not in ("python-create", "python-notify"):
        out = run_python_handler(ctx, cmd, rest, objects)
    elif cmd == "python-notify":
        # Magnum's own conductor notification for this cluster, as its
        # handlers send it (notify_about_cluster_operation).
        from magnum.common import rpc
        from magnum.conductor import utils as conductor_utils
        cluster = objects.Cluster.get_by_uuid(ctx, rest[0])
        # The status sync notifies with an admin context (ClusterUpdateJob).
        who = admin if rest[3:] == ["admin"] else ctx
        conductor_utils.notify_about_cluster_operation(who, rest[1], rest[2], cluster)
        rpc.TRANSPORT.cleanup()
    elif cmd == "delete":
        from magnum.conductor import api
        api.API(context=ctx).cluster_delete_async(rest[0])
        out = {"uuid": rest[0]}
    elif cmd == "get":
        out = get(objects, admin, rest[0])
    elif cmd == "serve":
        # `get` for many clusters from one process (tests poll with it; a
        # new Python with Magnum imported costs about a second a call).
        for line in sys.stdin:
            print(SERVE_MARK + json.dumps(get(objects, admin, json.loads(line)), default=str), flush=True)
        return
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
