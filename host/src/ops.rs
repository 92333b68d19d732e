//! Ops: what operators run by hand — the demo, stats, and routing explanations.
//!
//! Owns the human-facing output of the CLI (tables, JSON). It goes through the same library
//! calls as the host ([`crate::publish`], [`crate::dispatch`], [`crate::store`]) and never writes
//! SQL of its own against rows a dispatcher may hold.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use redis::AsyncCommands;
use sqlx::{PgPool, Row};

use crate::config::{Config, Settings};
use crate::publish::{publish_with_limit, NewEvent};
use crate::routing::{RouteDecision, RouteRule, RouteTable};
use crate::store;

/// Redis key prefix of everything the demo writes (cleared at the start of each demo).
pub const DEMO_REDIS_PREFIX: &str = "outbox-demo:";
/// Database the demo uses on the configured server (created if missing, emptied each run).
pub const DEMO_DATABASE: &str = "outbox_demo";

/// Print the status counts (and per-type failures) of the outbox.
pub async fn print_stats(pool: &PgPool, json: bool) -> anyhow::Result<()> {
    let counts = store::status_counts(pool).await?;
    let failed_by_type: Vec<(String, i64)> = sqlx::query(
        "SELECT event_type, count(*) AS n FROM outbox_event WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC LIMIT 20",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.get("event_type"), r.get("n")))
    .collect();
    let workers: Vec<(String, String, f64)> = sqlx::query(
        "SELECT id, host_name, extract(epoch FROM now() - last_seen)::float8 AS age FROM outbox_worker ORDER BY last_seen DESC LIMIT 20",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.get("id"), r.get("host_name"), r.get("age")))
    .collect();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "status": counts,
                "failed_by_type": failed_by_type.iter().map(|(t, n)| serde_json::json!({"event_type": t, "count": n})).collect::<Vec<_>>(),
                "workers": workers.iter().map(|(id, h, age)| serde_json::json!({"id": id, "host": h, "last_seen_seconds_ago": age})).collect::<Vec<_>>(),
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
        for (ty, n) in failed_by_type {
            t.add_row(vec![Cell::new(ty), Cell::new(n)]);
        }
        println!("{t}");
    }
    if !workers.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["worker", "host", "last seen"]);
        for (id, host, age) in workers {
            t.add_row(vec![
                Cell::new(id),
                Cell::new(host),
                Cell::new(format!("{age:.0} s ago")),
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

/// The event types the demo publishes, with how many of each.
const DEMO_MIX: &[(&str, usize)] = &[
    ("mail.welcome", 60),
    ("webhook.order.paid", 40),
    ("notification.push", 40),
    ("tenant.subscription.renewed", 20),
    ("billing.invoice.issued", 30),
    ("audit.login", 50),
    ("search.index.document", 30),
    ("order.placed", 30),
    ("mystery.unrouted", 1),
];

/// `outbox demo`: publish a few hundred events of several types (one with no route, one rolled
/// back), run a dispatcher, and print what went where.
pub async fn run_demo(mut config: Config) -> anyhow::Result<()> {
    let started = Instant::now();
    let settings = &mut config.settings;
    let admin = store::connect(&settings.database_url, 2).await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(DEMO_DATABASE)
            .fetch_one(&admin)
            .await?;
    if !exists {
        sqlx::query(&format!("CREATE DATABASE {DEMO_DATABASE}"))
            .execute(&admin)
            .await?;
    }
    admin.close().await;
    settings.database_url = with_database(&settings.database_url, DEMO_DATABASE);
    settings.redis_prefix = DEMO_REDIS_PREFIX.to_string();
    settings.dispatch_interval = Duration::from_millis(200);
    settings.http_addr = String::new();
    println!(
        "demo: PostgreSQL {} (database {DEMO_DATABASE}, emptied), Redis {} (keys under '{DEMO_REDIS_PREFIX}', cleared)",
        store::redact(&settings.database_url),
        store::redact(&settings.redis_url)
    );

    let pool = store::connect(&settings.database_url, 8).await?;
    store::migrate(&pool).await?;
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_worker RESTART IDENTITY")
        .execute(&pool)
        .await?;
    let redis = redis::Client::open(settings.redis_url.as_str())?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let old: Vec<String> = conn.keys(format!("{DEMO_REDIS_PREFIX}*")).await?;
    if !old.is_empty() {
        let _: () = conn.del(old).await?;
    }

    // The shipped table has no fan-out rule; the demo adds one so fan-out shows up.
    let mut rules: Vec<RouteRule> = config.routes.route_table().rules().to_vec();
    rules.push(RouteRule {
        prefix: "order.".into(),
        queues: vec!["outbox.audit".into(), "outbox.search-index".into()],
    });
    let table = RouteTable::new(rules);
    println!("demo: routing table (plus the demo's fan-out rule \"order.\"):\n{table}");

    // Publish in application-style transactions of 25 events; one transaction rolls back.
    let mut published = 0usize;
    let mut batch = 0usize;
    let mut tx = pool.begin().await?;
    for (event_type, count) in DEMO_MIX {
        for i in 0..*count {
            let event = NewEvent::new(*event_type, serde_json::json!({"n": i, "demo": true}))
                .with_tenant(format!("tenant-{}", i % 3))
                .with_headers(
                    serde_json::json!({"correlation_id": format!("demo-{event_type}-{i}")}),
                )
                .with_dispatch_key(format!("demo:{event_type}:{i}"));
            publish_with_limit(&mut tx, event, settings.max_payload_bytes).await?;
            published += 1;
            batch += 1;
            if batch == 25 {
                tx.commit().await?;
                tx = pool.begin().await?;
                batch = 0;
            }
        }
    }
    tx.commit().await?;
    let mut doomed = pool.begin().await?;
    for i in 0..10 {
        publish_with_limit(
            &mut doomed,
            NewEvent::new("mail.rolled_back", serde_json::json!({"n": i})),
            settings.max_payload_bytes,
        )
        .await?;
    }
    doomed.rollback().await?;
    println!("demo: published {published} events in transactions of 25; 10 more were rolled back and never appear");

    let host = crate::Host::builder()
        .config(config.clone())
        .pool(pool.clone())
        .router(table.clone())
        .worker_id("outbox-demo")
        .start()
        .await?;
    let bar = indicatif::ProgressBar::new(published as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("demo: dispatching {bar:40} {pos}/{len} {msg}")
            .expect("valid template"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = store::status_counts(&pool).await?;
        bar.set_position((c.done + c.failed) as u64);
        if c.pending == 0 && c.processing == 0 {
            break;
        }
        if Instant::now() > deadline {
            bar.abandon_with_message("timed out (is Redis reachable?)");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bar.finish_and_clear();
    host.shutdown().await;

    let mut per_queue: BTreeMap<String, (u64, Vec<&str>)> = BTreeMap::new();
    for (event_type, _) in DEMO_MIX {
        if let RouteDecision::Queues(queues) = table.route(event_type) {
            for q in queues {
                per_queue.entry(q).or_default().1.push(event_type);
            }
        }
    }
    for (queue, (n, _)) in per_queue.iter_mut() {
        *n = conn.xlen(format!("{DEMO_REDIS_PREFIX}{queue}")).await?;
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "queue (Redis stream)",
        "entries",
        "event types",
    ]);
    for (queue, (n, types)) in &per_queue {
        t.add_row(vec![
            Cell::new(queue),
            Cell::new(n),
            Cell::new(types.join(", ")),
        ]);
    }
    println!("{t}");
    let counts = store::status_counts(&pool).await?;
    println!(
        "events: {} done, {} failed, {} pending; fan-out deliveries recorded: {}",
        counts.done,
        counts.failed,
        counts.pending,
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_delivery WHERE status = 'done'")
            .fetch_one(&pool)
            .await?
    );
    let failed = sqlx::query(
        "SELECT id, event_type, last_error FROM outbox_event WHERE status = 'failed' ORDER BY id",
    )
    .fetch_all(&pool)
    .await?;
    if !failed.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["failed event", "type", "why"]);
        for r in failed {
            t.add_row(vec![
                Cell::new(r.get::<i64, _>("id")),
                Cell::new(r.get::<String, _>("event_type")),
                Cell::new(r.get::<Option<String>, _>("last_error").unwrap_or_default()),
            ]);
        }
        println!("{t}");
    }
    let sample: Vec<redis::streams::StreamRangeReply> = vec![
        conn.xrange_count(format!("{DEMO_REDIS_PREFIX}outbox.mail"), "-", "+", 1)
            .await?,
    ];
    if let Some(entry) = sample.first().and_then(|r| r.ids.first()) {
        let fields: BTreeMap<String, String> = entry
            .map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    redis::from_redis_value::<String>(v).unwrap_or_default(),
                )
            })
            .collect();
        println!(
            "first entry of outbox.mail ({}): {}",
            entry.id,
            serde_json::to_string(&fields)?
        );
    }
    println!("demo finished in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `url` with its database name replaced.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
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
