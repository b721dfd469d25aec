"""Every label this conductor implements, at once (issue 32): one template
through the real magnum-api (23.0.0) with the real Keystone, Nova, Glance
and Neutron of the run's cloud (shared_cloud.py; and Manila's), on the v1beta2 line here and
the v1beta1 line in test_labels_all_v1beta1.py (each a test process of its own).

The cluster reaches CREATE_COMPLETE with nothing ignored in its
status_reason; the objects the labels render are read back from the real
apiserver (its validation passed: they are stored); the Nova server groups
of `server_group_policies` exist in the real Nova with their policy, made
with the cluster's own application credential; the workload kube-apiserver
capi-sim starts runs with the flags and files the KubeadmControlPlane holds
(capi-sim writes the KCP `files` on the control-plane "host" and maps the
apiServer `extraVolumes`, as kubeadm's static pod mounts them: see
tests/capi-sim/src/workload.rs, `in_pod`) and writes its audit log there;
the Keystone webhook's kubeconfig is read by that apiserver, its objects are
in the ClusterResourceSet CAPI binds to the cluster; Manila CSI's
StorageClasses are one per share type the real Manila API (23.0.0) shows the
cluster's credential, and the delete deletes the cluster's Manila shares (by
Manila CSI's metadata) and no other, each share's snapshots first (Manila
refuses a share that has one), a kept share's snapshots kept with it;
every HelmChartProxy renders with the real Helm engine from its upstream
chart (tests/python/helm_charts.py), reads every value key the conductor
writes, and pulls every image from `container_infra_prefix`; OCCM's and
Cinder CSI's pods mount Secrets that CAPI's ClusterResourceSet put in the
workload cluster, whose cloud.conf holds the cluster's credential, region,
load balancer labels and the private CA at the path it names. Deleting the cluster leaves
no server group of it in Nova (the clean-up deletes them), and nothing of
it in the management cluster."""
import base64
import configparser
import json
import os
import subprocess
import time

import pytest

import helm_charts
import offline_list
from api_env import USER_PW, ApiEnv
from shared_cloud import MANILA_SHARE_TYPES
from conftest import CONDUCTOR_BIN
from test_api_proxy import apiserver_flags
from test_lifecycle_keystone import call, password_token

COMMON = ["--coe", "kubernetes", "--external-network", "public", "--flavor", "m1.small",
          "--master-flavor", "m1.medium", "--keypair", "mykey", "--master-lb-enabled",
          "--network-driver", "calico", "--docker-volume-size", "20"]
LABELS = {
    "kube_tag": "v1.30.4",
    "boot_volume_size": "40",
    "boot_volume_type": "ssd",
    "boot_volume_availability_zone": "az-volumes",
    "docker_volume_type": "fast",
    "availability_zone": "nova",
    "control_plane_availability_zones": "nova,az-2",
    "auto_scaling_enabled": "true",
    "min_node_count": "1",
    "max_node_count": "3",
    "auto_healing_enabled": "true",
    "octavia_provider": "amphora",
    "octavia_lb_algorithm": "LEAST_CONNECTIONS",
    "octavia_lb_healthcheck": "false",
    "api_server_lb_flavor": "ha",
    "api_server_lb_availability_zone": "az-lb",
    "master_lb_floating_ip_enabled": "true",
    "api_server_floating_ip": "203.0.113.7",
    "api_master_lb_allowed_cidrs": "10.0.0.0/8,192.168.0.0/16",
    "fixed_subnet_cidr": "10.1.0.0/24",
    "dns_cluster_domain": "cluster.example",
    "service_cluster_ip_range": "10.254.0.0/16",
    "calico_ipv4pool": "10.100.0.0/16",
    "container_infra_prefix": "registry.example.com/mirror",
    "volumes_policy": "delete",
    "api_server_cert_sans": "api.example.com",
    "api_server_tls_cipher_suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "kubelet_tls_cipher_suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "admission_control_list": "AlwaysPullImages",
    "oidc_issuer_url": "https://issuer.example.com",
    "oidc_client_id": "kubernetes",
    "oidc_username_claim": "email",
    "oidc_username_prefix": "oidc:",
    "oidc_groups_claim": "groups",
    "oidc_groups_prefix": "oidc:",
    "extra_network_names": "storage",
    "etcd_volume_size": "10",
    "etcd_volume_type": "nvme",
    "server_group_policies": "soft-anti-affinity",
    "different_failure_domain": "true",
    "audit_log_enabled": "true",
    "audit_log_max_age": "7",
    "audit_log_max_backup": "3",
    "audit_log_max_size": "50",
    "metrics_server_enabled": "true",
    "ingress_controller": "nginx",
    "monitoring_enabled": "true",
    "keystone_auth_enabled": "true",
    "k8s_keystone_auth_tag": "v1.31.1",
    "manila_csi_enabled": "true",
    "manila_csi_plugin_tag": "v1.32.0",
    "manila_csi_share_network_id": "5e2a3c1d-7b8f-4e6a-9c0d-1f2e3a4b5c6d",
}
INFRA = "infrastructure.cluster.x-k8s.io/v1beta1"


