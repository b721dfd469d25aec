//! The proxy's control loop (I/O, thin): watches of the management
//! cluster fill caches; on every change (a burst coalesced) and when a
//! cluster's probe is due, one pass
//!
//! 1. computes what to serve ([`crate::plan::served`]);
//! 2. finds each cluster's network namespace on this host and probes its
//!    API addresses from inside it (a TCP connect, as HAProxy's default
//!    check, which the anchor relies on), all of a cluster's candidates at
//!    once: each cluster once per `probe_interval`, however many events
//!    arrive ([`due`]), so a failure counts once per interval and `failures`
//!    failed probes in a row take `failures` intervals; a new cluster is
//!    probed in the pass that first sees it;
//! 3. sets the routing table the listener reads;
//! 4. publishes this host's EndpointSlice of each cluster it reaches,
//!    withdraws those it no longer reaches (after `failures` probes in a
//!    row fail), renews this host's Lease, and deletes other hosts'
//!    slices whose Lease expired ([`crate::publish`]).
//!
//! Nothing it learns is kept only in memory: after a restart the first
//! pass rebuilds the same table and slices from the watches and probes.
//! Asked to stop, it withdraws every slice of this host and deletes its
//! Lease before it ends ([`Controller::run`]), so no one dials a host that
//! is gone, even where it was the only proxy host.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::Notify;

use common::api_proxy;

use crate::metrics::Metrics;
use crate::plan::{self, Served, ServiceRef};
use crate::publish::{self, SliceRef};
use crate::route::{Backend, Routes};

/// The field manager of every write.
const MANAGER: &str = "magnum-capi-proxy";

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This host's name (the slices' and the Lease's).
    pub host: String,
    /// Where the management cluster reaches this proxy.
    pub advertise: SocketAddr,
    pub netns_dir: PathBuf,
    pub lease_namespace: String,
    pub probe_interval: Duration,
    pub dial_timeout: Duration,
    /// Probes in a row that must fail before a slice is withdrawn.
    pub failures: u32,
    pub lease_duration: Duration,
}

impl Settings {
    /// The longest a reachable-turned-unreachable cluster keeps this
    /// host's slice: `failures` probe intervals, the last dial's timeout,
    /// and one pass.
    pub fn withdraw_bound(&self) -> Duration {
        self.probe_interval * (self.failures + 1) + self.dial_timeout
    }
}

/// What one cluster looks like from this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    pub up: bool,
    pub failures: u32,
    /// The last backend that answered.
    pub backend: Option<Backend>,
    /// When it was last probed (None: never).
    pub probed: Option<Instant>,
}

/// Whether a cluster's probe is due at `now` (pure): never probed, or
/// probed `interval` ago or more.
pub fn due(h: Option<&Health>, now: Instant, interval: Duration) -> bool {
    h.and_then(|h| h.probed)
        .is_none_or(|t| now.saturating_duration_since(t) >= interval)
}

/// How long until the next probe is due (pure): the soonest of the
/// clusters' `probed + interval`, at most `interval` (a pass also runs
/// then for the Lease and the stale slices), at least 10 ms.
pub fn next_due<'a>(
    health: impl IntoIterator<Item = &'a Health>,
    now: Instant,
    interval: Duration,
) -> Duration {
    health
        .into_iter()
        .filter_map(|h| h.probed)
        .map(|t| (t + interval).saturating_duration_since(now))
        .min()
        .unwrap_or(interval)
        .clamp(Duration::from_millis(10), interval)
}

/// What the log says of a cluster (pure): its state and why, as a line
/// changes only when the state does.
pub fn described(s: &Served, state: &str, netns: Option<&str>) -> String {
    match (state, &s.waiting, netns) {
        ("waiting", Some(why), _) => format!("waiting: {why}"),
        ("no_namespace", _, _) => format!(
            "not served from this host: no namespace of network {} here (qdhcp- or ovnmeta-)",
            s.network_id.as_deref().unwrap_or("?")
        ),
        (st, _, Some(ns)) => format!("{st} (namespace {ns})"),
        (st, _, None) => st.to_string(),
    }
}

