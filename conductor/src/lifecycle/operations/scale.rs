//! `cluster_update` and `cluster_resize` (casts): changing a group's size.
//!
//! Magnum's bookkeeping, then the group's MachineDeployment (or the
//! KubeadmControlPlane) applied with the new count:
//!
//! - `cluster_update`: the default worker's `node_count`; a health-only
//!   update just saves the health fields; the worker's status is not
//!   touched (as Magnum); on failure `node_count` goes back.
//! - `cluster_resize`: any group; `nodes_to_remove` (server names or ids,
//!   as Magnum gives them) become `cluster.x-k8s.io/delete-machine` on those
//!   Machines *before* the count drops, so CAPI removes exactly them; the
//!   control plane keeps an odd count; the group goes UPDATE_IN_PROGRESS
//!   and on failure UPDATE_FAILED with its count restored.
//!
//! With the autoscaler owning a group's count, the new count goes through
//! the MachineDeployment's `scale` subresource, as the autoscaler itself
//! writes it (our applies never carry `replicas` for such a group).
//!
//! Both save the rows (the request is acknowledged then) before touching the
//! management cluster; whatever a dead conductor did not apply, the status
//! worker of any conductor applies (see [`crate::lifecycle::plan::drift`]).

use kube::api::{Patch, PatchParams};
use rpc_schema::Outcome;
use rpc_schema::ovo::MagnumObject;
use serde_json::{Map, Value, json};

use crate::capi::render::{self, DELETE_MACHINE_ANNOTATION};
use crate::handlers::DurableSignal;
use crate::lifecycle::engine::{Engine, Parts, capi_apiversion, dynamic_api};
use crate::lifecycle::error::StepError;
use crate::lifecycle::plan::{self, Checked};
use crate::lifecycle::rows;
use crate::lifecycle::runner::{OnFailure, Op, Run};

