//! CAAPH's Helm client (I/O, opt-in: `capi-sim --helm-engine PYTHON
//! --helm-script tests/helm_render.py`, with `--workload-apiservers`): each
//! HelmReleaseProxy is installed into its workload cluster's **real**
//! apiserver from what the **real** Helm engine renders of the pinned
//! upstream chart, and its outcome is the release's status
//! ([`crate::controllers::addons::reconcile_release_proxy`] writes it).
//!
//! What it follows upstream (cluster-api-addon-provider-helm v0.4/v0.6):
//! - when (`controllers/helmreleaseproxy/helmreleaseproxy_controller.go`,
//!   `Reconcile` -> `reconcileNormal`): once the Cluster's control plane is
//!   initialized and its kubeconfig works (here: its apiserver is ready),
//!   again whenever the proxy's chart, version, values, release name or
//!   namespace change (`internal/helm_operations.go`,
//!   `InstallOrUpgradeHelmRelease`: an upgrade when the release exists and
//!   `shouldUpgradeHelmRelease` finds a difference); a failed one is tried
//!   again (controller-runtime requeues an error with backoff: here every
//!   [`RETRY`]);
//! - how (`InstallHelmRelease`/`UpgradeHelmRelease`, Helm's `action.Install`
//!   with `CreateNamespace` from the proxy's `options.install`, default
//!   true): the chart at the proxy's version rendered with the proxy's
//!   `values` as release `releaseName` in `namespace`; the chart's `crds/`
//!   created first when missing and waited for until established (Helm's
//!   `installCRDs`: never upgraded); then the templates' objects in Helm's
//!   install order (`pkg/releaseutil/kind_sorter.go`, `InstallOrder`), each
//!   marked as Helm marks what it owns (`pkg/action/validate.go`,
//!   `setMetadataVisitor`: the label `app.kubernetes.io/managed-by=Helm`,
//!   the annotations `meta.helm.sh/release-name` and `-namespace`), a
//!   namespaced object without a namespace put in the release's; an
//!   upgrade deletes what the last revision had and this one has not
//!   (`kube.Client.Update`);
//! - the outcome (`reconcileNormal`): a chart that does not render leaves no
//!   release, the `HelmReleaseReady` condition False with reason
//!   `HelmInstallOrUpgradeFailed` and Helm's message; an object the
//!   apiserver refuses makes the release `failed` (Helm records the failed
//!   revision, `failRelease`) with that message; otherwise `deployed`,
//!   the revision counted from 1;
//! - the release's record: each revision stored in the workload cluster as
//!   Helm's `secret` driver stores it, pending while its objects go in,
//!   then deployed (the one before superseded) or failed; whether to
//!   install, upgrade or leave a release as it is, and what an upgrade
//!   prunes, is decided from that record as CAAPH decides it, so a
//!   restarted capi-sim (or one told to forget, `POST
//!   /_sim/releases/forget`) carries on at the next revision
//!   ([`crate::helm_storage`]);
//! - hooks: `test` hooks are left out (`helm test` runs them); install
//!   (upgrade) hooks are created with the release, pre-hooks first, after
//!   deleting an earlier copy (`before-hook-creation`, Helm's default
//!   policy), and deleted again when their policy says `hook-succeeded`.
//!
//! Simplified: objects go in with server-side apply (field manager `helm`,
//! strict field validation: an unknown or duplicated field is refused as
//! the issue's judge asks), not Helm v3's create/three-way merge; Helm's
//! wait for hook Jobs is not done (no kubelet runs them, so no Job would
//! ever complete: Helm would time out on every chart with a hook Job);
//! an uninstall (the proxy gone) deletes the objects the release installed,
//! CRDs kept as Helm keeps them, then its record; the proxies carry no
//! finalizer, so a proxy deleted while capi-sim is down leaves its release
//! in the workload cluster (CAAPH's finalizer would hold the proxy until
//! the uninstall).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use crate::helm_storage;
use crate::kinds::{Kind, Line};
use crate::obj::{CLUSTER_LABEL, deleting};
use crate::shared::{Recent, lock};
use crate::workload::{ClusterKey, Workloads};

/// How long a failed release waits before it is tried again.
pub const RETRY: Duration = Duration::from_secs(20);

/// Helm's `InstallOrder` (`pkg/releaseutil/kind_sorter.go`); other kinds
/// after these, in the order rendered.
const INSTALL_ORDER: &[&str] = &[
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// An object of a release: (apiVersion, kind, namespace, name).
pub type ObjRef = (String, String, String, String);

/// What a render installs (pure): the objects in the order Helm creates
/// them, each with whether it is a hook and whether its policy deletes it
/// once it succeeded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub objects: Vec<Planned>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub object: Value,
    /// The template it came from.
    pub source: String,
    pub hook: bool,
    pub delete_after: bool,
}

