//! A fault-injecting proxy in front of the real apiserver (I/O), as a load
//! balancer in front of a management cluster: clients speak TLS to it (with
//! their client certificates, checked against the apiserver's CA), it
//! forwards every request with the kubeconfig's credentials and streams the
//! answer back. It counts requests by client (the User-Agent's product) and
//! verb, and applies [`crate::faults`] rules: error answers, delays, hangs,
//! watches cut after N events; and [`Proxy::drop_watches`] ends every open
//! watch at once (as a load balancer or an apiserver going away does).
//! When the apiserver cannot be reached it answers 503, as an L7 load
//! balancer does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Frame;
use serde_json::{Value, json};

use crate::faults::{Action, Faults, HANG};
use crate::shared::lock;
use crate::tls::{self, Body, BoxError};

type Counts = Arc<Mutex<BTreeMap<(String, String), u64>>>;

/// The proxy, serving.
pub struct Proxy {
    pub addr: SocketAddr,
    pub faults: Arc<Faults>,
    counts: Counts,
    drops: Arc<tokio::sync::watch::Sender<u64>>,
    ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The kubeconfig's current context: (its cluster entry, the YAML).
fn current_cluster(kc: &serde_norway::Value) -> Option<(String, &serde_norway::Value)> {
    let ctx_name = kc.get("current-context")?.as_str()?;
    let ctx = kc
        .get("contexts")?
        .as_sequence()?
        .iter()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(ctx_name))?;
    let cluster_name = ctx.get("context")?.get("cluster")?.as_str()?.to_string();
    let cluster = kc
        .get("clusters")?
        .as_sequence()?
        .iter()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(cluster_name.as_str()))?;
    Some((cluster_name, cluster.get("cluster")?))
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// The CA bundle a kubeconfig's current cluster trusts (PEM).
fn cluster_ca(kc: &serde_norway::Value, dir: &Path) -> Option<Vec<u8>> {
    let (_, cluster) = current_cluster(kc)?;
    if let Some(data) = cluster
        .get("certificate-authority-data")
        .and_then(|v| v.as_str())
    {
        return decode_base64(data);
    }
    let file = cluster.get("certificate-authority")?.as_str()?;
    std::fs::read(dir.join(file)).ok()
}

fn status(code: u16, reason: &str, message: &str) -> hyper::Response<Body> {
    let mut r = tls::json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    );
    if code == 429 {
        r.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    r
}

fn fault_error(code: u16) -> hyper::Response<Body> {
    let reason = match code {
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        409 => "Conflict",
        _ => "InternalError",
    };
    status(code, reason, &format!("injected fault: {code}"))
}

struct Shared {
    upstream: kube::Client,
    faults: Arc<Faults>,
    counts: Counts,
    drops: Arc<tokio::sync::watch::Sender<u64>>,
}

const HOP_BY_HOP: [&str; 4] = ["connection", "transfer-encoding", "keep-alive", "upgrade"];

async fn handle(
    s: Arc<Shared>,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("");
    let is_watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let client = parts
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split('/').next())
        .unwrap_or("unknown")
        .to_string();
    let method = parts.method.as_str().to_string();
    let verb = if is_watch {
        "WATCH".to_string()
    } else {
        method.clone()
    };
    *lock(&s.counts).entry((client.clone(), verb)).or_default() += 1;
    let mut cut_after = None;
    match s.faults.take_for(&client, &method, &path, is_watch) {
        Some(Action::Error { code }) => return fault_error(code),
        Some(Action::Delay { ms }) => {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await
        }
        Some(Action::Hang) => {
            tokio::time::sleep(HANG).await;
            return fault_error(504);
        }
        Some(Action::DropWatch { after_events }) => cut_after = Some(after_events),
        None => {}
    }
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return status(400, "BadRequest", &format!("request body: {e}")),
    };
    let mut fwd = http::Request::builder().method(parts.method.clone()).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (k, v) in &parts.headers {
        let name = k.as_str();
        if name == "host" || name == "authorization" || HOP_BY_HOP.contains(&name) {
            continue;
        }
        fwd = fwd.header(k, v);
    }
    let fwd = match fwd.body(kube::client::Body::from(bytes.to_vec())) {
        Ok(r) => r,
        Err(e) => return status(400, "BadRequest", &e.to_string()),
    };
    let resp = match s.upstream.send(fwd).await {
        Ok(r) => r,
        Err(e) => {
            return status(
                503,
                "ServiceUnavailable",
                &format!("the apiserver proxy could not reach the apiserver: {e}"),
            );
        }
    };
    let (rparts, rbody) = resp.into_parts();
    let mut out = hyper::Response::builder().status(rparts.status);
    for (k, v) in &rparts.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    let data = rbody.into_data_stream();
    let body: Body = if is_watch {
        let rx = s.drops.subscribe();
        let stream = futures_util::stream::unfold(
            (data, rx, 0usize, false),
            move |(mut data, mut rx, mut lines, done)| async move {
                if done || cut_after.is_some_and(|n| lines >= n) {
                    return None;
                }
                tokio::select! {
                    _ = rx.changed() => None,
                    item = data.next() => match item {
                        None => None,
                        Some(Ok(mut b)) => {
                            let mut end = false;
                            if let Some(n) = cut_after {
                                let mut seen = lines;
                                if let Some(pos) = b.iter().enumerate().filter(|(_, c)| **c == b'\n')
                                    .map(|(i, _)| i).find(|_| { seen += 1; seen >= n }) {
                                    b = b.slice(..=pos);
                                    end = true;
                                }
                            }
                            lines += b.iter().filter(|c| **c == b'\n').count();
                            Some((Ok::<_, BoxError>(Frame::data(b)), (data, rx, lines, end)))
                        }
                        Some(Err(e)) => Some((Err(BoxError::from(e.to_string())), (data, rx, lines, true))),
                    }
                }
            },
        );
        BodyExt::boxed_unsync(http_body_util::StreamBody::new(stream))
    } else {
        let stream = data.map(|r| {
            r.map(Frame::data)
                .map_err(|e| BoxError::from(e.to_string()))
        });
        BodyExt::boxed_unsync(http_body_util::StreamBody::new(stream))
    };
    out.body(body)
        .unwrap_or_else(|e| status(502, "InternalError", &e.to_string()))
}

