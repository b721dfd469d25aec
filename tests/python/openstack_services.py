"""Real OpenStack services from PyPI for the tests (issue 29), installed by
scripts/setup-env.sh (OPENSTACK_VENV), each with its schema made by its own
`*-db-manage` in the suite's MariaDB, registered in a real Keystone's
catalog by the tests:

- Neutron's API server (ML2, no agents: ports stay DOWN, which the
  clean-up does not care about) under gunicorn: `network`;
- Octavia's API server and driver agent with the suite's provider driver
  (tests/openstack/octavia-test-provider: statuses through octavia-lib, as
  a real provider reports them) and Octavia's no-op network driver (VIP
  ports are made up, not made in Neutron): `load-balancer`.

- Cinder's API server, scheduler and volume service (CINDER_VENV), the
  volume service with Cinder's own storage-free driver
  (`cinder.tests.fake_driver.FakeLoggingVolumeDriver`, shipped in the
  wheel, the one Cinder's functional tests use), on its own RabbitMQ
  vhost, with `auth_strategy = keystone` (keystonemiddleware against the
  suite's Keystone, its service user `cinder`): `block-storage`.

Neutron and Octavia run with `auth_strategy = noauth` for now: every
request is admin-like and scoped by the `project_id` it names (the
conductor's clean-up names its token's project in every list). Keystone
still authenticates the conductor's application credential and hands it
the catalog that points here."""
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

from conftest import free_port

CINDER_VENV = os.environ.get("CINDER_VENV", os.path.expanduser("~/.cache/magnum-conductor-rs/venv-cinder-29.0.0"))
VENV = os.environ.get("OPENSTACK_VENV",
                      os.path.expanduser("~/.cache/magnum-conductor-rs/venv-openstack-neutron29-octavia19"))

APP = "import sys\nsys.argv = ['neutron-api']\nfrom neutron.wsgi.api import application  # noqa: E402,F401\n"


def fresh_database(name):
    subprocess.run(["mariadb", "-uroot", "-e", f"drop database if exists {name}; create database {name}"],
                   check=True, timeout=60)


