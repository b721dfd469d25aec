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

use super::render::NODEGROUP_LABEL;

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
}

/// One nodegroup's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub status: String,
    pub node_addresses: Vec<String>,
}

/// The Magnum-side result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MagnumView {
    pub status: String,
    pub status_reason: Option<String>,
    pub api_address: Option<String>,
    pub coe_version: Option<String>,
    /// The control plane (`default-master`) and each worker group by name.
    pub master: GroupView,
    pub workers: BTreeMap<String, GroupView>,
    pub health_status: String,
    pub health_status_reason: BTreeMap<String, String>,
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

/// The first condition that is not True: "Type: message" (v1beta1 or v1beta2).
fn blocking_condition(o: &Value) -> Option<String> {
    let conds = ptr(o, "/status/conditions")?.as_array()?;
    conds.iter().find(|c| c["status"] != "True").map(|c| {
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

fn running(m: &Value) -> bool {
    text(m, "/status/phase") == Some("Running") && ptr(m, "/status/nodeRef").is_some()
}

/// Whether we have seen `want` of these Machines running with an address.
/// The replica counters of a KubeadmControlPlane or MachineDeployment and
/// the Machines themselves come through different watches, in any order: a
/// group is complete only once both agree, so a row that says
/// `*_COMPLETE` always carries every node's address.
fn machines_seen(machines: &[&Value], want: i64) -> bool {
    let seen = machines
        .iter()
        .filter(|m| running(m) && !addresses(std::iter::once(**m)).is_empty())
        .count();
    i64::try_from(seen).unwrap_or(i64::MAX) >= want
}

/// Map the observed objects. `elapsed_min` is the time since the operation
/// started; `create_timeout_min` is the cluster's `create_timeout` (0: none).
pub fn map(
    op: Operation,
    o: &Observed,
    worker_groups: &[String],
    elapsed_min: u64,
    create_timeout_min: u64,
) -> MagnumView {
    let word = op.word();
    let cp_machines: Vec<&Value> = o
        .machines
        .iter()
        .filter(|m| {
            m.pointer("/metadata/labels/cluster.x-k8s.io~1control-plane")
                .is_some()
        })
        .collect();
    let ng_pointer = format!("/metadata/labels/{}", NODEGROUP_LABEL.replace('/', "~1"));
    let group_machines = |g: &str| -> Vec<&Value> {
        o.machines
            .iter()
            .filter(|m| m.pointer(&ng_pointer).and_then(Value::as_str) == Some(g))
            .collect()
    };

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
    let cp_done = o.control_plane.as_ref().is_some_and(|k| {
        let want = int(k, "/spec/replicas");
        let updated = ptr(k, "/status/updatedReplicas")
            .or_else(|| ptr(k, "/status/upToDateReplicas"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        want > 0
            && int(k, "/status/readyReplicas") == want
            && updated == want
            && int(k, "/status/replicas") == want
            && machines_seen(&cp_machines, want)
    });
    let group_status = |done: bool, gone: bool| -> String {
        match (op, done, gone) {
            (Operation::Delete, _, true) => "DELETE_COMPLETE".into(),
            (Operation::Delete, _, false) => "DELETE_IN_PROGRESS".into(),
            (_, true, _) => format!("{word}_COMPLETE"),
            _ => format!("{word}_IN_PROGRESS"),
        }
    };
    let master = GroupView {
        status: group_status(cp_done, o.control_plane.is_none() && cp_machines.is_empty()),
        node_addresses: addresses(cp_machines.iter().copied()),
    };
    let mut workers = BTreeMap::new();
    let mut workers_done = true;
    for g in worker_groups {
        let md = o.machine_deployments.iter().find(|d| {
            d.pointer(&format!(
                "/metadata/labels/{}",
                NODEGROUP_LABEL.replace('/', "~1")
            ))
            .and_then(Value::as_str)
                == Some(g.as_str())
        });
        let done = md.is_some_and(|d| {
            let want = int(d, "/spec/replicas");
            let updated = ptr(d, "/status/updatedReplicas")
                .or_else(|| ptr(d, "/status/upToDateReplicas"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            int(d, "/status/readyReplicas") == want
                && updated == want
                && int(d, "/status/replicas") == want
                && machines_seen(&group_machines(g), want)
        });
        workers_done &= done;
        workers.insert(
            g.clone(),
            GroupView {
                status: group_status(done, md.is_none() && group_machines(g).is_empty()),
                node_addresses: addresses(group_machines(g).into_iter()),
            },
        );
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
    for m in &o.machines {
        if let Some(n) = text(m, "/metadata/name") {
            health_reason.insert(
                format!("{n}.Ready"),
                if running(m) { "True" } else { "False" }.to_string(),
            );
        }
    }
    let healthy = api_ok && o.machines.iter().all(running) && !o.machines.is_empty();

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
            } else if cp_done && workers_done && addons_done && api_ok {
                (format!("{word}_COMPLETE"), None)
            } else if op == Operation::Create
                && create_timeout_min > 0
                && elapsed_min >= create_timeout_min
            {
                let waiting = o
                    .cluster
                    .as_ref()
                    .and_then(blocking_condition)
                    .unwrap_or_else(|| "the cluster".into());
                (
                    format!("{word}_FAILED"),
                    Some(format!(
                        "Timed out after {create_timeout_min} minutes; still waiting for {waiting}"
                    )),
                )
            } else {
                let why = o
                    .cluster
                    .as_ref()
                    .and_then(blocking_condition)
                    .or_else(|| o.control_plane.as_ref().and_then(blocking_condition))
                    .or_else(|| (!addons_done).then(|| "waiting for addons".to_string()));
                (format!("{word}_IN_PROGRESS"), why)
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn observed(v2: bool, ready: bool) -> Observed {
        let ng = |g: &str| json!({NODEGROUP_LABEL: g});
        let cond = |t: &str, ok: bool| {
            if ok {
                json!({"type": t, "status": "True"})
            } else {
                json!({"type": t, "status": "False", "reason": "WaitingForControlPlane", "message": "0 of 3 machines ready"})
            }
        };
        let cp = json!({"cluster.x-k8s.io/control-plane": ""});
        let ready_type = if v2 { "Available" } else { "Ready" };
        let upd = if v2 {
            "upToDateReplicas"
        } else {
            "updatedReplicas"
        };
        let n = if ready { 3 } else { 0 };
        let machine = |name: &str, labels: Value, ip: &str| {
            json!({"metadata": {"name": name, "labels": labels},
            "status": if ready { json!({"phase": "Running", "nodeRef": {"name": name}, "addresses": [{"type": "InternalIP", "address": ip}]}) } else { json!({"phase": "Provisioning"}) }})
        };
        Observed {
            cluster: Some(
                json!({"metadata": {"finalizers": ["cluster.cluster.x-k8s.io"]}, "spec": {"controlPlaneEndpoint": {"host": "203.0.113.10", "port": 6443}},
                                 "status": {"conditions": [cond(ready_type, ready)]}}),
            ),
            infra: Some(json!({"status": {"ready": true}})),
            control_plane: Some(
                json!({"spec": {"replicas": 3, "version": "v1.30.4"}, "status": {"replicas": 3, "readyReplicas": n, upd: n, "version": "v1.30.4"}}),
            ),
            machine_deployments: vec![
                json!({"metadata": {"labels": ng("default-worker")}, "spec": {"replicas": 2},
                                             "status": {"replicas": 2, "readyReplicas": if ready { 2 } else { 0 }, upd: if ready { 2 } else { 0 }}}),
            ],
            machines: vec![
                machine("cp-1", cp.clone(), "10.0.0.5"),
                machine("cp-2", cp.clone(), "10.0.0.6"),
                machine("cp-3", cp, "10.0.0.4"),
                machine("w-1", ng("default-worker"), "10.0.0.7"),
                machine("w-2", ng("default-worker"), "10.0.0.8"),
            ],
            helm_releases: vec![
                json!({"spec": {"releaseName": "cni-calico"}, "status": {"status": if ready { "deployed" } else { "pending-install" }}}),
            ],
        }
    }

    #[test]
    fn create_progress_and_completion_on_both_shapes() {
        let groups = ["default-worker".to_string()];
        for v2 in [false, true] {
            let waiting = map(Operation::Create, &observed(v2, false), &groups, 3, 60);
            assert_eq!(waiting.status, "CREATE_IN_PROGRESS");
            assert!(
                waiting
                    .status_reason
                    .as_deref()
                    .unwrap()
                    .contains("0 of 3 machines ready"),
                "{waiting:?}"
            );
            assert_eq!(
                waiting.api_address.as_deref(),
                Some("https://203.0.113.10:6443"),
                "api_address as soon as the endpoint exists"
            );
            assert_eq!(waiting.health_status, "UNHEALTHY");
            let done = map(Operation::Create, &observed(v2, true), &groups, 9, 60);
            assert_eq!(done.status, "CREATE_COMPLETE", "{done:?}");
            assert_eq!(done.status_reason, None);
            assert_eq!(done.coe_version.as_deref(), Some("v1.30.4"));
            assert_eq!(
                done.master,
                GroupView {
                    status: "CREATE_COMPLETE".into(),
                    node_addresses: vec!["10.0.0.4".into(), "10.0.0.5".into(), "10.0.0.6".into()]
                }
            );
            assert_eq!(
                done.workers["default-worker"].node_addresses,
                ["10.0.0.7", "10.0.0.8"]
            );
            assert_eq!(done.health_status, "HEALTHY");
            assert_eq!(done.health_status_reason["api"], "ok");
        }
    }

    #[test]
    fn complete_only_once_every_machine_is_seen_with_its_address() {
        let groups = ["default-worker".to_string()];
        for v2 in [false, true] {
            // The counters say ready, but one control-plane Machine's update
            // (and one worker's) has not arrived through its watch yet.
            for name in ["cp-3", "w-2"] {
                let mut o = observed(v2, true);
                o.machines.retain(|m| m["metadata"]["name"] != name);
                let early = map(Operation::Create, &o, &groups, 9, 60);
                assert_eq!(early.status, "CREATE_IN_PROGRESS", "{name}: {early:?}");
                // Seen, running, but without an address yet.
                let mut o = observed(v2, true);
                for m in &mut o.machines {
                    if m["metadata"]["name"] == name {
                        m["status"]["addresses"] = json!([]);
                    }
                }
                let early = map(Operation::Create, &o, &groups, 9, 60);
                assert_eq!(early.status, "CREATE_IN_PROGRESS", "{name}: {early:?}");
            }
            let done = map(Operation::Create, &observed(v2, true), &groups, 9, 60);
            assert_eq!(done.status, "CREATE_COMPLETE");
        }
    }

    #[test]
    fn failures_timeouts_and_deletion() {
        let groups = ["default-worker".to_string()];
        let mut o = observed(false, false);
        o.infra = Some(
            json!({"status": {"ready": false, "failureReason": "CreateError", "failureMessage": "Quota exceeded for floatingip"}}),
        );
        let f = map(Operation::Create, &o, &groups, 1, 60);
        assert_eq!(f.status, "CREATE_FAILED");
        assert!(f.status_reason.unwrap().contains("Quota exceeded"));
        let t = map(Operation::Create, &observed(true, false), &groups, 61, 60);
        assert_eq!(t.status, "CREATE_FAILED");
        assert!(
            t.status_reason
                .unwrap()
                .starts_with("Timed out after 60 minutes")
        );
        let mut addon = observed(false, true);
        addon.helm_releases = vec![
            json!({"spec": {"releaseName": "openstack-ccm"}, "status": {"status": "failed", "conditions": [{"type": "Ready", "status": "False", "reason": "HelmInstallOrUpgradeFailed", "message": "timed out"}]}}),
        ];
        let a = map(Operation::Create, &addon, &groups, 5, 60);
        assert_eq!(a.status, "CREATE_FAILED");
        assert!(a.status_reason.unwrap().contains("openstack-ccm"));

        let d = map(Operation::Delete, &observed(false, true), &groups, 1, 0);
        assert_eq!(d.status, "DELETE_IN_PROGRESS");
        assert!(d.status_reason.unwrap().contains("5 machine(s)"));
        let mut blocked = observed(false, true);
        blocked.machines.clear();
        let b = map(Operation::Delete, &blocked, &groups, 1, 0);
        assert!(
            b.status_reason
                .unwrap()
                .contains("cluster.cluster.x-k8s.io"),
            "a blocked deletion says why"
        );
        let gone = map(Operation::Delete, &Observed::default(), &groups, 2, 0);
        assert_eq!(gone.status, "DELETE_COMPLETE");
        assert_eq!(gone.workers["default-worker"].status, "DELETE_COMPLETE");
    }
}
