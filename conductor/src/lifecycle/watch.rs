//! Watches on the CAPI objects that carry Magnum clusters' status (I/O).
//!
//! One kube-runtime watcher per kind (Cluster, OpenStackCluster,
//! KubeadmControlPlane, MachineDeployment, Machine, HelmReleaseProxy),
//! across namespaces, filtered by the `cluster.x-k8s.io/cluster-name` label
//! that CAPI and the addon provider put on all of them. Every event names
//! the cluster it belongs to (namespace + CAPI cluster name = `stack_id`)
//! on a channel; the status worker recomputes that one cluster from the
//! cache ([`super::cache`]: indexed by cluster, projected). No request per cluster: the only traffic is the open watches.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use super::cache::{Cache, Key, Role};
use crate::capi::render::{CLUSTER_NAME_LABEL, CapiLine};
use crate::capi::status::Observed;
use crate::metrics::Metrics;

/// What the status worker is asked to look at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kick {
    /// One CAPI cluster: (namespace, name).
    Cluster(String, String),
    /// One Magnum cluster by uuid (it may have nothing on CAPI yet).
    Uuid(String),
    /// Everything (a watch (re)listed: objects deleted meanwhile sent no event).
    All,
}

/// Objects per page of a watch's initial list. kube-runtime asks 500 at a
/// time; a page is read whole and decoded before its first object is filed,
/// and the seven kinds list at once, so at 500 the start's transient peak
/// was tens of MiB of decoded objects (with `managedFields`), which glibc
/// kept fragmented around the cache built meanwhile (docs/benchmarks.md,
/// "Memory per cluster"). Smaller pages cost more list requests, at start and
/// after a watch breaks only.
pub const LIST_PAGE_SIZE: u32 = 50;

/// How many kicks may wait for the status worker (a burst beyond this is
/// folded into one full pass).
pub const KICK_QUEUE: usize = 4096;

/// The sending side of the status worker's queue. Bounded: a kick that
/// finds it full is not queued, but makes the worker's next pass a full
/// one ([`Kick::All`]), so nothing is lost and memory stays bounded.
#[derive(Clone)]
pub struct Kicks {
    tx: mpsc::Sender<Kick>,
    overflow: Arc<AtomicBool>,
    overflows: prometheus::IntCounter,
}

/// The status worker's end of the queue.
pub struct KickQueue {
    rx: mpsc::Receiver<Kick>,
    overflow: Arc<AtomicBool>,
}

impl Kicks {
    pub fn channel(capacity: usize, overflows: prometheus::IntCounter) -> (Kicks, KickQueue) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let overflow = Arc::new(AtomicBool::new(false));
        (
            Kicks {
                tx,
                overflow: overflow.clone(),
                overflows,
            },
            KickQueue { rx, overflow },
        )
    }

    /// Queue a kick (never waits).
    pub fn send(&self, k: Kick) {
        match self.tx.try_send(k) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                if !self.overflow.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        capacity = self.tx.max_capacity(),
                        "status queue full: the next pass covers every cluster"
                    );
                }
                self.overflows.inc();
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

impl KickQueue {
    pub async fn recv(&mut self) -> Option<Kick> {
        self.rx.recv().await
    }

    pub fn try_recv(&mut self) -> Option<Kick> {
        self.rx.try_recv().ok()
    }

    /// Whether kicks were dropped since the last call (then do a full pass).
    pub fn take_overflow(&self) -> bool {
        self.overflow.swap(false, Ordering::SeqCst)
    }
}

