//! Retention and caps: every table and Redis structure the host writes is cleaned or bounded.
//! Ages are made by writing rows with old timestamps directly, never by waiting.

use std::sync::Arc;
use std::time::Duration;

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::{HandledAs, QueueEntry, Receivers, Retry};
use outbox_host::store::{self, RetentionPolicy};
use outbox_tests::{wait_for, OutageProxy, PluginFixture, TestEnv};
use redis::AsyncCommands;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const HOUR: Duration = Duration::from_secs(3600);

/// The shipped retentions (done 30 days, receipts 30 days, failed and cancelled 90 days,
/// history 90 days), 1000 rows per statement.
fn default_policy() -> RetentionPolicy {
    RetentionPolicy::from_settings(&outbox_host::config::Settings::default())
}

/// Insert one event of `status`, processed (or failed, or cancelled) `age_days` ago; its id.
async fn event(env: &TestEnv, status: &str, age_days: i32) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox_event (event_type, payload, status, processed_at, created_at)
         VALUES ('mail.kept', '{}', $1, now() - make_interval(days => $2),
                 now() - make_interval(days => $2 + 1))
         RETURNING id",
    )
    .bind(status)
    .bind(age_days)
    .fetch_one(&env.pool)
    .await
    .unwrap()
}

/// Insert a receipt of `handler` for `event_id`, last updated `age_days` ago.
async fn receipt(env: &TestEnv, event_id: i64, handler: &str, age_days: i32) {
    sqlx::query(
        "INSERT INTO outbox_receipt (event_id, handler, queue, result, attempts, first_seen_at, updated_at)
         VALUES ($1, $2, 'outbox.mail', 'ok', 1, now() - make_interval(days => $3),
                 now() - make_interval(days => $3))",
    )
    .bind(event_id)
    .bind(handler)
    .bind(age_days)
    .execute(&env.pool)
    .await
    .unwrap();
}

/// Insert a history row of `action` for `event_id`, written `age_days` ago.
async fn history(env: &TestEnv, event_id: i64, action: &str, age_days: i32) {
    sqlx::query(
        "INSERT INTO outbox_event_history (event_id, at, action, actor, from_status, to_status, attempts)
         VALUES ($1, now() - make_interval(days => $3), $2, 'test', 'failed', 'pending', 1)",
    )
    .bind(event_id)
    .bind(action)
    .bind(age_days)
    .execute(&env.pool)
    .await
    .unwrap();
}

