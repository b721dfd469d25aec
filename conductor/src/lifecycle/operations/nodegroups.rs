//! `nodegroup_create`, `nodegroup_update`, `nodegroup_delete` (casts).
//!
//! One MachineDeployment per worker group, with its own
//! OpenStackMachineTemplate (flavor, image, boot volume from the labels,
//! container-storage volume) and KubeadmConfigTemplate (node labels and
//! taints), and its MachineHealthCheck when auto-healing is on.
//!
//! - create: the cluster UPDATE_IN_PROGRESS, the row INSERTed
//!   (CREATE_IN_PROGRESS, as Magnum), then the group's objects; the status
//!   worker completes it (CREATE_COMPLETE once its Machines run);
//! - update (min/max node count, node labels, taints: what Magnum's API lets
//!   a user patch): the row saved, the group applied again: new bounds move
//!   the autoscaler's annotations, new labels or taints roll the group's
//!   machines through a new bootstrap template;
//! - delete: default groups refused (as the API does); the group
//!   DELETE_IN_PROGRESS, its objects deleted (CAPI drains and removes the
//!   machines); the status worker removes the row once they are gone.
//!
//! Failures as Magnum: the group `*_FAILED` with the reason, the cluster
//! UPDATE_FAILED (its `status_reason` left alone).

use common::db::DbError;
use common::db::model::NODEGROUP;
use common::db::repo;
use kube::api::ListParams;
use rpc_schema::ovo::MagnumObject;
use rpc_schema::{Outcome, RemoteFailure};
use serde_json::{Value, json};

use crate::capi::naming;
use crate::capi::render::{NODEGROUP_LABEL, UUID_LABEL};
use crate::handlers::DurableSignal;
use crate::lifecycle::engine::{Engine, Parts, capi_apiversion, dynamic_api};
use crate::lifecycle::error::StepError;
use crate::lifecycle::plan::Checked;
use crate::lifecycle::rows;
use crate::lifecycle::runner::{OnFailure, Op, Run};

fn failure_plan(run: &mut Run<'_>, ng_uuid: &str, status: &'static str) {
    run.on_failure(OnFailure::Nodegroup {
        uuid: ng_uuid.to_string(),
        status: Some(status),
        reason: true,
        restore: Vec::new(),
    });
    run.on_failure(OnFailure::Cluster {
        status: "UPDATE_FAILED",
        reason: false,
    });
}

impl Engine {
    /// `nodegroup_create` (a cast).
    pub async fn nodegroup_create(
        &self,
        ctx: &rpc_schema::RequestContext,
        cluster: &MagnumObject,
        nodegroup: &MagnumObject,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        self.operate(Op::NodegroupCreate, &uuid, ctx, durable, async |run| {
            self.nodegroup_create_steps(run, nodegroup).await
        })
        .await
    }

