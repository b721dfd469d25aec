//! Real Kubernetes control planes for tests, the demo and benchmarks (I/O):
//! `scripts/k8s-up.sh DIR --crds LINE` (etcd, kube-apiserver and
//! kube-controller-manager v1.28.7 with the line's CRDs, from
//! `scripts/fetch-artifacts.sh`), stopped with `scripts/k8s-down.sh`; and an apiserver restart, for the faults only a real one
//! gives (every watch cut, resumed watches answered 410 Gone: the new
//! apiserver's watch cache starts at the current revision).
//!
//! [`shared`]: one control plane per line per test process, started on
//! first use, with CAPI's admission webhooks registered, and stopped when
//! the process exits (a watcher process runs `k8s-down.sh` then).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::kinds::Line;

/// The project's `scripts/` (`k8s-up.sh`, `k8s-down.sh`).
pub fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

/// One control plane started by `k8s-up.sh` in `dir`.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    pub dir: PathBuf,
    pub line: Line,
}

fn run(cmd: &mut Command, what: &str) -> io::Result<()> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

impl ControlPlane {
    /// Start one in `dir` (blocking: ~15-40 s with a CRD set).
    pub fn up(dir: &Path, line: Line) -> io::Result<ControlPlane> {
        std::fs::create_dir_all(dir)?;
        run(
            Command::new(scripts().join("k8s-up.sh"))
                .arg(dir)
                .arg("--crds")
                .arg(line.crds_flag())
                .stdin(Stdio::null()),
            "scripts/k8s-up.sh",
        )?;
        Ok(ControlPlane {
            dir: dir.to_path_buf(),
            line,
        })
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// What `k8s-up.sh` wrote to `DIR/env` (ports, pids).
    pub fn env(&self) -> BTreeMap<String, String> {
        std::fs::read_to_string(self.dir.join("env"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A client (admin) for this control plane.
    pub async fn client(&self) -> Result<kube::Client, Box<dyn std::error::Error + Send + Sync>> {
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Stop it (`k8s-down.sh`).
    pub fn down(&self) {
        let _ = Command::new(scripts().join("k8s-down.sh"))
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output();
    }

    fn apiserver_pid(&self) -> io::Result<i32> {
        self.env()
            .get("APISERVER_PID")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| io::Error::other("no APISERVER_PID in DIR/env"))
    }

    /// Stop the apiserver (etcd and the controller manager keep running);
    /// returns its command line, for [`ControlPlane::start_apiserver`].
    pub fn stop_apiserver(&self) -> io::Result<Vec<String>> {
        let pid = self.apiserver_pid()?;
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))?
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        // SAFETY: kill(2) on a pid we started; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        for _ in 0..200 {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        Ok(argv)
    }

    /// Start the apiserver again with `argv` (from
    /// [`ControlPlane::stop_apiserver`]) and wait until it is ready.
    pub fn start_apiserver(&self, argv: &[String]) -> io::Result<()> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::other("empty apiserver command line"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("kube-apiserver.log"))?;
        let child = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let env = std::fs::read_to_string(self.dir.join("env"))?;
        let env: String = env
            .lines()
            .map(|l| {
                if l.starts_with("APISERVER_PID=") {
                    format!("APISERVER_PID={}\n", child.id())
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(self.dir.join("env"), env)?;
        self.wait_ready(Duration::from_secs(60))
    }

    /// Stop and start the apiserver (every watch ends; a watch resumed from
    /// an older resourceVersion gets 410 Gone from the new one).
    pub fn restart_apiserver(&self) -> io::Result<()> {
        let argv = self.stop_apiserver()?;
        self.start_apiserver(&argv)
    }

    /// Poll `/readyz` with the admin credentials.
    pub fn wait_ready(&self, timeout: Duration) -> io::Result<()> {
        let port = self
            .env()
            .get("APISERVER_PORT")
            .cloned()
            .ok_or_else(|| io::Error::other("no APISERVER_PORT"))?;
        let pki = self.dir.join("pki");
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            let ok = Command::new("curl")
                .args(["-sf", "-m", "2", "--cacert"])
                .arg(pki.join("ca.crt"))
                .arg("--cert")
                .arg(pki.join("admin.crt"))
                .arg("--key")
                .arg(pki.join("admin.key"))
                .arg(format!("https://127.0.0.1:{port}/readyz"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(io::Error::other("kube-apiserver not ready in time"))
    }

    /// Stop this control plane when process `pid` exits (a detached watcher
    /// runs `k8s-down.sh` and removes the directory).
    pub fn reap_when_gone(&self, pid: u32) -> io::Result<()> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; '{}' '{}' >/dev/null 2>&1; rm -rf '{}'",
            scripts().join("k8s-down.sh").display(),
            self.dir.display(),
            self.dir.display()
        );
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(())
    }
}

/// A runtime that outlives every test's own (the shared webhook servers
/// run on it).
fn background() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("background runtime: {e}"))
    })
}

struct Shared {
    cp: ControlPlane,
    _webhooks: crate::admission::Webhooks,
}

fn start_shared(line: Line) -> Result<Shared, String> {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".into());
    let dir = std::env::temp_dir().join("capi-sim-k8s").join(format!(
        "{exe}-{}-{}",
        line.crds_flag(),
        std::process::id()
    ));
    let cp = ControlPlane::up(&dir, line).map_err(|e| e.to_string())?;
    cp.reap_when_gone(std::process::id())
        .map_err(|e| e.to_string())?;
    let cp2 = cp.clone();
    let webhooks = std::thread::spawn(move || {
        background().block_on(async move {
            let client = cp2.client().await.map_err(|e| e.to_string())?;
            let w = crate::admission::Webhooks::serve()
                .await
                .map_err(|e| e.to_string())?;
            w.register(&client, line, "capi-sim")
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(w)
        })
    })
    .join()
    .map_err(|_| "webhook start panicked".to_string())??;
    Ok(Shared {
        cp,
        _webhooks: webhooks,
    })
}

/// The control plane of `line` shared by this process's tests (started on
/// first use; blocking). Tests keep apart by namespace.
pub fn shared(line: Line) -> &'static ControlPlane {
    static V1: OnceLock<Shared> = OnceLock::new();
    static V2: OnceLock<Shared> = OnceLock::new();
    let cell = match line {
        Line::V1beta1 => &V1,
        Line::V1beta2 => &V2,
    };
    &cell
        .get_or_init(|| {
            start_shared(line).unwrap_or_else(|e| panic!("control plane for {line:?}: {e}"))
        })
        .cp
}
