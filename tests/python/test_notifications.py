"""CADF notifications, as Magnum's conductor sends them, next to Magnum's own.

With `[oslo_messaging_notifications] driver = messagingv2`, every operation
tells listeners (Ceilometer, billing, audit) that it started and how it
ended: `magnum.cluster.{create,update,delete}`, outcome pending when the
handler accepts the request, success or failure when the status sync sees
the end; INFO on `notifications.info`, failures ERROR on
`notifications.error` (Magnum's `notify_about_cluster_operation` and
`ClusterUpdateJob`). For the same cluster, Magnum 23.0.0's own function
sends a message through oslo.messaging on the same vhost, and the two are
compared: the envelope, the message keys, the CADF event and the cluster
data attached, key for key and value for value (ids and times excepted).
The request context travels as `_context_*` keys, the same keys and values
as Magnum's (the user's for pending, the status sync's admin context for
the end), and like Magnum's it carries no Keystone token.
Without a driver (Magnum's default), nothing is published and no
notification queue is declared (test_lifecycle checks it).
"""
import json
import time

import kombu
import pytest

from conftest import broker_url
from test_lifecycle import Env, PROJECT

CONF = "\n[oslo_messaging_notifications]\ndriver = messagingv2\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("notify"), "v1beta1", extra=CONF)
    yield e
    e.close()


def drain(env, queue, settle=1.0):
    """Every message on `queue` until it stays empty for `settle` seconds."""
    out = []
    with kombu.Connection(broker_url(env.vhost, "amqp")) as conn:
        ch = conn.default_channel
        quiet = time.time() + settle
        while time.time() < quiet:
            try:
                m = ch.basic_get(queue=queue, no_ack=True)
            except Exception as e:  # the queue does not exist (yet)
                assert "NOT_FOUND" in str(e) or "404" in str(e), e
                return out
            if m is None:
                time.sleep(0.1)
                continue
            outer = json.loads(m.body)
            assert outer["oslo.version"] == "2.0", outer
            out.append(json.loads(outer["oslo.message"]))
            quiet = time.time() + settle
    return out


def summary(msgs):
    return [(m["event_type"], m["priority"], m["payload"]["outcome"]) for m in msgs]


def wait_for(env, queue, n, timeout=30):
    got = []
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        got += drain(env, queue, settle=0.3)
    return got


