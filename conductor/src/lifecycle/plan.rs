//! What an operation may do and what the management cluster should hold
//! (pure: rows and watch caches in, decisions out).
//!
//! - [`check_status`]: Magnum's allowed statuses per operation, with its
//!   `NotSupported` wording;
//! - [`desired`]: the rendering input adjusted to what the management
//!   cluster runs now: workers wait for the control plane to reach their
//!   version (their MachineDeployment keeps its machine template until
//!   then), autoscaled replicas are left to the autoscaler, a rollout keeps
//!   the batch size it was started with; plus the targets the status
//!   mapper checks;
//! - [`check_upgrade`]: the upgrade path (no downgrade, no minor skip,
//!   nothing that cannot be rolled), refused before anything changes;
//! - [`machines_to_remove`]: `nodes_to_remove` as Magnum gives them
//!   (server names or ids) mapped to the group's Machines.

use rpc_schema::RemoteFailure;
use rpc_schema::ovo::MagnumObject;
use serde_json::Value;

use super::rows;
use crate::capi::labels::{self, KubeVersion};
use crate::capi::render::{self, ClusterInput, Rollout};
use crate::capi::status::{GroupTarget, Observed, Targets};
use crate::capi::topology;

/// Magnum's "completed" group of statuses.
pub const COMPLETED: &[&str] = &[
    "CREATE_COMPLETE",
    "UPDATE_COMPLETE",
    "RESUME_COMPLETE",
    "RESTORE_COMPLETE",
    "ROLLBACK_COMPLETE",
    "SNAPSHOT_COMPLETE",
    "CHECK_COMPLETE",
    "ADOPT_COMPLETE",
];

/// The operations with a status rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// `cluster_update`: the completed group.
    Update,
    /// `cluster_resize`: also UPDATE_FAILED and UPDATE_IN_PROGRESS
    /// (the cluster autoscaler calls it often, and it is the way out of a
    /// failed update).
    Resize,
    /// `cluster_upgrade`: the completed group.
    Upgrade,
    /// `nodegroup_create`/`_update`: the *nodegroup's* status, if it has one.
    Nodegroup(&'static str),
}

/// Magnum's status check, with its message (`NotSupported`, HTTP 400).
/// `ng_status` is the nodegroup's status for [`Checked::Nodegroup`].
pub fn check_status(
    op: Checked,
    cluster_status: &str,
    ng_status: Option<&str>,
) -> Result<(), RemoteFailure> {
    let allowed = |s: &str, extra: &[&str]| COMPLETED.contains(&s) || extra.contains(&s);
    let (ok, what) = match op {
        Checked::Update => (allowed(cluster_status, &[]), "Updating"),
        Checked::Resize => (
            allowed(cluster_status, &["UPDATE_FAILED", "UPDATE_IN_PROGRESS"]),
            "Resizing",
        ),
        Checked::Upgrade => (allowed(cluster_status, &[]), "Upgrading"),
        Checked::Nodegroup(fname) => {
            let ok = ng_status.is_none_or(|s| allowed(s, &["UPDATE_FAILED", "UPDATE_IN_PROGRESS"]));
            if ok {
                return Ok(());
            }
            // Magnum's message prints the cluster's status here.
            return Err(RemoteFailure::not_supported(&format!(
                "{fname} when nodegroup status is \"{cluster_status}\""
            )));
        }
    };
    if ok {
        Ok(())
    } else {
        Err(RemoteFailure::not_supported(&format!(
            "{what} a cluster when status is \"{cluster_status}\""
        )))
    }
}

/// The version the control plane runs now: its lowest machine version
/// (`status.version`), else what it was asked for.
fn control_plane_running(o: &Observed) -> Option<KubeVersion> {
    let k = o.control_plane.as_ref()?;
    k.pointer("/status/version")
        .or_else(|| k.pointer("/spec/version"))
        .and_then(Value::as_str)
        .and_then(|v| KubeVersion::parse(v).ok())
}

/// The rollout strategy a MachineDeployment has (either CAPI line).
fn observed_rollout(md: &Value) -> Option<Rollout> {
    let r = md
        .pointer("/spec/strategy/rollingUpdate")
        .or_else(|| md.pointer("/spec/rollout/strategy/rollingUpdate"))?;
    let n = |k: &str| {
        r.get(k)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    Some(Rollout {
        max_surge: n("maxSurge")?,
        max_unavailable: n("maxUnavailable")?,
    })
}

/// A rollout batch for some groups (an upgrade's `max_batch_size`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Group keys it applies to.
    pub groups: Vec<String>,
    pub rollout: Rollout,
}

