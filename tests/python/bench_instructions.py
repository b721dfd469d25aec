"""Instructions per RPC message, counted by callgrind: a figure this
machine's noise does not move, so a regression check can use it.

One conductor process under `valgrind --tool=callgrind` on its own vhost;
`mc-rpc-load` (tests/bin/rpc_load.rs, the recorded `ping_conductor` with
fresh ids) sends a warm-up, then for each kind the counters are zeroed
(`callgrind_control --zero`), the messages sent, and the counters dumped
(`callgrind_control --dump`): instructions executed in user space by every
thread of the process, divided by the messages. The kernel's share (system
calls, task switches) is not in an instruction count: `bench_load.py` gives
CPU seconds with it.

    python bench_instructions.py --load BIN --conductor BIN [--calls 400]
        [--casts 1000] [--concurrency 8] [--python]
        [--baseline FILE --build NAME (--check MARGIN | --record)]

`--python` counts the Python magnum-conductor 23.0.0 (1 worker) the same
way, for the ratio. `--baseline` reads (or with `--record` writes) the
recorded figures of build NAME (`debug`, `release`) in FILE; `--check 0.15`
fails (exit 1) when a kind's instructions per message grew more than 15%
over the recorded figure. Prints a Markdown table and a JSON line.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import conftest  # noqa: E402
from conftest import Conductor, PythonConductor, broker_url, free_port, new_vhost, rabbitmqctl, wait_for_consumers, write_conf  # noqa: E402


def callgrind_control(*args):
    out = subprocess.run(["callgrind_control", *args], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: {out.stdout}{out.stderr}")
    return out.stdout


def dumped_total(out_dir, pid, before):
    """Instructions in the dump made after `before` (callgrind writes one
    file per dump, `<out>.<n>`, whose `totals:` line is the sum over its
    threads' parts: with --separate-threads=no, one)."""
    deadline = time.time() + 120
    while time.time() < deadline:
        for f in sorted(set(glob.glob(os.path.join(out_dir, f"callgrind.{pid}.out*"))) - before):
            with open(f) as fh:
                m = re.search(r"^(?:totals|summary):\s*(\d+)", fh.read(), re.M)
            if m:
                return int(m.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"no callgrind dump for {pid} in {out_dir}")


def generator(load, url, *args):
    out = subprocess.run([load, "load", "--url", url, *map(str, args)], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"mc-rpc-load {' '.join(map(str, args))}: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wait_handled(c, target, vhost, timeout=900):
    """Until the conductor finished every message sent. Ours acknowledges
    a message once handled (a call with its reply, a cast at its end), so
    every queue of its vhost without a message ready or unacknowledged is
    the barrier; asked of the broker, so the conductor does no work for it
    (a scrape of its metrics would be counted). Python's acknowledges a
    message before running it: it is done once its CPU time stops moving
    for two seconds."""
    deadline = time.time() + timeout
    if target == "rust":
        while True:
            lines = rabbitmqctl("list_queues", "-p", vhost, "name", "messages_ready",
                                "messages_unacknowledged").splitlines()
            counts = [ln.split()[1:] for ln in lines if len(ln.split()) == 3 and ln.split()[1].isdigit()]
            if counts and all(r == "0" and u == "0" for r, u in counts):
                return
            if time.time() > deadline:
                raise RuntimeError(f"messages still queued after {timeout} s: {lines}")
            time.sleep(0.5)
    pid = c.proc.pid
    quiet, last = 0, cpu_ticks(pid)
    while quiet < 4:
        if time.time() > deadline:
            raise RuntimeError(f"the Python conductor still busy after {timeout} s")
        time.sleep(0.5)
        now = cpu_ticks(pid)
        quiet = quiet + 1 if now - last <= 1 else 0
        last = now


def callgrind(out_dir):
    """The command a conductor runs under to be counted (valgrind execs
    the program: the pid is the conductor's)."""
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.%p.out", "--dump-line=no",
            "--compress-strings=no", "--compress-pos=no"]


def measure(a, target, tmp):
    out_dir = os.path.join(tmp, f"cg-{target}")
    os.makedirs(out_dir)
    vhost = new_vhost(f"instr-{target}")
    url = broker_url(vhost, "amqp")
    conf = os.path.join(tmp, f"{target}.conf")
    try:
        if target == "rust":
            port = free_port()
            write_conf(conf, vhost, extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
            conftest.CONDUCTOR_BIN = a.conductor  # read by Conductor
            c = Conductor(conf, port, os.path.join(tmp, "rust.log"), wait=False, prefix=callgrind(out_dir))
            c.wait_ready(timeout=300)
        else:
            write_conf(conf, vhost)
            c = PythonConductor(conf, os.path.join(tmp, "python.log"), prefix=callgrind(out_dir))
        pid = c.proc.pid
        try:
            wait_for_consumers(vhost, 3, timeout=600)
            generator(a.load, url, "--kind", "call", "--messages", a.warmup, "--concurrency", 1,
                      "--connections", 1, "--warmup", 0)
            result = {"target": target}
            for kind, n in (("call", a.calls), ("cast", a.casts)):
                before = set(glob.glob(os.path.join(out_dir, "*")))
                callgrind_control("--zero", str(pid))
                if kind == "call":
                    generator(a.load, url, "--kind", "call", "--messages", n, "--concurrency", a.concurrency,
                              "--connections", 1, "--warmup", 0)
                else:
                    generator(a.load, url, "--kind", "cast", "--messages", n, "--connections", 1, "--warmup", 0)
                # The generator's closing call is answered while casts still
                # wait for a cast slot (calls never queue behind casts): the
                # dump waits until every message was handled, or a cast's
                # figure would be however many of them fit before the dump.
                wait_handled(c, target, vhost)
                callgrind_control("--dump", str(pid))
                # The cast generator's closing call is counted with its casts.
                counted = n + (kind == "cast")
                result[f"{kind}_instructions_per_message"] = dumped_total(out_dir, pid, before) // counted
            return result
        finally:
            c.stop()
    finally:
        rabbitmqctl("delete_vhost", vhost)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", required=True)
    ap.add_argument("--conductor", required=True)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--casts", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--python", action="store_true", help="count the Python conductor too")
    ap.add_argument("--baseline", help="JSON file of recorded figures")
    ap.add_argument("--build", default="release", help="the key of these figures in --baseline")
    ap.add_argument("--check", type=float, help="fail when a figure grew more than this fraction")
    ap.add_argument("--record", action="store_true", help="write the figures into --baseline")
    ap.add_argument("--keep", help="copy callgrind's dumps here (for callgrind_annotate)")
    a = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("valgrind (with callgrind_control) is needed: apt-get install valgrind")

    with tempfile.TemporaryDirectory(prefix="mc-instr-") as tmp:
        results = [measure(a, "rust", tmp)]
        if a.python:
            results.append(measure(a, "python-w1", tmp))
        if a.keep:
            shutil.copytree(tmp, a.keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.conf"))

    print("| target | call (instructions per message) | cast |")
    print("|---|---|---|")
    for r in results:
        print(f"| {r['target']} | {r['call_instructions_per_message']:,} | {r['cast_instructions_per_message']:,} |")
    if a.python:
        ours, py = results
        for kind in ("call", "cast"):
            k = f"{kind}_instructions_per_message"
            print(f"python / rust, {kind}: {py[k] / ours[k]:.1f}x")
    ours = results[0]
    report = {"results": results, "calls": a.calls, "casts": a.casts, "concurrency": a.concurrency}
    status = 0
    if a.baseline:
        try:
            with open(a.baseline) as f:
                recorded = json.load(f)
        except FileNotFoundError:
            recorded = {}
        if a.record:
            entry = recorded.setdefault("rpc_instructions_per_message", {})
            entry[a.build] = {k: v for k, v in ours.items() if k != "target"}
            with open(a.baseline, "w") as f:
                json.dump(recorded, f, indent=2, sort_keys=True)
                f.write("\n")
        elif a.check is not None:
            base = recorded.get("rpc_instructions_per_message", {}).get(a.build)
            if not base:
                raise SystemExit(f"{a.baseline} has no rpc_instructions_per_message.{a.build}")
            for k, v in base.items():
                margin = a.check
                grown = ours[k] / v - 1
                report.setdefault("growth", {})[k] = round(grown, 4)
                verdict = "over the margin" if grown > margin else "ok"
                print(f"{k}: {ours[k]:,} against {v:,} recorded ({grown:+.1%}, margin {margin:.0%}): {verdict}")
                if grown > margin:
                    status = 1
    print(json.dumps(report))
    sys.exit(status)


if __name__ == "__main__":
    main()
