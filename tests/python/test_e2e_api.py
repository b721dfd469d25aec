"""A user's whole session through the real magnum-api and `openstack coe`.

See api_env.py for what runs: real Keystone, the real magnum-api (23.0.0 as
the console script, which sends every object read/write to our conductor,
and as the WSGI application; 22.0.0 as both) with our driver
package, a database built by that release's migrations, our conductor, a
real kube-apiserver as the management cluster (scripts/k8s-up.sh, v1beta2 for
23's console script and 22's WSGI, v1beta1 for the others; CAPI's controllers simulated by
capi-sim). The user only types CLI commands: create, config, credential
rotate, resize, resize naming the node to remove, upgrade, nodegroup
create/update/delete, delete.

What the API itself refuses, before any RPC, comes from Magnum's code plus
our driver package (deploy/magnum-driver): an even control-plane size on
create and on resize (`validate_master_size`, `validate_master_resize`), a
template or cluster whose image's `os_distro` this deployment does not serve.
Where that refusal happens differs by release, and is asserted as it is:
Magnum 23.0.0 resolves a template's driver by name (`[drivers]
default_driver` or the first installed one) without checking `provides`, so
an unserved distribution passes template create and is refused at cluster
create (`enforce_cluster_type_supported`); Magnum 22.0.0 checks `provides`
at template create.
"""
import base64

import pytest

from api_env import USER_PW, ApiEnv
from test_lifecycle_keystone import call, password_token

COMMON = ["--coe", "kubernetes", "--external-network", "public", "--flavor", "m1.small",
          "--master-flavor", "m1.medium", "--keypair", "mykey", "--master-lb-enabled",
          "--network-driver", "calico"]


def session_env(request, tmp_path_factory):
    release, mode, line = request.param
    e = ApiEnv(tmp_path_factory.mktemp(f"e2e-{release}-{mode}"), release, mode, line)
    yield e
    assert e.close() == 0, "the conductor did not stop cleanly"


# Magnum 23.0.0's sessions here, 22.0.0's in test_e2e_api_22.py (the same
# tests, a module of its own so that the two releases run in two test
# processes at once: four sessions in one module were one process's 25
# minutes, issue 48).
@pytest.fixture(scope="module", params=[("23", "console", "v1beta2"), ("23", "wsgi", "v1beta1")],
                ids=lambda p: "-".join(p))
def env(request, tmp_path_factory):
    yield from session_env(request, tmp_path_factory)


def template(env, name, image, kube_tag):
    return env.coe("cluster", "template", "create", name, "--image", image, *COMMON,
                   "--labels", f"kube_tag={kube_tag}", "-f", "json")


def refused(env, *args):
    rc, _, err = env.openstack("coe", *args, ok=False)
    assert rc != 0, args
    return err


def settled(c):
    return c is not None and not c["status"].endswith("_IN_PROGRESS")


