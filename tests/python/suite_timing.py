"""Where the suite's time goes: wall time and CPU seconds per test module,
with the processes and control planes each started (issue 48).

Loaded by conftest.py. Records only when `MC_SUITE_TIMING_DIR` names a
folder (scripts/test-all.sh sets it); `tests/suite_report.py` reads the
records and prints the table.

CPU is counted by the kernel: when `MC_SUITE_CGROUP` names a cgroup v1
`cpuacct` folder we may write (scripts/test-all.sh makes one when it runs as
root), the test process moves itself into a child cgroup of its own for
each module before the module's first fixture. Everything it starts from
then on (control planes, OpenStack services, conductors, daemons that
detach) is born in that cgroup and stays there, and `cpuacct.usage` keeps
the CPU of processes that have exited. Without a cgroup the figure is the
test process's own CPU plus its reaped children's (`getrusage`), which
misses daemons: the table marks it `~`.

A sampler reads the module's cgroup every half second to name what ran in
it (kube-apiserver, python, magnum-conductor, ...) with the CPU each had
when last seen: a split of the exact total by program, missing processes
that lived under half a second.

Counters (`count(what)`) are bumped by the helpers that start expensive
things: `control planes` (k8s.py), `keystone` and each OpenStack service
(openstack_services.py, test_lifecycle_keystone.py), `magnum-api`
(api_env.py); `processes` counts every `subprocess.Popen` of the test
process itself.
"""
import json
import os
import resource
import subprocess
import threading
import time

DIR = os.environ.get("MC_SUITE_TIMING_DIR")
CGROUP = os.environ.get("MC_SUITE_CGROUP")
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_TICK = os.sysconf("SC_CLK_TCK")

_current = None  # the module being measured
_lock = threading.Lock()


def count(what, n=1):
    """Counts `n` of `what` started by the current module."""
    m = _current
    if m is not None:
        with _lock:
            m["counts"][what] = m["counts"].get(what, 0) + n


def cgroup():
    """The cgroup of the module being measured (None: none), for a process
    that is not this one's child but works for it (client_pool.py)."""
    m = _current
    return m["cgroup"] if m is not None else None


def _rusage_cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _cgroup_usage(path):
    with open(os.path.join(path, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


def _enter_cgroup(name):
    """The test process into a new cgroup `name` under MC_SUITE_CGROUP;
    its path, or None when that cannot be done here."""
    if not CGROUP:
        return None
    path = os.path.join(CGROUP, name)
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        return path
    except OSError:
        return None


def _proc_cpu(pid):
    """(program, CPU seconds) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return comm, (int(fields[11]) + int(fields[12])) / _TICK


class _Sampler(threading.Thread):
    def __init__(self, m):
        super().__init__(name="suite-timing", daemon=True)
        self.m = m
        self.stop = threading.Event()

    def sample(self):
        path = self.m["cgroup"]
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except OSError:
            return
        seen, before = self.m["seen"], self.m["before"]
        for pid in pids:
            got = _proc_cpu(pid)
            if got is not None:
                # The test process itself was running before the module.
                seen[pid] = (got[0], got[1] - before.get(pid, 0.0))

    def run(self):
        while not self.stop.wait(0.5):
            self.sample()


def _begin(module):
    global _current
    cg = _enter_cgroup(f"py-{module.replace('/', '_')}")
    own = _proc_cpu(os.getpid())
    m = dict(module=module, worker=WORKER, wall0=time.monotonic(), tests=0, counts={}, seen={}, cgroup=cg,
             before={os.getpid(): own[1] if own else 0.0},
             cpu0=_cgroup_usage(cg) if cg else _rusage_cpu())
    if cg:
        m["sampler"] = _Sampler(m)
        m["sampler"].start()
    _current = m


def _end():
    global _current
    m, _current = _current, None
    if m is None:
        return
    if m.get("sampler"):
        m["sampler"].stop.set()
        m["sampler"].join()
        m["sampler"].sample()
    cpu = (_cgroup_usage(m["cgroup"]) if m["cgroup"] else _rusage_cpu()) - m["cpu0"]
    by_program = {}
    for comm, secs in m["seen"].values():
        p = by_program.setdefault(comm, [0, 0.0])
        p[0] += 1
        p[1] += secs
    record = dict(kind="module", name=m["module"], worker=m["worker"], tests=m["tests"],
                  wall=round(time.monotonic() - m["wall0"], 1), cpu=round(cpu, 1), exact=bool(m["cgroup"]),
                  counts=m["counts"], programs={k: [n, round(s, 1)] for k, (n, s) in by_program.items()})
    os.makedirs(DIR, exist_ok=True)
    with open(os.path.join(DIR, f"module-{m['worker']}-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
    # What the process does between modules (and after the last) is
    # nobody's: out of the module's cgroup.
    if m["cgroup"]:
        _enter_cgroup(f"py-between-{WORKER}")


_real_popen_init = subprocess.Popen.__init__


def _counting_popen_init(self, *args, **kwargs):
    count("processes")
    _real_popen_init(self, *args, **kwargs)


if DIR:
    import pytest

    subprocess.Popen.__init__ = _counting_popen_init

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        module = item.nodeid.split("::", 1)[0]
        if _current is None or _current["module"] != module:
            _end()
            _begin(module)
        _current["tests"] += 1
        yield
        # The module's fixtures are torn down in its last test's teardown,
        # inside the protocol just run: its cgroup is charged with them.
        if nextitem is None or nextitem.nodeid.split("::", 1)[0] != module:
            _end()

    def pytest_sessionfinish(session):
        _end()
