//! The cloud behind the simulated CAPO, OCCM and Cinder CSI (I/O, opt-in:
//! `capi-sim --openstack`; OCCM and CSI also need `--workload-apiservers`).
//! Everything is made in the **real** OpenStack services the tests run
//! (Keystone, Neutron, Octavia, Cinder), with the credentials each real
//! controller would use, so what a cluster leaves behind is judged by them.
//!
//! **CAPO** (cluster-api-provider-openstack v0.12.7/v0.14.7), for each
//! OpenStackCluster, authenticating with the application credential of the
//! clouds.yaml in its `identityRef` Secret:
//! - create (`controllers/openstackcluster_controller.go`,
//!   `reconcileNetworkComponents`): the network and subnet
//!   `k8s-clusterapi-cluster-<namespace>-<name>` (`networking/network.go`,
//!   `getNetworkName`, `getSubnetName`, `names.ClusterResourceName`), the
//!   router of the same name with its gateway on the external network and
//!   an interface on the subnet (`networking/router.go`, `getRouterName`),
//!   the managed security groups `k8s-cluster-<ns>-<name>-secgroup-
//!   controlplane|worker` (`networking/securitygroups.go`), the API load
//!   balancer `<network name>-kubeapi` on the subnet, waited for until
//!   ACTIVE, and its floating IP unless `disableAPIServerFloatingIP`
//!   (`loadbalancer/loadbalancer.go`, `ReconcileLoadBalancer`); every
//!   description is `names.GetDescription`'s "Created by
//!   cluster-api-provider-openstack cluster <ns>-<name>";
//! - delete (`reconcileDelete`, in its order): the API load balancer's
//!   floating IP, the load balancer (cascade), waited for until gone
//!   (`DeleteLoadBalancer`); the router's interface and the router
//!   (`DeleteRouter`); the cluster's own ports (`DeleteClusterPorts`: only
//!   those named after the OpenStackCluster); the network (`DeleteNetwork`:
//!   Neutron answers 409 `NetworkInUse` while another port, such as a load
//!   balancer's VIP, is on it, and CAPO retries: `handleUpdateOSCError`
//!   with `isFatal=false` records nothing on the object); the security
//!   groups. The finalizer goes only when all of it is gone.
//!
//! **What OCCM and Cinder CSI read** is only what their pods would: the
//! container running their image among the workload cluster's Deployments
//! and DaemonSets (what the charts rendered by the real Helm engine
//! installed there: [`crate::helm`]), its arguments with `$(VAR)` expanded
//! from its env (`--cloud-config`, `--cluster-name`, `--cluster`), and the
//! files its volume mounts hold, read from that apiserver's Secrets
//! ([`crate::pod`], `Cloud::mounted_conf`). A conf or CA file the real
//! process could not read makes the simulated one do nothing and say why.
//!
//! **OCCM** (kubernetes/cloud-provider-openstack
//! `pkg/openstack/loadbalancer.go`), in each workload cluster's apiserver,
//! with the `[Global]` credentials of its cloud.conf and its
//! `--cluster-name` (default `kubernetes`): for a Service of type LoadBalancer,
//! the finalizer `service.kubernetes.io/load-balancer-cleanup` (k8s.io
//! cloud-provider `controllers/service/controller.go`, `addFinalizer`), the
//! load balancer `kube_service_<cluster>_<ns>_<svc>` described "Kubernetes
//! external service <ns>/<svc> from cluster <cluster>" on the cluster's
//! subnet with the configured `lb-provider` (`GetLoadBalancerName`,
//! `createOctaviaLoadBalancer`), a listener `listener_<i>_<lb name>` per
//! port, the floating IP "Floating IP for Kubernetes external service
//! <ns>/<svc> from cluster <cluster>" on its VIP port (`ensureFloatingIP`,
//! the external network found as `getFloatingNetworkIDForLB` does when
//! `floating-network-id` is not set), then the Service's
//! `status.loadBalancer.ingress`; a deleted Service loses its floating IP
//! and load balancer, then the finalizer (`EnsureLoadBalancerDeleted`).
//!
//! **Cinder CSI** (`pkg/csi/cinder/controllerserver.go`, `CreateVolume`,
//! called by the external-provisioner sidecar), its controller plugin's
//! cloud.conf and `--cluster`, for each unbound
//! PersistentVolumeClaim: the volume `pvc-<claim uid>` (external-provisioner
//! `makeVolumeName`) of the claim's size rounded up to GiB, with the
//! metadata `cinder.csi.openstack.org/cluster=<clusterID>` and the
//! sidecar's `--extra-create-metadata` keys; then its PersistentVolume and
//! the claim bound to it (what kube-controller-manager's PV controller
//! does, which the workload apiserver does not run).
//!
//! Per port, OCCM's pool with the configured `lb-method` and, with
//! `create-monitor`, its health monitor (`ensureOctaviaPool`,
//! `ensureOctaviaHealthMonitor`): Octavia's API validates them.
//!
//! Simplified: plain HTTP to the test services; no pool members (no
//! nodes); OCCM security groups only when the cloud.conf asks for them
//! (`manage-security-groups`, off in what the conductor renders).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::obj::deleting;
use crate::pod::{Container, FileSource, containers_running};
use crate::shared::lock;
use crate::workload::{ClusterKey, Workloads};

/// An application credential, as a clouds.yaml or a cloud.conf gives it.
#[derive(Clone, PartialEq, Eq)]
pub struct Creds {
    pub auth_url: String,
    pub id: String,
    secret: String,
    pub region: Option<String>,
    pub interface: String,
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creds")
            .field("auth_url", &self.auth_url)
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .field("region", &self.region)
            .finish()
    }
}

/// The credentials of cloud `cloud` in a clouds.yaml (what CAPO reads from
/// its `identityRef` Secret).
pub fn creds_from_clouds_yaml(text: &str, cloud: &str) -> Result<Creds, String> {
    let v: Value = serde_norway::from_str(text).map_err(|e| format!("clouds.yaml: {e}"))?;
    let c = v
        .pointer(&format!("/clouds/{cloud}"))
        .ok_or_else(|| format!("clouds.yaml: no cloud {cloud:?}"))?;
    let s = |p: &str| c.pointer(p).and_then(Value::as_str).map(str::to_string);
    Ok(Creds {
        auth_url: s("/auth/auth_url").ok_or("clouds.yaml: no auth_url")?,
        id: s("/auth/application_credential_id")
            .ok_or("clouds.yaml: no application_credential_id")?,
        secret: s("/auth/application_credential_secret")
            .ok_or("clouds.yaml: no application_credential_secret")?,
        region: s("/region_name"),
        interface: s("/interface").unwrap_or_else(|| "public".into()),
    })
}

/// A cloud.conf's sections as key -> value (what OCCM and Cinder CSI read
/// from their `cloud-config` Secret).
pub fn parse_cloud_conf(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    out
}

