//! The cluster operations against the DB and the management cluster (I/O).
//!
//! `cluster_create` and `cluster_delete` do Magnum's bookkeeping, then drive
//! the management cluster; the status worker turns watch events into row
//! updates and finishes deletions. Nothing is held only in memory: a
//! restarted conductor reads the rows (`*_IN_PROGRESS`) and the caches and
//! carries on; every step is idempotent (rows by uuid, server-side apply,
//! deletes that accept "already gone"). One operation per cluster at a time
//! (a per-cluster lock), and the status worker takes the same lock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::certs::capi::{CertAndKey, ca_secrets};
use common::certs::store::{self, Owner};
use common::config::{CapiOpts, X509Opts};
use common::db::model::{CLUSTER, CLUSTER_TEMPLATE, NODEGROUP, SqlValue, X509KEYPAIR};
use common::db::repo::{self, Scope};
use common::db::{Db, DbError};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use rpc_schema::context::RequestContext;
use rpc_schema::ovo::{self, MagnumObject};
use rpc_schema::{Outcome, RemoteFailure};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::credentials::{CredentialError, Credentials};
use super::rows;
use super::sync;
use super::watch::{Kick, Watches};
use crate::capi::addons::{self, AddonCharts};
use crate::capi::naming;
use crate::capi::render::{self, CapiLine, UUID_LABEL};
use crate::capi::status;
use crate::handlers::DurableSignal;
use crate::metrics::Metrics;
use crate::mgmt::{Applier, MgmtError};

enum RowsRecorded {
    Yes,
    Pending,
    Lost,
}

/// How long a failed status pass waits before it is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Why a step failed: becomes `status_reason`.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Db(#[from] DbError),
    #[error("{0}")]
    Mgmt(#[from] MgmtError),
    #[error("{0}")]
    Credentials(#[from] CredentialError),
    #[error("{0}")]
    Certificates(String),
}

/// Why Magnum's create bookkeeping could not be recorded.
enum InsertError {
    /// A refusal to answer (the request itself is wrong).
    Failed(RemoteFailure),
    /// The database is unavailable: try the whole request again later.
    Unavailable(DbError),
}

impl From<DbError> for InsertError {
    fn from(e: DbError) -> InsertError {
        if e.is_transient() {
            InsertError::Unavailable(e)
        } else {
            InsertError::Failed(e.to_failure())
        }
    }
}

impl From<kube::Error> for StepError {
    fn from(e: kube::Error) -> StepError {
        StepError::Mgmt(MgmtError::Api(e))
    }
}

struct Inner {
    db: Db,
    x509: X509Opts,
    capi: CapiOpts,
    client: kube::Client,
    applier: Applier,
    line: CapiLine,
    watches: Watches,
    credentials: Credentials,
    metrics: Metrics,
    locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    kicks: mpsc::UnboundedSender<Kick>,
}

/// How long an acknowledged create that met a database outage waits
/// before it is driven again.
const RESUME_DELAY: Duration = Duration::from_secs(10);

/// The lifecycle engine: cloned into the RPC handlers.
#[derive(Clone)]
pub struct Engine(Arc<Inner>);

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("line", &self.0.line)
            .finish()
    }
}

fn obj_with(class: &'static ovo::ClassSpec, changes: &[(&str, Value)]) -> MagnumObject {
    let mut o = MagnumObject::new(class);
    for (k, v) in changes {
        if let Err(e) = o.set(k, v.clone()) {
            tracing::error!(field = k, error = %e, "cannot set field");
        }
    }
    o
}

fn capi_apiversion(line: CapiLine) -> &'static str {
    match line {
        CapiLine::V1beta1 => "cluster.x-k8s.io/v1beta1",
        CapiLine::V1beta2 => "cluster.x-k8s.io/v1beta2",
    }
}

impl Engine {
    /// Start the watches, the status worker and the startup resume.
    pub async fn start(
        db: Db,
        x509: X509Opts,
        capi: CapiOpts,
        client: kube::Client,
        line: CapiLine,
        credentials: Credentials,
        metrics: Metrics,
    ) -> Engine {
        let (tx, rx) = mpsc::unbounded_channel();
        let watches = Watches::spawn(client.clone(), line, tx.clone(), metrics.clone());
        let engine = Engine(Arc::new(Inner {
            db,
            x509,
            capi,
            applier: Applier::new(client.clone()),
            client,
            line,
            watches,
            credentials,
            metrics,
            locks: std::sync::Mutex::new(HashMap::new()),
            kicks: tx,
        }));
        tokio::spawn(engine.clone().status_worker(rx));
        let e = engine.clone();
        tokio::spawn(async move { e.resume().await });
        let e = engine.clone();
        tokio::spawn(async move { e.resync_loop().await });
        engine
    }

