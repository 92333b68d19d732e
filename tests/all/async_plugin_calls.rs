//! Plugin calls reached from async code: the console's "which queues for this type?" box and
//! every other console page work with the shipped `routes.toml` (the prefix-router plugin and
//! the shipped policy and handler plugins), and a synchronous plugin call made on an async
//! worker of a multi-threaded runtime runs instead of panicking.

use std::time::{Duration, Instant};

use outbox_host::config::{Settings, DEFAULT_ROUTES_TOML};
use outbox_host::live_config::LiveConfig;
use outbox_host::routing::RouteDecision;
use outbox_host::store::{self, ClaimedEvent, Role};
use outbox_host::{Host, NewEvent};
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;

/// The plugins the shipped `routes.toml` names, from `plugins/dist`.
const SHIPPED_PLUGINS: &[&str] = &[
    "prefix-router",
    "capability-policy",
    "workflow-trigger",
    "plugin-hook",
];

#[sqlx::test(migrations = "../migrations")]
async fn the_console_explains_a_type_routed_by_the_shipped_router_plugin_and_serves_every_page(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(SHIPPED_PLUGINS, DEFAULT_ROUTES_TOML);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    env.settings.http_addr = format!("127.0.0.1:{port}");
    let host = Host::builder()
        .config(fixture.config(&env.settings))
        .pool(env.pool.clone())
        .worker_id("console-shipped-routes")
        .start()
        .await
        .unwrap();
    assert_eq!(host.router().current().name(), "prefix-router");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let start = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no HTTP listener"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // One event routed by the plugin (delivered), one no rule matches (failed).
    let ids = env
        .publish_all(vec![
            NewEvent::new("mail.welcome", json!({"to": "a@example.com"})),
            NewEvent::new("nowhere.thing", json!({})),
        ])
        .await;
    let start = Instant::now();
    while env.status(ids[0]).await.0 != "done" || env.status(ids[1]).await.0 != "failed" {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "events not dispatched"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let token = store::add_operator(&env.pool, "ada", Role::Admin, "test")
        .await
        .unwrap();
    let signed_in = http
        .post(format!("{base}/console/login"))
        .form(&[("token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let get = async |path: &str| {
        let response = http
            .get(format!("{base}{path}"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    };

    // The type box: the plugin routes, the answer names the queue and the plugin.
    let (status, page) = get("/console/plugins?type=mail.welcome").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("outbox.mail") && page.contains("prefix-router"),
        "{page}"
    );
    let (status, page) = get("/console/plugins?type=nowhere.thing").await;
    assert_eq!(status, 200, "{page}");

    // Every other page, on the same host.
    for path in [
        "/console".to_string(),
        "/console/live/overview".to_string(),
        "/console/events".to_string(),
        format!("/console/events/{}", ids[0]),
        format!("/console/events/{}", ids[1]),
        format!("/console/live/events/{}", ids[0]),
        "/console/failed".to_string(),
        "/console/dead-letters".to_string(),
        "/console/plugins".to_string(),
        "/console/workers".to_string(),
    ] {
        let (status, page) = get(&path).await;
        assert_eq!(status, 200, "{path}: {page}");
    }
    host.shutdown().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_plugin_call_made_on_an_async_worker_runs_instead_of_panicking() {
    let fixture = PluginFixture::new(SHIPPED_PLUGINS, DEFAULT_ROUTES_TOML);
    let live = LiveConfig::start(&fixture.config(&Settings::default()))
        .await
        .unwrap();
    let router = live.router.current();
    assert_eq!(router.name(), "prefix-router");
    // Straight on this async task: no spawn_blocking.
    let decisions = router
        .route_batch(&[ClaimedEvent::unclaimed(1, "mail.welcome", "{}")])
        .unwrap();
    assert_eq!(
        decisions,
        vec![RouteDecision::Queues(vec!["outbox.mail".to_string()])]
    );
}
