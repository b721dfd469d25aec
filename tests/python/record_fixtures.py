"""Record the exact AMQP messages Magnum 23.0.0's client code sends for
every conductor method into tests/fixtures/rpc/*.json.

Run from the repository root with the venv's python (RabbitMQ running):
    $MAGNUM_VENV/bin/python tests/python/record_fixtures.py [NAME ...]
With names, only those fixtures are (re)written; the others keep their bytes.
No conductor runs: the recorder declares the conductor's queues itself,
lets the client publish (calls time out after 1 s), then reads the raw
messages back with basic.get, properties and body untouched.
"""
import json
import os
import sys
import tempfile
import threading
import time
import uuid
import warnings

warnings.simplefilter("ignore")
sys.path.insert(0, os.path.dirname(__file__))

import kombu  # noqa: E402

from conftest import broker_url, context, magnum_client, new_vhost, rabbitmqctl, write_conf  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "rpc")
SERVER = "recorder0001"
IDS = dict(cluster=str(uuid.UUID(int=1)), template=str(uuid.UUID(int=2)), ng=str(uuid.UUID(int=3)),
           fed=str(uuid.UUID(int=4)))


def main():
    os.makedirs(OUT, exist_ok=True)
    vhost = new_vhost("record")
    tmp = tempfile.mkdtemp(prefix="mc-record-")
    conf = os.path.join(tmp, "client.conf")
    write_conf(conf, vhost, extra_default="rpc_response_timeout = 1")
    url = broker_url(vhost, "amqp")
    with kombu.Connection(url) as conn:
        ex = kombu.Exchange("magnum", type="topic", durable=False)
        queues = [kombu.Queue(name, ex, routing_key=name, durable=False)(conn.channel())
                  for name in ("magnum-conductor", f"magnum-conductor.{SERVER}")]
        for q in queues:
            q.declare()
        magnum_client(conf)
        recorded = {}

        def drain():
            # Calls carry `expiration` (1 s here): read each right after sending.
            for q in queues:
                while True:
                    msg = q.get(no_ack=True, accept=["application/json"])
                    if msg is None:
                        break
                    inner = json.loads(json.loads(msg.body)["oslo.message"])
                    recorded.setdefault(inner["method"], []).append(fixture(msg, inner))

        sent = exercise(drain)
    rabbitmqctl("delete_vhost", vhost)
    count = 0
    only = set(sys.argv[1:])
    for name, method, kind in sent:
        if only and name not in only:
            continue
        items = [r for r in recorded.get(method, []) if r["kind"] == kind and r["name"] is None]
        if not items:
            raise SystemExit(f"no message recorded for {name}")
        item = items[0]
        item["name"] = name
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(item, f, indent=1, sort_keys=True)
            f.write("\n")
        count += 1
    print(f"recorded {count} fixtures into {os.path.normpath(OUT)}")


def fixture(msg, inner):
    p = msg.properties
    return {
        "name": None,
        "method": inner["method"],
        "kind": "call" if "_msg_id" in inner else "cast",
        "exchange": msg.delivery_info.get("exchange"),
        "routing_key": msg.delivery_info.get("routing_key"),
        "properties": {
            "content_type": msg.content_type,
            "content_encoding": msg.content_encoding,
            "delivery_mode": p.get("delivery_mode"),
            "priority": p.get("priority"),
            "expiration": p.get("expiration"),
            "headers": msg.headers,
        },
        "body": msg.body.decode("utf-8") if isinstance(msg.body, bytes) else msg.body,
        "recorded_with": "magnum 23.0.0 / oslo.messaging 18.3.1 / kombu 5.7.0",
    }


