//! `outbox-bench`: dispatch throughput against a raw SQL baseline, and commit-to-enqueue latency.
//!
//! `cargo run --release -p outbox-host --bin outbox-bench` (PostgreSQL and Redis running). Uses
//! its own database (`outbox_bench`, recreated) and Redis prefix (`outbox-bench:`, cleared).
//! Prints figures; compares as ratios measured in the same run, never against fixed times.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use outbox_host::config::{Config, Settings};
use outbox_host::dispatch::Dispatcher;
use outbox_host::routing::RouterHandle;
use outbox_host::sink::RedisSink;
use outbox_host::{ops, publish, store, NewEvent};
use redis::AsyncCommands;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(about = "Measure outbox dispatch throughput and latency")]
struct Args {
    /// Events pre-inserted for the throughput runs.
    #[arg(long, default_value_t = 100_000)]
    events: i64,
    /// Dispatch batch size for the throughput runs.
    #[arg(long, default_value_t = 1000)]
    batch: i64,
    /// Offered load for the latency run (events/s, one transaction each).
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Events published in the latency run.
    #[arg(long, default_value_t = 5000)]
    latency_events: usize,
    /// Repetitions of each throughput run (the best is reported).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
}

const PREFIX: &str = "outbox-bench:";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = Config::from_env()?;
    let mut settings = config.settings.clone();
    let admin = store::connect(&settings.database_url, 1).await?;
    sqlx::query("DROP DATABASE IF EXISTS outbox_bench WITH (FORCE)")
        .execute(&admin)
        .await?;
    sqlx::query("CREATE DATABASE outbox_bench")
        .execute(&admin)
        .await?;
    admin.close().await;
    settings.database_url = ops::with_database(&settings.database_url, "outbox_bench");
    settings.redis_prefix = PREFIX.into();
    settings.dispatch_batch_size = args.batch;
    settings.http_addr = String::new();
    let pool = store::connect(&settings.database_url, 16).await?;
    store::migrate(&pool).await?;
    let table = config.routes.route_table();

    println!(
        "outbox-bench: {} events, batch {}, best of {} rounds",
        args.events, args.batch, args.rounds
    );
    let mut best_base = 0f64;
    let mut best_host = 0f64;
    for round in 1..=args.rounds {
        prepare(&pool, &settings, args.events).await?;
        let base = baseline(&pool, args.batch, args.events).await?;
        prepare(&pool, &settings, args.events).await?;
        let host = host_throughput(
            &pool,
            &settings,
            RouterHandle::new(table.clone()),
            args.events,
        )
        .await?;
        println!("  round {round}: baseline (claim + mark done SQL) {base:>9.0} events/s | host (claim + route + Redis + record) {host:>9.0} events/s");
        best_base = best_base.max(base);
        best_host = best_host.max(host);
    }
    println!("throughput: host {best_host:.0} events/s, baseline {best_base:.0} events/s, ratio host/baseline = {:.2}", best_host / best_base);

    // Router plugin vs native table, same run.
    let mut plugin_config = config.clone();
    plugin_config.routes.router.plugin = "prefix-router".into();
    plugin_config.routes.plugins.entry("prefix-router".into()).or_insert_with(|| toml::from_str("").expect("empty spec"));
    let live = outbox_host::host::start_plugins(&plugin_config).await?;
    let router = live.router.current();
    anyhow::ensure!(router.name() == "prefix-router", "prefix-router plugin not loaded from {}: run scripts/build-plugins.sh", plugin_config.settings.plugin_dir.display());
    let sample: Vec<store::ClaimedEvent> = (0..1000)
        .map(|i| store::ClaimedEvent {
            id: i,
            tenant_id: Some("t".into()),
            event_type: ["mail.welcome", "tenant.subscription.created", "audit.login", "webhook.sent", "search.index.doc"][i as usize % 5].into(),
            event_version: 1,
            payload: r#"{"user": 42, "text": "hello, welcome aboard"}"#.into(),
            headers: "{}".into(),
            dispatch_key: None,
            ordering_key: None,
            attempts: 1,
            created_at: chrono::Utc::now(),
            recovered_lease: false,
        })
        .collect();
    let per_event = |r: &dyn outbox_host::routing::Router| -> anyhow::Result<f64> {
        let rounds = 50;
        let start = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(r.route_batch(&sample)?);
        }
        Ok(start.elapsed().as_nanos() as f64 / (rounds * sample.len()) as f64)
    };
    let native_ns = per_event(&table)?;
    let plugin_ns = per_event(router.as_ref().as_ref())?;
    println!("routing cost (batches of 1000): native table {native_ns:.0} ns/event, prefix-router plugin {plugin_ns:.0} ns/event");
    let loaded = live.registry.get("prefix-router").expect("loaded");
    let inst = live.registry.engine().time_instantiation(&loaded.name, &loaded.compiled.prepared, &loaded.limits, 2000)?;
    println!("fresh instantiation (InstancePre + pooling, new store each time): {:.1} us", inst.as_secs_f64() * 1e6);
    let mut best_native = 0f64;
    let mut best_plugin = 0f64;
    for round in 1..=args.rounds {
        prepare(&pool, &settings, args.events).await?;
        let native = host_throughput(&pool, &settings, RouterHandle::new(table.clone()), args.events).await?;
        prepare(&pool, &settings, args.events).await?;
        let plugin = host_throughput(&pool, &settings, live.router.clone(), args.events).await?;
        println!("  round {round}: native router {native:>9.0} events/s | plugin router {plugin:>9.0} events/s");
        best_native = best_native.max(native);
        best_plugin = best_plugin.max(plugin);
    }
    println!("throughput with the plugin router: {best_plugin:.0} events/s vs native {best_native:.0} events/s, ratio plugin/native = {:.2}", best_plugin / best_native);

    prepare(&pool, &settings, 0).await?;
    let (p50, p99, max) = latency(
        &pool,
        &settings,
        RouterHandle::new(table),
        args.rate,
        args.latency_events,
    )
    .await?;
    println!(
        "latency at {} events/s offered ({} events, one per transaction, default batch): commit-to-enqueue p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        args.rate, args.latency_events, p50, p99, max
    );
    Ok(())
}

