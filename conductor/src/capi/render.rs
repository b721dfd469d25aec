//! Magnum cluster -> the CAPI objects that run it (pure).
//!
//! Plain CAPI, no ClusterClass: Cluster, OpenStackCluster, a
//! KubeadmControlPlane with its OpenStackMachineTemplate, and per worker
//! nodegroup a MachineDeployment with its OpenStackMachineTemplate and
//! KubeadmConfigTemplate, plus MachineHealthChecks when auto-healing is on.
//! Machine templates are named by a hash of their spec, so a spec change
//! rolls machines and an unchanged spec (e.g. after a conductor upgrade)
//! never does. Objects are written in the stored version of the detected
//! CAPI line (v1beta1 for CAPI 1.10, v1beta2 for 1.14); CAPO is v1beta1 on
//! both. Every object passes Strict validation against the real CRDs
//! (tested).

use std::collections::BTreeMap;

use common::api_proxy;
use serde_json::{Value, json};

use super::infra_labels;
use super::keystone_auth;
use super::labels::Labels;
use super::naming::{hashed_name, object_name};

/// Which CAPI API the management cluster stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapiLine {
    V1beta1,
    V1beta2,
}

impl CapiLine {
    /// The `addons.cluster.x-k8s.io` version CAPI stores on this line
    /// (ClusterResourceSet, ClusterResourceSetBinding).
    pub fn addons_api(self) -> &'static str {
        match self {
            CapiLine::V1beta1 => "addons.cluster.x-k8s.io/v1beta1",
            CapiLine::V1beta2 => "addons.cluster.x-k8s.io/v1beta2",
        }
    }

    /// The apiVersions this line writes: cluster.x-k8s.io, the kubeadm
    /// control plane, the kubeadm bootstrap (CAPO's stay v1beta1 on both).
    pub fn api_versions(self) -> (&'static str, &'static str, &'static str) {
        match self {
            CapiLine::V1beta1 => (
                "cluster.x-k8s.io/v1beta1",
                "controlplane.cluster.x-k8s.io/v1beta1",
                "bootstrap.cluster.x-k8s.io/v1beta1",
            ),
            CapiLine::V1beta2 => (
                "cluster.x-k8s.io/v1beta2",
                "controlplane.cluster.x-k8s.io/v1beta2",
                "bootstrap.cluster.x-k8s.io/v1beta2",
            ),
        }
    }
}

/// How a MachineDeployment replaces machines (`max_batch_size` of an
/// upgrade): at most `max_surge` machines above the desired count and
/// `max_unavailable` below it while rolling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollout {
    pub max_surge: u32,
    pub max_unavailable: u32,
}

impl Default for Rollout {
    /// CAPI's default: one new machine at a time, none taken away first.
    fn default() -> Self {
        Rollout {
            max_surge: 1,
            max_unavailable: 0,
        }
    }
}

/// A worker nodegroup.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerGroup {
    /// The Magnum nodegroup name (e.g. `default-worker`).
    pub name: String,
    /// Its key on the management cluster (see [`super::naming::group_key`]).
    pub key: String,
    pub flavor: String,
    pub image: String,
    /// The Kubernetes version this group runs (e.g. `v1.30.4`).
    pub version: String,
    pub count: u32,
    /// Autoscaler bounds (min, max) when the cluster autoscaler owns the
    /// replicas of this group.
    pub autoscale: Option<(u32, u32)>,
    /// Whether the applied MachineDeployment carries `spec.replicas`: always
    /// without autoscaling; with it, only when the MachineDeployment is new
    /// (afterwards the autoscaler owns the field and CAPI's defaulting
    /// webhook keeps its value).
    pub set_replicas: bool,
    /// `docker_volume_size`: a Cinder volume for container storage (GiB).
    pub docker_volume_gb: Option<u32>,
    /// `node_labels` (Magnum 23): Kubernetes node labels.
    pub node_labels: BTreeMap<String, String>,
    /// `node_taints`: (key, value, effect).
    pub node_taints: Vec<(String, Option<String>, String)>,
    pub rollout: Rollout,
    /// Set while the group waits for the control plane to reach its version:
    /// the machine template the MachineDeployment has now, kept as it is
    /// (workers never run a newer Kubernetes than the control plane).
    pub held_template: Option<Value>,
    /// A group another driver made and `adopt` handed over: the labels of
    /// its MachineDeployment's machine template as observed. Its selector
    /// and health check stay as they are, and a template of ours keeps
    /// these labels (the selector matches them).
    pub adopted_labels: Option<Value>,
}

