//! CAPI objects -> what Magnum's database should say (pure).
//!
//! Fed by watches (not polling): given what the management cluster holds
//! for one cluster, compute the cluster status and reason, `api_address`,
//! `coe_version`, per-nodegroup status and addresses, and health. Failures
//! are reported (terminal infrastructure failures, failed addons,
//! `create_timeout`), unlike both existing drivers. Both condition shapes
//! (v1beta1 and v1beta2) are read.

use std::collections::BTreeMap;

use serde_json::Value;

use std::hash::{Hash, Hasher};

use super::naming::object_name;
use super::render::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, DEPLOYMENT_NAME_LABEL, NODEGROUP_LABEL,
};
use super::topology::{MD_NAME_LABEL, OWNED_LABEL};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    fn word(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// What the watches currently hold for one cluster.
#[derive(Debug, Default, Clone)]
pub struct Observed {
    pub cluster: Option<Value>,
    pub infra: Option<Value>,
    pub control_plane: Option<Value>,
    pub machine_deployments: Vec<Value>,
    pub machines: Vec<Value>,
    pub helm_releases: Vec<Value>,
    /// `magnum-capi-proxy` hosts' EndpointSlices of its API Service.
    pub api_slices: Vec<Value>,
}

impl Observed {
    /// The MachineDeployment of group `key` (ours carry the group's
    /// label; a topology's, its entry's name, which is the nodegroup's).
    pub fn machine_deployment(&self, key: &str) -> Option<&Value> {
        self.machine_deployments.iter().find(|d| {
            label(d, NODEGROUP_LABEL) == Some(key)
                || (label(d, OWNED_LABEL).is_some() && label(d, MD_NAME_LABEL) == Some(key))
        })
    }
    /// The Machines of group `key` (`None`: the control plane).
    pub fn group_machines(&self, key: Option<&str>) -> Vec<&Value> {
        self.machines
            .iter()
            .filter(|m| match key {
                None => label(m, CONTROL_PLANE_LABEL).is_some(),
                // Ours carry the group's label; an adopted group's carry
                // their MachineDeployment's name (`<stack_id>-<key>`, as ours).
                Some(k) => {
                    label(m, NODEGROUP_LABEL) == Some(k)
                        || (label(m, OWNED_LABEL).is_some() && label(m, MD_NAME_LABEL) == Some(k))
                        || label(m, CLUSTER_NAME_LABEL).is_some_and(|c| {
                            label(m, DEPLOYMENT_NAME_LABEL) == Some(&object_name(c, k))
                        })
                }
            })
            .collect()
    }
}

/// For a cluster reached through `magnum-capi-proxy`: once CAPO made its
/// network, no proxy host has published a ready EndpointSlice, so CAPI's
/// controllers cannot reach its API (nothing else would say why the create
/// does not move).
fn proxy_blocker(o: &Observed) -> Option<String> {
    let infra = o.infra.as_ref()?;
    if ptr(infra, "/status/ready") != Some(&Value::Bool(true)) {
        return None;
    }
    let ready = o.api_slices.iter().any(|s| {
        label(s, common::api_proxy::MANAGED_BY_LABEL) == Some(common::api_proxy::MANAGED_BY)
            && common::api_proxy::slice_ready(s)
    });
    if ready {
        return None;
    }
    let cluster = o.cluster.as_ref().and_then(|c| text(c, "/metadata/name"))?;
    let network = text(infra, "/status/network/id").unwrap_or("(not known yet)");
    Some(format!(
        "the management cluster cannot reach the API: no magnum-capi-proxy host reaches network {network} \
         (no ready EndpointSlice for Service {}); see `magnum-conductor check`",
        common::api_proxy::service_name(cluster)
    ))
}

/// What the rows want of one group: the status says `*_COMPLETE` only
/// once the management cluster runs exactly this.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupTarget {
    /// The group key (`magnum.openstack.org/nodegroup`); empty for the control plane.
    pub key: String,
    /// Desired machines; `None` when the autoscaler owns the count.
    pub replicas: Option<i64>,
    /// Kubernetes version of every machine (empty: not checked).
    pub version: String,
    /// The OpenStackMachineTemplate the machines must come from.
    pub template: Option<String>,
    /// Waiting for the control plane to reach `version` first.
    pub held: bool,
    /// Being removed (nodegroup_delete).
    pub deleting: bool,
}

/// The targets of a cluster's groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Targets {
    pub control_plane: GroupTarget,
    pub workers: Vec<GroupTarget>,
    /// Reached through `magnum-capi-proxy` (no API floating IP).
    pub proxied: bool,
}

