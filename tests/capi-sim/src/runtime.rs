//! Running the controllers against a real apiserver (I/O): one kube-runtime
//! watcher per kind feeds the [`Cache`]; a pass runs, after a change, the
//! reconcilers of every Cluster the change concerns (several Clusters at
//! once, each Cluster's objects in controller order), and sends their
//! [`Action`]s. A write's answer goes into the cache at once, so the next
//! reconciler of the pass sees it (as CAPI waits for its cache to see its
//! own writes). Nothing runs while nothing changes: a fleet at rest costs
//! the apiserver nothing but the open watches.
//!
//! Scope: all namespaces, or those starting with `namespace_prefix` (so
//! several tests can share one apiserver; CAPI's own `--namespace` flag
//! limits its controllers to one namespace in the same way).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

use crate::cache::{Cache, ClusterKey, Wake};
use crate::controllers::{Action, Ctx, reconciler};
use crate::kinds::{Kind, Line};
use crate::obj::{CLUSTER_LABEL, deleting, name, namespace};
use crate::shared::lock;

pub const FIELD_MANAGER: &str = "capi-sim";

/// How the controllers run.
#[derive(Debug, Clone)]
pub struct Options {
    pub line: Line,
    /// Pause after a change before a pass (changes arriving meanwhile are
    /// taken in the same pass).
    pub tick: Duration,
    /// Only namespaces starting with this (None: all).
    pub namespace_prefix: Option<String>,
    /// Clusters reconciled at once.
    pub concurrency: usize,
    /// Real apiservers for the workload clusters ([`crate::workload`]);
    /// their addresses become the control-plane endpoints.
    pub workloads: Option<crate::workload::Workloads>,
    /// The cloud side in real OpenStack services ([`crate::cloud`]).
    pub cloud: Option<crate::cloud::Cloud>,
    /// CAAPH's Helm client ([`crate::helm`]): the releases' outcomes.
    pub releases: Option<crate::helm::Releases>,
}

impl Options {
    pub fn new(line: Line) -> Options {
        Options {
            line,
            tick: Duration::from_millis(20),
            namespace_prefix: None,
            concurrency: 8,
            workloads: None,
            cloud: None,
            releases: None,
        }
    }
}

