"""The whole path a user takes, with nothing of ours standing in for OpenStack.

- the run's real Keystone, Glance 33, Nova 34 (compute API), Neutron 29,
  Octavia, Cinder and Manila (shared_cloud.py: started once per run, as a
  deployment runs them for all its tenants), holding what magnum-api
  validates a template and a cluster against, made through their APIs as an
  operator makes them: public images with their `os_distro`, flavors, the
  external network, the services' users and Magnum's trustee domain;
- per ApiEnv, a project and a user of its own (alice's, her keypair made in
  Nova as she makes it: Nova's keypairs are per user), and a catalog region
  of its own holding its magnum-api as `container-infra` beside the cloud's
  services (the user's CLI names that region, so it finds this magnum-api
  and never another test's);
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

Its end checks that nothing of the test's reached another project
(`shared_cloud.Cloud.check_untouched`).
"""
import json
import os
import subprocess
import time
import urllib.request

import client_pool
import rbac
import shared_cloud
from conftest import (Conductor, broker_url, free_port, new_database, new_vhost, rabbitmqctl, write_conf)
from suite_timing import count
from test_lifecycle import Sim
from test_lifecycle_keystone import call, password_token

HERE = os.path.dirname(os.path.abspath(__file__))
# What the user's CLI imports (python-openstackclient's shell, its identity
# and the Magnum plugin's commands, the libraries under them).
OSC_PRELOAD = ("openstackclient.shell", "osc_lib.shell", "cliff.app", "keystoneauth1.session",
               "keystoneclient.v3.client", "magnumclient.v1.client", "magnumclient.osc.v1.clusters",
               "magnumclient.osc.v1.cluster_templates", "magnumclient.osc.v1.nodegroups")
CACHE = os.path.expanduser("~/.cache/magnum-conductor-rs")
API_VENVS = {"23": os.environ.get("MAGNUM_API_VENV", f"{CACHE}/venv-api-23.0.0"),
             "22": os.environ.get("MAGNUM22_API_VENV", f"{CACHE}/venv-api-22.0.0")}
# The head of each release's migrations (magnum-db-manage upgrade).
DB_BUILD = {"23": ("magnum", "b3e1cf4a2d5e"), "22": ("magnum22", "c0f832afc4fd")}
USER_PW = "alice-secret-pw"
SERVICE_PW = shared_cloud.SERVICE_PW


