"""The object-indirection API against Magnum's own objects.

magnum-api run as its console script sends every object call to the
conductor. Here Magnum 23.0.0's objects run each scenario of
indirection_client.py twice on one database: through our conductor
(`indirection_api` set, as `magnum/cmd/api.py` sets it) and on Magnum's own
in-process DB path (as the WSGI magnum-api does). Every step must give the
same object data, versions, changes, values or exception (class and
message): lookups, lists with filters, sorting and markers, counts, stats,
create/save/refresh/destroy of every class and their errors. Then Magnum
22.0.0's objects read through our conductor: lists come back at the
versions a 22.x magnum-api knows (Python's conductor sends them at its own
version, which 22.x cannot read).
"""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import VENV22_BIN, Conductor, free_port, new_database, new_vhost, rabbitmqctl, write_conf

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Env:
    def __init__(self, tmp):
        self.vhost = new_vhost("indir")
        self.db = new_database("indir")
        self.conf = str(tmp / "client.conf")
        write_conf(self.conf, self.vhost, db_url=self.db)
        port = free_port()
        write_conf(str(tmp / "rust.conf"), self.vhost, db_url=self.db,
                   extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
        self.conductor = Conductor(str(tmp / "rust.conf"), port, str(tmp / "rust-conductor.log"))

    def run(self, mode, scenario, *args, python=sys.executable):
        p = subprocess.run([python, os.path.join(HERE, "indirection_client.py"), self.conf, mode, scenario,
                            PROJECT, *args], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    def close(self):
        assert self.conductor.stop() == 0
        rabbitmqctl("delete_vhost", self.vhost)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("indirection"))
    e.seed = e.run("db", "seed")
    yield e
    e.close()


def normalised(steps):
    """uuids in order of appearance, and ids, replaced: two runs that made
    their own rows compare. Timestamps leave `changes` too: in-process,
    Magnum's create() keeps created_at with microseconds, so a later
    refresh() from the row (whole seconds) marks it changed; over RPC the
    value crosses the wire as whole seconds (oslo's isotime) and a Python
    conductor sees no change either."""
    seen = {}

    def fix(v, key=None):
        if key == "changes" and isinstance(v, list):
            return [c for c in v if c not in ("created_at", "updated_at")]
        if isinstance(v, dict):
            return {k: fix(x, k) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        if key == "id" and isinstance(v, int):
            return "<id>"
        if isinstance(v, str):
            return UUID.sub(lambda m: seen.setdefault(m.group(0), f"<uuid{len(seen)}>"), v)
        return v
    return fix(steps)


def delta(a, b, path=""):
    """Where two results differ, as short lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in delta(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in delta(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: ours {json.dumps(a)[:200]} / magnum {json.dumps(b)[:200]}"]


def compare(ours, theirs):
    assert [s for s, _ in ours] == [s for s, _ in theirs]
    diffs = [f"{s}{d}" for (s, a), (_, b) in zip(ours, theirs) for d in delta(a, b)]
    assert not diffs, "\n".join(diffs)


def test_reads_match_magnums_db_path(env):
    ours = env.run("rpc", "read", env.seed["alpha"])
    theirs = env.run("db", "read", env.seed["alpha"])
    compare(ours, theirs)
    by = dict(ours)
    # The scenario exercised what it claims.
    assert len(by["cluster.list"]) == 4 and by["cluster.count"] == 4
    assert [c["data"]["name"] for c in by["cluster.list.sorted"]] == ["zeta", "twin", "twin", "alpha"]
    assert len(by["cluster.list.page"]) == 2
    assert {c["data"]["status"] for c in by["cluster.list.status"]} == {"CREATE_FAILED", "UPDATE_COMPLETE"}
    assert by["cluster.get_by_name.dup"]["error"] == "Conflict"
    assert by["cluster.get.missing"]["error"] == "ClusterNotFound"
    assert by["cluster.get.other_project"]["error"] == "ClusterNotFound"
    assert by["cluster.get.bad_identity"]["error"] == "InvalidIdentity"
    assert by["cluster.list.bad_sort_dir"]["error"] == "ValueError"
    assert by["cluster.list.bad_sort_key"]["error"] == "InvalidParameterValue"
    assert by["typeerror"]["error"] == "TypeError"
    assert by["federation.count"]["error"] == "AttributeError", "Magnum's own bug, kept"
    assert by["cluster.stats"] == [4, 12]
    assert by["cluster.node_count"] == 2 and by["ng.count"] == 2
    assert by["cluster.cluster_template"]["data"]["name"] == "k8s-template"
    assert by["ng.other_project"] == [] and by["ct.list.other"] != []
    assert by["service.get"]["data"]["host"] == "test-host", "our heartbeat row"


def test_writes_match_magnums_db_path(env):
    ours = normalised(env.run("rpc", "write", "w"))
    theirs = normalised(env.run("db", "write", "w"))
    compare(ours, theirs)
    by = dict(ours)
    assert by["ct.create"]["changes"] == [] and by["ct.create"]["data"]["id"] == "<id>"
    assert by["ct.create.dup"]["error"] == "ClusterTemplateAlreadyExists"
    assert by["ct.save.referenced"]["error"] == "ClusterTemplateReferenced"
    assert by["ct.refresh"]["data"]["flavor_id"] == "m2" and "flavor_id" in by["ct.refresh"]["changes"]
    assert by["cluster.save"]["data"]["health_status_reason"] == {"api": "ok"}
    assert by["cluster.save.uuid"]["error"] == "InvalidParameterValue"
    assert by["ng.update_nodegroup"]["data"]["node_count"] == 5
    assert by["ng.refresh"]["data"]["max_node_count"] == 9
    assert by["service.cycle"][1]["data"]["report_count"] == 1
    assert by["service.destroy"] is None
    assert by["quota.cycle"][0]["data"]["hard_limit"] == 7
    assert by["quota.dup"]["error"] == "QuotaAlreadyExists"
    assert by["quota.delete.again"]["error"] == "QuotaNotFound"
    assert by["x509.destroy.again"]["error"] == "X509KeyPairNotFound"
    assert by["cluster.destroy"] == 0
    assert by["cluster.destroy.again"]["error"] == "ClusterNotFound"


def test_a_22_client_gets_its_versions(env):
    if not os.path.exists(os.path.join(VENV22_BIN, "python")):
        pytest.skip("no Magnum 22.0.0 venv")
    got = dict(env.run("rpc", "versions", env.seed["alpha"], python=os.path.join(VENV22_BIN, "python")))
    assert got["cluster.get"]["version"] == "1.23", got["cluster.get"]
    assert {c["version"] for c in got["cluster.list"]} == {"1.23"}
    assert {n["version"] for n in got["ng.list"]} == {"1.1"}
    assert all("node_labels" not in n["data"] for n in got["ng.list"])
    assert len(got["cluster.nodegroups"]) == 2
    # And a 23.x client gets today's.
    now = dict(env.run("rpc", "versions", env.seed["alpha"]))
    assert {c["version"] for c in now["cluster.list"]} == {"1.24"}
    assert {n["version"] for n in now["ng.list"]} == {"1.2"}
