//! A thin typed client for what the clean-up needs of OpenStack (I/O).
//!
//! - Keystone: a project-scoped token for the cluster's application
//!   credential (`POST /v3/auth/tokens`, method `application_credential`)
//!   and the endpoints of its catalog;
//! - Neutron (`network`): floating IPs and security groups of the project;
//! - Octavia (`load-balancer`): load balancers, deleted with `cascade`;
//! - Cinder (`block-storage`, else `volumev3`): volumes and snapshots;
//! - Nova (`compute`): the server groups of `server_group_policies`, made
//!   before the machines and deleted with the cluster.
//!
//! A cloud without Octavia or Cinder in its catalog has none of their
//! resources to delete (Magnum's own `is_octavia_enabled` test). Lists
//! follow the APIs' `*_links` pages. Tokens and secrets are [`Secret`]s:
//! never logged, never in an error.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::secret::Secret;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::identity::{
    Attachment, Backup, FloatingIp, Inventory, Item, Kind, ListFailure, LoadBalancer,
    SecurityGroup, ServerGroup, Service, Share, ShareSnapshot, Snapshot, Volume,
};

const TIMEOUT: Duration = Duration::from_secs(30);
/// Pages followed per list: a listing with more is an error (never a
/// partial answer the clean-up would read as "nothing else left").
const MAX_PAGES: usize = 100;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The service answered with an error status (its own message).
    #[error("{what}: HTTP {status}: {message}")]
    Status {
        what: String,
        status: u16,
        message: String,
    },
    #[error("{what}: {reason}")]
    Transport { what: String, reason: String },
    #[error("{0}")]
    Config(String),
}

