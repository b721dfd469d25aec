"""RPC throughput with a load generator that is not the bottleneck.

In one run on one broker, `mc-rpc-load` (Rust, oslo.messaging's wire, several
connections; see tests/bin/rpc_load.rs) drives in turn, each in its own vhost:

- `echo`: a trivial consumer answering every call (no handler): the broker's
  ceiling on this machine;
- `python-wN`: the real Python magnum-conductor 23.0.0 with `[conductor]
  workers = N`;
- `rust`: our conductor.

For each: calls at each concurrency (calls/s, p50, p99 as the generator sees
them) and a burst of casts (drained/s), and the CPU seconds the target's
process tree spent per 1,000 messages (utime + stime from /proc, before and
after each run). Prints Markdown tables and a JSON line.

    python bench_load.py --load BIN --conductor BIN [--calls 5000] [--casts 20000]
        [--concurrency 1 8 32] [--connections 4] [--python-workers 1 2]

Run by scripts/bench-rpc.sh.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import conftest  # noqa: E402
from conftest import Conductor, PythonConductor, broker_url, free_port, new_vhost, rabbitmqctl, wait_for_consumers, write_conf  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root):
    """CPU seconds (user + system) of `root` and its live descendants."""
    children, cpu = {}, {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(p), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        cpu[pid] = int(fields[11]) + int(fields[12])  # utime, stime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / TICK


def switches(pid):
    """Context switches (voluntary + involuntary) of every thread of `pid`
    so far: each is a thread parking or being preempted, the kernel's part
    of a message's cost that an instruction count does not see. Threads
    that exited are not counted (the conductor's live for its lifetime)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def generator(load, url, *args):
    out = subprocess.run([load, "load", "--url", url, *map(str, args)], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"mc-rpc-load {' '.join(map(str, args))}: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", required=True, help="the mc-rpc-load binary")
    ap.add_argument("--conductor", required=True, help="our magnum-conductor binary")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--casts", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--python-workers", type=int, nargs="*", default=[1, 2])
    a = ap.parse_args()

    check = subprocess.run([a.load, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"mc-rpc-load check failed: {check.stderr}")

    targets = ["echo"] + [f"python-w{n}" for n in a.python_workers] + ["rust"]
    results = []
    with tempfile.TemporaryDirectory(prefix="mc-load-") as tmp:
        for target in targets:
            vhost = new_vhost(f"load-{target}")
            url = broker_url(vhost, "amqp")
            conf = os.path.join(tmp, f"{target}.conf")
            proc = None
            if target == "echo":
                proc = subprocess.Popen([a.load, "echo", "--url", url], stderr=subprocess.DEVNULL)
                pid, stop, consumers = proc.pid, proc.kill, 4
            elif target.startswith("python"):
                write_conf(conf, vhost)
                with open(conf) as f:
                    text = f.read().replace("workers = 1", f"workers = {target.split('-w')[1]}")
                with open(conf, "w") as f:
                    f.write(text)
                pc = PythonConductor(conf, os.path.join(tmp, f"{target}.log"))
                # 3 consumers whatever `workers` says: Magnum 23.0.0's conductor
                # (oslo.service's threading backend) showed one consuming
                # channel with workers = 2 as with 1.
                pid, stop, consumers = pc.proc.pid, pc.stop, 3
            else:
                port = free_port()
                write_conf(conf, vhost, extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
                conftest.CONDUCTOR_BIN = a.conductor  # read by Conductor
                c = Conductor(conf, port, os.path.join(tmp, "rust.log"))
                pid, stop, consumers = c.proc.pid, c.stop, 3
            try:
                wait_for_consumers(vhost, consumers)
                for conc in a.concurrency:
                    cpu0, sw0 = tree_cpu(pid), switches(pid)
                    r = generator(a.load, url, "--kind", "call", "--messages", a.calls, "--concurrency", conc,
                                  "--connections", min(a.connections, conc))
                    r["cpu_s_per_1000"] = (tree_cpu(pid) - cpu0) * 1000 / a.calls
                    r["switches_per_message"] = (switches(pid) - sw0) / a.calls
                    r["target"] = target
                    results.append(r)
                cpu0, sw0 = tree_cpu(pid), switches(pid)
                r = generator(a.load, url, "--kind", "cast", "--messages", a.casts, "--connections", a.connections,
                              "--warmup", 0)
                r["cpu_s_per_1000"] = (tree_cpu(pid) - cpu0) * 1000 / (a.casts + 1)
                r["switches_per_message"] = (switches(pid) - sw0) / (a.casts + 1)
                r["target"] = target
                results.append(r)
            finally:
                stop()
                if proc:
                    proc.wait(10)
                rabbitmqctl("delete_vhost", vhost)

    def row(target, kind, conc=None):
        return next((r for r in results if r["target"] == target and r["kind"] == kind
                     and (conc is None or r.get("concurrency") == conc)), None)

    print("| target | kind | concurrency | messages/s | p50 ms | p99 ms | CPU s / 1,000 | context switches / message "
          "| failed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['target']} | {r['kind']} | {r.get('concurrency', '-')} | {r['per_second']:.0f} | "
              f"{r.get('p50_ms', 0):.2f} | {r.get('p99_ms', 0):.2f} | {r['cpu_s_per_1000']:.3f} | "
              f"{r['switches_per_message']:.2f} | {r.get('failed', 0)} |")
    print()
    pythons = [t for t in targets if t.startswith("python")]
    print("| kind | concurrency | rust / " + " | rust / ".join(pythons) + " | rust / echo (broker ceiling) | "
          "CPU per msg " + " | CPU per msg ".join(f"{p} / rust" for p in pythons) + " |")
    print("|---" * (3 + 2 * len(pythons)) + "|")
    for kind, concs in (("call", a.concurrency), ("cast", [None])):
        for conc in concs:
            ours, echo = row("rust", kind, conc), row("echo", kind, conc)
            cells = [f"{ours['per_second'] / row(p, kind, conc)['per_second']:.2f}x" for p in pythons]
            cpu = [f"{row(p, kind, conc)['cpu_s_per_1000'] / max(ours['cpu_s_per_1000'], 1e-9):.1f}x"
                   for p in pythons]
            print(f"| {kind} | {conc or '-'} | {' | '.join(cells)} | {ours['per_second'] / echo['per_second']:.2f} | "
                  f"{' | '.join(cpu)} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