/// The documents of a manifest text (pure): YAML documents, empty ones
/// dropped.
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        if v.is_object() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The plan of a render (pure): every template's objects (NOTES.txt and
/// partials are text, not objects), `test` hooks left out, the hooks of
/// the other phase (`install` or `upgrade`) too; pre-hooks, then the
/// release's objects in [`INSTALL_ORDER`], then post-hooks.
pub fn plan(manifests: &BTreeMap<String, String>, install: bool) -> Result<Plan, String> {
    let phase = if install { "install" } else { "upgrade" };
    let mut pre = Vec::new();
    let mut main = Vec::new();
    let mut post = Vec::new();
    for (path, text) in manifests {
        if path.ends_with("NOTES.txt") || !(path.ends_with(".yaml") || path.ends_with(".yml")) {
            continue;
        }
        for o in documents(text).map_err(|e| format!("{path}: {e}"))? {
            if o.get("kind").and_then(Value::as_str).is_none() {
                return Err(format!("{path}: an object without a kind"));
            }
            let ann = |k: &str| {
                o.pointer("/metadata/annotations")
                    .and_then(|a| a.get(k))
                    .and_then(Value::as_str)
                    .map(|s| {
                        s.split(',')
                            .map(|p| p.trim().to_string())
                            .collect::<Vec<_>>()
                    })
            };
            match ann("helm.sh/hook") {
                None => main.push((o, path.clone())),
                Some(hooks) => {
                    let delete_after = ann("helm.sh/hook-delete-policy")
                        .is_some_and(|p| p.iter().any(|x| x == "hook-succeeded"));
                    let planned = |o: Value| Planned {
                        object: o,
                        source: path.clone(),
                        hook: true,
                        delete_after,
                    };
                    if hooks.iter().any(|h| *h == format!("pre-{phase}")) {
                        pre.push(planned(o));
                    } else if hooks.iter().any(|h| *h == format!("post-{phase}")) {
                        post.push(planned(o));
                    }
                }
            }
        }
    }
    let rank = |(o, _): &(Value, String)| {
        let kind = o["kind"].as_str().unwrap_or_default();
        INSTALL_ORDER
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(INSTALL_ORDER.len())
    };
    main.sort_by_key(rank);
    let mut objects = pre;
    objects.extend(main.into_iter().map(|(o, source)| Planned {
        object: o,
        source,
        hook: false,
        delete_after: false,
    }));
    objects.extend(post);
    Ok(Plan { objects })
}

/// The release's manifest as Helm records it (pure; `pkg/action/action.go`,
/// `renderResources`): its objects, hooks apart, in the order
/// the plan installs them, each under the template it came from.
pub fn release_manifest(plan: &Plan) -> String {
    let mut out = String::new();
    for p in plan.objects.iter().filter(|p| !p.hook) {
        let yaml = serde_norway::to_string(&p.object).unwrap_or_default();
        out.push_str(&format!(
            "---\n# Source: {}\n{}\n",
            p.source,
            yaml.trim_end()
        ));
    }
    out
}

/// The release's hooks as Helm records them (pure; `pkg/release/hook.go`).
pub fn release_hooks(plan: &Plan) -> Vec<Value> {
    plan.objects
        .iter()
        .filter(|p| p.hook)
        .map(|p| {
            let ann = |k: &str| {
                p.object
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(k))
                    .and_then(Value::as_str)
                    .map(|s| s.split(',').map(str::trim).collect::<Vec<_>>())
                    .unwrap_or_default()
            };
            let weight: i64 = ann("helm.sh/hook-weight")
                .first()
                .and_then(|w| w.parse().ok())
                .unwrap_or(0);
            json!({
                "name": p.object.pointer("/metadata/name"),
                "kind": p.object["kind"],
                "path": p.source,
                "manifest": serde_norway::to_string(&p.object).unwrap_or_default(),
                "events": ann("helm.sh/hook"),
                "last_run": {"phase": ""},
                "weight": weight,
                "delete_policies": ann("helm.sh/hook-delete-policy"),
            })
        })
        .collect()
}

/// What Helm marks on every object of release `release` in `namespace`
/// (pure; see the module).
pub fn mark(o: &mut Value, release: &str, namespace: &str) {
    let meta = &mut o["metadata"];
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"]["meta.helm.sh/release-name"] = json!(release);
    meta["annotations"]["meta.helm.sh/release-namespace"] = json!(namespace);
}

/// The reference of an object once placed.
pub fn obj_ref(o: &Value) -> ObjRef {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

/// A release's outcome, as the HelmReleaseProxy's status shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The proxy's generation this outcome is of.
    pub generation: i64,
    /// `deployed`, `failed`, or none (no release: the chart did not render).
    pub status: Option<String>,
    pub revision: i64,
    /// Helm's error, when the last attempt failed.
    pub error: Option<String>,
}

