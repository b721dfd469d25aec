"""Cluster certificates through the real client, side by side with Magnum:

- `openstack coe cluster config`'s flow (python-magnumclient's CSR and
  kubeconfig) against our conductor, for CAs we generated; `openssl verify`;
- each CA type (kubernetes, etcd, front_proxy/front-proxy);
- keys cross languages: Magnum's x509 code decrypts and uses ours, we
  decrypt and sign with the CAs of Magnum's `generate_certificates_to_cluster`;
- a table of CSRs signed by our conductor (over RPC) and by Magnum's signer
  (in process) with the same CA: same certificate contents or same exception;
- bad CSRs are Magnum exceptions; rotation is refused with nothing written.
"""
import json
import os
import subprocess
import uuid

import pytest

import client_pool
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import (CONDUCTOR_BIN, free_port, mysql_admin, new_vhost, rabbitmqctl, session_db_url, start_conductor,
                      write_conf)

HERE = os.path.dirname(os.path.abspath(__file__))
DB_TOOL = os.environ.get("MC_DB_TOOL", os.path.join(os.path.dirname(CONDUCTOR_BIN), "mc-db-tool"))
PROJECT, USER = "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5", "2f1c0a6b9c2d4e7f8a1b2c3d4e5f6a7b"
REFS = ("ca_cert_ref", "etcd_ca_cert_ref", "front_proxy_ca_cert_ref", "magnum_cert_ref")


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


class Env:
    def __init__(self, tmp):
        self.tmp = tmp
        self.vhost = new_vhost("certs")
        self.conductor = start_conductor(str(tmp), self.vhost)
        self.conf = str(tmp / "client.conf")
        write_conf(self.conf, self.vhost)

    def tool(self, *args):
        return run_json([DB_TOOL, "--config-file", self.conf, *args])

    def client(self, *args):
        p = client_pool.run(os.path.join(HERE, "cert_client.py"), [self.conf, *args], timeout=180)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    def new_cluster(self, name):
        return self.tool("create", "cluster", json.dumps(dict(
            uuid=str(uuid.uuid4()), name=name, project_id=PROJECT, user_id=USER, status="CREATE_COMPLETE",
            api_address="https://10.0.0.10:6443", cluster_template_id=str(uuid.uuid4()))))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("certs"))
    ours = e.new_cluster("k8s-ours")
    e.ours = e.tool("gen-certs", ours["uuid"], PROJECT, USER)
    theirs = e.new_cluster("k8s-python")
    refs = e.client("py-generate", theirs["uuid"])
    assert all(refs[r] for r in REFS), refs
    e.theirs = e.tool("get", "cluster", theirs["uuid"])
    yield e
    assert e.conductor.stop() == 0
    rabbitmqctl("delete_vhost", e.vhost)


def write(tmp, name, text):
    p = tmp / name
    p.write_text(text)
    return str(p)


def openssl_verify(tmp, ca_pem, cert_pem):
    ca, cert = write(tmp, "ca.pem", ca_pem + "\n"), write(tmp, "cert.pem", cert_pem + "\n")
    p = subprocess.run(["openssl", "verify", "-CAfile", ca, cert], capture_output=True, text=True)
    return p.returncode == 0 and p.stdout.strip().endswith(": OK")


def test_coe_cluster_config(env, tmp_path):
    out = env.client("coe-config", env.ours["uuid"], str(tmp_path / "kube"))
    assert "error" not in out, out
    with open(out["config"]) as f:
        cfg = yaml.safe_load(f)
    cluster = cfg["clusters"][0]["cluster"]
    assert cluster["server"] == "https://10.0.0.10:6443"
    import base64
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    user = cfg["users"][0]["user"]
    cert = base64.b64decode(user["client-certificate-data"]).decode()
    key = base64.b64decode(user["client-key-data"]).decode()
    assert cfg["current-context"] == "default" and cfg["contexts"][0]["context"]["user"] == "admin"
    assert ca == out["ca"] and cert == out["cert"]
    assert openssl_verify(tmp_path, ca, cert)
    c = x509.load_pem_x509_certificate(cert.encode())
    assert c.subject.rfc4514_string() == "O=system:masters,CN=admin"
    assert c.issuer.rfc4514_string() == "CN=k8s-ours"
    k = serialization.load_pem_private_key(key.encode(), password=None)
    assert k.public_key().public_numbers() == c.public_key().public_numbers(), "the kubeconfig key matches its cert"
    assert not out["cert"].endswith("\n") and not out["ca"].endswith("\n")


def csr(key=None, cn="admin", org="system:masters", exts=()):
    key = key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        names.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    for value, critical in exts:
        b = b.add_extension(value, critical=critical)
    algo = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return b.sign(key, algo).public_bytes(serialization.Encoding.PEM).decode()