/// The `[Global]` application credential of a cloud.conf.
pub fn creds_from_cloud_conf(text: &str) -> Result<Creds, String> {
    let conf = parse_cloud_conf(text);
    let g = conf.get("Global").ok_or("cloud.conf: no [Global]")?;
    let s = |k: &str| g.get(k).cloned().ok_or(format!("cloud.conf: no {k}"));
    Ok(Creds {
        auth_url: s("auth-url")?,
        id: s("application-credential-id")?,
        secret: s("application-credential-secret")?,
        region: g.get("region").cloned(),
        interface: "public".into(),
    })
}

/// The workload kinds whose pods the plugins are looked for in.
const KINDS: &[&str] = &["Deployment", "DaemonSet"];

/// The Secrets of a container's namespace it mounts, by name: their keys'
/// bytes (None: the Secret does not exist).
pub type Mounted = BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>;

/// The bytes of the file at `path` in container `c`, from the Secrets it
/// mounts (pure); why the real process could not read it, otherwise.
pub fn read_file(c: &Container, path: &str, secrets: &Mounted) -> Result<Vec<u8>, String> {
    match c.file(path)? {
        FileSource::Secret { name, key } => match secrets.get(&name) {
            Some(Some(data)) => data.get(&key).cloned().ok_or_else(|| {
                format!(
                    "{path}: the Secret {}/{name} it mounts has no key {key}",
                    c.namespace
                )
            }),
            _ => Err(format!(
                "{path}: the Secret {}/{name} it mounts does not exist",
                c.namespace
            )),
        },
        FileSource::Unreadable(kind) => Err(format!("{path} is on a {kind} volume")),
    }
}

/// The cloud.conf container `c` loads (pure): the file its `--cloud-config`
/// names, and the `ca-file` that names, both read through its mounts. The
/// real plugin exits at start when either cannot be read
/// (`pkg/openstack/openstack.go` `ReadConfig`, gophercloud's CA loading).
pub fn loadable_conf(c: &Container, secrets: &Mounted) -> Result<String, String> {
    let path = c
        .flag("--cloud-config")
        .ok_or_else(|| format!("container {} ({}) has no --cloud-config", c.name, c.owner))?;
    let conf = String::from_utf8_lossy(&read_file(c, &path, secrets)?).to_string();
    if let Some(ca) = parse_cloud_conf(&conf)
        .get("Global")
        .and_then(|g| g.get("ca-file"))
    {
        read_file(c, ca, secrets)
            .map_err(|e| format!("its cloud.conf names ca-file={ca}, unreadable: {e}"))?;
    }
    Ok(conf)
}

/// What one OpenStack request answered other than success.
#[derive(Debug, Clone)]
pub struct OsError {
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for OsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{} {}", self.status, self.message)
        }
    }
}

fn err(message: impl Into<String>) -> OsError {
    OsError {
        status: 0,
        message: message.into(),
    }
}

struct Session {
    token: String,
    project: String,
    /// (type, interface, region, url)
    catalog: Vec<(String, String, String, String)>,
}

/// A Keystone-authenticated client of the cloud's APIs; sessions are kept
/// per credential.
#[derive(Clone)]
pub struct Os {
    http: Client<HttpConnector, Full<Bytes>>,
    sessions: Arc<Mutex<HashMap<String, Arc<Session>>>>,
}