def same_shape(ours, theirs, path="", skip=()):
    """Same keys all the way down; equal leaves except `skip` keys."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), path
        assert set(ours) == set(theirs), (path, set(ours) ^ set(theirs))
        for k in theirs:
            if k not in skip:
                same_shape(ours[k], theirs[k], f"{path}/{k}", skip)
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), (path, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            same_shape(a, b, f"{path}/{i}", skip)
    else:
        assert ours == theirs, (path, ours, theirs)


def test_operations_notify_as_magnum(env):
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    ours = wait_for(env, "notifications.info", 2)
    assert summary(ours) == [("magnum.cluster.create", "INFO", "pending"),
                             ("magnum.cluster.create", "INFO", "success")]
    assert drain(env, "notifications.error", settle=0.2) == []
    pending, success = ours
    assert success["publisher_id"] == "container-infra.test-host"
    assert "gAAAAABtoken" not in json.dumps(ours)
    assert pending["_context_project_id"] == PROJECT and pending["_context_auth_token"] is None

    # Magnum's own messages for the same cluster, as it stands now: pending
    # with the requester's context (the handler's), success with the admin
    # context of the status sync (ClusterUpdateJob).
    env.client("python-notify", uuid, "create", "pending")
    env.client("python-notify", uuid, "create", "success", "admin")
    theirs = wait_for(env, "notifications.info", 2)
    assert summary(theirs) == summary(ours)
    for mine, magnums in zip(ours, theirs):
        assert set(mine) == set(magnums), set(mine) ^ set(magnums)
        for k in magnums:
            if k.startswith("_context_") and k != "_context_request_id":
                assert mine[k] == magnums[k], (k, mine[k], magnums[k])
        # The pending message shows the cluster as it was then; Magnum's
        # is built now: there only the cluster fields' names must match.
        now = mine is success
        same_shape(mine["payload"], magnums["payload"], skip={"id", "eventTime"} | (set() if now else {"content"}))
        content = [m["payload"]["target"]["attachments"][0]["content"] for m in (mine, magnums)]
        assert set(content[0]) == set(content[1])
    data = success["payload"]["target"]["attachments"][0]["content"]
    assert success["payload"]["target"]["id"] == uuid
    assert data["status"] == "CREATE_COMPLETE" and data["node_count"] == 1 and len(data["node_addresses"]) == 1

    # Update: pending when accepted, success when the workers are there.
    env.client("update", uuid, json.dumps({"node_count": 2}))
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] == "UPDATE_COMPLETE")
    assert summary(wait_for(env, "notifications.info", 2)) == [("magnum.cluster.update", "INFO", "pending"),
                                                              ("magnum.cluster.update", "INFO", "success")]

    # Delete: pending, then success once the row is gone.
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None)
    deleted = wait_for(env, "notifications.info", 2)
    assert summary(deleted) == [("magnum.cluster.delete", "INFO", "pending"),
                                ("magnum.cluster.delete", "INFO", "success")]
    assert drain(env, "notifications.error", settle=0.2) == []


def test_failure_is_an_error_notification(env):
    """CAPO reports a terminal failure (the simulator fails every
    OpenStackCluster of the project's namespace): the create ends with an
    ERROR `failure` notification, the delete with INFO as usual."""
    project = "f00df00df00d4f00bf00df00df00df00"
    env.sim.create_namespace("magnum-" + project, {"capi-sim/fail-reason": "Quota exceeded for instances: 0 left"})
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}),
                      project=project)["uuid"]
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_FAILED", seen
    assert summary(wait_for(env, "notifications.info", 1)) == [("magnum.cluster.create", "INFO", "pending")]
    [failure] = wait_for(env, "notifications.error", 1)
    assert summary([failure]) == [("magnum.cluster.create", "ERROR", "failure")]
    data = failure["payload"]["target"]["attachments"][0]["content"]
    assert data["status"] == "CREATE_FAILED" and "Quota exceeded" in data["status_reason"], data
    env.client("delete", uuid, project=project)
    env.wait(uuid, lambda g: g["cluster"] is None)
    assert summary(wait_for(env, "notifications.info", 2)) == [("magnum.cluster.delete", "INFO", "pending"),
                                                              ("magnum.cluster.delete", "INFO", "success")]


def test_a_notification_queue_declared_otherwise_never_stops_replies(env):
    """Another service (Ceilometer, say) declared `notifications.info`
    durable where this deployment's queues are not: the broker refuses our
    declaration (406 PRECONDITION_FAILED) and closes the channel it came on.
    Notifications have a channel of their own, so calls are still answered
    (their replies go out on the RPC server's channel), and the notification
    waits, retried, until the queue is put right: then it arrives."""
    from conftest import rabbitmqctl

    def wait_until(pred, timeout, what):
        deadline = time.time() + timeout
        while not pred():
            assert time.time() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    queue = "notifications.info"
    url = broker_url(env.vhost, "amqp")
    with kombu.Connection(url) as conn:
        conn.default_channel.queue_delete(queue)
        conn.default_channel.queue_declare(queue, durable=True, auto_delete=False)
    # The conductor's connection ends (new channels, nothing declared yet on
    # them); it reconnects.
    c = env.conductor
    reconnects = c.metric("magnum_conductor_amqp_reconnects_total")
    # Only this test's vhost: list_connections has no vhost filter (its -p is
    # ignored), and other tests' conductors share the broker.
    for line in rabbitmqctl("list_connections", "pid", "vhost", "client_properties").splitlines():
        fields = line.split("\t")
        if len(fields) > 2 and fields[1] == env.vhost and "magnum-conductor:" in fields[2]:
            rabbitmqctl("close_connection", fields[0], "test: new channels")
    wait_until(lambda: c.metric("magnum_conductor_amqp_reconnects_total") > reconnects, 30, "a reconnect")
    wait_until(lambda: c.metric("magnum_conductor_amqp_connected") == 1, 30, "the conductor to consume")
    retried = c.metric("magnum_conductor_notifications_total", outcome="retried")
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    # The refusal happened (the create's notification met it) ...
    def refused():
        with open(c.log.name) as f:
            return any("notification not published yet" in ln and "PRECONDITION_FAILED" in ln for ln in f)
    wait_until(refused, 30, "the notifier to meet the refusal")
    # ... and a call after it is still answered (`cluster_update` as a call:
    # its reply must come back; Magnum refuses to update a cluster still
    # being created).
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    got = env.client("call", "cluster_update", uuid)
    assert got == {"ok": True}, got
    assert c.metric("magnum_conductor_notifications_total", outcome="retried") > retried
    # Put right, the queue gets what waited: nothing was lost.
    with kombu.Connection(url) as conn:
        conn.default_channel.queue_delete(queue)
    msgs = wait_for(env, queue, 4, timeout=60)
    assert summary(msgs) == [("magnum.cluster.create", "INFO", "pending"),
                             ("magnum.cluster.create", "INFO", "success"),
                             ("magnum.cluster.update", "INFO", "pending"),
                             ("magnum.cluster.update", "INFO", "success")], summary(msgs)
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None)
