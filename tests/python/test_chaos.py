"""Chaos: three conductors, a stream of operations from Magnum's own client, faults.

Seeded and reproducible in what it does (the timing is the machine's): the
seed (CHAOS_SEED, else random) is printed with the fault schedule. Each of
CHAOS_CLUSTERS clusters lives in its own thread through create, CHAOS_STEPS
random day-2 operations (resize, upgrade, node group create/delete), and
delete, each issued through Magnum's conductor RPC API (lifecycle_client.py)
and followed to the state Magnum users expect. Meanwhile a fault thread follows
its schedule: kill -9 of a random conductor (restarted 0-3 s later), every
broker connection of the vhost closed, the conductors' database cut through a
proxy for 2-5 s, apiserver 500s/429s on some verb, every watch dropped.

At the end: every operation reached its final state, no cluster had a
duplicate CAPI object, nothing is left (rows, keypairs, CAPI objects, Secrets,
cluster Leases), nothing is stuck *_IN_PROGRESS.

Short form (CI): 4 clusters x 3 steps (20 operations), >= 8 faults.
Long form (docs/operator-guide.md, "Several conductors"): scripts/chaos.sh, 25 clusters x 6
steps (200 operations) and up to 120 faults every 0.5-2.5 s while they run
(about 45% kills).
"""
import json
import os
import random
import threading
import time
import traceback

import pytest

from conftest import Conductor, rabbitmqctl
# settled: the cluster and its node groups in one read (an operation writes
# the node group's row first: the cluster alone still shows the last one's end).
from test_day2 import T131, scaled, settled
from test_ha import HaEnv, assert_never_two_at_once
from test_lifecycle_db_outage import CuttableProxy
from test_lifecycle_restart import UUID_LABEL

CLUSTERS = int(os.environ.get("CHAOS_CLUSTERS", "4"))
STEPS = int(os.environ.get("CHAOS_STEPS", "3"))
FAULTS = int(os.environ.get("CHAOS_FAULTS", "8"))
SEED = int(os.environ.get("CHAOS_SEED", str(random.randrange(1 << 31))))
# Seconds between faults: uniform in this range.
GAP = tuple(float(x) for x in os.environ.get("CHAOS_FAULT_GAP", "1,4").split(","))
WAIT = 240


class ChaosEnv(HaEnv):
    def __init__(self, tmp, proxy):
        self.proxy = proxy
        self.get_lock = threading.Lock()
        self.conductor_lock = threading.Lock()
        # The conductors reach the database through the proxy; clients directly.
        # 50 ms controller ticks: operations last long enough for faults to land in them.
        super().__init__(tmp, 3, tick_ms=50, conductor_db=proxy.url, extra="[database]\npool_timeout = 3\n")

    def get(self, cluster):
        with self.get_lock:
            return super().get(cluster)

    def kill_and_restart(self, i, pause):
        with self.conductor_lock:
            c = self.conductors[i]
            c.proc.kill()
            c.proc.wait(30)
            c.log.close()
        time.sleep(pause)
        with self.conductor_lock:
            conf = self.conf if i == 0 else str(self.tmp / f"conductor{i}.conf")
            port = int(c.metrics_url.rsplit(":", 1)[1])
            n = Conductor(conf, port, c.log.name)
            self.conductors[i] = n
            if i == 0:
                self.conductor = n


def objects(env, uuid):
    sel = f"{UUID_LABEL}={uuid}"
    sim, capi = env.sim, env.sim.capi
    return {
        "Cluster": len(sim.items(capi, "clusters", sel)),
        "KubeadmControlPlane": len(sim.items("controlplane.cluster.x-k8s.io/v1beta1", "kubeadmcontrolplanes", sel)),
        "MachineDeployment": len(sim.items(capi, "machinedeployments", sel)),
        "Machine": len(sim.items(capi, "machines", sel)),
        "OpenStackCluster": len(sim.items("infrastructure.cluster.x-k8s.io/v1beta1", "openstackclusters", sel)),
        "HelmChartProxy": len(sim.items("addons.cluster.x-k8s.io/v1alpha1", "helmchartproxies", sel)),
        "Secret": len(sim.items("v1", "secrets", sel)),
    }


