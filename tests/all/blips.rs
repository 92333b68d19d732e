//! Infrastructure blips are not the event's fault: real faults on the real services (PostgreSQL
//! backends terminated, the database refusing connections, Redis connections killed, Redis
//! scripts flushed), many times while events flow, at the default claim lease (5 min) and event
//! backoff (1-32 min). Afterwards every event is done within seconds of the last fault, with one
//! attempt, and in its queue once. The receivers' side of the same faults is in
//! `receiver_blips`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use outbox_host::config::Settings;
use outbox_host::dispatch::Dispatcher;
use outbox_host::routing::RouterHandle;
use outbox_host::sink::{Enqueue, EnqueueResult, RedisSink, Sink, SinkError};
use outbox_tests::{infra_retries, PgKiller, RedisKiller, TestEnv};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// How soon after the last fault every event must be done: far below the event backoff (the
/// first retry waits 60 s) and the claim lease (5 min), generous for a busy machine.
const SETTLED_WITHIN: Duration = Duration::from_secs(20);

/// The shipped defaults for everything that decides how long a blip could cost an event.
pub(super) fn default_lease_and_backoff(env: &mut TestEnv) {
    let defaults = Settings::default();
    env.settings.claim_lease = defaults.claim_lease;
    env.settings.backoff = defaults.backoff;
    env.settings.max_retries = defaults.max_retries;
    env.settings.dispatch_interval = defaults.dispatch_interval;
    env.settings.receiver_lease = defaults.receiver_lease;
    env.settings.handler_backoff = defaults.handler_backoff;
    assert_eq!(env.settings.claim_lease, Duration::from_secs(300));
    assert_eq!(env.settings.backoff[0], Duration::from_secs(60));
}

/// Run a dispatcher over `pool` and `sink` with the default routes until the returned token is
/// cancelled.
fn run_dispatcher(
    env: &TestEnv,
    pool: PgPool,
    sink: impl Sink + 'static,
    worker: &str,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    run_dispatcher_routed_by(
        env,
        pool,
        sink,
        RouterHandle::new(TestEnv::default_table()),
        worker,
    )
}

/// [`run_dispatcher`] with `router`.
pub(super) fn run_dispatcher_routed_by(
    env: &TestEnv,
    pool: PgPool,
    sink: impl Sink + 'static,
    router: RouterHandle,
    worker: &str,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let dispatcher = Dispatcher::new(pool, sink, router, Arc::new(env.settings.clone()), worker);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    (shutdown, task)
}

