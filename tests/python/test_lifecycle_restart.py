"""kill -9 of the conductor at 8 points of create and delete, then a restart.

Each point is a failpoint (MAGNUM_CONDUCTOR_FAILPOINT) where the process
freezes itself (SIGSTOP); the test then sends it SIGKILL, so it dies exactly
there: no cleanup, no acknowledgement, no later step. A fresh conductor
must finish the operation: the cast comes back from the broker when it was
not yet acknowledged, and clusters left *_IN_PROGRESS (or DELETE_COMPLETE
with rows left) are resumed at startup. Every cluster ends in the right
state with exactly one of each object, four keypairs, and nothing left after
its delete.
"""
import json
import os
import signal
import time

import pytest

from test_lifecycle import Env

CREATE_POINTS = ["create.after_cluster_row", "create.after_rows", "create.after_keypairs",
                 "create.after_stack_id", "create.mid_apply"]
DELETE_POINTS = ["delete.before_capi_delete", "delete.after_ack", "delete.after_delete_complete"]
UUID_LABEL = "magnum.openstack.org/cluster-uuid"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("restart"), "v1beta1")
    yield e
    e.close()


def died(env):
    """Wait until the conductor has frozen at its failpoint, then kill -9 it."""
    proc = env.conductor.proc
    deadline = time.time() + 60
    while proc_state(proc.pid) != "T":
        assert proc.poll() is None, f"conductor exited with {proc.returncode} before the failpoint"
        assert time.time() < deadline, "the conductor never reached the failpoint"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    rc = proc.wait(30)
    assert rc == -signal.SIGKILL, f"conductor exited with {rc}, not by kill -9 at the failpoint"


def proc_state(pid):
    """The state letter of /proc/<pid>/stat (T: stopped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "?"


def objects_of(env, uuid):
    sel = f"{UUID_LABEL}={uuid}"
    sim, capi = env.sim, env.sim.capi
    return {
        "Cluster": len(sim.items(capi, "clusters", sel)),
        "MachineDeployment": len(sim.items(capi, "machinedeployments", sel)),
        "KubeadmControlPlane": len(sim.items("controlplane.cluster.x-k8s.io/v1beta1", "kubeadmcontrolplanes", sel)),
        "OpenStackCluster": len(sim.items("infrastructure.cluster.x-k8s.io/v1beta1", "openstackclusters", sel)),
        "HelmChartProxy": len(sim.items("addons.cluster.x-k8s.io/v1alpha1", "helmchartproxies", sel)),
        "ClusterResourceSet": len(sim.items("addons.cluster.x-k8s.io/v1beta1", "clusterresourcesets", sel)),
        "Secret": len(sim.items("v1", "secrets", sel)),
    }


ONE_CLUSTER = {"Cluster": 1, "MachineDeployment": 1, "KubeadmControlPlane": 1, "OpenStackCluster": 1,
               "HelmChartProxy": 4, "ClusterResourceSet": 1, "Secret": 6}
NOTHING = {k: 0 for k in ONE_CLUSTER}


def create(env):
    uuid = env.client("create", env.template, json.dumps({"master_count": 1, "node_count": 1}))["uuid"]
    return uuid


def complete(env, uuid):
    got, seen = env.wait(uuid, lambda g: g["cluster"] and g["cluster"]["status"] != "CREATE_IN_PROGRESS")
    assert got["cluster"]["status"] == "CREATE_COMPLETE", seen
    return got


@pytest.mark.parametrize("point", CREATE_POINTS)
def test_create_survives_a_kill(env, point):
    before = env.client("get", "00000000-0000-0000-0000-000000000000")["x509keypairs"]
    env.restart(point)
    uuid = create(env)
    died(env)
    env.restart()
    got = complete(env, uuid)
    assert len(got["nodegroups"]) == 2
    assert all(n["status"] == "CREATE_COMPLETE" and n["stack_id"] == got["cluster"]["stack_id"]
               for n in got["nodegroups"])
    assert got["x509keypairs"] == before + 4, "no keypair leaked or duplicated"
    assert objects_of(env, uuid) == ONE_CLUSTER
    env.client("delete", uuid)
    got, _ = env.wait(uuid, lambda g: g["cluster"] is None)
    assert got["x509keypairs"] == before and got["nodegroups"] == []
    assert objects_of(env, uuid) == NOTHING


@pytest.mark.parametrize("point", DELETE_POINTS)
def test_delete_survives_a_kill(env, point):
    before = env.client("get", "00000000-0000-0000-0000-000000000000")["x509keypairs"]
    env.restart()
    uuid = create(env)
    complete(env, uuid)
    env.restart(point)
    env.client("delete", uuid)
    died(env)
    env.restart()
    got, seen = env.wait(uuid, lambda g: g["cluster"] is None)
    assert got["nodegroups"] == [] and got["x509keypairs"] == before, seen
    assert objects_of(env, uuid) == NOTHING
