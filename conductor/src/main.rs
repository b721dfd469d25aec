//! `magnum-conductor --config-file /etc/magnum/magnum.conf [--config-file ...] [--config-dir ...]`

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use common::config::Config;
use conductor::handlers::BaseHandlers;
use conductor::metrics::Metrics;
use conductor::server::{Health, RpcServer};

/// A drop-in replacement for Magnum's conductor, driving Cluster API.
#[derive(Parser, Debug)]
#[command(name = "magnum-conductor", version)]
struct Args {
    /// Configuration file (repeatable; later files win), as oslo.config.
    #[arg(long = "config-file", value_name = "PATH")]
    config_file: Vec<PathBuf>,
    /// Directory of `*.conf` files read after the config files, in sorted order.
    #[arg(long = "config-dir", value_name = "DIR")]
    config_dir: Vec<PathBuf>,
}

fn init_logging(debug: bool) {
    let default = if debug {
        "debug,lapin=info,amq_protocol=info"
    } else {
        "info,lapin=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = int.recv() => tracing::info!("SIGINT received"),
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let files = if args.config_file.is_empty() && args.config_dir.is_empty() {
        // oslo.config's default search: the first of these that exists.
        ["/etc/magnum/magnum.conf"]
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect()
    } else {
        args.config_file
    };
    let cfg = match Config::load(&files, &args.config_dir) {
        Ok(c) => c,
        Err(e) => {
            init_logging(false);
            eprintln!("magnum-conductor: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(cfg.default.debug);
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("magnum-conductor: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cfg))
}

async fn run(cfg: Config) -> ExitCode {
    let cfg = Arc::new(cfg);
    let server_id = common::short_id::generate_id();
    let metrics = Metrics::new();
    let health = Arc::new(Health::default());
    tracing::info!(files = ?cfg.files, server = %server_id, version = env!("CARGO_PKG_VERSION"), "magnum-conductor starting");
    if let Some(addr) = cfg.metrics.listen {
        match conductor::http::serve(
            addr,
            metrics.clone(),
            health.clone(),
            server_id.clone(),
            cfg.conductor.topic.clone(),
        )
        .await
        {
            Ok(bound) => tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz"),
            Err(e) => {
                eprintln!("magnum-conductor: cannot listen on [metrics] listen = {addr}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let server = RpcServer::new(
        cfg.clone(),
        server_id,
        Arc::new(BaseHandlers),
        metrics,
        health,
    );
    server.run(shutdown_signal()).await;
    tracing::info!("magnum-conductor stopped");
    ExitCode::SUCCESS
}