impl Proxy {
    /// Serve on `listen` in front of the apiserver of `kubeconfig`.
    pub async fn start(kubeconfig: &Path, listen: SocketAddr) -> Result<Proxy, BoxError> {
        let text = std::fs::read_to_string(kubeconfig)?;
        let kc: serde_norway::Value = serde_norway::from_str(&text)?;
        let dir = kubeconfig.parent().unwrap_or(Path::new("."));
        let client_ca = cluster_ca(&kc, dir).map(|pem| tls::pem_certs(&pem));
        let id = tls::identity(client_ca.filter(|c| !c.is_empty()))?;
        let parsed = kube::config::Kubeconfig::read_from(kubeconfig)?;
        let mut config = kube::Config::from_custom_kubeconfig(
            parsed,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        config.read_timeout = None;
        let upstream = kube::Client::try_from(config)?;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let faults = Arc::new(Faults::default());
        let counts: Counts = Arc::default();
        let drops = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let shared = Arc::new(Shared {
            upstream,
            faults: faults.clone(),
            counts: counts.clone(),
            drops: drops.clone(),
        });
        let task = tokio::spawn(tls::serve(listener, id.config, move |req, _| {
            handle(shared.clone(), req)
        }));
        Ok(Proxy {
            addr,
            faults,
            counts,
            drops,
            ca_pem: id.ca_pem,
            task,
        })
    }

    /// A kubeconfig for clients of the proxy: `original` with the server
    /// and CA replaced, the user (client certificate) kept.
    pub fn kubeconfig(&self, original: &Path) -> Result<String, BoxError> {
        let text = std::fs::read_to_string(original)?;
        let mut kc: serde_norway::Value = serde_norway::from_str(&text)?;
        let dir = original
            .parent()
            .and_then(|d| d.canonicalize().ok())
            .unwrap_or_default();
        let (cluster_name, _) =
            current_cluster(&kc).ok_or("kubeconfig without a current cluster")?;
        let server = format!("https://{}", self.addr);
        let ca = crate::admission::base64_of(self.ca_pem.as_bytes());
        if let Some(clusters) = kc.get_mut("clusters").and_then(|c| c.as_sequence_mut()) {
            for c in clusters {
                if c.get("name").and_then(|n| n.as_str()) == Some(cluster_name.as_str())
                    && let Some(m) = c.get_mut("cluster").and_then(|x| x.as_mapping_mut())
                {
                    m.remove("certificate-authority");
                    m.insert("server".into(), server.clone().into());
                    m.insert("certificate-authority-data".into(), ca.clone().into());
                }
            }
        }
        // Relative credential paths stay valid wherever the copy is written.
        if let Some(users) = kc.get_mut("users").and_then(|u| u.as_sequence_mut()) {
            for u in users {
                if let Some(m) = u.get_mut("user").and_then(|x| x.as_mapping_mut()) {
                    for k in ["client-certificate", "client-key", "tokenFile"] {
                        if let Some(p) = m.get(k).and_then(|v| v.as_str()).map(str::to_string)
                            && Path::new(&p).is_relative()
                        {
                            m.insert(k.into(), dir.join(p).display().to_string().into());
                        }
                    }
                }
            }
        }
        Ok(serde_norway::to_string(&kc)?)
    }

    /// End every open watch stream now.
    pub fn drop_watches(&self) {
        self.drops.send_modify(|e| *e += 1);
    }

    /// Requests served so far: `{client: {verb: count}}`.
    pub fn request_counts(&self) -> Value {
        let m = lock(&self.counts).clone();
        let mut out = serde_json::Map::new();
        for ((client, verb), n) in m {
            if let Some(o) = out
                .entry(client)
                .or_insert_with(|| json!({}))
                .as_object_mut()
            {
                o.insert(verb, json!(n));
            }
        }
        Value::Object(out)
    }

    /// Forget the counts (a benchmark's window starts).
    pub fn reset_counts(&self) {
        lock(&self.counts).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_what_kubeconfigs_hold() {
        assert_eq!(decode_base64("Zm9vYmFy").unwrap(), b"foobar");
        assert_eq!(decode_base64("Zm8=\n").unwrap(), b"fo");
        assert!(decode_base64("Zm9v!").is_none());
    }
}
