//! Receivers through infrastructure blips: Redis connections killed under a receiver, a read's
//! reply lost with its connection, Redis refusing connections for seconds, at the default
//! receiver lease (60 s). Afterwards every entry is handled once, within seconds, not after
//! the lease, and has its receipt. The dispatcher's side of the same faults is in `blips`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::config::Settings;
use outbox_host::live_config::LiveConfig;
use outbox_host::receive::Receivers;
use outbox_tests::{infra_retries, PluginFixture, RedisKiller, TestEnv};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::blips::{default_lease_and_backoff, run_dispatcher_routed_by};

/// The queue of the receiver fault tests: its name is theirs alone, so the process-wide
/// `outbox_receiver_handled_total` series of this queue counts their handler runs only.
const RECEIVER_QUEUE: &str = "outbox.recvblip";

/// Routes for a receiver fault test: `<queue>.*` events to `<queue>`, handled by echo-handler.
fn receiver_routes(queue: &str) -> String {
    format!(
        r#"
[routes]
"{queue}." = "{queue}"

[router]
plugin = "native"

[handlers]
"{queue}" = "echo-handler"

[queue_groups]
general = ["{queue}"]

[plugins.capability-policy]

[plugins.echo-handler]
"#
    )
}

/// The queue of the lost-reply test (its own, so its runs never count in [`RECEIVER_QUEUE`]'s).
const LOST_READ_QUEUE: &str = "outbox.recvlost";

/// The queue of the refused-Redis test (its own, so its runs never count in
/// [`RECEIVER_QUEUE`]'s).
const REFUSED_QUEUE: &str = "outbox.recvrefused";

/// How soon after the last fault every entry must be handled: far below the receiver lease
/// (60 s), generous for a busy machine.
const HANDLED_WITHIN: Duration = Duration::from_secs(15);

/// The deliveries on `queue` so far, by result, as the process-wide metrics
/// recorder counts them (`outbox_receiver_handled_total`): every run of the handler ends in
/// `ok`, `retry`, `dead` or `lost_claim`; `duplicate` and `busy` are deliveries that ran nothing.
fn receiver_runs(queue: &str) -> std::collections::BTreeMap<String, f64> {
    let Some(handle) = outbox_host::http::prometheus() else {
        return Default::default();
    };
    let queue = format!("queue=\"{queue}\"");
    let mut runs = std::collections::BTreeMap::new();
    for line in handle.render().lines() {
        if !line.starts_with("outbox_receiver_handled_total{") || !line.contains(&queue) {
            continue;
        }
        let Some(result) = line
            .split("result=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        else {
            continue;
        };
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        *runs.entry(result.to_string()).or_default() += n;
    }
    runs
}

/// A receiver of `queue` (echo-handler, consumer `consumer`) on `settings`, run
/// until `shutdown`.
async fn start_receiver(
    env: &TestEnv,
    fixture: &PluginFixture,
    settings: &Settings,
    queue: &str,
    consumer: &str,
    shutdown: &CancellationToken,
) -> (LiveConfig, tokio::task::JoinHandle<()>) {
    let config = fixture.config(settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        consumer,
    )
    .await
    .unwrap();
    let task = tokio::spawn(receivers.consume(queue.into(), shutdown.clone()));
    (live, task)
}

/// Receipts of the test: (all, ok on the first attempt without a duplicate delivery).
async fn receipts_ok_once(env: &TestEnv) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE result = 'ok' AND attempts = 1 AND duplicates = 0)
         FROM outbox_receipt",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap()
}

/// Entries of `queue` delivered and not acknowledged.
async fn receiver_pending(env: &TestEnv, queue: &str) -> i64 {
    let summary: redis::Value = redis::cmd("XPENDING")
        .arg(format!("{}{queue}", env.prefix))
        .arg("outbox")
        .query_async(&mut env.redis.clone())
        .await
        .unwrap();
    let redis::Value::Array(summary) = summary else {
        panic!("XPENDING summary: {summary:?}")
    };
    redis::from_redis_value(&summary[0]).unwrap()
}

