"""Just enough Glance, Nova and Neutron for magnum-api's own checks.

magnum-api validates a cluster template and a cluster against the cloud
(`magnum/api/attr_validator.py`): the image and its `os_distro`, the flavors
(and their root disk), the keypair, the external network. Magnum 23.0.0 asks
through openstacksdk, Magnum 22.0.0 through glanceclient, novaclient and
neutronclient; both go through the Keystone catalog, so this server is
registered there as the `image`, `compute` and `network` services and answers
the reads both client generations make (version discovery included), with
the bodies of the real APIs (Glance v2, Nova v2.1, Neutron v2.0).

Nova's keypair API also takes creates and deletes (`POST /os-keypairs`,
`DELETE /os-keypairs/NAME`, as tempest's keypairs client sends them, answered
with the v2.1 bodies and status codes its response schemas check). Keypairs
belong to a user, as in Nova: given `user_of` (token -> user id, e.g. by
asking Keystone as Nova's auth middleware does), each user sees the keypairs
it made plus the cloud's preset ones; without it, one user.

Nothing here is a Magnum or conductor behaviour: it only stands for a cloud
that has these resources. Every request is recorded (method, path) so a test
can tell that a check really asked.
"""
import base64
import hashlib
import json
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NOW = "2026-01-01T00:00:00Z"


def image(name, os_distro, **props):
    return {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, "image/" + name)), "name": name, "status": "active",
            "visibility": "public", "protected": False, "os_hidden": False, "container_format": "bare",
            "disk_format": "qcow2", "min_disk": 0, "min_ram": 0, "size": 1073741824, "checksum": None,
            "owner": "0" * 32, "created_at": NOW, "updated_at": NOW, "tags": [], "os_distro": os_distro,
            "self": "", "file": "", "schema": "/v2/schemas/image", **props}


def flavor(name, vcpus, ram, disk):
    return {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, "flavor/" + name)), "name": name, "vcpus": vcpus,
            "ram": ram, "disk": disk, "OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": False,
            "swap": 0, "rxtx_factor": 1.0, "os-flavor-access:is_public": True, "links": []}


def network(name, external):
    return {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, "network/" + name)), "name": name, "status": "ACTIVE",
            "admin_state_up": True, "shared": False, "router:external": external, "subnets": [],
            "tenant_id": "0" * 32, "project_id": "0" * 32, "mtu": 1500, "description": "",
            "availability_zones": ["nova"], "tags": [], "created_at": NOW, "updated_at": NOW}