    async fn nodegroup_create_steps(
        &self,
        run: &mut Run<'_>,
        nodegroup: &MagnumObject,
    ) -> Result<Value, StepError> {
        let uuid = run.uuid.clone();
        let row = self
            .cluster_allowing(
                &uuid,
                Checked::Nodegroup("nodegroup_create"),
                nodegroup.get_str("status"),
            )
            .await?;
        if nodegroup.get_str("role") == Some("master") {
            return Err(StepError::Refused(RemoteFailure::magnum(
                "CreateMasterNodeGroup",
                serde_json::Map::new(),
            )));
        }
        let ng_uuid = nodegroup
            .get_str("uuid")
            .ok_or_else(|| {
                StepError::Refused(RemoteFailure::invalid_parameter(
                    "nodegroup_create without a nodegroup uuid",
                ))
            })?
            .to_string();
        self.save_cluster(&uuid, &[("status", json!("UPDATE_IN_PROGRESS"))])
            .await?;
        // INSERT, unless a redelivery of this request already did.
        match repo::get(&self.0.db, &NODEGROUP, &repo::Scope::admin(), &ng_uuid).await {
            Ok(_) => {}
            Err(DbError::Magnum { .. }) => {
                let mut ng = nodegroup.clone();
                ng.set("status", json!("CREATE_IN_PROGRESS"))
                    .map_err(|e| StepError::Refused(e.to_failure()))?;
                ng.set("cluster_id", json!(uuid))
                    .map_err(|e| StepError::Refused(e.to_failure()))?;
                repo::create(&self.0.db, &NODEGROUP, &ng)
                    .await
                    .map_err(|e| {
                        if e.is_transient() {
                            StepError::Db(e)
                        } else {
                            StepError::Refused(e.to_failure())
                        }
                    })?;
            }
            Err(e) => return Err(e.into()),
        }
        run.recorded();
        failure_plan(run, &ng_uuid, "CREATE_FAILED");
        self.progress_restart(&uuid);
        crate::failpoint::hit("nodegroup_create.after_row").await;
        let key = naming::group_key(nodegroup.get_str("name").unwrap_or_default(), &ng_uuid);
        self.converge(&uuid, Parts::Groups(vec![key.clone()]), None)
            .await?;
        tracing::info!(cluster = %uuid, nodegroup = %key, "nodegroup created");
        self.kick_cluster(&row);
        let stored = repo::get(&self.0.db, &NODEGROUP, &repo::Scope::admin(), &ng_uuid).await?;
        Ok(stored.to_primitive())
    }

    /// `nodegroup_update` (a cast).
    pub async fn nodegroup_update(
        &self,
        ctx: &rpc_schema::RequestContext,
        cluster: &MagnumObject,
        nodegroup: &MagnumObject,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        self.operate(Op::NodegroupUpdate, &uuid, ctx, durable, async |run| {
            self.nodegroup_update_steps(run, nodegroup).await
        })
        .await
    }

    async fn nodegroup_update_steps(
        &self,
        run: &mut Run<'_>,
        nodegroup: &MagnumObject,
    ) -> Result<Value, StepError> {
        let uuid = run.uuid.clone();
        let row = self
            .cluster_allowing(
                &uuid,
                Checked::Nodegroup("nodegroup_update"),
                nodegroup.get_str("status"),
            )
            .await?;
        let ng_uuid = nodegroup.get_str("uuid").unwrap_or_default().to_string();
        self.save_cluster(&uuid, &[("status", json!("UPDATE_IN_PROGRESS"))])
            .await?;
        failure_plan(run, &ng_uuid, "UPDATE_FAILED");
        // The fields the API patched (its `changes`), and the status.
        let mut changed = nodegroup.clone();
        changed.changes.retain(|f| {
            matches!(
                f.as_str(),
                "min_node_count" | "max_node_count" | "node_labels" | "node_taints"
            )
        });
        changed
            .set("status", json!("UPDATE_IN_PROGRESS"))
            .map_err(|e| StepError::Invalid(e.to_string()))?;
        let saved = repo::save(&self.0.db, &NODEGROUP, &ng_uuid, &changed).await?;
        run.recorded();
        self.progress_restart(&uuid);
        let key = rows::group_key(&saved);
        self.converge(&uuid, Parts::Groups(vec![key.clone()]), None)
            .await?;
        tracing::info!(cluster = %uuid, nodegroup = %key, fields = ?changed.changes, "nodegroup updated");
        self.kick_cluster(&row);
        Ok(saved.to_primitive())
    }

    /// `nodegroup_delete` (a cast).
    pub async fn nodegroup_delete(
        &self,
        ctx: &rpc_schema::RequestContext,
        cluster: &MagnumObject,
        nodegroup: &MagnumObject,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        self.operate(Op::NodegroupDelete, &uuid, ctx, durable, async |run| {
            self.nodegroup_delete_steps(run, nodegroup).await
        })
        .await
    }

