//! A cluster's cloud identity and the clean-up plan (pure).
//!
//! What the workload cluster's addons write into OpenStack, as their
//! sources write it (kubernetes/cloud-provider-openstack):
//! - OCCM, `pkg/openstack/loadbalancer.go`: a load balancer named
//!   `kube_service_<cluster>_<namespace>_<service>` (`GetLoadBalancerName`,
//!   cut to 255 characters) described `Kubernetes external service
//!   <namespace>/<service> from cluster <cluster>` (`createOctaviaLoadBalancer`);
//!   its floating IP described `Floating IP for Kubernetes external service
//!   <namespace>/<service> from cluster <cluster>`; with
//!   `manage-security-groups`, a security group described `Security Group for
//!   <namespace>/<service> Service LoadBalancer in cluster <cluster>`
//!   (`ensureSecurityGroup`). `<cluster>` is `--cluster-name`, the chart's
//!   `cluster.name`, default `kubernetes`.
//! - Cinder CSI, `pkg/csi/cinder/controllerserver.go`: volumes and
//!   snapshots carry the metadata `cinder.csi.openstack.org/cluster=<id>`,
//!   the chart's `clusterID`, default `kubernetes`.
//!
//! A resource is this cluster's only when the whole text names exactly its
//! identity: never a prefix another identity could extend. A cluster
//! created before identities were set runs with the default `kubernetes`,
//! which every such cluster shares: its load balancers are told apart by
//! their VIP network, the cluster's own (CAPO made it for this cluster);
//! its volumes and security groups cannot be, and are left (reported).

use std::collections::{BTreeMap, BTreeSet};

/// The identity OCCM and Cinder CSI use when none is given.
pub const LEGACY_IDENTITY: &str = "kubernetes";
/// On the OpenStackCluster: the identity the clean-up deletes by.
pub const IDENTITY_ANNOTATION: &str = "magnum.openstack.org/cloud-identity";
/// On the OpenStackCluster while the cloud around the cluster is not
/// cleaned up yet: CAPO cannot finish deleting it (and so its network)
/// before we remove this.
pub const CLEANUP_FINALIZER: &str = "magnum.openstack.org/cloud-cleanup";
/// Cinder CSI's metadata key naming the cluster.
pub const CSI_CLUSTER_KEY: &str = "cinder.csi.openstack.org/cluster";
/// The metadata Manila CSI gives the shares it makes with `clusterID` set
/// (`capi::manila`; cloud-provider-openstack's openstack-manila-csi chart,
/// `csimanila.clusterID`).
pub const MANILA_CLUSTER_KEY: &str = "manila.csi.openstack.org/cluster";
/// Volume or snapshot properties (metadata) that keep it whatever the
/// policy: ours, and cluster-api-janitor-openstack's.
pub const KEEP_PROPERTIES: [&str; 2] = [
    "magnum.openstack.org/keep",
    "janitor.capi.azimuth-cloud.com/keep",
];
/// The cluster label choosing what happens to its volumes.
pub const VOLUMES_POLICY_LABEL: &str = "volumes_policy";

const LB_NAME_MAX: usize = 255;

/// What happens to a cluster's Cinder CSI volumes and snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumesPolicy {
    /// Deleted with the cluster (the default: the claims that made them
    /// are gone with it, and a StorageClass's default reclaim policy is
    /// `Delete`), except those marked to keep.
    Delete,
    /// Kept, still tagged with the cluster's identity.
    Keep,
}

impl VolumesPolicy {
    /// From the cluster's `volumes_policy` label (absent: delete).
    pub fn parse(label: Option<&str>) -> Result<VolumesPolicy, String> {
        match label.map(str::trim) {
            None | Some("") | Some("delete") => Ok(VolumesPolicy::Delete),
            Some("keep") | Some("retain") => Ok(VolumesPolicy::Keep),
            Some(other) => Err(format!(
                "label {VOLUMES_POLICY_LABEL}={other:?}: expected delete or keep"
            )),
        }
    }
}

/// The identity a cluster's addons run with, from the values of its OCCM
/// HelmChartProxy (`None`: none applied yet, so a new cluster: its uuid).
/// Values without `cluster.name` were applied before identities were set:
/// the chart's default, which that cluster keeps (changing it would make
/// OCCM look its load balancers up under a new name and create them anew).
pub fn identity_from_occm_values(values: Option<&str>, uuid: &str) -> String {
    let Some(values) = values else {
        return uuid.to_string();
    };
    let mut in_cluster = false;
    for line in values.lines() {
        if line == "cluster:" {
            in_cluster = true;
            continue;
        }
        if in_cluster {
            if let Some(v) = line.strip_prefix("  name:") {
                let v = v.trim().trim_matches('"');
                if !v.is_empty() {
                    return v.to_string();
                }
            }
            if !line.starts_with(' ') {
                in_cluster = false;
            }
        }
    }
    LEGACY_IDENTITY.to_string()
}

/// Who the clean-up deletes for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub identity: String,
    /// The Magnum cluster's uuid: the conductor's own Nova server groups
    /// are named after it ([`owns_server_group`]).
    pub cluster_uuid: String,
    /// The cluster's own network (CAPO's `status.network.id`) when CAPO
    /// made it: tells a legacy cluster's load balancers from others'.
    pub own_network: Option<String>,
    pub volumes: VolumesPolicy,
    /// The services the cluster can have made something in.
    pub uses: Uses,
}

impl Scope {
    fn legacy(&self) -> bool {
        self.identity == LEGACY_IDENTITY
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadBalancer {
    pub id: String,
    pub name: String,
    pub description: String,
    pub provisioning_status: String,
    pub vip_network_id: String,
    pub vip_port_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloatingIp {
    pub id: String,
    pub description: String,
    pub address: String,
    pub port_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Volume {
    pub id: String,
    pub name: String,
    pub status: String,
    pub metadata: BTreeMap<String, String>,
    /// Its attachments (`attachments` of `volumes/detail`).
    pub attachments: Vec<Attachment>,
}

/// A volume's attachment to a server (Cinder's `attachment_id`, the
/// attachments API's id since microversion 3.27).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment {
    pub id: String,
    pub server_id: String,
}

/// A Cinder backup (`backups/detail`, metadata from microversion 3.43).
/// Cinder CSI makes them for VolumeSnapshots of class parameter
/// `type: backup` with the same cluster metadata as its snapshots
/// (cloud-provider-openstack `pkg/csi/cinder/controllerserver.go`,
/// `CreateSnapshot`, `createBackup`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backup {
    pub id: String,
    pub name: String,
    pub status: String,
    pub volume_id: String,
    pub metadata: BTreeMap<String, String>,
}

/// The OpenStack services the clean-up lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    Network,
    LoadBalancer,
    BlockStorage,
    Compute,
    SharedFileSystem,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::Network => "Neutron",
            Service::LoadBalancer => "Octavia",
            Service::BlockStorage => "Cinder",
            Service::Compute => "Nova",
            Service::SharedFileSystem => "Manila",
        }
    }
}

