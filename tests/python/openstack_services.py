"""Real OpenStack services from PyPI for the tests (issue 29): Neutron's
API server (ML2, no agents: ports stay DOWN, which the clean-up does not
care about) under gunicorn, its schema made by its own `neutron-db-manage`
in the suite's MariaDB, registered in a real Keystone's catalog as the
`network` service. Installed by scripts/setup-env.sh (OPENSTACK_VENV).

Neutron runs with `auth_strategy = noauth` for now: every request is
admin-like and is scoped by the `project_id` it names (the conductor's
clean-up names its token's project in every list). Keystone still
authenticates the conductor's application credential and hands it the
catalog that points here. Octavia and Cinder are not run yet."""
import os
import subprocess
import time
import urllib.request

from conftest import free_port

VENV = os.environ.get("OPENSTACK_VENV", os.path.expanduser("~/.cache/magnum-conductor-rs/venv-neutron-29.0.0"))

APP = "import sys\nsys.argv = ['neutron-api']\nfrom neutron.wsgi.api import application  # noqa: E402,F401\n"


class Neutron:
    def __init__(self, d, db_name):
        """Start it in directory `d` with a fresh database `db_name`."""
        self.dir = str(d)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        subprocess.run(["mariadb", "-uroot", "-e", f"drop database if exists {db_name}; create database {db_name}"],
                       check=True, timeout=60)
        conf = os.path.join(self.dir, "neutron.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\ncore_plugin = ml2\nservice_plugins = router\nauth_strategy = noauth\n"
                    f"api_paste_config = {VENV}/etc/neutron/api-paste.ini\nlog_file = {self.dir}/neutron.log\n"
                    f"[database]\nconnection = mysql+pymysql://root@127.0.0.1:3306/{db_name}\n"
                    f"[ml2]\ntype_drivers = flat,vxlan\ntenant_network_types = vxlan\n"
                    f"mechanism_drivers = openvswitch\nextension_drivers = port_security\n"
                    f"[ml2_type_vxlan]\nvni_ranges = 1:1000\n[ml2_type_flat]\nflat_networks = public\n"
                    f"[oslo_concurrency]\nlock_path = {self.dir}\n")
        with open(os.path.join(self.dir, "neutron_app.py"), "w") as f:
            f.write(APP)
        out = subprocess.run([f"{VENV}/bin/neutron-db-manage", "--config-file", conf, "upgrade", "heads"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        env = dict(os.environ, OS_NEUTRON_CONFIG_FILES=conf, PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen(
            [f"{VENV}/bin/gunicorn", "--chdir", self.dir, "-b", f"127.0.0.1:{self.port}", "-w", "1",
             "--pid", os.path.join(self.dir, "gunicorn.pid"), "neutron_app:application"],
            stdout=open(os.path.join(self.dir, "gunicorn.out"), "w"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/v2.0/networks", timeout=5):
                    return
            except OSError:
                assert self.proc.poll() is None, open(os.path.join(self.dir, "gunicorn.out")).read()[-3000:]
                assert time.time() < deadline, "Neutron did not answer within 120 s"
                time.sleep(0.5)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
