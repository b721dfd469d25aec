"""Magnum's own objects, through the object-indirection API or directly on
the database, as magnum-api uses them.

    python indirection_client.py <conf> <mode> <scenario>

mode `rpc`: `MagnumObject.indirection_api` set as magnum-api's console script
sets it (every remotable call goes to the conductor); mode `db`: Magnum's
own in-process DB path (the WSGI magnum-api). Each scenario prints one JSON
line: a list of [step, outcome] where outcome is the object's primitive data
(or a list of them, or a value) or {"error": class, "message"}; volatile
fields (timestamps, ids, uuids made here) are normalised so both modes
compare. Scenarios:

- `read <project> <cluster uuid>`: lookups, lists with limit/marker/sort and
  filters, counts, stats, errors, on rows the test made;
- `write <project>`: template, cluster, nodegroup, keypair, service, quota and
  federation CRUD (create, save, refresh, destroy) and their errors;
- `versions <cluster uuid>`: what a caller gets, with the versions it knows
  (run with Magnum 22's venv: lists must come back at Cluster 1.23 / NodeGroup 1.1).
"""
import json
import sys
import uuid as uuidlib
import warnings

warnings.simplefilter("ignore")

VOLATILE = {"created_at", "updated_at", "last_seen_up"}


def norm(v):
    from oslo_versionedobjects import base as ovo_base
    if isinstance(v, ovo_base.VersionedObject):
        prim = v.obj_to_primitive()
        raw = next(x for k, x in prim.items() if k.endswith(".data"))
        data = {k: x for k, x in raw.items() if k not in VOLATILE}
        return {"class": v.obj_name(), "version": v.VERSION, "data": data,
                "changes": sorted(v.obj_what_changed())}
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    return v


def run(steps):
    out = []
    for name, fn in steps:
        try:
            out.append([name, norm(fn())])
        except Exception as e:  # noqa: BLE001 - the class is the result
            cls = type(e).__name__.removesuffix("_Remote")
            out.append([name, {"error": cls, "message": str(e).split("\n")[0]}])
    return out


