//! The step runner every cluster operation runs on.
//!
//! An operation is a short sequence of idempotent steps (Magnum's row
//! bookkeeping, then server-side applies); [`Run`] gives it what they all
//! need, in one place:
//!
//! - **the lock**: one operation (or status pass) per cluster at a time,
//!   held for the whole run;
//! - **the acknowledgement**: [`Run::recorded`] once the first durable
//!   effect is written (the broker redelivers a request that never got
//!   there);
//! - **failure bookkeeping**: each operation declares up front what Magnum
//!   writes when it fails ([`OnFailure`]: statuses, `status_reason`, a
//!   `node_count` to restore), and [`Run::finish`] writes it;
//! - **outcomes**: a refusal ([`StepError::Refused`]) changes nothing and
//!   is answered as is; a database outage is never a failure: a request
//!   not yet acknowledged goes back to the broker, one already
//!   acknowledged is resumed from the rows after a pause;
//! - **metrics**: `cluster_operations_total{operation,outcome}`.
//!
//! What each failure writes is decided by [`failure_writes`] (pure).

use std::time::Duration;

use rpc_schema::Outcome;
use serde_json::{Value, json};

use super::engine::Engine;
use super::error::StepError;
use crate::handlers::DurableSignal;

/// How long an acknowledged operation that met a database outage waits
/// before it is driven again.
pub(super) const RESUME_DELAY: Duration = Duration::from_secs(10);

/// The operations, as counted in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Delete,
    Update,
    Resize,
    Upgrade,
    NodegroupCreate,
    NodegroupUpdate,
    NodegroupDelete,
    CredentialRotate,
}

impl Op {
    /// The CADF action Magnum notifies for this operation (nodegroup
    /// operations notify nothing in Magnum).
    pub fn notified(self) -> Option<crate::notify::Action> {
        use crate::notify::Action;
        match self {
            Op::Create => Some(Action::Create),
            Op::Delete => Some(Action::Delete),
            Op::Update | Op::Resize | Op::Upgrade => Some(Action::Update),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Delete => "delete",
            Op::Update => "update",
            Op::Resize => "resize",
            Op::Upgrade => "upgrade",
            Op::NodegroupCreate => "nodegroup_create",
            Op::NodegroupUpdate => "nodegroup_update",
            Op::NodegroupDelete => "nodegroup_delete",
            Op::CredentialRotate => "credential_rotate",
        }
    }
}

