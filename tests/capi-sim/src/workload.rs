//! Workload clusters' apiservers (I/O, opt-in: `capi-sim
//! --workload-apiservers`): a **real** kube-apiserver per workload cluster,
//! started the way kubeadm starts one on a real control plane, so a client
//! holding what Magnum hands out (`api_address`, the cluster CA, a
//! certificate Magnum signed) meets a real apiserver that trusts exactly
//! that CA.
//!
//! What it follows upstream:
//! - the cluster CA comes from the `<cluster>-ca` Secret when one exists:
//!   CAPI's kubeadm bootstrap provider looks the cluster certificates up
//!   before generating any (`util/secret/certificates.go`,
//!   `Certificates.LookupOrGenerate`) and hands them to kubeadm, whose
//!   `certs` phase then only signs leaf certificates with that CA
//!   (`cmd/kubeadm/app/phases/certs/certs.go`: an existing CA is used, not
//!   replaced);
//! - the apiserver's serving certificate is signed by that CA
//!   (`apiserver` cert: serverAuth, SANs of the advertise address and the
//!   `kubernetes.default...` names), and the same CA is its
//!   `--client-ca-file` (kubeadm's static pod manifest,
//!   `cmd/kubeadm/app/phases/controlplane/manifests.go`);
//! - its address is the API load balancer's, which CAPO publishes as the
//!   OpenStackCluster's `controlPlaneEndpoint` (see
//!   [`crate::controllers::openstack`]), which CAPI copies to the Cluster.
//!
//! - its Nodes: each Machine whose server exists (a `providerID`) has its
//!   Node, as the kubelet on that machine registers it, before CAPI sets the
//!   Machine's `nodeRef` to it (`spec.providerID` the Machine's, the
//!   control-plane role label kubeadm puts on control-plane nodes, `Ready`,
//!   the Machine's version as kubelet version); a Machine being deleted
//!   loses its Node, as CAPI's Machine controller deletes it
//!   (`internal/controllers/machine/machine_controller.go`,
//!   `reconcileDelete` -> `deleteNode`).
//!
//! - its serving certificate also names the KubeadmControlPlane's
//!   `clusterConfiguration.apiServer.certSANs`, as kubeadm adds them to
//!   the apiserver certificate (`cmd/kubeadm/app/util/pkiutil/pki_helpers.go`,
//!   `GetAPIServerAltNames`: "add cluster level alt names from the config").
//!
//! With `--workload-netns` ([`crate::tenant`]), a cluster whose
//! OpenStackCluster has `disableAPIServerFloatingIP` has its apiserver
//! inside its tenant network instead: listening only on the API's address
//! in a namespace reached from `qdhcp-<network>`, as a VM behind a network
//! host. Then CAPI's controllers reach it the way CAPI's do, through the
//! `<cluster>-kubeconfig` Secret (the ClusterCache, `controllers/clustercache`,
//! `cluster_accessor.go`, builds its client from that Secret): a server
//! name ending in `.svc` is resolved as the management cluster's DNS and
//! kube-proxy would, to a ready endpoint of that Service's EndpointSlices
//! (`magnum-capi-proxy`'s), with the name as the TLS server name. The
//! Machine controller sets a `nodeRef` only to a Node it sees through that
//! client (`machine_controller_noderef.go` gets it from the ClusterCache;
//! unreachable: "cluster is not reachable", requeued). The kubelets
//! register their Nodes from inside the network (capi-sim's own path: a
//! loopback port forwarded into the namespace).
//!
//! Simplified: the apiserver listens on 127.0.0.1 with a free port, keeps
//! its objects in the management cluster's etcd under a prefix of its own
//! (`/capi-sim-workload/<namespace>/<cluster>`), has no kubelets (the Nodes
//! are written by capi-sim as `system:masters`), no controller manager and
//! a service-account key of its own. It stops when the `-ca` Secret goes
//! (the cluster is deleted) and with capi-sim (also when capi-sim is
//! killed: `PR_SET_PDEATHSIG`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use crate::kinds::{Kind, Line};
use crate::obj::{CP_LABEL, deleting};
use crate::shared::lock;
use crate::tenant::{self, Placement, TenantNet};

/// The label CAPI (and Magnum's drivers) put on a cluster's Secrets.
const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Where in etcd a workload apiserver keeps its objects.
const ETCD_PREFIX: &str = "/capi-sim-workload";

/// (namespace, CAPI cluster name).
pub type ClusterKey = (String, String);

/// A Node a workload cluster holds for one of its Machines.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeSpec {
    pub name: String,
    pub provider_id: String,
    pub control_plane: bool,
    pub version: String,
}

/// The Nodes a cluster's Machines have (pure): a kubelet registers its
/// Node once the server runs, so every Machine with a `providerID` (its
/// server exists) and not being deleted; named as the simulated Machine
/// controller names the `nodeRef` (the Machine's name).
pub fn nodes_of(machines: &[&Value]) -> BTreeSet<NodeSpec> {
    machines
        .iter()
        .filter(|m| !deleting(m))
        .filter_map(|m| {
            let node = m.pointer("/metadata/name")?.as_str()?;
            Some(NodeSpec {
                name: node.to_string(),
                provider_id: m.pointer("/spec/providerID")?.as_str()?.to_string(),
                control_plane: m
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .is_some_and(|l| l.contains_key(CP_LABEL)),
                version: m
                    .pointer("/spec/version")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            })
        })
        .collect()
}