def test_user_session(env):
    # The whole session on 23, and on 22 under WSGI (issue 35: its upgrade
    # reply must come at Cluster 1.23, which a WSGI magnum-api cannot ask
    # the conductor to backport); the 22 console script to the first resize.
    full = env.release == "23" or env.mode == "wsgi"
    t = template(env, "k8s-v1.30", "ubuntu-2204-kube-v1.30.4", "v1.30.4")
    assert t["cluster_distro"] == "ubuntu" and t["coe"] == "kubernetes"
    # magnum-api looked the image up in Glance: one it has not, one without
    # its os_distro (23.0.0: magnum/api/attr_validator.py
    # validate_image; 22.0.0 picks the driver by the image's os_distro
    # first, which an image Glance lacks has not).
    err = refused(env, "cluster", "template", "create", "nope", "--image", "no-such-image", *COMMON)
    if env.release == "23":
        assert "Image no-such-image could not be found (HTTP 400)" in err, err
    else:
        assert "Cluster type (vm, Unset, kubernetes) not supported (HTTP 400)" in err, err
    err = refused(env, "cluster", "template", "create", "nodistro", "--image", "no-distro", *COMMON)
    if env.release == "23":
        assert "Image no-distro doesn't contain os_distro field (HTTP 400)" in err, err
    else:  # Glance has it, with no os_distro (a missing image reads "Unset")
        assert "Cluster type (vm, None, kubernetes) not supported (HTTP 400)" in err, err

    # Refusals at the API, before any RPC.
    if env.release == "23":
        assert t["driver"] == "k8s_capi_rust"
        flatcar = template(env, "flatcar", "flatcar-kube-v1.30.4", "v1.30.4")
        err = refused(env, "cluster", "create", "fc", "--cluster-template", flatcar["uuid"], "--node-count", "1")
        assert "Cluster type (vm, flatcar, kubernetes)" in err and "not supported" in err and "HTTP 400" in err, err
    else:
        err = refused(env, "cluster", "template", "create", "flatcar", "--image", "flatcar-kube-v1.30.4", *COMMON)
        assert "Cluster type (vm, flatcar, kubernetes)" in err and "not supported" in err and "HTTP 400" in err, err
    err = refused(env, "cluster", "create", "even", "--cluster-template", "k8s-v1.30", "--master-count", "2",
                  "--node-count", "1")
    assert "master nodegroup size of 2 is invalid, size cannot be an even number (HTTP 400)" in err, err
    assert env.coe("cluster", "list", "-f", "json") == []

    # Create.
    env.coe("cluster", "create", "demo", "--cluster-template", "k8s-v1.30", "--master-count", "1",
            "--node-count", "1")
    c, seen = env.wait("demo", settled)
    assert c["status"] == "CREATE_COMPLETE", seen
    assert c["api_address"].startswith("https://") and c["coe_version"] == "v1.30.4"
    assert len(c["master_addresses"]) == 1 and len(c["node_addresses"]) == 1, c
    assert c["health_status"] == "HEALTHY", c
    listed = env.coe("cluster", "list", "-f", "json")
    assert [(x["name"], x["status"]) for x in listed] == [("demo", "CREATE_COMPLETE")]
    ngs = {n["name"]: n for n in env.coe("nodegroup", "list", "demo", "-f", "json")}
    assert set(ngs) == {"default-master", "default-worker"}
    assert all(n["status"] == "CREATE_COMPLETE" for n in ngs.values()), ngs

    # The kubeconfig `cluster config` writes: signed by the conductor, with
    # the CA the management cluster holds for this cluster.
    out = env.coe("cluster", "config", "demo", "--dir", str(env.tmp), "--force")
    assert "KUBECONFIG" in out, out
    kubeconfig = (env.tmp / "config").read_text()
    assert f"server: {c['api_address']}" in kubeconfig
    ns = f"magnum-{env.ks['tenant']}"
    [capi_cluster] = env.sim.items(env.sim.capi, "clusters", ns=ns)
    ca_secret = env.sim.get(f"/api/v1/namespaces/{ns}/secrets/{capi_cluster['metadata']['name']}-ca")
    ca = base64.b64decode(ca_secret["data"]["tls.crt"]).decode()
    in_config = next(ln.split(":", 1)[1].strip() for ln in kubeconfig.splitlines()
                     if "certificate-authority-data" in ln)
    assert base64.b64decode(in_config).decode().strip() == ca.strip()

    # The cluster's OpenStack credential: an application credential of the
    # user, made by the conductor with the user's token; CAPO's clouds.yaml
    # holds it. `credential rotate` replaces it: a new one, the Secret
    # updated, the old one deleted (with the conductor's service user).
    first = app_creds(env, c["uuid"])
    assert [a["name"] for a in first] == [f"magnum-{c['uuid']}"], first
    assert clouds_yaml(env, capi_cluster)["application_credential_id"] == first[0]["id"]
    out = env.coe("credential", "rotate", "demo")
    assert f"Request to rotate credentials for cluster {c['uuid']} accepted" in out, out
    second = app_creds(env, c["uuid"])
    assert len(second) == 1 and second[0]["id"] != first[0]["id"], (first, second)
    fields = clouds_yaml(env, capi_cluster)
    assert fields["application_credential_id"] == second[0]["id"]
    status, _, _ = call("POST", f"{env.ks['url']}/auth/tokens", body={"auth": {"identity": {
        "methods": ["application_credential"], "application_credential": {
            "id": fields["application_credential_id"], "secret": fields["application_credential_secret"]}}}})
    assert status == 201, "the new credential authenticates"

    # Resize the workers; an even control plane is refused by the API.
    err = refused(env, "cluster", "resize", "demo", "2", "--nodegroup", "default-master")
    assert "master nodegroup size of 2 is invalid, size cannot be an even number (HTTP 400)" in err, err
    env.coe("cluster", "resize", "demo", "2")
    c, seen = env.wait("demo", lambda c: settled(c) and c["node_count"] == 2)
    assert c["status"] == "UPDATE_COMPLETE", seen
    assert len(c["node_addresses"]) == 2, c
    if not full:
        delete(env, c)
        return

    # Resize back down naming the node to remove (a node name, as `kubectl
    # get nodes` shows it): exactly that one goes.
    def workers():
        return sorted(m["metadata"]["name"] for m in env.sim.items(
            env.sim.capi, "machines", f"magnum.openstack.org/nodegroup=default-worker,"
            f"cluster.x-k8s.io/cluster-name={capi_cluster['metadata']['name']}", ns=ns)
            if not m["metadata"].get("deletionTimestamp"))
    victim, keeper = workers()
    env.coe("cluster", "resize", "demo", "1", "--nodes-to-remove", victim)
    c, seen = env.wait("demo", lambda c: settled(c) and c["node_count"] == 1)
    assert c["status"] == "UPDATE_COMPLETE", seen
    assert workers() == [keeper], "the named node went, the other stayed"

    # Upgrade to the next minor.
    up = template(env, "k8s-v1.31", "ubuntu-2204-kube-v1.31.1", "v1.31.1")
    env.coe("cluster", "upgrade", "demo", "k8s-v1.31")
    c, seen = env.wait("demo", lambda c: settled(c) and c["cluster_template_id"] == up["uuid"], timeout=300)
    assert c["status"] == "UPDATE_COMPLETE", seen
    assert c["coe_version"] == "v1.31.1"
    # A downgrade is refused, and nothing changes.
    err = refused(env, "cluster", "upgrade", "demo", "k8s-v1.30")
    assert "downgrade" in err.lower() or "v1.30.4" in err, err
    assert env.coe("cluster", "show", "demo", "-f", "json")["cluster_template_id"] == up["uuid"]

    # Node groups.
    env.coe("nodegroup", "create", "demo", "extra", "--node-count", "1", "--labels", "tier=batch")
    extra = ("/clusters/demo/nodegroups/extra", ("coe", "nodegroup", "show", "demo", "extra"))
    n, _ = env.poll(*extra, lambda n: n is not None and not n["status"].endswith("_IN_PROGRESS"))
    assert n["status"] == "CREATE_COMPLETE", n
    assert len(n["node_addresses"]) == 1 and n["labels"].get("tier") == "batch", n
    env.coe("nodegroup", "update", "demo", "extra", "--max-nodes", "3")
    n, _ = env.poll(*extra, lambda n: n is not None and n["max_node_count"] == 3
                    and not n["status"].endswith("_IN_PROGRESS"))
    assert (n["status"], n["max_node_count"]) == ("UPDATE_COMPLETE", 3), n
    env.coe("nodegroup", "delete", "demo", "extra")

    def names(view):  # the API's {"nodegroups": [...]}, the CLI's list
        return [x["name"] for x in (view["nodegroups"] if isinstance(view, dict) else view)]
    listed, _ = env.poll("/clusters/demo/nodegroups", ("coe", "nodegroup", "list", "demo"),
                         lambda v: v is not None and "extra" not in names(v))
    names = names(listed)
    assert names == ["default-master", "default-worker"] or sorted(names) == ["default-master", "default-worker"]
    delete(env, c)


