//! `capi-sim --kubeconfig KUBECONFIG --line v1beta1|v1beta2 [...]`
//!
//! Runs the simulated CAPI/CAPO/CAAPH controllers and CAPI's admission
//! webhooks against the real apiserver of KUBECONFIG (a control plane from
//! `scripts/k8s-up.sh`), optionally a fault-injecting proxy in front of it
//! (`--proxy-kubeconfig OUT`: the kubeconfig for the proxy's clients), and
//! the simulator's control endpoint. `--ready-file F` receives the control
//! URL once everything is up. SIGTERM/SIGINT: the webhooks are unregistered
//! and the process exits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use capi_sim::kinds::Line;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "capi-sim", version)]
struct Args {
    /// The management cluster (a real kube-apiserver with the line's CRDs).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Which release line its CRDs are: CAPI 1.10 (v1beta1) or 1.14 (v1beta2).
    #[arg(long, value_enum, default_value = "v1beta1")]
    line: Line,
    /// Milliseconds between a change and the pass that reacts to it.
    #[arg(long, default_value_t = 20)]
    tick_ms: u64,
    /// Reconcile only namespaces starting with this.
    #[arg(long)]
    namespace_prefix: Option<String>,
    /// Clusters reconciled at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// No controllers (webhooks and proxy only).
    #[arg(long)]
    no_controllers: bool,
    /// Do not register CAPI's admission webhooks.
    #[arg(long)]
    no_webhooks: bool,
    /// Name of the webhook configurations.
    #[arg(long, default_value = "capi-sim")]
    webhook_name: String,
    /// Start the fault-injecting proxy and write its clients' kubeconfig here.
    #[arg(long)]
    proxy_kubeconfig: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:0")]
    proxy_listen: SocketAddr,
    /// The control endpoint (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:0")]
    control: SocketAddr,
    /// Run a real kube-apiserver for each workload cluster once its
    /// `<cluster>-ca` Secret exists, and publish its address as the
    /// control-plane endpoint (needs the `env` file `scripts/k8s-up.sh`
    /// wrote beside the kubeconfig).
    #[arg(long)]
    workload_apiservers: bool,
    /// With --workload-apiservers: a cluster whose OpenStackCluster has
    /// `disableAPIServerFloatingIP` gets its apiserver inside its tenant
    /// network's namespaces (`qdhcp-<network>`; root), reached by CAPI's
    /// controllers through its kubeconfig Secret (magnum-capi-proxy).
    #[arg(long)]
    workload_netns: bool,
    /// Make each cluster's network, router and API load balancer in the
    /// real OpenStack the identityRef's clouds.yaml names, as CAPO does,
    /// and (with --workload-apiservers) play OCCM and Cinder CSI in each
    /// workload cluster (plain-HTTP test services only).
    #[arg(long)]
    openstack: bool,
    /// With --workload-apiservers: install each HelmReleaseProxy's chart in
    /// its workload cluster as CAAPH does, rendered by the real Helm engine:
    /// the Python of the engine's venv (HELM_VENV/bin/python) running
    /// --helm-script (tests/helm_render.py; the charts from HELM_CHARTS_DIR).
    #[arg(long, requires = "helm_script", requires = "workload_apiservers")]
    helm_engine: Option<PathBuf>,
    #[arg(long, requires = "helm_engine")]
    helm_script: Option<PathBuf>,
    /// Written with the control URL once ready.
    #[arg(long)]
    ready_file: Option<PathBuf>,
}

async fn run(args: Args) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: Box<dyn std::error::Error + Send + Sync>| format!("{what}: {err}")
    };
    let kc = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .map_err(|x| format!("{}: {x}", args.kubeconfig.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|x| format!("{}: {x}", args.kubeconfig.display()))?;
    let client = kube::Client::try_from(config).map_err(|x| x.to_string())?;
    let webhooks = if args.no_webhooks {
        None
    } else {
        let w = capi_sim::admission::Webhooks::serve()
            .await
            .map_err(e("webhooks"))?;
        w.register(&client, args.line, &args.webhook_name)
            .await
            .map_err(|x| format!("registering the webhooks: {x}"))?;
        Some(w)
    };
    let workloads = if args.workload_apiservers {
        let mut settings = capi_sim::workload::Settings::beside(&args.kubeconfig)
            .map_err(|x| format!("--workload-apiservers: {x}"))?;
        settings.line = args.line;
        settings.netns = args.workload_netns;
        Some(capi_sim::workload::Workloads::start(
            client.clone(),
            settings,
        ))
    } else {
        None
    };
    let releases = match (&workloads, &args.helm_engine, &args.helm_script) {
        (Some(w), Some(python), Some(script)) => Some(capi_sim::helm::Releases::start(
            client.clone(),
            args.line,
            w.clone(),
            capi_sim::helm::Engine::new(python.clone(), script.clone()),
        )),
        _ => None,
    };
    let cloud = args
        .openstack
        .then(|| capi_sim::cloud::Cloud::start(client.clone(), workloads.clone()));
    let controllers = (!args.no_controllers).then(|| {
        let mut o = capi_sim::Options::new(args.line);
        o.tick = std::time::Duration::from_millis(args.tick_ms);
        o.namespace_prefix = args.namespace_prefix.clone();
        o.concurrency = args.concurrency;
        o.workloads = workloads.clone();
        o.cloud = cloud.clone();
        o.releases = releases.clone();
        capi_sim::Controllers::start(client.clone(), o)
    });
    if let Some(c) = &controllers {
        c.wait_synced().await;
    }
    let proxy = match &args.proxy_kubeconfig {
        Some(out) => {
            let p = capi_sim::proxy::Proxy::start(&args.kubeconfig, args.proxy_listen)
                .await
                .map_err(e("proxy"))?;
            let kc = p
                .kubeconfig(&args.kubeconfig)
                .map_err(e("proxy kubeconfig"))?;
            std::fs::write(out, kc).map_err(|x| format!("{}: {x}", out.display()))?;
            println!("capi-sim proxy on https://{}", p.addr);
            Some(Arc::new(p))
        }
        None => None,
    };
    let control = capi_sim::control::Control {
        client: client.clone(),
        line: args.line,
        controllers,
        proxy,
        workloads: workloads.clone(),
        cloud: cloud.clone(),
        releases: releases.clone(),
    };
    let listener = tokio::net::TcpListener::bind(args.control)
        .await
        .map_err(|x| format!("control {}: {x}", args.control))?;
    let url = format!(
        "http://{}",
        listener.local_addr().map_err(|x| x.to_string())?
    );
    let server =
        tokio::spawn(
            async move { axum::serve(listener, capi_sim::control::router(control)).await },
        );
    println!("capi-sim ({:?}) control on {url}", args.line);
    if let Some(f) = &args.ready_file {
        std::fs::write(f, &url).map_err(|x| format!("{}: {x}", f.display()))?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|x| x.to_string())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        r = server => return Err(format!("control endpoint ended: {r:?}")),
    }
    if webhooks.is_some() {
        capi_sim::admission::Webhooks::unregister(&client, &args.webhook_name).await;
    }
    if let Some(w) = &workloads {
        w.stop();
    }
    if let Some(c) = &cloud {
        c.stop();
    }
    if let Some(r) = &releases {
        r.stop();
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .try_init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("capi-sim: {e}");
            ExitCode::from(2)
        }
    }
}
