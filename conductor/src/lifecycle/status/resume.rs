//! Finishing what a previous conductor (or a database outage) left.
//!
//! Operations are not held in memory: the rows say what is in progress.
//! At startup, and after a database outage met an acknowledged operation:
//!
//! - CREATE_IN_PROGRESS: the create steps run again (each is idempotent);
//!   a cluster whose nodegroups were never recorded waits for the
//!   redelivered cast (it was not acknowledged), or fails after 10 minutes;
//! - DELETE_IN_PROGRESS: the CAPI Cluster's delete is issued again; the
//!   status worker finishes (DELETE_COMPLETE with rows left likewise);
//! - UPDATE_IN_PROGRESS: the status worker is asked to look: what the rows
//!   want and the management cluster lacks is applied there
//!   ([`crate::lifecycle::plan::drift`]), whichever operation wrote the rows.
//!
//! A database outage at this moment does not leave clusters behind: the
//! list (and each cluster's resume) is tried again every [`RESUME_DELAY`]
//! while the error is transient.

use rpc_schema::ovo::MagnumObject;
use serde_json::Value;

use crate::lifecycle::engine::{Engine, age};
use crate::lifecycle::runner::{OnFailure, Op, RESUME_DELAY, Run};

enum RowsRecorded {
    Yes,
    Pending,
    Lost,
}

impl Engine {
    /// Resume every cluster left in progress (startup).
    pub(in crate::lifecycle) async fn resume(&self) {
        crate::failpoint::hit("resume.before_list").await;
        for status in [
            "CREATE_IN_PROGRESS",
            "UPDATE_IN_PROGRESS",
            "DELETE_IN_PROGRESS",
            "DELETE_COMPLETE",
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
                // Undecided (database): resume_one decides again.
                if matches!(self.leaves_alone("resume", &c).await, Ok(true)) {
                    continue;
                }
                let uuid = c.get_str("uuid").unwrap_or_default().to_string();
                tracing::info!(cluster = %uuid, status, "resuming");
                self.count(what(status), "resumed");
                self.resume_one(&c).await;
            }
        }
    }

    /// Resume one cluster's operation from its row (see the module docs).
    pub(in crate::lifecycle) async fn resume_one(&self, c: &MagnumObject) {
        let uuid = c.get_str("uuid").unwrap_or_default().to_string();
        // Another driver's cluster is never resumed; when its owner cannot
        // be read now, try again after a pause.
        match self.leaves_alone("resume", c).await {
            Ok(false) => {}
            Ok(true) => return,
            Err(e) if e.is_transient() => {
                tracing::warn!(cluster = %uuid, error = %e, retry_in_s = RESUME_DELAY.as_secs(),
                    "cannot read the cluster's template: resuming later");
                self.resume_later(&uuid);
                return;
            }
            Err(e) => {
                tracing::warn!(cluster = %uuid, error = %e, "cannot read the cluster's template: not resumed");
                return;
            }
        }
        match c.get_str("status").unwrap_or_default() {
            "CREATE_IN_PROGRESS" => {
                let mut run = Run::begin(self, Op::Create, &uuid, None, None).await;
                if let Some(e) = run.blocked() {
                    // A live conductor holds the cluster: it is driving it
                    // (if it dies, its Lease expires and the leader resumes).
                    tracing::info!(cluster = %uuid, reason = %e, "not resumed here");
                    return;
                }
                match self.rows_recorded(c).await {
                    Ok(RowsRecorded::Yes) => {
                        run.on_failure(OnFailure::Cluster {
                            status: "CREATE_FAILED",
                            reason: true,
                        });
                        let r = self.create_steps(&mut run, None).await;
                        let _ = run.finish(r.map(|_| Value::Null)).await;
                    }
                    Ok(RowsRecorded::Pending) => {
                        // Killed between the cluster row and its nodegroups:
                        // the cast was not acknowledged and comes back.
                        tracing::info!(cluster = %uuid, "create interrupted before its nodegroups were recorded; waiting for the redelivered cast");
                        return;
                    }
                    Ok(RowsRecorded::Lost) => {
                        run.on_failure(OnFailure::Cluster {
                            status: "CREATE_FAILED",
                            reason: true,
                        });
                        let _ = run
                            .finish(Err(crate::lifecycle::error::StepError::Invalid(
                                "the conductor stopped before the cluster's nodegroups were recorded, and the request did not come back".into(),
                            )))
                            .await;
                    }
                    Err(e) if e.is_transient() => {
                        tracing::warn!(cluster = %uuid, error = %e, retry_in_s = RESUME_DELAY.as_secs(), "database unavailable: resuming later");
                        drop(run);
                        self.resume_later(&uuid);
                        return;
                    }
                    Err(e) => tracing::warn!(cluster = %uuid, error = %e, "cannot resume"),
                }
            }
            "DELETE_IN_PROGRESS" => {
                let mut run = Run::begin(self, Op::Delete, &uuid, None, None).await;
                if let Some(e) = run.blocked() {
                    tracing::info!(cluster = %uuid, reason = %e, "not resumed here");
                    return;
                }
                // The row as it is under the lock (the listing may be older
                // than an operation that held it meanwhile).
                let now = match self.cluster(&uuid).await {
                    Ok(now) => now,
                    Err(e) if e.is_transient() => {
                        tracing::warn!(cluster = %uuid, error = %e, retry_in_s = RESUME_DELAY.as_secs(), "database unavailable: resuming later");
                        drop(run);
                        self.resume_later(&uuid);
                        return;
                    }
                    Err(e) => {
                        tracing::info!(cluster = %uuid, error = %e, "not resumed: the row is gone");
                        return;
                    }
                };
                if let Err(e) = self.mark_for_cleanup(&now, false).await {
                    tracing::warn!(cluster = %uuid, error = %e, "cannot mark the OpenStackCluster for the cloud clean-up; will retry at the next resync");
                } else if let Err(e) = self.delete_capi_cluster(&now).await {
                    tracing::warn!(cluster = %uuid, error = %e, "cannot delete the CAPI cluster; will retry at the next resync");
                }
            }
            _ => {}
        }
        self.kick_cluster(c);
    }

    /// Read the row again after a pause and resume it (a database outage).
    pub(in crate::lifecycle) fn resume_later(&self, uuid: &str) {
        let engine = self.clone();
        let uuid = uuid.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(RESUME_DELAY).await;
            match engine.cluster(&uuid).await {
                Ok(c) => Box::pin(engine.resume_one(&c)).await,
                Err(e) if e.is_transient() => engine.resume_later(&uuid),
                Err(e) => tracing::warn!(cluster = %uuid, error = %e, "not resumed"),
            }
        });
    }

    /// Whether a CREATE_IN_PROGRESS cluster has both default nodegroups
    /// (the cast is acknowledged only then).
    async fn rows_recorded(&self, c: &MagnumObject) -> Result<RowsRecorded, common::db::DbError> {
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
}

fn what(status: &str) -> &'static str {
    match status {
        "CREATE_IN_PROGRESS" => "create",
        "UPDATE_IN_PROGRESS" => "update",
        _ => "delete",
    }
}