def app_creds(env, cluster):
    """Alice's application credentials made for `cluster` (uuid): the
    conductor names them `magnum-<uuid>` (`-<suffix>` once rotated)."""
    token, _ = password_token(env.ks["url"], env.ks["user"], USER_PW, project_id=env.ks["tenant"])
    status, _, body = call("GET", f"{env.ks['url']}/users/{env.ks['alice']}/application_credentials", token)
    assert status == 200
    return [a for a in body["application_credentials"] if a["name"].startswith(f"magnum-{cluster}")]


def clouds_yaml(env, capi_cluster):
    name = capi_cluster["metadata"]["name"]
    secret = env.sim.get(f"/api/v1/namespaces/{capi_cluster['metadata']['namespace']}/secrets/"
                         f"{name}-cloud-credentials")
    text = base64.b64decode(secret["data"]["clouds.yaml"]).decode()
    return dict(line.strip().split(": ", 1) for line in text.splitlines() if ": " in line)


def delete(env, c):
    env.coe("cluster", "delete", "demo")
    got, seen = env.wait("demo", lambda c: c is None)
    assert app_creds(env, c["uuid"]) == [], "the cluster's application credential is deleted with it"
    ns = f"magnum-{env.ks['tenant']}"
    assert env.sim.items(env.sim.capi, "clusters", ns=ns) == [], "the CAPI Cluster is gone"
    assert env.coe("cluster", "list", "-f", "json") == []
