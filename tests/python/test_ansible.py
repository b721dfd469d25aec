"""deploy/ansible: the magnum_conductor_rs role run by ansible-playbook
(ansible-core from PyPI) against localhost, in a test root.

systemd is not running on the test machine, so the role runs with
magnum_conductor_rs_manage_service=false (no start/enable/health gate through
systemd: said here and in the role's README); everything else is real: the
binary and config are installed, the unit is rendered and passes
`systemd-analyze verify`, the Python conductor's unit is kept for rollback,
the conductor started exactly as the unit's ExecStart says becomes ready
against the local RabbitMQ/MariaDB and the simulator, a second run changes
nothing, and rollback.yml restores the kept unit.

magnum-identities.yml (issue 53) applies both shipped identities with the
management cluster administrator's kubeconfig and writes a token
kubeconfig for each; the conductor's and the proxy's roles install those,
and both run under them.

Coexistence (magnum_conductor_rs_legacy_topic): the kept Python unit, here
Magnum 23.0.0's own magnum-conductor, runs beside ours as
magnum-conductor-legacy with the drop-in the role writes, and each consumes
its own topic; the role without the topic (the Python conductors retired)
and rollback.yml remove that unit."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import CONDUCTOR_BIN, ROOT, Conductor, free_port, rabbitmqctl
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


def playbook(root, name, extra, diff=False):
    inv = root.parent / "inventory.ini"
    inv.write_text(f"[magnum_all]\nlocalhost ansible_connection=local ansible_python_interpreter={ANSIBLE}/bin/python\n")
    p = subprocess.run([f"{ANSIBLE}/bin/ansible-playbook", "-i", str(inv), os.path.join(DEPLOY, name),
                        "-e", json.dumps(extra)] + (["--diff"] if diff else []), capture_output=True, text=True,
                       timeout=300,
                       env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=os.path.join(DEPLOY, "roles")))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0", p.stdout)
    assert recap, p.stdout[-2000:]
    return int(recap.group(2)), p.stdout


@pytest.fixture(scope="module")
def identities(env, tmp_path_factory):
    """magnum-identities.yml run against the management cluster with its
    administrator's kubeconfig: the directory of the identities'
    kubeconfigs it wrote (as on the deploy host), and its first run's
    (changed, output)."""
    dest = tmp_path_factory.mktemp("identities") / "magnum-identities"
    extra = {"magnum_identities_hosts": "localhost", "magnum_identities_admin_kubeconfig": env.sim.cp.kubeconfig,
             "magnum_identities_kubectl": shutil.which("kubectl"), "magnum_identities_dest": str(dest)}
    first = playbook(dest.parent / "root", "magnum-identities.yml", extra, diff=True)
    return dest, extra, first


def test_the_identities_playbook_gives_each_host_a_token_of_its_identity_only(env, identities):
    """Both shipped identities applied by the playbook, a kubeconfig each
    holding a token of its ServiceAccount and the cluster's CA only (mode
    0600 on the deploy host), the conductor's granting exactly what
    `check` asks (its `rights` line), nothing an administrator has; a
    second run changes nothing."""
    dest, extra, (changed, out) = identities
    assert changed >= 2, out
    assert oct(dest.stat().st_mode & 0o777) == "0o700"
    for name in ("magnum-conductor", "magnum-capi-proxy"):
        path = dest / f"{name}.kubeconfig"
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        kc = yaml.safe_load(path.read_text())
        [user] = kc["users"]
        assert set(user["user"]) == {"token"}, "a token and nothing else"
        assert user["user"]["token"] not in out, "the token in the playbook's output"
        assert kc["clusters"][0]["cluster"]["server"] == env.sim.cp.server
        who = subprocess.run(["kubectl", "--kubeconfig", str(path), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
                             capture_output=True, text=True, timeout=60)
        assert who.stdout == f"system:serviceaccount:magnum-system:{name}", who.stdout + who.stderr
        # No administrator's right: nodes are nobody's business here.
        can = subprocess.run(["kubectl", "--kubeconfig", str(path), "auth", "can-i", "list", "nodes"],
                             capture_output=True, text=True, timeout=60)
        assert can.stdout.strip() == "no", can.stdout + can.stderr
    conf = dest.parent / "check.conf"
    conf.write_text(re.sub(r"kubeconfig = \S+", f"kubeconfig = {dest / 'magnum-conductor.kubeconfig'}",
                           open(env.conf).read()))
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", str(conf), "check"], capture_output=True, text=True,
                       timeout=120)
    rights = [ln for ln in p.stdout.splitlines() if ln.split()[1:2] == ["rights"]]
    assert rights and rights[0].split()[0] == "OK", p.stdout + p.stderr
    changed, out = playbook(dest.parent / "root", "magnum-identities.yml", extra)
    assert changed == 0, out


def os_magnum(env, tmp_path, python_unit, identities):
    """A test root as os_magnum leaves a host: magnum.conf (database,
    broker) and the Python conductor's unit. Returns (root, units dir, the
    role's variables, our metrics port); the role installs the conductor's
    kubeconfig from `identities` (magnum-identities.yml's)."""
    root = tmp_path / "root"
    etc = root / "etc" / "magnum"
    etc.mkdir(parents=True)
    conf = open(env.conf).read()
    conf = re.sub(r"\[metrics\]\nlisten = \S+\n", "", conf)
    conf = re.sub(r"kubeconfig = \S+\n", "", conf)
    (etc / "magnum.conf").write_text(conf)
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    (units / "magnum-conductor.service").write_text(python_unit)
    port = free_port()
    extra = {
        "magnum_conductor_rs_root": str(root),
        "magnum_conductor_rs_binary_src": CONDUCTOR_BIN,
        "magnum_conductor_rs_manage_service": False,
        "magnum_conductor_rs_owner": "root", "magnum_conductor_rs_group": "root",
        "magnum_conductor_rs_metrics_listen": f"127.0.0.1:{port}",
        "magnum_conductor_rs_kubeconfig_src": str(identities[0] / "magnum-conductor.kubeconfig"),
        "magnum_conductor_rs_config_overrides": {
            "capi": {"lease_duration": 5, "os_distros": ["ubuntu", "rockylinux"]},
        },
    }
    return root, units, extra, port


def start_as_unit(unit, root, log_path, port=None, env=None):
    """Start what a unit's ExecStart says: ours (given its metrics port),
    with its paths under the test root, or the Python conductor's (the test
    wrote its real paths) with the unit's environment."""
    exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    argv = shlex.split(exec_start)
    if port is not None:  # ours: every path under the test root
        argv = [str(root) + a if a.startswith("/") else a for a in argv]
        assert argv[0] == str(root / "usr/local/bin/magnum-conductor-rs")
    script = log_path.with_suffix(".sh")
    script.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in argv) + "\n")
    script.chmod(0o755)
    if port is not None:
        return Conductor_from_argv(str(script), port, str(log_path))
    return subprocess.Popen([str(script)], stdout=open(log_path, "a"), stderr=subprocess.STDOUT,
                            env=dict(os.environ, **(env or {})), start_new_session=True)


