"""Benchmark: ping_conductor through Magnum 23.0.0's own client against our
conductor and against the real Python magnum-conductor, on the same broker,
in one run. Prints a Markdown table with calls/s, p50 and p99 and the ratios,
and the CPU each conductor's process tree spent (utime + stime, /proc).

`--casts N` then casts N `cluster_delete` (of clusters that do not exist)
through the same client, from the threads of the largest concurrency, and
times each conductor until its topic queue is drained: the CPU per message
of both kinds is the pair issue 33 compares.

`--before PATH` measures a second build of ours in the same run (a change's
before and after side by side).

Run it with `scripts/bench-rpc.sh` (builds our release binary first).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_load import switches, tree_cpu
from conftest import Conductor, PythonConductor, free_port, new_vhost, rabbitmqctl, wait_for_consumers, write_conf

HERE = os.path.dirname(os.path.abspath(__file__))


def server_id(vhost):
    for row in rabbitmqctl("list_queues", "-p", vhost, "name").splitlines()[1:]:
        if row.startswith("magnum-conductor.") and len(row) == len("magnum-conductor.") + 12:
            return row.split(".", 1)[1]
    raise RuntimeError(f"no server queue in {vhost}")


def run_load(conf, server, calls, concurrency, out):
    subprocess.run([sys.executable, os.path.join(HERE, "ping_load.py"), "--config-file", conf, "--server", server,
                    "--calls", str(calls), "--concurrency", str(concurrency), "--timeout", "30", "--warmup", "50",
                    "--out", out], check=True, stderr=subprocess.DEVNULL)
    with open(out) as f:
        rows = [json.loads(line) for line in f]
    failed = sum(1 for r in rows if not r["ok"])
    lat = sorted((r["end"] - r["start"]) * 1000 for r in rows if r["ok"])
    wall = max(r["end"] for r in rows) - min(r["start"] for r in rows)
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return dict(rate=len(rows) / wall, p50=q[49], p99=q[98], failed=failed)


def queue_depth(vhost, queue="magnum-conductor"):
    for row in rabbitmqctl("list_queues", "-p", vhost, "name", "messages").splitlines()[1:]:
        name, _, n = row.partition("\t")
        if name == queue:
            return int(n)
    return 0


def run_casts(conf, vhost, casts, concurrency, out):
    """Cast, then wait until the topic queue is empty (ready and
    unacknowledged): every cast handled."""
    t0 = time.time()
    subprocess.run([sys.executable, os.path.join(HERE, "ping_load.py"), "--config-file", conf, "--server", "-",
                    "--cast-deletes", str(casts), "--concurrency", str(concurrency), "--warmup", "0",
                    "--out", out], check=True, stderr=subprocess.DEVNULL)
    sent = time.time()
    while queue_depth(vhost) > 0:
        time.sleep(0.05)
    return dict(rate=casts / (time.time() - t0), sent_s=sent - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--casts", type=int, default=0)
    p.add_argument("--before", help="another build of magnum-conductor, measured as 'before'")
    a = p.parse_args()
    names = ["python", "rust"] + (["before"] if a.before else [])

    results = {}
    with tempfile.TemporaryDirectory(prefix="mc-bench-") as tmp:
        for name in names:
            vhost = new_vhost(f"bench-{name}")
            conf = os.path.join(tmp, f"{name}.conf")
            write_conf(conf, vhost)
            if name == "python":
                conductor = PythonConductor(conf, os.path.join(tmp, "python.log"))
            else:
                port = free_port()
                write_conf(conf, vhost, extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
                conductor = Conductor(conf, port, os.path.join(tmp, f"{name}.log"),
                                      binary=a.before if name == "before" else None)
            try:
                wait_for_consumers(vhost, 3)
                sid = server_id(vhost)
                pid = conductor.proc.pid
                for c in a.concurrency:
                    cpu0, sw0 = tree_cpu(pid), switches(pid)
                    results[(name, c)] = run_load(conf, sid, a.calls, c, os.path.join(tmp, f"{name}-{c}.jsonl"))
                    results[(name, c)]["cpu_ms"] = (tree_cpu(pid) - cpu0) * 1000 / a.calls
                    results[(name, c)]["switches"] = (switches(pid) - sw0) / a.calls
                if a.casts:
                    cpu0, sw0 = tree_cpu(pid), switches(pid)
                    results[(name, "cast")] = run_casts(conf, vhost, a.casts, max(a.concurrency),
                                                        os.path.join(tmp, f"{name}-casts.jsonl"))
                    results[(name, "cast")]["cpu_ms"] = (tree_cpu(pid) - cpu0) * 1000 / a.casts
                    results[(name, "cast")]["switches"] = (switches(pid) - sw0) / a.casts
            finally:
                conductor.stop()
                rabbitmqctl("delete_vhost", vhost)

    print("| concurrency | conductor | calls/s | p50 ms | p99 ms | failed | CPU ms per call | context switches per call |")
    print("|---|---|---|---|---|---|---|---|")
    for c in a.concurrency:
        for name in names:
            r = results[(name, c)]
            print(f"| {c} | {name} | {r['rate']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['failed']} | "
                  f"{r['cpu_ms']:.3f} | {r['switches']:.2f} |")
    print()
    print("| concurrency | calls/s ratio (rust/python) | p50 ratio (python/rust) | p99 ratio (python/rust) | "
          "CPU per call (python/rust) |")
    print("|---|---|---|---|---|")
    for c in a.concurrency:
        py, rs = results[("python", c)], results[("rust", c)]
        print(f"| {c} | {rs['rate'] / py['rate']:.2f}x | {py['p50'] / rs['p50']:.2f}x | {py['p99'] / rs['p99']:.2f}x | "
              f"{py['cpu_ms'] / max(rs['cpu_ms'], 1e-9):.1f}x |")
        if a.before:
            b = results[("before", c)]
            print(f"| {c}, before | {b['rate'] / py['rate']:.2f}x | {py['p50'] / b['p50']:.2f}x | "
                  f"{py['p99'] / b['p99']:.2f}x | {py['cpu_ms'] / max(b['cpu_ms'], 1e-9):.1f}x |")
    if a.casts:
        py, rs = results[("python", "cast")], results[("rust", "cast")]
        print()
        print(f"| {a.casts} cluster_delete casts | drained/s | CPU ms per cast | context switches per cast |")
        print("|---|---|---|---|")
        for name in names:
            r = results[(name, "cast")]
            print(f"| {name} | {r['rate']:.0f} | {r['cpu_ms']:.3f} | {r['switches']:.2f} |")
        print(f"| python / rust | {rs['rate'] / py['rate']:.2f}x | {py['cpu_ms'] / max(rs['cpu_ms'], 1e-9):.1f}x | |")
        if a.before:
            b = results[("before", "cast")]
            print(f"| python / before | {b['rate'] / py['rate']:.2f}x | "
                  f"{py['cpu_ms'] / max(b['cpu_ms'], 1e-9):.1f}x | |")
    print(json.dumps({f"{k[0]}-{k[1]}": v for k, v in results.items()}))


if __name__ == "__main__":
    main()
