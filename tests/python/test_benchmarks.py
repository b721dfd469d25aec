"""Each benchmark still runs, at a tiny size (timings are not checked:
benchmarks are commands, see docs/benchmarks.md; this keeps them from
rotting between measurements).

Two figures are checked, because they do not move with the machine's
load: the instructions per RPC message (callgrind) and the bytes the
status cache holds per cluster. Each fails when it grew more than its
margin over tests/bench-baseline.json (recorded with `--record`, see
docs/benchmarks.md "Regression check").

Debug builds, as the rest of the suite: the scripts in scripts/ run the
same Python drivers on release builds. The management cluster is a real
kube-apiserver (scripts/k8s-up.sh) in both.
"""
import json
import os
import subprocess
import sys

from conftest import CONDUCTOR_BIN, ROOT
from k8s import SIM_BIN

HERE = os.path.dirname(os.path.abspath(__file__))
LOAD_BIN = os.path.join(os.path.dirname(CONDUCTOR_BIN), "mc-rpc-load")
CACHE_BYTES_BIN = os.path.join(os.path.dirname(CONDUCTOR_BIN), "mc-cache-bytes")
CACHE_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "status-cache", "v1beta1.json")


def run(script, *args, timeout=900):
    p = subprocess.run([sys.executable, os.path.join(HERE, script), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def last_json(out):
    """The report line (oslo.messaging may log after it, to stdout)."""
    return json.loads(next(ln for ln in reversed(out.strip().splitlines()) if ln.startswith(("{", "["))))


BASELINE = os.path.join(ROOT, "tests", "bench-baseline.json")
# How much a figure may grow over its recorded baseline before the suite fails.
# (A call's and a cast's counts move under 1% between runs, idle or loaded,
# since bench_instructions.py dumps only once every message was handled.)
INSTRUCTIONS_MARGIN = 0.15
CACHE_BYTES_MARGIN = 0.10


def baseline():
    with open(BASELINE) as f:
        return json.load(f)


def test_status_benchmark_runs_and_grows_the_fleet():
    out = run("bench_status.py", "--conductor", CONDUCTOR_BIN, "--sim", SIM_BIN, "--clusters", 2,
              "--total", 6, "--samples", 2, "--steady-seconds", 1, "--churn-per-second", 5,
              "--restart-samples", 2)
    s = last_json(out)
    assert s["failed"] == 0 and s["total"] == 6, s
    assert s["cache"]["Cluster"]["objects"] == 6, "the copies are watched like the created ones"
    per_cluster = sum(k["bytes"] for k in s["cache"].values()) / 6
    recorded = baseline()["status_cache_bytes_per_cluster"]
    assert per_cluster <= recorded * (1 + CACHE_BYTES_MARGIN), (
        f"the status cache holds {per_cluster:.0f} bytes per cluster, over {recorded} recorded "
        f"(+{CACHE_BYTES_MARGIN:.0%}) in {BASELINE}: {s['cache']}")
    assert s["latency_ms"]["samples"] == 4 and s["restart_caught_up_seconds"] > 0, s
    assert s["steady_requests_per_minute"].get("GET", 0) == 0, s


def test_status_cache_heap_per_cluster_did_not_grow():
    """The heap the status cache holds per cluster (mc-cache-bytes: a
    served cluster's objects filed under 1,000 names, the bytes its
    allocator counts; exact, so the margin is for changes, not noise)."""
    p = subprocess.run([CACHE_BYTES_BIN, "--fixture", CACHE_FIXTURE, "--clusters", "1000"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout)
    assert got["objects_per_cluster"] == 10, got
    recorded = baseline()["status_cache_heap_bytes_per_cluster"]
    assert got["heap_bytes_per_cluster"] <= recorded * (1 + CACHE_BYTES_MARGIN), (
        f"the status cache's heap is {got['heap_bytes_per_cluster']:.0f} bytes per cluster, over {recorded} "
        f"recorded (+{CACHE_BYTES_MARGIN:.0%}) in {BASELINE}: {got}")


def test_rpc_load_benchmark_runs_against_all_targets():
    out = run("bench_load.py", "--load", LOAD_BIN, "--conductor", CONDUCTOR_BIN, "--calls", 40, "--casts", 100,
              "--concurrency", 1, 4, "--connections", 2, "--python-workers", 1)
    results = last_json(out)
    targets = {(r["target"], r["kind"]) for r in results}
    assert targets == {(t, k) for t in ("echo", "python-w1", "rust") for k in ("call", "cast")}, targets
    assert all(r.get("failed", 0) == 0 for r in results), results
    assert "rust / python-w1" in out


def test_day2_benchmark_runs():
    out = run("bench_day2.py", "--conductor", CONDUCTOR_BIN, "--sim", SIM_BIN, "--clusters", 1)
    s = last_json(out)
    assert s["clusters"] == 1 and s["to_update_complete_ms"], s


def test_instructions_per_message_did_not_grow():
    """callgrind's count of a call and a cast (this build: debug, with the
    crash points, as the suite runs it) against the recorded baseline."""
    out = run("bench_instructions.py", "--load", LOAD_BIN, "--conductor", CONDUCTOR_BIN, "--baseline", BASELINE,
              "--build", "debug-failpoints", "--check", INSTRUCTIONS_MARGIN, timeout=600)
    report = last_json(out)
    assert set(report["growth"]) == {"call_instructions_per_message", "cast_instructions_per_message"}, report