def wait_http(url, procs, logs, what):
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answers (Cinder's version list is a 300)
        except OSError:
            for p, log in zip(procs, logs):
                assert p.poll() is None, f"{what} exited:\n" + open(log).read()[-3000:]
            assert time.time() < deadline, f"{what} did not answer within 120 s"
            time.sleep(0.5)


def start(binaries, conf, env, d):
    """`binaries` (in the venv holding them) with `--config-file conf`, each
    in a session of its own, output in `d/<binary>.out`: (procs, logs)."""
    procs, logs = [], []
    for binary in binaries:
        log = os.path.join(d, f"{os.path.basename(binary)}.out")
        logs.append(log)
        procs.append(subprocess.Popen([binary, "--config-file", conf], stdout=open(log, "w"),
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                      start_new_session=True))
    return procs, logs


def stop(procs):
    """SIGTERM to each service's process group (their workers and agents
    with them), SIGKILL to what is left after 30 s."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)


class Neutron:
    def __init__(self, d, db_name):
        """Start it in directory `d` with a fresh database `db_name`."""
        self.dir = str(d)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fresh_database(db_name)
        conf = os.path.join(self.dir, "neutron.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\ncore_plugin = ml2\nservice_plugins = router\nauth_strategy = noauth\n"
                    f"api_paste_config = {VENV}/etc/neutron/api-paste.ini\nlog_file = {self.dir}/neutron.log\n"
                    f"[database]\nconnection = mysql+pymysql://root@127.0.0.1:3306/{db_name}\n"
                    f"[ml2]\ntype_drivers = flat,vxlan\ntenant_network_types = vxlan\n"
                    f"mechanism_drivers = openvswitch\nextension_drivers = port_security\n"
                    f"[ml2_type_vxlan]\nvni_ranges = 1:1000\n[ml2_type_flat]\nflat_networks = public\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n"
                    # A test project makes more than the default 10 groups.
                    f"[quotas]\nquota_security_group = -1\nquota_floatingip = -1\n"
                    f"quota_network = -1\nquota_port = -1\nquota_subnet = -1\n")
        with open(os.path.join(self.dir, "neutron_app.py"), "w") as f:
            f.write(APP)
        out = subprocess.run([f"{VENV}/bin/neutron-db-manage", "--config-file", conf, "upgrade", "heads"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        env = dict(os.environ, OS_NEUTRON_CONFIG_FILES=conf, PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen(
            # Two workers, and no 30 s limit per request: a loaded 2-core
            # machine has seen a router's first interface take longer (its
            # L3 notifications), and one slow request must not hold the rest.
            [f"{VENV}/bin/gunicorn", "--chdir", self.dir, "-b", f"127.0.0.1:{self.port}", "-w", "2",
             "--timeout", "300", "--pid", os.path.join(self.dir, "gunicorn.pid"), "neutron_app:application"],
            stdout=open(os.path.join(self.dir, "gunicorn.out"), "w"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        wait_http(f"{self.url}/v2.0/networks", [self.proc], [os.path.join(self.dir, "gunicorn.out")], "Neutron")

    def stop(self):
        stop([self.proc])


class Octavia:
    def __init__(self, d, db_name, neutron=None):
        """Start the API server and the driver agent in directory `d` with a
        fresh database `db_name`. `stall(lb_id)` makes the provider hold that
        load balancer's deletion until `release(lb_id)`. With `neutron` (its
        URL), VIP ports are real ports there (the provider's
        `create_vip_port`)."""
        self.dir = str(d)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fresh_database(db_name)
        conf = os.path.join(self.dir, "octavia.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nlog_file = {self.dir}/octavia.log\n"
                    f"[api_settings]\nbind_host = 127.0.0.1\nbind_port = {self.port}\nauth_strategy = noauth\n"
                    f"enabled_provider_drivers = test:The suite's provider\ndefault_provider_driver = test\n"
                    f"[database]\nconnection = mysql+pymysql://root@127.0.0.1:3306/{db_name}\n"
                    f"[driver_agent]\nstatus_socket_path = {self.dir}/status.sock\n"
                    f"stats_socket_path = {self.dir}/stats.sock\nget_socket_path = {self.dir}/get.sock\n"
                    f"enabled_provider_agents =\n"
                    f"[controller_worker]\nnetwork_driver = network_noop_driver\n"
                    f"compute_driver = compute_noop_driver\namphora_driver = amphora_noop_driver\n"
                    f"[certificates]\ncert_manager = local_cert_manager\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n")
        out = subprocess.run([f"{VENV}/bin/octavia-db-manage", "--config-file", conf, "upgrade", "head"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        os.makedirs(os.path.join(self.dir, "stall"), exist_ok=True)
        env = dict(os.environ, PYTHONWARNINGS="ignore", OCTAVIA_TEST_PROVIDER_DIR=self.dir)
        if neutron:
            env["OCTAVIA_TEST_PROVIDER_NEUTRON"] = neutron
        self.procs, logs = start([f"{VENV}/bin/octavia-driver-agent", f"{VENV}/bin/octavia-api"], conf, env,
                                 self.dir)
        wait_http(f"{self.url}/", self.procs, logs, "Octavia")

    def stall(self, lb_id):
        open(os.path.join(self.dir, "stall", lb_id), "w").close()

    def release(self, lb_id):
        os.remove(os.path.join(self.dir, "stall", lb_id))

    def stop(self):
        stop(self.procs)


class Cinder:
    def __init__(self, d, db_name, vhost, keystone_url, password):
        """Start API, scheduler and volume service in directory `d` with a
        fresh database `db_name` on RabbitMQ vhost `vhost`, authenticating
        tokens with `keystone_url` as the user `cinder` (`password`), who
        must have the admin role on the project `service`."""
        self.dir = str(d)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v3"
        fresh_database(db_name)
        for sub in ("log", "state", "lock"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        conf = os.path.join(self.dir, "cinder.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nlog_dir = {self.dir}/log\nstate_path = {self.dir}/state\nauth_strategy = keystone\n"
                    f"transport_url = rabbit://guest:guest@127.0.0.1:5672/{vhost}\n"
                    f"api_paste_config = {CINDER_VENV}/etc/cinder/api-paste.ini\n"
                    f"osapi_volume_listen = 127.0.0.1\nosapi_volume_listen_port = {self.port}\n"
                    f"osapi_volume_workers = 1\nenabled_backends = fake\nhost = cinder-test-host\n"
                    f"quota_volumes = -1\nquota_snapshots = -1\nquota_gigabytes = -1\n"
                    f"[fake]\nvolume_driver = cinder.tests.fake_driver.FakeLoggingVolumeDriver\n"
                    f"volume_backend_name = fake\n"
                    f"[database]\nconnection = mysql+pymysql://root@127.0.0.1:3306/{db_name}\n"
                    f"[keystone_authtoken]\nwww_authenticate_uri = {keystone_url}\nauth_url = {keystone_url}\n"
                    f"auth_type = password\nusername = cinder\npassword = {password}\nuser_domain_id = default\n"
                    f"project_name = service\nproject_domain_id = default\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}/lock\n")
        out = subprocess.run([f"{CINDER_VENV}/bin/cinder-manage", "--config-file", conf, "db", "sync"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.procs, logs = start([f"{CINDER_VENV}/bin/{b}" for b in ("cinder-volume", "cinder-scheduler", "cinder-api")],
                                 conf, env, self.dir)
        wait_http(f"http://127.0.0.1:{self.port}/", self.procs, logs, "Cinder")

    def stop(self):
        stop(self.procs)