struct Inner {
    client: kube::Client,
    opts: Options,
    cache: Mutex<Cache>,
    wake: Mutex<Wake>,
    changed: tokio::sync::Notify,
    paused: AtomicBool,
    /// Held for the length of a pass: pausing waits for it.
    pass: tokio::sync::Mutex<()>,
    errors: Mutex<VecDeque<String>>,
    /// Kinds whose first list is in.
    synced: Mutex<std::collections::HashSet<Kind>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The simulated controllers, running. Dropping every clone does not stop
/// them: call [`Controllers::stop`].
#[derive(Clone)]
pub struct Controllers(Arc<Inner>);

impl Controllers {
    /// Start the watches and the pass loop on the current runtime.
    pub fn start(client: kube::Client, opts: Options) -> Controllers {
        let c = Controllers(Arc::new(Inner {
            client,
            opts,
            cache: Mutex::new(Cache::default()),
            wake: Mutex::new(Wake::default()),
            changed: tokio::sync::Notify::new(),
            paused: AtomicBool::new(false),
            pass: tokio::sync::Mutex::new(()),
            errors: Mutex::new(VecDeque::new()),
            synced: Mutex::new(Default::default()),
            tasks: Mutex::new(Vec::new()),
        }));
        let mut tasks = Vec::new();
        for kind in Kind::ALL {
            let me = c.clone();
            tasks.push(tokio::spawn(async move { me.watch(kind).await }));
        }
        let me = c.clone();
        tasks.push(tokio::spawn(async move { me.run().await }));
        let changes = [
            c.0.opts.cloud.as_ref().and_then(|w| w.take_changed()),
            c.0.opts.releases.as_ref().and_then(|r| r.take_changed()),
        ];
        for mut changed in changes.into_iter().flatten() {
            let me = c.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(key) = changed.recv().await {
                    me.wake(Wake {
                        all: false,
                        clusters: [key].into(),
                    });
                }
            }));
        }
        if let Some(mut ready) = c.0.opts.workloads.as_ref().and_then(|w| w.take_ready()) {
            let me = c.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(key) = ready.recv().await {
                    me.wake(Wake {
                        all: false,
                        clusters: [key].into(),
                    });
                }
            }));
        }
        *lock(&c.0.tasks) = tasks;
        c
    }

    pub fn stop(&self) {
        for t in lock(&self.0.tasks).drain(..) {
            t.abort();
        }
    }

    /// Whether every kind has been listed once.
    pub fn synced(&self) -> bool {
        lock(&self.0.synced).len() == Kind::ALL.len()
    }

    /// Wait until every kind has been listed once.
    pub async fn wait_synced(&self) {
        while !self.synced() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop reconciling; returns once no pass is under way (a barrier: no
    /// controller write after this, as a controller scaled to zero).
    pub async fn pause(&self) {
        self.0.paused.store(true, Ordering::SeqCst);
        let _ = self.0.pass.lock().await;
    }

    pub fn resume(&self) {
        self.0.paused.store(false, Ordering::SeqCst);
        self.0.changed.notify_one();
    }

    /// Writes the apiserver refused (a simulator bug, or a schema the
    /// controllers do not follow), newest last, at most 1,000.
    pub fn errors(&self) -> Vec<String> {
        lock(&self.0.errors).iter().cloned().collect()
    }

    /// Read the cache (tests, the clone helper).
    pub fn read<T>(&self, f: impl FnOnce(&Cache) -> T) -> T {
        f(&lock(&self.0.cache))
    }

    fn in_scope(&self, kind: Kind, o: &Value) -> bool {
        match &self.0.opts.namespace_prefix {
            None => true,
            Some(p) => {
                let ns = if kind == Kind::Namespace {
                    name(o)
                } else {
                    namespace(o)
                };
                ns.starts_with(p.as_str())
            }
        }
    }

    fn record_error(&self, e: String) {
        tracing::warn!(error = %e, "simulated controller write refused");
        let mut all = lock(&self.0.errors);
        all.push_back(e);
        while all.len() > 1000 {
            all.pop_front();
        }
    }

    fn wake(&self, w: Wake) {
        if w.is_empty() {
            return;
        }
        lock(&self.0.wake).merge(w);
        self.0.changed.notify_one();
    }

    /// A watched object as JSON, with the apiVersion and kind the list
    /// items may lack.
    fn value(&self, kind: Kind, o: DynamicObject) -> Option<Value> {
        let mut v = serde_json::to_value(o).ok()?;
        if v.get("apiVersion").is_none_or(Value::is_null) {
            v["apiVersion"] = json!(kind.api_version(self.0.opts.line));
        }
        if v.get("kind").is_none_or(Value::is_null) {
            v["kind"] = json!(kind.name());
        }
        Some(v)
    }

    async fn watch(&self, kind: Kind) {
        let api: Api<DynamicObject> =
            Api::all_with(self.0.client.clone(), &kind.api_resource(self.0.opts.line));
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut buffer: Vec<Value> = Vec::new();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => buffer.clear(),
                Ok(Event::InitApply(o)) => {
                    if let Some(v) = self.value(kind, o).filter(|v| self.in_scope(kind, v)) {
                        buffer.push(v);
                    }
                }
                Ok(Event::InitDone) => {
                    let w = lock(&self.0.cache).replace(kind, std::mem::take(&mut buffer));
                    lock(&self.0.synced).insert(kind);
                    self.wake(w);
                }
                Ok(Event::Apply(o)) => {
                    if let Some(v) = self.value(kind, o).filter(|v| self.in_scope(kind, v)) {
                        let w = lock(&self.0.cache).upsert(kind, v);
                        if let Some(w) = w {
                            self.wake(w);
                        }
                    }
                }
                Ok(Event::Delete(o)) => {
                    if let Some(v) = self.value(kind, o).filter(|v| self.in_scope(kind, v)) {
                        tracing::debug!(kind = kind.name(), name = name(&v), "deleted");
                        let w = lock(&self.0.cache).remove(kind, &v);
                        self.wake(w);
                    }
                }
                Err(e) => tracing::debug!(kind = kind.name(), error = %e, "watch error (retrying)"),
            }
        }
    }

    async fn run(&self) {
        loop {
            self.0.changed.notified().await;
            tokio::time::sleep(self.0.opts.tick).await;
            if self.0.paused.load(Ordering::SeqCst) || !self.synced() {
                if !self.synced() {
                    // Not every kind listed yet: look again shortly.
                    let me = self.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        me.0.changed.notify_one();
                    });
                }
                continue;
            }
            let _pass = self.0.pass.lock().await;
            if self.0.paused.load(Ordering::SeqCst) {
                continue;
            }
            self.pass().await;
        }
    }

    /// One pass over what the changes since the last one concern.
    async fn pass(&self) {
        let wake = std::mem::take(&mut *lock(&self.0.wake));
        let clusters: Vec<ClusterKey> = if wake.all {
            lock(&self.0.cache).clusters()
        } else {
            wake.clusters.into_iter().collect()
        };
        tracing::debug!(all = wake.all, clusters = clusters.len(), "pass");
        let failed: Vec<ClusterKey> = futures_util::stream::iter(clusters)
            .map(|key| async move {
                let ok = self.reconcile_cluster(&key).await;
                (!ok).then_some(key)
            })
            .buffer_unordered(self.0.opts.concurrency.max(1))
            .filter_map(|x| async move { x })
            .collect()
            .await;
        // Objects of no Cluster, every pass.
        for kind in Kind::ALL.into_iter().filter(|k| k.reconciled()) {
            let loose = lock(&self.0.cache).loose(kind);
            for (ns, n) in loose {
                self.reconcile_one(kind, &ns, &n).await;
            }
        }
        if !failed.is_empty() {
            // Retried a moment later (an error is not a busy loop).
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                me.wake(Wake {
                    all: false,
                    clusters: failed.into_iter().collect(),
                });
            });
        }
    }

    /// Every reconciled object of one Cluster, in controller order; false if
    /// a write was refused.
    async fn reconcile_cluster(&self, key: &ClusterKey) -> bool {
        let mut ok = true;
        for kind in Kind::ALL.into_iter().filter(|k| k.reconciled()) {
            let names = lock(&self.0.cache).members(key, kind);
            for n in names {
                ok &= self.reconcile_one(kind, &key.0, &n).await;
            }
        }
        if let Some(w) = &self.0.opts.workloads {
            // What the kubelets of its machines register in its apiserver.
            let nodes = {
                let cache = lock(&self.0.cache);
                let machines = cache.labelled(Kind::Machine, &key.0, &[(CLUSTER_LABEL, &key.1)]);
                crate::workload::nodes_of(&machines)
            };
            w.want_nodes(key, nodes);
        }
        ok
    }

    async fn reconcile_one(&self, kind: Kind, ns: &str, n: &str) -> bool {
        let Some(reconcile) = reconciler(kind) else {
            return true;
        };
        let actions = {
            let cache = lock(&self.0.cache);
            let Some(obj) = cache.get(kind, ns, n).cloned() else {
                return true;
            };
            let mut ctx = Ctx::new(&cache, self.0.opts.line);
            if let (Some(cloud), Kind::OpenStackCluster) = (&self.0.opts.cloud, kind) {
                if let Some(cluster) = crate::controllers::openstack::cluster_name(&obj)
                    && (crate::controllers::openstack::owned(&obj) || deleting(&obj))
                {
                    cloud.want(&(ns.to_string(), cluster), &obj);
                }
                ctx.infra = Some(cloud.infra());
            }
            if let Some(w) = &self.0.opts.workloads {
                match kind {
                    Kind::OpenStackCluster => {
                        if w.netns()
                            && let Some(cluster) = crate::controllers::openstack::cluster_name(&obj)
                        {
                            let placement = crate::controllers::openstack::placement(
                                &obj,
                                ctx.infra
                                    .as_ref()
                                    .map(|i| i.get(&(ns.to_string(), cluster.clone()))),
                            );
                            // Not known yet (the cloud is still making the
                            // network): decided on a later pass.
                            if let Some(p) = placement {
                                w.place(&(ns.to_string(), cluster), p);
                            }
                        }
                        ctx.endpoints = Some(w.endpoints());
                    }
                    Kind::Machine => {
                        let cluster = obj
                            .pointer("/spec/clusterName")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        ctx.registered_nodes = w.registered(&(ns.to_string(), cluster.to_string()));
                    }
                    _ => {}
                }
            }
            if let (Some(r), Kind::HelmReleaseProxy) = (&self.0.opts.releases, kind) {
                ctx.release = Some(r.outcome(ns, n));
            }
            reconcile(&mut ctx, obj);
            ctx.actions
        };
        let mut ok = true;
        for a in actions {
            tracing::debug!(kind = kind.name(), ns, name = n, action = ?a, "write");
            if let Err(e) = self.execute(&a).await {
                self.record_error(e);
                ok = false;
            }
        }
        ok
    }

    fn url(&self, kind: Kind, ns: &str, name: Option<&str>, status: bool) -> String {
        let (g, v, _, plural) = kind.gvk(self.0.opts.line);
        let base = if g.is_empty() {
            format!("/api/{v}")
        } else {
            format!("/apis/{g}/{v}")
        };
        let mut u = if ns.is_empty() {
            format!("{base}/{plural}")
        } else {
            format!("{base}/namespaces/{ns}/{plural}")
        };
        if let Some(n) = name {
            u.push('/');
            u.push_str(n);
        }
        if status {
            u.push_str("/status");
        }
        u
    }

    async fn send(
        &self,
        method: &str,
        url: String,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<Value, kube::Error> {
        let req = http::Request::builder()
            .method(method)
            .uri(url)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(body)
            .map_err(kube::Error::HttpError)?;
        self.0.client.request::<Value>(req).await
    }

    /// Send one write and put its answer in the cache.
    async fn execute(&self, a: &Action) -> Result<(), String> {
        let q = format!("?fieldManager={FIELD_MANAGER}&fieldValidation=Strict");
        match a {
            Action::Create { kind, ns, obj } => {
                let mut body = obj.clone();
                let status = body.as_object_mut().and_then(|o| o.remove("status"));
                let url = format!("{}{q}", self.url(*kind, ns, None, false));
                let shown = if name(obj).is_empty() {
                    obj["metadata"]["generateName"].as_str().unwrap_or("")
                } else {
                    name(obj)
                };
                let what = format!("create {} {shown}", kind.name());
                let created = self
                    .send(
                        "POST",
                        url,
                        "application/json",
                        body.to_string().into_bytes(),
                    )
                    .await
                    .map_err(|e| format!("{what}: {e}"))?;
                self.remember(*kind, created.clone());
                if let Some(st) = status {
                    let url = format!("{}{q}", self.url(*kind, ns, Some(name(&created)), true));
                    let patched = self
                        .send(
                            "PATCH",
                            url,
                            "application/merge-patch+json",
                            json!({"status": st}).to_string().into_bytes(),
                        )
                        .await
                        .map_err(|e| format!("{what} status: {e}"))?;
                    self.remember(*kind, patched);
                }
                Ok(())
            }
            Action::Patch {
                kind,
                ns,
                name: n,
                patch,
                status,
            } => {
                let url = format!("{}{q}", self.url(*kind, ns, Some(n), *status));
                match self
                    .send(
                        "PATCH",
                        url,
                        "application/merge-patch+json",
                        patch.to_string().into_bytes(),
                    )
                    .await
                {
                    Ok(v) => {
                        self.remember(*kind, v);
                        Ok(())
                    }
                    // Gone meanwhile (its watch event will say so).
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(format!(
                        "patch {} {n}{}: {e}",
                        kind.name(),
                        if *status { " status" } else { "" }
                    )),
                }
            }
            Action::Delete { kind, ns, name: n } => {
                let url = self.url(*kind, ns, Some(n), false);
                let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"});
                match self
                    .send(
                        "DELETE",
                        url,
                        "application/json",
                        body.to_string().into_bytes(),
                    )
                    .await
                {
                    Ok(v) => {
                        if v.get("kind").and_then(Value::as_str) == Some(kind.name())
                            && deleting(&v)
                            && v.pointer("/metadata/finalizers")
                                .and_then(Value::as_array)
                                .is_some_and(|f| !f.is_empty())
                        {
                            // Held by finalizers: being deleted, looked at again.
                            self.remember(*kind, v);
                        } else {
                            let mut cache = lock(&self.0.cache);
                            // The answer is the object as last stored, or a Status.
                            let gone = if name(&v) == n.as_str() {
                                v
                            } else {
                                cache.get(*kind, ns, n).cloned().unwrap_or_else(
                                    || json!({"metadata": {"name": n, "namespace": ns}}),
                                )
                            };
                            let w = cache.remove(*kind, &gone);
                            drop(cache);
                            self.wake(w);
                        }
                        Ok(())
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(format!("delete {} {n}: {e}", kind.name())),
                }
            }
        }
    }

    fn remember(&self, kind: Kind, v: Value) {
        let w = lock(&self.0.cache).upsert(kind, v);
        if let Some(w) = w {
            // What a write changed is looked at again next pass (its watch
            // event, arriving later, is then already known).
            self.wake(w);
        }
    }
}