/// `max_batch_size` as a rollout: that many new machines at a time, none
/// taken away before its replacement is ready.
pub fn batch_rollout(max_batch_size: i64) -> Rollout {
    Rollout {
        max_surge: u32::try_from(max_batch_size.max(1)).unwrap_or(u32::MAX),
        max_unavailable: 0,
    }
}

/// What the management cluster should hold for a cluster now.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The input to render (held groups keep their observed template).
    pub input: ClusterInput,
    /// Groups not rendered at all: new groups whose version the control
    /// plane does not run yet.
    pub waiting: Vec<String>,
    pub targets: Targets,
}

/// Adjust the rows' input to what the management cluster runs (`observed`):
/// see the module documentation. `ngs` are all nodegroup rows.
pub fn desired(
    mut input: ClusterInput,
    ngs: &[MagnumObject],
    observed: &Observed,
    batch: Option<&Batch>,
) -> Desired {
    apply_adoption(&mut input, observed);
    // A topology's versions are CAPI's to order (workers follow the
    // control plane), and its machine templates are CAPI's to name.
    let topology = input.adopted.as_ref().is_some_and(|a| a.topology);
    let cp = control_plane_running(observed).filter(|_| !topology);
    let mut waiting = Vec::new();
    let mut held = Vec::new();
    for g in &mut input.workers {
        let md = observed.machine_deployment(&g.key);
        if g.autoscale.is_some() {
            // The autoscaler owns the count once the MachineDeployment exists.
            g.set_replicas = md.is_none();
        }
        g.rollout = batch
            .filter(|b| b.groups.contains(&g.key))
            .map(|b| b.rollout)
            .or_else(|| md.and_then(observed_rollout))
            .unwrap_or_default();
        let ahead = match (cp, KubeVersion::parse(&g.version)) {
            (Some(cp), Ok(v)) => v > cp,
            _ => false,
        };
        if ahead {
            held.push(g.key.clone());
            match md.and_then(|d| d.pointer("/spec/template")) {
                Some(t) => g.held_template = Some(keep_template(t)),
                None => waiting.push(g.key.clone()),
            }
        }
    }
    input.workers.retain(|g| !waiting.contains(&g.key));
    let mut targets = Targets {
        control_plane: GroupTarget {
            key: String::new(),
            replicas: Some(i64::from(input.master_count)),
            version: input.master_version.clone(),
            template: (!topology).then(|| {
                input
                    .adopted
                    .as_ref()
                    .and_then(|a| a.control_plane_template.as_ref())
                    .and_then(|r| r["name"].as_str())
                    .map(str::to_string)
                    .unwrap_or_else(|| render::control_plane_template_name(&input))
            }),
            held: false,
            deleting: false,
        },
        workers: Vec::new(),
        proxied: input.proxied(),
    };
    for ng in ngs.iter().filter(|n| n.get_str("role") != Some("master")) {
        let key = rows::group_key(ng);
        if rows::is_deleting(ng) {
            targets.workers.push(GroupTarget {
                key,
                deleting: true,
                ..GroupTarget::default()
            });
            continue;
        }
        let is_held = held.contains(&key);
        let g = input.workers.iter().find(|g| g.key == key);
        targets.workers.push(GroupTarget {
            replicas: g.and_then(|g| g.autoscale.is_none().then_some(i64::from(g.count))),
            version: g.map(|g| g.version.clone()).unwrap_or_else(|| {
                rows::group_version(ng, &input.master_version).unwrap_or_default()
            }),
            template: g
                .filter(|g| !topology && !is_held && g.held_template.is_none())
                .map(|g| render::group_template_name(&input, g)),
            held: is_held,
            deleting: false,
            key,
        });
    }
    Desired {
        input,
        waiting,
        targets,
    }
}