struct Release {
    cluster: ClusterKey,
    /// Helm's release name and namespace (where its history is).
    name: String,
    namespace: String,
    fingerprint: u64,
    objects: BTreeSet<ObjRef>,
    outcome: Outcome,
    tried: Instant,
    /// Dropped from this process's memory ([`Releases::forget`]): the next
    /// pass knows the release only from what the cluster stores.
    forgotten: bool,
}

/// The engine's process: one request a line in, one answer a line out.
struct Proc {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

/// The real Helm engine ([`crate`]'s `tests/helm_render.py --serve` in the
/// engine's venv), started on first use and again after it dies.
pub struct Engine {
    python: PathBuf,
    script: PathBuf,
    proc: tokio::sync::Mutex<Option<Proc>>,
}

/// A render: the templates' text, and the CRD files Helm creates first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rendered {
    pub manifests: BTreeMap<String, String>,
    pub crds: Vec<String>,
    /// The chart's metadata (`Chart.yaml`).
    pub chart: Value,
}

impl Engine {
    pub fn new(python: PathBuf, script: PathBuf) -> Engine {
        Engine {
            python,
            script,
            proc: tokio::sync::Mutex::new(None),
        }
    }

    fn spawn(&self) -> Result<Proc, String> {
        let mut child = tokio::process::Command::new(&self.python)
            .arg(&self.script)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("the Helm engine ({}): {e}", self.python.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the Helm engine's pipes".into());
        };
        Ok(Proc {
            _child: child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        })
    }

    /// Outer error: the engine could not be asked (tried again later);
    /// inner: Helm's own answer that the chart does not render.
    pub async fn render(&self, job: &Value) -> Result<Result<Rendered, String>, String> {
        let mut guard = self.proc.lock().await;
        if guard.is_none() {
            *guard = Some(self.spawn()?);
        }
        let Some(p) = guard.as_mut() else {
            return Err("the Helm engine did not start".into());
        };
        let asked = async {
            p.stdin
                .write_all(format!("{job}\n").as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            p.stdin.flush().await.map_err(|e| e.to_string())?;
            p.stdout
                .next_line()
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "it exited".to_string())
        };
        let line = match tokio::time::timeout(Duration::from_secs(600), asked).await {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => {
                *guard = None;
                return Err(format!("the Helm engine: {e}"));
            }
            Err(_) => {
                *guard = None;
                return Err("the Helm engine did not answer in 600 s".into());
            }
        };
        let answer: Value =
            serde_json::from_str(&line).map_err(|e| format!("the Helm engine's answer: {e}"))?;
        if let Some(e) = answer.get("error").and_then(Value::as_str) {
            return Ok(Err(e.to_string()));
        }
        let manifests = answer["manifests"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let crds = answer["crds"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let chart = answer.get("chart").cloned().unwrap_or(Value::Null);
        Ok(Ok(Rendered {
            manifests,
            crds,
            chart,
        }))
    }
}

/// Resolved kinds per cluster: (cluster, apiVersion, kind) -> (resource,
/// namespaced).
type Kinds = HashMap<(ClusterKey, String, String), (ApiResource, bool)>;

struct Inner {
    mgmt: kube::Client,
    line: Line,
    engine: Engine,
    workloads: Workloads,
    /// By (namespace, HelmReleaseProxy name).
    releases: Mutex<BTreeMap<(String, String), Release>>,
    kinds: Mutex<Kinds>,
    changed_tx: mpsc::UnboundedSender<ClusterKey>,
    changed_rx: Mutex<Option<mpsc::UnboundedReceiver<ClusterKey>>>,
    errors: Recent,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The Helm client, running.
#[derive(Clone)]
pub struct Releases(Arc<Inner>);

impl std::fmt::Debug for Releases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Releases")
            .field("releases", &lock(&self.0.releases).len())
            .finish()
    }
}

fn fingerprint(spec: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for k in ["chartName", "version", "values", "releaseName", "namespace"] {
        spec.get(k).map(Value::to_string).hash(&mut h);
    }
    h.finish()
}

impl Releases {
    pub fn start(mgmt: kube::Client, line: Line, workloads: Workloads, engine: Engine) -> Releases {
        let (tx, rx) = mpsc::unbounded_channel();
        let r = Releases(Arc::new(Inner {
            mgmt,
            line,
            engine,
            workloads,
            releases: Mutex::new(BTreeMap::new()),
            kinds: Mutex::new(HashMap::new()),
            changed_tx: tx,
            changed_rx: Mutex::new(Some(rx)),
            errors: Recent::default(),
            tasks: Mutex::new(Vec::new()),
        }));
        let me = r.clone();
        *lock(&r.0.tasks) = vec![tokio::spawn(async move { me.run().await })];
        r
    }

