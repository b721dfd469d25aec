//! The status leader's duties (see [`crate::lifecycle::coordination::lease`] for the design).
//!
//! Every conductor campaigns for the leadership, on the broker
//! ([`crate::lifecycle::coordination::elect`], the default) or for the leader Lease. The one elected:
//!
//! - resumes what the rows say is in progress ([`Engine::resume`]), except
//!   clusters whose Lease a live conductor holds (it is driving them);
//! - runs the status worker (the others drop their watch events: their
//!   caches serve their own handlers);
//! - every third of `lease_duration`, lists the cluster Leases: one whose
//!   holder stopped renewing it for `lease_duration` belongs to a dead
//!   conductor, and its operation is resumed here; one that went away
//!   since the last look ended an operation on another conductor, and the
//!   cluster gets a status pass (its rows may have moved without any CAPI
//!   event).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::lifecycle::engine::Engine;

/// How often the leader counts the clusters by status (metrics).
const CENSUS_EVERY: Duration = Duration::from_secs(30);
use crate::lifecycle::watch::Kick;

impl Engine {
    /// Campaign, and do the leader's duties while elected (for ever).
    pub(in crate::lifecycle) async fn lead(self) {
        let leases = self.0.leases.clone();
        if leases.enabled() {
            // Checked at startup (see main.rs); retried here if it failed
            // for a reason other than the rights.
            while let Err(e) = crate::lifecycle::coordination::lease::prepare(
                &self.0.client,
                &self.0.capi.lease_namespace,
            )
            .await
            {
                tracing::warn!(error = %e, "cannot use the lease namespace; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
        self.0.watches.wait_ready().await;
        leases.watch();
        let elected = Arc::new(Notify::new());
        let signal = elected.clone();
        if self.broker_election() {
            let watches = self.0.watches.clone();
            tokio::spawn(crate::lifecycle::coordination::elect::campaign(
                self.0.broker.clone(),
                leases.clone(),
                move || watches.last_error(),
                self.0.metrics.clone(),
                move || signal.notify_one(),
            ));
        } else {
            tokio::spawn(leases.clone().campaign(move || signal.notify_one()));
        }
        let every = (leases.duration() / 3).max(Duration::from_secs(1));
        let mut known = Vec::new();
        let mut last_census = std::time::Instant::now() - CENSUS_EVERY;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = elected.notified() => {
                    self.0.metrics.leader.set(1);
                    let e = self.clone();
                    tokio::spawn(async move { e.resume().await });
                    self.0.kicks.send(Kick::All);
                }
                _ = tick.tick() => {
                    let leading = leases.is_leader();
                    self.0.metrics.leader.set(i64::from(leading));
                    if !leading {
                        self.0.metrics.zero_clusters();
                        self.0.metrics.oldest_in_progress.set(0);
                        continue;
                    }
                    if last_census.elapsed() >= CENSUS_EVERY {
                        last_census = std::time::Instant::now();
                        if let Err(e) = self.census().await {
                            tracing::warn!(error = %e, "cannot count the clusters by status");
                        }
                    }
                    match leases.scan(&mut known).await {
                        Ok((orphans, ended)) => {
                            for uuid in ended {
                                self.0.kicks.send(Kick::Uuid(uuid));
                            }
                            for uuid in orphans {
                                self.take_over(&uuid).await;
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot list the cluster leases"),
                    }
                }
            }
        }
    }

    /// `clusters{status}` and `cluster_oldest_in_progress_seconds` from
    /// the database (two small aggregate queries).
    async fn census(&self) -> Result<(), sqlx::Error> {
        let pool = &self.0.db.pool;
        let rows: Vec<(Option<String>, i64)> =
            sqlx::query_as("SELECT status, COUNT(*) FROM cluster GROUP BY status")
                .fetch_all(pool)
                .await?;
        let m = &self.0.metrics;
        m.zero_clusters();
        for (status, n) in rows {
            m.clusters
                .with_label_values(&[status.as_deref().unwrap_or("NULL")])
                .set(n);
        }
        let oldest: Option<i64> = sqlx::query_scalar(
            "SELECT TIMESTAMPDIFF(SECOND, MIN(COALESCE(updated_at, created_at)), UTC_TIMESTAMP()) \
             FROM cluster WHERE status LIKE '%\\_IN\\_PROGRESS'",
        )
        .fetch_one(pool)
        .await?;
        m.oldest_in_progress.set(oldest.unwrap_or(0).max(0));
        Ok(())
    }

    /// Whether the leader is chosen on the broker ([`crate::lifecycle::coordination::elect`]): with
    /// Leases enabled and `[capi] leader_election = amqp`.
    fn broker_election(&self) -> bool {
        self.0.leases.enabled() && self.0.capi.leader_election == "amqp"
    }

    /// SIGTERM received: from now on, losing the leadership (the RPC
    /// server closes the connection holding the broker lock) is the plan,
    /// not a fault, and no campaign takes it again.
    pub fn begin_stopping(&self) {
        self.0.leases.begin_stopping();
    }

    /// At shutdown (in-flight requests done): hand the leadership over.
    pub async fn step_down(&self) {
        if self.broker_election() {
            // The lock went with the RPC server's connection.
            self.0.leases.set_leader(false);
            return;
        }
        self.0.leases.step_down().await;
    }

    /// Resume a cluster whose conductor died holding its Lease: its
    /// operation is resumed under the Lease (creates and deletes), and the
    /// dead holder's Lease is gone afterwards (an update is then finished
    /// by status passes, which repair what the rows ask for).
    async fn take_over(&self, uuid: &str) {
        let name = crate::lifecycle::coordination::lease::cluster_lease(uuid);
        match self.cluster(uuid).await {
            Ok(c) if matches!(self.leaves_alone("takeover", &c).await, Ok(true)) => {}
            Ok(c) => {
                tracing::warn!(cluster = %uuid, status = c.get_str("status").unwrap_or_default(),
                    "its conductor stopped renewing the cluster's lease: resuming here");
                self.0.metrics.lease_takeovers.inc();
                let e = self.clone();
                tokio::spawn(async move {
                    e.resume_one(&c).await;
                    if let Ok(h) = e.0.leases.try_acquire(&name).await {
                        drop(h);
                    }
                    if let Ok(c) = e.cluster(c.get_str("uuid").unwrap_or_default()).await {
                        e.kick_cluster(&c);
                    }
                });
            }
            Err(common::db::DbError::Magnum { .. }) => {
                // The cluster is gone: only its Lease is left.
                if let Ok(h) = self.0.leases.try_acquire(&name).await {
                    drop(h);
                }
            }
            Err(e) => {
                tracing::warn!(cluster = %uuid, error = %e, "cannot read a cluster to take over")
            }
        }
    }
}