/// The Node object a kubelet registers, and the status it reports.
fn node_object(n: &NodeSpec) -> (Value, Value) {
    let mut labels = json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"});
    // A label value holds at most 63 characters; a Machine's name may not
    // fit (a host name would).
    if n.name.len() <= 63 {
        labels["kubernetes.io/hostname"] = json!(n.name);
    }
    if n.control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
    }
    let node = json!({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": n.name, "labels": labels},
                      "spec": {"providerID": n.provider_id}});
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "nodeInfo": {"kubeletVersion": n.version, "kubeProxyVersion": n.version,
                     "architecture": "amd64", "operatingSystem": "linux", "osImage": "Ubuntu 22.04",
                     "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0",
                     "machineID": n.name, "systemUUID": n.name, "bootID": n.name}}});
    (node, status)
}

/// How to start them.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `kube-apiserver` binary the management cluster runs.
    pub binary: PathBuf,
    /// The management cluster's etcd, e.g. `http://127.0.0.1:2379`.
    pub etcd: String,
    /// State (certificates, logs), one directory per cluster.
    pub dir: PathBuf,
    /// The management cluster's line (where its KubeadmControlPlanes are).
    pub line: Line,
    /// Clusters without an API floating IP run inside their tenant network
    /// ([`crate::tenant`]; root).
    pub netns: bool,
}

impl Settings {
    /// From the control-plane directory `scripts/k8s-up.sh` made (its
    /// `env` file names the etcd port and the binaries' folder).
    pub fn beside(kubeconfig: &Path) -> Result<Settings, String> {
        let dir = kubeconfig
            .parent()
            .ok_or_else(|| format!("{}: no directory", kubeconfig.display()))?;
        let env = std::fs::read_to_string(dir.join("env"))
            .map_err(|e| format!("{}/env (written by scripts/k8s-up.sh): {e}", dir.display()))?;
        let port = env
            .lines()
            .find_map(|l| l.strip_prefix("ETCD_PORT="))
            .ok_or_else(|| format!("{}/env has no ETCD_PORT", dir.display()))?;
        let bin_dir = env
            .lines()
            .find_map(|l| l.strip_prefix("K8S_BIN_DIR="))
            .ok_or_else(|| format!("{}/env has no K8S_BIN_DIR", dir.display()))?;
        let binary = PathBuf::from(bin_dir.trim()).join("kube-apiserver");
        if !binary.exists() {
            return Err(format!(
                "{}: missing (scripts/fetch-artifacts.sh provides it)",
                binary.display()
            ));
        }
        Ok(Settings {
            binary,
            etcd: format!("http://127.0.0.1:{}", port.trim()),
            dir: dir.join("workload"),
            line: Line::V1beta1,
            netns: false,
        })
    }
}

struct Running {
    /// Some once it answers `/readyz`.
    endpoint: Option<(String, u16)>,
    /// An administrator of it (`system:masters`), once ready.
    client: Option<kube::Client>,
    /// That administrator's kubeconfig (tests act in the workload cluster
    /// with it).
    kubeconfig: Option<PathBuf>,
    /// The Nodes written to it.
    nodes: BTreeSet<NodeSpec>,
    /// Inside its tenant network ([`crate::tenant`]).
    netns: bool,
    /// Dropping it kills the apiserver (`kill_on_drop`).
    _child: Option<tokio::process::Child>,
    /// Forwarders and the ClusterCache probe, aborted with it.
    tasks: Vec<Abort>,
    /// Its namespaces (deleted last, once the apiserver is gone).
    _net: Option<TenantNet>,
}

