//! Alerts: each fires on a constructed situation and clears when it passes, one host at a time
//! raises them, and a host killed without a goodbye is reported dead.

use std::time::{Duration, Instant};

use outbox_host::alerts::{observe, Alert, AlertBook, AlertChange, AlertLeader, AlertLimits};
use outbox_host::queue::{QueueKeys, CONSUMER_GROUP};
use outbox_host::redis_conn::{RedisConn, RedisTarget};
use outbox_tests::TestEnv;
use sqlx::PgPool;

const QUEUE: &str = "outbox.mail";
const LEASE: Duration = Duration::from_millis(300);
const LIMITS: AlertLimits = AlertLimits {
    pending_count: 10,
    pending_for: Duration::ZERO,
};

async fn redis() -> RedisConn {
    RedisTarget::parse(&outbox_tests::redis_url())
        .unwrap()
        .shared()
        .await
        .unwrap()
}

fn fired(changes: &[AlertChange]) -> Vec<Alert> {
    changes
        .iter()
        .filter_map(|c| match c {
            AlertChange::Fired(a, _) => Some(*a),
            AlertChange::Cleared(_) => None,
        })
        .collect()
}

fn cleared(changes: &[AlertChange]) -> Vec<Alert> {
    changes
        .iter()
        .filter_map(|c| match c {
            AlertChange::Cleared(a) => Some(*a),
            AlertChange::Fired(..) => None,
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn each_alert_fires_on_its_situation_and_clears_when_it_passes(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let keys = QueueKeys::new(env.prefix.clone());
    let mut conn = redis().await;
    let queues = vec![QUEUE.to_string()];
    let mut book = AlertBook::default();
    let watcher = conn.clone();
    let check = async |book: &mut AlertBook| {
        let seen = observe(
            &env.pool,
            &outbox_host::store::HorizonTracker::default(),
            &mut watcher.clone(),
            &keys,
            &queues,
            LEASE,
        )
        .await
        .unwrap();
        book.evaluate(seen, Instant::now(), LIMITS)
    };
    assert!(
        check(&mut book).await.is_empty(),
        "a quiet system raises nothing"
    );

    // Old pending events, failed ones, a dead letter, a stalled entry and a silent host.
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, created_at, available_at)
         SELECT 'mail.welcome', '{}'::jsonb, now() - interval '2 minutes', now() - interval '2 minutes'
         FROM generate_series(1, 11)
         UNION ALL
         -- Old, but scheduled for later: not late, never counted.
         SELECT 'mail.welcome', '{}'::jsonb, now() - interval '2 minutes', now() + interval '1 hour'
         FROM generate_series(1, 20)",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status) VALUES ('mail.welcome', '{}', 'failed')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let _: String = redis::cmd("XADD")
        .arg(keys.dead_letter_stream(QUEUE))
        .arg("*")
        .arg("event_id")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    let stream = keys.stream(QUEUE);
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(CONSUMER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    let entry: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("event_id")
        .arg("2")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(CONSUMER_GROUP)
        .arg("a-consumer-that-died")
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO outbox_worker (id, host_name, version, counters, last_seen)
         VALUES ('killed-host', 'h', '0', '{}', now() - interval '2 minutes'),
                ('live-host', 'h', '0', '{}', now()),
                ('long-gone-host', 'h', '0', '{}', now() - interval '2 days')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;

    let changes = check(&mut book).await;
    assert_eq!(
        fired(&changes),
        [
            Alert::PendingBacklog,
            Alert::FailedGrowing,
            Alert::DeadLettersGrowing,
            Alert::StalledEntries,
            Alert::DeadHost
        ]
    );
    let firing = book.firing();
    assert!(firing[&Alert::PendingBacklog].contains("11 pending events older than 60 s"));
    assert!(firing[&Alert::StalledEntries].contains("outbox.mail: 1"));
    assert!(
        firing[&Alert::DeadHost].contains("killed-host")
            && !firing[&Alert::DeadHost].contains("live-host")
            && !firing[&Alert::DeadHost].contains("long-gone-host"),
        "{}",
        firing[&Alert::DeadHost]
    );

    // Each situation passes: the backlog drains, nothing more fails or dead-letters, the entry
    // is acknowledged, the dead host is dealt with.
    sqlx::query("UPDATE outbox_event SET status = 'done' WHERE status = 'pending'")
        .execute(&env.pool)
        .await
        .unwrap();
    let _: i64 = redis::cmd("XACK")
        .arg(&stream)
        .arg(CONSUMER_GROUP)
        .arg(&entry)
        .query_async(&mut conn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM outbox_worker WHERE id = 'killed-host'")
        .execute(&env.pool)
        .await
        .unwrap();
    let changes = check(&mut book).await;
    assert_eq!(cleared(&changes), Alert::ALL);
    assert!(book.firing().is_empty());
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .arg(keys.dead_letter_stream(QUEUE))
        .query_async(&mut conn)
        .await
        .unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn one_host_at_a_time_raises_the_alerts_and_another_takes_over_when_it_goes(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let mut first = AlertLeader::for_pool(&env.pool);
    let mut second = AlertLeader::for_pool(&env.pool);
    assert!(first.hold().await.unwrap());
    assert!(!second.hold().await.unwrap(), "the lock is taken");
    assert!(first.hold().await.unwrap(), "still the alerting host");
    assert!(!second.hold().await.unwrap());
    drop(first); // its connection closes, and the lock goes with it
    let deadline = Instant::now() + Duration::from_secs(5);
    while !second.hold().await.unwrap() {
        assert!(Instant::now() < deadline, "nobody took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn queue_figures_show_unacked_entries_lag_dead_letters_and_the_oldest_entry_age(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let keys = QueueKeys::for_redis_url(&env.settings.redis_prefix, &env.settings.redis_url);
    let mut conn = env.redis.clone();
    let stream = keys.stream(QUEUE);
    // Three entries added a minute ago; the receivers' group took one and did not acknowledge it.
    let minute_ago = chrono::Utc::now().timestamp_millis() - 60_000;
    for i in 0..3 {
        let _: String = redis::cmd("XADD")
            .arg(&stream)
            .arg(format!("{}-{i}", minute_ago))
            .arg("event_id")
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(CONSUMER_GROUP)
        .arg("0")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(CONSUMER_GROUP)
        .arg("c1")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg(keys.dead_letter_stream(QUEUE))
        .arg("*")
        .arg("event_id")
        .arg("9")
        .query_async(&mut conn)
        .await
        .unwrap();
    let routes = outbox_host::config::RoutesFile::parse(
        "[routes]\n\"mail.\" = \"outbox.mail\"\n\"audit.\" = \"outbox.audit\"\n[router]\nplugin = \"native\"\n[policy]\nplugin = \"deny-all\"\n",
        std::path::Path::new("routes.toml"),
    )
    .unwrap();
    let backlogs = outbox_host::queue::queue_backlogs_with_consumers(
        &mut conn,
        &keys,
        &routes,
        &["outbox.mail".to_string(), "outbox.audit".to_string()],
    )
    .await
    .unwrap();
    let mail = backlogs[0].consumers.unwrap();
    assert_eq!(backlogs[0].waiting, 3);
    assert_eq!(
        (mail.pending, mail.lag, mail.dead_letters),
        (Some(1), Some(2), 1)
    );
    let age = mail.oldest_entry_age_seconds.unwrap();
    assert!((59.0..120.0).contains(&age), "{age}");
    // A queue nothing was added to: nothing waits, no group.
    let audit = backlogs[1].consumers.unwrap();
    assert_eq!(backlogs[1].waiting, 0);
    assert_eq!(
        (audit.pending, audit.lag, audit.oldest_entry_age_seconds),
        (None, None, None)
    );
    // Every entry acknowledged and delivered: nothing unfinished, whatever the stream holds.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(CONSUMER_GROUP)
        .arg("c1")
        .arg("COUNT")
        .arg(10)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 0..3 {
        let _: i64 = redis::cmd("XACK")
            .arg(&stream)
            .arg(CONSUMER_GROUP)
            .arg(format!("{minute_ago}-{i}"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let backlogs = outbox_host::queue::queue_backlogs_with_consumers(
        &mut conn,
        &keys,
        &routes,
        &["outbox.mail".to_string()],
    )
    .await
    .unwrap();
    let mail = backlogs[0].consumers.unwrap();
    assert_eq!(
        (mail.pending, mail.lag, mail.oldest_entry_age_seconds),
        (Some(0), Some(0), None)
    );
    env.cleanup().await;
}