/// Which services a cluster can have made something in, from what the
/// conductor renders for it: Neutron and Octavia always (CAPO's network
/// and API load balancer, OCCM), Cinder always (Cinder CSI is installed
/// in every cluster), Nova only with `server_group_policies` (its server
/// groups: the machines themselves are CAPO's), Manila only with
/// `manila_csi_enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uses {
    pub server_groups: bool,
    pub manila: bool,
}

impl Default for Uses {
    /// Every service (what nothing rules out).
    fn default() -> Self {
        Uses {
            server_groups: true,
            manila: true,
        }
    }
}

impl Uses {
    /// From the cluster's labels. A value that does not parse counts as
    /// used: a listing then has to succeed rather than be skipped.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Uses {
        let manila = labels.get("manila_csi_enabled").is_some_and(|v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "false" | "0" | "no" | "off" | ""
            )
        });
        let server_groups = labels
            .get("server_group_policies")
            .is_some_and(|v| !v.trim().is_empty());
        Uses {
            server_groups,
            manila,
        }
    }

    pub fn uses(&self, s: Service) -> bool {
        match s {
            Service::Network | Service::LoadBalancer | Service::BlockStorage => true,
            Service::Compute => self.server_groups,
            Service::SharedFileSystem => self.manila,
        }
    }
}

/// A service's listing that failed (its own message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFailure {
    pub service: Service,
    pub error: String,
}

/// Of the listings that failed, those that keep the clean-up from
/// finishing (a service the cluster uses: what it made there is unknown)
/// and those that do not (a service it cannot have made anything in: a
/// Manila that refuses the credential's role, or is down, does not hold
/// up the delete of a cluster without Manila CSI).
pub fn blocking_failures<'a>(
    uses: &Uses,
    failed: &'a [ListFailure],
) -> (Vec<&'a ListFailure>, Vec<&'a ListFailure>) {
    failed.iter().partition(|f| uses.uses(f.service))
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub name: String,
    pub status: String,
    pub volume_id: String,
    pub metadata: BTreeMap<String, String>,
}

/// A Nova server group (`os-server-groups`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerGroup {
    pub id: String,
    pub name: String,
    /// Its policy (`policy` from microversion 2.64, else the one of
    /// `policies`).
    pub policy: String,
}

/// What the APIs listed in the cluster's project. A service the cloud
/// does not have (no Octavia, no Cinder in the catalog) lists nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    pub load_balancers: Vec<LoadBalancer>,
    pub floating_ips: Vec<FloatingIp>,
    pub security_groups: Vec<SecurityGroup>,
    pub volumes: Vec<Volume>,
    pub snapshots: Vec<Snapshot>,
    pub server_groups: Vec<ServerGroup>,
    pub shares: Vec<Share>,
    pub share_snapshots: Vec<ShareSnapshot>,
    pub backups: Vec<Backup>,
    /// Servers that attached volumes of the cluster's name and Nova
    /// answered 404 for: gone, so their attachments are stale.
    pub gone_servers: BTreeSet<String>,
    /// Listings that failed (what they would have listed is missing
    /// above).
    pub failed: Vec<ListFailure>,
}

/// A Manila share (`shares/detail`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Share {
    pub id: String,
    pub name: String,
    pub status: String,
    pub metadata: BTreeMap<String, String>,
}

/// A Manila share snapshot (`snapshots/detail`). Manila CSI's carry no
/// cluster mark (cloud-provider-openstack `pkg/csi/manila/snapshot.go`
/// `getOrCreateSnapshot`: a name and the description
/// `snapshotted-by=manila.csi.openstack.org`): one is the cluster's when
/// its share is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareSnapshot {
    pub id: String,
    pub name: String,
    pub status: String,
    pub share_id: String,
}

/// The kinds the clean-up deletes, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    FloatingIp,
    LoadBalancer,
    SecurityGroup,
    Snapshot,
    Backup,
    Attachment,
    Volume,
    ShareSnapshot,
    Share,
    ServerGroup,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::FloatingIp => "floating_ip",
            Kind::LoadBalancer => "load_balancer",
            Kind::SecurityGroup => "security_group",
            Kind::Snapshot => "snapshot",
            Kind::Backup => "backup",
            Kind::Attachment => "volume_attachment",
            Kind::Volume => "volume",
            Kind::ShareSnapshot => "share_snapshot",
            Kind::Share => "share",
            Kind::ServerGroup => "server_group",
        }
    }
    fn noun(self) -> &'static str {
        match self {
            Kind::FloatingIp => "floating IP",
            Kind::LoadBalancer => "load balancer",
            Kind::SecurityGroup => "security group",
            Kind::Snapshot => "snapshot",
            Kind::Backup => "backup",
            Kind::Attachment => "volume attachment",
            Kind::Volume => "volume",
            Kind::ShareSnapshot => "Manila share snapshot",
            Kind::Share => "Manila share",
            Kind::ServerGroup => "server group",
        }
    }
}

/// One resource of the cluster's, named for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub kind: Kind,
    pub id: String,
    /// Its name (or address), for status_reason and logs.
    pub label: String,
    /// Its status as the service reports it.
    pub status: String,
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind.noun(), self.label)?;
        if self.label != self.id {
            write!(f, " ({})", self.id)?;
        }
        if !self.status.is_empty() {
            write!(f, " {}", self.status)?;
        }
        Ok(())
    }
}

/// The clean-up's next step: what to delete now, what to wait for (being
/// deleted, or in a state its service will not delete from yet), what is
/// kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub delete: Vec<Item>,
    pub wait: Vec<Item>,
    pub keep: Vec<Item>,
}

impl Plan {
    /// Nothing of the cluster's left to delete or wait for.
    pub fn done(&self) -> bool {
        self.delete.is_empty() && self.wait.is_empty()
    }
}

