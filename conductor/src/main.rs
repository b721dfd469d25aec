//! `magnum-conductor --config-file /etc/magnum/magnum.conf [--config-file ...] [--config-dir ...]`

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use common::config::Config;
use common::db::{self, Db};
use conductor::handlers::ConductorHandlers;
use conductor::metrics::Metrics;
use conductor::server::{Health, RpcServer, SHUTDOWN_STEP, bounded_step};

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
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build Magnum's schema in an EMPTY database from `migrations/` (tests,
    /// demo, fresh installs). Production schemas belong to
    /// `magnum-db-manage upgrade`; this refuses any database with tables.
    DbCreate {
        /// Alembic revision to build: b3e1cf4a2d5e (Magnum 23.0) or
        /// c0f832afc4fd (Magnum 18-22).
        #[arg(long, default_value = db::schema::REV_23)]
        revision: String,
    },
    /// Check what startup needs (config, database and schema revision,
    /// broker, management cluster and its Cluster API resources, Leases,
    /// Keystone, addon charts): one line each, with a fix for a failure.
    /// Exit 0 when nothing failed, 1 otherwise.
    Check,
    /// Print every option this conductor reads, with its default and help,
    /// in oslo-config-generator's sample format.
    ConfigSample {
        /// The configuration reference page instead (docs/configuration.md).
        #[arg(long)]
        markdown: bool,
    },
    /// Print the label table (docs/labels.md): every label of the Cluster
    /// API drivers and of Magnum's Heat-era list, and what this conductor
    /// does with it.
    LabelTable,
    /// Take over CLUSTER (uuid or name), a running cluster another driver
    /// created: prints the plan (objects owned, created or kept; machines
    /// that would be replaced: an adoption replaces none), then marks its
    /// objects and switches its row to a copy of its template with this
    /// conductor's driver. Exit 0: adopted, adoptable (--dry-run), undone
    /// or already ours; 1: refused, with the reasons; 2: it could not be
    /// read or written.
    /// Print, as a JSON array, every object a create writes for a cluster
    /// of one master and one worker whose template has these labels (on
    /// the management cluster, and ClusterResourceSets' content for the
    /// workload cluster), with this configuration's charts and autoscaler
    /// image. Nothing is read or written: `scripts/offline-list.sh` makes
    /// the list of images and charts to mirror from it.
    ClusterObjects {
        /// A template label, KEY=VALUE (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
        /// The template's network driver.
        #[arg(long, default_value = "calico")]
        network_driver: String,
        /// The CAPI line: v1beta1 (CAPI 1.10) or v1beta2 (CAPI 1.11+).
        #[arg(long, default_value = "v1beta2")]
        line: String,
    },
    Adopt {
        /// The cluster's uuid, or its name when only one has it.
        cluster: String,
        /// Show the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Give an adopted cluster back to its driver (before any upgrade).
        #[arg(long)]
        undo: bool,
    },
}

/// `cluster-objects`: 0 printed, 2 refused (the reason on stderr).
fn cluster_objects(cfg: &Config, labels: &[String], network_driver: &str, line: &str) -> ExitCode {
    use conductor::capi::render::CapiLine;
    let line = match line {
        "v1beta1" => CapiLine::V1beta1,
        "v1beta2" => CapiLine::V1beta2,
        other => {
            eprintln!("magnum-conductor: --line {other:?}: v1beta1 or v1beta2");
            return ExitCode::from(2);
        }
    };
    let charts = conductor::capi::addons::AddonCharts::from(&cfg.capi);
    let out = conductor::offline::parse_labels(labels).and_then(|labels| {
        conductor::offline::cluster_objects(&conductor::offline::Request {
            line,
            labels,
            network_driver,
            charts: &charts,
            autoscaler_image: &cfg.capi.autoscaler_image,
            namespace_prefix: &cfg.capi.namespace_prefix,
        })
    });
    match out.and_then(|objs| serde_json::to_string_pretty(&objs).map_err(|e| e.to_string())) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("magnum-conductor: cluster-objects: {e}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(debug: bool) {
    let default = if debug { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}

/// `check` prints its report on stdout; only warnings of its own go to
/// stderr.
fn init_check_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_target(false)
        .with_writer(std::io::stderr)
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
    if let Some(Command::LabelTable) = args.command {
        print!("{}", conductor::capi::label_table::markdown());
        return ExitCode::SUCCESS;
    }
    if let Some(Command::ConfigSample { markdown }) = args.command {
        if markdown {
            print!("{}", common::config::reference::markdown());
        } else {
            print!("{}", common::config::sample());
        }
        return ExitCode::SUCCESS;
    }
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
        // The preflight reports it as it reports everything startup refuses.
        Err(e) if matches!(args.command, Some(Command::Check)) => {
            let line = conductor::check::Line::fail(
                "config",
                e.to_string(),
                "fix the option named (magnum-conductor config-sample lists every option with \
                 its type and default)",
            );
            println!("{}", line.render());
            return ExitCode::FAILURE;
        }
        Err(e) => {
            init_logging(false);
            eprintln!("magnum-conductor: {e}");
            return ExitCode::from(2);
        }
    };
    let log_handle = if matches!(
        args.command,
        Some(Command::Check | Command::Adopt { .. } | Command::ClusterObjects { .. })
    ) {
        init_check_logging();
        conductor::logging::Handle::default()
    } else {
        match conductor::logging::init(&cfg.default) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("magnum-conductor: {e}");
                return ExitCode::from(2);
            }
        }
    };
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
    let code = match args.command {
        Some(Command::DbCreate { revision }) => runtime.block_on(db_create(cfg, revision)),
        Some(Command::ConfigSample { .. } | Command::LabelTable) => ExitCode::SUCCESS,
        Some(Command::Check) => runtime.block_on(async {
            let lines = conductor::check::run(&cfg).await;
            for l in &lines {
                println!("{}", l.render());
            }
            if lines
                .iter()
                .any(|l| l.status == conductor::check::Status::Fail)
            {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }),
        Some(Command::Adopt {
            cluster,
            dry_run,
            undo,
        }) => runtime.block_on(adopt(cfg, cluster, dry_run, undo)),
        Some(Command::ClusterObjects {
            labels,
            network_driver,
            line,
        }) => cluster_objects(&cfg, &labels, &network_driver, &line),
        None => runtime.block_on(run(cfg, log_handle)),
    };
    // Tasks still running (watches, operations that resume elsewhere) are
    // dropped; a blocking one (certificate signing) gets a bounded wait.
    runtime.shutdown_timeout(SHUTDOWN_STEP);
    code
}