/// A write Magnum makes when an operation fails.
#[derive(Debug, Clone, PartialEq)]
pub enum OnFailure {
    /// The cluster's status, and its `status_reason` = the error if `reason`.
    Cluster { status: &'static str, reason: bool },
    /// A nodegroup's status (and `status_reason`), plus fields put back.
    Nodegroup {
        uuid: String,
        status: Option<&'static str>,
        reason: bool,
        restore: Vec<(&'static str, Value)>,
    },
}

/// One row a failure writes: (is it the cluster row?, uuid, changes).
pub type FailureWrite = (bool, String, Vec<(&'static str, Value)>);

/// The rows a failure writes, in order: the nodegroups' first, the
/// cluster's last, so whoever sees the cluster failed (users poll the
/// cluster) sees its nodegroups' failure and restored counts too.
pub fn failure_writes(cluster_uuid: &str, plan: &[OnFailure], error: &str) -> Vec<FailureWrite> {
    let mut writes: Vec<FailureWrite> = plan
        .iter()
        .map(|f| match f {
            OnFailure::Cluster { status, reason } => {
                let mut c = vec![("status", json!(status))];
                if *reason {
                    c.push(("status_reason", json!(error)));
                }
                (true, cluster_uuid.to_string(), c)
            }
            OnFailure::Nodegroup {
                uuid,
                status,
                reason,
                restore,
            } => {
                let mut c = restore.clone();
                if let Some(s) = status {
                    c.push(("status", json!(s)));
                }
                if *reason {
                    c.push(("status_reason", json!(error)));
                }
                (false, uuid.clone(), c)
            }
        })
        .collect();
    // Stable: nodegroups keep their declared order.
    writes.sort_by_key(|(is_cluster, _, _)| *is_cluster);
    writes
}

impl Engine {
    /// A request's operation on one cluster, framed: [`Run::begin`] (the
    /// cluster's Lease), Magnum's refusal when another conductor holds it,
    /// the operation's `steps`, then [`Run::finish`] (counts and failure
    /// bookkeeping).
    pub(super) async fn operate(
        &self,
        op: Op,
        uuid: &str,
        ctx: &rpc_schema::RequestContext,
        durable: &mut DurableSignal,
        steps: impl AsyncFnOnce(&mut Run<'_>) -> Result<Value, StepError>,
    ) -> Outcome {
        let mut run = Run::begin(self, op, uuid, Some(ctx), Some(durable)).await;
        if let Some(e) = run.blocked() {
            return run.finish(Err(e)).await;
        }
        let result = steps(&mut run).await;
        run.finish(result).await
    }
}

/// One operation in flight on one cluster.
pub(super) struct Run<'a> {
    pub(super) engine: Engine,
    pub(super) op: Op,
    pub(super) uuid: String,
    /// The request's context (None: a resume or the status worker).
    ctx: Option<rpc_schema::RequestContext>,
    durable: Option<&'a mut DurableSignal>,
    /// The cluster's Lease (held across conductors), then this process's lock.
    lease: Option<super::coordination::lease::Held>,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// Why the run may not go ahead (see [`Run::begin`]).
    blocked: Option<StepError>,
    on_failure: Vec<OnFailure>,
}

impl<'a> Run<'a> {
    /// Take the cluster's Lease (waiting for another conductor's operation
    /// or status pass on it to end, or for a dead conductor's Lease to
    /// expire: up to twice its duration), then this process's lock. A
    /// request (`ctx`) waits; a resume (`ctx` None) only tries: a live
    /// conductor holding the Lease is driving the cluster already.
    /// When the Lease cannot be had, [`Run::blocked`] says so and nothing
    /// may be done.
    pub(super) async fn begin(
        engine: &Engine,
        op: Op,
        uuid: &str,
        ctx: Option<&rpc_schema::RequestContext>,
        durable: Option<&'a mut DurableSignal>,
    ) -> Run<'a> {
        let leases = &engine.0.leases;
        let name = super::coordination::lease::cluster_lease(uuid);
        let got = if ctx.is_some() {
            leases
                .acquire(&name, leases.duration() * 2 + Duration::from_secs(5))
                .await
        } else {
            leases.try_acquire(&name).await
        };
        let mut run = Run {
            engine: engine.clone(),
            op,
            uuid: uuid.to_string(),
            ctx: ctx.cloned(),
            durable,
            lease: None,
            held: None,
            blocked: None,
            on_failure: Vec::new(),
        };
        match got {
            Ok(h) => {
                run.lease = Some(h);
                run.held = Some(engine.lock(uuid).lock_owned().await);
                // With "operation ends" (on drop, before the Lease goes):
                // who drove which cluster when, across conductors.
                tracing::info!(cluster = %uuid, operation = op.name(), "operation begins");
            }
            Err(e) => {
                engine
                    .0
                    .metrics
                    .lease_busy
                    .with_label_values(&[op.name()])
                    .inc();
                tracing::info!(cluster = %uuid, operation = op.name(), error = %e, "cluster lease not available");
                run.blocked = Some(StepError::Busy {
                    cluster: uuid.to_string(),
                    why: match e {
                        super::coordination::lease::LeaseError::Held(h) => {
                            format!("conductor {h} is changing it")
                        }
                        other => other.to_string(),
                    },
                });
            }
        }
        run
    }

    /// Why this run may not go ahead (the Lease was not had), once.
    pub(super) fn blocked(&mut self) -> Option<StepError> {
        self.blocked.take()
    }

    /// The first durable effect is recorded: acknowledge the request.
    pub(super) fn recorded(&mut self) {
        if let Some(d) = self.durable.as_deref_mut() {
            d.recorded();
        }
    }

    /// Whether the request is still unacknowledged.
    pub(super) fn unacknowledged(&self) -> bool {
        self.durable
            .as_deref()
            .is_some_and(DurableSignal::is_pending)
    }

    /// Magnum's "pending" notification for this operation (sent where
    /// Magnum's handler sends it).
    pub(super) async fn notify_pending(&self) {
        self.notify(crate::notify::Outcome::Pending).await;
    }

    async fn notify(&self, outcome: crate::notify::Outcome) {
        let Some(action) = self.op.notified() else {
            return;
        };
        self.engine
            .notify_cluster(self.ctx.as_ref(), action, outcome, &self.uuid)
            .await;
    }

    /// What to write if the operation fails from here on.
    pub(super) fn on_failure(&mut self, f: OnFailure) {
        self.on_failure.push(f);
    }

    /// End the run: count it, and on failure do the bookkeeping (see the
    /// module documentation).
    pub(super) async fn finish(mut self, result: Result<Value, StepError>) -> Outcome {
        let name = self.op.name();
        match result {
            Ok(v) => {
                self.engine.count(name, "started");
                self.recorded();
                Outcome::Result(v)
            }
            Err(StepError::Refused(f)) => {
                self.engine.count(name, "refused");
                tracing::info!(cluster = %self.uuid, operation = name, reason = %f.message, "operation refused");
                // Magnum notifies a refused update, resize or upgrade.
                if matches!(self.op, Op::Update | Op::Resize | Op::Upgrade) {
                    self.notify(crate::notify::Outcome::Failure).await;
                }
                self.recorded();
                Outcome::Failure(f)
            }
            Err(e @ StepError::Busy { .. }) => {
                // Nothing was done: a cast goes back to the queue (another
                // try in a few seconds), a call gets the Conflict.
                self.engine.count(name, "busy");
                if let Some(d) = self.durable.as_deref_mut() {
                    d.retry_later();
                }
                Outcome::Failure(e.to_failure())
            }
            Err(e) if e.is_transient_db() => {
                self.engine.count(name, "retried");
                if self.unacknowledged() {
                    tracing::warn!(cluster = %self.uuid, operation = name, error = %e,
                        "database unavailable; the request goes back to the queue");
                    if let Some(d) = self.durable.as_deref_mut() {
                        d.retry_later();
                    }
                } else {
                    tracing::warn!(cluster = %self.uuid, operation = name, error = %e,
                        retry_in_s = RESUME_DELAY.as_secs(), "database unavailable; resuming from the rows later");
                    self.engine.resume_later(&self.uuid);
                }
                Outcome::Failure(e.to_failure())
            }
            Err(e) => {
                self.engine.count(name, "failed");
                let reason = e.to_string();
                tracing::warn!(cluster = %self.uuid, operation = name, %reason, "cluster operation failed");
                for (is_cluster, uuid, changes) in
                    failure_writes(&self.uuid, &self.on_failure, &reason)
                {
                    let saved = if is_cluster {
                        self.engine.save_cluster(&uuid, &changes).await.map(|_| ())
                    } else {
                        self.engine
                            .save_nodegroup(&uuid, &changes)
                            .await
                            .map(|_| ())
                    };
                    if let Err(d) = saved {
                        tracing::error!(cluster = %self.uuid, error = %d, "cannot record the failure");
                    }
                }
                self.notify(crate::notify::Outcome::Failure).await;
                self.recorded();
                Outcome::Failure(e.to_failure())
            }
        }
    }
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        if self.held.is_some() {
            tracing::info!(cluster = %self.uuid, operation = self.op.name(), "operation ends");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_know_every_operation() {
        let names: Vec<&str> = [
            Op::Create,
            Op::Delete,
            Op::Update,
            Op::Resize,
            Op::Upgrade,
            Op::NodegroupCreate,
            Op::NodegroupUpdate,
            Op::NodegroupDelete,
            Op::CredentialRotate,
        ]
        .into_iter()
        .map(Op::name)
        .collect();
        assert_eq!(names, crate::metrics::OPERATIONS);
    }

    #[test]
    fn failure_bookkeeping_is_declared_data() {
        let plan = [
            OnFailure::Cluster {
                status: "UPDATE_FAILED",
                reason: true,
            },
            OnFailure::Nodegroup {
                uuid: "ng-1".into(),
                status: Some("UPDATE_FAILED"),
                reason: true,
                restore: vec![("node_count", json!(2))],
            },
        ];
        let w = failure_writes("c-1", &plan, "boom");
        // The cluster's row last, though declared first.
        assert_eq!(
            w[1],
            (
                true,
                "c-1".to_string(),
                vec![
                    ("status", json!("UPDATE_FAILED")),
                    ("status_reason", json!("boom"))
                ]
            )
        );
        assert_eq!(w[0].1, "ng-1");
        assert_eq!(
            w[0].2,
            vec![
                ("node_count", json!(2)),
                ("status", json!("UPDATE_FAILED")),
                ("status_reason", json!("boom"))
            ]
        );
        let quiet = failure_writes(
            "c-1",
            &[OnFailure::Cluster {
                status: "UPDATE_FAILED",
                reason: false,
            }],
            "x",
        );
        assert_eq!(quiet[0].2, vec![("status", json!("UPDATE_FAILED"))]);
    }
}