/// `kube_service_<identity>_<namespace>_<service>`, cut as OCCM cuts it.
fn lb_name(identity: &str, namespace: &str, service: &str) -> String {
    let mut n = format!("kube_service_{identity}_{namespace}_{service}");
    if n.len() > LB_NAME_MAX {
        let mut cut = LB_NAME_MAX;
        while !n.is_char_boundary(cut) {
            cut -= 1;
        }
        n.truncate(cut);
    }
    n
}

/// `<prefix><namespace>/<service><suffix>` with exactly this identity in
/// the suffix: the Service's (namespace, name).
fn service_of<'a>(text: &'a str, prefix: &str, suffix: &str) -> Option<(&'a str, &'a str)> {
    let svc = text.strip_prefix(prefix)?.strip_suffix(suffix)?;
    let (ns, name) = svc.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !ns.contains(' ')).then_some((ns, name))
}

/// Whether OCCM made this load balancer for this cluster.
pub fn owns_load_balancer(scope: &Scope, lb: &LoadBalancer) -> bool {
    let suffix = format!(" from cluster {}", scope.identity);
    let Some((ns, svc)) = service_of(&lb.description, "Kubernetes external service ", &suffix)
    else {
        return false;
    };
    if lb.name != lb_name(&scope.identity, ns, svc) {
        return false;
    }
    if scope.legacy() {
        return scope
            .own_network
            .as_deref()
            .is_some_and(|n| !n.is_empty() && lb.vip_network_id == n);
    }
    true
}

/// Whether OCCM made this floating IP for one of this cluster's load
/// balancers (`lb_ports`: their VIP ports).
pub fn owns_floating_ip(scope: &Scope, fip: &FloatingIp, lb_ports: &BTreeSet<&str>) -> bool {
    let suffix = format!(" from cluster {}", scope.identity);
    if service_of(
        &fip.description,
        "Floating IP for Kubernetes external service ",
        &suffix,
    )
    .is_none()
    {
        return false;
    }
    if scope.legacy() {
        return fip.port_id.as_deref().is_some_and(|p| lb_ports.contains(p));
    }
    true
}

/// Whether OCCM made this security group for this cluster (never for a
/// legacy identity: nothing in it tells the clusters apart).
pub fn owns_security_group(scope: &Scope, sg: &SecurityGroup) -> bool {
    let suffix = format!(" Service LoadBalancer in cluster {}", scope.identity);
    !scope.legacy() && service_of(&sg.description, "Security Group for ", &suffix).is_some()
}

/// Whether Cinder CSI made this volume for this cluster (its attachments'
/// servers are looked up in Nova: [`Inventory::gone_servers`]).
pub fn owns_volume(scope: &Scope, v: &Volume) -> bool {
    tagged(scope, &v.metadata)
}

fn tagged(scope: &Scope, metadata: &BTreeMap<String, String>) -> bool {
    !scope.legacy() && metadata.get(CSI_CLUSTER_KEY).map(String::as_str) == Some(&scope.identity)
}

fn marked_keep(metadata: &BTreeMap<String, String>) -> bool {
    KEEP_PROPERTIES.iter().any(|k| {
        metadata
            .get(*k)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "yes" | "1"))
    })
}

/// Statuses a resource is deleted from; any other (`PENDING_*`,
/// `deleting`, `in-use`, `creating`...) is waited for.
fn lb_deletable(status: &str) -> bool {
    matches!(status, "ACTIVE" | "ERROR")
}
fn volume_deletable(status: &str) -> bool {
    matches!(
        status,
        "available" | "error" | "error_restoring" | "error_extending" | "error_managing"
    )
}
fn snapshot_deletable(status: &str) -> bool {
    matches!(status, "available" | "error")
}
/// Cinder deletes a backup from these (`backup/api.py`, `delete`).
fn backup_deletable(status: &str) -> bool {
    matches!(status, "available" | "error")
}
/// Manila deletes a share from these (`share/api.py`, `delete`).
fn share_deletable(status: &str) -> bool {
    matches!(status, "available" | "error" | "inactive")
}
/// ... and a share snapshot from these (`share/api.py`, `delete_snapshot`).
fn share_snapshot_deletable(status: &str) -> bool {
    matches!(status, "available" | "error")
}

/// Whether this conductor made this server group for this cluster
/// (`server_group_policies`): `magnum-<cluster uuid>-<group>`
/// (`crate::capi::render::server_group_name`). A uuid's fixed length keeps
/// another cluster's names from matching; the identity plays no part (a
/// cluster made before identities has its own uuid too).
pub fn owns_server_group(scope: &Scope, sg: &ServerGroup) -> bool {
    !scope.cluster_uuid.is_empty()
        && sg
            .name
            .strip_prefix(&format!("magnum-{}-", scope.cluster_uuid))
            .is_some_and(|rest| !rest.is_empty())
}

