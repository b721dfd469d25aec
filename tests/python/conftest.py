"""Shared fixtures: a broker vhost per test module, MariaDB databases with
Magnum's schema, our conductor and the real Python magnum-conductor as
subprocesses, and Magnum's own RPC client."""
import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings

import pytest

import suite_timing

warnings.simplefilter("ignore")

# Wall time and CPU per module, when the test command asks
# (MC_SUITE_TIMING_DIR: tests/python/suite_timing.py).
if suite_timing.DIR:
    pytest_runtest_protocol = suite_timing.pytest_runtest_protocol
    pytest_sessionfinish = suite_timing.pytest_sessionfinish

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
def _cargo_debug_dir():
    """Where cargo puts this workspace's debug builds (CARGO_TARGET_DIR, a
    cargo config's target-dir or ./target, as `cargo metadata` says)."""
    try:
        out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return os.path.join(json.loads(out)["target_directory"], "debug")
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return os.path.join(ROOT, "target", "debug")


# The binaries the tests run: MAGNUM_CONDUCTOR_BIN's folder (the test
# command's copy), else cargo's debug folder.
CONDUCTOR_BIN = os.environ.get("MAGNUM_CONDUCTOR_BIN") or os.path.join(_cargo_debug_dir(), "magnum-conductor")
BIN_DIR = os.path.dirname(CONDUCTOR_BIN)
VENV22_BIN = os.path.join(os.environ.get("MAGNUM22_VENV", os.path.expanduser(
    "~/.cache/magnum-conductor-rs/venv-magnum-22.0.0")), "bin")
VENV_BIN = os.path.join(sys.prefix, "bin")  # the venv, not the interpreter it links to


# Which RabbitMQ the helpers below talk to (new_vhost, write_conf,
# rabbitmqctl, wait_for_consumers): the run's (scripts/services.sh: a node
# of the run's own that scripts/test-all.sh starts, named by
# MAGNUM_RS_RABBITMQ_PORT, _NODE, _HOME and _EPMD_PORT; unset: the
# machine's, port 5672 and rabbitmqctl's default node), shared by every test
# process; or, inside `private_broker()`, a node of the test's own, which it
# may stop and start (`rabbitmqctl("stop_app")` refuses on the run's: the
# other test processes' tests need it).
_RUN_BROKER = {
    "port": int(os.environ.get("MAGNUM_RS_RABBITMQ_PORT") or 5672),
    "node": os.environ.get("MAGNUM_RS_RABBITMQ_NODE") or None,
    "home": os.environ.get("MAGNUM_RS_RABBITMQ_HOME") or None,
    "epmd": os.environ.get("MAGNUM_RS_RABBITMQ_EPMD_PORT") or None,
    "private": False,
}
_broker = dict(_RUN_BROKER)
RABBITMQ_BIN_DIR = os.environ.get("RABBITMQ_BIN_DIR", "/usr/lib/rabbitmq/bin")


def rabbitmqctl_command(*args):
    """The command line and environment of `rabbitmqctl ARGS` against the
    broker this process's helpers use."""
    if _broker["home"]:
        # No erl_crash.dump in the working directory when its node is gone.
        env = dict(os.environ, HOME=_broker["home"], ERL_CRASH_DUMP_SECONDS="0")
        if _broker["epmd"]:
            env["ERL_EPMD_PORT"] = _broker["epmd"]
        return [os.path.join(RABBITMQ_BIN_DIR, "rabbitmqctl"), "-n", _broker["node"], "-q", *args], env
    if _broker["node"]:
        return ["rabbitmqctl", "-n", _broker["node"], "-q", *args], None
    return ["rabbitmqctl", "-q", *args], None


def rabbitmqctl(*args):
    if args[:1] in (("stop_app",), ("start_app",), ("stop",)):
        assert _broker["private"], "a test stops only a RabbitMQ of its own (conftest.private_broker)"
    suite_timing.count("rabbitmqctl")
    cmd, env = rabbitmqctl_command(*args)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60, env=env)
    return out.stdout


