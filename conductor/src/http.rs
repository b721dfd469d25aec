//! `/metrics` (Prometheus text), `/healthz` (the process is alive) and
//! `/readyz` (consuming from the broker; 503 otherwise).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;
use crate::server::Health;

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Arc<Health>,
    server_id: String,
    topic: String,
}

async fn metrics_handler(State(s): State<AppState>) -> impl IntoResponse {
    crate::memory::export_heap(&s.metrics.heap_bytes);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
}

async fn healthz() -> impl IntoResponse {
    "ok\n"
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let consuming = s.health.consuming.load(Ordering::SeqCst);
    let body = format!(
        "{{\"amqp\": \"{}\", \"topic\": \"{}\", \"server\": \"{}\"}}\n",
        if consuming {
            "consuming"
        } else {
            "disconnected"
        },
        s.topic,
        s.server_id
    );
    let code = if consuming {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, [(header::CONTENT_TYPE, "application/json")], body)
}

/// Bind the endpoint (errors are startup errors) and serve it in the background.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Arc<Health>,
    server_id: String,
    topic: String,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            metrics,
            health,
            server_id,
            topic,
        });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics endpoint stopped");
        }
    });
    Ok(bound)
}