    fn lock(&self, uuid: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = match self.0.locks.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        m.retain(|_, l| Arc::strong_count(l) > 1);
        m.entry(uuid.to_string()).or_default().clone()
    }

    fn kick_cluster(&self, cluster: &MagnumObject) {
        if let Some(s) = cluster.get_str("stack_id") {
            let ns = naming::namespace(
                &self.0.capi.namespace_prefix,
                cluster.get_str("project_id").unwrap_or_default(),
            );
            let _ = self.0.kicks.send(Kick::Cluster(ns, s.to_string()));
        } else {
            let _ = self.0.kicks.send(Kick::Uuid(
                cluster.get_str("uuid").unwrap_or_default().to_string(),
            ));
        }
    }

    async fn nodegroups(&self, uuid: &str) -> Result<Vec<MagnumObject>, DbError> {
        repo::select(
            &self.0.db,
            &NODEGROUP,
            &Scope::admin(),
            &[("cluster_id", SqlValue::Str(uuid.into()))],
            None,
        )
        .await
    }

    async fn save_cluster(
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

    async fn save_nodegroup(
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

    // ----------------------------------------------------------------- create

    /// `cluster_create` (a cast): Magnum's rows, then the management cluster.
    pub async fn cluster_create(
        &self,
        ctx: &RequestContext,
        cast: MagnumObject,
        master_count: i64,
        node_count: i64,
        create_timeout: i64,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let Some(uuid) = cast.get_str("uuid").map(str::to_string) else {
            return failure(
                "InvalidParameterValue",
                "cluster_create without a cluster uuid",
            );
        };
        let lock = self.lock(&uuid);
        let _held = lock.lock().await;
        match self
            .insert_rows(&cast, master_count, node_count, create_timeout)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                // A redelivered cast for a cluster that has moved on.
                durable.recorded();
                return Outcome::Result(Value::Null);
            }
            Err(InsertError::Failed(f)) => return Outcome::Failure(f),
            Err(InsertError::Unavailable(e)) => {
                // Nothing to mark failed (maybe not even a row): the cast
                // goes back to the queue and runs again once the DB answers.
                tracing::warn!(%uuid, error = %e, "database unavailable while recording the cluster; retrying later");
                durable.retry_later();
                return Outcome::Failure(e.to_failure());
            }
        }
        crate::failpoint::hit("create.after_rows").await;
        // Acknowledged once the credentials exist (they need this request's
        // token); rows and everything after are idempotent on redelivery.
        let outcome = match self.drive_create(&uuid, Some(ctx), Some(durable)).await {
            Ok(()) => Outcome::Result(Value::Null),
            Err(f) => Outcome::Failure(f),
        };
        self.0
            .metrics
            .cluster_operations
            .with_label_values(&[
                "create",
                if matches!(outcome, Outcome::Result(_)) {
                    "started"
                } else {
                    "failed"
                },
            ])
            .inc();
        outcome
    }