    pub fn stop(&self) {
        for t in lock(&self.0.tasks).drain(..) {
            t.abort();
        }
    }

    /// The receiver of "a release of this cluster changed" (taken once, by
    /// the controllers).
    pub fn take_changed(&self) -> Option<mpsc::UnboundedReceiver<ClusterKey>> {
        lock(&self.0.changed_rx).take()
    }

    /// The outcome of HelmReleaseProxy `name` in `ns`, once tried.
    pub fn outcome(&self, ns: &str, name: &str) -> Option<Outcome> {
        lock(&self.0.releases)
            .get(&(ns.to_string(), name.to_string()))
            .map(|r| r.outcome.clone())
    }

    /// Every release tried: (namespace, proxy) -> (cluster, outcome,
    /// objects, still only known from before [`Releases::forget`]).
    pub fn all(&self) -> BTreeMap<(String, String), (ClusterKey, Outcome, usize, bool)> {
        lock(&self.0.releases)
            .iter()
            .map(|(k, r)| {
                (
                    k.clone(),
                    (
                        r.cluster.clone(),
                        r.outcome.clone(),
                        r.objects.len(),
                        r.forgotten,
                    ),
                )
            })
            .collect()
    }

    /// Drops what this process remembers of every release, as a restarted
    /// CAAPH has nothing but the releases the workload clusters store: each
    /// is read back from there on the next pass (the proxies' statuses
    /// stay as written meanwhile). The number of releases dropped.
    pub fn forget(&self) -> usize {
        let mut all = lock(&self.0.releases);
        for r in all.values_mut() {
            r.forgotten = true;
        }
        all.len()
    }

    /// What went wrong on the simulator's side (the engine, a list), not a
    /// release's failure (that is its status).
    pub fn errors(&self) -> Vec<String> {
        self.0.errors.all()
    }

    async fn run(&self) {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let ready = self.0.workloads.ready_clients();
            {
                let w = &self.0.workloads;
                lock(&self.0.releases).retain(|_, r| w.running(&r.cluster));
                lock(&self.0.kinds).retain(|(k, _, _), _| w.running(k));
            }
            for (key, client) in ready {
                if let Err(e) = self.sync_cluster(&key, &client).await {
                    self.0.errors.push(format!("{}/{}: {e}", key.0, key.1));
                }
            }
        }
    }

