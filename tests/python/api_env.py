"""The whole path a user takes, with nothing of ours standing in for OpenStack.

- a real Keystone (scripts/keystone.sh): the `magnum` service user, a tenant
  project with a member user, and a catalog holding container-infra (the
  magnum-api below), image, compute and network (openstack_standin.py);
- the real magnum-api of Magnum 23.0.0 or 22.0.0, from the venvs
  scripts/setup-env.sh builds with our driver package installed as an
  operator installs it, behind keystonemiddleware, run either as the
  `magnum-api` console script (every object read and write goes to the
  conductor: the indirection API) or as the `magnum.wsgi.api` application
  (objects straight from the database, as under uwsgi/mod_wsgi);
- a database built by that Magnum's own `magnum-db-manage upgrade`;
- our conductor on the same broker vhost and database, the management
  cluster our simulator;
- the user speaks only through the `openstack coe ...` CLI
  (python-openstackclient + python-magnumclient) with a password.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

from conftest import (ROOT, Conductor, free_port, new_database, new_vhost, rabbitmqctl, write_conf)
from openstack_standin import Cloud
from test_lifecycle import Sim
from test_lifecycle_keystone import KEYSTONE, call, password_token, start_keystone

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.expanduser("~/.cache/magnum-conductor-rs")
API_VENVS = {"23": os.environ.get("MAGNUM_API_VENV", f"{CACHE}/venv-api-23.0.0"),
             "22": os.environ.get("MAGNUM22_API_VENV", f"{CACHE}/venv-api-22.0.0")}
# The head of each release's migrations (magnum-db-manage upgrade).
DB_BUILD = {"23": ("magnum", "b3e1cf4a2d5e"), "22": ("magnum22", "c0f832afc4fd")}
USER_PW = "alice-secret-pw"
SERVICE_PW = "magnum-service-pw"


def keystone_start(tmp):
    """A Keystone with the service user, a tenant and its member. Returns
    a dict of what the test needs, `stop` included."""
    d = tmp / "keystone"
    d.mkdir()
    url, admin_pw, admin = start_keystone(d)

    def make(kind, body):
        status, _, got = call("POST", f"{url}/{kind}s", admin, {kind: body})
        assert status == 201, (kind, status)
        return got[kind]["id"]

    def grant(project, user, role_name):
        _, _, roles = call("GET", f"{url}/roles?name={role_name}", admin)
        role = roles["roles"][0]["id"] if roles["roles"] else make("role", {"name": role_name})
        status, _, _ = call("PUT", f"{url}/projects/{project}/users/{user}/roles/{role}", admin)
        assert status == 204

    service = make("project", {"name": "service", "domain_id": "default"})
    magnum = make("user", {"name": "magnum", "domain_id": "default", "password": SERVICE_PW})
    grant(service, magnum, "admin")
    grant(service, magnum, "service")  # keystonemiddleware validates tokens with it
    # The trustee domain and its admin every Magnum deployment configures
    # ([trust]); Magnum 22's API resolves it on each policy check.
    trustee_domain = make("domain", {"name": "magnum"})
    trustee_admin = make("user", {"name": "trustee_domain_admin", "domain_id": trustee_domain,
                                  "password": SERVICE_PW})
    _, _, roles = call("GET", f"{url}/roles?name=admin", admin)
    status, _, _ = call("PUT", f"{url}/domains/{trustee_domain}/users/{trustee_admin}/roles/{roles['roles'][0]['id']}",
                        admin)
    assert status == 204
    tenant = make("project", {"name": "tenant", "domain_id": "default"})
    alice = make("user", {"name": "alice", "domain_id": "default", "password": USER_PW,
                          "default_project_id": tenant})
    grant(tenant, alice, "member")

    def register(service_type, name, endpoint):
        sid = make("service", {"type": service_type, "name": name})
        for interface in ("public", "internal", "admin"):
            make("endpoint", {"service_id": sid, "interface": interface, "url": endpoint,
                              "region_id": "RegionOne"})

    tokens = {}
    service = [admin]

    def user_of(token):
        """The user a token was issued to (GET /v3/auth/tokens, as Nova's
        auth middleware asks), or None for a token Keystone refuses."""
        if not token:
            return None
        if token not in tokens:
            status, _, got = call("GET", f"{url}/auth/tokens", service[0], headers={"X-Subject-Token": token})
            if status == 401:  # the validating token expired: a new one
                service[0], _ = password_token(url, "admin", admin_pw, project_name="admin")
                status, _, got = call("GET", f"{url}/auth/tokens", service[0], headers={"X-Subject-Token": token})
            tokens[token] = got["token"]["user"]["id"] if status == 200 else None
        return tokens[token]

    return dict(url=url, dir=d, admin_token=admin, tenant=tenant, alice=alice, register=register, user_of=user_of,
                stop=lambda: subprocess.run([KEYSTONE, "stop", str(d)], timeout=30))


class ApiEnv:
    def __init__(self, tmp, release="23", mode="console", line="v1beta2", workload_apiservers=False,
                 api_conf_extra=""):
        self.tmp, self.release, self.mode = tmp, release, mode
        self.venv = API_VENVS[release]
        assert os.path.exists(os.path.join(self.venv, "bin", "magnum-api")), \
            f"{self.venv}: run scripts/setup-env.sh"
        self.procs = []
        self.ks = keystone_start(tmp)
        self.cloud = Cloud(user_of=self.ks["user_of"])
        cloud_url = self.cloud.start()
        self.api_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.ks["register"]("container-infra", "magnum", f"{self.api_url}/v1")
        self.ks["register"]("image", "glance", f"{cloud_url}/image")
        self.ks["register"]("compute", "nova", f"{cloud_url}/compute/v2.1")
        self.ks["register"]("network", "neutron", f"{cloud_url}/network")
        self.sim = Sim(tmp, line, 20, workload_apiservers=workload_apiservers)
        self.vhost = new_vhost("e2e")
        build, revision = DB_BUILD[release]
        self.db_url = new_database("e2e", build=build, revision=revision)
        ks = self.ks["url"]
        auth = (f"auth_url = {ks}\nauth_type = password\nusername = magnum\npassword = {SERVICE_PW}\n"
                f"project_name = service\nuser_domain_id = default\nproject_domain_id = default\n")
        # magnum-api: its own magnum.conf.
        self.api_conf = tmp / "magnum-api.conf"
        self.api_conf.write_text(
            f"[DEFAULT]\ntransport_url = rabbit://guest:guest@127.0.0.1:5672/{self.vhost}\n"
            f"host = api-host\nrpc_response_timeout = 60\nlog_file = {tmp}/magnum-api.log\n"
            f"[api]\nhost = 127.0.0.1\nport = {self.api_port}\nworkers = 1\n"
            f"api_paste_config = {self.venv}/etc/magnum/api-paste.ini\n"
            f"[database]\nconnection = {self.db_url}\n"
            f"[keystone_authtoken]\nwww_authenticate_uri = {ks}\n{auth}"
            f"[keystone_auth]\n{auth}"
            f"[trust]\ntrustee_domain_name = magnum\ntrustee_domain_admin_name = trustee_domain_admin\n"
            f"trustee_domain_admin_domain_name = magnum\ntrustee_domain_admin_password = {SERVICE_PW}\n"
            f"[oslo_messaging_notifications]\ndriver = noop\n"
            f"[oslo_concurrency]\nlock_path = {tmp}\n"
            f"[capi]\nos_distros = ubuntu,rockylinux\n{api_conf_extra}")
        # Our conductor: the same broker vhost, database and [capi] group.
        self.metrics_port = free_port()
        self.conductor_conf = str(tmp / "conductor.conf")
        write_conf(self.conductor_conf, self.vhost, db_url=self.db_url,
                   extra=(f"[metrics]\nlisten = 127.0.0.1:{self.metrics_port}\n"
                          f"[capi]\nkubeconfig = {self.sim.kubeconfig}\nlease_duration = 5\nos_distros = ubuntu,rockylinux\n"
                          # No Neutron, Octavia or Cinder behind this cloud's stand-in.
                          f"cloud_cleanup = false\n"
                          f"[keystone_auth]\n{auth}"))
        self.conductor = Conductor(self.conductor_conf, self.metrics_port, str(tmp / "conductor.log"))
        self.api = self.start_api()

    def start_api(self):
        log = open(self.tmp / "magnum-api.out", "w")
        if self.mode == "console":
            cmd = [os.path.join(self.venv, "bin", "magnum-api"), "--config-file", str(self.api_conf)]
        else:
            cmd = [os.path.join(self.venv, "bin", "python"), os.path.join(HERE, "magnum_api_wsgi.py"),
                   str(self.api_conf), "127.0.0.1", str(self.api_port)]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        deadline = time.time() + 90
        while time.time() < deadline:
            assert p.poll() is None, f"magnum-api exited; see {self.tmp}/magnum-api.out and magnum-api.log"
            try:
                with urllib.request.urlopen(self.api_url + "/", timeout=2) as r:
                    if r.status == 200:
                        return p
            except Exception:
                time.sleep(0.2)
        raise AssertionError("magnum-api did not answer")

    def openstack(self, *args, ok=True, user="alice", password=USER_PW, project="tenant"):
        """`openstack <args> [-f json]` as the user; returns (rc, parsed or text, stderr)."""
        env = dict(os.environ, OS_AUTH_URL=self.ks["url"], OS_USERNAME=user, OS_PASSWORD=password,
                   OS_PROJECT_NAME=project, OS_USER_DOMAIN_ID="default", OS_PROJECT_DOMAIN_ID="default",
                   OS_IDENTITY_API_VERSION="3", OS_REGION_NAME="RegionOne", OS_INTERFACE="public",
                   PYTHONWARNINGS="ignore")
        # `coe cluster config` reads os.environ["SHELL"] to pick the export
        # syntax (magnumclient.common.utils); a login shell always sets it,
        # CI's environment does not.
        env.setdefault("SHELL", "/bin/bash")
        # The user's CLI is python-openstackclient 10.5.0 + python-magnumclient
        # 5.0.0 (the 23.0.0 venv) whatever release the server runs.
        p = subprocess.run([os.path.join(API_VENVS["23"], "bin", "openstack"), *args], capture_output=True,
                           text=True, timeout=180, env=env, cwd=str(self.tmp))
        with open(self.tmp / "openstack.log", "a") as f:
            f.write(f"$ openstack {' '.join(args)}\nrc={p.returncode}\n{p.stdout}\n{p.stderr}\n")
        if ok:
            assert p.returncode == 0, f"openstack {' '.join(args)}: {p.stderr[-2000:]}"
        out = p.stdout
        if "-f" in args and args[args.index("-f") + 1] == "json" and p.returncode == 0:
            # magnumclient prints "Request to ... accepted" before the JSON.
            start = min((i for i in (out.find("{"), out.find("[")) if i >= 0), default=-1)
            out = json.loads(out[start:]) if start >= 0 else None
        return p.returncode, out, p.stderr

    def coe(self, *args, **kw):
        return self.openstack("coe", *args, **kw)[1]

    def wait(self, cluster, done, timeout=180):
        deadline = time.time() + timeout
        seen = []
        while time.time() < deadline:
            rc, c, _ = self.openstack("coe", "cluster", "show", cluster, "-f", "json", ok=False)
            state = (c["status"], c.get("status_reason")) if rc == 0 else "gone"
            if not seen or seen[-1] != state:
                seen.append(state)
            if done(c if rc == 0 else None):
                return c, seen
            time.sleep(1)
        raise AssertionError(f"timed out; seen {seen}; see {self.tmp}")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        rc = self.conductor.stop()
        self.sim.stop()
        self.cloud.stop()
        self.ks["stop"]()
        rabbitmqctl("delete_vhost", self.vhost)
        return rc