async fn receipts_of(env: &TestEnv, event_id: i64) -> Vec<String> {
    sqlx::query_scalar("SELECT handler FROM outbox_receipt WHERE event_id = $1 ORDER BY handler")
        .bind(event_id)
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

async fn statuses(env: &TestEnv) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT id, status FROM outbox_event ORDER BY id")
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn receipts_past_their_retention_are_deleted_and_fresh_ones_kept(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    // A pending event (never deleted) with an old and a fresh receipt, and a receipt whose event
    // is long gone (deleted by hand): only the age decides.
    let open = event(&env, "pending", 0).await;
    receipt(&env, open, "old-handler", 31).await;
    receipt(&env, open, "fresh-handler", 29).await;
    receipt(&env, 999_999, "orphan-old", 31).await;
    receipt(&env, 999_998, "orphan-fresh", 1).await;

    let report = store::purge_expired(&env.pool, &default_policy())
        .await
        .unwrap();

    assert_eq!(receipts_of(&env, open).await, ["fresh-handler"]);
    assert!(receipts_of(&env, 999_999).await.is_empty());
    assert_eq!(receipts_of(&env, 999_998).await, ["orphan-fresh"]);
    assert_eq!(report.receipts, 2);
    assert_eq!(report.total(), 2, "nothing else was old enough: {report:?}");
}

#[sqlx::test(migrations = "../migrations")]
async fn the_receipts_of_an_event_retention_deletes_go_with_it(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let old_done = event(&env, "done", 31).await;
    // Written late (the receipt writer was behind): younger than the receipt retention, but
    // without its event it says nothing anyone can read.
    receipt(&env, old_done, "late", 0).await;
    let kept_done = event(&env, "done", 29).await;
    receipt(&env, kept_done, "handler", 29).await;

    let report = store::purge_expired(&env.pool, &default_policy())
        .await
        .unwrap();

    assert_eq!(report.done_events, 1);
    assert_eq!(report.receipts, 1);
    assert!(receipts_of(&env, old_done).await.is_empty());
    assert_eq!(receipts_of(&env, kept_done).await, ["handler"]);
}

#[sqlx::test(migrations = "../migrations")]
async fn failed_and_cancelled_events_go_after_their_own_longer_retention_and_open_events_never(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    event(&env, "done", 31).await;
    let done_recent = event(&env, "done", 29).await;
    // Failed and cancelled rows outlive done ones: an operator may still requeue them.
    let failed_month = event(&env, "failed", 31).await;
    let cancelled_month = event(&env, "cancelled", 31).await;
    let failed_old = event(&env, "failed", 91).await;
    event(&env, "cancelled", 91).await;
    receipt(&env, failed_old, "handler", 91).await;
    history(&env, failed_old, "attempt", 1).await;
    // Open events are never retention's, however old their timestamps.
    let pending = event(&env, "pending", 1000).await;
    let processing = event(&env, "processing", 1000).await;

    let report = store::purge_expired(&env.pool, &default_policy())
        .await
        .unwrap();

    assert_eq!(
        statuses(&env).await,
        [
            (done_recent, "done".to_string()),
            (failed_month, "failed".to_string()),
            (cancelled_month, "cancelled".to_string()),
            (pending, "pending".to_string()),
            (processing, "processing".to_string()),
        ]
    );
    assert_eq!(
        (
            report.done_events,
            report.failed_events,
            report.cancelled_events
        ),
        (1, 1, 1)
    );
    assert!(receipts_of(&env, failed_old).await.is_empty());
    let history_left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event_history")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(history_left, 0, "an event's history goes with it");

    // A shorter failed retention is the operator's to set.
    let short = RetentionPolicy {
        failed: 30 * 24 * HOUR,
        ..default_policy()
    };
    let report = store::purge_expired(&env.pool, &short).await.unwrap();
    assert_eq!((report.failed_events, report.cancelled_events), (1, 1));
    assert_eq!(
        statuses(&env).await,
        [
            (done_recent, "done".to_string()),
            (pending, "pending".to_string()),
            (processing, "processing".to_string()),
        ]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn history_rows_past_their_retention_are_deleted_and_recent_ones_kept(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    // An event requeued and retried for months: it stays, its old history goes.
    let event_id = event(&env, "pending", 0).await;
    for (action, age) in [
        ("attempt", 120),
        ("requeue", 100),
        ("cancel", 95),
        ("attempt", 80),
        ("requeue", 1),
    ] {
        history(&env, event_id, action, age).await;
    }

    let report = store::purge_expired(&env.pool, &default_policy())
        .await
        .unwrap();

    let left: Vec<(String, i32)> = sqlx::query_as(
        "SELECT action, extract(day FROM now() - at)::int FROM outbox_event_history ORDER BY at",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        left,
        [("attempt".to_string(), 80), ("requeue".to_string(), 1)]
    );
    assert_eq!(report.history, 3);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_backlog_larger_than_one_batch_all_goes(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    for status in ["done", "failed", "cancelled"] {
        sqlx::query(
            "INSERT INTO outbox_event (event_type, payload, status, processed_at)
             SELECT 'mail.old', '{}', $1, now() - interval '100 days' FROM generate_series(1, 2500)",
        )
        .bind(status)
        .execute(&env.pool)
        .await
        .unwrap();
    }
    let keep = event(&env, "pending", 0).await;
    sqlx::query(
        "INSERT INTO outbox_receipt (event_id, handler, queue, result, attempts, updated_at)
         SELECT -g, 'h', 'q', 'dead', 1, now() - interval '100 days' FROM generate_series(1, 2500) g",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox_event_history (event_id, at, action, actor, from_status, to_status, attempts)
         SELECT $1, now() - interval '100 days', 'attempt', 'test', 'processing', 'pending', 1
         FROM generate_series(1, 2500)",
    )
    .bind(keep)
    .execute(&env.pool)
    .await
    .unwrap();

    let policy = RetentionPolicy {
        batch_size: 1000,
        ..default_policy()
    };
    let report = store::purge_expired(&env.pool, &policy).await.unwrap();

    assert_eq!(
        (
            report.done_events,
            report.failed_events,
            report.cancelled_events,
            report.receipts,
            report.history,
        ),
        (2500, 2500, 2500, 2500, 2500)
    );
    let left: (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM outbox_event), (SELECT count(*) FROM outbox_receipt),
                (SELECT count(*) FROM outbox_event_history)",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(left, (1, 0, 0));
}

#[sqlx::test(migrations = "../migrations")]
async fn only_one_host_deletes_at_a_time(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    event(&env, "done", 31).await;
    // Another host is inside a retention batch: it holds the lock for its transaction.
    let mut other = env.pool.begin().await.unwrap();
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(store::RETENTION_LOCK)
        .fetch_one(&mut *other)
        .await
        .unwrap();
    assert!(held);

    let report = store::purge_expired(&env.pool, &default_policy())
        .await
        .unwrap();
    assert!(report.yielded, "the pass gives way to the host deleting");
    assert_eq!(report.total(), 0);

    other.rollback().await.unwrap();
    let report = store::purge_expired(&env.pool, &default_policy())
        .await
        .unwrap();
    assert!(!report.yielded);
    assert_eq!(report.done_events, 1);
}

/// The plan of `sql` with `$1` = 30 days in seconds and `$2` = 1000, as text.
async fn plan_of(env: &TestEnv, sql: &str) -> String {
    let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
        .bind((720 * 3600) as f64)
        .bind(1000_i64)
        .fetch_all(&env.pool)
        .await
        .unwrap();
    lines.join("\n")
}

#[sqlx::test(migrations = "../migrations")]
async fn every_retention_statement_reads_an_index_not_the_whole_table(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    // Tables the size of a busy day, none of it old enough to delete.
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, processed_at)
         SELECT 'mail.day', '{}', (ARRAY['done', 'done', 'done', 'failed', 'cancelled', 'pending'])[1 + g % 6], now()
         FROM generate_series(1, 60000) g",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox_receipt (event_id, handler, queue, result, attempts)
         SELECT g, 'h', 'q', (ARRAY['ok', 'ok', 'retry', 'dead'])[1 + g % 4], 1 FROM generate_series(1, 60000) g",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox_event_history (event_id, action, actor, from_status, to_status, attempts)
         SELECT 1 + g % 60000, (ARRAY['attempt', 'attempt', 'attempt', 'requeue'])[1 + g % 4], 't', 'failed', 'pending', 1
         FROM generate_series(1, 60000) g",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE outbox_event, outbox_receipt, outbox_event_history")
        .execute(&env.pool)
        .await
        .unwrap();

    for (what, sql) in store::retention_statements() {
        let plan = plan_of(&env, sql).await;
        assert!(
            !plan.contains("Seq Scan"),
            "{what}: the retention statement scans a whole table:\n{plan}"
        );
    }
}

/// `echo-handler` on `queue`.
fn echo_routes(queue: &str) -> String {
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

const ECHO_PLUGINS: &[&str] = &["capability-policy", "test/echo-handler"];

/// Receivers of `queue` on `settings` and `pool`, consuming as `consumer` (not started).
async fn receivers_on(
    pool: PgPool,
    settings: &outbox_host::config::Settings,
    fixture: &PluginFixture,
    consumer: &str,
) -> (LiveConfig, Receivers) {
    let config = fixture.config(settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let receivers = Receivers::new(
        pool,
        live.clone(),
        Arc::new(config.settings.clone()),
        consumer,
    )
    .await
    .unwrap();
    (live, receivers)
}

/// A queue entry of event `event_id` (not in any stream: the outcome scripts only acknowledge
/// it, which changes nothing for an id no group delivered).
fn entry_of(event_id: i64) -> QueueEntry {
    QueueEntry::from_flat(
        format!("{event_id}-0"),
        &[
            "event_id".into(),
            event_id.to_string(),
            "event_type".into(),
            "cap.test".into(),
            "payload".into(),
            "{}".into(),
        ],
    )
}

/// The value of the counter `name` with `labels` (all of them in the series) in this
/// process's metrics, 0 when not recorded yet.
fn counter(name: &str, labels: &[(&str, &str)]) -> f64 {
    let handle = outbox_host::http::prometheus().expect("metrics recorder");
    handle
        .render()
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The event ids of the entries in stream `key`, oldest first.
async fn stream_event_ids(env: &TestEnv, key: &str) -> Vec<i64> {
    let reply: redis::streams::StreamRangeReply = env.redis.clone().xrange_all(key).await.unwrap();
    reply
        .ids
        .iter()
        .map(|id| QueueEntry::from_stream(id).event_id().unwrap())
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dead_letter_stream_keeps_its_newest_entries_at_its_cap_and_counts_what_it_trimmed(
    pool: PgPool,
) {
    const QUEUE: &str = "outbox.dlcap";
    let mut env = TestEnv::new(pool).await;
    env.settings.dead_letter_max_len = 3;
    let fixture = PluginFixture::new(ECHO_PLUGINS, &echo_routes(QUEUE));
    let (_live, receivers) = receivers_on(env.pool.clone(), &env.settings, &fixture, "dl-c1").await;
    let trimmed = || {
        counter(
            "outbox_redis_trimmed_total",
            &[("queue", QUEUE), ("kind", "dead_letter")],
        )
    };
    let before = trimmed();

    for event_id in 1..=5 {
        let handled = receivers
            .dead_letter(
                QUEUE,
                "echo-handler",
                None,
                &entry_of(event_id),
                format!("failure {event_id}"),
                None,
            )
            .await;
        assert!(matches!(handled, HandledAs::Dead(_)), "{handled:?}");
    }

    let dead = format!("{}{QUEUE}.dead-letter", env.prefix);
    assert_eq!(
        stream_event_ids(&env, &dead).await,
        [3, 4, 5],
        "the newest dead letters are kept"
    );
    assert_eq!(
        trimmed() - before,
        2.0,
        "the two oldest were trimmed and counted"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_retry_asked_for_while_the_retry_set_is_full_is_dead_lettered_and_counted(pool: PgPool) {
    const QUEUE: &str = "outbox.retrycap";
    let mut env = TestEnv::new(pool).await;
    env.settings.retry_set_max_len = 2;
    let fixture = PluginFixture::new(ECHO_PLUGINS, &echo_routes(QUEUE));
    let (_live, receivers) = receivers_on(env.pool.clone(), &env.settings, &fixture, "rs-c1").await;
    let full = || counter("outbox_retry_set_full_total", &[("queue", QUEUE)]);
    let before = full();

    let mut outcomes = Vec::new();
    for event_id in 1..=3 {
        let claim = receivers
            .claim_entry(QUEUE, "echo-handler", event_id)
            .await
            .unwrap()
            .expect("claimed");
        let retry = Retry {
            attempt: 1,
            delay: Duration::from_secs(600),
            reason: format!("not yet {event_id}"),
        };
        outcomes.push(
            receivers
                .schedule_retry(QUEUE, &claim, &entry_of(event_id), retry, None)
                .await,
        );
    }

    assert!(
        matches!(outcomes[0], HandledAs::Retry { .. }),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], HandledAs::Retry { .. }),
        "{outcomes:?}"
    );
    match &outcomes[2] {
        HandledAs::Dead(reason) => assert!(
            reason.contains("retry set full") && reason.contains("not yet 3"),
            "{reason}"
        ),
        other => panic!("the third retry found the set full, yet: {other:?}"),
    }
    let retries: i64 = env
        .redis
        .clone()
        .zcard(format!("{}outbox:retry:{QUEUE}", env.prefix))
        .await
        .unwrap();
    assert_eq!(retries, 2, "the retry set holds its cap");
    let dead = format!("{}{QUEUE}.dead-letter", env.prefix);
    assert_eq!(
        stream_event_ids(&env, &dead).await,
        [3],
        "replayable from there"
    );
    let marker: Option<String> = env
        .redis
        .clone()
        .get(format!("{}outbox:handled:echo-handler:3", env.prefix))
        .await
        .unwrap();
    assert_eq!(marker, None, "the claim is released with the dead letter");
    assert_eq!(full() - before, 1.0);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn receipts_wait_in_redis_up_to_their_cap_while_postgres_is_away_and_none_is_lost(
    pool: PgPool,
) {
    const QUEUE: &str = "outbox.receiptcap";
    const EVENTS: i64 = 60;
    const CAP: u64 = 10;
    const CONCURRENCY: usize = 2;
    let mut env = TestEnv::new(pool).await;
    env.settings.receipts_stream_max_len = CAP;
    env.settings.receiver_concurrency = CONCURRENCY;
    let fixture = PluginFixture::new(ECHO_PLUGINS, &echo_routes(QUEUE));
    let holds = || counter("outbox_receipts_backlog_holds_total", &[("queue", QUEUE)]);
    let holds_before = holds();

    // Every event is in the queue before the receiver starts.
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by("receiptcap-dispatch", live.router.clone())
        .await;
    let dispatching = tokio::spawn(dispatcher.run(shutdown.clone()));
    env.insert_many(&format!("{QUEUE}.job"), EVENTS).await;
    wait_for(
        "every event in the queue",
        Duration::from_secs(30),
        async || env.event_ids(QUEUE).await.len() as i64 == EVENTS,
    )
    .await;

    // The receiver's PostgreSQL goes away: its receipt writer cannot write.
    let proxy = OutageProxy::postgres().await;
    let receiver_pool = store::connect(&proxy.postgres_url(&env.database_url().await), 4)
        .await
        .unwrap();
    proxy.cut();
    let (_live, receivers) = receivers_on(receiver_pool, &env.settings, &fixture, "rc-c1").await;
    let receiving = tokio::spawn(receivers.consume(QUEUE.into(), shutdown.clone()));

    let receipts_stream = format!("{}outbox:receipts", env.prefix);
    let waiting = || async {
        let n: u64 = env.redis.clone().xlen(&receipts_stream).await.unwrap();
        n
    };
    wait_for(
        "the receiver held at the cap",
        Duration::from_secs(30),
        async || holds() > holds_before,
    )
    .await;
    // Held for a while: the stream stays at about the cap (past it by at most the handler runs
    // under way), the rest of the queue waits unread.
    for _ in 0..10 {
        let n = waiting().await;
        assert!(
            n <= CAP + CONCURRENCY as u64,
            "{n} receipts waiting: the cap is {CAP} with {CONCURRENCY} handlers running"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(waiting().await >= CAP);
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(written, 0, "PostgreSQL was away for the writer");

    // PostgreSQL comes back: the writer catches up, the receiver reads on, and every event has
    // exactly one receipt of one run.
    proxy.restore().await;
    wait_for(
        "every receipt written",
        Duration::from_secs(60),
        async || {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt")
                .fetch_one(&env.pool)
                .await
                .unwrap();
            n == EVENTS
        },
    )
    .await;
    let once: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_receipt WHERE result = 'ok' AND attempts = 1 AND duplicates = 0",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(once, EVENTS, "each handler ran once, none lost");
    wait_for(
        "the receipts stream drained",
        Duration::from_secs(10),
        async || waiting().await == 0,
    )
    .await;
    shutdown.cancel();
    dispatching.await.unwrap();
    receiving.await.unwrap();
    env.cleanup().await;
}
