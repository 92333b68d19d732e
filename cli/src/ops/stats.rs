//! `outbox stats` and `outbox config`: the queries are the store's, the
//! tables and JSON are made here.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use sqlx::PgPool;

use outbox_host::config::{Config, ShownSetting};
use outbox_host::queue::{
    queue_backlogs_with_consumers, BullmqCounts, QueueBacklog, QueueKeys, StreamConsumers,
};
use outbox_host::store;

/// `outbox stats [--json]`: the status counts (and per-type failures, ordering keys blocked by a
/// retry, live workers, and each queue of `config` with its sink and what it holds in Redis) of
/// the outbox. Viewer role.
pub async fn stats(config: &Config, json: bool) -> anyhow::Result<()> {
    let pool = super::open_store(config).await?;
    super::require(&pool, store::Role::Viewer, "stats").await?;
    print_stats(&pool, config, json).await
}

/// Print what [`stats`] shows, read with `pool`.
async fn print_stats(pool: &PgPool, config: &Config, json: bool) -> anyhow::Result<()> {
    let queues = read_queue_backlogs(config).await;
    let counts = store::status_counts(pool).await?;
    let failed_by_type = store::failed_counts_by_type(pool, 20).await?;
    let ordering = store::ordering_blocked(pool, 20).await?;
    let workers = store::recent_workers(pool, 20).await?;
    let stale = store::stale_hosts(pool, store::STALE_HOST_AFTER).await?;
    let handlers = store::receipt_counts_by_handler(pool, 50).await?;
    let paused = store::paused_queues(pool).await?;
    if json {
        out!(
            "{}",
            serde_json::json!({
                "status": counts,
                "failed_by_type": failed_by_type,
                "handlers": handlers,
                "ordering": ordering,
                "queues": queues.as_ref().ok(),
                "queues_error": queues.as_ref().err().map(|e| format!("{e:#}")),
                "workers": workers.iter().map(|w| serde_json::json!({"id": w.id, "host": w.host_name, "last_seen_seconds_ago": w.last_seen_seconds_ago, "stale": w.last_seen_seconds_ago > store::STALE_HOST_AFTER.as_secs_f64()})).collect::<Vec<_>>(),
                "stale_hosts": stale,
                "paused_queues": paused,
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
    out!("{table}");
    if !failed_by_type.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["failed event type", "events"]);
        for f in failed_by_type {
            t.add_row(vec![Cell::new(f.event_type), Cell::new(f.count)]);
        }
        out!("{t}");
    }
    if !handlers.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "handler",
            "ok",
            "skipped (unsupported version)",
            "retry",
            "dead",
        ]);
        for h in handlers {
            t.add_row(vec![
                Cell::new(h.handler),
                Cell::new(h.ok),
                Cell::new(h.skipped_unsupported_version),
                Cell::new(h.retry),
                Cell::new(h.dead),
            ]);
        }
        out!("{t}");
    }
    if ordering.blocked_keys > 0 {
        out!(
            "ordering keys blocked by a retry: {} ({} events held back, oldest waiting {:.0} s)",
            ordering.blocked_keys,
            ordering.held_back_events,
            ordering.oldest_blocked_seconds.unwrap_or_default()
        );
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "ordering key",
            "head event",
            "attempts",
            "retry in",
            "held back",
            "oldest waiting",
            "last error",
        ]);
        for k in &ordering.keys {
            t.add_row(vec![
                Cell::new(&k.ordering_key),
                Cell::new(k.head_id),
                Cell::new(k.head_attempts),
                Cell::new(format!("{:.0} s", k.retry_in_seconds)),
                Cell::new(k.held_back_events),
                Cell::new(format!("{:.0} s", k.oldest_blocked_seconds)),
                Cell::new(k.head_last_error.as_deref().unwrap_or("")),
            ]);
        }
        out!("{t}");
    }
    match &queues {
        Ok(queues) if !queues.is_empty() => {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
                "queue",
                "sink",
                "waiting / in stream",
                "memory",
                "unacked",
                "lag",
                "dead letters",
                "oldest unfinished",
                "active",
                "delayed",
                "completed",
                "failed",
                "broker published / confirmed / failed",
            ]);
            for q in queues {
                let bullmq = |pick: fn(&BullmqCounts) -> u64| {
                    q.bullmq
                        .as_ref()
                        .map(pick)
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                };
                let stream = |pick: fn(&StreamConsumers) -> Option<String>| {
                    q.consumers.as_ref().and_then(pick).unwrap_or_default()
                };
                t.add_row(vec![
                    Cell::new(&q.queue),
                    Cell::new(q.sink),
                    Cell::new(q.waiting),
                    Cell::new(q.memory_bytes.map(human_bytes).unwrap_or_default()),
                    Cell::new(stream(|c| c.pending.map(|n| n.to_string()))),
                    Cell::new(stream(|c| c.lag.map(|n| n.to_string()))),
                    Cell::new(stream(|c| Some(c.dead_letters.to_string()))),
                    Cell::new(stream(|c| {
                        c.oldest_entry_age_seconds.map(|s| format!("{s:.0} s"))
                    })),
                    Cell::new(bullmq(|c| c.active)),
                    Cell::new(bullmq(|c| c.delayed)),
                    Cell::new(bullmq(|c| c.completed)),
                    Cell::new(bullmq(|c| c.failed)),
                    Cell::new(q.broker.map(|b| b.summary()).unwrap_or_default()),
                ]);
            }
            out!("{t}");
            for q in queues {
                let Some(trimmed) = &q.trimmed else {
                    continue;
                };
                let lost: Vec<String> = trimmed
                    .unread
                    .iter()
                    .chain(trimmed.unacked.iter())
                    .filter(|(_, n)| **n > 0)
                    .map(|(group, _)| group.clone())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .map(|group| {
                        format!(
                            "{group}: {} not read, {} not acknowledged",
                            trimmed.unread.get(&group).copied().unwrap_or(0),
                            trimmed.unacked.get(&group).copied().unwrap_or(0)
                        )
                    })
                    .collect();
                if lost.is_empty() {
                    out!(
                        "{}: max_len trimmed {} entries, all finished by every consumer group",
                        q.queue,
                        trimmed.entries
                    );
                } else {
                    eprintln!(
                        "warning: {}: max_len trimmed {} entries, some before consumers finished them ({})",
                        q.queue,
                        trimmed.entries,
                        lost.join("; ")
                    );
                }
            }
        }
        Ok(_) => {}
        Err(e) => eprintln!("warning: queues not shown: {e:#}"),
    }
    for p in &paused {
        eprintln!(
            "warning: queue {} is paused (since {}, by {}{}): its receivers read nothing new; `outbox queue resume {}` resumes it",
            p.queue,
            p.paused_at.format("%Y-%m-%d %H:%M:%S UTC"),
            p.paused_by,
            p.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default(),
            p.queue
        );
    }
    if !workers.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["worker", "host", "last seen"]);
        for w in workers {
            let stale = w.last_seen_seconds_ago > store::STALE_HOST_AFTER.as_secs_f64();
            t.add_row(vec![
                Cell::new(w.id),
                Cell::new(w.host_name),
                Cell::new(format!(
                    "{:.0} s ago{}",
                    w.last_seen_seconds_ago,
                    if stale { " (stale)" } else { "" }
                )),
            ]);
        }
        out!("{t}");
    }
    for host in &stale {
        if host.held_claims > 0 {
            eprintln!(
                "warning: host {} is silent for {:.0} s and still holds {} claims: a live host releases them at its next heartbeat, or run `outbox release --worker {}`",
                host.worker, host.silent_seconds, host.held_claims, host.worker
            );
        }
    }
    Ok(())
}

