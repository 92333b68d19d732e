//! HTTP: the operator endpoint — Prometheus metrics, liveness and readiness, and the web console.
//!
//! Owns the listener and `/metrics`, `/healthz` and `/readyz`, which only read; the console's
//! pages under `/console` are [`crate::console`]'s. An address that cannot be bound (another
//! process holds the port) stops the host at start with a [`BindError`] naming it: a host never
//! runs without the endpoint unless `OUTBOX_HTTP_ADDR` is empty on purpose. Bound anywhere but
//! loopback it warns: the console
//! signs in with tokens and sets a session cookie, which must not cross a network in clear.
//! Every path but `/healthz` and `/readyz` answers only the allowed `Host`s
//! ([`crate::allowed_hosts`]), and the console sees each request's client address (its sign-in
//! limit counts per address).

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution (seconds).
    Histogram,
}

/// Every metric the host exports, with its `# HELP` text: described when the recorder is
/// installed, so `/metrics` carries a `# HELP` line for each.
pub const METRICS: &[(&str, MetricKind, &str)] = &[
    (
        "outbox_alerts_fired_total",
        MetricKind::Counter,
        "Alerts that started firing, by alert.",
    ),
    (
        "outbox_alert_dead_hosts",
        MetricKind::Gauge,
        "Hosts whose heartbeat stopped (alerting host only).",
    ),
    (
        "outbox_alert_failed_events",
        MetricKind::Gauge,
        "Events in status failed, as the alert check saw them.",
    ),
    (
        "outbox_alert_firing",
        MetricKind::Gauge,
        "1 while an alert fires, 0 otherwise, by alert (alerting host only).",
    ),
    (
        "outbox_alert_pending_old_events",
        MetricKind::Gauge,
        "Pending events older than 60 s, as the alert check saw them.",
    ),
    (
        "outbox_broker_messages_total",
        MetricKind::Counter,
        "Messages handed to NATS JetStream or RabbitMQ, by sink, queue and outcome (published, confirmed, duplicates, failed, unavailable).",
    ),
    (
        "outbox_capability_checks_total",
        MetricKind::Counter,
        "Capability checks made for plugin host calls, by capability.",
    ),
    (
        "outbox_capability_denied_total",
        MetricKind::Counter,
        "Capability checks denied, by capability.",
    ),
    (
        "outbox_contract_rejected_total",
        MetricKind::Counter,
        "Events refused because they break their event contract.",
    ),
    (
        "outbox_contract_unregistered_total",
        MetricKind::Counter,
        "Events of a type no contract registers.",
    ),
    (
        "outbox_dead_letter_entries",
        MetricKind::Gauge,
        "Entries in each handler-bound queue's dead-letter stream.",
    ),
    (
        "outbox_dispatch_batch_seconds",
        MetricKind::Histogram,
        "Time to dispatch one claimed batch (route, enqueue, record).",
    ),
    (
        "outbox_dispatch_errors_total",
        MetricKind::Counter,
        "Dispatch batches that failed, by stage.",
    ),
    (
        "outbox_dispatch_records_on_claim_total",
        MetricKind::Counter,
        "Dispatch batches whose outcomes the next claim's statement recorded.",
    ),
    (
        "outbox_events_dispatched_total",
        MetricKind::Counter,
        "Events handed to every destination queue.",
    ),
    (
        "outbox_events_failed",
        MetricKind::Gauge,
        "Events in status failed.",
    ),
    (
        "outbox_events_failed_total",
        MetricKind::Counter,
        "Events that failed for good (retries exhausted or no route).",
    ),
    (
        "outbox_events_pending",
        MetricKind::Gauge,
        "Events in status pending (scheduled ones included).",
    ),
    (
        "outbox_events_pending_older_than_60s",
        MetricKind::Gauge,
        "Pending events due for more than 60 s (events scheduled for later are not counted).",
    ),
    (
        "outbox_events_retried_total",
        MetricKind::Counter,
        "Dispatch attempts that failed and will be retried.",
    ),
    (
        "outbox_handler_seconds",
        MetricKind::Histogram,
        "Time one handler call took, by queue.",
    ),
    (
        "outbox_infra_retries_total",
        MetricKind::Counter,
        "Retries after a PostgreSQL, Redis, NATS or RabbitMQ blip (no attempt counted), by service and stage.",
    ),
    (
        "outbox_invoke_jobs_refused_total",
        MetricKind::Counter,
        "Plugin invoke jobs refused (forged or unknown subscriber).",
    ),
    (
        "outbox_lease_recovered_total",
        MetricKind::Counter,
        "Events claimed again after another host's lease expired.",
    ),
    (
        "outbox_no_route_total",
        MetricKind::Counter,
        "Events no route matched (they fail).",
    ),
    (
        "outbox_ordering_blocked_keys",
        MetricKind::Gauge,
        "Ordering keys whose next event waits behind a retry.",
    ),
    (
        "outbox_ordering_oldest_blocked_seconds",
        MetricKind::Gauge,
        "Age of the oldest ordering key blocked behind a retry.",
    ),
    (
        "outbox_plugin_call_seconds",
        MetricKind::Histogram,
        "Time one plugin call took, by plugin.",
    ),
    (
        "outbox_plugin_calls_total",
        MetricKind::Counter,
        "Plugin calls, by plugin.",
    ),
    (
        "outbox_plugin_errors_total",
        MetricKind::Counter,
        "Plugin calls that failed (trap, time or memory limit, bad answer), by plugin.",
    ),
    (
        "outbox_plugin_log_dropped_total",
        MetricKind::Counter,
        "Plugin log lines dropped over the per-call limit, by plugin.",
    ),
    (
        "outbox_plugin_timeouts_total",
        MetricKind::Counter,
        "Plugin calls cut at their time limit, by plugin.",
    ),
    (
        "outbox_publish_generation_refused_total",
        MetricKind::Counter,
        "Handler publishes refused past OUTBOX_MAX_EVENT_GENERATION (each dead-letters its delivery), by plugin.",
    ),
    (
        "outbox_queue_lag_entries",
        MetricKind::Gauge,
        "Entries of each stream queue not delivered to a receiver yet (alerting host only).",
    ),
    (
        "outbox_queue_length",
        MetricKind::Gauge,
        "Entries in each queue's stream, or BullMQ jobs waiting (alerting host only).",
    ),
    (
        "outbox_queue_oldest_entry_age_seconds",
        MetricKind::Gauge,
        "Age of each stream queue's oldest unfinished entry, 0 when none (alerting host only).",
    ),
    (
        "outbox_queue_unacked_entries",
        MetricKind::Gauge,
        "Entries of each stream queue delivered and not acknowledged (alerting host only).",
    ),
    (
        "outbox_queue_memory_bytes",
        MetricKind::Gauge,
        "Bytes each stream queue takes in Redis, sampled (alerting host only).",
    ),
    (
        "outbox_queue_paused",
        MetricKind::Gauge,
        "1 while a queue is paused (outbox queue pause), as this host last read it; 0 once resumed.",
    ),
    (
        "outbox_queue_rate_limited_total",
        MetricKind::Counter,
        "Reads of a queue cut short by its rate limit (fewer entries may start than handlers are free).",
    ),
    (
        "outbox_queue_trimmed_total",
        MetricKind::Counter,
        "Entries trimmed from a stream queue by its max_len.",
    ),
    (
        "outbox_queue_trimmed_unread_total",
        MetricKind::Counter,
        "Entries max_len trimmed that a consumer group had not read, by queue and group.",
    ),
    (
        "outbox_queue_trimmed_unacked_total",
        MetricKind::Counter,
        "Entries max_len trimmed that a consumer group had read and not acknowledged, by queue and group.",
    ),
    (
        "outbox_receipts_backlog_full",
        MetricKind::Gauge,
        "1 while a queue's receiver reads nothing new because the receipts stream is at OUTBOX_RECEIPTS_STREAM_MAX_LEN (the receipt writer is behind).",
    ),
    (
        "outbox_receipts_backlog_holds_total",
        MetricKind::Counter,
        "Times a queue's receiver stopped reading because the receipts stream reached OUTBOX_RECEIPTS_STREAM_MAX_LEN (no receipt is dropped).",
    ),
    (
        "outbox_receipts_written_total",
        MetricKind::Counter,
        "Handler receipts written, by result.",
    ),
    (
        "outbox_receiver_duplicates_total",
        MetricKind::Counter,
        "Deliveries skipped because their handler already finished them.",
    ),
    (
        "outbox_receiver_handled_total",
        MetricKind::Counter,
        "Queue entries handled, by queue and outcome.",
    ),
    (
        "outbox_receiver_lost_claims_total",
        MetricKind::Counter,
        "Entries whose claim another receiver took over mid-handling.",
    ),
    (
        "outbox_receiver_reclaimed_total",
        MetricKind::Counter,
        "Entries reclaimed from a receiver that stopped acknowledging.",
    ),
    (
        "outbox_receiver_taken_over_total",
        MetricKind::Counter,
        "Entries taken from the receivers of a host whose heartbeat stopped, before the receiver lease.",
    ),
    (
        "outbox_receiver_recovered_total",
        MetricKind::Counter,
        "Entries recovered after a receiver restart.",
    ),
    (
        "outbox_redis_cluster_connections_replaced_total",
        MetricKind::Counter,
        "Redis Cluster connections replaced by a fresh one after a request on them timed out.",
    ),
    (
        "outbox_redis_trimmed_total",
        MetricKind::Counter,
        "Entries trimmed from a Redis structure at its cap, by queue and kind (dead_letter: the oldest dead letters beyond OUTBOX_DEAD_LETTER_MAX_LEN).",
    ),
    (
        "outbox_retry_set_full_total",
        MetricKind::Counter,
        "Handler retries dead-lettered instead of scheduled because the queue's retry set held OUTBOX_RETRY_SET_MAX_LEN entries.",
    ),
    (
        "outbox_reload_errors_total",
        MetricKind::Counter,
        "Reloads rejected (the previous version keeps serving).",
    ),
    (
        "outbox_reloads_total",
        MetricKind::Counter,
        "Reloads applied, by what changed (routes, plugin or contracts).",
    ),
    (
        "outbox_retention_deleted_total",
        MetricKind::Counter,
        "Rows retention deleted, by kind (done_events, failed_events, cancelled_events, receipts, history).",
    ),
    (
        "outbox_stale_claims_released_total",
        MetricKind::Counter,
        "Claims of hosts whose heartbeat stopped, released before their lease ended.",
    ),
    (
        "outbox_stalled_entries",
        MetricKind::Gauge,
        "Entries of each handler-bound queue unacknowledged longer than the receiver lease.",
    ),
];

