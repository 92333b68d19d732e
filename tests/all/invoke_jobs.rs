//! Plugin-invoke jobs are checked before they run: the plugin a job names must match the
//! job's type, be declared, subscribe to the job's hook and be a handler, and the hook event it
//! gets is the stored parent event the host fanned the job out from (id, tenant, payload),
//! whatever the job's payload claims; a job written straight into `outbox_event` as another
//! event's child is refused unless that event is the hook's own. The jobs come from
//! `forge-invoke`, a hostile fan-out that publishes whatever jobs its config lists, or from a
//! producer role's own INSERT; the subscriber is `hook-probe`, which publishes what it was
//! handed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::{DeadLetters, Receivers};
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const PLUGINS: &[&str] = &[
    "capability-policy",
    "prefix-router",
    "test/forge-invoke",
    "test/hook-probe",
];

const INVOKE_QUEUE: &str = "outbox.plugin-invoke";

/// `forge-invoke` handles `forge.*` and `plugin.hook.*` events by publishing `jobs` (TOML array
/// of inline tables);
/// `subscriber` subscribes to `order.paid`, `bystander` to nothing, `router-not-handler` is a
/// router that claims the hook.
fn routes(jobs: &str) -> String {
    format!(
        r#"
[routes]
"forge." = "outbox.forge"
"plugin.hook." = "outbox.forge"
"plugin.invoke." = "outbox.plugin-invoke"
"plugin.capability-use." = "outbox.plugin-capability-use"
"probe." = "outbox.probe"

[router]
plugin = "native"

[handlers]
"outbox.forge" = "forge-invoke"
"outbox.plugin-invoke" = "builtin:plugin-invoke"

[plugins.capability-policy]

[plugins.forge-invoke]
grants = {{ publish = ["plugin.invoke."] }}
config = {{ jobs = {jobs} }}

[plugins.subscriber]
file = "hook-probe.wasm"
hooks = ["order.paid"]
grants = {{ publish = ["probe."] }}

[plugins.bystander]
file = "hook-probe.wasm"
grants = {{ publish = ["probe."] }}

[plugins.router-not-handler]
file = "prefix-router.wasm"
hooks = ["order.paid"]
"#
    )
}

/// One forged job as a TOML inline table.
fn job(event_type: &str, plugin: &str, hook: &str, event: &str) -> String {
    format!(
        r#"{{ event_type = "{event_type}", payload = {{ plugin = "{plugin}", hook = "{hook}", event = {event} }} }}"#
    )
}