    async fn sync_cluster(&self, key: &ClusterKey, client: &kube::Client) -> Result<(), String> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.0.mgmt.clone(),
            &key.0,
            &Kind::HelmReleaseProxy.api_resource(self.0.line),
        );
        let proxies = api
            .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", key.1)))
            .await
            .map_err(|e| format!("HelmReleaseProxies: {e}"))?;
        let mut live = BTreeSet::new();
        for h in proxies.items {
            let o = serde_json::to_value(&h).map_err(|e| e.to_string())?;
            let name = h.metadata.name.clone().unwrap_or_default();
            if deleting(&o) {
                continue;
            }
            live.insert(name.clone());
            let generation = h.metadata.generation.unwrap_or(1);
            let spec = &o["spec"];
            let fp = fingerprint(spec);
            let id = (key.0.clone(), name);
            let due = {
                let mut all = lock(&self.0.releases);
                match all.get_mut(&id) {
                    Some(r) if r.fingerprint == fp && !r.forgotten => {
                        if r.outcome.generation != generation {
                            r.outcome.generation = generation;
                            let _ = self.0.changed_tx.send(key.clone());
                        }
                        r.outcome.error.is_some() && r.tried.elapsed() >= RETRY
                    }
                    _ => true,
                }
            };
            if due {
                self.install_or_upgrade(key, client, &id, spec, generation, fp)
                    .await?;
            }
        }
        let gone: Vec<Release> = {
            let mut all = lock(&self.0.releases);
            let ids: Vec<(String, String)> = all
                .iter()
                .filter(|(id, r)| r.cluster == *key && !live.contains(&id.1))
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter().filter_map(|id| all.remove(&id)).collect()
        };
        // Helm's uninstall: the objects, then every revision of the
        // release (no `KeepHistory`).
        for r in gone {
            for o in r.objects.iter().rev() {
                self.delete(key, client, o).await;
            }
            let said = |e: String| format!("{}/{}: {}: {e}", key.0, key.1, r.name);
            let versions: Vec<i64> =
                match helm_storage::history(client, &r.namespace, &r.name).await {
                    Ok(h) => h.into_keys().collect(),
                    Err(e) => {
                        self.0.errors.push(said(e));
                        Vec::new()
                    }
                };
            for v in versions {
                if let Err(e) = helm_storage::forget(client, &r.namespace, &r.name, v).await {
                    self.0.errors.push(said(e));
                }
            }
        }
        Ok(())
    }

    async fn install_or_upgrade(
        &self,
        key: &ClusterKey,
        client: &kube::Client,
        id: &(String, String),
        spec: &Value,
        generation: i64,
        fp: u64,
    ) -> Result<(), String> {
        let (remembered, shown) = {
            let all = lock(&self.0.releases);
            let r = all.get(id);
            (
                r.filter(|r| !r.forgotten).map(|r| r.objects.clone()),
                r.map(|r| (r.outcome.status.clone(), r.outcome.revision)),
            )
        };
        let chart = spec["chartName"].as_str().unwrap_or_default();
        let version = spec["version"].as_str().unwrap_or_default();
        let release = spec["releaseName"].as_str().unwrap_or(chart).to_string();
        let ns = spec["namespace"].as_str().unwrap_or("default").to_string();
        let max_history = spec
            .pointer("/options/upgrade/maxHistory")
            .and_then(Value::as_u64)
            .and_then(|m| usize::try_from(m).ok())
            .filter(|m| *m > 0)
            .unwrap_or(helm_storage::MAX_HISTORY);
        let text = spec["values"].as_str().unwrap_or_default();
        let values: Result<Value, String> = if text.trim().is_empty() {
            Ok(json!({}))
        } else {
            serde_norway::from_str(text).map_err(|e| format!("the values: {e}"))
        };
        let record = |objects: BTreeSet<ObjRef>, outcome: Outcome| {
            if let Some(e) = &outcome.error {
                tracing::warn!(ns = key.0, cluster = key.1, release, "{e}");
            }
            lock(&self.0.releases).insert(
                id.clone(),
                Release {
                    cluster: key.clone(),
                    name: release.clone(),
                    namespace: ns.clone(),
                    fingerprint: fp,
                    objects,
                    outcome,
                    tried: Instant::now(),
                    forgotten: false,
                },
            );
            let _ = self.0.changed_tx.send(key.clone());
        };
        // The release as the workload cluster holds it (Helm's storage),
        // read on every attempt as CAAPH's `GetHelmRelease` reads it.
        let mut history = match helm_storage::history(client, &ns, &release).await {
            Ok(h) => h,
            Err(e) => {
                // CAAPH's reconcile fails with the error; the status it
                // last wrote (release status, revision) stays.
                let (status, revision) = shown.unwrap_or((None, 0));
                let outcome = Outcome {
                    generation,
                    status,
                    revision,
                    error: Some(e),
                };
                record(remembered.unwrap_or_default(), outcome);
                return Ok(());
            }
        };
        let unix_now = chrono::Utc::now().timestamp();
        // A pending release (a Helm client that died mid-way) is marked
        // failed first, then upgraded.
        if let Some((v, last)) = history.iter().next_back().map(|(v, l)| (*v, l.clone()))
            && last["info"]["status"]
                .as_str()
                .is_some_and(|s| s.starts_with("pending"))
        {
            let failed = helm_storage::with_status(&last, "failed");
            if let Err(e) = helm_storage::store(client, &failed, false, unix_now).await {
                let outcome = Outcome {
                    generation,
                    status: Some("failed".into()),
                    revision: v,
                    error: Some(format!("failed to overwrite status of last release: {e}")),
                };
                record(remembered.unwrap_or_default(), outcome);
                return Ok(());
            }
            history.insert(v, failed);
        }
        let latest = history.values().next_back().cloned();
        let latest_status = latest
            .as_ref()
            .and_then(|l| l["info"]["status"].as_str())
            .map(str::to_string);
        let latest_revision = latest
            .as_ref()
            .and_then(|l| l["version"].as_i64())
            .unwrap_or(0);
        // What the release holds now: what this process placed, else
        // (a new process) what the stored manifest names.
        let prev_objects = match (remembered, &latest) {
            (Some(o), _) => o,
            (None, Some(l)) => self.manifest_objects(key, client, l, &ns).await,
            (None, None) => BTreeSet::new(),
        };
        // The release as it stands (status, revision), with what went wrong.
        let kept = |error: Option<String>| Outcome {
            generation,
            status: latest_status.clone(),
            revision: latest_revision,
            error,
        };
        if let (Some(l), Ok(v)) = (&latest, &values) {
            match helm_storage::up_to_date(l, version, v) {
                Ok(false) => {}
                Ok(true) => {
                    record(prev_objects, kept(None));
                    return Ok(());
                }
                Err(e) => {
                    record(prev_objects, kept(Some(e)));
                    return Ok(());
                }
            }
        }
        let rendered = match &values {
            Ok(values) => {
                let job = json!({"chart": chart, "version": spec["version"], "values": values,
                                 "name": release, "namespace": ns});
                self.0.engine.render(&job).await?
            }
            Err(e) => Err(e.clone()),
        };
        let install = latest.is_none();
        // Helm renders before it records anything: a chart that does not
        // render, or renders what does not parse, leaves no revision.
        let planned = rendered.and_then(|r| plan(&r.manifests, install).map(|p| (r, p)));
        let (r, plan) = match planned {
            Ok(x) => x,
            Err(why) => {
                record(
                    prev_objects,
                    kept(Some(format!("failed to render chart {chart}: {why}"))),
                );
                return Ok(());
            }
        };
        let config = values.unwrap_or_else(|_| json!({}));
        let notes = r
            .manifests
            .iter()
            .find(|(path, _)| {
                path.split_once('/')
                    .is_some_and(|(_, rest)| rest == "templates/NOTES.txt")
            })
            .map(|(_, text)| text.as_str());
        let pending = helm_storage::pending(&helm_storage::Revision {
            name: &release,
            namespace: &ns,
            version: latest_revision + 1,
            chart: &r.chart,
            config: &config,
            manifest: release_manifest(&plan),
            hooks: release_hooks(&plan),
            notes,
            first_deployed: latest
                .as_ref()
                .and_then(|l| l["info"]["first_deployed"].as_str())
                .map(str::to_string),
            now: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        });
        if !install {
            let statuses = history
                .iter()
                .map(|(v, l)| {
                    (
                        *v,
                        l["info"]["status"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            for v in helm_storage::to_prune(&statuses, max_history - 1) {
                if let Err(e) = helm_storage::forget(client, &ns, &release, v).await {
                    self.0
                        .errors
                        .push(format!("{}/{}: pruning {release} v{v}: {e}", key.0, key.1));
                }
            }
        }
        // The namespace first (CAAPH installs with `CreateNamespace`):
        // the record lives there.
        if let Err(e) = self.namespace(client, &ns).await {
            record(prev_objects, kept(Some(e)));
            return Ok(());
        }
        if let Err(e) = helm_storage::store(client, &pending, true, unix_now).await {
            record(prev_objects, kept(Some(e)));
            return Ok(());
        }
        let (objects, error) = match self
            .apply(key, client, &r, &plan, &release, &ns, &prev_objects)
            .await
        {
            Ok(objects) => (objects, None),
            Err((objects, why)) => (objects, Some(why)),
        };
        let done = helm_storage::settled(&pending, error.as_deref());
        let unix_now = chrono::Utc::now().timestamp();
        if error.is_none() {
            for old in history
                .values()
                .filter(|l| l["info"]["status"] == "deployed")
            {
                let superseded = helm_storage::with_status(old, "superseded");
                if let Err(e) = helm_storage::store(client, &superseded, false, unix_now).await {
                    self.0
                        .errors
                        .push(format!("{}/{}: {release}: {e}", key.0, key.1));
                }
            }
        }
        if let Err(e) = helm_storage::store(client, &done, false, unix_now).await {
            self.0
                .errors
                .push(format!("{}/{}: {release}: {e}", key.0, key.1));
        }
        let outcome = Outcome {
            generation,
            status: done["info"]["status"].as_str().map(str::to_string),
            revision: latest_revision + 1,
            error,
        };
        record(objects, outcome);
        Ok(())
    }

    /// The objects a stored release's manifest names, placed as Helm
    /// places them (a namespaced one without a namespace in the
    /// release's); a kind the apiserver does not serve is left out.
    async fn manifest_objects(
        &self,
        key: &ClusterKey,
        client: &kube::Client,
        release: &Value,
        ns: &str,
    ) -> BTreeSet<ObjRef> {
        let text = release["manifest"].as_str().unwrap_or_default();
        let mut out = BTreeSet::new();
        for o in documents(text).unwrap_or_default() {
            let (av, kind, at, name) = obj_ref(&o);
            let Ok((_, namespaced)) = self.resolve(key, client, &av, &kind).await else {
                continue;
            };
            let at = match (namespaced, at.is_empty()) {
                (false, _) => String::new(),
                (true, true) => ns.to_string(),
                (true, false) => at,
            };
            out.insert((av, kind, at, name));
        }
        out
    }

    async fn namespace(&self, client: &kube::Client, ns: &str) -> Result<(), String> {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let wanted: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).map_err(|e| e.to_string())?;
        match namespaces.create(&PostParams::default(), &wanted).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(format!("namespace {ns}: {e}")),
        }
    }

    /// Install or upgrade: the objects the release now holds, or those and
    /// why it failed.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        key: &ClusterKey,
        client: &kube::Client,
        r: &Rendered,
        plan: &Plan,
        release: &str,
        ns: &str,
        previous: &BTreeSet<ObjRef>,
    ) -> Result<BTreeSet<ObjRef>, (BTreeSet<ObjRef>, String)> {
        let keep_previous = |why: String| (previous.clone(), why);
        self.install_crds(key, client, &r.crds)
            .await
            .map_err(keep_previous)?;
        let mut placed = BTreeSet::new();
        for p in &plan.objects {
            let mut o = p.object.clone();
            let av = o["apiVersion"].as_str().unwrap_or_default().to_string();
            let kind = o["kind"].as_str().unwrap_or_default().to_string();
            let name = o
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let (ar, namespaced) = match self.resolve(key, client, &av, &kind).await {
                Ok(x) => x,
                Err(e) => {
                    return Err((
                        placed.union(previous).cloned().collect(),
                        format!(
                            "resource mapping not found for name: \"{name}\": {e}; ensure CRDs are installed first"
                        ),
                    ));
                }
            };
            if namespaced {
                if o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .is_none()
                {
                    o["metadata"]["namespace"] = json!(ns);
                }
            } else if let Some(m) = o["metadata"].as_object_mut() {
                m.remove("namespace");
            }
            mark(&mut o, release, ns);
            let at = o
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let api: Api<DynamicObject> = if namespaced {
                Api::namespaced_with(client.clone(), &at, &ar)
            } else {
                Api::all_with(client.clone(), &ar)
            };
            if p.hook {
                let _ = api.delete(&name, &DeleteParams::background()).await;
            }
            let params = PatchParams::apply("helm").force().validation_strict();
            if let Err(e) = api.patch(&name, &params, &Patch::Apply(&o)).await {
                return Err((
                    placed.union(previous).cloned().collect(),
                    format!("failed to create resource: {kind} {at}/{name}: {e}"),
                ));
            }
            if p.hook {
                if p.delete_after {
                    let _ = api.delete(&name, &DeleteParams::background()).await;
                }
            } else {
                placed.insert(obj_ref(&o));
            }
        }
        for gone in previous.difference(&placed).cloned().collect::<Vec<_>>() {
            self.delete(key, client, &gone).await;
        }
        Ok(placed)
    }

    /// The chart's CRDs: created when missing, then waited for until
    /// established (at most a minute).
    async fn install_crds(
        &self,
        key: &ClusterKey,
        client: &kube::Client,
        files: &[String],
    ) -> Result<(), String> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
        let api: Api<Crd> = Api::all(client.clone());
        let mut names = Vec::new();
        for text in files {
            for doc in documents(text)? {
                if doc["kind"] != "CustomResourceDefinition" {
                    continue;
                }
                let crd: Crd = serde_json::from_value(doc).map_err(|e| format!("a CRD: {e}"))?;
                let name = crd.metadata.name.clone().unwrap_or_default();
                match api.create(&PostParams::default(), &crd).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(format!("failed to install CRD {name}: {e}")),
                }
                names.push(name);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for name in names {
            loop {
                let established = api
                    .get_opt(&name)
                    .await
                    .map_err(|e| format!("CRD {name}: {e}"))?
                    .and_then(|c| c.status)
                    .and_then(|s| s.conditions)
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("CRD {name} was not established within a minute"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        // Kinds just installed are resolved afresh.
        if !files.is_empty() {
            lock(&self.0.kinds).retain(|(k, _, _), _| k != key);
        }
        Ok(())
    }

    /// What the apiserver serves `kind` of `api_version` as (discovery of
    /// that group version only: a chart's APIService that does not answer
    /// must not fail every other kind), cached per cluster.
    async fn resolve(
        &self,
        key: &ClusterKey,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), String> {
        let memo = (key.clone(), api_version.to_string(), kind.to_string());
        if let Some(x) = lock(&self.0.kinds).get(&memo).cloned() {
            return Ok(x);
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let mut tries = 0;
        let found = loop {
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((ar, caps)) => {
                    break (ar, caps.scope == kube::discovery::Scope::Namespaced);
                }
                // A group just established can take a moment to be served.
                Err(_) if tries < 5 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                Err(e) => {
                    return Err(format!(
                        "no matches for kind \"{kind}\" in version \"{api_version}\" ({e})"
                    ));
                }
            }
        };
        lock(&self.0.kinds).insert(memo, found.clone());
        Ok(found)
    }

    async fn delete(&self, key: &ClusterKey, client: &kube::Client, o: &ObjRef) {
        let (av, kind, ns, name) = o;
        let Ok((ar, namespaced)) = self.resolve(key, client, av, kind).await else {
            return;
        };
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => self.0.errors.push(format!(
                "{}/{}: deleting {kind} {ns}/{name}: {e}",
                key.0, key.1
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifests(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_plan_orders_as_helm_installs_and_leaves_test_hooks_out() {
        let m = manifests(&[
            ("c/templates/NOTES.txt", "Thank you"),
            ("c/templates/_helpers.tpl", ""),
            (
                "c/templates/a.yaml",
                "kind: Deployment\nmetadata: {name: d}\n---\n# empty\n---\nkind: ServiceAccount\nmetadata: {name: sa}\n",
            ),
            ("c/templates/b.yaml", "kind: Widget\nmetadata: {name: w}\n"),
            (
                "c/templates/c.yaml",
                "kind: Namespace\nmetadata: {name: n}\n",
            ),
            (
                "c/templates/hooks.yaml",
                "kind: Job\nmetadata: {name: pre, annotations: {helm.sh/hook: 'pre-install,pre-upgrade', helm.sh/hook-delete-policy: 'before-hook-creation,hook-succeeded'}}\n---\n\
                 kind: Job\nmetadata: {name: post, annotations: {helm.sh/hook: post-install}}\n---\n\
                 kind: Pod\nmetadata: {name: t, annotations: {helm.sh/hook: test}}\n",
            ),
        ]);
        let p = plan(&m, true).unwrap_or_default();
        let names: Vec<(&str, bool, bool)> = p
            .objects
            .iter()
            .map(|x| {
                (
                    x.object["metadata"]["name"].as_str().unwrap_or(""),
                    x.hook,
                    x.delete_after,
                )
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("pre", true, true),
                ("n", false, false),
                ("sa", false, false),
                ("d", false, false),
                ("w", false, false),
                ("post", true, false),
            ]
        );
        let up = plan(&m, false).unwrap_or_default();
        let names: Vec<&str> = up
            .objects
            .iter()
            .filter(|x| x.hook)
            .map(|x| x.object["metadata"]["name"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(names, vec!["pre"], "an upgrade runs only the upgrade hooks");
        assert!(plan(&manifests(&[("c/t.yaml", "metadata: {name: x}\n")]), true).is_err());
        assert!(plan(&manifests(&[("c/t.yaml", "kind: [\n")]), true).is_err());
    }

    #[test]
    fn helm_marks_what_it_owns() {
        let mut o = json!({"kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "b"}}});
        mark(&mut o, "rel", "ns");
        assert_eq!(o["metadata"]["labels"]["a"], "b");
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        assert_eq!(
            o["metadata"]["annotations"]["meta.helm.sh/release-name"],
            "rel"
        );
        assert_eq!(
            o["metadata"]["annotations"]["meta.helm.sh/release-namespace"],
            "ns"
        );
        o["metadata"]["namespace"] = json!("ns");
        assert_eq!(
            obj_ref(&o),
            (String::new(), "ConfigMap".into(), "ns".into(), "x".into())
        );
    }

    #[test]
    fn what_makes_a_new_revision() {
        let a = json!({"chartName": "c", "version": "1", "values": "a: 1", "releaseName": "r",
                       "namespace": "n", "options": {"wait": true}});
        let mut b = a.clone();
        b["options"] = json!({});
        assert_eq!(fingerprint(&a), fingerprint(&b), "options alone do not");
        for k in ["chartName", "version", "values", "releaseName", "namespace"] {
            let mut c = a.clone();
            c[k] = json!("other");
            assert_ne!(fingerprint(&a), fingerprint(&c), "{k}");
        }
    }

    #[test]
    fn the_manifest_holds_the_objects_not_the_hooks() {
        let m: BTreeMap<String, String> = [
            ("c/templates/a.yaml", "kind: ConfigMap\nmetadata: {name: a}\n"),
            (
                "c/templates/job.yaml",
                "kind: Job\nmetadata: {name: j, annotations: {helm.sh/hook: pre-install, helm.sh/hook-weight: '-5', helm.sh/hook-delete-policy: 'before-hook-creation,hook-succeeded'}}\n",
            ),
            ("c/templates/ns.yaml", "kind: Namespace\nmetadata: {name: n}\n"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let p = plan(&m, true).unwrap_or_default();
        let text = release_manifest(&p);
        assert_eq!(
            text,
            "---\n# Source: c/templates/ns.yaml\nkind: Namespace\nmetadata:\n  name: n\n\
             ---\n# Source: c/templates/a.yaml\nkind: ConfigMap\nmetadata:\n  name: a\n"
        );
        let [hook] = &release_hooks(&p)[..] else {
            panic!("one hook: {:?}", release_hooks(&p));
        };
        assert_eq!(hook["name"], "j");
        assert_eq!(hook["path"], "c/templates/job.yaml");
        assert_eq!(hook["events"], json!(["pre-install"]));
        assert_eq!(hook["weight"], -5);
        assert_eq!(
            hook["delete_policies"],
            json!(["before-hook-creation", "hook-succeeded"])
        );
    }
}