/// What a cluster another driver made keeps once adopted (see
/// `crate::adopt`): its objects stay as that driver left them except for
/// what an operation must change.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Adopted {
    /// The driver that made it.
    pub driver: String,
    /// The KubeadmControlPlane's machine template reference as observed,
    /// kept while the control plane's version is unchanged (no machine is
    /// replaced); `None`: ours is rendered (an upgrade replaces them all).
    pub control_plane_template: Option<Value>,
    /// Run by a ClusterClass topology (vexxhost magnum-cluster-api): no
    /// object of it is rendered; operations change its topology
    /// ([`super::topology`]).
    pub topology: bool,
}

/// Everything the rendering needs, already resolved and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterInput {
    pub line: CapiLine,
    pub stack_id: String,
    pub namespace: String,
    pub cluster_uuid: String,
    pub project_id: String,
    pub labels: Labels,
    /// The control plane's Kubernetes version.
    pub master_version: String,
    pub master_image: String,
    pub master_flavor: String,
    pub master_count: u32,
    /// The master nodegroup's `docker_volume_size` (GiB).
    pub master_docker_volume_gb: Option<u32>,
    pub keypair: Option<String>,
    pub external_network_id: Option<String>,
    pub fixed_network: Option<String>,
    pub fixed_subnet: Option<String>,
    pub dns_nameservers: Vec<String>,
    pub master_lb_enabled: bool,
    /// Reached through `magnum-capi-proxy` (`[capi] api_proxy` and no API
    /// floating IP): its Service, and the proxy's name in the API
    /// server's certificate ([`common::api_proxy`]).
    pub api_proxy: bool,
    pub workers: Vec<WorkerGroup>,
    /// Set for a cluster another driver made (`adopt`).
    pub adopted: Option<Adopted>,
}

pub const UUID_LABEL: &str = "magnum.openstack.org/cluster-uuid";
pub const PROJECT_LABEL: &str = "magnum.openstack.org/project-id";
pub const NODEGROUP_LABEL: &str = "magnum.openstack.org/nodegroup";
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
/// What CAPI's MachineSet controller labels a MachineDeployment's Machines with.
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// On a CAPI Cluster (and its control plane and MachineDeployments) that
/// `adopt` took over from another driver: that driver's name.
pub const ADOPTED_ANNOTATION: &str = "magnum.openstack.org/adopted-from";
/// On an adopted CAPI Cluster: the template its row had before (`adopt --undo`).
pub const ADOPTED_TEMPLATE_ANNOTATION: &str = "magnum.openstack.org/adopted-template";
/// On an adopted CAPI Cluster: the template `adopt` made for it (a copy of
/// the one before, with this conductor's driver).
pub const ADOPTED_TWIN_ANNOTATION: &str = "magnum.openstack.org/adopted-as-template";
/// CAPI machines annotated with this are removed first on scale-down
/// (MachineSet delete policies and KubeadmControlPlane both honour it).
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";
pub const AUTOSCALER_MIN: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
pub const AUTOSCALER_MAX: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
/// CAPO's apiVersion (OpenStackCluster, OpenStackMachineTemplate), on both lines.
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

/// The ownerReferences an object of `kind` carries to its CAPI Cluster, as
/// CAPI itself sets them, given the plain reference `owner` ({apiVersion,
/// kind, name, uid}). An ownerReference is atomic for server-side apply:
/// if CAPI's controllers patched it to another value, our next apply of
/// ours would be a 409 conflict with their field manager. CAPI 1.10 makes
/// the Cluster the *controller* of its infrastructure and control plane
/// (`internal/controllers/cluster/cluster_controller_phases.go`
/// `ensureOwnerRefAndLabel`: `controllerutil.SetControllerReference`, with
/// `blockOwnerDeletion`); CAPI 1.14 gives clusters without a topology a
/// plain reference there (`core/reconcilers/cluster/...phases.go`:
/// `SetOwnerReference`). Everything else CAPI owns through plain
/// references (`util.EnsureOwnerRef` in the MachineDeployment,
/// MachineHealthCheck and template reconcilers), as `owner` is.
pub fn cluster_owner_refs(line: CapiLine, kind: &str, owner: &Value) -> Value {
    let controlled = matches!(kind, "OpenStackCluster" | "KubeadmControlPlane");
    let mut r = owner.clone();
    if controlled && line == CapiLine::V1beta1 {
        r["controller"] = json!(true);
        r["blockOwnerDeletion"] = json!(true);
    }
    json!([r])
}

