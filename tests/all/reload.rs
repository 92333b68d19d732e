//! Hot reload edge cases: a plugin file that arrives after the routes naming it, a policy
//! swapped while handlers ask it, receivers following `[handlers]`, and a plugin bound where its
//! world does not fit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_host::capability::CapabilityPolicy;
use outbox_host::live_config::{LiveConfig, ReloadOutcome};
use outbox_host::receive::{HandledAs, QueueEntry, Receivers};
use outbox_host::{Host, NewEvent};
use outbox_tests::{another_build_of, plugin_file, PluginFixture, TestEnv};
use redis::AsyncCommands;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn receipt_of(env: &TestEnv, event_id: i64) -> Option<String> {
    sqlx::query_scalar("SELECT result FROM outbox_receipt WHERE event_id = $1")
        .bind(event_id)
        .fetch_optional(&env.pool)
        .await
        .unwrap()
}

/// Routes with the prefix-router, `extra` appended.
fn router_routes(extra: &str) -> String {
    format!(
        "[routes]\n\"mail.\" = \"outbox.mail\"\n\
         [router]\nplugin = \"prefix-router\"\n{extra}\n\
         [policy]\nplugin = \"deny-all\"\n\
         [plugins.prefix-router]\n"
    )
}

#[sqlx::test(migrations = "../migrations")]
async fn routes_naming_a_plugin_whose_wasm_arrives_later_apply_when_the_file_appears(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["prefix-router"], &router_routes(""));
    let live = LiveConfig::start(&fixture.config(&env.settings))
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;

    // A deploy writes routes.toml first; the new plugin's .wasm is still being copied.
    let with_late = router_routes(
        "[router.overrides]\n\"late.\" = \"prefix-router-alt\"\n[plugins.prefix-router-alt]\n",
    );
    fixture.replace("routes.toml", with_late.as_bytes());
    let outcome = live.reload_routes().await;
    let ReloadOutcome::Waiting(message) = &outcome else {
        panic!("expected the change to wait for its file, got {outcome:?}")
    };
    assert!(
        message.contains("prefix-router-alt.wasm") && message.contains("waits"),
        "the warning names the file it waits for: {message}"
    );
    assert_eq!(live.pending_reload().as_deref(), Some(message.as_str()));
    assert!(
        live.routes.load().router.overrides.is_empty(),
        "the previous routes keep serving meanwhile"
    );
    let early = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    dispatcher.drain().await.unwrap();
    assert_eq!(env.event_ids("outbox.mail").await, vec![early]);

    // Let the watcher see the routes.toml write too (it waits as well), so that only the
    // arrival of the file can apply the change.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(live.routes.load().router.overrides.is_empty());

    // The file arrives, copied in place (not renamed): the pending change is applied.
    std::fs::copy(
        plugin_file("test/prefix-router-alt"),
        fixture.dir.path().join("prefix-router-alt.wasm"),
    )
    .unwrap();
    wait_for(
        "the pending routes change",
        Duration::from_secs(10),
        async || !live.routes.load().router.overrides.is_empty(),
    )
    .await;
    assert!(live.registry.get("prefix-router-alt").is_some());
    assert_eq!(live.pending_reload(), None, "nothing waits any more");
    let late = env
        .publish_all(vec![NewEvent::new("late.arrival", json!({}))])
        .await[0];
    dispatcher.drain().await.unwrap();
    assert_eq!(
        env.event_ids("outbox.alt").await,
        vec![late],
        "the late plugin routes its prefix"
    );
    shutdown.cancel();
    watcher.await.unwrap();
    env.cleanup().await;
}

#[tokio::test]
async fn a_plugin_missing_at_start_up_is_loaded_when_its_file_appears() {
    let fixture = PluginFixture::new(&[], &router_routes(""));
    let settings = outbox_host::config::Settings::default();
    let live = LiveConfig::start(&fixture.config(&settings)).await.unwrap();
    assert!(live.registry.get("prefix-router").is_none());
    assert_eq!(
        live.router.current().name(),
        "native-table",
        "the built-in table stands in meanwhile"
    );
    assert!(live
        .pending_reload()
        .is_some_and(|m| m.contains("prefix-router.wasm")));
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // watcher armed
    std::fs::copy(
        plugin_file("prefix-router"),
        fixture.dir.path().join("prefix-router.wasm"),
    )
    .unwrap();
    wait_for("the router plugin", Duration::from_secs(10), async || {
        live.router.current().name() == "prefix-router"
    })
    .await;
    assert_eq!(live.pending_reload(), None);
    shutdown.cancel();
    watcher.await.unwrap();
}