/// The process-wide Prometheus recorder (installed on first use, with every metric of
/// [`METRICS`] described).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => {
                for (name, kind, help) in METRICS {
                    match kind {
                        MetricKind::Counter => metrics::describe_counter!(*name, *help),
                        MetricKind::Gauge => metrics::describe_gauge!(*name, *help),
                        MetricKind::Histogram => metrics::describe_histogram!(*name, *help),
                    }
                }
                Some(handle)
            }
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
    redis: Option<crate::redis_conn::RedisTarget>,
}

/// The HTTP endpoint's address could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve the console, /metrics, /healthz and /readyz on OUTBOX_HTTP_ADDR={addr}: {error} (if another process holds the port, stop it or choose another address; OUTBOX_HTTP_ADDR set to the empty string runs without the endpoint)")]
pub struct BindError {
    /// The address, as configured.
    pub addr: String,
    /// Why it could not be bound (part of the message, so not a separate source).
    pub error: std::io::Error,
}

/// Bind the endpoint's listener on `addr` (before the host starts its work, so a taken port
/// stops it at once).
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, BindError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| BindError {
            addr: addr.to_string(),
            error,
        })
}

/// Serve the endpoint (and `console`, if given) on `listener`, bound by [`bind`] to `addr`,
/// until shutdown.
pub async fn serve(
    listener: tokio::net::TcpListener,
    addr: String,
    pool: PgPool,
    redis_url: String,
    console: Option<crate::console::Console>,
    shutdown: CancellationToken,
) {
    prometheus();
    let probe = Probe {
        pool,
        redis: crate::redis_conn::RedisTarget::parse(&redis_url).ok(),
    };
    let mut app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(probe);
    let allowed = match (&console, listener.local_addr()) {
        (Some(console), Ok(local)) => console.allowed_hosts(local),
        (None, Ok(local)) => crate::allowed_hosts::AllowedHosts::new(local, "", &[]),
        (_, Err(e)) => {
            tracing::warn!(%addr, error = %e, "metrics endpoint not started: no local address");
            return;
        }
    };
    if let Some(console) = console {
        app = app.merge(console.router());
    }
    let app = app.layer(axum::middleware::from_fn_with_state(
        std::sync::Arc::new(allowed),
        crate::allowed_hosts::check_host,
    ));
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz and the console at /console");
    if !crate::console::is_loopback(&addr) {
        tracing::warn!(%addr, "the console and /metrics listen beyond loopback: put a TLS-terminating proxy in front, or operator tokens and session cookies cross the network in clear");
    }
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
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

/// `GET /readyz`: 200 while PostgreSQL and Redis both answer. The reason for a failure goes to
/// the log, not to the caller: the probe is often reachable from further than the host's logs,
/// and a driver's error can name addresses and users.
async fn ready(State(probe): State<Probe>) -> (StatusCode, String) {
    if let Err(e) = crate::store::ping(&probe.pool).await {
        tracing::warn!("readiness: {e}");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "postgres: unreachable\n".into(),
        );
    }
    let redis = match &probe.redis {
        Some(target) => target.ping().await.map_err(|e| e.to_string()),
        None => Err("no Redis configured".into()),
    };
    if let Err(e) = redis {
        tracing::warn!("readiness: redis: {e}");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "redis: unreachable\n".into(),
        );
    }
    (StatusCode::OK, "ready\n".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric name the host's code records is in [`METRICS`] (so `/metrics` has a
    /// `# HELP` line for it), and the catalogue names nothing the code no longer records.
    #[test]
    fn every_metric_the_code_records_is_described() {
        fn sources(dir: &std::path::Path, out: &mut String) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    sources(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("http.rs")
                {
                    out.push_str(&std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut code = String::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut code,
        );
        let mut recorded = std::collections::BTreeSet::new();
        for macro_name in ["counter!(", "gauge!(", "histogram!("] {
            for piece in code.split(macro_name).skip(1) {
                let name = piece.trim_start().trim_start_matches('"');
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name.starts_with("outbox_") {
                    recorded.insert(name);
                }
            }
        }
        for quoted in code
            .split('"')
            .filter(|s| s.starts_with("outbox_") && s.ends_with("_total"))
        {
            recorded.insert(quoted.to_string());
        }
        let described: std::collections::BTreeSet<String> =
            METRICS.iter().map(|(n, _, _)| n.to_string()).collect();
        let missing: Vec<_> = recorded.difference(&described).collect();
        assert!(
            missing.is_empty(),
            "metrics without a description: {missing:?}"
        );
        let stale: Vec<_> = described.difference(&recorded).collect();
        assert!(
            stale.is_empty(),
            "described metrics the code never records: {stale:?}"
        );
    }
}