/// What the clean-up does next for `scope`, given what the APIs listed.
/// Floating IPs first (their load balancer's VIP port holds them), then
/// load balancers (cascade: listeners, pools, members go with them), OCCM's
/// security groups, snapshots, and a volume only once no snapshot of it is
/// left (Cinder refuses otherwise).
pub fn plan(scope: &Scope, inv: &Inventory) -> Plan {
    let mut p = Plan::default();
    let lbs: Vec<&LoadBalancer> = inv
        .load_balancers
        .iter()
        .filter(|lb| owns_load_balancer(scope, lb) && lb.provisioning_status != "DELETED")
        .collect();
    let lb_ports: BTreeSet<&str> = lbs
        .iter()
        .map(|lb| lb.vip_port_id.as_str())
        .filter(|p| !p.is_empty())
        .collect();
    for fip in &inv.floating_ips {
        if !owns_floating_ip(scope, fip, &lb_ports) {
            continue;
        }
        let mut item = Item {
            kind: Kind::FloatingIp,
            id: fip.id.clone(),
            label: name_or_id(&fip.address, &fip.id),
            status: String::new(),
        };
        // Named for us, but on a port that is not one of our load
        // balancers': OCCM kept it (`keep-floatingip`) and another
        // cluster's Service took the address (`loadBalancerIP`; OCCM only
        // moves the port, `updateFloatingIP`, the description stays ours).
        // It is that cluster's address now.
        match fip.port_id.as_deref() {
            Some(port) if !lb_ports.contains(port) => {
                item.status = format!("attached to port {port}, not one of the cluster's");
                p.keep.push(item);
            }
            _ => p.delete.push(item),
        }
    }
    for lb in lbs {
        let item = Item {
            kind: Kind::LoadBalancer,
            id: lb.id.clone(),
            label: lb.name.clone(),
            status: lb.provisioning_status.clone(),
        };
        if lb_deletable(&lb.provisioning_status) {
            p.delete.push(item);
        } else {
            p.wait.push(item);
        }
    }
    for sg in &inv.security_groups {
        if owns_security_group(scope, sg) {
            p.delete.push(Item {
                kind: Kind::SecurityGroup,
                id: sg.id.clone(),
                label: sg.name.clone(),
                status: String::new(),
            });
        }
    }
    // Volumes: the cluster's (by its CSI tag), kept by policy or mark.
    let mut volumes_going = BTreeSet::new();
    let mut volumes_kept = BTreeSet::new();
    for v in &inv.volumes {
        if !tagged(scope, &v.metadata) {
            continue;
        }
        if scope.volumes == VolumesPolicy::Keep || marked_keep(&v.metadata) {
            volumes_kept.insert(v.id.as_str());
        } else {
            volumes_going.insert(v.id.as_str());
        }
    }
    // A snapshot is the cluster's when tagged or of one of its volumes; it
    // goes unless kept, or its volume is kept (it is that volume's data).
    // Volumes with a snapshot still there (Cinder refuses to delete them),
    // and those with a kept snapshot (kept with it: it is that volume's data).
    let mut snapshots_left: BTreeSet<&str> = BTreeSet::new();
    let mut kept_snapshot: BTreeSet<&str> = BTreeSet::new();
    // A copy of a volume's data (snapshot, backup): the cluster's when
    // tagged or of one of its volumes; `Some(true)` when it is kept.
    let copy_kept = |volume_id: &str, metadata: &BTreeMap<String, String>| {
        let of_ours = volumes_going.contains(volume_id) || volumes_kept.contains(volume_id);
        (tagged(scope, metadata) || of_ours).then(|| {
            scope.volumes == VolumesPolicy::Keep
                || marked_keep(metadata)
                || volumes_kept.contains(volume_id)
        })
    };
    for s in &inv.snapshots {
        let Some(kept) = copy_kept(&s.volume_id, &s.metadata) else {
            continue;
        };
        let item = Item {
            kind: Kind::Snapshot,
            id: s.id.clone(),
            label: name_or_id(&s.name, &s.id),
            status: s.status.clone(),
        };
        if kept {
            kept_snapshot.insert(s.volume_id.as_str());
            p.keep.push(item);
        } else {
            snapshots_left.insert(s.volume_id.as_str());
            if snapshot_deletable(&s.status) {
                p.delete.push(item);
            } else {
                p.wait.push(item);
            }
        }
    }
    // Backups: the cluster's when tagged or of one of its volumes, kept
    // as snapshots are. Cinder deletes a volume that has backups (only
    // snapshots hold it), so no volume waits for them.
    for b in &inv.backups {
        let Some(kept) = copy_kept(&b.volume_id, &b.metadata) else {
            continue;
        };
        let item = Item {
            kind: Kind::Backup,
            id: b.id.clone(),
            label: name_or_id(&b.name, &b.id),
            status: b.status.clone(),
        };
        if kept {
            p.keep.push(item);
        } else if backup_deletable(&b.status) {
            p.delete.push(item);
        } else {
            p.wait.push(item);
        }
    }
    for v in &inv.volumes {
        if !tagged(scope, &v.metadata) {
            continue;
        }
        let mut item = Item {
            kind: Kind::Volume,
            id: v.id.clone(),
            label: name_or_id(&v.name, &v.id),
            status: v.status.clone(),
        };
        if !volumes_going.contains(v.id.as_str()) || kept_snapshot.contains(v.id.as_str()) {
            p.keep.push(item);
            continue;
        }
        // Attached to a server Nova no longer has: nothing will ever
        // detach it (the server's delete did not reach Cinder), so the
        // attachment goes; attached to a live one: waited for, named.
        let (stale, live): (Vec<&Attachment>, Vec<&Attachment>) = v
            .attachments
            .iter()
            .partition(|a| inv.gone_servers.contains(&a.server_id));
        for a in &stale {
            p.delete.push(Item {
                kind: Kind::Attachment,
                id: a.id.clone(),
                label: format!("{} on gone server {}", item.label, a.server_id),
                status: String::new(),
            });
        }
        if !live.is_empty() {
            let servers: Vec<&str> = live.iter().map(|a| a.server_id.as_str()).collect();
            item.status = format!("{} (attached to server {})", v.status, servers.join(", "));
        }
        if snapshots_left.contains(v.id.as_str())
            || !stale.is_empty()
            || !volume_deletable(&v.status)
        {
            p.wait.push(item);
        } else {
            p.delete.push(item);
        }
    }
    // Manila CSI's shares (`manila_csi_enabled`), by the identity in their
    // metadata, kept by the volume policy or a keep mark as volumes are;
    // their snapshots go first (Manila refuses to delete a share that has
    // any: `share/api.py` `delete`, "Share still has N dependent
    // snapshots"), and stay with a kept share (they are its data).
    let ours = |sh: &&Share| {
        !scope.legacy()
            && sh.metadata.get(MANILA_CLUSTER_KEY).map(String::as_str) == Some(&scope.identity)
    };
    let kept_share = |sh: &Share| scope.volumes == VolumesPolicy::Keep || marked_keep(&sh.metadata);
    let mut shares_with_snapshots: BTreeSet<&str> = BTreeSet::new();
    for snap in &inv.share_snapshots {
        let Some(sh) = inv
            .shares
            .iter()
            .filter(ours)
            .find(|sh| sh.id == snap.share_id)
        else {
            continue;
        };
        let item = Item {
            kind: Kind::ShareSnapshot,
            id: snap.id.clone(),
            label: name_or_id(&snap.name, &snap.id),
            status: snap.status.clone(),
        };
        if kept_share(sh) {
            p.keep.push(item);
            continue;
        }
        shares_with_snapshots.insert(sh.id.as_str());
        if share_snapshot_deletable(&snap.status) {
            p.delete.push(item);
        } else {
            p.wait.push(item);
        }
    }
    for sh in inv.shares.iter().filter(ours) {
        let item = Item {
            kind: Kind::Share,
            id: sh.id.clone(),
            label: name_or_id(&sh.name, &sh.id),
            status: sh.status.clone(),
        };
        if kept_share(sh) {
            p.keep.push(item);
        } else if share_deletable(&sh.status) && !shares_with_snapshots.contains(sh.id.as_str()) {
            p.delete.push(item);
        } else {
            p.wait.push(item);
        }
    }
    // The server groups last: their machines are gone (CAPI deletes the
    // OpenStackCluster only after every Machine).
    for sg in &inv.server_groups {
        if owns_server_group(scope, sg) {
            p.delete.push(Item {
                kind: Kind::ServerGroup,
                id: sg.id.clone(),
                label: sg.name.clone(),
                status: String::new(),
            });
        }
    }
    p
}

