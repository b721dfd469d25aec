"""`[conductor] legacy_topic`: other drivers' clusters handled by a real
Python magnum-conductor 23.0.0, through this conductor.

magnum-api sends everything to `magnum-conductor`, which this conductor
consumes. With `legacy_topic` set, a request about a cluster of another
driver is republished unchanged to that topic, where Magnum's own conductor
(`magnum-conductor` from the Magnum 23.0.0 venv, `[conductor] topic` =
the legacy topic) runs with a stand-in driver registered under
magnum-capi-helm's entry point name (tests/python/foreign_driver). Its
replies go straight to the caller: results and failures reach Magnum's
client unchanged. A forward no queue takes is never dropped: a cast waits
(back in our queue) until the Python conductor is there, then arrives
once; a call is answered with the reason. A conductor killed -9 just
before it republishes a cast, or just after the broker confirmed the copy
(before its own acknowledgement), neither loses nor doubles it; nor does a
RabbitMQ restart while forwards wait between the confirm and the
acknowledgement (durable queues).
"""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import private_broker, rabbitmqctl
from test_foreign import HELM, SKIPS, foreign_cluster
from test_lifecycle import HERE, Env
from test_lifecycle_restart import died

LEGACY = "magnum-conductor-legacy"
FORWARDED = "magnum_conductor_rpc_forwarded_total"


class PythonConductor:
    """Magnum 23.0.0's own conductor on the legacy topic."""

    def __init__(self, env):
        self.log_path = env.tmp / "python-conductor.log"
        self.driver_log = str(env.tmp / "foreign-driver.jsonl")
        conf = open(env.client_conf).read()
        assert "[conductor]\n" in conf
        self.conf = str(env.tmp / "python-conductor.conf")
        open(self.conf, "w").write(conf.replace("[conductor]\n", f"[conductor]\ntopic = {LEGACY}\n", 1))
        self.proc = None

    def start(self, vhost):
        venv_bin = os.path.dirname(sys.executable)
        self.proc = subprocess.Popen(
            [os.path.join(venv_bin, "magnum-conductor"), "--config-file", self.conf],
            stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "foreign_driver"), MC_FOREIGN_LOG=self.driver_log))
        deadline = time.time() + 90
        while LEGACY not in rabbitmqctl("list_queues", "-p", vhost, "name").split():
            assert self.proc.poll() is None, f"magnum-conductor exited; see {self.log_path}"
            assert time.time() < deadline, f"magnum-conductor did not consume {LEGACY}; see {self.log_path}"
            time.sleep(0.5)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def ops(self):
        if not os.path.exists(self.driver_log):
            return []
        return [json.loads(line) for line in open(self.driver_log)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("forward"), "v1beta1")
    text = open(e.conf).read()
    open(e.conf, "w").write(text.replace("[conductor]\n", f"[conductor]\nlegacy_topic = {LEGACY}\n", 1))
    e.restart()
    e.foreign = {}
    e.python = PythonConductor(e)
    yield e
    e.python.stop()
    e.close()


def wait_for(what, check, timeout=60):
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_nothing_listens_yet_a_call_is_answered_and_a_cast_waits(env):
    helm = foreign_cluster(env, HELM)
    got = env.client("call", "cluster_update", helm)
    assert got["error"] == "MagnumException", got
    assert f"no queue takes topic {LEGACY}" in got["message"], got
    # A cast goes back to our queue until someone takes the topic.
    env.client("resize", helm, "3", "[]")
    wait_for("a failed forward", lambda: env.conductor.metric(FORWARDED, outcome="failed") >= 2)
    env.python.start(env.vhost)
    wait_for("the resize at the Python conductor",
             lambda: [o["op"] for o in env.python.ops()] == ["resize_cluster"])
    time.sleep(7)  # past our requeue delay: it is not sent twice
    assert [o["op"] for o in env.python.ops()] == ["resize_cluster"]
    assert env.client("get", helm)["cluster"]["status"] == "UPDATE_IN_PROGRESS"  # Magnum's handler wrote it


