"""Per-cluster application credentials against a real Keystone (30.0.0).

A user with the member role on their project gets a project-scoped token
(with its catalog) and casts `cluster_create` through Magnum's client code.
The conductor creates an application credential for that user with that
token, CAPO's clouds.yaml Secret holds it (and it authenticates), and
`cluster_delete` removes it with the conductor's own `[keystone_auth]`
credentials once the cluster is gone. A bad token gives CREATE_FAILED with
Keystone's answer as the reason.
"""
import base64
import json
import os
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, free_port
from suite_timing import count
from test_lifecycle import Env

KEYSTONE = os.path.join(ROOT, "scripts", "keystone.sh")


def call(method, url, token=None, body=None, headers=None):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json", **({"X-Auth-Token": token} if token else {}),
                                          **(headers or {})})
    # 120 s, not 30: in a CI run's busiest minutes on two cores a floating
    # IP DELETE to the run's shared Neutron took longer and failed its test
    # while the request was still being served; one that never answers
    # still fails here.
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            data = r.read()
            return r.status, dict(r.headers), json.loads(data) if data else None
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), None


def password_token(url, user, password, project_id=None, project_name=None):
    scope = {"project": {"id": project_id}} if project_id else \
        {"project": {"name": project_name, "domain": {"id": "default"}}}
    status, headers, body = call("POST", f"{url}/auth/tokens", body={"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"id": "default"}, "password": password}}},
        "scope": scope}})
    assert status == 201, status
    return headers["X-Subject-Token"], body


def start_keystone(d, database=None):
    """scripts/keystone.sh start in directory `d`: (url, admin password,
    an admin token). `database`: its connection URL (an empty database;
    SQLite in `d` otherwise)."""
    count("keystone")
    port = free_port()
    env = dict(os.environ, KEYSTONE_DATABASE=database) if database else None
    out = subprocess.run([KEYSTONE, "start", str(d), str(port)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    url = out.stdout.strip().split("=", 1)[1]
    admin_pw = (d / "admin-password").read_text().strip()
    admin, _ = password_token(url, "admin", admin_pw, project_name="admin")
    return url, admin_pw, admin


def user_with_role(url, admin, project, user, password, role):
    """A new project `project`, and a new user
    `user` with `password` and `role` on it: (project id, user id)."""
    status, _, p = call("POST", f"{url}/projects", admin, {"project": {"name": project, "domain_id": "default"}})
    assert status == 201, status
    status, _, u = call("POST", f"{url}/users", admin, {"user": {"name": user, "domain_id": "default",
                                                               "password": password,
                                                               "default_project_id": p["project"]["id"]}})
    assert status == 201, status
    _, _, roles = call("GET", f"{url}/roles?name={role}", admin)
    status, _, _ = call("PUT", f"{url}/projects/{p['project']['id']}/users/{u['user']['id']}/roles/"
                               f"{roles['roles'][0]['id']}", admin)
    assert status == 204
    return p["project"]["id"], u["user"]["id"]


@pytest.fixture(scope="module")
def keystone(tmp_path_factory):
    d = tmp_path_factory.mktemp("keystone")
    url, admin_pw, admin = start_keystone(d)
    project, user = user_with_role(url, admin, "tenant", "alice", "alice-pw", "member")
    yield dict(url=url, admin_pw=admin_pw, project=project, user=user)
    subprocess.run([KEYSTONE, "stop", str(d)], timeout=30)


@pytest.fixture(scope="module")
def env(keystone, tmp_path_factory):
    token, body = password_token(keystone["url"], "alice", "alice-pw", project_id=keystone["project"])
    conf = (f"[keystone_auth]\nauth_url = {keystone['url']}\nusername = admin\n"
            f"password = {keystone['admin_pw']}\nuser_domain_name = Default\nsystem_scope = all\n")
    e = Env(tmp_path_factory.mktemp("ks"), "v1beta1", credentials="", extra=conf.replace("[keystone_auth]", "\n[keystone_auth]"),
            client_env=dict(MC_USER=keystone["user"], MC_TOKEN=token, MC_TOKEN_INFO=json.dumps(body)))
    e.user_token = token
    yield e
    e.close()


def app_creds(keystone, token):
    status, _, body = call("GET", f"{keystone['url']}/users/{keystone['user']}/application_credentials", token)
    assert status == 200
    return body["application_credentials"]


def test_application_credential_lifecycle(env, keystone):
    project = keystone["project"]
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}),
                      project=project)["uuid"]
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    acs = app_creds(keystone, env.user_token)
    assert [a["name"] for a in acs] == [f"magnum-{uuid}"]
    assert acs[0]["project_id"] == project and not acs[0].get("unrestricted"), acs
    # The clouds.yaml CAPO reads holds it, and it authenticates.
    stack_id = got["cluster"]["stack_id"]
    secret = env.sim.get(f"/api/v1/namespaces/magnum-{project}/secrets/{stack_id}-cloud-credentials")
    clouds = base64.b64decode(secret["data"]["clouds.yaml"]).decode()
    fields = dict(line.strip().split(": ", 1) for line in clouds.splitlines() if ": " in line)
    assert fields["auth_url"] == keystone["url"] and fields["application_credential_id"] == acs[0]["id"]
    status, _, _ = call("POST", f"{keystone['url']}/auth/tokens", body={"auth": {"identity": {
        "methods": ["application_credential"], "application_credential": {
            "id": fields["application_credential_id"], "secret": fields["application_credential_secret"]}}}})
    assert status == 201

    env.client("delete", uuid, project=project)
    got, _ = env.wait(uuid, lambda g: g["cluster"] is None)
    assert app_creds(keystone, env.user_token) == [], "deleted with the cluster"