/// Policy routes: `policy` names the policy plugin (declared with `capability-policy.wasm`),
/// `caller` is a handler granted `publish` of `allowed.`.
fn policy_routes(policy: &str) -> String {
    format!(
        "[policy]\nplugin = \"{policy}\"\n\
         [plugins.{policy}]\nfile = \"capability-policy.wasm\"\n\
         [plugins.caller]\nfile = \"echo-handler.wasm\"\ngrants = {{ publish = [\"allowed.\"] }}\n"
    )
}

#[tokio::test]
async fn the_policy_is_never_missing_while_its_file_is_replaced_or_it_is_renamed() {
    let fixture = PluginFixture::new(
        &["capability-policy", "test/echo-handler"],
        &policy_routes("capability-policy"),
    );
    let settings = outbox_host::config::Settings::default();
    let live = LiveConfig::start(&fixture.config(&settings)).await.unwrap();
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // watcher armed
    let caller = live.registry.get("caller").unwrap();
    let policy = Arc::new(CapabilityPolicy::new(
        live.registry.clone(),
        live.routes.clone(),
    ));

    // A handler asks all the time: a granted publish must always be allowed (by the old or the
    // new version), never denied because no policy was found.
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let wrong: Arc<Mutex<Vec<String>>> = Arc::default();
    let asker = {
        let (policy, stop, checks, wrong) =
            (policy.clone(), stop.clone(), checks.clone(), wrong.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Err(reason) = policy.check(&caller, "publish", "allowed.thing") {
                    wrong.lock().unwrap().push(reason);
                }
                checks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let policy_hash = |name: &str| live.registry.get(name).map(|p| p.compiled.hash.clone());
    let original = std::fs::read(plugin_file("capability-policy")).unwrap();
    let first = policy_hash("capability-policy").unwrap();

    // 1. Atomic replacement: a new build renamed over the file.
    fixture.replace(
        "capability-policy.wasm",
        &another_build_of(&original, "rename"),
    );
    wait_for(
        "the renamed-in build",
        Duration::from_secs(10),
        async || policy_hash("capability-policy").is_some_and(|h| h != first),
    )
    .await;
    let second = policy_hash("capability-policy").unwrap();

    // 2. Delete, then create: the deletion is seen on its own before the new file appears.
    let path = fixture.dir.path().join("capability-policy.wasm");
    std::fs::remove_file(&path).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        policy_hash("capability-policy").as_ref(),
        Some(&second),
        "a deleted file leaves the serving version in place"
    );
    std::fs::write(&path, another_build_of(&original, "delete+create")).unwrap();
    wait_for(
        "the re-created build",
        Duration::from_secs(10),
        async || policy_hash("capability-policy").is_some_and(|h| h != second),
    )
    .await;

    // 3. The policy plugin renamed in routes.toml, back and forth.
    for round in 0..40 {
        let name = if round % 2 == 0 {
            "policy-b"
        } else {
            "capability-policy"
        };
        fixture.replace("routes.toml", policy_routes(name).as_bytes());
        assert_eq!(live.reload_routes().await, ReloadOutcome::Routes);
        assert_eq!(live.routes.load().policy.plugin, name);
    }
    stop.store(true, Ordering::Relaxed);
    asker.join().unwrap();
    let wrong = std::mem::take(&mut *wrong.lock().unwrap());
    println!(
        "{} checks during the swaps, {} wrong",
        checks.load(Ordering::Relaxed),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {} checks were denied during the swaps, first: {}",
        wrong.len(),
        checks.load(Ordering::Relaxed),
        wrong[0]
    );
    shutdown.cancel();
    watcher.await.unwrap();
}

const HANDLER_QUEUE: &str = "outbox.reload";

/// Routes for the receiver tests: `reload.` goes to [`HANDLER_QUEUE`], whose handler is
/// `handler` (`None`: no `[handlers]` entry). `prefix-router` is declared for the wrong-world
/// test; the other tests leave its file out, which must not hold their reloads back (it was
/// left out of the routes in force already).
fn receiver_routes(handler: Option<&str>) -> String {
    let handlers = handler
        .map(|h| format!("[handlers]\n\"{HANDLER_QUEUE}\" = \"{h}\"\n"))
        .unwrap_or_default();
    format!(
        "[routes]\n\"reload.\" = \"{HANDLER_QUEUE}\"\n\"mail.\" = \"outbox.mail\"\n\
         [router]\nplugin = \"native\"\n{handlers}\
         [policy]\nplugin = \"deny-all\"\n\
         [plugins.sleepy-handler]\ntimeout_ms = 20000\n\
         [plugins.prefix-router]\n"
    )
}

async fn start_host(env: &TestEnv, fixture: &PluginFixture) -> Host {
    Host::builder()
        .config(fixture.config(&env.settings))
        .pool(env.pool.clone())
        .worker_id("reloading")
        .start()
        .await
        .unwrap()
}

fn receiving(host: &Host) -> Vec<String> {
    host.receivers()
        .map(Receivers::receiving)
        .unwrap_or_default()
}

/// Pending entries of the receivers' group on `queue` and the id it last delivered.
async fn group_state(env: &TestEnv, queue: &str) -> (usize, String) {
    let mut conn = env.redis.clone();
    let groups: redis::streams::StreamInfoGroupsReply = conn
        .xinfo_groups(format!("{}{queue}", env.prefix))
        .await
        .unwrap();
    let group = groups
        .groups
        .into_iter()
        .find(|g| g.name == "outbox")
        .unwrap();
    (group.pending, group.last_delivered_id)
}

fn test_settings(env: &mut TestEnv) {
    env.settings.dispatch_interval = Duration::from_millis(100);
    env.settings.receiver_lease = Duration::from_secs(30);
    env.settings.shutdown_grace = Duration::from_secs(10);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_queue_gaining_or_losing_its_handler_starts_or_stops_its_receiver_and_keeps_its_entries(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    test_settings(&mut env);
    let fixture = PluginFixture::new(&["test/sleepy-handler"], &receiver_routes(None));
    let host = start_host(&env, &fixture).await;
    let first = env
        .publish_all(vec![NewEvent::new("reload.one", json!({}))])
        .await[0];
    wait_for("the first entry", Duration::from_secs(10), async || {
        env.event_ids(HANDLER_QUEUE).await == vec![first]
    })
    .await;

    // The queue gains a handler: its receiver starts, no restart.
    fixture.replace(
        "routes.toml",
        receiver_routes(Some("sleepy-handler")).as_bytes(),
    );
    wait_for("the first receipt", Duration::from_secs(20), async || {
        receipt_of(&env, first).await.as_deref() == Some("ok")
    })
    .await;
    assert_eq!(receiving(&host), vec![HANDLER_QUEUE.to_string()]);

    // It loses the handler: the receiver stops, and new entries stay in the stream untouched.
    fixture.replace("routes.toml", receiver_routes(None).as_bytes());
    wait_for(
        "the receiver to stop",
        Duration::from_secs(20),
        async || receiving(&host).is_empty(),
    )
    .await;
    let (_, delivered_before) = group_state(&env, HANDLER_QUEUE).await;
    let waiting = env
        .publish_all(vec![
            NewEvent::new("reload.two", json!({})),
            NewEvent::new("reload.three", json!({})),
        ])
        .await;
    wait_for("the waiting entries", Duration::from_secs(10), async || {
        env.event_ids(HANDLER_QUEUE).await.len() == 3
    })
    .await;
    // Long enough for a running receiver to have read them many times over (it blocks 200 ms).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        group_state(&env, HANDLER_QUEUE).await,
        (0, delivered_before),
        "entries of a queue without a handler are neither delivered nor left busy"
    );
    for id in &waiting {
        assert_eq!(receipt_of(&env, *id).await, None);
    }

    // The handler comes back: the waiting entries are handled.
    fixture.replace(
        "routes.toml",
        receiver_routes(Some("sleepy-handler")).as_bytes(),
    );
    wait_for(
        "the waiting entries handled",
        Duration::from_secs(20),
        async || {
            receipt_of(&env, waiting[0]).await.as_deref() == Some("ok")
                && receipt_of(&env, waiting[1]).await.as_deref() == Some("ok")
        },
    )
    .await;
    assert_eq!(group_state(&env, HANDLER_QUEUE).await.0, 0);
    tokio::time::timeout(Duration::from_secs(20), host.shutdown())
        .await
        .unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_receiver_stopped_by_a_reload_lets_its_running_handler_finish(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_settings(&mut env);
    // Shorter than the handler call: a stop by reload must not cut it at the shutdown grace.
    env.settings.shutdown_grace = Duration::from_millis(300);
    let fixture = PluginFixture::new(
        &["test/sleepy-handler"],
        &receiver_routes(Some("sleepy-handler")),
    );
    let host = start_host(&env, &fixture).await;
    let slow = env
        .publish_all(vec![NewEvent::new(
            "reload.slow",
            json!({"sleep_ms": 2000}),
        )])
        .await[0];
    let marker = format!("{}outbox:handled:sleepy-handler:{slow}", env.prefix);
    wait_for(
        "the handler to start",
        Duration::from_secs(20),
        async || {
            let state: Option<String> = env.redis.clone().get(&marker).await.unwrap();
            state.is_some_and(|s| s.starts_with("running"))
        },
    )
    .await;
    fixture.replace("routes.toml", receiver_routes(None).as_bytes());
    wait_for(
        "the receiver to stop",
        Duration::from_secs(20),
        async || receiving(&host).is_empty(),
    )
    .await;
    // Its outcome was recorded before the loop stopped; the receipt follows through the
    // receipts stream.
    wait_for(
        "the call in flight finished and was recorded",
        Duration::from_secs(10),
        async || receipt_of(&env, slow).await.as_deref() == Some("ok"),
    )
    .await;
    assert_eq!(
        group_state(&env, HANDLER_QUEUE).await.0,
        0,
        "and acknowledged"
    );
    tokio::time::timeout(Duration::from_secs(20), host.shutdown())
        .await
        .unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_plugin_bound_where_its_world_does_not_fit_is_rejected_at_load(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_settings(&mut env);
    let fixture = PluginFixture::new(
        &["test/sleepy-handler", "prefix-router"],
        &receiver_routes(Some("sleepy-handler")),
    );
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "c1",
    )
    .await
    .unwrap();

    // A handler bound to a router plugin: rejected, the old binding keeps serving.
    let misbound = receiver_routes(Some("prefix-router"));
    fixture.replace("routes.toml", misbound.as_bytes());
    let outcome = live.reload_routes().await;
    let ReloadOutcome::Rejected(message) = &outcome else {
        panic!("expected a rejection, got {outcome:?}")
    };
    assert!(
        message.contains("[handlers] 'outbox.reload' = 'prefix-router'")
            && message.contains("router plugin"),
        "{message}"
    );
    assert_eq!(live.routes.load().handlers[HANDLER_QUEUE], "sleepy-handler");
    let id = env
        .publish_all(vec![NewEvent::new("reload.x", json!({}))])
        .await[0];
    let entry = QueueEntry {
        stream_id: "0-1".into(),
        fields: [
            ("event_id".to_string(), id.to_string()),
            ("event_type".to_string(), "reload.x".to_string()),
        ]
        .into_iter()
        .collect(),
    };
    assert_eq!(
        receivers.handle_entry(HANDLER_QUEUE, entry).await,
        HandledAs::Ok,
        "the queue is still handled, not dead-lettered"
    );

    // The same for a router or a policy of the wrong world.
    for (section, bad) in [
        (
            "[router] plugin = 'sleepy-handler'",
            receiver_routes(Some("sleepy-handler"))
                .replace("plugin = \"native\"", "plugin = \"sleepy-handler\""),
        ),
        (
            "[policy] plugin = 'sleepy-handler'",
            receiver_routes(Some("sleepy-handler"))
                .replace("plugin = \"deny-all\"", "plugin = \"sleepy-handler\""),
        ),
    ] {
        fixture.replace("routes.toml", bad.as_bytes());
        let outcome = live.reload_routes().await;
        let ReloadOutcome::Rejected(message) = &outcome else {
            panic!("expected a rejection, got {outcome:?}")
        };
        assert!(message.contains(section), "{message}");
    }
    assert_eq!(live.routes.load().router.plugin, "native");
    assert_eq!(live.routes.load().policy.plugin, "deny-all");

    // At start-up the same binding is a config error.
    let err = match LiveConfig::start(&fixture.config(&env.settings)).await {
        Ok(_) => panic!("a misbound plugin must not start"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("[policy] plugin = 'sleepy-handler'"), "{err}");
    env.cleanup().await;
}

/// An edit of `routes.toml` applies while a file beside it (a log the host writes there, say) is
/// written every few milliseconds: the watcher keeps only the files the host reads, so the
/// other file's events neither hold the edit back nor queue any work of their own.
#[sqlx::test(migrations = "../migrations")]
async fn a_routes_edit_applies_while_a_file_beside_it_is_written_continuously(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["prefix-router"], &router_routes(""));
    let live = LiveConfig::start(&fixture.config(&env.settings))
        .await
        .unwrap();
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();

    let writing = Arc::new(AtomicBool::new(true));
    let lines = Arc::new(AtomicU64::new(0));
    let writer = {
        let log = fixture.dir.path().join("outbox.log");
        let (writing, lines) = (writing.clone(), lines.clone());
        std::thread::spawn(move || {
            use std::io::Write as _;
            let mut file = std::fs::File::create(log).unwrap();
            while writing.load(Ordering::Relaxed) {
                writeln!(file, "INFO outbox::plugin: a line").unwrap();
                lines.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let edited =
        router_routes("").replacen("[routes]\n", "[routes]\n\"late.\" = \"outbox.late\"\n", 1);
    fixture.replace("routes.toml", edited.as_bytes());
    wait_for(
        "the routes edit beside a file written every 2 ms",
        Duration::from_secs(5),
        async || live.routes.load().routes.contains_key("late."),
    )
    .await;
    writing.store(false, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        lines.load(Ordering::Relaxed) > 100,
        "the file beside routes.toml was written throughout"
    );
    shutdown.cancel();
    watcher.await.unwrap();
    env.cleanup().await;
}