    /// Steps 1-3 of Magnum's create. Returns false when the rows exist and
    /// the cluster is no longer CREATE_IN_PROGRESS (nothing to do).
    async fn insert_rows(
        &self,
        cast: &MagnumObject,
        master_count: i64,
        node_count: i64,
        create_timeout: i64,
    ) -> Result<bool, InsertError> {
        let db = &self.0.db;
        let uuid = cast.get_str("uuid").unwrap_or_default().to_string();
        let existing = repo::get(db, &CLUSTER, &Scope::admin(), &uuid).await;
        let cluster = match existing {
            Ok(c) if c.get_str("status") != Some(rows::CREATE_IN_PROGRESS) => return Ok(false),
            Ok(c) => c,
            Err(DbError::Magnum { .. }) => {
                let mut row =
                    rows::new_cluster_row(cast).map_err(|e| InsertError::Failed(invalid(&e)))?;
                if !row.is_set("create_timeout") {
                    row.set("create_timeout", json!(create_timeout))
                        .map_err(|e| InsertError::Failed(invalid(&e.to_string())))?;
                }
                let c = repo::create(db, &CLUSTER, &row)
                    .await
                    .map_err(InsertError::from)?;
                crate::failpoint::hit("create.after_cluster_row").await;
                c
            }
            Err(e) => return Err(e.into()),
        };
        let template_id = cluster
            .get_str("cluster_template_id")
            .unwrap_or_default()
            .to_string();
        let template = repo::get(db, &CLUSTER_TEMPLATE, &Scope::admin(), &template_id)
            .await
            .map_err(InsertError::from)?;
        let have = self.nodegroups(&uuid).await.map_err(InsertError::from)?;
        for (master, count) in [(true, master_count), (false, node_count)] {
            let name = if master {
                "default-master"
            } else {
                "default-worker"
            };
            if have.iter().any(|n| n.get_str("name") == Some(name)) {
                continue;
            }
            let ng = match rows::default_nodegroup(
                &cluster,
                &template,
                count,
                master,
                &uuid::Uuid::new_v4().to_string(),
            ) {
                Ok(ng) => ng,
                Err(reason) => {
                    // Magnum raises here and leaves the cluster
                    // CREATE_IN_PROGRESS forever; we report it.
                    self.fail(&uuid, "CREATE_FAILED", &reason).await;
                    return Err(InsertError::Failed(invalid(&reason)));
                }
            };
            repo::create(db, &NODEGROUP, &ng)
                .await
                .map_err(InsertError::from)?;
        }
        Ok(true)
    }

    async fn fail(&self, uuid: &str, status: &str, reason: &str) {
        tracing::warn!(cluster = %uuid, status, reason, "cluster operation failed");
        if let Err(e) = self
            .save_cluster(
                uuid,
                &[("status", json!(status)), ("status_reason", json!(reason))],
            )
            .await
        {
            tracing::error!(cluster = %uuid, error = %e, "cannot record the failure");
        }
    }

    /// Step 4 onwards, resumable: certificates, stack_id, credentials,
    /// namespace, Secrets, objects. Failures become CREATE_FAILED.
    async fn drive_create(
        &self,
        uuid: &str,
        ctx: Option<&RequestContext>,
        durable: Option<&mut DurableSignal>,
    ) -> Result<(), RemoteFailure> {
        let mut durable = durable;
        match self.create_steps(uuid, ctx, durable.as_deref_mut()).await {
            Ok(()) => Ok(()),
            Err(StepError::Credentials(CredentialError::NeedsRequest)) => {
                tracing::info!(cluster = %uuid, "create resumed before its credentials existed; waiting for the redelivered cast");
                Ok(())
            }
            Err(StepError::Db(d)) if d.is_transient() => {
                // Not a reason to fail the cluster: every step is idempotent.
                match durable {
                    // Not acknowledged yet: the redelivered cast resumes it.
                    Some(sig) if sig.is_pending() => {
                        tracing::warn!(cluster = %uuid, error = %d, "database unavailable during create; retrying later");
                        sig.retry_later();
                    }
                    _ => self.resume_create_later(uuid, &d),
                }
                Err(d.to_failure())
            }
            Err(e) => {
                let reason = e.to_string();
                self.fail(uuid, "CREATE_FAILED", &reason).await;
                Err(match e {
                    StepError::Db(d) => d.to_failure(),
                    _ => invalid(&reason),
                })
            }
        }
    }