def test_the_role_installs_a_ready_conductor_idempotently_and_rolls_back(env, identities, tmp_path):
    root, units, extra, port = os_magnum(env, tmp_path, PYTHON_UNIT, identities)
    etc = root / "etc" / "magnum"
    changed, out = playbook(root, "magnum-conductor-rs.yml", extra, diff=True)
    assert changed >= 4, out
    token = yaml.safe_load((identities[0] / "magnum-conductor.kubeconfig").read_text())["users"][0]["user"]["token"]
    assert token not in out, "the identity's token in the role's --diff output"
    unit = (units / "magnum-conductor.service").read_text()
    assert "managed by magnum_conductor_rs" in unit
    assert (units / "magnum-conductor.service.python").read_text() == PYTHON_UNIT, "kept for rollback"
    assert "User=magnum" in unit and "ProtectSystem=strict" in unit
    rendered = (etc / "magnum-conductor.conf.d" / "50-magnum-conductor-rs.conf").read_text()
    assert f"listen = 127.0.0.1:{port}" in rendered and "os_distros = ubuntu,rockylinux" in rendered
    # The conductor's identity: its kubeconfig installed for os_magnum's
    # group only, and named in the one [capi] section.
    kubeconfig = root / "etc/magnum/magnum-conductor-rs.kubeconfig"
    assert kubeconfig.read_text() == (identities[0] / "magnum-conductor.kubeconfig").read_text()
    assert oct(kubeconfig.stat().st_mode & 0o777) == "0o640"
    assert rendered.count("[capi]") == 1 and f"kubeconfig = {kubeconfig}\n" in rendered, rendered

    assert not (units / "magnum-conductor-legacy.service").exists(), "no legacy conductor without its topic"
    assert "legacy_topic" not in rendered

    # The unit's own ExecStart, under the test root, gives a ready conductor.
    c = start_as_unit(unit, root, tmp_path / "conductor.log", port=port)
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