/// A task aborted when dropped.
struct Abort(tokio::task::JoinHandle<()>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Inner {
    settings: Settings,
    running: Mutex<BTreeMap<ClusterKey, Running>>,
    /// Clusters whose endpoint just became ready (the controllers look at
    /// them again).
    ready_tx: mpsc::UnboundedSender<ClusterKey>,
    ready_rx: Mutex<Option<mpsc::UnboundedReceiver<ClusterKey>>>,
    errors: crate::shared::Recent,
    /// The Nodes each cluster's Machines have ([`Workloads::want_nodes`]).
    wanted: Mutex<BTreeMap<ClusterKey, BTreeSet<NodeSpec>>>,
    nodes_changed: Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The management cluster.
    client: kube::Client,
    /// Where each cluster's API is: in its tenant network, or None (on
    /// the host), as the OpenStackCluster says ([`Workloads::place`]).
    decisions: Mutex<BTreeMap<ClusterKey, Option<Placement>>>,
    decided: Notify,
    /// The Nodes CAPI's controllers see through each tenant-network
    /// cluster's kubeconfig Secret (its ClusterCache).
    reachable: Mutex<BTreeMap<ClusterKey, BTreeSet<String>>>,
    /// What CAPI's ClusterResourceSets applied in each ([`crate::resource_sets`]).
    applied: Mutex<crate::resource_sets::Applied>,
}

/// The workload apiservers, running. Clones share them.
#[derive(Clone)]
pub struct Workloads(Arc<Inner>);

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads")
            .field("settings", &self.0.settings)
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

/// The cluster a Secret is the CA of: `<cluster>-ca` with the cluster label.
fn ca_of(s: &Secret) -> Option<ClusterKey> {
    let name = s.metadata.name.as_deref()?;
    let cluster = s.metadata.labels.as_ref()?.get(CLUSTER_LABEL)?;
    (name.strip_suffix("-ca") == Some(cluster.as_str())).then(|| {
        (
            s.metadata.namespace.clone().unwrap_or_default(),
            cluster.clone(),
        )
    })
}

impl Workloads {
    /// Watch the management cluster's Secrets and run an apiserver for each
    /// cluster CA found.
    pub fn start(client: kube::Client, settings: Settings) -> Workloads {
        let (ready_tx, ready_rx) = mpsc::unbounded_channel();
        let w = Workloads(Arc::new(Inner {
            settings,
            running: Mutex::new(BTreeMap::new()),
            ready_tx,
            ready_rx: Mutex::new(Some(ready_rx)),
            errors: Default::default(),
            wanted: Mutex::new(BTreeMap::new()),
            nodes_changed: Notify::new(),
            tasks: Mutex::new(Vec::new()),
            client: client.clone(),
            decisions: Mutex::new(BTreeMap::new()),
            decided: Notify::new(),
            reachable: Mutex::new(BTreeMap::new()),
            applied: Mutex::new(Default::default()),
        }));
        let (me, me2, me3) = (w.clone(), w.clone(), w.clone());
        *lock(&w.0.tasks) = vec![
            tokio::spawn(async move { me.watch(client).await }),
            tokio::spawn(async move { me2.register_nodes().await }),
            tokio::spawn(async move { me3.resource_sets().await }),
        ];
        w
    }

    /// CAPI's ClusterResourceSets, once a second, in every apiserver that
    /// is ready ([`crate::resource_sets::sync_cluster`]).
    async fn resource_sets(&self) {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let ready = self.ready_clients();
            {
                // A cluster gone (its apiserver stopped) takes its memo.
                let running = lock(&self.0.running);
                lock(&self.0.applied).retain(|(k, _, _), _| running.contains_key(k));
            }
            for (key, client) in ready {
                let errors = crate::resource_sets::sync_cluster(
                    &self.0.client,
                    self.0.settings.line,
                    &key,
                    &client,
                    &self.0.applied,
                )
                .await;
                for e in errors {
                    self.0.errors.push(e);
                }
            }
        }
    }

    /// The receiver of "this cluster's endpoint is ready" (taken once, by
    /// the controllers).
    pub fn take_ready(&self) -> Option<mpsc::UnboundedReceiver<ClusterKey>> {
        lock(&self.0.ready_rx).take()
    }

    /// The endpoints of the apiservers that are ready.
    pub fn endpoints(&self) -> BTreeMap<ClusterKey, (String, u16)> {
        lock(&self.0.running)
            .iter()
            .filter_map(|(k, r)| r.endpoint.clone().map(|e| (k.clone(), e)))
            .collect()
    }

    /// Apiservers that could not be started, newest last.
    pub fn errors(&self) -> Vec<String> {
        self.0.errors.all()
    }

    /// Stop every apiserver and the watch.
    pub fn stop(&self) {
        for t in lock(&self.0.tasks).drain(..) {
            t.abort();
        }
        lock(&self.0.running).clear();
    }

    /// The Nodes cluster `key`'s Machines have now (from the controllers'
    /// cache, after each pass over the cluster); written to its apiserver
    /// in the background.
    pub fn want_nodes(&self, key: &ClusterKey, nodes: BTreeSet<NodeSpec>) {
        let mut wanted = lock(&self.0.wanted);
        if wanted.get(key) != Some(&nodes) {
            wanted.insert(key.clone(), nodes);
            drop(wanted);
            self.0.nodes_changed.notify_one();
        }
    }

    /// An administrator's client of each apiserver that is ready.
    pub fn ready_clients(&self) -> Vec<(ClusterKey, kube::Client)> {
        lock(&self.0.running)
            .iter()
            .filter_map(|(k, r)| r.client.clone().map(|c| (k.clone(), c)))
            .collect()
    }

    /// Whether cluster `key` has an apiserver (starting or ready).
    pub fn running(&self, key: &ClusterKey) -> bool {
        lock(&self.0.running).contains_key(key)
    }

    /// An administrator's client of cluster `key`'s apiserver, once ready.
    pub fn client(&self, key: &ClusterKey) -> Option<kube::Client> {
        lock(&self.0.running)
            .get(key)
            .and_then(|r| r.client.clone())
    }

    /// The administrator kubeconfigs of the ready apiservers (tests).
    pub fn kubeconfigs(&self) -> BTreeMap<ClusterKey, PathBuf> {
        lock(&self.0.running)
            .iter()
            .filter_map(|(k, r)| r.kubeconfig.clone().map(|p| (k.clone(), p)))
            .collect()
    }

    /// The names of the Nodes CAPI's Machine controller finds in cluster
    /// `key`, if its apiserver is ready: those registered there; for a
    /// cluster in its tenant network, those seen through its kubeconfig
    /// Secret (none while that path does not answer).
    pub fn registered(&self, key: &ClusterKey) -> Option<BTreeSet<String>> {
        let running = lock(&self.0.running);
        let r = running.get(key)?;
        if r.netns {
            return Some(
                lock(&self.0.reachable)
                    .get(key)
                    .cloned()
                    .unwrap_or_default(),
            );
        }
        r.client
            .is_some()
            .then(|| r.nodes.iter().map(|n| n.name.clone()).collect())
    }

    /// Whether `--workload-netns` is on.
    pub fn netns(&self) -> bool {
        self.0.settings.netns
    }

    /// Where cluster `key`'s API is, as its OpenStackCluster says (the
    /// controllers call this on each pass over it): in its tenant network,
    /// or on the host. An apiserver starts once this is known.
    pub fn place(&self, key: &ClusterKey, placement: Option<Placement>) {
        let mut d = lock(&self.0.decisions);
        if d.get(key) != Some(&placement) {
            d.insert(key.clone(), placement);
            drop(d);
            self.0.decided.notify_waiters();
        }
    }

    /// The placement of `key` once decided (None when the cluster went).
    async fn decision(&self, key: &ClusterKey) -> Option<Option<Placement>> {
        loop {
            let notified = self.0.decided.notified();
            if let Some(d) = lock(&self.0.decisions).get(key) {
                return Some(d.clone());
            }
            if !lock(&self.0.running).contains_key(key) {
                return None;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }

    /// The Nodes of the ready apiservers, by cluster (tests).
    pub fn nodes(&self) -> BTreeMap<ClusterKey, BTreeSet<NodeSpec>> {
        lock(&self.0.running)
            .iter()
            .filter(|(_, r)| r.client.is_some())
            .map(|(k, r)| (k.clone(), r.nodes.clone()))
            .collect()
    }

    /// Bring each ready apiserver's Nodes to what its Machines have; an
    /// error is retried a second later.
    async fn register_nodes(&self) {
        loop {
            self.0.nodes_changed.notified().await;
            let work: Vec<(
                ClusterKey,
                kube::Client,
                BTreeSet<NodeSpec>,
                BTreeSet<NodeSpec>,
            )> = {
                let running = lock(&self.0.running);
                let wanted = lock(&self.0.wanted);
                running
                    .iter()
                    .filter_map(|(k, r)| {
                        let want = wanted.get(k).cloned().unwrap_or_default();
                        (want != r.nodes)
                            .then(|| Some((k.clone(), r.client.clone()?, r.nodes.clone(), want)))
                            .flatten()
                    })
                    .collect()
            };
            let mut failed = false;
            for (key, client, have, want) in work {
                match sync_nodes(&client, &have, &want).await {
                    Ok(()) => {
                        if let Some(r) = lock(&self.0.running).get_mut(&key) {
                            r.nodes = want;
                        }
                        // Its Machines may now get their nodeRef.
                        let _ = self.0.ready_tx.send(key);
                    }
                    Err(e) => {
                        tracing::warn!(ns = key.0, cluster = key.1, error = %e, "nodes not written yet");
                        // A refusal (not a conflict or throttling) is a
                        // simulator bug the tests must see.
                        if let kube::Error::Api(s) = &e
                            && (400..500).contains(&s.code)
                            && s.code != 409
                            && s.code != 429
                        {
                            self.0
                                .errors
                                .push(format!("nodes of {}/{}: {e}", key.0, key.1));
                        }
                        failed = true;
                    }
                }
            }
            if failed {
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.0.nodes_changed.notify_one();
            }
        }
    }

    async fn watch(&self, client: kube::Client) {
        let api: Api<Secret> = Api::all(client);
        let cfg = watcher::Config::default().labels(CLUSTER_LABEL);
        let mut stream = watcher::watcher(api, cfg).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(s) | Event::InitApply(s)) => {
                    if let Some(key) = ca_of(&s) {
                        self.ensure(key, &s);
                    }
                }
                Ok(Event::Delete(s)) => {
                    let gone = ca_of(&s).and_then(|key| {
                        let r = lock(&self.0.running).remove(&key);
                        r.map(|r| (key, r))
                    });
                    if let Some((key, running)) = gone {
                        // Dropped off the async workers: removing namespaces
                        // runs `ip`.
                        tokio::task::spawn_blocking(move || drop(running));
                        lock(&self.0.wanted).remove(&key);
                        lock(&self.0.decisions).remove(&key);
                        lock(&self.0.reachable).remove(&key);
                        tracing::info!(ns = key.0, cluster = key.1, "workload apiserver stopped");
                    }
                }
                Ok(Event::Init | Event::InitDone) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "secret watch error (retrying)");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn ensure(&self, key: ClusterKey, ca: &Secret) {
        let data = ca.data.clone().unwrap_or_default();
        let (Some(crt), Some(pem_key)) = (data.get("tls.crt"), data.get("tls.key")) else {
            return;
        };
        {
            let mut running = lock(&self.0.running);
            if running.contains_key(&key) {
                return;
            }
            running.insert(
                key.clone(),
                Running {
                    endpoint: None,
                    client: None,
                    kubeconfig: None,
                    nodes: BTreeSet::new(),
                    netns: false,
                    _child: None,
                    tasks: Vec::new(),
                    _net: None,
                },
            );
        }
        let (crt, pem_key) = (crt.0.clone(), pem_key.0.clone());
        let me = self.clone();
        tokio::spawn(async move {
            match me.launch(&key, &crt, &pem_key).await {
                Ok(()) => {}
                Err(e) => {
                    me.0.errors
                        .push(format!("workload apiserver of {}/{}: {e}", key.0, key.1));
                    lock(&me.0.running).remove(&key);
                }
            }
        });
    }

    async fn launch(&self, key: &ClusterKey, ca_crt: &[u8], ca_key: &[u8]) -> Result<(), String> {
        let s = &self.0.settings;
        // Where it runs: known once its OpenStackCluster was looked at.
        let placement = if s.netns {
            match self.decision(key).await {
                Some(p) => p,
                None => return Ok(()), // the cluster went
            }
        } else {
            None
        };
        let dir = s.dir.join(format!("{}--{}", key.0, key.1));
        let dir_s = dir.display().to_string();
        let io = |what: &str| {
            let what = format!("{dir_s}/{what}");
            move |e: std::io::Error| format!("{what}: {e}")
        };
        tokio::fs::create_dir_all(&dir).await.map_err(io(""))?;
        tokio::fs::write(dir.join("ca.crt"), ca_crt)
            .await
            .map_err(io("ca.crt"))?;
        write_private(&dir.join("ca.key"), ca_key).map_err(io("ca.key"))?;
        // What kubeadm's certs phase signs with the cluster CA: the
        // apiserver's serving certificate (its own names, the API's address
        // and the control plane's certSANs); and capi-sim's own client
        // certificate (system:masters) to register the Nodes.
        let mut sans = vec![
            "DNS:localhost".to_string(),
            "DNS:kubernetes".into(),
            "DNS:kubernetes.default".into(),
            "DNS:kubernetes.default.svc".into(),
            "IP:127.0.0.1".into(),
            "IP:10.96.0.1".into(),
        ];
        if let Some(p) = &placement {
            sans.push(format!("IP:{}", p.vip));
        }
        let ApiServerSpec {
            cert_sans,
            extra_args,
            files,
            volumes,
        } = self.control_plane_api_server(key).await;
        // The control-plane host: the KubeadmControlPlane's files, and the
        // host side of the apiServer's extra volumes.
        let host = dir.join("host");
        for f in &files {
            let path = under(&host, &f.path);
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(io(&format!("host{}", f.path)))?;
            }
            write_private(&path, f.content.as_bytes()).map_err(io(&format!("host{}", f.path)))?;
        }
        for (host_dir, _) in &volumes {
            tokio::fs::create_dir_all(under(&host, host_dir))
                .await
                .map_err(io(&format!("host{host_dir}")))?;
        }
        // kubeadm's default `authorization-mode` (Node,RBAC) unless the
        // control plane's extraArgs replace it (`getAPIServerCommand`
        // overrides a default by name; the flag is a list: given twice, the
        // real apiserver would add both).
        let authorization_mode = extra_args
            .iter()
            .find(|(k, _)| k == "authorization-mode")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "Node,RBAC".to_string());
        let extra_args: Vec<(String, String)> = extra_args
            .into_iter()
            .filter(|(k, _)| k != "authorization-mode")
            .map(|(k, v)| {
                let v = in_pod(&v, &volumes, &host).unwrap_or(v);
                (k, v)
            })
            .collect();
        for extra in cert_sans {
            sans.push(match extra.parse::<std::net::IpAddr>() {
                Ok(_) => format!("IP:{extra}"),
                Err(_) => format!("DNS:{extra}"),
            });
        }
        leaf_certificate(
            &dir,
            "apiserver",
            "/CN=kube-apiserver",
            &format!(
                "extendedKeyUsage=serverAuth\nsubjectAltName={}\n",
                sans.join(",")
            ),
        )
        .await?;
        leaf_certificate(
            &dir,
            "admin",
            "/O=system:masters/CN=capi-sim",
            "extendedKeyUsage=clientAuth\n",
        )
        .await?;
        openssl(&dir, &["genrsa", "-out", "sa.key", "2048"]).await?;
        openssl(&dir, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]).await?;
        let mut tasks = Vec::new();
        // On the host: a free loopback port; in the tenant network: the
        // API's address, with the management etcd forwarded into it.
        let (net, bind, port, etcd) = match &placement {
            Some(p) => {
                let key2 = key.clone();
                let p2 = p.clone();
                let net = tokio::task::spawn_blocking(move || TenantNet::create(&key2, &p2))
                    .await
                    .map_err(|e| e.to_string())??;
                let etcd_addr: std::net::SocketAddr = s
                    .etcd
                    .trim_start_matches("http://")
                    .parse()
                    .map_err(|e| format!("{}: {e}", s.etcd))?;
                let fwd = tenant::forward_into_ns(&net.vm_path(), 2379, etcd_addr)
                    .map_err(|e| format!("etcd into {}: {e}", net.vm))?;
                tasks.push(Abort(fwd));
                (
                    Some(net),
                    p.vip.to_string(),
                    6443,
                    "http://127.0.0.1:2379".to_string(),
                )
            }
            None => (
                None,
                "127.0.0.1".to_string(),
                free_port().map_err(|e| format!("a free port: {e}"))?,
                s.etcd.clone(),
            ),
        };
        let log = std::fs::File::create(dir.join("kube-apiserver.log"))
            .map_err(io("kube-apiserver.log"))?;
        let p = |f: &str| dir.join(f).display().to_string();
        let mut cmd = tokio::process::Command::new(&s.binary);
        cmd.args([
            format!("--bind-address={bind}"),
            format!("--advertise-address={bind}"),
            format!("--secure-port={port}"),
            format!("--etcd-servers={etcd}"),
            format!("--etcd-prefix={ETCD_PREFIX}/{}/{}", key.0, key.1),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--authorization-mode={authorization_mode}"),
            "--service-cluster-ip-range=10.96.0.0/12".to_string(),
            "--endpoint-reconciler-type=none".to_string(),
            "--profiling=false".to_string(),
            // kubeadm's default (`getAPIServerCommand`, `"allow-privileged":
            // "true"`): CNI and CSI node plugins run privileged.
            "--allow-privileged=true".to_string(),
            // Not kubeadm's: no pod runs here and no route leads to a
            // cluster IP, so an admission webhook or APIService a chart
            // installs (crate::helm) is reached through its Service's
            // endpoints, of which there are none: the call fails at once
            // (a webhook's failurePolicy decides) instead of dialling
            // 10.96.x.x off this machine.
            "--enable-aggregator-routing=true".to_string(),
            "--v=1".to_string(),
        ])
        // The control plane's apiServer extraArgs, as kubeadm puts them on
        // the static pod's command line (`cmd/kubeadm/app/phases/controlplane/manifests.go`,
        // `getAPIServerCommand`: extra arguments override the defaults):
        // the real apiserver refuses what it does not accept.
        .args(extra_args.iter().map(|(k, v)| format!("--{k}={v}")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
        let ns_file = match &net {
            Some(n) => {
                Some(std::fs::File::open(n.vm_path()).map_err(|e| format!("{}: {e}", n.vm))?)
            }
            None => None,
        };
        let ns_fd = ns_file.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        // SAFETY: prctl(2) and setns(2) between fork and exec touch no
        // memory of the parent; the first makes the kernel kill the
        // apiserver if capi-sim dies without running its destructors (the
        // spawning thread is a runtime worker, which lives as long as the
        // process), the second puts it in its tenant network (the
        // descriptor stays open until after the spawn).
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(fd) = ns_fd
                    && libc::setns(fd, libc::CLONE_NEWNET) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", s.binary.display()))?;
        drop(ns_file);
        // capi-sim's own way in (the kubelets'): direct, or a loopback port
        // forwarded into the namespace.
        let local = match &net {
            Some(n) => {
                let target = std::net::SocketAddr::new(
                    bind.parse().map_err(|e| format!("{bind}: {e}"))?,
                    port,
                );
                let (local, fwd) = tenant::forward_out_of_ns(&n.vm_path(), target)
                    .map_err(|e| format!("into {}: {e}", n.vm))?;
                tasks.push(Abort(fwd));
                local
            }
            None => port,
        };
        let url = format!("https://127.0.0.1:{local}");
        let kubeconfig = dir.join("kubeconfig");
        tokio::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster: {{server: \"{url}\", \
                 certificate-authority: \"{}\"}}\nusers:\n- name: admin\n  user: {{client-certificate: \"{}\", \
                 client-key: \"{}\"}}\ncontexts:\n- name: w\n  context: {{cluster: w, user: admin}}\n\
                 current-context: w\n",
                p("ca.crt"),
                p("admin.crt"),
                p("admin.key")
            ),
        )
        .await
        .map_err(io("kubeconfig"))?;
        let client = admin_client(&kubeconfig).await?;
        let ready = wait_ready(&client, &mut child).await;
        if net.is_some() {
            let me = self.clone();
            let k = key.clone();
            tasks.push(Abort(tokio::spawn(
                async move { me.cluster_cache(k).await },
            )));
        }
        let mut running = lock(&self.0.running);
        let Some(slot) = running.get_mut(key) else {
            // The cluster went while it started: `child` is dropped (killed),
            // then the namespaces.
            drop(running);
            tokio::task::spawn_blocking(move || drop((child, tasks, net)));
            return Ok(());
        };
        if let Err(e) = ready {
            drop(running);
            tokio::task::spawn_blocking(move || drop((child, tasks, net)));
            return Err(format!("{e}; see {dir_s}/kube-apiserver.log"));
        }
        tracing::info!(ns = key.0, cluster = key.1, %url, netns = net.is_some(), "workload apiserver ready");
        slot.endpoint = Some((bind.clone(), port));
        slot.client = Some(client);
        slot.kubeconfig = Some(kubeconfig);
        slot.netns = net.is_some();
        slot._child = Some(child);
        slot.tasks = tasks;
        slot._net = net;
        drop(running);
        let _ = self.0.ready_tx.send(key.clone());
        self.0.nodes_changed.notify_one();
        Ok(())
    }

    /// The control plane's `certSANs`, apiServer `extraArgs` and
    /// `extraVolumes`, and its `files` (KubeadmControlPlane of the cluster;
    /// waited for up to 30 s, as kubeadm runs only once it exists). Flags
    /// capi-sim sets itself (addresses, ports, files, etcd) and
    /// `cloud-provider` (the kubelet's and the controller manager's
    /// concern) are left out.
    async fn control_plane_api_server(&self, key: &ClusterKey) -> ApiServerSpec {
        let (g, v, kind, plural) = Kind::KubeadmControlPlane.gvk(self.0.settings.line);
        let ar = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(g, v, kind),
            plural,
        );
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(self.0.client.clone(), &key.0, &ar);
        let lp = kube::api::ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", key.1));
        for _ in 0..60 {
            if let Ok(list) = api.list(&lp).await
                && let Some(kcp) = list.items.first()
            {
                return api_server_spec(
                    kcp.data
                        .pointer("/spec/kubeadmConfigSpec")
                        .unwrap_or(&Value::Null),
                );
            }
            if !lock(&self.0.running).contains_key(key) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        ApiServerSpec::default()
    }

    /// CAPI's ClusterCache for a cluster in its tenant network: every
    /// second, the Nodes seen through its `<cluster>-kubeconfig` Secret.
    async fn cluster_cache(&self, key: ClusterKey) {
        let mut last: Option<BTreeSet<String>> = None;
        loop {
            let seen = match nodes_through_kubeconfig(&self.0.client, &key).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(
                        ns = key.0,
                        cluster = key.1,
                        "not reachable through its kubeconfig: {e}"
                    );
                    BTreeSet::new()
                }
            };
            if last.as_ref() != Some(&seen) {
                lock(&self.0.reachable).insert(key.clone(), seen.clone());
                let _ = self.0.ready_tx.send(key.clone());
                last = Some(seen);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The Nodes of cluster `key` as CAPI's controllers reach it: its
/// kubeconfig Secret, a `*.svc` server resolved to a ready endpoint of
/// that Service's EndpointSlices (what the management cluster's DNS and
/// kube-proxy do for CAPI's pods), the name kept as TLS server name.
async fn nodes_through_kubeconfig(
    mgmt: &kube::Client,
    key: &ClusterKey,
) -> Result<BTreeSet<String>, String> {
    let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), &key.0);
    let name = format!("{}-kubeconfig", key.1);
    let secret = secrets
        .get_opt(&name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{name}: none yet"))?;
    let text = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map(|v| String::from_utf8_lossy(&v.0).to_string())
        .ok_or_else(|| format!("{name}: no value"))?;
    let kc = kube::config::Kubeconfig::from_yaml(&text).map_err(|e| e.to_string())?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    let host = cfg.cluster_url.host().unwrap_or_default().to_string();
    if let Some(service_ns) = host.strip_suffix(".svc") {
        let (service, ns) = service_ns
            .split_once('.')
            .ok_or_else(|| format!("{host}: not <service>.<namespace>.svc"))?;
        let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
            Api::namespaced(mgmt.clone(), ns);
        let lp = kube::api::ListParams::default()
            .labels(&format!("kubernetes.io/service-name={service}"));
        let list = slices.list(&lp).await.map_err(|e| e.to_string())?;
        let target = list
            .items
            .iter()
            .flat_map(|s| {
                let port = s
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == Some("https"))
                    .and_then(|p| p.port);
                s.endpoints
                    .iter()
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                    .filter_map(move |e| Some((e.addresses.first()?.clone(), port?)))
            })
            .next()
            .ok_or_else(|| format!("Service {ns}/{service} has no ready endpoint"))?;
        cfg.cluster_url = format!("https://{}:{}", target.0, target.1)
            .parse()
            .map_err(|e| format!("{target:?}: {e}"))?;
        cfg.tls_server_name = Some(host.clone());
    }
    cfg.connect_timeout = Some(Duration::from_secs(2));
    cfg.read_timeout = Some(Duration::from_secs(5));
    let client = kube::Client::try_from(cfg).map_err(|e| e.to_string())?;
    let nodes: Api<Node> = Api::all(client);
    let list = nodes
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect())
}

