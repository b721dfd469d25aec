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
//! Simplified: the apiserver listens on 127.0.0.1 with a free port, keeps
//! its objects in the management cluster's etcd under a prefix of its own
//! (`/capi-sim-workload/<namespace>/<cluster>`), has no nodes, no
//! controller manager and a service-account key of its own. It stops when
//! the `-ca` Secret goes (the cluster is deleted) and with capi-sim (also
//! when capi-sim is killed: `PR_SET_PDEATHSIG`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

/// The label CAPI (and Magnum's drivers) put on a cluster's Secrets.
const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Where in etcd a workload apiserver keeps its objects.
const ETCD_PREFIX: &str = "/capi-sim-workload";

/// (namespace, CAPI cluster name).
pub type ClusterKey = (String, String);

/// How to start them.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `kube-apiserver` binary (`../shared/k8s` unpacks it into
    /// `$K8S_CACHE`).
    pub binary: PathBuf,
    /// The management cluster's etcd, e.g. `http://127.0.0.1:2379`.
    pub etcd: String,
    /// State (certificates, logs), one directory per cluster.
    pub dir: PathBuf,
}

impl Settings {
    /// From the control-plane directory `../shared/k8s/up.sh` made (its
    /// `env` file names the etcd port) and `$K8S_CACHE`.
    pub fn beside(kubeconfig: &Path) -> Result<Settings, String> {
        let dir = kubeconfig
            .parent()
            .ok_or_else(|| format!("{}: no directory", kubeconfig.display()))?;
        let env = std::fs::read_to_string(dir.join("env")).map_err(|e| {
            format!(
                "{}/env (written by ../shared/k8s/up.sh): {e}",
                dir.display()
            )
        })?;
        let port = env
            .lines()
            .find_map(|l| l.strip_prefix("ETCD_PORT="))
            .ok_or_else(|| format!("{}/env has no ETCD_PORT", dir.display()))?;
        let cache = std::env::var_os("K8S_CACHE")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/shared-k8s"))
            })
            .ok_or("neither K8S_CACHE nor HOME is set")?;
        let binary = cache.join("kube-apiserver");
        if !binary.exists() {
            return Err(format!(
                "{}: missing (../shared/k8s/up.sh unpacks it)",
                binary.display()
            ));
        }
        Ok(Settings {
            binary,
            etcd: format!("http://127.0.0.1:{}", port.trim()),
            dir: dir.join("workload"),
        })
    }
}

struct Running {
    /// Some once it answers `/readyz`.
    endpoint: Option<(String, u16)>,
    /// Dropping it kills the apiserver (`kill_on_drop`).
    _child: Option<tokio::process::Child>,
}

struct Inner {
    settings: Settings,
    running: Mutex<BTreeMap<ClusterKey, Running>>,
    /// Clusters whose endpoint just became ready (the controllers look at
    /// them again).
    ready_tx: mpsc::UnboundedSender<ClusterKey>,
    ready_rx: Mutex<Option<mpsc::UnboundedReceiver<ClusterKey>>>,
    errors: Mutex<Vec<String>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
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
            errors: Mutex::new(Vec::new()),
            task: Mutex::new(None),
        }));
        let me = w.clone();
        *lock(&w.0.task) = Some(tokio::spawn(async move { me.watch(client).await }));
        w
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
        lock(&self.0.errors).clone()
    }

    /// Stop every apiserver and the watch.
    pub fn stop(&self) {
        if let Some(t) = lock(&self.0.task).take() {
            t.abort();
        }
        lock(&self.0.running).clear();
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
                    if let Some(key) = ca_of(&s)
                        && lock(&self.0.running).remove(&key).is_some()
                    {
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
                    _child: None,
                },
            );
        }
        let (crt, pem_key) = (crt.0.clone(), pem_key.0.clone());
        let me = self.clone();
        tokio::spawn(async move {
            match me.launch(&key, &crt, &pem_key).await {
                Ok(()) => {}
                Err(e) => {
                    let msg = format!("workload apiserver of {}/{}: {e}", key.0, key.1);
                    tracing::warn!("{msg}");
                    lock(&me.0.errors).push(msg);
                    lock(&me.0.running).remove(&key);
                }
            }
        });
    }

    async fn launch(&self, key: &ClusterKey, ca_crt: &[u8], ca_key: &[u8]) -> Result<(), String> {
        let s = &self.0.settings;
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
        tokio::fs::write(
            dir.join("apiserver.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,DNS:kubernetes,\
             DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1\n",
        )
        .await
        .map_err(io("apiserver.ext"))?;
        for args in [
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "apiserver.key",
                "-out",
                "apiserver.csr",
                "-subj",
                "/CN=kube-apiserver",
            ][..],
            &[
                "x509",
                "-req",
                "-in",
                "apiserver.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "apiserver.crt",
                "-days",
                "365",
                "-extfile",
                "apiserver.ext",
            ],
            &["genrsa", "-out", "sa.key", "2048"],
            &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
        ] {
            openssl(&dir, args).await?;
        }
        let port = free_port().map_err(|e| format!("a free port: {e}"))?;
        let log = std::fs::File::create(dir.join("kube-apiserver.log"))
            .map_err(io("kube-apiserver.log"))?;
        let p = |f: &str| dir.join(f).display().to_string();
        let mut cmd = tokio::process::Command::new(&s.binary);
        cmd.args([
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={port}"),
            format!("--etcd-servers={}", s.etcd),
            format!("--etcd-prefix={ETCD_PREFIX}/{}/{}", key.0, key.1),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            "--authorization-mode=Node,RBAC".to_string(),
            "--service-cluster-ip-range=10.96.0.0/12".to_string(),
            "--endpoint-reconciler-type=none".to_string(),
            "--profiling=false".to_string(),
            "--v=1".to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
        // SAFETY: prctl(2) between fork and exec touches no memory of the
        // parent; it makes the kernel kill the apiserver if capi-sim dies
        // without running its destructors. The spawning thread is a runtime
        // worker, which lives as long as the process.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", s.binary.display()))?;
        let url = format!("https://127.0.0.1:{port}");
        let ready = wait_ready(&url, &mut child).await;
        let mut running = lock(&self.0.running);
        let Some(slot) = running.get_mut(key) else {
            // The cluster went while it started: `child` is dropped (killed).
            return Ok(());
        };
        ready.map_err(|e| format!("{e}; see {dir_s}/kube-apiserver.log"))?;
        tracing::info!(ns = key.0, cluster = key.1, %url, "workload apiserver ready");
        slot.endpoint = Some(("127.0.0.1".to_string(), port));
        slot._child = Some(child);
        drop(running);
        let _ = self.0.ready_tx.send(key.clone());
        Ok(())
    }
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

/// Until `/readyz` answers 200 (anonymous: `system:public-info-viewer`
/// allows it), the process exits, or 90 s pass.
async fn wait_ready(url: &str, child: &mut tokio::process::Child) -> Result<(), String> {
    let mut cfg = kube::Config::new(url.parse().map_err(|e| format!("{url}: {e}"))?);
    // Readiness only: the certificate is checked by the clients under test.
    cfg.accept_invalid_certs = true;
    cfg.connect_timeout = Some(Duration::from_secs(2));
    cfg.read_timeout = Some(Duration::from_secs(5));
    let client = kube::Client::try_from(cfg).map_err(|e| e.to_string())?;
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