def exercise(drain):
    """Send every method the way magnum-api does; return (fixture, method, kind)."""
    from magnum import objects
    from magnum.conductor import api

    ctx = context()
    a = api.API(context=ctx)
    template = objects.ClusterTemplate(ctx, id=2, uuid=IDS["template"], name="k8s", coe="kubernetes",
                                       image_id="ubuntu", labels={"kube_tag": "v1.30.4"}, tls_disabled=False)
    cluster = objects.Cluster(ctx, uuid=IDS["cluster"], name="k8s-demo", project_id=ctx.project_id,
                              user_id=ctx.user_id, cluster_template_id=IDS["template"], keypair="mykey",
                              labels={"kube_tag": "v1.30.4", "boot_volume_size": 20, "auto_healing_enabled": False},
                              master_flavor_id="m1.medium", flavor_id="m1.small", create_timeout=60,
                              docker_volume_size=None, floating_ip_enabled=True, master_lb_enabled=False)
    existing = objects.Cluster(ctx, id=7, uuid=IDS["cluster"], name="k8s-demo", project_id=ctx.project_id,
                               user_id=ctx.user_id,
                               status="CREATE_COMPLETE", stack_id="k8s-demo-abc123", labels={"kube_tag": "v1.30.4"},
                               created_at="2025-03-04T10:20:30Z")
    existing.obj_reset_changes()
    existing.cluster_template = template
    existing.obj_reset_changes()
    ng = objects.NodeGroup(ctx, id=9, uuid=IDS["ng"], name="default-worker", cluster_id=IDS["cluster"],
                           project_id=ctx.project_id, role="worker", node_count=2, is_default=True,
                           node_labels={}, node_taints=[])
    ng.obj_reset_changes()
    new_ng = objects.NodeGroup(ctx, uuid=str(uuid.UUID(int=5)), name="gpu", cluster_id=IDS["cluster"],
                               project_id=ctx.project_id, role="worker", node_count=1, flavor_id="g1",
                               node_labels={"gpu": "true"},
                               node_taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
    fed = objects.Federation(ctx, uuid=IDS["fed"], name="fed", project_id=ctx.project_id,
                             hostcluster_id=IDS["cluster"], member_ids=[], properties={"dns-zone": "example.com."})
    cert = objects.Certificate.from_object_cluster(existing)
    cert.csr = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"

    sent = []

    def cast(name, method, fn):
        fn()
        drain()
        sent.append((name, method, "cast"))

    def call(name, method, fn):
        t = threading.Thread(target=lambda: _ignore_timeout(fn))
        t.start()
        time.sleep(0.3)
        drain()
        t.join()
        sent.append((name, method, "call"))

    cast("cluster_create_cast", "cluster_create",
         lambda: a.cluster_create_async(cluster, master_count=1, node_count=2, create_timeout=60))
    cast("cluster_update_cast", "cluster_update",
         lambda: a.cluster_update_async(existing, 3, "HEALTHY", {"api": "ok"}))
    cast("cluster_delete_cast", "cluster_delete", lambda: a.cluster_delete_async(IDS["cluster"]))
    cast("cluster_resize_cast", "cluster_resize",
         lambda: a.cluster_resize_async(existing, 3, ["server-1"], ng))
    cast("nodegroup_create_cast", "nodegroup_create", lambda: a.nodegroup_create_async(existing, new_ng))
    ng_patched = objects.NodeGroup.obj_from_primitive(ng.obj_to_primitive())
    ng_patched.node_count = 4
    cast("nodegroup_update_cast", "nodegroup_update", lambda: a.nodegroup_update_async(existing, ng_patched))
    cast("nodegroup_delete_cast", "nodegroup_delete", lambda: a.nodegroup_delete_async(existing, ng))
    cast("credential_rotate_cast", "credential_rotate", lambda: a.credential_rotate_async(existing))
    cast("federation_create_cast", "federation_create", lambda: a.federation_create_async(fed, 60))
    cast("federation_update_cast", "federation_update", lambda: a.federation_update_async(fed, rollback=False))
    cast("federation_delete_cast", "federation_delete", lambda: a.federation_delete_async(IDS["fed"]))
    call("cluster_upgrade_call", "cluster_upgrade", lambda: a.cluster_upgrade(existing, template, 1, ng))
    call("sign_certificate_call", "sign_certificate", lambda: a.sign_certificate(existing, cert))
    call("get_ca_certificate_call", "get_ca_certificate", lambda: a.get_ca_certificate(existing, "etcd"))
    call("rotate_ca_certificate_call", "rotate_ca_certificate", lambda: a.rotate_ca_certificate(existing))
    call("credential_rotate_call", "credential_rotate", lambda: a.credential_rotate(existing))
    call("cluster_create_call", "cluster_create",
         lambda: a.cluster_create(cluster, master_count=1, node_count=2, create_timeout=60))
    call("ping_conductor_call", "ping_conductor",
         lambda: api.ListenerAPI(context=ctx, topic="magnum-conductor", server=SERVER, timeout=1).ping_conductor())
    call("object_class_action_versions_call", "object_class_action_versions",
         lambda: a.object_class_action_versions(ctx, "Cluster", "get_by_uuid",
                                                {"Cluster": "1.24", "ClusterTemplate": "1.21"},
                                                (IDS["cluster"],), {}))
    call("object_action_call", "object_action", lambda: a.object_action(ctx, existing, "save", (), {}))
    call("object_backport_versions_call", "object_backport_versions",
         lambda: a.object_backport_versions(ctx, ng, {"NodeGroup": "1.1"}))
    # Magnum 20-22's magnum-api backports with `object_backport` (23 replaced it with
    # object_backport_versions); sent exactly as 22.0.0's `API.object_backport` does.
    call("object_backport_call", "object_backport",
         lambda: a._client.call(ctx, "object_backport", objinst=ng, target_version="1.1"))
    return sent


def _ignore_timeout(fn):
    import oslo_messaging

    try:
        fn()
    except oslo_messaging.MessagingTimeout:
        pass


if __name__ == "__main__":
    main()
