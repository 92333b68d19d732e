//! Setup every section shares: the bench database and Redis prefix, pre-filled events and
//! queue entries, the routers and plugins the sections load, and a dispatcher run to the end.
//! It measures nothing itself and never re-implements host behaviour: entries are encoded with
//! [`QueueEntry::encode`], keys come from [`QueueKeys`], routers from [`LiveConfig::start`].

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::{Config, RoutesFile, Settings};
use outbox_host::dispatch::Dispatcher;
use outbox_host::live_config::LiveConfig;
use outbox_host::queue::{QueueEntry, QueueKeys};
use outbox_host::receive::Receivers;
use outbox_host::routing::RouterHandle;
use outbox_host::sink::{QueueSinks, RedisSink};
use outbox_host::store::{self, ClaimedEvent};
use outbox_host::Host;
use redis::AsyncCommands;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::Args;
use outbox_host::numeric;

/// Queue the receiver sections consume; `bench.` events route to it.
pub(crate) const BENCH_QUEUE: &str = "outbox.bench-echo";

/// Handler plugin bound to [`BENCH_QUEUE`]: the `echo-handler` test plugin (logs, returns ok).
pub(crate) const BENCH_HANDLER: &str = "echo";

/// The capability policy plugin the receiver and policy sections load.
pub(crate) const POLICY_PLUGIN: &str = "capability-policy";

/// Routes of the receiver, policy and end-to-end sections: one queue bound to the echo handler,
/// which is granted `publish` of `workflow.` events, and the real capability policy plugin.
pub(crate) const BENCH_ROUTES: &str = r#"
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

/// `--database`: a plain lowercase SQL identifier (it is spliced into `CREATE DATABASE`).
pub(crate) fn parse_database_name(name: &str) -> Result<String, String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= 60 {
        Ok(name.to_string())
    } else {
        Err("a lowercase SQL identifier of at most 60 characters (a-z, 0-9, _; not starting with a digit)".into())
    }
}

/// `--redis-prefix`: non-empty, so that clearing the bench's keys never clears anyone else's.
pub(crate) fn parse_redis_prefix(prefix: &str) -> Result<String, String> {
    if prefix.is_empty() || prefix.contains(['*', '?', '[', ']', ' ']) {
        Err("a non-empty prefix without spaces or glob characters (* ? [ ])".into())
    } else {
        Ok(prefix.to_string())
    }
}

/// Drop and create the database `name` next to the one `DATABASE_URL` names.
pub(crate) async fn recreate_database(settings: &Settings, name: &str) -> anyhow::Result<()> {
    let admin = store::connect(&settings.database_url, 1)
        .await
        .context("connect to PostgreSQL (DATABASE_URL)")?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&admin)
        .await
        .with_context(|| format!("drop the database {name}"))?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .with_context(|| format!("create the database {name}"))?;
    admin.close().await;
    Ok(())
}

/// Recreate the bench database, migrate it and return a pool on it with the settings every
/// section starts from (bench database and Redis prefix, dispatch batch `--batch`, no HTTP).
pub(crate) async fn bench_database(
    config: &Config,
    args: &Args,
) -> anyhow::Result<(PgPool, Settings)> {
    let mut settings = config.settings.clone();
    recreate_database(&settings, &args.database).await?;
    settings.database_url = store::with_database(&settings.database_url, &args.database);
    settings.redis_prefix = args.redis_prefix.clone();
    settings.dispatch_batch_size = args.batch;
    settings.http_addr = String::new();
    let pool = store::connect(&settings.database_url, 16)
        .await
        .context("connect to the bench database")?;
    store::migrate(&pool)
        .await
        .context("migrate the bench database")?;
    Ok((pool, settings))
}

/// The router `outbox run` builds for `config` (its router plugin when loaded, else the native
/// table), with the bench's settings.
pub(crate) async fn serving_router(
    config: &Config,
    settings: &Settings,
) -> anyhow::Result<RouterHandle> {
    let live = LiveConfig::start(&Config {
        settings: settings.clone(),
        ..config.clone()
    })
    .await
    .context("load the configured plugins")?;
    Ok(live.router)
}

/// Empty the event tables, insert `events` pending `mail.welcome` events and clear Redis.
pub(crate) async fn prepare(pool: &PgPool, settings: &Settings, events: i64) -> anyhow::Result<()> {
    prepare_typed(pool, settings, events, "mail.welcome").await
}

/// Empty the event tables, insert `events` pending events of `event_type` and clear Redis.
pub(crate) async fn prepare_typed(
    pool: &PgPool,
    settings: &Settings,
    events: i64,
    event_type: &str,
) -> anyhow::Result<()> {
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("truncate the event tables")?;
    if events > 0 {
        sqlx::query(
            "INSERT INTO outbox_event (event_type, payload, tenant_id) SELECT $2, jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10) FROM generate_series(1, $1) g",
        )
        .bind(events)
        .bind(event_type)
        .execute(pool)
        .await
        .context("insert the bench events")?;
    }
    sqlx::query("VACUUM ANALYZE outbox_event")
        .execute(pool)
        .await
        .context("vacuum outbox_event")?;
    clear_redis(settings).await
}

