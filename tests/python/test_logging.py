"""Logging as oslo.log: [DEFAULT] log_dir/log_file, use_json, the request id on
every line of a request's work, and SIGHUP reopening the file (logrotate)."""
import json
import os
import signal
import time

import pytest

from test_lifecycle import Env


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("logging")
    e = Env(tmp, "v1beta1", extra=f"[DEFAULT]\nlog_dir = {tmp}\nlog_file = magnum-conductor.log\nuse_json = true\n"
                                  "default_log_levels = kube=WARN,hyper=WARN\n")
    e.log_path = tmp / "magnum-conductor.log"
    yield e
    e.close()


def records(path):
    out = []
    for line in open(path):
        out.append(json.loads(line))  # every line is one JSON object
    return out


def test_file_json_and_the_request_id_on_every_line_of_a_create(env):
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    recs = records(env.log_path)
    assert any(r["fields"].get("message") == "magnum-conductor starting" for r in recs)
    # The create's own lines: all in its request's span, one request id.
    mine = [r for r in recs if r.get("span", {}).get("method") == "cluster_create"]
    assert {r["fields"].get("message") for r in mine} >= {"operation begins", "cluster objects applied", "operation ends"}
    ids = {r["span"]["request_id"] for r in mine}
    assert len(ids) == 1 and next(iter(ids)).startswith("req-"), ids
    # Every line naming this cluster while the handler ran carries it.
    handler = [r for r in recs if r["fields"].get("cluster") == uuid
               and r["fields"].get("message") in ("operation begins", "cluster objects applied", "operation ends")]
    assert handler and all(r.get("span", {}).get("request_id") in ids for r in handler), handler
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None)


def test_sighup_reopens_the_log_file(env):
    rotated = str(env.log_path) + ".1"
    os.rename(env.log_path, rotated)
    env.conductor.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while not os.path.exists(env.log_path):
        assert time.time() < deadline, "no new log file after SIGHUP"
        time.sleep(0.1)
    assert env.conductor.proc.poll() is None, "SIGHUP must not stop the conductor"
    deadline = time.time() + 10
    while not any(r["fields"].get("message") == "log file reopened" for r in records(env.log_path)):
        assert time.time() < deadline
        time.sleep(0.1)
    assert not any(r["fields"].get("message") == "log file reopened" for r in records(rotated))