/// FNV-1a over the canonical JSON: stable across builds and Rust versions
/// (template names must not change when the conductor is upgraded).
pub fn spec_hash(v: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", h as u32)
}

impl ClusterInput {
    pub fn capi(&self) -> &'static str {
        self.line.api_versions().0
    }
    pub fn kcp_api(&self) -> &'static str {
        self.line.api_versions().1
    }
    fn bootstrap_api(&self) -> &'static str {
        self.line.api_versions().2
    }
    pub fn v2(&self) -> bool {
        self.line == CapiLine::V1beta2
    }
    /// Reached through `magnum-capi-proxy`: asked for, and not adopted (an
    /// adopted control plane keeps its own certificate, without the
    /// proxy's name).
    pub fn proxied(&self) -> bool {
        self.api_proxy && self.adopted.is_none()
    }
    fn labels(&self, extra: &[(&str, &str)]) -> Value {
        let mut m = serde_json::Map::new();
        m.insert(UUID_LABEL.into(), json!(self.cluster_uuid));
        m.insert(PROJECT_LABEL.into(), json!(self.project_id));
        m.insert(CLUSTER_NAME_LABEL.into(), json!(self.stack_id));
        for (k, v) in extra {
            m.insert((*k).into(), json!(v));
        }
        Value::Object(m)
    }
    /// An object's metadata in the cluster's namespace, with its labels.
    pub fn meta(&self, name: &str, extra: &[(&str, &str)]) -> Value {
        json!({"name": name, "namespace": self.namespace, "labels": self.labels(extra)})
    }
    /// A reference in the line's shape (v1beta1 ObjectReference, v1beta2 apiGroup).
    fn reference(&self, api_version: &str, kind: &str, name: &str) -> Value {
        if self.v2() {
            let group = api_version.split('/').next().unwrap_or("");
            json!({"apiGroup": group, "kind": kind, "name": name})
        } else {
            json!({"apiVersion": api_version, "kind": kind, "name": name})
        }
    }
    /// kubeadm `extraArgs`: a map in v1beta1, a list of {name, value} in v1beta2.
    fn args(&self, pairs: &[(&str, &str)]) -> Value {
        if self.v2() {
            Value::Array(
                pairs
                    .iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect(),
            )
        } else {
            Value::Object(
                pairs
                    .iter()
                    .map(|(n, v)| ((*n).to_string(), json!(v)))
                    .collect(),
            )
        }
    }

    /// A machine's OpenStackMachineTemplate spec. `group`: the worker
    /// group's key, `None` for the control plane (which alone gets the
    /// etcd volume). Fields a label adds appear only when it is set, so
    /// the spec (and the template's hashed name) of a cluster without
    /// them does not change.
    fn machine_spec(
        &self,
        flavor: &str,
        image: &str,
        docker_volume_gb: Option<u32>,
        group: Option<&str>,
    ) -> Value {
        let infra = &self.labels.infra;
        // Magnum holds a flavor name or id: a UUID is an id (CAPO `flavorID`).
        let mut spec = if uuid::Uuid::try_parse(flavor).is_ok() {
            json!({"flavorID": flavor, "image": self.param(image)})
        } else {
            json!({"flavor": flavor, "image": self.param(image)})
        };
        let volume = |volume_type: Option<&String>| {
            let mut v = json!({});
            if let Some(t) = volume_type {
                v["type"] = json!(t);
            }
            if let Some(az) = &self.labels.availability_zone {
                v["availabilityZone"] = json!({"name": az});
            }
            v
        };
        // Attached after the root disk, in this order: the guest's virtio
        // disks vdb, vdc ([`ETCD_DISK`], [`container_disk`]).
        let mut devices = Vec::new();
        if group.is_none()
            && let Some(etcd) = &infra.etcd_volume
        {
            devices.push(json!({"name": "etcd", "sizeGiB": etcd.size_gb,
                "storage": {"type": "Volume", "volume": volume(etcd.volume_type.as_ref())}}));
        }
        if let Some(gb) = docker_volume_gb {
            devices.push(json!({"name": "containerd", "sizeGiB": gb,
                "storage": {"type": "Volume", "volume": volume(self.labels.docker_volume_type.as_ref())}}));
        }
        if !devices.is_empty() {
            spec["additionalBlockDevices"] = Value::Array(devices);
        }
        if let Some(k) = &self.keypair {
            spec["sshKeyName"] = json!(k);
        }
        if let Some(size) = self.labels.boot_volume_size_gb {
            let mut rv = json!({"sizeGiB": size});
            if let Some(t) = &self.labels.boot_volume_type {
                rv["type"] = json!(t);
            }
            if let Some(az) = infra
                .boot_volume_az
                .as_ref()
                .or(self.labels.availability_zone.as_ref())
            {
                rv["availabilityZone"] = json!({"name": az});
            }
            spec["rootVolume"] = rv;
        }
        // Extra networks: the cluster network's port first (a port without
        // a network is on it: CAPO `pkg/cloud/services/networking/port.go`,
        // `normalizePortTarget`), then one per network.
        if !infra.extra_networks.is_empty() {
            let mut ports = vec![json!({})];
            for n in &infra.extra_networks {
                ports.push(json!({"network": self.param(n)}));
            }
            spec["ports"] = Value::Array(ports);
        }
        // Found by its name when the machine is made (CAPO
        // `pkg/cloud/services/compute/servergroup.go`, `GetServerGroupID`:
        // exactly one of that name, else the machine fails): the conductor
        // makes it before the template is applied.
        if infra.server_group_policy.is_some() {
            spec["serverGroup"] =
                json!({"filter": {"name": server_group_name(&self.cluster_uuid, group)}});
        }
        if infra.different_failure_domain {
            spec["schedulerHintAdditionalProperties"] = json!([{"name": "different_failure_domain",
                "value": {"type": "Bool", "bool": true}}]);
        }
        spec
    }
    /// A CAPO resource parameter (image, network, subnet): by id when a
    /// UUID, else by name.
    fn param(&self, v: &str) -> Value {
        if uuid::Uuid::try_parse(v).is_ok() {
            json!({"id": v})
        } else {
            json!({"filter": {"name": v}})
        }
    }
    fn node_registration(
        &self,
        node_labels: &BTreeMap<String, String>,
        taints: &[(String, Option<String>, String)],
    ) -> Value {
        let labels_arg = node_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut kubelet: Vec<(&str, &str)> = vec![
            ("cloud-provider", "external"),
            ("provider-id", "openstack:///{{ ds.meta_data.uuid }}"),
        ];
        if !labels_arg.is_empty() {
            kubelet.push(("node-labels", &labels_arg));
        }
        if let Some(ciphers) = &self.labels.kubelet_tls_cipher_suites {
            kubelet.push(("tls-cipher-suites", ciphers));
        }
        let mut nr =
            json!({"name": "{{ local_hostname }}", "kubeletExtraArgs": self.args(&kubelet)});
        if !taints.is_empty() {
            nr["taints"] = Value::Array(
                taints
                    .iter()
                    .map(|(k, v, e)| {
                        let mut t = json!({"key": k, "effect": e});
                        if let Some(v) = v {
                            t["value"] = json!(v);
                        }
                        t
                    })
                    .collect(),
            );
        }
        nr
    }
}