def test_each_ca_type(env, tmp_path):
    pems = {t: env.client("get-ca", env.ours["uuid"], t)["pem"] for t in ("-", "etcd", "front_proxy", "front-proxy")}
    assert pems["front_proxy"] == pems["front-proxy"]
    assert len({pems["-"], pems["etcd"], pems["front_proxy"]}) == 3
    assert env.client("get-ca", env.ours["uuid"], "kubernetes")["pem"] == pems["-"]
    f = write(tmp_path, "req.pem", csr())
    for t in ("-", "etcd", "front_proxy", "front-proxy"):
        [signed] = env.client("rpc-sign", env.ours["uuid"], t, f)
        assert "pem" in signed, signed
        assert openssl_verify(tmp_path, pems[t], signed["pem"]), t
        if t != "-":
            assert not openssl_verify(tmp_path, pems["-"], signed["pem"]), "signed by the wrong CA"
    got = env.client("get-ca", env.ours["uuid"], "-")
    assert (got["cluster_uuid"], got["project_id"], got["user_id"]) == (env.ours["uuid"], PROJECT, USER)


def test_keys_cross_languages(env, tmp_path):
    for cluster in (env.ours, env.theirs):
        for ref in REFS:
            assert env.client("py-decrypt", cluster[ref])["spki"] == env.tool("decrypt-key", cluster[ref]), ref
    f = write(tmp_path, "req.pem", csr())
    # We sign with Magnum's CA; Magnum signs with ours.
    for cluster, how in ((env.theirs, "rpc-sign"), (env.ours, "py-sign")):
        [signed] = env.client(how, cluster["uuid"], "-", f)
        ca = env.client("get-ca", cluster["uuid"], "-")["pem"]
        assert openssl_verify(tmp_path, ca, signed["pem"]), how
    # Python's stored rows and ours look alike.
    with mysql_admin() as c, c.cursor() as cur:
        db = session_db_url().rsplit("/", 1)[1].split("?")[0]
        rows = {}
        for cluster in (env.ours, env.theirs):
            cur.execute(f"SELECT certificate, private_key, private_key_passphrase, intermediates, project_id, user_id "
                        f"FROM `{db}`.x509keypair WHERE uuid=%s", (cluster["ca_cert_ref"],))
            rows[cluster["name"]] = cur.fetchone()
    for cert, key, pw, inter, project, user in rows.values():
        assert cert.startswith("-----BEGIN CERTIFICATE-----\n") and cert.endswith("-----END CERTIFICATE-----")
        assert key.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----\n") and key.endswith("-----END ENCRYPTED PRIVATE KEY-----\n")
        assert len(pw) == 12 and pw == pw.lower() and inter is None and (project, user) == (PROJECT, USER)


def ext_summary(pem):
    c = x509.load_pem_x509_certificate(pem.encode())
    return {
        "subject": c.subject.rfc4514_string(),
        "issuer": c.issuer.rfc4514_string(),
        "sig": c.signature_algorithm_oid.dotted_string,
        "days": (c.not_valid_after_utc - c.not_valid_before_utc).days,
        "extensions": [(e.oid.dotted_string, e.critical, e.value.public_bytes() if hasattr(e.value, "public_bytes")
                        else repr(e.value)) for e in c.extensions],
    }


def csr_table():
    ku = lambda **kw: x509.KeyUsage(**{**dict(digital_signature=False, content_commitment=False,  # noqa: E731
                                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                                              key_cert_sign=False, crl_sign=False, encipher_only=False,
                                              decipher_only=False), **kw})
    san = x509.SubjectAlternativeName([x509.DNSName("api.example.com"), x509.IPAddress(__import__("ipaddress").ip_address("10.0.0.10"))])
    unknown = x509.UnrecognizedExtension(x509.ObjectIdentifier("1.2.3.4.5"), b"\x05\x00")
    aia = x509.AuthorityInformationAccess([x509.AccessDescription(x509.oid.AuthorityInformationAccessOID.OCSP,
                                                                  x509.UniformResourceIdentifier("http://ocsp"))])
    return {
        "plain": csr(),
        "no-org": csr(org=None, cn="system:node:worker-1"),
        "ca-true": csr(exts=[(x509.BasicConstraints(ca=True, path_length=None), False)]),
        "ca-true-critical": csr(exts=[(x509.BasicConstraints(ca=True, path_length=None), True)]),
        "ca-false-critical": csr(exts=[(x509.BasicConstraints(ca=False, path_length=None), True)]),
        "keycertsign": csr(exts=[(ku(digital_signature=True, key_cert_sign=True), False)]),
        "keycertsign-critical": csr(exts=[(ku(digital_signature=True, key_cert_sign=True), True)]),
        "extra-usages": csr(exts=[(ku(digital_signature=True, key_encipherment=True, data_encipherment=True,
                                      content_commitment=True), False)]),
        "extra-usages-critical": csr(exts=[(ku(digital_signature=True, data_encipherment=True), True)]),
        "key-agreement-encipher": csr(exts=[(ku(key_agreement=True, encipher_only=True), False)]),
        "sans": csr(exts=[(san, False)]),
        "sans-critical": csr(exts=[(san, True)]),
        "eku": csr(exts=[(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]), False)]),
        "unknown": csr(exts=[(unknown, False)]),
        "unknown-critical": csr(exts=[(unknown, True)]),
        "aia-critical": csr(exts=[(aia, True)]),
        "aia": csr(exts=[(aia, False)]),
        "ski-in-csr": csr(exts=[(x509.SubjectKeyIdentifier(b"\x01" * 20), False)]),
        "everything": csr(exts=[(x509.BasicConstraints(ca=True, path_length=0), False),
                                (ku(digital_signature=True, key_cert_sign=True, crl_sign=True), False),
                                (san, False), (unknown, False)]),
        "ec-key": csr(key=ec.generate_private_key(ec.SECP256R1())),
        "ed25519-key": csr(key=ed25519.Ed25519PrivateKey.generate()),
        "rsa-4096": csr(key=rsa.generate_private_key(public_exponent=65537, key_size=4096)),
        "multi-o": x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dev"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ops")])).sign(
                rsa.generate_private_key(public_exponent=65537, key_size=2048), hashes.SHA256()
        ).public_bytes(serialization.Encoding.PEM).decode(),
    }


