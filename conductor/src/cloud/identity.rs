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
        if owns_floating_ip(scope, fip, &lb_ports) {
            p.delete.push(Item {
                kind: Kind::FloatingIp,
                id: fip.id.clone(),
                label: name_or_id(&fip.address, &fip.id),
                status: String::new(),
            });
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
    for s in &inv.snapshots {
        let of_ours = volumes_going.contains(s.volume_id.as_str())
            || volumes_kept.contains(s.volume_id.as_str());
        if !(tagged(scope, &s.metadata) || of_ours) {
            continue;
        }
        let item = Item {
            kind: Kind::Snapshot,
            id: s.id.clone(),
            label: name_or_id(&s.name, &s.id),
            status: s.status.clone(),
        };
        if scope.volumes == VolumesPolicy::Keep
            || marked_keep(&s.metadata)
            || volumes_kept.contains(s.volume_id.as_str())
        {
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
    for v in &inv.volumes {
        if !tagged(scope, &v.metadata) {
            continue;
        }
        let item = Item {
            kind: Kind::Volume,
            id: v.id.clone(),
            label: name_or_id(&v.name, &v.id),
            status: v.status.clone(),
        };
        if !volumes_going.contains(v.id.as_str()) || kept_snapshot.contains(v.id.as_str()) {
            p.keep.push(item);
        } else if snapshots_left.contains(v.id.as_str()) || !volume_deletable(&v.status) {
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
                },
                Volume {
                    id: "v2".into(),
                    name: "pvc-2".into(),
                    status: "available".into(),
                    metadata: tag.clone(),
                },
                Volume {
                    id: "v3".into(),
                    name: "pvc-3".into(),
                    status: "in-use".into(),
                    metadata: tag.clone(),
                },
                Volume {
                    id: "v4".into(),
                    name: "keep-me".into(),
                    status: "available".into(),
                    metadata: meta(&[(CSI_CLUSTER_KEY, A), (KEEP_PROPERTIES[0], "true")]),
                },
                Volume {
                    id: "u".into(),
                    name: "users-own".into(),
                    status: "available".into(),
                    metadata: BTreeMap::new(),
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
    fn long_names_are_cut_as_occm_cuts_them() {
        let svc = "x".repeat(300);
        let l = lb("1", A, &format!("default/{svc}"), "ACTIVE", "n");
        assert_eq!(l.name.len(), 255);
        assert!(owns_load_balancer(&scope(A), &l));
    }
}
