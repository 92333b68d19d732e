//! What a plugin hands back is checked and bounded before the host keeps it: router answers
//! (queue count, queue names that could name the host's own keys, reasons), handler reasons, and
//! a router's refusal of its own config (retried, never a permanent "no route").

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::config::RoutesFile;
use outbox_host::live_config::{LiveConfig, ReloadOutcome};
use outbox_host::plugin::MAX_REASON_BYTES;
use outbox_host::receive::{DeadLetters, Receivers};
use outbox_host::routing::MAX_QUEUES_PER_EVENT;
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Routes `oversized.` events with the oversized-router test plugin, the rest natively.
const OVERSIZED_ROUTES: &str = r#"
[routes]
"mail." = "outbox.mail"
"oversized." = "outbox.mail"

[router]
plugin = "native"

[router.overrides]
"oversized." = "oversized-router"

[policy]
plugin = "deny-all"

[plugins.oversized-router]
"#;

/// A reason as the host keeps it: bounded and on one line.
fn assert_bounded_one_line(text: &str) {
    // The host adds its own context around the plugin's reason ("gave up after ...", "plugin X").
    assert!(
        text.len() <= MAX_REASON_BYTES + 200,
        "kept {} bytes: {}…",
        text.len(),
        &text[..200]
    );
    assert!(
        !text.chars().any(char::is_control),
        "control characters kept: {text:?}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_router_answer_outside_the_queue_rules_fails_only_that_event(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["test/oversized-router"], OVERSIZED_ROUTES);
    let live = LiveConfig::start(&fixture.config(&env.settings))
        .await
        .unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("oversized.fanout", json!({})),
            NewEvent::new("oversized.queue-name", json!({})),
            NewEvent::new("oversized.host-key", json!({})),
            NewEvent::new("oversized.fine", json!({})),
        ])
        .await;
    let report = dispatcher.drain().await.unwrap();
    assert_eq!(report.done, 1, "the good event goes on: {report:?}");
    for (id, expect) in [
        (
            ids[0],
            format!("returned 10000 queues for one event (at most {MAX_QUEUES_PER_EVENT})"),
        ),
        (ids[1], "returned an invalid queue name".to_string()),
        (ids[2], "no ':'".to_string()),
    ] {
        let (status, attempts, error) = env.status(id).await;
        let error = error.unwrap();
        assert_eq!(
            status, "pending",
            "the router is at fault, retried: {error}"
        );
        assert_eq!(attempts, 1);
        assert!(error.contains("plugin oversized-router"), "{error}");
        assert!(error.contains(&expect), "{error}");
        assert_bounded_one_line(&error);
    }
    // Routing to a name shaped like the host's idempotency marker wrote nothing there.
    let mut redis = env.redis.clone();
    let marker = format!("{}outbox:enqueued:outbox.mail:{}", env.prefix, ids[2]);
    let kind: String = redis::cmd("TYPE")
        .arg(&marker)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(kind, "none", "no stream was written at a host key");
    assert_eq!(env.event_ids("outbox.mail").await, vec![ids[3]]);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_no_route_reason_is_kept_bounded_and_on_one_line(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["test/oversized-router"], OVERSIZED_ROUTES);
    let live = LiveConfig::start(&fixture.config(&env.settings))
        .await
        .unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let id = env
        .publish_all(vec![NewEvent::new("oversized.reason", json!({}))])
        .await[0];
    dispatcher.drain().await.unwrap();
    let (status, _, error) = env.status(id).await;
    let error = error.unwrap();
    assert_eq!(status, "failed", "no route fails at once");
    assert!(error.starts_with("why"), "{error}");
    assert!(!error.contains("\nINFO"), "no forged log line");
    assert_bounded_one_line(&error);
    env.cleanup().await;
}