/// kubeadm's disk setup: one ext4 partition on each additional disk,
/// mounted by its label. `disks`: (device, filesystem label, mount point).
fn disk_setup(spec: &mut Value, disks: &[(&str, &str, &str)]) {
    if disks.is_empty() {
        return;
    }
    spec["diskSetup"] = json!({
        "partitions": disks.iter().map(|(d, _, _)| json!({"device": d, "layout": true, "overwrite": false, "tableType": "gpt"})).collect::<Vec<_>>(),
        "filesystems": disks.iter().map(|(d, l, _)| json!({"device": format!("{d}1"), "filesystem": "ext4", "label": l})).collect::<Vec<_>>(),
    });
    spec["mounts"] = Value::Array(
        disks
            .iter()
            .map(|(_, l, m)| json!([format!("LABEL={l}"), m]))
            .collect(),
    );
}

/// The guest device of the first additional block device (virtio).
pub const CONTAINER_DISK: &str = "/dev/vdb";
/// The etcd volume's device: the control plane's first additional disk.
pub const ETCD_DISK: &str = "/dev/vdb";

/// The container-storage volume's device: after the etcd volume if any.
pub fn container_disk(after_etcd: bool) -> &'static str {
    if after_etcd {
        "/dev/vdc"
    } else {
        CONTAINER_DISK
    }
}

