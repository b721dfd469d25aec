"""`[database] connection` TLS parameters are honoured, never dropped.

A private MariaDB instance (its own datadir and port, started from the
installed mariadbd) serves TLS with a certificate for DNS:localhost signed by
CA "A", and requires secure transport. The conductor is started with
`[database] max_retries = 0` and each URL; the first line it prints tells
whether it got as far as reading the schema (connected) or not.
"""
import os
import shutil
import subprocess
import time

import pytest

from conftest import CONDUCTOR_BIN, broker_url, free_port


def sh(*args, cwd):
    subprocess.run(args, cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tlsdb"))
    for ca in ("caA", "caB"):
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
           "-days", "2", "-subj", f"/CN={ca}", cwd=d)
    sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
       "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost\n")
    sh("openssl", "x509", "-req", "-in", "server.csr", "-CA", "caA.pem", "-CAkey", "caA.key", "-CAcreateserial",
       "-out", "server.pem", "-days", "2", "-extfile", "ext", cwd=d)
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    sh("mariadb-install-db", "--no-defaults", f"--datadir={d}/data", "--user=root", "--skip-test-db",
       "--auth-root-authentication-method=normal", cwd=d)
    port = free_port()
    log = open(os.path.join(d, "server.log"), "w")
    proc = subprocess.Popen([mariadbd, "--no-defaults", f"--datadir={d}/data", "--user=root", f"--port={port}",
                             "--bind-address=127.0.0.1", f"--socket={d}/sock", f"--pid-file={d}/pid",
                             f"--ssl-ca={d}/caA.pem", f"--ssl-cert={d}/server.pem", f"--ssl-key={d}/server.key",
                             "--require-secure-transport=ON", "--skip-log-bin", "--innodb-buffer-pool-size=16M"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while "ready for connections" not in open(os.path.join(d, "server.log")).read():
        assert proc.poll() is None and time.time() < deadline, open(os.path.join(d, "server.log")).read()[-2000:]
        time.sleep(0.2)
    yield d, port
    proc.terminate()
    proc.wait(30)
    log.close()


def first_line(tmp_path, url):
    conf = str(tmp_path / "tls.conf")
    with open(conf, "w") as f:
        f.write(f"[DEFAULT]\ntransport_url = {broker_url('')}\n"
                f"[database]\nconnection = {url}\nmax_retries = 0\n[metrics]\nlisten =\n"
                "[certificates]\ncert_manager_type = x509keypair\n")
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", conf], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "panicked" not in p.stderr
    return next(ln for ln in p.stderr.splitlines() if ln.startswith("magnum-conductor:"))


CONNECTED = "no alembic_version table"  # got through TLS and authentication


def test_tls_parameters(tls_server, tmp_path):
    d, port = tls_server
    base = f"mysql+pymysql://root@127.0.0.1:{port}/mysql?charset=utf8"
    # The right CA: connected (the server refuses anything but TLS).
    assert CONNECTED in first_line(tmp_path, f"{base}&ssl_ca={d}/caA.pem&ssl_verify_cert=true")
    # A CA that did not sign the server: refused, no plaintext fallback.
    line = first_line(tmp_path, f"{base}&ssl_ca={d}/caB.pem&ssl_verify_cert=true")
    assert "cannot connect" in line and "UnknownIssuer" in line, line
    # ssl_ca alone also checks the host name (PyMySQL's check_hostname=True):
    # the certificate names localhost, not 127.0.0.1.
    line = first_line(tmp_path, f"{base}&ssl_ca={d}/caA.pem")
    assert "cannot connect" in line and "VerifyIdentity" in line, line
    assert CONNECTED in first_line(tmp_path, f"{base}&ssl_ca={d}/caA.pem&ssl_check_hostname=false")
    # No TLS parameters: PyMySQL 1.2's PREFERRED, encrypted when offered.
    assert CONNECTED in first_line(tmp_path, base)
    # TLS switched off: this server refuses plaintext, which shows the others were TLS.
    line = first_line(tmp_path, f"{base}&ssl_disabled=true")
    assert "cannot connect" in line, line
    # A TLS parameter we cannot honour is a startup error, never ignored.
    line = first_line(tmp_path, f"{base}&ssl_capath={d}")
    assert "ssl_capath" in line and "not supported" in line, line
