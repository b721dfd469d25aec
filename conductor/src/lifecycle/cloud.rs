//! The cloud around a cluster, for the operations and the status worker
//! (what is deleted and how it is matched: [`crate::cloud`]).
//!
//! - [`Engine::cloud_identity`]: the identity a cluster's addons run with.
//! - [`Engine::mark_for_cleanup`] (the delete operation, before it deletes
//!   the CAPI Cluster): the OpenStackCluster gets our finalizer, the
//!   identity to delete by and when this delete started. CAPI deletes the
//!   OpenStackCluster only once every Machine is gone, so OCCM and Cinder
//!   CSI, which run on them, cannot make anything anew meanwhile; CAPO's
//!   network deletion (refused by Neutron while a load balancer's port is
//!   on it) is retried by CAPO until our finalizer goes.
//! - [`Engine::cloud_cleanup`] (the status pass of a deleting cluster, with
//!   the cluster's Lease): list what the cluster's application credential
//!   sees, delete what is the cluster's, and remove the finalizer once
//!   nothing is left. Every step is idempotent (a 404 is done), so a
//!   conductor killed at any point, or another one taking over, just
//!   starts the pass again.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use rpc_schema::ovo::MagnumObject;
use serde_json::{Value, json};

use super::engine::{Engine, dynamic_api};
use super::error::StepError;
use super::rows;
use crate::capi::addons::HCP_API;
use crate::capi::naming::object_name;
use crate::capi::render::INFRA;
use crate::cloud::api::Credential;
use crate::cloud::identity::{
    self, CLEANUP_FINALIZER, IDENTITY_ANNOTATION, Kind, Scope, Uses, VOLUMES_POLICY_LABEL,
    VolumesPolicy,
};

/// When the current delete started its clean-up (RFC 3339): the timeout
/// counts from it, and a delete retried after `DELETE_FAILED` sets it anew.
pub const SINCE_ANNOTATION: &str = "magnum.openstack.org/cloud-cleanup-since";

/// A waiting clean-up's next look.
pub(in crate::lifecycle) const CLEANUP_EVERY: Duration = Duration::from_secs(5);

/// What a clean-up pass came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::lifecycle) enum Cleanup {
    /// Everything of the cluster's is gone (or there was nothing to do):
    /// the finalizer is removed.
    Done,
    /// Still waiting on OpenStack: the cluster's `status_reason`, and
    /// whether the delete's timeout has passed.
    Waiting { reason: String, timed_out: bool },
}

/// Whether a (cached) OpenStackCluster is being deleted and waits for our
/// clean-up.
pub(in crate::lifecycle) fn awaits_cleanup(infra: &Value) -> bool {
    let m = &infra["metadata"];
    !m["deletionTimestamp"].is_null()
        && m["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == CLEANUP_FINALIZER))
}

fn annotation<'a>(o: &'a DynamicObject, key: &str) -> Option<&'a str> {
    o.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

impl Engine {
    fn osc_api(&self, ns: &str) -> Api<DynamicObject> {
        dynamic_api(
            &self.0.client,
            ns,
            INFRA,
            "OpenStackCluster",
            "openstackclusters",
        )
    }

    /// The values of the cluster's OCCM HelmChartProxy (`None`: not applied).
    async fn occm_values(&self, ns: &str, stack_id: &str) -> Result<Option<String>, StepError> {
        let api = dynamic_api(
            &self.0.client,
            ns,
            HCP_API,
            "HelmChartProxy",
            "helmchartproxies",
        );
        let name = object_name(stack_id, "openstack-ccm");
        let hcp = crate::mgmt::with_retries("read the OCCM addon", || api.get_opt(&name)).await?;
        Ok(hcp.and_then(|h| {
            h.data["spec"]["valuesTemplate"]
                .as_str()
                .map(str::to_string)
        }))
    }

    /// The identity the cluster's addons run with: its uuid, unless they
    /// already run with another (a cluster made before identities keeps
    /// the chart default: see [`identity::identity_from_occm_values`]).
    pub(in crate::lifecycle) async fn cloud_identity(
        &self,
        ns: &str,
        stack_id: &str,
        uuid: &str,
    ) -> Result<String, StepError> {
        let values = self.occm_values(ns, stack_id).await?;
        Ok(identity::identity_from_occm_values(values.as_deref(), uuid))
    }