def consumers(vhost):
    out = rabbitmqctl("list_queues", "-p", vhost, "name", "consumers")
    rows = (line.split() for line in out.splitlines())
    return {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit()}  # (no header row)


def test_coexistence_runs_the_python_conductor_on_the_legacy_topic_until_retired(env, identities, tmp_path):
    """Migration step 1 with the role, then step 5 and the rollback."""
    legacy = "magnum-conductor-legacy"
    magnum_conductor = os.path.join(os.path.dirname(sys.executable), "magnum-conductor")
    python_unit = PYTHON_UNIT.replace("/openstack/venvs/magnum-29.0.0/bin/magnum-conductor",
                                      f"{magnum_conductor} --config-file {tmp_path}/root/etc/magnum/magnum.conf")
    root, units, extra, port = os_magnum(env, tmp_path, python_unit, identities)
    extra["magnum_conductor_rs_legacy_topic"] = legacy
    extra["magnum_conductor_rs_config_overrides"]["conductor"] = {"max_message_bytes": 2097152}
    changed, out = playbook(root, "magnum-conductor-rs.yml", extra)
    rendered = (root / "etc/magnum/magnum-conductor.conf.d/50-magnum-conductor-rs.conf").read_text()
    # One [conductor] section: the operator's option and the legacy topic.
    assert rendered.count("[conductor]") == 1, rendered
    section = rendered.split("[conductor]\n", 1)[1].split("\n\n", 1)[0].strip()
    assert sorted(section.split("\n")) == ["legacy_topic = " + legacy, "max_message_bytes = 2097152"], rendered
    kept = units / "magnum-conductor.service.python"
    assert (units / f"{legacy}.service").read_text() == kept.read_text() == python_unit
    dropin = (units / f"{legacy}.service.d" / "50-legacy-topic.conf").read_text()
    assert f"\nEnvironment=OS_CONDUCTOR__TOPIC={legacy}\n" in dropin, dropin

    # Both, started as their units say: ours consumes magnum-conductor, the
    # Python one (its unit's environment) the legacy topic.
    ours = start_as_unit((units / "magnum-conductor.service").read_text(), root, tmp_path / "ours.log", port=port)
    main = consumers(env.vhost).get("magnum-conductor", 0)
    assert main >= 1
    environment = dict(line.split("=", 1) for line in re.findall(r"^Environment=(.*)$", dropin, re.M))
    python = start_as_unit(python_unit, root, tmp_path / "python-conductor.log", env=environment)
    try:
        deadline = time.time() + 90
        while consumers(env.vhost).get(legacy, 0) < 1:
            assert python.poll() is None, (tmp_path / "python-conductor.log").read_text()[-3000:]
            assert time.time() < deadline, "the legacy conductor does not consume its topic"
            time.sleep(0.5)
        assert consumers(env.vhost).get("magnum-conductor") == main, "nothing but ours on the main topic"
    finally:
        # (oslo.service gives its workers up to 60 s after SIGTERM.)
        os.killpg(python.pid, signal.SIGTERM)
        try:
            python.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(python.pid, signal.SIGKILL)
            python.wait(10)
        assert ours.stop() == 0

    # A second run changes nothing.
    changed, out = playbook(root, "magnum-conductor-rs.yml", extra)
    assert changed == 0, out

    # Retired (the role without the topic): the legacy unit goes, and so
    # does our option.
    changed, out = playbook(root, "magnum-conductor-rs.yml", dict(extra, magnum_conductor_rs_legacy_topic=""))
    assert not (units / f"{legacy}.service").exists() and not (units / f"{legacy}.service.d").exists()
    assert "legacy_topic" not in (root / "etc/magnum/magnum-conductor.conf.d/50-magnum-conductor-rs.conf").read_text()

    # Coexisting again, then rolled back: the Python unit is back on the
    # main topic and the legacy unit is gone.
    playbook(root, "magnum-conductor-rs.yml", extra)
    assert (units / f"{legacy}.service").exists()
    playbook(root, "rollback.yml", {"magnum_conductor_rs_root": str(root), "magnum_conductor_rs_manage_service": False})
    assert (units / "magnum-conductor.service").read_text() == python_unit
    assert not (units / f"{legacy}.service").exists() and not (units / f"{legacy}.service.d").exists()

    # os_magnum upgraded (its unit now runs a new venv), then the role again:
    # the legacy conductor and rollback run the new Python unit, not the one
    # kept first.
    upgraded = python_unit.replace("os_magnum)", "os_magnum, upgraded)")
    (units / "magnum-conductor.service").write_text(upgraded)
    playbook(root, "magnum-conductor-rs.yml", extra)
    assert "managed by magnum_conductor_rs" in (units / "magnum-conductor.service").read_text()
    assert (units / "magnum-conductor.service.python").read_text() == upgraded
    assert (units / f"{legacy}.service").read_text() == upgraded


