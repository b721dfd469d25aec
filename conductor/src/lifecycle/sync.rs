//! What the status mapper's view changes in the Magnum rows (pure).
//!
//! Only changed columns are written (a watch event that changes nothing
//! Magnum shows writes nothing). Statuses move only out of `*_IN_PROGRESS`
//! (as Magnum's periodic sync selects only those); health follows the nine
//! statuses Magnum's health sync covers.

use rpc_schema::ovo::MagnumObject;
use serde_json::{Value, json};

use crate::capi::status::{GroupView, MagnumView, Operation};

/// The operation a cluster row is in, if any.
pub fn operation(status: &str) -> Option<Operation> {
    match status {
        "CREATE_IN_PROGRESS" => Some(Operation::Create),
        "UPDATE_IN_PROGRESS" | "ROLLBACK_IN_PROGRESS" => Some(Operation::Update),
        "DELETE_IN_PROGRESS" => Some(Operation::Delete),
        _ => None,
    }
}

/// Statuses whose health Magnum keeps up to date (`sync_cluster_health_status`).
const HEALTH_STATUSES: &[&str] = &[
    "CREATE_IN_PROGRESS",
    "CREATE_FAILED",
    "CREATE_COMPLETE",
    "UPDATE_IN_PROGRESS",
    "UPDATE_COMPLETE",
    "UPDATE_FAILED",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "ROLLBACK_IN_PROGRESS",
];

/// Column updates for one row.
pub type Changes = Vec<(&'static str, Value)>;

#[derive(Debug, Default, PartialEq)]
pub struct RowChanges {
    pub cluster: Changes,
    /// (nodegroup uuid, changes), only for rows that change.
    pub nodegroups: Vec<(String, Changes)>,
}

/// One row write of a [`RowChanges`].
#[derive(Debug, PartialEq)]
pub enum RowWrite<'a> {
    Nodegroup(&'a str, &'a Changes),
    Cluster(&'a Changes),
}

impl RowChanges {
    pub fn is_empty(&self) -> bool {
        self.cluster.is_empty() && self.nodegroups.is_empty()
    }

    /// The writes, in the order they must reach the database: nodegroups
    /// first, the cluster last. magnum-api (and `openstack coe cluster
    /// show`) reads the cluster row, then its nodegroups: once the cluster
    /// says `*_COMPLETE`, its groups must already carry their status and
    /// every address. (Written the other way round, a CI poll saw
    /// UPDATE_COMPLETE with 2 of 3 control-plane addresses.)
    pub fn writes(&self) -> impl Iterator<Item = RowWrite<'_>> {
        self.nodegroups
            .iter()
            .map(|(u, c)| RowWrite::Nodegroup(u, c))
            .chain((!self.cluster.is_empty()).then_some(RowWrite::Cluster(&self.cluster)))
    }
}

fn put(out: &mut Changes, row: &MagnumObject, field: &'static str, v: Value) {
    if row.get(field).unwrap_or(&Value::Null) != &v {
        out.push((field, v));
    }
}

fn group<'a>(view: &'a MagnumView, ng: &MagnumObject) -> Option<&'a GroupView> {
    if ng.get_str("role") == Some("master") {
        Some(&view.master)
    } else {
        view.workers.get(&super::rows::group_key(ng))
    }
}