    /// The addons of a cluster (`capi::addons`, and Manila CSI's objects
    /// when the labels ask, `capi::manila`), with `cloud` its credential:
    /// the identity they run with, and the Manila share types its project
    /// sees when StorageClasses are asked for (read with that credential).
    pub(in crate::lifecycle) async fn addon_objects(
        &self,
        input: &crate::capi::render::ClusterInput,
        network_driver: &str,
        cloud: &crate::capi::addons::CloudConfig,
    ) -> Result<Vec<Value>, StepError> {
        use crate::capi::addons::{self, AddonCharts};
        let identity = self
            .cloud_identity(&input.namespace, &input.stack_id, &input.cluster_uuid)
            .await?;
        let charts = AddonCharts::from(&self.0.capi);
        let mut objects = addons::render(input, network_driver, &charts, cloud, &identity);
        let share_types = match &input.labels.infra.addons.manila {
            Some(m) if m.share_network_id.is_some() => self.share_types(input, cloud).await?,
            _ => Vec::new(),
        };
        objects.extend(crate::capi::manila::render_labelled(
            input,
            &charts,
            cloud,
            self.0.credentials.verify,
            &share_types,
            &identity,
        ));
        Ok(objects)
    }

    /// Delete the cluster's addon objects that `rendered` no longer has
    /// (an upgrade's labels switched an addon off): its HelmChartProxies
    /// (CAAPH uninstalls their releases from the workload cluster:
    /// cluster-api-addon-provider-helm `helmchartproxy_controller.go`
    /// `reconcileDelete` deletes the HelmReleaseProxies, whose controller
    /// uninstalls), and its ClusterResourceSets with the ConfigMap or Secret
    /// each holds (CAPI never removes from the workload cluster what a
    /// ClusterResourceSet applied: `clusterresourceset_controller.go`
    /// `reconcileDelete` only drops the bindings). Only objects labelled
    /// with the cluster's uuid and named after its stack id are looked at.
    /// Returns the names deleted.
    pub(in crate::lifecycle) async fn prune_addons(
        &self,
        input: &crate::capi::render::ClusterInput,
        rendered: &[Value],
    ) -> Result<Vec<String>, StepError> {
        use crate::capi::render::UUID_LABEL;
        use kube::api::ListParams;
        let keep = |kind: &str, name: &str| {
            rendered
                .iter()
                .any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        };
        let prefix = format!("{}-", input.stack_id);
        let lp = ListParams::default().labels(&format!("{UUID_LABEL}={}", input.cluster_uuid));
        let mut gone = Vec::new();
        for (av, kind, plural) in [
            (HCP_API, "HelmChartProxy", "helmchartproxies"),
            (
                self.0.line.addons_api(),
                "ClusterResourceSet",
                "clusterresourcesets",
            ),
        ] {
            let api = dynamic_api(&self.0.client, &input.namespace, av, kind, plural);
            let listed = crate::mgmt::with_retries("list addons", || api.list(&lp)).await?;
            for o in listed.items {
                let Some(name) = o.metadata.name.clone() else {
                    continue;
                };
                if !name.starts_with(&prefix) || keep(kind, &name) {
                    continue;
                }
                let mut doomed = vec![(av, kind, plural, name.clone())];
                if kind == "ClusterResourceSet" {
                    for r in o.data["spec"]["resources"].as_array().into_iter().flatten() {
                        let (Some(k), Some(n)) = (r["kind"].as_str(), r["name"].as_str()) else {
                            continue;
                        };
                        match k {
                            "ConfigMap" => doomed.push(("v1", "ConfigMap", "configmaps", n.into())),
                            "Secret" => doomed.push(("v1", "Secret", "secrets", n.into())),
                            _ => {}
                        }
                    }
                }
                for (av, kind, plural, name) in doomed {
                    let api = dynamic_api(&self.0.client, &input.namespace, av, kind, plural);
                    crate::mgmt::delete_if_present(&api, &name).await?;
                    tracing::info!(cluster = %input.cluster_uuid, kind, name = %name, "addon switched off: deleted");
                    gone.push(format!("{kind}/{name}"));
                }
            }
        }
        Ok(gone)
    }