/// What differs between the desired state and the management cluster, for
/// an update in progress (the status worker repairs it: this is what makes
/// an operation finish after its conductor died, on any conductor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// Apply the control plane (count, version or machine template differ).
    ControlPlane,
    /// Apply this worker group (missing, count, version, template or
    /// autoscaler bounds differ).
    Group(String),
    /// Delete this worker group's objects (its row is being deleted).
    DeleteGroup(String),
    /// Write the topology of a topology-run cluster ([`topology::patch`]).
    Topology,
}

/// What the rows want of a topology-run cluster's topology (pure); `ngs`:
/// its nodegroup rows (their roles).
pub fn topology_want(d: &Desired, ngs: &[MagnumObject]) -> topology::Want {
    let input = &d.input;
    let role = |key: &str| {
        ngs.iter()
            .find(|n| rows::group_key(n) == key)
            .and_then(|n| n.get_str("role"))
            .unwrap_or("worker")
            .to_string()
    };
    topology::Want {
        version: input.master_version.clone(),
        image: input.master_image.clone(),
        control_plane_replicas: i64::from(input.master_count),
        groups: input
            .workers
            .iter()
            .map(|g| topology::Group {
                name: g.key.clone(),
                role: role(&g.key),
                flavor: g.flavor.clone(),
                image: g.image.clone(),
                replicas: g.autoscale.is_none().then_some(i64::from(g.count)),
                autoscale: g.autoscale,
            })
            .collect(),
        deleting: d
            .targets
            .workers
            .iter()
            .filter(|t| t.deleting)
            .map(|t| t.key.clone())
            .collect(),
    }
}

fn s<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

/// The repairs that bring `o` to `d` (pure).
pub fn drift(d: &Desired, o: &Observed) -> Vec<Repair> {
    let mut out = Vec::new();
    let input = &d.input;
    if input.adopted.as_ref().is_some_and(|a| a.topology) {
        // What differs is what the topology says (CAPI makes the rest).
        let differs = o.cluster.as_ref().is_some_and(|c| {
            topology::patch(c, &topology_want(d, &[])).is_ok_and(|p| !p.is_empty())
        });
        if differs {
            out.push(Repair::Topology);
        }
        return out;
    }
    match &o.control_plane {
        None => out.push(Repair::ControlPlane),
        Some(k) => {
            let template = s(k, "/spec/machineTemplate/spec/infrastructureRef/name")
                .or_else(|| s(k, "/spec/machineTemplate/infrastructureRef/name"));
            if k.pointer("/spec/replicas").and_then(Value::as_i64)
                != Some(i64::from(input.master_count))
                || s(k, "/spec/version") != Some(input.master_version.as_str())
                || template != Some(render::control_plane_template_name(input).as_str())
            {
                out.push(Repair::ControlPlane);
            }
        }
    }
    for g in &input.workers {
        let Some(md) = o.machine_deployment(&g.key) else {
            out.push(Repair::Group(g.key.clone()));
            continue;
        };
        let replicas = md.pointer("/spec/replicas").and_then(Value::as_i64);
        let count_differs = g.autoscale.is_none() && replicas != Some(i64::from(g.count));
        let template_differs = g.held_template.is_none()
            && (s(md, "/spec/template/spec/version") != Some(g.version.as_str())
                || s(md, "/spec/template/spec/infrastructureRef/name")
                    != Some(render::group_template_name(input, g).as_str()));
        let bounds = g.autoscale.map(|(lo, hi)| (lo.to_string(), hi.to_string()));
        let observed_bounds = match (
            md.pointer("/metadata/annotations")
                .and_then(|a| a.get(render::AUTOSCALER_MIN)),
            md.pointer("/metadata/annotations")
                .and_then(|a| a.get(render::AUTOSCALER_MAX)),
        ) {
            (Some(lo), Some(hi)) => Some((
                lo.as_str().unwrap_or_default().to_string(),
                hi.as_str().unwrap_or_default().to_string(),
            )),
            _ => None,
        };
        if count_differs || template_differs || bounds != observed_bounds {
            out.push(Repair::Group(g.key.clone()));
        }
    }
    for t in d.targets.workers.iter().filter(|t| t.deleting) {
        if o.machine_deployment(&t.key)
            .is_some_and(|md| md.pointer("/metadata/deletionTimestamp").is_none())
        {
            out.push(Repair::DeleteGroup(t.key.clone()));
        }
    }
    out
}