def test_calls_and_casts_reach_the_python_conductor_and_its_replies_come_back(env):
    helm = env.foreign[HELM]["uuid"]
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}))
    seen = len(env.python.ops())
    # A call its driver accepts: Magnum's result (the cluster object).
    assert env.client("call", "cluster_resize", helm) == {"ok": True}
    # A call its driver refuses: that failure, as its conductor raised it.
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}))
    got = env.client("call", "cluster_upgrade", helm)
    assert got == {"error": "NotSupported", "remote": "NotSupported_Remote",
                   "message": "Upgrading in the stand-in driver is not supported.", "code": 400}, got
    # A call Magnum's conductor refuses before its driver.
    env.client("set", helm, json.dumps({"status": "CREATE_IN_PROGRESS"}))
    got = env.client("call", "cluster_update", helm)
    assert got["error"] == "NotSupported" and 'when status is "CREATE_IN_PROGRESS"' in got["message"], got
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}))
    # Certificates of their clusters are theirs too.
    assert env.client("call", "get_ca_certificate", helm) == {"ok": True}
    # The other calls, each to its driver (the statuses reset between them:
    # Magnum's handler marks the cluster or node group in progress).
    for method, op in (("cluster_update", "update_cluster"), ("nodegroup_update", "update_nodegroup"),
                       ("credential_rotate", "rotate_credential"), ("nodegroup_delete", "delete_nodegroup")):
        env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}), "default-worker",
                   json.dumps({"status": "UPDATE_COMPLETE"}))
        assert env.client("call", method, helm) == {"ok": True}, method
        assert env.python.ops()[-1]["op"] == op, (method, env.python.ops()[-1])
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}), "default-worker",
               json.dumps({"status": "UPDATE_COMPLETE"}))
    # A create on their template: their conductor inserts and creates it.
    assert env.client("call", "cluster_create", helm) == {"ok": True}
    # Casts, each once (one at a time: two casts in flight may be handled
    # in either order, by Magnum's conductor as by ours).
    env.client("ng-create", helm, json.dumps({"name": "extra"}))
    wait_for("the nodegroup create", lambda: env.python.ops()[-1]["op"] == "create_nodegroup")
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}), "extra", json.dumps({"status": "CREATE_COMPLETE"}))
    env.client("ng-update", helm, "extra", json.dumps({"max_node_count": 4}))
    wait_for("the nodegroup update", lambda: env.python.ops()[-1]["op"] == "update_nodegroup")
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}), "extra", json.dumps({"status": "UPDATE_COMPLETE"}))
    env.client("ng-delete", helm, "extra")
    wait_for("the nodegroup delete", lambda: env.python.ops()[-1]["op"] == "delete_nodegroup")
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}))
    env.client("update", helm, json.dumps({"node_count": 9}))
    wait_for("the update", lambda: env.python.ops()[-1]["op"] == "update_cluster")
    env.client("set", helm, json.dumps({"status": "UPDATE_COMPLETE"}))
    env.client("delete", helm)
    wait_for("the delete", lambda: env.python.ops()[-1]["op"] == "delete_cluster")
    ops = [o["op"] for o in env.python.ops()[seen:]]
    assert ops == ["resize_cluster", "upgrade_cluster", "update_cluster", "update_nodegroup", "rotate_credential",
                   "delete_nodegroup", "create_cluster", "create_nodegroup", "update_nodegroup", "delete_nodegroup",
                   "update_cluster", "delete_cluster"], ops
    assert all(o["cluster"] == helm for o in env.python.ops()[seen:] if o["op"] != "create_cluster")
    for method in ("cluster_resize", "cluster_upgrade", "cluster_update", "get_ca_certificate", "cluster_create",
                   "nodegroup_create", "nodegroup_update", "nodegroup_delete", "credential_rotate",
                   "cluster_delete"):
        assert env.conductor.metric(FORWARDED, method=method, driver=HELM, outcome="forwarded") >= 1, method
    # Nothing was refused here, and nothing of theirs was touched by us.
    assert env.conductor.metric(SKIPS) == 0


