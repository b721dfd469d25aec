//! The status worker: watch events in, Magnum rows out.
//!
//! Each event names one cluster; a burst is coalesced into one pass per
//! cluster. A pass takes the cluster's lock, reads its rows, and compares
//! what the rows want ([`crate::lifecycle::plan::desired`]) with what the watch caches
//! hold:
//!
//! - an update in progress whose management cluster lacks something the
//!   rows want (a count, a version, a released hold, a group to delete) is
//!   repaired here ([`crate::lifecycle::plan::drift`]): this is how an upgrade's
//!   workers follow its control plane, and how any conductor finishes an
//!   operation whose conductor died after saving its rows;
//! - the status mapper's view becomes column updates ([`crate::lifecycle::sync`]);
//! - a deleting cluster whose OpenStackCluster waits for the clean-up of
//!   what the workload cluster made in OpenStack gets it
//!   ([`crate::lifecycle::cloud`]), its
//!   `status_reason` naming what it waits for, `DELETE_FAILED` after
//!   `[capi] cloud_cleanup_timeout`;
//! - a nodegroup whose deletion is complete loses its row; a cluster whose
//!   CAPI Cluster is gone is finished ([`Engine::finish_delete`]);
//! - an update with no progress for `[capi] update_timeout` minutes fails.
//!
//! No request per cluster at rest: the only traffic is the open watches.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use common::db::DbError;
use common::db::model::{CLUSTER, NODEGROUP, SqlValue};
use common::db::repo::{self, Scope};
use rpc_schema::ovo::MagnumObject;

use crate::capi::render;
use crate::capi::status::{self, Clock, GroupTarget, Targets};
use crate::lifecycle::cloud::{self, Cleanup};
use crate::lifecycle::engine::{Engine, age, destroy_if_present};
use crate::lifecycle::error::StepError;
use crate::lifecycle::plan::{self, Repair};
use crate::lifecycle::rows;
use crate::lifecycle::sync;
use crate::lifecycle::watch::Kick;

/// What a status pass came to.
enum Pass {
    Done,
    /// It has something to apply, or a row to remove, for a cluster in an
    /// operation: it needs the cluster's Lease first, and a fresh read.
    NeedsLease,
    /// A row it was about to write changed since it read it: read again.
    Stale,
}

/// Passes over one cluster in a row whose writes found a row changed
/// (an operation writing at the same moment), before it is deferred.
const STALE_RETRIES: usize = 3;

/// How long a failed status pass waits before it is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Clusters of a full pass looked at between two looks at the queue.
const FULL_PASS_SLICE: usize = 64;

/// Status passes run at once.
const STATUS_CONCURRENCY: usize = 4;

/// Targets that check nothing but existence (rows that cannot be rendered:
/// health and addresses still follow).
fn loose_targets(ngs: &[MagnumObject]) -> Targets {
    Targets {
        control_plane: GroupTarget::default(),
        workers: ngs
            .iter()
            .filter(|n| n.get_str("role") != Some("master"))
            .map(|n| GroupTarget {
                key: rows::group_key(n),
                deleting: rows::is_deleting(n),
                ..GroupTarget::default()
            })
            .collect(),
        proxied: false,
    }
}

impl Engine {
    pub(in crate::lifecycle) async fn status_worker(
        self,
        mut rx: crate::lifecycle::watch::KickQueue,
    ) {
        self.0.watches.wait_ready().await;
        tracing::info!("management cluster caches synced");
        // The initial lists (pages of every kind, parsed and projected) were
        // the largest burst of allocations this process makes: give what
        // they freed back now rather than at the next minute's trim, so RSS
        // says what the fleet needs from the start (docs/benchmarks.md).
        crate::memory::trim();
        // What is left of the current full pass: worked through a slice at
        // a time, after whatever the watches report meanwhile (a full pass
        // over 10,000 clusters takes seconds; a status change must not wait
        // behind it).
        let mut backlog: VecDeque<Kick> = VecDeque::new();
        let mut full_started: Option<Instant> = None;
        loop {
            let first = if backlog.is_empty() {
                match rx.recv().await {
                    Some(k) => Some(k),
                    None => return,
                }
            } else {
                rx.try_recv()
            };
            // Coalesce a burst of events into one pass per cluster.
            let mut batch: HashSet<Kick> = first.into_iter().collect();
            while let Some(k) = rx.try_recv() {
                batch.insert(k);
            }
            if rx.take_overflow() {
                batch.insert(Kick::All);
            }
            if !self.0.leases.is_leader() {
                // Another conductor writes statuses (see crate::lifecycle::coordination::lease).
                backlog.clear();
                full_started = None;
                continue;
            }
            if batch.remove(&Kick::All) {
                // A newer full pass replaces one under way.
                backlog = self.all_in_progress().await.into_iter().collect();
                full_started = Some(Instant::now());
            }
            self.reconcile_all(batch.into_iter().collect()).await;
            let n = backlog.len().min(FULL_PASS_SLICE);
            self.reconcile_all(backlog.drain(..n).collect()).await;
            if backlog.is_empty()
                && let Some(t) = full_started.take()
            {
                let took = t.elapsed();
                self.0.metrics.full_pass_seconds.set(took.as_secs_f64());
                self.0.metrics.full_passes.inc();
                tracing::debug!(seconds = took.as_secs_f64(), "full status pass done");
                // A full pass rendered every cluster: the same burst.
                crate::memory::trim();
            }
        }
    }

