"""Replies carry objects at the caller's versions (issue 35), checked against
Magnum's own object code for each class and each version step between
Magnum 22.0.0 and 23.0.0: Cluster 1.24 -> 1.23 (1.24 removed the trust
fields), NodeGroup 1.2 -> 1.1 (1.2 added node_labels and node_taints); the
classes whose versions did not move (ClusterTemplate 1.21, Certificate 1.2,
X509KeyPair 1.2, MagnumService 1.0) come back as they are.

For the same data, Magnum 23.0.0's `obj_to_primitive(target_version=...)`
and ours (`mc-db-tool for-caller`, the function the conductor's replies go
through) are both loaded by Magnum 22.0.0's own `obj_from_primitive` (in its
venv) and must give the same object. Magnum's classes do not override
`obj_make_compatible`, so its 1.1 NodeGroup still carries node_labels, which
the 1.1 reader ignores; ours leaves them out. The end-to-end proof, 22.0.0's
magnum-api under WSGI doing a whole session upgrade included, is
tests/python/test_e2e_api.py.
"""
import json
import os
import subprocess

import pytest

from conftest import CONDUCTOR_BIN, VENV22_BIN

DB_TOOL = os.environ.get("MC_DB_TOOL", os.path.join(os.path.dirname(CONDUCTOR_BIN), "mc-db-tool"))

UUID = "5f0e7a2c-1b3d-4e5f-8a9b-0c1d2e3f4a5b"

LOAD_22 = r"""
import json, sys
from magnum import objects
from magnum.objects import base
out = []
for p in json.load(sys.stdin):
    o = base.MagnumObject.obj_from_primitive(p)
    out.append({"version": o.VERSION, "class": o.obj_name(),
                "fields": {k: str(getattr(o, k)) for k in sorted(o.fields) if o.obj_attr_is_set(k)}})
print(json.dumps(out))
"""


def objects23():
    from magnum import objects
    from magnum.common import context
    ctx = context.make_admin_context(all_tenants=True)
    tpl = objects.ClusterTemplate(ctx, id=3, uuid=UUID, name="k8s", coe="kubernetes", image_id="img",
                                  labels={"kube_tag": "v1.30.4"}, public=True)
    return {
        "Cluster": objects.Cluster(ctx, id=7, uuid=UUID, name="demo", project_id="p", user_id="u",
                                   cluster_template_id=UUID, status="UPDATE_IN_PROGRESS",
                                   labels={"kube_tag": "v1.31.2"}, create_timeout=60, master_lb_enabled=True,
                                   floating_ip_enabled=True, etcd_ca_cert_ref="e", front_proxy_ca_cert_ref="f"),
        "NodeGroup": objects.NodeGroup(ctx, id=9, uuid=UUID, name="default-worker", cluster_id=UUID,
                                       project_id="p", docker_volume_size=20, labels={}, flavor_id="m1.small",
                                       image_id="img", node_addresses=["10.0.0.5"], node_count=2, role="worker",
                                       max_node_count=4, min_node_count=1, is_default=True, status="CREATE_COMPLETE",
                                       node_labels={"a": "b"}, node_taints=[{"key": "x", "effect": "NoSchedule"}]),
        "ClusterTemplate": tpl,
        "Certificate": objects.Certificate(ctx, project_id="p", user_id="u", cluster_uuid=UUID, csr="CSR", pem="PEM",
                                           ca_cert_type="kubernetes"),
        "X509KeyPair": objects.X509KeyPair(ctx, id=1, uuid=UUID, name="k", certificate="C",
                                           private_key="K", project_id="p", user_id="u"),
        "MagnumService": objects.MagnumService(ctx, id=1, host="h", binary="magnum-conductor", disabled=False,
                                               report_count=3, forced_down=False),
    }


def for_caller(reply, versions):
    p = subprocess.run([DB_TOOL, "for-caller", json.dumps(reply), json.dumps(versions)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def load22(primitives):
    p = subprocess.run([os.path.join(VENV22_BIN, "python"), "-c", LOAD_22], input=json.dumps(primitives),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


# Magnum 22.0.0's versions (magnum/objects/*.py VERSION).
VERSIONS_22 = {"Cluster": "1.23", "NodeGroup": "1.1", "ClusterTemplate": "1.21", "Certificate": "1.2",
               "X509KeyPair": "1.2", "MagnumService": "1.0"}


@pytest.mark.parametrize("cls", sorted(VERSIONS_22))
def test_each_class_reads_the_same_in_magnum_22(cls):
    obj = objects23()[cls]
    target = VERSIONS_22[cls]
    newest = obj.obj_to_primitive()
    theirs = obj.obj_to_primitive(target_version=target)
    ours = for_caller(newest, {cls: target})
    assert ours["magnum_object.version"] == theirs["magnum_object.version"] == target
    got_ours, got_theirs = load22([ours, theirs])
    assert got_ours == got_theirs, (ours, theirs)
    assert got_ours["version"] == target
    if cls == "NodeGroup":
        # Ours leaves out what 1.1 does not have; Magnum's keeps it (ignored).
        assert "node_labels" not in ours["magnum_object.data"]
        assert "node_labels" in theirs["magnum_object.data"]
    if newest["magnum_object.version"] == target:
        assert ours == newest, "a class the caller knows at our version comes back as it is"


def test_a_cluster_with_its_template_loaded():
    """Magnum 23.0.0 cannot backport this one itself (`obj_make_compatible`:
    "No rule for cluster_template", Cluster has no `obj_relationships`); ours
    gives 22.0.0 a Cluster 1.23 with its ClusterTemplate 1.21 inside."""
    objs = objects23()
    c = objs["Cluster"]
    c.cluster_template = objs["ClusterTemplate"]
    with pytest.raises(Exception, match="No rule for cluster_template"):
        c.obj_to_primitive(target_version="1.23")
    ours = for_caller(c.obj_to_primitive(), {"Cluster": "1.23"})
    assert ours["magnum_object.version"] == "1.23"
    assert ours["magnum_object.data"]["cluster_template"]["magnum_object.version"] == "1.21"
    [got] = load22([ours])
    assert got["version"] == "1.23" and "cluster_template" in got["fields"]


def test_a_list_and_a_caller_at_our_versions():
    objs = objects23()
    newest = [objs["Cluster"].obj_to_primitive(), objs["Cluster"].obj_to_primitive()]
    assert [o["magnum_object.version"] for o in for_caller(newest, {"Cluster": "1.23"})] == ["1.23", "1.23"]
    assert for_caller(newest, {"Cluster": "1.24"}) == newest
    assert for_caller(newest, {}) == newest
