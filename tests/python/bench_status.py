"""Status at scale: N clusters on a real kube-apiserver (scripts/k8s-up.sh, CAPI
v1beta1 line, the CAPI controllers simulated by capi-sim), then (controllers
paused) how fast a CAPI status change reaches the Magnum row, and how many
requests the conductor sends to the management cluster in steady state
(counted by capi-sim's proxy, which the conductor talks through).

    python bench_status.py --conductor BIN [--sim BIN] [--clusters 1000] [--samples 200]
        [--total 10000] [--churn-per-second 20] [--sample-interval 0.1] [--restart-samples 100]
        [--apiserver-arg=--watch-cache-sizes=...]...

`--clusters` are created through Magnum's client (the whole create path).
With `--total` above that, the fleet is then grown to `--total` by copying
one created cluster: its CAPI objects created again through the apiserver
(`POST /_sim/clone`, status included) and its rows in the database, under
new names and uuids;
the conductor is restarted on the grown fleet (restart time: until ready,
and until status changes made while it was down are in the rows), then
measured at rest and under a background churn of status changes.

Run by scripts/bench-status.sh. Prints a JSON summary on the last line.
"""
import argparse
import json
import os
import pathlib
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pymysql  # noqa: E402
import conftest  # noqa: E402
from conftest import Conductor, free_port, mysql_admin, new_database, new_vhost, rabbitmqctl, write_conf  # noqa: E402
import k8s  # noqa: E402

PROJECT = "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5"
NS = "magnum-" + PROJECT


def db_name(url):
    return url.rsplit("/", 1)[1].split("?")[0]


def rss_mib(pid):
    return round(int(open(f"/proc/{pid}/status").read().split("VmRSS:")[1].split()[0]) / 1024, 1)


def rss_after_restart(conductor, conf, port, log, binaries):
    """Each build of the conductor in turn, started on the same fleet: its RSS
    and glibc's account once its first full status pass is done (the caches
    synced and trimmed) and 2 s more, and how long that first pass took to
    finish after the start. Stops `conductor` first; returns the
    figures and the last conductor, left running."""
    out = {}
    for b in binaries:
        conductor.stop()
        t0 = time.time()
        conductor = Conductor(conf, port, log, binary=b, wait=False)
        conductor.wait_ready(timeout=600)
        while not conductor.metric("magnum_conductor_status_full_passes_total"):
            time.sleep(0.2)
        first_pass = round(time.time() - t0, 1)
        time.sleep(2)
        out[b] = dict(rss_mib=rss_mib(conductor.proc.pid), first_full_pass_done_seconds=first_pass, **{
            f"heap_{state}_mib": round(conductor.metric("magnum_conductor_heap_bytes", state=state) / 2**20, 1)
            for state in ("in_use", "free")})
    return out, conductor


def control_plane_rss(sim):
    """The management cluster's own memory, apart from the conductor's."""
    env = sim.cp.env()
    out = {name: rss_mib(int(env[key])) for name, key in
           (("kube_apiserver", "APISERVER_PID"), ("etcd", "ETCD_PID"), ("kube_controller_manager", "KCM_PID"))
           if key in env}
    out["capi_sim"] = rss_mib(sim.proc.pid)
    return out


def prometheus_text(url, context=None):
    """Samples of a Prometheus text page: {(name, labels text): value}."""
    with urllib.request.urlopen(url, timeout=30, context=context) as r:
        text = r.read().decode()
    out = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        key, _, value = ln.rpartition(" ")
        name, _, labels = key.partition("{")
        try:
            out[(name, labels.rstrip("}"))] = float(value)
        except ValueError:
            continue
    return out


WATCHED_V1BETA1 = (("cluster.x-k8s.io/v1beta1", "clusters"),
                   ("infrastructure.cluster.x-k8s.io/v1beta1", "openstackclusters"),
                   ("controlplane.cluster.x-k8s.io/v1beta1", "kubeadmcontrolplanes"),
                   ("cluster.x-k8s.io/v1beta1", "machinedeployments"),
                   ("cluster.x-k8s.io/v1beta1", "machines"),
                   ("addons.cluster.x-k8s.io/v1alpha1", "helmreleaseproxies"))


