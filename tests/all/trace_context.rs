//! Trace context: a producer's `traceparent` travels from publish through the queue entry and
//! the handler's event onto the children the handler publishes; a malformed one is refused at
//! publish, and one that reached the table anyway (through SQL) never stops delivery.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::Receivers;
use outbox_host::{NewEvent, PublishError};
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// `probe.*` events go to the capability probe, which publishes one `traced.child` per event
/// (that queue has no handler: children wait there).
const ROUTES: &str = r#"
[router]
plugin = "native"

[policy]
plugin = "allow-all-policy"

[plugins.allow-all-policy]

[plugins.probe]
file = "capability-probe.wasm"
grants = { publish = ["traced."] }

[routes]
"probe." = "outbox.probe"
"traced." = "outbox.traced"

[handlers]
"outbox.probe" = "probe"

[queue_groups]
general = ["outbox.probe"]
"#;

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// A `probe.run` event whose handler publishes one `traced.child`.
fn publishing_one_child() -> NewEvent {
    NewEvent::new(
        "probe.run",
        json!({ "steps": [{ "op": "publish", "event_type": "traced.child", "expect": { "ok": 1 } }] }),
    )
}

/// The headers of the child of `parent`, once the handler published it.
async fn child_headers(pool: &PgPool, parent: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let headers: Option<Value> = sqlx::query_scalar(
            "SELECT headers FROM outbox_event WHERE event_type = 'traced.child' AND (headers->>'parent_event_id')::bigint = $1",
        )
        .bind(parent)
        .fetch_optional(pool)
        .await
        .unwrap();
        if let Some(headers) = headers {
            return headers;
        }
        assert!(
            Instant::now() < deadline,
            "the handler of event {parent} published its child"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn trace_context_travels_from_publish_to_a_handlers_child_and_malformed_ones_never_block(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(100);
    let fixture = PluginFixture::new(&["test/capability-probe", "test/allow-all-policy"], ROUTES);
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by("trace-dispatch", live.router.clone())
        .await;
    let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "trace",
    )
    .await
    .unwrap();
    for queue in receivers.queues_for_group(Some("general")) {
        tasks.push(tokio::spawn(
            receivers.clone().consume(queue, shutdown.clone()),
        ));
    }

    // A producer's trace context reaches the child unchanged (no exporter in this process, so
    // no host span replaces the parent id), next to the causation headers.
    let parent = env
        .publish_all(vec![publishing_one_child().with_headers(
            json!({ "traceparent": TRACEPARENT, "tracestate": "vendor=abc", "x": 1 }),
        )])
        .await[0];
    let headers = child_headers(&env.pool, parent).await;
    assert_eq!(headers["traceparent"], TRACEPARENT, "{headers}");
    assert_eq!(headers["tracestate"], "vendor=abc", "{headers}");
    assert_eq!(headers["x"], 1, "{headers}");
    assert_eq!(headers["causation_handler"], "probe", "{headers}");

    // The Rust publisher refuses a malformed traceparent, and writes nothing.
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    for bad in [
        json!({ "traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01" }),
        json!({ "traceparent": "not a trace" }),
        json!({ "traceparent": 42 }),
        json!({ "traceparent": TRACEPARENT, "tracestate": "k=".to_string() + &"v".repeat(600) }),
    ] {
        let mut tx = env.pool.begin().await.unwrap();
        let refused =
            outbox_host::publish(&mut tx, publishing_one_child().with_headers(bad.clone()))
                .await
                .unwrap_err();
        assert!(
            matches!(refused, PublishError::InvalidTraceContext { .. }),
            "{bad}: {refused}"
        );
        assert!(
            refused.to_string().contains("headers of probe.run"),
            "{refused}"
        );
        tx.rollback().await.unwrap();
    }
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(before, after, "a refused publish writes nothing");

    // The SQL function does not check trace headers: such an event is still dispatched and
    // handled (its traceparent is just not used as a parent), and its child keeps the headers.
    let sql_parent: i64 = sqlx::query_scalar("SELECT outbox_publish($1, $2, NULL, NULL, $3)")
        .bind("probe.run")
        .bind(publishing_one_child().payload)
        .bind(json!({ "traceparent": "00-garbage", "tracestate": 7 }))
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let headers = child_headers(&env.pool, sql_parent).await;
    assert_eq!(headers["traceparent"], "00-garbage", "{headers}");

    shutdown.cancel();
    for t in tasks {
        let _ = t.await;
    }
    env.cleanup().await;
}
