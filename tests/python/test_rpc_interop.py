"""Magnum 23.0.0's own client code (magnum.conductor.api, oslo.messaging)
against our conductor over the real RabbitMQ."""
import os
import signal
import time
import uuid

import pytest

from conftest import (broker_url, context, magnum_client, magnum_client_close, new_vhost, rabbitmqctl, start_conductor,
                      write_conf)


@pytest.fixture(scope="module")
def env(session_tmp):
    vhost = new_vhost("interop")
    conductor = start_conductor(session_tmp, vhost, extra_default="rpc_ping_enabled = true")
    client_conf = os.path.join(session_tmp, "client.conf")
    write_conf(client_conf, vhost)
    magnum_client(client_conf)
    conductor.vhost = vhost
    yield conductor
    magnum_client_close()
    assert conductor.stop() == 0, "conductor must exit cleanly on SIGTERM"
    rabbitmqctl("delete_vhost", vhost)


def cluster_obj(ctx, **kw):
    from magnum import objects

    fields = dict(uuid=str(uuid.uuid4()), name="k8s-demo", project_id=ctx.project_id, user_id=ctx.user_id,
                  cluster_template_id=str(uuid.uuid4()), keypair="mykey", labels={"kube_tag": "v1.30.4"},
                  master_flavor_id="m1.medium", flavor_id="m1.small", create_timeout=60)
    fields.update(kw)
    return objects.Cluster(ctx, **fields)


def test_ping_conductor_returns_true(env):
    from magnum.conductor import api

    listener = api.ListenerAPI(context=context(), topic="magnum-conductor", server=env.server_id, timeout=10)
    assert listener.ping_conductor() is True


def test_oslo_ping_when_enabled(env):
    from magnum.common import rpc_service

    client = rpc_service.API(context=context(), topic="magnum-conductor")
    assert client._call("oslo_rpc_server_ping") == "pong"


def test_not_implemented_call_raises_not_supported(env):
    from magnum.common import exception
    from magnum.conductor import api

    ctx = context()
    with pytest.raises(exception.NotSupported) as info:
        api.API(context=ctx).credential_rotate(cluster_obj(ctx))
    assert info.value.code == 400
    assert "credential_rotate" in str(info.value)
    with pytest.raises(exception.NotSupported):
        api.API(context=ctx).cluster_delete(str(uuid.uuid4()))


def test_unknown_method_is_remote_error_no_such_method(env):
    import oslo_messaging
    from magnum.common import rpc_service

    with pytest.raises(oslo_messaging.RemoteError) as info:
        rpc_service.API(context=context(), topic="magnum-conductor")._call("no_such_method", foo=1)
    assert info.value.exc_type == "NoSuchMethod"
    assert "Endpoint does not support RPC method no_such_method" in info.value.value


def test_wrong_version_is_remote_error_unsupported_version(env):
    import oslo_messaging
    from magnum.common import rpc

    target = oslo_messaging.Target(topic="magnum-conductor", version="1.1")
    client = rpc.get_client(target, serializer=None, timeout=10)
    with pytest.raises(oslo_messaging.RemoteError) as info:
        client.call(context(), "ping_conductor")
    assert info.value.exc_type == "UnsupportedVersion"
    assert "Attempted method: ping_conductor" in info.value.value


def test_federation_call_raises_not_implemented(env):
    from magnum.conductor import api

    with pytest.raises(NotImplementedError) as info:
        api.API(context=context()).federation_delete(str(uuid.uuid4()))
    assert "This feature is not yet implemented." in str(info.value)


def test_bad_argument_type_is_invalid_parameter_value(env):
    from magnum.common import exception, rpc_service

    ctx = context()
    with pytest.raises(exception.InvalidParameterValue) as info:
        rpc_service.API(context=ctx, topic="magnum-conductor")._call("cluster_delete", uuid=12)
    assert info.value.code == 400


def test_missing_argument_is_type_error(env):
    from magnum.common import rpc_service

    with pytest.raises(TypeError) as info:
        rpc_service.API(context=context(), topic="magnum-conductor")._call("cluster_delete")
    assert "missing 1 required positional argument: 'uuid'" in str(info.value)


def test_casts_arrive(env):
    from magnum.conductor import api

    ctx = context()
    before = env.metric("magnum_conductor_rpc_messages_total", method="cluster_create", kind="cast")
    before_del = env.metric("magnum_conductor_rpc_messages_total", method="cluster_delete", kind="cast")
    a = api.API(context=ctx)
    a.cluster_create_async(cluster_obj(ctx), master_count=1, node_count=2, create_timeout=60)
    a.cluster_delete_async(str(uuid.uuid4()))
    deadline = time.time() + 10
    while time.time() < deadline:
        if (env.metric("magnum_conductor_rpc_messages_total", method="cluster_create", kind="cast") == before + 1
                and env.metric("magnum_conductor_rpc_messages_total", method="cluster_delete", kind="cast") == before_del + 1):
            break
        time.sleep(0.1)
    assert env.metric("magnum_conductor_rpc_messages_total", method="cluster_create", kind="cast") == before + 1
    assert env.metric("magnum_conductor_rpc_messages_total", method="cluster_delete", kind="cast") == before_del + 1


def test_object_arguments_round_trip(env):
    """sign_certificate: a Certificate object and a Cluster with a nested template."""
    from magnum.common import exception
    from magnum import objects
    from magnum.conductor import api

    ctx = context()
    cluster = cluster_obj(ctx)
    cluster.cluster_template = objects.ClusterTemplate(ctx, id=3, uuid=str(uuid.uuid4()), coe="kubernetes",
                                                       labels={"a": True})
    cert = objects.Certificate.from_object_cluster(cluster)
    cert.csr = "-----BEGIN CERTIFICATE REQUEST-----\n...\n-----END CERTIFICATE REQUEST-----"
    # Decoded fine; this cluster has no CA yet, exactly as Python answers.
    with pytest.raises(exception.X509KeyPairNotFound) as info:
        api.API(context=ctx).sign_certificate(cluster, cert)
    assert info.value.code == 404 and "A key pair None could not be found." in str(info.value)


