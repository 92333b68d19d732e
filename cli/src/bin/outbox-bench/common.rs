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

/// One event committed by [`commit_one`]: its id and the two instants that bound its commit.
pub(crate) struct Committed {
    /// The event's id.
    pub(crate) id: i64,
    /// Just before `COMMIT` was sent: the event was not visible before.
    pub(crate) sent: Instant,
    /// When the commit's reply reached the producer, where the latency sections start its clock.
    pub(crate) acked: Instant,
}

/// Publish `event` in a transaction of its own.
pub(crate) async fn commit_one(
    pool: &PgPool,
    event: outbox_host::NewEvent,
) -> anyhow::Result<Committed> {
    let mut tx = pool.begin().await?;
    let id = outbox_host::publish(&mut tx, event).await?;
    let sent = Instant::now();
    tx.commit().await?;
    Ok(Committed {
        id,
        sent,
        acked: Instant::now(),
    })
}

/// Commit -> queue entry of each committed event whose entry was read (`seen`, from
/// [`spawn_arrival_reader`]); events never read are left out.
///
/// The event became visible between the moment just before its `COMMIT` was sent and the
/// moment its producer saw the reply, so the entry's read minus each bounds the latency. Each
/// event counts from the reply (the figures), unless its entry was read before the producer saw
/// that reply: a producer late to see its replies (its runtime starved on a saturated machine)
/// stamps the commit after the entry was read, and such an event, counted from the reply,
/// would be 0 ms. Those count from `COMMIT` sent instead, an upper bound (it includes the
/// commit itself), and how many there were is kept. Every event counted from `COMMIT` sent
/// gives the upper bound of the whole run.
pub(crate) struct ArrivalLatencies {
    /// Ms from each commit's reply (from `COMMIT` sent when the entry came first), sorted.
    figures: Vec<f64>,
    /// Ms from just before each `COMMIT` was sent, sorted ascending.
    from_sent: Vec<f64>,
    /// Entries read before the producer saw their commit's reply.
    pub(crate) read_before_reply: usize,
}

impl ArrivalLatencies {
    /// The latencies of `committed` events whose entries are in `seen`.
    pub(crate) fn new<'a>(
        committed: impl IntoIterator<Item = &'a Committed>,
        seen: &std::collections::HashMap<i64, Instant>,
    ) -> Self {
        let ms =
            |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1000.0;
        let mut latencies = Self {
            figures: Vec::new(),
            from_sent: Vec::new(),
            read_before_reply: 0,
        };
        for commit in committed {
            if let Some(&read) = seen.get(&commit.id) {
                let early = read < commit.acked;
                latencies.read_before_reply += usize::from(early);
                let from = if early { commit.sent } else { commit.acked };
                latencies.figures.push(ms(from, read));
                latencies.from_sent.push(ms(commit.sent, read));
            }
        }
        latencies.figures.sort_by(f64::total_cmp);
        latencies.from_sent.sort_by(f64::total_cmp);
        latencies
    }

    /// Events whose entries were read.
    pub(crate) fn len(&self) -> usize {
        self.figures.len()
    }

    /// The `p` (0 to 1) percentile in ms; 0 with nothing read.
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        percentile_of(&self.figures, p)
    }

    /// The `p` (0 to 1) percentile in ms with every event counted from `COMMIT` sent (an upper
    /// bound); 0 with nothing read.
    pub(crate) fn percentile_from_sent(&self, p: f64) -> f64 {
        percentile_of(&self.from_sent, p)
    }
}

/// The `p` (0 to 1) percentile of `sorted`; 0 when it is empty.
fn percentile_of(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(percentile_index(sorted.len(), p))
        .copied()
        .unwrap_or(0.0)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An event committed at `sent` whose reply the producer saw `reply_ms` later.
    fn committed(id: i64, sent: Instant, reply_ms: u64) -> Committed {
        Committed {
            id,
            sent,
            acked: sent + Duration::from_millis(reply_ms),
        }
    }

    /// Events 0 to 99, each read `ms` after `t`.
    fn all_read_at(t: Instant, ms: u64) -> std::collections::HashMap<i64, Instant> {
        (0..100)
            .map(|id| (id, t + Duration::from_millis(ms)))
            .collect()
    }

    #[test]
    fn latencies_count_from_the_commits_reply_while_replies_come_before_the_entries() {
        let t = Instant::now();
        let commits: Vec<Committed> = (0..100).map(|id| committed(id, t, 1)).collect();
        let seen = all_read_at(t, 3);
        let lat = ArrivalLatencies::new(&commits, &seen);
        assert_eq!(lat.read_before_reply, 0);
        assert!((lat.percentile(0.5) - 2.0).abs() < 1e-9);
        assert!((lat.percentile_from_sent(0.5) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn an_entry_read_before_its_commits_reply_counts_from_commit_sent_not_as_zero() {
        let t = Instant::now();
        // Half the replies seen 10 ms after COMMIT was sent, every entry read 3 ms after it:
        // counted from the reply, those would be 0 ms, which says nothing.
        let commits: Vec<Committed> = (0..100)
            .map(|id| committed(id, t, if id % 2 == 0 { 10 } else { 1 }))
            .collect();
        let seen = all_read_at(t, 3);
        let lat = ArrivalLatencies::new(&commits, &seen);
        assert_eq!(lat.read_before_reply, 50);
        assert!((lat.percentile(0.0) - 2.0).abs() < 1e-9);
        assert!((lat.percentile(1.0) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn events_never_read_are_left_out_of_the_latencies() {
        let t = Instant::now();
        let commits = vec![committed(1, t, 0), committed(2, t, 0)];
        let seen = std::iter::once((2, t + Duration::from_millis(5))).collect();
        let lat = ArrivalLatencies::new(&commits, &seen);
        assert_eq!(lat.len(), 1);
        assert!((lat.percentile(0.99) - 5.0).abs() < 1e-9);
    }
}