KEYPAIR = ("mykey", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGfJv3b0Jd6Xb1kVx5l0Xo8wYc7bQm8hX0W8X9kqYh9u alice")


class ApiEnv:
    def __init__(self, tmp, release="23", mode="console", line="v1beta2", workload_apiservers=False,
                 api_conf_extra="", workload_netns=False, cloud_cleanup=False, conductor_capi_extra="",
                 region_services=(), identities=False):
        """In the run's cloud (shared_cloud.py): a project and user of its
        own (alice's, with her keypair `mykey`), its magnum-api in a
        catalog region of its own, with the cloud's services of the types in
        `region_services` (the user's CLI looks up only container-infra
        there; tempest every service it uses). `conductor_capi_extra`: more options of
        our conductor's `[capi]`; `workload_netns`: capi-sim runs the
        apiservers of clusters without an API floating IP inside their
        tenant networks' namespaces (root); `identities`: the conductor
        reaches the management cluster with a token of its shipped
        ServiceAccount (deploy/kubernetes/magnum-conductor-rbac.yaml), not
        as its administrator."""
        self.tmp, self.release, self.mode = tmp, release, mode
        self.venv = API_VENVS[release]
        assert os.path.exists(os.path.join(self.venv, "bin", "magnum-api")), \
            f"{self.venv}: run scripts/setup-env.sh"
        self.procs = []
        self.cloud = shared_cloud.get()
        try:
            self.conductor_capi_extra = conductor_capi_extra
            self._start(tmp, release, line, workload_apiservers, api_conf_extra, workload_netns, cloud_cleanup,
                        region_services, identities)
        except BaseException:
            # Leave nothing behind, above all not this magnum-api's region
            # in the shared catalog.
            self.close()
            raise

    def _start(self, tmp, release, line, workload_apiservers, api_conf_extra, workload_netns, cloud_cleanup,
               region_services, identities):
        t = self.cloud.tenant("alice", USER_PW, keypair=KEYPAIR)
        self.api_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.region = self.cloud.region("api", copy=region_services, **{"container-infra": f"{self.api_url}/v1"})
        # What the tests read of the user and her cloud.
        self.ks = dict(url=self.cloud.keystone_url, admin_pw=self.cloud.admin_pw, tenant=t["project"],
                       alice=t["user"], user=t["user_name"], project=t["project_name"], region=self.region)
        self.sim = Sim(tmp, line, 20, workload_apiservers=workload_apiservers or workload_netns,
                       workload_netns=workload_netns)
        self.conductor_kubeconfig = self.sim.kubeconfig
        if identities:
            conductor = rbac.Identity("magnum-conductor")
            conductor.apply(self.sim.cp, tmp)
            self.conductor_kubeconfig = conductor.kubeconfig(self.sim.cp, tmp)
        self.vhost = new_vhost("e2e")
        build, revision = DB_BUILD[release]
        self.db_url = new_database("e2e", build=build, revision=revision)
        ks = self.ks["url"]
        auth = (f"auth_url = {ks}\nauth_type = password\nusername = magnum\npassword = {SERVICE_PW}\n"
                f"project_name = service\nuser_domain_id = default\nproject_domain_id = default\n")
        # magnum-api: its own magnum.conf.
        self.api_conf = tmp / "magnum-api.conf"
        self.api_conf.write_text(
            f"[DEFAULT]\ntransport_url = {broker_url(self.vhost)}\n"
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
                          f"[capi]\nkubeconfig = {self.conductor_kubeconfig}\nlease_duration = 5\nos_distros = ubuntu,rockylinux\n"
                          # No Octavia or Cinder in this cloud: nothing of OCCM's
                          # or Cinder CSI's to clean up, unless a test asks
                          # (server groups in Nova).
                          f"cloud_cleanup = {'true' if cloud_cleanup else 'false'}\n{self.conductor_capi_extra}"
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
        count("magnum-api")
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

    def openstack(self, *args, ok=True, user=None, password=USER_PW, project=None):
        """`openstack <args> [-f json]` as the user (alice unless named), in
        this magnum-api's region; returns (rc, parsed or text, stderr)."""
        env = dict(os.environ, OS_AUTH_URL=self.ks["url"], OS_USERNAME=user or self.ks["user"],
                   OS_PASSWORD=password, OS_PROJECT_NAME=project or self.ks["project"],
                   OS_USER_DOMAIN_ID="default", OS_PROJECT_DOMAIN_ID="default",
                   OS_IDENTITY_API_VERSION="3", OS_REGION_NAME=self.region, OS_INTERFACE="public",
                   PYTHONWARNINGS="ignore")
        # `coe cluster config` reads os.environ["SHELL"] to pick the export
        # syntax (magnumclient.common.utils); a login shell always sets it,
        # CI's environment does not.
        env.setdefault("SHELL", "/bin/bash")
        # The user's CLI is python-openstackclient 10.5.0 + python-magnumclient
        # 5.0.0 (the 23.0.0 venv) whatever release the server runs.
        count("openstack CLI")
        # The console script, run as a child of a process that has imported
        # the client once (client_pool.py; an `openstack` process spends
        # ~1.9 of its ~2.1 CPU seconds importing it).
        p = client_pool.run(os.path.join(API_VENVS["23"], "bin", "openstack"), args, env=env, timeout=180,
                            python=os.path.join(API_VENVS["23"], "bin", "python"), preload=OSC_PRELOAD,
                            cwd=str(self.tmp))
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

    def rest(self, path):
        """GET magnum-api's `/v1<path>` as alice, as her CLI sends it (the
        newest microversion): (status, body)."""
        if getattr(self, "_alice_token", None) is None or time.time() > self._alice_token[1]:
            token, _ = password_token(self.ks["url"], self.ks["user"], USER_PW, project_id=self.ks["tenant"])
            self._alice_token = (token, time.time() + 1800)
        status, _, body = call("GET", f"{self.api_url}/v1{path}", self._alice_token[0],
                               headers={"OpenStack-API-Version": "container-infra latest"})
        return status, body

    def poll(self, rest_path, cli_args, done, timeout=180, state=None):
        """Wait until `done(view)` holds for what the user's CLI shows
        (`openstack <cli_args> -f json`; None when it fails, e.g. gone).
        Polled through magnum-api's REST API, the API the CLI calls (a new
        openstack process costs ~2.5 CPU seconds, and a wait used to start
        one a second); once the API's answer satisfies `done`, the CLI is
        asked and its view must satisfy it too, which is what is returned.
        `state(view)` names each distinct state seen (for the failure
        message and the caller). Returns (CLI view, states seen)."""
        deadline = time.time() + timeout
        seen = []

        def note(view):
            s = state(view) if state else None
            if state and (not seen or seen[-1] != s):
                seen.append(s)
        while time.time() < deadline:
            status, view = self.rest(rest_path)
            if status in (200, 404):
                view = view if status == 200 else None
                note(view)
                if not done(view):
                    time.sleep(0.5)
                    continue
            else:
                # Not an answer the API's view can be judged on: the CLI's
                # is (any failure of it reads as gone, as the waits always
                # read it). Logged with the CLI's calls.
                with open(self.tmp / "openstack.log", "a") as f:
                    f.write(f"# GET /v1{rest_path}: {status}\n")
            rc, shown, _ = self.openstack(*cli_args, "-f", "json", ok=False)
            shown = shown if rc == 0 else None
            note(shown)
            if done(shown):
                return shown, seen
            time.sleep(0.5)
        raise AssertionError(f"timed out; seen {seen}; see {self.tmp}")

    def wait(self, cluster, done, timeout=180):
        """The cluster as `openstack coe cluster show` gives it once `done`
        holds for it (None: gone), and the (status, reason) states seen."""
        return self.poll(f"/clusters/{cluster}", ("coe", "cluster", "show", cluster), done, timeout,
                         state=lambda c: (c["status"], c.get("status_reason")) if c else "gone")

    def close(self):
        """Ends what this ApiEnv started, also when it started only part of it."""
        for p in self.procs:
            if p.poll() is not None:
                # Gone before its end (-9: killed from outside): said where
                # its output is, and in the test's output.
                with open(self.tmp / "magnum-api.out", "a") as f:
                    f.write(f"\n[test] magnum-api had exited with {p.returncode} before the test's end\n")
                print(f"magnum-api (pid {p.pid}) had exited with {p.returncode} before the test's end")
            else:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        # The WSGI runner's serving loop ended and went on (its output says
        # with what): said in the test's output too.
        out = self.tmp / "magnum-api.out"
        if out.exists() and "the serving loop ended" in out.read_text(errors="replace"):
            print(f"magnum-api's serving loop ended at least once and went on: see {out}")
        rc = self.conductor.stop() if hasattr(self, "conductor") else None
        if hasattr(self, "sim"):
            self.sim.stop()
        if getattr(self, "region", None):
            self.cloud.drop_region(self.region)
        if hasattr(self, "vhost"):
            rabbitmqctl("delete_vhost", self.vhost)
        # Nothing of this test's reached another project.
        self.cloud.check_untouched()
        return rc