/// One probe's result folded in (pure): up on the first success, down
/// after `threshold` failures in a row.
pub fn observe(h: &mut Health, answered: Option<Backend>, threshold: u32) {
    match answered {
        Some(b) => {
            h.up = true;
            h.failures = 0;
            h.backend = Some(b);
        }
        None => {
            h.failures = h.failures.saturating_add(1);
            if h.failures >= threshold.max(1) {
                h.up = false;
            }
        }
    }
}

/// Whether the slice in the cache differs from the one to publish in what
/// matters (pure).
pub fn needs_write(have: Option<&Value>, want: &Value) -> bool {
    let Some(have) = have else { return true };
    [
        "/endpoints",
        "/ports",
        "/addressType",
        "/metadata/ownerReferences/0/uid",
    ]
    .iter()
    .any(|p| have.pointer(p) != want.pointer(p))
        || have.pointer("/metadata/labels") != want.pointer("/metadata/labels")
}

/// The caches the watches fill.
#[derive(Clone)]
struct Caches {
    services: Store<DynamicObject>,
    clusters: Store<DynamicObject>,
    machines: Store<DynamicObject>,
    slices: Store<DynamicObject>,
    leases: Store<DynamicObject>,
}

fn values(s: &Store<DynamicObject>) -> Vec<Value> {
    s.state()
        .iter()
        .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
        .collect()
}

/// CAPO's kinds, as both CAPI lines' CAPO serves them.
fn capo(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Start a watch of `ar` (all namespaces, or `ns`) into a cache; `changed`
/// is told of every event.
fn watch(
    client: &kube::Client,
    ar: ApiResource,
    ns: Option<&str>,
    labels: &str,
    changed: Arc<Notify>,
    metrics: Arc<Metrics>,
) -> Store<DynamicObject> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let writer = reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    let kind = ar.kind.clone();
    let cfg = watcher::Config::default().labels(labels);
    tokio::spawn(async move {
        let mut stream = reflector::reflector(writer, watcher(api, cfg).default_backoff()).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => changed.notify_one(),
                Err(e) => {
                    metrics.watch_errors.with_label_values(&[&kind]).inc();
                    tracing::warn!(kind, error = %e, "watch failed (retrying with backoff)");
                }
            }
        }
    });
    reader
}

/// The loop.
pub struct Controller {
    client: kube::Client,
    settings: Settings,
    routes: Arc<RwLock<Routes>>,
    metrics: Arc<Metrics>,
    health: BTreeMap<String, Health>,
    /// What the log last said of each served cluster.
    said: BTreeMap<String, String>,
    lease_renewed: Option<Instant>,
    /// Routes given on the command line (kept under the watched ones).
    pub static_routes: Routes,
}

/// How long stopping may take to withdraw this host's slices and release
/// its Lease (the systemd unit's TimeoutStopSec leaves room for it).
pub const STOP_BOUND: Duration = Duration::from_secs(10);

impl Controller {
    pub fn new(
        client: kube::Client,
        settings: Settings,
        routes: Arc<RwLock<Routes>>,
        metrics: Arc<Metrics>,
    ) -> Controller {
        Controller {
            client,
            settings,
            routes,
            metrics,
            health: BTreeMap::new(),
            said: BTreeMap::new(),
            lease_renewed: None,
            static_routes: Routes::new(),
        }
    }

