//! `outbox-bench`: dispatch throughput against a raw SQL baseline, router plugin against the
//! native table, commit-to-enqueue latency, receiver throughput with a trivial handler plugin,
//! and the cost of a capability-policy check in WebAssembly against the same check in Rust.
//!
//! `cargo run --release -p outbox-cli --bin outbox-bench` from the repository root (PostgreSQL
//! and Redis running, plugins built into `plugins/dist`). Uses its own database (`outbox_bench`,
//! recreated) and Redis prefix (`outbox-bench:`, cleared). `--only receive,policy` runs some
//! sections (`dispatch`, `plugins`, `latency`, `receive`, `policy`; default all).
//! Prints figures; compares as ratios measured in the same run, never against fixed times.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use outbox_host::config::{Config, Grants, RoutesFile, Settings};
use outbox_host::dispatch::Dispatcher;
use outbox_host::plugin::bindings::handler_world::exports::outbox::plugin::handler_api::{
    Delivery, Outcome,
};
use outbox_host::plugin::bindings::WitEvent;
use outbox_host::plugin::engine::Prepared;
use outbox_host::plugin::reload::LiveConfig;
use outbox_host::plugin::{CapabilityPolicy, LoadedPlugin};
use outbox_host::receive::{HandledAs, QueueEntry, Receivers, CONSUMER_GROUP};
use outbox_host::routing::RouterHandle;
use outbox_host::sink::RedisSink;
use outbox_host::{publish, store, NewEvent};
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
    /// Entries pre-filled on the queue for each receiver throughput run.
    #[arg(long, default_value_t = 5000)]
    receive_entries: usize,
    /// Receiver concurrencies to measure (`OUTBOX_RECEIVER_CONCURRENCY`), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,32")]
    receive_concurrency: Vec<usize>,
    /// Policy checks timed per case.
    #[arg(long, default_value_t = 20_000)]
    policy_checks: u32,
    /// Run only these sections (comma-separated; default all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
}

/// A part of the bench.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    /// Dispatch throughput against the raw SQL baseline.
    Dispatch,
    /// Router plugin against the native table, and instantiation cost.
    Plugins,
    /// Commit-to-enqueue latency at a steady offered load.
    Latency,
    /// Receiver throughput with the echo handler plugin.
    Receive,
    /// Capability-policy check in WebAssembly against native Rust.
    Policy,
}

const PREFIX: &str = "outbox-bench:";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = |section: Section| args.only.is_empty() || args.only.contains(&section);
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
    settings.database_url = store::with_database(&settings.database_url, "outbox_bench");
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
    if run(Section::Dispatch) {
        dispatch_section(&args, &pool, &settings, &table).await?;
    }
    if run(Section::Plugins) {
        plugins_section(&args, &config, &pool, &settings, &table).await?;
    }
    if run(Section::Latency) {
        latency_section(&args, &pool, &settings, &table).await?;
    }
    if run(Section::Receive) || run(Section::Policy) {
        let live = bench_plugins(&settings).await?;
        if run(Section::Receive) {
            receive_section(&args, &pool, &settings, &live).await?;
        }
        if run(Section::Policy) {
            policy_section(&args, &live).await?;
        }
    }
    Ok(())
}

async fn dispatch_section(
    args: &Args,
    pool: &PgPool,
    settings: &Settings,
    table: &outbox_host::routing::RouteTable,
) -> anyhow::Result<()> {
    let mut best_base = 0f64;
    let mut best_host = 0f64;
    for round in 1..=args.rounds {
        prepare(pool, settings, args.events).await?;
        let base = baseline(pool, args.batch, args.events).await?;
        prepare(pool, settings, args.events).await?;
        let host = host_throughput(
            pool,
            settings,
            RouterHandle::new(table.clone()),
            args.events,
        )
        .await?;
        println!("  round {round}: baseline (claim + mark done SQL) {base:>9.0} events/s | host (claim + route + Redis + record) {host:>9.0} events/s");
        best_base = best_base.max(base);
        best_host = best_host.max(host);
    }
    println!("throughput: host {best_host:.0} events/s, baseline {best_base:.0} events/s, ratio host/baseline = {:.2}", best_host / best_base);
    Ok(())
}

