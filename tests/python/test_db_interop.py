"""Magnum's database, proven across languages on the real MariaDB:

- our migrations/ build exactly the schema Magnum's own `magnum-db-manage
  upgrade` builds (23.0.0 head and the 22.x head);
- rows written by Magnum 23.0.0's objects read back identically through
  our data layer (`mc-db-tool`), and the other way round;
- the conductor's heartbeat makes magnum-api's up/down rule say "up" while
  it runs and "down" once it stops;
- startup refuses unknown schema revisions, unreachable databases and wrong
  credentials with one clear line and no secret.
"""
import json
import os
import subprocess
import time
import uuid

import pytest

import client_pool

from conftest import (CONDUCTOR_BIN, DB_HOST, DB_PORT, VENV22_BIN, Conductor, free_port, mysql_admin, new_database, new_vhost,
                      rabbitmqctl, write_conf)

HERE = os.path.dirname(os.path.abspath(__file__))
DB_TOOL = os.environ.get("MC_DB_TOOL", os.path.join(os.path.dirname(CONDUCTOR_BIN), "mc-db-tool"))
REV_23, REV_22 = "b3e1cf4a2d5e", "c0f832afc4fd"


def db_name(url):
    return url.rsplit("/", 1)[1].split("?")[0]


def schema_of(url):
    name = db_name(url)
    q = {
        "tables": "SELECT TABLE_NAME, ENGINE, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s",
        "columns": "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_DEFAULT, IS_NULLABLE, COLUMN_TYPE, "
                   "CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_KEY, EXTRA FROM information_schema.COLUMNS "
                   "WHERE TABLE_SCHEMA=%s",
        "indexes": "SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME FROM "
                   "information_schema.STATISTICS WHERE TABLE_SCHEMA=%s",
        "alembic": f"SELECT version_num, %s FROM `{name}`.alembic_version",
    }
    out = {}
    with mysql_admin() as c, c.cursor() as cur:
        for k, sql in q.items():
            cur.execute(sql, (name,))
            out[k] = sorted(tuple(str(x) for x in row) for row in cur.fetchall())
    return out


@pytest.mark.parametrize("revision,magnum", [(REV_23, "magnum"), (REV_22, "magnum"), (REV_22, "magnum22")])
def test_schema_is_magnums(revision, magnum):
    """Against Magnum 23.0.0's migrations (both heads) and Magnum 22.0.0's own head."""
    ours = schema_of(new_database("ours", "rust", revision))
    theirs = schema_of(new_database("magnum", magnum, revision))
    for k in theirs:
        if k == "alembic":
            assert [r[0] for r in ours[k]] == [r[0] for r in theirs[k]] == [revision]
            continue
        missing = sorted(set(theirs[k]) - set(ours[k]))
        extra = sorted(set(ours[k]) - set(theirs[k]))
        assert not missing and not extra, f"{k}: missing {missing[:5]} extra {extra[:5]}"


