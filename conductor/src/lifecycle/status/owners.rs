//! Which clusters this conductor may touch (the rules are pure, in
//! [`crate::ownership`]): the owner of a cluster's template, cached a
//! minute per template, and the management cluster's evidence (a CAPI
//! Cluster where we would put this one's that does not name it).
//!
//! Every way into a cluster asks first: the RPC handlers
//! ([`Engine::refuse_foreign`], before any Lease, row or object), the
//! status passes and the startup resume ([`Engine::leaves_alone`]). A
//! cluster of another driver gets no CAPI write, no row write, no
//! credential and no Lease from here.

use std::time::{Duration, Instant};

use common::db::DbError;
use common::db::model::{CLUSTER, CLUSTER_TEMPLATE};
use common::db::repo::{self, Scope};
use rpc_schema::ovo::MagnumObject;
use rpc_schema::{Outcome, RemoteFailure};
use serde_json::{Map, Value};

use crate::handlers::DurableSignal;
use crate::lifecycle::engine::Engine;
use crate::ownership::{self, Owner, TemplateKey};

/// How long a template's owner is trusted (Magnum lets a template in use
/// change only its name, visibility and tags; an operator's edit of its
/// `driver` is seen within this).
const TEMPLATE_OWNER_TTL: Duration = Duration::from_secs(60);

impl Engine {
    /// The owner of the clusters of template `uuid`.
    pub(in crate::lifecycle) async fn template_owner(&self, uuid: &str) -> Result<Owner, DbError> {
        {
            let m = match self.0.owners.lock() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            if let Some((o, at)) = m.get(uuid)
                && at.elapsed() < TEMPLATE_OWNER_TTL
            {
                return Ok(o.clone());
            }
        }
        let owner = match repo::get(&self.0.db, &CLUSTER_TEMPLATE, &Scope::admin(), uuid).await {
            Ok(t) => ownership::owner(&TemplateKey::from_fields(|k| t.get_str(k)), &self.0.drivers),
            Err(DbError::Magnum { .. }) => {
                Owner::Unknown(format!("its cluster template {uuid} does not exist"))
            }
            Err(e) => return Err(e),
        };
        let mut m = match self.0.owners.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        m.retain(|_, (_, at)| at.elapsed() < TEMPLATE_OWNER_TTL);
        m.insert(uuid.to_string(), (owner.clone(), Instant::now()));
        Ok(owner)
    }

    /// The owner of `cluster` (its row, or the object a create carries).
    pub async fn owner(&self, cluster: &MagnumObject) -> Result<Owner, DbError> {
        let template = cluster.get_str("cluster_template_id").unwrap_or_default();
        let owner = self.template_owner(template).await?;
        if !owner.is_ours() {
            return Ok(owner);
        }
        if let Some(stack) = cluster.get_str("stack_id") {
            let uuid = cluster.get_str("uuid").unwrap_or_default();
            let ns = self.namespace_of(cluster);
            let found = self.0.watches.uuid_of(&ns, stack);
            if ownership::created_elsewhere(uuid, found.as_ref().map(Option::as_deref)) {
                return Ok(Owner::Unknown(format!(
                    "the CAPI Cluster {ns}/{stack} was not created by this conductor for it (it \
                     has no magnum.openstack.org/cluster-uuid label naming it)"
                )));
            }
        }
        Ok(owner)
    }

    /// Count and log that `what` (an RPC method, `status`, `resume`) left
    /// cluster `uuid` of `owner` alone.
    pub(in crate::lifecycle) fn skipped(&self, what: &str, uuid: &str, owner: &Owner) {
        self.0
            .metrics
            .foreign_clusters
            .with_label_values(&[what, owner.driver()])
            .inc();
        tracing::info!(cluster = %uuid, %what, driver = owner.driver(),
            "cluster of another driver: left untouched");
    }

    /// Whether the status worker or the resume leaves `cluster` alone
    /// (another driver's: counted and logged). An error (the database)
    /// decides nothing: the caller tries again later.
    pub(in crate::lifecycle) async fn leaves_alone(
        &self,
        what: &str,
        cluster: &MagnumObject,
    ) -> Result<bool, DbError> {
        let o = self.owner(cluster).await?;
        if o.is_ours() {
            return Ok(false);
        }
        self.skipped(what, cluster.get_str("uuid").unwrap_or_default(), &o);
        Ok(true)
    }

    /// Before a request on cluster `uuid` does anything: None if the
    /// cluster is ours (or has no row: the operation answers that);
    /// otherwise the failure to answer (`ClusterDriverNotSupported`, as a
    /// Python conductor without the cluster's driver answers). `object`:
    /// what the request carries, judged when there is no row yet (a
    /// create). `new_template`: an upgrade's target, which must be ours
    /// too. A database outage sends a cast back to the queue.
    pub async fn refuse_foreign(
        &self,
        method: &str,
        uuid: &str,
        object: Option<&MagnumObject>,
        new_template: Option<&str>,
        durable: &mut DurableSignal,
    ) -> Option<Outcome> {
        let owner = match self.owner_of_request(uuid, object).await {
            Ok(Some(o)) => o,
            Ok(None) => return None,
            Err(e) => return Some(self.unreadable(method, uuid, e, durable)),
        };
        let refusal = match owner.refusal(uuid) {
            Some(r) => Some((owner, r)),
            None => match new_template {
                Some(t) => match self.template_owner(t).await {
                    Ok(o) if o.is_ours() => None,
                    Ok(o) => {
                        let why = format!(
                            "Cluster driver ({}) not supported. Cluster template {t} belongs to \
                             the {} driver: cluster {uuid} cannot move to it.",
                            o.driver(),
                            o.driver()
                        );
                        Some((o, why))
                    }
                    Err(e) => return Some(self.unreadable(method, uuid, e, durable)),
                },
                None => None,
            },
        }?;
        let (owner, message) = refusal;
        self.skipped(method, uuid, &owner);
        let mut kwargs = Map::new();
        kwargs.insert("driver_name".into(), Value::String(owner.driver().into()));
        Some(Outcome::Failure(RemoteFailure::magnum_with_message(
            "ClusterDriverNotSupported",
            &message,
            kwargs,
        )))
    }

    /// The owner of the cluster a request is about: its row's, else (no
    /// row yet: a create) that of the object the request carries; None
    /// when there is neither.
    pub async fn owner_of_request(
        &self,
        uuid: &str,
        object: Option<&MagnumObject>,
    ) -> Result<Option<Owner>, DbError> {
        let row = match repo::get(&self.0.db, &CLUSTER, &Scope::admin(), uuid).await {
            Ok(r) => Some(r),
            Err(DbError::Magnum { .. }) => None,
            Err(e) => return Err(e),
        };
        match row.as_ref().or(object) {
            Some(c) => self.owner(c).await.map(Some),
            None => Ok(None),
        }
    }

    fn unreadable(
        &self,
        method: &str,
        uuid: &str,
        e: DbError,
        durable: &mut DurableSignal,
    ) -> Outcome {
        if e.is_transient() {
            tracing::warn!(cluster = %uuid, %method, error = %e,
                "database unavailable while deciding the cluster's driver; retrying later");
            durable.retry_later();
        }
        Outcome::Failure(e.to_failure())
    }
}