impl Default for Os {
    fn default() -> Self {
        Os {
            http: Client::builder(TokioExecutor::new()).build_http(),
            sessions: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl Os {
    async fn raw(
        &self,
        method: &str,
        url: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<(u16, http::HeaderMap, Value), OsError> {
        if !url.starts_with("http://") {
            return Err(err(format!(
                "{url}: capi-sim speaks plain HTTP to the test services only"
            )));
        }
        let mut req = http::Request::builder()
            .method(method)
            .uri(url)
            .header("accept", "application/json");
        if let Some(t) = token {
            req = req.header("x-auth-token", t);
        }
        let payload = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Bytes::from(b.to_string())
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(payload))
            .map_err(|e| err(format!("{method} {url}: {e}")))?;
        let resp = tokio::time::timeout(Duration::from_secs(60), self.http.request(req))
            .await
            .map_err(|_| err(format!("{method} {url}: no answer in 60 s")))?
            .map_err(|e| err(format!("{method} {url}: {e}")))?;
        let status = resp.status().as_u16();
        tracing::debug!(method, url, status, "OpenStack request");
        let headers = resp.headers().clone();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| err(format!("{method} {url}: {e}")))?
            .to_bytes();
        let v = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Ok((status, headers, v))
    }

    async fn session(&self, c: &Creds) -> Result<Arc<Session>, OsError> {
        if let Some(s) = lock(&self.sessions).get(&c.id) {
            return Ok(s.clone());
        }
        let base = c.auth_url.trim_end_matches('/');
        let base = if base.ends_with("/v3") {
            base.to_string()
        } else {
            format!("{base}/v3")
        };
        let body = json!({"auth": {"identity": {"methods": ["application_credential"],
            "application_credential": {"id": c.id, "secret": c.secret}}}});
        let (status, headers, v) = self
            .raw("POST", &format!("{base}/auth/tokens"), None, Some(&body))
            .await?;
        if status != 201 {
            return Err(OsError {
                status,
                message: format!("Keystone refused application credential {}: {v}", c.id),
            });
        }
        let token = headers
            .get("x-subject-token")
            .and_then(|h| h.to_str().ok())
            .ok_or_else(|| err("Keystone answered no X-Subject-Token"))?
            .to_string();
        let project = v
            .pointer("/token/project/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut catalog = Vec::new();
        for svc in v
            .pointer("/token/catalog")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = svc["type"].as_str().unwrap_or_default();
            for e in svc["endpoints"].as_array().into_iter().flatten() {
                catalog.push((
                    kind.to_string(),
                    e["interface"].as_str().unwrap_or_default().to_string(),
                    e["region_id"]
                        .as_str()
                        .or(e["region"].as_str())
                        .unwrap_or_default()
                        .to_string(),
                    e["url"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        let s = Arc::new(Session {
            token,
            project,
            catalog,
        });
        lock(&self.sessions).insert(c.id.clone(), s.clone());
        Ok(s)
    }

    /// The project the credential belongs to.
    pub async fn project(&self, c: &Creds) -> Result<String, OsError> {
        Ok(self.session(c).await?.project.clone())
    }

    /// `method` on `path` of the catalog's `service` endpoint; the answer's
    /// body, or the service's error. A 401 logs in again once.
    pub async fn req(
        &self,
        c: &Creds,
        service: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, OsError> {
        for attempt in 0..2 {
            let s = self.session(c).await?;
            let url = s
                .catalog
                .iter()
                .find(|(t, i, r, _)| {
                    t == service
                        && *i == c.interface
                        && c.region.as_ref().is_none_or(|want| want == r)
                })
                .map(|(_, _, _, u)| u.trim_end_matches('/').to_string())
                .ok_or_else(|| err(format!("no {service} endpoint in the catalog")))?;
            let (status, _, v) = self
                .raw(
                    method,
                    &format!("{url}{path}"),
                    Some(&s.token),
                    body.as_ref(),
                )
                .await?;
            if status == 401 && attempt == 0 {
                lock(&self.sessions).remove(&c.id);
                continue;
            }
            if (200..300).contains(&status) {
                return Ok(v);
            }
            // Neutron's {"NeutronError": {"type", "message"}}, Octavia's
            // {"faultstring"}, Cinder's {"itemNotFound": {"message"}}.
            let message = ["NeutronError", "faultstring", "itemNotFound", "badRequest"]
                .iter()
                .find_map(|k| v.get(*k))
                .map(
                    |e| match (e.get("type").and_then(Value::as_str), e.get("message")) {
                        (Some(t), Some(m)) => format!("{t}: {}", m.as_str().unwrap_or_default()),
                        (None, Some(m)) => m
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| m.to_string()),
                        _ => e
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| e.to_string()),
                    },
                )
                .unwrap_or_else(|| v.to_string());
            return Err(OsError {
                status,
                message: format!("{method} {path}: {message}"),
            });
        }
        Err(err("unreachable"))
    }

    /// The first item of `list` (e.g. "networks") at `path` (a query) that
    /// belongs to the credential's project.
    async fn find(
        &self,
        c: &Creds,
        service: &str,
        path: &str,
        list: &str,
    ) -> Result<Option<Value>, OsError> {
        let project = self.project(c).await?;
        let v = self.req(c, service, "GET", path, None).await?;
        // Each query parameter matched here too: a filter a service does
        // not know is ignored, not refused (Cinder lists every volume).
        let wanted: Vec<(String, String)> = path
            .split_once('?')
            .map(|(_, q)| q)
            .unwrap_or_default()
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| !k.contains(':'))
            .map(|(k, v)| (k.to_string(), dec(v)))
            .collect();
        Ok(v[list]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| {
                i.get("project_id")
                    .or(i.get("tenant_id"))
                    .and_then(Value::as_str)
                    .is_none_or(|p| p == project)
                    && wanted
                        .iter()
                        .all(|(k, v)| i.get(k).is_none_or(|x| x.as_str() == Some(v)))
            })
            .cloned())
    }

    async fn find_or_create(
        &self,
        c: &Creds,
        service: &str,
        base: &str,
        query: &str,
        one: &str,
        mut body: Value,
    ) -> Result<Value, OsError> {
        let list = format!("{one}s");
        let list = if one == "loadbalancer" {
            "loadbalancers".to_string()
        } else {
            list
        };
        if let Some(found) = self
            .find(c, service, &format!("{base}?{query}"), &list)
            .await?
        {
            return Ok(found);
        }
        body["project_id"] = json!(self.project(c).await?);
        let v = self
            .req(c, service, "POST", base, Some(json!({ one: body })))
            .await?;
        Ok(v[one].clone())
    }

    /// DELETE `path`; already gone (404) counts as done.
    async fn delete(&self, c: &Creds, service: &str, path: &str) -> Result<(), OsError> {
        ignore_404(self.req(c, service, "DELETE", path, None).await).map(|_| ())
    }

    /// Load balancer `lb`'s floating IP (found by its VIP port), then the
    /// load balancer itself, cascading (CAPO's `DeleteLoadBalancer`, OCCM's
    /// `EnsureLoadBalancerDeleted`); nothing asked again while it is
    /// PENDING_DELETE.
    async fn release_lb(&self, c: &Creds, lb: &Value) -> Result<(), OsError> {
        let id = lb["id"].as_str().unwrap_or_default();
        if let Some(port) = lb["vip_port_id"].as_str().filter(|p| !p.is_empty())
            && let Some(fip) = self
                .find(
                    c,
                    "network",
                    &format!("/v2.0/floatingips?port_id={port}"),
                    "floatingips",
                )
                .await?
        {
            let fid = fip["id"].as_str().unwrap_or_default();
            self.delete(c, "network", &format!("/v2.0/floatingips/{fid}"))
                .await?;
        }
        if lb["provisioning_status"] != "PENDING_DELETE" {
            self.delete(
                c,
                "load-balancer",
                &format!("/v2/lbaas/loadbalancers/{id}?cascade=true"),
            )
            .await?;
        }
        Ok(())
    }

    /// Wait (up to 2 minutes) until load balancer `id` is ACTIVE.
    async fn lb_active(&self, c: &Creds, id: &str) -> Result<Value, OsError> {
        for _ in 0..240 {
            let v = self
                .req(
                    c,
                    "load-balancer",
                    "GET",
                    &format!("/v2/lbaas/loadbalancers/{id}"),
                    None,
                )
                .await?;
            match v
                .pointer("/loadbalancer/provisioning_status")
                .and_then(Value::as_str)
            {
                Some("ACTIVE") => return Ok(v["loadbalancer"].clone()),
                Some("ERROR") => return Err(err(format!("load balancer {id} is in ERROR"))),
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
        Err(err(format!(
            "load balancer {id} not ACTIVE after 2 minutes"
        )))
    }

    /// The external network: `id`, or by `name`, or the only one there is.
    async fn external_network(
        &self,
        c: &Creds,
        id: Option<&str>,
        name: Option<&str>,
    ) -> Result<Option<String>, OsError> {
        if let Some(id) = id {
            return Ok(Some(id.to_string()));
        }
        let q = match name {
            Some(n) => format!("/v2.0/networks?router:external=true&name={}", enc(n)),
            None => "/v2.0/networks?router:external=true".to_string(),
        };
        let v = self.req(c, "network", "GET", &q, None).await?;
        let nets = v["networks"].as_array().cloned().unwrap_or_default();
        Ok(match nets.as_slice() {
            [one] => one["id"].as_str().map(str::to_string),
            _ => None,
        })
    }
}

fn dec(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(x);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What CAPO made for a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub network: (String, String),
    pub subnet: String,
    pub cidr: String,
    pub router: Option<(String, String)>,
    /// (id, name, VIP address, floating IP)
    pub lb: Option<(String, String, String, Option<String>)>,
}

/// Where a cluster's cloud side stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Infra {
    /// Being made; the last error, if any.
    Building(Option<String>),
    Ready(Box<Made>),
    /// Being deleted; the last error (e.g. Neutron's 409 on the network).
    Deleting(Option<String>),
    Gone,
}

struct Slot {
    delete: bool,
    state: Infra,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Which task is the slot's (one that was replaced must not clear it).
    generation: u64,
}

struct Inner {
    kube: kube::Client,
    os: Os,
    slots: Mutex<BTreeMap<ClusterKey, Slot>>,
    changed_tx: mpsc::UnboundedSender<ClusterKey>,
    changed_rx: Mutex<Option<mpsc::UnboundedReceiver<ClusterKey>>>,
    errors: crate::shared::Recent,
    workloads: Option<Workloads>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The cloud side of every cluster. Clones share it.
#[derive(Clone)]
pub struct Cloud(Arc<Inner>);

impl std::fmt::Debug for Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cloud")
            .field("infra", &self.infra())
            .finish()
    }
}

impl Cloud {
    /// Start; with `workloads`, OCCM and Cinder CSI run in each workload
    /// cluster's apiserver once its network is made.
    pub fn start(kube: kube::Client, workloads: Option<Workloads>) -> Cloud {
        let (tx, rx) = mpsc::unbounded_channel();
        let cloud = Cloud(Arc::new(Inner {
            kube,
            os: Os::default(),
            slots: Mutex::new(BTreeMap::new()),
            changed_tx: tx,
            changed_rx: Mutex::new(Some(rx)),
            errors: Default::default(),
            workloads,
            tasks: Mutex::new(Vec::new()),
        }));
        if cloud.0.workloads.is_some() {
            let me = cloud.clone();
            lock(&cloud.0.tasks).push(tokio::spawn(async move { me.workload_loop().await }));
        }
        cloud
    }

    pub fn stop(&self) {
        for t in lock(&self.0.tasks).drain(..) {
            t.abort();
        }
        for s in lock(&self.0.slots).values_mut() {
            if let Some(t) = s.task.take() {
                t.abort();
            }
        }
    }

    /// Clusters whose cloud side changed (the controllers look at them
    /// again); taken once.
    pub fn take_changed(&self) -> Option<mpsc::UnboundedReceiver<ClusterKey>> {
        lock(&self.0.changed_rx).take()
    }

    pub fn infra(&self) -> BTreeMap<ClusterKey, Infra> {
        lock(&self.0.slots)
            .iter()
            .map(|(k, s)| (k.clone(), s.state.clone()))
            .collect()
    }

    /// What went wrong that a test should see (OCCM, CSI).
    pub fn errors(&self) -> Vec<String> {
        self.0.errors.all()
    }

    fn error(&self, msg: String) {
        self.0.errors.push(msg);
    }

    fn set(&self, key: &ClusterKey, state: Infra) {
        let mut slots = lock(&self.0.slots);
        if let Some(s) = slots.get_mut(key)
            && s.state != state
        {
            s.state = state;
            let _ = self.0.changed_tx.send(key.clone());
        }
    }

    /// The OpenStackCluster `osc` of cluster `key` as the controllers see
    /// it: its network is made, or torn down once it is being deleted.
    pub fn want(&self, key: &ClusterKey, osc: &Value) {
        let delete = deleting(osc);
        let mut slots = lock(&self.0.slots);
        let slot = slots.entry(key.clone()).or_insert(Slot {
            delete,
            state: Infra::Building(None),
            task: None,
            generation: 0,
        });
        if slot.task.is_some() && slot.delete == delete {
            return;
        }
        if !delete && slot.state != Infra::Building(None) && slot.task.is_none() {
            // Made (or gone) already.
            return;
        }
        if delete && slot.state == Infra::Gone {
            return;
        }
        if let Some(t) = slot.task.take() {
            t.abort();
        }
        slot.delete = delete;
        if delete {
            slot.state = Infra::Deleting(None);
        }
        slot.generation += 1;
        let generation = slot.generation;
        let me = self.clone();
        let (key2, osc) = (key.clone(), osc.clone());
        slot.task = Some(tokio::spawn(async move {
            if delete {
                me.teardown_loop(&key2, &osc).await
            } else {
                me.build_loop(&key2, &osc).await
            }
            if let Some(s) = lock(&me.0.slots).get_mut(&key2)
                && s.generation == generation
            {
                s.task = None;
            }
        }));
    }

    async fn creds_of(&self, osc: &Value) -> Result<Creds, OsError> {
        let ns = osc
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = osc
            .pointer("/spec/identityRef/name")
            .and_then(Value::as_str)
            .ok_or_else(|| err("no spec.identityRef"))?;
        let cloud = osc
            .pointer("/spec/identityRef/cloudName")
            .and_then(Value::as_str)
            .unwrap_or("openstack");
        let s = Api::<Secret>::namespaced(self.0.kube.clone(), ns)
            .get(name)
            .await
            .map_err(|e| err(format!("identityRef Secret {ns}/{name}: {e}")))?;
        let yaml = s
            .data
            .as_ref()
            .and_then(|d| d.get("clouds.yaml"))
            .ok_or_else(|| err(format!("Secret {ns}/{name} has no clouds.yaml")))?;
        creds_from_clouds_yaml(&String::from_utf8_lossy(&yaml.0), cloud).map_err(err)
    }

    async fn build_loop(&self, key: &ClusterKey, osc: &Value) {
        tracing::info!(ns = key.0, cluster = key.1, "CAPO: making the network");
        loop {
            match self.build(key, osc).await {
                Ok(made) => {
                    tracing::info!(ns = key.0, cluster = key.1, made = ?made, "CAPO: network made");
                    self.set(key, Infra::Ready(Box::new(made)));
                    break;
                }
                Err(e) => {
                    tracing::info!(ns = key.0, cluster = key.1, error = %e, "CAPO: network not made yet");
                    self.set(key, Infra::Building(Some(e.to_string())));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn teardown_loop(&self, key: &ClusterKey, osc: &Value) {
        tracing::info!(ns = key.0, cluster = key.1, "CAPO: deleting the network");
        loop {
            match self.teardown(key, osc).await {
                Ok(()) => {
                    self.set(key, Infra::Gone);
                    break;
                }
                Err(e) => {
                    tracing::info!(ns = key.0, cluster = key.1, error = %e, "CAPO: delete retried");
                    self.set(key, Infra::Deleting(Some(e.to_string())));
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    }

    /// CAPO's `reconcileNetworkComponents` (see the module's citations).
    async fn build(&self, key: &ClusterKey, osc: &Value) -> Result<Made, OsError> {
        let os = &self.0.os;
        let c = self.creds_of(osc).await?;
        let r = format!("{}-{}", key.0, key.1);
        let net_name = format!("k8s-clusterapi-cluster-{r}");
        let description = format!("Created by cluster-api-provider-openstack cluster {r}");
        let q = format!("name={}", enc(&net_name));
        let network = os
            .find_or_create(
                &c,
                "network",
                "/v2.0/networks",
                &q,
                "network",
                json!({"name": net_name, "description": description}),
            )
            .await?;
        let net_id = network["id"].as_str().unwrap_or_default().to_string();
        let managed = osc.pointer("/spec/managedSubnets/0");
        let cidr = managed
            .and_then(|m| m["cidr"].as_str())
            .unwrap_or("10.6.0.0/24")
            .to_string();
        let mut body = json!({"name": net_name, "network_id": net_id, "cidr": cidr, "ip_version": 4,
                              "description": description});
        if let Some(dns) = managed.and_then(|m| m.get("dnsNameservers")) {
            body["dns_nameservers"] = dns.clone();
        }
        let subnet = os
            .find_or_create(
                &c,
                "network",
                "/v2.0/subnets",
                &format!("{q}&network_id={net_id}"),
                "subnet",
                body,
            )
            .await?;
        let subnet_id = subnet["id"].as_str().unwrap_or_default().to_string();
        let ext = os
            .external_network(
                &c,
                osc.pointer("/spec/externalNetwork/id")
                    .and_then(Value::as_str),
                osc.pointer("/spec/externalNetwork/filter/name")
                    .and_then(Value::as_str),
            )
            .await?;
        // No external network, no router (`reconcileRouter`).
        let router = match &ext {
            Some(ext) => {
                let router = os
                    .find_or_create(
                        &c,
                        "network",
                        "/v2.0/routers",
                        &q,
                        "router",
                        json!({"name": net_name, "description": description,
                               "external_gateway_info": {"network_id": ext}}),
                    )
                    .await?;
                let rid = router["id"].as_str().unwrap_or_default().to_string();
                let ports = os
                    .req(
                        &c,
                        "network",
                        "GET",
                        &format!("/v2.0/ports?device_id={rid}&network_id={net_id}"),
                        None,
                    )
                    .await?;
                if ports["ports"].as_array().is_none_or(|p| p.is_empty()) {
                    os.req(
                        &c,
                        "network",
                        "PUT",
                        &format!("/v2.0/routers/{rid}/add_router_interface"),
                        Some(json!({"subnet_id": subnet_id})),
                    )
                    .await?;
                }
                Some((rid, net_name.clone()))
            }
            None => None,
        };
        if osc.pointer("/spec/managedSecurityGroups").is_some() {
            for role in ["controlplane", "worker"] {
                let name = format!("k8s-cluster-{r}-secgroup-{role}");
                os.find_or_create(
                    &c,
                    "network",
                    "/v2.0/security-groups",
                    &format!("name={}", enc(&name)),
                    "security_group",
                    json!({"name": name, "description": description}),
                )
                .await?;
            }
        }
        let lb = if osc.pointer("/spec/apiServerLoadBalancer/enabled") == Some(&json!(true)) {
            let name = format!("{net_name}-kubeapi");
            let mut body =
                json!({"name": name, "vip_subnet_id": subnet_id, "description": description});
            if let Some(p) = osc
                .pointer("/spec/apiServerLoadBalancer/provider")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
            {
                body["provider"] = json!(p);
            }
            let lb = os
                .find_or_create(
                    &c,
                    "load-balancer",
                    "/v2/lbaas/loadbalancers",
                    &format!("name={}", enc(&name)),
                    "loadbalancer",
                    body,
                )
                .await?;
            let id = lb["id"].as_str().unwrap_or_default().to_string();
            let lb = os.lb_active(&c, &id).await?;
            let vip = lb["vip_address"].as_str().unwrap_or_default().to_string();
            let port = lb["vip_port_id"].as_str().unwrap_or_default().to_string();
            let fip = match (&ext, osc.pointer("/spec/disableAPIServerFloatingIP")) {
                (Some(ext), v) if v != Some(&json!(true)) => {
                    let f = os
                        .find_or_create(
                            &c,
                            "network",
                            "/v2.0/floatingips",
                            &format!("port_id={port}"),
                            "floatingip",
                            json!({"floating_network_id": ext, "port_id": port,
                                               "description": description}),
                        )
                        .await?;
                    f["floating_ip_address"].as_str().map(str::to_string)
                }
                _ => None,
            };
            Some((id, name, vip, fip))
        } else {
            None
        };
        Ok(Made {
            network: (net_id, net_name),
            subnet: subnet_id,
            cidr,
            router,
            lb,
        })
    }

    /// CAPO's `reconcileDelete` after the Machines are gone (see the
    /// module's citations): Ok once nothing of CAPO's is left.
    async fn teardown(&self, key: &ClusterKey, osc: &Value) -> Result<(), OsError> {
        let os = &self.0.os;
        let c = self.creds_of(osc).await?;
        let r = format!("{}-{}", key.0, key.1);
        let net_name = format!("k8s-clusterapi-cluster-{r}");
        let q = format!("name={}", enc(&net_name));
        let lb_name = format!("{net_name}-kubeapi");
        if let Some(lb) = os
            .find(
                &c,
                "load-balancer",
                &format!("/v2/lbaas/loadbalancers?name={}", enc(&lb_name)),
                "loadbalancers",
            )
            .await?
        {
            let id = lb["id"].as_str().unwrap_or_default();
            if lb["provisioning_status"] == "PENDING_DELETE" {
                return Err(err(format!(
                    "load balancer {lb_name} ({id}) is PENDING_DELETE"
                )));
            }
            os.release_lb(&c, &lb).await?;
            return Err(err(format!(
                "load balancer {lb_name} ({id}) is being deleted"
            )));
        }
        let net = os
            .find(&c, "network", &format!("/v2.0/networks?{q}"), "networks")
            .await?;
        if let Some(router) = os
            .find(&c, "network", &format!("/v2.0/routers?{q}"), "routers")
            .await?
        {
            let rid = router["id"].as_str().unwrap_or_default();
            if let Some(subnet) = os
                .find(&c, "network", &format!("/v2.0/subnets?{q}"), "subnets")
                .await?
            {
                let sid = subnet["id"].as_str().unwrap_or_default();
                ignore_404(
                    os.req(
                        &c,
                        "network",
                        "PUT",
                        &format!("/v2.0/routers/{rid}/remove_router_interface"),
                        Some(json!({"subnet_id": sid})),
                    )
                    .await,
                )?;
            }
            os.delete(&c, "network", &format!("/v2.0/routers/{rid}"))
                .await?;
        }
        if let Some(net) = net {
            let nid = net["id"].as_str().unwrap_or_default();
            let osc_name = osc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let ports = os
                .req(
                    &c,
                    "network",
                    "GET",
                    &format!("/v2.0/ports?network_id={nid}"),
                    None,
                )
                .await?;
            for p in ports["ports"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap_or_default();
                if !osc_name.is_empty() && name.starts_with(osc_name) {
                    let pid = p["id"].as_str().unwrap_or_default();
                    os.delete(&c, "network", &format!("/v2.0/ports/{pid}"))
                        .await?;
                }
            }
            ignore_404(
                os.req(
                    &c,
                    "network",
                    "DELETE",
                    &format!("/v2.0/networks/{nid}"),
                    None,
                )
                .await,
            )
            .map_err(|e| OsError {
                status: e.status,
                message: format!("failed to delete network: {}", e.message),
            })?;
        }
        for role in ["controlplane", "worker"] {
            let name = format!("k8s-cluster-{r}-secgroup-{role}");
            if let Some(sg) = os
                .find(
                    &c,
                    "network",
                    &format!("/v2.0/security-groups?name={}", enc(&name)),
                    "security_groups",
                )
                .await?
            {
                let id = sg["id"].as_str().unwrap_or_default();
                os.delete(&c, "network", &format!("/v2.0/security-groups/{id}"))
                    .await?;
            }
        }
        Ok(())
    }

    /// OCCM and Cinder CSI in every workload cluster whose network is made,
    /// once a second: the clusters side by side, as each runs OCCM and
    /// Cinder CSI pods of its own (a load balancer one cluster's OCCM waits
    /// on does not hold up another's).
    async fn workload_loop(&self) {
        let Some(w) = self.0.workloads.clone() else {
            return;
        };
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let ready: Vec<(ClusterKey, Made)> = lock(&self.0.slots)
                .iter()
                .filter_map(|(k, s)| match &s.state {
                    Infra::Ready(m) if !s.delete => Some((k.clone(), (**m).clone())),
                    _ => None,
                })
                .collect();
            let passes = ready.into_iter().filter_map(|(key, made)| {
                let client = w.client(&key)?;
                Some(async move {
                    if let Err(e) = self.sync_workload(&key, &made, &client).await {
                        self.error(format!("{}/{}: {e}", key.0, key.1));
                    }
                })
            });
            futures_util::future::join_all(passes).await;
        }
    }

    /// The workload cluster's Deployments and DaemonSets, as JSON (the
    /// pods [`crate::pod`] looks into), Deployments first.
    async fn workloads(client: &kube::Client) -> Result<Vec<Value>, OsError> {
        let mut objects = Vec::new();
        let d = Api::<Deployment>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| err(format!("Deployments: {e}")))?;
        let s = Api::<DaemonSet>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| err(format!("DaemonSets: {e}")))?;
        for o in d.items {
            objects.push(serde_json::to_value(o).map_err(|e| err(e.to_string()))?);
        }
        for o in s.items {
            objects.push(serde_json::to_value(o).map_err(|e| err(e.to_string()))?);
        }
        Ok(objects)
    }

    /// The cloud.conf container `c` loads, read from the workload cluster's
    /// apiserver: what is there, not what any values say. A conf the real
    /// plugin could not load makes it exit at start (see
    /// [`loadable_conf`]): None, and the reason among the errors a test
    /// sees.
    async fn mounted_conf(
        &self,
        client: &kube::Client,
        plugin: &str,
        c: &Container,
        key: &ClusterKey,
    ) -> Result<Option<String>, OsError> {
        let api = Api::<Secret>::namespaced(client.clone(), &c.namespace);
        let mut secrets = Mounted::new();
        for name in c.secret_volumes() {
            let got = api
                .get_opt(&name)
                .await
                .map_err(|e| err(format!("Secret {}/{name}: {e}", c.namespace)))?;
            let data = got.map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            });
            secrets.insert(name, data);
        }
        match loadable_conf(c, &secrets) {
            Ok(conf) => Ok(Some(conf)),
            Err(why) => {
                self.error(format!(
                    "{plugin} ({}) in cluster {}/{} cannot start: {why}",
                    c.owner, key.0, key.1
                ));
                Ok(None)
            }
        }
    }

    /// OCCM, then Cinder CSI (each whatever the other's outcome).
    async fn sync_workload(
        &self,
        key: &ClusterKey,
        made: &Made,
        client: &kube::Client,
    ) -> Result<(), OsError> {
        // One listing serves both (each pass finds its own container).
        let pods = Self::workloads(client).await?;
        let occm = self.occm_pass(key, made, client, &pods).await;
        let csi = self.csi_pass(key, client, &pods).await;
        occm.and(csi)
    }

    /// OCCM: the container running its image (the chart's DaemonSet), its
    /// `--cluster-name` (OCCM's default `kubernetes`).
    async fn occm_pass(
        &self,
        key: &ClusterKey,
        made: &Made,
        client: &kube::Client,
        pods: &[Value],
    ) -> Result<(), OsError> {
        let found = containers_running(pods, "openstack-cloud-controller-manager", KINDS);
        let Some(c) = found.first() else {
            return Ok(());
        };
        let Some(conf) = self.mounted_conf(client, "OCCM", c, key).await? else {
            return Ok(());
        };
        let creds = creds_from_cloud_conf(&conf).map_err(err)?;
        let cluster = c
            .flag("--cluster-name")
            .unwrap_or_else(|| "kubernetes".into());
        let lb_conf = parse_cloud_conf(&conf)
            .remove("LoadBalancer")
            .unwrap_or_default();
        let services = Api::<Service>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| err(format!("Services: {e}")))?;
        for s in services.items {
            if s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer") {
                self.occm(&creds, &cluster, &lb_conf, made, client, &s)
                    .await?;
            }
        }
        Ok(())
    }

    /// Cinder CSI: its controller plugin (the chart's Deployment, which
    /// serves `CreateVolume`), its `--cluster` (default empty), and the
    /// external-provisioner beside it, whose `--extra-create-metadata` adds
    /// the claim's and volume's names.
    async fn csi_pass(
        &self,
        key: &ClusterKey,
        client: &kube::Client,
        pods: &[Value],
    ) -> Result<(), OsError> {
        let found = containers_running(pods, "cinder-csi-plugin", KINDS);
        let Some(c) = found.iter().find(|c| c.owner.starts_with("Deployment/")) else {
            return Ok(());
        };
        let Some(conf) = self.mounted_conf(client, "Cinder CSI", c, key).await? else {
            return Ok(());
        };
        let creds = creds_from_cloud_conf(&conf).map_err(err)?;
        let cluster = c.flag("--cluster").unwrap_or_default();
        let extra = containers_running(pods, "csi-provisioner", KINDS)
            .iter()
            .any(|p| p.owner == c.owner && p.switch("--extra-create-metadata"));
        let claims = Api::<PersistentVolumeClaim>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| err(format!("PersistentVolumeClaims: {e}")))?;
        for pvc in claims.items {
            if pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_none()
            {
                self.csi(&creds, &cluster, extra, client, &pvc).await?;
            }
        }
        Ok(())
    }

    /// OCCM for one Service of type LoadBalancer (see the module's
    /// citations).
    async fn occm(
        &self,
        c: &Creds,
        cluster: &str,
        lb_conf: &BTreeMap<String, String>,
        made: &Made,
        client: &kube::Client,
        s: &Service,
    ) -> Result<(), OsError> {
        const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
        let os = &self.0.os;
        let ns = s.metadata.namespace.clone().unwrap_or_default();
        let svc = s.metadata.name.clone().unwrap_or_default();
        let api = Api::<Service>::namespaced(client.clone(), &ns);
        let name: String = format!("kube_service_{cluster}_{ns}_{svc}")
            .chars()
            .take(255)
            .collect();
        let q = format!("/v2/lbaas/loadbalancers?name={}", enc(&name));
        let finalizers = s.metadata.finalizers.clone().unwrap_or_default();
        if s.metadata.deletion_timestamp.is_some() {
            if !finalizers.iter().any(|f| f == FINALIZER) {
                return Ok(());
            }
            if let Some(lb) = os.find(c, "load-balancer", &q, "loadbalancers").await? {
                os.release_lb(c, &lb).await?;
                return Ok(());
            }
            let rest: Vec<String> = finalizers.into_iter().filter(|f| f != FINALIZER).collect();
            api.patch(
                &svc,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": rest}})),
            )
            .await
            .map_err(|e| err(format!("Service {ns}/{svc}: {e}")))?;
            return Ok(());
        }
        if s.status
            .as_ref()
            .and_then(|st| st.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .is_some_and(|i| !i.is_empty())
        {
            return Ok(());
        }
        if !finalizers.iter().any(|f| f == FINALIZER) {
            let mut all = finalizers.clone();
            all.push(FINALIZER.into());
            api.patch(
                &svc,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": all}})),
            )
            .await
            .map_err(|e| err(format!("Service {ns}/{svc}: {e}")))?;
        }
        let mut body = json!({"name": name, "vip_subnet_id": made.subnet,
                              "description": format!("Kubernetes external service {ns}/{svc} from cluster {cluster}")});
        if let Some(p) = lb_conf.get("lb-provider") {
            body["provider"] = json!(p);
        }
        let lb = os
            .find_or_create(
                c,
                "load-balancer",
                "/v2/lbaas/loadbalancers",
                q.trim_start_matches("/v2/lbaas/loadbalancers?"),
                "loadbalancer",
                body,
            )
            .await?;
        let id = lb["id"].as_str().unwrap_or_default().to_string();
        let mut lb = os.lb_active(c, &id).await?;
        let ports = s
            .spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default();
        for (i, p) in ports.iter().enumerate() {
            let lname: String = format!("listener_{i}_{name}").chars().take(255).collect();
            let have = os
                .find(
                    c,
                    "load-balancer",
                    &format!(
                        "/v2/lbaas/listeners?name={}&loadbalancer_id={id}",
                        enc(&lname)
                    ),
                    "listeners",
                )
                .await?;
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let listener = match have {
                Some(l) => l,
                None => {
                    let project = os.project(c).await?;
                    let made = os
                        .req(
                            c,
                            "load-balancer",
                            "POST",
                            "/v2/lbaas/listeners",
                            Some(json!({"listener": {
                        "name": lname, "loadbalancer_id": id, "protocol": protocol,
                        "protocol_port": p.port, "project_id": project}})),
                        )
                        .await?;
                    lb = os.lb_active(c, &id).await?;
                    made["listener"].clone()
                }
            };
            let listener_id = listener["id"].as_str().unwrap_or_default().to_string();
            // The listener's pool (`ensureOctaviaPool`, `buildPoolCreateOpt`:
            // `pool_<i>_<lb name>`, the listener's protocol, `lb-method`,
            // which OCCM's config defaults to ROUND_ROBIN) and its health
            // monitor when `create-monitor` (`ensureOctaviaHealthMonitor`,
            // `buildMonitorCreateOpts`: `monitor_<i>_<lb name>`, the port's
            // protocol, the defaults `monitor-delay` 5s, `monitor-timeout` 3s,
            // `monitor-max-retries` 1, `monitor-max-retries-down` 3). No
            // members: there are no nodes to add.
            let pname: String = format!("pool_{i}_{name}").chars().take(255).collect();
            let pool = os
                .find(
                    c,
                    "load-balancer",
                    &format!("/v2/lbaas/pools?name={}", enc(&pname)),
                    "pools",
                )
                .await?;
            let pool = match pool {
                Some(pool) => pool,
                None => {
                    let method = lb_conf
                        .get("lb-method")
                        .map(|m| m.to_ascii_uppercase())
                        .unwrap_or_else(|| "ROUND_ROBIN".into());
                    let made = os.req(c, "load-balancer", "POST", "/v2/lbaas/pools", Some(json!({"pool": {
                        "name": pname, "protocol": protocol, "lb_algorithm": method, "listener_id": listener_id}})))
                        .await?;
                    lb = os.lb_active(c, &id).await?;
                    made["pool"].clone()
                }
            };
            let monitor = lb_conf
                .get("create-monitor")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            if monitor && pool["healthmonitor_id"].as_str().is_none_or(str::is_empty) {
                let mname: String = format!("monitor_{i}_{name}").chars().take(255).collect();
                os.req(c, "load-balancer", "POST", "/v2/lbaas/healthmonitors", Some(json!({"healthmonitor": {
                    "name": mname, "pool_id": pool["id"], "type": protocol, "delay": 5, "timeout": 3,
                    "max_retries": 1, "max_retries_down": 3}})))
                    .await?;
                lb = os.lb_active(c, &id).await?;
            }
        }
        let port = lb["vip_port_id"].as_str().unwrap_or_default().to_string();
        let ext = os
            .external_network(
                c,
                lb_conf.get("floating-network-id").map(String::as_str),
                None,
            )
            .await?;
        let ip = match ext {
            Some(ext) => {
                let f = os
                    .find_or_create(c, "network", "/v2.0/floatingips", &format!("port_id={port}"), "floatingip",
                        json!({"floating_network_id": ext, "port_id": port,
                               "description": format!("Floating IP for Kubernetes external service {ns}/{svc} from cluster {cluster}")}))
                    .await?;
                f["floating_ip_address"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }
            None => lb["vip_address"].as_str().unwrap_or_default().to_string(),
        };
        api.patch(&svc, &PatchParams::default(),
                  &Patch::Merge(json!({"metadata": {"annotations": {"loadbalancer.openstack.org/load-balancer-id": id}}})))
            .await
            .map_err(|e| err(format!("Service {ns}/{svc}: {e}")))?;
        api.patch_status(
            &svc,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
        )
        .await
        .map_err(|e| err(format!("Service {ns}/{svc} status: {e}")))?;
        Ok(())
    }

    /// Cinder CSI (and the external-provisioner and the PV controller) for
    /// one unbound claim (see the module's citations).
    async fn csi(
        &self,
        c: &Creds,
        cluster: &str,
        extra_metadata: bool,
        client: &kube::Client,
        pvc: &PersistentVolumeClaim,
    ) -> Result<(), OsError> {
        let os = &self.0.os;
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let claim = pvc.metadata.name.clone().unwrap_or_default();
        let uid = pvc.metadata.uid.clone().unwrap_or_default();
        let pv = format!("pvc-{uid}");
        let request = pvc
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "1Gi".into());
        let gib = gib_of(&request);
        let vol = match os
            .find(
                c,
                "block-storage",
                &format!("/volumes/detail?name={}", enc(&pv)),
                "volumes",
            )
            .await?
        {
            Some(v) => v,
            None => {
                let mut metadata = json!({"cinder.csi.openstack.org/cluster": cluster});
                if extra_metadata {
                    metadata["csi.storage.k8s.io/pvc/name"] = json!(claim);
                    metadata["csi.storage.k8s.io/pvc/namespace"] = json!(ns);
                    metadata["csi.storage.k8s.io/pv/name"] = json!(pv);
                }
                let v = os
                    .req(
                        c,
                        "block-storage",
                        "POST",
                        "/volumes",
                        Some(json!({"volume": {"name": pv, "size": gib, "metadata": metadata}})),
                    )
                    .await?;
                v["volume"].clone()
            }
        };
        let id = vol["id"].as_str().unwrap_or_default().to_string();
        if vol["status"] != "available" {
            // Looked at again on the next pass.
            let v = os
                .req(c, "block-storage", "GET", &format!("/volumes/{id}"), None)
                .await?;
            if v.pointer("/volume/status") != Some(&json!("available")) {
                return Ok(());
            }
        }
        let spec = pvc.spec.clone().unwrap_or_default();
        let pv_obj = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv, "annotations": {"pv.kubernetes.io/provisioned-by": "cinder.csi.openstack.org"}},
            "spec": {"capacity": {"storage": format!("{gib}Gi")},
                     "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                     "persistentVolumeReclaimPolicy": "Delete",
                     "storageClassName": spec.storage_class_name.clone().unwrap_or_else(|| "csi-cinder-sc-delete".into()),
                     "claimRef": {"namespace": ns, "name": claim, "uid": uid},
                     "csi": {"driver": "cinder.csi.openstack.org", "volumeHandle": id, "fsType": "ext4"}},
        });
        let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
        let pv_obj = serde_json::from_value(pv_obj).map_err(|e| err(e.to_string()))?;
        match pvs.create(&PostParams::default(), &pv_obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(err(format!("PersistentVolume {pv}: {e}"))),
        }
        let api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
        api.patch(
            &claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"volumeName": pv}})),
        )
        .await
        .map_err(|e| err(format!("PersistentVolumeClaim {ns}/{claim}: {e}")))?;
        api.patch_status(
            &claim,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Bound", "capacity": {"storage": format!("{gib}Gi")}}}),
            ),
        )
        .await
        .map_err(|e| err(format!("PersistentVolumeClaim {ns}/{claim} status: {e}")))?;
        Ok(())
    }
}

