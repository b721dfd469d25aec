"""Shared fixtures: a broker vhost per test module, our conductor and the
real Python magnum-conductor as subprocesses, and Magnum's own RPC client."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
import warnings

import pytest

warnings.simplefilter("ignore")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONDUCTOR_BIN = os.environ.get("MAGNUM_CONDUCTOR_BIN", os.path.join(ROOT, "target", "debug", "magnum-conductor"))
VENV_BIN = os.path.dirname(os.path.realpath(__import__("sys").executable))


def rabbitmqctl(*args):
    out = subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60)
    return out.stdout


def new_vhost(prefix):
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", name)
    rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    return name


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_conf(path, vhost, extra_default="", rabbit="", extra=""):
    with open(path, "w") as f:
        f.write(
            f"[DEFAULT]\ntransport_url = rabbit://guest:guest@127.0.0.1:5672/{vhost}\n"
            f"rpc_response_timeout = 15\nhost = test-host\n{extra_default}\n"
            f"[conductor]\nworkers = 1\n"
            f"[database]\nconnection = sqlite:///{os.path.dirname(path)}/magnum.sqlite\n"
            f"[oslo_messaging_rabbit]\n{rabbit}\n{extra}\n"
        )


class Conductor:
    """Our conductor as a subprocess, with its metrics endpoint."""

    def __init__(self, conf_path, metrics_port, log_path):
        self.metrics_url = f"http://127.0.0.1:{metrics_port}"
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([CONDUCTOR_BIN, "--config-file", conf_path], stdout=self.log, stderr=subprocess.STDOUT)
        self.server_id = self.wait_ready()["server"]

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"conductor exited with {self.proc.returncode}; see {self.log.name}")
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

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        return self.proc.returncode


def start_conductor(tmpdir, vhost, rabbit="", extra_default=""):
    conf = os.path.join(tmpdir, "rust.conf")
    port = free_port()
    write_conf(conf, vhost, extra_default=extra_default, rabbit=rabbit, extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
    return Conductor(conf, port, os.path.join(tmpdir, "rust-conductor.log"))


_client_ready = {}


def magnum_client(conf_path):
    """Initialise Magnum's own RPC layer (once per process) from a config file."""
    if "conf" in _client_ready:
        assert _client_ready["conf"] == conf_path, "one client configuration per test process"
        return
    from magnum.common import service as magnum_service

    magnum_service.prepare_service(["magnum-api", "--config-file", conf_path])
    _client_ready["conf"] = conf_path


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