/// The Nova server group of the control plane (`group` None) or of a
/// worker group: named after the cluster's uuid, whose fixed length keeps
/// one cluster's names from being the start of another's.
pub fn server_group_name(cluster_uuid: &str, group: Option<&str>) -> String {
    format!("magnum-{cluster_uuid}-{}", group.unwrap_or("control-plane"))
}

/// All objects for one cluster, in creation order (owners first is not
/// needed: CAPI resolves references when they appear).
pub fn render(c: &ClusterInput) -> Vec<Value> {
    let mut out = render_infrastructure(c);
    out.extend(render_control_plane(c));
    for g in &c.workers {
        out.extend(render_group(c, g));
    }
    out
}

/// The OpenStackCluster and the Cluster.
pub fn render_infrastructure(c: &ClusterInput) -> Vec<Value> {
    let s = &c.stack_id;
    let cp_name = object_name(s, "control-plane");
    let creds = object_name(s, "cloud-credentials");
    let mut osc_spec = json!({
        "identityRef": {"name": creds, "cloudName": "openstack"},
        "managedSecurityGroups": {"allowAllInClusterTraffic": true},
        "apiServerLoadBalancer": {"enabled": c.master_lb_enabled, "provider": c.labels.octavia_provider},
        "disableAPIServerFloatingIP": !c.labels.api_lb_floating_ip,
    });
    if !c.labels.api_allowed_cidrs.is_empty() {
        osc_spec["apiServerLoadBalancer"]["allowedCIDRs"] = json!(c.labels.api_allowed_cidrs);
    }
    let infra = &c.labels.infra;
    if c.master_lb_enabled {
        if let Some(f) = &infra.api_lb_flavor {
            osc_spec["apiServerLoadBalancer"]["flavor"] = json!(f);
        }
        if let Some(az) = &infra.api_lb_az {
            osc_spec["apiServerLoadBalancer"]["availabilityZone"] = json!(az);
        }
    }
    if let Some(fip) = infra.api_floating_ip {
        osc_spec["apiServerFloatingIP"] = json!(fip.to_string());
    }
    if !infra.control_plane_azs.is_empty() {
        osc_spec["controlPlaneAvailabilityZones"] = json!(infra.control_plane_azs);
    }
    if let Some(ext) = &c.external_network_id {
        osc_spec["externalNetwork"] = c.param(ext);
    }
    match (&c.fixed_network, &c.fixed_subnet) {
        (None, None) => {
            let mut subnet = json!({"cidr": c.labels.node_cidr});
            if !c.dns_nameservers.is_empty() {
                subnet["dnsNameservers"] = json!(c.dns_nameservers);
            }
            osc_spec["managedSubnets"] = json!([subnet]);
        }
        (net, subnet) => {
            if let Some(n) = net {
                osc_spec["network"] = c.param(n);
            }
            if let Some(sn) = subnet {
                osc_spec["subnets"] = json!([c.param(sn)]);
            }
        }
    }
    let mut network = json!({"pods": {"cidrBlocks": [c.labels.pod_cidr]}, "services": {"cidrBlocks": [c.labels.service_cidr]},
                             "serviceDomain": c.labels.dns_domain});
    if c.v2() {
        network["apiServerPort"] = json!(6443);
    }
    let mut out = vec![
        json!({"apiVersion": INFRA, "kind": "OpenStackCluster", "metadata": c.meta(s, &[]), "spec": osc_spec}),
        json!({"apiVersion": c.capi(), "kind": "Cluster", "metadata": c.meta(s, &[]),
        "spec": {"clusterNetwork": network,
                 "infrastructureRef": c.reference(INFRA, "OpenStackCluster", s),
                 "controlPlaneRef": c.reference(c.kcp_api(), "KubeadmControlPlane", &cp_name)}}),
    ];
    if c.proxied() {
        out.push(api_proxy_service(c));
    }
    out
}