@pytest.mark.parametrize("point", ["forward.before_publish", "forward.after_confirm"])
def test_a_kill_mid_forward_loses_and_doubles_nothing(env, point):
    """Killed before the copy is published: the broker hands the cast to
    the next conductor, which forwards it. Killed after the broker
    confirmed the copy: the Python conductor has it, and the original comes
    back and is forwarded again with the same `_unique_id`, which
    oslo.messaging's listener drops as a repeat."""
    if env.python.proc is None:
        env.python.start(env.vhost)
    helm = foreign_cluster(env, HELM)
    name = "ng-" + point.split(".")[1].replace("_", "-")
    env.restart(failpoint=point)
    env.client("ng-create", helm, json.dumps({"name": name}))
    died(env)
    env.restart()
    made = lambda: [o for o in env.python.ops() if o.get("nodegroup") == name]  # noqa: E731
    wait_for(f"{name} at the Python conductor", lambda: made())
    time.sleep(3)  # the redelivered original, forwarded again, is dropped there
    assert len(made()) == 1, made()
    assert env.conductor.metric(FORWARDED, method="nodegroup_create", outcome="forwarded") == 1


@pytest.fixture
def durable(tmp_path):
    """Durable queues and persistent messages everywhere (magnum-api's
    client, this conductor, the Python conductor): what survives a broker
    restart at all. On a RabbitMQ of the test's own (it stops it)."""
    with private_broker(tmp_path):
        e = Env(tmp_path, "v1beta1", extra="\n[oslo_messaging_rabbit]\namqp_durable_queues = true\n")
        try:
            text = open(e.conf).read()
            open(e.conf, "w").write(text.replace("[conductor]\n", f"[conductor]\nlegacy_topic = {LEGACY}\n", 1))
            e.restart()
            e.foreign = {}
            e.python = PythonConductor(e)
            e.python.start(e.vhost)
            yield e
        finally:
            if getattr(e, "python", None):
                e.python.stop()
            e.close()


def test_a_broker_restart_mid_forwarding_loses_and_doubles_nothing(durable):
    """Casts for another driver's cluster are being forwarded, each one
    held 4 s between the broker's confirm of its copy and our
    acknowledgement of the original (longer than the casts take to
    arrive, so one is in that window), when RabbitMQ stops and starts: the
    original whose acknowledgement was lost comes back (durable queue) and
    is recognised by its `_unique_id` (here, or by the Python conductor's
    listener had it been forwarded again); the Python conductor creates
    every node group exactly once."""
    env = durable
    helm = foreign_cluster(env, HELM)
    env.restart(failpoint="forward.after_confirm:sleep=4000")
    names = [f"br-{i}" for i in range(6)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(lambda n: env.client("ng-create", helm, json.dumps({"name": n})), names))
    forwarded = lambda: env.conductor.metric(FORWARDED, method="nodegroup_create", outcome="forwarded")  # noqa: E731
    assert forwarded() < len(names) - 1, "the forwards must still be running"
    rabbitmqctl("stop_app")
    try:
        time.sleep(3)
    finally:
        rabbitmqctl("start_app")
    made = lambda: [o["nodegroup"] for o in env.python.ops() if o.get("nodegroup") in names]  # noqa: E731
    wait_for("every node group at the Python conductor", lambda: set(made()) == set(names), timeout=180)
    time.sleep(8)  # a redelivered original would be handled by now
    assert sorted(made()) == sorted(names), made()
    assert env.conductor.metric("magnum_conductor_amqp_reconnects_total") >= 1
    # The restart caught a forward between confirm and acknowledgement:
    # its original came back.
    redelivered = env.conductor.metric("magnum_conductor_rpc_redeliveries_total")
    print(f"forwarded {forwarded():.0f} times for {len(names)} casts, {redelivered:.0f} redelivered")
    assert redelivered >= 1, redelivered