/// `bytes` as B, KiB, MiB or GiB.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = outbox_host::numeric::figure(bytes);
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Every queue `config` names, with its sink and what it holds (one Redis pipeline, at most 3 s).
async fn read_queue_backlogs(config: &Config) -> anyhow::Result<Vec<QueueBacklog>> {
    let queues = config.routes.queue_names();
    if queues.is_empty() {
        return Ok(Vec::new());
    }
    let read = async {
        let mut conn = outbox_host::redis_conn::connect_shared(
            &config.settings.redis_url,
            &config.settings.redis_prefix,
        )
        .await?;
        let keys =
            QueueKeys::for_redis_url(&config.settings.redis_prefix, &config.settings.redis_url);
        queue_backlogs_with_consumers(&mut conn, &keys, &config.routes, &queues).await
    };
    let redis = store::redact(&config.settings.redis_url);
    match tokio::time::timeout(std::time::Duration::from_secs(3), read).await {
        Ok(result) => result.map_err(|e| anyhow::anyhow!("Redis at {redis}: {e}")),
        Err(_) => anyhow::bail!("Redis at {redis} did not answer within 3 s"),
    }
}

/// Why an event of `event_type` would fail with "no route matched", if the routes file's table
/// has no rule for it and no `[router.overrides]` prefix could send it to a router plugin.
pub fn no_route_warning(config: &Config, event_type: &str) -> Option<String> {
    if config.path.is_none() && config.routes.routes.is_empty() {
        return None; // no routes known (the routes file could not be read): nothing to judge
    }
    let table = config.routes.route_table();
    if !matches!(
        table.route(event_type),
        outbox_host::routing::RouteDecision::NoRoute(_)
    ) {
        return None;
    }
    let overridden = config
        .routes
        .router
        .overrides
        .keys()
        .any(|prefix| event_type.starts_with(prefix.as_str()));
    match config.routes.router.plugin.as_str() {
        "native" if !overridden => Some(format!(
            "no route matches {event_type}: the event will be stored, then fail at dispatch with \"no route matched\" (add a [routes] rule, or check `outbox routes which {event_type}`)"
        )),
        "native" => None,
        plugin => (!overridden).then(|| format!(
            "no [routes] rule matches {event_type}; unless the router plugin {plugin} routes it, the event will fail at dispatch (check `outbox routes which {event_type}`)"
        )),
    }
}