async fn plugins_section(
    args: &Args,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
    table: &outbox_host::routing::RouteTable,
) -> anyhow::Result<()> {
    // Router plugin vs native table, same run.
    let mut plugin_config = config.clone();
    plugin_config.routes.router.plugin = "prefix-router".into();
    plugin_config
        .routes
        .plugins
        .entry("prefix-router".into())
        .or_insert_with(|| toml::from_str("").expect("empty spec"));
    let live = outbox_host::host::start_plugins(&plugin_config).await?;
    let router = live.router.current();
    anyhow::ensure!(
        router.name() == "prefix-router",
        "prefix-router plugin not loaded from {}: run scripts/build-plugins.sh",
        plugin_config.settings.plugin_dir.display()
    );
    let sample: Vec<store::ClaimedEvent> = (0..1000)
        .map(|i| store::ClaimedEvent {
            tenant_id: Some("t".into()),
            ..store::ClaimedEvent::unclaimed(
                i,
                [
                    "mail.welcome",
                    "tenant.subscription.created",
                    "audit.login",
                    "webhook.sent",
                    "search.index.doc",
                ][i as usize % 5],
                r#"{"user": 42, "text": "hello, welcome aboard"}"#,
            )
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
    let native_ns = per_event(table)?;
    let plugin_ns = per_event(router.as_ref().as_ref())?;
    println!("routing cost (batches of 1000): native table {native_ns:.0} ns/event, prefix-router plugin {plugin_ns:.0} ns/event");
    let loaded = live.registry.get("prefix-router").expect("loaded");
    let inst = live.registry.engine().time_instantiation(
        &loaded.name,
        &loaded.compiled.prepared,
        &loaded.limits,
        2000,
    )?;
    println!(
        "fresh instantiation (InstancePre + pooling, new store each time): {:.1} us",
        inst.as_secs_f64() * 1e6
    );
    let mut best_native = 0f64;
    let mut best_plugin = 0f64;
    for round in 1..=args.rounds {
        prepare(pool, settings, args.events).await?;
        let native = host_throughput(
            pool,
            settings,
            RouterHandle::new(table.clone()),
            args.events,
        )
        .await?;
        prepare(pool, settings, args.events).await?;
        let plugin = host_throughput(pool, settings, live.router.clone(), args.events).await?;
        println!("  round {round}: native router {native:>9.0} events/s | plugin router {plugin:>9.0} events/s");
        best_native = best_native.max(native);
        best_plugin = best_plugin.max(plugin);
    }
    println!("throughput with the plugin router: {best_plugin:.0} events/s vs native {best_native:.0} events/s, ratio plugin/native = {:.2}", best_plugin / best_native);
    Ok(())
}

async fn latency_section(
    args: &Args,
    pool: &PgPool,
    settings: &Settings,
    table: &outbox_host::routing::RouteTable,
) -> anyhow::Result<()> {
    prepare(pool, settings, 0).await?;
    let (p50, p99, max) = latency(
        pool,
        settings,
        RouterHandle::new(table.clone()),
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
    clear_redis(settings).await
}

/// Delete every key under the bench's Redis prefix.
async fn clear_redis(settings: &Settings) -> anyhow::Result<()> {
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
    let sink = RedisSink::from_settings(settings).await?;
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
    let sink = RedisSink::from_settings(&settings).await?;
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

/// Queue the receiver sections consume; `bench.` events route to it.
const BENCH_QUEUE: &str = "outbox.bench-echo";

/// Handler plugin bound to [`BENCH_QUEUE`]: the `echo-handler` test plugin (logs, returns ok).
const BENCH_HANDLER: &str = "echo";

/// Routes of the receiver and policy sections: one queue bound to the echo handler, which is
/// granted `publish` of `workflow.` events, and the real capability policy plugin.
const BENCH_ROUTES: &str = r#"
[routes]
"bench." = "outbox.bench-echo"

[handlers]
"outbox.bench-echo" = "echo"

[policy]
plugin = "capability-policy"
publish_denials = false

[plugins.capability-policy]

[plugins.echo]
file = "test/echo-handler.wasm"
grants = { publish = ["workflow."] }
"#;

/// Load the echo handler and the capability policy plugin (from `plugin_dir`, normally
/// `plugins/dist`).
async fn bench_plugins(settings: &Settings) -> anyhow::Result<LiveConfig> {
    let routes = RoutesFile::parse(BENCH_ROUTES, std::path::Path::new("<outbox-bench routes>"))?;
    let config = Config {
        path: None,
        routes,
        settings: settings.clone(),
    };
    let live = outbox_host::host::start_plugins(&config).await?;
    for name in [BENCH_HANDLER, "capability-policy"] {
        anyhow::ensure!(
            live.registry.get(name).is_some(),
            "plugin {name} not loaded from {}: run scripts/build-plugins.sh (test plugins included) and run the bench from the repository root",
            settings.plugin_dir.display()
        );
    }
    Ok(live)
}

/// Fields of the `i`-th bench entry, as the sink writes them.
fn entry_fields(event_id: i64) -> Vec<(&'static str, String)> {
    vec![
        ("event_id", event_id.to_string()),
        ("event_type", "bench.echo".into()),
        ("event_version", "1".into()),
        ("tenant_id", format!("tenant-{}", event_id % 10)),
        (
            "payload",
            format!(r#"{{"user": {event_id}, "text": "hello, welcome aboard"}}"#),
        ),
        ("headers", "{}".into()),
        ("dispatch_key", String::new()),
        (
            "created_at",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        ),
        ("attempt", "1".into()),
    ]
}

/// XADD `count` entries with event ids `first..first + count` to `stream`, 1000 per pipeline.
async fn fill_queue(
    conn: &mut redis::aio::MultiplexedConnection,
    stream: &str,
    first: i64,
    count: usize,
) -> anyhow::Result<()> {
    let ids: Vec<i64> = (first..first + count as i64).collect();
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.xadd(stream, "*", &entry_fields(*id)).ignore();
        }
        let _: () = pipe.query_async(conn).await?;
    }
    Ok(())
}

/// Empty `outbox_receipt` and the bench's Redis keys.
async fn clear_receiver_state(pool: &PgPool, settings: &Settings) -> anyhow::Result<()> {
    sqlx::query("TRUNCATE outbox_receipt").execute(pool).await?;
    clear_redis(settings).await
}

async fn receive_section(
    args: &Args,
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
) -> anyhow::Result<()> {
    let n = args.receive_entries;
    println!(
        "receiver: {n} entries pre-filled on {BENCH_QUEUE}, handler {BENCH_HANDLER} (test/echo-handler.wasm), one Receivers, best of {} rounds",
        args.rounds
    );
    let mut settings = settings.clone();
    settings.shutdown_grace = Duration::from_secs(5);
    let mut best = Vec::new();
    for &concurrency in &args.receive_concurrency {
        let mut best_rate = 0f64;
        for round in 1..=args.rounds {
            let rate = receiver_throughput(pool, &settings, live, concurrency, n).await?;
            println!(
                "  round {round}: receiver_concurrency {concurrency:>3}: {rate:>8.0} events/s"
            );
            best_rate = best_rate.max(rate);
        }
        best.push((concurrency, best_rate));
    }
    let summary: Vec<String> = best
        .iter()
        .map(|(c, r)| format!("{r:.0} events/s at concurrency {c}"))
        .collect();
    println!(
        "receiver throughput (claim + wasm handler + ack + receipt per entry): {}",
        summary.join(", ")
    );

    // Per-entry cost, one entry at a time, and its parts.
    let serial_n = 500usize.min(n.max(1));
    let serial = serial_handle_entry(pool, &settings, live, serial_n).await?;
    let (wasm, wasm_hopped) = handler_call_cost(live, 2000).await?;
    let receipt = receipt_upsert_cost(pool, serial_n).await?;
    let redis_cost = redis_bookkeeping_cost(&settings, serial_n).await?;
    let hop = (wasm_hopped - wasm).max(0.0);
    // Receipts are written by a background task in batches, off the entry's path: the single-row
    // upsert below is what one receipt would cost written alone, shown for comparison only.
    let other = serial - wasm - hop - redis_cost;
    let us = |d: f64| d * 1e6;
    println!(
        "per-entry cost, serial (handle_entry one at a time, {serial_n} entries): {:.0} us = wasm handler call {:.0} us ({:.0}%) + blocking-pool hop {:.0} us ({:.0}%) + Redis claim + finish (2 round trips) {:.0} us ({:.0}%) + other (services, parsing, scheduling, queueing the receipt) {:.0} us ({:.0}%); a receipt upsert written alone would add {:.0} us (receipts are batched off the entry's path)",
        us(serial),
        us(wasm),
        100.0 * wasm / serial,
        us(hop),
        100.0 * hop / serial,
        us(redis_cost),
        100.0 * redis_cost / serial,
        us(other),
        100.0 * other / serial,
        us(receipt),
    );
    clear_receiver_state(pool, &settings).await?;
    Ok(())
}

/// One [`Receivers`] consuming a pre-filled queue with `concurrency` handlers in flight, until
/// every entry has an `ok` receipt.
async fn receiver_throughput(
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
    concurrency: usize,
    n: usize,
) -> anyhow::Result<f64> {
    clear_receiver_state(pool, settings).await?;
    let client = redis::Client::open(settings.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let stream = format!("{}{BENCH_QUEUE}", settings.redis_prefix);
    fill_queue(&mut conn, &stream, 1, n).await?;
    let mut settings = settings.clone();
    settings.receiver_concurrency = concurrency;
    let receivers = Receivers::new(
        pool.clone(),
        live.clone(),
        Arc::new(settings),
        "bench-receiver",
    )
    .await?;
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(receivers.consume(BENCH_QUEUE.to_string(), shutdown.clone()));
    let deadline = start + Duration::from_secs(300);
    let rate = loop {
        let (ok, other): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE result = 'ok'), count(*) FILTER (WHERE result <> 'ok') FROM outbox_receipt",
        )
        .fetch_one(pool)
        .await?;
        if ok >= n as i64 {
            break n as f64 / start.elapsed().as_secs_f64();
        }
        if other > 0 || Instant::now() > deadline {
            shutdown.cancel();
            let _ = task.await;
            anyhow::bail!("receiver run: {ok} ok and {other} other receipts of {n} entries");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    shutdown.cancel();
    task.await?;
    Ok(rate)
}

/// Average seconds of [`Receivers::handle_entry`] run on `n` entries one after another (claim,
/// handler call, finish script, receipt): the latency of one entry with nothing else running.
async fn serial_handle_entry(
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
    n: usize,
) -> anyhow::Result<f64> {
    clear_receiver_state(pool, settings).await?;
    let client = redis::Client::open(settings.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let stream = format!("{}{BENCH_QUEUE}", settings.redis_prefix);
    fill_queue(&mut conn, &stream, 1, n).await?;
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(CONSUMER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await?;
    let opts = redis::streams::StreamReadOptions::default()
        .group(CONSUMER_GROUP, "bench-serial")
        .count(n);
    let reply: redis::streams::StreamReadReply =
        conn.xread_options(&[&stream], &[">"], &opts).await?;
    let entries: Vec<QueueEntry> = reply
        .keys
        .iter()
        .flat_map(|k| k.ids.iter())
        .map(QueueEntry::from_stream)
        .collect();
    anyhow::ensure!(entries.len() == n, "read {} of {n} entries", entries.len());
    let receivers = Receivers::new(
        pool.clone(),
        live.clone(),
        Arc::new(settings.clone()),
        "bench-serial",
    )
    .await?;
    // Warm up the connections and the pooling allocator on a few entries first.
    let warm = 20.min(n / 2);
    for entry in &entries[..warm] {
        receivers.handle_entry(BENCH_QUEUE, entry.clone()).await;
    }
    let start = Instant::now();
    for entry in &entries[warm..] {
        let handled = receivers.handle_entry(BENCH_QUEUE, entry.clone()).await;
        anyhow::ensure!(handled == HandledAs::Ok, "entry handled as {handled:?}");
    }
    Ok(start.elapsed().as_secs_f64() / (n - warm) as f64)
}

/// Average seconds of one echo handler call (fresh instance, no host services): `.0` in a
/// tight loop on one blocking thread, `.1` each call sent to the blocking pool from async code
/// and awaited, as the receiver runs it.
async fn handler_call_cost(live: &LiveConfig, calls: u32) -> anyhow::Result<(f64, f64)> {
    let plugin = live
        .registry
        .get(BENCH_HANDLER)
        .ok_or_else(|| anyhow::anyhow!("{BENCH_HANDLER} not loaded"))?;
    let engine = live.registry.engine().clone();
    let fields = entry_fields(7);
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let delivery = Arc::new(Delivery {
        event: WitEvent {
            id: 7,
            event_type: get("event_type"),
            event_version: 1,
            tenant_id: Some(get("tenant_id")),
            payload: get("payload"),
            headers: get("headers"),
            dispatch_key: None,
            created_at: get("created_at"),
        },
        queue: BENCH_QUEUE.to_string(),
        attempt: 1,
    });
    let call = {
        let delivery = delivery.clone();
        move || -> anyhow::Result<()> {
            let Prepared::Handler(pre) = &plugin.compiled.prepared else {
                anyhow::bail!("{BENCH_HANDLER} is a {} plugin", plugin.world());
            };
            let outcome = engine.call_handler(
                &plugin.name,
                pre,
                &plugin.limits,
                None,
                &plugin.config_json,
                &delivery,
            )?;
            anyhow::ensure!(
                matches!(outcome, Outcome::Ok),
                "echo handler did not return ok"
            );
            Ok(())
        }
    };
    let tight = {
        let call = call.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<f64> {
            for _ in 0..100 {
                call()?;
            }
            let start = Instant::now();
            for _ in 0..calls {
                call()?;
            }
            Ok(start.elapsed().as_secs_f64() / f64::from(calls))
        })
        .await??
    };
    for _ in 0..20 {
        tokio::task::spawn_blocking(call.clone()).await??;
    }
    let start = Instant::now();
    for _ in 0..calls {
        tokio::task::spawn_blocking(call.clone()).await??;
    }
    let hopped = start.elapsed().as_secs_f64() / f64::from(calls);
    Ok((tight, hopped))
}

/// Average seconds of the receipt upsert the receiver runs per entry, one at a time.
async fn receipt_upsert_cost(pool: &PgPool, n: usize) -> anyhow::Result<f64> {
    let upsert = |event_id: i64| {
        sqlx::query(
            r#"
            INSERT INTO outbox_receipt AS r (event_id, handler, queue, result, attempts, duration_ms, published_ids, error)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT (event_id, handler) DO UPDATE
            SET result = EXCLUDED.result, attempts = EXCLUDED.attempts, duration_ms = EXCLUDED.duration_ms,
                published_ids = ARRAY(SELECT DISTINCT unnest(r.published_ids || EXCLUDED.published_ids) ORDER BY 1),
                error = EXCLUDED.error, queue = EXCLUDED.queue, updated_at = now()
            "#,
        )
        .bind(event_id)
        .bind("bench-receipt")
        .bind(BENCH_QUEUE)
        .bind("ok")
        .bind(1i32)
        .bind(0.1f64)
        .bind(Vec::<i64>::new())
        .bind(None::<String>)
        .execute(pool)
    };
    for i in 0..20 {
        upsert(-1_000_000 - i).await?;
    }
    let start = Instant::now();
    for i in 0..n as i64 {
        upsert(-(i + 1)).await?;
    }
    let cost = start.elapsed().as_secs_f64() / n as f64;
    sqlx::query("DELETE FROM outbox_receipt WHERE handler = 'bench-receipt'")
        .execute(pool)
        .await?;
    Ok(cost)
}

/// Average seconds of the receiver's two Redis round trips per entry, one at a time: the
/// idempotency claim (`SET NX PX`) and the finish (`done` marker and `XACK` in one step).
async fn redis_bookkeeping_cost(settings: &Settings, n: usize) -> anyhow::Result<f64> {
    let client = redis::Client::open(settings.redis_url.as_str())?;
    let mut conn = redis::aio::ConnectionManager::new(client).await?;
    let stream = format!("{}{BENCH_QUEUE}", settings.redis_prefix);
    let finish = redis::Script::new(
        "redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4]) return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])",
    );
    let mut one = async |i: usize| -> anyhow::Result<()> {
        let marker = format!("{}bench:marker:{i}", settings.redis_prefix);
        let _: Option<String> = redis::cmd("SET")
            .arg(&marker)
            .arg("running:bench")
            .arg("NX")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await?;
        let _: i64 = finish
            .key(&marker)
            .key(&stream)
            .arg(CONSUMER_GROUP)
            .arg("0-1")
            .arg("done:ok")
            .arg(60)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    };
    for i in 0..20 {
        one(1_000_000 + i).await?;
    }
    let start = Instant::now();
    for i in 0..n {
        one(i).await?;
    }
    Ok(start.elapsed().as_secs_f64() / n as f64)
}

/// The capability check the `capability-policy` plugin makes, in plain Rust: `log` always,
/// `publish` on a granted prefix, `kv` when granted, `http` on an exact granted host.
fn native_check(
    plugin: &str,
    grants: &Grants,
    capability: &str,
    target: &str,
) -> Result<(), String> {
    let allowed = match capability {
        "log" => true,
        "publish" => grants
            .publish
            .iter()
            .any(|p| target.starts_with(p.as_str())),
        "kv" => grants.kv,
        "http" => grants.http.iter().any(|h| h.eq_ignore_ascii_case(target)),
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "plugin '{plugin}' may not {capability} '{target}' (granted prefixes: {})",
            grants.publish.join(", ")
        ))
    }
}

/// Average nanoseconds of `check` over `n` calls, after a short warm-up.
fn ns_per_call(n: u32, mut check: impl FnMut() -> Result<(), String>) -> (f64, bool) {
    for _ in 0..(n / 20).max(10) {
        let _ = std::hint::black_box(check());
    }
    let mut all_ok = true;
    let start = Instant::now();
    for _ in 0..n {
        all_ok &= std::hint::black_box(check()).is_ok();
    }
    (start.elapsed().as_nanos() as f64 / f64::from(n), all_ok)
}

async fn policy_section(args: &Args, live: &LiveConfig) -> anyhow::Result<()> {
    let registry = live.registry.clone();
    let plugin = registry
        .get(BENCH_HANDLER)
        .ok_or_else(|| anyhow::anyhow!("{BENCH_HANDLER} not loaded"))?;
    let policy_plugin = registry
        .get("capability-policy")
        .ok_or_else(|| anyhow::anyhow!("capability-policy not loaded"))?;
    let n = args.policy_checks;
    let denials = (n / 10).max(1);
    let inst = registry.engine().time_instantiation(
        &policy_plugin.name,
        &policy_plugin.compiled.prepared,
        &policy_plugin.limits,
        2000,
    )?;
    let policy = CapabilityPolicy::with_plugin(registry, "capability-policy");
    let figures = tokio::task::spawn_blocking(move || -> anyhow::Result<[f64; 8]> {
        let plugin: &LoadedPlugin = &plugin;
        let allowed = "workflow.execution.requested";
        let denied = "billing.charge";
        // Distinct targets miss the decision cache: every check runs the policy plugin.
        let mut i = 0u64;
        let (wasm_allow_uncached, ok) = ns_per_call(n, || {
            i += 1;
            policy.check(plugin, "publish", &format!("{allowed}.v{i}"))
        });
        anyhow::ensure!(ok, "policy plugin denied publish {allowed}.*");
        let (wasm_deny_uncached, _) = ns_per_call(denials, || {
            i += 1;
            policy.check(plugin, "publish", &format!("{denied}.v{i}"))
        });
        // The same request again: answered from the decision cache.
        let (wasm_allow, ok) = ns_per_call(n, || policy.check(plugin, "publish", allowed));
        anyhow::ensure!(ok, "policy plugin denied publish {allowed}");
        // Denials write an audit line: without a subscriber (the bench installs none) tracing
        // drops it; the second run formats it into a sink, as a log subscriber would.
        let (wasm_deny, ok) = ns_per_call(denials, || policy.check(plugin, "publish", denied));
        anyhow::ensure!(!ok, "policy plugin allowed publish {denied}");
        let sink = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .with_max_level(tracing::Level::INFO)
            .finish();
        let (wasm_deny_logged, _) = tracing::subscriber::with_default(sink, || {
            ns_per_call(denials, || policy.check(plugin, "publish", denied))
        });
        let grants = &plugin.spec.grants;
        let (native_allow, ok) = ns_per_call(n.saturating_mul(50), || {
            native_check(
                &plugin.name,
                std::hint::black_box(grants),
                "publish",
                std::hint::black_box(allowed),
            )
        });
        anyhow::ensure!(ok, "native check denied publish {allowed}");
        let (native_deny, _) = ns_per_call(n, || {
            native_check(
                &plugin.name,
                std::hint::black_box(grants),
                "publish",
                std::hint::black_box(denied),
            )
        });
        // The same decision with the grants round trip the plugin pays (serialize, parse).
        let (native_json, _) = ns_per_call(n, || {
            let json =
                serde_json::to_string(std::hint::black_box(grants)).map_err(|e| e.to_string())?;
            let parsed: Grants = serde_json::from_str(&json).map_err(|e| e.to_string())?;
            native_check(
                &plugin.name,
                &parsed,
                "publish",
                std::hint::black_box(allowed),
            )
        });
        Ok([
            wasm_allow_uncached,
            wasm_deny_uncached,
            wasm_allow,
            wasm_deny,
            wasm_deny_logged,
            native_allow,
            native_deny,
            native_json,
        ])
    })
    .await??;
    let [wasm_allow_uncached, wasm_deny_uncached, wasm_allow, wasm_deny, wasm_deny_logged, native_allow, native_deny, native_json] =
        figures;
    println!(
        "policy check (CapabilityPolicy::check via capability-policy plugin, grants publish [\"workflow.\"], one thread):"
    );
    println!(
        "  every check runs the policy plugin (distinct targets, cache misses): allowed {wasm_allow_uncached:.0} ns/check, denied {wasm_deny_uncached:.0} ns/check"
    );
    println!(
        "  repeated request, answered from the decision cache: allowed {wasm_allow:.0} ns/check, denied {wasm_deny:.0} ns/check"
    );
    println!(
        "  allowed publish workflow.execution.requested ({n} checks): cached {wasm_allow:.0} ns/check | native prefix match {native_allow:.1} ns/check | native with the grants JSON round trip {native_json:.0} ns/check"
    );
    println!(
        "  denied publish billing.charge ({denials} checks): wasm {wasm_deny:.0} ns/check (audit line dropped, no subscriber), {wasm_deny_logged:.0} ns/check (audit line formatted to a sink) | native {native_deny:.0} ns/check"
    );
    println!(
        "  policy plugin fresh instantiation alone: {:.1} us; added cost of the check in WebAssembly per host call: {:.0} ns uncached (allowed), {:.0} ns uncached (denied), {:.0} ns cached (allowed)",
        inst.as_secs_f64() * 1e6,
        wasm_allow_uncached - native_allow,
        wasm_deny_uncached - native_deny,
        wasm_allow - native_allow
    );
    Ok(())
}
