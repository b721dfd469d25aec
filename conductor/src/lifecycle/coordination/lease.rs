//! Ownership across conductors: `coordination.k8s.io/v1` Leases in the
//! management cluster.
//!
//! Production runs several conductors on one queue, one database and one
//! management cluster; a request lands on any of them. Two kinds of Lease,
//! all in `[capi] lease_namespace`, decide who may do what:
//!
//! - **`magnum-conductor-leader`**: the status leader, with `[capi]
//!   leader_election = lease` (by default it is chosen on the broker
//!   instead, [`super::elect`], and this Lease is not used). Only it turns
//!   watch events into row writes, repairs drift, times updates out,
//!   resyncs, and resumes what was left in progress (when it is elected).
//!   One writer: no lost update between conductors with differently fresh
//!   caches, no flapping. The others keep their watches (their handlers
//!   read them).
//! - **`magnum-cluster-<uuid>`**: one cluster's critical section. An
//!   operation's steps (any conductor) and a status pass that writes an
//!   in-progress cluster (the leader) hold it; it is created on entry and
//!   deleted on exit, so the namespace lists exactly the clusters being
//!   changed right now, and by whom (`kubectl get lease`). One left behind
//!   by a conductor that died is taken over by the leader once it has not
//!   been renewed for `lease_duration` seconds, and the operation resumed.
//!
//! A lease is expired when its record has not changed for its duration *as
//! observed by this process* (as client-go's leader election does): no
//! clock is compared across hosts. A holder renews every third of the
//! duration, and stops writing as soon as it cannot prove it still holds
//! ([`Held::valid`]).
//!
//! With `[capi] ha_leases = false` (a single conductor that wants no Lease
//! traffic) every acquisition succeeds at once and this process leads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;

/// The leader's Lease.
pub const LEADER: &str = "magnum-conductor-leader";
/// Prefix of a cluster's Lease (`magnum-cluster-<uuid>`).
pub const CLUSTER_PREFIX: &str = "magnum-cluster-";

/// A cluster's Lease name.
pub fn cluster_lease(uuid: &str) -> String {
    format!("{CLUSTER_PREFIX}{uuid}")
}

/// Make the Leases' namespace if missing and check this conductor may use
/// Leases there (list). At startup: a conductor without the rights says so
/// and stops, instead of requeueing every request for ever.
pub async fn prepare(client: &kube::Client, namespace: &str) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let nss: Api<Namespace> = Api::all(client.clone());
    if nss.get_opt(namespace).await?.is_none() {
        let n = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match nss.create(&PostParams::default(), &n).await {
            Ok(_) => tracing::info!(namespace, "lease namespace created"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    leases.list(&ListParams::default().limit(1)).await?;
    Ok(())
}

/// What a conductor may do with a Lease as it stands (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Absent: create it.
    Absent,
    /// Released, or expired: take it over.
    Take,
    /// Held by a live conductor.
    HeldBy(String),
}

/// The verdict on a Lease record. `unchanged_for`: how long this process
/// has seen the same record (resourceVersion).
pub fn verdict(
    lease: Option<&Lease>,
    unchanged_for: Duration,
    default_duration: Duration,
) -> Verdict {
    let Some(l) = lease else {
        return Verdict::Absent;
    };
    let spec = l.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("");
    if holder.is_empty() {
        return Verdict::Take;
    }
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|d| u64::try_from(d).ok())
        .map(Duration::from_secs)
        .unwrap_or(default_duration);
    // Ours included: a live holder in this process renews every third of
    // the duration, so one unchanged for a whole duration is stale (a
    // release that lost a race with a renewal), and another task of this
    // process waits for a live one to be deleted. Identities are unique per
    // process start.
    if unchanged_for >= duration {
        Verdict::Take
    } else {
        Verdict::HeldBy(holder.to_string())
    }
}

/// Why a lease could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("held by conductor {0}")]
    Held(String),
    #[error("the management cluster did not answer about the lease: {0}")]
    Api(#[from] kube::Error),
}

