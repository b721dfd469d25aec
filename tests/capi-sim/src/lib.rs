//! `capi-sim`: a Kubernetes apiserver with the semantics our conductor
//! relies on, serving the real CAPI/CAPO/CAAPH CRDs of one release line, for
//! tests, the demo and benchmarks (there is no Kubernetes on this machine).
//!
//! - [`resources`]: built-in kinds + CRDs loaded from `../shared/crds`;
//! - [`store`]: objects, versions, conflicts, status subresource, patches,
//!   finalizers, garbage collection, event history (no I/O);
//! - [`selector`], [`patch`]: label/field selectors, merge and JSON patches;
//! - [`api`]: the HTTP surface (discovery, REST verbs, watch streams,
//!   `Status` error bodies).
//!
//! - [`validate`]: structural validation and pruning from the CRD schemas;
//! - [`faults`]: scriptable errors, delays, hangs, dropped/expired watches;
//! - [`ssa`]: server-side apply and managedFields;
//! - [`controllers`]: simulated CAPI/CAPO controllers (`Sim::start_controllers`).
//!
//! Not yet: MachineHealthCheck remediation, HelmChartProxy, ClusterResourceSet (see README "capi-sim").

pub mod api;
pub mod controllers;
pub mod faults;
pub mod patch;
pub mod resources;
pub mod selector;
pub mod ssa;
pub mod store;
pub mod validate;
pub mod webhooks;

use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use store::{Event, Store};

/// The shared simulator state: one store, one event stream.
#[derive(Clone)]
pub struct Sim {
    store: Arc<Mutex<Store>>,
    events: broadcast::Sender<Arc<Event>>,
    pub bookmark_every: std::time::Duration,
    /// Injected faults (see [`faults`]).
    pub faults: Arc<faults::Faults>,
    controller_errors: Arc<Mutex<Vec<String>>>,
    /// Simulated controllers paused (`POST /_sim/controllers/pause`).
    pub paused: Arc<std::sync::atomic::AtomicBool>,
    /// Requests served, by (client, verb): `GET /_sim/requests`.
    requests: Arc<Mutex<std::collections::BTreeMap<(String, String), u64>>>,
    /// Bumped to end every open watch (`POST /_sim/watches/drop`).
    watch_epoch: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Sim {
    pub fn new(resources: Vec<resources::Resource>, history: usize) -> Sim {
        let (events, _) = broadcast::channel(history.max(16));
        Sim {
            store: Arc::new(Mutex::new(Store::new(resources, history))),
            events,
            bookmark_every: std::time::Duration::from_secs(10),
            faults: Arc::new(faults::Faults::default()),
            controller_errors: Arc::new(Mutex::new(Vec::new())),
            requests: Arc::new(Mutex::new(std::collections::BTreeMap::new())),
            paused: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            watch_epoch: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    /// End every open watch stream now, as an apiserver restart or a load
    /// balancer timeout does; clients must re-watch (and relist on 410).
    pub fn drop_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// A receiver that changes when [`Sim::drop_watches`] is called.
    pub fn watch_epoch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch_epoch.subscribe()
    }

    /// Count one request of `client` (its User-Agent product) and `verb`.
    pub fn count_request(&self, client: &str, verb: &str) {
        let mut m = match self.requests.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *m.entry((client.to_string(), verb.to_string())).or_default() += 1;
    }

    /// Requests served so far: `{client: {verb: count}}`.
    pub fn request_counts(&self) -> serde_json::Value {
        let m = match self.requests.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let mut out = serde_json::Map::new();
        for ((client, verb), n) in m {
            out.entry(client)
                .or_insert_with(|| serde_json::json!({}))
                .as_object_mut()
                .map(|o| o.insert(verb, serde_json::json!(n)));
        }
        serde_json::Value::Object(out)
    }

    /// Run the simulated controllers every `tick` (each object advances at
    /// most one step per tick: tests use a few milliseconds, the demo seconds).
    pub fn start_controllers(
        &self,
        line: resources::Line,
        tick: std::time::Duration,
    ) -> tokio::task::JoinHandle<()> {
        let sim = self.clone();
        tokio::spawn(async move {
            let mut scheduler = controllers::Scheduler::default();
            loop {
                tokio::time::sleep(tick).await;
                if sim.paused.load(std::sync::atomic::Ordering::Relaxed) {
                    continue;
                }
                let errors = sim.with(|s| {
                    let p = scheduler.pass(s, line);
                    (p.errors, p.events)
                });
                if !errors.is_empty() {
                    for e in &errors {
                        tracing::warn!(error = %e, "simulated controller write refused");
                    }
                    let mut all = match sim.controller_errors.lock() {
                        Ok(g) => g,
                        Err(p) => p.into_inner(),
                    };
                    all.extend(errors);
                    let excess = all.len().saturating_sub(1000);
                    all.drain(..excess);
                }
            }
        })
    }

    /// Writes of the simulated controllers that the apiserver refused (a
    /// simulator bug, or a schema the controllers do not follow).
    pub fn controller_errors(&self) -> Vec<String> {
        match self.controller_errors.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Run `f` on the store; publish what it produced, in order.
    pub fn with<T>(&self, f: impl FnOnce(&mut Store) -> (T, Vec<Arc<Event>>)) -> T {
        let mut s = match self.store.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (out, evs) = f(&mut s);
        for e in evs {
            let _ = self.events.send(e);
        }
        out
    }

    /// Read-only access (and a receiver subscribed under the same lock, so
    /// a watch misses nothing between its replay and its live stream).
    pub fn read<T>(&self, f: impl FnOnce(&Store) -> T) -> T {
        let s = match self.store.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&s)
    }

    pub fn subscribe_with<T>(
        &self,
        f: impl FnOnce(&Store) -> T,
    ) -> (T, broadcast::Receiver<Arc<Event>>) {
        let s = match self.store.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let rx = self.events.subscribe();
        (f(&s), rx)
    }
}

/// The built-in kinds plus every CRD of `line` under `crds_root`.
pub fn load_line(
    crds_root: &std::path::Path,
    line: resources::Line,
) -> Result<Vec<resources::Resource>, resources::LoadError> {
    let dirs = resources::line_dirs(crds_root, line);
    let refs: Vec<&std::path::Path> = dirs.iter().map(std::path::PathBuf::as_path).collect();
    let mut all = resources::builtins();
    all.extend(resources::load_crd_dirs(&refs)?);
    Ok(all)
}

/// A simulator serving HTTP on a free loopback port, in this process (for
/// tests and benches): the address, and the handle to script it. With
/// `tick`, the simulated controllers run.
pub async fn serve_in_process(
    crds_root: &std::path::Path,
    line: resources::Line,
    tick: Option<std::time::Duration>,
) -> std::io::Result<(std::net::SocketAddr, Sim)> {
    let all = load_line(crds_root, line).map_err(|e| std::io::Error::other(e.to_string()))?;
    let sim = Sim::new(all, 100_000);
    if let Some(t) = tick {
        sim.start_controllers(line, t);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = api::router(sim.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok((addr, sim))
}
