//! Router plugins: same answers as the native table, sandboxed, limited, hot-reloaded.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use outbox_host::config::{RoutesFile, DEFAULT_ROUTES_TOML};
use outbox_host::live_config::LiveConfig;
use outbox_host::plugin::registry::compile_bytes;
use outbox_host::routing::{RouteDecision, Router};
use outbox_host::store::ClaimedEvent;
use outbox_host::NewEvent;
use outbox_tests::{plugin_file, PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

fn claimed(id: i64, event_type: &str) -> ClaimedEvent {
    ClaimedEvent::unclaimed(id, event_type, "{}")
}

/// The default table plus edge cases (a wildcard, a fan-out, a longer prefix under a shorter
/// one), routed by the prefix-router plugin, plus `extra` TOML.
fn plugin_routes(extra: &str) -> String {
    let defaults =
        RoutesFile::parse(DEFAULT_ROUTES_TOML, std::path::Path::new("routes.toml")).unwrap();
    let mut text = String::from(
        "[routes]\n\"*.deleted\" = \"outbox.audit\"\n\"order.\" = [\"outbox.audit\", \"outbox.search-index\"]\n\"mail.bounce.\" = \"outbox.webhook\"\n",
    );
    for (prefix, queues) in &defaults.routes {
        text.push_str(&format!("{prefix:?} = {:?}\n", queues.to_vec()));
    }
    text.push_str("[router]\nplugin = \"prefix-router\"\n[policy]\nplugin = \"deny-all\"\n[plugins.prefix-router]\n");
    text.push_str(extra);
    text
}

#[tokio::test]
async fn router_plugin_gives_the_same_queues_as_the_native_table() {
    let fixture = PluginFixture::new(&["prefix-router"], &plugin_routes(""));
    let config = fixture.config(&outbox_host::config::Settings::default());
    let live = LiveConfig::start(&config).await.unwrap();
    let router = live.router.current();
    assert_eq!(
        router.name(),
        "prefix-router",
        "routing goes through the plugin"
    );
    let native = config.routes.route_table();
    let mut types: Vec<String> = native
        .rules()
        .iter()
        .map(|r| format!("{}x", r.prefix.trim_start_matches('*')))
        .collect();
    types.extend(
        [
            "user.deleted",
            "order.deleted",
            "deleted.user",
            "order.placed",
            "mail.bounce.hard",
            "mail.bouncer",
            "mail.welcome",
            "tenant.subscription.created",
            "tenant.other",
            "billing",
            "search.indexer",
            "plugin.hook.x.y.z",
            "unknown.type",
            "a.b",
        ]
        .map(String::from),
    );
    let events: Vec<ClaimedEvent> = types
        .iter()
        .enumerate()
        .map(|(i, t)| claimed(i as i64, t))
        .collect();
    // A plugin call blocks its thread until it ends: call it on a blocking thread.
    let batch = events.clone();
    let from_plugin = tokio::task::spawn_blocking(move || router.route_batch(&batch).unwrap())
        .await
        .unwrap();
    let from_table = native.route_batch(&events).unwrap();
    for ((t, p), n) in types.iter().zip(&from_plugin).zip(&from_table) {
        assert_eq!(p, n, "{t}");
    }
    assert_eq!(
        from_plugin[types.iter().position(|t| t == "order.placed").unwrap()],
        RouteDecision::Queues(vec!["outbox.audit".into(), "outbox.search-index".into()])
    );
    assert!(matches!(
        &from_plugin[types.iter().position(|t| t == "unknown.type").unwrap()],
        RouteDecision::NoRoute(_)
    ));
}

/// The calls `plugin` has answered since it was first loaded.
fn calls_of(live: &LiveConfig, plugin: &str) -> u64 {
    live.registry
        .list()
        .iter()
        .find(|p| p.name == plugin)
        .map_or(0, |p| p.calls)
}

/// Route one batch of `types` through the live router (on a blocking thread: a plugin call
/// blocks its thread until it ends).
async fn route_types(live: &LiveConfig, types: &[&str]) -> Vec<RouteDecision> {
    let router = live.router.current();
    let events: Vec<ClaimedEvent> = types
        .iter()
        .enumerate()
        .map(|(i, t)| claimed(i as i64 + 1, t))
        .collect();
    tokio::task::spawn_blocking(move || router.route_batch(&events).unwrap())
        .await
        .unwrap()
}

/// Route `event_type` until `queue` is its answer (a reload taking effect), for up to 10 s.
async fn wait_for_route(live: &LiveConfig, event_type: &str, queue: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = route_types(live, &[event_type]).await;
        if answer == vec![RouteDecision::Queues(vec![queue.into()])] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{event_type} still routes {answer:?}, not to {queue}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_router_deciding_by_type_is_asked_once_per_type_until_its_file_or_config_reloads() {
    let fixture = PluginFixture::new(
        &["prefix-router"],
        &plugin_routes("router_by_type = true\n"),
    );
    let config = fixture.config(&outbox_host::config::Settings::default());
    let native = config.routes.route_table();
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // watcher armed

    // One call for the first batch, whatever its size and repeats; answers as the table's.
    let types = [
        "mail.welcome",
        "mail.welcome",
        "order.placed",
        "user.deleted",
        "unknown.type",
    ];
    let before = calls_of(&live, "prefix-router");
    let first = route_types(&live, &types).await;
    assert_eq!(calls_of(&live, "prefix-router"), before + 1);
    for (t, answer) in types.iter().zip(&first) {
        assert_eq!(answer, &native.route(t), "{t}");
    }
    // Known types: no call, the same answers; a new type: one call.
    let again = route_types(&live, &["unknown.type", "order.placed", "mail.welcome"]).await;
    assert_eq!(
        again,
        vec![first[4].clone(), first[2].clone(), first[0].clone()]
    );
    assert_eq!(
        calls_of(&live, "prefix-router"),
        before + 1,
        "no call for known types"
    );
    let with_new = route_types(&live, &["mail.welcome", "webhook.sent"]).await;
    assert_eq!(with_new[1], native.route("webhook.sent"));
    assert_eq!(calls_of(&live, "prefix-router"), before + 2);

    // A new config (the routes it receives) is asked again: mail. now goes elsewhere.
    let text = plugin_routes("router_by_type = true\n");
    let changed = text.replace(
        "\"mail.\" = [\"outbox.mail\"]",
        "\"mail.\" = [\"outbox.audit\"]",
    );
    assert_ne!(text, changed, "the fixture routes mail. to outbox.mail");
    fixture.replace("routes.toml", changed.as_bytes());
    wait_for_route(&live, "mail.welcome", "outbox.audit").await;

    // A new file is asked again, for every type, including those the old one answered.
    let alt = std::fs::read(plugin_file("test/prefix-router-alt")).unwrap();
    fixture.replace("prefix-router.wasm", &alt);
    wait_for_route(&live, "mail.welcome", "outbox.alt").await;
    let after = route_types(&live, &["order.placed", "user.deleted", "unknown.type"]).await;
    assert_eq!(
        after,
        vec![RouteDecision::Queues(vec!["outbox.alt".into()]); 3],
        "an answer of the old version was reused"
    );
    shutdown.cancel();
    watcher.await.unwrap();
}

#[tokio::test]
async fn a_router_not_declaring_router_by_type_is_asked_for_every_batch() {
    let fixture = PluginFixture::new(&["prefix-router"], &plugin_routes(""));
    let config = fixture.config(&outbox_host::config::Settings::default());
    let live = LiveConfig::start(&config).await.unwrap();
    let before = calls_of(&live, "prefix-router");
    for _ in 0..3 {
        route_types(&live, &["mail.welcome", "order.placed"]).await;
    }
    assert_eq!(calls_of(&live, "prefix-router"), before + 3);
}

#[sqlx::test(migrations = "../migrations")]
async fn hostile_router_plugins_fail_only_their_own_events(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let limits = "fuel = 200_000_000\nmemory_mb = 16\ntimeout_ms = 500\n";
    let extra = format!(
        "[router.overrides]\n\"evil.loop.\" = \"loop-forever\"\n\"evil.alloc.\" = \"alloc-forever\"\n\"evil.trap.\" = \"trap\"\n\"evil.garbage.\" = \"garbage\"\n\
         [plugins.loop-forever]\n{limits}[plugins.alloc-forever]\n{limits}[plugins.trap]\n{limits}[plugins.garbage]\n{limits}"
    );
    let fixture = PluginFixture::new(
        &[
            "prefix-router",
            "test/loop-forever",
            "test/alloc-forever",
            "test/trap",
            "test/garbage",
        ],
        &plugin_routes(&extra),
    );
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("mail.welcome", json!({})),
            NewEvent::new("evil.loop.x", json!({})),
            NewEvent::new("audit.login", json!({})),
            NewEvent::new("evil.alloc.x", json!({})),
            NewEvent::new("evil.trap.x", json!({})),
            NewEvent::new("evil.garbage.x", json!({})),
            NewEvent::new("webhook.sent", json!({})),
        ])
        .await;
    let started = Instant::now();
    let report = dispatcher.drain().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "limits end runaway plugins"
    );
    assert_eq!(report.done, 3, "the good events go on: {report:?}");
    for (id, expect) in [
        (ids[1], "loop-forever"),
        (ids[3], "alloc-forever"),
        (ids[4], "trap"),
        (ids[5], "garbage"),
    ] {
        let (status, _, error) = env.status(id).await;
        let error = error.unwrap();
        assert_eq!(status, "pending", "{expect} retries later");
        assert!(error.contains(&format!("plugin {expect}")), "{error}");
        match expect {
            "loop-forever" => assert!(
                error.contains("ran out of fuel") || error.contains("time limit"),
                "{error}"
            ),
            "alloc-forever" => assert!(error.contains("memory limit"), "{error}"),
            "trap" => assert!(error.contains("trapped"), "{error}"),
            _ => assert!(error.contains("returned"), "{error}"),
        }
        println!("{expect}: {error}");
    }
    assert_eq!(env.event_ids("outbox.mail").await, vec![ids[0]]);
    let plugins = live.registry.list();
    let trap = plugins.iter().find(|p| p.name == "trap").unwrap();
    assert_eq!((trap.calls, trap.errors), (1, 1));
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_router_answer_naming_a_queue_twice_fails_only_that_event(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let extra = "[router.overrides]\n\"twice.\" = \"twice-router\"\n\
                 [plugins.twice-router]\nfile = \"prefix-router.wasm\"\n\
                 config = { routes = { \"twice.\" = [\"outbox.mail\", \"outbox.mail\"] } }\n";
    let fixture = PluginFixture::new(&["prefix-router"], &plugin_routes(extra));
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("twice.x", json!({})),
            NewEvent::new("mail.welcome", json!({})),
        ])
        .await;
    // Before: the batch's delivery upsert failed ("cannot affect row a second time"), nothing
    // of the batch was recorded, and it came back after every lease.
    let report = dispatcher.drain().await.unwrap();
    assert_eq!(report.done, 1, "the other event goes on: {report:?}");
    let (status, _, error) = env.status(ids[0]).await;
    let error = error.unwrap();
    assert_eq!(status, "pending", "retried like any router failure");
    assert!(
        error.contains("returned queue 'outbox.mail' twice"),
        "{error}"
    );
    assert_eq!(env.event_ids("outbox.mail").await, vec![ids[1]]);
    env.cleanup().await;
}