def broker_url(vhost, scheme="rabbit", port=None):
    """The URL of `vhost` on the broker this process's helpers use (`port`:
    another port, e.g. a proxy's, in front of it)."""
    return f"{scheme}://guest:guest@127.0.0.1:{port or _broker['port']}/{vhost}"


@contextlib.contextmanager
def private_broker(tmpdir):
    """A RabbitMQ node of this test's own (the machine's installation, its
    own node name, port, data and Erlang cookie under `tmpdir`), for a test
    that stops and starts its broker: it runs beside every other test,
    which keep the run's. While the block runs, this process's helpers
    use it. Starting one costs about 6 CPU seconds."""
    assert not _broker["private"], "one private broker at a time"
    server = os.path.join(RABBITMQ_BIN_DIR, "rabbitmq-server")
    assert os.access(server, os.X_OK), f"{server}: RabbitMQ's own scripts (set RABBITMQ_BIN_DIR)"
    d = tempfile.mkdtemp(prefix="rabbitmq-", dir=str(tmpdir))
    node = f"mc-{uuid.uuid4().hex[:8]}@localhost"
    port, dist, epmd = free_port(), free_port(), free_port()
    with open(os.path.join(d, "enabled_plugins"), "w") as f:
        f.write("[].\n")  # no management listener to collide with another node's
    with open(os.path.join(d, "rabbitmq.conf"), "w") as f:
        f.write(f"listeners.tcp.default = 127.0.0.1:{port}\n")
    env = dict(os.environ, HOME=d, ERL_EPMD_PORT=str(epmd), RABBITMQ_NODENAME=node, RABBITMQ_NODE_PORT=str(port),
               RABBITMQ_DIST_PORT=str(dist), RABBITMQ_MNESIA_BASE=os.path.join(d, "mnesia"),
               RABBITMQ_LOG_BASE=os.path.join(d, "log"), RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(d, "enabled_plugins"),
               RABBITMQ_CONFIG_FILE=os.path.join(d, "rabbitmq.conf"), RABBITMQ_PID_FILE=os.path.join(d, "pid"))
    out = open(os.path.join(d, "server.out"), "w")
    suite_timing.count("rabbitmq nodes")
    proc = subprocess.Popen([server], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=d)
    _broker.update(port=port, node=node, home=d, epmd=str(epmd), private=True)
    try:
        deadline = time.time() + 90
        while True:
            assert proc.poll() is None, f"RabbitMQ node {node} exited ({proc.returncode}): {log_tail(out.name)}"
            try:
                rabbitmqctl("await_startup", "--timeout", "10")
                break
            except subprocess.CalledProcessError:
                # Not registered with epmd yet.
                assert time.time() < deadline, f"RabbitMQ node {node} did not start: {log_tail(out.name)}"
                time.sleep(0.5)
        yield
    finally:
        try:
            if proc.poll() is None:
                rabbitmqctl("stop")
            proc.wait(30)
        except (subprocess.SubprocessError, AssertionError):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            _broker.clear()
            _broker.update(_RUN_BROKER)
            # The epmd it started, on its own port (no other node's).
            subprocess.run(["epmd", "-kill"], env=dict(os.environ, ERL_EPMD_PORT=str(epmd)),
                           capture_output=True, timeout=30)
            out.close()
            shutil.rmtree(d, ignore_errors=True)


def pytest_configure(config):
    # The run's OpenStack services (tests/python/shared_cloud.py): those
    # scripts/test-all.sh started when it names them, else started by the
    # first test process that asks and stopped when this run ends. Set here,
    # in the main process, before pytest-xdist starts its workers (which
    # inherit the environment).
    if "PYTEST_XDIST_WORKER" not in os.environ and not os.environ.get("MC_SHARED_CLOUD"):
        d = tempfile.mkdtemp(prefix="mc-shared-cloud-")
        os.environ["MC_SHARED_CLOUD"] = d
        os.environ["MC_SHARED_CLOUD_PARENT"] = str(os.getpid())
        config._mc_own_cloud = d