/// The watched kinds for a CAPI line: (role, apiVersion, kind, plural).
fn kinds(line: CapiLine) -> [(Role, &'static str, &'static str, &'static str); 7] {
    let (capi, kcp) = match line {
        CapiLine::V1beta1 => (
            "cluster.x-k8s.io/v1beta1",
            "controlplane.cluster.x-k8s.io/v1beta1",
        ),
        CapiLine::V1beta2 => (
            "cluster.x-k8s.io/v1beta2",
            "controlplane.cluster.x-k8s.io/v1beta2",
        ),
    };
    [
        (Role::Cluster, capi, "Cluster", "clusters"),
        (
            Role::Infra,
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackCluster",
            "openstackclusters",
        ),
        (
            Role::ControlPlane,
            kcp,
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
        ),
        (
            Role::MachineDeployment,
            capi,
            "MachineDeployment",
            "machinedeployments",
        ),
        (Role::Machine, capi, "Machine", "machines"),
        (
            Role::HelmRelease,
            "addons.cluster.x-k8s.io/v1alpha1",
            "HelmReleaseProxy",
            "helmreleaseproxies",
        ),
        (
            Role::ApiSlice,
            "discovery.k8s.io/v1",
            "EndpointSlice",
            "endpointslices",
        ),
    ]
}

/// The watches' cache (see [`super::cache`]).
#[derive(Clone)]
pub struct Watches {
    cache: Arc<RwLock<Cache>>,
    kinds: usize,
    /// Kinds whose initial list has completed at least once.
    ready: Arc<AtomicUsize>,
    /// Woken each time a kind completes its first list.
    ready_changed: Arc<tokio::sync::Notify>,
    /// When a watch last failed (any kind).
    last_error: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

/// What one watch event means for the status worker.
enum Touched {
    Clusters(Vec<Key>),
    /// A (re)list completed: objects may have gone without an event.
    Everything,
}

impl Watches {
    /// Start the watches; events go to `kicks`.
    pub fn spawn(client: kube::Client, line: CapiLine, kicks: Kicks, metrics: Metrics) -> Watches {
        let watches = Watches {
            cache: Arc::new(RwLock::new(Cache::default())),
            kinds: Role::ALL.len(),
            ready: Arc::new(AtomicUsize::new(0)),
            ready_changed: Arc::new(tokio::sync::Notify::new()),
            last_error: Arc::new(std::sync::Mutex::new(None)),
        };
        for (role, av, kind, plural) in kinds(line) {
            let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let config = watcher::Config::default()
                .labels(CLUSTER_NAME_LABEL)
                .page_size(LIST_PAGE_SIZE);
            let kicks = kicks.clone();
            let metrics = metrics.clone();
            metrics.watch_started(kind);
            let w = watches.clone();
            tokio::spawn(async move {
                let mut first_init = true;
                let stream = watcher::watcher(api, config).default_backoff();
                futures_util::pin_mut!(stream);
                while let Some(ev) = stream.next().await {
                    let ev = match ev {
                        Ok(ev) => ev,
                        Err(e) => {
                            metrics.watch_errors.with_label_values(&[kind]).inc();
                            w.note_error();
                            tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
                            continue;
                        }
                    };
                    if matches!(ev, Event::Apply(_) | Event::Delete(_) | Event::InitApply(_)) {
                        metrics.watch_events.with_label_values(&[kind]).inc();
                    }
                    match w.record(role, ev) {
                        Touched::Clusters(keys) => {
                            for (ns, name) in keys {
                                kicks.send(Kick::Cluster(ns, name));
                            }
                        }
                        Touched::Everything => {
                            if first_init {
                                first_init = false;
                                w.ready.fetch_add(1, Ordering::SeqCst);
                                w.ready_changed.notify_waiters();
                            }
                            kicks.send(Kick::All);
                        }
                    }
                    let size = w.read().size(role);
                    metrics
                        .cache_objects
                        .with_label_values(&[kind])
                        .set(size.objects as i64);
                    metrics
                        .cache_bytes
                        .with_label_values(&[kind])
                        .set(size.bytes as i64);
                }
                tracing::error!(kind, "watch stream ended");
            });
        }
        watches
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        // Every update completes under the lock (nothing in it panics on
        // input), so even a poisoned lock guards a whole cache.
        self.cache.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|p| p.into_inner())
    }

    /// File one watch event in the cache.
    fn record(&self, role: Role, ev: Event<DynamicObject>) -> Touched {
        // Converted outside the lock (the status worker reads meanwhile).
        let value = |o: DynamicObject| serde_json::to_value(o).ok();
        match ev {
            Event::Apply(o) => Touched::Clusters(match value(o) {
                Some(v) => self.write().apply(role, v),
                None => Vec::new(),
            }),
            Event::Delete(o) => Touched::Clusters(
                value(o)
                    .and_then(|v| self.write().delete(role, &v))
                    .into_iter()
                    .collect(),
            ),
            Event::Init => {
                self.write().relist_begin(role);
                Touched::Clusters(Vec::new())
            }
            Event::InitApply(o) => {
                if let Some(v) = value(o) {
                    self.write().relist_apply(role, v);
                }
                Touched::Clusters(Vec::new())
            }
            Event::InitDone => {
                self.write().relist_done(role);
                Touched::Everything
            }
        }
    }

    fn note_error(&self) {
        let mut t = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
        *t = Some(std::time::Instant::now());
    }

    /// When a watch last failed (none since start: `None`).
    pub fn last_error(&self) -> Option<std::time::Instant> {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every kind has listed once: the caches can say "gone".
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) >= self.kinds
    }

    /// Wait until [`Watches::is_ready`] (for startup). Any number of tasks
    /// may wait at once (kube-runtime's `Store::wait_until_ready` wakes only
    /// the last of several concurrent waiters: a second one waited for ever).
    pub async fn wait_ready(&self) {
        loop {
            let changed = self.ready_changed.notified();
            tokio::pin!(changed);
            // Registered before the check: a completion in between wakes it.
            changed.as_mut().enable();
            if self.is_ready() {
                return;
            }
            changed.await;
        }
    }

    /// What the cache holds for CAPI cluster `name` in `ns`.
    pub fn observed(&self, ns: &str, name: &str) -> Observed {
        self.read().observed(ns, name)
    }

    /// Every (namespace, name) of a CAPI Cluster in the cache.
    pub fn clusters(&self) -> Vec<(String, String)> {
        self.read().clusters()
    }

    /// Whether a CAPI Cluster is cached, and the Magnum cluster uuid it
    /// carries (see [`Cache::uuid_of`]).
    pub fn uuid_of(&self, ns: &str, name: &str) -> Option<Option<String>> {
        self.read().uuid_of(ns, name)
    }
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches")
            .field("kinds", &self.kinds)
            .field("ready", &self.is_ready())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_folds_into_one_full_pass() {
        let metric = prometheus::IntCounter::new("t", "t").unwrap();
        let (kicks, mut q) = Kicks::channel(2, metric.clone());
        for i in 0..5 {
            kicks.send(Kick::Uuid(format!("c{i}")));
        }
        assert_eq!(metric.get(), 3, "three did not fit");
        assert_eq!(q.recv().await, Some(Kick::Uuid("c0".into())));
        assert_eq!(q.try_recv(), Some(Kick::Uuid("c1".into())));
        assert_eq!(q.try_recv(), None);
        assert!(
            q.take_overflow(),
            "the worker is told to look at everything"
        );
        assert!(!q.take_overflow(), "once");
        kicks.send(Kick::Uuid("c5".into()));
        assert_eq!(q.try_recv(), Some(Kick::Uuid("c5".into())));
        assert!(!q.take_overflow());
    }
}