impl ApiError {
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
    /// From Keystone's token request: the credential no longer works
    /// (Keystone 30 answers 404 `Could not find Application Credential`
    /// for a deleted one, 401 when its user is gone or the secret is
    /// wrong).
    pub fn is_auth(&self) -> bool {
        matches!(self.status(), Some(401) | Some(403) | Some(404))
    }
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// One HTTP client for the JSON APIs of OpenStack (Keystone and the
/// services): the system's CA roots plus a private bundle, HTTP/1.1,
/// a timeout on the answer and on its body. Cloned, never rebuilt.
#[derive(Clone)]
pub struct JsonHttp(Client<Https, Full<Bytes>>);

/// TLS roots: the system's and the cloud's private CA bundle, if any.
pub fn tls(ca_file: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for c in native.certs {
        let _ = roots.add(c);
    }
    if let Some(path) = ca_file {
        use rustls_pki_types::pem::PemObject;
        let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("cafile {path}: {e}"))?;
        for c in certs {
            let c = c.map_err(|e| format!("cafile {path}: {e}"))?;
            roots.add(c).map_err(|e| format!("cafile {path}: {e}"))?;
        }
    }
    Ok(rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl JsonHttp {
    pub fn new(ca_file: Option<&str>) -> Result<JsonHttp, String> {
        Ok(JsonHttp::with_tls(tls(ca_file)?))
    }

    fn with_tls(tls: rustls::ClientConfig) -> JsonHttp {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        JsonHttp(Client::builder(TokioExecutor::new()).build(connector))
    }

    /// One request; a JSON body in and out (a body that is not JSON reads
    /// as null). An error status is [`ApiError::Status`] with the service's
    /// own message ([`error_message`]).
    pub async fn send(
        &self,
        what: &str,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<(StatusCode, http::HeaderMap, Value), ApiError> {
        self.send_with(what, method, url, token, body, &[]).await
    }

    /// [`JsonHttp::send`] with extra request headers (a microversion).
    pub async fn send_with(
        &self,
        what: &str,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, http::HeaderMap, Value), ApiError> {
        let transport = |reason: String| ApiError::Transport {
            what: what.to_string(),
            reason,
        };
        let mut req = Request::builder()
            .method(method)
            .uri(url)
            .header("Accept", "application/json")
            .header("User-Agent", "magnum-conductor-rs");
        if let Some(t) = token {
            req = req.header("X-Auth-Token", t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let bytes = match body {
            Some(b) => {
                req = req.header("Content-Type", "application/json");
                Bytes::from(b.to_string())
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(bytes))
            .map_err(|e| transport(e.to_string()))?;
        let resp = tokio::time::timeout(TIMEOUT, self.0.request(req))
            .await
            .map_err(|_| transport(format!("no answer from {url} within {TIMEOUT:?}")))?
            .map_err(|e| transport(format!("{url}: {e}")))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = tokio::time::timeout(TIMEOUT, resp.into_body().collect())
            .await
            .map_err(|_| transport(format!("{url}: the body timed out")))?
            .map_err(|e| transport(format!("{url}: {e}")))?
            .to_bytes();
        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = error_message(&json).unwrap_or_else(|| {
                let text = String::from_utf8_lossy(&body);
                let t = text.trim();
                if t.is_empty() {
                    status.canonical_reason().unwrap_or("").to_string()
                } else {
                    t.chars().take(300).collect()
                }
            });
            return Err(ApiError::Status {
                what: what.to_string(),
                status: status.as_u16(),
                message,
            });
        }
        Ok((status, headers, json))
    }
}

/// The clean-up's client (one per process, cloned).
#[derive(Clone)]
pub struct CloudApi {
    http: JsonHttp,
}

/// A token and the endpoints of its catalog.
pub struct Session {
    token: Secret,
    pub project_id: String,
    pub network: String,
    pub load_balancer: Option<String>,
    pub block_storage: Option<String>,
    pub compute: Option<String>,
    /// Manila (`sharev2`): the share types of `manila_csi_enabled`.
    pub share: Option<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("project_id", &self.project_id)
            .field("network", &self.network)
            .field("load_balancer", &self.load_balancer)
            .field("block_storage", &self.block_storage)
            .field("compute", &self.compute)
            .field("share", &self.share)
            .finish_non_exhaustive()
    }
}

/// How to reach the cloud as a cluster: its application credential.
#[derive(Clone)]
pub struct Credential {
    pub auth_url: String,
    pub id: String,
    pub secret: Secret,
    /// Catalog interface (`public`, `internal`).
    pub interface: String,
    pub region: Option<String>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("auth_url", &self.auth_url)
            .field("id", &self.id)
            .field("interface", &self.interface)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// The message of an OpenStack error body, whichever service's shape.
pub fn error_message(body: &Value) -> Option<String> {
    for p in [
        "/error/message",
        "/NeutronError/message",
        "/faultstring",
        "/description",
        "/message",
    ] {
        if let Some(s) = body.pointer(p).and_then(Value::as_str) {
            return Some(s.to_string());
        }
    }
    // Cinder and Nova: {"badRequest": {"message": ...}}.
    body.as_object()?
        .values()
        .find_map(|v| v.get("message").and_then(Value::as_str))
        .map(str::to_string)
}

/// The URL of `types`' first service in a token's catalog, for
/// `interface` (and `region` when set).
pub fn endpoint(
    catalog: &Value,
    types: &[&str],
    interface: &str,
    region: Option<&str>,
) -> Option<String> {
    let services = catalog.as_array()?;
    types.iter().find_map(|t| {
        services
            .iter()
            .filter(|s| s["type"] == *t)
            .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
            .find(|e| {
                e["interface"] == interface
                    && region.is_none_or(|r| e["region_id"] == r || e["region"] == r)
            })
            .and_then(|e| e["url"].as_str())
            .map(|u| u.trim_end_matches('/').to_string())
    })
}

/// `<base>/<version>/<path>` unless the base already ends in the version.
fn versioned(base: &str, version: &str, path: &str) -> String {
    let b = base.trim_end_matches('/');
    let b = b.strip_suffix(&format!("/{version}")).unwrap_or(b);
    format!("{b}/{version}/{path}")
}

fn s(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

fn metadata(v: &Value) -> BTreeMap<String, String> {
    v["metadata"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Manila's microversion for every call: 2.60 lets the catalog's URL
/// leave the project out of the path (Manila's `api-ref`, "API versions").
const MANILA_VERSION: (&str, &str) = ("X-OpenStack-Manila-API-Version", "2.60");
/// Cinder's backups with their metadata (3.43), and the attachments API
/// (3.27, which 3.43 includes).
const CINDER_VERSION: (&str, &str) = ("OpenStack-API-Version", "volume 3.43");

/// A Manila share as `shares/detail` shows it.
pub fn parse_share(v: &Value) -> Share {
    Share {
        id: s(v, "id"),
        name: s(v, "name"),
        status: s(v, "status"),
        metadata: metadata(v),
    }
}

/// A Manila share snapshot as `snapshots/detail` shows it.
pub fn parse_share_snapshot(v: &Value) -> ShareSnapshot {
    ShareSnapshot {
        id: s(v, "id"),
        name: s(v, "name"),
        status: s(v, "status"),
        share_id: s(v, "share_id"),
    }
}

/// The names in a Manila share type list, sorted, without duplicates.
pub fn parse_share_types(v: &Value) -> Option<Vec<String>> {
    let mut names: Vec<String> = v["share_types"]
        .as_array()?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    Some(names)
}

/// A server group as any microversion shows it (`policy` from 2.64,
/// `policies` before).
pub fn parse_server_group(v: &Value) -> ServerGroup {
    ServerGroup {
        id: s(v, "id"),
        name: s(v, "name"),
        policy: v["policy"]
            .as_str()
            .or_else(|| v["policies"][0].as_str())
            .unwrap_or_default()
            .to_string(),
    }
}

pub fn parse_load_balancer(v: &Value) -> LoadBalancer {
    LoadBalancer {
        id: s(v, "id"),
        name: s(v, "name"),
        description: s(v, "description"),
        provisioning_status: s(v, "provisioning_status"),
        vip_network_id: s(v, "vip_network_id"),
        vip_port_id: s(v, "vip_port_id"),
    }
}
pub fn parse_floating_ip(v: &Value) -> FloatingIp {
    FloatingIp {
        id: s(v, "id"),
        description: s(v, "description"),
        address: s(v, "floating_ip_address"),
        port_id: v["port_id"].as_str().map(str::to_string),
    }
}
pub fn parse_security_group(v: &Value) -> SecurityGroup {
    SecurityGroup {
        id: s(v, "id"),
        name: s(v, "name"),
        description: s(v, "description"),
    }
}
pub fn parse_volume(v: &Value) -> Volume {
    Volume {
        id: s(v, "id"),
        name: s(v, "name"),
        status: s(v, "status"),
        metadata: metadata(v),
        attachments: v["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| Attachment {
                id: s(a, "attachment_id"),
                server_id: s(a, "server_id"),
            })
            .filter(|a| !a.id.is_empty())
            .collect(),
    }
}
/// A Cinder backup as `backups/detail` shows it from microversion 3.43.
pub fn parse_backup(v: &Value) -> Backup {
    Backup {
        id: s(v, "id"),
        name: s(v, "name"),
        status: s(v, "status"),
        volume_id: s(v, "volume_id"),
        metadata: metadata(v),
    }
}
pub fn parse_snapshot(v: &Value) -> Snapshot {
    Snapshot {
        id: s(v, "id"),
        name: s(v, "name"),
        status: s(v, "status"),
        volume_id: s(v, "volume_id"),
        metadata: metadata(v),
    }
}

impl CloudApi {
    /// `ca_file`: the cloud's private CA bundle (`[capi] ca_file`), if any;
    /// one that cannot be read is reported and the system's CAs are used
    /// (`check` reports it too).
    pub fn new(ca_file: Option<&str>) -> CloudApi {
        let http = JsonHttp::new(ca_file).unwrap_or_else(|e| {
            tracing::error!(error = %e, "[capi] ca_file unusable for the cloud clean-up; using the system's CAs");
            JsonHttp::new(None).unwrap_or_else(|_| {
                JsonHttp::with_tls(
                    rustls::ClientConfig::builder()
                        .with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth(),
                )
            })
        });
        CloudApi { http }
    }

    async fn send(
        &self,
        what: &str,
        method: Method,
        url: &str,
        token: Option<&Secret>,
        body: Option<&Value>,
    ) -> Result<(StatusCode, http::HeaderMap, Value), ApiError> {
        self.http
            .send(what, method, url, token.map(Secret::expose), body)
            .await
    }

    /// A token for the cluster's application credential, and its catalog.
    pub async fn session(&self, c: &Credential) -> Result<Session, ApiError> {
        let url = versioned(&c.auth_url, "v3", "auth/tokens");
        let body = json!({"auth": {"identity": {
            "methods": ["application_credential"],
            "application_credential": {"id": c.id, "secret": c.secret.expose()}}}});
        let what = format!("Keystone token for application credential {}", c.id);
        let (_, headers, info) = self
            .send(&what, Method::POST, &url, None, Some(&body))
            .await?;
        let token = headers
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| ApiError::Transport {
                what: what.clone(),
                reason: "no X-Subject-Token header".into(),
            })?;
        let catalog = &info["token"]["catalog"];
        let region = c.region.as_deref();
        let network = endpoint(catalog, &["network"], &c.interface, region).ok_or_else(|| {
            ApiError::Config(format!(
                "no {} network endpoint in the catalog of application credential {}",
                c.interface, c.id
            ))
        })?;
        Ok(Session {
            token: Secret::new(token),
            project_id: info["token"]["project"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            network,
            load_balancer: endpoint(catalog, &["load-balancer"], &c.interface, region),
            block_storage: endpoint(
                catalog,
                &["block-storage", "volumev3"],
                &c.interface,
                region,
            ),
            compute: endpoint(catalog, &["compute"], &c.interface, region),
            share: endpoint(
                catalog,
                &["sharev2", "shared-file-system"],
                &c.interface,
                region,
            ),
        })
    }

    /// Every item of a list, its pages followed.
    async fn list(
        &self,
        s: &Session,
        what: &str,
        url: String,
        key: &str,
    ) -> Result<Vec<Value>, ApiError> {
        self.list_with(s, what, url, key, &[]).await
    }

    /// [`Self::list`] with request headers (a microversion).
    async fn list_with(
        &self,
        s: &Session,
        what: &str,
        url: String,
        key: &str,
        headers: &[(&str, &str)],
    ) -> Result<Vec<Value>, ApiError> {
        let mut out = Vec::new();
        let mut next = Some(url);
        let mut pages = 0;
        while let Some(u) = next.take() {
            pages += 1;
            let (_, _, body) = self
                .http
                .send_with(what, Method::GET, &u, Some(s.token.expose()), None, headers)
                .await?;
            // An answer without the list (a proxy's page, another API) is
            // an error: read as empty, it would let the clean-up finish
            // with everything left behind.
            let Some(items) = body[key].as_array() else {
                return Err(ApiError::Transport {
                    what: what.to_string(),
                    reason: format!("{u}: the answer has no `{key}` list"),
                });
            };
            out.extend(items.iter().cloned());
            next = body[format!("{key}_links")]
                .as_array()
                .into_iter()
                .flatten()
                .find(|l| l["rel"] == "next")
                .and_then(|l| l["href"].as_str())
                .map(str::to_string);
            if next.is_some() && pages >= MAX_PAGES {
                return Err(ApiError::Transport {
                    what: what.to_string(),
                    reason: format!(
                        "more than {MAX_PAGES} pages ({} items so far): not listed to the end",
                        out.len()
                    ),
                });
            }
        }
        Ok(out)
    }

    /// What the project has of the kinds a workload cluster makes. Each
    /// service's listing stands alone: one that fails is named in
    /// [`Inventory::failed`] and the others are still listed (whether it
    /// holds the clean-up up is the plan's to say:
    /// [`super::identity::blocking_failures`]). The servers of the
    /// attachments of the volumes `ours` picks are looked up in Nova
    /// ([`Inventory::gone_servers`]).
    pub async fn inventory(&self, s: &Session, ours: impl Fn(&Volume) -> bool) -> Inventory {
        let p = &s.project_id;
        let mut failures = Vec::new();
        let mut failed = |service: Service, e: ApiError| {
            failures.push(ListFailure {
                service,
                error: e.to_string(),
            })
        };
        let network = async {
            let fips = self
                .list(
                    s,
                    "Neutron floating IP list",
                    versioned(&s.network, "v2.0", &format!("floatingips?project_id={p}")),
                    "floatingips",
                )
                .await?;
            let sgs = self
                .list(
                    s,
                    "Neutron security group list",
                    versioned(
                        &s.network,
                        "v2.0",
                        &format!("security-groups?project_id={p}"),
                    ),
                    "security_groups",
                )
                .await?;
            Ok::<_, ApiError>((fips, sgs))
        };
        let mut floating_ips = Vec::new();
        let mut security_groups = Vec::new();
        match network.await {
            Ok((fips, sgs)) => {
                floating_ips = fips.iter().map(parse_floating_ip).collect();
                security_groups = sgs.iter().map(parse_security_group).collect();
            }
            Err(e) => failed(Service::Network, e),
        }
        let mut load_balancers = Vec::new();
        if let Some(lb) = &s.load_balancer {
            match self
                .list(
                    s,
                    "Octavia load balancer list",
                    versioned(lb, "v2", &format!("lbaas/loadbalancers?project_id={p}")),
                    "loadbalancers",
                )
                .await
            {
                Ok(l) => load_balancers = l.iter().map(parse_load_balancer).collect(),
                Err(e) => failed(Service::LoadBalancer, e),
            }
        }
        let (mut volumes, mut snapshots, mut backups) = (Vec::new(), Vec::new(), Vec::new());
        if let Some(bs) = &s.block_storage {
            let base = bs.trim_end_matches('/');
            let listed = async {
                let v = self
                    .list_with(
                        s,
                        "Cinder volume list",
                        format!("{base}/volumes/detail"),
                        "volumes",
                        &[],
                    )
                    .await?;
                let sn = self
                    .list_with(
                        s,
                        "Cinder snapshot list",
                        format!("{base}/snapshots/detail"),
                        "snapshots",
                        &[],
                    )
                    .await?;
                let b = self
                    .list_with(
                        s,
                        "Cinder backup list",
                        format!("{base}/backups/detail"),
                        "backups",
                        &[CINDER_VERSION],
                    )
                    .await?;
                Ok::<_, ApiError>((v, sn, b))
            };
            match listed.await {
                Ok((v, sn, b)) => {
                    volumes = v.iter().map(parse_volume).collect();
                    snapshots = sn.iter().map(parse_snapshot).collect();
                    backups = b.iter().map(parse_backup).collect();
                }
                Err(e) => failed(Service::BlockStorage, e),
            }
        }
        let mut server_groups = Vec::new();
        let mut gone_servers = std::collections::BTreeSet::new();
        if s.compute.is_some() {
            match self.server_groups(s).await {
                Ok(g) => server_groups = g,
                Err(e) => failed(Service::Compute, e),
            }
            let attached: std::collections::BTreeSet<&str> = volumes
                .iter()
                .filter(|v| ours(v))
                .flat_map(|v| &v.attachments)
                .map(|a| a.server_id.as_str())
                .filter(|id| !id.is_empty())
                .collect();
            for server in attached {
                match self.server_exists(s, server).await {
                    Ok(false) => {
                        gone_servers.insert(server.to_string());
                    }
                    Ok(true) => {}
                    Err(e) => failed(Service::Compute, e),
                }
            }
        }
        let (mut shares, mut share_snapshots) = (Vec::new(), Vec::new());
        if let Some(share) = &s.share {
            let base = share.trim_end_matches('/');
            let listed = async {
                let sh = self
                    .list_with(
                        s,
                        "Manila share list",
                        format!("{base}/shares/detail"),
                        "shares",
                        &[MANILA_VERSION],
                    )
                    .await?;
                let sn = self
                    .list_with(
                        s,
                        "Manila share snapshot list",
                        format!("{base}/snapshots/detail"),
                        "snapshots",
                        &[MANILA_VERSION],
                    )
                    .await?;
                Ok::<_, ApiError>((sh, sn))
            };
            match listed.await {
                Ok((sh, sn)) => {
                    shares = sh.iter().map(parse_share).collect();
                    share_snapshots = sn.iter().map(parse_share_snapshot).collect();
                }
                Err(e) => failed(Service::SharedFileSystem, e),
            }
        }
        Inventory {
            load_balancers,
            floating_ips,
            security_groups,
            volumes,
            snapshots,
            server_groups,
            shares,
            share_snapshots,
            backups,
            gone_servers,
            failed: failures,
        }
    }

    /// Whether Nova has the server `id` (404: it does not; any other
    /// error is an error, never "gone").
    pub async fn server_exists(&self, s: &Session, id: &str) -> Result<bool, ApiError> {
        let base = s
            .compute
            .as_deref()
            .ok_or_else(|| ApiError::Config("no compute endpoint in the catalog".into()))?
            .trim_end_matches('/');
        match self
            .send(
                "Nova server show",
                Method::GET,
                &format!("{base}/servers/{id}"),
                Some(&s.token),
                None,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The project's Nova server groups (the compute API lists a project's
    /// own, up to `[api] max_limit`: more is not a cluster's).
    pub async fn server_groups(&self, s: &Session) -> Result<Vec<ServerGroup>, ApiError> {
        let base = s
            .compute
            .as_deref()
            .ok_or_else(|| ApiError::Config("no compute endpoint in the catalog".into()))?
            .trim_end_matches('/');
        Ok(self
            .list(
                s,
                "Nova server group list",
                format!("{base}/os-server-groups"),
                "server_groups",
            )
            .await?
            .iter()
            .map(parse_server_group)
            .collect())
    }

    /// The names of the Manila share types the project sees (public ones
    /// and those shared with it). Microversion 2.60: the catalog's URL
    /// may leave the project out of the path (`/v2`), which Manila takes
    /// from 2.60 (its `api-ref`, "API versions").
    pub async fn share_types(&self, s: &Session) -> Result<Vec<String>, ApiError> {
        let base = s
            .share
            .as_deref()
            .ok_or_else(|| {
                ApiError::Config(
                    "manila_csi_share_network_id needs Manila (sharev2) in the catalog, and the cloud has none"
                        .into(),
                )
            })?
            .trim_end_matches('/')
            .to_string();
        let what = "Manila share type list";
        let (_, _, body) = self
            .http
            .send_with(
                what,
                Method::GET,
                &format!("{base}/types"),
                Some(s.token.expose()),
                None,
                &[MANILA_VERSION],
            )
            .await?;
        parse_share_types(&body).ok_or_else(|| ApiError::Transport {
            what: what.to_string(),
            reason: "the answer has no `share_types` list".into(),
        })
    }

    /// The server group `name`: the one there (its id), else a new one of
    /// `policy`. Made twice by a race (two conductors, a retry after a lost
    /// answer), the extras are deleted: CAPO wants exactly one of the name
    /// (`pkg/cloud/services/compute/servergroup.go`, `getServerGroupByName`).
    pub async fn ensure_server_group(
        &self,
        s: &Session,
        name: &str,
        policy: &str,
    ) -> Result<ServerGroup, ApiError> {
        let base = s
            .compute
            .as_deref()
            .ok_or_else(|| {
                ApiError::Config(
                    "server_group_policies needs Nova (compute) in the catalog, and the cloud has none"
                        .into(),
                )
            })?
            .trim_end_matches('/')
            .to_string();
        let mut have: Vec<ServerGroup> = self
            .server_groups(s)
            .await?
            .into_iter()
            .filter(|g| g.name == name)
            .collect();
        if have.is_empty() {
            // The soft policies came with compute microversion 2.15
            // (`policies` stays a list of one until 2.64).
            let body = json!({"server_group": {"name": name, "policies": [policy]}});
            let (_, _, made) = self
                .http
                .send_with(
                    "Nova server group create",
                    Method::POST,
                    &format!("{base}/os-server-groups"),
                    Some(s.token.expose()),
                    Some(&body),
                    &[("OpenStack-API-Version", "compute 2.15")],
                )
                .await?;
            return Ok(parse_server_group(&made["server_group"]));
        }
        have.sort_by(|a, b| a.id.cmp(&b.id));
        for extra in have.split_off(1) {
            let item = Item {
                kind: Kind::ServerGroup,
                id: extra.id,
                label: extra.name,
                status: String::new(),
            };
            self.delete(s, &item).await?;
        }
        Ok(have.remove(0))
    }

    /// Ask for `item`'s deletion. Already gone is success.
    pub async fn delete(&self, s: &Session, item: &Item) -> Result<(), ApiError> {
        self.delete_with(s, item, None).await
    }

    /// [`Self::delete`] with the conductor's service token beside the
    /// cluster's (`X-Service-Token`): Cinder deletes an attachment that
    /// names a server only for a service, or when it can ask Nova with the
    /// caller's token, which an application credential's token cannot
    /// (Keystone refuses to make a token from it: "Using a delegated token
    /// to create another token is not allowed"; cinder `volume/api.py`,
    /// `attachment_deletion_allowed`, bug #2004555). The caller has asked
    /// Nova itself: the server is gone.
    pub async fn delete_as_service(
        &self,
        s: &Session,
        item: &Item,
        service: &Secret,
    ) -> Result<(), ApiError> {
        self.delete_with(s, item, Some(service)).await
    }

    async fn delete_with(
        &self,
        s: &Session,
        item: &Item,
        service: Option<&Secret>,
    ) -> Result<(), ApiError> {
        let missing = |svc: &str| ApiError::Config(format!("{svc} is not in the catalog any more"));
        let (what, url) = match item.kind {
            Kind::FloatingIp => (
                "Neutron floating IP delete",
                versioned(&s.network, "v2.0", &format!("floatingips/{}", item.id)),
            ),
            Kind::SecurityGroup => (
                "Neutron security group delete",
                versioned(&s.network, "v2.0", &format!("security-groups/{}", item.id)),
            ),
            Kind::LoadBalancer => (
                "Octavia load balancer delete",
                versioned(
                    s.load_balancer
                        .as_deref()
                        .ok_or_else(|| missing("Octavia"))?,
                    "v2",
                    &format!("lbaas/loadbalancers/{}?cascade=true", item.id),
                ),
            ),
            Kind::Snapshot => (
                "Cinder snapshot delete",
                format!(
                    "{}/snapshots/{}",
                    s.block_storage
                        .as_deref()
                        .ok_or_else(|| missing("Cinder"))?,
                    item.id
                ),
            ),
            Kind::ServerGroup => (
                "Nova server group delete",
                format!(
                    "{}/os-server-groups/{}",
                    s.compute
                        .as_deref()
                        .ok_or_else(|| missing("Nova"))?
                        .trim_end_matches('/'),
                    item.id
                ),
            ),
            Kind::Share => (
                "Manila share delete",
                format!(
                    "{}/shares/{}",
                    s.share
                        .as_deref()
                        .ok_or_else(|| missing("Manila"))?
                        .trim_end_matches('/'),
                    item.id
                ),
            ),
            Kind::ShareSnapshot => (
                "Manila share snapshot delete",
                format!(
                    "{}/snapshots/{}",
                    s.share
                        .as_deref()
                        .ok_or_else(|| missing("Manila"))?
                        .trim_end_matches('/'),
                    item.id
                ),
            ),
            Kind::Backup => (
                "Cinder backup delete",
                format!(
                    "{}/backups/{}",
                    s.block_storage
                        .as_deref()
                        .ok_or_else(|| missing("Cinder"))?,
                    item.id
                ),
            ),
            Kind::Attachment => (
                "Cinder attachment delete",
                format!(
                    "{}/attachments/{}",
                    s.block_storage
                        .as_deref()
                        .ok_or_else(|| missing("Cinder"))?,
                    item.id
                ),
            ),
            Kind::Volume => (
                "Cinder volume delete",
                format!(
                    "{}/volumes/{}",
                    s.block_storage
                        .as_deref()
                        .ok_or_else(|| missing("Cinder"))?,
                    item.id
                ),
            ),
        };
        let mut headers: Vec<(&str, &str)> = match item.kind {
            Kind::Share | Kind::ShareSnapshot => vec![MANILA_VERSION],
            Kind::Attachment | Kind::Backup => vec![CINDER_VERSION],
            _ => vec![],
        };
        if let Some(t) = service {
            headers.push(("X-Service-Token", t.expose()));
        }
        match self
            .http
            .send_with(
                what,
                Method::DELETE,
                &url,
                Some(s.token.expose()),
                None,
                &headers,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_snapshots_as_manila_lists_them() {
        // Manila's `snapshots/detail` (api-ref "Share snapshots"), as Manila
        // CSI's look (`pkg/csi/manila/snapshot.go`).
        let v = json!({"id": "s1", "name": "snapshot-4f1c", "status": "available", "share_id": "sh1",
                       "description": "snapshotted-by=manila.csi.openstack.org", "size": 1});
        assert_eq!(
            parse_share_snapshot(&v),
            ShareSnapshot {
                id: "s1".into(),
                name: "snapshot-4f1c".into(),
                status: "available".into(),
                share_id: "sh1".into()
            }
        );
    }

    #[test]
    fn volumes_attachments_and_backups_as_cinder_lists_them() {
        // Cinder's `volumes/detail` (api-ref "Volumes"): an attachment
        // names its server and its id in the attachments API.
        let v = json!({"id": "v1", "name": "pvc-1", "status": "in-use", "metadata": {},
            "attachments": [{"server_id": "s1", "attachment_id": "a1", "id": "v1", "volume_id": "v1",
                             "host_name": null, "device": "/dev/vdb"},
                            {"server_id": "s2", "id": "v1"}]});
        assert_eq!(
            parse_volume(&v).attachments,
            vec![Attachment {
                id: "a1".into(),
                server_id: "s1".into()
            }]
        );
        // `backups/detail` at 3.43 (api-ref "Backups").
        let b = json!({"id": "b1", "name": "snapshot-1", "status": "available", "volume_id": "v1",
                       "metadata": {"cinder.csi.openstack.org/cluster": "u"}, "is_incremental": false});
        let b = parse_backup(&b);
        assert_eq!((b.id.as_str(), b.volume_id.as_str()), ("b1", "v1"));
        assert_eq!(b.metadata["cinder.csi.openstack.org/cluster"], "u");
    }

    #[test]
    fn share_type_names() {
        let body = json!({"share_types": [{"id": "1", "name": "default"}, {"id": "2", "name": "Fast SSD"},
                                          {"id": "3", "name": "default"}, {"id": "4"}]});
        assert_eq!(
            parse_share_types(&body),
            Some(vec!["Fast SSD".to_string(), "default".to_string()])
        );
        assert_eq!(parse_share_types(&json!({"volume_types": []})), None);
    }

    #[test]
    fn catalog_and_errors() {
        let catalog = json!([
            {"type": "network", "endpoints": [
                {"interface": "internal", "region_id": "R1", "url": "http://10.0.0.1:9696"},
                {"interface": "public", "region_id": "R2", "url": "https://net.r2/"},
                {"interface": "public", "region_id": "R1", "url": "https://net.r1/"}]},
            {"type": "volumev3", "endpoints": [
                {"interface": "public", "region_id": "R1", "url": "https://cinder/v3/p1"}]}]);
        assert_eq!(
            endpoint(&catalog, &["network"], "public", Some("R1")).as_deref(),
            Some("https://net.r1")
        );
        assert_eq!(
            endpoint(&catalog, &["network"], "public", None).as_deref(),
            Some("https://net.r2")
        );
        assert_eq!(
            endpoint(&catalog, &["block-storage", "volumev3"], "public", None).as_deref(),
            Some("https://cinder/v3/p1")
        );
        assert_eq!(endpoint(&catalog, &["load-balancer"], "public", None), None);
        assert_eq!(
            versioned("http://n:9696/v2.0/", "v2.0", "floatingips"),
            "http://n:9696/v2.0/floatingips"
        );
        assert_eq!(
            versioned("http://o/load-balancer", "v2", "lbaas/loadbalancers"),
            "http://o/load-balancer/v2/lbaas/loadbalancers"
        );
        for (body, want) in [
            (
                json!({"NeutronError": {"type": "NetworkInUse", "message": "in use"}}),
                "in use",
            ),
            (
                json!({"faultcode": "Client", "faultstring": "Invalid state PENDING_DELETE"}),
                "Invalid state PENDING_DELETE",
            ),
            (
                json!({"badRequest": {"message": "has snapshots", "code": 400}}),
                "has snapshots",
            ),
            (
                json!({"error": {"message": "unauthorized", "code": 401}}),
                "unauthorized",
            ),
        ] {
            assert_eq!(error_message(&body).as_deref(), Some(want));
        }
        for (v, want) in [
            (
                json!({"id": "g", "name": "n", "policies": ["anti-affinity"]}),
                "anti-affinity",
            ),
            (
                json!({"id": "g", "name": "n", "policy": "soft-affinity", "rules": {}}),
                "soft-affinity",
            ),
        ] {
            assert_eq!(parse_server_group(&v).policy, want);
        }
        let v = parse_volume(&json!({"id": "v", "status": "available",
            "metadata": {"cinder.csi.openstack.org/cluster": "u", "n": 1}}));
        assert_eq!(v.metadata.len(), 1);
    }
}