def test_keystone_refusal_is_create_failed(env, keystone):
    project = keystone["project"]
    env.client_env["MC_TOKEN"] = "not-a-valid-token"
    try:
        uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}),
                          project=project)["uuid"]
    finally:
        env.client_env["MC_TOKEN"] = env.user_token
    got, seen = env.wait(uuid, lambda g: g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_FAILED", seen
    reason = got["cluster"]["status_reason"]
    assert reason.startswith("cannot create the cluster's application credential: Keystone application "
                             "credential create: HTTP 401"), reason
    assert "not-a-valid-token" not in reason
    env.client("delete", uuid, project=project)
    env.wait(uuid, lambda g: g["cluster"] is None)
    assert app_creds(keystone, env.user_token) == []


def test_check_validates_the_keystone_credentials(env, keystone):
    """`magnum-conductor check` gets a token with [keystone_auth] against the
    real Keystone; a wrong password is one FAIL line that does not print it."""
    from conftest import CONDUCTOR_BIN
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", env.conf, "check"], capture_output=True, text=True, timeout=120)
    line = next(x for x in p.stdout.splitlines() if x.split()[1:2] == ["keystone"])
    assert line.startswith("OK") and "a token issued for admin" in line, p.stdout
    bad = env.tmp / "bad-keystone.conf"
    bad.write_text(open(env.conf).read().replace(f"password = {keystone['admin_pw']}", "password = N0t-the-pw-77"))
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", str(bad), "check"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    line = next(x for x in p.stdout.splitlines() if x.split()[1:2] == ["keystone"])
    assert line.startswith("FAIL") and "401" in line, p.stdout
    assert "N0t-the-pw-77" not in p.stdout + p.stderr
    assert [x.split()[1] for x in p.stdout.splitlines() if x.startswith("FAIL")] == ["keystone"], p.stdout


def test_keystone_cascades_a_deleted_users_credentials(keystone):
    """The suite's Keystone deletes what hangs off a row as MySQL would
    (scripts/keystone.sh turns SQLite's foreign keys on): a deleted user's
    application credentials go in one bulk delete, and their role rows with
    them. Without it the next credential was given the freed internal id and
    refused with 409 "Duplicate entry" (seen in CI; reproduced with exactly
    these steps)."""
    url = keystone["url"]
    admin, _ = password_token(url, "admin", keystone["admin_pw"], project_name="admin")
    project, gone = user_with_role(url, admin, "fk-project", "fk-gone", "fk-gone-pw", "member")
    other = "fk-other"
    status, _, u = call("POST", f"{url}/users", admin, {"user": {"name": other, "domain_id": "default",
                                                               "password": "fk-other-pw"}})
    assert status == 201
    _, _, roles = call("GET", f"{url}/roles?name=member", admin)
    status, _, _ = call("PUT", f"{url}/projects/{project}/users/{u['user']['id']}/roles/{roles['roles'][0]['id']}",
                        admin)
    assert status == 204
    for user, password, name in (("fk-gone", "fk-gone-pw", "first"), (other, "fk-other-pw", "second")):
        token, body = password_token(url, user, password, project_id=project)
        status, _, made = call("POST", f"{url}/users/{body['token']['user']['id']}/application_credentials", token,
                               {"application_credential": {"name": name}})
        assert status == 201, (name, status)
        assert [r["name"] for r in made["application_credential"]["roles"]], made
        if name == "first":
            status, _, _ = call("DELETE", f"{url}/users/{gone}", admin)
            assert status == 204
    # And the second one works.
    status, _, _ = call("POST", f"{url}/auth/tokens", body={"auth": {"identity": {
        "methods": ["application_credential"], "application_credential": {
            "id": made["application_credential"]["id"], "secret": made["application_credential"]["secret"]}}}})
    assert status == 201
