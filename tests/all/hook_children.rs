//! Children of plugin-invoke jobs: each hook subscriber's children are its own, keyed by the
//! plugin that ran, so two subscribers never share a dispatch key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::Receivers;
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Two subscribers of one hook, both the `greedy` test plugin (it publishes `billing.charge`
/// `{"amount": 1}` as its first child), each subscribed to the hook and granted that publish.
const ROUTES: &str = r#"
[routes]
"plugin.hook." = "outbox.plugin-hook"
"plugin.invoke." = "outbox.plugin-invoke"
"plugin.capability-use." = "outbox.plugin-capability-use"
"billing." = "outbox.billing"

[router]
plugin = "native"

[handlers]
"outbox.plugin-hook" = "plugin-hook"
"outbox.plugin-invoke" = "builtin:plugin-invoke"

[queue_groups]
general = ["outbox.plugin-hook", "outbox.plugin-invoke"]

[plugins.capability-policy]

[plugins.plugin-hook]
config = { subscribers = { "order.paid" = ["greedy-a", "greedy-b"] } }
grants = { publish = ["plugin.invoke."] }

[plugins.greedy-a]
file = "greedy.wasm"
hooks = ["order.paid"]
grants = { publish = ["billing."] }

[plugins.greedy-b]
file = "greedy.wasm"
hooks = ["order.paid"]
grants = { publish = ["billing."] }
"#;

#[sqlx::test(migrations = "../migrations")]
async fn two_hook_subscribers_each_publish_their_own_first_child(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(100);
    let fixture = PluginFixture::new(&["capability-policy", "plugin-hook", "test/greedy"], ROUTES);
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by("hooks-dispatch", live.router.clone())
        .await;
    let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "hooks",
    )
    .await
    .unwrap();
    for queue in receivers.queues_for_group(Some("general")) {
        tasks.push(tokio::spawn(
            receivers.clone().consume(queue, shutdown.clone()),
        ));
    }
    let hook = env
        .publish_all(vec![NewEvent::new("plugin.hook.order.paid", json!({}))])
        .await[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ran: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_receipt WHERE event_id = $1 AND handler IN ('greedy-a', 'greedy-b')",
        )
        .bind(hook)
        .fetch_one(&env.pool)
        .await
        .unwrap();
        if ran == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "both subscribers ran: {ran}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT dispatch_key FROM outbox_event WHERE event_type = 'billing.charge' ORDER BY 1",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        keys,
        vec![
            format!("child:{hook}:greedy-a:0"),
            format!("child:{hook}:greedy-b:0"),
        ],
        "each subscriber's first child is written, under its own key"
    );
    shutdown.cancel();
    for t in tasks {
        let _ = t.await;
    }
    env.cleanup().await;
}
