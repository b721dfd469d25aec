"""Control planes reused between test modules (tests/python/k8s.py, issue
48): what a module gives back is wiped to a fresh control plane's state, the
next module on the line gets exactly that, and a module that leaks into it
makes the next take fail, naming what leaked. One control plane, its own
(this module's first take starts it)."""
import pytest

import k8s

LINE = "v1beta2"
CAPI = "/apis/cluster.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def cp():
    if not k8s.REUSE:
        pytest.skip("MC_K8S_REUSE=0: control planes are not reused")
    cp = k8s.control_plane(LINE)
    yield cp
    cp.destroy()


def dirty(kube):
    """What a module leaves: a namespace holding objects whose finalizers no
    controller will remove (CAPI's, a ConfigMap's), an object in `default`,
    a cluster-scoped one, a webhook configuration."""
    kube.create_namespace("magnum-reuse", {})
    kube.request("POST", "/api/v1/namespaces/magnum-reuse/configmaps",
                 {"metadata": {"name": "held", "finalizers": ["example.com/never"]}})
    kube.request("POST", f"{CAPI}/namespaces/magnum-reuse/clusters",
                 {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                  "metadata": {"name": "c1", "finalizers": ["cluster.cluster.x-k8s.io"]}, "spec": {"paused": True}})
    kube.request("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "left"}})
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                 {"metadata": {"name": "mc-reuse-test"}, "rules": []})
    kube.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                 {"metadata": {"name": "mc-reuse-test"}, "webhooks": []})


def states(cp):
    """The process state (ps's STAT letter) of etcd, kube-apiserver and
    the controller manager."""
    return [k8s._proc_state(cp.env()[key]) for key in ("ETCD_PID", "APISERVER_PID", "KCM_PID")]


def test_given_back_wiped_to_fresh(cp):
    assert cp.unclean() is None
    baseline = set(cp.baseline)
    dirty(cp.kube)
    assert cp.unclean() == "namespaces ['magnum-reuse']"
    cp.stop()
    t, box, kept = k8s._pool.kept[LINE]
    t.join()
    # Kept parked: its three processes stopped (no CPU while no module
    # holds it), then running again once taken.
    assert box["clean"] and kept is cp and cp.parked
    assert states(cp) == ["T", "T", "T"], states(cp)
    again = k8s.control_plane(LINE)
    assert "T" not in states(cp) and not cp.parked, states(cp)
    assert again is cp, "the same control plane, not a new one"
    assert cp.unclean() is None
    names = {n["metadata"]["name"] for n in cp.kube.get("/api/v1/namespaces")["items"]}
    assert names == k8s.SYSTEM_NAMESPACES
    assert cp.kube.get("/api/v1/namespaces/default/configmaps/left") is None
    assert cp.kube.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/mc-reuse-test") is None
    assert cp.kube.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/mc-reuse-test") is None
    assert cp._outside_namespaces() == baseline
    # The line's CRDs are all still there: a Cluster can be made again.
    cp.kube.create_namespace("magnum-reuse", {})
    made = cp.kube.request("POST", f"{CAPI}/namespaces/magnum-reuse/clusters",
                           {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                            "metadata": {"name": "c1"}, "spec": {"paused": True}})
    assert made["metadata"]["name"] == "c1"


def test_a_leak_after_give_back_fails_the_next_take(cp):
    """A process of the module before (a conductor, capi-sim) still writing
    after the wipe: the next take fails and says what it found."""
    cp.stop()
    t, box, kept = k8s._pool.kept[LINE]
    t.join()
    assert box["clean"] and kept is cp
    # Parked while kept: running again for the writer (take resumes it
    # before its check, and a writer's requests wait meanwhile).
    cp.resume()
    cp.kube.create_namespace("magnum-late-writer", {})
    with pytest.raises(AssertionError, match=r"magnum-late-writer.*still writes to it"):
        k8s.control_plane(LINE)
    assert cp not in k8s._all, "stopped, not reused"


def test_a_changed_control_plane_is_not_reused():
    """A CRD deleted (test_check does, and puts it back): no wipe brings
    it back, so the control plane is stopped and the next take is fresh."""
    cp = k8s.control_plane(LINE)
    cp.kubectl("delete", "crd", "clusters.cluster.x-k8s.io")
    cp.stop()
    t, box, kept = k8s._pool.kept[LINE]
    t.join()
    assert box["clean"] is False
    assert cp not in k8s._all
    with k8s._pool.lock:
        k8s._pool.kept.pop(LINE, None)