/// What of a KubeadmControlPlane's `kubeadmConfigSpec` the workload
/// kube-apiserver is started with.
#[derive(Debug, Default, PartialEq)]
pub struct ApiServerSpec {
    pub cert_sans: Vec<String>,
    pub extra_args: Vec<(String, String)>,
    /// `files`: written on the host before kubeadm runs.
    pub files: Vec<HostFile>,
    /// apiServer `extraVolumes`: (hostPath, mountPath).
    pub volumes: Vec<(String, String)>,
}

#[derive(Debug, PartialEq)]
pub struct HostFile {
    pub path: String,
    pub content: String,
}

/// Read from `kubeadmConfigSpec` (either line's shape). Files are written
/// by cloud-init's `write_files` from the bootstrap data CABPK renders
/// (`bootstrap/kubeadm/internal/cloudinit/cloudinit.go`, the `files`
/// template); a file with an `encoding` or `contentFrom` is not one this
/// conductor writes, and is skipped (its flag then names a missing file, as
/// on a host whose file was not written).
pub fn api_server_spec(spec: &Value) -> ApiServerSpec {
    let api = spec
        .pointer("/clusterConfiguration/apiServer")
        .unwrap_or(&Value::Null);
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let files = spec["files"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|f| f.get("encoding").is_none() && f.get("contentFrom").is_none())
                .filter_map(|f| {
                    Some(HostFile {
                        path: f["path"].as_str()?.to_string(),
                        content: f["content"].as_str().unwrap_or_default().to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let volumes = api["extraVolumes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| {
                    Some((
                        v["hostPath"].as_str()?.to_string(),
                        v["mountPath"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    ApiServerSpec {
        cert_sans: strings(api.get("certSANs")),
        extra_args: extra_args(api.get("extraArgs").unwrap_or(&Value::Null)),
        files,
        volumes,
    }
}

/// `path` (absolute) inside `root`.
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// A flag's value as the static pod sees it, on capi-sim's host: a path
/// under an extra volume's `mountPath` is that volume's `hostPath` (kubeadm
/// mounts each as a hostPath volume at its mountPath:
/// `cmd/kubeadm/app/phases/controlplane/volumes.go`,
/// `getHostPathVolumesForTheControlPlane`), under `root`. The longest
/// mount wins; `None`: not a path in a volume (left as it is: the real
/// static pod would not see a host file either).
pub fn in_pod(value: &str, volumes: &[(String, String)], root: &Path) -> Option<String> {
    let (host, mount) = volumes
        .iter()
        .filter(|(_, m)| {
            let m = m.trim_end_matches('/');
            value == m || value.starts_with(&format!("{m}/"))
        })
        .max_by_key(|(_, m)| m.len())?;
    let rest = &value[mount.trim_end_matches('/').len()..];
    Some(format!(
        "{}{rest}",
        under(root, host.trim_end_matches('/')).display()
    ))
}

/// kubeadm `extraArgs` in either line's shape (v1beta1 a map, v1beta2 a
/// list of {name, value}), without the flags capi-sim sets itself.
pub fn extra_args(v: &Value) -> Vec<(String, String)> {
    const OWN: &[&str] = &[
        "bind-address",
        "advertise-address",
        "secure-port",
        "etcd-servers",
        "etcd-prefix",
        "tls-cert-file",
        "tls-private-key-file",
        "client-ca-file",
        "service-account-key-file",
        "service-account-signing-key-file",
        "service-account-issuer",
        "service-cluster-ip-range",
        "endpoint-reconciler-type",
        "cloud-provider",
    ];
    let pairs: Vec<(String, String)> = match v {
        Value::Object(m) => m
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(|e| {
                Some((
                    e.get("name")?.as_str()?.to_string(),
                    e.get("value")?.as_str()?.to_string(),
                ))
            })
            .collect(),
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter(|(k, _)| !OWN.contains(&k.as_str()))
        .collect()
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)
}

/// `NAME.key` and `NAME.crt` in `dir`, signed by `ca.crt`/`ca.key` there,
/// for `subject`, with `usage` (extension lines) after the leaf basics.
async fn leaf_certificate(
    dir: &Path,
    name: &str,
    subject: &str,
    usage: &str,
) -> Result<(), String> {
    let ext = format!("{name}.ext");
    let basics = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n";
    tokio::fs::write(dir.join(&ext), format!("{basics}{usage}"))
        .await
        .map_err(|e| format!("{}/{ext}: {e}", dir.display()))?;
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    )
    .await?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "365",
            "-extfile",
            &ext,
        ],
    )
    .await
}

async fn openssl(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = tokio::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A client of the workload apiserver as `system:masters`, verifying its
/// serving certificate against the cluster CA.
async fn admin_client(kubeconfig: &Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    cfg.connect_timeout = Some(Duration::from_secs(2));
    cfg.read_timeout = Some(Duration::from_secs(10));
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

/// Until `/readyz` answers `ok`, the process exits, or 90 s pass.
async fn wait_ready(
    client: &kube::Client,
    child: &mut tokio::process::Child,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("kube-apiserver exited ({status})"));
        }
        let req = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        if let Ok(body) = client.request_text(req).await
            && body.trim() == "ok"
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err("not ready after 90 s".into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Create the Nodes `want` has and `have` lacks (with their status), delete
/// the others.
async fn sync_nodes(
    client: &kube::Client,
    have: &BTreeSet<NodeSpec>,
    want: &BTreeSet<NodeSpec>,
) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    for n in want.difference(have) {
        let (node, status) = node_object(n);
        let node: Node = serde_json::from_value(node).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        api.patch_status(&n.name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    let keep: BTreeSet<&str> = want.iter().map(|n| n.name.as_str()).collect();
    for n in have.difference(want) {
        if keep.contains(n.name.as_str()) {
            continue; // the same node, changed: created above
        }
        match api.delete(&n.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn secret(name: &str, cluster: Option<&str>) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("magnum-p".into()),
                labels: cluster.map(|c| [(CLUSTER_LABEL.to_string(), c.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn machines_whose_server_exists_have_a_node_unless_being_deleted() {
        let m = |name: &str, server: Option<&str>, cp: bool, deleting: bool| {
            let mut v = json!({"metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "k1"}},
                               "spec": {"version": "v1.30.4"}, "status": {}});
            if let Some(s) = server {
                v["spec"]["providerID"] = json!(format!("openstack:///{s}"));
            }
            if cp {
                v["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = json!("");
            }
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            v
        };
        let all = [
            m("cp-1", Some("cp-1"), true, false),
            m("w-1", Some("w-1"), false, false),
            m("w-2", None, false, false),
            m("w-3", Some("w-3"), false, true),
        ];
        let got = nodes_of(&all.iter().collect::<Vec<_>>());
        let names: Vec<(&str, bool)> = got
            .iter()
            .map(|n| (n.name.as_str(), n.control_plane))
            .collect();
        assert_eq!(names, [("cp-1", true), ("w-1", false)]);
        assert!(got.iter().all(|n| n.version == "v1.30.4"));
        let (node, status) = node_object(got.first().unwrap());
        assert_eq!(node["spec"]["providerID"], "openstack:///cp-1");
        assert_eq!(
            node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"],
            ""
        );
        assert_eq!(status["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "cp-1");
        let long = NodeSpec {
            name: "k".repeat(64),
            ..got.first().unwrap().clone()
        };
        let (node, _) = node_object(&long);
        assert!(
            node["metadata"]["labels"]
                .get("kubernetes.io/hostname")
                .is_none()
        );
    }

    #[test]
    fn files_and_volumes_land_on_the_host_and_flags_follow_the_mounts() {
        let spec = json!({"files": [
                {"path": "/etc/kubernetes/audit-policy/p.yaml", "content": "kind: Policy\n"},
                {"path": "/etc/x", "encoding": "base64", "content": "eA=="}],
            "clusterConfiguration": {"apiServer": {
                "certSANs": ["a.example"],
                "extraArgs": {"audit-policy-file": "/etc/kubernetes/audit-policy/p.yaml",
                              "audit-log-path": "/var/log/audit/a.log", "v": "2"},
                "extraVolumes": [
                    {"name": "p", "hostPath": "/etc/kubernetes/audit-policy", "mountPath": "/etc/kubernetes/audit-policy"},
                    {"name": "l", "hostPath": "/var/log/kubernetes/audit", "mountPath": "/var/log/audit"}]}}});
        let got = api_server_spec(&spec);
        assert_eq!(got.cert_sans, ["a.example"]);
        assert_eq!(
            got.files,
            [HostFile {
                path: "/etc/kubernetes/audit-policy/p.yaml".into(),
                content: "kind: Policy\n".into()
            }]
        );
        let root = Path::new("/sim/host");
        let args: BTreeMap<String, String> = got
            .extra_args
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    in_pod(v, &got.volumes, root).unwrap_or(v.clone()),
                )
            })
            .collect();
        assert_eq!(
            args["audit-policy-file"],
            "/sim/host/etc/kubernetes/audit-policy/p.yaml"
        );
        assert_eq!(
            args["audit-log-path"],
            "/sim/host/var/log/kubernetes/audit/a.log"
        );
        assert_eq!(args["v"], "2");
        // A prefix that is not a directory of the mount is not in it.
        assert_eq!(in_pod("/var/log/auditx/a", &got.volumes, root), None);
        assert_eq!(api_server_spec(&Value::Null), ApiServerSpec::default());
    }

    #[test]
    fn extra_args_of_either_line_without_capi_sims_own() {
        let v1 = json!({"cloud-provider": "external", "tls-cipher-suites": "TLS_AES_128_GCM_SHA256",
                        "secure-port": "1"});
        // The authorization mode is the control plane's to set (kubeadm's
        // default is only a default).
        let mode = json!([{"name": "authorization-mode", "value": "Node,RBAC,Webhook"}]);
        assert_eq!(
            extra_args(&mode),
            [(
                "authorization-mode".to_string(),
                "Node,RBAC,Webhook".to_string()
            )]
        );
        let v2 = json!([{"name": "cloud-provider", "value": "external"},
                        {"name": "tls-cipher-suites", "value": "TLS_AES_128_GCM_SHA256"}]);
        let want = vec![(
            "tls-cipher-suites".to_string(),
            "TLS_AES_128_GCM_SHA256".to_string(),
        )];
        assert_eq!(extra_args(&v1), want);
        assert_eq!(extra_args(&v2), want);
        assert!(extra_args(&Value::Null).is_empty());
    }

    #[test]
    fn only_a_clusters_own_ca_secret_starts_one() {
        assert_eq!(
            ca_of(&secret("k1-ca", Some("k1"))),
            Some(("magnum-p".into(), "k1".into()))
        );
        // The etcd, front-proxy and service-account CAs are not the cluster CA.
        assert_eq!(ca_of(&secret("k1-etcd", Some("k1"))), None);
        assert_eq!(ca_of(&secret("k1-sa", Some("k1"))), None);
        // Another cluster's label, or none.
        assert_eq!(ca_of(&secret("k1-ca", Some("k2"))), None);
        assert_eq!(ca_of(&secret("k1-ca", None)), None);
    }
}
