"""Status at scale: N clusters on the simulator, then (controllers paused)
how fast a CAPI status change reaches the Magnum row, and how many requests
the conductor sends to the management cluster in steady state.

    python bench_status.py --conductor BIN --sim BIN --crds DIR [--clusters 1000] [--samples 200]

Run by scripts/bench-status.sh. Prints a JSON summary on the last line.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import Conductor, free_port, mysql_admin, new_database, new_vhost, rabbitmqctl, write_conf  # noqa: E402

PROJECT = "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5"
NS = "magnum-" + PROJECT


def http(server, method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(server + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": ctype, "User-Agent": "bench/1"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def db_name(url):
    return url.rsplit("/", 1)[1].split("?")[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conductor", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--crds", required=True)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--steady-seconds", type=int, default=60)
    a = ap.parse_args()
    os.environ["MAGNUM_CONDUCTOR_BIN"] = a.conductor
    tmp = tempfile.mkdtemp(prefix="bench-status-")
    kubeconfig = os.path.join(tmp, "sim.kubeconfig")
    sim = subprocess.Popen([a.sim, "--line", "v1beta1", "--crds", a.crds, "--listen", "127.0.0.1:0",
                            "--kubeconfig", kubeconfig, "--tick-ms", "200"],
                           stdout=open(os.path.join(tmp, "sim.log"), "w"), stderr=subprocess.STDOUT)
    while not os.path.exists(kubeconfig) or os.path.getsize(kubeconfig) == 0:
        time.sleep(0.1)
    server = next(ln.split("server:")[1].strip() for ln in open(kubeconfig) if "server:" in ln)
    vhost = new_vhost("bench")
    url = new_database("bench")
    conf = os.path.join(tmp, "conductor.conf")
    port = free_port()
    write_conf(conf, vhost, db_url=url, extra=(
        f"[metrics]\nlisten = 127.0.0.1:{port}\n[capi]\nkubeconfig = {kubeconfig}\n"
        "static_auth_url = https://keystone.example.com:5000/v3\nstatic_application_credential_id = bench\n"
        "static_application_credential_secret = bench-secret\n"))
    conductor = Conductor(conf, port, os.path.join(tmp, "conductor.log"))
    try:
        from magnum.common import context as mctx
        from magnum.common import service as magnum_service
        from magnum import objects
        from magnum.conductor import api
        magnum_service.prepare_service(["magnum-api", "--config-file", conf])
        ctx = mctx.make_context(user_id="u" * 32, project_id=PROJECT, auth_token="t")
        t = objects.ClusterTemplate(ctx, uuid=str(uuid.uuid4()), name="bench", coe="kubernetes", server_type="vm",
                                    image_id="img", flavor_id="m1.small", master_flavor_id="m1.medium",
                                    keypair_id="kp", external_network_id="public", network_driver="calico",
                                    master_lb_enabled=False, labels={"kube_tag": "v1.30.4"}, project_id=PROJECT)
        t.create()
        rpc = api.API(context=ctx)
        t0 = time.time()
        for i in range(a.clusters):
            c = objects.Cluster(ctx, name=f"b{i}", cluster_template_id=t.uuid, keypair="kp", labels={"kube_tag": "v1.30.4"},
                                master_flavor_id="m1.medium", flavor_id="m1.small", create_timeout=0,
                                master_lb_enabled=False, floating_ip_enabled=False, project_id=PROJECT, user_id=ctx.user_id)
            c.uuid = str(uuid.uuid4())
            rpc.cluster_create_async(c, 1, 1, 0)
        cast_s = time.time() - t0
        db = db_name(url)

        def statuses():
            with mysql_admin() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT status, COUNT(*) FROM `{db}`.cluster GROUP BY status")
                return dict(cur.fetchall())

        while True:
            s = statuses()
            if s.get("CREATE_COMPLETE", 0) + s.get("CREATE_FAILED", 0) >= a.clusters:
                break
            if time.time() - t0 > 3600:
                raise SystemExit(f"not complete after an hour: {s}")
            time.sleep(2)
        complete_s = time.time() - t0
        failed = s.get("CREATE_FAILED", 0)

        # Steady state: controllers paused, nothing changes; count requests.
        http(server, "POST", "/_sim/controllers/pause")
        time.sleep(5)
        before = http(server, "GET", "/_sim/requests")
        time.sleep(a.steady_seconds)
        after = http(server, "GET", "/_sim/requests")
        ours = lambda d: d.get("magnum-conductor", {})  # noqa: E731
        b, f = ours(before), ours(after)
        per_min = {k: round((f.get(k, 0) - b.get(k, 0)) * 60 / a.steady_seconds, 1) for k in f}

        # Latency: flip a CAPI Cluster's Ready condition, time until health_status moves.
        with mysql_admin() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT uuid, stack_id FROM `{db}`.cluster WHERE status='CREATE_COMPLETE'")
            rows = cur.fetchall()
        lat = []
        conn = mysql_admin()
        conn.autocommit(True)
        cur = conn.cursor()
        for (cuuid, stack_id) in random.sample(rows, min(a.samples, len(rows))):
            path = f"/apis/cluster.x-k8s.io/v1beta1/namespaces/{NS}/clusters/{stack_id}"
            original = http(server, "GET", path)["status"]["conditions"]
            flipped = [dict(c, status="False", reason="Bench", severity="Warning", message="bench")
                       if c["type"] == "Ready" else c for c in original]
            for conds, want in ((flipped, "UNHEALTHY"), (original, "HEALTHY")):
                start = time.perf_counter()
                http(server, "PATCH", path + "/status", {"status": {"conditions": conds}},
                     "application/merge-patch+json")
                while True:
                    cur.execute(f"SELECT health_status FROM `{db}`.cluster WHERE uuid=%s", (cuuid,))
                    if cur.fetchone()[0] == want:
                        break
                    if time.perf_counter() - start > 30:
                        raise SystemExit(f"{cuuid}: health never became {want}")
                lat.append((time.perf_counter() - start) * 1000)
        conn.close()
        lat.sort()
        q = statistics.quantiles(lat, n=100, method="inclusive")
        summary = dict(clusters=a.clusters, failed=failed, cast_seconds=round(cast_s, 1),
                       all_complete_seconds=round(complete_s, 1), steady_requests_per_minute=per_min, requests_by_client=after,
                       latency_ms=dict(samples=len(lat), p50=round(q[49], 1), p99=round(q[98], 1),
                                       max=round(lat[-1], 1)),
                       conductor_rss_mib=round(int(open(f"/proc/{conductor.proc.pid}/status").read()
                                                   .split("VmRSS:")[1].split()[0]) / 1024, 1))
        print(json.dumps(summary))
    finally:
        conductor.stop()
        sim.terminate()
        rabbitmqctl("delete_vhost", vhost)


if __name__ == "__main__":
    main()