/// Routers get payloads and headers only when their spec asks (`router_payload = true`): the
/// same content-based router plugin routes by payload where it may read it, and where it may
/// not (the default, as for the prefix router) it sees both as empty strings.
#[sqlx::test(migrations = "../migrations")]
async fn a_router_plugin_reads_payloads_only_when_its_spec_asks_for_them(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let extra =
        "[router.overrides]\n\"content.\" = \"payload-router\"\n\"blind.\" = \"payload-blind\"\n\
                 [plugins.payload-router]\nrouter_payload = true\n\
                 [plugins.payload-blind]\nfile = \"payload-router.wasm\"\n";
    let fixture = PluginFixture::new(
        &["prefix-router", "test/payload-router"],
        &plugin_routes(extra),
    );
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let routed = |event_type: &str| {
        NewEvent::new(event_type, json!({"queue": "outbox.audit"}))
            .with_headers(json!({"route": "by-payload"}))
    };
    let ids = env
        .publish_all(vec![
            routed("content.created"),
            routed("blind.created"),
            NewEvent::new("mail.welcome", json!({"queue": "outbox.audit"})),
        ])
        .await;
    let report = dispatcher.drain().await.unwrap();
    assert_eq!((report.done, report.failed), (2, 1), "{report:?}");
    assert_eq!(
        env.event_ids("outbox.audit").await,
        vec![ids[0]],
        "routed by its payload"
    );
    assert_eq!(
        env.event_ids("outbox.mail").await,
        vec![ids[2]],
        "the prefix router as ever"
    );
    let (status, _, error) = env.status(ids[1]).await;
    assert_eq!(status, "failed");
    let error = error.unwrap();
    assert!(
        error.contains(&format!("payload of event {} withheld", ids[1])),
        "{error}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn a_guest_cannot_read_files_env_or_open_sockets() {
    let extra = "[router.overrides]\n\"probe.\" = \"sandbox-probe\"\n[plugins.sandbox-probe]\n";
    let fixture = PluginFixture::new(
        &["prefix-router", "test/sandbox-probe"],
        &plugin_routes(extra),
    );
    // Make sure there is something to find if the sandbox leaked.
    std::env::set_var("OUTBOX_PROBE_SECRET", "leak");
    let live = LiveConfig::start(&fixture.config(&outbox_host::config::Settings::default()))
        .await
        .unwrap();
    let router = live.router.current();
    let decisions =
        tokio::task::spawn_blocking(move || router.route_batch(&[claimed(1, "probe.everything")]))
            .await
            .unwrap()
            .unwrap();
    let RouteDecision::Queues(found) = &decisions[0] else {
        panic!("{decisions:?}")
    };
    for expected in [
        "probe.file-denied",
        "probe.env-empty",
        "probe.socket-denied",
    ] {
        assert!(
            found.contains(&expected.to_string()),
            "{expected} not in {found:?}"
        );
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn hot_reload_under_load_routes_every_event_once_to_old_or_new(pool: PgPool) {
    hot_reload_under_load(pool, "").await;
}

#[sqlx::test(migrations = "../migrations")]
async fn hot_reload_under_load_with_remembered_routes_routes_every_event_once_to_old_or_new(
    pool: PgPool,
) {
    hot_reload_under_load(pool, "router_by_type = true\n").await;
}

/// Publish 300 events while the router plugin (declared with `extra`) is replaced after the
/// 100th: every event reaches the old or the new route once, and once the new version routed
/// anything, everything published after goes its way.
async fn hot_reload_under_load(pool: PgPool, extra: &str) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(50);
    let fixture = PluginFixture::new(&["prefix-router"], &plugin_routes(extra));
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let run = tokio::spawn(dispatcher.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await; // watcher armed

    let mut ids = Vec::new();
    let mut written_at = None;
    let mut switched_after = None;
    let mut published_before_switch_seen = 0;
    let alt = std::fs::read(plugin_file("test/prefix-router-alt")).unwrap();
    for i in 0..300 {
        ids.extend(
            env.publish_all(vec![NewEvent::new("mail.welcome", json!({"i": i}))])
                .await,
        );
        if i == 100 {
            fixture.replace("prefix-router.wasm", &alt);
            written_at = Some(Instant::now());
        }
        if let (None, Some(written_at)) = (switched_after, written_at) {
            if !env.event_ids("outbox.alt").await.is_empty() {
                switched_after = Some(written_at.elapsed());
                published_before_switch_seen = ids.len();
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while env.count("done").await < ids.len() as i64 {
        assert!(Instant::now() < deadline, "not all events were dispatched");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let old = env.event_ids("outbox.mail").await;
    let new = env.event_ids("outbox.alt").await;
    let all: HashSet<i64> = old.iter().chain(&new).copied().collect();
    assert_eq!(old.len() + new.len(), ids.len(), "none twice");
    assert_eq!(all, ids.iter().copied().collect(), "none lost");
    assert!(!old.is_empty() && !new.is_empty());
    // Once the new version has routed anything, it routes everything published after that.
    let after: HashSet<i64> = ids[published_before_switch_seen..]
        .iter()
        .copied()
        .collect();
    assert!(
        old.iter().all(|id| !after.contains(id)),
        "events published after the switch went to the old route"
    );
    let switched_after = switched_after.expect("switched during the run");
    println!("switched {switched_after:?} after the write");
    assert!(
        switched_after < Duration::from_secs(1),
        "switch took {switched_after:?}"
    );
    shutdown.cancel();
    run.await.unwrap();
    watcher.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn broken_wasm_or_routes_are_rejected_and_the_old_version_keeps_serving(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["prefix-router"], &plugin_routes(""));
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();
    let dispatcher = env.dispatcher_routed_by("w1", live.router.clone()).await;
    let hash_before = live.registry.list()[0].hash.clone();

    fixture.replace("prefix-router.wasm", b"\0asm this is not a component");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        live.registry.list()[0].hash,
        hash_before,
        "broken .wasm rejected"
    );
    let a = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    dispatcher.drain().await.unwrap();
    assert_eq!(
        env.event_ids("outbox.mail").await,
        vec![a],
        "routing still works"
    );

    fixture.replace("routes.toml", b"[routes\n\"mail.\" = ");
    tokio::time::sleep(Duration::from_millis(800)).await;
    fixture.replace(
        "routes.toml",
        plugin_routes("[settings]\nnot_a_setting = 1\n").as_bytes(),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let b = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    dispatcher.drain().await.unwrap();
    assert_eq!(
        env.event_ids("outbox.mail").await,
        vec![a, b],
        "old routes keep serving"
    );

    // A valid edit is applied.
    fixture.replace(
        "routes.toml",
        plugin_routes("")
            .replace(
                "\"mail.\" = [\"outbox.mail\"]",
                "\"mail.\" = [\"outbox.mail-v2\"]",
            )
            .as_bytes(),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = env
            .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
            .await[0];
        dispatcher.drain().await.unwrap();
        if env.event_ids("outbox.mail-v2").await == vec![c] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "valid routes.toml edit not applied"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = RoutesFile::default();
    shutdown.cancel();
    watcher.await.unwrap();
    env.cleanup().await;
}

#[tokio::test]
async fn plugin_built_against_an_incompatible_wit_version_is_refused() {
    let engine = outbox_host::plugin::PluginEngine::new().unwrap();
    let bytes = std::fs::read(plugin_file("test/future-version")).unwrap();
    let path = plugin_file("test/future-version");
    let err = match compile_bytes(&engine, "future-version", &bytes, &path) {
        Ok(_) => panic!("a 0.3.0 plugin must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("outbox:plugin@0.3.0") && err.contains("outbox:plugin@0.2.0"),
        "{err}"
    );
    // A core module (not a component) is refused with a hint, too.
    let err = match compile_bytes(&engine, "core", b"\0asm\x01\0\0\0", &path) {
        Ok(_) => panic!("a core module must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("not a component"), "{err}");
}

#[tokio::test]
async fn a_plugin_compiled_once_is_loaded_from_the_compile_cache_by_the_next_start() {
    let cache = tempfile::tempdir().unwrap();
    let fixture = PluginFixture::new(&["prefix-router"], &plugin_routes(""));
    let settings = outbox_host::config::Settings {
        plugin_cache_dir: cache.path().join("compiled").display().to_string(),
        ..Default::default()
    };
    let config = fixture.config(&settings);

    // The first start compiles the router plugin and stores it.
    let first = LiveConfig::start(&config).await.unwrap();
    assert_eq!(first.registry.engine().compile_cache_counts(), Some((0, 1)));
    assert!(
        std::fs::read_dir(cache.path().join("compiled"))
            .unwrap()
            .count()
            > 0
    );

    // The next start loads it without compiling, and it routes as the table does.
    let next = LiveConfig::start(&config).await.unwrap();
    assert_eq!(
        next.registry.engine().compile_cache_counts(),
        Some((1, 0)),
        "loaded from the cache, not compiled"
    );
    let router = next.router.current();
    assert_eq!(router.name(), "prefix-router");
    let events = vec![claimed(1, "order.placed"), claimed(2, "unknown.type")];
    let batch = events.clone();
    let routed = tokio::task::spawn_blocking(move || router.route_batch(&batch).unwrap())
        .await
        .unwrap();
    assert_eq!(
        routed,
        config.routes.route_table().route_batch(&events).unwrap()
    );

    // A changed plugin file is a different entry: compiled, never served the old code.
    let path = plugin_file("test/prefix-router-alt");
    let bytes = std::fs::read(&path).unwrap();
    compile_bytes(next.registry.engine(), "prefix-router", &bytes, &path).unwrap();
    assert_eq!(next.registry.engine().compile_cache_counts(), Some((1, 1)));

    // `off` keeps nothing.
    let off = outbox_host::config::Settings {
        plugin_cache_dir: "off".into(),
        ..Default::default()
    };
    let live = LiveConfig::start(&fixture.config(&off)).await.unwrap();
    assert_eq!(live.registry.engine().compile_cache_counts(), None);
}
