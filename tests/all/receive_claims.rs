//! Receiver claims: a handler slower than the receiver lease still runs once, its claim is
//! renewed while it runs, an owner whose claim was taken over cannot change the marker or the
//! entry, and a config whose lease does not cover a handler's time limit is refused.
//!
//! The slow-handler tests configure a lease shorter than the handler's run on purpose (the
//! config check refuses that for files; here the settings are built by hand, as an embedder or
//! a stalled process could end up with): the guarantees must hold at run time as well.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::live_config::{LiveConfig, ReloadOutcome};
use outbox_host::receive::{HandledAs, HandlerRun, QueueEntry, Receivers, Retry, Settled};
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use redis::AsyncCommands;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const QUEUE: &str = "outbox.slow";

/// `slow-handler` on `outbox.slow`: counts its runs in kv, sleeps `sleep_ms`, `ok` on its
/// first run only; its time limit (20 s) is far above the sleep.
fn routes(sleep_ms: u64, timeout_ms: u64) -> String {
    format!(
        r#"
[routes]
"slow." = "outbox.slow"

[router]
plugin = "native"

[handlers]
"outbox.slow" = "slow-handler"

[queue_groups]
general = ["outbox.slow"]

[plugins.capability-policy]

[plugins.slow-handler]
timeout_ms = {timeout_ms}
config = {{ sleep_ms = {sleep_ms} }}
grants = {{ kv = true }}
"#
    )
}

const PLUGINS: &[&str] = &["capability-policy", "test/slow-handler"];