/// The machine template of an observed MachineDeployment, as it can be
/// applied again (server-set fields left out).
/// A cluster `adopt` handed over (its CAPI Cluster annotated
/// [`render::ADOPTED_ANNOTATION`]) keeps what its objects have while an
/// operation does not need to change it (see [`render::Adopted`]): the
/// control plane's machine template while its version is the rows', an
/// adopted group's machine template while its version is the rows' (held
/// as observed), every adopted group's selector and template labels.
pub fn apply_adoption(input: &mut ClusterInput, observed: &Observed) {
    let annotation = |o: &Value| {
        o.pointer("/metadata/annotations")
            .and_then(|a| a.get(render::ADOPTED_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let observed_driver = observed.cluster.as_ref().and_then(annotation);
    // A topology cluster (marked so by its row, see `rows::cluster_input`)
    // renders nothing: only the driver's name is taken from its Cluster.
    if let Some(a) = input.adopted.as_mut().filter(|a| a.topology) {
        if let Some(d) = observed_driver {
            a.driver = d;
        }
        return;
    }
    let Some(driver) = observed_driver else {
        return;
    };
    let same = |v: Option<&Value>, want: &str| {
        v.and_then(Value::as_str)
            .is_some_and(|v| v.trim_start_matches('v') == want.trim_start_matches('v'))
    };
    let kcp = observed.control_plane.as_ref();
    let control_plane_template = kcp
        .filter(|k| same(k.pointer("/spec/version"), &input.master_version))
        .and_then(|k| {
            k.pointer("/spec/machineTemplate/infrastructureRef")
                .or_else(|| k.pointer("/spec/machineTemplate/spec/infrastructureRef"))
        })
        .cloned();
    input.adopted = Some(render::Adopted {
        driver,
        control_plane_template,
        topology: false,
    });
    for g in &mut input.workers {
        let Some(md) = observed
            .machine_deployment(&g.key)
            .filter(|md| annotation(md).is_some())
        else {
            continue;
        };
        g.adopted_labels = Some(
            md.pointer("/spec/template/metadata/labels")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({})),
        );
        if same(md.pointer("/spec/template/spec/version"), &g.version)
            && let Some(t) = md.pointer("/spec/template")
        {
            g.held_template = Some(keep_template(t));
        }
    }
}

fn keep_template(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("creationTimestamp");
    }
    t
}

/// Why an upgrade to `new` cannot be done, checked before anything is
/// written (Magnum's `InvalidClusterTemplateForUpgrade`, HTTP 409), or the
/// new Kubernetes version.
pub fn check_upgrade(
    cluster: &MagnumObject,
    current: &MagnumObject,
    new: &MagnumObject,
    ngs: &[MagnumObject],
    whole_cluster: bool,
) -> Result<KubeVersion, String> {
    let same =
        |f: &str| current.get(f).unwrap_or(&Value::Null) == new.get(f).unwrap_or(&Value::Null);
    let field = |o: &MagnumObject, f: &str| {
        o.get(f)
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            })
            .unwrap_or_else(|| "None".into())
    };
    for (f, why) in [
        (
            "coe",
            "a cluster cannot change its container orchestration engine",
        ),
        (
            "server_type",
            "machines cannot move between virtual and bare-metal servers",
        ),
        (
            "cluster_distro",
            "the operating system family cannot change in a rolling upgrade (bootstrap formats differ)",
        ),
        (
            "network_driver",
            "the network driver (CNI) cannot be replaced in place",
        ),
        (
            "external_network_id",
            "the external network of the API load balancer and router cannot change",
        ),
        ("tls_disabled", "TLS cannot be switched on or off"),
    ] {
        if !same(f) {
            return Err(format!(
                "{f} differs ({} -> {}): {why}",
                field(current, f),
                field(new, f)
            ));
        }
    }
    for f in ["fixed_network", "fixed_subnet"] {
        let own = cluster.get_str(f).is_some_and(|s| !s.is_empty());
        if !own && !same(f) {
            return Err(format!(
                "{f} differs ({} -> {}): the cluster's network cannot change",
                field(current, f),
                field(new, f)
            ));
        }
    }
    let tag = new
        .get("labels")
        .and_then(|l| l.get("kube_tag"))
        .and_then(Value::as_str)
        .ok_or("the new template has no kube_tag label")?;
    let target = labels::kube_version(tag).map_err(|e| e.to_string())?;
    let target = KubeVersion::parse(&target).map_err(str::to_string)?;
    let current_tag = cluster
        .get("labels")
        .and_then(|l| l.get("kube_tag"))
        .and_then(Value::as_str)
        .and_then(|t| KubeVersion::parse(t).ok());
    // The highest version any part of the cluster runs or was asked for.
    let mut running: Vec<(String, KubeVersion)> = Vec::new();
    if let Some(v) = current_tag {
        running.push(("the cluster".into(), v));
    }
    if let Some(v) = cluster
        .get_str("coe_version")
        .and_then(|v| KubeVersion::parse(v).ok())
    {
        running.push(("the control plane".into(), v));
    }
    let cluster_version = current_tag.map(|v| v.to_string()).unwrap_or_default();
    for ng in ngs.iter().filter(|n| !rows::is_deleting(n)) {
        if let Ok(v) = rows::group_version(ng, &cluster_version)
            && let Ok(v) = KubeVersion::parse(&v)
        {
            running.push((
                format!("nodegroup {}", ng.get_str("name").unwrap_or("?")),
                v,
            ));
        }
    }
    if let Some((who, top)) = running.iter().max_by_key(|(_, v)| *v) {
        if target < *top {
            return Err(format!(
                "downgrades are not supported: {who} runs {top}, the template asks for {target}"
            ));
        }
        if target.minor > top.minor + 1 {
            return Err(format!(
                "{top} -> {target} skips a minor version: upgrade to v1.{}.x first",
                top.minor + 1
            ));
        }
    }
    if whole_cluster {
        // Kubernetes' version skew: kubelets at most three minors older
        // than the API server.
        if let Some((who, low)) = running.iter().min_by_key(|(_, v)| *v)
            && target.minor > low.minor + 3
        {
            return Err(format!(
                "{who} runs {low}, more than three minor versions older than {target}: upgrade it first"
            ));
        }
    }
    Ok(target)
}

