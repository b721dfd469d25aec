"""deploy/ansible: the magnum_conductor_rs role run by ansible-playbook
(ansible-core from PyPI) against localhost, in a test root.

systemd is not running on the test machine, so the role runs with
magnum_conductor_rs_manage_service=false (no start/enable/health gate through
systemd: said here and in the role's README); everything else is real: the
binary and config are installed, the unit is rendered and passes
`systemd-analyze verify`, the Python conductor's unit is kept for rollback,
the conductor started exactly as the unit's ExecStart says becomes ready
against the local RabbitMQ/MariaDB and the simulator, a second run changes
nothing, and rollback.yml restores the kept unit."""
import json
import os
import re
import shlex
import subprocess

import pytest

from conftest import CONDUCTOR_BIN, ROOT, Conductor, free_port
from test_lifecycle import Env

ANSIBLE = os.environ.get("ANSIBLE_VENV", os.path.expanduser("~/.cache/magnum-conductor-rs/venv-ansible-core-2.17"))
DEPLOY = os.path.join(ROOT, "deploy", "ansible")
PYTHON_UNIT = """[Unit]
Description=magnum-conductor service (os_magnum)
[Service]
ExecStart=/openstack/venvs/magnum-29.0.0/bin/magnum-conductor
User=magnum
[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("ansible"), "v1beta1")
    e.conductor.stop()  # the role's conductor is the one under test
    yield e
    e.close()


def playbook(root, name, extra):
    inv = root.parent / "inventory.ini"
    inv.write_text(f"[magnum_all]\nlocalhost ansible_connection=local ansible_python_interpreter={ANSIBLE}/bin/python\n")
    p = subprocess.run([f"{ANSIBLE}/bin/ansible-playbook", "-i", str(inv), os.path.join(DEPLOY, name),
                        "-e", json.dumps(extra)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=os.path.join(DEPLOY, "roles")))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0", p.stdout)
    assert recap, p.stdout[-2000:]
    return int(recap.group(2)), p.stdout


def test_the_role_installs_a_ready_conductor_idempotently_and_rolls_back(env, tmp_path):
    root = tmp_path / "root"
    etc = root / "etc" / "magnum"
    etc.mkdir(parents=True)
    # os_magnum's magnum.conf (database, broker) and its Python conductor unit.
    conf = open(env.conf).read()
    conf = re.sub(r"\[metrics\]\nlisten = \S+\n", "", conf)
    conf = re.sub(r"kubeconfig = \S+\n", "", conf)
    (etc / "magnum.conf").write_text(conf)
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    (units / "magnum-conductor.service").write_text(PYTHON_UNIT)
    port = free_port()
    extra = {
        "magnum_conductor_rs_root": str(root),
        "magnum_conductor_rs_binary_src": CONDUCTOR_BIN,
        "magnum_conductor_rs_manage_service": False,
        "magnum_conductor_rs_owner": "root", "magnum_conductor_rs_group": "root",
        "magnum_conductor_rs_metrics_listen": f"127.0.0.1:{port}",
        "magnum_conductor_rs_config_overrides": {
            "capi": {"kubeconfig": env.sim.kubeconfig, "lease_duration": 5, "os_distros": ["ubuntu", "rockylinux"]},
        },
    }
    changed, out = playbook(root, "magnum-conductor-rs.yml", extra)
    assert changed >= 4, out
    unit = (units / "magnum-conductor.service").read_text()
    assert "managed by magnum_conductor_rs" in unit
    assert (units / "magnum-conductor.service.python").read_text() == PYTHON_UNIT, "kept for rollback"
    assert "User=magnum" in unit and "ProtectSystem=strict" in unit
    rendered = (etc / "magnum-conductor.conf.d" / "50-magnum-conductor-rs.conf").read_text()
    assert f"listen = 127.0.0.1:{port}" in rendered and "os_distros = ubuntu,rockylinux" in rendered

    # The unit's own ExecStart, under the test root, gives a ready conductor.
    exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    argv = [str(root) + a if a.startswith("/") else a for a in shlex.split(exec_start)]
    assert argv[0] == str(root / "usr/local/bin/magnum-conductor-rs")
    script = tmp_path / "start.sh"
    script.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in argv) + "\n")
    script.chmod(0o755)
    c = Conductor_from_argv(str(script), port, str(tmp_path / "conductor.log"))
    try:
        assert c.readyz_status() == 200
    finally:
        assert c.stop() == 0

    # A second run changes nothing.
    changed, out = playbook(root, "magnum-conductor-rs.yml", extra)
    assert changed == 0, out

    # Rollback: the Python conductor's unit is back.
    changed, out = playbook(root, "rollback.yml", {"magnum_conductor_rs_root": str(root),
                                                   "magnum_conductor_rs_manage_service": False})
    assert (units / "magnum-conductor.service").read_text() == PYTHON_UNIT


class Conductor_from_argv(Conductor):
    """conftest.Conductor, started by a script (the unit's ExecStart)."""

    def __init__(self, script, port, log_path):
        import subprocess as sp
        import time
        self.metrics_url = f"http://127.0.0.1:{port}"
        self.log = open(log_path, "a")
        self.proc = sp.Popen([script], stdout=self.log, stderr=sp.STDOUT)
        self.server_id = self.wait_ready()["server"]
