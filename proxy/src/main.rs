//! `magnum-capi-proxy --advertise-address IP:PORT [--listen ADDR] ...`: on
//! a network host (the DHCP agent's for ML2/OVS and Linux bridge, every
//! compute host for OVN), serve the management cluster's way into the
//! workload clusters without an API floating IP whose tenant network has
//! a namespace here. See `docs/architecture.md` (API proxy).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use clap::Parser;

use capi_proxy::controller::{Controller, Settings};
use capi_proxy::metrics::Metrics;
use capi_proxy::route::{self, Routes};
use capi_proxy::serve::Proxy;

#[derive(Parser, Debug)]
#[command(name = "magnum-capi-proxy", version, about)]
struct Args {
    /// Where the management cluster's controllers connect (default: the
    /// --advertise-address, the host's management address: not every
    /// address, whose port 6443 the management cluster's own API frontend
    /// may hold on a host that has both).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The address and port the management cluster reaches this proxy at
    /// (published in the EndpointSlices); openstack-ansible's role gives
    /// the host's management address and port 44355.
    #[arg(long)]
    advertise_address: std::net::SocketAddr,
    /// This host's name in the slices and its Lease (default: the host name).
    #[arg(long)]
    host: Option<String>,
    /// The management cluster's kubeconfig (default: KUBECONFIG, then
    /// ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Where the proxy hosts' Leases live (the conductor's `[capi] lease_namespace`).
    #[arg(long, default_value = "magnum-system")]
    lease_namespace: String,
    /// Prometheus `/metrics` and `/healthz`.
    #[arg(long, default_value = "127.0.0.1:9325")]
    metrics_listen: std::net::SocketAddr,
    /// Where network namespaces are named.
    #[arg(long, default_value = capi_proxy::netns::NETNS_DIR)]
    netns_dir: std::path::PathBuf,
    /// Seconds between probes of each cluster's API.
    #[arg(long, default_value_t = 3)]
    probe_interval: u64,
    /// Seconds a probe's connect may take.
    #[arg(long, default_value_t = 2)]
    dial_timeout: u64,
    /// Probes in a row that must fail before this host's slice is withdrawn.
    #[arg(long, default_value_t = 2)]
    failures: u32,
    /// Seconds this host's Lease lasts unrenewed (then other hosts delete its slices).
    #[arg(long, default_value_t = 30)]
    lease_duration: u64,
    /// A route by hand, kept under the watched ones (debugging).
    #[arg(long = "route", value_name = "NAME=NETNS@ADDRESS:PORT")]
    routes: Vec<String>,
}

/// Why the management cluster would refuse `ip` as an EndpointSlice
/// address (its validation, `ValidateEndpointIP`: no unspecified,
/// loopback, link-local or multicast address), if it would.
fn unpublishable(ip: std::net::IpAddr) -> Option<&'static str> {
    use std::net::IpAddr;
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if link_local {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else {
        None
    }
}

/// A host name usable as a label value: at most 63 of `[a-z0-9.-]`,
/// starting and ending alphanumeric.
fn valid_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 63
        && h.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && h.starts_with(|c: char| c.is_ascii_alphanumeric())
        && h.ends_with(|c: char| c.is_ascii_alphanumeric())
}

async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let cfg = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| anyhow::anyhow!("the management cluster's kubeconfig: {e}"))?,
    };
    kube::Client::try_from(cfg).map_err(|e| anyhow::anyhow!("the management cluster: {e}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // Colour only for a person at a terminal: a journal or a file gets
        // plain text.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = Args::parse();
    let host = match &args.host {
        Some(h) => h.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_err(|e| anyhow::anyhow!("/proc/sys/kernel/hostname: {e} (give --host)"))?
            .trim()
            .to_ascii_lowercase(),
    };
    if !valid_host(&host) {
        anyhow::bail!(
            "host name {host:?} is not a label value (at most 63 of a-z, 0-9, '.', '-'): give --host"
        );
    }
    if let Some(why) = unpublishable(args.advertise_address.ip()) {
        anyhow::bail!(
            "--advertise-address {}: a {why} address cannot be an EndpointSlice's (the \
             apiserver refuses it); give the address the management cluster reaches this host at",
            args.advertise_address
        );
    }
    let mut routes = Routes::new();
    for spec in &args.routes {
        let (name, backend) = route::parse(spec).map_err(anyhow::Error::msg)?;
        routes.insert(&name, backend);
    }
    let client = client(args.kubeconfig.as_deref()).await?;
    let metrics = Arc::new(Metrics::default());
    let listen = args.listen.unwrap_or(args.advertise_address);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("listening on {listen}: {e}"))?;
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .map_err(|e| anyhow::anyhow!("listening on {}: {e}", args.metrics_listen))?;
    let settings = Settings {
        host: host.clone(),
        advertise: args.advertise_address,
        netns_dir: args.netns_dir.clone(),
        lease_namespace: args.lease_namespace.clone(),
        probe_interval: Duration::from_secs(args.probe_interval.max(1)),
        dial_timeout: Duration::from_secs(args.dial_timeout.max(1)),
        failures: args.failures.max(1),
        lease_duration: Duration::from_secs(args.lease_duration.max(3)),
    };
    tracing::info!(
        %host,
        %listen,
        advertise = %args.advertise_address,
        metrics = %args.metrics_listen,
        withdraw_bound_s = settings.withdraw_bound().as_secs(),
        "serving"
    );
    let table = Arc::new(RwLock::new(routes.clone()));
    let proxy = Proxy {
        routes: table.clone(),
        netns_dir: args.netns_dir,
        metrics: metrics.clone(),
    };
    let mut controller = Controller::new(client, settings.clone(), table, metrics.clone());
    controller.static_routes = routes;
    let http = capi_proxy::metrics::serve(metrics_listener, metrics, settings.probe_interval);
    // systemd stops it with SIGTERM, a person with ^C: either way the
    // controller withdraws this host's slices and releases its Lease
    // before the process ends (connections are served meanwhile).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("handling SIGTERM: {e}"))?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        }
    };
    tokio::select! {
        r = proxy.serve(listener) => r.map_err(|e| anyhow::anyhow!("the listener: {e}"))?,
        r = http => r.map_err(|e| anyhow::anyhow!("the metrics listener: {e}"))?,
        () = controller.run(stop) => tracing::info!("stopped"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_addresses_an_endpointslice_may_hold_are_advertised() {
        let bad = |s: &str| super::unpublishable(s.parse().unwrap());
        assert_eq!(bad("127.0.0.1"), Some("loopback"));
        assert_eq!(bad("0.0.0.0"), Some("unspecified"));
        assert_eq!(bad("169.254.169.254"), Some("link-local"));
        assert_eq!(bad("fe80::1"), Some("link-local"));
        assert_eq!(bad("224.0.0.1"), Some("multicast"));
        assert_eq!(bad("198.18.0.1"), None);
        assert_eq!(bad("2001:db8::1"), None);
    }

    #[test]
    fn host_names_must_be_label_values() {
        assert!(super::valid_host("network-1.example"));
        assert!(!super::valid_host("Network_1"));
        assert!(!super::valid_host("-a"));
        assert!(!super::valid_host(&"a".repeat(64)));
    }
}
