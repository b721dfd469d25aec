"""Day-2 cost on a real kube-apiserver (scripts/k8s-up.sh, CAPI v1beta1 line;
the CAPI controllers simulated by capi-sim): time from a `cluster_resize`
(or upgrade) request to the Magnum row saying UPDATE_COMPLETE, and the
requests the conductor sends to the management cluster for it.

    python bench_day2.py --conductor BIN [--sim BIN] [--clusters 20] [--tick-ms 20]

Run by scripts/bench-day2.sh. N clusters (1 master, 2 workers) are created
first; then, one cluster at a time (so every request capi-sim's proxy counts
for our User-Agent belongs to that operation): resize 2 -> 4, resize
4 -> 2 naming two machines in `nodes_to_remove`, and an upgrade to v1.31
(max_batch_size 2). Each is timed from just before the RPC to the moment a
MariaDB poll (every 5 ms) sees UPDATE_COMPLETE. Most of that time is the
simulated machines' (capi-sim reacts `--tick-ms` after a change, and moves
a machine one phase per pass: a new machine needs about four passes and
their writes to the real apiserver to run); `rpc_return_ms` is
how long the request itself took to send (casts) or answer (the upgrade
call). Prints a JSON summary on the last line.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import conftest  # noqa: E402
from conftest import Conductor, free_port, mysql_admin, new_database, new_vhost, rabbitmqctl, write_conf  # noqa: E402
import k8s  # noqa: E402

PROJECT = "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5"
NS = "magnum-" + PROJECT


def quantiles(xs):
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else [xs[0]] * 99
    return dict(n=len(xs), p50=round(q[49], 1), p90=round(q[89], 1), max=round(xs[-1], 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conductor", required=True)
    ap.add_argument("--sim", default=k8s.SIM_BIN)
    ap.add_argument("--clusters", type=int, default=20)
    ap.add_argument("--tick-ms", type=int, default=20)
    a = ap.parse_args()
    os.environ["MAGNUM_CONDUCTOR_BIN"] = a.conductor
    # conftest read the variable when it was imported: point it here too.
    conftest.CONDUCTOR_BIN = a.conductor
    k8s.SIM_BIN = a.sim
    tmp = tempfile.mkdtemp(prefix="bench-day2-")
    sim = k8s.Sim(pathlib.Path(tmp), "v1beta1", a.tick_ms, namespace=NS)
    kubeconfig = sim.kubeconfig
    vhost = new_vhost("bench")
    url = new_database("bench")
    db = url.rsplit("/", 1)[1].split("?")[0]
    conf = os.path.join(tmp, "conductor.conf")
    port = free_port()
    write_conf(conf, vhost, db_url=url, extra=(
        f"[metrics]\nlisten = 127.0.0.1:{port}\n[capi]\nkubeconfig = {kubeconfig}\ncloud_cleanup = false\n"
        "static_auth_url = https://keystone.example.com:5000/v3\nstatic_application_credential_id = bench\n"
        "static_application_credential_secret = bench-secret\n"))
    conductor = Conductor(conf, port, os.path.join(tmp, "conductor.log"))
    conn = mysql_admin()
    conn.autocommit(True)
    cur = conn.cursor()
    try:
        from magnum.common import context as mctx
        from magnum.common import service as magnum_service
        from magnum import objects
        from magnum.conductor import api
        magnum_service.prepare_service(["magnum-api", "--config-file", conf])
        ctx = mctx.make_context(user_id="u" * 32, project_id=PROJECT, auth_token="t")

        def template(tag, image):
            t = objects.ClusterTemplate(ctx, uuid=str(uuid.uuid4()), name="bench-" + tag, coe="kubernetes",
                                        server_type="vm", cluster_distro="ubuntu", image_id=image,
                                        flavor_id="m1.small", master_flavor_id="m1.medium", keypair_id="kp",
                                        external_network_id="public", network_driver="calico",
                                        master_lb_enabled=False, labels={"kube_tag": tag}, project_id=PROJECT)
            t.create()
            return t
        t130, t131 = template("v1.30.4", "img-130"), template("v1.31.2", "img-131")
        rpc = api.API(context=ctx)
        uuids = []
        for i in range(a.clusters):
            c = objects.Cluster(ctx, name=f"d{i}", cluster_template_id=t130.uuid, keypair="kp",
                                labels={"kube_tag": "v1.30.4"}, master_flavor_id="m1.medium", flavor_id="m1.small",
                                create_timeout=0, master_lb_enabled=False, floating_ip_enabled=True,
                                project_id=PROJECT, user_id=ctx.user_id)
            c.uuid = str(uuid.uuid4())
            rpc.cluster_create_async(c, 1, 2, 0)
            uuids.append(c.uuid)

        def status(u):
            cur.execute(f"SELECT status FROM `{db}`.cluster WHERE uuid=%s", (u,))
            row = cur.fetchone()
            return row[0] if row else None

        deadline = time.time() + 600
        while any(status(u) != "CREATE_COMPLETE" for u in uuids):
            if time.time() > deadline:
                raise SystemExit("clusters did not complete")
            time.sleep(0.5)

        def ours():
            return sim.get("/_sim/requests").get("magnum-conductor", {})

        def measure(u, op):
            before = ours()
            start = time.perf_counter()
            op()
            sent = time.perf_counter()
            seen_in_progress = False
            while True:
                s = status(u)
                seen_in_progress |= s == "UPDATE_IN_PROGRESS"
                if s == "UPDATE_COMPLETE" and seen_in_progress:
                    break
                if s == "UPDATE_FAILED" or time.perf_counter() - start > 120:
                    raise SystemExit(f"{u}: {s}")
                time.sleep(0.005)
            done = time.perf_counter()
            time.sleep(0.3)  # late watch-driven requests, if any, are counted too
            after = ours()
            reqs = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
            return (done - start) * 1000, (sent - start) * 1000, reqs

        results = {"resize_up_2_to_4": [], "resize_down_4_to_2_named": [], "upgrade_v1.30_to_v1.31": []}
        requests = {k: [] for k in results}
        rpc_ms = {k: [] for k in results}
        for u in uuids:
            c = objects.Cluster.get_by_uuid(ctx, u)
            w = c.default_ng_worker
            ms, rpc_t, r = measure(u, lambda: rpc.cluster_resize_async(c, 4, [], w))
            results["resize_up_2_to_4"].append(ms)
            requests["resize_up_2_to_4"].append(r)
            rpc_ms["resize_up_2_to_4"].append(rpc_t)
            stack = objects.Cluster.get_by_uuid(ctx, u).stack_id
            machines = sim.items("cluster.x-k8s.io/v1beta1", "machines",
                                 f"magnum.openstack.org/nodegroup=default-worker,cluster.x-k8s.io/cluster-name={stack}")
            named = [m["metadata"]["name"] for m in machines[:2]]
            c = objects.Cluster.get_by_uuid(ctx, u)
            w = c.default_ng_worker
            ms, rpc_t, r = measure(u, lambda: rpc.cluster_resize_async(c, 2, named, w))
            results["resize_down_4_to_2_named"].append(ms)
            requests["resize_down_4_to_2_named"].append(r)
            rpc_ms["resize_down_4_to_2_named"].append(rpc_t)
            c = objects.Cluster.get_by_uuid(ctx, u)
            ms, rpc_t, r = measure(u, lambda: rpc.cluster_upgrade(c, t131, 2, c.default_ng_worker))
            results["upgrade_v1.30_to_v1.31"].append(ms)
            requests["upgrade_v1.30_to_v1.31"].append(r)
            rpc_ms["upgrade_v1.30_to_v1.31"].append(rpc_t)

        def mean_requests(rs):
            keys = sorted({k for r in rs for k in r})
            return {k: round(sum(r.get(k, 0) for r in rs) / len(rs), 1) for k in keys}
        summary = dict(clusters=a.clusters, tick_ms=a.tick_ms, apiserver="kube-apiserver v1.28.7 (scripts/k8s-up.sh)",
                       to_update_complete_ms={k: quantiles(v) for k, v in results.items()},
                       rpc_return_ms={k: quantiles(v) for k, v in rpc_ms.items()},
                       apiserver_requests_per_operation={k: mean_requests(v) for k, v in requests.items()})
        print(json.dumps(summary))
    finally:
        conn.close()
        conductor.stop()
        sim.stop()
        conftest.magnum_client_close()
        rabbitmqctl("delete_vhost", vhost)


if __name__ == "__main__":
    main()