def ng(g, name):
    return next((n for n in g["nodegroups"] if n["name"] == name), None)


class Life:
    """One cluster's life, in its own thread."""

    def __init__(self, env, rng, idx, t131, log):
        self.env, self.rng, self.idx, self.t131, self.log = env, rng, idx, t131, log
        self.ops = 0

    def wait(self, pred, what):
        got, seen = self.env.wait(self.uuid, pred, timeout=WAIT)
        return got, seen

    def expect_complete(self, got, seen, what):
        assert got["cluster"]["status"].endswith("_COMPLETE"), f"{what}: {seen}"
        objs = objects(self.env, self.uuid)
        groups = [n for n in got["nodegroups"] if n["role"] != "master"]
        assert (objs["Cluster"], objs["KubeadmControlPlane"], objs["OpenStackCluster"]) == (1, 1, 1), (what, objs)
        assert objs["MachineDeployment"] == len(groups), (what, objs, [n["name"] for n in groups])
        for n in got["nodegroups"]:
            assert n["status"].endswith("_COMPLETE"), (what, n)
            assert len(n["node_addresses"]) == n["node_count"], (what, n)

    def run(self):
        env, rng = self.env, self.rng
        workers = rng.randint(1, 2)
        self.uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": workers}))["uuid"]
        self.log(f"cluster {self.idx} {self.uuid}: create ({workers} workers)")
        got, seen = self.wait(settled, "create")
        self.expect_complete(got, seen, "create")
        self.ops += 1
        upgraded, extra = False, []
        for step in range(STEPS):
            choices = ["resize", "ng-create"] + (["upgrade"] if not upgraded else []) + (["ng-delete"] if extra else [])
            op = rng.choice(choices)
            self.log(f"cluster {self.idx}: {op}")
            if op == "resize":
                cur = ng(got, "default-worker")["node_count"]
                n = rng.choice([c for c in (1, 2, 3) if c != cur])
                env.client("resize", self.uuid, str(n), "[]")
                got, seen = self.wait(lambda g: scaled(g, "default-worker", n), op)
            elif op == "upgrade":
                self.upgrade()
                got, seen = self.wait(lambda g: settled(g) and g["cluster"]["cluster_template_id"] == self.t131
                                      and g["cluster"]["coe_version"] == "v1.31.2", op)
                upgraded = True
            elif op == "ng-create":
                name = f"extra-{step}"
                env.client("ng-create", self.uuid, json.dumps({"name": name, "node_count": 1}))
                got, seen = self.wait(lambda g: settled(g) and ng(g, name) is not None
                                      and ng(g, name)["status"] == "CREATE_COMPLETE", op)
                extra.append(name)
            else:
                name = extra.pop(rng.randrange(len(extra)))
                env.client("ng-delete", self.uuid, name)
                got, seen = self.wait(lambda g: settled(g) and ng(g, name) is None, op)
            self.expect_complete(got, seen, op)
            self.ops += 1
        env.client("delete", self.uuid)
        self.log(f"cluster {self.idx}: delete")
        got, seen = self.env.wait(self.uuid, lambda g: g["cluster"] is None, timeout=WAIT)
        assert got["nodegroups"] == [], seen
        left = objects(env, self.uuid)
        assert all(v == 0 for v in left.values()), left
        self.ops += 1

    def upgrade(self):
        """A call: a conductor killed while handling it leaves the caller
        without an answer (MessagingTimeout) though the call is redelivered
        and done; a busy cluster answers Conflict. As a user would: look,
        then try again."""
        for attempt in range(4):
            try:
                r = self.env.client("upgrade", self.uuid, self.t131, "1")
            except AssertionError as e:
                r = {"error": f"client failed: {e}"}
            if "error" not in r:
                return
            self.log(f"cluster {self.idx}: upgrade answered {r.get('error')}; checking")
            time.sleep(3)
            if self.env.get(self.uuid)["cluster"]["cluster_template_id"] == self.t131:
                return
        raise AssertionError(f"upgrade never accepted: {r}")


