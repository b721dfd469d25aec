"""The Python half of the cross-language database tests: Magnum 23.0.0's own
objects (magnum.objects, magnum.db.sqlalchemy) on a given database. Prints
objects as their OVO `magnum_object.data`. Runs in its own process because
oslo.db builds one engine per process.

    python db_side.py <db-url> get <Class> <uuid|id>
    python db_side.py <db-url> create <Class> '<json fields>'
    python db_side.py <db-url> save <Class> <uuid> '<json changes>'
    python db_side.py <db-url> list <Class> [<cluster uuid for NodeGroup>]
    python db_side.py <db-url> list-as <project_id> <Class>
    python db_side.py <db-url> service-up <host> <service_down_time>
"""
import json
import sys
import warnings

warnings.simplefilter("ignore")


def data(obj):
    return obj.obj_to_primitive()["magnum_object.data"]


def main():
    url, cmd, *rest = sys.argv[1:]
    import magnum.conf
    from magnum import objects
    from magnum.common import context

    conf = magnum.conf.CONF
    conf([], project="magnum")
    conf.set_override("connection", url, group="database")
    ctx = context.make_admin_context(all_tenants=True)

    def cls(name):
        return getattr(objects, name)

    if cmd == "get":
        name, ident = rest
        c = cls(name)
        if name == "MagnumService":
            out = data(next(s for s in c.list(ctx) if str(s.id) == ident))
        elif name == "Quota":
            out = data(c.get_by_id(ctx, int(ident)))
        elif name == "NodeGroup":
            out = data(c.get(ctx, json.loads(ident)[0], json.loads(ident)[1]))
        else:
            out = data(c.get(ctx, ident))
    elif cmd == "create":
        name, fields = rest
        obj = cls(name)(ctx, **json.loads(fields))
        obj.create()
        out = data(obj)
    elif cmd == "save":
        name, ident, changes = rest
        obj = cls(name).get(ctx, ident)
        for k, v in json.loads(changes).items():
            setattr(obj, k, v)
        obj.save()
        out = data(cls(name).get(ctx, ident))
    elif cmd == "list":
        if rest[0] == "NodeGroup":
            out = [data(o) for o in objects.NodeGroup.list(ctx, rest[1])]
        else:
            out = [data(o) for o in cls(rest[0]).list(ctx)]
    elif cmd == "list-as":
        project, name = rest
        from magnum.common import keystone
        if hasattr(keystone.KeystoneClientV3, "trustee_domain_id"):
            # Magnum <= 22 asks Keystone for the trustee domain to tell trustee
            # users from regular ones; this user is a regular one.
            keystone.KeystoneClientV3.trustee_domain_id = property(lambda self: "trustee-domain")
        user_ctx = context.make_context(user_id="some-user", project_id=project, is_admin=False)
        out = [data(o) for o in cls(name).list(user_ctx)]
    elif cmd == "service-up":
        host, down_time = rest
        conf.set_override("service_down_time", int(down_time))
        from magnum.api import servicegroup

        members = [s for s in objects.MagnumService.list(ctx) if s.host == host]
        sg = servicegroup.ServiceGroup()
        out = [{"up": sg.service_is_up(m), **data(m)} for m in members]
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
