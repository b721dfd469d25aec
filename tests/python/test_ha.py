"""Several conductors on one queue, one database and one management cluster.

Production runs three (openstack-ansible puts one on each infra host). One
status leader writes statuses, chosen on the broker (an exclusive queue,
conductor/src/lifecycle/coordination/elect.rs, the default) or through a Lease
(`leader_election = lease`); each cluster's Lease in the management cluster
(conductor/src/lifecycle/coordination/lease.rs) makes its operations (on any conductor)
and the leader's status passes exclusive; a conductor that dies holding one
is taken over by the leader after the Lease was not renewed for
`lease_duration` (5 s here).

- test_conductors_share_the_work (two conductors with the broker election,
  three with the Lease one): creates and deletes spread over the processes
  by RabbitMQ; all converge, each cluster has exactly one of each object,
  nothing is left (rows, keypairs, Secrets, Leases), exactly one leader,
  and every conductor handled some of the requests.
- test_owner_killed_mid_create_another_finishes: the conductor driving a
  create (and leading) is killed -9 in the middle of its applies and never
  restarted; the other one becomes leader, takes the cluster's Lease over
  and finishes the create: rows and objects as in a single-conductor run.
- test_leader_cut_off_from_the_management_cluster_hands_over: the broker
  lock knows nothing of the management cluster, so the leader judges
  itself: cut from the apiserver (a TCP proxy), it steps down after
  `lease_duration` and another conductor leads; back, it does not take the
  leadership back.
"""
import json
import os
import re
import signal
import time

import pytest

from conftest import ANSI, Conductor, free_port
from test_lifecycle import Env
from test_lifecycle_restart import NOTHING, ONE_CLUSTER, died, objects_of

LEASE_DURATION = 5


class HaEnv(Env):
    """Env with more conductors: each its own config (its metrics port)."""

    def __init__(self, tmp, n, **kw):
        super().__init__(tmp, "v1beta1", **kw)
        self.conductors = [self.conductor]
        for _ in range(n - 1):
            self.add()

    def add(self, failpoint=None, kubeconfig=None):
        i = len(self.conductors)
        port = free_port()
        conf = str(self.tmp / f"conductor{i}.conf")
        text = open(self.conf).read()
        text = re.sub(r"listen = 127\.0\.0\.1:\d+", f"listen = 127.0.0.1:{port}", text)
        if kubeconfig:
            text = re.sub(r"(?m)^kubeconfig = .*$", f"kubeconfig = {kubeconfig}", text)
        open(conf, "w").write(text)
        c = Conductor(conf, port, str(self.tmp / f"conductor{i}.log"), failpoint=failpoint)
        self.conductors.append(c)
        return c

    def close(self):
        for c in self.conductors:
            if c is not self.conductor:
                c.stop()
        super().close()


LINE = re.compile(r"^(\S+Z)\s+\w+\s+(.*)$")


def operation_intervals(log_paths):
    """(cluster, start, end, process) for every operation in these logs
    ("operation begins"/"ends", one process per "magnum-conductor starting";
    one killed mid-operation ends at its last line)."""
    out = []
    for path in log_paths:
        proc, last, open_ops = None, None, {}
        with open(path) as f:
            lines = [ANSI.sub("", x) for x in f]
        for line in lines + ["9999-12-31T00:00:00Z  INFO magnum-conductor starting (end of log)"]:
            m = LINE.match(line.strip())
            if not m:
                continue
            ts, text = m.group(1), m.group(2)
            if "magnum-conductor starting" in text:
                for c, start in open_ops.items():
                    out.append((c, start, last, proc))
                open_ops, proc = {}, f"{path}@{ts}"
            cm = re.search(r"cluster=([0-9a-f-]{36})", text)
            # (A request's lines start with its span: `request{request_id=...}: `.)
            if cm and re.search(r"\boperation begins\b", text):
                open_ops[cm.group(1)] = ts
            elif cm and re.search(r"\boperation ends\b", text) and cm.group(1) in open_ops:
                out.append((cm.group(1), open_ops.pop(cm.group(1)), ts, proc))
            last = ts
    return out


def assert_never_two_at_once(log_paths):
    """No cluster was driven by two conductors at the same time."""
    by_cluster = {}
    for c, start, end, proc in operation_intervals(log_paths):
        by_cluster.setdefault(c, []).append((start, end, proc))
    n = 0
    for c, spans in by_cluster.items():
        spans.sort()
        for (s1, e1, p1), (s2, e2, p2) in zip(spans, spans[1:]):
            assert s2 >= e1, f"cluster {c}: {p1} drove it until {e1}, {p2} from {s2}"
        n += len(spans)
    return n


def leases(env):
    return {o["metadata"]["name"]: o["spec"].get("holderIdentity")
            for o in env.sim.items("coordination.k8s.io/v1", "leases", ns="magnum-system")}


def leaders(env):
    return [c for c in env.conductors if c.proc.poll() is None and c.metric("magnum_conductor_leader") == 1]


@pytest.fixture
def ha(tmp_path):
    e = HaEnv(tmp_path, 3)
    yield e
    e.close()