    /// Watch and serve until `stop` completes; then withdraw this host's
    /// slices and delete its Lease (within [`STOP_BOUND`]) and return.
    pub async fn run(mut self, stop: impl std::future::Future<Output = &'static str>) {
        tokio::pin!(stop);
        let changed = Arc::new(Notify::new());
        let c = &self.client;
        let m = &self.metrics;
        let caches = Caches {
            services: watch(
                c,
                ApiResource::erase::<Service>(&()),
                None,
                api_proxy::SERVICE_LABEL,
                changed.clone(),
                m.clone(),
            ),
            clusters: watch(
                c,
                capo("OpenStackCluster", "openstackclusters"),
                None,
                "",
                changed.clone(),
                m.clone(),
            ),
            machines: watch(
                c,
                capo("OpenStackMachine", "openstackmachines"),
                None,
                "cluster.x-k8s.io/control-plane",
                changed.clone(),
                m.clone(),
            ),
            slices: watch(
                c,
                ApiResource::erase::<EndpointSlice>(&()),
                None,
                &format!("{}={}", publish::MANAGED_BY_LABEL, api_proxy::MANAGED_BY),
                changed.clone(),
                m.clone(),
            ),
            leases: watch(
                c,
                ApiResource::erase::<Lease>(&()),
                Some(&self.settings.lease_namespace),
                api_proxy::HOST_LABEL,
                changed.clone(),
                m.clone(),
            ),
        };
        let synced = async {
            for s in [
                &caches.services,
                &caches.clusters,
                &caches.machines,
                &caches.slices,
                &caches.leases,
            ] {
                let _ = s.wait_until_ready().await;
            }
        };
        let signal = tokio::select! {
            () = synced => None,
            why = &mut stop => Some(why),
        };
        let signal = match signal {
            Some(why) => why,
            None => {
                tracing::info!(host = %self.settings.host, advertise = %self.settings.advertise, "watches synced");
                self.metrics.synced.set(1);
                loop {
                    let wait = self.pass(&caches).await;
                    // Every change, or the next probe that is due.
                    tokio::select! {
                        why = &mut stop => break why,
                        _ = tokio::time::timeout(wait, changed.notified()) => {}
                    }
                    // Coalesce a burst of events into one pass.
                    tokio::select! {
                        why = &mut stop => break why,
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            }
        };
        tracing::info!(signal, "stopping: withdrawing this host's slices");
        match tokio::time::timeout(STOP_BOUND, self.withdraw_all()).await {
            Ok((slices, 0)) => {
                tracing::info!(slices, lease = %self.settings.lease_namespace, "withdrew this host's slices and released its Lease");
            }
            Ok((slices, failed)) => tracing::warn!(
                slices,
                failed,
                "stopping: some of this host's slices could not be withdrawn; other hosts delete them once its Lease expires"
            ),
            Err(_) => tracing::warn!(
                bound_s = STOP_BOUND.as_secs(),
                "stopping: the management cluster did not answer in time; other hosts delete this host's slices once its Lease expires"
            ),
        }
    }

    /// Every slice of this host (listed from the apiserver, not the cache:
    /// whatever it published, also before this process) deleted, then its
    /// Lease: (deleted, failed).
    async fn withdraw_all(&mut self) -> (usize, usize) {
        let me = &self.settings.host;
        let api: Api<EndpointSlice> = Api::all(self.client.clone());
        let lp = kube::api::ListParams::default().labels(&format!(
            "{}={},{}={me}",
            publish::MANAGED_BY_LABEL,
            api_proxy::MANAGED_BY,
            api_proxy::HOST_LABEL
        ));
        let (mut deleted, mut failed) = (0, 0);
        match api.list(&lp).await {
            Ok(list) => {
                for s in list.items {
                    let (Some(ns), Some(name)) = (s.metadata.namespace, s.metadata.name) else {
                        continue;
                    };
                    match self.delete_slice(&ns, &name, "withdraw").await {
                        Deleted::Now => {
                            tracing::info!(namespace = %ns, slice = %name, "withdrawn (stopping)");
                            deleted += 1;
                        }
                        Deleted::Already => {}
                        Deleted::Failed => failed += 1,
                    }
                }
            }
            Err(e) => {
                self.metrics
                    .api_errors
                    .with_label_values(&["withdraw"])
                    .inc();
                tracing::warn!(error = %e, "listing this host's slices failed");
                failed += 1;
            }
        }
        let leases: Api<Lease> =
            Api::namespaced(self.client.clone(), &self.settings.lease_namespace);
        match leases
            .delete(&api_proxy::lease_name(me), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                self.metrics.api_errors.with_label_values(&["lease"]).inc();
                tracing::warn!(error = %e, "deleting this host's Lease failed");
                failed += 1;
            }
        }
        (deleted, failed)
    }

    /// One pass; returns how long until the next probe is due.
    async fn pass(&mut self, caches: &Caches) -> Duration {
        let started = Instant::now();
        let services: Vec<ServiceRef> = values(&caches.services)
            .iter()
            .filter_map(ServiceRef::of)
            .collect();
        let served = plan::served(
            &services,
            &values(&caches.clusters),
            &values(&caches.machines),
        );
        // Probe those whose probe is due; the others keep their health.
        let mut probes = Vec::new();
        let mut states: BTreeMap<&str, &'static str> = BTreeMap::new();
        let mut namespaces: BTreeMap<&str, String> = BTreeMap::new();
        let mut candidates: BTreeMap<String, Vec<Backend>> = BTreeMap::new();
        for s in &served {
            if s.waiting.is_some() {
                states.insert(&s.server_name, "waiting");
                continue;
            }
            let Some(net) = &s.network_id else { continue };
            let Some(ns) = crate::netns::of_network(&self.settings.netns_dir, net) else {
                // Not on this host (another host serves it, or none: the
                // conductor says so in the cluster's status).
                states.insert(&s.server_name, "no_namespace");
                continue;
            };
            namespaces.insert(&s.server_name, ns.clone());
            let backends: Vec<Backend> = s
                .endpoints
                .iter()
                .map(|a| Backend {
                    netns: ns.clone(),
                    addr: *a,
                })
                .collect();
            if due(
                self.health.get(&s.server_name),
                started,
                self.settings.probe_interval,
            ) {
                probes.push(self.probe(s.server_name.clone(), backends.clone()));
            }
            candidates.insert(s.server_name.clone(), backends);
        }
        for (name, answered) in futures_util::future::join_all(probes).await {
            let h = self.health.entry(name.clone()).or_default();
            let was_up = h.up;
            observe(h, answered.clone(), self.settings.failures);
            h.probed = Some(started);
            self.metrics.probes.inc();
            if answered.is_none() {
                self.metrics.probe_failures.inc();
            }
            if h.up != was_up {
                tracing::info!(cluster = %name, up = h.up, backend = ?h.backend, "reachability changed");
            }
        }
        self.health.retain(|k, _| candidates.contains_key(k));
        let mut table = self.static_routes.clone();
        let mut up: BTreeSet<String> = BTreeSet::new();
        for (name, backends) in &candidates {
            let h = self.health.get(name);
            if let Some(b) = h
                .and_then(|h| h.backend.clone())
                .or_else(|| backends.first().cloned())
            {
                table.insert(name, b);
            }
            if h.is_some_and(|h| h.up) {
                up.insert(name.clone());
            }
        }
        let probed: BTreeSet<&String> = self.health.keys().collect();
        for s in &served {
            let st = if up.contains(&s.server_name) {
                "up"
            } else if probed.contains(&s.server_name) {
                "down"
            } else {
                states
                    .get(s.server_name.as_str())
                    .copied()
                    .unwrap_or("waiting")
            };
            states.insert(&s.server_name, st);
        }
        for st in ["up", "down", "no_namespace", "waiting"] {
            let n = states.values().filter(|v| **v == st).count();
            self.metrics.clusters.with_label_values(&[st]).set(n as i64);
        }
        // Each cluster's state in the log, once per change.
        for s in &served {
            let state = states
                .get(s.server_name.as_str())
                .copied()
                .unwrap_or("waiting");
            let text = described(
                s,
                state,
                namespaces.get(s.server_name.as_str()).map(String::as_str),
            );
            if self.said.get(&s.server_name) != Some(&text) {
                tracing::info!(cluster = %s.server_name, namespace = %s.service.namespace, "{text}");
                self.said.insert(s.server_name.clone(), text);
            }
        }
        let names: BTreeSet<&str> = served.iter().map(|s| s.server_name.as_str()).collect();
        self.said.retain(|k, _| names.contains(k.as_str()));
        match self.routes.write() {
            Ok(mut r) => *r = table,
            Err(p) => *p.into_inner() = table,
        }
        self.renew_lease().await;
        self.publish(caches, &served, &up).await;
        self.collect_stale(caches).await;
        self.metrics
            .pass_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics.last_pass.set(chrono::Utc::now().timestamp());
        next_due(
            self.health.values(),
            Instant::now(),
            self.settings.probe_interval,
        )
    }

    /// Probe one cluster's candidate backends, all at once (N unreachable
    /// addresses cost one dial timeout, not N); the answer is the first in
    /// the candidates' order that connected.
    fn probe(
        &self,
        name: String,
        candidates: Vec<Backend>,
    ) -> impl std::future::Future<Output = (String, Option<Backend>)> + use<> {
        let dir = self.settings.netns_dir.clone();
        let timeout = self.settings.dial_timeout;
        async move {
            let dials = candidates.into_iter().map(|b| {
                let dir = dir.clone();
                async move {
                    let ns = dir.join(&b.netns);
                    let addr = b.addr;
                    let ok = tokio::task::spawn_blocking(move || {
                        crate::netns::connect(&ns, addr, timeout).is_ok()
                    })
                    .await
                    .unwrap_or(false);
                    ok.then_some(b)
                }
            });
            let answered = futures_util::future::join_all(dials)
                .await
                .into_iter()
                .flatten()
                .next();
            (name, answered)
        }
    }

    async fn renew_lease(&mut self) {
        let due = self
            .lease_renewed
            .is_none_or(|t| t.elapsed() >= self.settings.lease_duration / 3);
        if !due {
            return;
        }
        let lease = publish::lease(
            &self.settings.host,
            &self.settings.lease_namespace,
            self.settings.lease_duration.as_secs() as u32,
            chrono::Utc::now(),
        );
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.settings.lease_namespace);
        match api
            .patch(
                &api_proxy::lease_name(&self.settings.host),
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await
        {
            Ok(_) => self.lease_renewed = Some(Instant::now()),
            Err(e) => {
                self.metrics.api_errors.with_label_values(&["lease"]).inc();
                tracing::warn!(namespace = %self.settings.lease_namespace, error = %e, "renewing this host's Lease failed");
            }
        }
    }

    async fn publish(&self, caches: &Caches, served: &[Served], up: &BTreeSet<String>) {
        let me = &self.settings.host;
        let have: BTreeMap<(String, String), Value> = values(&caches.slices)
            .into_iter()
            .filter_map(|v| {
                let r = SliceRef::of(&v)?;
                (r.host == *me).then_some(((r.namespace, r.name), v))
            })
            .collect();
        let mut wanted = BTreeSet::new();
        for s in served.iter().filter(|s| up.contains(&s.server_name)) {
            let want = publish::slice(
                &s.service,
                me,
                &self.settings.lease_namespace,
                self.settings.advertise,
            );
            let key = (
                s.service.namespace.clone(),
                api_proxy::slice_name(&s.service.name, me),
            );
            if needs_write(have.get(&key), &want) {
                let api: Api<EndpointSlice> =
                    Api::namespaced(self.client.clone(), &s.service.namespace);
                match api
                    .patch(
                        &key.1,
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(&want),
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(namespace = %key.0, slice = %key.1, "published");
                        self.metrics
                            .slice_writes
                            .with_label_values(&["publish"])
                            .inc();
                    }
                    Err(e) => {
                        self.metrics
                            .api_errors
                            .with_label_values(&["publish"])
                            .inc();
                        tracing::warn!(namespace = %key.0, slice = %key.1, error = %e, "publishing failed");
                    }
                }
            }
            wanted.insert(key);
        }
        for key in have.keys().filter(|k| !wanted.contains(*k)) {
            if self.delete_slice(&key.0, &key.1, "withdraw").await == Deleted::Now {
                tracing::info!(namespace = %key.0, slice = %key.1, "withdrawn");
            }
        }
    }