    /// The database failed during an acknowledged create: drive it again
    /// after a pause (again and again while the outage lasts; the create
    /// timeout still bounds it), instead of waiting for a restart.
    fn resume_create_later(&self, uuid: &str, error: &DbError) {
        tracing::warn!(cluster = %uuid, %error, retry_in_s = RESUME_DELAY.as_secs(), "database unavailable during create; resuming later");
        let engine = self.clone();
        let uuid = uuid.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(RESUME_DELAY).await;
            let lock = engine.lock(&uuid);
            let _held = lock.lock().await;
            let _ = Box::pin(engine.drive_create(&uuid, None, None)).await;
        });
    }

    async fn create_steps(
        &self,
        uuid: &str,
        ctx: Option<&RequestContext>,
        durable: Option<&mut DurableSignal>,
    ) -> Result<(), StepError> {
        let db = &self.0.db;
        let mut cluster = repo::get(db, &CLUSTER, &Scope::admin(), uuid).await?;
        if cluster.get_str("status") != Some(rows::CREATE_IN_PROGRESS) {
            return Ok(());
        }
        let mut pending = Vec::new();
        // (b) certificates, unless a previous run stored them.
        let refs = [
            "ca_cert_ref",
            "etcd_ca_cert_ref",
            "front_proxy_ca_cert_ref",
            "magnum_cert_ref",
        ];
        if refs.iter().any(|r| cluster.get_str(r).is_none()) {
            let owner = Owner {
                project_id: cluster.get_str("project_id").map(str::to_string),
                user_id: cluster.get_str("user_id").map(str::to_string),
            };
            // Leftovers of an interrupted earlier run (stored, refs never
            // saved) carry the same derived uuids: replace them.
            let uuids = store::cluster_keypair_uuids(uuid);
            for u in &uuids {
                destroy_if_present(db, &X509KEYPAIR, u).await?;
            }
            crate::ca::generate_certificates_to_cluster(
                db,
                &self.0.x509,
                &owner,
                &mut cluster,
                Some(uuids),
            )
            .await
            .map_err(|e| match e {
                crate::ca::ToClusterError::Failed(f) => StepError::Certificates(f.message),
                crate::ca::ToClusterError::Unavailable(d) => StepError::Db(d),
            })?;
            crate::failpoint::hit("create.after_keypairs").await;
            for r in refs {
                pending.push((r, cluster.get(r).cloned().unwrap_or(Value::Null)));
            }
        }
        // (c) stack_id, saved with the refs.
        if cluster.get_str("stack_id").is_none() {
            let short = common::short_id::generate_id();
            let s = naming::stack_id(cluster.get_str("name"), &short);
            cluster
                .set("stack_id", json!(s))
                .map_err(|e| StepError::Invalid(e.to_string()))?;
            pending.push(("stack_id", json!(s)));
        }
        if !pending.is_empty() {
            cluster = self.save_cluster(uuid, &pending).await?;
        }
        let stack_id = cluster.get_str("stack_id").unwrap_or_default().to_string();
        let mut ngs = self.nodegroups(uuid).await?;
        for ng in &mut ngs {
            if ng.get_str("stack_id") != Some(stack_id.as_str()) {
                let u = ng.get_str("uuid").unwrap_or_default().to_string();
                *ng = self
                    .save_nodegroup(&u, &[("stack_id", json!(stack_id))])
                    .await?;
            }
        }
        crate::failpoint::hit("create.after_stack_id").await;
        // (d) what to create.
        let template_id = cluster
            .get_str("cluster_template_id")
            .unwrap_or_default()
            .to_string();
        let template = repo::get(db, &CLUSTER_TEMPLATE, &Scope::admin(), &template_id).await?;
        let (input, network_driver) = rows::cluster_input(
            self.0.line,
            &self.0.capi.namespace_prefix,
            &cluster,
            &template,
            &ngs,
        )
        .map_err(StepError::Invalid)?;
        // (e) namespace, credentials, CA secrets, objects.
        self.0
            .applier
            .apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": input.namespace}}))
            .await?;
        let cloud = self
            .0
            .credentials
            .for_cluster(
                &self.0.client,
                &input,
                cluster.get_str("name").unwrap_or(uuid),
                ctx,
            )
            .await?;
        let creds = addons::credentials_secret(
            &input,
            &cloud,
            &self.0.credentials.interface,
            self.0.credentials.verify,
        );
        self.0.applier.apply(&creds.manifest).await?;
        if let Some(d) = durable {
            d.recorded();
        }
        let mut objects = render::render(&input);
        objects.extend(addons::render(
            &input,
            &network_driver,
            &AddonCharts::from(&self.0.capi),
            &cloud,
        ));
        // The Cluster first: everything else is owned by it, so deleting
        // the Cluster collects all of it (HelmChartProxies and templates
        // included, which CAPI itself does not own). The clouds.yaml Secret
        // is not owned: CAPO needs it until the very end, and we remove it.
        let (first, rest): (Vec<Value>, Vec<Value>) =
            objects.into_iter().partition(|o| o["kind"] == "Cluster");
        let mut owner = None;
        for o in &first {
            let stored = self.apply_object(o).await?;
            owner = Some(json!([{
                "apiVersion": o["apiVersion"], "kind": "Cluster",
                "name": stored.metadata.name, "uid": stored.metadata.uid,
            }]));
        }
        let owned = |mut v: Value| {
            if let Some(refs) = &owner {
                v["metadata"]["ownerReferences"] = refs.clone();
            }
            v
        };
        for s in self.ca_secrets(&cluster, &input).await? {
            self.0.applier.apply(&owned(s.manifest)).await?;
        }
        crate::failpoint::hit("create.mid_apply").await;
        for o in &rest {
            self.apply_object(&owned(o.clone())).await?;
        }
        let objects = first.len() + rest.len();
        tracing::info!(cluster = %uuid, stack_id = %stack_id, namespace = %input.namespace, objects, "cluster objects applied");
        self.schedule_timeout(&cluster);
        self.kick_cluster(&cluster);
        Ok(())
    }

    /// Apply one rendered object; a refusal names the object (never its content).
    async fn apply_object(&self, o: &Value) -> Result<DynamicObject, StepError> {
        self.0.applier.apply(o).await.map_err(|e| {
            StepError::Invalid(format!(
                "the management cluster refused {} {}: {e}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            ))
        })
    }

    async fn ca_secrets(
        &self,
        cluster: &MagnumObject,
        input: &render::ClusterInput,
    ) -> Result<Vec<common::certs::capi::RenderedSecret>, StepError> {
        let db = &self.0.db;
        let mut pairs = Vec::new();
        for r in [
            "ca_cert_ref",
            "etcd_ca_cert_ref",
            "front_proxy_ca_cert_ref",
            "magnum_cert_ref",
        ] {
            let kp = store::get_cert(db, &Scope::admin(), cluster.get_str(r)).await?;
            let key =
                store::private_key(&kp).map_err(|e| StepError::Certificates(e.to_string()))?;
            pairs.push((kp.certificate, key));
        }
        let labels: BTreeMap<String, String> = [
            (UUID_LABEL.to_string(), input.cluster_uuid.clone()),
            (render::PROJECT_LABEL.to_string(), input.project_id.clone()),
        ]
        .into_iter()
        .collect();
        let ck = |i: usize| CertAndKey {
            certificate: &pairs[i].0,
            key: &pairs[i].1,
        };
        Ok(ca_secrets(
            &input.stack_id,
            &input.namespace,
            &labels,
            ck(0),
            ck(1),
            ck(2),
            ck(3),
        ))
    }

    /// Kick the cluster when its `create_timeout` expires (no event may come).
    fn schedule_timeout(&self, cluster: &MagnumObject) {
        let minutes = cluster.get_i64("create_timeout").unwrap_or(0);
        if minutes <= 0 {
            return;
        }
        let left = chrono::Duration::minutes(minutes) - age(cluster);
        let wait = left.to_std().unwrap_or_default() + Duration::from_secs(1);
        let e = self.clone();
        let c = cluster.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            e.kick_cluster(&c);
        });
    }

    // ----------------------------------------------------------------- delete

    /// `cluster_delete` (a cast): nodegroups DELETE_IN_PROGRESS, delete the
    /// CAPI Cluster, cluster DELETE_IN_PROGRESS; the status worker finishes.
    pub async fn cluster_delete(
        &self,
        ctx: &RequestContext,
        uuid: &str,
        durable: &mut DurableSignal,
    ) -> Outcome {
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
        let lock = self.lock(&uuid);
        let _held = lock.lock().await;
        let result = self.delete_steps(&cluster).await;
        self.0
            .metrics
            .cluster_operations
            .with_label_values(&["delete", if result.is_ok() { "started" } else { "failed" }])
            .inc();
        match result {
            Ok(c) => {
                durable.recorded();
                crate::failpoint::hit("delete.after_ack").await;
                self.kick_cluster(&c);
                Outcome::Result(Value::Null)
            }
            Err(StepError::Db(e)) if e.is_transient() => {
                // Every delete step is idempotent: run them again later.
                tracing::warn!(%uuid, error = %e, "database unavailable while deleting; retrying later");
                durable.retry_later();
                Outcome::Failure(e.to_failure())
            }
            Err(e) => {
                let reason = e.to_string();
                self.fail(&uuid, "DELETE_FAILED", &reason).await;
                durable.recorded();
                Outcome::Failure(match e {
                    StepError::Db(d) => d.to_failure(),
                    _ => invalid(&reason),
                })
            }
        }
    }

    async fn delete_steps(&self, cluster: &MagnumObject) -> Result<MagnumObject, StepError> {
        let uuid = cluster.get_str("uuid").unwrap_or_default();
        for ng in self.nodegroups(uuid).await? {
            let u = ng.get_str("uuid").unwrap_or_default().to_string();
            self.save_nodegroup(&u, &[("status", json!("DELETE_IN_PROGRESS"))])
                .await?;
        }
        crate::failpoint::hit("delete.before_capi_delete").await;
        self.delete_capi_cluster(cluster).await?;
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

    async fn delete_capi_cluster(&self, cluster: &MagnumObject) -> Result<(), StepError> {
        let Some(stack_id) = cluster.get_str("stack_id") else {
            return Ok(());
        };
        let ns = naming::namespace(
            &self.0.capi.namespace_prefix,
            cluster.get_str("project_id").unwrap_or_default(),
        );
        let av = capi_apiversion(self.0.line);
        let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, "Cluster"),
            "clusters",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(self.0.client.clone(), &ns, &ar);
        let dp = DeleteParams::background();
        match crate::mgmt::with_retries("delete cluster", || api.delete(stack_id, &dp)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// After the CAPI Cluster is gone: credentials, Secrets, all four
    /// keypairs, nodegroup rows, the cluster row.
    async fn finish_delete(&self, cluster: &MagnumObject) -> Result<(), StepError> {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        let ns = naming::namespace(
            &self.0.capi.namespace_prefix,
            cluster.get_str("project_id").unwrap_or_default(),
        );
        if let Err(e) = self
            .0
            .credentials
            .release(&self.0.client, &ns, cluster)
            .await
        {
            // Magnum's capi-helm puts this in status_reason and completes.
            tracing::warn!(cluster = %uuid, error = %e, "application credential not deleted");
        }
        // Our Secrets (the CA pairs and clouds.yaml); CAPI's own are owned
        // by the Cluster and already collected.
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.0.client.clone(), &ns);
        let lp = ListParams::default().labels(&format!("{UUID_LABEL}={uuid}"));
        let listed =
            crate::mgmt::with_retries("list secrets", || secrets.list_metadata(&lp)).await?;
        let dp = DeleteParams::default();
        for s in listed.items {
            let Some(name) = s.metadata.name else {
                continue;
            };
            match crate::mgmt::with_retries("delete secret", || secrets.delete(&name, &dp)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.save_cluster(
            &uuid,
            &[
                ("status", json!("DELETE_COMPLETE")),
                ("status_reason", Value::Null),
            ],
        )
        .await?;
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
        self.0
            .metrics
            .cluster_operations
            .with_label_values(&["delete", "complete"])
            .inc();
        tracing::info!(cluster = %uuid, "cluster deleted");
        Ok(())
    }

    // ----------------------------------------------------------------- status

    async fn status_worker(self, mut rx: mpsc::UnboundedReceiver<Kick>) {
        self.0.watches.wait_ready().await;
        tracing::info!("management cluster caches synced");
        while let Some(first) = rx.recv().await {
            // Coalesce a burst of events into one pass per cluster.
            let mut batch: HashSet<Kick> = HashSet::from([first]);
            while let Ok(k) = rx.try_recv() {
                batch.insert(k);
            }
            if batch.contains(&Kick::All) {
                batch = self.all_in_progress().await;
            }
            for k in batch {
                if let Err(e) = self.reconcile(&k).await {
                    self.0.metrics.status_errors.inc();
                    tracing::warn!(kick = ?k, error = %e, "status update failed; retrying in {RETRY:?}");
                    let kicks = self.0.kicks.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(RETRY).await;
                        let _ = kicks.send(k);
                    });
                }
            }
        }
    }

    /// Every cluster the DB or the caches say needs a look.
    async fn all_in_progress(&self) -> HashSet<Kick> {
        let mut out: HashSet<Kick> = self
            .0
            .watches
            .clusters()
            .into_iter()
            .map(|(ns, n)| Kick::Cluster(ns, n))
            .collect();
        for status in [
            "CREATE_IN_PROGRESS",
            "UPDATE_IN_PROGRESS",
            "DELETE_IN_PROGRESS",
            "DELETE_COMPLETE",
        ] {
            match self.clusters_in(status).await {
                Ok(cs) => out.extend(
                    cs.iter()
                        .map(|c| Kick::Uuid(c.get_str("uuid").unwrap_or_default().to_string())),
                ),
                Err(e) => tracing::warn!(error = %e, "cannot list clusters for the resync"),
            }
        }
        out
    }

    async fn reconcile(&self, k: &Kick) -> Result<(), StepError> {
        let db = &self.0.db;
        let found = match k {
            Kick::All => return Ok(()),
            Kick::Uuid(u) => repo::get(db, &CLUSTER, &Scope::admin(), u).await.ok(),
            Kick::Cluster(ns, name) => repo::select(
                db,
                &CLUSTER,
                &Scope::admin(),
                &[("stack_id", SqlValue::Str(name.clone()))],
                None,
            )
            .await?
            .into_iter()
            .find(|c| {
                naming::namespace(
                    &self.0.capi.namespace_prefix,
                    c.get_str("project_id").unwrap_or_default(),
                ) == *ns
            }),
        };
        let Some(cluster) = found else { return Ok(()) };
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        let lock = self.lock(&uuid);
        let _held = lock.lock().await;
        // Re-read under the lock: an operation may have just changed it.
        let cluster = match repo::get(db, &CLUSTER, &Scope::admin(), &uuid).await {
            Ok(c) => c,
            Err(DbError::Magnum { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let ngs = self.nodegroups(&uuid).await?;
        let status_now = cluster.get_str("status").unwrap_or_default().to_string();
        let op = sync::operation(&status_now);
        let observed = match cluster.get_str("stack_id") {
            Some(s) => self.0.watches.observed(
                &naming::namespace(
                    &self.0.capi.namespace_prefix,
                    cluster.get_str("project_id").unwrap_or_default(),
                ),
                s,
            ),
            None => status::Observed::default(),
        };
        let workers: Vec<String> = ngs
            .iter()
            .filter(|n| n.get_str("role") != Some("master"))
            .filter_map(|n| n.get_str("name").map(str::to_string))
            .collect();
        let elapsed_min = age(&cluster).num_minutes().max(0) as u64;
        let timeout = cluster.get_i64("create_timeout").unwrap_or(0).max(0) as u64;
        let view = status::map(
            op.unwrap_or(status::Operation::Update),
            &observed,
            &workers,
            elapsed_min,
            timeout,
        );
        // DELETE_COMPLETE with rows left: a conductor died while removing them.
        let deleting = op == Some(status::Operation::Delete) || status_now == "DELETE_COMPLETE";
        if deleting && observed.cluster.is_none() {
            return self.finish_delete(&cluster).await;
        }
        if op == Some(status::Operation::Create)
            && observed.cluster.is_none()
            && cluster.get_str("stack_id").is_none()
        {
            // Not applied yet (the create operation is running or resuming).
            return Ok(());
        }
        let ch = sync::changes(&cluster, &ngs, &view, observed.cluster.is_some());
        if ch.is_empty() {
            return Ok(());
        }
        if !ch.cluster.is_empty() {
            self.save_cluster(&uuid, &ch.cluster).await?;
        }
        for (ng, c) in &ch.nodegroups {
            self.save_nodegroup(ng, c).await?;
        }
        self.0.metrics.status_writes.inc();
        if let Some((_, s)) = ch.cluster.iter().find(|(f, _)| *f == "status") {
            tracing::info!(cluster = %uuid, from = %status_now, to = %s, reason = ?view.status_reason, "cluster status");
        }
        Ok(())
    }

    // ----------------------------------------------------------------- resume

    /// Every cluster row (all projects) with this status.
    async fn clusters_in(&self, status: &str) -> Result<Vec<MagnumObject>, DbError> {
        repo::select(
            &self.0.db,
            &CLUSTER,
            &Scope::admin(),
            &[("status", SqlValue::Str(status.into()))],
            None,
        )
        .await
    }

    /// Clusters left `CREATE_IN_PROGRESS`, `DELETE_IN_PROGRESS` or
    /// `DELETE_COMPLETE` (rows not yet removed) by a previous conductor:
    /// finish their operation. A database outage at this moment does not
    /// leave them behind: the list (and each cluster's resume) is tried again
    /// every `RESUME_DELAY` while the error is transient.
    async fn resume(&self) {
        crate::failpoint::hit("resume.before_list").await;
        for (status, what) in [
            ("CREATE_IN_PROGRESS", "create"),
            ("DELETE_IN_PROGRESS", "delete"),
            ("DELETE_COMPLETE", "delete"),
        ] {
            let clusters = loop {
                match self.clusters_in(status).await {
                    Ok(c) => break c,
                    Err(e) if e.is_transient() => {
                        tracing::warn!(error = %e, status, retry_in_s = RESUME_DELAY.as_secs(),
                            "database unavailable: cannot list clusters to resume yet");
                        tokio::time::sleep(RESUME_DELAY).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, status, "cannot list clusters to resume");
                        break Vec::new();
                    }
                }
            };
            for c in clusters {
                let uuid = c.get_str("uuid").unwrap_or_default().to_string();
                tracing::info!(cluster = %uuid, operation = what, "resuming");
                self.0
                    .metrics
                    .cluster_operations
                    .with_label_values(&[what, "resumed"])
                    .inc();
                self.resume_one(&c, what).await;
            }
        }
    }

    /// Resume one cluster's operation (see `resume`).
    async fn resume_one(&self, c: &MagnumObject, what: &'static str) {
        let uuid = c.get_str("uuid").unwrap_or_default().to_string();
        let lock = self.lock(&uuid);
        let _held = lock.lock().await;
        if what == "create" {
            match self.rows_recorded(c).await {
                Ok(RowsRecorded::Yes) => {
                    let _ = self.drive_create(&uuid, None, None).await;
                }
                Ok(RowsRecorded::Pending) => {
                    // Killed between the cluster row and its nodegroups: the
                    // cast was not acknowledged and comes back from the
                    // broker; it finishes the rows.
                    tracing::info!(cluster = %uuid, "create interrupted before its nodegroups were recorded; waiting for the redelivered cast");
                    return;
                }
                Ok(RowsRecorded::Lost) => {
                    self.fail(
                        &uuid,
                        "CREATE_FAILED",
                        "the conductor stopped before the cluster's nodegroups were recorded, and the request did not come back",
                    )
                    .await;
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(cluster = %uuid, error = %e, retry_in_s = RESUME_DELAY.as_secs(), "database unavailable: resuming later");
                    self.resume_one_later(c, what);
                    return;
                }
                Err(e) => tracing::warn!(cluster = %uuid, error = %e, "cannot resume"),
            }
        } else if let Err(e) = self.delete_capi_cluster(c).await {
            tracing::warn!(cluster = %uuid, error = %e, "cannot delete the CAPI cluster; will retry at the next resync");
        }
        self.kick_cluster(c);
    }

    fn resume_one_later(&self, c: &MagnumObject, what: &'static str) {
        let engine = self.clone();
        let c = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RESUME_DELAY).await;
            Box::pin(engine.resume_one(&c, what)).await;
        });
    }

    /// Whether a CREATE_IN_PROGRESS cluster has both default nodegroups
    /// (the cast is acknowledged only then).
    async fn rows_recorded(&self, c: &MagnumObject) -> Result<RowsRecorded, DbError> {
        let uuid = c.get_str("uuid").unwrap_or_default();
        let ngs = self.nodegroups(uuid).await?;
        let has = |n: &str| ngs.iter().any(|g| g.get_str("name") == Some(n));
        if has("default-master") && has("default-worker") {
            return Ok(RowsRecorded::Yes);
        }
        // A redelivery arrives within seconds of the broker noticing the
        // dead consumer; after this long it is not coming.
        if age(c) > chrono::Duration::minutes(10) {
            Ok(RowsRecorded::Lost)
        } else {
            Ok(RowsRecorded::Pending)
        }
    }

    /// The safety net: a full pass every `[capi] resync_interval` seconds.
    async fn resync_loop(&self) {
        let every = Duration::from_secs(self.0.capi.resync_interval.max(30));
        loop {
            tokio::time::sleep(every).await;
            let _ = self.0.kicks.send(Kick::All);
        }
    }
}

/// Time since the row's `created_at` (zero if unreadable).
fn age(row: &MagnumObject) -> chrono::Duration {
    row.get_str("created_at")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .unwrap_or_default()
}

/// DELETE a row by uuid; already gone is fine.
async fn destroy_if_present(
    db: &Db,
    table: &'static common::db::model::Table,
    uuid: &str,
) -> Result<(), StepError> {
    match repo::destroy(db, table, uuid).await {
        Ok(()) | Err(DbError::Magnum { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn invalid(msg: &str) -> RemoteFailure {
    RemoteFailure::magnum_with_message("InvalidParameterValue", msg, serde_json::Map::new())
}

fn failure(class: &'static str, msg: &str) -> Outcome {
    Outcome::Failure(RemoteFailure::magnum_with_message(
        class,
        msg,
        serde_json::Map::new(),
    ))
}
