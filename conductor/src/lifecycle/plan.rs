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
    let cp = control_plane_running(observed);
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
            template: Some(
                input
                    .adopted
                    .as_ref()
                    .and_then(|a| a.control_plane_template.as_ref())
                    .and_then(|r| r["name"].as_str())
                    .map(str::to_string)
                    .unwrap_or_else(|| render::control_plane_template_name(&input)),
            ),
            held: false,
            deleting: false,
        },
        workers: Vec::new(),
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
                .filter(|g| !is_held && g.held_template.is_none())
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
}

fn s<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

/// The repairs that bring `o` to `d` (pure).
pub fn drift(d: &Desired, o: &Observed) -> Vec<Repair> {
    let mut out = Vec::new();
    let input = &d.input;
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
    let Some(driver) = observed.cluster.as_ref().and_then(annotation) else {
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
mod tests {
    use super::*;
    use crate::capi::render::CapiLine;
    use rpc_schema::ovo;
    use serde_json::json;

    fn obj(class: &'static ovo::ClassSpec, v: Value) -> MagnumObject {
        let mut o = MagnumObject::new(class);
        for (k, v) in v.as_object().unwrap() {
            o.set(k, v.clone()).unwrap();
        }
        o
    }

    #[test]
    fn status_rules_and_wording_are_magnums() {
        assert!(check_status(Checked::Update, "CREATE_COMPLETE", None).is_ok());
        let e = check_status(Checked::Update, "UPDATE_IN_PROGRESS", None).unwrap_err();
        assert_eq!(e.class, "NotSupported");
        assert_eq!(
            e.message,
            "Updating a cluster when status is \"UPDATE_IN_PROGRESS\" is not supported."
        );
        for s in ["UPDATE_FAILED", "UPDATE_IN_PROGRESS", "ADOPT_COMPLETE"] {
            assert!(check_status(Checked::Resize, s, None).is_ok(), "{s}");
        }
        let e = check_status(Checked::Resize, "CREATE_FAILED", None).unwrap_err();
        assert!(
            e.message
                .starts_with("Resizing a cluster when status is \"CREATE_FAILED\"")
        );
        let e = check_status(Checked::Upgrade, "UPDATE_FAILED", None).unwrap_err();
        assert!(e.message.starts_with("Upgrading a cluster"));
        assert!(
            check_status(
                Checked::Nodegroup("nodegroup_create"),
                "CREATE_IN_PROGRESS",
                None
            )
            .is_ok()
        );
        let e = check_status(
            Checked::Nodegroup("nodegroup_update"),
            "UPDATE_COMPLETE",
            Some("CREATE_IN_PROGRESS"),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "nodegroup_update when nodegroup status is \"UPDATE_COMPLETE\" is not supported."
        );
    }

    fn rows_for(worker_version: Option<&str>) -> (MagnumObject, MagnumObject, Vec<MagnumObject>) {
        let c = obj(
            &ovo::CLUSTER,
            json!({"uuid": "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e", "project_id": "p1", "stack_id": "k8s-abcdefghijkl",
                   "labels": {"kube_tag": "v1.31.2", "auto_scaling_enabled": "true", "max_node_count": "5"},
                   "master_lb_enabled": true, "coe_version": "v1.30.4"}),
        );
        let t = obj(
            &ovo::CLUSTER_TEMPLATE,
            json!({"uuid": "t1", "image_id": "img-131", "network_driver": "calico", "coe": "kubernetes",
                   "server_type": "vm", "cluster_distro": "ubuntu", "labels": {"kube_tag": "v1.31.2"}}),
        );
        let ng = |name: &str, role: &str, n: i64, v: Option<&str>| {
            let mut o = obj(
                &ovo::NODE_GROUP,
                json!({"uuid": format!("{name}-0000-0000"), "name": name, "role": role, "node_count": n,
                       "flavor_id": "m1", "is_default": true, "status": "UPDATE_IN_PROGRESS",
                       "labels": {"kube_tag": "v1.30.4"}, "min_node_count": 1}),
            );
            if let Some(v) = v {
                o.set("version", json!(v)).unwrap();
            }
            o
        };
        (
            c,
            t,
            vec![
                ng("default-master", "master", 3, Some("v1.31.2")),
                ng("default-worker", "worker", 2, worker_version),
            ],
        )
    }

    fn kcp(status_version: &str) -> Value {
        json!({"spec": {"version": "v1.31.2", "replicas": 3}, "status": {"version": status_version}})
    }

    fn md(version: &str) -> Value {
        json!({"metadata": {"labels": {render::NODEGROUP_LABEL: "default-worker"}},
               "spec": {"replicas": 4, "strategy": {"rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}},
                        "template": {"metadata": {"creationTimestamp": null}, "spec": {"version": version}}}})
    }

    #[test]
    fn workers_wait_for_the_control_plane() {
        let (c, t, ngs) = rows_for(Some("v1.31.2"));
        let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
        assert_eq!(input.master_version, "v1.31.2");
        assert_eq!(input.workers[0].autoscale, Some((1, 5)));
        // The control plane still runs v1.30 on some machine: hold.
        let o = Observed {
            control_plane: Some(kcp("v1.30.4")),
            machine_deployments: vec![md("v1.30.4")],
            ..Observed::default()
        };
        let d = desired(input.clone(), &ngs, &o, None);
        let w = &d.input.workers[0];
        assert_eq!(
            w.held_template.as_ref().unwrap(),
            &json!({"metadata": {}, "spec": {"version": "v1.30.4"}}),
            "the MachineDeployment keeps the template it has"
        );
        assert!(
            !w.set_replicas,
            "autoscaled and existing: replicas left to the autoscaler"
        );
        assert_eq!(
            w.rollout,
            Rollout {
                max_surge: 3,
                max_unavailable: 0
            },
            "sticky batch"
        );
        assert!(d.targets.workers[0].held);
        // Every control-plane machine runs v1.31: go.
        let o = Observed {
            control_plane: Some(kcp("v1.31.2")),
            machine_deployments: vec![md("v1.30.4")],
            ..Observed::default()
        };
        let d = desired(input.clone(), &ngs, &o, None);
        assert!(d.input.workers[0].held_template.is_none());
        assert_eq!(
            d.targets.workers[0].template.as_deref(),
            Some(render::group_template_name(&d.input, &d.input.workers[0]).as_str())
        );
        // A new group ahead of the control plane is not created yet.
        let o = Observed {
            control_plane: Some(kcp("v1.30.4")),
            ..Observed::default()
        };
        let d = desired(input.clone(), &ngs, &o, None);
        assert_eq!(d.waiting, ["default-worker"]);
        assert!(d.input.workers.is_empty());
        assert!(d.targets.workers[0].held, "and it is not done");
        // An upgrade's batch wins over what the MachineDeployment has.
        let b = Batch {
            groups: vec!["default-worker".into()],
            rollout: batch_rollout(2),
        };
        let o = Observed {
            control_plane: Some(kcp("v1.31.2")),
            machine_deployments: vec![md("v1.30.4")],
            ..Observed::default()
        };
        let d = desired(input, &ngs, &o, Some(&b));
        assert_eq!(
            d.input.workers[0].rollout,
            Rollout {
                max_surge: 2,
                max_unavailable: 0
            }
        );
    }

    #[test]
    fn an_adopted_cluster_keeps_what_it_has_until_an_upgrade() {
        let (c, t, ngs) = rows_for(Some("v1.31.2"));
        let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
        let adopted = json!({render::ADOPTED_ANNOTATION: "k8s_capi_helm_v1"});
        let theirs_ref = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                                "kind": "OpenStackMachineTemplate", "name": "k8s-abcdefghijkl-control-plane-3f2a9c1d"});
        let kcp = |v: &str| {
            json!({"metadata": {"annotations": adopted},
                   "spec": {"version": v, "replicas": 3, "machineTemplate": {"infrastructureRef": theirs_ref}},
                   "status": {"version": v}})
        };
        let theirs_labels = json!({"capi.stackhpc.com/node-group": "default-worker"});
        let md = |v: &str| {
            json!({"metadata": {"labels": {render::NODEGROUP_LABEL: "default-worker"}, "annotations": adopted},
                   "spec": {"replicas": 2, "template": {"metadata": {"labels": theirs_labels},
                                                        "spec": {"version": v, "infrastructureRef": {"name": "w-8b7e"}}}}})
        };
        let observed = |v: &str| Observed {
            cluster: Some(json!({"metadata": {"annotations": adopted}})),
            control_plane: Some(kcp(v)),
            machine_deployments: vec![md(v)],
            ..Observed::default()
        };
        // Not adopted (no annotation on the Cluster): ours, as always.
        let plain = Observed {
            cluster: Some(json!({"metadata": {}})),
            ..observed("v1.31.2")
        };
        assert!(
            desired(input.clone(), &ngs, &plain, None)
                .input
                .adopted
                .is_none()
        );

        // Same versions: their machine templates and labels stay, no health
        // check, no kubeadm configuration, no selector.
        let d = desired(input.clone(), &ngs, &observed("v1.31.2"), None);
        let a = d.input.adopted.as_ref().expect("adopted");
        assert_eq!(a.driver, "k8s_capi_helm_v1");
        assert_eq!(a.control_plane_template.as_ref(), Some(&theirs_ref));
        assert_eq!(
            d.targets.control_plane.template.as_deref(),
            Some("k8s-abcdefghijkl-control-plane-3f2a9c1d")
        );
        let w = &d.input.workers[0];
        assert_eq!(w.adopted_labels.as_ref(), Some(&theirs_labels));
        assert_eq!(
            w.held_template.as_ref().unwrap()["spec"]["infrastructureRef"]["name"],
            "w-8b7e"
        );
        assert_eq!(d.targets.workers[0].template, None, "held: not checked");
        let objs = render::render_control_plane(&d.input);
        assert_eq!(objs.len(), 1, "no template, no health check: {objs:?}");
        assert!(objs[0]["spec"].get("kubeadmConfigSpec").is_none());
        assert_eq!(
            objs[0]["spec"]["machineTemplate"]["infrastructureRef"],
            theirs_ref
        );
        let objs = render::render_group(&d.input, w);
        assert_eq!(objs.len(), 1, "no templates, no health check: {objs:?}");
        assert!(objs[0]["spec"].get("selector").is_none());
        assert_eq!(
            objs[0]["spec"]["template"]["spec"]["infrastructureRef"]["name"],
            "w-8b7e"
        );

        // An upgrade (the rows ahead of what runs): ours, their labels kept.
        let d = desired(input, &ngs, &observed("v1.30.4"), None);
        assert_eq!(
            d.input.adopted.as_ref().unwrap().control_plane_template,
            None
        );
        let objs = render::render_control_plane(&d.input);
        assert_eq!(objs[0]["kind"], "OpenStackMachineTemplate");
        assert!(objs[1]["spec"].get("kubeadmConfigSpec").is_none());
        // (workers wait for the control plane: held as they are)
        assert!(d.input.workers[0].held_template.is_some());
        let upgraded = Observed {
            control_plane: Some(json!({"metadata": {"annotations": adopted},
                                       "spec": {"version": "v1.31.2"}, "status": {"version": "v1.31.2"}})),
            ..observed("v1.30.4")
        };
        let d = desired(
            rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs)
                .unwrap()
                .0,
            &ngs,
            &upgraded,
            None,
        );
        let w = &d.input.workers[0];
        assert!(w.held_template.is_none());
        let objs = render::render_group(&d.input, w);
        let md = objs
            .iter()
            .find(|o| o["kind"] == "MachineDeployment")
            .unwrap();
        let labels = &md["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["capi.stackhpc.com/node-group"], "default-worker");
        assert_eq!(labels[render::NODEGROUP_LABEL], "default-worker");
        assert!(md["spec"].get("selector").is_none());
    }

    #[test]
    fn drift_names_what_to_repair() {
        let (c, t, mut ngs) = rows_for(Some("v1.31.2"));
        let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
        // Nothing applied yet: everything.
        let d = desired(input.clone(), &ngs, &Observed::default(), None);
        assert_eq!(
            drift(&d, &Observed::default()),
            [Repair::ControlPlane, Repair::Group("default-worker".into())]
        );
        // What the renderer would apply, observed as such: nothing to do.
        let objects = render::render(&d.input);
        let kcp = objects
            .iter()
            .find(|o| o["kind"] == "KubeadmControlPlane")
            .unwrap()
            .clone();
        let mut md = objects
            .iter()
            .find(|o| o["kind"] == "MachineDeployment")
            .unwrap()
            .clone();
        let o = Observed {
            control_plane: Some(kcp.clone()),
            machine_deployments: vec![md.clone()],
            ..Observed::default()
        };
        let d = desired(input.clone(), &ngs, &o, None);
        assert_eq!(drift(&d, &o), [], "{:?}", d.input.workers);
        // The autoscaler changed the count: not drift.
        md["spec"]["replicas"] = json!(4);
        let o2 = Observed {
            control_plane: Some(kcp.clone()),
            machine_deployments: vec![md.clone()],
            ..Observed::default()
        };
        assert_eq!(drift(&desired(input.clone(), &ngs, &o2, None), &o2), []);
        // Its bounds changed (nodegroup_update): drift.
        md["metadata"]["annotations"][render::AUTOSCALER_MAX] = json!("9");
        let o3 = Observed {
            control_plane: Some(kcp),
            machine_deployments: vec![md],
            ..Observed::default()
        };
        assert_eq!(
            drift(&desired(input, &ngs, &o3, None), &o3),
            [Repair::Group("default-worker".into())]
        );
        // A group being deleted whose MachineDeployment is still there.
        ngs[1].set("status", json!("DELETE_IN_PROGRESS")).unwrap();
        let (input, _) = rows::cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
        assert!(input.workers.is_empty());
        let d = desired(input, &ngs, &o3, None);
        assert!(drift(&d, &o3).contains(&Repair::DeleteGroup("default-worker".into())));
    }

    #[test]
    fn upgrade_paths() {
        let (c, t, ngs) = rows_for(None);
        let with = |f: &str, v: Value| {
            let mut n = t.clone();
            n.set(f, v).unwrap();
            n
        };
        let tag = |v: &str| with("labels", json!({"kube_tag": v}));
        // The cluster asks for v1.31.2, the workers run v1.30.4.
        assert_eq!(
            check_upgrade(&c, &t, &tag("v1.32.0"), &ngs, true)
                .unwrap()
                .to_string(),
            "v1.32.0"
        );
        assert_eq!(
            check_upgrade(&c, &t, &tag("v1.31.2"), &ngs, true)
                .unwrap()
                .minor,
            31,
            "same: fine"
        );
        let e = check_upgrade(&c, &t, &tag("v1.31.1"), &ngs, true).unwrap_err();
        assert!(
            e.contains("downgrades are not supported") && e.contains("v1.31.2"),
            "{e}"
        );
        let e = check_upgrade(&c, &t, &tag("v1.33.0"), &ngs, true).unwrap_err();
        assert!(
            e.contains("skips a minor version") && e.contains("v1.32.x"),
            "{e}"
        );
        let e = check_upgrade(&c, &t, &with("network_driver", json!("cilium")), &ngs, true)
            .unwrap_err();
        assert!(
            e.starts_with("network_driver differs (calico -> cilium)"),
            "{e}"
        );
        let e = check_upgrade(&c, &t, &with("server_type", json!("bm")), &ngs, true).unwrap_err();
        assert!(e.starts_with("server_type differs (vm -> bm)"), "{e}");
        let e = check_upgrade(&c, &t, &with("labels", json!({})), &ngs, true).unwrap_err();
        assert!(e.contains("kube_tag"), "{e}");
        let e = check_upgrade(&c, &t, &tag("latest"), &ngs, true).unwrap_err();
        assert!(e.contains("kube_tag"), "{e}");
    }

    #[test]
    fn nodes_to_remove_by_name_node_or_server() {
        let m = |name: &str, server: &str| {
            json!({"metadata": {"name": name}, "spec": {"providerID": format!("openstack:///{server}")},
                   "status": {"nodeRef": {"name": format!("node-{name}")}}})
        };
        let ms = [m("w-1", "aaaa"), m("w-2", "bbbb"), m("w-3", "cccc")];
        let refs: Vec<&Value> = ms.iter().collect();
        let pick = |names: &[&str]| {
            machines_to_remove(
                &refs,
                &names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
            .map(|v| {
                v.iter()
                    .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(pick(&["w-2"]).unwrap(), ["w-2"]);
        assert_eq!(pick(&["cccc", "node-w-1"]).unwrap(), ["w-3", "w-1"]);
        assert_eq!(
            pick(&["w-2", "bbbb"]).unwrap(),
            ["w-2"],
            "one machine named twice"
        );
        assert!(pick(&["w-9"]).unwrap_err().contains("\"w-9\""));
        assert!(pick(&[""]).is_err());
    }
}