def dump_cluster(sim, stack_id, path):
    """One CAPI cluster's objects of the kinds the conductor watches, as
    the apiserver serves them (the fixture of `mc-cache-bytes`)."""
    objs = []
    for api, plural in WATCHED_V1BETA1:
        for o in sorted(sim.items(api, plural, selector=f"cluster.x-k8s.io/cluster-name={stack_id}", ns=NS),
                        key=lambda o: o["metadata"]["name"]):
            o.setdefault("apiVersion", api)
            o.setdefault("kind", {"clusters": "Cluster", "openstackclusters": "OpenStackCluster",
                                  "kubeadmcontrolplanes": "KubeadmControlPlane",
                                  "machinedeployments": "MachineDeployment", "machines": "Machine",
                                  "helmreleaseproxies": "HelmReleaseProxy"}[plural])
            objs.append(o)
    with open(path, "w") as f:
        json.dump(objs, f, indent=1, sort_keys=True)
        f.write("\n")


def management_cluster_holds(sim, clusters):
    """What the management cluster holds for the fleet, from its own
    metrics: kube-apiserver's Go heap (in use; RSS also counts what the Go
    runtime has not returned), the objects it stores by resource, and etcd's
    database (in use, and the file with the history not yet compacted and
    defragmented), each also per cluster."""
    env = sim.cp.env()
    api = prometheus_text(sim.cp.server + "/metrics", sim.cp.ssl_context())
    etcd = prometheus_text(f"http://127.0.0.1:{env['ETCD_PORT']}/metrics")
    objects = {labels.split('resource="', 1)[1].split('"', 1)[0]: int(v)
               for (name, labels), v in api.items() if name == "apiserver_storage_objects" and v > 0}
    heap = api.get(("go_memstats_heap_inuse_bytes", ""), 0)
    in_use = etcd.get(("etcd_mvcc_db_total_size_in_use_in_bytes", ""), 0)
    db_file = etcd.get(("etcd_mvcc_db_total_size_in_bytes", ""), 0)
    keys = etcd.get(("etcd_debugging_mvcc_keys_total", ""), 0)
    per = max(clusters, 1)
    return dict(
        apiserver_heap_in_use_mib=round(heap / 2**20, 1), apiserver_heap_kib_per_cluster=round(heap / 1024 / per, 1),
        etcd_db_in_use_mib=round(in_use / 2**20, 1), etcd_db_file_mib=round(db_file / 2**20, 1),
        etcd_db_in_use_kib_per_cluster=round(in_use / 1024 / per, 1), etcd_keys=int(keys),
        etcd_keys_per_cluster=round(keys / per, 1), objects_by_resource=objects,
        apiserver_args=os.environ.get("K8S_APISERVER_ARGS", ""))


def cluster_path(stack_id):
    return f"/apis/cluster.x-k8s.io/v1beta1/namespaces/{NS}/clusters/{stack_id}"


def set_ready(sim, stack_id, ready):
    """Set a CAPI Cluster's Ready condition (what CAPI does when it changes)."""
    path = cluster_path(stack_id)
    conds = sim.kube.get(path)["status"]["conditions"]
    def flip(c):
        if ready:
            return {**{k: v for k, v in c.items() if k not in ("reason", "severity", "message")}, "status": "True"}
        return dict(c, status="False", reason="Bench", severity="Warning", message="bench")
    conds = [flip(c) if c["type"] == "Ready" else c for c in conds]
    sim.kube.request("PATCH", path + "/status", {"status": {"conditions": conds}}, "application/merge-patch+json")


