//! Watches on the CAPI objects that carry Magnum clusters' status (I/O).
//!
//! One kube-runtime reflector per kind (Cluster, OpenStackCluster,
//! KubeadmControlPlane, MachineDeployment, Machine, HelmReleaseProxy),
//! across namespaces, filtered by the `cluster.x-k8s.io/cluster-name` label
//! that CAPI and the addon provider put on all of them. Every event names
//! the cluster it belongs to (namespace + CAPI cluster name = `stack_id`)
//! on a channel; the status worker recomputes that one cluster from the
//! caches. No request per cluster: the only traffic is the open watches.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::mpsc;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Cluster,
    Infra,
    ControlPlane,
    MachineDeployment,
    Machine,
    HelmRelease,
}

/// The watched kinds for a CAPI line: (role, apiVersion, kind, plural).
fn kinds(line: CapiLine) -> [(Role, &'static str, &'static str, &'static str); 6] {
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
    ]
}

/// The (namespace, CAPI cluster name) an object belongs to.
pub fn key_of(o: &DynamicObject) -> Option<(String, String)> {
    let ns = o.metadata.namespace.clone()?;
    let name = o
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .cloned()?;
    Some((ns, name))
}

/// The caches of the six kinds.
#[derive(Clone)]
pub struct Watches {
    stores: Vec<(Role, Store<DynamicObject>)>,
    /// Kinds whose initial list has completed at least once.
    ready: Arc<AtomicUsize>,
    /// Woken each time a kind completes its first list.
    ready_changed: Arc<tokio::sync::Notify>,
}

impl Watches {
    /// Start the reflectors; events go to `kicks`.
    pub fn spawn(client: kube::Client, line: CapiLine, kicks: Kicks, metrics: Metrics) -> Watches {
        let ready = Arc::new(AtomicUsize::new(0));
        let ready_changed = Arc::new(tokio::sync::Notify::new());
        let mut stores = Vec::new();
        for (role, av, kind, plural) in kinds(line) {
            let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            );
            let writer = reflector::store::Writer::new(ar.clone());
            stores.push((role, writer.as_reader()));
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let config = watcher::Config::default().labels(CLUSTER_NAME_LABEL);
            let kicks = kicks.clone();
            let ready = ready.clone();
            let ready_changed = ready_changed.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let mut first_init = true;
                let stream =
                    reflector::reflector(writer, watcher::watcher(api, config)).default_backoff();
                futures_util::pin_mut!(stream);
                while let Some(ev) = stream.next().await {
                    match ev {
                        Ok(Event::Apply(o) | Event::Delete(o) | Event::InitApply(o)) => {
                            metrics.watch_events.with_label_values(&[kind]).inc();
                            if let Some((ns, name)) = key_of(&o) {
                                kicks.send(Kick::Cluster(ns, name));
                            }
                        }
                        Ok(Event::Init) => {}
                        Ok(Event::InitDone) => {
                            if first_init {
                                first_init = false;
                                ready.fetch_add(1, Ordering::SeqCst);
                                ready_changed.notify_waiters();
                            }
                            kicks.send(Kick::All);
                        }
                        Err(e) => {
                            metrics.watch_errors.with_label_values(&[kind]).inc();
                            tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
                        }
                    }
                }
                tracing::error!(kind, "watch stream ended");
            });
        }
        Watches {
            stores,
            ready,
            ready_changed,
        }
    }

    /// Every kind has listed once: the caches can say "gone".
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) >= self.stores.len()
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

    /// What the caches hold for CAPI cluster `name` in `ns`.
    pub fn observed(&self, ns: &str, name: &str) -> Observed {
        let mut o = Observed::default();
        for (role, store) in &self.stores {
            let mut items: Vec<Value> = store
                .state_filter(|d| {
                    d.metadata.namespace.as_deref() == Some(ns)
                        && (if *role == Role::Cluster {
                            d.metadata.name.as_deref() == Some(name)
                        } else {
                            key_of(d).is_some_and(|(_, n)| n == name)
                        })
                })
                .into_iter()
                .filter_map(|d| serde_json::to_value(&*d).ok())
                .collect();
            items.sort_by(|a, b| {
                a["metadata"]["name"]
                    .as_str()
                    .cmp(&b["metadata"]["name"].as_str())
            });
            match role {
                Role::Cluster => o.cluster = items.into_iter().next(),
                Role::Infra => o.infra = items.into_iter().next(),
                Role::ControlPlane => o.control_plane = items.into_iter().next(),
                Role::MachineDeployment => o.machine_deployments = items,
                Role::Machine => o.machines = items,
                Role::HelmRelease => o.helm_releases = items,
            }
        }
        o
    }

    /// Every (namespace, name) of a CAPI Cluster in the cache.
    pub fn clusters(&self) -> Vec<(String, String)> {
        self.stores
            .iter()
            .filter(|(r, _)| *r == Role::Cluster)
            .flat_map(|(_, s)| s.state())
            .filter_map(|d| Some((d.metadata.namespace.clone()?, d.metadata.name.clone()?)))
            .collect()
    }
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches")
            .field("kinds", &self.stores.len())
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