    async fn collect_stale(&self, caches: &Caches) {
        let alive: BTreeMap<String, chrono::DateTime<chrono::Utc>> = values(&caches.leases)
            .iter()
            .filter_map(api_proxy::lease_alive_until)
            .collect();
        let slices: Vec<SliceRef> = values(&caches.slices)
            .iter()
            .filter_map(SliceRef::of)
            .collect();
        let grace = chrono::Duration::seconds(5);
        for s in publish::stale(
            &slices,
            &alive,
            &self.settings.host,
            &self.settings.lease_namespace,
            chrono::Utc::now(),
            grace,
        ) {
            if self.delete_slice(&s.namespace, &s.name, "stale").await == Deleted::Now {
                tracing::info!(namespace = %s.namespace, slice = %s.name, host = %s.host, "deleted the slice of a host whose Lease expired");
            }
        }
    }

    async fn delete_slice(&self, ns: &str, name: &str, why: &str) -> Deleted {
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                self.metrics.slice_writes.with_label_values(&[why]).inc();
                Deleted::Now
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Deleted::Already,
            Err(e) => {
                self.metrics.api_errors.with_label_values(&[why]).inc();
                tracing::warn!(namespace = %ns, slice = %name, error = %e, "deleting a slice failed");
                Deleted::Failed
            }
        }
    }
}