    /// Status passes for `kicks`, [`STATUS_CONCURRENCY`] at a time (each
    /// holds its cluster's lock; they wait mostly on the database).
    async fn reconcile_all(&self, kicks: Vec<Kick>) {
        futures_util::stream::iter(kicks)
            .for_each_concurrent(STATUS_CONCURRENCY, |k| async move {
                if let Err(e) = self.reconcile(&k).await {
                    self.0.metrics.status_errors.inc();
                    tracing::warn!(kick = ?k, error = %e, "status update failed; retrying in {RETRY:?}");
                    let kicks = self.0.kicks.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(RETRY).await;
                        kicks.send(k);
                    });
                }
            })
            .await;
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

    async fn find(&self, k: &Kick) -> Result<Option<MagnumObject>, StepError> {
        let db = &self.0.db;
        Ok(match k {
            Kick::All => None,
            Kick::Uuid(u) => repo::get(db, &CLUSTER, &Scope::admin(), u).await.ok(),
            Kick::Cluster(ns, name) => {
                let ours = |c: &MagnumObject| {
                    c.get_str("stack_id") == Some(name.as_str()) && self.namespace_of(c) == *ns
                };
                // The CAPI Cluster names its Magnum cluster (our uuid label):
                // one lookup on the uuid's unique index. (Magnum's schema has
                // no index on `stack_id`: a select by it reads the table.)
                match self.0.watches.uuid_of(ns, name) {
                    Some(Some(u)) => {
                        return match repo::get(db, &CLUSTER, &Scope::admin(), &u).await {
                            Ok(c) if ours(&c) => Ok(Some(c)),
                            // Its row is gone: nothing to write.
                            Err(DbError::Magnum { .. }) => Ok(None),
                            Err(e) => Err(e.into()),
                            // A label naming a cluster that lives elsewhere.
                            Ok(_) => Ok(None),
                        };
                    }
                    // A CAPI Cluster we did not create (another driver's:
                    // magnum-capi-helm names and places its own as we do).
                    Some(None) => return Ok(None),
                    // No CAPI Cluster cached (a delete's machines outlive
                    // it): find the row by name.
                    None => {}
                }
                repo::select(
                    db,
                    &CLUSTER,
                    &Scope::admin(),
                    &[("stack_id", SqlValue::Str(name.clone()))],
                    None,
                )
                .await?
                .into_iter()
                .find(ours)
            }
        })
    }

    pub(in crate::lifecycle) async fn reconcile(&self, k: &Kick) -> Result<(), StepError> {
        let Some(found) = self.find(k).await? else {
            return Ok(());
        };
        // (A database error is retried as any status pass's.)
        if self.leaves_alone("status", &found).await? {
            return Ok(());
        }
        let uuid = found.get_str("uuid").unwrap_or_default().to_string();
        // An operation running here holds the cluster: look again once it
        // is done (the status worker does not wait: other clusters queue
        // behind it).
        let lock = self.lock(&uuid);
        let Ok(_held) = lock.try_lock() else {
            self.defer(k);
            return Ok(());
        };
        // Re-read under the lock: an operation may have just changed it.
        let mut cluster = match self.cluster(&uuid).await {
            Ok(c) => c,
            Err(DbError::Magnum { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        // A status pass must not overwrite what an operation (on any
        // conductor) writes between its read and its writes: its row
        // writes are conditional on the rows being as read (the database
        // checks, under the row lock: no apiserver request). What it
        // applies to the management cluster (an update's repairs), the
        // removal of a deleted cluster's or nodegroup's rows, happen only
        // under the cluster's Lease, as operations do: then no operation
        // runs meanwhile. The pass first finds out whether it needs the
        // Lease, and only then takes it and starts again from a fresh read.
        // (Passes over clusters at rest never need it.)
        let in_operation = {
            let s = cluster.get_str("status").unwrap_or_default();
            sync::operation(s).is_some() || s == "DELETE_COMPLETE"
        };
        let mut lease = None;
        let mut stale = 0;
        loop {
            match self
                .pass(&uuid, &cluster, in_operation, lease.as_ref())
                .await?
            {
                Pass::Done => return Ok(()),
                Pass::Stale => {
                    stale += 1;
                    if stale >= STALE_RETRIES {
                        self.defer(k);
                        return Ok(());
                    }
                    cluster = match self.cluster(&uuid).await {
                        Ok(c) => c,
                        Err(DbError::Magnum { .. }) => return Ok(()),
                        Err(e) => return Err(e.into()),
                    };
                }
                Pass::NeedsLease => {
                    match self
                        .0
                        .leases
                        .try_acquire_if_free(&crate::lifecycle::coordination::lease::cluster_lease(
                            &uuid,
                        ))
                        .await
                    {
                        Ok(h) => lease = Some(h),
                        Err(crate::lifecycle::coordination::lease::LeaseError::Held(holder)) => {
                            tracing::debug!(cluster = %uuid, %holder, "cluster busy; status pass deferred");
                            self.defer(k);
                            return Ok(());
                        }
                        Err(crate::lifecycle::coordination::lease::LeaseError::Api(e)) => {
                            return Err(StepError::Mgmt(crate::mgmt::MgmtError::Api(e)));
                        }
                    }
                    cluster = match self.cluster(&uuid).await {
                        Ok(c) => c,
                        Err(DbError::Magnum { .. }) => return Ok(()),
                        Err(e) => return Err(e.into()),
                    };
                }
            }
        }
    }

    /// One status pass over `cluster` (read under its lock). Before it
    /// applies anything or removes rows, a pass over a cluster
    /// `in_operation` without `lease` stops and asks for it
    /// ([`Pass::NeedsLease`]); a row changed since read stops it
    /// ([`Pass::Stale`]).
    async fn pass(
        &self,
        uuid: &str,
        cluster: &MagnumObject,
        in_operation: bool,
        lease: Option<&crate::lifecycle::coordination::lease::Held>,
    ) -> Result<Pass, StepError> {
        let uuid = uuid.to_string();
        let needs_lease = in_operation && lease.is_none();
        let mut ngs = self.nodegroups(&uuid).await?;
        let status_now = cluster.get_str("status").unwrap_or_default().to_string();
        let op = sync::operation(&status_now);
        let mut observed = self.observed(cluster);
        // DELETE_COMPLETE with rows left: a conductor died while removing them.
        let deleting = op == Some(status::Operation::Delete) || status_now == "DELETE_COMPLETE";
        // A delete whose OpenStackCluster waits for the cloud clean-up
        // (its machines are gone): clean up, and say what it waits for.
        let mut cleanup_waits = None;
        if deleting {
            if observed.cluster.is_none() {
                if needs_lease {
                    return Ok(Pass::NeedsLease);
                }
                self.finish_delete(cluster).await?;
                return Ok(Pass::Done);
            }
            if op == Some(status::Operation::Delete)
                && observed.infra.as_ref().is_some_and(cloud::awaits_cleanup)
            {
                if needs_lease {
                    return Ok(Pass::NeedsLease);
                }
                if let Cleanup::Waiting { reason, timed_out } = self.cloud_cleanup(cluster).await? {
                    self.kick_later(cluster, cloud::CLEANUP_EVERY);
                    cleanup_waits = Some((reason, timed_out));
                }
            }
        } else if op == Some(status::Operation::Create)
            && observed.cluster.is_none()
            && cluster.get_str("stack_id").is_none()
        {
            // Not applied yet (the create operation is running or resuming).
            return Ok(Pass::Done);
        }

        // What the rows want, and repairs for an update in progress.
        let template = match self.template(cluster).await {
            Ok(t) => Some(t),
            Err(e) if e.is_transient() => return Err(e.into()),
            Err(_) => None,
        };
        let desired = match &template {
            Some(t) => match self.desired(cluster, t, &ngs, None) {
                Ok((d, _)) => Some(d),
                Err(e) => {
                    tracing::debug!(cluster = %uuid, error = %e, "rows cannot be rendered");
                    None
                }
            },
            None => None,
        };
        // (Without its CAPI Cluster there is nothing to repair into: the
        // update then fails on its timeout, saying so.)
        if op == Some(status::Operation::Update)
            && observed.cluster.is_some()
            && let Some(d) = &desired
        {
            let repairs = plan::drift(d, &observed);
            if !repairs.is_empty() {
                if needs_lease {
                    return Ok(Pass::NeedsLease);
                }
                self.repair(cluster, d, &repairs).await?;
                observed = self.observed(cluster);
            }
        }
        let (targets, autoscaled) = match &desired {
            Some(d) => (
                d.targets.clone(),
                d.input
                    .workers
                    .iter()
                    .filter(|g| g.autoscale.is_some())
                    .map(|g| g.key.clone())
                    .collect::<Vec<_>>(),
            ),
            None => (loose_targets(&ngs), Vec::new()),
        };

        let mut clock = Clock {
            elapsed_min: age(cluster).num_minutes().max(0) as u64,
            create_timeout_min: cluster.get_i64("create_timeout").unwrap_or(0).max(0) as u64,
            stalled_min: 0,
            update_timeout_min: self.0.capi.update_timeout,
        };
        let first = status::map(
            op.unwrap_or(status::Operation::Update),
            &observed,
            &targets,
            clock,
        );
        let mut view = if op == Some(status::Operation::Update) {
            clock.stalled_min = self.stalled_minutes(cluster, first.progress);
            status::map(status::Operation::Update, &observed, &targets, clock)
        } else {
            first
        };
        view.note = template
            .as_ref()
            .and_then(|t| rows::label_note(cluster, t, op == Some(status::Operation::Update)));
        if let Some((reason, timed_out)) = cleanup_waits {
            view.status_reason = Some(reason);
            if timed_out {
                // The delete can go on once the user deletes again.
                view.status = "DELETE_FAILED".into();
            }
        }

        // Nodegroups whose deletion is complete lose their row.
        let removed: Vec<(String, String)> = ngs
            .iter()
            .filter(|n| rows::is_deleting(n))
            .filter(|ng| {
                !deleting
                    && ng.get_bool("is_default") != Some(true)
                    && view
                        .workers
                        .get(&rows::group_key(ng))
                        .is_some_and(|g| g.status == "DELETE_COMPLETE")
            })
            .filter_map(|ng| Some((ng.get_str("uuid")?.to_string(), rows::group_key(ng))))
            .collect();
        ngs.retain(|n| {
            !removed
                .iter()
                .any(|(r, _)| Some(r.as_str()) == n.get_str("uuid"))
        });

        let ch = sync::changes(
            cluster,
            &ngs,
            &view,
            observed.cluster.is_some(),
            &autoscaled,
        );
        if removed.is_empty() && ch.is_empty() {
            return Ok(Pass::Done);
        }
        if !removed.is_empty() && needs_lease {
            return Ok(Pass::NeedsLease);
        }
        // A pass that lost the cluster's Lease meanwhile (its renewals failed
        // for a whole duration) writes nothing: another conductor may own it.
        if let Some(l) = lease
            && !l.valid()
        {
            return Err(StepError::Busy {
                cluster: uuid.clone(),
                why: "this conductor lost the cluster's lease during the status pass".into(),
            });
        }
        for (u, key) in &removed {
            destroy_if_present(&self.0.db, &NODEGROUP, u).await?;
            tracing::info!(cluster = %uuid, nodegroup = %key, "nodegroup deleted");
        }
        // Nodegroups first, the cluster last (see [`sync::RowChanges::writes`]).
        // Each only if its row is still as read: an operation that wrote
        // it meanwhile (on any conductor) wins, and this pass starts again.
        let mut moved = false;
        for w in ch.writes() {
            let written = match w {
                sync::RowWrite::Nodegroup(ng, c) => {
                    match ngs.iter().find(|n| n.get_str("uuid") == Some(ng)) {
                        Some(read) => self.save_if_unchanged(&NODEGROUP, read, c).await?,
                        None => None,
                    }
                }
                sync::RowWrite::Cluster(c) => {
                    let changed = self.save_if_unchanged(&CLUSTER, cluster, c).await?;
                    moved = changed
                        .as_ref()
                        .is_some_and(|ch| ch.iter().any(|c| c == "status"));
                    changed
                }
            };
            if written.is_none() {
                tracing::debug!(cluster = %uuid, "a row changed since the pass read it: again");
                return Ok(Pass::Stale);
            }
        }
        // Magnum's status sync notifies an operation's end (this conductor's
        // UPDATE made the change: once, whichever conductor wins).
        if moved && let Some(action) = crate::notify::Action::of_status(&view.status) {
            let outcome = if view.status.ends_with("_COMPLETE") {
                crate::notify::Outcome::Success
            } else {
                crate::notify::Outcome::Failure
            };
            self.notify_cluster(None, action, outcome, &uuid).await;
        }
        if !ch.is_empty() {
            self.0.metrics.status_writes.inc();
        }
        if op == Some(status::Operation::Update)
            && let Ok(mut m) = self.0.update_seen.lock()
        {
            m.entry(uuid.clone())
                .or_insert_with(std::time::Instant::now);
        }
        if let Some((_, s)) = ch.cluster.iter().find(|(f, _)| *f == "status") {
            tracing::info!(cluster = %uuid, from = %status_now, to = %s, reason = ?view.status_reason, "cluster status");
            let outcome = if view.status.ends_with("_COMPLETE") {
                "complete"
            } else {
                "failed"
            };
            if op == Some(status::Operation::Update) {
                self.progress_done(&uuid);
                self.count("update", outcome);
                let started = self
                    .0
                    .update_seen
                    .lock()
                    .ok()
                    .and_then(|mut m| m.remove(&uuid));
                if let Some(t) = started {
                    self.0
                        .metrics
                        .operation_duration
                        .with_label_values(&["update", outcome])
                        .observe(t.elapsed().as_secs_f64());
                }
            } else if op == Some(status::Operation::Create) && moved {
                // From the row's created_at: the whole create, whoever ran it.
                self.0
                    .metrics
                    .operation_duration
                    .with_label_values(&["create", outcome])
                    .observe(age(cluster).num_milliseconds().max(0) as f64 / 1000.0);
            }
        }
        Ok(Pass::Done)
    }

    /// Look at this cluster again in a second (it was busy).
    fn defer(&self, k: &Kick) {
        self.0.metrics.status_deferred.inc();
        let kicks = self.0.kicks.clone();
        let k = k.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            kicks.send(k);
        });
    }

    /// Apply what drifted (see [`plan::drift`]).
    async fn repair(
        &self,
        cluster: &MagnumObject,
        d: &plan::Desired,
        repairs: &[Repair],
    ) -> Result<(), StepError> {
        let uuid = cluster.get_str("uuid").unwrap_or_default();
        if repairs.contains(&Repair::Topology) {
            tracing::info!(cluster = %uuid, "writing the topology the rows ask for");
            self.0
                .metrics
                .cluster_operations
                .with_label_values(&["repair", "applied"])
                .inc();
            let ngs = self.nodegroups(uuid).await?;
            self.apply_topology(cluster, d, &ngs).await?;
            return Ok(());
        }
        let mut objects = Vec::new();
        for r in repairs {
            match r {
                Repair::ControlPlane => objects.extend(render::render_control_plane(&d.input)),
                Repair::Group(key) => {
                    if let Some(g) = d.input.workers.iter().find(|g| &g.key == key) {
                        objects.extend(render::render_group(&d.input, g));
                    }
                }
                Repair::DeleteGroup(key) => self.delete_group_objects(cluster, key).await?,
                Repair::Topology => {}
            }
        }
        tracing::info!(cluster = %uuid, ?repairs, "applying what the rows ask for");
        self.0
            .metrics
            .cluster_operations
            .with_label_values(&["repair", "applied"])
            .inc();
        self.apply_owned(&d.input, objects, None).await?;
        Ok(())
    }

    /// The safety net: a full pass every `[capi] resync_interval` seconds.
    pub(in crate::lifecycle) async fn resync_loop(&self) {
        let every = Duration::from_secs(self.0.capi.resync_interval.max(30));
        loop {
            tokio::time::sleep(every).await;
            self.0.kicks.send(Kick::All);
        }
    }
}