/// A load balancer Octavia left in ERROR (a delete its provider failed:
/// an amphora that did not answer, a driver error) is asked again with a
/// backoff from the last request: 15 s after the first, doubling, at most
/// 5 minutes apart. `requests`: delete requests made for it so far;
/// `None`: ask now; `Some(wait)`: the time left until the next request.
pub fn error_retry_wait(
    requests: u32,
    since_last: std::time::Duration,
) -> Option<std::time::Duration> {
    if requests == 0 {
        return None;
    }
    let backoff = std::time::Duration::from_secs(15)
        .saturating_mul(1 << (requests - 1).min(5))
        .min(std::time::Duration::from_secs(300));
    backoff.checked_sub(since_last).filter(|w| !w.is_zero())
}

/// What people see for a resource: its name, else its id.
fn name_or_id(name: &str, id: &str) -> String {
    if name.is_empty() { id } else { name }.to_string()
}

/// `status_reason` while the clean-up waits: what it waits for, and the
/// errors OpenStack gave (each `(item, error)`), most telling first,
/// bounded (Magnum's column is TEXT, but a reason is read by people).
pub fn waiting_reason(plan: &Plan, errors: &[(Item, String)]) -> String {
    const SHOWN: usize = 3;
    let mut parts: Vec<String> = errors.iter().map(|(i, e)| format!("{i}: {e}")).collect();
    parts.extend(
        plan.wait
            .iter()
            .filter(|w| !errors.iter().any(|(i, _)| i.id == w.id))
            .map(|w| w.to_string()),
    );
    parts.extend(
        plan.delete
            .iter()
            .filter(|d| !errors.iter().any(|(i, _)| i.id == d.id))
            .map(|d| format!("{d} (deleting)")),
    );
    let total = parts.len();
    let mut text = format!(
        "waiting for OpenStack to delete what the cluster made: {}",
        parts
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ")
    );
    if total > SHOWN {
        text.push_str(&format!(" (and {} more)", total - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "6b1d0c3e-6f5e-4d53-9f4a-2f2a6c1b8e01";
    const B: &str = "6b1d0c3e-6f5e-4d53-9f4a-2f2a6c1b8e0";

    fn scope(id: &str) -> Scope {
        Scope {
            identity: id.into(),
            cluster_uuid: A.into(),
            own_network: Some("net-a".into()),
            volumes: VolumesPolicy::Delete,
            uses: Uses::default(),
        }
    }
    fn lb(id: &str, cluster: &str, svc: &str, status: &str, net: &str) -> LoadBalancer {
        let (ns, name) = svc.split_once('/').unwrap();
        LoadBalancer {
            id: id.into(),
            name: lb_name(cluster, ns, name),
            description: format!("Kubernetes external service {svc} from cluster {cluster}"),
            provisioning_status: status.into(),
            vip_network_id: net.into(),
            vip_port_id: format!("port-{id}"),
        }
    }
    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn identity_from_values() {
        assert_eq!(identity_from_occm_values(None, A), A);
        let ours = format!(
            "cloudConfigContents: |\n    [Global]\ncluster:\n  name: {A}\nnodeSelector:\n  x: \"\"\n"
        );
        assert_eq!(identity_from_occm_values(Some(&ours), "other"), A);
        let old = "cloudConfigContents: |\n    [Global]\n    name: x\nnodeSelector:\n  node-role.kubernetes.io/control-plane: \"\"\n";
        assert_eq!(identity_from_occm_values(Some(old), A), LEGACY_IDENTITY);
    }

    #[test]
    fn only_exactly_this_identity() {
        let s = scope(A);
        assert!(owns_load_balancer(
            &s,
            &lb("1", A, "default/web", "ACTIVE", "n")
        ));
        // A longer identity that starts with ours, a shorter one ours
        // starts with, the legacy default: none of them ours.
        let longer = format!("{A}x");
        for other in [longer.as_str(), B, LEGACY_IDENTITY] {
            assert!(
                !owns_load_balancer(&s, &lb("2", other, "default/web", "ACTIVE", "net-a")),
                "{other}"
            );
        }
        // A name that does not follow from the description: not OCCM's.
        let mut odd = lb("3", A, "default/web", "ACTIVE", "n");
        odd.name = format!("kube_service_{A}_default_other");
        assert!(!owns_load_balancer(&s, &odd));
        // The user's own load balancer.
        assert!(!owns_load_balancer(
            &s,
            &LoadBalancer {
                id: "4".into(),
                name: "web".into(),
                description: "my app".into(),
                ..Default::default()
            }
        ));
        let fip = |d: String| FloatingIp {
            id: "f".into(),
            description: d,
            address: "172.24.4.10".into(),
            port_id: Some("port-1".into()),
        };
        let none = BTreeSet::new();
        assert!(owns_floating_ip(
            &s,
            &fip(format!(
                "Floating IP for Kubernetes external service default/web from cluster {A}"
            )),
            &none
        ));
        assert!(!owns_floating_ip(
            &s,
            &fip(format!(
                "Floating IP for Kubernetes external service default/web from cluster {A}x"
            )),
            &none
        ));
        let sg = |d: String| SecurityGroup {
            id: "s".into(),
            name: "lb-sg".into(),
            description: d,
        };
        assert!(owns_security_group(
            &s,
            &sg(format!(
                "Security Group for default/web Service LoadBalancer in cluster {A}"
            ))
        ));
        assert!(!owns_security_group(
            &s,
            &sg(format!(
                "Security Group for default/web Service LoadBalancer in cluster {B}"
            ))
        ));
    }

    #[test]
    fn legacy_identity_by_the_clusters_own_network() {
        let s = scope(LEGACY_IDENTITY);
        let mine = lb("1", LEGACY_IDENTITY, "default/web", "ACTIVE", "net-a");
        let theirs = lb("2", LEGACY_IDENTITY, "default/web", "ACTIVE", "net-b");
        let inv = Inventory {
            load_balancers: vec![mine.clone(), theirs],
            floating_ips: vec![
                FloatingIp {
                    id: "f1".into(),
                    description: "Floating IP for Kubernetes external service default/web from cluster kubernetes".into(),
                    address: "a".into(),
                    port_id: Some("port-1".into()),
                },
                FloatingIp {
                    id: "f2".into(),
                    description: "Floating IP for Kubernetes external service default/web from cluster kubernetes".into(),
                    address: "b".into(),
                    port_id: Some("port-2".into()),
                },
            ],
            volumes: vec![Volume {
                id: "v".into(),
                status: "available".into(),
                metadata: meta(&[(CSI_CLUSTER_KEY, LEGACY_IDENTITY)]),
                ..Default::default()
            }],
            ..Default::default()
        };
        let p = plan(&s, &inv);
        let ids: Vec<&str> = p.delete.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["f1", "1"]);
        assert!(p.wait.is_empty() && p.keep.is_empty());
        // Without the cluster's own network (a fixed network), none.
        let shared = Scope {
            own_network: None,
            ..s
        };
        assert!(plan(&shared, &inv).done());
    }

    #[test]
    fn manila_shares_by_the_identity_in_their_metadata() {
        let share = |id: &str, status: &str, m: &[(&str, &str)]| Share {
            id: id.into(),
            name: format!("pvc-{id}"),
            status: status.into(),
            metadata: meta(m),
        };
        let inv = Inventory {
            shares: vec![
                share("1", "available", &[(MANILA_CLUSTER_KEY, A)]),
                share("2", "creating", &[(MANILA_CLUSTER_KEY, A)]),
                share("3", "available", &[(MANILA_CLUSTER_KEY, B)]),
                share("4", "available", &[(CSI_CLUSTER_KEY, A)]),
                share(
                    "5",
                    "error",
                    &[(MANILA_CLUSTER_KEY, A), (KEEP_PROPERTIES[0], "true")],
                ),
                share("6", "available", &[]),
            ],
            ..Inventory::default()
        };
        let p = plan(&scope(A), &inv);
        let ids = |items: &[Item]| items.iter().map(|i| i.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&p.delete), ["1"]);
        assert_eq!(ids(&p.wait), ["2"]);
        assert_eq!(ids(&p.keep), ["5"]);
        assert!(p.delete.iter().all(|i| i.kind == Kind::Share));
        // `volumes_policy=keep` keeps them all; a legacy identity names none.
        let keep = Scope {
            volumes: VolumesPolicy::Keep,
            ..scope(A)
        };
        let p = plan(&keep, &inv);
        assert!(p.delete.is_empty() && ids(&p.keep) == ["1", "2", "5"]);
        assert!(plan(&scope(LEGACY_IDENTITY), &inv).done());
    }

    #[test]
    fn a_shares_snapshots_go_before_it_and_stay_with_a_kept_share() {
        let share = |id: &str, m: &[(&str, &str)]| Share {
            id: id.into(),
            name: format!("pvc-{id}"),
            status: "available".into(),
            metadata: meta(m),
        };
        let snap = |id: &str, share: &str, status: &str| ShareSnapshot {
            id: id.into(),
            name: format!("snapshot-{id}"),
            status: status.into(),
            share_id: share.into(),
        };
        let mut inv = Inventory {
            shares: vec![
                share("1", &[(MANILA_CLUSTER_KEY, A)]),
                share(
                    "2",
                    &[(MANILA_CLUSTER_KEY, A), (KEEP_PROPERTIES[0], "true")],
                ),
                share("3", &[(MANILA_CLUSTER_KEY, B)]),
            ],
            share_snapshots: vec![
                snap("s1", "1", "available"),
                snap("s2", "1", "creating"),
                snap("s3", "2", "available"),
                snap("s4", "3", "available"),
            ],
            ..Inventory::default()
        };
        let by = |items: &[Item]| {
            items
                .iter()
                .map(|i| (i.kind, i.id.clone()))
                .collect::<Vec<_>>()
        };
        let p = plan(&scope(A), &inv);
        // The snapshot that can go goes; the share waits for both of its.
        assert_eq!(by(&p.delete), [(Kind::ShareSnapshot, "s1".into())]);
        assert_eq!(
            by(&p.wait),
            [
                (Kind::ShareSnapshot, "s2".into()),
                (Kind::Share, "1".into())
            ]
        );
        assert_eq!(
            by(&p.keep),
            [
                (Kind::ShareSnapshot, "s3".into()),
                (Kind::Share, "2".into())
            ]
        );
        // Another cluster's share's snapshot is never named.
        assert!(!p.delete.iter().chain(&p.wait).any(|i| i.id == "s4"));
        // Once its snapshots are gone, the share goes.
        inv.share_snapshots.retain(|s| s.share_id != "1");
        let p = plan(&scope(A), &inv);
        assert_eq!(by(&p.delete), [(Kind::Share, "1".into())]);
        assert!(p.wait.is_empty());
    }

    #[test]
    fn server_groups_by_the_clusters_uuid_only() {
        let sg = |id: &str, name: &str| ServerGroup {
            id: id.into(),
            name: name.into(),
            policy: "soft-anti-affinity".into(),
        };
        let other = "7c2e1d4f-7a6f-4e64-8a5b-3a3b7d2c9f12";
        let inv = Inventory {
            server_groups: vec![
                sg("1", &format!("magnum-{A}-control-plane")),
                sg("2", &format!("magnum-{A}-default-worker")),
                sg("3", &format!("magnum-{other}-control-plane")),
                sg("4", &format!("magnum-{A}-")),
                sg("5", &format!("{A}-control-plane")),
                sg("6", "k8s-demo-abc"),
            ],
            ..Inventory::default()
        };
        // Whatever identity the addons ran with (a legacy one too).
        for identity in [A, LEGACY_IDENTITY] {
            let p = plan(&scope(identity), &inv);
            let ids: Vec<&str> = p.delete.iter().map(|i| i.id.as_str()).collect();
            assert_eq!(ids, ["1", "2"], "{identity}");
            assert!(p.delete.iter().all(|i| i.kind == Kind::ServerGroup));
        }
        let none = Scope {
            cluster_uuid: String::new(),
            ..scope(A)
        };
        assert!(plan(&none, &inv).done());
    }

    #[test]
    fn order_waits_and_volume_policy() {
        let s = scope(A);
        let tag = meta(&[(CSI_CLUSTER_KEY, A)]);
        let inv = Inventory {
            load_balancers: vec![
                lb("1", A, "default/web", "ACTIVE", "n"),
                lb("2", A, "default/api", "PENDING_DELETE", "n"),
                lb("3", A, "default/old", "DELETED", "n"),
            ],
            volumes: vec![
                Volume {
                    id: "v1".into(),
                    name: "pvc-1".into(),
                    status: "available".into(),
                    metadata: tag.clone(),
                    ..Default::default()
                },
                Volume {
                    id: "v2".into(),
                    name: "pvc-2".into(),
                    status: "available".into(),
                    metadata: tag.clone(),
                    ..Default::default()
                },
                Volume {
                    id: "v3".into(),
                    name: "pvc-3".into(),
                    status: "in-use".into(),
                    metadata: tag.clone(),
                    ..Default::default()
                },
                Volume {
                    id: "v4".into(),
                    name: "keep-me".into(),
                    status: "available".into(),
                    metadata: meta(&[(CSI_CLUSTER_KEY, A), (KEEP_PROPERTIES[0], "true")]),
                    ..Default::default()
                },
                Volume {
                    id: "u".into(),
                    name: "users-own".into(),
                    status: "available".into(),
                    metadata: BTreeMap::new(),
                    ..Default::default()
                },
            ],
            snapshots: vec![Snapshot {
                id: "s1".into(),
                name: "snap".into(),
                status: "available".into(),
                volume_id: "v2".into(),
                metadata: BTreeMap::new(),
            }],
            ..Default::default()
        };
        let p = plan(&s, &inv);
        let ids = |v: &[Item]| v.iter().map(|i| i.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&p.delete), ["1", "s1", "v1"]);
        assert_eq!(ids(&p.wait), ["2", "v2", "v3"]);
        assert_eq!(ids(&p.keep), ["v4"]);
        let reason = waiting_reason(&p, &[]);
        assert!(
            reason.contains(&format!(
                "load balancer kube_service_{A}_default_api (2) PENDING_DELETE"
            )),
            "{reason}"
        );
        assert!(reason.contains("(and 3 more)"), "{reason}");

        let keep = Scope {
            volumes: VolumesPolicy::Keep,
            ..s
        };
        let p = plan(&keep, &inv);
        assert_eq!(ids(&p.delete), ["1"]);
        assert_eq!(ids(&p.keep), ["s1", "v1", "v2", "v3", "v4"]);
        assert_eq!(VolumesPolicy::parse(Some("keep")), Ok(VolumesPolicy::Keep));
        assert_eq!(VolumesPolicy::parse(None), Ok(VolumesPolicy::Delete));
        assert!(VolumesPolicy::parse(Some("shred")).is_err());
    }

    #[test]
    fn a_kept_snapshot_keeps_its_volume() {
        let s = scope(A);
        let inv = Inventory {
            volumes: vec![Volume {
                id: "v1".into(),
                status: "available".into(),
                metadata: meta(&[(CSI_CLUSTER_KEY, A)]),
                ..Default::default()
            }],
            snapshots: vec![Snapshot {
                id: "s1".into(),
                status: "available".into(),
                volume_id: "v1".into(),
                metadata: meta(&[(KEEP_PROPERTIES[1], "true")]),
                ..Default::default()
            }],
            ..Default::default()
        };
        let p = plan(&s, &inv);
        assert!(p.done(), "{p:?}");
        assert_eq!(p.keep.len(), 2);
    }

    #[test]
    fn a_floating_ip_named_for_us_on_another_port_is_left() {
        // Cluster A's address, kept by OCCM (`keep-floatingip`) and taken
        // by cluster B's Service (`loadBalancerIP`): on B's VIP port now,
        // the description still A's.
        let desc =
            format!("Floating IP for Kubernetes external service default/web from cluster {A}");
        let fip = |id: &str, port: Option<&str>| FloatingIp {
            id: id.into(),
            description: desc.clone(),
            address: format!("172.24.4.{}", id.len()),
            port_id: port.map(str::to_string),
        };
        let inv = Inventory {
            load_balancers: vec![lb("1", A, "default/web", "ACTIVE", "n")],
            floating_ips: vec![
                fip("on-ours", Some("port-1")),
                fip("loose", None),
                fip("on-theirs", Some("port-of-b")),
            ],
            ..Default::default()
        };
        let p = plan(&scope(A), &inv);
        let ids = |v: &[Item]| v.iter().map(|i| i.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&p.delete), ["on-ours", "loose", "1"]);
        assert_eq!(ids(&p.keep), ["on-theirs"]);
        assert!(
            p.keep[0].to_string().contains("attached to port port-of-b"),
            "{}",
            p.keep[0]
        );
        // Once our load balancer is gone, its address is loose and goes;
        // B's stays whatever happens.
        let after = Inventory {
            load_balancers: vec![],
            floating_ips: vec![fip("on-theirs", Some("port-of-b"))],
            ..Default::default()
        };
        let p = plan(&scope(A), &after);
        assert!(p.done() && ids(&p.keep) == ["on-theirs"], "{p:?}");
    }

    #[test]
    fn only_a_used_services_failed_listing_blocks() {
        let labels = |pairs: &[(&str, &str)]| meta(pairs);
        let none = Uses::from_labels(&labels(&[]));
        assert_eq!(
            none,
            Uses {
                server_groups: false,
                manila: false
            }
        );
        let all = Uses::from_labels(&labels(&[
            ("manila_csi_enabled", "True"),
            ("server_group_policies", "soft-anti-affinity"),
        ]));
        assert!(all.manila && all.server_groups);
        assert!(!Uses::from_labels(&labels(&[("manila_csi_enabled", "false")])).manila);
        // A value that does not parse: used (its listing must succeed).
        assert!(Uses::from_labels(&labels(&[("manila_csi_enabled", "perhaps")])).manila);
        let failed = [
            ListFailure {
                service: Service::SharedFileSystem,
                error: "Manila share list: HTTP 403: Policy doesn't allow".into(),
            },
            ListFailure {
                service: Service::Compute,
                error: "Nova server group list: connection refused".into(),
            },
        ];
        let (blocking, ignored) = blocking_failures(&none, &failed);
        assert!(blocking.is_empty() && ignored.len() == 2);
        let (blocking, ignored) = blocking_failures(&all, &failed);
        assert!(blocking.len() == 2 && ignored.is_empty());
        let cinder = [ListFailure {
            service: Service::BlockStorage,
            error: "x".into(),
        }];
        assert_eq!(
            blocking_failures(&none, &cinder).0.len(),
            1,
            "Cinder CSI is in every cluster"
        );
    }

    #[test]
    fn stale_attachments_go_live_ones_are_waited_for() {
        let vol = |id: &str, status: &str, servers: &[(&str, &str)]| Volume {
            id: id.into(),
            name: format!("pvc-{id}"),
            status: status.into(),
            metadata: meta(&[(CSI_CLUSTER_KEY, A)]),
            attachments: servers
                .iter()
                .map(|(a, s)| Attachment {
                    id: a.to_string(),
                    server_id: s.to_string(),
                })
                .collect(),
        };
        let mut inv = Inventory {
            volumes: vec![
                vol("v1", "in-use", &[("att-1", "gone-server")]),
                vol("v2", "in-use", &[("att-2", "live-server")]),
                vol(
                    "v3",
                    "in-use",
                    &[("att-3", "gone-server"), ("att-4", "live-server")],
                ),
                Volume {
                    metadata: meta(&[(CSI_CLUSTER_KEY, B)]),
                    ..vol("theirs", "in-use", &[("att-5", "gone-server")])
                },
            ],
            gone_servers: ["gone-server".to_string()].into(),
            ..Default::default()
        };
        let p = plan(&scope(A), &inv);
        let by = |v: &[Item]| v.iter().map(|i| (i.kind, i.id.clone())).collect::<Vec<_>>();
        assert_eq!(
            by(&p.delete),
            [
                (Kind::Attachment, "att-1".into()),
                (Kind::Attachment, "att-3".into())
            ]
        );
        assert_eq!(
            by(&p.wait),
            [
                (Kind::Volume, "v1".into()),
                (Kind::Volume, "v2".into()),
                (Kind::Volume, "v3".into())
            ]
        );
        assert!(
            p.wait[1]
                .to_string()
                .contains("attached to server live-server"),
            "{}",
            p.wait[1]
        );
        // Kept volumes' attachments are never touched.
        let keep = Scope {
            volumes: VolumesPolicy::Keep,
            ..scope(A)
        };
        assert!(plan(&keep, &inv).done());
        // Detached (the attachment deleted), the volume goes.
        inv.volumes[0] = vol("v1", "available", &[]);
        let p = plan(&scope(A), &inv);
        assert!(
            p.delete
                .iter()
                .any(|i| i.kind == Kind::Volume && i.id == "v1")
        );
    }

    #[test]
    fn backups_go_with_their_volumes_and_stay_with_kept_ones() {
        let backup = |id: &str, vol: &str, status: &str, m: &[(&str, &str)]| Backup {
            id: id.into(),
            name: format!("backup-{id}"),
            status: status.into(),
            volume_id: vol.into(),
            metadata: meta(m),
        };
        let inv = Inventory {
            volumes: vec![
                Volume {
                    id: "v1".into(),
                    status: "available".into(),
                    metadata: meta(&[(CSI_CLUSTER_KEY, A)]),
                    ..Default::default()
                },
                Volume {
                    id: "v2".into(),
                    status: "available".into(),
                    metadata: meta(&[(CSI_CLUSTER_KEY, A), (KEEP_PROPERTIES[0], "true")]),
                    ..Default::default()
                },
            ],
            backups: vec![
                backup("b1", "v1", "available", &[]),
                backup("b2", "gone-volume", "error", &[(CSI_CLUSTER_KEY, A)]),
                backup("b3", "v1", "creating", &[]),
                backup("b4", "v2", "available", &[]),
                backup("b5", "other", "available", &[(CSI_CLUSTER_KEY, B)]),
                backup("b6", "v1", "available", &[(KEEP_PROPERTIES[1], "yes")]),
            ],
            ..Default::default()
        };
        let p = plan(&scope(A), &inv);
        let by = |v: &[Item]| v.iter().map(|i| (i.kind, i.id.clone())).collect::<Vec<_>>();
        assert_eq!(
            by(&p.delete),
            [
                (Kind::Backup, "b1".into()),
                (Kind::Backup, "b2".into()),
                (Kind::Volume, "v1".into())
            ]
        );
        assert_eq!(by(&p.wait), [(Kind::Backup, "b3".into())]);
        assert_eq!(
            by(&p.keep),
            [
                (Kind::Backup, "b4".into()),
                (Kind::Backup, "b6".into()),
                (Kind::Volume, "v2".into())
            ]
        );
    }

    #[test]
    fn a_load_balancer_in_error_is_asked_again_with_a_backoff() {
        use std::time::Duration as D;
        assert_eq!(error_retry_wait(0, D::ZERO), None);
        assert_eq!(error_retry_wait(1, D::from_secs(5)), Some(D::from_secs(10)));
        assert_eq!(error_retry_wait(1, D::from_secs(15)), None);
        assert_eq!(
            error_retry_wait(2, D::from_secs(20)),
            Some(D::from_secs(10))
        );
        assert_eq!(error_retry_wait(3, D::from_secs(59)), Some(D::from_secs(1)));
        // At most 5 minutes apart, however many requests.
        assert_eq!(
            error_retry_wait(40, D::from_secs(299)),
            Some(D::from_secs(1))
        );
        assert_eq!(error_retry_wait(40, D::from_secs(300)), None);
        // ERROR is a state a delete is asked from; PENDING_DELETE waits.
        let inv = Inventory {
            load_balancers: vec![
                lb("1", A, "default/web", "ERROR", "n"),
                lb("2", A, "default/api", "PENDING_DELETE", "n"),
            ],
            ..Default::default()
        };
        let p = plan(&scope(A), &inv);
        assert_eq!(p.delete.len(), 1);
        assert_eq!(
            (p.delete[0].id.as_str(), p.delete[0].status.as_str()),
            ("1", "ERROR")
        );
        assert_eq!(p.wait[0].id, "2");
    }

    #[test]
    fn long_names_are_cut_as_occm_cuts_them() {
        let svc = "x".repeat(300);
        let l = lb("1", A, &format!("default/{svc}"), "ACTIVE", "n");
        assert_eq!(l.name.len(), 255);
        assert!(owns_load_balancer(&scope(A), &l));
    }
}
