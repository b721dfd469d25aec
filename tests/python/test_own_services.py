"""The test command's MariaDB and RabbitMQ are its own (issue 52,
scripts/services.sh): a module passes where the machine's own cannot be
reached, and `services.sh down` leaves nothing running. (Every other
module runs on the run's own too; the test command compares the machine's
databases, vhosts, exchanges and queues before and after.)

The module runs in a network namespace of its own: loopback only (the
machine's MariaDB on 3306, RabbitMQ on 5672 and its epmd on 4369 are on the
machine's loopback, not this one; nothing of ours uses MariaDB's unix
socket: every client is given 127.0.0.1 and a port). That they cannot be
reached over TCP is checked inside,
before anything starts: as on a machine that has none running, without
stopping the ones this machine has (other test processes use theirs).
scripts/test-all.sh runs the demo the same way and compares the machine's
databases, vhosts, exchanges and queues before and after the whole run."""
import os
import re
import shutil
import subprocess
import sys
import urllib.parse

import pytest

from conftest import ROOT, broker_url, new_vhost, rabbitmqctl

# A module that uses the broker, the database (Magnum 23's and 22's schema
# tools) and our conductor through Magnum's client; short, so the suite's
# other modules (which share the machine's two cores) are not slowed.
MODULES = ["tests/python/test_reply_versions.py"]

INSIDE = r"""
set -euo pipefail
ip link set lo up
if mariadb -uroot -h127.0.0.1 -P3306 -e 'SELECT 1' >/dev/null 2>&1; then
  echo "UNEXPECTED: the machine's MariaDB answers here"; exit 3
fi
if timeout 30 rabbitmqctl -q status >/dev/null 2>&1; then
  echo "UNEXPECTED: the machine's RabbitMQ answers here"; exit 3
fi
echo "the machine's MariaDB and RabbitMQ: unreachable"
svc="$1"; shift
left() {  # what `services.sh down` left: processes started from its folder, listeners on its ports
  local ports="${MAGNUM_RS_DB_SERVER##*:}|${MAGNUM_RS_RABBITMQ_PORT:-x}|${MAGNUM_RS_RABBITMQ_EPMD_PORT:-x}"
  scripts/services.sh down "$svc"
  echo "left running: $(pgrep -f -c -- "$svc/" || true), listening: $(ss -Hltn | awk '{print $4}' | grep -cE ":($ports)\$" || true)"
}
trap left EXIT
MAGNUM_RS_DB_SERVER=""
eval "$(scripts/services.sh up "$svc" | tail -n 1)"
export MAGNUM_RS_DB_SERVER MAGNUM_RS_RABBITMQ_PORT MAGNUM_RS_RABBITMQ_NODE MAGNUM_RS_RABBITMQ_HOME \
  MAGNUM_RS_RABBITMQ_EPMD_PORT
echo "own: $MAGNUM_RS_DB_SERVER, RabbitMQ node $MAGNUM_RS_RABBITMQ_NODE on $MAGNUM_RS_RABBITMQ_PORT"
"$PYTHON" -m pytest -p no:warnings -p no:cacheprovider -q "$@"
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="namespaces of its own need root and unshare")
def test_a_module_passes_where_the_machines_mariadb_and_rabbitmq_cannot_be_reached(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable)
    # What the run gave this process is not the inner run's: its servers,
    # its OpenStack services and its timing records.
    for k in ("MAGNUM_RS_DB_SERVER", "MAGNUM_RS_RABBITMQ_PORT", "MAGNUM_RS_RABBITMQ_NODE", "MAGNUM_RS_RABBITMQ_HOME",
              "MAGNUM_RS_RABBITMQ_EPMD_PORT", "MC_SHARED_CLOUD", "MC_SHARED_CLOUD_PARENT", "MC_SUITE_TIMING_DIR",
              "MC_SUITE_CGROUP", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST"):
        env.pop(k, None)
    svc = tmp_path / "services"
    p = subprocess.run(["unshare", "--net", "--", "bash", "-c", INSIDE, "inside", str(svc), *MODULES],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert "the machine's MariaDB and RabbitMQ: unreachable" in p.stdout, out[-3000:]
    own = re.search(r"own: mysql\+pymysql://root@127\.0\.0\.1:(\d+), RabbitMQ node (mc-\w+@localhost) on (\d+)",
                    p.stdout)
    assert own and own.group(1) != "3306" and own.group(3) != "5672", out[-3000:]
    summary = re.search(r"(\d+) passed", p.stdout)
    assert summary and int(summary.group(1)) >= 8 and " failed" not in p.stdout, out[-3000:]
    # `services.sh down`: no process of theirs left, their folder gone.
    assert "left running: 0, listening: 0" in p.stdout, out[-3000:]
    assert not svc.exists()


def test_the_before_and_after_listing_names_an_exchange_a_client_declared():
    """`services.sh list` (what the test command compares on the machine's
    own servers) sees an exchange and a queue declared in a vhost, as
    Neutron on oslo.messaging's default transport once declared its agents'
    exchanges in the machine's `/`. Run here on the run's own broker (the
    variables name it), in a vhost of this test's."""
    import amqp

    def listing():
        p = subprocess.run(["scripts/services.sh", "list"], cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        return p.stdout.splitlines()

    vhost, other = new_vhost("listing"), None
    try:
        before = listing()
        assert f"exchanges in {vhost}: " in "\n".join(before), before
        port = urllib.parse.urlsplit(broker_url(vhost)).port
        conn = amqp.Connection(f"127.0.0.1:{port}", userid="guest", password="guest", virtual_host=vhost)
        conn.connect()
        try:
            ch = conn.channel()
            ch.exchange_declare("l3_agent_fanout", "fanout", durable=False, auto_delete=False)
            ch.queue_declare("q-listing", durable=False, auto_delete=False)
        finally:
            conn.close()
        # Another test's vhost, made meanwhile (the run's broker is shared):
        # its lines are not this vhost's.
        other = new_vhost("listing-other")
        after = listing()
        assert f"exchanges in {other}: " in "\n".join(after), after

        def names(lines, kind):
            line = next((x for x in lines if x.startswith(f"{kind} in {vhost}:")), None)
            assert line is not None, (kind, lines)
            return set(line.split(":", 1)[1].split())

        # This vhost's lines gained exactly what the client declared. (Other
        # lines may change too: the run's broker is shared, and other tests
        # add and delete vhosts of their own meanwhile.)
        assert names(after, "exchanges") - names(before, "exchanges") == {"l3_agent_fanout"}, (before, after)
        assert names(before, "exchanges") <= names(after, "exchanges"), (before, after)
        assert names(after, "queues") - names(before, "queues") == {"q-listing"}, (before, after)
        assert names(before, "queues") <= names(after, "queues"), (before, after)
    finally:
        for v in (vhost, other):
            if v:
                rabbitmqctl("delete_vhost", v)