@pytest.fixture(params=[(2, "amqp"), (3, "lease")], ids=["2-amqp", "3-lease"])
def fleet(request, tmp_path):
    n, election = request.param
    e = HaEnv(tmp_path, n, extra=f"leader_election = {election}\n")
    e.election = election
    yield e
    e.close()


def test_conductors_share_the_work(fleet):
    ha = fleet
    n = int(os.environ.get("HA_CLUSTERS", "9"))
    before = ha.client("get", "00000000-0000-0000-0000-000000000000")["x509keypairs"]
    uuids = [ha.client("create", ha.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
             for _ in range(n)]
    for u in uuids:
        got, seen = ha.wait(u, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS", timeout=240)
        assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
        assert [x["status"] for x in got["nodegroups"]] == ["CREATE_COMPLETE"] * 2
        assert objects_of(ha, u) == ONE_CLUSTER, u
    assert len(leaders(ha)) == 1
    logs = [c.log.name for c in ha.conductors]
    assert assert_never_two_at_once(logs) >= n
    # RabbitMQ spread the casts (a cast requeued while its cluster was busy counts twice).
    handled = [c.metric("magnum_conductor_rpc_messages_total", method="cluster_create") for c in ha.conductors]
    assert sum(handled) >= n and all(h > 0 for h in handled), handled
    for u in uuids:
        ha.client("delete", u)
    for u in uuids:
        got, seen = ha.wait(u, lambda g: g["cluster"] is None, timeout=240)
        assert got["nodegroups"] == []
        assert objects_of(ha, u) == NOTHING
    assert ha.client("get", "00000000-0000-0000-0000-000000000000")["x509keypairs"] == before
    ops = assert_never_two_at_once(logs)
    print(f"{ops} operations over {len(logs)} conductors, never two on one cluster at once")
    # Only the leader's Lease is left (none with the broker election):
    # every cluster Lease was released.
    left = {"magnum-conductor-leader"} if ha.election == "lease" else set()
    deadline = time.time() + 10
    while set(leases(ha)) != left:
        assert time.time() < deadline, leases(ha)
        time.sleep(0.2)
    # The leader stopped as systemd stops it: a clean exit, no ERROR for a
    # hand-over it planned, and another conductor leads soon after.
    (leader,) = leaders(ha)
    log = leader.log.name
    start = os.path.getsize(log)
    stopped = time.time()
    assert leader.stop() == 0 and not leader.killed_after_sigterm
    with open(log) as f:
        f.seek(start)
        after = ANSI.sub("", f.read())
    assert " ERROR " not in after, after
    assert "magnum-conductor stopped" in after, after
    took = wait_for("no conductor took the leadership over", lambda: leaders(ha), 3 * LEASE_DURATION + 10) - stopped
    print(f"{ha.election}: leader stopped by SIGTERM, next leader after {took:.1f}s")
    # Nothing went wrong in this run: no conductor logged an ERROR (the
    # broker election's refusals to the conductors that do not lead are
    # expected, not errors).
    for c in ha.conductors:
        with open(c.log.name) as f:
            errors = [x for x in (ANSI.sub("", line) for line in f) if " ERROR " in x]
        assert not errors, (c.log.name, errors[:5])


def test_owner_killed_mid_create_another_finishes(ha):
    # Only the conductor with the failpoint consumes at first: it gets the cast.
    for c in ha.conductors[1:]:
        c.stop()
    ha.restart("create.mid_apply")
    ha.conductors = [ha.conductor]
    deadline = time.time() + 30
    while not leaders(ha):
        assert time.time() < deadline, "no leader"
        time.sleep(0.2)
    uuid = ha.client("create", ha.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    # It freezes in the middle of its applies (the cast is acknowledged).
    other = ha.add()
    died(ha)
    killed = time.time()
    assert leases(ha).get(f"magnum-cluster-{uuid}", "").endswith(ha.conductor.server_id)
    got, seen = ha.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS", timeout=120)
    took = time.time() - killed
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    assert objects_of(ha, uuid) == ONE_CLUSTER
    assert got["x509keypairs"] == 4, "no keypair leaked or duplicated"
    assert other.metric("magnum_conductor_leader") == 1
    assert other.metric("magnum_conductor_lease_takeovers_total") >= 1
    # Leadership after one lease_duration, the takeover after another, then
    # the create's remaining steps: well within four durations and a margin.
    print(f"create finished {took:.1f}s after its conductor was killed (lease_duration {LEASE_DURATION}s)")
    assert took < 4 * LEASE_DURATION + 15, took
    assert assert_never_two_at_once([ha.tmp / "conductor.log", other.log.name]) >= 2
    ha.client("delete", uuid)
    got, _ = ha.wait(uuid, lambda g: g["cluster"] is None)
    assert objects_of(ha, uuid) == NOTHING
    ha.conductor = other


def wait_for(what, cond, timeout):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.2)
    return time.time()


def test_leader_cut_off_from_the_management_cluster_hands_over(tmp_path):
    from test_lifecycle_db_outage import CuttableProxy
    e = HaEnv(tmp_path, 1)
    sim_port = int(e.sim.server.rsplit(":", 1)[1])
    proxy = CuttableProxy(("127.0.0.1", sim_port))
    proxied = tmp_path / "proxied.kubeconfig"
    proxied.write_text(open(e.sim.kubeconfig).read().replace(
        f"127.0.0.1:{sim_port}", f"127.0.0.1:{proxy.port}"))
    try:
        first = e.conductor
        wait_for("no leader", lambda: leaders(e) == [first], 30)
        uuid = e.client("create", e.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
        got, seen = e.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS", timeout=120)
        assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
        stack_id = got["cluster"]["stack_id"]
        # The one behind the proxy becomes leader when the first stops.
        cut = e.add(kubeconfig=str(proxied))
        first.stop()
        e.conductors.remove(first)
        wait_for("the proxied conductor never led", lambda: leaders(e) == [cut], 30)
        other = e.add()
        time.sleep(2 * LEASE_DURATION)
        assert leaders(e) == [cut], "a standby does not take a healthy leader's place"
        assert leases(e) == {}, "the broker election leaves no leader Lease"

        proxy.cut()
        cut_at = time.time()
        took = wait_for("the cut-off leader never handed over",
                        lambda: leaders(e) == [other], 20 * LEASE_DURATION) - cut_at
        assert cut.metric("magnum_conductor_leader_stepdowns_total", reason="apiserver") == 1
        # Stepping down waits `lease_duration` of failed probes (probes
        # start at the first watch error, at once when the proxy resets the
        # watches), then the next candidate's round (a third of it).
        print(f"handed over {took:.1f}s after the cut (lease_duration {LEASE_DURATION}s)")
        assert took >= LEASE_DURATION, "stepped down before lease_duration of failures"
        # The new leader writes statuses: CAPI's Ready condition flips
        # (controllers paused, so the simulator does not flip it back) and
        # the row follows.
        e.sim.post("/_sim/controllers/pause")
        try:
            conditions = e.sim.flip_ready(stack_id)
            e.wait(uuid, lambda g: g["cluster"]["health_status"] == "UNHEALTHY", timeout=30)
            e.sim.set_conditions(stack_id, conditions)
            e.wait(uuid, lambda g: g["cluster"]["health_status"] == "HEALTHY", timeout=30)
        finally:
            e.sim.post("/_sim/controllers/resume")

        proxy.restore()
        wait_for("the proxied conductor never saw the apiserver again",
                 lambda: "the management cluster answers again" in open(cut.log.name).read(),
                 20 * LEASE_DURATION)
        time.sleep(2 * LEASE_DURATION)
        assert leaders(e) == [other], "no flapping: the healthy leader keeps it"
        e.client("delete", uuid)
        e.wait(uuid, lambda g: g["cluster"] is None)
    finally:
        # The one left to stop last (asserted clean) is the newest.
        e.conductor = e.conductors[-1]
        e.close()
        proxy.close()


def test_no_rights_on_leases_is_a_clear_startup_error(tmp_path):
    """A conductor whose management-cluster credentials may not use Leases
    stops at startup (exit 2) saying what to grant, instead of requeueing
    every request for ever."""
    env = Env(tmp_path, "v1beta1")
    try:
        env.sim.post("/_sim/faults", {"method": "GET", "path": "/namespaces/magnum-system/leases",
                                      "client": "magnum-conductor", "action": {"kind": "error", "code": 403}})
        port = free_port()
        conf = str(tmp_path / "second.conf")
        open(conf, "w").write(re.sub(r"listen = 127\.0\.0\.1:\d+", f"listen = 127.0.0.1:{port}", open(env.conf).read()))
        c = Conductor(conf, port, str(tmp_path / "second.log"), wait=False)
        assert c.proc.wait(60) == 2
        out = open(tmp_path / "second.log").read()
        assert "cannot use Leases in the namespace magnum-system" in out and "ha_leases = false" in out, out[-2000:]
    finally:
        env.close()


def test_the_overlap_check_finds_an_overlap(tmp_path):
    """assert_never_two_at_once on made-up logs: two processes on one cluster
    at once is caught, one after the other is not; a process killed in the
    middle ends at its last line."""
    c = "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e"
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("2026-01-01T00:00:00.000001Z  INFO magnum-conductor starting\n"
                 f"2026-01-01T00:00:01.000000Z  INFO operation begins cluster={c} operation=\"create\"\n"
                 "2026-01-01T00:00:03.000000Z  INFO cluster objects applied\n")
    b.write_text("2026-01-01T00:00:00.000002Z  INFO magnum-conductor starting\n"
                 f"2026-01-01T00:00:04.000000Z  INFO request{{request_id=req-1}}: operation begins cluster={c} operation=\"create\"\n"
                 f"2026-01-01T00:00:05.000000Z  INFO operation ends cluster={c} operation=\"create\"\n")
    assert assert_never_two_at_once([a, b]) == 2
    b.write_text(b.read_text().replace("00:00:04", "00:00:02"))
    with pytest.raises(AssertionError, match="drove it until"):
        assert_never_two_at_once([a, b])
