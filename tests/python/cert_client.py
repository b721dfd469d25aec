"""The Python side of the certificate tests, with Magnum 23.0.0's and
python-magnumclient's own code. One JSON document on stdout per run; an
exception raised by Magnum is reported as {"error": class, "code": ...}.
Runs in its own process (oslo.messaging and oslo.db are process-global).

    python cert_client.py <conf> get-ca <cluster uuid> <ca type|->
    python cert_client.py <conf> rpc-sign <cluster uuid> <ca type|-> <csr file>...
    python cert_client.py <conf> py-sign <cluster uuid> <ca type|-> <csr file>...
    python cert_client.py <conf> rotate <cluster uuid>
    python cert_client.py <conf> coe-config <cluster uuid> <out dir>
    python cert_client.py <conf> py-generate <cluster uuid>
    python cert_client.py <conf> py-decrypt <x509keypair uuid>

rpc-* go through magnum.conductor.api.API to the conductor over RabbitMQ,
as magnum-api does; py-* run Magnum's own x509 code in this process.
"""
import json
import sys
import warnings

warnings.simplefilter("ignore")

PROJECT, USER = "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5", "2f1c0a6b9c2d4e7f8a1b2c3d4e5f6a7b"


def magnum_class(e):
    """The magnum.common.exception class of `e`: oslo.messaging re-raises a
    remote one as a `<Class>_Remote` subclass of it."""
    from magnum.common import exception
    for cls in type(e).__mro__:
        if cls.__module__ == exception.__name__:
            return cls.__name__
    return type(e).__name__


def main():
    conf, cmd, *rest = sys.argv[1:]
    from magnum.common import context as mctx
    from magnum.common import exception
    from magnum.common import service as magnum_service
    from magnum import objects

    magnum_service.prepare_service(["magnum-api", "--config-file", conf])
    # The cluster owner's request context, as magnum-api builds it.
    ctx = mctx.make_context(user_id=USER, project_id=PROJECT, is_admin=False, auth_token="t",
                            user_name="demo", project_name="demo")
    admin = mctx.make_admin_context(all_tenants=True)

    def cluster(uuid):
        return objects.Cluster.get_by_uuid(admin, uuid)

    def ca_type(v):
        return None if v == "-" else v

    def each(files, sign):
        results = []
        for f in files:
            try:
                results.append({"pem": sign(open(f).read())})
            except exception.MagnumException as e:
                results.append({"error": magnum_class(e), "code": e.code, "message": str(e)[:300]})
            except Exception as e:
                results.append({"error": type(e).__name__, "exc_type": getattr(e, "exc_type", None),
                                "message": str(e)[:300]})
        return results

    try:
        if cmd == "get-ca":
            from magnum.conductor import api
            c = cluster(rest[0])
            cert = api.API(context=ctx).get_ca_certificate(c, ca_cert_type=ca_type(rest[1]))
            out = {"pem": cert.pem, "cluster_uuid": cert.cluster_uuid, "project_id": cert.project_id,
                   "user_id": cert.user_id}
        elif cmd == "rpc-sign":
            from magnum.conductor import api
            c = cluster(rest[0])

            def rpc(csr):
                cert = objects.Certificate.from_object_cluster(c)
                cert.csr = csr
                if ca_type(rest[1]) is not None:
                    cert.ca_cert_type = rest[1]
                return api.API(context=ctx).sign_certificate(c, cert).pem
            out = each(rest[2:], rpc)
        elif cmd == "py-sign":
            from magnum.conductor.handlers.common import cert_manager
            c = cluster(rest[0])

            def local(csr):
                pem = cert_manager.sign_node_certificate(c, csr, ca_type(rest[1]), context=ctx)
                return pem.decode() if isinstance(pem, bytes) else pem
            out = each(rest[2:], local)
        elif cmd == "rotate":
            from magnum.conductor import api
            api.API(context=ctx).rotate_ca_certificate(cluster(rest[0]))
            out = {"rotated": True}
        elif cmd == "coe-config":
            # What `openstack coe cluster config` does (magnumclient.osc.v1.clusters).
            import os
            from magnum.conductor import api
            from magnumclient.common import utils as mutils
            # config_cluster reads $SHELL to pick export syntax; CI's
            # non-login shells may not set it.
            os.environ.setdefault("SHELL", "/bin/bash")
            c = cluster(rest[0])
            ca = api.API(context=ctx).get_ca_certificate(c).pem
            csr = mutils.generate_csr_and_key()
            cert = objects.Certificate.from_object_cluster(c)
            cert.csr = csr["csr"]
            signed = api.API(context=ctx).sign_certificate(c, cert).pem
            template = type("T", (), {"coe": "kubernetes", "tls_disabled": False})()
            client_cluster = type("C", (), {"name": c.name, "api_address": c.api_address})()
            os.makedirs(rest[1], exist_ok=True)
            mutils.config_cluster(client_cluster, template, rest[1], force=True,
                                  certs={"ca": ca, "cert": signed, "key": csr["key"]})
            out = {"config": os.path.join(rest[1], "config"), "ca": ca, "cert": signed, "key": csr["key"]}
        elif cmd == "py-generate":
            from magnum.conductor.handlers.common import cert_manager
            c = cluster(rest[0])
            cert_manager.generate_certificates_to_cluster(c, context=ctx)
            c.save()
            out = {k: getattr(c, k) for k in ("ca_cert_ref", "etcd_ca_cert_ref", "front_proxy_ca_cert_ref",
                                                "magnum_cert_ref")}
        elif cmd == "py-decrypt":
            from cryptography.hazmat.primitives import serialization
            from magnum.common.x509 import operations
            kp = objects.X509KeyPair.get_by_uuid(admin, rest[0])
            pem = operations.decrypt_key(kp.private_key, kp.private_key_passphrase)
            key = serialization.load_pem_private_key(pem, password=None)
            spki = key.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
            out = {"spki": spki.hex()}
        else:
            raise SystemExit(f"unknown command {cmd}")
    except exception.MagnumException as e:
        out = {"error": magnum_class(e), "code": e.code, "message": str(e)}
    except Exception as e:  # RemoteError, ValueError...: the class is the datum
        out = {"error": type(e).__name__, "exc_type": getattr(e, "exc_type", None), "message": str(e)[:500]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