/// Machines to annotate for a scale-down with `nodes_to_remove` (pure):
/// their names, or why the request cannot be honoured.
pub fn removal_plan(
    machines: &[&Value],
    nodes_to_remove: &[String],
    node_count: i64,
) -> Result<Vec<String>, String> {
    if nodes_to_remove.is_empty() {
        return Ok(Vec::new());
    }
    let live: Vec<&Value> = machines
        .iter()
        .copied()
        .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
        .collect();
    let chosen = plan::machines_to_remove(&live, nodes_to_remove)?;
    let removed = i64::try_from(live.len()).unwrap_or(i64::MAX) - node_count;
    let named = i64::try_from(chosen.len()).unwrap_or(i64::MAX);
    if named > removed {
        return Err(format!(
            "nodes_to_remove names {named} node(s), but resizing from {} to {node_count} removes {}",
            live.len(),
            removed.max(0)
        ));
    }
    Ok(chosen
        .iter()
        .filter_map(|m| m.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect())
}

impl Engine {
    /// `cluster_update` (a cast).
    pub async fn cluster_update(
        &self,
        ctx: &rpc_schema::RequestContext,
        cluster: &MagnumObject,
        node_count: i64,
        health_status: Option<String>,
        health_status_reason: Option<Map<String, Value>>,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        self.operate(Op::Update, &uuid, ctx, durable, async |run| {
            self.update_steps(run, node_count, health_status, health_status_reason)
                .await
        })
        .await
    }

    async fn update_steps(
        &self,
        run: &mut Run<'_>,
        node_count: i64,
        health_status: Option<String>,
        health_status_reason: Option<Map<String, Value>>,
    ) -> Result<Value, StepError> {
        let uuid = run.uuid.clone();
        let row = self.cluster_allowing(&uuid, Checked::Update, None).await?;
        let ngs = self.nodegroups(&uuid).await?;
        let worker = ngs
            .iter()
            .find(|n| n.get_bool("is_default") == Some(true) && n.get_str("role") != Some("master"))
            .ok_or_else(|| {
                StepError::Invalid("the cluster has no default worker nodegroup".into())
            })?
            .clone();
        let current = worker.get_i64("node_count").unwrap_or(0);
        let hs = json!(health_status);
        let hsr = json!(health_status_reason);
        let health_same = row.get("health_status").unwrap_or(&Value::Null) == &hs
            && row.get("health_status_reason").unwrap_or(&Value::Null) == &hsr;
        // The same count, but the management cluster has another one: a
        // redelivery of an update whose conductor died after saving it.
        let key = rows::group_key(&worker);
        let observed = self.observed(&row);
        let autoscaled = self.group_autoscaled(&row, &ngs, &key);
        let pending = !autoscaled
            && observed
                .machine_deployment(&key)
                .and_then(|d| d.pointer("/spec/replicas"))
                .and_then(Value::as_i64)
                .is_some_and(|n| n != node_count);
        if current == node_count && !pending {
            if !health_same {
                self.save_cluster(
                    &uuid,
                    &[("health_status", hs), ("health_status_reason", hsr)],
                )
                .await?;
                // (The next status pass writes the health it computes from
                // CAPI over this, as Magnum's periodic health sync does.)
                crate::failpoint::hit("update.after_health").await;
            }
            return Ok(Value::Null);
        }
        let worker_uuid = worker.get_str("uuid").unwrap_or_default().to_string();
        run.on_failure(OnFailure::Cluster {
            status: "UPDATE_FAILED",
            reason: true,
        });
        run.on_failure(OnFailure::Nodegroup {
            uuid: worker_uuid.clone(),
            status: None,
            reason: false,
            restore: vec![("node_count", json!(current))],
        });
        run.notify_pending().await;
        self.save_nodegroup(&worker_uuid, &[("node_count", json!(node_count))])
            .await?;
        crate::failpoint::hit("update.after_nodegroup").await;
        let saved = self
            .save_cluster(
                &uuid,
                &[
                    ("health_status", hs),
                    ("health_status_reason", hsr),
                    ("status", json!("UPDATE_IN_PROGRESS")),
                    ("status_reason", Value::Null),
                ],
            )
            .await?;
        run.recorded();
        self.progress_restart(&uuid);
        self.scale_group(&saved, &key, node_count).await?;
        self.kick_cluster(&saved);
        Ok(Value::Null)
    }

    /// `cluster_resize` (a cast).
    pub async fn cluster_resize(
        &self,
        ctx: &rpc_schema::RequestContext,
        cluster: &MagnumObject,
        node_count: i64,
        nodes_to_remove: &[String],
        nodegroup: &MagnumObject,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        self.operate(Op::Resize, &uuid, ctx, durable, async |run| {
            self.resize_steps(run, node_count, nodes_to_remove, nodegroup)
                .await
        })
        .await
    }

    async fn resize_steps(
        &self,
        run: &mut Run<'_>,
        node_count: i64,
        nodes_to_remove: &[String],
        nodegroup: &MagnumObject,
    ) -> Result<Value, StepError> {
        let uuid = run.uuid.clone();
        let row = self.cluster_allowing(&uuid, Checked::Resize, None).await?;
        let ngs = self.nodegroups(&uuid).await?;
        let wanted = nodegroup.get_str("uuid").unwrap_or_default();
        let ng = ngs
            .iter()
            .find(|n| n.get_str("uuid") == Some(wanted))
            .ok_or_else(|| {
                let mut kw = Map::new();
                kw.insert("nodegroup".into(), json!(wanted));
                StepError::Refused(rpc_schema::RemoteFailure::magnum("NodeGroupNotFound", kw))
            })?
            .clone();
        let ng_uuid = wanted.to_string();
        let master = ng.get_str("role") == Some("master");
        let old = ng.get_i64("node_count").unwrap_or(0);
        run.on_failure(OnFailure::Cluster {
            status: "UPDATE_FAILED",
            reason: true,
        });
        run.on_failure(OnFailure::Nodegroup {
            uuid: ng_uuid.clone(),
            status: Some("UPDATE_FAILED"),
            reason: true,
            restore: vec![("node_count", json!(old))],
        });
        if master && (node_count < 1 || node_count % 2 == 0) {
            return Err(StepError::Invalid(format!(
                "master nodegroup size of {node_count} is invalid: the control plane needs an odd number of nodes"
            )));
        }
        if node_count < 0 {
            return Err(StepError::Invalid(format!(
                "node_count {node_count} is negative"
            )));
        }
        let key = rows::group_key(&ng);
        let observed = self.observed(&row);
        let machines = observed.group_machines(if master { None } else { Some(&key) });
        let victims =
            removal_plan(&machines, nodes_to_remove, node_count).map_err(StepError::Invalid)?;
        // Marked before the count drops: CAPI removes exactly these.
        self.mark_for_deletion(&row, &victims).await?;
        crate::failpoint::hit("resize.after_annotations").await;
        self.save_nodegroup(
            &ng_uuid,
            &[
                ("node_count", json!(node_count)),
                ("status", json!("UPDATE_IN_PROGRESS")),
            ],
        )
        .await?;
        run.notify_pending().await;
        crate::failpoint::hit("resize.after_nodegroup").await;
        let saved = self
            .save_cluster(
                &uuid,
                &[
                    ("status", json!("UPDATE_IN_PROGRESS")),
                    ("status_reason", Value::Null),
                ],
            )
            .await?;
        run.recorded();
        self.progress_restart(&uuid);
        crate::failpoint::hit("resize.after_rows").await;
        if master {
            self.converge(&uuid, Parts::ControlPlaneAnd(Vec::new()), None)
                .await?;
        } else {
            self.scale_group(&saved, &key, node_count).await?;
        }
        tracing::info!(cluster = %uuid, nodegroup = %key, from = old, to = node_count, removing = ?victims, "resize applied");
        self.kick_cluster(&saved);
        Ok(Value::Null)
    }

    /// Whether the autoscaler owns this worker group's count.
    fn group_autoscaled(&self, cluster: &MagnumObject, ngs: &[MagnumObject], key: &str) -> bool {
        let Some(ng) = ngs.iter().find(|n| rows::group_key(n) == key) else {
            return false;
        };
        let labels = cluster
            .get("labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        crate::capi::labels::parse(&labels, "calico")
            .ok()
            .and_then(|(l, _)| rows::autoscale_bounds(&l, ng).ok())
            .flatten()
            .is_some()
    }

    /// Give a worker group its new count: applied from the rows, or (when
    /// the autoscaler owns the count) written to the `scale` subresource.
    async fn scale_group(
        &self,
        cluster: &MagnumObject,
        key: &str,
        node_count: i64,
    ) -> Result<(), StepError> {
        let uuid = cluster.get_str("uuid").unwrap_or_default();
        let desired = self
            .converge(uuid, Parts::Groups(vec![key.to_string()]), None)
            .await?;
        if let Some(g) = desired
            .input
            .workers
            .iter()
            .find(|g| g.key == key && g.autoscale.is_some())
        {
            let api = dynamic_api(
                &self.0.client,
                &desired.input.namespace,
                capi_apiversion(self.0.line),
                "MachineDeployment",
                "machinedeployments",
            );
            let name = render::group_object_name(&desired.input, g);
            let pp = PatchParams::default();
            let patch = Patch::Merge(json!({"spec": {"replicas": node_count}}));
            crate::mgmt::with_retries("scale", || api.patch_scale(&name, &pp, &patch)).await?;
        }
        Ok(())
    }

    /// Annotate Machines `cluster.x-k8s.io/delete-machine`.
    async fn mark_for_deletion(
        &self,
        cluster: &MagnumObject,
        machines: &[String],
    ) -> Result<(), StepError> {
        if machines.is_empty() {
            return Ok(());
        }
        let api = dynamic_api(
            &self.0.client,
            &self.namespace_of(cluster),
            capi_apiversion(self.0.line),
            "Machine",
            "machines",
        );
        let pp = PatchParams::default();
        let patch =
            Patch::Merge(json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "yes"}}}));
        for m in machines {
            crate::mgmt::with_retries("annotate machine", || api.patch(m, &pp, &patch)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, deleting: bool) -> Value {
        let mut v = json!({"metadata": {"name": name}, "spec": {"providerID": format!("openstack:///srv-{name}")}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        v
    }

    #[test]
    fn removals_must_fit_the_scale_down() {
        let ms = [
            m("a", false),
            m("b", false),
            m("c", false),
            m("d", false),
            m("x", true),
        ];
        let refs: Vec<&Value> = ms.iter().collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(removal_plan(&refs, &[], 1).unwrap(), Vec::<String>::new());
        assert_eq!(removal_plan(&refs, &s(&["srv-b"]), 1).unwrap(), ["b"]);
        assert_eq!(
            removal_plan(&refs, &s(&["b", "c", "d"]), 1).unwrap(),
            ["b", "c", "d"]
        );
        let e = removal_plan(&refs, &s(&["b", "c"]), 3).unwrap_err();
        assert!(
            e.contains("names 2 node(s), but resizing from 4 to 3 removes 1"),
            "{e}"
        );
        let e = removal_plan(&refs, &s(&["b"]), 5).unwrap_err();
        assert!(e.contains("removes 0"), "{e}");
        assert!(
            removal_plan(&refs, &s(&["x"]), 1).is_err(),
            "already being deleted"
        );
    }
}