struct Shared {
    api: Api<Lease>,
    enabled: bool,
    me: String,
    duration: Duration,
    /// Per lease name: (resourceVersion, when this process first saw it).
    seen: Mutex<HashMap<String, (String, Instant)>>,
    leader: AtomicBool,
    /// Set once when the process begins to stop: campaigns end, and losing
    /// the leadership is then the plan, not a fault.
    stopping: AtomicBool,
    /// The Leases as a watch sees them, once [`Leases::watch`] started and
    /// its first list is done (the leader's scan then costs no request).
    watched: Mutex<Option<Store<Lease>>>,
    watch_synced: Arc<AtomicBool>,
}

/// This process's view of the Leases (one per process, cloned).
#[derive(Clone)]
pub struct Leases(Arc<Shared>);

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("me", &self.0.me)
            .field("enabled", &self.0.enabled)
            .finish()
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Leases {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        me: &str,
        duration: Duration,
        enabled: bool,
    ) -> Leases {
        Leases(Arc::new(Shared {
            api: Api::namespaced(client, namespace),
            enabled,
            me: me.to_string(),
            duration,
            seen: Mutex::new(HashMap::new()),
            leader: AtomicBool::new(!enabled),
            stopping: AtomicBool::new(false),
            watched: Mutex::new(None),
            watch_synced: Arc::new(AtomicBool::new(false)),
        }))
    }

    pub fn me(&self) -> &str {
        &self.0.me
    }

    pub fn enabled(&self) -> bool {
        self.0.enabled
    }

    pub fn duration(&self) -> Duration {
        self.0.duration
    }

    /// Whether this process is the status leader now.
    pub fn is_leader(&self) -> bool {
        self.0.leader.load(Ordering::SeqCst)
    }

    /// The process is stopping (SIGTERM): campaigns end at their next
    /// round and do not take the leadership again.
    pub fn begin_stopping(&self) {
        self.0.stopping.store(true, Ordering::SeqCst);
    }

    pub fn stopping(&self) -> bool {
        self.0.stopping.load(Ordering::SeqCst)
    }

    pub(in crate::lifecycle) fn set_leader(&self, v: bool) {
        self.0.leader.store(v, Ordering::SeqCst);
    }

    /// One small request proving the management cluster answers this
    /// process (a one-item list of the Leases; the broker election's
    /// fitness probe, see [`super::elect`]).
    pub async fn probe(&self) -> Result<(), kube::Error> {
        self.0
            .api
            .list(&ListParams::default().limit(1))
            .await
            .map(|_| ())
    }

    /// How long this process has seen `name` at `rv`.
    fn unchanged_for(&self, name: &str, rv: &str) -> Duration {
        let mut seen = match self.0.seen.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let now = Instant::now();
        match seen.get(name) {
            Some((r, since)) if r == rv => now.duration_since(*since),
            _ => {
                seen.insert(name.to_string(), (rv.to_string(), now));
                Duration::ZERO
            }
        }
    }

    fn forget(&self, name: &str) {
        if let Ok(mut m) = self.0.seen.lock() {
            m.remove(name);
        }
    }

    fn record(&self, transitions: i32) -> LeaseSpec {
        let now = now_micro();
        LeaseSpec {
            holder_identity: Some(self.0.me.clone()),
            lease_duration_seconds: i32::try_from(self.0.duration.as_secs()).ok(),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One attempt that leaves an expired lease alone: its holder died in
    /// the middle of an operation, which only a resume may take over (a
    /// status pass would release it with the operation unfinished).
    ///
    /// It starts with the create (a free Lease is absent): a status pass
    /// that gets it costs the apiserver that create and the release's
    /// delete; one that does not, the create's 409.
    pub async fn try_acquire_if_free(&self, name: &str) -> Result<Held, LeaseError> {
        if !self.0.enabled {
            return Ok(Held::unleased(self.clone(), name));
        }
        match self
            .0
            .api
            .create(&PostParams::default(), &self.new_lease(name))
            .await
        {
            Ok(l) => Ok(Held::start(self.clone(), name, l)),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(LeaseError::Held(
                "another conductor (or one that stopped renewing it: the leader takes it over)"
                    .into(),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// A new Lease `name` held by this conductor.
    fn new_lease(&self, name: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_string(),
                        "magnum-conductor".to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(self.record(0)),
        }
    }

    /// One attempt: the lease (taken over from a holder that stopped
    /// renewing it), or who holds it.
    pub async fn try_acquire(&self, name: &str) -> Result<Held, LeaseError> {
        if !self.0.enabled {
            return Ok(Held::unleased(self.clone(), name));
        }
        let api = &self.0.api;
        let current = api.get_opt(name).await?;
        let rv = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let unchanged = self.unchanged_for(name, &rv);
        let stored = match verdict(current.as_ref(), unchanged, self.0.duration) {
            Verdict::HeldBy(h) => return Err(LeaseError::Held(h)),
            Verdict::Absent => {
                match api
                    .create(&PostParams::default(), &self.new_lease(name))
                    .await
                {
                    Ok(l) => l,
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        return Err(LeaseError::Held("another conductor (just now)".into()));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Verdict::Take => {
                let Some(mut l) = current else {
                    return Err(LeaseError::Held("nobody (gone meanwhile)".into()));
                };
                let before = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
                let transitions = l
                    .spec
                    .as_ref()
                    .and_then(|s| s.lease_transitions)
                    .unwrap_or(0)
                    + i32::from(before.as_deref().is_some_and(|h| !h.is_empty()));
                l.spec = Some(self.record(transitions));
                // `replace` carries the resourceVersion read: a conductor
                // that took it meanwhile makes this a 409.
                match api.replace(name, &PostParams::default(), &l).await {
                    Ok(l) => {
                        if let Some(h) = before.filter(|h| !h.is_empty() && h != &self.0.me) {
                            tracing::warn!(lease = name, from = %h, "took over a lease its holder stopped renewing");
                        }
                        l
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                        return Err(LeaseError::Held("another conductor (just now)".into()));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(Held::start(self.clone(), name, stored))
    }

    /// Wait (up to `max`) for the lease: a live holder's critical section
    /// ends within seconds, a dead one's lease expires after its duration.
    pub async fn acquire(&self, name: &str, max: Duration) -> Result<Held, LeaseError> {
        let deadline = Instant::now() + max;
        let mut pause = Duration::from_millis(100);
        let mut said = false;
        loop {
            match self.try_acquire(name).await {
                Ok(h) => return Ok(h),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(LeaseError::Api(e)) => {
                    tracing::warn!(lease = name, error = %e, "cannot read the lease; retrying");
                }
                // Said once: a request waiting behind another operation
                // on the cluster (here or on another host).
                Err(LeaseError::Held(h)) if !said => {
                    said = true;
                    tracing::info!(lease = name, holder = %h, "waiting for the lease");
                }
                Err(LeaseError::Held(_)) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Watch the Leases' namespace (once per process; the leader's
    /// [`Leases::scan`] then reads the watch's cache instead of listing:
    /// no request at rest however many operations run).
    pub fn watch(&self) {
        let Ok(mut slot) = self.0.watched.lock() else {
            return;
        };
        if !self.0.enabled || slot.is_some() {
            return;
        }
        let writer = reflector::store::Writer::<Lease>::default();
        *slot = Some(writer.as_reader());
        let stream = reflector::reflector(
            writer,
            watcher::watcher(self.0.api.clone(), watcher::Config::default()),
        )
        .default_backoff();
        let synced = self.0.watch_synced.clone();
        tokio::spawn(async move {
            futures_util::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::InitDone) => synced.store(true, Ordering::SeqCst),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "lease watch failed; retrying with backoff")
                    }
                }
            }
        });
    }

    /// The Leases now: the watch's cache once synced, else a list.
    async fn current(&self) -> Result<Vec<Lease>, kube::Error> {
        if self.0.watch_synced.load(Ordering::SeqCst)
            && let Ok(slot) = self.0.watched.lock()
            && let Some(store) = slot.as_ref()
        {
            return Ok(store.state().iter().map(|l| (**l).clone()).collect());
        }
        Ok(self.0.api.list(&ListParams::default()).await?.items)
    }

    /// The cluster Leases held by someone else and not renewed for their
    /// duration (seen by this process): their operations lost their
    /// conductor. Also returns the uuids whose Lease went away since the
    /// last call (their operation ended: the leader looks at them).
    pub async fn scan(
        &self,
        known: &mut Vec<String>,
    ) -> Result<(Vec<String>, Vec<String>), kube::Error> {
        if !self.0.enabled {
            return Ok((Vec::new(), Vec::new()));
        }
        let list = self.current().await?;
        let mut orphans = Vec::new();
        let mut now_known = Vec::new();
        for l in &list {
            let Some(name) = l.metadata.name.as_deref() else {
                continue;
            };
            let Some(uuid) = name.strip_prefix(CLUSTER_PREFIX) else {
                continue;
            };
            now_known.push(uuid.to_string());
            let rv = l.metadata.resource_version.as_deref().unwrap_or_default();
            let unchanged = self.unchanged_for(name, rv);
            let holder = l
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                .unwrap_or("");
            if !holder.is_empty() && verdict(Some(l), unchanged, self.0.duration) == Verdict::Take {
                orphans.push(uuid.to_string());
            }
        }
        let ended = known
            .iter()
            .filter(|u| !now_known.contains(u))
            .cloned()
            .collect();
        *known = now_known;
        Ok((orphans, ended))
    }

    /// Give up the leadership at shutdown: the leader Lease is deleted, so
    /// another conductor leads at its next try instead of after the
    /// Lease's duration.
    pub async fn step_down(&self) {
        self.begin_stopping();
        if !self.0.enabled || !self.is_leader() {
            return;
        }
        self.set_leader(false);
        let Ok(Some(l)) = self.0.api.get_opt(LEADER).await else {
            return;
        };
        if l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) != Some(self.0.me.as_str()) {
            return;
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: l.metadata.resource_version.clone(),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.0.api.delete(LEADER, &dp).await {
            Ok(_) => tracing::info!("stepped down as status leader"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot release the leader lease; it expires on its own")
            }
        }
    }

    /// Campaign for the leader Lease for ever: `elected` runs each time
    /// this process becomes the leader.
    pub async fn campaign<F>(self, elected: F)
    where
        F: Fn() + Send + 'static,
    {
        if !self.0.enabled {
            self.set_leader(true);
            elected();
            return;
        }
        let every = self.0.duration / 3;
        let mut held: Option<Held> = None;
        loop {
            if self.stopping() {
                // SIGTERM: hand over now. Dropping `held` stops its
                // renewals and releases the Lease (`step_down`, later,
                // finds this process no longer leading).
                if held.take().is_some() {
                    self.set_leader(false);
                    tracing::info!("handed over the status leadership: this conductor is stopping");
                }
                return;
            }
            match &held {
                Some(h) if h.valid() => {}
                Some(_) => {
                    tracing::error!("lost the status leadership (could not renew the lease)");
                    self.set_leader(false);
                    held = None;
                }
                None => match self.try_acquire(LEADER).await {
                    Ok(h) => {
                        tracing::info!(me = %self.0.me, "elected status leader");
                        self.set_leader(true);
                        held = Some(h);
                        elected();
                    }
                    Err(LeaseError::Held(h)) => {
                        tracing::debug!(leader = %h, "another conductor leads");
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot campaign for the leadership"),
                },
            }
            tokio::time::sleep(every).await;
        }
    }
}

struct HeldState {
    rv: String,
    valid_until: Instant,
    released: bool,
    /// The Lease as last written by this process (a renewal replaces it
    /// at its resourceVersion: no read first; a write by anyone else in
    /// between makes it fail with 409).
    last: Option<Lease>,
}

/// A held Lease: renewed in the background until dropped, then deleted.
pub struct Held {
    leases: Leases,
    name: String,
    state: Arc<Mutex<HeldState>>,
    lost: Arc<AtomicBool>,
    renew: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("name", &self.name).finish()
    }
}

impl Held {
    fn unleased(leases: Leases, name: &str) -> Held {
        Held {
            leases,
            name: name.to_string(),
            state: Arc::new(Mutex::new(HeldState {
                rv: String::new(),
                valid_until: Instant::now() + Duration::from_secs(u64::from(u32::MAX)),
                released: true,
                last: None,
            })),
            lost: Arc::new(AtomicBool::new(false)),
            renew: None,
        }
    }

    fn start(leases: Leases, name: &str, stored: Lease) -> Held {
        let duration = leases.0.duration;
        let state = Arc::new(Mutex::new(HeldState {
            rv: stored.metadata.resource_version.clone().unwrap_or_default(),
            valid_until: Instant::now() + duration,
            released: false,
            last: Some(stored),
        }));
        let lost = Arc::new(AtomicBool::new(false));
        let renew = {
            let (leases, name, state, lost) = (
                leases.clone(),
                name.to_string(),
                state.clone(),
                lost.clone(),
            );
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(duration / 3).await;
                    if !renew_once(&leases, &name, &state, &lost).await {
                        return;
                    }
                }
            })
        };
        Held {
            leases,
            name: name.to_string(),
            state,
            lost,
            renew: Some(renew),
        }
    }

    /// Whether this process can still prove it holds the lease (renewed
    /// within its duration, not taken over).
    pub fn valid(&self) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return false;
        }
        match self.state.lock() {
            Ok(s) => Instant::now() < s.valid_until,
            Err(_) => false,
        }
    }
}

/// Renew once; false when the lease is lost for good.
async fn renew_once(
    leases: &Leases,
    name: &str,
    state: &Arc<Mutex<HeldState>>,
    lost: &Arc<AtomicBool>,
) -> bool {
    let api = &leases.0.api;
    let (rv, last) = match state.lock() {
        Ok(s) => (s.rv.clone(), s.last.clone()),
        Err(_) => return false,
    };
    let attempt = async {
        let mut l = match last {
            Some(l) if l.metadata.resource_version.as_deref() == Some(rv.as_str()) => l,
            _ => api.get(name).await?,
        };
        if l.metadata.resource_version.as_deref() != Some(rv.as_str()) {
            return Ok::<Option<Lease>, kube::Error>(None);
        }
        if let Some(s) = l.spec.as_mut() {
            s.renew_time = Some(now_micro());
        }
        api.replace(name, &PostParams::default(), &l)
            .await
            .map(Some)
    };
    let started = Instant::now();
    match attempt.await {
        Ok(Some(l)) => {
            if let Ok(mut s) = state.lock() {
                s.rv = l.metadata.resource_version.clone().unwrap_or_default();
                s.valid_until = started + leases.0.duration;
                s.last = Some(l);
            }
            true
        }
        Ok(None) => {
            tracing::error!(lease = name, "lease taken over by another conductor");
            lost.store(true, Ordering::SeqCst);
            false
        }
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
            if leases.stopping() {
                // SIGTERM: `step_down` released it while this renewal was
                // on its way (a planned hand-over, not a loss).
                tracing::info!(lease = name, code = e.code, "lease released at shutdown");
            } else {
                tracing::error!(lease = name, code = e.code, "lease lost");
            }
            lost.store(true, Ordering::SeqCst);
            false
        }
        Err(e) => {
            tracing::warn!(lease = name, error = %e, "cannot renew the lease; retrying");
            true
        }
    }
}

/// Delete a lease this process holds. The resourceVersion may be one
/// behind: a renewal cancelled by the drop may still have reached the
/// apiserver. Then the lease is read again and, still ours, deleted at its
/// current version (left behind, the leader would wait a whole duration).
async fn release(leases: &Leases, name: &str, rv: String) {
    let api = &leases.0.api;
    let delete = |rv: Option<String>| {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: rv,
                uid: None,
            }),
            ..DeleteParams::default()
        };
        async move { api.delete(name, &dp).await }
    };
    let mut result = delete(Some(rv)).await.map(|_| ());
    if let Err(kube::Error::Api(e)) = &result
        && e.code == 409
    {
        result = match api.get_opt(name).await {
            Ok(Some(l))
                if l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
                    == Some(leases.0.me.as_str()) =>
            {
                delete(l.metadata.resource_version.clone())
                    .await
                    .map(|_| ())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
    }
    match result {
        Ok(()) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => {
            tracing::warn!(lease = %name, error = %e, "cannot release the lease; it expires on its own");
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(t) = self.renew.take() {
            t.abort();
        }
        let (rv, released) = match self.state.lock() {
            Ok(mut s) => {
                let r = (s.rv.clone(), s.released);
                s.released = true;
                r
            }
            Err(_) => return,
        };
        if released || self.lost.load(Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let leases = self.leases.clone();
        let name = std::mem::take(&mut self.name);
        rt.spawn(async move {
            release(&leases, &name, rv).await;
            leases.forget(&name);
        });
    }
}

#[cfg(test)]
mod tests;