def line_env(line, tmp_path_factory):
    """The environment of one CAPI line (this module: v1beta2;
    test_labels_all_v1beta1.py: v1beta1, in a test process of its own)."""
    tmp = tmp_path_factory.mktemp(f"labels-{line}")
    # A private CA (`[capi] ca_file`): what each cloud.conf names must be
    # where its pod finds it. The test cloud is plain HTTP: only its path
    # and content are judged.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=test private CA", "-keyout", str(tmp / "ca.key"), "-out", str(tmp / "ca.pem")],
                   check=True, capture_output=True)
    e = ApiEnv(tmp, "23", "console", line,
               workload_apiservers=True, cloud_cleanup=True,
               conductor_capi_extra=f"ca_file = {tmp / 'ca.pem'}\nregion_name = RegionOne\n")
    e.ca_pem = (tmp / "ca.pem").read_text()
    e.line = line
    yield e
    assert e.close() == 0, "the conductor did not stop cleanly"


@pytest.fixture(scope="module", params=["v1beta2"])
def env(request, tmp_path_factory):
    yield from line_env(request.param, tmp_path_factory)


def installed_as_rendered(env, kc, hcps, rendered, ns, name):
    """Each release is in the workload apiserver as Helm installs it:
    capi-sim's CAAPH (tests/capi-sim/src/helm.rs) rendered it with the real
    engine and applied every object with strict field validation, CRDs
    first; the release counts as many objects as this render has (test
    hooks left out, other hooks not counted: Helm keeps them apart), and
    each is there, marked as Helm's."""
    releases = helm_charts.deployed(env.sim, ns, name, timeout=300)
    assert sorted(releases) == sorted(hcps), (sorted(releases), sorted(hcps))
    for rel, h in hcps.items():
        kept = [o for _, o in rendered[rel] if "helm.sh/hook" not in (o["metadata"].get("annotations") or {})]
        assert releases[rel]["objects"] == len(kept), (rel, releases[rel], len(kept))
        for o in kept[:3] + kept[-3:]:
            target = [] if o["kind"].startswith("Cluster") or o["kind"] in CLUSTER_SCOPED else \
                ["-n", o["metadata"].get("namespace") or h["spec"]["namespace"]]
            out = subprocess.run(["kubectl", "--kubeconfig", kc, "get", *target,
                                  f"{o['kind']}.{o['apiVersion'].split('/')[0] if '/' in o['apiVersion'] else ''}".rstrip("."),
                                  o["metadata"]["name"], "-o", "json"], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, (rel, o["kind"], o["metadata"]["name"], out.stderr)
            live = json.loads(out.stdout)["metadata"]
            assert live["labels"]["app.kubernetes.io/managed-by"] == "Helm", (rel, live)
            assert live["annotations"]["meta.helm.sh/release-name"] == rel, (rel, live)


CLUSTER_SCOPED = {"Namespace", "StorageClass", "CSIDriver", "PriorityClass", "IngressClass", "APIService",
                  "CustomResourceDefinition", "PersistentVolume", "PodSecurityPolicy",
                  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}


def addons_rendered_by_their_charts(env, hcps, uuid, ns, name):
    """Every addon as its chart renders it, and what OCCM's and Cinder
    CSI's pods would read (issue 47)."""
    rendered = {rel: helm_charts.render(h) for rel, h in hcps.items()}
    for rel, h in hcps.items():
        assert helm_charts.unread_keys(h) == [], (rel, "value keys its chart never reads")
    prefix = LABELS["container_infra_prefix"].rstrip("/") + "/"
    outside = {rel: sorted({i for i in helm_charts.images(objs) if not i.startswith(prefix)})
               for rel, objs in rendered.items()}
    assert not any(outside.values()), outside
    assert all(helm_charts.images(objs) for objs in rendered.values()), "an addon with no image"

    # The pods: which Secret each mounts where, which file it reads, the
    # cluster's identity in args and env.
    occm = helm_charts.pod_reads(rendered["openstack-ccm"], "DaemonSet", "openstack-cloud-controller-manager")
    occm = occm["openstack-cloud-controller-manager"]
    assert "--cloud-config=$(CLOUD_CONFIG)" in occm["args"] and "--cluster-name=$(CLUSTER_NAME)" in occm["args"]
    assert occm["env"] == {"CLOUD_CONFIG": "/etc/config/cloud.conf", "CLUSTER_NAME": uuid}, occm["env"]
    reads = [("openstack-ccm", "magnum-occm-cloud-config", "/etc/config", occm)]
    for kind, part in (("Deployment", "controllerplugin"), ("DaemonSet", "nodeplugin")):
        csi = helm_charts.pod_reads(rendered["cinder-csi"], kind, part)["cinder-csi-plugin"]
        assert "--cloud-config=$(CLOUD_CONFIG)" in csi["args"], csi["args"]
        assert csi["env"]["CLOUD_CONFIG"] == "/etc/kubernetes/cloud.conf", csi["env"]
        if kind == "Deployment":
            assert "--cluster=$(CLUSTER_NAME)" in csi["args"] and csi["env"]["CLUSTER_NAME"] == uuid, csi
        reads.append(("cinder-csi", "magnum-cinder-csi-cloud-config", "/etc/kubernetes", csi))

    # The Secrets, as CAPI's ClusterResourceSet put them in the workload
    # cluster (capi-sim: tests/capi-sim/src/resource_sets.rs).
    creds = env.sim.get(f"/api/v1/namespaces/{ns}/secrets/{name}-cloud-credentials")
    clouds = base64.b64decode(creds["data"]["clouds.yaml"]).decode()
    # CAPO's credentials carry the CA where CAPO reads it (the identityRef
    # Secret's `cacert`: cluster-api-provider-openstack `pkg/scope/
    # provider.go`, `getCloudFromSecret`).
    assert base64.b64decode(creds["data"]["cacert"]).decode() == env.ca_pem
    cred_id = next(ln.split(":", 1)[1].strip() for ln in clouds.splitlines()
                   if "application_credential_id" in ln)
    key = f"{ns}/{name}"
    deadline = time.time() + 120
    while (kc := env.sim.get("/_sim/workload-apiservers")["kubeconfigs"].get(key)) is None:
        assert time.time() < deadline, f"no workload apiserver for {key}"
        time.sleep(0.2)
    installed_as_rendered(env, kc, hcps, rendered, ns, name)
    for rel, secret_name, mount, pod in reads:
        vol = pod["mounts"][mount]
        assert vol.get("secret", {}).get("secretName") == secret_name, (rel, vol)
        while True:
            out = subprocess.run(["kubectl", "--kubeconfig", kc, "-n", "kube-system", "get", "secret", secret_name,
                                  "-o", "json"], capture_output=True, text=True, timeout=60)
            if out.returncode == 0:
                break
            assert time.time() < deadline, (rel, out.stderr)
            time.sleep(0.5)
        files = {k: base64.b64decode(v).decode() for k, v in json.loads(out.stdout)["data"].items()}
        conf_path = pod["env"]["CLOUD_CONFIG"]
        assert conf_path.startswith(mount + "/"), (rel, conf_path)
        conf = configparser.ConfigParser()
        conf.read_string(files[conf_path[len(mount) + 1:]])
        g = conf["Global"]
        assert g["application-credential-id"] == cred_id and g["application-credential-secret"], rel
        assert g["auth-url"].startswith(env.ks["url"]) and g["region"] == "RegionOne", dict(g)
        ca = g["ca-file"]
        assert ca.startswith(mount + "/") and files[ca[len(mount) + 1:]] == env.ca_pem, (rel, ca, list(files))
        # The load balancers OCCM makes: the algorithm and no monitors.
        assert conf["LoadBalancer"]["lb-method"] == "LEAST_CONNECTIONS", dict(conf["LoadBalancer"])
        assert conf["LoadBalancer"]["create-monitor"] == "false", dict(conf["LoadBalancer"])
    # The credential is in no HelmChartProxy.
    for rel, h in hcps.items():
        assert cred_id not in h["spec"]["valuesTemplate"], rel
    return rendered


def offline_list_is_what_the_cluster_references(env, hcps, rendered, uuid, ns, sel):
    """The offline list (issue 53) for this template's labels, as
    scripts/offline-list.sh makes it (`magnum-conductor cluster-objects`
    with the conductor's configuration, the charts rendered by the real
    Helm), names exactly the charts and images this cluster's objects on the
    management cluster and its charts' renders reference."""
    version = env.sim.capi.split("/")[1]
    objs = {("HelmChartProxy", h["metadata"]["name"]): h for h in hcps.values()}
    mine = f"magnum.openstack.org/cluster-uuid={uuid}"
    for api, kind, plural, selector in (
            (f"controlplane.cluster.x-k8s.io/{version}", "KubeadmControlPlane", "kubeadmcontrolplanes", sel),
            (env.sim.capi, "MachineDeployment", "machinedeployments", sel),
            ("v1", "ConfigMap", "configmaps", mine), ("apps/v1", "Deployment", "deployments", mine)):
        found = env.sim.items(api, plural, selector, ns=ns)
        assert found, f"the cluster has no {plural}"
        for o in found:
            # (A list's items carry no kind.)
            objs[(kind, o["metadata"]["name"])] = dict(o, kind=kind)
    actual = offline_list.references(list(objs.values()), rendered)
    listed = offline_list.generate(CONDUCTOR_BIN, [env.conductor_conf], LABELS, "calico", env.line)
    assert sorted(listed) == sorted(actual), {"listed, not referenced": sorted(set(listed) - set(actual)),
                                              "referenced, not listed": sorted(set(actual) - set(listed))}
    prefix = LABELS["container_infra_prefix"].rstrip("/") + "/"
    # Every image from the mirror but kubeadm's (no imageRepository is set).
    kubeadm = {f"registry.k8s.io/{c}:{LABELS['kube_tag']}" for c in offline_list.KUBEADM}
    assert all(ref.startswith(prefix) or ref in kubeadm for kind, ref in actual if kind == "image"), actual
    assert sum(kind == "chart" for kind, _ in actual) == len(hcps)


def args_of(v):
    """kubeadm extraArgs in either line's shape, as a dict."""
    if isinstance(v, dict):
        return v
    return {a["name"]: a["value"] for a in v}


def server_groups(env):
    """The tenant's server groups, as alice sees them in Nova."""
    token, _ = password_token(env.ks["url"], env.ks["user"], USER_PW, project_id=env.ks["tenant"])
    status, _, body = call("GET", f"{env.cloud.nova}/os-server-groups", token)
    assert status == 200, body
    return {g["name"]: g for g in body["server_groups"]}


MANILA = {"X-OpenStack-Manila-API-Version": "2.60"}


def manila_shares(env, token):
    """The project's Manila shares, by name."""
    status, _, body = call("GET", f"{env.cloud.manila}/shares/detail", token, headers=MANILA)
    assert status == 200, status
    return {s["name"]: s for s in body["shares"]}


def manila_snapshots(env, token):
    """The project's Manila share snapshots, by name."""
    status, _, body = call("GET", f"{env.cloud.manila}/snapshots/detail", token, headers=MANILA)
    assert status == 200, status
    return {s["name"]: s for s in body["snapshots"]}


def test_every_implemented_label_at_once(env):
    # Every label the table says this conductor supports, but the one only
    # `adopt` writes.
    from_table = set()
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "labels.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 5 and cells[5].startswith("**supported**"):
                from_table.add(cells[1].strip("`"))
    # capi-helm's names of two labels here; Cilium's pod range and Hubble
    # (this template is Calico's; render_valid.rs has Hubble).
    others = {"etcd_blockdevice_size", "etcd_blockdevice_volume_type", "cilium_ipv4pool",
              "cilium_hubble_ui_enabled"}
    assert from_table - others - {"capi_adopted_namespace"} - set(LABELS) == set(), \
        "a supported label is missing from this test"
    args = [a for k, v in LABELS.items() for a in ("--labels", f"{k}={v}")]
    t = env.coe("cluster", "template", "create", "every-label", "--image", "ubuntu-2204-kube-v1.30.4",
                *COMMON, *args, "-f", "json")
    assert t["labels"] == LABELS, t["labels"]
    env.coe("cluster", "create", "all", "--cluster-template", "every-label", "--master-count", "1",
            "--node-count", "1")
    c, seen = env.wait("all", lambda c: c and c["status"] != "CREATE_IN_PROGRESS", timeout=300)
    assert c["status"] == "CREATE_COMPLETE", seen
    assert "ignored" not in (c["status_reason"] or ""), c["status_reason"]
    uuid = c["uuid"]
    ns = f"magnum-{env.ks['tenant']}"
    [cl] = [x for x in env.sim.items(env.sim.capi, "clusters", ns=ns)
            if x["metadata"]["labels"].get("magnum.openstack.org/cluster-uuid") == uuid]
    name = cl["metadata"]["name"]
    sel = f"cluster.x-k8s.io/cluster-name={name}"

    # The infrastructure: as stored by the real apiserver.
    osc = env.sim.get(f"/apis/{INFRA}/namespaces/{ns}/openstackclusters/{name}")["spec"]
    assert osc["apiServerLoadBalancer"]["flavor"] == "ha"
    assert osc["apiServerLoadBalancer"]["availabilityZone"] == "az-lb"
    assert osc["apiServerLoadBalancer"]["allowedCIDRs"] == ["10.0.0.0/8", "192.168.0.0/16"]
    assert osc["apiServerFloatingIP"] == "203.0.113.7"
    assert osc["controlPlaneAvailabilityZones"] == ["nova", "az-2"]
    assert osc["managedSubnets"][0]["cidr"] == "10.1.0.0/24"
    omts = {m["metadata"]["name"]: m["spec"]["template"]["spec"]
            for m in env.sim.items(INFRA, "openstackmachinetemplates", sel, ns=ns)}
    cp_name = next(n for n in omts if "control-plane" in n)
    groups = {"control-plane" if n == cp_name else "default-worker": m for n, m in omts.items()}
    assert set(groups) == {"control-plane", "default-worker"}, list(omts)
    for group, m in groups.items():
        assert m["serverGroup"] == {"filter": {"name": f"magnum-{uuid}-{group}"}}, m
        assert m["schedulerHintAdditionalProperties"] == [
            {"name": "different_failure_domain", "value": {"type": "Bool", "bool": True}}]
        assert m["ports"] == [{}, {"network": {"filter": {"name": "storage"}}}]
        # `from: Name` is the CRD's default, filled in by the apiserver.
        assert m["rootVolume"] == {"sizeGiB": 40, "type": "ssd",
                                   "availabilityZone": {"from": "Name", "name": "az-volumes"}}, m
    assert [d["name"] for d in groups["control-plane"]["additionalBlockDevices"]] == ["etcd", "containerd"]
    assert groups["control-plane"]["additionalBlockDevices"][0]["storage"]["volume"]["type"] == "nvme"
    assert [d["name"] for d in groups["default-worker"]["additionalBlockDevices"]] == ["containerd"]
    kcp = env.sim.items(f"controlplane.cluster.x-k8s.io/{env.line}", "kubeadmcontrolplanes", sel, ns=ns)[0]
    spec = kcp["spec"]["kubeadmConfigSpec"]
    assert ["LABEL=etcd_disk", "/var/lib/etcd"] in spec["mounts"], spec["mounts"]
    api = spec["clusterConfiguration"]["apiServer"]
    flags = args_of(api["extraArgs"])
    assert flags["audit-log-maxage"] == "7" and flags["audit-log-maxbackup"] == "3" \
        and flags["audit-log-maxsize"] == "50", flags
    assert spec["files"][0]["path"] == flags["audit-policy-file"]
    # Keystone: both webhooks configured by the file the KCP writes.
    assert flags["authorization-mode"] == "Node,RBAC,Webhook", flags
    hook = flags["authentication-token-webhook-config-file"]
    assert flags["authorization-webhook-config-file"] == hook
    assert spec["files"][1]["path"] == hook

    # Nova: the two server groups, made with the cluster's credential in
    # the cluster's project.
    sgs = server_groups(env)
    for group in ("control-plane", "default-worker"):
        g = sgs[f"magnum-{uuid}-{group}"]
        assert (g.get("policy") or g["policies"][0]) == "soft-anti-affinity", g

    # The workload kube-apiserver runs with the labels' flags, and writes
    # its audit log where the KCP's volume puts it on the host.
    running = apiserver_flags(ns, name)
    for f in (f"--tls-cipher-suites={LABELS['api_server_tls_cipher_suites']}",
              "--enable-admission-plugins=NodeRestriction,AlwaysPullImages",
              "--oidc-issuer-url=https://issuer.example.com", "--oidc-username-claim=email",
              "--oidc-username-prefix=oidc:", "--oidc-groups-prefix=oidc:",
              "--audit-log-maxage=7", "--audit-log-maxbackup=3", "--audit-log-maxsize=50"):
        assert f in running, (f, running)
    value = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in running if a.startswith("--") and "=" in a}
    log, policy = value["--audit-log-path"], value["--audit-policy-file"]
    assert log.endswith("/host/var/log/kubernetes/audit/kube-apiserver-audit.log"), log
    assert policy.endswith("/host/etc/kubernetes/audit-policy/apiserver-audit-policy.yaml"), policy
    assert open(policy).read() == spec["files"][0]["content"]
    # The real kube-apiserver took the webhook flags (it reads both
    # kubeconfigs at start) and serves: Node,RBAC,Webhook once, not
    # appended to capi-sim's default.
    assert running.count("--authorization-mode=Node,RBAC,Webhook") == 1, running
    assert not any(a.startswith("--authorization-mode=Node,RBAC") and a.endswith("RBAC") for a in running), running
    hook_file = value["--authentication-token-webhook-config-file"]
    assert hook_file.endswith("/host/etc/kubernetes/webhooks/webhookconfig.yaml"), hook_file
    assert value["--authorization-webhook-config-file"] == hook_file
    assert open(hook_file).read() == spec["files"][1]["content"]
    # ... and the webhook's workload half: the ClusterResourceSet, its
    # ConfigMap, and CAPI's binding of it to this cluster.
    addons_api = f"addons.cluster.x-k8s.io/{env.line}"
    uuid_sel = f"magnum.openstack.org/cluster-uuid={uuid}"
    [crs] = [x for x in env.sim.items(addons_api, "clusterresourcesets", uuid_sel, ns=ns)
             if x["metadata"]["name"].endswith("-keystone-auth")]
    [cm] = env.sim.items("v1", "configmaps", uuid_sel, ns=ns)
    assert crs["spec"]["resources"] == [{"kind": "ConfigMap", "name": cm["metadata"]["name"]}], crs
    docs = [json.loads(d) for d in cm["data"]["keystone-auth.yaml"].split("\n---\n")]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.example.com/mirror/provider-os/k8s-keystone-auth:v1.31.1", ds
    [pol] = [d for d in docs if d["metadata"]["name"] == "k8s-keystone-auth-policy"]
    assert json.loads(pol["data"]["policies"])[0]["match"][1]["values"] == [env.ks["tenant"]], pol
    deadline = time.time() + 60
    while not any(b["clusterResourceSetName"] == crs["metadata"]["name"]
                  for x in env.sim.items(addons_api, "clusterresourcesetbindings", ns=ns)
                  if x["metadata"]["name"] == name for b in x["spec"].get("bindings", [])):
        assert time.time() < deadline, "the ClusterResourceSet was not bound to the cluster"
        time.sleep(0.5)
    deadline = time.time() + 60
    while not (os.path.exists(log) and os.path.getsize(log) > 0):
        assert time.time() < deadline, f"no audit event in {log}"
        time.sleep(0.5)
    event = json.loads(open(log).readline())
    assert event["kind"] == "Event" and event["apiVersion"] == "audit.k8s.io/v1", event

    # The addons: the labels' own, and CAAPH's releases of them.
    hcps = {h["spec"]["releaseName"]: h
            for h in env.sim.items("addons.cluster.x-k8s.io/v1alpha1", "helmchartproxies", sel, ns=ns)}
    assert set(hcps) == {"cni-calico", "openstack-ccm", "cinder-csi", "metrics-server", "ingress-nginx",
                         "monitoring", "nfs-csi", "manila-csi"}, list(hcps)
    # Manila CSI: its Secret in a ClusterResourceSet that follows rotations,
    # with the cluster's credential and a StorageClass per share type the
    # real Manila API showed the cluster's credential.
    assert f'clusterID: "{uuid}"' in hcps["manila-csi"]["spec"]["valuesTemplate"]
    [manila_set] = [x for x in env.sim.items(addons_api, "clusterresourcesets", uuid_sel, ns=ns)
                    if x["metadata"]["name"].endswith("-manila-csi")]
    assert manila_set["spec"]["strategy"] == "Reconcile", manila_set
    [ref] = manila_set["spec"]["resources"]
    held = env.sim.get(f"/api/v1/namespaces/{ns}/secrets/{ref['name']}")
    assert held["type"] == "addons.cluster.x-k8s.io/resource-set", held["type"]
    manila_docs = [json.loads(d) for d in
                   base64.b64decode(held["data"]["manila-csi.yaml"]).decode().split("\n---\n")]
    classes = {d["metadata"]["name"]: d for d in manila_docs if d["kind"] == "StorageClass"}
    assert set(classes) == {"share-default", "share-gold-nfs"}, list(classes)
    assert {c["parameters"]["type"] for c in classes.values()} == set(MANILA_SHARE_TYPES)
    assert {c["parameters"]["shareNetworkID"] for c in classes.values()} == \
        {LABELS["manila_csi_share_network_id"]}
    [creds] = [d for d in manila_docs if d["kind"] == "Secret"]
    assert creds["metadata"] == {"name": "csi-manila-secrets", "namespace": "kube-system"}
    assert creds["stringData"]["os-applicationCredentialID"], creds["stringData"].keys()
    assert hcps["monitoring"]["spec"]["chartName"] == "kube-prometheus-stack"
    releases = env.sim.items("addons.cluster.x-k8s.io/v1alpha1", "helmreleaseproxies", sel, ns=ns)
    assert {r["spec"]["releaseName"] for r in releases} == set(hcps), releases
    rendered = addons_rendered_by_their_charts(env, hcps, uuid, ns, name)
    offline_list_is_what_the_cluster_references(env, hcps, rendered, uuid, ns, sel)
    # Manila CSI: our StorageClasses name the CSI driver its chart installs
    # and the Secret its sidecars pass to it, which holds the CA as content
    # (Manila CSI's `os-certAuthority` takes the PEM, not a path: no file to
    # place).
    drivers = {o["metadata"]["name"] for _, o in rendered["manila-csi"] if o["kind"] == "CSIDriver"}
    assert {c["provisioner"] for c in classes.values()} <= drivers and drivers, (classes, drivers)
    for c in classes.values():
        for step in ("provisioner", "node-stage", "node-publish"):
            assert c["parameters"][f"csi.storage.k8s.io/{step}-secret-name"] == creds["metadata"]["name"], c
    assert creds["stringData"]["os-certAuthority"] == env.ca_pem
    assert creds["stringData"]["os-TLSInsecure"] == "false"
    # The labels that reach an addon, in what its chart renders (not in the
    # values): Calico's pool in the operator's Installation, Manila CSI's
    # plugin tag, its NFS node plugin beside it, the ingress class, the
    # monitoring stack's Prometheus.
    [inst] = [o for _, o in rendered["cni-calico"] if o["kind"] == "Installation"]
    assert [p["cidr"] for p in inst["spec"]["calicoNetwork"]["ipPools"]] == [LABELS["calico_ipv4pool"]], inst
    assert inst["spec"]["registry"].rstrip("/") + "/" == LABELS["container_infra_prefix"].rstrip("/") + "/", inst
    manila_images = {i for i in helm_charts.images(rendered["manila-csi"]) if "/manila-csi-plugin:" in i}
    assert manila_images and {i.rsplit(":", 1)[1] for i in manila_images} == {LABELS["manila_csi_plugin_tag"]}
    assert any(o["kind"] == "CSIDriver" and o["metadata"]["name"] == "nfs.csi.k8s.io" for _, o in rendered["nfs-csi"])
    ingress = rendered["ingress-nginx"]
    assert any(o["kind"] == "IngressClass" and o["metadata"]["name"] == "nginx" for _, o in ingress), \
        sorted({o["kind"] for _, o in ingress})
    assert any(o["kind"] == "Prometheus" for _, o in rendered["monitoring"])

    # Shares as Manila CSI makes them for this cluster's claims (its
    # `clusterID` in their metadata), and one of another cluster's, made by
    # the real Manila (its dummy backend) in the cluster's project.
    alice, _ = password_token(env.ks["url"], env.ks["user"], USER_PW, project_id=env.ks["tenant"])
    made = {f"pvc-{uuid[:8]}": {"manila.csi.openstack.org/cluster": uuid},
            f"pvc-kept-{uuid[:8]}": {"manila.csi.openstack.org/cluster": uuid, "magnum.openstack.org/keep": "true"},
            f"pvc-other-{uuid[:8]}": {"manila.csi.openstack.org/cluster": "7c2e1d4f-7a6f-4e64-8a5b-3a3b7d2c9f12"}}
    for name, metadata in made.items():
        status, _, body = call("POST", f"{env.cloud.manila}/shares", alice, {"share": {
            "share_proto": "NFS", "size": 1, "name": name, "share_type": "default",
            "metadata": metadata}}, MANILA)
        assert status in (200, 202), (status, body)
    deadline = time.time() + 120
    while {manila_shares(env, alice).get(n, {}).get("status") for n in made} != {"available"}:
        assert time.time() < deadline, manila_shares(env, alice)
        time.sleep(0.5)
    # A snapshot of each, as Manila CSI makes one for a VolumeSnapshot
    # (cloud-provider-openstack `pkg/csi/manila/snapshot.go`
    # `getOrCreateSnapshot`: a name, this description, no cluster mark):
    # Manila refuses to delete a share that has one.
    shares = manila_shares(env, alice)
    snaps = {f"snapshot-{n}": shares[n]["id"] for n in made}
    for name, share_id in snaps.items():
        status, _, body = call("POST", f"{env.cloud.manila}/snapshots", alice, {"snapshot": {
            "share_id": share_id, "name": name, "description": "snapshotted-by=manila.csi.openstack.org"}},
            MANILA)
        assert status == 202, (status, body)
    while {manila_snapshots(env, alice).get(n, {}).get("status") for n in snaps} != {"available"}:
        assert time.time() < deadline, manila_snapshots(env, alice)
        time.sleep(0.5)

    # Delete: no server group of the cluster's left in Nova.
    env.coe("cluster", "delete", "all")
    _, seen = env.wait("all", lambda c: c is None, timeout=300)
    left = [n for n in server_groups(env) if uuid in n]
    assert left == [], left
    # Its Manila share went with it (volumes_policy=delete); the one marked
    # to keep and the other cluster's stay.
    # Its share's snapshot went first; the kept share's and the other
    # cluster's stay.
    have = manila_shares(env, alice)
    assert f"pvc-{uuid[:8]}" not in have, have
    have_snaps = manila_snapshots(env, alice)
    assert sorted(have_snaps) == [f"snapshot-pvc-kept-{uuid[:8]}", f"snapshot-pvc-other-{uuid[:8]}"], have_snaps
    for snap in have_snaps.values():
        assert snap["status"] == "available", snap
        status, _, _ = call("DELETE", f"{env.cloud.manila}/snapshots/{snap['id']}", alice, headers=MANILA)
        assert status == 202, status
    deadline = time.time() + 60
    while manila_snapshots(env, alice):
        assert time.time() < deadline, manila_snapshots(env, alice)
        time.sleep(0.5)
    for name in (f"pvc-kept-{uuid[:8]}", f"pvc-other-{uuid[:8]}"):
        assert have[name]["status"] == "available", have[name]
        status, _, _ = call("DELETE", f"{env.cloud.manila}/shares/{have[name]['id']}", alice,
                            headers=MANILA)
        assert status == 202, status
    assert env.sim.items(env.sim.capi, "clusters", sel, ns=ns) == []
    for api, plural in ((addons_api, "clusterresourcesets"), ("v1", "configmaps"), ("v1", "secrets"),
                        ("addons.cluster.x-k8s.io/v1alpha1", "helmchartproxies"),
                        (INFRA, "openstackmachinetemplates")):
        assert env.sim.items(api, plural, uuid_sel, ns=ns) == [], plural
