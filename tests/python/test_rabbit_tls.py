"""RabbitMQ over TLS, as operators run it: a second RabbitMQ node started by the
test with only a TLS listener that requires client certificates
(`verify_peer`, `fail_if_no_peer_cert`). Our conductor connects with
`[oslo_messaging_rabbit] ssl`, `ssl_ca_file`, `ssl_cert_file`, `ssl_key_file`
and answers Magnum's own client, which connects with the same options; a wrong
CA or a missing client certificate never falls back to plaintext: the
conductor keeps retrying, stays unready, counts the failures and stays up.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import Conductor, free_port, session_db_url

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = "mctls@localhost"
TLS_PORT = 5691
DIST_PORT = 25691
# Its own epmd (the machine's, if it runs one, is not touched); the node,
# its epmd and rabbitmqctl agree on this port.
EPMD_PORT = free_port()


def sh(*args):
    subprocess.run(args, check=True, capture_output=True)


def make_certs(d):
    """A CA, the broker's certificate (localhost, 127.0.0.1), a client
    certificate from the same CA, and an unrelated CA."""
    def cert(name, cn, ca=None, ext=None):
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr",
           "-subj", f"/CN={cn}")
        if ca is None:
            sh("openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-signkey", f"{d}/{name}.key", "-days", "2",
               "-out", f"{d}/{name}.pem", "-extfile", f"{d}/ca.cnf")
        else:
            sh("openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/{ca}.pem", "-CAkey", f"{d}/{ca}.key",
               "-CAcreateserial", "-days", "2", "-out", f"{d}/{name}.pem", *(["-extfile", ext] if ext else []))

    with open(f"{d}/ca.cnf", "w") as f:
        f.write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
    with open(f"{d}/server.cnf", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    with open(f"{d}/client.cnf", "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    cert("ca", "mc-test-ca")
    cert("other-ca", "mc-other-ca")
    cert("server", "localhost", ca="ca", ext=f"{d}/server.cnf")
    cert("client", "magnum-conductor", ca="ca", ext=f"{d}/client.cnf")


def rabbitmqctl_node(*args, check=True):
    return subprocess.run(["rabbitmqctl", "-n", NODE, *args], capture_output=True, text=True, check=check,
                          env=dict(os.environ, ERL_EPMD_PORT=str(EPMD_PORT)))


@pytest.fixture(scope="module")
def broker():
    rabbitmqctl_node("stop", check=False)  # a node left by an interrupted run
    d = tempfile.mkdtemp(prefix="mc-rabbit-tls-")
    os.chmod(d, 0o755)  # the broker runs as the rabbitmq user
    make_certs(d)
    with open(f"{d}/rabbitmq.conf", "w") as f:
        f.write(f"listeners.tcp = none\nlisteners.ssl.default = {TLS_PORT}\n"
                f"ssl_options.cacertfile = {d}/ca.pem\nssl_options.certfile = {d}/server.pem\n"
                f"ssl_options.keyfile = {d}/server.key\nssl_options.verify = verify_peer\n"
                f"ssl_options.fail_if_no_peer_cert = true\n")
    with open(f"{d}/plugins", "w") as f:
        f.write("[].\n")
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            shutil.chown(os.path.join(root, n), "rabbitmq", "rabbitmq")
    os.chmod(f"{d}/server.key", 0o644)
    shutil.chown(d, "rabbitmq", "rabbitmq")
    env = dict(os.environ, RABBITMQ_NODENAME=NODE, RABBITMQ_DIST_PORT=str(DIST_PORT), ERL_EPMD_PORT=str(EPMD_PORT),
               RABBITMQ_CONFIG_FILE=f"{d}/rabbitmq.conf", RABBITMQ_MNESIA_BASE=f"{d}/mnesia",
               RABBITMQ_LOG_BASE=f"{d}/log", RABBITMQ_ENABLED_PLUGINS_FILE=f"{d}/plugins",
               RABBITMQ_PID_FILE=f"{d}/pid")
    subprocess.run(["rabbitmq-server", "-detached"], env=env, check=True, capture_output=True)
    deadline = time.time() + 90
    while True:
        if rabbitmqctl_node("list_users", check=False).returncode == 0 and port_open(TLS_PORT):
            break
        assert time.time() < deadline, f"the TLS RabbitMQ node did not start; see {d}/log"
        time.sleep(0.5)
    yield d
    rabbitmqctl_node("stop", check=False)
    subprocess.run(["epmd", "-kill"], env=dict(os.environ, ERL_EPMD_PORT=str(EPMD_PORT)), capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def conf(path, d, ca="ca", client_cert=True, metrics_port=None):
    rabbit = f"ssl = true\nssl_ca_file = {d}/{ca}.pem\n"
    if client_cert:
        rabbit += f"ssl_cert_file = {d}/client.pem\nssl_key_file = {d}/client.key\n"
    with open(path, "w") as f:
        f.write(f"[DEFAULT]\ntransport_url = rabbit://guest:guest@localhost:{TLS_PORT}/\n"
                f"rpc_response_timeout = 15\nhost = tls-host\n"
                f"[conductor]\nworkers = 1\n[database]\nconnection = {session_db_url()}\n"
                f"[certificates]\ncert_manager_type = x509keypair\n"
                f"[oslo_messaging_rabbit]\n{rabbit}"
                + (f"[metrics]\nlisten = 127.0.0.1:{metrics_port}\n" if metrics_port else ""))
    return path


def test_tls_with_client_certificate(broker, tmp_path):
    port = free_port()
    conductor = Conductor(conf(str(tmp_path / "rust.conf"), broker, metrics_port=port), port,
                          str(tmp_path / "conductor.log"))
    try:
        client_conf = conf(str(tmp_path / "client.conf"), broker)
        p = subprocess.run([sys.executable, os.path.join(HERE, "ping_load.py"), "--config-file", client_conf,
                            "--server", conductor.server_id, "--calls", "50", "--concurrency", "2",
                            "--warmup", "5", "--timeout", "10"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        calls = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        assert len(calls) == 50 and all(c["ok"] for c in calls), calls
        assert conductor.metric("magnum_conductor_amqp_connected") == 1
    finally:
        assert conductor.stop() == 0


@pytest.mark.parametrize("case", ["wrong CA", "no client certificate"])
def test_tls_failures_never_fall_back(broker, tmp_path, case):
    port = free_port()
    path = conf(str(tmp_path / "rust.conf"), broker, metrics_port=port,
                ca="other-ca" if case == "wrong CA" else "ca", client_cert=case != "no client certificate")
    conductor = Conductor(path, port, str(tmp_path / "conductor.log"), wait=False)
    try:
        deadline = time.time() + 30
        while conductor.metric_or_none("magnum_conductor_amqp_connect_failures_total") in (None, 0.0):
            assert conductor.proc.poll() is None, "the conductor must keep running"
            assert time.time() < deadline, "no connection failure counted"
            time.sleep(0.2)
        time.sleep(2)  # it keeps retrying, and keeps failing
        assert conductor.proc.poll() is None
        assert conductor.metric("magnum_conductor_amqp_connected") == 0
        assert conductor.metric("magnum_conductor_amqp_connect_failures_total") >= 1
        assert conductor.readyz_status() == 503
    finally:
        conductor.proc.send_signal(signal.SIGTERM)
        rc = conductor.proc.wait(30)
        conductor.log.close()
    assert rc == 0, "SIGTERM while disconnected is a clean exit"
    log = (tmp_path / "conductor.log").read_text()
    assert "guest:guest" not in log, "no credentials in logs"