class Cloud:
    def __init__(self, user_of=None):
        self.images = [image("ubuntu-2204-kube-v1.30.4", "ubuntu"),
                       image("ubuntu-2204-kube-v1.31.1", "ubuntu"),
                       image("flatcar-kube-v1.30.4", "flatcar"),
                       image("no-distro", None)]
        self.flavors = [flavor("m1.small", 2, 4096, 20), flavor("m1.medium", 4, 8192, 40)]
        # (user id or None for every user, name) -> keypair.
        self.keypairs = {(None, "mykey"): {"name": "mykey", "type": "ssh", "fingerprint": "aa:bb",
                                           "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI test"}}
        self.user_of = user_of or (lambda token: None)
        self.networks = [network("public", True), network("private", False)]
        self.requests = []
        self.lock = threading.Lock()
        self.server = None

    def start(self):
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_):
                pass

            def do_GET(self):
                self.reply("GET")

            def do_POST(self):
                self.reply("POST")

            def do_DELETE(self):
                self.reply("DELETE")

            def reply(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with cloud.lock:
                    cloud.requests.append((method, self.path))
                user = cloud.user_of(self.headers.get("X-Auth-Token"))
                if method == "GET":
                    status, body = cloud.answer(self.path, f"http://{self.headers.get('Host')}", user)
                else:
                    status, body = cloud.change(method, self.path, raw, user)
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if self.path.startswith("/compute"):
                    self.send_header("OpenStack-API-Version", "compute 2.1")
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def asked(self, prefix):
        with self.lock:
            return [p for _, p in self.requests if p.startswith(prefix)]

    def keypair(self, user, name):
        with self.lock:
            return self.keypairs.get((user, name)) or self.keypairs.get((None, name))

    def change(self, method, raw, body, user=None):
        """Nova's keypair create and delete (v2.1: 200 with the generated
        private key; 202; 404 and 409 as Nova answers them)."""
        path = urllib.parse.urlsplit(raw).path.rstrip("/")
        if method == "POST" and path == "/compute/v2.1/os-keypairs":
            try:
                want = json.loads(body or b"{}")["keypair"]
                name = want["name"]
            except (ValueError, KeyError, TypeError):
                return 400, {"badRequest": {"code": 400, "message": "Invalid input for field/attribute keypair."}}
            with self.lock:
                if (user, name) in self.keypairs or (None, name) in self.keypairs:
                    return 409, {"conflictingRequest": {"code": 409,
                                                        "message": f"Key pair '{name}' already exists."}}
                private = None
                public = want.get("public_key")
                if not public:
                    from cryptography.hazmat.primitives import serialization
                    from cryptography.hazmat.primitives.asymmetric import ed25519
                    key = ed25519.Ed25519PrivateKey.generate()
                    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                           serialization.PublicFormat.OpenSSH).decode()
                    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                serialization.NoEncryption()).decode()
                digest = hashlib.md5(base64.b64decode(public.split()[1])).hexdigest()
                kp = {"name": name, "type": "ssh", "public_key": public, "user_id": user or "stand-in",
                      "fingerprint": ":".join(digest[i:i + 2] for i in range(0, 32, 2))}
                self.keypairs[(user, name)] = kp
            created = {k: kp[k] for k in ("name", "public_key", "user_id", "fingerprint")}
            if private:
                created["private_key"] = private
            return 200, {"keypair": created}
        if method == "DELETE" and path.startswith("/compute/v2.1/os-keypairs/"):
            name = urllib.parse.unquote(path.rsplit("/", 1)[1])
            with self.lock:
                if self.keypairs.pop((user, name), None) is None:
                    return 404, {"itemNotFound": {"code": 404, "message": f"Keypair {name} not found"}}
            return 202, None
        return 404, {"itemNotFound": {"code": 404, "message": "not found"}}

    def answer(self, raw, base, user=None):
        url = urllib.parse.urlsplit(raw)
        path = url.path.rstrip("/")
        q = urllib.parse.parse_qs(url.query)
        not_found = (404, {"itemNotFound": {"code": 404, "message": "not found"}})
        # Version discovery (keystoneauth and the legacy clients).
        if path == "/image":
            return 300, {"versions": [{"id": "v2.16", "status": "CURRENT",
                                       "links": [{"rel": "self", "href": f"{base}/image/v2/"}]}]}
        if path in ("/compute", "/compute/v2.1"):
            v = {"id": "v2.1", "status": "CURRENT", "version": "2.96", "min_version": "2.1", "updated": NOW,
                 "links": [{"rel": "self", "href": f"{base}/compute/v2.1/"}]}
            return (200, {"version": v}) if path.endswith("v2.1") else (300, {"versions": [v]})
        if path == "/network":
            return 200, {"versions": [{"id": "v2.0", "status": "CURRENT",
                                       "links": [{"rel": "self", "href": f"{base}/network/v2.0/"}]}]}
        # Glance v2 (glanceclient builds its image model from the schema).
        if path == "/image/v2/schemas/image":
            core = {k: {} for k in self.images[0]}
            return 200, {"name": "image", "properties": core, "additionalProperties": {"type": "string"},
                         "links": [{"rel": "self", "href": "{self}"}, {"rel": "enclosure", "href": "{file}"},
                                   {"rel": "describedby", "href": "{schema}"}]}
        if path == "/image/v2/images":
            found = [i for i in self.images if "name" not in q or i["name"] == q["name"][0]]
            return 200, {"images": found, "first": "/v2/images", "schema": "/v2/schemas/images"}
        if path.startswith("/image/v2/images/"):
            ident = path.rsplit("/", 1)[1]
            found = [i for i in self.images if i["id"] == ident]
            return (200, found[0]) if found else not_found
        # Nova v2.1.
        if path in ("/compute/v2.1/flavors/detail", "/compute/v2.1/flavors"):
            return 200, {"flavors": self.flavors}
        if path.startswith("/compute/v2.1/flavors/"):
            ident = path.rsplit("/", 1)[1]
            found = [f for f in self.flavors if ident in (f["id"], f["name"])]
            return (200, {"flavor": found[0]}) if found else not_found
        if path.startswith("/compute/v2.1/os-keypairs/"):
            kp = self.keypair(user, urllib.parse.unquote(path.rsplit("/", 1)[1]))
            return (200, {"keypair": kp}) if kp else not_found
        # Neutron v2.0.
        if path in ("/network/v2.0/networks", "/network/v2.0/networks.json"):
            nets = self.networks
            ext = (q.get("router:external") or q.get("is_router_external") or [None])[0]
            if ext is not None:
                want = ext.lower() == "true"
                nets = [n for n in nets if n["router:external"] == want]
            if "name" in q:
                nets = [n for n in nets if n["name"] == q["name"][0]]
            return 200, {"networks": nets}
        if path in ("/network/v2.0/subnets", "/network/v2.0/subnets.json"):
            return 200, {"subnets": []}
        return not_found