def test_the_proxy_role_installs_a_healthy_proxy_with_only_cap_sys_admin(env, identities, tmp_path):
    """deploy/ansible/magnum-capi-proxy.yml: the binary, the management
    cluster's kubeconfig and the unit, which runs as its own user with
    CAP_SYS_ADMIN alone (setns into the network namespaces); started as its
    ExecStart says it is healthy against the management cluster; a second
    run changes nothing; without a kubeconfig the role stops and says so."""
    proxy_bin = os.path.join(os.path.dirname(CONDUCTOR_BIN), "magnum-capi-proxy")
    root = tmp_path / "root"
    port = free_port()
    extra = {
        "magnum_capi_proxy_hosts": "magnum_all",
        "magnum_capi_proxy_root": str(root),
        "magnum_capi_proxy_binary_src": proxy_bin,
        "magnum_capi_proxy_kubeconfig_src": str(identities[0] / "magnum-capi-proxy.kubeconfig"),
        "magnum_capi_proxy_manage_service": False,
        "magnum_capi_proxy_create_user": False,
        "magnum_capi_proxy_owner_group": "root",
        "magnum_capi_proxy_listen": f"127.0.0.1:{free_port()}",
        "magnum_capi_proxy_advertise_address": "198.18.9.1:6443",
        "magnum_capi_proxy_metrics_listen": f"127.0.0.1:{port}",
        "magnum_capi_proxy_host_name": "network-1",
    }
    # The conductors make their Lease namespace; here they may not have run.
    if env.sim.get("/api/v1/namespaces/magnum-system") is None:
        env.sim.create_namespace("magnum-system", {})
    changed, out = playbook(root, "magnum-capi-proxy.yml", extra, diff=True)
    assert changed >= 4, out
    token = yaml.safe_load((identities[0] / "magnum-capi-proxy.kubeconfig").read_text())["users"][0]["user"]["token"]
    assert token not in out, "the identity's token in the role's --diff output"
    unit = (root / "etc/systemd/system/magnum-capi-proxy.service").read_text()
    assert "User=magnum-capi-proxy" in unit
    caps = re.findall(r"^(AmbientCapabilities|CapabilityBoundingSet)=(.*)$", unit, re.M)
    assert caps == [("AmbientCapabilities", "CAP_SYS_ADMIN"), ("CapabilityBoundingSet", "CAP_SYS_ADMIN")], caps
    assert "NoNewPrivileges=true" in unit and "RestrictNamespaces=net" in unit
    kubeconfig = root / "etc/magnum-capi-proxy/kubeconfig"
    assert oct(kubeconfig.stat().st_mode & 0o777) == "0o640"

    # The unit's ExecStart, under the test root: healthy (watches synced, passes run).
    argv = shlex.split(re.search(r"^ExecStart=(.*)$", unit, re.M).group(1))
    argv = [str(root) + a if a.startswith("/etc") or a.startswith("/usr") else a for a in argv]
    log = open(tmp_path / "proxy.log", "w")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while True:
            assert p.poll() is None, (tmp_path / "proxy.log").read_text()[-2000:]
            try:
                import urllib.request
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            assert time.time() < deadline, (tmp_path / "proxy.log").read_text()[-2000:]
            time.sleep(0.2)
        # Its Lease in the conductors' namespace names this host.
        lease = env.sim.get("/apis/coordination.k8s.io/v1/namespaces/magnum-system/leases/"
                            "magnum-capi-proxy-network-1")
        assert lease["spec"]["holderIdentity"] == "network-1", lease
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
        log.close()

    changed, out = playbook(root, "magnum-capi-proxy.yml", extra)
    assert changed == 0, out

    inv = root.parent / "inventory.ini"
    bad = dict(extra, magnum_capi_proxy_kubeconfig_src="")
    r = subprocess.run([f"{ANSIBLE}/bin/ansible-playbook", "-i", str(inv), os.path.join(DEPLOY, "magnum-capi-proxy.yml"),
                        "-e", json.dumps(bad)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=os.path.join(DEPLOY, "roles")))
    assert r.returncode != 0 and "magnum_capi_proxy_kubeconfig_src" in r.stdout, r.stdout[-2000:]