/// One nodegroup's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub status: String,
    /// Why it is not done (None when done).
    pub reason: Option<String>,
    pub node_addresses: Vec<String>,
    /// The MachineDeployment's `spec.replicas` (what the autoscaler chose).
    pub replicas: Option<i64>,
}

/// The Magnum-side result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MagnumView {
    pub status: String,
    pub status_reason: Option<String>,
    pub api_address: Option<String>,
    pub coe_version: Option<String>,
    /// The control plane (`default-master`) and each worker group by key.
    pub master: GroupView,
    pub workers: BTreeMap<String, GroupView>,
    pub health_status: String,
    pub health_status_reason: BTreeMap<String, String>,
    /// Changes whenever a rollout or scale moves a step (for the "no
    /// progress" timeout of updates).
    pub progress: u64,
    /// What a complete cluster's `status_reason` says (labels that were
    /// ignored); None: nothing.
    pub note: Option<String>,
}

/// How long the operation has run, and its limits (minutes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clock {
    /// Since the create started (cluster `created_at`).
    pub elapsed_min: u64,
    /// The cluster's `create_timeout` (0: none).
    pub create_timeout_min: u64,
    /// Since the update last made progress.
    pub stalled_min: u64,
    /// `[capi] update_timeout` (0: none).
    pub update_timeout_min: u64,
}

fn label<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(k))
        .and_then(Value::as_str)
}
fn ptr<'a>(v: &'a Value, p: &str) -> Option<&'a Value> {
    v.pointer(p)
}
fn int(v: &Value, p: &str) -> i64 {
    ptr(v, p).and_then(Value::as_i64).unwrap_or(0)
}
fn text<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    ptr(v, p).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// What a condition's status means, by type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polarity {
    /// True is the good state (Ready, Available, InfrastructureReady,
    /// MachinesReady, ... every v1beta1 condition and most v1beta2 ones):
    /// anything else is what the object waits for.
    Positive,
    /// False is the normal state; True says what the object is doing, not
    /// what blocks it (the operation's own progress: its group's counts say
    /// more precisely where it is).
    NegativeProgress,
    /// False is the normal state; True is a problem worth naming.
    NegativeIssue,
    /// Never a blocker (a paused object is the operator's choice).
    Ignored,
}

/// The polarity of each condition type the mapper reads, on both lines:
/// cluster-api v1.14 `api/core/v1beta2` (`RollingOut`, `ScalingUp`,
/// `ScalingDown`, `Remediating`, `Deleting`, `Paused` for Cluster,
/// MachineDeployment, MachineSet and, in `api/controlplane/kubeadm/v1beta2`,
/// KubeadmControlPlane; Machine `Deleting`, `Paused`, `Updating`), declared
/// negative where upstream summarises them (`NegativePolarityConditionTypes`
/// in `internal/controllers/*/..._status.go`, e.g. the Cluster's
/// `setAvailableCondition`, the Machine's `setReadyCondition`). Every other
/// type (all of v1beta1's, CAPO's and CAAPH's) is positive.
pub fn polarity(condition_type: &str) -> Polarity {
    match condition_type {
        "RollingOut" | "ScalingUp" | "ScalingDown" | "Updating" => Polarity::NegativeProgress,
        "Remediating" | "Deleting" => Polarity::NegativeIssue,
        "Paused" => Polarity::Ignored,
        _ => Polarity::Positive,
    }
}

/// Whether a condition says the object is blocked.
fn blocks(c: &Value) -> bool {
    let ty = c["type"].as_str().unwrap_or_default();
    match polarity(ty) {
        Polarity::Positive => c["status"] != "True",
        Polarity::NegativeIssue => c["status"] == "True",
        Polarity::NegativeProgress | Polarity::Ignored => false,
    }
}

