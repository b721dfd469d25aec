#!/usr/bin/env python3
"""The table scripts/test-all.sh prints at its end: wall time and CPU
seconds per stage and per Python test module, with what each module started
(issue 48). docs/testing.md keeps one run's table.

    python3 tests/suite_report.py DIR [--markdown]
    python3 tests/suite_report.py DIR --order > tests/python/suite_order.json

`--order` prints each module's wall seconds (JSON), the order
tests/python/conftest.py hands modules to the test processes in.

DIR is MC_SUITE_TIMING_DIR: `stages.tsv` written by scripts/test-all.sh
(`begin NAME EPOCH CGROUP`, `bg NAME START END CGROUP`, `end EPOCH`) and the
`module-*.jsonl` records of tests/python/suite_timing.py. CPU comes from each
stage's cgroup (`cpuacct.usage`: every process the stage started, exited
ones included); `-` where the run had no cgroup (not root), `~` where a
module's figure is only its test process and the children it reaped.
"""
import glob
import json
import os
import sys


def cgroup_cpu(path):
    if not path:
        return None
    try:
        with open(os.path.join(path, "cpuacct.usage")) as f:
            return int(f.read()) / 1e9
    except (OSError, ValueError):
        return None


def read_stages(path):
    """[(name, wall, cpu, in_background)]"""
    begins, rows, end = [], [], None
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    for line in lines:
        f = line.split("\t")
        if f[0] == "begin" and len(f) == 4:
            begins.append((f[1], float(f[2]), f[3]))
        elif f[0] == "bg" and len(f) == 5:
            rows.append((f[1], float(f[3]) - float(f[2]), cgroup_cpu(f[4]), True, float(f[2])))
        elif f[0] == "end" and len(f) == 2:
            end = float(f[1])
    for i, (name, t0, cg) in enumerate(begins):
        t1 = begins[i + 1][1] if i + 1 < len(begins) else end
        if t1 is None:
            continue
        rows.append((name, t1 - t0, cgroup_cpu(cg), False, t0))
    rows.sort(key=lambda r: r[4])
    return [r[:4] for r in rows]


def read_modules(d):
    mods = []
    for p in glob.glob(os.path.join(d, "module-*.jsonl")):
        with open(p) as f:
            mods.extend(json.loads(line) for line in f if line.strip())
    mods.sort(key=lambda m: -m["cpu"])
    return mods


def fmt_cpu(v, exact=True):
    if v is None:
        return "-"
    return f"{v:.0f}" if exact else f"~{v:.0f}"


def table(rows, header, markdown):
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    out = []
    if markdown:
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---" for _ in header) + "|")
        out.extend("| " + " | ".join(str(c) for c in r) + " |" for r in rows)
    else:
        out.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        out.extend("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows)
    return "\n".join(out)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    markdown = "--markdown" in sys.argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    d = args[0]
    if "--order" in sys.argv:
        seconds = {}
        for m in read_modules(d):
            name = os.path.basename(m["name"])
            seconds[name] = seconds.get(name, 0) + round(m["wall"])
        print(json.dumps(dict(sorted(seconds.items(), key=lambda kv: -kv[1])), indent=1))
        return 0
    stages = read_stages(os.path.join(d, "stages.tsv"))
    out = []
    if stages:
        rows = [(("(beside) " if bg else "") + name, f"{wall:.0f}", fmt_cpu(cpu)) for name, wall, cpu, bg in stages]
        total_cpu = [c for _, _, c, _ in stages if c is not None]
        rows.append(("total (wall: the command; CPU: every stage)",
                     f"{sum(w for _, w, _, bg in stages if not bg):.0f}",
                     f"{sum(total_cpu):.0f}" if total_cpu else "-"))
        out.append(table(rows, ("stage", "wall s", "CPU s"), markdown))
    mods = read_modules(d)
    if mods:
        rows = []
        for m in mods:
            c = m.get("counts", {})
            started = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "processes") or "-"
            top = sorted(m.get("programs", {}).items(), key=lambda kv: -kv[1][1])[:3]
            progs = ", ".join(f"{k} {s:.0f}" for k, (n, s) in top) or "-"
            rows.append((m["name"].replace("tests/python/", ""), m["worker"], m["tests"], f"{m['wall']:.0f}",
                         fmt_cpu(m["cpu"], m.get("exact", False)), c.get("processes", 0), started, progs))
        rows.append(("all modules", "", sum(m["tests"] for m in mods), f"{sum(m['wall'] for m in mods):.0f}",
                     f"{sum(m['cpu'] for m in mods):.0f}", sum(m.get("counts", {}).get("processes", 0) for m in mods),
                     "", ""))
        out.append(table(rows, ("module", "worker", "tests", "wall s", "CPU s", "procs", "started",
                                "CPU s by program (top 3, sampled)"), markdown))
    if not out:
        print(f"suite_report: nothing recorded in {d}", file=sys.stderr)
        return 1
    print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