def test_the_api_driver_role_installs_the_package_into_os_magnums_venv(env, tmp_path):
    """deploy/ansible/magnum-api-driver.yml: the package lands in
    os_magnum's venv with its `magnum.drivers` entry point, a second run
    changes nothing, and a magnum.conf whose templates would default to
    flannel stops the role naming the option and the fix."""
    root = tmp_path / "root"
    etc = root / "etc" / "magnum"
    etc.mkdir(parents=True)
    (etc / "magnum.conf").write_text("[DEFAULT]\ndebug = false\n[cluster_template]\n"
                                     "kubernetes_default_network_driver = flannel\n"
                                     "kubernetes_default_network_driver = calico\n[api]\nport = 9511\n")
    venv = "/openstack/venvs/magnum-test"
    subprocess.run([sys.executable, "-m", "venv", str(root) + venv], check=True, capture_output=True)
    extra = {"magnum_api_driver_hosts": "magnum_all", "magnum_api_driver_root": str(root),
             "magnum_api_driver_venv": venv, "magnum_api_driver_manage_service": False}
    changed, out = playbook(root, "magnum-api-driver.yml", extra)
    assert changed >= 2, out
    probe = ("import importlib.metadata as m; "
             "print([e.value for e in m.entry_points(group='magnum.drivers') if e.name == 'k8s_capi_rust'])")
    p = subprocess.run([f"{root}{venv}/bin/python", "-c", probe], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "['magnum_capi_rust.driver:Driver']", p.stdout + p.stderr
    changed, out = playbook(root, "magnum-api-driver.yml", extra)
    assert changed == 0, out

    (etc / "magnum.conf").write_text("[DEFAULT]\nkubernetes_default_network_driver = calico\n[cluster_template]\n"
                                     "kubernetes_allowed_network_drivers = calico\n")
    inv = root.parent / "inventory.ini"
    r = subprocess.run([f"{ANSIBLE}/bin/ansible-playbook", "-i", str(inv), os.path.join(DEPLOY, "magnum-api-driver.yml"),
                        "-e", json.dumps(extra)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=os.path.join(DEPLOY, "roles")))
    assert r.returncode != 0 and "kubernetes_default_network_driver = flannel" in r.stdout, r.stdout[-2000:]