def rust(conf, *args):
    p = subprocess.run([DB_TOOL, "--config-file", conf, *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def python(url, *args, release="23"):
    python = None if release == "23" else os.path.join(VENV22_BIN, "python")
    p = client_pool.run(os.path.join(HERE, "db_side.py"), [url, *args], timeout=120, python=python)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


class Env:
    """A database built by one Magnum release's own migrations, that
    release's objects (db_side.py in its venv) and our tool on it."""

    def __init__(self, release, tmp):
        self.release = release
        self.url = new_database(f"interop{release}", "magnum" if release == "23" else "magnum22",
                                REV_23 if release == "23" else REV_22)
        self.conf = str(tmp / "db.conf")
        write_conf(self.conf, "unused", db_url=self.url)

    def py(self, *args):
        return python(self.url, *args, release=self.release)

    def rs(self, *args):
        return rust(self.conf, *args)

    def ng_fields(self, cluster_uuid, **kw):
        f = nodegroup_fields(cluster_uuid, **kw)
        if self.release == "22":
            f.pop("node_labels")
            f.pop("node_taints")
        return f

    def cluster_fields(self, **kw):
        f = cluster_fields(**kw)
        if self.release == "22":
            f.update(trust_id="0f0e0d0c", trustee_username="abc_" + PROJECT, trustee_user_id="tu1",
                     trustee_password="not-a-real-secret")
        return f


@pytest.fixture(scope="module", params=["23", "22"])
def env(request, tmp_path_factory):
    return Env(request.param, tmp_path_factory.mktemp(f"db{request.param}"))


PROJECT, USER = "9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5", "2f1c0a6b9c2d4e7f8a1b2c3d4e5f6a7b"


def cluster_fields(**kw):
    f = dict(uuid=str(uuid.uuid4()), name="k8s-é", project_id=PROJECT, user_id=USER,
             cluster_template_id=str(uuid.uuid4()), keypair="kp", docker_volume_size=None,
             labels={"auto_healing_enabled": True, "boot_volume_size": 20, "city": "Zürich 日本"},
             master_flavor_id="m1.medium", flavor_id="m1.small", status="CREATE_IN_PROGRESS",
             health_status="UNKNOWN", health_status_reason={"api": "ok", "nodes": "3/3 Ready"},
             create_timeout=60, coe_version=None, master_lb_enabled=True)
    f.update(kw)
    return f


def nodegroup_fields(cluster_uuid, **kw):
    f = dict(uuid=str(uuid.uuid4()), name="default-worker", cluster_id=cluster_uuid, project_id=PROJECT,
             labels={"x": False}, flavor_id="m1.small", image_id="img", node_addresses=["10.0.0.4"],
             node_count=3, role="worker", max_node_count=5, min_node_count=1, is_default=True,
             status="CREATE_IN_PROGRESS", node_labels={"tier": "é"},
             node_taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    f.update(kw)
    return f


def test_python_writes_rust_reads(env):
    url, conf, python_ = env.url, env.conf, env.py
    c = python_("create", "Cluster", json.dumps(env.cluster_fields()))
    assert c["labels"] == {"auto_healing_enabled": "True", "boot_volume_size": "20", "city": "Zürich 日本"}
    assert env.rs("get", "cluster", c["uuid"]) == python_("get", "Cluster", c["uuid"])
    ng = python_("create", "NodeGroup", json.dumps(env.ng_fields(c["uuid"])))
    assert env.rs("get", "nodegroup", ng["uuid"]) == python_("get", "NodeGroup", json.dumps([c["uuid"], ng["uuid"]]))
    # A master row as Magnum's conductor inserts it: min/max NULL, no node_labels.
    master = python_("create", "NodeGroup", json.dumps(env.ng_fields(
        c["uuid"], name="default-master", role="master", min_node_count=None, max_node_count=None,
        node_labels=None, node_taints=None)))
    ours = env.rs("get", "nodegroup", master["uuid"])
    assert ours == python_("get", "NodeGroup", json.dumps([c["uuid"], master["uuid"]]))
    assert ours["min_node_count"] == 0
    # Python's save() of a few fields: we read what it wrote.
    python_("save", "Cluster", c["uuid"], json.dumps({"status": "CREATE_COMPLETE", "api_address": "https://1.2.3.4:6443"}))
    assert env.rs("get", "cluster", c["uuid"]) == python_("get", "Cluster", c["uuid"])
    kp = python_("create", "X509KeyPair", json.dumps(dict(
        uuid=str(uuid.uuid4()), certificate="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        private_key="-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIE\n-----END ENCRYPTED PRIVATE KEY-----\n",
        private_key_passphrase="abcdefgh2345", project_id=PROJECT, user_id=USER)))
    assert env.rs("get", "x509keypair", kp["uuid"]) == python_("get", "X509KeyPair", kp["uuid"])
    ct = python_("create", "ClusterTemplate", json.dumps(dict(
        uuid=str(uuid.uuid4()), name="k8s-v1.30", project_id=PROJECT, user_id=USER, image_id="ubuntu-2204",
        coe="kubernetes", cluster_distro="ubuntu", flavor_id="m1.small", master_flavor_id="m1.medium",
        keypair_id="kp", external_network_id="public", dns_nameserver="8.8.8.8", network_driver="calico",
        docker_volume_size=None, labels={"kube_tag": "v1.30.4", "octavia_provider": "ovn", "auto_scaling_enabled": False},
        public=True, hidden=False, master_lb_enabled=True, floating_ip_enabled=False, tags="a,b",
        driver="k8s_capi_rust", server_type="vm")))
    assert env.rs("get", "cluster_template", ct["uuid"]) == python_("get", "ClusterTemplate", ct["uuid"])
    assert env.rs("list", "cluster_template")[-1]["labels"]["auto_scaling_enabled"] == "False"
    # The API-owned tables the conductor only reads.
    q = python_("create", "Quota", json.dumps(dict(project_id=PROJECT, resource="Cluster", hard_limit=7)))
    assert env.rs("get", "quotas", str(q["id"])) == python_("get", "Quota", str(q["id"]))
    fed = python_("create", "Federation", json.dumps(dict(
        uuid=str(uuid.uuid4()), name="fed", project_id=PROJECT, hostcluster_id=c["uuid"], member_ids=[c["uuid"]],
        status="CREATE_IN_PROGRESS", properties={"dns-zone": "example.com."})))
    assert env.rs("get", "federation", fed["uuid"]) == python_("get", "Federation", fed["uuid"])


def test_tenant_scoping_matches_magnum(env):
    """A non-admin context sees its project's clusters and, for templates,
    its own plus public non-hidden ones: the same sets in both languages."""
    other = "0" * 32
    for project in (PROJECT, other):
        env.rs("create", "cluster", json.dumps(env.cluster_fields(project_id=project)))
    for project, public, hidden in ((PROJECT, False, False), (other, True, False), (other, True, True), (other, False, False)):
        env.rs("create", "cluster_template", json.dumps(dict(
            uuid=str(uuid.uuid4()), name=f"t-{public}-{hidden}", project_id=project, user_id=USER, coe="kubernetes",
            image_id="img", public=public, hidden=hidden)))
    for cls_, table in (("Cluster", "cluster"), ("ClusterTemplate", "cluster_template")):
        ours = sorted(o["uuid"] for o in env.rs("list-as", PROJECT, table))
        theirs = sorted(o["uuid"] for o in env.py("list-as", PROJECT, cls_))
        assert ours == theirs and ours, (table, ours, theirs)
    templates = env.rs("list-as", PROJECT, "cluster_template")
    assert {(t["project_id"] == PROJECT, t["public"], t["hidden"]) for t in templates} >= {(True, False, False), (False, True, False)}
    assert not any(t["hidden"] and t["project_id"] != PROJECT for t in templates)


def raw_row(url, table, uuid_):
    with mysql_admin() as c, c.cursor() as cur:
        cur.execute(f"SELECT * FROM `{db_name(url)}`.`{table}` WHERE uuid=%s", (uuid_,))
        cols = [d[0] for d in cur.description]
        return dict(zip(cols, cur.fetchone()))


def test_rust_writes_python_reads(env):
    url, conf, python_ = env.url, env.conf, env.py
    c = rust(conf, "create", "cluster", json.dumps(env.cluster_fields()))
    assert python_("get", "Cluster", c["uuid"]) == c
    row = raw_row(url, "cluster", c["uuid"])
    # What magnum-api reads straight from the row: jsonutils encoding, 0/1, naive UTC seconds.
    assert row["labels"] == '{"auto_healing_enabled": "True", "boot_volume_size": "20", "city": "Z\\u00fcrich \\u65e5\\u672c"}'
    assert row["master_lb_enabled"] == 1 and row["floating_ip_enabled"] == 1
    assert row["updated_at"] is None and row["created_at"].microsecond == 0

    ng = rust(conf, "create", "nodegroup", json.dumps(env.ng_fields(c["uuid"])))
    assert python_("get", "NodeGroup", json.dumps([c["uuid"], ng["uuid"]])) == ng
    kp = rust(conf, "create", "x509keypair", json.dumps(dict(
        uuid=str(uuid.uuid4()), certificate="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        private_key="k\n", private_key_passphrase="abcdefgh2345", project_id=PROJECT, user_id=USER)))
    assert python_("get", "X509KeyPair", kp["uuid"]) == kp
    assert c in python_("list", "Cluster") and ng in python_("list", "NodeGroup", c["uuid"])
    dup = subprocess.run([DB_TOOL, "--config-file", conf, "create", "nodegroup",
                          json.dumps(env.ng_fields(c["uuid"]))], capture_output=True, text=True)
    assert dup.returncode != 0 and "NodeGroupAlreadyExists" in dup.stderr

    saved = rust(conf, "save", "cluster", c["uuid"], json.dumps({"status": "UPDATE_IN_PROGRESS", "status_reason": None}))
    assert python_("get", "Cluster", c["uuid"]) == saved
    assert saved["updated_at"] is not None and saved["status"] == "UPDATE_IN_PROGRESS"
    before = raw_row(url, "cluster", c["uuid"])
    time.sleep(1.1)
    # Saving an unchanged value writes nothing, like the ORM (updated_at stays).
    rust(conf, "save", "cluster", c["uuid"], json.dumps({"status": "UPDATE_IN_PROGRESS"}))
    assert raw_row(url, "cluster", c["uuid"])["updated_at"] == before["updated_at"]
    bad = subprocess.run([DB_TOOL, "--config-file", conf, "get", "cluster", "not-an-id"], capture_output=True, text=True)
    assert bad.returncode != 0 and "InvalidIdentity" in bad.stderr
    missing = subprocess.run([DB_TOOL, "--config-file", conf, "get", "cluster", str(uuid.uuid4())], capture_output=True, text=True)
    assert missing.returncode != 0 and "ClusterNotFound" in missing.stderr


def test_minimal_inserts_match_byte_for_byte(env):
    """Rows inserted with only a few fields set: every column as Magnum's
    ORM writes it (unset JSON columns are `{}`/`[]`, not NULL)."""
    url = env.url
    skip = {"id", "uuid", "created_at"}
    pairs = []
    for name, table, fields in (
            ("Cluster", "cluster", lambda: dict(uuid=str(uuid.uuid4()), name="m", project_id=PROJECT)),
            ("NodeGroup", "nodegroup", lambda: dict(uuid=str(uuid.uuid4()), name="ng-" + uuid.uuid4().hex[:6],
                                                    cluster_id="c-1", project_id=PROJECT, node_count=1,
                                                    role="worker", min_node_count=0))):
        py = env.py("create", name, json.dumps(fields()))
        rs = env.rs("create", table, json.dumps(fields()))
        a, b = raw_row(url, table, py["uuid"]), raw_row(url, table, rs["uuid"])
        pairs.append((table, {k: v for k, v in a.items() if k not in skip}, {k: v for k, v in b.items() if k not in skip}))
    for table, a, b in pairs:
        if table == "nodegroup":
            a.pop("name"), b.pop("name")
        assert a == b, (table, {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)})
    assert pairs[0][1]["health_status_reason"] == "{}" and pairs[0][1]["labels"] == "{}"
    assert pairs[1][1]["node_addresses"] == "[]"


@pytest.mark.parametrize("release", ["23", "22"])
def test_heartbeat_up_then_down(tmp_path, release):
    url = new_database("hb", "rust", REV_23 if release == "23" else REV_22)
    vhost = new_vhost("hb")
    port = free_port()
    conf = str(tmp_path / "c.conf")
    write_conf(conf, vhost, db_url=url, extra_default="periodic_interval_max = 1",
               extra=f"[metrics]\nlisten = 127.0.0.1:{port}\n")
    conductor = Conductor(conf, port, str(tmp_path / "c.log"))
    try:
        time.sleep(2.5)
        rows = python(url, "service-up", "test-host", "3", release=release)
        assert len(rows) == 1 and rows[0]["up"] is True, rows
        assert rows[0]["binary"] == "magnum-conductor" and rows[0]["report_count"] >= 2
        assert rows[0]["disabled"] is False and rows[0]["forced_down"] is False
    finally:
        assert conductor.stop() == 0
        rabbitmqctl("delete_vhost", vhost)
    time.sleep(4.5)
    rows = python(url, "service-up", "test-host", "3", release=release)
    assert rows[0]["up"] is False, rows


def start_failure(tmp_path, db_url):
    conf = str(tmp_path / "bad.conf")
    write_conf(conf, "unused", db_url=db_url, extra="[metrics]\nlisten =\n")
    with open(conf, "a") as f:
        f.write("[database]\nmax_retries = 0\n")
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", conf], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("magnum-conductor:")]
    assert len(lines) == 1, p.stderr
    assert "panicked" not in p.stderr
    return lines[0]


def test_startup_refusals(tmp_path):
    url = new_database("rev", "rust", REV_23)
    with mysql_admin() as c, c.cursor() as cur:
        cur.execute(f"UPDATE `{db_name(url)}`.alembic_version SET version_num='7da8489d6a68'")
    line = start_failure(tmp_path, url)
    assert "7da8489d6a68" in line and REV_23 in line and REV_22 in line, line

    line = start_failure(tmp_path, "mysql+pymysql://root@127.0.0.1:1/magnum")
    assert "cannot connect" in line, line

    line = start_failure(tmp_path, f"mysql+pymysql://magnum:S3cr3t-pw@{DB_HOST}:{DB_PORT}/{db_name(url)}")
    assert "cannot connect" in line and "S3cr3t-pw" not in line, line
