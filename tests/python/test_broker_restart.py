"""RabbitMQ stops and starts (`rabbitmqctl stop_app` / `start_app`) while
Magnum's client makes 1,000 ping_conductor calls: our conductor reconnects
within 10 s of the broker coming back, calls after recovery succeed, and the
process never dies."""
import json
import os
import subprocess
import sys
import time


from conftest import new_vhost, private_broker, rabbitmqctl, start_conductor, write_conf

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = 1000


def read_calls(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def wait_until(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def load(client_conf, server, calls, out, concurrency=2, pace=0.02):
    # Paced (about 100 calls/s) so the 1,000 calls are still running when
    # the broker goes down and comes back, whatever the machine's speed.
    return subprocess.Popen([sys.executable, os.path.join(HERE, "ping_load.py"), "--config-file", client_conf,
                             "--server", server, "--calls", str(calls), "--concurrency", str(concurrency),
                             "--timeout", "5", "--pace", str(pace), "--out", out])


def test_conductor_survives_broker_restart(tmp_path):
    # A RabbitMQ of the test's own: it stops it, beside the other tests.
    with private_broker(tmp_path):
        restart_under_load(tmp_path)


def restart_under_load(tmp_path):
    vhost = new_vhost("restart")
    conductor = start_conductor(str(tmp_path), vhost)
    client_conf = str(tmp_path / "client.conf")
    write_conf(client_conf, vhost)
    calls_path = str(tmp_path / "calls.jsonl")
    broker_stopped = False
    try:
        client = load(client_conf, conductor.server_id, CALLS, calls_path)
        wait_until(lambda: len(read_calls(calls_path)) >= 200, 120, "200 calls before the restart")
        assert len(read_calls(calls_path)) < CALLS - 300, "the load must still be running"

        rabbitmqctl("stop_app")
        broker_stopped = True
        wait_until(lambda: conductor.metric("magnum_conductor_amqp_connected") == 0, 30, "the disconnect to be seen")
        time.sleep(3)
        rabbitmqctl("start_app")
        broker_stopped = False
        started = time.time()
        wait_until(lambda: conductor.metric("magnum_conductor_amqp_connected") == 1, 10,
                   "the conductor to reconnect (limit 10 s)")
        reconnect_s = time.time() - started
        print(f"reconnected {reconnect_s:.2f}s after start_app")

        client.wait(600)
        assert client.returncode == 0
        calls = sorted(read_calls(calls_path), key=lambda c: c["start"])
        assert len(calls) == CALLS
        after = [c for c in calls if c["start"] > started and c["ok"]]
        assert after, "no call succeeded after the broker came back"
        recovered = min(c["start"] for c in after)
        failed_after = [c for c in calls if c["start"] >= recovered and not c["ok"]]
        assert not failed_after, f"calls failed after recovery: {failed_after[:3]}"
        assert conductor.proc.poll() is None, "the conductor died"
        assert conductor.metric("magnum_conductor_amqp_reconnects_total") >= 1

        # A fresh client after the restart: everything answers.
        again = str(tmp_path / "again.jsonl")
        fresh = load(client_conf, conductor.server_id, 50, again)
        fresh.wait(120)
        assert all(c["ok"] for c in read_calls(again)) and len(read_calls(again)) == 50
    finally:
        if broker_stopped:
            rabbitmqctl("start_app")
        assert conductor.stop() == 0
        rabbitmqctl("delete_vhost", vhost)


def pings_ok(tmp_path, client_conf, server, name, calls=20):
    out = str(tmp_path / f"{name}.jsonl")
    p = load(client_conf, server, calls, out, pace=0)
    assert p.wait(120) == 0
    got = read_calls(out)
    return len(got) == calls and all(c["ok"] for c in got)


def test_conductor_recovers_from_cancelled_consumers_and_closed_connections(tmp_path):
    """The broker cancels our consumer (its queue deleted by an operator) and
    force-closes our connection: each time the conductor re-declares and
    re-consumes, and Magnum's client gets answers again."""
    vhost = new_vhost("cancel")
    conductor = start_conductor(str(tmp_path), vhost)
    client_conf = str(tmp_path / "client.conf")
    write_conf(client_conf, vhost)
    server_queue = f"magnum-conductor.{conductor.server_id}"
    try:
        assert pings_ok(tmp_path, client_conf, conductor.server_id, "before")
        reconnects = conductor.metric("magnum_conductor_amqp_reconnects_total")

        rabbitmqctl("delete_queue", "--vhost", vhost, server_queue)
        wait_until(lambda: server_queue in rabbitmqctl("list_queues", "-p", vhost, "name").split(), 30,
                   "the server queue to be declared again")
        wait_until(lambda: conductor.metric("magnum_conductor_amqp_connected") == 1, 30, "the conductor to consume")
        assert pings_ok(tmp_path, client_conf, conductor.server_id, "after-cancel")
        assert conductor.metric("magnum_conductor_amqp_reconnects_total") > reconnects
        reconnects = conductor.metric("magnum_conductor_amqp_reconnects_total")

        rabbitmqctl("close_all_connections", "--vhost", vhost, "test: forced close")
        wait_until(lambda: conductor.metric("magnum_conductor_amqp_reconnects_total") > reconnects, 30,
                   "the conductor to reconnect")
        wait_until(lambda: conductor.metric("magnum_conductor_amqp_connected") == 1, 30, "the conductor to consume")
        assert pings_ok(tmp_path, client_conf, conductor.server_id, "after-close")
        assert conductor.proc.poll() is None, "the conductor died"
        # The connections it gave up were closed, not leaked.
        ours = [line for line in rabbitmqctl("list_connections", "vhost", "client_properties").splitlines()
                if line.startswith(vhost + "\t") and "magnum-conductor:" in line]
        assert len(ours) == 1, ours
    finally:
        assert conductor.stop() == 0
        rabbitmqctl("delete_vhost", vhost)
