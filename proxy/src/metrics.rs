//! Metrics (`magnum_capi_proxy_*`) and the HTTP endpoint: `/metrics`
//! (Prometheus text), `/healthz` (200 while the watches are synced and a
//! pass ran within three probe intervals; 503 with the reason otherwise).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Every metric of the process, registered once.
pub struct Metrics {
    pub registry: Registry,
    /// Connections accepted.
    pub connections: IntCounter,
    /// Connections not passed through, by reason.
    pub refused: IntCounterVec,
    /// Routed connections whose backend did not answer.
    pub dial_failures: IntCounter,
    pub bytes_up: IntCounter,
    pub bytes_down: IntCounter,
    /// Served clusters by state on this host: up, down, no_namespace, waiting.
    pub clusters: IntGaugeVec,
    /// Probes of a cluster's API (each cluster at most once per probe interval).
    pub probes: IntCounter,
    pub probe_failures: IntCounter,
    /// EndpointSlice writes by kind: publish, withdraw, stale.
    pub slice_writes: IntCounterVec,
    /// Management-cluster API errors by operation.
    pub api_errors: IntCounterVec,
    /// Watch errors by kind.
    pub watch_errors: IntCounterVec,
    pub synced: IntGauge,
    /// Unix time of the last pass.
    pub last_pass: IntGauge,
    pub pass_seconds: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(format!("magnum_capi_proxy_{name}"), help)
        .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(c.clone()));
    c
}

fn counter_vec(r: &Registry, name: &str, help: &str, label: &str) -> IntCounterVec {
    let c = IntCounterVec::new(
        Opts::new(format!("magnum_capi_proxy_{name}"), help),
        &[label],
    )
    .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(c.clone()));
    c
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(format!("magnum_capi_proxy_{name}"), help)
        .unwrap_or_else(|e| unreachable!("metric {name}: {e}"));
    let _ = r.register(Box::new(g.clone()));
    g
}

impl Default for Metrics {
    fn default() -> Metrics {
        let r = Registry::new();
        let clusters = IntGaugeVec::new(
            Opts::new(
                "magnum_capi_proxy_clusters",
                "Clusters without an API floating IP, by state on this host",
            ),
            &["state"],
        )
        .unwrap_or_else(|e| unreachable!("metric clusters: {e}"));
        let _ = r.register(Box::new(clusters.clone()));
        let pass_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "magnum_capi_proxy_pass_seconds",
                "One pass: plan, probes, routes, slices",
            )
            .buckets(vec![0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0]),
        )
        .unwrap_or_else(|e| unreachable!("metric pass_seconds: {e}"));
        let _ = r.register(Box::new(pass_seconds.clone()));
        Metrics {
            connections: counter(&r, "connections_total", "Connections accepted"),
            refused: counter_vec(
                &r,
                "refused_total",
                "Connections not passed through, by reason",
                "reason",
            ),
            dial_failures: counter(
                &r,
                "dial_failures_total",
                "Routed connections whose backend did not answer",
            ),
            bytes_up: counter(&r, "bytes_up_total", "Bytes from clients to clusters"),
            bytes_down: counter(&r, "bytes_down_total", "Bytes from clusters to clients"),
            clusters,
            probes: counter(
                &r,
                "probes_total",
                "Probes of a cluster's API from its namespace (each cluster once per probe interval)",
            ),
            probe_failures: counter(
                &r,
                "probe_failures_total",
                "Probes of a cluster's API from its namespace that failed",
            ),
            slice_writes: counter_vec(
                &r,
                "slice_writes_total",
                "EndpointSlice writes (publish, withdraw, stale)",
                "kind",
            ),
            api_errors: counter_vec(
                &r,
                "api_errors_total",
                "Management-cluster API errors, by operation",
                "operation",
            ),
            watch_errors: counter_vec(&r, "watch_errors_total", "Watch errors, by kind", "kind"),
            synced: gauge(&r, "watches_synced", "1 once every watch listed once"),
            last_pass: gauge(
                &r,
                "last_pass_timestamp_seconds",
                "When the last pass ended",
            ),
            pass_seconds,
            registry: r,
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    probe_interval: Duration,
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    let mut buf = Vec::new();
    let enc = TextEncoder::new();
    if let Err(e) = enc.encode(&s.metrics.registry.gather(), &mut buf) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    ([(header::CONTENT_TYPE, enc.format_type().to_string())], buf).into_response()
}

/// Healthy (pure): synced, and the last pass is recent.
pub fn health(
    synced: bool,
    last_pass: i64,
    now: i64,
    probe_interval: Duration,
) -> Result<(), String> {
    if !synced {
        return Err("the management cluster's watches have not synced yet".into());
    }
    let limit = (probe_interval.as_secs() as i64 * 3).max(10);
    if now - last_pass > limit {
        return Err(format!(
            "no pass for {} s (limit {limit} s)",
            now - last_pass
        ));
    }
    Ok(())
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    match health(
        s.metrics.synced.get() == 1,
        s.metrics.last_pass.get(),
        chrono::Utc::now().timestamp(),
        s.probe_interval,
    ) {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// Serve `/metrics` and `/healthz` on `listener`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    probe_interval: Duration,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(self::metrics))
        .route("/healthz", get(healthz))
        .with_state(AppState {
            metrics,
            probe_interval,
        });
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_once_synced_while_passes_run() {
        let i = Duration::from_secs(3);
        assert!(health(false, 100, 100, i).is_err());
        assert_eq!(health(true, 100, 105, i), Ok(()));
        let e = health(true, 100, 111, i).unwrap_err();
        assert!(e.contains("no pass for 11 s"), "{e}");
    }

    #[test]
    fn every_metric_is_registered_under_its_name() {
        let m = Metrics::default();
        m.refused.with_label_values(&["unknown_name"]).inc();
        m.clusters.with_label_values(&["up"]).set(2);
        let names: Vec<String> = m
            .registry
            .gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        for n in [
            "magnum_capi_proxy_connections_total",
            "magnum_capi_proxy_refused_total",
            "magnum_capi_proxy_clusters",
            "magnum_capi_proxy_pass_seconds",
            "magnum_capi_proxy_probes_total",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
        }
    }
}