def test_call_monitor_heartbeats_keep_a_slow_call_alive(env, tmp_path):
    """oslo's call_monitor_timeout: the client sends `_timeout` and gives up after
    that long without news. A second conductor on the same vhost answers ping
    after 5 s (a sleep failpoint); its heartbeats every 1 s keep Magnum's client
    waiting with a 2 s monitor timeout, and the call returns."""
    import oslo_messaging
    from magnum.common import rpc

    slow = start_conductor(str(tmp_path), env.vhost,
                           env={"MAGNUM_CONDUCTOR_FAILPOINT": "handle.ping_conductor:sleep=5000"})
    try:
        client = rpc.get_client(oslo_messaging.Target(topic="magnum-conductor", server=slow.server_id), timeout=30)
        started = time.time()
        assert client.prepare(call_monitor_timeout=2).call(context(), "ping_conductor") is True
        assert time.time() - started >= 5
        assert slow.metric("magnum_conductor_rpc_replies_total", type="heartbeat") >= 3
        # Without heartbeats oslo's monitor gives up: a plain 2 s timeout fails.
        with pytest.raises(oslo_messaging.MessagingTimeout):
            client.prepare(timeout=2).call(context(), "ping_conductor")
    finally:
        assert slow.stop() == 0



def test_calls_are_not_held_up_behind_a_backlog_of_casts(env, tmp_path):
    # (env: Magnum's client configuration is loaded, as in every test here.)
    """A burst of slow casts (say a thousand cluster_create, each generating
    four RSA keys) must not hold up magnum-api's calls: each object read of
    its API goes through the conductor. A conductor with 2 handler slots per
    lane and casts held until the test lets them go (a failpoint waiting for
    a file: however loaded the machine, the first two are still running when
    the call comes and when the conductor is stopped) gets 8 casts, then a
    call: the call is answered while casts still wait for a slot. Stopped
    then, it starts none of the waiting casts; they go back to the broker and
    a second conductor handles them: each of the 8 exactly once, and the
    queue is left empty."""
    import oslo_messaging
    from oslo_config import cfg
    from magnum.common import rpc

    vhost = new_vhost("lanes")
    # Its own vhost, so no other conductor takes these casts: a transport of
    # Magnum's client stack for it (its global one points elsewhere).
    transport = oslo_messaging.get_rpc_transport(cfg.CONF, url=broker_url(vhost))
    client = oslo_messaging.get_rpc_client(transport, oslo_messaging.Target(topic="magnum-conductor"),
                                           serializer=rpc.RequestContextSerializer(None), timeout=30)
    release = tmp_path / "release"
    slow_env = {"MAGNUM_CONDUCTOR_FAILPOINT": f"handle.cluster_delete:wait={release}"}
    conductors = []

    def start(name):
        (tmp_path / name).mkdir()
        c = start_conductor(str(tmp_path / name), vhost, extra_default="executor_thread_pool_size = 2", env=slow_env)
        conductors.append(c)
        return c

    def handled(c):
        return c.metric("magnum_conductor_rpc_messages_total", method="cluster_delete", kind="cast")

    try:
        first = start("a")
        for _ in range(8):
            client.cast(context(), "cluster_delete", uuid=str(uuid.uuid4()))
        deadline = time.time() + 10
        while time.time() < deadline and first.metric("magnum_conductor_rpc_waiting_casts") < 6:
            time.sleep(0.05)
        assert first.metric("magnum_conductor_rpc_waiting_casts") == 6, "two run, six wait for a slot"
        assert client.call(context(), "ping_conductor") is True
        # Answered ahead of the backlog: no cast slot has been freed yet.
        assert handled(first) == 0
        assert first.metric("magnum_conductor_rpc_waiting_casts") == 6

        first.proc.send_signal(signal.SIGTERM)
        # The stop is under way (its line is logged) before the two running
        # casts may finish: the six waiting ones must not start after them.
        deadline = time.time() + 30
        while "shutting down: no new requests" not in open(first.log.name).read():
            assert first.proc.poll() is None and time.time() < deadline, "the conductor did not begin to stop"
            time.sleep(0.05)
        release.touch()
        assert first.proc.wait(timeout=30) == 0
        log = open(first.log.name).read()
        handled_before_stop = log.count("cast failed")  # ClusterNotFound: one line per cast run
        assert handled_before_stop == 2, f"{handled_before_stop} casts ran: the waiting ones must not start"
        conductors.remove(first)

        second = start("b")
        deadline = time.time() + 30
        while time.time() < deadline and handled(second) < 6:
            time.sleep(0.1)
        assert (handled_before_stop, handled(second)) == (2, 6), "every cast once, none lost"
        assert second.metric("magnum_conductor_rpc_redeliveries_total") == 6
        # Nothing more can come: the queue holds no message, ready or unacknowledged.
        queues = rabbitmqctl("list_queues", "-p", vhost, "--no-table-headers", "--quiet",
                             "name", "messages_ready", "messages_unacknowledged")
        left = [line.split() for line in queues.splitlines() if line.startswith("magnum-conductor")]
        assert left and all(q[1:] == ["0", "0"] for q in left), queues
        assert handled(second) == 6
    finally:
        for c in conductors:
            c.stop()
        transport.cleanup()
        rabbitmqctl("delete_vhost", vhost)
