//! `capi-sim --line v1beta1 [--crds ../shared/crds] [--listen 127.0.0.1:6443] [--kubeconfig PATH]`
//!
//! Serves a simulated management-cluster apiserver over plain HTTP on
//! loopback and writes a kubeconfig pointing at it (kubectl and kube-rs
//! connect unchanged).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use capi_sim::resources::{self, Line};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "capi-sim", version)]
struct Args {
    /// Which CRD release line to serve: CAPI 1.10 (v1beta1) or 1.14 (v1beta2).
    #[arg(long, value_enum, default_value = "v1beta1")]
    line: Line,
    /// Folder holding the CRD release folders.
    #[arg(long, default_value = "../shared/crds")]
    crds: PathBuf,
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write a kubeconfig for this simulator.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Events kept for watches to resume from (older: 410 Gone).
    #[arg(long, default_value_t = 100_000)]
    history: usize,
    /// Milliseconds between simulated controller passes (each object moves
    /// one step per pass); 0 turns the controllers off.
    #[arg(long, default_value_t = 1000)]
    tick_ms: u64,
}

pub fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capi-sim\n  cluster:\n    server: {server}\ncontexts:\n- name: capi-sim\n  context:\n    cluster: capi-sim\n    user: capi-sim\n    namespace: default\ncurrent-context: capi-sim\nusers:\n- name: capi-sim\n  user: {{}}\n"
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let _ = tracing_subscriber::fmt().with_target(false).try_init();
    let dirs = resources::line_dirs(&args.crds, args.line);
    let dir_refs: Vec<&std::path::Path> = dirs.iter().map(PathBuf::as_path).collect();
    let crds = match resources::load_crd_dirs(&dir_refs) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("capi-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let mut all = resources::builtins();
    all.extend(crds);
    let count = all.len();
    let sim = capi_sim::Sim::new(all, args.history);
    if args.tick_ms > 0 {
        sim.start_controllers(args.line, std::time::Duration::from_millis(args.tick_ms));
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("capi-sim: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(2);
        }
    };
    let addr = listener.local_addr().unwrap_or(args.listen);
    let server = format!("http://{addr}");
    if let Some(path) = &args.kubeconfig
        && let Err(e) = std::fs::write(path, kubeconfig(&server))
    {
        eprintln!("capi-sim: cannot write {}: {e}", path.display());
        return ExitCode::from(2);
    }
    println!(
        "capi-sim serving {count} resources ({:?}) on {server}",
        args.line
    );
    if let Err(e) = axum::serve(listener, capi_sim::api::router(sim)).await {
        eprintln!("capi-sim: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