/// The updates `view` implies. `capi_exists`: the CAPI Cluster is present
/// (health is only reported for a cluster that exists). `autoscaled`: the
/// keys of groups whose count the autoscaler owns (their `node_count`
/// follows the MachineDeployment).
pub fn changes(
    cluster: &MagnumObject,
    nodegroups: &[MagnumObject],
    view: &MagnumView,
    capi_exists: bool,
    autoscaled: &[String],
) -> RowChanges {
    let mut out = RowChanges::default();
    let status = cluster.get_str("status").unwrap_or_default();
    let op = operation(status);
    if op.is_some() {
        if view.status != status {
            out.cluster.push(("status", json!(view.status)));
        }
        let reason = if view.status.ends_with("_COMPLETE") {
            json!(view.note)
        } else {
            json!(view.status_reason)
        };
        put(&mut out.cluster, cluster, "status_reason", reason);
        if op != Some(Operation::Delete) {
            if let Some(a) = &view.api_address {
                put(&mut out.cluster, cluster, "api_address", json!(a));
            }
            if let Some(v) = &view.coe_version {
                put(&mut out.cluster, cluster, "coe_version", json!(v));
            }
        }
    }
    if capi_exists && HEALTH_STATUSES.contains(&status) {
        put(
            &mut out.cluster,
            cluster,
            "health_status",
            json!(view.health_status),
        );
        put(
            &mut out.cluster,
            cluster,
            "health_status_reason",
            json!(view.health_status_reason),
        );
    }
    // An update that failed fails the groups still in progress with it (a
    // failed create leaves them as Magnum does).
    let update_failed = op == Some(Operation::Update) && view.status.ends_with("_FAILED");
    for ng in nodegroups {
        let Some(g) = group(view, ng) else { continue };
        let mut c = Changes::new();
        let ng_status = ng.get_str("status").unwrap_or_default();
        let deleting = ng_status.starts_with("DELETE_");
        if ng_status.ends_with("_IN_PROGRESS") && op.is_some() {
            // A group follows its own operation word (a nodegroup created
            // during a cluster update completes as CREATE_COMPLETE).
            let word = ng_status.trim_end_matches("_IN_PROGRESS");
            if g.status.ends_with("_COMPLETE") {
                c.push(("status", json!(format!("{word}_COMPLETE"))));
                put(&mut c, ng, "status_reason", Value::Null);
            } else if update_failed && !deleting {
                c.push(("status", json!(format!("{word}_FAILED"))));
                let why = g.reason.clone().or_else(|| view.status_reason.clone());
                put(&mut c, ng, "status_reason", json!(why));
            }
        }
        if capi_exists {
            put(&mut c, ng, "node_addresses", json!(g.node_addresses));
            if let Some(n) = g.replicas
                && !deleting
                && autoscaled.contains(&super::rows::group_key(ng))
            {
                put(&mut c, ng, "node_count", json!(n));
            }
        }
        if !c.is_empty()
            && let Some(u) = ng.get_str("uuid")
        {
            out.nodegroups.push((u.to_string(), c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpc_schema::ovo;
    use std::collections::BTreeMap;

    fn obj(class: &'static ovo::ClassSpec, v: Value) -> MagnumObject {
        let mut o = MagnumObject::new(class);
        for (k, v) in v.as_object().unwrap() {
            o.set(k, v.clone()).unwrap();
        }
        o
    }

    fn view(status: &str) -> MagnumView {
        MagnumView {
            status: status.into(),
            status_reason: Some("ControlPlaneReady: scaling up".into()),
            api_address: Some("https://203.0.113.10:6443".into()),
            coe_version: Some("v1.30.4".into()),
            master: GroupView {
                status: status.into(),
                reason: None,
                node_addresses: vec!["10.0.0.3".into()],
                replicas: Some(1),
            },
            workers: [(
                "default-worker".to_string(),
                GroupView {
                    status: status.into(),
                    reason: Some("nodegroup default-worker: 0 of 1 machines ready".into()),
                    node_addresses: vec!["10.0.0.4".into()],
                    replicas: Some(3),
                },
            )]
            .into_iter()
            .collect(),
            health_status: "HEALTHY".into(),
            health_status_reason: BTreeMap::from([("api".to_string(), "ok".to_string())]),
            progress: 0,
            note: None,
        }
    }

    fn rows(status: &str) -> (MagnumObject, Vec<MagnumObject>) {
        let c = obj(
            &ovo::CLUSTER,
            json!({"uuid": "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e", "status": status, "status_reason": null}),
        );
        let ng = |n: &str, role: &str| {
            obj(
                &ovo::NODE_GROUP,
                json!({"uuid": format!("{n}-uuid"), "name": n, "role": role, "status": status, "node_addresses": []}),
            )
        };
        (
            c,
            vec![
                ng("default-master", "master"),
                ng("default-worker", "worker"),
            ],
        )
    }

    #[test]
    fn the_cluster_row_is_written_after_its_groups() {
        let (c, ngs) = rows("UPDATE_IN_PROGRESS");
        let done = changes(&c, &ngs, &view("UPDATE_COMPLETE"), true, &[]);
        let order: Vec<&str> = done
            .writes()
            .map(|w| match w {
                RowWrite::Nodegroup(u, _) => u,
                RowWrite::Cluster(_) => "cluster",
            })
            .collect();
        assert_eq!(
            order,
            ["default-master-uuid", "default-worker-uuid", "cluster"]
        );
        assert!(
            matches!(done.writes().last(), Some(RowWrite::Cluster(ch)) if ch.contains(&("status", json!("UPDATE_COMPLETE"))))
        );
        // Nothing for the cluster: no empty write.
        let only_groups = RowChanges {
            cluster: Vec::new(),
            nodegroups: done.nodegroups.clone(),
        };
        assert_eq!(only_groups.writes().count(), 2);
    }

    #[test]
    fn progress_then_completion_then_nothing() {
        let (c, ngs) = rows("CREATE_IN_PROGRESS");
        let ch = changes(&c, &ngs, &view("CREATE_IN_PROGRESS"), true, &[]);
        let fields: Vec<&str> = ch.cluster.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            fields,
            [
                "status_reason",
                "api_address",
                "coe_version",
                "health_status",
                "health_status_reason"
            ]
        );
        assert_eq!(ch.nodegroups.len(), 2, "addresses");
        let done = changes(&c, &ngs, &view("CREATE_COMPLETE"), true, &[]);
        assert!(done.cluster.contains(&("status", json!("CREATE_COMPLETE"))));
        assert!(
            done.cluster.iter().all(|(f, _)| *f != "status_reason"),
            "already NULL"
        );
        // Labels that were ignored are said on completion.
        let mut noted = view("CREATE_COMPLETE");
        noted.note = Some(
            "complete; label npd_enabled has no effect on Cluster API clusters; ignored".into(),
        );
        let ch = changes(&c, &ngs, &noted, true, &[]);
        assert!(ch.cluster.contains(&("status_reason", json!(noted.note))));
        assert!(
            done.nodegroups
                .iter()
                .all(|(_, c)| c.contains(&("status", json!("CREATE_COMPLETE"))))
        );

        // Once written, the same view changes nothing.
        let (mut c, mut ngs) = rows("CREATE_COMPLETE");
        let v = view("CREATE_COMPLETE");
        c.set("api_address", json!(v.api_address)).unwrap();
        c.set("coe_version", json!(v.coe_version)).unwrap();
        c.set("health_status", json!("HEALTHY")).unwrap();
        c.set("health_status_reason", json!({"api": "ok"})).unwrap();
        ngs[0].set("node_addresses", json!(["10.0.0.3"])).unwrap();
        ngs[1].set("node_addresses", json!(["10.0.0.4"])).unwrap();
        assert!(changes(&c, &ngs, &v, true, &[]).is_empty());
        // A COMPLETE cluster's status is not moved by CAPI, its health is.
        let mut sick = v.clone();
        sick.status = "CREATE_IN_PROGRESS".into();
        sick.health_status = "UNHEALTHY".into();
        let ch = changes(&c, &ngs, &sick, true, &[]);
        assert_eq!(
            ch.cluster.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            ["health_status"]
        );
    }

    #[test]
    fn failures_and_deletion() {
        let (c, ngs) = rows("CREATE_IN_PROGRESS");
        let mut failed = view("CREATE_FAILED");
        failed.status_reason = Some("OpenStack infrastructure failed: no quota".into());
        failed.master.status = "CREATE_IN_PROGRESS".into();
        let ch = changes(&c, &ngs, &failed, true, &[]);
        assert!(ch.cluster.contains(&("status", json!("CREATE_FAILED"))));
        assert!(ch.cluster.contains(&(
            "status_reason",
            json!("OpenStack infrastructure failed: no quota")
        )));
        let (c, ngs) = rows("CREATE_FAILED");
        let ch = changes(&c, &ngs, &view("CREATE_COMPLETE"), true, &[]);
        assert!(
            ch.cluster.iter().all(|(f, _)| *f != "status"),
            "FAILED is terminal"
        );

        let (c, ngs) = rows("DELETE_IN_PROGRESS");
        let mut blocked = view("DELETE_IN_PROGRESS");
        blocked.status_reason = Some("waiting for 2 machine(s) to be deleted".into());
        let ch = changes(&c, &ngs, &blocked, true, &[]);
        assert!(ch.cluster.contains(&(
            "status_reason",
            json!("waiting for 2 machine(s) to be deleted")
        )));
        assert!(ch.cluster.iter().all(|(f, _)| *f != "api_address"));
    }

    #[test]
    fn update_failures_and_autoscaled_counts() {
        let (c, mut ngs) = rows("UPDATE_IN_PROGRESS");
        ngs[0].set("status", json!("CREATE_COMPLETE")).unwrap();
        let mut failed = view("UPDATE_FAILED");
        failed.status_reason = Some("No progress for 60 minutes".into());
        let ch = changes(&c, &ngs, &failed, true, &[]);
        assert!(ch.cluster.contains(&("status", json!("UPDATE_FAILED"))));
        let worker = &ch
            .nodegroups
            .iter()
            .find(|(u, _)| u == "default-worker-uuid")
            .unwrap()
            .1;
        assert!(worker.contains(&("status", json!("UPDATE_FAILED"))));
        assert!(worker.contains(&(
            "status_reason",
            json!("nodegroup default-worker: 0 of 1 machines ready")
        )));
        let master = ch
            .nodegroups
            .iter()
            .find(|(u, _)| u == "default-master-uuid");
        assert!(
            master.is_none_or(|(_, c)| c.iter().all(|(f, _)| *f != "status")),
            "a completed group stays"
        );
        // The autoscaler chose 3: node_count follows, for autoscaled groups only.
        let (c, ngs) = rows("UPDATE_COMPLETE");
        let v = view("UPDATE_COMPLETE");
        let ch = changes(&c, &ngs, &v, true, &["default-worker".to_string()]);
        let worker = &ch
            .nodegroups
            .iter()
            .find(|(u, _)| u == "default-worker-uuid")
            .unwrap()
            .1;
        assert!(worker.contains(&("node_count", json!(3))));
        let ch = changes(&c, &ngs, &v, true, &[]);
        assert!(
            ch.nodegroups
                .iter()
                .all(|(_, c)| c.iter().all(|(f, _)| *f != "node_count"))
        );
    }
}