def pytest_unconfigure(config):
    d = getattr(config, "_mc_own_cloud", None)
    if d:
        import shared_cloud
        shared_cloud.stop_started(d)
        if _any_failed:
            _tell(f"the run's OpenStack services' logs: {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


# The modules in the order of their measured wall time, longest first
# (suite_order.json, written by `tests/suite_report.py DIR --order` from a
# run of the test command): with several processes (pytest-xdist
# `--dist loadfile --no-loadscope-reorder`, as scripts/test-all.sh runs
# them) the longest start first and the short ones fill the gaps, instead of
# a long module starting last and running on alone. A module not measured
# yet goes first.
SUITE_ORDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suite_order.json")


def _module_seconds():
    try:
        with open(SUITE_ORDER) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def pytest_collection_modifyitems(session, config, items):
    seconds = _module_seconds()

    def key(item):
        module = os.path.basename(str(item.fspath))
        return -seconds.get(module, float("inf"))
    items.sort(key=key)  # stable: each module's own order is kept


# A run that CI ends at its time limit prints no summary: the main process
# (under pytest-xdist, the one the workers report to) names a failed test as
# soon as it is reported, and a test still running after
# MC_TEST_REPORT_SLOW_SECONDS (600 unless set; 0 turns it off) once, so that
# the log says which test failed and which one held the run. (In one
# process, pytest captures what a test's thread writes meanwhile, the
# second line with it.)
_MAIN = "PYTEST_XDIST_WORKER" not in os.environ
_started = {}
_said_slow = set()


def _tell(text):
    sys.stderr.write(f"\n[suite {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def pytest_runtest_logstart(nodeid, location):
    if _MAIN:
        _started[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid, location):
    _started.pop(nodeid, None)


_any_failed = []


def pytest_runtest_logreport(report):
    if report.failed and _MAIN:
        _any_failed.append(report.nodeid)
        _tell(f"FAILED {report.nodeid} ({report.when}, after {report.duration:.0f} s)")


def pytest_sessionstart(session):
    text = os.environ.get("MC_TEST_REPORT_SLOW_SECONDS", "600")
    try:
        slow = float(text)
    except ValueError:
        raise pytest.UsageError(f"MC_TEST_REPORT_SLOW_SECONDS={text!r}: a number of seconds (0 turns it off)")
    if slow <= 0 or not _MAIN:
        return

    def watch():
        while True:
            time.sleep(min(slow, 30))
            now = time.monotonic()
            for nodeid, t0 in list(_started.items()):
                if now - t0 >= slow and nodeid not in _said_slow:
                    _said_slow.add(nodeid)
                    _tell(f"still running after {now - t0:.0f} s: {nodeid}")

    threading.Thread(target=watch, name="slow-tests", daemon=True).start()


def new_vhost(prefix):
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", name)
    rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    return name


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The MariaDB server tests make their databases in: the run's
# (scripts/services.sh, MAGNUM_RS_DB_SERVER), or the machine's.
DB_SERVER = os.environ.get("MAGNUM_RS_DB_SERVER") or "mysql+pymysql://root@127.0.0.1:3306"
_DB = urllib.parse.urlsplit(DB_SERVER)
DB_HOST, DB_PORT = _DB.hostname or "127.0.0.1", _DB.port or 3306
_databases = []


def db_url(name, query="?charset=utf8"):
    """The SQLAlchemy URL of database `name` on the run's server."""
    return f"{DB_SERVER}/{name}{query}"


def mariadb_command(tool="mariadb"):
    """The command line (and environment) of MariaDB's `tool` (mariadb,
    mariadb-dump) against the run's server, as its administrator."""
    cmd = [tool, "--no-defaults", "-h", DB_HOST, "-P", str(DB_PORT), "-u", urllib.parse.unquote(_DB.username or "root")]
    env = dict(os.environ, MYSQL_PWD=urllib.parse.unquote(_DB.password)) if _DB.password else None
    return cmd, env


def mysql_admin(**kw):
    import pymysql

    return pymysql.connect(host=DB_HOST, port=DB_PORT, user=urllib.parse.unquote(_DB.username or "root"),
                           password=urllib.parse.unquote(_DB.password or ""), autocommit=True, **kw)


def new_database(prefix, build="rust", revision="b3e1cf4a2d5e"):
    """A fresh MariaDB database with Magnum's schema, built by our
    `magnum-conductor db-create` (build="rust"), by Magnum 23.0.0's own
    `magnum-db-manage upgrade` (build="magnum") or Magnum 22.0.0's
    (build="magnum22"). Dropped when the test process exits."""
    name = f"mc_{prefix}_{uuid.uuid4().hex[:8]}"
    with mysql_admin() as c, c.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    _databases.append(name)
    url = db_url(name)
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(f"[database]\nconnection = {url}\n")
    try:
        if build == "rust":
            cmd = [CONDUCTOR_BIN, "--config-file", f.name, "db-create", "--revision", revision]
        else:
            venv = VENV22_BIN if build == "magnum22" else VENV_BIN
            cmd = [os.path.join(venv, "magnum-db-manage"), "--config-file", f.name, "upgrade", revision]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(f.name)
    return url


@atexit.register
def _drop_databases():
    if not _databases:
        return
    try:
        with mysql_admin() as c, c.cursor() as cur:
            for name in _databases:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    except Exception:
        pass


_session_db = []


def session_db_url():
    if not _session_db:
        _session_db.append(new_database("session"))
    return _session_db[0]


def write_conf(path, vhost, extra_default="", rabbit="", extra="", db_url=None):
    with open(path, "w") as f:
        f.write(
            f"[DEFAULT]\ntransport_url = {broker_url(vhost)}\n"
            f"rpc_response_timeout = 15\nhost = test-host\n{extra_default}\n"
            f"[conductor]\nworkers = 1\n"
            f"[database]\nconnection = {db_url or session_db_url()}\n"
            f"[certificates]\ncert_manager_type = x509keypair\n"
            f"[oslo_messaging_rabbit]\n{rabbit}\n{extra}\n"
        )


# The escape codes of the conductor's coloured log lines.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log_tail(path, lines=25):
    """The last lines of a log, for a failure message (CI keeps only what
    pytest prints)."""
    try:
        with open(path, "rb") as f:
            text = f.read()[-20000:].decode(errors="replace")
    except OSError as e:
        return f"({path}: {e})"
    return "\n".join(text.splitlines()[-lines:])


class Conductor:
    """Our conductor as a subprocess, with its metrics endpoint."""

    def __init__(self, conf_path, metrics_port, log_path, env=None, wait=True, failpoint=None, prefix=(),
                 binary=None):
        """`failpoint`: MAGNUM_CONDUCTOR_FAILPOINT, armed if given; `prefix`: a
        command the conductor runs under (one that execs it: the pid stays);
        `binary`: another build than the suite's (a benchmark's before)."""
        self.metrics_url = f"http://127.0.0.1:{metrics_port}"
        self.log = open(log_path, "a")
        env = dict(os.environ, **(env or {}))
        if failpoint:
            env["MAGNUM_CONDUCTOR_FAILPOINT"] = failpoint
        self.proc = subprocess.Popen([*prefix, binary or CONDUCTOR_BIN, "--config-file", conf_path], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        self.server_id = self.wait_ready()["server"] if wait else None

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"conductor exited with {self.proc.returncode}; see {self.log.name}:\n"
                                   + log_tail(self.log.name))
            try:
                with urllib.request.urlopen(self.metrics_url + "/readyz", timeout=2) as r:
                    return json.loads(r.read())
            except Exception:
                time.sleep(0.1)
        raise RuntimeError("conductor not ready")

    def metric(self, name, **labels):
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_metric(self, name, at_least, timeout=10, **labels):
        """The metric once it reaches `at_least` (what the conductor observes
        after a row write, such as an operation's duration, lands a moment
        after a reader sees the row)."""
        deadline = time.time() + timeout
        while (v := self.metric(name, **labels)) < at_least:
            assert time.time() < deadline, f"{name}{labels} = {v}, not >= {at_least} after {timeout} s"
            time.sleep(0.1)
        return v

    def metric_or_none(self, name, **labels):
        """The metric, or None while the endpoint is not up yet."""
        try:
            return self.metric(name, **labels)
        except OSError:
            return None

    def readyz_status(self):
        try:
            with urllib.request.urlopen(self.metrics_url + "/readyz", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def stop(self):
        """SIGTERM, as systemd stops it; the exit code. A conductor still
        running 30 s later is killed (and reaped, so its port is free) and
        `killed_after_sigterm` says so: callers that restart it fail on that
        rather than on the next start."""
        self.killed_after_sigterm = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.killed_after_sigterm = True
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode


def wait_for_consumers(vhost, expected, timeout=90):
    """Wait until the vhost's channels hold `expected` consumers. Counted per
    channel because RabbitMQ 3.10's list_consumers leaves stream consumers out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = [r.split("\t") for r in rabbitmqctl("list_channels", "vhost", "consumer_count").splitlines()[1:]]
        if sum(int(n) for v, n in rows if v == vhost) >= expected:
            time.sleep(1)  # let any last declaration land
            return
        time.sleep(0.5)
    raise AssertionError(f"{expected} consumers never appeared in {vhost}")


class PythonConductor:
    """The real Python magnum-conductor from the venv, in its own process group."""

    def __init__(self, conf, log_path, prefix=()):
        """`prefix`: a command the conductor runs under (one that execs it)."""
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([*prefix, os.path.join(VENV_BIN, "magnum-conductor"), "--config-file", conf],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self):
        # Its oslo.service master does not always act on SIGTERM quickly; what
        # it leaves on the broker is the same either way, so kill the group.
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.log.close()


def start_conductor(tmpdir, vhost, rabbit="", extra_default="", env=None):
    conf = os.path.join(tmpdir, "rust.conf")
    port = free_port()
    write_conf(conf, vhost, extra_default=extra_default, rabbit=rabbit, extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
    return Conductor(conf, port, os.path.join(tmpdir, "rust-conductor.log"), env=env)


_client_ready = {}


def magnum_client(conf_path):
    """Initialise Magnum's own RPC layer (once per process) from a config file."""
    if "conf" in _client_ready:
        assert _client_ready["conf"] == conf_path, "one client configuration per test process"
        return
    from magnum.common import service as magnum_service

    magnum_service.prepare_service(["magnum-api", "--config-file", conf_path])
    _client_ready["conf"] = conf_path


def magnum_client_close():
    """Stop Magnum's RPC layer in this process (its reply listener would
    otherwise retry a deleted virtual host, logging, until the process
    exits)."""
    from magnum.common import rpc

    if rpc.TRANSPORT is not None:
        rpc.TRANSPORT.cleanup()


def context(**kw):
    from magnum.common import context as mctx

    defaults = dict(user_id="2f1c0a6b9c2d4e7f8a1b2c3d4e5f6a7b", project_id="9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5",
                    is_admin=False, auth_token="gAAAAABtoken", user_name="demo", project_name="demo")
    defaults.update(kw)
    return mctx.make_context(**defaults)


@pytest.fixture(scope="session")
def session_tmp():
    with tempfile.TemporaryDirectory(prefix="mc-py-") as d:
        yield d