/// Delete every key under the bench's Redis prefix.
pub(crate) async fn clear_redis(settings: &Settings) -> anyhow::Result<()> {
    let keys = QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url);
    let mut conn = redis_connection(settings).await?;
    let mut found: Vec<String> = Vec::new();
    for pattern in keys.match_patterns() {
        let matched: Vec<String> = conn
            .keys(pattern)
            .await
            .context("list the bench's Redis keys")?;
        found.extend(matched);
    }
    for chunk in found.chunks(1000) {
        let _: () = conn
            .del(chunk)
            .await
            .context("delete the bench's Redis keys")?;
    }
    Ok(())
}

/// A Redis connection for bench setup.
pub(crate) async fn redis_connection(
    settings: &Settings,
) -> anyhow::Result<outbox_host::redis_conn::RedisConn> {
    outbox_host::redis_conn::connect_shared(&settings.redis_url, &settings.redis_prefix)
        .await
        .context("connect to Redis")
}

/// Publish `event` in a transaction of its own: its id and the instant its commit returned,
/// where the latency sections start its clock.
pub(crate) async fn commit_one(
    pool: &PgPool,
    event: outbox_host::NewEvent,
) -> anyhow::Result<(i64, Instant)> {
    let mut tx = pool.begin().await?;
    let id = outbox_host::publish(&mut tx, event).await?;
    tx.commit().await?;
    Ok((id, Instant::now()))
}