async fn adopt(cfg: Config, cluster: String, dry_run: bool, undo: bool) -> ExitCode {
    use conductor::adopt::{Mode, run};
    let mode = match (dry_run, undo) {
        (true, true) => {
            eprintln!("magnum-conductor: adopt: --dry-run and --undo exclude each other");
            return ExitCode::from(2);
        }
        (true, false) => Mode::DryRun,
        (false, true) => Mode::Undo,
        (false, false) => Mode::Adopt,
    };
    let (code, report) = run(&cfg, &cluster, mode).await;
    if code == 2 {
        eprint!("magnum-conductor: {report}");
    } else {
        print!("{report}");
    }
    ExitCode::from(code)
}

async fn db_create(cfg: Config, revision: String) -> ExitCode {
    let url = match db::DbUrl::parse(cfg.database.connection.expose()) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("magnum-conductor: {e}");
            return ExitCode::from(2);
        }
    };
    let pool = match sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(url.connect_options())
        .await
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "magnum-conductor: cannot connect to {}: {e}",
                url.redacted()
            );
            return ExitCode::FAILURE;
        }
    };
    match db::schema::create_fresh(&pool, &revision).await {
        Ok(()) => {
            println!("created Magnum schema {revision} in {}", url.redacted());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("magnum-conductor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The `magnum_service` heartbeat: at start, then every
/// `[DEFAULT] periodic_interval_max` seconds.
async fn heartbeat_loop(db: Db, host: Option<String>, every: u64, metrics: Metrics) {
    let mut hb = db::service::Heartbeat::new(host);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(every.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match hb.beat(&db).await {
            Ok(_) => metrics.db_heartbeats.with_label_values(&["ok"]).inc(),
            Err(e) => {
                metrics.db_heartbeats.with_label_values(&["error"]).inc();
                tracing::warn!(error = %e, "magnum_service heartbeat failed");
            }
        }
    }
}

/// The management cluster and the cluster lifecycle on it. With `[capi]
/// kubeconfig` set it is required (exit 2 when unusable); without, the
/// usual kubeconfig inference is tried and, failing that, the conductor
/// runs without it (cluster operations answer NotSupported).
async fn start_lifecycle(
    cfg: &Config,
    db: &Db,
    metrics: &Metrics,
    notifier: &conductor::notify::Notifier,
    server_id: &str,
    broker: conductor::lifecycle::coordination::elect::ConnectionWatch,
) -> Result<Option<conductor::lifecycle::Engine>, ExitCode> {
    let required = cfg.capi.kubeconfig.is_some();
    let connected = async {
        let client = conductor::mgmt::client(&cfg.capi).await?;
        let line = conductor::mgmt::detect_line(&client, cfg.capi.api_version).await?;
        Ok::<_, conductor::mgmt::MgmtError>((client, line))
    }
    .await;
    let (client, line) = match connected {
        Ok(c) => c,
        Err(e) if required => {
            eprintln!("magnum-conductor: {e}");
            tracing::error!(error = %e, "management cluster unusable, exiting");
            return Err(ExitCode::from(2));
        }
        Err(e) => {
            tracing::warn!(error = %e, "no management cluster: cluster operations are disabled (set [capi] kubeconfig)");
            return Ok(None);
        }
    };
    tracing::info!(line = ?line, "management cluster connected");
    if cfg.capi.ha_leases {
        match conductor::lifecycle::coordination::lease::prepare(&client, &cfg.capi.lease_namespace)
            .await
        {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 401 || e.code == 403 => {
                let msg = format!(
                    "cannot use Leases in the namespace {} of the management cluster ({}): \
                     grant get, list, create, update and delete on leases there (and get/create \
                     on that namespace), or set [capi] ha_leases = false for a lone conductor",
                    cfg.capi.lease_namespace, e.message
                );
                eprintln!("magnum-conductor: {msg}");
                tracing::error!("{msg}");
                return Err(ExitCode::from(2));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot check the lease namespace yet; the leader retries")
            }
        }
    }
    let credentials = match conductor::lifecycle::credentials::Credentials::from_opts(
        &cfg.capi,
        &cfg.keystone_auth,
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("magnum-conductor: {e}");
            return Err(ExitCode::from(2));
        }
    };
    tracing::info!(source = ?credentials, "cluster credentials");
    Ok(Some(
        conductor::lifecycle::Engine::start(conductor::lifecycle::engine::Services {
            db: db.clone(),
            x509: cfg.x509.clone(),
            capi: cfg.capi.clone(),
            client,
            line,
            credentials,
            metrics: metrics.clone(),
            notifier: notifier.clone(),
            // Who holds a Lease, as `kubectl get lease` shows it.
            identity: format!(
                "{}-{server_id}",
                cfg.default
                    .host
                    .clone()
                    .unwrap_or_else(|| "conductor".into())
            ),
            broker,
        })
        .await,
    ))
}

/// SIGHUP: reopen the log file (logrotate), as oslo.log's WatchedFileHandler
/// would notice. Also keeps SIGHUP from terminating the process.
fn reopen_logs_on_sighup(handle: conductor::logging::Handle) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            handle.reopen();
        }
    });
}