/// A dispatcher and one receiver per consumer name, each consuming `outbox.slow`.
struct Running {
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    async fn start(env: &TestEnv, fixture: &PluginFixture, consumers: &[&str]) -> Self {
        let config = fixture.config(&env.settings);
        let live = LiveConfig::start(&config).await.unwrap();
        let shutdown = CancellationToken::new();
        let dispatcher = env
            .dispatcher_routed_by("claims-dispatch", live.router.clone())
            .await;
        let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
        for consumer in consumers {
            let receivers = Receivers::new(
                env.pool.clone(),
                live.clone(),
                Arc::new(config.settings.clone()),
                *consumer,
            )
            .await
            .unwrap();
            tasks.push(tokio::spawn(
                receivers.consume(QUEUE.to_string(), shutdown.clone()),
            ));
        }
        Self { shutdown, tasks }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The retry a consumer whose claim was taken over tries to schedule.
fn late_retry() -> Retry {
    Retry {
        attempt: 1,
        delay: Duration::from_secs(1),
        reason: "late retry".into(),
    }
}

fn marker_key(env: &TestEnv, event_id: i64) -> String {
    format!("{}outbox:handled:slow-handler:{event_id}", env.prefix)
}

async fn get(env: &TestEnv, key: &str) -> Option<String> {
    env.redis.clone().get(key).await.unwrap()
}

/// How many times slow-handler started (its kv counter).
async fn runs(env: &TestEnv) -> Option<String> {
    get(env, &format!("{}outbox:kv:slow-handler:runs", env.prefix)).await
}

async fn receipt(env: &TestEnv, event_id: i64) -> Option<(String, i32)> {
    sqlx::query_as("SELECT result, attempts FROM outbox_receipt WHERE event_id = $1")
        .bind(event_id)
        .fetch_optional(&env.pool)
        .await
        .unwrap()
}

/// Entries of `outbox.slow` delivered and not acknowledged.
async fn pending(env: &TestEnv) -> i64 {
    let summary: redis::Value = redis::cmd("XPENDING")
        .arg(format!("{}{QUEUE}", env.prefix))
        .arg("outbox")
        .query_async(&mut env.redis.clone())
        .await
        .unwrap();
    match summary {
        redis::Value::Array(parts) => redis::from_redis_value(&parts[0]).unwrap(),
        other => panic!("XPENDING: {other:?}"),
    }
}

/// (consumer, idle ms, deliveries) of each pending entry of `outbox.slow`.
async fn pending_details(env: &TestEnv) -> Vec<(String, u64, u64)> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(format!("{}{QUEUE}", env.prefix))
        .arg("outbox")
        .arg("-")
        .arg("+")
        .arg(10)
        .query_async(&mut env.redis.clone())
        .await
        .unwrap();
    rows.into_iter()
        .map(|(_, c, idle, n)| (c, idle, n))
        .collect()
}

async fn len(env: &TestEnv, key: &str, command: &str) -> i64 {
    redis::cmd(command)
        .arg(key)
        .query_async(&mut env.redis.clone())
        .await
        .unwrap()
}

async fn wait_for_receipt(env: &TestEnv, event_id: i64, timeout: Duration) -> (String, i32) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(r) = receipt(env, event_id).await {
            return r;
        }
        assert!(Instant::now() < deadline, "no receipt for {event_id}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn slow_handler_past_the_lease_runs_once_across_two_consumers_and_stays_done(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_lease = Duration::from_millis(1000);
    env.settings.handler_backoff = vec![Duration::from_millis(200)];
    env.settings.handler_max_retries = 2;
    // The handler runs three leases; the other consumer looks for stale entries every 250 ms.
    let fixture = PluginFixture::new(PLUGINS, &routes(3000, 20_000));
    let running = Running::start(&env, &fixture, &["claims-c1", "claims-c2"]).await;
    let id = env
        .publish_all(vec![NewEvent::new("slow.job", json!({}))])
        .await[0];

    assert_eq!(
        wait_for_receipt(&env, id, Duration::from_secs(30)).await,
        ("ok".to_string(), 1)
    );
    // Long enough for a second run, had one started while the first slept, to end and record
    // its outcome (it would ask for a retry).
    tokio::time::sleep(Duration::from_secs(4)).await;

    assert_eq!(
        runs(&env).await.as_deref(),
        Some("1"),
        "the handler ran once"
    );
    assert_eq!(
        get(&env, &marker_key(&env, id)).await.as_deref(),
        Some("done:ok"),
        "the done marker survives"
    );
    assert_eq!(receipt(&env, id).await, Some(("ok".to_string(), 1)));
    assert_eq!(pending(&env).await, 0, "the entry is acknowledged");
    let retries = format!("{}outbox:retry:{QUEUE}", env.prefix);
    assert_eq!(len(&env, &retries, "ZCARD").await, 0, "no retry scheduled");
    let dead = format!("{}{QUEUE}.dead-letter", env.prefix);
    assert_eq!(len(&env, &dead, "XLEN").await, 0, "nothing dead-lettered");
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_long_handler_keeps_its_claim_and_its_entry_while_it_runs(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_lease = Duration::from_millis(1000);
    // Three leases long; a second consumer reclaims whatever sits idle past the lease.
    let fixture = PluginFixture::new(PLUGINS, &routes(3000, 20_000));
    let running = Running::start(&env, &fixture, &["keep-c1", "keep-c2"]).await;
    let id = env
        .publish_all(vec![NewEvent::new("slow.job", json!({}))])
        .await[0];
    let marker = marker_key(&env, id);

    // Watch the marker and the entry from the claim until the outcome.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut claimed_at = None;
    let mut max_idle = 0;
    loop {
        let state = get(&env, &marker).await;
        match state.as_deref() {
            Some(v) if v.starts_with("running:") => {
                claimed_at.get_or_insert_with(Instant::now);
                for (_, idle, deliveries) in pending_details(&env).await {
                    max_idle = max_idle.max(idle);
                    assert_eq!(deliveries, 1, "nobody reclaimed the entry");
                }
            }
            Some("done:ok") => break,
            other => assert!(
                claimed_at.is_none(),
                "the claim lapsed while the handler ran: marker {other:?} after {:?}",
                claimed_at.map(|t| t.elapsed())
            ),
        }
        assert!(Instant::now() < deadline, "the handler never finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = claimed_at.expect("the claim was seen").elapsed();
    assert!(
        held >= Duration::from_millis(2000),
        "the run outlasted the lease ({held:?})"
    );
    assert!(
        max_idle < 1000,
        "the entry never sat idle for a lease ({max_idle} ms)"
    );
    assert_eq!(runs(&env).await.as_deref(), Some("1"));
    assert_eq!(
        wait_for_receipt(&env, id, Duration::from_secs(10)).await,
        ("ok".to_string(), 1)
    );
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_stale_owners_outcomes_cannot_touch_the_winners_marker_or_entry(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(PLUGINS, &routes(0, 2000));
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let settings = Arc::new(config.settings.clone());
    let receiver = |name: &'static str| {
        let (pool, live, settings) = (env.pool.clone(), live.clone(), settings.clone());
        async move { Receivers::new(pool, live, settings, name).await.unwrap() }
    };
    let (c1, c2) = (receiver("stale-c1").await, receiver("stale-c2").await);
    c1.ensure_group(QUEUE).await.unwrap();
    let stream = format!("{}{QUEUE}", env.prefix);
    let mut conn = env.redis.clone();
    let stream_id: String = conn
        .xadd(
            &stream,
            "*",
            &[
                ("event_id", "7"),
                ("event_type", "slow.job"),
                ("payload", "{}"),
            ],
        )
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("outbox")
        .arg("stale-c1")
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut conn)
        .await
        .unwrap();
    let entry = QueueEntry::from_flat(
        stream_id.clone(),
        &[
            "event_id".into(),
            "7".into(),
            "event_type".into(),
            "slow.job".into(),
        ],
    );
    let marker = marker_key(&env, 7);
    let retries = format!("{}outbox:retry:{QUEUE}", env.prefix);
    let dead = format!("{}{QUEUE}.dead-letter", env.prefix);

    // The stale owner's runs carry a higher attempt than the winner's: had any of their
    // receipts been appended, the receipt row would show it.
    let run = |attempts| HandlerRun {
        event_id: 7,
        handler: "slow-handler".into(),
        queue: QUEUE.into(),
        attempts,
        duration: Duration::from_millis(5),
        published: vec![],
    };
    let (late, won) = (run(9), run(1));

    // c1 claims, its claim lapses, and the same consumer name claims again: a new owner.
    let stale = c1
        .claim_entry(QUEUE, "slow-handler", 7)
        .await
        .unwrap()
        .unwrap();
    let _: i64 = conn.del(&marker).await.unwrap();
    let again = c1
        .claim_entry(QUEUE, "slow-handler", 7)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(stale.owner(), again.owner(), "one token per claim");
    assert_eq!(
        c1.finish_ok(QUEUE, &stale, &stream_id, Some(&late))
            .await
            .unwrap(),
        Settled::LostClaim
    );
    assert_eq!(
        get(&env, &marker).await,
        Some(format!("running:{}", again.owner()))
    );
    let _: i64 = conn.del(&marker).await.unwrap();

    // c2 takes over; the stale owner's outcomes change nothing while the winner runs...
    let winner = c2
        .claim_entry(QUEUE, "slow-handler", 7)
        .await
        .unwrap()
        .unwrap();
    assert!(
        winner.owner().starts_with("stale-c2:"),
        "{}",
        winner.owner()
    );
    let running = Some(format!("running:{}", winner.owner()));
    assert!(!c1.renew_claim(QUEUE, &stale, &stream_id).await.unwrap());
    assert_eq!(
        c1.finish_ok(QUEUE, &stale, &stream_id, Some(&late))
            .await
            .unwrap(),
        Settled::LostClaim
    );
    assert_eq!(
        c1.schedule_retry(QUEUE, &stale, &entry, late_retry(), Some(&late))
            .await,
        HandledAs::LostClaim
    );
    assert_eq!(
        c1.dead_letter(
            QUEUE,
            "slow-handler",
            Some(&stale),
            &entry,
            "late fail".into(),
            Some(&late),
        )
        .await,
        HandledAs::LostClaim
    );
    assert_eq!(
        get(&env, &marker).await,
        running,
        "the winner's claim holds"
    );
    assert_eq!(pending(&env).await, 1, "the entry is not acknowledged");
    assert!(c2.renew_claim(QUEUE, &winner, &stream_id).await.unwrap());
    assert_eq!(
        pending_details(&env).await[0].0,
        "stale-c2",
        "the owner's renewal holds the entry for it"
    );

    // ... nor after it finished.
    assert_eq!(
        c2.finish_ok(QUEUE, &winner, &stream_id, Some(&won))
            .await
            .unwrap(),
        Settled::Recorded
    );
    assert_eq!(
        c1.schedule_retry(QUEUE, &stale, &entry, late_retry(), Some(&late))
            .await,
        HandledAs::LostClaim
    );
    assert_eq!(
        c1.dead_letter(
            QUEUE,
            "slow-handler",
            Some(&stale),
            &entry,
            "late fail".into(),
            Some(&late),
        )
        .await,
        HandledAs::LostClaim
    );
    assert_eq!(
        c1.finish_ok(QUEUE, &stale, &stream_id, Some(&late))
            .await
            .unwrap(),
        Settled::LostClaim
    );
    assert!(!c1.renew_claim(QUEUE, &stale, &stream_id).await.unwrap());
    assert_eq!(
        get(&env, &marker).await.as_deref(),
        Some("done:ok"),
        "the winner's done marker survives"
    );
    let ttl: i64 = conn.ttl(&marker).await.unwrap();
    assert!(ttl > 0, "the done marker keeps its TTL ({ttl})");
    assert_eq!(pending(&env).await, 0);
    assert_eq!(len(&env, &retries, "ZCARD").await, 0, "nothing re-added");
    assert_eq!(len(&env, &dead, "XLEN").await, 0, "nothing dead-lettered");
    let deadline = Instant::now() + Duration::from_secs(20);
    while receipt(&env, 7).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the winner's receipt was written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        receipt(&env, 7).await,
        Some(("ok".to_string(), 1)),
        "only the winner's receipt was appended"
    );
    assert_eq!(len(&env, &stream, "XLEN").await, 1, "no entry added");
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_reload_giving_a_handler_a_time_limit_past_the_receiver_lease_is_rejected(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_lease = Duration::from_secs(10);
    let fixture = PluginFixture::new(PLUGINS, &routes(0, 5000));
    let live = LiveConfig::start(&fixture.config(&env.settings))
        .await
        .unwrap();
    fixture.replace("routes.toml", routes(0, 5001).as_bytes());
    match live.reload_routes().await {
        ReloadOutcome::Rejected(message) => {
            assert!(message.contains("OUTBOX_RECEIVER_LEASE_MS"), "{message}");
            assert!(
                message.contains("handler plugin 'slow-handler' timeout_ms = 5001 ms"),
                "{message}"
            );
        }
        other => panic!("reload applied: {other:?}"),
    }
    let timeout = live.routes.load().plugins["slow-handler"].timeout_ms;
    assert_eq!(timeout, Some(5000), "the previous routes keep serving");
    fixture.replace("routes.toml", routes(0, 4000).as_bytes());
    assert_eq!(live.reload_routes().await, ReloadOutcome::Routes);
    env.cleanup().await;
}
