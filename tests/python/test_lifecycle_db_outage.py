"""The database goes away while requests arrive. The conductor reaches MariaDB
through a TCP proxy the test can cut (open connections reset, new ones closed
at once); Magnum's client and the checks use the database directly.

Python's conductor acknowledges a cast on receipt, so a `cluster_create` that
meets a database outage is lost: magnum-api has answered 202 with a uuid that
will never exist. Ours hands such a cast back to the broker (after a pause)
until the database answers, then finishes it: nothing is lost.
"""
import json
import socket
import threading
import time

import pytest

from conftest import DB_HOST, DB_PORT
from test_lifecycle import Env


class CuttableProxy:
    """127.0.0.1:<port> -> the run's MariaDB, with an off switch."""

    def __init__(self, target=(DB_HOST, DB_PORT)):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = True
        self.lock = threading.Lock()
        self.open = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                client.close()  # the server "went away" during the handshake
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.up = False
        with self.lock:
            for s in self.open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.open = []

    def restore(self):
        self.up = True

    def url(self, db_url):
        return db_url.replace(f"{DB_HOST}:{DB_PORT}", f"127.0.0.1:{self.port}")

    def close(self):
        self.cut()
        self.listener.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    proxy = CuttableProxy()
    e = Env(tmp_path_factory.mktemp("outage"), "v1beta1", conductor_db=proxy.url,
            extra="[database]\npool_timeout = 3\n")
    e.proxy = proxy
    yield e
    proxy.restore()
    e.close()
    proxy.close()


def requeued(env, method):
    return env.conductor.metric("magnum_conductor_rpc_messages_total", method=method, kind="cast",
                                outcome="requeued")


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while not pred():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_create_and_delete_survive_a_database_outage(env):
    env.proxy.cut()
    try:
        uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
        wait_for(lambda: requeued(env, "cluster_create") >= 2, 60, "the cast to be requeued twice")
        assert env.client("get", uuid)["cluster"] is None, "nothing recorded while the database is away"
        assert env.conductor.proc.poll() is None
    finally:
        env.proxy.restore()
    got, seen = env.wait(uuid, lambda g: g["cluster"] and g["cluster"]["status"] == "CREATE_COMPLETE", timeout=180)
    assert len(got["nodegroups"]) == 2 and got["x509keypairs"] == 4, got

    env.proxy.cut()
    try:
        env.client("delete", uuid)
        wait_for(lambda: requeued(env, "cluster_delete") >= 1, 60, "the delete cast to be requeued")
        assert env.client("get", uuid)["cluster"]["status"] == "CREATE_COMPLETE"
    finally:
        env.proxy.restore()
    got, _ = env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
    assert got["nodegroups"] == [] and got["x509keypairs"] == 0


def test_outage_in_the_middle_of_a_create(env):
    """The rows are written, then the database goes away before the
    certificates (a sleep failpoint holds the create there while the test cuts
    the proxy): the cast is not acknowledged yet, so it goes back to the queue,
    and the redelivery finishes the same cluster: no CREATE_FAILED, four
    keypairs, not eight."""
    env.restart("create.after_rows:sleep=6000")
    try:
        before = env.client("get", "00000000-0000-0000-0000-000000000000")["x509keypairs"]
        requeues = requeued(env, "cluster_create")
        uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
        env.wait(uuid, lambda g: g["cluster"] and len(g["nodegroups"]) == 2, timeout=30)
        env.proxy.cut()
        try:
            wait_for(lambda: requeued(env, "cluster_create") > requeues, 60, "the cast to be requeued")
        finally:
            env.proxy.restore()
        got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS", timeout=180)
        assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
        assert got["x509keypairs"] == before + 4
    finally:
        env.restart()
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)


def test_outage_while_resuming_at_startup(env):
    """A conductor starting while a create is in progress lists such clusters
    to finish them. If the database is away at that moment, the list is tried
    again until it answers: the cluster does not stay CREATE_IN_PROGRESS until
    the next restart. (The create is killed half-way through its CAPI objects,
    after its acknowledgement, so the broker has nothing to redeliver: only
    the resume can finish it.)"""
    from test_lifecycle_restart import died

    before = env.client("get", "00000000-0000-0000-0000-000000000000")["x509keypairs"]
    env.restart("create.mid_apply")
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    died(env)
    log = env.tmp / "conductor.log"
    start = log.stat().st_size
    env.restart("resume.before_list:sleep=5000")
    env.proxy.cut()
    try:
        wait_for(lambda: b"cannot list clusters to resume yet" in log.read_bytes()[start:], 60,
                 "the resume list to meet the outage")
        assert env.client("get", uuid)["cluster"]["status"] == "CREATE_IN_PROGRESS"
    finally:
        env.proxy.restore()
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS", timeout=120)
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    assert got["x509keypairs"] == before + 4
    env.restart()
    env.client("delete", uuid)
    env.wait(uuid, lambda g: g["cluster"] is None, timeout=180)
