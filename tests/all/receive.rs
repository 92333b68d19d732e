//! Receivers: handler plugins run once per event, retry, dead-letter, reclaim, and every host
//! call passes the capability policy.
//!
//! One module per subject (`workflows`, `hooks`, `takeover`, `failures`, `trimming`); the
//! routes, plugins and harness they share are here.

mod failures;
mod hooks;
mod takeover;
mod trimming;
mod workflows;

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::Receivers;
use outbox_tests::{PluginFixture, TestEnv};
use tokio_util::sync::CancellationToken;

const PLUGINS: &[&str] = &[
    "capability-policy",
    "workflow-trigger",
    "plugin-hook",
    "test/echo-handler",
    "test/flaky-handler",
    "test/greedy",
];

fn routes(flaky_succeeds: bool) -> String {
    format!(
        r#"
[routes]
"workflow." = "outbox.workflow"
"workflow.executor." = "outbox.workflow-executor"
"plugin.hook." = "outbox.plugin-hook"
"plugin.invoke." = "outbox.plugin-invoke"
"plugin.capability-use." = "outbox.plugin-capability-use"
"flaky." = "outbox.flaky"
"greedy." = "outbox.greedy"

[router]
plugin = "native"

[handlers]
"outbox.workflow" = "workflow-trigger"
"outbox.plugin-hook" = "plugin-hook"
"outbox.plugin-invoke" = "builtin:plugin-invoke"
"outbox.flaky" = "flaky-handler"
"outbox.greedy" = "greedy"

[queue_groups]
general = ["outbox.workflow", "outbox.plugin-hook", "outbox.plugin-invoke", "outbox.flaky", "outbox.greedy"]

[plugins.capability-policy]

[plugins.workflow-trigger]
config = {{ executor = {{ queue = "outbox.workflow-executor" }}, workflows = [
  {{ id = "welcome", trigger = {{ event = "user.signed-up" }} }},
  {{ id = "crm-sync", enabled = true, trigger = {{ event = "user.signed-up" }} }},
  {{ id = "audit", trigger = {{ event = "user.signed-up" }} }},
  {{ id = "retired", enabled = false, trigger = {{ event = "user.signed-up" }} }},
  {{ id = "other", trigger = {{ event = "order.placed" }} }},
] }}
grants = {{ publish = ["workflow.execution.", "workflow.executor."] }}

[plugins.plugin-hook]
config = {{ subscribers = {{ "workflow.executed" = ["audit-log", "notifier"], "workflow.failed" = ["audit-log"], "workflow.retried" = ["audit-log", "flaky-handler"] }} }}
grants = {{ publish = ["plugin.invoke."] }}

[plugins.audit-log]
file = "echo-handler.wasm"
hooks = ["workflow.executed", "workflow.failed", "workflow.retried"]

[plugins.notifier]
file = "echo-handler.wasm"
hooks = ["workflow.executed"]

[plugins.flaky-handler]
config = {{ succeed = {flaky_succeeds} }}
hooks = ["workflow.retried"]

[plugins.greedy]
"#
    )
}

struct Running {
    live: LiveConfig,
    receivers: Receivers,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn start(
    env: &TestEnv,
    fixture: &PluginFixture,
    consumer: &str,
    with_receivers: bool,
) -> Running {
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let settings = Arc::new(config.settings.clone());
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by(&format!("{consumer}-dispatch"), live.router.clone())
        .await;
    let mut tasks = vec![
        tokio::spawn(dispatcher.run(shutdown.clone())),
        live.clone().watch(shutdown.clone()).unwrap(),
    ];
    let receivers = Receivers::new(env.pool.clone(), live.clone(), settings, consumer)
        .await
        .unwrap();
    if with_receivers {
        for queue in receivers.queues_for_group(Some("general")) {
            tasks.push(tokio::spawn(
                receivers.clone().consume(queue, shutdown.clone()),
            ));
        }
    }
    Running {
        live,
        receivers,
        shutdown,
        tasks,
    }
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn test_env_settings(env: &mut TestEnv) {
    env.settings.dispatch_interval = Duration::from_millis(100);
    env.settings.receiver_lease = Duration::from_millis(800);
    env.settings.handler_max_retries = 2;
    env.settings.handler_backoff = vec![Duration::from_millis(200)];
}

/// A consumer of the `outbox` group reads every entry of `queue` and never acknowledges them
/// (it died). Returns how many it took.
async fn take_entries_and_die(env: &TestEnv, queue: &str, consumer: &str) -> usize {
    let mut conn = env.redis.clone();
    let key = format!("{}{queue}", env.prefix);
    let _: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("outbox")
        .arg("0")
        .query_async(&mut conn)
        .await;
    let taken: Option<redis::streams::StreamReadReply> = redis::AsyncCommands::xread_options(
        &mut conn,
        &[&key],
        &[">"],
        &redis::streams::StreamReadOptions::default()
            .group("outbox", consumer)
            .count(100),
    )
    .await
    .unwrap();
    taken.map_or(0, |r| r.keys.iter().map(|k| k.ids.len()).sum())
}

async fn receipts(env: &TestEnv) -> Vec<(i64, String, String, i32)> {
    sqlx::query_as("SELECT event_id, handler, result, duplicates FROM outbox_receipt ORDER BY 1, 2")
        .fetch_all(&env.pool)
        .await
        .unwrap()
}