/// What a slice's delete came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deleted {
    /// Deleted by this request.
    Now,
    /// Gone before it (404): as good as deleted.
    Already,
    /// The apiserver refused or did not answer (logged and counted).
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(port: u16) -> Backend {
        Backend {
            netns: "qdhcp-n".into(),
            addr: SocketAddr::from(([10, 0, 0, 10], port)),
        }
    }

    #[test]
    fn up_on_the_first_answer_down_after_the_threshold() {
        let mut h = Health::default();
        assert!(!h.up);
        observe(&mut h, None, 2);
        assert!(!h.up);
        observe(&mut h, Some(b(6443)), 2);
        assert!(h.up);
        assert_eq!(h.backend, Some(b(6443)));
        observe(&mut h, None, 2);
        assert!(h.up, "one failure is not enough");
        observe(&mut h, None, 2);
        assert!(!h.up);
        assert_eq!(h.backend, Some(b(6443)), "the last good backend is kept");
        observe(&mut h, Some(b(6444)), 2);
        assert!(h.up && h.failures == 0);
    }

    #[test]
    fn a_cluster_is_probed_once_per_interval_however_many_passes_run() {
        let i = Duration::from_secs(3);
        let t0 = Instant::now();
        assert!(due(None, t0, i), "a new cluster at once");
        let mut h = Health {
            probed: Some(t0),
            ..Health::default()
        };
        // A burst of events: passes 50 ms apart probe nothing.
        for k in 1..60 {
            assert!(!due(Some(&h), t0 + Duration::from_millis(50 * k), i));
        }
        assert!(due(Some(&h), t0 + i, i));
        // The loop sleeps until the soonest due probe, never longer than
        // the interval, never a busy loop.
        let other = Health {
            probed: Some(t0 + Duration::from_secs(1)),
            ..Health::default()
        };
        assert_eq!(
            next_due([&h, &other], t0 + Duration::from_secs(2), i),
            Duration::from_secs(1)
        );
        assert_eq!(next_due([], t0, i), i);
        h.probed = Some(t0);
        assert_eq!(
            next_due([&h], t0 + Duration::from_secs(10), i),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn what_a_cluster_waits_for_is_said_in_words() {
        let s = Served {
            service: ServiceRef {
                namespace: "p".into(),
                name: "k1-apiserver".into(),
                uid: "u".into(),
                cluster: "k1".into(),
            },
            server_name: "k1-apiserver.p.svc".into(),
            network_id: Some("n1".into()),
            endpoints: Vec::new(),
            waiting: Some("no API address yet".into()),
        };
        assert_eq!(
            described(&s, "waiting", None),
            "waiting: no API address yet"
        );
        assert!(described(&s, "no_namespace", None).contains("network n1"));
        assert_eq!(
            described(&s, "up", Some("qdhcp-n1")),
            "up (namespace qdhcp-n1)"
        );
    }

    #[test]
    fn the_bound_is_the_probes_and_one_timeout() {
        let s = Settings {
            host: "h".into(),
            advertise: "192.0.2.1:6443".parse().unwrap(),
            netns_dir: "/run/netns".into(),
            lease_namespace: "magnum-system".into(),
            probe_interval: Duration::from_secs(2),
            dial_timeout: Duration::from_secs(1),
            failures: 2,
            lease_duration: Duration::from_secs(30),
        };
        assert_eq!(s.withdraw_bound(), Duration::from_secs(7));
    }

    #[test]
    fn a_slice_is_rewritten_only_when_what_matters_changed() {
        let svc = ServiceRef {
            namespace: "p".into(),
            name: "k1-apiserver".into(),
            uid: "u".into(),
            cluster: "k1".into(),
        };
        let want = publish::slice(
            &svc,
            "h",
            "magnum-system",
            "192.0.2.1:6443".parse().unwrap(),
        );
        assert!(needs_write(None, &want));
        let mut have = want.clone();
        have["metadata"]["resourceVersion"] = serde_json::json!("7");
        have["metadata"]["managedFields"] = serde_json::json!([]);
        assert!(!needs_write(Some(&have), &want));
        have["endpoints"][0]["addresses"][0] = serde_json::json!("192.0.2.2");
        assert!(needs_write(Some(&have), &want));
    }
}