def wait_health(db, uuids, want, timeout):
    deadline = time.time() + timeout
    left = set(uuids)
    with mysql_admin() as conn:
        conn.autocommit(True)
        with conn.cursor() as cur:
            while left:
                marks = ",".join(["%s"] * len(left))
                cur.execute(f"SELECT uuid FROM `{db}`.cluster WHERE health_status=%s AND uuid IN ({marks})",
                            (want, *left))
                left -= {r[0] for r in cur.fetchall()}
                if time.time() > deadline:
                    raise SystemExit(f"{len(left)} clusters never became {want}")
                time.sleep(0.05)


class CallProbe:
    """A call on the topic queue (where magnum-api sends its object reads)
    every `interval` seconds while the creates run: how long magnum-api
    would wait for the conductor during a burst of casts."""

    def __init__(self, ctx, interval, timeout=60):
        from magnum.conductor import api
        self.listener = api.ListenerAPI(context=ctx, topic="magnum-conductor", server=None, timeout=timeout)
        self.interval, self.stopping, self.thread = interval, False, None
        self.latencies_ms, self.failures = [], {}

    def start(self):
        if self.interval > 0:
            self.thread = threading.Thread(target=self.run, daemon=True)
            self.thread.start()

    def run(self):
        while not self.stopping:
            t0 = time.perf_counter()
            try:
                self.listener.ping_conductor()
                self.latencies_ms.append((time.perf_counter() - t0) * 1000)
            except Exception as e:  # the outcome is data here
                self.failures[type(e).__name__] = self.failures.get(type(e).__name__, 0) + 1
            time.sleep(self.interval)

    def stop(self):
        self.stopping = True
        if self.thread:
            self.thread.join()
        lat = sorted(self.latencies_ms)
        out = dict(answered=len(lat), failed=self.failures)
        if len(lat) >= 2:
            q = statistics.quantiles(lat, n=100, method="inclusive")
            out.update(p50_ms=round(q[49], 1), p99_ms=round(q[98], 1), max_ms=round(lat[-1], 1))
        return out


class Churn:
    """Background status changes: flips the Ready condition of random clusters."""

    def __init__(self, sim, stack_ids, per_second):
        self.sim, self.stack_ids, self.per_second = sim, stack_ids, per_second
        self.done, self.stopping, self.thread = 0, False, None

    def start(self):
        if self.per_second > 0 and self.stack_ids:
            self.thread = threading.Thread(target=self.run, daemon=True)
            self.thread.start()

    def run(self):
        state = {}
        t0 = time.time()
        while not self.stopping:
            s = random.choice(self.stack_ids)
            state[s] = not state.get(s, True)
            set_ready(self.sim, s, state[s])
            self.done += 1
            delay = t0 + self.done / self.per_second - time.time()
            if delay > 0:
                time.sleep(delay)
        for s, ready in state.items():
            if not ready:
                set_ready(self.sim, s, True)

    def stop(self):
        self.stopping = True
        if self.thread:
            self.thread.join()


