//! Per-call limits hold against hostile plugins: a plugin that sleeps (or waits on host calls)
//! is cut at its `timeout_ms` like one that computes, the host never waits on it for longer
//! (dispatcher, receivers, policy checks, shutdown), and a flood of calls of one plugin cannot
//! take the pooling allocator from the others.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::capability::CapabilityPolicy;
use outbox_host::live_config::LiveConfig;
use outbox_host::plugin::bindings::WitEvent;
use outbox_host::plugin::wit_event::to_wit_event;
use outbox_host::receive::{DeadLetters, Receivers};
use outbox_host::store::ClaimedEvent;
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Routes with `prefix-router` as the default router plus `extra` TOML.
fn routes_with(extra: &str) -> String {
    format!(
        "[routes]\n\"mail.\" = \"outbox.mail\"\n\"sleepy.\" = \"outbox.sleepy\"\n\
         [router]\nplugin = \"prefix-router\"\n{extra}\n[plugins.prefix-router]\n"
    )
}

fn wit_events(n: i64) -> Vec<WitEvent> {
    (1..=n)
        .map(|i| to_wit_event(&ClaimedEvent::unclaimed(i, "mail.welcome", "{}")))
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_sleeping_router_plugin_is_cut_at_its_time_limit_and_the_dispatcher_goes_on(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let extra =
        "[router.overrides]\n\"sleepy.\" = \"sleep-forever\"\n[policy]\nplugin = \"deny-all\"\n\
                 [plugins.sleep-forever]\ntimeout_ms = 300\n";
    let fixture = PluginFixture::new(
        &["prefix-router", "test/sleep-forever"],
        &routes_with(extra),
    );
    let live = LiveConfig::start(&fixture.config(&env.settings))
        .await
        .unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("sleepy.nap", json!({})),
            NewEvent::new("mail.welcome", json!({})),
        ])
        .await;
    // Before: the router call slept on a blocking thread for u64::MAX ns and drain never
    // returned.
    let started = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(30), dispatcher.drain())
        .await
        .expect("the dispatcher waited on a sleeping plugin")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.done, 1, "the other event goes on: {report:?}");
    assert_eq!(env.event_ids("outbox.mail").await, vec![ids[1]]);
    let (status, attempts, error) = env.status(ids[0]).await;
    let error = error.unwrap();
    assert_eq!((status.as_str(), attempts), ("pending", 1), "retried later");
    assert!(
        error.contains("plugin sleep-forever: exceeded its time limit of 300 ms"),
        "{error}"
    );
    env.cleanup().await;
}

const HANDLER_PLUGINS: &[&str] = &["capability-policy", "test/sleep-forever-handler"];

/// Two queues whose handler never finishes: one sleeps, one sleeps between kv calls.
const SLEEPY_HANDLERS: &str = r#"
[routes]
"sleepy." = "outbox.sleepy"
"chatty." = "outbox.chatty"

[router]
plugin = "native"

[handlers]
"outbox.sleepy" = "sleep-forever-handler"
"outbox.chatty" = "chatty-sleeper"

[queue_groups]
general = ["outbox.sleepy", "outbox.chatty"]

[plugins.capability-policy]

[plugins.sleep-forever-handler]
timeout_ms = 300

[plugins.chatty-sleeper]
file = "sleep-forever-handler.wasm"
timeout_ms = 300
config = { mode = "host-calls" }
grants = { kv = true }
"#;