struct Running {
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    async fn start(env: &TestEnv, fixture: &PluginFixture) -> Self {
        let config = fixture.config(&env.settings);
        let live = LiveConfig::start(&config).await.unwrap();
        let shutdown = CancellationToken::new();
        let dispatcher = env
            .dispatcher_routed_by("invoke-dispatch", live.router.clone())
            .await;
        let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
        let receivers = Receivers::new(
            env.pool.clone(),
            live,
            Arc::new(config.settings.clone()),
            "invoke-c1",
        )
        .await
        .unwrap();
        for queue in ["outbox.forge", INVOKE_QUEUE] {
            tasks.push(tokio::spawn(
                receivers
                    .clone()
                    .consume(queue.to_string(), shutdown.clone()),
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

async fn wait_for(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Receipts of the invoke queue: (event id, handler, result).
async fn invoke_receipts(env: &TestEnv) -> Vec<(i64, String, String)> {
    sqlx::query_as(
        "SELECT event_id, handler, result FROM outbox_receipt WHERE queue = $1 ORDER BY 1, 2",
    )
    .bind(INVOKE_QUEUE)
    .fetch_all(&env.pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn forged_invoke_jobs_outside_the_declared_subscriptions_are_dead_lettered_unrun(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(100);
    let jobs = [
        // A declared handler that never subscribed to the hook.
        job("plugin.invoke.bystander", "bystander", "order.paid", "{}"),
        // A plugin nobody declared.
        job("plugin.invoke.ghost", "ghost", "order.paid", "{}"),
        // The job's type names the subscriber, its payload another plugin.
        job("plugin.invoke.subscriber", "bystander", "order.paid", "{}"),
        // The subscriber, for a hook it does not subscribe to.
        job(
            "plugin.invoke.subscriber",
            "subscriber",
            "user.deleted",
            "{}",
        ),
        // A hook event that is not the hook's.
        job(
            "plugin.invoke.subscriber",
            "subscriber",
            "order.paid",
            r#"{ event_type = "billing.charge" }"#,
        ),
        // A router that lists the hook.
        job(
            "plugin.invoke.router-not-handler",
            "router-not-handler",
            "order.paid",
            "{}",
        ),
    ];
    let fixture = PluginFixture::new(PLUGINS, &routes(&format!("[{}]", jobs.join(", "))));
    let running = Running::start(&env, &fixture).await;
    env.publish_all(vec![NewEvent::new("forge.go", json!({}))])
        .await;

    let dead = DeadLetters::connect(&fixture.config(&env.settings).settings)
        .await
        .unwrap();
    let queues = vec![INVOKE_QUEUE.to_string()];
    wait_for("six dead-lettered jobs", async || {
        dead.list(&queues).await.unwrap().len() >= 6
    })
    .await;
    let mut letters = dead.list(&queues).await.unwrap();
    letters.sort_by_key(|l| l.event_id);
    let reasons: Vec<&str> = letters.iter().map(|l| l.error.as_str()).collect();
    let expected = [
        r#"plugin "bystander" does not subscribe to hook "order.paid""#,
        r#"plugin "ghost" is not declared under [plugins]"#,
        r#"its type "plugin.invoke.subscriber" does not name the plugin it asks for ("bystander")"#,
        r#"plugin "subscriber" does not subscribe to hook "user.deleted""#,
        r#"its hook event has type "billing.charge", not "plugin.hook.order.paid""#,
        r#"plugin "router-not-handler" is a router plugin, not a handler"#,
    ];
    assert_eq!(reasons.len(), expected.len(), "{reasons:#?}");
    for (reason, want) in reasons.iter().zip(expected) {
        assert!(reason.starts_with("refused plugin-invoke job "), "{reason}");
        assert!(reason.contains(want), "{reason} should say {want}");
    }
    assert!(
        letters.iter().all(|l| l.attempts == 1),
        "refused at once, never retried"
    );
    // Give anything that did run time to publish.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.count_type("probe.seen").await, 0, "no plugin ran");
    let ran: Vec<String> = invoke_receipts(&env)
        .await
        .into_iter()
        .map(|r| r.1)
        .filter(|h| h != "builtin:plugin-invoke")
        .collect();
    assert!(ran.is_empty(), "no subscriber receipt: {ran:?}");
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn an_invoke_job_gets_its_stored_hook_event_not_what_its_payload_claims(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(100);
    // Another event, whose id (and a tenant) the forged job claims as its parent.
    let victim = env
        .publish_all(vec![
            NewEvent::new("victim.thing", json!({})).with_tenant("victim-tenant")
        ])
        .await[0];
    let forged = job(
        "plugin.invoke.subscriber",
        "subscriber",
        "order.paid",
        &format!(r#"{{ id = {victim}, tenant_id = "victim-tenant", payload = {{ x = 1 }} }}"#),
    );
    let fixture = PluginFixture::new(PLUGINS, &routes(&format!("[{forged}]")));
    let running = Running::start(&env, &fixture).await;
    let parent = env
        .publish_all(vec![NewEvent::new(
            "plugin.hook.order.paid",
            json!({"order": 7}),
        )
        .with_tenant("forge-tenant")])
        .await[0];

    wait_for("the subscriber's probe", async || {
        env.count_type("probe.seen").await == 1
    })
    .await;
    let (payload, key, tenant): (serde_json::Value, String, Option<String>) = sqlx::query_as(
        "SELECT payload, dispatch_key, tenant_id FROM outbox_event WHERE event_type = 'probe.seen'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        payload["event_id"],
        json!(parent),
        "the subscriber got the id of the event the job was created from: {payload}"
    );
    assert_eq!(payload["event_type"], "plugin.hook.order.paid");
    assert_eq!(payload["tenant_id"], "forge-tenant");
    assert_eq!(
        payload["payload"], r#"{"order": 7}"#,
        "the hook event's own payload, not the job's"
    );
    assert_eq!(
        key,
        format!("child:{parent}:subscriber:0"),
        "its children are keyed under the host's parent id"
    );
    assert_eq!(tenant.as_deref(), Some("forge-tenant"));
    wait_for("the subscriber's receipt", async || {
        invoke_receipts(&env).await.len() == 1
    })
    .await;
    assert_eq!(
        invoke_receipts(&env).await,
        vec![(parent, "subscriber".to_string(), "ok".to_string())],
        "nothing recorded against {victim}"
    );
    running.stop().await;
    env.cleanup().await;
}

/// A role that may only insert into `outbox_event` (what a producer application gets), for the
/// life of one test.
struct ProducerRole {
    name: String,
}

impl ProducerRole {
    async fn create(pool: &PgPool) -> Self {
        let name = format!("outbox_producer_{:016x}", rand_suffix());
        for statement in [
            format!("CREATE ROLE {name} NOLOGIN"),
            format!("GRANT INSERT ON outbox_event TO {name}"),
            format!("GRANT USAGE ON SEQUENCE outbox_event_id_seq TO {name}"),
        ] {
            sqlx::query(&statement).execute(pool).await.unwrap();
        }
        Self { name }
    }

    /// Insert a `plugin.invoke.*` row as this role, with `dispatch_key` and `headers`.
    async fn insert_job(
        &self,
        pool: &PgPool,
        plugin: &str,
        payload: serde_json::Value,
        dispatch_key: &str,
        headers: serde_json::Value,
    ) {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(&format!("SET LOCAL ROLE {}", self.name))
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO outbox_event (event_type, payload, dispatch_key, headers, tenant_id)
             VALUES ($1, $2, $3, $4, 'producer-tenant')",
        )
        .bind(format!("plugin.invoke.{plugin}"))
        .bind(payload)
        .bind(dispatch_key)
        .bind(headers)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }

    async fn remove(self, pool: &PgPool) {
        for statement in [
            format!("REVOKE ALL ON outbox_event FROM {}", self.name),
            format!(
                "REVOKE ALL ON SEQUENCE outbox_event_id_seq FROM {}",
                self.name
            ),
            format!("DROP ROLE {}", self.name),
        ] {
            sqlx::query(&statement).execute(pool).await.unwrap();
        }
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

#[sqlx::test(migrations = "../migrations")]
async fn an_invoke_job_a_producer_writes_as_another_events_child_is_dead_lettered_unrun(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(100);
    let fixture = PluginFixture::new(PLUGINS, &routes("[]"));
    let running = Running::start(&env, &fixture).await;
    let victim = env
        .publish_all(vec![
            NewEvent::new("victim.thing", json!({"secret": 1})).with_tenant("victim-tenant")
        ])
        .await[0];
    let producer = ProducerRole::create(&env.pool).await;
    let payload = json!({
        "plugin": "subscriber", "hook": "order.paid",
        "event": {"id": victim, "event_type": "plugin.hook.order.paid", "payload": {"forged": true}}
    });
    let missing = victim + 1_000_000;
    // Written the way the host writes a hook fan-out's child of `victim`...
    producer
        .insert_job(
            &env.pool,
            "subscriber",
            payload.clone(),
            &format!("child:{victim}:plugin-hook:0"),
            json!({"parent_event_id": victim, "causation_handler": "plugin-hook"}),
        )
        .await;
    // ... of an event that does not exist ...
    producer
        .insert_job(
            &env.pool,
            "subscriber",
            payload.clone(),
            &format!("child:{missing}:plugin-hook:0"),
            json!({"parent_event_id": missing}),
        )
        .await;
    // ... and a host-child key that names no parent.
    producer
        .insert_job(
            &env.pool,
            "subscriber",
            payload,
            &format!("child:{victim}:plugin-hook:1"),
            json!({}),
        )
        .await;

    let dead = DeadLetters::connect(&fixture.config(&env.settings).settings)
        .await
        .unwrap();
    let queues = vec![INVOKE_QUEUE.to_string()];
    wait_for("three dead-lettered jobs", async || {
        dead.list(&queues).await.unwrap().len() >= 3
    })
    .await;
    let mut letters = dead.list(&queues).await.unwrap();
    letters.sort_by_key(|l| l.event_id);
    let reasons: Vec<&str> = letters.iter().map(|l| l.error.as_str()).collect();
    let expected = [
        format!(
            r#"its parent event {victim} is a "victim.thing" event, not a "plugin.hook.order.paid" event"#
        ),
        format!("its parent event {missing} does not exist"),
        "its dispatch key marks it as a host child, but its headers name no parent_event_id"
            .to_string(),
    ];
    assert_eq!(reasons.len(), expected.len(), "{reasons:#?}");
    for (reason, want) in reasons.iter().zip(&expected) {
        assert!(reason.starts_with("refused plugin-invoke job "), "{reason}");
        assert!(reason.contains(want.as_str()), "{reason} should say {want}");
    }
    assert!(letters.iter().all(|l| l.attempts == 1), "refused at once");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.count_type("probe.seen").await,
        0,
        "the subscriber never ran"
    );
    let against_victim: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_receipt WHERE event_id = $1")
            .bind(victim)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(against_victim, 0, "nothing recorded against {victim}");
    running.stop().await;
    producer.remove(&env.pool).await;
    env.cleanup().await;
}
