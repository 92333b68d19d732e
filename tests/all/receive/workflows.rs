//! `workflow-trigger` on the receivers: a trigger fans out to exactly its executions despite
//! redelivery and a receiver killed mid-handler, the HTTP executor sends one signed request per
//! execution, and the trace of a trigger shows its executions and their executor jobs.

use std::sync::Arc;
use std::time::Duration;

use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;

use super::{routes, start, take_entries_and_die, test_env_settings, wait_for, PLUGINS};

#[sqlx::test(migrations = "../migrations")]
async fn workflow_trigger_fans_out_to_exactly_n_executions_despite_redelivery(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", true).await;

    // The application publishes in its own transaction.
    let trigger = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up", "data": {"user": 7}}),
        )])
        .await[0];
    wait_for("3 executor jobs", Duration::from_secs(20), async || {
        env.entries("outbox.workflow-executor").await.len() >= 3
    })
    .await;

    // The trigger job is delivered a second time (a redelivery after a lost ack, say).
    let first = env
        .entries("outbox.workflow")
        .await
        .into_iter()
        .find(|e| e["event_id"] == trigger.to_string())
        .unwrap();
    let fields: Vec<(String, String)> = first.into_iter().collect();
    let mut conn = env.redis.clone();
    let _: String = redis::AsyncCommands::xadd(
        &mut conn,
        format!("{}outbox.workflow", env.prefix),
        "*",
        &fields,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let jobs = env.entries("outbox.workflow-executor").await;
    assert_eq!(
        jobs.len(),
        3,
        "one executor job per enabled matching workflow, no duplicates"
    );
    let mut ids: Vec<String> = jobs
        .iter()
        .map(|j| {
            serde_json::from_str::<serde_json::Value>(&j["payload"]).unwrap()["request"]
                ["workflow_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["audit", "crm-sync", "welcome"]);
    let executions = env.count_type("workflow.execution.requested").await;
    assert_eq!(executions, 3);
    let (published, duplicates): (Vec<i64>, i32) =
        sqlx::query_as("SELECT published_ids, duplicates FROM outbox_receipt WHERE event_id = $1")
            .bind(trigger)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        published.len(),
        3,
        "the receipt names the events the handler published"
    );
    assert_eq!(duplicates, 1, "the second delivery was a no-op");
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn receiver_killed_mid_handler_is_rerun_without_duplicate_children(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    // Dispatcher only: a consumer that "dies" takes the trigger entry first.
    let running = start(&env, &fixture, "survivor", false).await;
    let trigger = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up"}),
        )])
        .await[0];
    wait_for("the trigger entry", Duration::from_secs(10), async || {
        !env.entries("outbox.workflow").await.is_empty()
    })
    .await;
    let mut conn = env.redis.clone();
    assert_eq!(
        take_entries_and_die(&env, "outbox.workflow", "dying").await,
        1
    );
    // It got as far as claiming the event and publishing the first child, then died.
    let _: () = redis::cmd("SET")
        .arg(format!(
            "{}outbox:handled:workflow-trigger:{trigger}",
            env.prefix
        ))
        .arg("running:dying")
        .arg("PX")
        .arg(800)
        .query_async(&mut conn)
        .await
        .unwrap();
    // `child:` keys are the host's own (producers may not use them): insert the row directly.
    sqlx::query("INSERT INTO outbox_event (event_type, payload, dispatch_key) VALUES ($1, $2, $3)")
        .bind("workflow.execution.requested")
        .bind(json!({"workflow_id": "welcome", "trigger_event_id": trigger, "data": {}}))
        .bind(format!("child:{trigger}:workflow-trigger:0"))
        .execute(&env.pool)
        .await
        .unwrap();

    for queue in running.receivers.queues_for_group(Some("general")) {
        let r = running.receivers.clone();
        tokio::spawn(r.consume(queue, running.shutdown.clone()));
    }
    wait_for("3 executor jobs", Duration::from_secs(20), async || {
        env.entries("outbox.workflow-executor").await.len() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.entries("outbox.workflow-executor").await.len(),
        3,
        "exactly N executions"
    );
    let executions = env.count_type("workflow.execution.requested").await;
    assert_eq!(
        executions, 3,
        "the rerun reused the children's dispatch keys"
    );
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn http_executor_gets_one_signed_request_per_execution(pool: PgPool) {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};
    use outbox_host::capability::signing::{
        verify_signature, SignedRequest, SIGNATURE_HEADER, TIMESTAMP_HEADER,
    };

    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    const SECRET: &str = "test-executor-secret";
    std::env::set_var("OUTBOX_TEST_EXECUTOR_SECRET", SECRET);
    let received: Arc<std::sync::Mutex<Vec<(bool, serde_json::Value)>>> = Arc::default();
    let seen = received.clone();
    let app = axum::Router::new().route(
        "/execute",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                let header = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string()
                };
                let host = header("host");
                let received = SignedRequest {
                    method: "POST",
                    host: &host,
                    path_and_query: "/execute",
                    body: &body,
                };
                let verified = verify_signature(
                    SECRET.as_bytes(),
                    &header(TIMESTAMP_HEADER),
                    &received,
                    &header(SIGNATURE_HEADER),
                    chrono::Utc::now().timestamp(),
                    300,
                )
                .is_ok();
                let forged = verify_signature(
                    b"wrong secret",
                    &header(TIMESTAMP_HEADER),
                    &received,
                    &header(SIGNATURE_HEADER),
                    chrono::Utc::now().timestamp(),
                    300,
                )
                .is_ok();
                seen.lock().unwrap().push((
                    verified && !forged,
                    serde_json::from_slice(&body).unwrap_or_default(),
                ));
                if verified {
                    StatusCode::OK
                } else {
                    StatusCode::UNAUTHORIZED
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let routes = routes(true).replace(
        "config = { executor = { queue = \"outbox.workflow-executor\" }, workflows = [",
        &format!("config = {{ executor = {{ http = {{ url = \"http://127.0.0.1:{port}/execute\" }} }}, workflows = ["),
    ).replace(
        "grants = { publish = [\"workflow.execution.\", \"workflow.executor.\"] }",
        // The local executor is a loopback IP named in the grant, reached over plain http:
        // signing there needs the explicit opt-in.
        &format!("grants = {{ publish = [\"workflow.execution.\"], http = [\"127.0.0.1:{port}\"], http_signing_secret_env = \"OUTBOX_TEST_EXECUTOR_SECRET\", http_signing_allow_plain_http = true }}"),
    );
    assert!(routes.contains("http_signing_secret_env"));
    let fixture = PluginFixture::new(PLUGINS, &routes);
    let running = start(&env, &fixture, "c1", true).await;
    let id = env
        .publish_all(vec![NewEvent::new(
            "workflow.execution.requested",
            json!({"workflow_id": "welcome", "data": {"user": 7}}),
        )])
        .await[0];
    wait_for("the executor call", Duration::from_secs(20), async || {
        !received.lock().unwrap().is_empty()
    })
    .await;
    // Deliver the same job again: the receiver's idempotency claim makes it a no-op.
    let fields: Vec<(String, String)> = env
        .entries("outbox.workflow")
        .await
        .remove(0)
        .into_iter()
        .collect();
    let mut conn = env.redis.clone();
    let _: String = redis::AsyncCommands::xadd(
        &mut conn,
        format!("{}outbox.workflow", env.prefix),
        "*",
        &fields,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = received.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one request per execution: {calls:?}");
    assert!(
        calls[0].0,
        "signed with the secret from the environment, forgery rejected"
    );
    assert_eq!(calls[0].1["request"]["workflow_id"], "welcome");
    assert_eq!(calls[0].1["source_event_id"], id);
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn trace_of_a_workflow_trigger_shows_its_executions_and_their_executor_jobs(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "tracer", true).await;
    let trigger = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up", "data": {"user": 7}}),
        )])
        .await[0];
    // The trigger and its three executions each have a receipt once all is handled.
    wait_for(
        "4 receipts and 3 executor jobs",
        Duration::from_secs(20),
        async || {
            let receipts: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt")
                .fetch_one(&env.pool)
                .await
                .unwrap();
            receipts >= 4 && env.entries("outbox.workflow-executor").await.len() >= 3
        },
    )
    .await;

    let tracer = outbox_host::trace::Tracer::connect(
        env.pool.clone(),
        &env.settings,
        running.live.router.clone(),
    )
    .await
    .unwrap();
    let trace = tracer
        .trace(trigger, 5)
        .await
        .unwrap()
        .expect("the trigger exists");
    assert_eq!(trace.event.event_type, "workflow.trigger.event");
    assert_eq!(trace.event.status, "done");
    let stream_of = |queue: &str, trace: &outbox_host::trace::EventTrace| {
        let d = trace
            .destinations
            .iter()
            .find(|d| d.queue == queue)
            .unwrap_or_else(|| panic!("no destination {queue}: {:?}", trace.destinations));
        assert_eq!(d.state, "handed off");
        d.stream_id.clone().expect("the stream entry id")
    };
    let entry = stream_of("outbox.workflow", &trace);
    assert!(
        env.entries("outbox.workflow")
            .await
            .iter()
            .any(|e| e["event_id"] == trigger.to_string()),
        "{entry}"
    );
    assert_eq!(trace.receipts.len(), 1);
    assert_eq!(
        (
            trace.receipts[0].handler.as_str(),
            trace.receipts[0].result.as_str()
        ),
        ("workflow-trigger", "ok")
    );
    assert_eq!(
        trace.children.len(),
        3,
        "one execution per enabled workflow"
    );
    let mut workflows = Vec::new();
    for execution in &trace.children {
        assert_eq!(execution.event.event_type, "workflow.execution.requested");
        assert_eq!(
            execution
                .event
                .dispatch_key
                .as_deref()
                .map(|k| k.starts_with(&format!("child:{trigger}:"))),
            Some(true)
        );
        stream_of("outbox.workflow", execution);
        assert_eq!(execution.receipts[0].result, "ok");
        assert_eq!(execution.children.len(), 1, "each execution's executor job");
        let job = &execution.children[0];
        assert_eq!(job.event.event_type, "workflow.executor.job");
        stream_of("outbox.workflow-executor", job);
        assert!(
            job.receipts.is_empty(),
            "no handler is bound to the executor queue"
        );
        let payload: serde_json::Value = serde_json::from_str(
            &outbox_host::store::event_payload(&env.pool, job.event.id)
                .await
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        workflows.push(
            payload["request"]["workflow_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    workflows.sort();
    assert_eq!(workflows, ["audit", "crm-sync", "welcome"]);

    // Depth bounds the tree and says what it left out.
    let shallow = tracer.trace(trigger, 0).await.unwrap().unwrap();
    assert!(shallow.children.is_empty());
    assert_eq!(shallow.children_cut, 3);
    assert!(tracer.trace(i64::MAX, 5).await.unwrap().is_none());
    running.stop().await;
    env.cleanup().await;
}