#[test]
fn routes_toml_refuses_queue_names_that_could_name_a_host_key() {
    for (queue, expect) in [
        ("outbox:retry:outbox.mail", "no ':'"),
        ("outbox.mail.dead-letter", "dead-letter stream"),
        ("", "1 to 200"),
    ] {
        let text = format!("[routes]\n\"mail.\" = \"{queue}\"\n");
        let error = RoutesFile::parse(&text, std::path::Path::new("routes.toml"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(expect), "{queue:?}: {error}");
        let text = format!("[handlers]\n\"{queue}\" = \"builtin:plugin-invoke\"\n");
        let error = RoutesFile::parse(&text, std::path::Path::new("routes.toml"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(expect), "[handlers] {queue:?}: {error}");
    }
}

/// The prefix router, given a config it refuses for `bad.` events (a prefix with no queue).
fn refused_config_routes(default_config: &str) -> String {
    format!(
        r#"
[routes]
"mail." = "outbox.mail"

[router]
plugin = "prefix-router"

[router.overrides]
"bad." = "picky-router"

[policy]
plugin = "deny-all"

[plugins.prefix-router]
{default_config}

[plugins.picky-router]
file = "prefix-router.wasm"
config = {{ routes = {{ "bad." = [] }} }}
"#
    )
}

#[sqlx::test(migrations = "../migrations")]
async fn a_router_config_error_retries_the_events_and_says_the_config_is_at_fault(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["prefix-router"], &refused_config_routes(""));
    // Start-up is lenient: the host runs, and says what is wrong.
    let live = LiveConfig::start(&fixture.config(&env.settings))
        .await
        .unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("bad.one", json!({})),
            NewEvent::new("bad.two", json!({})),
            NewEvent::new("mail.welcome", json!({})),
        ])
        .await;
    let report = dispatcher.drain().await.unwrap();
    assert_eq!(report.done, 1, "{report:?}");
    for id in &ids[..2] {
        let (status, attempts, error) = env.status(*id).await;
        let error = error.unwrap();
        // Before: `failed` at once, as "no route", although the events were fine.
        assert_eq!(status, "pending", "retried: {error}");
        assert_eq!(attempts, 1);
        assert!(
            error.contains("plugin picky-router refuses its config"),
            "{error}"
        );
        assert!(
            error.contains("prefix 'bad.' has an empty queue list"),
            "{error}"
        );
        assert_bounded_one_line(&error);
    }
    let picky = live.registry.list();
    let picky = picky.iter().find(|p| p.name == "picky-router").unwrap();
    assert_eq!(
        picky.calls, 1,
        "a refused config fails the batch once, not event by event"
    );

    // A reload that would give the default router a config it refuses is rejected; the
    // previous config keeps routing.
    std::fs::write(
        &fixture.routes_path,
        refused_config_routes("config = { routes = { \"mail.\" = [] } }"),
    )
    .unwrap();
    match live.reload_routes().await {
        ReloadOutcome::Rejected(message) => {
            assert!(
                message.contains("prefix-router refuses its config"),
                "{message}"
            )
        }
        other => panic!("accepted a config the router refuses: {other:?}"),
    }
    let id = env
        .publish_all(vec![NewEvent::new("mail.again", json!({}))])
        .await[0];
    dispatcher.drain().await.unwrap();
    assert_eq!(
        env.status(id).await.0,
        "done",
        "the old config still routes"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_handler_reason_is_kept_bounded_and_on_one_line(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_lease = Duration::from_secs(8);
    env.settings.handler_max_retries = 0;
    let routes = r#"
[routes]
"huge." = "outbox.huge"

[router]
plugin = "native"

[policy]
plugin = "deny-all"

[handlers]
"outbox.huge" = "oversized-handler"

[plugins.oversized-handler]
"#;
    let fixture = PluginFixture::new(&["test/oversized-handler"], routes);
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "c1",
    )
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let consuming = tokio::spawn(
        receivers
            .clone()
            .consume("outbox.huge".to_string(), shutdown.clone()),
    );
    let ids = env
        .publish_all(vec![
            NewEvent::new("huge.fail", json!({ "outcome": "fail" })),
            NewEvent::new("huge.retry", json!({ "outcome": "retry" })),
        ])
        .await;
    dispatcher.drain().await.unwrap();
    let dead = DeadLetters::connect(&config.settings).await.unwrap();
    let queues = vec!["outbox.huge".to_string()];
    let deadline = Instant::now() + Duration::from_secs(30);
    let letters = loop {
        let letters = dead.list(&queues).await.unwrap();
        if letters.len() == 2 {
            break letters;
        }
        assert!(Instant::now() < deadline, "both dead-lettered: {letters:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for letter in &letters {
        assert!(ids.contains(&letter.event_id.unwrap()));
        assert!(letter.error.contains("why"), "{}", letter.error);
        assert!(
            !letter.error.contains("outbox::audit: forged"),
            "cut before the end"
        );
        assert_bounded_one_line(&letter.error);
    }
    shutdown.cancel();
    let _ = consuming.await;
    env.cleanup().await;
}