def test_extension_filtering_matches_magnum(env, tmp_path):
    table = csr_table()
    files = [write(tmp_path, f"{name}.pem", text) for name, text in table.items()]
    ours = env.client("rpc-sign", env.ours["uuid"], "-", *files)
    magnum = env.client("py-sign", env.ours["uuid"], "-", *files)
    ca = env.client("get-ca", env.ours["uuid"], "-")["pem"]
    mismatches = []
    for name, o, m in zip(table, ours, magnum):
        if "error" in m or "error" in o:
            # Magnum exceptions keep their class over RPC; Python built-ins
            # (ValueError) arrive as RemoteError naming the same class.
            o_cls = o.get("exc_type") or o.get("error")
            if o_cls != m.get("error"):
                mismatches.append((name, o, m))
            continue
        if ext_summary(o["pem"]) != ext_summary(m["pem"]):
            mismatches.append((name, ext_summary(o["pem"]), ext_summary(m["pem"])))
        elif openssl_verify(tmp_path, ca, o["pem"]) != openssl_verify(tmp_path, ca, m["pem"]):
            # (An all-zero keyUsage, left after filtering, fails openssl's
            # checks in both: what matters is the same verdict.)
            mismatches.append((name, "openssl verify differs", None))
    assert not mismatches, json.dumps(mismatches, indent=1, default=str)[:4000]
    outcomes = {name: (m.get("error") or "signed") for name, m in zip(table, magnum)}
    # The table exercises both paths of every rule.
    assert outcomes["ca-true-critical"] == "CertificateValidationError"
    assert outcomes["keycertsign-critical"] == "CertificateValidationError"
    assert outcomes["unknown-critical"] == "CertificateValidationError"
    assert outcomes["ca-true"] == outcomes["keycertsign"] == outcomes["unknown"] == "signed"


def test_bad_csrs(env, tmp_path):
    ca_pem = env.client("get-ca", env.ours["uuid"], "-")["pem"]
    bad = {
        "garbage": "this is not a CSR",
        "empty": "",
        "certificate": ca_pem,
        "truncated": csr()[:200],
        "huge": "-----BEGIN CERTIFICATE REQUEST-----\n" + "A" * (1 << 20) + "\n-----END CERTIFICATE REQUEST-----\n",
        "binary": "\x00\x01\x02\xff" * 64,
    }
    files = [write(tmp_path, f"bad-{k}.pem", v) for k, v in bad.items()]
    ours = env.client("rpc-sign", env.ours["uuid"], "-", *files)
    magnum = env.client("py-sign", env.ours["uuid"], "-", *files)
    for name, o, m in zip(bad, ours, magnum):
        assert o.get("error") == "InvalidCsr" and o.get("code") == 400, (name, o)
        assert m.get("error") == "InvalidCsr", (name, m)
    assert env.conductor.proc.poll() is None
    # Another project's user cannot use this cluster's CA (tenant-scoped keys).
    other = env.new_cluster("k8s-other")
    [r] = env.client("rpc-sign", other["uuid"], "-", write(tmp_path, "ok.pem", csr()))
    assert r.get("error") == "X509KeyPairNotFound" and r.get("code") == 404, r


def test_rotation_refused_and_nothing_written(env):
    def count():
        with mysql_admin() as c, c.cursor() as cur:
            db = session_db_url().rsplit("/", 1)[1].split("?")[0]
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.x509keypair")
            return cur.fetchone()[0]
    before, refs = count(), {r: env.ours[r] for r in REFS}
    out = env.client("rotate", env.ours["uuid"])
    assert out.get("error") == "NotSupported" and out.get("code") == 400, out
    after = env.tool("get", "cluster", env.ours["uuid"])
    assert count() == before and {r: after[r] for r in REFS} == refs
    assert after["status"] == "CREATE_COMPLETE" and after["updated_at"] == env.ours["updated_at"]


def test_barbican_is_refused_at_startup(tmp_path):
    conf = str(tmp_path / "b.conf")
    write_conf(conf, "unused", extra="[metrics]\nlisten =\n")
    text = open(conf).read().replace("cert_manager_type = x509keypair", "cert_manager_type = barbican")
    open(conf, "w").write(text)
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", conf], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "cert_manager_type" in p.stderr and "barbican" in p.stderr and "x509keypair" in p.stderr