/// The selector-less Service the proxy hosts publish their EndpointSlices
/// for ([`common::api_proxy`]); CAPI's controllers resolve its name.
pub fn api_proxy_service(c: &ClusterInput) -> Value {
    let name = api_proxy::service_name(&c.stack_id);
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": c.meta(&name, &[(api_proxy::SERVICE_LABEL, &c.stack_id)]),
           "spec": {"ports": [{"name": "https", "port": api_proxy::PORT, "protocol": "TCP",
                               "targetPort": api_proxy::PORT}]}})
}

/// The control plane's machine template spec (its name is a hash of it).
fn control_plane_machine(c: &ClusterInput) -> Value {
    json!({"template": {"spec": c.machine_spec(&c.master_flavor, &c.master_image, c.master_docker_volume_gb, None)}})
}

/// The name of the control plane's OpenStackMachineTemplate.
pub fn control_plane_template_name(c: &ClusterInput) -> String {
    hashed_name(
        &c.stack_id,
        "control-plane",
        &spec_hash(&control_plane_machine(c)),
    )
}

/// The KubeadmControlPlane, its machine template and its health check.
pub fn render_control_plane(c: &ClusterInput) -> Vec<Value> {
    let s = &c.stack_id;
    let cp_name = object_name(s, "control-plane");
    let held = c
        .adopted
        .as_ref()
        .and_then(|a| a.control_plane_template.clone());
    let mut out = Vec::new();
    let infra_ref = match held {
        Some(r) => r,
        None => {
            let cp_template = control_plane_template_name(c);
            out.push(json!({"apiVersion": INFRA, "kind": "OpenStackMachineTemplate", "metadata": c.meta(&cp_template, &[]), "spec": control_plane_machine(c)}));
            c.reference(INFRA, "OpenStackMachineTemplate", &cp_template)
        }
    };
    let cloud_args = c.args(&[("cloud-provider", "external")]);
    // The API server labels' flags (ciphers, admission plugins, OIDC).
    let mut api_args = c.labels.api_server.args();
    let audit = c.labels.infra.audit_log.as_ref();
    if let Some(a) = audit {
        api_args.extend(a.args());
    }
    let keystone = c.labels.infra.addons.keystone_auth.is_some();
    if keystone {
        api_args.extend(keystone_auth::api_server_args());
    }
    let api_pairs: Vec<(&str, &str)> = std::iter::once(("cloud-provider", "external"))
        .chain(api_args.iter().map(|(k, v)| (*k, v.as_str())))
        .collect();
    let no_labels = BTreeMap::new();
    let mut kubeadm = json!({
        "clusterConfiguration": {"apiServer": {"extraArgs": c.args(&api_pairs)}, "controllerManager": {"extraArgs": cloud_args}},
        "initConfiguration": {"nodeRegistration": c.node_registration(&no_labels, &[])},
        "joinConfiguration": {"nodeRegistration": c.node_registration(&no_labels, &[])},
    });
    let etcd = c.labels.infra.etcd_volume.is_some();
    let mut disks = Vec::new();
    if etcd {
        disks.push((ETCD_DISK, "etcd_disk", "/var/lib/etcd"));
    }
    if c.master_docker_volume_gb.is_some() {
        disks.push((container_disk(etcd), "containerd", "/var/lib/containerd"));
    }
    disk_setup(&mut kubeadm, &disks);
    // The audit policy on the host, and the policy's and the log's
    // directories in the kube-apiserver static pod (kubeadm mounts
    // `extraVolumes` as hostPath volumes).
    let (mut files, mut volumes) = (Vec::new(), Vec::new());
    if audit.is_some() {
        files.push(
            json!({"path": infra_labels::AUDIT_POLICY_FILE, "owner": "root:root",
            "permissions": "0600", "content": infra_labels::AUDIT_POLICY}),
        );
        volumes.push(json!({"name": "audit-policy", "hostPath": infra_labels::AUDIT_POLICY_DIR,
             "mountPath": infra_labels::AUDIT_POLICY_DIR, "readOnly": true, "pathType": "DirectoryOrCreate"}));
        volumes.push(
            json!({"name": "audit-logs", "hostPath": infra_labels::AUDIT_LOG_HOST_DIR,
             "mountPath": infra_labels::AUDIT_LOG_POD_DIR, "pathType": "DirectoryOrCreate"}),
        );
    }
    // The Keystone webhook's kubeconfig and its directory in the pod.
    if keystone {
        let (file, volume) = keystone_auth::api_server();
        files.push(file);
        volumes.push(volume);
    }
    if !files.is_empty() {
        kubeadm["files"] = json!(files);
    }
    if !volumes.is_empty() {
        kubeadm["clusterConfiguration"]["apiServer"]["extraVolumes"] = json!(volumes);
    }
    // The name CAPI's controllers dial through the proxy (which passes TLS
    // through: the API server's own certificate must name it), then the
    // label's extra names.
    let sans: Vec<String> = c
        .proxied()
        .then(|| api_proxy::server_name(s, &c.namespace))
        .into_iter()
        .chain(c.labels.api_server.cert_sans.iter().cloned())
        .collect();
    if !sans.is_empty() {
        kubeadm["clusterConfiguration"]["apiServer"]["certSANs"] = json!(sans);
    }
    let machine_template = if c.v2() {
        json!({"spec": {"infrastructureRef": infra_ref}})
    } else {
        json!({"infrastructureRef": infra_ref})
    };
    let mut spec = json!({"replicas": c.master_count, "version": c.master_version, "machineTemplate": machine_template});
    // An adopted control plane keeps its own kubeadm configuration (ours
    // differs: every machine would be replaced) and its health check.
    if c.adopted.is_none() {
        spec["kubeadmConfigSpec"] = kubeadm;
    }
    out.push(json!({"apiVersion": c.kcp_api(), "kind": "KubeadmControlPlane", "metadata": c.meta(&cp_name, &[]), "spec": spec}));
    if c.labels.auto_healing && c.adopted.is_none() {
        out.push(mhc(
            c,
            &cp_name,
            json!({"matchLabels": {CLUSTER_NAME_LABEL: s, CONTROL_PLANE_LABEL: ""}}),
        ));
    }
    out
}