def main():
    conf, mode, scenario, *rest = sys.argv[1:]
    from magnum.common import context as mctx
    from magnum.common import service as magnum_service
    from magnum import objects
    from magnum.objects import base
    magnum_service.prepare_service(["magnum-api", "--config-file", conf])
    if mode == "rpc":
        base.MagnumObject.indirection_api = base.MagnumObjectIndirectionAPI()
    project = rest[0] if rest else "p" * 32
    user = "u" * 32
    ctx = mctx.make_context(user_id=user, project_id=project, is_admin=False, auth_token="t")
    other = mctx.make_context(user_id=user, project_id="o" * 32, is_admin=False, auth_token="t")
    admin = mctx.make_admin_context(all_tenants=True)
    steps = []
    s = steps.append

    if scenario == "seed":
        t = objects.ClusterTemplate(ctx, uuid=str(uuidlib.uuid4()), name="k8s-template", coe="kubernetes",
                                    image_id="img", flavor_id="m1", keypair_id="kp", project_id=project,
                                    user_id=user, public=True, labels={"kube_tag": "v1.30.4"})
        t.create()
        made = {}
        for name, status, masters, workers in (("alpha", "CREATE_FAILED", 1, 2), ("twin", "UPDATE_COMPLETE", 3, 1),
                                               ("twin", "CREATE_IN_PROGRESS", 1, 1), ("zeta", "CREATE_COMPLETE", 1, 2)):
            c = objects.Cluster(ctx, uuid=str(uuidlib.uuid4()), name=name, project_id=project, user_id=user,
                                cluster_template_id=t.uuid, status=status, labels={"kube_tag": "v1.30.4"},
                                create_timeout=60, keypair="kp")
            c.create()
            for ngname, role, n in (("default-master", "master", masters), ("default-worker", "worker", workers)):
                objects.NodeGroup(ctx, uuid=str(uuidlib.uuid4()), name=ngname, cluster_id=c.uuid, project_id=project,
                                  role=role, node_count=n, is_default=True, labels={}, flavor_id="m1",
                                  image_id="img", status=status).create()
            made.setdefault(name, c.uuid)
        print(json.dumps({"alpha": made["alpha"], "template": t.uuid}))
        return
    if scenario == "read":
        cuuid = rest[1]
        C, CT, NG = objects.Cluster, objects.ClusterTemplate, objects.NodeGroup
        s(("cluster.get_by_uuid", lambda: C.get_by_uuid(ctx, cuuid)))
        s(("cluster.get", lambda: C.get(ctx, cuuid)))
        s(("cluster.get_by_id", lambda: C.get_by_id(ctx, C.get_by_uuid(ctx, cuuid).id)))
        s(("cluster.get_by_name", lambda: C.get_by_name(ctx, C.get_by_uuid(ctx, cuuid).name)))
        s(("cluster.get_by_name.dup", lambda: C.get_by_name(ctx, "twin")))
        s(("cluster.get.other_project", lambda: C.get_by_uuid(other, cuuid)))
        s(("cluster.get.bad_identity", lambda: C.get(ctx, "not-an-id")))
        s(("cluster.get.missing", lambda: C.get_by_uuid(ctx, "00000000-0000-0000-0000-000000000000")))
        s(("cluster.list", lambda: C.list(ctx)))
        s(("cluster.list.admin", lambda: C.list(admin)))
        s(("cluster.list.sorted", lambda: C.list(ctx, sort_key="name", sort_dir="desc")))
        s(("cluster.list.page", lambda: C.list(ctx, limit=2, marker=C.list(ctx, limit=1)[0])))
        s(("cluster.list.page_by_name", lambda: C.list(ctx, limit=2, sort_key="name",
                                                       marker=C.list(ctx, sort_key="name", limit=1)[0])))
        s(("cluster.list.status", lambda: C.list(ctx, filters={"status": ["CREATE_FAILED", "UPDATE_COMPLETE"]})))
        s(("cluster.list.node_count", lambda: C.list(ctx, filters={"node_count": 2})))
        s(("cluster.list.master_count", lambda: C.list(ctx, filters={"master_count": 3})))
        s(("cluster.list.name", lambda: C.list(ctx, filters={"name": "twin", "unknown": 1})))
        s(("cluster.list.bad_sort_key", lambda: C.list(ctx, sort_key="nope")))
        s(("cluster.list.bad_sort_dir", lambda: C.list(ctx, sort_dir="sideways")))
        s(("cluster.count", lambda: C.get_count_all(ctx)))
        s(("cluster.count.filtered", lambda: C.get_count_all(ctx, filters={"status": ["CREATE_FAILED"]})))
        s(("cluster.stats", lambda: C.get_stats(ctx, project)))
        s(("stats", lambda: objects.Stats.get_cluster_stats(ctx, project)))
        s(("stats.all", lambda: objects.Stats.get_cluster_stats(admin)))
        s(("cluster.nodegroups", lambda: C.get_by_uuid(ctx, cuuid).nodegroups))
        s(("cluster.default_ng_worker", lambda: C.get_by_uuid(ctx, cuuid).default_ng_worker))
        s(("cluster.node_count", lambda: C.get_by_uuid(ctx, cuuid).node_count))
        s(("cluster.cluster_template", lambda: C.get_by_uuid(ctx, cuuid).cluster_template))
        s(("ng.list", lambda: NG.list(ctx, cuuid)))
        s(("ng.list.role", lambda: NG.list(ctx, cuuid, filters={"role": "master"})))
        s(("ng.list.is_default", lambda: NG.list(ctx, cuuid, filters={"is_default": True})))
        s(("ng.get.name", lambda: NG.get(ctx, cuuid, "default-worker")))
        s(("ng.get.uuid", lambda: NG.get(ctx, cuuid, NG.list(ctx, cuuid)[0].uuid)))
        s(("ng.get.id", lambda: NG.get(ctx, cuuid, NG.list(ctx, cuuid)[0].id)))
        s(("ng.get.missing", lambda: NG.get(ctx, cuuid, "nope")))
        s(("ng.count", lambda: NG.get_count_all(ctx, cuuid)))
        s(("ng.other_project", lambda: NG.list(other, cuuid)))
        s(("ct.list", lambda: CT.list(ctx)))
        s(("ct.list.other", lambda: CT.list(other)))
        s(("ct.get.name", lambda: CT.get(ctx, "k8s-template")))
        s(("ct.get_by_name.missing", lambda: CT.get_by_name(ctx, "nope")))
        s(("service.list", lambda: objects.MagnumService.list(ctx)))
        s(("service.get", lambda: objects.MagnumService.get_by_host_and_binary(ctx, "test-host", "magnum-conductor")))
        s(("service.get.none", lambda: objects.MagnumService.get_by_host_and_binary(ctx, "nope", "magnum-conductor")))
        s(("x509.list", lambda: objects.X509KeyPair.list(ctx)))
        s(("x509.get.bad", lambda: objects.X509KeyPair.get(ctx, "not-an-id")))
        s(("federation.list", lambda: objects.Federation.list(ctx)))
        s(("federation.count", lambda: objects.Federation.get_count_all(ctx)))
        s(("quota.all_by_project", lambda: objects.Quota.quota_get_all_by_project_id(ctx, project)))
        s(("quota.missing", lambda: objects.Quota.get_quota_by_project_id_resource(ctx, project, "Cluster")))
        s(("typeerror", lambda: C.get_by_uuid(ctx, cuuid, colour="blue")))
    elif scenario == "write":
        tag = rest[1]
        ct = objects.ClusterTemplate(ctx, uuid=str(uuidlib.uuid4()), name="w-" + tag, coe="kubernetes",
                                     image_id="img", flavor_id="m1", keypair_id="kp", project_id=project,
                                     user_id=user, labels={"kube_tag": "v1.30.4", "n": 3}, public=False)

        def ct_create():
            ct.create()
            return ct
        s(("ct.create", ct_create))
        s(("ct.create.dup", lambda: objects.ClusterTemplate(ctx, uuid=ct.uuid, name="x", coe="kubernetes").create()))

        def ct_save():
            ct.name = "w2-" + tag
            ct.save()
            return ct
        s(("ct.save", ct_save))

        def ct_refresh():
            stale = objects.ClusterTemplate.get_by_uuid(ctx, ct.uuid)
            ct.flavor_id = "m2"
            ct.save()
            stale.refresh()
            return stale
        s(("ct.refresh", ct_refresh))
        c = objects.Cluster(ctx, uuid=str(uuidlib.uuid4()), name="wc-" + tag, project_id=project, user_id=user,
                            cluster_template_id=ct.uuid, status="CREATE_IN_PROGRESS", labels={"a": True},
                            create_timeout=60, keypair="kp")

        def c_create():
            c.create()
            return c
        s(("cluster.create", c_create))

        def ct_referenced():
            ct.image_id = "img2"
            ct.save()
        s(("ct.save.referenced", ct_referenced))
        s(("ct.destroy.referenced", lambda: objects.ClusterTemplate.get_by_uuid(ctx, ct.uuid).destroy()))

        def c_save():
            c.status = "CREATE_COMPLETE"
            c.health_status_reason = {"api": "ok"}
            c.save()
            return objects.Cluster.get_by_uuid(ctx, c.uuid)
        s(("cluster.save", c_save))

        def c_uuid():
            was = c.uuid
            c.uuid = str(uuidlib.uuid4())
            try:
                c.save()
            finally:
                c.uuid = was
                c.obj_reset_changes(["uuid"])
        s(("cluster.save.uuid", c_uuid))
        ng = objects.NodeGroup(ctx, uuid=str(uuidlib.uuid4()), name="ng-" + tag, cluster_id=c.uuid,
                               project_id=project, role="worker", node_count=2, labels={}, is_default=False,
                               flavor_id="m1", image_id="img")

        def ng_create():
            ng.create()
            return ng
        s(("ng.create", ng_create))
        s(("ng.update_nodegroup", lambda: objects.NodeGroup.update_nodegroup(ctx, ng.cluster_id, ng.name,
                                                                            {"node_count": 5, "max_node_count": 9})))

        def ng_refresh():
            ng.refresh()
            return ng
        s(("ng.refresh", ng_refresh))

        def ng_destroy():
            ng.destroy()
            return objects.NodeGroup.list(ctx, ng.cluster_id)
        s(("ng.destroy", ng_destroy))
        kp = objects.X509KeyPair(ctx, uuid=str(uuidlib.uuid4()), certificate="C", private_key="K",
                                 private_key_passphrase="P", project_id=project, user_id=user)

        def kp_cycle():
            kp.create()
            got = objects.X509KeyPair.get_by_uuid(ctx, kp.uuid)
            kp.destroy()
            return got
        s(("x509.cycle", kp_cycle))
        s(("x509.destroy.again", lambda: kp.destroy()))
        ms = objects.MagnumService(ctx, host="h-" + tag, binary="magnum-conductor", report_count=0, disabled=False,
                                   forced_down=False)

        def ms_cycle():
            ms.create()
            ms.report_state_up()
            got = objects.MagnumService.get_by_host_and_binary(ctx, "h-" + tag, "magnum-conductor")
            return [ms, got]
        s(("service.cycle", ms_cycle))

        def ms_destroy():
            ms.destroy()
            return objects.MagnumService.get_by_host_and_binary(ctx, "h-" + tag, "magnum-conductor")
        s(("service.destroy", ms_destroy))
        q = objects.Quota(ctx, project_id="q-" + tag, resource="Cluster", hard_limit=3)

        def q_cycle():
            q.create()
            objects.Quota.update_quota(ctx, "q-" + tag, {"resource": "Cluster", "hard_limit": 7})
            got = objects.Quota.get_quota_by_project_id_resource(ctx, "q-" + tag, "Cluster")
            lst = objects.Quota.list(ctx, filters={"project_id": "q-" + tag})
            return [got, lst]
        s(("quota.cycle", q_cycle))
        s(("quota.dup", lambda: objects.Quota(ctx, project_id="q-" + tag, resource="Cluster", hard_limit=1).create()))
        s(("quota.delete", lambda: q.delete()))
        s(("quota.delete.again", lambda: q.delete()))
        f = objects.Federation(ctx, uuid=str(uuidlib.uuid4()), name="f-" + tag, project_id=project,
                               hostcluster_id=c.uuid, member_ids=[], status="CREATE_IN_PROGRESS", properties={})

        def f_cycle():
            f.create()
            f.status = "CREATE_COMPLETE"
            f.save()
            got = objects.Federation.get_by_name(ctx, "f-" + tag)
            f.destroy()
            return got
        s(("federation.cycle", f_cycle))

        def c_destroy():
            objects.Cluster.get_by_uuid(ctx, c.uuid).destroy()
            ct.destroy()
            return objects.Cluster.get_count_all(ctx, filters={"name": "wc-" + tag})
        s(("cluster.destroy", c_destroy))
        s(("cluster.destroy.again", lambda: c.destroy()))
    elif scenario == "versions":
        cuuid = rest[1]
        s(("cluster.get", lambda: objects.Cluster.get_by_uuid(ctx, cuuid)))
        s(("cluster.list", lambda: objects.Cluster.list(ctx)))
        s(("ng.list", lambda: objects.NodeGroup.list(ctx, cuuid)))
        s(("cluster.nodegroups", lambda: objects.Cluster.get_by_uuid(ctx, cuuid).nodegroups))
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    print(json.dumps(run(steps), default=str, sort_keys=True))


if __name__ == "__main__":
    main()