#[sqlx::test(migrations = "../migrations")]
async fn a_sleeping_handler_is_cut_at_its_time_limit_and_dead_lettered_by_its_rules(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_lease = Duration::from_secs(2);
    env.settings.handler_max_retries = 1;
    env.settings.handler_backoff = vec![Duration::from_millis(200)];
    let fixture = PluginFixture::new(HANDLER_PLUGINS, SLEEPY_HANDLERS);
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by("sleepy-dispatch", live.router.clone())
        .await;
    let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "sleepy-consumer",
    )
    .await
    .unwrap();
    for queue in receivers.queues_for_group(Some("general")) {
        tasks.push(tokio::spawn(
            receivers.clone().consume(queue, shutdown.clone()),
        ));
    }
    let ids = env
        .publish_all(vec![
            NewEvent::new("sleepy.nap", json!({})),
            NewEvent::new("chatty.nap", json!({})),
        ])
        .await;
    let dead = DeadLetters::connect(&config.settings).await.unwrap();
    let queues = vec!["outbox.sleepy".to_string(), "outbox.chatty".to_string()];
    // Before: each handler call held its receiver slot forever; nothing was ever dead-lettered.
    let started = Instant::now();
    let letters = loop {
        let letters = dead.list(&queues).await.unwrap();
        if letters.len() == 2 {
            break letters;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the sleeping handlers were never cut: {letters:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (id, plugin) in [
        (ids[0], "sleep-forever-handler"),
        (ids[1], "chatty-sleeper"),
    ] {
        let letter = letters
            .iter()
            .find(|l| l.event_id == Some(id))
            .unwrap_or_else(|| panic!("no dead letter for {plugin}: {letters:?}"));
        assert_eq!(letter.attempts, 2, "first try plus the 1 configured retry");
        assert!(
            letter.error.starts_with("gave up after 2 attempts")
                && letter.error.contains(&format!(
                    "plugin {plugin}: exceeded its time limit of 300 ms"
                )),
            "{}",
            letter.error
        );
    }
    shutdown.cancel();
    for t in tasks {
        t.await.unwrap();
    }
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sleeping_policy_plugin_is_cut_and_the_host_call_is_denied() {
    let routes = "[router]\nplugin = \"native\"\n[policy]\nplugin = \"sleep-forever-policy\"\n\
                  [plugins.sleep-forever-policy]\ntimeout_ms = 300\n\
                  [plugins.sleep-forever-handler]\ngrants = { kv = true }\n";
    let fixture = PluginFixture::new(
        &["test/sleep-forever-policy", "test/sleep-forever-handler"],
        routes,
    );
    let live = LiveConfig::start(&fixture.config(&outbox_host::config::Settings::default()))
        .await
        .unwrap();
    let caller = live.registry.get("sleep-forever-handler").unwrap();
    let policy = CapabilityPolicy::with_plugin(live.registry.clone(), "sleep-forever-policy");
    let started = Instant::now();
    let decision = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || policy.check(&caller, "kv", "counter")),
    )
    .await
    .expect("the policy check waited on a sleeping policy")
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let reason = decision.unwrap_err();
    assert!(
        reason.contains("fail closed")
            && reason.contains("plugin sleep-forever-policy: exceeded its time limit of 300 ms"),
        "{reason}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn host_shutdown_finishes_promptly_while_a_handler_sleeps(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let routes = r#"
[routes]
"sleepy." = "outbox.sleepy"
[router]
plugin = "native"
[handlers]
"outbox.sleepy" = "sleep-forever-handler"
[policy]
plugin = "deny-all"
[plugins.sleep-forever-handler]
timeout_ms = 3000
"#;
    let fixture = PluginFixture::new(&["test/sleep-forever-handler"], routes);
    let host = outbox_host::Host::builder()
        .config(fixture.config(&env.settings))
        .pool(env.pool.clone())
        .worker_id("sleepy-host")
        .start()
        .await
        .unwrap();
    let live = host.live().unwrap().clone();
    let id = env
        .publish_all(vec![NewEvent::new("sleepy.nap", json!({}))])
        .await[0];
    let started = Instant::now();
    while env.status(id).await.0 != "done" {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not dispatched"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the receiver start the handler, which then sleeps.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), host.shutdown())
        .await
        .expect("shutdown waited on a sleeping plugin");
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "{:?}",
        stopping.elapsed()
    );
    // No plugin call outlives the host: the sleeping call was cut (an error) and counted.
    // Before: it slept on in a blocking thread after shutdown, never counted.
    let plugin = live
        .registry
        .list()
        .into_iter()
        .find(|p| p.name == "sleep-forever-handler")
        .unwrap();
    assert_eq!((plugin.calls, plugin.errors), (1, 1), "{plugin:?}");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_plugin_flooded_with_sleeping_calls_leaves_the_pool_to_the_others() {
    let routes = routes_with(
        "[router.overrides]\n\"sleepy.\" = \"sleep-forever\"\n[policy]\nplugin = \"deny-all\"\n\
         [plugins.sleep-forever]\ntimeout_ms = 4000\n",
    );
    let fixture = PluginFixture::new(&["prefix-router", "test/sleep-forever"], &routes);
    let live = LiveConfig::start(&fixture.config(&outbox_host::config::Settings::default()))
        .await
        .unwrap();
    let sleeper = live.registry.get("sleep-forever").unwrap();
    let router = live.registry.get("prefix-router").unwrap();
    assert_eq!(sleeper.limits.max_concurrency, 16, "the default");
    // More concurrent calls than the pool has component instances (256).
    let started = Instant::now();
    let sleeping: Vec<_> = (0..300)
        .map(|_| {
            let sleeper = sleeper.clone();
            tokio::task::spawn_blocking(move || sleeper.call_router(&wit_events(1)))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // 300 calls started and each sleeps until its 4 s run out: 16 hold the plugin's slots and
    // the rest wait for one. Counted here, not from the errors below: a waiting call says it
    // waited only if its time ran out before a slot came free, and that depends on how far
    // apart the blocking threads started (on a loaded machine, none did).
    assert_eq!(
        sleeper.calls_running(),
        16,
        "the slots are full and no more run"
    );
    // Before: the sleeping calls held every instance of the pool, and these failed with
    // "maximum concurrent component instance limit of 256 reached".
    for _ in 0..20 {
        let router = router.clone();
        let answer = tokio::task::spawn_blocking(move || router.call_router(&wit_events(3)))
            .await
            .unwrap();
        assert_eq!(answer.unwrap().len(), 3);
    }
    for call in sleeping {
        let error = call.await.unwrap().unwrap_err().to_string();
        assert!(
            error.contains("plugin sleep-forever: exceeded its time limit of 4000 ms"),
            "{error}"
        );
    }
    assert_eq!(sleeper.calls_running(), 0, "every slot given back");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn timed_out_calls_give_their_pool_slots_back() {
    let routes = routes_with(
        "[router.overrides]\n\"sleepy.\" = \"sleep-forever\"\n[policy]\nplugin = \"deny-all\"\n\
         [plugins.sleep-forever]\ntimeout_ms = 20\nmax_concurrency = 32\n",
    );
    let fixture = PluginFixture::new(&["prefix-router", "test/sleep-forever"], &routes);
    let live = LiveConfig::start(&fixture.config(&outbox_host::config::Settings::default()))
        .await
        .unwrap();
    let sleeper = live.registry.get("sleep-forever").unwrap();
    // 400 calls cut at their deadline, more than the pool's 256 component instances: each
    // dropped call must give its instance back, or the later ones fail to instantiate.
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let sleeper = sleeper.clone();
            tokio::task::spawn_blocking(move || {
                (0..25)
                    .map(|_| sleeper.call_router(&wit_events(1)).unwrap_err().to_string())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for worker in workers {
        for error in worker.await.unwrap() {
            assert!(
                error.contains("exceeded its time limit of 20 ms"),
                "{error}"
            );
        }
    }
    let router = live.registry.get("prefix-router").unwrap();
    let answer = tokio::task::spawn_blocking(move || router.call_router(&wit_events(2)))
        .await
        .unwrap();
    assert_eq!(answer.unwrap().len(), 2);
}

/// A handler with one call slot and a time limit that fits one call (600 ms) but not the wait
/// behind two others.
const ONE_SLOT_HANDLER: &str = r#"
[routes]
"sleepy." = "outbox.sleepy"

[router]
plugin = "native"

[handlers]
"outbox.sleepy" = "sleepy-handler"

[queue_groups]
general = ["outbox.sleepy"]

[policy]
plugin = "deny-all"

[plugins.sleepy-handler]
timeout_ms = 1500
max_concurrency = 1
"#;

#[sqlx::test(migrations = "../migrations")]
async fn deliveries_beyond_a_handlers_call_slots_wait_for_a_slot_without_timing_out(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_concurrency = 4;
    env.settings.handler_max_retries = 0;
    let fixture = PluginFixture::new(&["test/sleepy-handler"], ONE_SLOT_HANDLER);
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by("one-slot-dispatch", live.router.clone())
        .await;
    let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "one-slot-consumer",
    )
    .await
    .unwrap();
    for queue in receivers.queues_for_group(Some("general")) {
        tasks.push(tokio::spawn(
            receivers.clone().consume(queue, shutdown.clone()),
        ));
    }
    // Four deliveries in flight at once, one slot: the last waits three calls (1.8 s), longer
    // than the time limit. Before, that wait counted against the limit and the later calls
    // were cut ("waiting for a call slot") and dead-lettered (no retries configured).
    env.publish_all(
        (0..4)
            .map(|_| NewEvent::new("sleepy.nap", json!({"sleep_ms": 600})))
            .collect(),
    )
    .await;
    let started = Instant::now();
    let receipts: Vec<(String, i32, Option<String>)> = loop {
        let receipts: Vec<(String, i32, Option<String>)> =
            sqlx::query_as("SELECT result, attempts, error FROM outbox_receipt")
                .fetch_all(&env.pool)
                .await
                .unwrap();
        if receipts.len() == 4 {
            break receipts;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "only {} of 4 receipts: {receipts:?}",
            receipts.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        receipts
            .iter()
            .all(|(result, attempts, _)| result == "ok" && *attempts == 1),
        "every delivery ran once, in its turn, within its own time limit: {receipts:?}"
    );
    shutdown.cancel();
    for t in tasks {
        t.await.unwrap();
    }
    env.cleanup().await;
}

/// The epoch ticker rests while no plugin runs; a plugin that computes forever, called after
/// the engine sat idle, is still stopped at its time limit (its store wakes the ticker), every
/// time.
#[tokio::test(flavor = "multi_thread")]
async fn a_computing_plugin_called_after_the_engine_sat_idle_is_stopped_at_its_time_limit() {
    let routes = routes_with(
        "[router.overrides]\n\"evil.\" = \"loop-forever\"\n[policy]\nplugin = \"deny-all\"\n\
         [plugins.loop-forever]\nfuel = 1_000_000_000_000\ntimeout_ms = 300\n",
    );
    let fixture = PluginFixture::new(&["prefix-router", "test/loop-forever"], &routes);
    let live = LiveConfig::start(&fixture.config(&outbox_host::config::Settings::default()))
        .await
        .unwrap();
    let looper = live.registry.get("loop-forever").unwrap();
    for _ in 0..2 {
        // Long enough for the ticker to rest (50 ticks without a store).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let call = tokio::task::spawn_blocking({
            let looper = looper.clone();
            move || looper.call_router(&wit_events(1))
        });
        let error = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("a computing plugin ran on past its time limit: the epoch did not tick")
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("plugin loop-forever: exceeded its time limit of 300 ms"),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{error}");
    }
}
