//! HTTP: the operator endpoint — Prometheus metrics, liveness and readiness, and the web console.
//!
//! Owns the listener and `/metrics`, `/healthz` and `/readyz`, which only read; the console's
//! pages under `/console` are [`crate::console`]'s. A port that cannot be bound is logged and
//! the host goes on without the endpoint. Bound anywhere but loopback it warns: the console
//! signs in with tokens and sets a session cookie, which must not cross a network in clear.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process-wide Prometheus recorder (installed on first use).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::warn!(error = %e, "metrics recorder not installed");
                None
            }
        })
        .as_ref()
}

#[derive(Clone)]
struct Probe {
    pool: PgPool,
    redis: Option<redis::Client>,
}

/// Serve the endpoint (and `console`, if given) on `addr` until shutdown.
pub async fn serve(
    addr: String,
    pool: PgPool,
    redis_url: String,
    console: Option<crate::console::Console>,
    shutdown: CancellationToken,
) {
    prometheus();
    let probe = Probe {
        pool,
        redis: redis::Client::open(redis_url.as_str()).ok(),
    };
    let mut app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(probe);
    if let Some(console) = console {
        app = app.merge(console.router());
    }
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(%addr, error = %e, "metrics endpoint not started");
            return;
        }
    };
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz and the console at /console");
    if !crate::console::is_loopback(&addr) {
        tracing::warn!(%addr, "the console and /metrics listen beyond loopback: put a TLS-terminating proxy in front, or operator tokens and session cookies cross the network in clear");
    }
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(e) = served {
        tracing::warn!(error = %e, "metrics endpoint stopped");
    }
}

async fn metrics() -> (StatusCode, String) {
    match prometheus() {
        Some(h) => (StatusCode::OK, h.render()),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder unavailable\n".into(),
        ),
    }
}

async fn ready(State(probe): State<Probe>) -> (StatusCode, String) {
    let db = sqlx::query("SELECT 1").execute(&probe.pool).await;
    let redis_ok = match &probe.redis {
        Some(client) => match client
            .get_multiplexed_async_connection_with_config(&crate::reconnect::redis_reader_config(
                std::time::Duration::ZERO,
            ))
            .await
        {
            Ok(mut c) => redis::cmd("PING")
                .query_async::<String>(&mut c)
                .await
                .is_ok(),
            Err(_) => false,
        },
        None => false,
    };
    match (db, redis_ok) {
        (Ok(_), true) => (StatusCode::OK, "ready\n".into()),
        (Err(e), _) => (StatusCode::SERVICE_UNAVAILABLE, format!("postgres: {e}\n")),
        (_, false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "redis: unreachable\n".into(),
        ),
    }
}