async fn prepare(pool: &PgPool, settings: &Settings, events: i64) -> anyhow::Result<()> {
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await?;
    if events > 0 {
        sqlx::query(
            "INSERT INTO outbox_event (event_type, payload, tenant_id) SELECT 'mail.welcome', jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10) FROM generate_series(1, $1) g",
        )
        .bind(events)
        .execute(pool)
        .await?;
    }
    sqlx::query("VACUUM ANALYZE outbox_event")
        .execute(pool)
        .await?;
    let client = redis::Client::open(settings.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let keys: Vec<String> = conn.keys(format!("{PREFIX}*")).await?;
    for chunk in keys.chunks(1000) {
        let _: () = conn.del(chunk).await?;
    }
    Ok(())
}

/// The claim and mark-done statements alone, same batch size, no routing, no Redis.
async fn baseline(pool: &PgPool, batch: i64, events: i64) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut n = 0;
    loop {
        let claim =
            store::claim_due_events(pool, "baseline", batch, Duration::from_secs(300)).await?;
        if claim.events.is_empty() {
            break;
        }
        n += claim.events.len() as i64;
        let outcomes: Vec<_> = claim
            .events
            .iter()
            .map(|e| (e.id, store::EventOutcome::Done))
            .collect();
        store::record_outcomes(pool, &claim, &outcomes, &[]).await?;
    }
    anyhow::ensure!(n == events, "baseline processed {n} of {events}");
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The dispatcher's run loop until every event is done.
async fn host_throughput(
    pool: &PgPool,
    settings: &Settings,
    router: RouterHandle,
    events: i64,
) -> anyhow::Result<f64> {
    let sink = RedisSink::connect(
        &settings.redis_url,
        &settings.redis_prefix,
        settings.dedupe_ttl,
        settings.dispatch_concurrency,
    )
    .await?;
    let dispatcher = Dispatcher::new(
        pool.clone(),
        sink,
        router,
        Arc::new(settings.clone()),
        "bench-host",
    );
    let stats = dispatcher.stats();
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    while stats.done.load(std::sync::atomic::Ordering::Relaxed) < events as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = events as f64 / start.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await?;
    Ok(rate)
}

/// Publish at a steady rate, one event per transaction, and time commit -> stream entry.
async fn latency(
    pool: &PgPool,
    settings: &Settings,
    router: RouterHandle,
    rate: u64,
    count: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    let mut settings = settings.clone();
    settings.dispatch_batch_size = 100;
    let sink = RedisSink::connect(
        &settings.redis_url,
        &settings.redis_prefix,
        settings.dedupe_ttl,
        settings.dispatch_concurrency,
    )
    .await?;
    let dispatcher = Dispatcher::new(
        pool.clone(),
        sink,
        router,
        Arc::new(settings.clone()),
        "bench-latency",
    );
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let stream = format!("{PREFIX}outbox.mail");
    let client = redis::Client::open(settings.redis_url.as_str())?;
    let mut reader = client.get_multiplexed_async_connection().await?;
    let reader_task = tokio::spawn(async move {
        let mut seen: HashMap<i64, Instant> = HashMap::new();
        let mut last = "0-0".to_string();
        let opts = redis::streams::StreamReadOptions::default()
            .block(1000)
            .count(1000);
        while seen.len() < count {
            let reply: redis::streams::StreamReadReply =
                match reader.xread_options(&[&stream], &[&last], &opts).await {
                    Ok(r) => r,
                    Err(_) => continue,
                };
            let now = Instant::now();
            for key in reply.keys {
                for entry in key.ids {
                    let id: i64 = entry
                        .get::<String>("event_id")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    seen.insert(id, now);
                    last = entry.id;
                }
            }
        }
        seen
    });

    let mut committed: HashMap<i64, Instant> = HashMap::with_capacity(count);
    let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..count {
        tick.tick().await;
        let mut tx = pool.begin().await?;
        let id = publish(
            &mut tx,
            NewEvent::new("mail.welcome", serde_json::json!({"i": i})),
        )
        .await?;
        tx.commit().await?;
        committed.insert(id, Instant::now());
    }
    let seen = tokio::time::timeout(Duration::from_secs(60), reader_task).await??;
    shutdown.cancel();
    task.await?;
    let mut lat: Vec<f64> = committed
        .iter()
        .filter_map(|(id, c)| {
            seen.get(id)
                .map(|s| s.saturating_duration_since(*c).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize];
    Ok((pct(0.5), pct(0.99), *lat.last().unwrap_or(&0.0)))
}