/// Wait until `total` events are done; returns how long that took from `since`.
async fn all_done(env: &TestEnv, total: i64, since: Instant) -> Duration {
    let deadline = since + SETTLED_WITHIN;
    loop {
        let done = env.count("done").await;
        if done == total {
            return since.elapsed();
        }
        let stuck: Vec<(String, i32, Option<String>)> = sqlx::query_as(
            "SELECT status, attempts, last_error FROM outbox_event WHERE status <> 'done' LIMIT 3",
        )
        .fetch_all(&env.pool)
        .await
        .unwrap();
        assert!(
            Instant::now() < deadline,
            "{done} of {total} done {SETTLED_WITHIN:?} after the last fault; e.g. {stuck:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// No event took more than one attempt, and each is in `queue` exactly once.
async fn one_attempt_each_and_once_in(env: &TestEnv, queue: &str, total: i64) {
    let (max_attempts, with_error): (i32, i64) =
        sqlx::query_as("SELECT coalesce(max(attempts), 0), count(last_error) FROM outbox_event")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(max_attempts, 1, "a blip was counted as an attempt");
    assert_eq!(with_error, 0, "done events keep no error");
    let ids = env.event_ids(queue).await;
    assert_eq!(ids.len() as i64, total, "one stream entry per event");
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len() as i64,
        total,
        "no event enqueued twice"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn terminated_postgres_backends_mid_batch_cost_no_attempt_and_no_lease_wait(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    let mut pg = PgKiller::new(&env).await;
    let (shutdown, task) = run_dispatcher(&env, pg.host_pool().await, env.sink().await, "pg-cut");
    let recorded_before = infra_retries("postgres", "record");

    // Events keep arriving while the host's backends are terminated, over and over, until one
    // cut demonstrably hit a batch's outcome write (at most 150 cuts). The wait before each cut
    // varies, so the cuts land at different points of a batch however fast this machine is
    // (a fixed 40 ms missed every outcome write for 60 cuts once, on a loaded machine).
    let (mut total, mut cuts, mut terminated) = (0, 0, 0);
    while cuts < 150 && (cuts < 15 || infra_retries("postgres", "record") <= recorded_before) {
        env.insert_many("mail.blip", 200).await;
        total += 200;
        tokio::time::sleep(Duration::from_millis(10 + (cuts % 7) * 12)).await;
        terminated += pg.terminate().await;
        cuts += 1;
    }
    let last_fault = Instant::now();
    assert!(terminated > 0, "no backend of the host was terminated");
    assert!(
        infra_retries("postgres", "record") > recorded_before,
        "no cut hit an outcome write in {cuts} cuts"
    );

    let took = all_done(&env, total, last_fault).await;
    one_attempt_each_and_once_in(&env, "outbox.mail", total).await;
    eprintln!(
        "{total} events, {cuts} cuts ({terminated} backends): all done {took:?} after the last"
    );
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn postgres_refusing_connections_for_seconds_costs_no_attempt_and_dispatch_resumes_at_once(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    let mut pg = PgKiller::new(&env).await;
    let (shutdown, task) = run_dispatcher(&env, pg.host_pool().await, env.sink().await, "pg-off");
    let recorded_before = infra_retries("postgres", "record");

    // The database goes away under the running batches and refuses the host for seconds. A
    // refusal that lands while the dispatcher claims (not while it records) meets no outcome
    // write, so it is repeated, each time a little later into a fresh backlog, until one does
    // (at most 8 refusals; the first one usually does).
    let (mut total, mut refusals, mut terminated) = (0, 0, 0);
    let mut back = Instant::now();
    while refusals < 8 && (refusals == 0 || infra_retries("postgres", "record") <= recorded_before)
    {
        env.insert_many("mail.blip", 6_000).await;
        total += 6_000;
        tokio::time::sleep(Duration::from_millis(150 + (refusals % 4) * 45)).await;
        pg.allow_connections(false).await;
        terminated += pg.terminate().await;
        tokio::time::sleep(Duration::from_secs(if refusals == 0 { 3 } else { 2 })).await;
        pg.allow_connections(true).await;
        back = Instant::now();
        refusals += 1;
    }
    assert!(terminated > 0, "the host had no backend to terminate");
    assert!(
        infra_retries("postgres", "record") > recorded_before,
        "no outcome write met the refusal in {refusals} refusals"
    );

    let took = all_done(&env, total, back).await;
    one_attempt_each_and_once_in(&env, "outbox.mail", total).await;
    eprintln!("{total} events: all done {took:?} after PostgreSQL accepted connections again");
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn killed_redis_connections_mid_pipeline_cost_no_attempt_and_every_event_arrives_once(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    let redis = RedisKiller::new().await;
    env.settings.redis_url = redis.url();
    let (shutdown, task) = run_dispatcher(&env, env.pool.clone(), env.sink().await, "redis-cut");
    let enqueue_before = infra_retries("redis", "enqueue");

    // Events keep arriving while the host's Redis connections are killed, over and over, until
    // a kill demonstrably hit a pipeline in flight (at most 60 kills).
    let (mut total, mut kills, mut killed) = (0, 0, 0);
    while kills < 60 && (kills < 15 || infra_retries("redis", "enqueue") <= enqueue_before) {
        env.insert_many("mail.blip", 300).await;
        total += 300;
        tokio::time::sleep(Duration::from_millis(30)).await;
        killed += redis.kill().await;
        kills += 1;
    }
    let last_fault = Instant::now();
    assert!(killed > 0, "no connection of the host was killed");
    assert!(
        infra_retries("redis", "enqueue") > enqueue_before,
        "no kill hit a pipeline in {kills} kills"
    );

    let took = all_done(&env, total, last_fault).await;
    one_attempt_each_and_once_in(&env, "outbox.mail", total).await;
    eprintln!(
        "{total} events, {kills} kills ({killed} connections): all done {took:?} after the last"
    );
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn flushed_redis_scripts_mid_run_are_reloaded_without_costing_an_attempt(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    let (shutdown, task) = run_dispatcher(&env, env.pool.clone(), env.sink().await, "flush");
    let mut admin = env.redis.clone();

    // What a Redis restart does to the script cache, several times while events flow. (Other
    // clients of the shared Redis reload their scripts the same way.)
    let mut total = 0;
    for _ in 0..8 {
        env.insert_many("mail.blip", 500).await;
        total += 500;
        tokio::time::sleep(Duration::from_millis(40)).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
    }
    let last_fault = Instant::now();

    let took = all_done(&env, total, last_fault).await;
    one_attempt_each_and_once_in(&env, "outbox.mail", total).await;
    eprintln!("{total} events, 8 script flushes: all done {took:?} after the last");
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

/// A sink over the real one whose first batch loses the replies of its second half to a real
/// connection kill: the whole batch is written to Redis, then the host's connections are killed
/// and the second half is sent again on the dead connection, as if its replies never arrived.
struct CutHalfway {
    inner: RedisSink,
    redis: RedisKiller,
    cut: AtomicBool,
}

impl Sink for CutHalfway {
    fn name(&self) -> &str {
        "cut-halfway"
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        async move {
            if self.cut.swap(true, Ordering::SeqCst) {
                return self.inner.enqueue_all(items).await;
            }
            let written = self.inner.enqueue_all(items).await;
            assert!(written.iter().all(|r| matches!(r, EnqueueResult::Added(_))));
            assert!(self.redis.kill().await > 0);
            let half = items.len() / 2;
            let lost = self.inner.enqueue_all(&items[half..]).await;
            written[..half].iter().cloned().chain(lost).collect()
        }
        .boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        self.inner.ping().boxed()
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_pipeline_cut_halfway_records_written_entries_done_and_retries_the_rest_without_penalty(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    default_lease_and_backoff(&mut env);
    let redis = RedisKiller::new().await;
    env.settings.redis_url = redis.url();
    env.insert_many("mail.blip", 40).await;
    let sink = CutHalfway {
        inner: env.sink().await,
        redis,
        cut: AtomicBool::new(false),
    };
    let dispatcher = Dispatcher::new(
        env.pool.clone(),
        sink,
        RouterHandle::new(TestEnv::default_table()),
        Arc::new(env.settings.clone()),
        "cut-halfway",
    );

    let first = dispatcher.drain().await.unwrap();
    assert_eq!(
        (
            first.claimed,
            first.done,
            first.released,
            first.retried,
            first.failed
        ),
        (40, 20, 20, 0, 0),
        "the confirmed half is done, the rest released"
    );
    assert!(first.redis_unavailable, "claiming pauses after the blip");
    let rows: Vec<(String, i32, bool)> = sqlx::query_as(
        "SELECT status, attempts, status = 'done' OR available_at <= now() FROM outbox_event ORDER BY id",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    for (i, row) in rows.iter().enumerate() {
        let want = if i < 20 {
            ("done".to_string(), 1, true)
        } else {
            ("pending".to_string(), 0, true)
        };
        assert_eq!(*row, want, "event #{i}: released uncounted and due at once");
    }

    // The retry finds the entries Redis already had (their idempotency markers) and adds none.
    let second = dispatcher.drain().await.unwrap();
    assert_eq!((second.claimed, second.done, second.released), (20, 20, 0));
    assert_eq!(
        dispatcher.stats().enqueued.load(Ordering::Relaxed),
        20,
        "the retried half was answered from the markers, not written again"
    );
    one_attempt_each_and_once_in(&env, "outbox.mail", 40).await;
    env.cleanup().await;
}