def grow(sim, url, n):
    """Copy one CREATE_COMPLETE cluster n times (CAPI objects and rows)."""
    db = db_name(url)
    with mysql_admin() as conn:
        conn.autocommit(False)
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(f"SELECT * FROM `{db}`.cluster WHERE status='CREATE_COMPLETE' ORDER BY id LIMIT 1")
            seed = cur.fetchone()
            cur.execute(f"SELECT * FROM `{db}`.nodegroup WHERE cluster_id=%s", (seed["uuid"],))
            seed_ngs = cur.fetchall()
        copies = [(f"s{i:05d}", str(uuid.uuid4())) for i in range(n)]
        t0 = time.time()
        for i in range(0, n, 100):
            chunk = copies[i:i + 100]
            r = sim.post("/_sim/clone", {"namespace": NS, "cluster": seed["stack_id"], "uuid": seed["uuid"],
                                         "copies": chunk, "parallel": 16})
            assert r["objects"] > 0, r
            if (i // 100) % 10 == 9:
                print(f"bench-status: {i + len(chunk)} of {n} copies in {round(time.time() - t0)} s",
                      file=sys.stderr, flush=True)

        def row(src, copy, **over):
            """A copy of a row: the seed's stack id replaced by the copy's
            name in every text column (machine names in health reasons,
            addresses' owners), as the copy's CAPI objects were renamed."""
            out = {}
            for k, v in src.items():
                if k == "id":
                    continue
                if isinstance(v, str):
                    v = v.replace(seed["stack_id"], copy)
                out[k] = over.get(k, v)
            return out

        def insert(cur, table, rows):
            cols = list(rows[0])
            cur.executemany(f"INSERT INTO `{db}`.`{table}` ({','.join(f'`{c}`' for c in cols)}) VALUES "
                            f"({','.join(['%s'] * len(cols))})", [tuple(r[c] for c in cols) for r in rows])

        with conn.cursor() as cur:
            for i in range(0, n, 1000):
                chunk = copies[i:i + 1000]
                insert(cur, "cluster", [row(seed, name, uuid=u, name=f"copy-{name}", stack_id=name)
                                        for name, u in chunk])
                insert(cur, "nodegroup", [row(ng, name, uuid=str(uuid.uuid4()), cluster_id=u)
                                          for name, u in chunk for ng in seed_ngs])
            conn.commit()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conductor", required=True)
    ap.add_argument("--sim", default=k8s.SIM_BIN)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--steady-seconds", type=int, default=60)
    ap.add_argument("--total", type=int, default=0, help="grow the fleet to this many clusters by copying")
    ap.add_argument("--probe-interval", type=float, default=1.0,
                    help="seconds between the calls timed while the creates run (0: none)")
    ap.add_argument("--create-timeout", type=int, default=3600,
                    help="seconds the --clusters creates may take before the run gives up")
    ap.add_argument("--churn-per-second", type=float, default=0.0,
                    help="status changes per second on other clusters while latency is sampled")
    ap.add_argument("--sample-interval", type=float, default=0.1,
                    help="seconds between latency samples (the churn runs meanwhile)")
    ap.add_argument("--dump-cluster", metavar="FILE",
                    help="write one created cluster's watched objects here (mc-cache-bytes' fixture)")
    ap.add_argument("--apiserver-arg", action="append", default=[],
                    help="a kube-apiserver flag (repeatable), e.g. --watch-cache-sizes=...")
    ap.add_argument("--rss-builds", nargs="+", metavar="BINARY", default=[],
                    help="also restart these builds of the conductor on the fleet (at --clusters and at --total) "
                         "and report each one's RSS once its first full status pass is done, beside this build's")
    ap.add_argument("--restart-samples", type=int, default=100,
                    help="clusters changed while the conductor is down (restart catch-up)")
    a = ap.parse_args()
    os.environ["MAGNUM_CONDUCTOR_BIN"] = a.conductor
    # conftest read the variable when it was imported: point it here too.
    conftest.CONDUCTOR_BIN = a.conductor
    k8s.SIM_BIN = a.sim
    if a.apiserver_arg:
        os.environ["K8S_APISERVER_ARGS"] = " ".join(a.apiserver_arg)
    # The suite's pool starts a spare control plane for the next test; a
    # benchmark has no next test, and that idle apiserver and etcd would share
    # the machine with the one measured.
    os.environ["MC_K8S_PREWARM"] = "0"
    tmp = tempfile.mkdtemp(prefix="bench-status-")
    sim = k8s.Sim(pathlib.Path(tmp), "v1beta1", 200, namespace=NS)
    kubeconfig = sim.kubeconfig
    vhost = new_vhost("bench")
    url = new_database("bench")
    conf = os.path.join(tmp, "conductor.conf")
    port = free_port()
    write_conf(conf, vhost, db_url=url, extra=(
        f"[metrics]\nlisten = 127.0.0.1:{port}\n[capi]\nkubeconfig = {kubeconfig}\ncloud_cleanup = false\n"
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
        t = objects.ClusterTemplate(ctx, uuid=str(uuid.uuid4()), name="bench", coe="kubernetes", server_type="vm", cluster_distro="ubuntu",
                                    image_id="img", flavor_id="m1.small", master_flavor_id="m1.medium",
                                    keypair_id="kp", external_network_id="public", network_driver="calico",
                                    master_lb_enabled=False, labels={"kube_tag": "v1.30.4"}, project_id=PROJECT)
        t.create()
        rpc = api.API(context=ctx)
        probe = CallProbe(ctx, a.probe_interval)
        probe.start()
        t0 = time.time()
        for i in range(a.clusters):
            c = objects.Cluster(ctx, name=f"b{i}", cluster_template_id=t.uuid, keypair="kp", labels={"kube_tag": "v1.30.4"},
                                master_flavor_id="m1.medium", flavor_id="m1.small", create_timeout=0,
                                master_lb_enabled=False, floating_ip_enabled=True, project_id=PROJECT, user_id=ctx.user_id)
            c.uuid = str(uuid.uuid4())
            rpc.cluster_create_async(c, 1, 1, 0)
        cast_s = time.time() - t0
        db = db_name(url)

        def statuses():
            with mysql_admin() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT status, COUNT(*) FROM `{db}`.cluster GROUP BY status")
                return dict(cur.fetchall())

        milestones, next_report = {}, time.time() + 60
        while True:
            s = statuses()
            done = s.get("CREATE_COMPLETE", 0) + s.get("CREATE_FAILED", 0)
            step = max(a.clusters // 10, 1)
            for m in range(step, done + 1, step):
                milestones.setdefault(m, round(time.time() - t0, 1))
            if time.time() >= next_report:
                next_report += 60
                recent = sorted(probe.latencies_ms[-60:])
                print(f"bench-status: {round(time.time() - t0)} s after the first cast: {s}; calls answered "
                      f"{len(probe.latencies_ms)}, failed {probe.failures}, median of the last 60 "
                      f"{round(recent[len(recent) // 2]) if recent else '-'} ms", file=sys.stderr, flush=True)
            if done >= a.clusters:
                break
            if time.time() - t0 > a.create_timeout:
                raise SystemExit(f"not complete after {a.create_timeout} s: {s}; milestones {milestones}")
            time.sleep(2)
        complete_s = time.time() - t0
        calls_during_creates = probe.stop()
        failed = s.get("CREATE_FAILED", 0)
        rss_created = rss_mib(conductor.proc.pid)
        if a.dump_cluster:
            with mysql_admin() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT stack_id FROM `{db}`.cluster WHERE status='CREATE_COMPLETE' ORDER BY id LIMIT 1")
                dump_cluster(sim, cur.fetchone()[0], a.dump_cluster)
        grown = {}
        builds = [*a.rss_builds, a.conductor] if a.rss_builds else []
        if builds:
            grown["rss_after_restart_at_clusters"], conductor = rss_after_restart(
                conductor, conf, port, os.path.join(tmp, "conductor.log"), builds)
        if a.total > a.clusters:
            sim.post("/_sim/controllers/pause")
            conductor.stop()
            t1 = time.time()
            grow(sim, url, a.total - a.clusters)
            grown["copy_seconds"] = round(time.time() - t1, 1)
            # Changed while no conductor runs: the restart must catch up.
            with mysql_admin() as conn, conn.cursor() as cur:
                cur.execute(f"SELECT uuid, stack_id FROM `{db}`.cluster WHERE status='CREATE_COMPLETE'")
                rows = cur.fetchall()
            changed = random.sample(rows, min(a.restart_samples, len(rows)))
            for (_, stack_id) in changed:
                set_ready(sim, stack_id, False)
            t2 = time.time()
            conductor = Conductor(conf, port, os.path.join(tmp, "conductor.log"), wait=False)
            conductor.wait_ready(timeout=600)
            grown["restart_ready_seconds"] = round(time.time() - t2, 2)
            wait_health(db, [u for (u, _) in changed], "UNHEALTHY", timeout=600)
            grown["restart_caught_up_seconds"] = round(time.time() - t2, 2)
            while not conductor.metric("magnum_conductor_status_full_passes_total"):
                time.sleep(0.2)
            grown["restart_full_pass_done_seconds"] = round(time.time() - t2, 2)
            grown["full_pass_seconds"] = round(conductor.metric("magnum_conductor_status_full_pass_seconds"), 2)
            for (_, stack_id) in changed:
                set_ready(sim, stack_id, True)
            wait_health(db, [u for (u, _) in changed], "HEALTHY", timeout=600)

        # Steady state: controllers paused, nothing changes; count requests.
        sim.post("/_sim/controllers/pause")
        time.sleep(5)
        before = sim.get("/_sim/requests")
        time.sleep(a.steady_seconds)
        after = sim.get("/_sim/requests")
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
        sampled = random.sample(rows, min(a.samples, len(rows)))
        churn = Churn(sim, [r[1] for r in rows if r not in sampled], a.churn_per_second)
        churn.start()
        for (cuuid, stack_id) in sampled:
            for ready, want in ((False, "UNHEALTHY"), (True, "HEALTHY")):
                start = time.perf_counter()
                set_ready(sim, stack_id, ready)
                while True:
                    cur.execute(f"SELECT health_status FROM `{db}`.cluster WHERE uuid=%s", (cuuid,))
                    if cur.fetchone()[0] == want:
                        break
                    if time.perf_counter() - start > 30:
                        raise SystemExit(f"{cuuid}: health never became {want}")
                    time.sleep(0.001)
                lat.append((time.perf_counter() - start) * 1000)
                time.sleep(a.sample_interval)
        churn.stop()
        conn.close()
        lat.sort()
        q = statistics.quantiles(lat, n=100, method="inclusive")
        summary = dict(clusters=a.clusters, total=max(a.total, a.clusters), failed=failed, cast_seconds=round(cast_s, 1),
                       all_complete_seconds=round(complete_s, 1), complete_milestones_seconds=milestones,
                       calls_during_creates=calls_during_creates, steady_requests_per_minute=per_min, requests_by_client=after,
                       latency_ms=dict(samples=len(lat), p50=round(q[49], 1), p99=round(q[98], 1),
                                       max=round(lat[-1], 1)),
                       conductor_rss_mib=rss_mib(conductor.proc.pid), conductor_rss_mib_after_create=rss_created,
                       management_cluster_rss_mib=control_plane_rss(sim),
                       management_cluster=management_cluster_holds(sim, max(a.total, a.clusters)),
                       apiserver="kube-apiserver v1.28.7 (scripts/k8s-up.sh)",
                       churn_changes=churn.done, churn_per_second=a.churn_per_second, **grown)
        summary["rss_kib_per_cluster"] = round(summary["conductor_rss_mib"] * 1024 / max(a.total, a.clusters), 1)
        # The allocator's own account (glibc): what the conductor holds, and
        # what it freed and keeps (RSS less both: code, stacks, libraries).
        summary["conductor_heap_mib"] = {
            state: round(conductor.metric("magnum_conductor_heap_bytes", state=state) / 2**20, 1)
            for state in ("in_use", "free")}
        summary["cache"] = {kind: {k: int(conductor.metric(f"magnum_conductor_status_cache_{k}", kind=kind))
                                   for k in ("objects", "bytes")}
                            for kind in ("Cluster", "OpenStackCluster", "KubeadmControlPlane", "MachineDeployment",
                                         "Machine", "HelmReleaseProxy")}
        if builds:
            summary["rss_after_restart_at_total"], conductor = rss_after_restart(
                conductor, conf, port, os.path.join(tmp, "conductor.log"), builds)
        print(json.dumps(summary))
    finally:
        conductor.stop()
        sim.stop()
        conftest.magnum_client_close()
        rabbitmqctl("delete_vhost", vhost)


if __name__ == "__main__":
    main()