    async fn nodegroup_delete_steps(
        &self,
        run: &mut Run<'_>,
        nodegroup: &MagnumObject,
    ) -> Result<Value, StepError> {
        let uuid = run.uuid.clone();
        let ng_uuid = nodegroup.get_str("uuid").unwrap_or_default().to_string();
        let ng = match repo::get(&self.0.db, &NODEGROUP, &repo::Scope::admin(), &ng_uuid).await {
            Ok(n) => n,
            // Already gone: a redelivery after the row was removed.
            Err(DbError::Magnum { .. }) => return Ok(Value::Null),
            Err(e) => return Err(e.into()),
        };
        if ng.get_bool("is_default") == Some(true) {
            return Err(StepError::Refused(RemoteFailure::magnum(
                "DeletingDefaultNGNotSupported",
                serde_json::Map::new(),
            )));
        }
        let row = self
            .save_cluster(&uuid, &[("status", json!("UPDATE_IN_PROGRESS"))])
            .await?;
        failure_plan(run, &ng_uuid, "DELETE_FAILED");
        self.save_nodegroup(&ng_uuid, &[("status", json!("DELETE_IN_PROGRESS"))])
            .await?;
        run.recorded();
        self.progress_restart(&uuid);
        crate::failpoint::hit("nodegroup_delete.after_rows").await;
        let key = rows::group_key(&ng);
        self.delete_group_objects(&row, &key).await?;
        tracing::info!(cluster = %uuid, nodegroup = %key, "nodegroup deletion started");
        self.kick_cluster(&row);
        Ok(Value::Null)
    }

    /// Delete a worker group's MachineDeployment, health check and
    /// templates (already gone is fine). CAPI drains and deletes the
    /// machines.
    pub(in crate::lifecycle) async fn delete_group_objects(
        &self,
        cluster: &MagnumObject,
        key: &str,
    ) -> Result<(), StepError> {
        let Some(stack_id) = cluster.get_str("stack_id") else {
            return Ok(());
        };
        if rows::adopted_namespace(cluster).is_some() {
            // A topology cluster: the group's entry goes from its topology
            // (its row is being deleted), CAPI deletes what it made.
            let uuid = cluster.get_str("uuid").unwrap_or_default();
            self.converge(uuid, Parts::Groups(vec![key.to_string()]), None)
                .await?;
            return Ok(());
        }
        let ns = self.namespace_of(cluster);
        let capi = capi_apiversion(self.0.line);
        let name = naming::object_name(stack_id, key);
        for (av, kind, plural) in [
            (capi, "MachineDeployment", "machinedeployments"),
            (capi, "MachineHealthCheck", "machinehealthchecks"),
        ] {
            let api = dynamic_api(&self.0.client, &ns, av, kind, plural);
            crate::mgmt::delete_if_present(&api, &name).await?;
        }
        let bootstrap = match self.0.line {
            crate::capi::render::CapiLine::V1beta1 => "bootstrap.cluster.x-k8s.io/v1beta1",
            crate::capi::render::CapiLine::V1beta2 => "bootstrap.cluster.x-k8s.io/v1beta2",
        };
        let uuid = cluster.get_str("uuid").unwrap_or_default();
        let selector = format!("{UUID_LABEL}={uuid},{NODEGROUP_LABEL}={key}");
        for (av, kind, plural) in [
            (
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "OpenStackMachineTemplate",
                "openstackmachinetemplates",
            ),
            (bootstrap, "KubeadmConfigTemplate", "kubeadmconfigtemplates"),
        ] {
            let api = dynamic_api(&self.0.client, &ns, av, kind, plural);
            let lp = ListParams::default().labels(&selector);
            let listed =
                crate::mgmt::with_retries("list templates", || api.list_metadata(&lp)).await?;
            for t in listed.items {
                let Some(n) = t.metadata.name else { continue };
                crate::mgmt::delete_if_present(&api, &n).await?;
            }
        }
        Ok(())
    }
}
