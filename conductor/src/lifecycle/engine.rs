//! The lifecycle engine's state and the I/O every operation shares.
//!
//! One [`Engine`] per process (cloned into the RPC handlers): the database
//! pool, the kube client, the watch caches, the per-cluster locks. The
//! operations live in their own modules ([`super::operations::create`],
//! [`super::operations::delete`], [`super::operations::scale`], [`super::operations::upgrade`],
//! [`super::operations::nodegroups`]) on top of the step runner ([`super::runner`]);
//! the status worker in [`super::status::reconcile`], the startup resume in
//! [`super::status::resume`]. What is shared lives here: reading and saving rows,
//! computing what the management cluster should hold
//! ([`Engine::desired`]), and applying it ([`Engine::converge`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::config::{CapiOpts, X509Opts};
use common::db::model::{CLUSTER, CLUSTER_TEMPLATE, NODEGROUP, SqlValue};
use common::db::repo::{self, Scope};
use common::db::{Db, DbError};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use rpc_schema::ovo::{self, MagnumObject};
use serde_json::{Value, json};

use super::credentials::Credentials;
use super::error::StepError;
use super::plan::{self, Batch, Desired};
use super::rows;
use super::watch::{Kick, Watches};
use crate::capi::autoscaler;
use crate::capi::render::{self, CapiLine, ClusterInput};
use crate::capi::status::Observed;
use crate::metrics::Metrics;
use crate::mgmt::Applier;
use crate::ownership::Owner;

pub(super) struct Inner {
    pub(super) db: Db,
    pub(super) x509: X509Opts,
    pub(super) capi: CapiOpts,
    pub(super) client: kube::Client,
    pub(super) applier: Applier,
    pub(super) line: CapiLine,
    pub(super) watches: Watches,
    pub(super) credentials: Credentials,
    pub(super) metrics: Metrics,
    pub(super) notifier: crate::notify::Notifier,
    /// `[capi] os_distros` less what cannot be built (see
    /// [`super::rows::served_distros`]).
    pub(super) served_distros: Vec<String>,
    /// What decides the owner of a driverless template.
    pub(super) drivers: crate::ownership::Drivers,
    /// Template uuid -> its owner, and when that was read.
    pub(super) owners: Mutex<HashMap<String, (Owner, Instant)>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pub(super) leases: super::coordination::lease::Leases,
    pub(super) broker: super::coordination::elect::ConnectionWatch,
    pub(super) kicks: super::watch::Kicks,
    /// Per cluster in an update: its last progress fingerprint and when it
    /// changed (the "no progress" timeout).
    pub(super) progress: Mutex<HashMap<String, (u64, Instant)>>,
    /// Per cluster in an update: when the status leader first saw it so
    /// (`cluster_operation_duration_seconds`).
    pub(super) update_seen: Mutex<HashMap<String, Instant>>,
    /// The OpenStack client of the clean-up (one per process).
    pub(super) cloud: crate::cloud::api::CloudApi,
    /// Deleting clusters whose clean-up waits on OpenStack.
    pub(super) cleanup_waiting: Mutex<HashSet<String>>,
    /// Per (cluster, load balancer): delete requests made and when the
    /// last was (the clean-up's backoff for one Octavia left in ERROR).
    pub(super) cleanup_requests: Mutex<HashMap<(String, String), (u32, Instant)>>,
    /// Of those, the ones with a look already scheduled.
    pub(super) cleanup_kicks: Mutex<HashSet<String>>,
}

/// What the engine works with (one of each per process).
pub struct Services {
    pub db: Db,
    pub x509: X509Opts,
    pub capi: CapiOpts,
    pub client: kube::Client,
    pub line: CapiLine,
    pub credentials: Credentials,
    pub metrics: Metrics,
    pub notifier: crate::notify::Notifier,
    /// This process's name on the Leases it holds.
    pub identity: String,
    /// The RPC server's broker connection (the `amqp` leader election).
    pub broker: super::coordination::elect::ConnectionWatch,
}

/// The lifecycle engine: cloned into the RPC handlers.
#[derive(Clone)]
pub struct Engine(pub(super) Arc<Inner>);

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("line", &self.0.line)
            .finish()
    }
}

/// Which objects [`Engine::converge`] applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Parts {
    /// The control plane (with the autoscaler, whose release follows its
    /// version) and these worker groups (keys).
    ControlPlaneAnd(Vec<String>),
    /// Only these worker groups (keys).
    Groups(Vec<String>),
}

