"""What the broker holds after the real Python magnum-conductor 23.0.0 starts,
compared with what it holds after ours starts with the same magnum.conf.

Each option set runs both conductors in their own vhost and compares
exchanges, queues (type, flags, arguments), bindings and consumers (ack mode,
prefetch, arguments). Random parts (fanout uuids, queue-manager counters,
consumer tags) are normalised; everything else must be identical. Then ours
is started again on top of what Python left behind, which is what an
operator swapping conductors does, and must come up without a 406.
"""
import os
import re

import pytest

from conftest import Conductor, PythonConductor, free_port, new_vhost, rabbitmqctl, wait_for_consumers, write_conf

OPTION_SETS = {
    "defaults": "",
    "durable-classic": "amqp_durable_queues = true\nrabbit_ha_queues = true\nrabbit_transient_queues_ttl = 900\n",
    "quorum-stream-qmanager": (
        "rabbit_quorum_queue = true\n"
        "rabbit_transient_quorum_queue = true\n"
        "rabbit_stream_fanout = true\n"
        "use_queue_manager = true\n"
        "rabbit_qos_prefetch_count = 10\n"
        "rabbit_quorum_delivery_limit = 5\n"
        "rabbit_quorum_max_memory_length = 1000\n"
        "rabbit_quorum_max_memory_bytes = 1048576\n"
    ),
}

UUID_HEX = re.compile(r"[0-9a-f]{32}")
QMANAGER = re.compile(r"(?P<head>[^\t:]+:[^\t:]+):\d+")
SERVER_ID = re.compile(r"magnum-conductor\.[a-z0-9]{12}\b")  # Magnum's random short id per process


ARGS = re.compile(r"\[(\{.*\})\]$")


def sort_arguments(row):
    """AMQP field tables are unordered (RabbitMQ compares them by key), but
    rabbitmqctl prints them in wire order: py-amqp sends insertion order,
    lapin's FieldTable is a BTreeMap and sends key order. Compare by key."""
    m = ARGS.search(row)
    if not m:
        return row
    items = sorted(re.findall(r"\{[^{}]*\}", m.group(1)))
    return row[: m.start()] + "[" + ",".join(items) + "]"


def normalise(text):
    text = sort_arguments(text)
    text = UUID_HEX.sub("<uuid>", text)
    text = SERVER_ID.sub("magnum-conductor.<server>", text)
    return QMANAGER.sub(r"\g<head>:<n>", text)


def snapshot(vhost):
    """The vhost's topology as sorted, normalised rows (built-in amq.* and the
    default exchange left out: the broker creates them, not the conductor)."""
    exchanges = [
        row for row in rabbitmqctl("list_exchanges", "-p", vhost, "name", "type", "durable", "auto_delete",
                                   "internal", "arguments").splitlines()[1:]
        if row.split("\t", 1)[0] and not row.startswith("amq.")
    ]
    queues = rabbitmqctl("list_queues", "-p", vhost, "name", "type", "durable", "auto_delete", "exclusive",
                         "arguments").splitlines()[1:]
    bindings = rabbitmqctl("list_bindings", "-p", vhost, "source_name", "source_kind", "destination_name",
                           "destination_kind", "routing_key", "arguments").splitlines()[1:]
    consumers = [
        "\t".join(row.split("\t")[i] for i in (0, 2, 3, 4, 5))  # queue, ack, prefetch, active, arguments
        for row in rabbitmqctl("list_consumers", "-p", vhost, "queue_name", "consumer_tag", "ack_required",
                               "prefetch_count", "active", "arguments").splitlines()[1:]
    ]
    return {
        kind: sorted(normalise(r) for r in rows)
        for kind, rows in dict(exchanges=exchanges, queues=queues, bindings=bindings, consumers=consumers).items()
    }


def ours(tmpdir, vhost, rabbit, name):
    port = free_port()
    conf = os.path.join(tmpdir, f"{name}.conf")
    write_conf(conf, vhost, rabbit=rabbit, extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
    return Conductor(conf, port, os.path.join(tmpdir, f"{name}.log"))


@pytest.mark.parametrize("option_set", sorted(OPTION_SETS))
def test_same_declarations_as_python(option_set, tmp_path):
    rabbit = OPTION_SETS[option_set]
    py_vhost, rs_vhost = new_vhost(f"decl-py-{option_set}"), new_vhost(f"decl-rs-{option_set}")
    try:
        conf = str(tmp_path / "python.conf")
        write_conf(conf, py_vhost, rabbit=rabbit)
        python = PythonConductor(conf, str(tmp_path / "python.log"))
        try:
            wait_for_consumers(py_vhost, 3)
            expected = snapshot(py_vhost)
        finally:
            python.stop()

        conductor = ours(str(tmp_path), rs_vhost, rabbit, "rust")
        try:
            wait_for_consumers(rs_vhost, 3)
            actual = snapshot(rs_vhost)
        finally:
            assert conductor.stop() == 0
        for kind in expected:
            assert actual[kind] == expected[kind], f"{option_set}: {kind} differ"

        # Ours on top of whatever Python left in its vhost: no 406, serves.
        again = ours(str(tmp_path), py_vhost, rabbit, "rust-after-python")
        try:
            wait_for_consumers(py_vhost, 3)
            assert again.metric("magnum_conductor_amqp_connected") == 1
        finally:
            assert again.stop() == 0
        with open(again.log.name) as f:
            assert "PRECONDITION_FAILED" not in f.read()
    finally:
        rabbitmqctl("delete_vhost", py_vhost)
        rabbitmqctl("delete_vhost", rs_vhost)