fn ignore_404(r: Result<Value, OsError>) -> Result<Value, OsError> {
    match r {
        Err(e) if e.status == 404 => Ok(Value::Null),
        r => r,
    }
}

/// A storage request in whole GiB, rounded up (Cinder sizes are GiB).
pub fn gib_of(q: &str) -> u64 {
    let q = q.trim();
    let split = q.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let n: u64 = n.parse().unwrap_or(1);
    let bytes: u128 = match unit {
        "Ki" => n as u128 * 1024,
        "Mi" => n as u128 * 1024 * 1024,
        "Gi" => n as u128 * (1 << 30),
        "Ti" => n as u128 * (1 << 40),
        "k" => n as u128 * 1000,
        "M" => n as u128 * 1_000_000,
        "G" => n as u128 * 1_000_000_000,
        "T" => n as u128 * 1_000_000_000_000,
        _ => n as u128,
    };
    (bytes.div_ceil(1 << 30)).max(1) as u64
}

#[cfg(test)]
mod tests {

    use super::*;

    fn occm(mount: &str, ca_volume: Option<&str>) -> Container {
        let mut volumes = vec![json!({"name": "cfg", "secret": {"secretName": "ours"}})];
        let mut mounts = vec![json!({"name": "cfg", "mountPath": mount})];
        if let Some(s) = ca_volume {
            volumes.push(json!({"name": "ca", "secret": {"secretName": s}}));
            mounts.push(json!({"name": "ca", "mountPath": "/etc/ca"}));
        }
        let o = json!({"kind": "DaemonSet", "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"volumes": volumes, "containers": [{
                "name": "occm", "image": "x/openstack-cloud-controller-manager:v1",
                "args": ["--cloud-config=$(CLOUD_CONFIG)"],
                "env": [{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"}],
                "volumeMounts": mounts}]}}}});
        containers_running(&[o], "openstack-cloud-controller-manager", &["DaemonSet"])
            .pop()
            .unwrap_or_default()
    }

    #[test]
    fn a_pod_loads_its_cloud_conf_and_ca_only_through_its_mounts() {
        let conf = "[Global]\nauth-url=http://k\nca-file=/etc/config/ca.crt\n";
        let mut data = BTreeMap::new();
        data.insert("cloud.conf".to_string(), conf.as_bytes().to_vec());
        let mut secrets = Mounted::new();
        secrets.insert("ours".into(), Some(data.clone()));
        let c = occm("/etc/config", None);
        assert_eq!(c.secret_volumes(), vec!["ours".to_string()]);
        let e = loadable_conf(&c, &secrets).unwrap_err();
        assert!(
            e.contains("ca-file=/etc/config/ca.crt") && e.contains("no key ca.crt"),
            "{e}"
        );
        data.insert("ca.crt".to_string(), b"PEM".to_vec());
        secrets.insert("ours".into(), Some(data.clone()));
        assert_eq!(loadable_conf(&c, &secrets).unwrap(), conf);
        // The same Secret mounted elsewhere: the conf is not at the path the flag names.
        let e = loadable_conf(&occm("/etc/kubernetes", None), &secrets).unwrap_err();
        assert!(e.contains("/etc/config/cloud.conf is on no volume"), "{e}");
        // A Secret that does not exist.
        secrets.insert("ours".into(), None);
        assert!(
            loadable_conf(&c, &secrets)
                .unwrap_err()
                .contains("does not exist")
        );
        // A CA on a second mounted Secret is read from there.
        let conf2 = "[Global]\nauth-url=http://k\nca-file=/etc/ca/ca.pem\n";
        let mut d2 = BTreeMap::new();
        d2.insert("cloud.conf".to_string(), conf2.as_bytes().to_vec());
        secrets.insert("ours".into(), Some(d2));
        let c = occm("/etc/config", Some("ca"));
        assert!(
            loadable_conf(&c, &secrets)
                .unwrap_err()
                .contains("ca/ca.pem")
        );
        let mut ca = BTreeMap::new();
        ca.insert("ca.pem".to_string(), b"PEM".to_vec());
        secrets.insert("ca".into(), Some(ca));
        assert_eq!(loadable_conf(&c, &secrets).unwrap(), conf2);
    }

    #[test]
    fn credentials_from_what_the_conductor_renders() {
        let y = "clouds:\n  openstack:\n    auth:\n      auth_url: http://k/v3\n      application_credential_id: a1\n      application_credential_secret: s3cret\n    auth_type: v3applicationcredential\n    interface: public\n    region_name: RegionOne\n";
        let c = creds_from_clouds_yaml(y, "openstack").unwrap();
        assert_eq!(
            (c.auth_url.as_str(), c.id.as_str(), c.region.as_deref()),
            ("http://k/v3", "a1", Some("RegionOne"))
        );
        assert!(!format!("{c:?}").contains("s3cret"));
        let conf = "[Global]\nauth-url=http://k/v3\napplication-credential-id=a1\napplication-credential-secret=s3cret\n\n[LoadBalancer]\nlb-provider=test\n";
        let c = creds_from_cloud_conf(conf).unwrap();
        assert_eq!(c.id, "a1");
        assert_eq!(
            parse_cloud_conf(conf)["LoadBalancer"]["lb-provider"],
            "test"
        );
        assert!(creds_from_cloud_conf("[Global]\nauth-url=x\n").is_err());
    }

    #[test]
    fn query_values_round_trip() {
        for v in ["kube_service_a_b_c", "a b/c?d", "x%y"] {
            assert_eq!(dec(&enc(v)), v);
        }
    }

    #[test]
    fn sizes_round_up_to_gib() {
        assert_eq!(gib_of("1Gi"), 1);
        assert_eq!(gib_of("1500Mi"), 2);
        assert_eq!(gib_of("2G"), 2);
        assert_eq!(gib_of("10"), 1);
    }
}