/// A worker group's OpenStackMachineTemplate spec.
fn group_machine(c: &ClusterInput, g: &WorkerGroup) -> Value {
    json!({"template": {"spec": c.machine_spec(&g.flavor, &g.image, g.docker_volume_gb, Some(&g.key))}})
}

/// The name of a worker group's OpenStackMachineTemplate for its spec now.
pub fn group_template_name(c: &ClusterInput, g: &WorkerGroup) -> String {
    hashed_name(&c.stack_id, &g.key, &spec_hash(&group_machine(c, g)))
}

/// The name of a worker group's MachineDeployment.
pub fn group_object_name(c: &ClusterInput, g: &WorkerGroup) -> String {
    object_name(&c.stack_id, &g.key)
}

/// One worker group: its two templates, MachineDeployment and health check.
/// A held group keeps the machine template its MachineDeployment has (its
/// new templates are not written yet either).
pub fn render_group(c: &ClusterInput, g: &WorkerGroup) -> Vec<Value> {
    let s = &c.stack_id;
    let mut out = Vec::new();
    let ng_name = group_object_name(c, g);
    let group_label = [(NODEGROUP_LABEL, g.key.as_str())];
    let template = match &g.held_template {
        Some(t) => t.clone(),
        None => {
            let machine = group_machine(c, g);
            let mt = group_template_name(c, g);
            out.push(json!({"apiVersion": INFRA, "kind": "OpenStackMachineTemplate", "metadata": c.meta(&mt, &group_label), "spec": machine}));
            let mut bootstrap_spec = json!({"joinConfiguration": {"nodeRegistration": c.node_registration(&g.node_labels, &g.node_taints)}});
            if g.docker_volume_gb.is_some() {
                disk_setup(
                    &mut bootstrap_spec,
                    &[(CONTAINER_DISK, "containerd", "/var/lib/containerd")],
                );
            }
            let bootstrap = json!({"template": {"spec": bootstrap_spec}});
            let bt = hashed_name(s, &g.key, &spec_hash(&bootstrap));
            out.push(json!({"apiVersion": c.bootstrap_api(), "kind": "KubeadmConfigTemplate", "metadata": c.meta(&bt, &group_label), "spec": bootstrap}));
            let mut template_spec = json!({"clusterName": s, "version": g.version,
                "bootstrap": {"configRef": c.reference(c.bootstrap_api(), "KubeadmConfigTemplate", &bt)},
                "infrastructureRef": c.reference(INFRA, "OpenStackMachineTemplate", &mt)});
            if let Some(az) = &c.labels.availability_zone {
                template_spec["failureDomain"] = json!(az);
            }
            let mut labels = c.labels(&group_label);
            if let (Some(theirs), Some(m)) = (
                g.adopted_labels.as_ref().and_then(Value::as_object),
                labels.as_object_mut(),
            ) {
                for (k, v) in theirs {
                    m.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            json!({"metadata": {"labels": labels}, "spec": template_spec})
        }
    };
    let rolling =
        json!({"maxSurge": g.rollout.max_surge, "maxUnavailable": g.rollout.max_unavailable});
    let mut spec = json!({"clusterName": s, "template": template});
    // An adopted group keeps its selector (its MachineSets and machines
    // are found by it).
    if g.adopted_labels.is_none() {
        spec["selector"] = json!({"matchLabels": {CLUSTER_NAME_LABEL: s, NODEGROUP_LABEL: g.key}});
    }
    if c.v2() {
        spec["rollout"] = json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": rolling}});
    } else {
        spec["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": rolling});
    }
    if g.set_replicas || g.autoscale.is_none() {
        spec["replicas"] = json!(g.count);
    }
    let mut metadata = c.meta(&ng_name, &group_label);
    if let Some((min, max)) = g.autoscale {
        metadata["annotations"] =
            json!({AUTOSCALER_MIN: min.to_string(), AUTOSCALER_MAX: max.to_string()});
    }
    out.push(json!({"apiVersion": c.capi(), "kind": "MachineDeployment", "metadata": metadata, "spec": spec}));
    if c.labels.auto_healing && g.adopted_labels.is_none() {
        out.push(mhc(
            c,
            &ng_name,
            json!({"matchLabels": {CLUSTER_NAME_LABEL: s, NODEGROUP_LABEL: g.key}}),
        ));
    }
    out
}

fn mhc(c: &ClusterInput, name: &str, selector: Value) -> Value {
    let spec = if c.v2() {
        json!({"clusterName": c.stack_id, "selector": selector,
               "checks": {"nodeStartupTimeoutSeconds": 1200, "unhealthyNodeConditions": [
                   {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300},
                   {"type": "Ready", "status": "False", "timeoutSeconds": 300}]}})
    } else {
        json!({"clusterName": c.stack_id, "selector": selector, "maxUnhealthy": "100%", "nodeStartupTimeout": "20m",
               "unhealthyConditions": [
                   {"type": "Ready", "status": "Unknown", "timeout": "300s"},
                   {"type": "Ready", "status": "False", "timeout": "300s"}]})
    };
    json!({"apiVersion": c.capi(), "kind": "MachineHealthCheck", "metadata": c.meta(name, &[]), "spec": spec})
}

#[cfg(test)]
mod owner_tests {
    use super::*;

    #[test]
    fn owner_references_are_what_capi_sets() {
        let plain = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "k", "uid": "u"});
        let v1 = cluster_owner_refs(CapiLine::V1beta1, "KubeadmControlPlane", &plain);
        assert_eq!(v1[0]["controller"], true);
        assert_eq!(v1[0]["blockOwnerDeletion"], true);
        assert_eq!(
            cluster_owner_refs(CapiLine::V1beta1, "OpenStackCluster", &plain)[0]["controller"],
            true
        );
        for kind in [
            "MachineDeployment",
            "OpenStackMachineTemplate",
            "Secret",
            "HelmChartProxy",
        ] {
            assert_eq!(
                cluster_owner_refs(CapiLine::V1beta1, kind, &plain),
                json!([plain]),
                "{kind}"
            );
        }
        let plain2 = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "k", "uid": "u"});
        assert_eq!(
            cluster_owner_refs(CapiLine::V1beta2, "KubeadmControlPlane", &plain2),
            json!([plain2]),
            "CAPI 1.14 without a topology: a plain reference"
        );
    }
}
