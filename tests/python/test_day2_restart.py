"""kill -9 of the conductor in the middle of day-2 operations, then a restart.

As in test_lifecycle_restart.py, a failpoint freezes the process at an
exact step (SIGSTOP) and the test kills it there. Whether the request was
acknowledged or not, a new conductor must converge: an unacknowledged cast
(or call) comes back from the broker; rows already saved are applied by the
status worker ([`plan::drift`]). Every operation ends in its final state
with exactly the expected machines and objects: nothing duplicated, nothing
left behind.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from test_day2 import T131, machines, md, ng, settled
from test_lifecycle import HERE, NAMESPACE, Env
from test_lifecycle_restart import died

UUID_LABEL = "magnum.openstack.org/cluster-uuid"
INFRA = "infrastructure.cluster.x-k8s.io/v1beta1"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("day2-restart"), "v1beta1")
    yield e
    e.close()


@pytest.fixture(scope="module")
def cluster(env):
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 2}))["uuid"]
    got, seen = env.wait(uuid, settled)
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    return uuid, got["cluster"]["stack_id"]


def objects(env, uuid):
    sel = f"{UUID_LABEL}={uuid}"
    return {
        "MachineDeployment": sorted(o["metadata"]["name"] for o in env.sim.items(env.sim.capi, "machinedeployments", sel)),
        "MachineHealthCheck": len(env.sim.items(env.sim.capi, "machinehealthchecks", sel)),
        "OpenStackMachineTemplate": len(env.sim.items(INFRA, "openstackmachinetemplates", sel)),
    }


def converged(env, uuid, check, what):
    """Wait until the cluster and every node group have settled and `check`
    holds, in one read. (A cast redelivered after the restart may run again
    once the status pass has already finished the work: it marks the rows in
    progress for a moment, cluster and node group one after the other, so a
    read between those writes is not the end state; a node group that stays
    in progress times the wait out.)"""
    def done(g):
        return (settled(g) and check(g)
                and all(not n["status"].endswith("_IN_PROGRESS") for n in g["nodegroups"]))

    got, seen = env.wait(uuid, done, timeout=120)
    assert got["cluster"]["status"] == "UPDATE_COMPLETE", (what, seen)
    return got


@pytest.mark.parametrize("point", ["resize.after_nodegroup", "resize.after_rows", "update.after_nodegroup"])
def test_scale_survives_a_kill(env, cluster, point):
    uuid, stack = cluster
    n = len(machines(env, "default-worker", uuid)) + 1
    env.restart(point)
    if point.startswith("update"):
        env.client("update", uuid, json.dumps({"node_count": n}))
    else:
        env.client("resize", uuid, str(n), "[]")
    died(env)
    env.restart()
    got = converged(env, uuid, lambda g: ng(g, "default-worker")["node_count"] == n
                    and len(ng(g, "default-worker")["node_addresses"]) == n, point)
    assert len(machines(env, "default-worker", uuid)) == n
    assert md(env, stack, "default-worker")["spec"]["replicas"] == n
    assert objects(env, uuid)["MachineDeployment"] == [f"{stack}-default-worker"]


def test_named_removal_survives_a_kill(env, cluster):
    """Killed after the machine was marked, before any row: the cast comes back."""
    uuid, stack = cluster
    ms = machines(env, "default-worker", uuid)
    victim = ms[0]["metadata"]["name"]
    env.restart("resize.after_annotations")
    env.client("resize", uuid, str(len(ms) - 1), json.dumps([victim]))
    died(env)
    env.restart()
    converged(env, uuid, lambda g: ng(g, "default-worker")["node_count"] == len(ms) - 1
              and len(ng(g, "default-worker")["node_addresses"]) == len(ms) - 1, "named removal")
    left = {m["metadata"]["name"] for m in machines(env, "default-worker", uuid)}
    assert left == {m["metadata"]["name"] for m in ms} - {victim}


@pytest.mark.parametrize("point", ["nodegroup_create.after_row", "nodegroup_delete.after_rows"])
def test_nodegroups_survive_a_kill(env, cluster, point):
    uuid, stack = cluster
    before = objects(env, uuid)
    name = "extra-" + point.split(".")[0].split("_")[1]
    if point.startswith("nodegroup_delete"):
        env.restart()
        env.client("ng-create", uuid, json.dumps({"name": name, "node_count": 1}))
        converged(env, uuid, lambda g: any(n["name"] == name and n["status"] == "CREATE_COMPLETE"
                                           for n in g["nodegroups"]), "setup")
        env.restart(point)
        env.client("ng-delete", uuid, name)
    else:
        env.restart(point)
        env.client("ng-create", uuid, json.dumps({"name": name, "node_count": 1}))
    died(env)
    env.restart()
    if point.startswith("nodegroup_delete"):
        converged(env, uuid, lambda g: all(n["name"] != name for n in g["nodegroups"]), point)
        assert objects(env, uuid) == before, "nothing left behind"
        assert machines(env, name, uuid) == []
    else:
        got = converged(env, uuid, lambda g: any(n["name"] == name and n["status"] == "CREATE_COMPLETE"
                                                 for n in g["nodegroups"]), point)
        assert len(ng(got, name)["node_addresses"]) == 1
        after = objects(env, uuid)
        assert after["MachineDeployment"] == sorted(before["MachineDeployment"] + [f"{stack}-{name}"])
        assert after["MachineHealthCheck"] == before["MachineHealthCheck"] + 1
        assert len(machines(env, name, uuid)) == 1
        env.client("ng-delete", uuid, name)
        converged(env, uuid, lambda g: all(n["name"] != name for n in g["nodegroups"]), "cleanup")


@pytest.mark.parametrize("point,tag", [("upgrade.after_nodegroups", "v1.31.2"), ("upgrade.after_rows", "v1.32.1")])
def test_upgrade_survives_a_kill(env, cluster, point, tag):
    uuid, stack = cluster
    t = env.client("template", json.dumps(dict(T131, name="k8s-" + tag, image_id="ubuntu-2204-kube-" + tag,
                                               labels={"kube_tag": tag})))["uuid"]
    env.restart(point)
    # The call waits for a reply that never comes from the killed conductor.
    call = subprocess.Popen([sys.executable, os.path.join(HERE, "lifecycle_client.py"), env.client_conf,
                             "upgrade", uuid, t, "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        died(env)
        env.restart()
        got = converged(env, uuid, lambda g: g["cluster"]["coe_version"] == tag, point)
    finally:
        call.kill()
        call.wait()
    assert got["cluster"]["cluster_template_id"] == t
    assert all(n["version"] == tag for n in got["nodegroups"])
    ws = machines(env, "default-worker", uuid)
    assert {m["spec"]["version"] for m in ws} == {tag}
    assert len(ws) == ng(got, "default-worker")["node_count"]
    assert objects(env, uuid)["MachineDeployment"] == [f"{stack}-default-worker"]
