//! `cluster_delete` (a cast).
//!
//! Nodegroups and the cluster DELETE_IN_PROGRESS, the OpenStackCluster
//! marked for the clean-up of what the workload cluster made in OpenStack
//! (done by the status worker once the machines are gone:
//! [`crate::lifecycle::cloud`]), the CAPI Cluster deleted
//! (CAPI cascades to its control plane, workers and infrastructure; every
//! other object we applied is owned by it). The status worker says what the
//! deletion waits for, and once the Cluster is gone [`Engine::finish_delete`]
//! removes the credentials, every other object we applied (our uuid label:
//! Kubernetes' garbage collector would collect those the Cluster owns, but
//! in its own time, and the Secrets it does not own), all four keypairs
//! (Magnum leaks two), the nodegroup rows and the cluster row.

use common::db::model::{CLUSTER, NODEGROUP, X509KEYPAIR};
use common::db::repo::{self, Scope};
use kube::api::{DeleteParams, ListParams};
use rpc_schema::Outcome;
use rpc_schema::context::RequestContext;
use rpc_schema::ovo::MagnumObject;
use serde_json::{Value, json};

use crate::capi::render::CapiLine;
use crate::capi::render::UUID_LABEL;
use crate::handlers::DurableSignal;
use crate::lifecycle::engine::{Engine, capi_apiversion, destroy_if_present, dynamic_api};
use crate::lifecycle::error::StepError;
use crate::lifecycle::runner::{OnFailure, Op, Run};

impl Engine {
    /// `cluster_delete` (a cast): nodegroups DELETE_IN_PROGRESS, delete the
    /// CAPI Cluster, cluster DELETE_IN_PROGRESS; the status worker finishes.
    pub async fn cluster_delete(
        &self,
        ctx: &RequestContext,
        uuid: &str,
        durable: &mut DurableSignal,
    ) -> Outcome {
        // The caller's tenant filter, as Magnum loads it.
        let cluster = match repo::get(&self.0.db, &CLUSTER, &Scope::from_context(ctx), uuid).await {
            Ok(c) => c,
            Err(e) => {
                if e.is_transient() {
                    tracing::warn!(%uuid, error = %e, "database unavailable while reading the cluster; retrying later");
                    durable.retry_later();
                }
                return Outcome::Failure(e.to_failure());
            }
        };
        let uuid = cluster.get_str("uuid").unwrap_or(uuid).to_string();
        let mut run = Run::begin(self, Op::Delete, &uuid, Some(ctx), Some(durable)).await;
        if let Some(e) = run.blocked() {
            return run.finish(Err(e)).await;
        }
        // Read again under the Lease: the operation that held it meanwhile
        // may have changed the row. A delete sent while the create still
        // ran read no stack_id above, and deleted no CAPI Cluster with it.
        let cluster = match repo::get(&self.0.db, &CLUSTER, &Scope::from_context(ctx), &uuid).await
        {
            Ok(c) => c,
            Err(e) => return run.finish(Err(e.into())).await,
        };
        run.on_failure(OnFailure::Cluster {
            status: "DELETE_FAILED",
            reason: true,
        });
        run.notify_pending().await;
        let result = self.delete_steps(&cluster).await;
        let ok = result.is_ok();
        let outcome = run.finish(result.map(|_| Value::Null)).await;
        if ok {
            crate::failpoint::hit("delete.after_ack").await;
            self.kick_cluster(&cluster);
        }
        outcome
    }

    async fn delete_steps(&self, cluster: &MagnumObject) -> Result<MagnumObject, StepError> {
        let uuid = cluster.get_str("uuid").unwrap_or_default();
        for ng in self.nodegroups(uuid).await? {
            let u = ng.get_str("uuid").unwrap_or_default().to_string();
            self.save_nodegroup(&u, &[("status", json!("DELETE_IN_PROGRESS"))])
                .await?;
        }
        // The cloud around it first: its OpenStackCluster waits for the
        // clean-up (`crate::lifecycle::cloud`).
        self.mark_for_cleanup(cluster, true).await?;
        crate::failpoint::hit("delete.before_capi_delete").await;
        self.delete_capi_cluster(cluster).await?;
        self.progress_done(uuid);
        Ok(self
            .save_cluster(
                uuid,
                &[
                    ("status", json!("DELETE_IN_PROGRESS")),
                    ("status_reason", Value::Null),
                ],
            )
            .await?)
    }