    /// The Manila share types the cluster's credential sees (a StorageClass
    /// each). None is a refusal: a share network without a share type to
    /// create shares of would give StorageClasses that cannot work.
    async fn share_types(
        &self,
        input: &crate::capi::render::ClusterInput,
        cloud: &crate::capi::addons::CloudConfig,
    ) -> Result<Vec<String>, StepError> {
        let failed = |e: String| {
            StepError::Invalid(format!(
                "cannot read the Manila share types for the cluster's StorageClasses \
                 (manila_csi_share_network_id): {e}"
            ))
        };
        let cred = crate::cloud::api::Credential {
            auth_url: cloud.auth_url.clone(),
            id: cloud.application_credential_id.clone(),
            secret: cloud.application_credential_secret.clone(),
            interface: self.0.credentials.interface.clone(),
            region: cloud.region.clone(),
        };
        let session = self
            .0
            .cloud
            .session(&cred)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let types = self
            .0
            .cloud
            .share_types(&session)
            .await
            .map_err(|e| failed(e.to_string()))?;
        if types.is_empty() {
            return Err(failed("the project sees no share type".into()));
        }
        tracing::debug!(cluster = %input.cluster_uuid, ?types, "Manila share types");
        Ok(types)
    }

    /// Before a delete deletes the CAPI Cluster: the OpenStackCluster holds
    /// our finalizer, the identity and this delete's start. Nothing to mark
    /// without `[capi] cloud_cleanup`, for an adopted topology (its driver's
    /// addons), or without our OCCM addon (nothing of ours ran in the cloud).
    /// `fresh`: a user's delete (the timeout starts again); else a resume,
    /// which keeps a mark already there as it is.
    pub(in crate::lifecycle) async fn mark_for_cleanup(
        &self,
        cluster: &MagnumObject,
        fresh: bool,
    ) -> Result<(), StepError> {
        if !self.0.capi.cloud_cleanup || rows::adopted_namespace(cluster).is_some() {
            return Ok(());
        }
        let Some(stack) = cluster.get_str("stack_id") else {
            return Ok(());
        };
        let uuid = cluster.get_str("uuid").unwrap_or_default();
        let ns = self.namespace_of(cluster);
        let api = self.osc_api(&ns);
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        for _ in 0..5 {
            let Some(osc) =
                crate::mgmt::with_retries("read the OpenStackCluster", || api.get_opt(stack))
                    .await?
            else {
                return Ok(());
            };
            let identity = match annotation(&osc, IDENTITY_ANNOTATION).filter(|i| !i.is_empty()) {
                Some(i) => i.to_string(),
                None => match self.occm_values(&ns, stack).await? {
                    Some(v) => identity::identity_from_occm_values(Some(&v), uuid),
                    None => {
                        tracing::info!(cluster = %uuid, "no cloud-controller-manager addon of ours: nothing in OpenStack to clean up");
                        return Ok(());
                    }
                },
            };
            let mut finalizers = osc.metadata.finalizers.clone().unwrap_or_default();
            let marked = finalizers.iter().any(|f| f == CLEANUP_FINALIZER);
            if marked && !fresh && annotation(&osc, SINCE_ANNOTATION).is_some() {
                return Ok(());
            }
            if !marked {
                if osc.metadata.deletion_timestamp.is_some() {
                    // Deleted before this conductor marked it (no finalizer
                    // can be added now): CAPO is already taking it down.
                    tracing::warn!(cluster = %uuid, "the OpenStackCluster was already being deleted without our clean-up mark; OpenStack resources of the cluster are not cleaned up");
                    return Ok(());
                }
                finalizers.push(CLEANUP_FINALIZER.to_string());
            }
            let patch = json!({"metadata": {
                "resourceVersion": osc.metadata.resource_version,
                "finalizers": finalizers,
                "annotations": {IDENTITY_ANNOTATION: identity, SINCE_ANNOTATION: now},
            }});
            match api
                .patch(stack, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(cluster = %uuid, %identity, "OpenStack resources of the cluster will be cleaned up before its network goes");
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Err(StepError::Busy {
            cluster: uuid.to_string(),
            why: "the OpenStackCluster kept changing while it was marked for clean-up".into(),
        })
    }

    /// Remove our finalizer (already gone is fine).
    async fn release_infra(&self, ns: &str, name: &str) -> Result<(), StepError> {
        let api = self.osc_api(ns);
        for _ in 0..5 {
            let Some(osc) =
                crate::mgmt::with_retries("read the OpenStackCluster", || api.get_opt(name))
                    .await?
            else {
                return Ok(());
            };
            let finalizers = osc.metadata.finalizers.clone().unwrap_or_default();
            let Some(i) = finalizers.iter().position(|f| f == CLEANUP_FINALIZER) else {
                return Ok(());
            };
            let patch: json_patch::Patch = match serde_json::from_value(json!([
                {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": CLEANUP_FINALIZER},
                {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
            ])) {
                Ok(p) => p,
                Err(e) => {
                    return Err(StepError::Busy {
                        cluster: name.to_string(),
                        why: format!("finalizer patch: {e}"),
                    });
                }
            };
            match api
                .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StepError::Busy {
            cluster: name.to_string(),
            why: "the OpenStackCluster kept changing while its clean-up finalizer was removed"
                .into(),
        })
    }

    /// Whether a delete of this cluster's load balancer `id` may be asked
    /// now (counted, when it may): `Some((requests so far, time left))`
    /// while one Octavia left in ERROR (`in_error`) waits out its backoff
    /// ([`identity::error_retry_wait`]). Kept in this process: a conductor
    /// taking the clean-up over asks once at once.
    fn lb_delete_held(&self, uuid: &str, id: &str, in_error: bool) -> Option<(u32, Duration)> {
        let Ok(mut r) = self.0.cleanup_requests.lock() else {
            return None;
        };
        let now = std::time::Instant::now();
        let e = r
            .entry((uuid.to_string(), id.to_string()))
            .or_insert((0, now));
        if in_error && let Some(wait) = identity::error_retry_wait(e.0, e.1.elapsed()) {
            return Some((e.0, wait));
        }
        *e = (e.0 + 1, now);
        None
    }

    fn forget_requests(&self, uuid: &str) {
        if let Ok(mut r) = self.0.cleanup_requests.lock() {
            r.retain(|(u, _), _| u != uuid);
        }
    }

    pub(in crate::lifecycle) fn waiting(&self, uuid: &str, waiting: bool) {
        if let Ok(mut w) = self.0.cleanup_waiting.lock() {
            if waiting {
                w.insert(uuid.to_string());
            } else {
                w.remove(uuid);
            }
            self.0.metrics.cloud_cleanup_waiting.set(w.len() as i64);
        }
    }

    /// One clean-up pass over a deleting cluster whose OpenStackCluster
    /// ([`awaits_cleanup`]) waits for it. The caller holds the Lease.
    pub(in crate::lifecycle) async fn cloud_cleanup(
        &self,
        cluster: &MagnumObject,
    ) -> Result<Cleanup, StepError> {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        let Some(stack) = cluster.get_str("stack_id") else {
            return Ok(Cleanup::Done);
        };
        let ns = self.namespace_of(cluster);
        let api = self.osc_api(&ns);
        let Some(osc) =
            crate::mgmt::with_retries("read the OpenStackCluster", || api.get_opt(stack)).await?
        else {
            self.waiting(&uuid, false);
            return Ok(Cleanup::Done);
        };
        if !self.0.capi.cloud_cleanup {
            tracing::warn!(cluster = %uuid, "[capi] cloud_cleanup is off: the OpenStackCluster is released without cleaning up");
            self.release_infra(&ns, stack).await?;
            self.waiting(&uuid, false);
            return Ok(Cleanup::Done);
        }
        let since = annotation(&osc, SINCE_ANNOTATION)
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
            .or_else(|| {
                osc.metadata
                    .deletion_timestamp
                    .as_ref()
                    .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0))
            })
            .unwrap_or_else(chrono::Utc::now);
        let timed_out =
            (chrono::Utc::now() - since).num_seconds() >= self.0.capi.cloud_cleanup_timeout as i64;
        let labels = rows::dict(cluster.get("labels"));
        let label = labels.get(VOLUMES_POLICY_LABEL).map(String::as_str);
        let volumes = VolumesPolicy::parse(label).unwrap_or_else(|e| {
            tracing::warn!(cluster = %uuid, error = %e, "volumes are kept");
            VolumesPolicy::Keep
        });
        // CAPO's own network (not a fixed network the user gave).
        let own_network = if osc.data["spec"]["network"].is_null() {
            osc.data["status"]["network"]["id"]
                .as_str()
                .map(str::to_string)
        } else {
            None
        };
        let scope = Scope {
            identity: annotation(&osc, IDENTITY_ANNOTATION)
                .filter(|i| !i.is_empty())
                .unwrap_or(&uuid)
                .to_string(),
            cluster_uuid: uuid.clone(),
            own_network,
            volumes,
            uses: Uses::from_labels(&labels),
        };
        let wait = |reason: String| {
            self.waiting(&uuid, true);
            Ok(Cleanup::Waiting { reason, timed_out })
        };
        let cred: Credential = match self
            .0
            .credentials
            .cloud_credential(&self.0.client, &ns, stack)
            .await?
        {
            Some(c) => c,
            None => {
                tracing::warn!(cluster = %uuid, "no credentials Secret: nothing can have been made in OpenStack with it; released");
                self.release_infra(&ns, stack).await?;
                self.waiting(&uuid, false);
                return Ok(Cleanup::Done);
            }
        };
        let session = match self.0.cloud.session(&cred).await {
            Ok(s) => s,
            Err(e) => {
                let hint = if e.is_auth() {
                    " (the credential was deleted, or its user removed from Keystone: see \
                     'A delete that waits on OpenStack' in the operator guide)"
                } else {
                    ""
                };
                tracing::warn!(cluster = %uuid, error = %e, "cloud clean-up cannot authenticate");
                return wait(format!(
                    "cannot clean up the cluster's OpenStack resources: {e}{hint}"
                ));
            }
        };
        let inventory = self
            .0
            .cloud
            .inventory(&session, |v| identity::owns_volume(&scope, v))
            .await;
        let (blocking, ignored) = identity::blocking_failures(&scope.uses, &inventory.failed);
        for f in &ignored {
            self.0
                .metrics
                .cloud_list_failures
                .with_label_values(&[f.service.name(), "ignored"])
                .inc();
            tracing::info!(cluster = %uuid, service = f.service.name(), error = %f.error,
                "cloud clean-up: a service the cluster never used cannot be listed; not waited for");
        }
        if !blocking.is_empty() {
            // What the cluster made there is unknown: nothing is deleted
            // on a partial view (a floating IP's load balancer unlisted
            // would read as another cluster's), the pass is retried.
            for f in &blocking {
                self.0
                    .metrics
                    .cloud_list_failures
                    .with_label_values(&[f.service.name(), "blocking"])
                    .inc();
                tracing::warn!(cluster = %uuid, service = f.service.name(), error = %f.error, "cloud clean-up cannot list");
            }
            let named: Vec<String> = blocking
                .iter()
                .map(|f| format!("{}: {}", f.service.name(), f.error))
                .collect();
            return wait(format!(
                "cannot list the cluster's OpenStack resources: {}",
                named.join("; ")
            ));
        }
        let plan = identity::plan(&scope, &inventory);
        for k in plan.keep.iter().filter(|k| k.kind == Kind::FloatingIp) {
            tracing::warn!(cluster = %uuid, identity = %scope.identity, kept = %k,
                "a floating IP named for the cluster serves another port now: left");
        }
        if plan.done() {
            for k in &plan.keep {
                tracing::info!(cluster = %uuid, identity = %scope.identity, kept = %k, "kept in OpenStack");
            }
            self.release_infra(&ns, stack).await?;
            self.waiting(&uuid, false);
            self.forget_requests(&uuid);
            tracing::info!(cluster = %uuid, identity = %scope.identity, "nothing of the cluster's left in OpenStack; its network may go");
            return Ok(Cleanup::Done);
        }
        let mut errors = Vec::new();
        // The conductor's service token, got once a pass if an attachment
        // needs it (`delete_as_service`).
        let mut service_token: Option<Result<common::secret::Secret, String>> = None;
        for item in &plan.delete {
            // A load balancer in ERROR after our delete requests: asked
            // again only after a backoff (a provider that failed a delete
            // is not asked every 5 s). Every request is counted, the
            // first one (from ACTIVE) too.
            if item.kind == Kind::LoadBalancer
                && let Some((asked, wait)) =
                    self.lb_delete_held(&uuid, &item.id, item.status == "ERROR")
            {
                errors.push((
                    item.clone(),
                    format!(
                        "Octavia left it in ERROR after {asked} delete request(s); asking again in {} s",
                        wait.as_secs().max(1)
                    ),
                ));
                continue;
            }
            let requested = if item.kind == Kind::Attachment {
                let token = match &mut service_token {
                    Some(t) => t,
                    slot => slot.insert(self.0.credentials.service_token().await),
                };
                match token {
                    Ok(t) => self.0.cloud.delete_as_service(&session, item, t).await,
                    Err(e) => Err(crate::cloud::api::ApiError::Config(format!(
                        "Cinder removes an attachment to a gone server only for a service, and {e}"
                    ))),
                }
            } else {
                self.0.cloud.delete(&session, item).await
            };
            match requested {
                Ok(()) => {
                    self.0
                        .metrics
                        .cloud_deletions
                        .with_label_values(&[item.kind.as_str(), "requested"])
                        .inc();
                    tracing::info!(cluster = %uuid, resource = %item, "deleting in OpenStack");
                }
                Err(e) => {
                    self.0
                        .metrics
                        .cloud_deletions
                        .with_label_values(&[item.kind.as_str(), "failed"])
                        .inc();
                    tracing::warn!(cluster = %uuid, resource = %item, error = %e, "OpenStack refused a deletion; retrying");
                    errors.push((item.clone(), e.to_string()));
                }
            }
        }
        crate::failpoint::hit("cleanup.after_delete_requests").await;
        wait(identity::waiting_reason(&plan, &errors))
    }

    /// `server_group_policies`: the Nova server groups of the control plane
    /// and of every worker group of `input`, made with the cluster's own
    /// credential before the machine templates naming them are applied
    /// (CAPO finds them by name when it makes a machine). Deleted by the
    /// clean-up with the cluster ([`identity::owns_server_group`]).
    pub(in crate::lifecycle) async fn ensure_server_groups(
        &self,
        input: &crate::capi::render::ClusterInput,
    ) -> Result<(), StepError> {
        use crate::capi::render::server_group_name;
        let Some(policy) = &input.labels.infra.server_group_policy else {
            return Ok(());
        };
        if input.adopted.is_some() {
            return Ok(());
        }
        if !self.0.capi.cloud_cleanup {
            return Err(StepError::Invalid(
                "label server_group_policies needs [capi] cloud_cleanup = true: its Nova \
                 server groups are deleted by the cluster's clean-up"
                    .into(),
            ));
        }
        let failed = |e: String| {
            StepError::Invalid(format!(
                "cannot make the cluster's Nova server groups (server_group_policies): {e}"
            ))
        };
        let Some(cred) = self
            .0
            .credentials
            .cloud_credential(&self.0.client, &input.namespace, &input.stack_id)
            .await?
        else {
            return Err(failed("the cluster has no credentials Secret".into()));
        };
        let session = self
            .0
            .cloud
            .session(&cred)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let names = std::iter::once(server_group_name(&input.cluster_uuid, None)).chain(
            input
                .workers
                .iter()
                .map(|g| server_group_name(&input.cluster_uuid, Some(&g.key))),
        );
        for name in names {
            let g = self
                .0
                .cloud
                .ensure_server_group(&session, &name, policy)
                .await
                .map_err(|e| failed(e.to_string()))?;
            if &g.policy != policy {
                // Nova's groups keep their policy: a template change does
                // not move running machines to another group.
                tracing::warn!(cluster = %input.cluster_uuid, group = %name, have = %g.policy, want = %policy,
                    "server group keeps its policy; a new one needs a new node group");
            }
            tracing::debug!(cluster = %input.cluster_uuid, group = %name, id = %g.id, "server group");
        }
        Ok(())
    }

    /// Look at this cluster again in `after` (a clean-up waiting on
    /// OpenStack: no watch event says when it is done). One look pending
    /// per cluster: passes that watch events cause meanwhile add none, so
    /// the looks do not multiply over a long wait.
    pub(in crate::lifecycle) fn kick_later(&self, cluster: &MagnumObject, after: Duration) {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        let already = self
            .0
            .cleanup_kicks
            .lock()
            .map(|mut pending| !pending.insert(uuid.clone()))
            .unwrap_or(false);
        if already {
            return;
        }
        let kick = self.kick_of(cluster);
        let engine = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Ok(mut pending) = engine.0.cleanup_kicks.lock() {
                pending.remove(&uuid);
            }
            engine.0.kicks.send(kick);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn awaits_only_when_deleting_and_marked() {
        let marked = json!({"metadata": {"finalizers": ["openstackcluster.infrastructure.cluster.x-k8s.io", CLEANUP_FINALIZER]}});
        assert!(!awaits_cleanup(&marked));
        let mut deleting = marked.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-27T00:00:00Z");
        assert!(awaits_cleanup(&deleting));
        deleting["metadata"]["finalizers"] =
            json!(["openstackcluster.infrastructure.cluster.x-k8s.io"]);
        assert!(!awaits_cleanup(&deleting));
    }
}