/// `outbox config`: the routes file in force, then every setting with its source.
pub fn print_config(config: &Config) -> anyhow::Result<()> {
    out!(
        "# routes file: {}",
        config
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "<built-in>".into())
    );
    out!("{}", describe_settings(config));
    Ok(())
}

/// Every setting as a `KEY=value  # source` line (env, file or default), for `outbox config`;
/// URL passwords are redacted.
fn describe_settings(config: &Config) -> String {
    render_settings(&config.settings.describe(&config.routes.settings))
}

/// Lay out settings as aligned `KEY=value  # source` lines.
fn render_settings(shown: &[ShownSetting]) -> String {
    let assignments: Vec<String> = shown
        .iter()
        .map(|s| format!("{}={}", s.env, s.value))
        .collect();
    let width = assignments.iter().map(String::len).max().unwrap_or(0);
    assignments
        .iter()
        .zip(shown)
        .map(|(assignment, s)| match &s.clamped_from {
            Some(written) => format!(
                "{assignment:<width$}  # {}; WARNING: {written} is out of range, clamped",
                s.source
            ),
            None => format!("{assignment:<width$}  # {}", s.source),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_host::config::{FileSettings, Settings};

    #[test]
    fn outbox_config_output_names_every_setting_with_its_source() {
        let file = FileSettings {
            max_retries: Some(3),
            ..FileSettings::default()
        };
        let env = |name: &str| (name == "DATABASE_URL").then(|| "postgres://u:hunter2@db/x".into());
        let settings = Settings::resolve_with(&file, env).unwrap();
        let text = render_settings(&settings.describe_with(&file, env));
        for var in Settings::ENV_VARS {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{var}="))),
                "{var} missing from:\n{text}"
            );
        }
        assert_eq!(text.lines().count(), Settings::ENV_VARS.len());
        assert!(!text.contains("hunter2"), "{text}");
        let line = |var: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{var}=")))
                .unwrap()
                .to_string()
        };
        assert!(line("DATABASE_URL").ends_with("# env"), "{text}");
        assert!(line("OUTBOX_MAX_RETRIES").starts_with("OUTBOX_MAX_RETRIES=3 "));
        assert!(line("OUTBOX_MAX_RETRIES").ends_with("# file"));
        assert!(line("OUTBOX_HTTP_ADDR").ends_with("# default"));
    }
}