/// The first condition that says the object is blocked, by its type's
/// [`polarity`]: "Type: message" (v1beta1 or v1beta2).
fn blocking_condition(o: &Value) -> Option<String> {
    let conds = ptr(o, "/status/conditions")?.as_array()?;
    conds.iter().find(|c| blocks(c)).map(|c| {
        let ty = c["type"].as_str().unwrap_or("?");
        match c["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .or_else(|| c["reason"].as_str())
        {
            Some(m) => format!("{ty}: {m}"),
            None => format!("{ty} is not yet True"),
        }
    })
}

fn addresses<'a>(machines: impl Iterator<Item = &'a Value>) -> Vec<String> {
    let mut out: Vec<String> = machines
        .filter(|m| !deleting(m))
        .flat_map(|m| {
            ptr(m, "/status/addresses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter(|a| a["type"] == "InternalIP" || a["type"] == "ExternalIP")
        .filter_map(|a| a["address"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn deleting(o: &Value) -> bool {
    ptr(o, "/metadata/deletionTimestamp").is_some()
}

fn running(m: &Value) -> bool {
    text(m, "/status/phase") == Some("Running") && ptr(m, "/status/nodeRef").is_some()
}

/// A Machine counts toward a done group: running, with an address, not
/// being deleted, at the group's version.
fn machine_ok(m: &Value, version: &str) -> bool {
    running(m)
        && !deleting(m)
        && !addresses(std::iter::once(m)).is_empty()
        && (version.is_empty() || text(m, "/spec/version") == Some(version))
}

/// A machine's failure, as CAPI reports it (v1beta1 `failureMessage`, or
/// the v1beta2 copy under `deprecated`).
fn machine_failure(m: &Value) -> Option<String> {
    text(m, "/status/failureMessage")
        .or_else(|| text(m, "/status/deprecated/v1beta1/failureMessage"))
        .map(|f| {
            format!(
                "machine {} failed: {f}",
                text(m, "/metadata/name").unwrap_or("?")
            )
        })
}

/// `updatedReplicas` (v1beta1) or `upToDateReplicas` (v1beta2).
fn up_to_date(o: &Value) -> i64 {
    ptr(o, "/status/updatedReplicas")
        .or_else(|| ptr(o, "/status/upToDateReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Why one scalable object (KubeadmControlPlane or MachineDeployment) and
/// its Machines do not match the target yet; `None` when they do.
/// The replica counters and the Machines come through different watches,
/// in any order: a group is complete only once both agree, so a row that
/// says `*_COMPLETE` always carries every node's address.
fn group_blocker(
    what: &str,
    obj: Option<&Value>,
    machines: &[&Value],
    t: &GroupTarget,
    spec_version: &str,
    spec_template: &str,
) -> Option<String> {
    let Some(o) = obj else {
        return Some(format!("{what} does not exist yet"));
    };
    if t.held {
        return Some(format!(
            "{what} waits for the control plane to run {}",
            t.version
        ));
    }
    let generation = int(o, "/metadata/generation");
    if generation > 0 && int(o, "/status/observedGeneration") < generation {
        return Some(format!("{what}: waiting for CAPI to observe the change"));
    }
    let want = int(o, "/spec/replicas");
    if let Some(r) = t.replicas
        && r != want
    {
        return Some(format!("{what}: scaling to {r} is not applied yet"));
    }
    if !t.version.is_empty() && text(o, spec_version).unwrap_or("") != t.version {
        return Some(format!("{what}: version {} is not applied yet", t.version));
    }
    if let Some(tpl) = &t.template
        && text(o, spec_template) != Some(tpl.as_str())
    {
        return Some(format!("{what}: machine template {tpl} is not applied yet"));
    }
    let live: Vec<&&Value> = machines.iter().filter(|m| !deleting(m)).collect();
    let ok = live.iter().filter(|m| machine_ok(m, &t.version)).count();
    let gone = machines.len() - live.len();
    let counters = int(o, "/status/replicas") == want
        && int(o, "/status/readyReplicas") == want
        && up_to_date(o) == want;
    let ok = i64::try_from(ok).unwrap_or(i64::MAX);
    if counters && ok == want && live.len() as i64 == want && gone == 0 {
        return None;
    }
    // Not there yet: what CAPI says, else the counts.
    let machine_why = live
        .iter()
        .filter(|m| !machine_ok(m, &t.version))
        .find_map(|m| {
            blocking_condition(m)
                .map(|c| format!("machine {}: {c}", text(m, "/metadata/name").unwrap_or("?")))
        });
    let counts = format!(
        "{ok} of {want} machines ready{}{}",
        if t.version.is_empty() {
            String::new()
        } else {
            format!(" at {}", t.version)
        },
        if gone > 0 {
            format!(", {gone} being deleted")
        } else {
            String::new()
        }
    );
    Some(match blocking_condition(o).or(machine_why) {
        Some(c) => format!("{what}: {counts}; {c}"),
        None => format!("{what}: {counts}"),
    })
}

/// Map the observed objects against the targets.
pub fn map(op: Operation, o: &Observed, targets: &Targets, clock: Clock) -> MagnumView {
    let word = op.word();
    let api_address = o.cluster.as_ref().and_then(|c| {
        let host = text(c, "/spec/controlPlaneEndpoint/host")?;
        let port = ptr(c, "/spec/controlPlaneEndpoint/port")
            .and_then(Value::as_i64)
            .unwrap_or(6443);
        Some(format!("https://{host}:{port}"))
    });
    let coe_version = o
        .control_plane
        .as_ref()
        .and_then(|k| text(k, "/status/version").or_else(|| text(k, "/spec/version")))
        .map(str::to_string);

    // Groups.
    let cp_machines = o.group_machines(None);
    let cp_template_ptr = if o
        .control_plane
        .as_ref()
        .is_some_and(|k| ptr(k, "/spec/machineTemplate/spec").is_some())
    {
        "/spec/machineTemplate/spec/infrastructureRef/name"
    } else {
        "/spec/machineTemplate/infrastructureRef/name"
    };
    let mut cp_blocker = group_blocker(
        "control plane",
        o.control_plane.as_ref(),
        &cp_machines,
        &targets.control_plane,
        "/spec/version",
        cp_template_ptr,
    );
    if cp_blocker.is_none()
        && !targets.control_plane.version.is_empty()
        && let Some(k) = &o.control_plane
        && text(k, "/status/version") != Some(targets.control_plane.version.as_str())
    {
        cp_blocker = Some(format!(
            "control plane: version {} is not reported yet",
            targets.control_plane.version
        ));
    }
    let group_status = |done: bool, deleting: bool, gone: bool| -> String {
        match (op, deleting, done, gone) {
            (Operation::Delete, _, _, true) | (_, true, _, true) => "DELETE_COMPLETE".into(),
            (Operation::Delete, _, _, false) | (_, true, _, false) => "DELETE_IN_PROGRESS".into(),
            (_, _, true, _) => format!("{word}_COMPLETE"),
            _ => format!("{word}_IN_PROGRESS"),
        }
    };
    let mut fingerprint = std::collections::hash_map::DefaultHasher::new();
    let master = GroupView {
        status: group_status(
            cp_blocker.is_none(),
            false,
            o.control_plane.is_none() && cp_machines.is_empty(),
        ),
        reason: cp_blocker.clone(),
        node_addresses: addresses(cp_machines.iter().copied()),
        replicas: o.control_plane.as_ref().map(|k| int(k, "/spec/replicas")),
    };
    let mut workers = BTreeMap::new();
    let mut group_blockers = Vec::new();
    let mut failures = Vec::new();
    for t in &targets.workers {
        let md = o.machine_deployment(&t.key);
        let machines = o.group_machines(Some(&t.key));
        let gone = md.is_none() && machines.is_empty();
        let blocker = if t.deleting {
            (!gone).then(|| {
                format!(
                    "nodegroup {}: waiting for {} machine(s) to be deleted",
                    t.key,
                    machines.len()
                )
            })
        } else {
            group_blocker(
                &format!("nodegroup {}", t.key),
                md,
                &machines,
                t,
                "/spec/template/spec/version",
                "/spec/template/spec/infrastructureRef/name",
            )
        };
        if !t.deleting {
            failures.extend(machines.iter().filter_map(|m| machine_failure(m)));
        }
        if let Some(b) = &blocker {
            group_blockers.push(b.clone());
        }
        workers.insert(
            t.key.clone(),
            GroupView {
                status: group_status(blocker.is_none(), t.deleting, gone),
                reason: blocker,
                node_addresses: addresses(machines.iter().copied()),
                replicas: md.map(|d| int(d, "/spec/replicas")),
            },
        );
    }
    failures.extend(cp_machines.iter().filter_map(|m| machine_failure(m)));
    // Progress: any counter or machine phase that moves.
    for obj in o
        .control_plane
        .iter()
        .chain(o.machine_deployments.iter())
        .chain(o.machines.iter())
    {
        (
            text(obj, "/metadata/name"),
            text(obj, "/status/phase"),
            int(obj, "/status/readyReplicas"),
            up_to_date(obj),
            int(obj, "/status/replicas"),
            deleting(obj),
        )
            .hash(&mut fingerprint);
    }

    // Health.
    let mut health_reason = BTreeMap::new();
    let api_ok = o.cluster.as_ref().is_some_and(|c| {
        ptr(c, "/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter().any(|x| {
                    (x["type"] == "Ready" || x["type"] == "Available") && x["status"] == "True"
                })
            })
    });
    health_reason.insert(
        "api".to_string(),
        if api_ok { "ok" } else { "nok" }.to_string(),
    );
    let live: Vec<&Value> = o.machines.iter().filter(|m| !deleting(m)).collect();
    for m in &live {
        if let Some(n) = text(m, "/metadata/name") {
            health_reason.insert(
                format!("{n}.Ready"),
                if running(m) { "True" } else { "False" }.to_string(),
            );
        }
    }
    let healthy = api_ok && live.iter().all(|m| running(m)) && !live.is_empty();

    // Overall status and reason.
    let failure = o
        .infra
        .as_ref()
        .and_then(|i| {
            text(i, "/status/failureMessage")
                .map(|m| format!("OpenStack infrastructure failed: {m}"))
        })
        .or_else(|| {
            o.cluster.as_ref().and_then(|c| {
                text(c, "/status/failureMessage").map(|m| format!("Cluster failed: {m}"))
            })
        })
        .or_else(|| failures.first().cloned())
        .or_else(|| {
            o.helm_releases.iter().find_map(|h| {
                let failed = text(h, "/status/status").is_some_and(|s| s == "failed")
                    || ptr(h, "/status/conditions")
                        .and_then(Value::as_array)
                        .is_some_and(|a| {
                            a.iter().any(|c| {
                                c["status"] == "False"
                                    && c["reason"].as_str().is_some_and(|r| r.contains("Failed"))
                            })
                        });
                failed.then(|| {
                    let name = text(h, "/spec/releaseName").unwrap_or("addon");
                    format!(
                        "addon {name} failed: {}",
                        blocking_condition(h).unwrap_or_default()
                    )
                })
            })
        });
    let addons_done = o
        .helm_releases
        .iter()
        .all(|h| text(h, "/status/status") == Some("deployed"));
    let unreachable = (targets.proxied && op != Operation::Delete)
        .then(|| proxy_blocker(o))
        .flatten();
    let waiting = || -> Option<String> {
        unreachable
            .clone()
            .or_else(|| o.cluster.as_ref().and_then(blocking_condition))
            .or_else(|| cp_blocker.clone())
            .or_else(|| group_blockers.first().cloned())
            .or_else(|| (!addons_done).then(|| "waiting for addons".to_string()))
    };
    let all_done = cp_blocker.is_none() && group_blockers.is_empty() && addons_done && api_ok;
    let (status, reason) = match op {
        Operation::Delete => match &o.cluster {
            None => ("DELETE_COMPLETE".to_string(), None),
            Some(c) => {
                let left = o.machines.len();
                let why = if left > 0 {
                    format!("waiting for {left} machine(s) to be deleted")
                } else {
                    let fins: Vec<String> = ptr(c, "/metadata/finalizers")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|f| f.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                    format!("waiting for the Cluster's finalizers: {}", fins.join(", "))
                };
                ("DELETE_IN_PROGRESS".to_string(), Some(why))
            }
        },
        _ => {
            if let Some(f) = failure {
                (format!("{word}_FAILED"), Some(f))
            } else if all_done {
                (format!("{word}_COMPLETE"), None)
            } else if op == Operation::Create
                && clock.create_timeout_min > 0
                && clock.elapsed_min >= clock.create_timeout_min
            {
                let waiting = o
                    .cluster
                    .as_ref()
                    .and_then(blocking_condition)
                    .or_else(|| cp_blocker.clone())
                    .unwrap_or_else(|| "the cluster".into());
                (
                    format!("{word}_FAILED"),
                    Some(format!(
                        "Timed out after {} minutes; still waiting for {waiting}",
                        clock.create_timeout_min
                    )),
                )
            } else if op == Operation::Update
                && clock.update_timeout_min > 0
                && clock.stalled_min >= clock.update_timeout_min
            {
                (
                    format!("{word}_FAILED"),
                    Some(format!(
                        "No progress for {} minutes; {}",
                        clock.update_timeout_min,
                        waiting().unwrap_or_else(|| "the cluster is not ready".into())
                    )),
                )
            } else {
                (format!("{word}_IN_PROGRESS"), waiting())
            }
        }
    };
    MagnumView {
        status,
        status_reason: reason,
        api_address,
        coe_version,
        master,
        workers,
        health_status: if healthy { "HEALTHY" } else { "UNHEALTHY" }.to_string(),
        health_status_reason: health_reason,
        progress: fingerprint.finish(),
        note: None,
    }
}

#[cfg(test)]
mod tests;