/// Commit -> queue entry in ms of each committed event whose entry was read (`seen`, from
/// [`spawn_arrival_reader`]), sorted ascending; events never read are left out.
pub(crate) fn arrival_latencies_ms<'a>(
    committed: impl IntoIterator<Item = (&'a i64, &'a Instant)>,
    seen: &std::collections::HashMap<i64, Instant>,
) -> Vec<f64> {
    let mut lat: Vec<f64> = committed
        .into_iter()
        .filter_map(|(id, c)| {
            seen.get(id)
                .map(|s| s.saturating_duration_since(*c).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    lat
}

/// Read `stream` from its start until `events` entries were read or `stop` is cancelled: when
/// each event's entry was read, by event id. How the latency sections time commit -> queue
/// entry.
///
/// The reader runs on a thread of its own with a blocking connection of its own, so an entry
/// is stamped as soon as the reply reaches the process: read from a task of the bench's
/// runtime, the stamp waited for the producers' tasks, and at 5,000 events/s that wait was
/// about 3 ms at the median and 12 ms at the 99th percentile of what the figures showed.
pub(crate) fn spawn_arrival_reader(
    settings: &Settings,
    stream: String,
    events: usize,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<std::collections::HashMap<i64, Instant>>> {
    let mut reader = redis::Client::open(settings.redis_url.as_str())
        .and_then(|client| client.get_connection())
        .context("connect the stream reader to Redis")?;
    let (done, seen) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("arrival-reader".into())
        .spawn(move || {
            use redis::Commands as _;
            let mut seen = std::collections::HashMap::with_capacity(events);
            let mut last = "0-0".to_string();
            let opts = redis::streams::StreamReadOptions::default()
                .block(200)
                .count(1000);
            while seen.len() < events && !stop.is_cancelled() {
                let reply: redis::streams::StreamReadReply =
                    match reader.xread_options(&[&stream], &[&last], &opts) {
                        Ok(r) => r,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                let now = Instant::now();
                for key in reply.keys {
                    for entry in key.ids {
                        let id = QueueEntry::from_stream(&entry).event_id().unwrap_or(0);
                        seen.insert(id, now);
                        last = entry.id;
                    }
                }
            }
            let _ = done.send(seen);
        })
        .context("start the stream reader's thread")?;
    Ok(tokio::spawn(async move { seen.await.unwrap_or_default() }))
}

/// The dispatcher's run loop with `router` until every one of `events` is done; events/s.
pub(crate) async fn host_throughput(
    pool: &PgPool,
    settings: &Settings,
    router: RouterHandle,
    events: i64,
) -> anyhow::Result<f64> {
    let sink = RedisSink::from_settings(settings).await?;
    host_throughput_into(pool, settings, router, events, sink).await
}

/// [`host_throughput`] handing off through the production per-queue sink ([`QueueSinks`]) with
/// `routes` in force, its destinations checked first as at a host's start.
pub(crate) async fn host_throughput_on_routes(
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
    events: i64,
    routes: &RoutesFile,
) -> anyhow::Result<f64> {
    let routes = std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(routes.clone()));
    let sinks = QueueSinks::connect(settings, routes.clone())
        .await
        .context("connect the sinks")?;
    sinks
        .check_routes(&routes.load())
        .await
        .context("check the destinations")?;
    host_throughput_into(pool, settings, router.clone(), events, sinks).await
}

/// [`host_throughput`] handing off through `sink`.
pub(crate) async fn host_throughput_into(
    pool: &PgPool,
    settings: &Settings,
    router: RouterHandle,
    events: i64,
    sink: impl outbox_host::sink::Sink + 'static,
) -> anyhow::Result<f64> {
    let dispatcher = bench_dispatcher(pool, settings, router, sink, "bench-host").await?;
    let stats = dispatcher.stats();
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    while stats.done.load(std::sync::atomic::Ordering::Relaxed) < numeric::count(events) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = events as f64 / start.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await?;
    Ok(rate)
}

/// A dispatcher assembled by the host's builder (as `outbox run` and `outbox drain` assemble
/// theirs) on the bench's pool and settings, routed by `router`, handing off through `sink`.
pub(crate) async fn bench_dispatcher(
    pool: &PgPool,
    settings: &Settings,
    router: RouterHandle,
    sink: impl outbox_host::sink::Sink + 'static,
    worker: &str,
) -> anyhow::Result<Dispatcher> {
    Host::builder()
        .config(settings_only(settings))
        .pool(pool.clone())
        .router_handle(router)
        .sink(sink)
        .worker_id(worker)
        .build_dispatcher()
        .await
        .context("assemble the dispatcher")
}

/// Receivers assembled by the host's builder (as `outbox run` assembles its own) on the bench's
/// pool and settings, over the plugins of `live`, consuming as `consumer`.
pub(crate) async fn bench_receivers(
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
    consumer: &str,
) -> anyhow::Result<Receivers> {
    Host::builder()
        .config(settings_only(settings))
        .pool(pool.clone())
        .live_config(live.clone())
        .worker_id(consumer)
        .build_receivers()
        .await
        .context("assemble the receivers")
}

/// `settings` with no routes file: what is built from it is routed by what the bench gives.
fn settings_only(settings: &Settings) -> Config {
    Config {
        path: None,
        routes: RoutesFile::default(),
        settings: settings.clone(),
    }
}

/// Load the echo handler and the capability policy plugin (from `plugin_dir`, normally
/// `plugins/dist`) with [`BENCH_ROUTES`].
pub(crate) async fn bench_plugins(settings: &Settings) -> anyhow::Result<LiveConfig> {
    let routes = RoutesFile::parse(BENCH_ROUTES, std::path::Path::new("<outbox-bench routes>"))?;
    let config = Config {
        path: None,
        routes,
        settings: settings.clone(),
    };
    let live = LiveConfig::start(&config)
        .await
        .context("load the bench plugins")?;
    for name in [BENCH_HANDLER, POLICY_PLUGIN] {
        anyhow::ensure!(
            live.registry.get(name).is_some(),
            "plugin {name} not loaded from {}: run scripts/build-plugins.sh (test plugins included) and run the bench from the repository root",
            settings.plugin_dir.display()
        );
    }
    Ok(live)
}

/// The `i`-th bench event, as the dispatcher would claim it (routes to [`BENCH_QUEUE`]).
pub(crate) fn bench_event(event_id: i64) -> ClaimedEvent {
    ClaimedEvent {
        tenant_id: Some(format!("tenant-{}", event_id % 10)),
        ..ClaimedEvent::unclaimed(
            event_id,
            "bench.echo",
            format!(r#"{{"user": {event_id}, "text": "hello, welcome aboard"}}"#),
        )
    }
}

/// XADD `count` entries for events `first..first + count` to `queue`, encoded as the sink
/// encodes them, 1000 per pipeline.
pub(crate) async fn fill_queue(
    conn: &mut (impl redis::aio::ConnectionLike + Send + Sync),
    keys: &QueueKeys,
    queue: &str,
    first: i64,
    count: usize,
) -> anyhow::Result<()> {
    let stream = keys.stream(queue);
    let ids: Vec<i64> = (first..first + numeric::len_i64(count)).collect();
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.xadd(&stream, "*", &QueueEntry::encode(&bench_event(*id)))
                .ignore();
        }
        let _: () = pipe
            .query_async(conn)
            .await
            .with_context(|| format!("fill {stream}"))?;
    }
    Ok(())
}

/// Empty `outbox_receipt` and the bench's Redis keys.
pub(crate) async fn clear_receiver_state(pool: &PgPool, settings: &Settings) -> anyhow::Result<()> {
    sqlx::query("TRUNCATE outbox_receipt")
        .execute(pool)
        .await
        .context("truncate outbox_receipt")?;
    clear_redis(settings).await
}

/// The index of the `p` quantile (0 to 1) in a sorted list of `len` samples (`len` > 0).
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a non-negative index below len, rounded down"
)]
pub(crate) fn percentile_index(len: usize, p: f64) -> usize {
    ((numeric::len_figure(len) - 1.0) * p.clamp(0.0, 1.0)) as usize
}

/// `fraction` (0 to 1) of `n` events, rounded up.
#[allow(
    clippy::cast_possible_truncation,
    reason = "at most n, which is an i64"
)]
pub(crate) fn ceil_fraction(n: i64, fraction: f64) -> i64 {
    (numeric::signed_figure(n) * fraction.clamp(0.0, 1.0)).ceil() as i64
}