/// Wait until `total` entries have a receipt, each `ok` on its first delivery; how long that
/// took from `since`. Fails after [`HANDLED_WITHIN`].
async fn all_handled_once(env: &TestEnv, queue: &str, total: i64, since: Instant) -> Duration {
    let deadline = since + HANDLED_WITHIN;
    loop {
        let (receipts, ok_once) = receipts_ok_once(env).await;
        if receipts == total {
            assert_eq!(
                ok_once, total,
                "every entry handled ok on its first delivery, never delivered again"
            );
            return since.elapsed();
        }
        if Instant::now() >= deadline {
            let stream_len: i64 = redis::cmd("XLEN")
                .arg(format!("{}{queue}", env.prefix))
                .query_async(&mut env.redis.clone())
                .await
                .unwrap();
            panic!(
                "{receipts} of {total} entries handled {HANDLED_WITHIN:?} after the last fault (receiver lease: 60 s); {} pending, {} events done, {stream_len} entries in the stream, deliveries by result in this process: {:?}",
                receiver_pending(env, queue).await,
                env.count("done").await,
                receiver_runs(queue),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn receivers_through_killed_redis_connections_handle_every_entry_once_without_the_lease(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    assert_eq!(env.settings.receiver_lease, Duration::from_secs(60));
    let runs_before = receiver_runs(RECEIVER_QUEUE);
    // Only the receiver's connections are killed; the dispatcher feeds the queue on its own.
    let redis = RedisKiller::new().await;
    let mut receiver_settings = env.settings.clone();
    receiver_settings.redis_url = redis.url();
    let fixture = PluginFixture::new(
        &["capability-policy", "test/echo-handler"],
        &receiver_routes(RECEIVER_QUEUE),
    );
    let shutdown = CancellationToken::new();
    let (live, consumer) = start_receiver(
        &env,
        &fixture,
        &receiver_settings,
        RECEIVER_QUEUE,
        "recvblip-c1",
        &shutdown,
    )
    .await;
    let (stop_dispatch, dispatcher) = run_dispatcher_routed_by(
        &env,
        env.pool.clone(),
        env.sink().await,
        live.router.clone(),
        "recvblip-d",
    );
    let outcomes_before = infra_retries("redis", "receiver_outcome");
    let reads_before = infra_retries("redis", "receiver_read");

    // Entries keep arriving while the receiver's connections are killed, over and over, until
    // kills demonstrably hit both its reads and its outcome writes (40 to 60 kills).
    let (mut total, mut kills, mut killed) = (0, 0, 0);
    while kills < 60
        && (kills < 40
            || infra_retries("redis", "receiver_outcome") <= outcomes_before
            || infra_retries("redis", "receiver_read") <= reads_before)
    {
        env.insert_many("outbox.recvblip.received", 100).await;
        total += 100;
        tokio::time::sleep(Duration::from_millis(40 + (kills % 5) * 30)).await;
        killed += redis.kill().await;
        kills += 1;
    }
    let last_fault = Instant::now();
    let (handled_by_then, _) = receipts_ok_once(&env).await;
    assert!(
        infra_retries("redis", "receiver_outcome") > outcomes_before
            && infra_retries("redis", "receiver_read") > reads_before,
        "the kills did not hit both reads and outcomes in {kills} kills"
    );

    let took = all_handled_once(&env, RECEIVER_QUEUE, total, last_fault).await;
    assert_eq!(
        receiver_pending(&env, RECEIVER_QUEUE).await,
        0,
        "every entry acknowledged"
    );
    let runs: std::collections::BTreeMap<String, f64> = receiver_runs(RECEIVER_QUEUE)
        .into_iter()
        .map(|(result, n)| {
            (
                result.clone(),
                n - runs_before.get(&result).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    assert_eq!(
        runs.get("ok").copied(),
        Some(total as f64),
        "one handler run per entry and nothing else that ran a handler: {runs:?}"
    );
    for result in ["retry", "dead", "lost_claim"] {
        assert!(!runs.contains_key(result), "a run ended {result}: {runs:?}");
    }
    eprintln!(
        "{total} entries, {kills} kills ({killed} connections, {handled_by_then} handled by the last), all handled {took:?} after the last kill; deliveries by result: {runs:?}"
    );
    shutdown.cancel();
    stop_dispatch.cancel();
    let _ = tokio::join!(dispatcher, consumer);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn entries_of_a_lost_read_reply_are_recovered_after_the_next_read_error_not_the_lease(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    assert_eq!(env.settings.receiver_lease, Duration::from_secs(60));
    let fixture = PluginFixture::new(
        &["capability-policy", "test/echo-handler"],
        &receiver_routes(LOST_READ_QUEUE),
    );
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let consumer = "recvlost-c1";
    let key = format!("{}{LOST_READ_QUEUE}", env.prefix);

    // 30 entries in the queue, its group created, nobody reading yet.
    env.insert_many("outbox.recvlost.job", 30).await;
    let dispatcher = env
        .dispatcher_routed_by("recvlost-d", live.router.clone())
        .await;
    let mut dispatched = 0u64;
    while dispatched < 30 {
        dispatched += dispatcher.drain().await.unwrap().done;
    }
    let mut conn = env.redis.clone();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("outbox")
        .arg("0")
        .query_async(&mut conn)
        .await
        .unwrap();
    // A read as the receiver's consumer whose reply never arrives: Redis has delivered 20
    // entries to the consumer (they sit in its pending list), the consumer never saw them.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("outbox")
        .arg(consumer)
        .arg("COUNT")
        .arg(20)
        .arg("STREAMS")
        .arg(&key)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(receiver_pending(&env, LOST_READ_QUEUE).await, 20);

    let redis = RedisKiller::new().await;
    let mut receiver_settings = env.settings.clone();
    receiver_settings.redis_url = redis.url();
    let shutdown = CancellationToken::new();
    let (_live, task) = start_receiver(
        &env,
        &fixture,
        &receiver_settings,
        LOST_READ_QUEUE,
        consumer,
        &shutdown,
    )
    .await;

    // The receiver reads the 10 it was never given; the 20 wait, as a lost reply leaves them.
    let deadline = Instant::now() + HANDLED_WITHIN;
    while receipts_ok_once(&env).await.0 < 10 {
        assert!(
            Instant::now() < deadline,
            "the 10 unread entries were not handled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receipts_ok_once(&env).await.0, 10);
    assert_eq!(
        receiver_pending(&env, LOST_READ_QUEUE).await,
        20,
        "the lost read's entries wait"
    );

    // A read error: the receiver's connections killed (its reader among them, blocked in
    // `XREADGROUP`). Then the receiver recovers its own pending entries.
    let read_error = Instant::now();
    let killed = redis.kill().await;
    assert!(killed >= 1, "the receiver's connections were killed");
    let took = all_handled_once(&env, LOST_READ_QUEUE, 30, read_error).await;
    assert_eq!(
        receiver_pending(&env, LOST_READ_QUEUE).await,
        0,
        "every entry acknowledged"
    );
    eprintln!("the lost read's 20 entries handled {took:?} after the read error ({killed} connections killed)");
    shutdown.cancel();
    let _ = task.await;
    env.cleanup().await;
}

/// Redis refusing connections for a few seconds stalls a receiver for about as long, not for a
/// minute or two: its shared connection reconnects at most a second apart once Redis answers
/// (the client crate's default reconnect backoff waits 60 s and more after one refused try, and
/// every claim, outcome and housekeeping step waited with it).
#[sqlx::test(migrations = "../migrations")]
async fn receivers_resume_within_seconds_after_redis_refused_connections_not_minutes(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    let proxy = outbox_tests::OutageProxy::redis().await;
    let mut receiver_settings = env.settings.clone();
    receiver_settings.redis_url = proxy.redis_url();
    let fixture = PluginFixture::new(
        &["capability-policy", "test/echo-handler"],
        &receiver_routes(REFUSED_QUEUE),
    );
    let shutdown = CancellationToken::new();
    let (live, consumer) = start_receiver(
        &env,
        &fixture,
        &receiver_settings,
        REFUSED_QUEUE,
        "refused-c1",
        &shutdown,
    )
    .await;
    let (stop_dispatch, dispatcher) = run_dispatcher_routed_by(
        &env,
        env.pool.clone(),
        env.sink().await,
        live.router.clone(),
        "refused-d",
    );
    env.insert_many("outbox.recvrefused.before", 50).await;
    all_handled_once(&env, REFUSED_QUEUE, 50, Instant::now()).await;

    // Longer than the receiver's housekeeping period (5 s at most): a step on the shared
    // connection fails and tries to reconnect while Redis refuses.
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(7)).await;
    proxy.restore().await;
    let back = Instant::now();
    env.insert_many("outbox.recvrefused.after", 50).await;
    let took = all_handled_once(&env, REFUSED_QUEUE, 100, back).await;
    eprintln!("handled 50 entries {took:?} after Redis answered again");
    shutdown.cancel();
    stop_dispatch.cancel();
    let _ = tokio::join!(dispatcher, consumer);
    env.cleanup().await;
}