def schedule(rng, n):
    kinds = ["kill"] * 7 + ["broker"] * 2 + ["db"] * 2 + ["api"] * 3 + ["watches"] * 2
    out = []
    for _ in range(n):
        k = rng.choice(kinds)
        arg = {"kill": lambda: {"conductor": rng.randrange(3), "restart_after": round(rng.uniform(0, 3), 1)},
               "broker": lambda: {},
               "db": lambda: {"seconds": round(rng.uniform(2, 5), 1)},
               "api": lambda: {"method": rng.choice(["PATCH", "POST", "PUT", "GET", "DELETE"]),
                               "times": rng.randint(1, 4), "code": rng.choice([500, 429])},
               "watches": lambda: {}}[k]()
        out.append((round(rng.uniform(*GAP), 1), k, arg))
    return out


@pytest.fixture
def chaos(tmp_path):
    proxy = CuttableProxy()
    e = ChaosEnv(tmp_path, proxy)
    yield e
    proxy.restore()
    e.close()
    proxy.close()


def test_chaos(chaos):
    env = chaos
    rng = random.Random(SEED)
    plan = schedule(rng, FAULTS)
    print(f"\nchaos seed {SEED}: {CLUSTERS} clusters x {STEPS} steps, {FAULTS} faults")
    for delay, kind, arg in plan:
        print(f"  after {delay}s: {kind} {arg}")
    t131 = env.client("template", json.dumps(T131))["uuid"]
    lock = threading.Lock()
    events = []

    def log(msg):
        with lock:
            events.append(f"{time.strftime('%H:%M:%S')} {msg}")

    lives = [Life(env, random.Random(rng.randrange(1 << 31)), i, t131, log) for i in range(CLUSTERS)]
    errors = []

    def live(life):
        try:
            life.run()
        except BaseException:
            errors.append((life.idx, traceback.format_exc()))

    threads = [threading.Thread(target=live, args=(life,), daemon=True) for life in lives]
    for t in threads:
        t.start()
        time.sleep(1)
    done_faults = []
    for delay, kind, arg in plan:
        if not any(t.is_alive() for t in threads):
            break
        time.sleep(delay)
        log(f"FAULT {kind} {arg}")
        if kind == "kill":
            env.kill_and_restart(arg["conductor"], arg["restart_after"])
        elif kind == "broker":
            rabbitmqctl("close_all_connections", "--vhost", env.vhost, "chaos")
        elif kind == "db":
            env.proxy.cut()
            time.sleep(arg["seconds"])
            env.proxy.restore()
        elif kind == "api":
            # The conductors' requests only: the test's own reads pass.
            env.sim.post("/_sim/faults", {"method": arg["method"], "times": arg["times"],
                                          "client": "magnum-conductor",
                                          "action": {"kind": "error", "code": arg["code"]}})
        else:
            env.sim.post("/_sim/watches/drop")
        done_faults.append(kind)
    for t in threads:
        t.join(timeout=len(lives) * (STEPS + 2) * WAIT)
    print("\n".join(events))
    assert not errors, "\n".join(f"cluster {i}:\n{tb}" for i, tb in errors)
    ops = sum(life.ops for life in lives)
    print(f"chaos seed {SEED}: {ops} operations completed, faults {len(done_faults)} "
          f"({done_faults.count('kill')} kills)")
    assert ops == CLUSTERS * (STEPS + 2)
    assert len(done_faults) >= (FAULTS + 1) // 2, "the operations ended before half the faults: no chaos to speak of"
    # Nothing left: rows, keypairs, cluster Leases.
    assert env.client("get", "00000000-0000-0000-0000-000000000000")["x509keypairs"] == 0
    deadline = time.time() + 20
    while True:
        names = {o["metadata"]["name"] for o in env.sim.items("coordination.k8s.io/v1", "leases", ns="magnum-system")}
        if names <= {"magnum-conductor-leader"}:
            break
        assert time.time() < deadline, names
        time.sleep(0.5)
    assert env.sim.items(env.sim.capi, "clusters", UUID_LABEL) == []
    logs = [env.tmp / "conductor.log"] + [env.tmp / f"conductor{i}.log" for i in (1, 2)]
    n = assert_never_two_at_once(logs)
    print(f"{n} operation runs (handlers and resumes), never two conductors on one cluster at once")
    alive = [c for c in env.conductors if c.proc.poll() is None]
    assert len(alive) == 3