    /// Delete the CAPI Cluster (already gone is fine).
    pub(in crate::lifecycle) async fn delete_capi_cluster(
        &self,
        cluster: &MagnumObject,
    ) -> Result<(), StepError> {
        let Some(stack_id) = cluster.get_str("stack_id") else {
            return Ok(());
        };
        let ns = self.namespace_of(cluster);
        let api = dynamic_api(
            &self.0.client,
            &ns,
            capi_apiversion(self.0.line),
            "Cluster",
            "clusters",
        );
        let dp = DeleteParams::background();
        match crate::mgmt::with_retries("delete cluster", || api.delete(stack_id, &dp)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// After the CAPI Cluster is gone: credentials, Secrets, all four
    /// keypairs, nodegroup rows, the cluster row.
    pub(in crate::lifecycle) async fn finish_delete(
        &self,
        cluster: &MagnumObject,
    ) -> Result<(), StepError> {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        let ns = self.namespace_of(cluster);
        self.waiting(&uuid, false);
        if let Err(e) = self
            .0
            .credentials
            .release(&self.0.client, &ns, cluster)
            .await
        {
            // Magnum's capi-helm puts this in status_reason and completes.
            tracing::warn!(cluster = %uuid, error = %e, "application credential not deleted");
        }
        // Everything else we applied for it: gone before the rows are, so a
        // deleted cluster leaves nothing behind, whenever the garbage
        // collector gets to what the Cluster owned.
        let lp = ListParams::default().labels(&format!("{UUID_LABEL}={uuid}"));
        for (av, kind, plural) in labelled_kinds(self.0.line) {
            let api = dynamic_api(&self.0.client, &ns, av, kind, plural);
            let listed = match crate::mgmt::with_retries("list", || api.list_metadata(&lp)).await {
                Ok(l) => l,
                // The kind is not served here (no autoscaler objects ever made).
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => return Err(e.into()),
            };
            for o in listed.items {
                let Some(name) = o.metadata.name else {
                    continue;
                };
                crate::mgmt::delete_if_present(&api, &name).await?;
            }
        }
        let (_, changed) = self
            .save_cluster_changed(
                &uuid,
                &[
                    ("status", json!("DELETE_COMPLETE")),
                    ("status_reason", Value::Null),
                ],
            )
            .await?;
        if changed.iter().any(|c| c == "status") {
            self.notify_cluster(
                None,
                crate::notify::Action::Delete,
                crate::notify::Outcome::Success,
                &uuid,
            )
            .await;
        }
        crate::failpoint::hit("delete.after_delete_complete").await;
        for r in [
            "ca_cert_ref",
            "magnum_cert_ref",
            "etcd_ca_cert_ref",
            "front_proxy_ca_cert_ref",
        ] {
            if let Some(k) = cluster.get_str(r) {
                destroy_if_present(&self.0.db, &X509KEYPAIR, k).await?;
            }
        }
        for ng in self.nodegroups(&uuid).await? {
            if let Some(u) = ng.get_str("uuid") {
                destroy_if_present(&self.0.db, &NODEGROUP, u).await?;
            }
        }
        destroy_if_present(&self.0.db, &CLUSTER, &uuid).await?;
        self.count("delete", "complete");
        tracing::info!(cluster = %uuid, "cluster deleted");
        Ok(())
    }
}

/// The kinds the conductor applies for a cluster besides its CAPI Cluster
/// and what CAPI deletes with it (control plane, MachineDeployments,
/// infrastructure): (apiVersion, kind, plural), all carrying our uuid label.
fn labelled_kinds(line: CapiLine) -> [(&'static str, &'static str, &'static str); 11] {
    let (capi, _, bootstrap) = line.api_versions();
    let addons = line.addons_api();
    [
        // An adopted vexxhost cluster's addons (`adopt` labels them) and
        // the Keystone webhook's set (`capi::keystone_auth`).
        (addons, "ClusterResourceSet", "clusterresourcesets"),
        ("v1", "ConfigMap", "configmaps"),
        ("v1", "Secret", "secrets"),
        (
            "addons.cluster.x-k8s.io/v1alpha1",
            "HelmChartProxy",
            "helmchartproxies",
        ),
        (capi, "MachineHealthCheck", "machinehealthchecks"),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachineTemplate",
            "openstackmachinetemplates",
        ),
        (bootstrap, "KubeadmConfigTemplate", "kubeadmconfigtemplates"),
        ("apps/v1", "Deployment", "deployments"),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "rolebindings",
        ),
        ("rbac.authorization.k8s.io/v1", "Role", "roles"),
        ("v1", "ServiceAccount", "serviceaccounts"),
    ]
}
