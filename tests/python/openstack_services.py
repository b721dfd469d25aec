"""Real OpenStack services from PyPI for the tests (issue 29), installed by
scripts/setup-env.sh (OPENSTACK_VENV), each with its schema made by its own
`*-db-manage` in the suite's MariaDB, registered in a real Keystone's
catalog by the tests:

- Neutron's API server (ML2, no agents: ports stay DOWN, which the
  clean-up does not care about) under gunicorn: `network`;
- Octavia's API server and driver agent with the suite's provider driver
  (tests/openstack/octavia-test-provider: statuses through octavia-lib, as
  a real provider reports them; given Neutron, each VIP port a real port
  there, as Octavia's allowed-address-pairs driver makes it):
  `load-balancer`.

- Cinder's API server, scheduler, volume and backup services (CINDER_VENV), the
  volume service with Cinder's own storage-free driver
  (`cinder.tests.fake_driver.FakeLoggingVolumeDriver`, shipped in the
  wheel, the one Cinder's functional tests use), on its own RabbitMQ
  vhost, with `auth_strategy = keystone` (keystonemiddleware against the
  suite's Keystone, its service user `cinder`): `block-storage`.

- Glance's API (file store) and Nova's compute API (its API database and
  cell0, no scheduler, conductor or compute), each with keystonemiddleware:
  `image` and `compute` (NOVA_GLANCE_VENV).

- Manila's API (MANILA_VENV; `manila.wsgi.api` under gunicorn), scheduler
  and share service with Manila's own storage-free driver
  (`manila.tests.share.drivers.dummy.DummyDriver`, shipped in the wheel,
  the one Manila's API tests run on; no share servers): the share types
  `manila_csi_share_network_id` reads, the shares the clean-up deletes:
  `sharev2`.

Each schema is made by the service's own tool once per machine and kept as
a dump (`database`). Every service validates tokens with keystonemiddleware
against the suite's Keystone, as its own service user."""
import hashlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

from conftest import broker_url, db_url, free_port, mariadb_command
from suite_timing import count

CINDER_VENV = os.environ.get("CINDER_VENV", os.path.expanduser("~/.cache/magnum-conductor-rs/venv-cinder-29.0.0"))
VENV = os.environ.get("OPENSTACK_VENV",
                      os.path.expanduser("~/.cache/magnum-conductor-rs/venv-openstack-neutron29-octavia19"))

MANILA_VENV = os.environ.get("MANILA_VENV", os.path.expanduser("~/.cache/magnum-conductor-rs/venv-manila-23.0.0"))

IMAGE_VENV = os.environ.get("NOVA_GLANCE_VENV",
                            os.path.expanduser("~/.cache/magnum-conductor-rs/venv-nova34-glance33"))


def keystone_authtoken(keystone_url, user, password):
    return (f"[keystone_authtoken]\nwww_authenticate_uri = {keystone_url}\nauth_url = {keystone_url}\n"
            f"auth_type = password\nusername = {user}\npassword = {password}\nuser_domain_id = default\n"
            f"project_name = service\nproject_domain_id = default\n")


APP = "import sys\nsys.argv = ['neutron-api']\nfrom neutron.wsgi.api import application  # noqa: E402,F401\n"


def fresh_database(name):
    cmd, env = mariadb_command()
    subprocess.run([*cmd, "-e", f"drop database if exists {name}; create database {name}"],
                   check=True, timeout=60, env=env)


SCHEMA_CACHE = os.path.expanduser("~/.cache/magnum-conductor-rs/schemas")


