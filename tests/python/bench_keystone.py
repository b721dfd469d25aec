"""What Keystone's cache saves the suite (issue 48): the CPU a real
Keystone (scripts/keystone.sh, its database in MariaDB as the run's shared
one) spends issuing a project-scoped token and validating it twice, as a
user's CLI call and the service that validates it do, with its cache
(scripts/keystone.sh's default: one process, the cache in its memory) and
without (KEYSTONE_CACHE=0: two processes, no cache). Both measured in one
run, reported as a ratio; the catalog holds 10 services' public and
internal endpoints, as the run's does.

    $MAGNUM_VENV/bin/python tests/python/bench_keystone.py [ROUNDS]
"""
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import db_url  # noqa: E402
from openstack_services import drop_databases, fresh_database  # noqa: E402
from test_lifecycle_keystone import KEYSTONE, call, password_token, start_keystone  # noqa: E402


def cpu_seconds(d):
    """CPU of the gunicorn processes serving from `d` (master and workers)."""
    pids = subprocess.run(["pgrep", "-f", "gunicorn"], capture_output=True, text=True).stdout.split()
    ticks = 0
    for pid in pids:
        try:
            if os.readlink(f"/proc/{pid}/cwd") != str(d):
                continue
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except OSError:
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def measure(cache, rounds, base):
    d = pathlib.Path(base) / ("cache" if cache else "no-cache")
    d.mkdir()
    db = f"bench_keystone_{os.getpid()}_{int(cache)}"
    fresh_database(db)
    old = os.environ.get("KEYSTONE_CACHE")
    os.environ["KEYSTONE_CACHE"] = "1" if cache else "0"
    try:
        url, _, admin = start_keystone(d, database=db_url(db, ""))
    finally:
        if old is None:
            del os.environ["KEYSTONE_CACHE"]
        else:
            os.environ["KEYSTONE_CACHE"] = old
    try:
        def make(kind, body):
            status, _, got = call("POST", f"{url}/{kind}s", admin, {kind: body})
            assert status == 201, (kind, status, got)
            return got[kind]["id"]
        project = make("project", {"name": "tenant", "domain_id": "default"})
        user = make("user", {"name": "alice", "domain_id": "default", "password": "pw"})
        _, _, roles = call("GET", f"{url}/roles?name=member", admin)
        status, _, _ = call("PUT", f"{url}/projects/{project}/users/{user}/roles/{roles['roles'][0]['id']}", admin)
        assert status == 204
        for i in range(10):
            sid = make("service", {"type": f"service-{i}", "name": f"service-{i}"})
            for interface in ("public", "internal"):
                make("endpoint", {"service_id": sid, "interface": interface, "url": f"http://127.0.0.1:9/{i}",
                                  "region_id": "RegionOne"})
        cpu0, t0 = cpu_seconds(d), time.time()
        for _ in range(rounds):
            token, _ = password_token(url, "alice", "pw", project_id=project)
            for _ in range(2):
                status, _, body = call("GET", f"{url}/auth/tokens", admin, headers={"X-Subject-Token": token})
                assert status == 200 and body["token"]["project"]["id"] == project, status
        return cpu_seconds(d) - cpu0, time.time() - t0
    finally:
        subprocess.run([KEYSTONE, "stop", str(d)], timeout=60)
        drop_databases([db])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    with tempfile.TemporaryDirectory() as base:
        cached = measure(True, rounds, base)
        uncached = measure(False, rounds, base)
    print(f"{rounds} tokens issued and validated twice: with the cache {cached[0]:.1f} CPU s ({cached[1]:.1f} s), "
          f"without {uncached[0]:.1f} CPU s ({uncached[1]:.1f} s): {uncached[0] / max(cached[0], 0.01):.1f}x the CPU "
          f"without")


if __name__ == "__main__":
    main()