/// An object with only `changes` set (what `repo::save` writes).
pub(crate) fn obj_with(class: &'static ovo::ClassSpec, changes: &[(&str, Value)]) -> MagnumObject {
    let mut o = MagnumObject::new(class);
    for (k, v) in changes {
        if let Err(e) = o.set(k, v.clone()) {
            tracing::error!(field = k, error = %e, "cannot set field");
        }
    }
    o
}

pub(super) fn capi_apiversion(line: CapiLine) -> &'static str {
    line.api_versions().0
}

/// A namespaced dynamic API for `apiVersion`/`kind`/`plural`.
pub(crate) fn dynamic_api(
    client: &kube::Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Time since the row's `created_at` (zero if unreadable).
pub(super) fn age(row: &MagnumObject) -> chrono::Duration {
    row.get_str("created_at")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .unwrap_or_default()
}

/// DELETE a row by uuid; already gone is fine.
pub(super) async fn destroy_if_present(
    db: &Db,
    table: &'static common::db::model::Table,
    uuid: &str,
) -> Result<(), StepError> {
    match repo::destroy(db, table, uuid).await {
        Ok(()) | Err(DbError::Magnum { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Engine {
    /// Start the watches, the status worker and the startup resume.
    pub async fn start(s: Services) -> Engine {
        let (tx, rx) = super::watch::Kicks::channel(
            super::watch::KICK_QUEUE,
            s.metrics.kick_overflows.clone(),
        );
        let (served_distros, ignition) = super::rows::served_distros(&s.capi.os_distros);
        if !ignition.is_empty() {
            tracing::warn!(
                "[capi] os_distros lists {ignition:?}: their images boot with Ignition, which this \
                 conductor does not render; clusters of them fail at create"
            );
        }
        let drivers = crate::ownership::Drivers {
            ours: s.capi.os_distros.clone(),
            others: s.capi.other_drivers.clone(),
        };
        let watches = Watches::spawn(s.client.clone(), s.line, tx.clone(), s.metrics.clone());
        let leases = super::coordination::lease::Leases::new(
            s.client.clone(),
            &s.capi.lease_namespace,
            &s.identity,
            Duration::from_secs(s.capi.lease_duration),
            s.capi.ha_leases,
        );
        let cloud = crate::cloud::api::CloudApi::new(s.capi.ca_file.as_deref());
        let engine = Engine(Arc::new(Inner {
            db: s.db,
            x509: s.x509,
            capi: s.capi,
            applier: Applier::new(s.client.clone()),
            client: s.client,
            line: s.line,
            watches,
            credentials: s.credentials,
            metrics: s.metrics,
            notifier: s.notifier,
            served_distros,
            drivers,
            owners: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            leases,
            broker: s.broker,
            kicks: tx,
            progress: Mutex::new(HashMap::new()),
            update_seen: Mutex::new(HashMap::new()),
            cloud,
            cleanup_waiting: Mutex::new(HashSet::new()),
            cleanup_requests: Mutex::new(HashMap::new()),
            cleanup_kicks: Mutex::new(HashSet::new()),
        }));
        tokio::spawn(engine.clone().status_worker(rx));
        tokio::spawn(engine.clone().lead());
        let e = engine.clone();
        tokio::spawn(async move { e.resync_loop().await });
        engine
    }

    /// The per-cluster lock: one operation (or status pass) at a time.
    pub(super) fn lock(&self, uuid: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = match self.0.locks.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        m.retain(|_, l| Arc::strong_count(l) > 1);
        m.entry(uuid.to_string()).or_default().clone()
    }

    pub(super) fn namespace_of(&self, cluster: &MagnumObject) -> String {
        rows::namespace(&self.0.capi.namespace_prefix, cluster)
    }

    /// What names this cluster to the status worker.
    pub(super) fn kick_of(&self, cluster: &MagnumObject) -> Kick {
        match cluster.get_str("stack_id") {
            Some(s) => Kick::Cluster(self.namespace_of(cluster), s.to_string()),
            None => Kick::Uuid(cluster.get_str("uuid").unwrap_or_default().to_string()),
        }
    }

    /// Ask the status worker to look at this cluster.
    pub(super) fn kick_cluster(&self, cluster: &MagnumObject) {
        self.0.kicks.send(self.kick_of(cluster));
    }

    /// What the watch caches hold for this cluster.
    pub(super) fn observed(&self, cluster: &MagnumObject) -> Observed {
        match cluster.get_str("stack_id") {
            Some(s) => self.0.watches.observed(&self.namespace_of(cluster), s),
            None => Observed::default(),
        }
    }

    // ------------------------------------------------------------------ rows

    pub(super) async fn cluster(&self, uuid: &str) -> Result<MagnumObject, DbError> {
        repo::get(&self.0.db, &CLUSTER, &Scope::admin(), uuid).await
    }

    /// The cluster row, once Magnum's status rule for `op` lets the
    /// operation start (`nodegroup_status`: the group's own, for node-group
    /// operations); else the Magnum-shaped refusal.
    pub(super) async fn cluster_allowing(
        &self,
        uuid: &str,
        op: plan::Checked,
        nodegroup_status: Option<&str>,
    ) -> Result<MagnumObject, StepError> {
        let row = self.cluster(uuid).await?;
        plan::check_status(
            op,
            row.get_str("status").unwrap_or_default(),
            nodegroup_status,
        )
        .map_err(StepError::Refused)?;
        Ok(row)
    }

    pub(super) async fn template(&self, cluster: &MagnumObject) -> Result<MagnumObject, DbError> {
        let id = cluster.get_str("cluster_template_id").unwrap_or_default();
        repo::get(&self.0.db, &CLUSTER_TEMPLATE, &Scope::admin(), id).await
    }

    pub(super) async fn nodegroups(&self, uuid: &str) -> Result<Vec<MagnumObject>, DbError> {
        repo::select(
            &self.0.db,
            &NODEGROUP,
            &Scope::admin(),
            &[("cluster_id", SqlValue::Str(uuid.into()))],
            None,
        )
        .await
    }

    pub(super) async fn save_cluster(
        &self,
        uuid: &str,
        changes: &[(&str, Value)],
    ) -> Result<MagnumObject, DbError> {
        repo::save(
            &self.0.db,
            &CLUSTER,
            uuid,
            &obj_with(&ovo::CLUSTER, changes),
        )
        .await
    }

    /// [`Engine::save_cluster`], saying which columns this call changed.
    pub(super) async fn save_cluster_changed(
        &self,
        uuid: &str,
        changes: &[(&str, Value)],
    ) -> Result<(MagnumObject, Vec<String>), DbError> {
        repo::save_changed(
            &self.0.db,
            &CLUSTER,
            uuid,
            &obj_with(&ovo::CLUSTER, changes),
        )
        .await
    }

    /// Save `changes` to a row only if it still holds what `read` holds
    /// (see [`repo::save_changed_if`]); `None`: it changed since, nothing
    /// written. The status worker's writes: decided from a read, they must
    /// not overwrite what an operation (on any conductor) wrote meanwhile.
    pub(super) async fn save_if_unchanged(
        &self,
        table: &common::db::model::Table,
        read: &MagnumObject,
        changes: &[(&str, Value)],
    ) -> Result<Option<Vec<String>>, DbError> {
        let class = if table.name == "cluster" {
            &ovo::CLUSTER
        } else {
            &ovo::NODE_GROUP
        };
        let uuid = read.get_str("uuid").unwrap_or_default();
        Ok(repo::save_changed_if(
            &self.0.db,
            table,
            uuid,
            &obj_with(class, changes),
            Some(read),
        )
        .await?
        .map(|(_, changed)| changed))
    }

    pub(super) async fn save_nodegroup(
        &self,
        uuid: &str,
        changes: &[(&str, Value)],
    ) -> Result<MagnumObject, DbError> {
        repo::save(
            &self.0.db,
            &NODEGROUP,
            uuid,
            &obj_with(&ovo::NODE_GROUP, changes),
        )
        .await
    }

    /// Every cluster row (all projects) with this status.
    pub(super) async fn clusters_in(&self, status: &str) -> Result<Vec<MagnumObject>, DbError> {
        repo::select(
            &self.0.db,
            &CLUSTER,
            &Scope::admin(),
            &[("status", SqlValue::Str(status.into()))],
            None,
        )
        .await
    }

    // ------------------------------------------------------- desired state

    /// What the management cluster should hold for these rows, given what
    /// it holds now (pure once the rows are read; see [`plan::desired`]).
    pub(super) fn desired(
        &self,
        cluster: &MagnumObject,
        template: &MagnumObject,
        ngs: &[MagnumObject],
        batch: Option<&Batch>,
    ) -> Result<(Desired, String), StepError> {
        let (mut input, network_driver) = rows::cluster_input(
            self.0.line,
            &self.0.capi.namespace_prefix,
            cluster,
            template,
            ngs,
        )
        .map_err(StepError::Invalid)?;
        input.api_proxy = uses_api_proxy(self.0.capi.api_proxy, &input);
        Ok((
            plan::desired(input, ngs, &self.observed(cluster), batch),
            network_driver,
        ))
    }

    /// The objects of `parts` for this input.
    fn render_parts(&self, input: &ClusterInput, parts: &Parts) -> Vec<Value> {
        let groups = |keys: &[String]| -> Vec<Value> {
            input
                .workers
                .iter()
                .filter(|g| keys.contains(&g.key))
                .flat_map(|g| render::render_group(input, g))
                .collect()
        };
        match parts {
            Parts::ControlPlaneAnd(keys) => {
                let mut out = render::render_control_plane(input);
                // An adopted cluster keeps its driver's autoscaler (it acts
                // on the same MachineDeployment annotations).
                if input.adopted.is_none() {
                    out.extend(autoscaler::render(input, &self.0.capi.autoscaler_image));
                }
                out.extend(groups(keys));
                out
            }
            Parts::Groups(keys) => groups(keys),
        }
    }

    /// Apply what the rows say for `parts` of the cluster (idempotent:
    /// server-side apply of the same objects changes nothing). `batch`: an
    /// upgrade's rollout for some groups. Returns the targets.
    pub(super) async fn converge(
        &self,
        uuid: &str,
        parts: Parts,
        batch: Option<&Batch>,
    ) -> Result<Desired, StepError> {
        let cluster = self.cluster(uuid).await?;
        let template = self.template(&cluster).await?;
        let ngs = self.nodegroups(uuid).await?;
        let (desired, _) = self.desired(&cluster, &template, &ngs, batch)?;
        if desired.input.adopted.as_ref().is_some_and(|a| a.topology) {
            // Its topology says it all (whichever parts were asked for).
            self.apply_topology(&cluster, &desired, &ngs).await?;
            return Ok(desired);
        }
        // A node group made since (or a server group deleted by hand).
        self.ensure_server_groups(&desired.input).await?;
        let objects = self.render_parts(&desired.input, &parts);
        self.apply_owned(&desired.input, objects, None).await?;
        Ok(desired)
    }

    /// Apply objects; a `Cluster` among them goes first, and everything else
    /// is owned by the cluster's CAPI Cluster (deleting it collects all).
    /// `owner`: the ownerReferences when already known. Returns them.
    pub(super) async fn apply_owned(
        &self,
        input: &ClusterInput,
        objects: Vec<Value>,
        owner: Option<Value>,
    ) -> Result<Option<Value>, StepError> {
        let (first, rest): (Vec<Value>, Vec<Value>) =
            objects.into_iter().partition(|o| o["kind"] == "Cluster");
        let mut owner = owner;
        let take_over = input.adopted.is_some();
        for o in &first {
            let stored = self.apply_object_as(o, take_over).await?;
            owner = Some(owner_refs(o["apiVersion"].as_str().unwrap_or(""), &stored)?);
        }
        if rest.is_empty() {
            return Ok(owner);
        }
        let owner = match owner {
            Some(o) => o,
            None => self.cluster_owner(input).await?,
        };
        for mut o in rest {
            let plain = owner.get(0).cloned().unwrap_or(Value::Null);
            o["metadata"]["ownerReferences"] = crate::capi::render::cluster_owner_refs(
                self.0.line,
                o["kind"].as_str().unwrap_or(""),
                &plain,
            );
            self.apply_object_as(&o, take_over).await?;
        }
        Ok(Some(owner))
    }

    /// The ownerReferences naming the CAPI Cluster (from the cache when it
    /// holds the Cluster's uid, else read from the apiserver).
    async fn cluster_owner(&self, input: &ClusterInput) -> Result<Value, StepError> {
        let av = capi_apiversion(self.0.line);
        let cached = self
            .0
            .watches
            .observed(&input.namespace, &input.stack_id)
            .cluster
            .and_then(|c| serde_json::from_value::<DynamicObject>(c).ok())
            .filter(|c| c.metadata.uid.as_deref().is_some_and(|u| !u.is_empty()));
        let stored = match cached {
            Some(c) => c,
            None => {
                let api = dynamic_api(&self.0.client, &input.namespace, av, "Cluster", "clusters");
                crate::mgmt::with_retries("get cluster", || api.get(&input.stack_id)).await?
            }
        };
        owner_refs(av, &stored)
    }

    /// Apply one rendered object; a refusal names the object (never its
    /// content). `take_over`: an adopted cluster's object, whose fields its
    /// driver (Helm) set: taken over, not a conflict.
    async fn apply_object_as(
        &self,
        o: &Value,
        take_over: bool,
    ) -> Result<DynamicObject, StepError> {
        let applied = if take_over {
            self.0.applier.apply_taking_over(o).await
        } else {
            self.0.applier.apply(o).await
        };
        applied.map_err(|e| {
            StepError::Invalid(format!(
                "the management cluster refused {} {}: {e}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            ))
        })
    }

    /// The update timeout clock of a cluster: minutes since its last
    /// progress (a new fingerprint resets it, and schedules a look when the
    /// timeout would expire, as no event may come).
    pub(super) fn stalled_minutes(&self, cluster: &MagnumObject, fingerprint: u64) -> u64 {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        let now = Instant::now();
        let since = {
            let mut m = match self.0.progress.lock() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            match m.get(&uuid) {
                Some((fp, since)) if *fp == fingerprint => *since,
                _ => {
                    m.insert(uuid, (fingerprint, now));
                    let timeout = self.0.capi.update_timeout;
                    if timeout > 0 {
                        let e = self.clone();
                        let c = cluster.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(timeout * 60 + 1)).await;
                            e.kick_cluster(&c);
                        });
                    }
                    now
                }
            }
        };
        now.duration_since(since).as_secs() / 60
    }

    /// Forget the progress clock of a cluster (its update ended).
    pub(super) fn progress_done(&self, uuid: &str) {
        if let Ok(mut m) = self.0.progress.lock() {
            m.remove(uuid);
        }
    }

    /// Clear the clock when an operation starts (a new update gets its full time).
    pub(super) fn progress_restart(&self, uuid: &str) {
        self.progress_done(uuid);
    }

    /// Magnum's `notify_about_cluster_operation` for the cluster `uuid` as
    /// its rows are now (nothing is read when notifications are off).
    pub(super) async fn notify_cluster(
        &self,
        ctx: Option<&rpc_schema::RequestContext>,
        action: crate::notify::Action,
        outcome: crate::notify::Outcome,
        uuid: &str,
    ) {
        if !self.0.notifier.enabled() {
            return;
        }
        let rows =
            async { Ok::<_, DbError>((self.cluster(uuid).await?, self.nodegroups(uuid).await?)) };
        match rows.await {
            Ok((c, ngs)) => self
                .0
                .notifier
                .cluster(ctx, action, outcome, Some((&c, &ngs))),
            Err(e) => {
                tracing::warn!(cluster = %uuid, error = %e, "notification without cluster data");
                self.0.notifier.cluster(ctx, action, outcome, None);
            }
        }
    }

    pub(super) fn count(&self, operation: &str, outcome: &str) {
        self.0
            .metrics
            .cluster_operations
            .with_label_values(&[operation, outcome])
            .inc();
    }
}

/// ownerReferences to a stored CAPI Cluster. The apiserver refuses an
/// ownerReference without a uid (422), so a Cluster read without one (which
/// an apiserver never returns) is an error here, not an object sent.
fn owner_refs(api_version: &str, stored: &DynamicObject) -> Result<Value, StepError> {
    let (Some(name), Some(uid)) = (
        stored.metadata.name.as_deref(),
        stored.metadata.uid.as_deref().filter(|u| !u.is_empty()),
    ) else {
        return Err(StepError::Invalid(format!(
            "the management cluster returned the CAPI Cluster {} without a uid",
            stored.metadata.name.as_deref().unwrap_or("?")
        )));
    };
    Ok(json!([{"apiVersion": api_version, "kind": "Cluster", "name": name, "uid": uid}]))
}

/// Whether a cluster asks for `magnum-capi-proxy` (pure): the proxy is on
/// (`[capi] api_proxy`) and its API has no floating IP
/// ([`ClusterInput::proxied`] also leaves adopted control planes out).
pub fn uses_api_proxy(enabled: bool, input: &ClusterInput) -> bool {
    enabled && !input.labels.api_lb_floating_ip
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(uid: Option<&str>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "k-1", "namespace": "magnum-p", "uid": uid},
        }))
        .unwrap()
    }

    #[test]
    fn owner_references_carry_the_clusters_uid_or_are_not_made() {
        let refs = owner_refs("cluster.x-k8s.io/v1beta1", &cluster(Some("4f2a"))).unwrap();
        assert_eq!(
            refs,
            json!([{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "k-1", "uid": "4f2a"}])
        );
        for missing in [None, Some("")] {
            let e = owner_refs("cluster.x-k8s.io/v1beta1", &cluster(missing)).unwrap_err();
            assert!(e.to_string().contains("without a uid"), "{e}");
        }
    }
}