async fn run(cfg: Config, log_handle: conductor::logging::Handle) -> ExitCode {
    reopen_logs_on_sighup(log_handle);
    // (The log destination and the metrics port are checked by using them.)
    if let Some(r) = conductor::startup::refusals(&cfg, false).first() {
        eprintln!("magnum-conductor: {}", r.detail);
        tracing::error!(check = r.name, "{}; fix: {}", r.detail, r.fix);
        return ExitCode::from(2);
    }
    let cfg = Arc::new(cfg);
    let server_id = common::short_id::generate_id();
    let metrics = Metrics::new();
    conductor::memory::spawn_trimmer(conductor::memory::TRIM_EVERY);
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
    let database = match Db::connect(&cfg.database).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("magnum-conductor: {e}");
            tracing::error!(error = %e, "database unusable, exiting");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(revision = %database.schema.revision, trust_columns = database.schema.has_trust_columns, node_labels = database.schema.has_node_labels, "database schema accepted");
    let heartbeat = tokio::spawn(heartbeat_loop(
        database.clone(),
        cfg.default.host.clone(),
        cfg.default.periodic_interval_max,
        metrics.clone(),
    ));
    let publisher = conductor::server::publisher_channel();
    let (connection_tx, connection_rx) = tokio::sync::watch::channel(None);
    let notifier =
        conductor::notify::Notifier::from_config(&cfg, connection_tx.subscribe(), metrics.clone());
    let lifecycle = match start_lifecycle(
        &cfg,
        &database,
        &metrics,
        &notifier,
        &server_id,
        connection_rx,
    )
    .await
    {
        Ok(l) => l,
        Err(code) => return code,
    };
    let engine = lifecycle.clone();
    let server = RpcServer::with_publisher(
        cfg.clone(),
        server_id,
        Arc::new(ConductorHandlers {
            db: database.clone(),
            x509: cfg.x509.clone(),
            indirection: conductor::indirection::Indirection::new(database.clone()),
            lifecycle,
            legacy_topic: cfg.conductor.legacy_topic.clone(),
        }),
        metrics,
        health,
        publisher,
    )
    .with_connection_watch(connection_tx);
    let stopping = engine.clone();
    // The server runs on the runtime's workers, not on this thread (which
    // `block_on` drives): a delivery then wakes a worker, which runs the
    // message's task next on the same thread, instead of waking this thread
    // to hand each message over to a worker (docs/benchmarks.md, "CPU per
    // message").
    let served = tokio::spawn(server.run(async move {
        shutdown_signal().await;
        if let Some(e) = stopping {
            e.begin_stopping();
        }
    }));
    // A panic in the server (a bug) ends the process with a failure, as it
    // did when the server ran on this thread: the service manager restarts it.
    let code = match served.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "the RPC server stopped abnormally");
            ExitCode::FAILURE
        }
    };
    if let Some(e) = engine {
        bounded_step("stepping down as status leader", e.step_down()).await;
    }
    heartbeat.abort();
    bounded_step("closing the database pool", database.pool.close()).await;
    tracing::info!("magnum-conductor stopped");
    code
}