def database(name, venv, what, make):
    """A fresh database `name` holding the schema the service's own tool
    builds (`make()`, e.g. `neutron-db-manage upgrade heads`). The first
    build on a machine runs the tool and keeps a dump of the result, keyed
    by `what` and the venv's pinned requirements; later ones load that dump
    (seconds, where the migrations take up to a minute on a loaded machine):
    the same tables and rows, made by the same tool."""
    fresh_database(name)
    with open(os.path.join(venv, ".requirements"), "rb") as f:
        stamp = hashlib.sha256(f.read()).hexdigest()[:16]
    path = os.path.join(SCHEMA_CACHE, f"{what}-{stamp}.sql")
    if os.path.exists(path):
        with open(path, "rb") as f:
            cmd, env = mariadb_command()
            subprocess.run([*cmd, name], stdin=f, check=True, timeout=300, env=env)
        return
    make()
    os.makedirs(SCHEMA_CACHE, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        cmd, env = mariadb_command("mariadb-dump")
        subprocess.run([*cmd, "--skip-dump-date", name], stdout=f, check=True, timeout=300, env=env)
    os.replace(tmp, path)


def drop_databases(names):
    cmd, env = mariadb_command()
    subprocess.run([*cmd, "-e", "; ".join(f"drop database if exists {n}" for n in names)], timeout=60, env=env)


def manage(*cmd, timeout=600):
    out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (cmd, out.stdout[-2000:], out.stderr[-2000:])


def wait_http(url, procs, logs, what, limit=300):
    """Until `url` answers (a loaded 2-core machine has seen Neutron's
    workers take over two minutes to import and start)."""
    deadline = time.time() + limit
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answers (Cinder's version list is a 300)
        except OSError:
            for p, log in zip(procs, logs):
                assert p.poll() is None, f"{what} exited:\n" + open(log).read()[-3000:]
            assert time.time() < deadline, f"{what} did not answer within {limit} s"
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
        if p.returncode is not None:
            continue  # reaped before: its group's id may be another's now
        # Until it exits, but not reaped: a zombie leader keeps its PID,
        # the group's id, from being given to another process, so the
        # SIGKILL below reaches only its own workers and agents.
        deadline = time.time() + 30
        while time.time() < deadline and os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            time.sleep(0.1)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)


def gunicorn(venv, app, d, port, env, ready_url, what, workers=1):
    """`app` (module:attribute, found from directory `d`) under the venv's
    gunicorn on 127.0.0.1:`port`, output in `d/gunicorn.out`, with no 30 s
    limit per request (a loaded 2-core machine has seen single requests
    take longer); returns once `ready_url` answers. Every request is
    written to `d/access.log` (method, path, status, seconds, client), as
    a deployment's front end logs them: who asks what, how often."""
    log = os.path.join(d, "gunicorn.out")
    proc = subprocess.Popen(
        [f"{venv}/bin/gunicorn", "--chdir", d, "-b", f"127.0.0.1:{port}", "-w", str(workers), "--timeout", "300",
         "--pid", os.path.join(d, "gunicorn.pid"), "--access-logfile", os.path.join(d, "access.log"),
         "--access-logformat", '%(t)s "%(r)s" %(s)s %(L)s "%(a)s"', app],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    wait_http(ready_url, [proc], [log], what)
    return proc


class Neutron:
    def __init__(self, d, db_name, vhost, keystone_url, password, workers=4):
        count("neutron")
        """Start it in directory `d` with a fresh database `db_name`, its RPC
        (the L3 and DHCP agents' notifications, which no agent here
        consumes) on RabbitMQ vhost `vhost` of the run's broker, tokens
        validated by `keystone_url` (keystonemiddleware) as the user
        `neutron` (`password`, admin on the project `service`)."""
        self.dir = str(d)
        self.dbs = [db_name]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = os.path.join(self.dir, "neutron.conf")
        with open(conf, "w") as f:
            # Without a transport_url oslo.messaging's default is
            # rabbit://guest:guest@localhost:5672/: the machine's own broker,
            # which the suite must not touch (or, on a machine without one,
            # a router write waiting on its reconnects).
            f.write(f"[DEFAULT]\ncore_plugin = ml2\nservice_plugins = router\nauth_strategy = keystone\n"
                    f"api_paste_config = {VENV}/etc/neutron/api-paste.ini\nlog_file = {self.dir}/neutron.log\n"
                    f"transport_url = {broker_url(vhost)}\n"
                    f"[database]\nconnection = {db_url(db_name, '')}\n"
                    f"[ml2]\ntype_drivers = flat,vxlan\ntenant_network_types = vxlan\n"
                    f"mechanism_drivers = openvswitch\nextension_drivers = port_security\n"
                    f"[ml2_type_vxlan]\nvni_ranges = 1:1000\n[ml2_type_flat]\nflat_networks = public\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n"
                    # A test project makes more than the default 10 groups.
                    f"[quotas]\nquota_security_group = -1\nquota_floatingip = -1\n"
                    f"quota_network = -1\nquota_port = -1\nquota_subnet = -1\nquota_router = -1\n"
                    + keystone_authtoken(keystone_url, "neutron", password))
        with open(os.path.join(self.dir, "neutron_app.py"), "w") as f:
            f.write(APP)
        database(db_name, VENV, "neutron",
                 lambda: manage(f"{VENV}/bin/neutron-db-manage", "--config-file", conf, "upgrade", "heads"))
        env = dict(os.environ, OS_NEUTRON_CONFIG_FILES=conf, PYTHONWARNINGS="ignore")
        # Four workers: one Neutron serves every test of the run, and a
        # router's or floating IP's write takes seconds of CPU (its L3 and
        # DHCP scheduling); with two, the clean-up tests' CAPO networks,
        # OCCM's ports and the tests' own listings queued behind each other
        # (a cluster network's making took 105 s in a CI run, 9 s alone).
        self.proc = gunicorn(VENV, "neutron_app:application", self.dir, self.port, env, f"{self.url}/v2.0/networks",
                             "Neutron", workers)

    def stop(self):
        stop([self.proc])
        drop_databases(self.dbs)


# Octavia's API application as `octavia.wsgi.api` makes it, given its
# configuration file (that module reads the server's command line).
OCTAVIA_APP = """import os
from octavia.api import app
application = app.setup_app(argv=["octavia-api", "--config-file", os.environ["OCTAVIA_TEST_CONFIG_FILE"]])
"""


class Octavia:
    def __init__(self, d, db_name, neutron, keystone_url, password, workers=3):
        count("octavia")
        """Start the API server and the driver agent in directory `d` with a
        fresh database `db_name`. `stall(lb_id)` makes the provider hold that
        load balancer's deletion until `release(lb_id)`. VIP ports are real
        ports in `neutron` (its URL; the provider's `create_vip_port`).
        Tokens are validated by `keystone_url` (keystonemiddleware) as the
        user `octavia` (`password`, admin on the project `service`), also its
        [service_auth] (the VIP ports)."""
        self.dir = str(d)
        self.dbs = [db_name]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = os.path.join(self.dir, "octavia.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nlog_file = {self.dir}/octavia.log\n"
                    f"[api_settings]\nbind_host = 127.0.0.1\nbind_port = {self.port}\n"
                    f"auth_strategy = keystone\n"
                    f"enabled_provider_drivers = test:The suite's provider\ndefault_provider_driver = test\n"
                    f"[database]\nconnection = {db_url(db_name, '')}\n"
                    f"[driver_agent]\nstatus_socket_path = {self.dir}/status.sock\n"
                    f"stats_socket_path = {self.dir}/stats.sock\nget_socket_path = {self.dir}/get.sock\n"
                    f"enabled_provider_agents =\n"
                    f"[controller_worker]\nnetwork_driver = network_noop_driver\n"
                    f"compute_driver = compute_noop_driver\namphora_driver = amphora_noop_driver\n"
                    f"[certificates]\ncert_manager = local_cert_manager\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n")
            f.write(keystone_authtoken(keystone_url, "octavia", password))
            f.write(f"[service_auth]\nauth_url = {keystone_url}\nauth_type = password\nusername = octavia\n"
                    f"password = {password}\nuser_domain_id = default\nproject_name = service\n"
                    f"project_domain_id = default\n")
        database(db_name, VENV, "octavia",
                 lambda: manage(f"{VENV}/bin/octavia-db-manage", "--config-file", conf, "upgrade", "head"))
        os.makedirs(os.path.join(self.dir, "stall"), exist_ok=True)
        os.makedirs(os.path.join(self.dir, "fail"), exist_ok=True)
        env = dict(os.environ, PYTHONWARNINGS="ignore", OCTAVIA_TEST_PROVIDER_DIR=self.dir,
                   OCTAVIA_TEST_CONFIG_FILE=conf)
        env["OCTAVIA_TEST_PROVIDER_NEUTRON"] = neutron
        env["OCTAVIA_TEST_PROVIDER_SERVICE_AUTH"] = "1"
        self.procs, logs = start([f"{VENV}/bin/octavia-driver-agent"], conf, env, self.dir)
        # The API under gunicorn with workers, as deployments run it
        # (`octavia-api` is wsgiref's one-request-at-a-time server, which
        # Octavia's own warning says is for simple testing only): a load
        # balancer's create holds its request while the provider makes the
        # VIP port in Neutron, and one test's OCCM then queued every other
        # test's Octavia request behind it.
        with open(os.path.join(self.dir, "octavia_app.py"), "w") as f:
            f.write(OCTAVIA_APP)
        self.procs.append(gunicorn(VENV, "octavia_app:application", self.dir, self.port, env, f"{self.url}/",
                                   "Octavia", workers))
        assert self.procs[0].poll() is None, "octavia-driver-agent exited:\n" + open(logs[0]).read()[-3000:]

    def stall(self, lb_id):
        open(os.path.join(self.dir, "stall", lb_id), "w").close()

    def release(self, lb_id):
        os.remove(os.path.join(self.dir, "stall", lb_id))

    def stop(self):
        stop(self.procs)
        drop_databases(self.dbs)


class Cinder:
    def __init__(self, d, db_name, vhost, keystone_url, password):
        count("cinder")
        """Start API, scheduler and volume service in directory `d` with a
        fresh database `db_name` on RabbitMQ vhost `vhost`, authenticating
        tokens with `keystone_url` as the user `cinder` (`password`), who
        must have the admin role on the project `service`."""
        self.dir = str(d)
        self.dbs = [db_name]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v3"
        for sub in ("log", "state", "lock"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        conf = os.path.join(self.dir, "cinder.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nlog_dir = {self.dir}/log\nstate_path = {self.dir}/state\nauth_strategy = keystone\n"
                    f"transport_url = {broker_url(vhost)}\n"
                    f"api_paste_config = {CINDER_VENV}/etc/cinder/api-paste.ini\n"
                    f"osapi_volume_listen = 127.0.0.1\nosapi_volume_listen_port = {self.port}\n"
                    f"osapi_volume_workers = 1\nenabled_backends = fake\nhost = cinder-test-host\n"
                    f"quota_volumes = -1\nquota_snapshots = -1\nquota_gigabytes = -1\n"
                    # Backups: Cinder's own storage-free backup driver (its
                    # tests'); os-brick's and Cinder's privileged helpers run
                    # without sudo (the suite runs as root). A backup of the
                    # fake driver's volumes fails to copy (no initiator to
                    # attach with) and ends in `error`, a backup record as
                    # any other: listed, shown, deleted by the backup service.
                    f"backup_driver = cinder.tests.unit.backup.fake_service.FakeBackupService\n"
                    f"[privsep]\nhelper_command = {CINDER_VENV}/bin/privsep-helper --config-file {conf}\n"
                    f"[privsep_osbrick]\nhelper_command = {CINDER_VENV}/bin/privsep-helper --config-file {conf}\n"
                    f"[fake]\nvolume_driver = cinder.tests.fake_driver.FakeLoggingVolumeDriver\n"
                    f"volume_backend_name = fake\n"
                    f"[database]\nconnection = {db_url(db_name, '')}\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}/lock\n"
                    + keystone_authtoken(keystone_url, "cinder", password))
        database(db_name, CINDER_VENV, "cinder",
                 lambda: manage(f"{CINDER_VENV}/bin/cinder-manage", "--config-file", conf, "db", "sync"))
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.procs, logs = start([f"{CINDER_VENV}/bin/{b}"
                                  for b in ("cinder-volume", "cinder-backup", "cinder-scheduler", "cinder-api")],
                                 conf, env, self.dir)
        wait_http(f"http://127.0.0.1:{self.port}/", self.procs, logs, "Cinder")

    def stop(self):
        stop(self.procs)
        drop_databases(self.dbs)


class Glance:
    def __init__(self, d, db_name, keystone_url, password):
        count("glance")
        """Glance's API (glance==33.0.0, `glance.wsgi.api` under gunicorn)
        with the file store in `d`, a fresh database `db_name`, tokens
        validated by `keystone_url` as the user `glance` (`password`, admin
        on the project `service`): `image`."""
        self.dir = str(d)
        self.dbs = [db_name]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf_dir = os.path.join(self.dir, "etc")
        os.makedirs(os.path.join(self.dir, "images"), exist_ok=True)
        os.makedirs(conf_dir, exist_ok=True)
        with open(f"{IMAGE_VENV}/etc/glance/glance-api-paste.ini") as src, \
                open(os.path.join(conf_dir, "glance-api-paste.ini"), "w") as dst:
            dst.write(src.read())
        conf = os.path.join(conf_dir, "glance-api.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nlog_file = {self.dir}/glance-api.log\nenabled_backends = file:file\n"
                    f"worker_self_reference_url = {self.url}\n"
                    f"[database]\nconnection = {db_url(db_name, '')}\n"
                    f"[glance_store]\ndefault_backend = file\n"
                    f"[file]\nfilesystem_store_datadir = {self.dir}/images\n"
                    f"[os_glance_tasks_store]\nfilesystem_store_datadir = {self.dir}/tasks\n"
                    f"[os_glance_staging_store]\nfilesystem_store_datadir = {self.dir}/staging\n"
                    f"[paste_deploy]\nflavor = keystone\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n"
                    + keystone_authtoken(keystone_url, "glance", password))
        database(db_name, IMAGE_VENV, "glance",
                 lambda: manage(f"{IMAGE_VENV}/bin/glance-manage", "--config-file", conf, "db_sync"))
        env = dict(os.environ, OS_GLANCE_CONFIG_DIR=conf_dir, PYTHONWARNINGS="ignore")
        self.proc = gunicorn(IMAGE_VENV, "glance.wsgi.api:application", self.dir, self.port, env, f"{self.url}/",
                             "Glance")

    def stop(self):
        stop([self.proc])
        drop_databases(self.dbs)


NOVA_APP = ("import sys\nsys.argv = ['nova-api']\n"
            "from nova.wsgi.osapi_compute import application  # noqa: E402,F401\n")


class Nova:
    def __init__(self, d, db_prefix, vhost, keystone_url, password):
        count("nova")
        """Nova's compute API (nova==34.0.0, `nova.wsgi.osapi_compute` under
        gunicorn), no scheduler, conductor or compute: its API database
        (flavors, keypairs) and cell0 made by `nova-manage`, tokens
        validated by `keystone_url` as the user `nova` (`password`, admin on
        the project `service`): `compute`."""
        self.dir = str(d)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v2.1"
        api_db, cell0 = f"{db_prefix}_api", f"{db_prefix}_cell0"
        self.dbs = [api_db, cell0]
        conf = os.path.join(self.dir, "nova.conf")
        cell0_url = db_url(cell0, "")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nhost = nova-test-host\nlog_file = {self.dir}/nova-api.log\n"
                    f"state_path = {self.dir}\ntransport_url = {broker_url(vhost)}\n"
                    f"[api]\nauth_strategy = keystone\n"
                    f"[api_database]\nconnection = {db_url(api_db, '')}\n"
                    f"[database]\nconnection = {cell0_url}\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n"
                    + keystone_authtoken(keystone_url, "nova", password))
        nova_manage = [f"{IMAGE_VENV}/bin/nova-manage", "--config-file", conf]
        # The API database (its dump taken before cell0 is mapped: the
        # mapping names this run's cell0), cell0's mapping, cell0.
        database(api_db, IMAGE_VENV, "nova-api", lambda: manage(*nova_manage, "api_db", "sync"))
        manage(*nova_manage, "cell_v2", "map_cell0", "--database_connection", cell0_url)
        database(cell0, IMAGE_VENV, "nova-cell0", lambda: manage(*nova_manage, "db", "sync"))
        with open(os.path.join(self.dir, "nova_app.py"), "w") as f:
            f.write(NOVA_APP)
        # Nova's WSGI application takes its paste pipeline from the first
        # file of OS_NOVA_CONFIG_FILES (nova/api/openstack/wsgi_app.py).
        with open(f"{IMAGE_VENV}/etc/nova/api-paste.ini") as src, \
                open(os.path.join(self.dir, "api-paste.ini"), "w") as dst:
            dst.write(src.read())
        env = dict(os.environ, OS_NOVA_CONFIG_DIR=self.dir, OS_NOVA_CONFIG_FILES="api-paste.ini;nova.conf",
                   PYTHONWARNINGS="ignore")
        self.proc = gunicorn(IMAGE_VENV, "nova_app:application", self.dir, self.port, env,
                             f"http://127.0.0.1:{self.port}/", "Nova")

    def stop(self):
        stop([self.proc])
        drop_databases(self.dbs)


class Manila:
    def __init__(self, d, db_name, vhost, keystone_url, password):
        count("manila")
        """Manila's API (manila==23.0.0, `manila.wsgi.api` under gunicorn)
        with a fresh database `db_name` made by `manila-manage db sync`,
        tokens validated by `keystone_url` as the user `manila` (`password`,
        admin on the project `service`): `sharev2` at `url` (no project in
        the path: microversion 2.60 and later)."""
        self.dir = str(d)
        self.dbs = [db_name]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v2"
        # Manila's own defaults; rules written here later are read at the
        # next request (oslo.policy reloads a changed file):
        # shared_cloud.Cloud.manila_refuse.
        self.policy_file = os.path.join(self.dir, "policy.yaml")
        with open(self.policy_file, "w") as f:
            f.write("{}\n")
        conf = os.path.join(self.dir, "manila.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nhost = manila-test-host\nlog_file = {self.dir}/manila-api.log\n"
                    f"state_path = {self.dir}\nauth_strategy = keystone\n"
                    f"transport_url = {broker_url(vhost)}\n"
                    f"api_paste_config = {MANILA_VENV}/etc/manila/api-paste.ini\n"
                    f"default_share_type = default\nenabled_share_backends = dummy\n"
                    f"enabled_share_protocols = NFS\n"
                    # The share service tells the scheduler its backend at
                    # start and every 10 s (defaults: a random delay of up
                    # to 60 s, then every 60 s): until then a share is
                    # refused ("no hosts"), whatever the test waits.
                    f"periodic_fuzzy_delay = 0\nperiodic_interval = 10\n"
                    f"[dummy]\nshare_driver = manila.tests.share.drivers.dummy.DummyDriver\n"
                    f"driver_handles_share_servers = false\nshare_backend_name = dummy\n"
                    f"dummy_driver_default_driver_method_delay = 0\n"
                    f"dummy_driver_driver_methods_delays = create_share:0,delete_share:0,ensure_share:0,"
                    f"get_pool:0,do_setup:0\n"
                    f"[database]\nconnection = {db_url(db_name, '')}\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n"
                    f"[oslo_policy]\npolicy_file = {self.policy_file}\n"
                    + keystone_authtoken(keystone_url, "manila", password))
        database(db_name, MANILA_VENV, "manila",
                 lambda: manage(f"{MANILA_VENV}/bin/manila-manage", "--config-file", conf, "db", "sync"))
        # manila.wsgi.api parses sys.argv for its configuration files.
        with open(os.path.join(self.dir, "manila_app.py"), "w") as f:
            f.write(f"import sys\nsys.argv = ['manila-api', '--config-file', {conf!r}]\n"
                    "from manila.wsgi.api import application  # noqa: E402,F401\n")
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.procs, _ = start([f"{MANILA_VENV}/bin/{b}" for b in ("manila-scheduler", "manila-share")],
                              conf, env, self.dir)
        self.procs.append(gunicorn(MANILA_VENV, "manila_app:application", self.dir, self.port, env,
                                   f"http://127.0.0.1:{self.port}/", "Manila"))

    def stop(self):
        stop(self.procs)
        drop_databases(self.dbs)
