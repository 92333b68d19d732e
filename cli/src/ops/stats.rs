//! `outbox stats`, `outbox routes which` and `outbox config`: the queries are the store's, the
//! tables and JSON are made here.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use sqlx::PgPool;

use outbox_host::config::Settings;
use outbox_host::routing::{RouteDecision, RouteTable};
use outbox_host::store;

/// Print the status counts (and per-type failures and live workers) of the outbox.
pub async fn print_stats(pool: &PgPool, json: bool) -> anyhow::Result<()> {
    let counts = store::status_counts(pool).await?;
    let failed_by_type = store::failed_counts_by_type(pool, 20).await?;
    let workers = store::recent_workers(pool, 20).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "status": counts,
                "failed_by_type": failed_by_type,
                "workers": workers.iter().map(|w| serde_json::json!({"id": w.id, "host": w.host_name, "last_seen_seconds_ago": w.last_seen_seconds_ago})).collect::<Vec<_>>(),
            })
        );
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(vec!["status", "events"]);
    for (name, n) in [
        ("pending", counts.pending),
        ("processing", counts.processing),
        ("done", counts.done),
        ("failed", counts.failed),
        ("cancelled", counts.cancelled),
        ("pending > 60 s", counts.pending_older_than_60s),
    ] {
        table.add_row(vec![Cell::new(name), Cell::new(n)]);
    }
    println!("{table}");
    if !failed_by_type.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["failed event type", "events"]);
        for f in failed_by_type {
            t.add_row(vec![Cell::new(f.event_type), Cell::new(f.count)]);
        }
        println!("{t}");
    }
    if !workers.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["worker", "host", "last seen"]);
        for w in workers {
            t.add_row(vec![
                Cell::new(w.id),
                Cell::new(w.host_name),
                Cell::new(format!("{:.0} s ago", w.last_seen_seconds_ago)),
            ]);
        }
        println!("{t}");
    }
    Ok(())
}

/// Explain where `event_type` goes under `table`.
pub fn explain_route(table: &RouteTable, event_type: &str) -> String {
    match table.rule_for(event_type) {
        Some(rule) => format!(
            "{event_type} -> {} (rule \"{}\")",
            rule.queues.join(", "),
            rule.prefix
        ),
        None => match table.route(event_type) {
            RouteDecision::NoRoute(reason) => format!("{event_type}: {reason}"),
            other => format!("{event_type}: {other:?}"),
        },
    }
}

/// Settings as `KEY=value` lines, for `outbox config`.
pub fn describe_settings(s: &Settings) -> String {
    format!(
        "DATABASE_URL={}\nREDIS_URL={}\nOUTBOX_DISPATCHER_ENABLED={}\nOUTBOX_DISPATCH_INTERVAL_MS={}\nOUTBOX_DISPATCH_BATCH_SIZE={}\nOUTBOX_DISPATCH_CONCURRENCY={}\nOUTBOX_MAX_RETRIES={}\nOUTBOX_CLAIM_LEASE_MS={}\nOUTBOX_SHUTDOWN_GRACE_MS={}\nOUTBOX_DONE_RETENTION_HOURS={}\nOUTBOX_DONE_RETENTION_BATCH_SIZE={}\nOUTBOX_BACKOFF_SECONDS={}\nOUTBOX_MAX_PAYLOAD_BYTES={}\nOUTBOX_REDIS_PREFIX={}\nWORKER_QUEUE_GROUP={}",
        store::redact(&s.database_url),
        store::redact(&s.redis_url),
        s.dispatcher_enabled,
        s.dispatch_interval.as_millis(),
        s.dispatch_batch_size,
        s.dispatch_concurrency,
        s.max_retries,
        s.claim_lease.as_millis(),
        s.shutdown_grace.as_millis(),
        s.done_retention.as_secs() / 3600,
        s.done_retention_batch_size,
        s.backoff.iter().map(|d| d.as_secs().to_string()).collect::<Vec<_>>().join(","),
        s.max_payload_bytes,
        s.redis_prefix,
        s.worker_queue_group.as_deref().unwrap_or("(all)"),
    )
}