/// Vertical resize by template (pure): the flavor `field` (`flavor_id` of a
/// worker group or of the cluster, `master_flavor_id` of the control plane)
/// after an upgrade from `current` to `new`. What still has the current
/// template's flavor follows the new template's; a flavor given at cluster or
/// node-group create (not the template's) stays. `None`: unchanged. Every
/// machine of a group whose flavor changes is replaced (its machine template
/// is hash-named: a new name rolls the group).
pub fn flavor_after_upgrade(
    has: Option<&str>,
    field: &str,
    current: &MagnumObject,
    new: &MagnumObject,
) -> Option<String> {
    fn of<'a>(t: &'a MagnumObject, field: &str) -> Option<&'a str> {
        t.get_str(field).filter(|s| !s.is_empty())
    }
    let (old, next) = (of(current, field)?, of(new, field)?);
    (has == Some(old) && next != old).then(|| next.to_string())
}

/// The node-group field [`flavor_after_upgrade`] reads for `ng`'s role.
pub fn template_flavor_field(ng: &MagnumObject) -> &'static str {
    if ng.get_str("role") == Some("master") {
        "master_flavor_id"
    } else {
        "flavor_id"
    }
}

/// The group's Machines named by `nodes_to_remove` (Machine name, node
/// name, or the Nova server id in `providerID`), or why one is unknown.
pub fn machines_to_remove<'a>(
    machines: &[&'a Value],
    nodes_to_remove: &[String],
) -> Result<Vec<&'a Value>, String> {
    let mut out: Vec<&Value> = Vec::new();
    for n in nodes_to_remove {
        let n = n.trim();
        let found = machines.iter().find(|m| {
            let name = m.pointer("/metadata/name").and_then(Value::as_str);
            let node = m.pointer("/status/nodeRef/name").and_then(Value::as_str);
            let server = m
                .pointer("/spec/providerID")
                .and_then(Value::as_str)
                .and_then(|p| p.rsplit('/').next());
            !n.is_empty() && (name == Some(n) || node == Some(n) || server == Some(n))
        });
        match found {
            Some(m) if !out.iter().any(|o| std::ptr::eq(*o, *m)) => out.push(m),
            Some(_) => {}
            None => return Err(format!("nodes_to_remove: no node {n:?} in this nodegroup")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
