//! Span export: `outbox run` with `OTEL_EXPORTER_OTLP_ENDPOINT` set sends its spans over OTLP
//! (HTTP, protobuf) to a receiver this test starts, in the trace of the producer's
//! `traceparent`, and a handler's child carries the context of the span that published it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use sqlx::PgPool;

use crate::{pool_url, repo_path};

/// One span as the receiver got it (ids in hex).
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    /// Span ids of its links.
    links: Vec<String>,
}

/// An OTLP/HTTP receiver on 127.0.0.1 accepting `POST /v1/traces`: its base URL and the spans
/// it got so far.
async fn otlp_receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = seen.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let store = store.clone();
            async move {
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return StatusCode::BAD_REQUEST;
                };
                let mut spans = store.lock().unwrap();
                for resource_spans in request.resource_spans {
                    let service = resource_spans
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|kv| kv.key == "service.name")
                        .and_then(|kv| kv.value.as_ref()?.value.clone())
                        .map(|v| match v {
                            AnyValue::StringValue(s) => s,
                            other => format!("{other:?}"),
                        })
                        .unwrap_or_default();
                    for scope in resource_spans.scope_spans {
                        for span in scope.spans {
                            spans.push(Received {
                                service: service.clone(),
                                name: span.name,
                                trace_id: hex::encode(&span.trace_id),
                                span_id: hex::encode(&span.span_id),
                                parent_span_id: hex::encode(&span.parent_span_id),
                                links: span.links.iter().map(|l| hex::encode(&l.span_id)).collect(),
                            });
                        }
                    }
                }
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

/// `probe.*` goes to the capability probe, which publishes one `traced.child`.
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

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

#[sqlx::test(migrations = "../migrations")]
async fn otlp_export_sends_dispatch_handle_and_host_call_spans_in_the_producers_trace(
    pool: PgPool,
) {
    let url = pool_url(&pool).await;
    let (endpoint, seen) = otlp_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.toml");
    std::fs::write(&routes, ROUTES).unwrap();
    let prefix = format!("cli-otlp-{}:", std::process::id());
    let log = std::fs::File::create(dir.path().join("outbox.log")).unwrap();
    let mut host = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox"))
        .arg("run")
        .env("DATABASE_URL", &url)
        .env("OUTBOX_CONFIG", &routes)
        .env("OUTBOX_PLUGIN_DIR", repo_path("plugins/dist/test"))
        .env("OUTBOX_REDIS_PREFIX", &prefix)
        .env("OUTBOX_HTTP_ADDR", "")
        .env("OUTBOX_DISPATCH_INTERVAL_MS", "100")
        .env("OUTBOX_SHUTDOWN_GRACE_MS", "2000")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_SERVICE_NAME")
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn outbox run");

    let mut tx = pool.begin().await.unwrap();
    let parent = outbox_host::publish(
        &mut tx,
        outbox_host::NewEvent::new(
            "probe.run",
            serde_json::json!({ "steps": [{ "op": "publish", "event_type": "traced.child", "expect": { "ok": 1 } }] }),
        )
        .with_headers(serde_json::json!({
            "traceparent": format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01"),
        })),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    // The event's own dispatch span. The child's dispatch span is in the same trace (under the
    // host call span that published it) and may be exported first.
    let event_dispatch = |spans: &[Received]| {
        let publish = spans
            .iter()
            .find(|s| s.trace_id == TRACE_ID && s.name == "outbox.host.publish")?;
        spans
            .iter()
            .find(|s| {
                s.trace_id == TRACE_ID
                    && s.name == "outbox.dispatch"
                    && s.parent_span_id != publish.span_id
            })
            .cloned()
    };
    // Poll until the handler's host call span is exported (the last of the spans in the trace
    // to end before the handler's own), and the child is written.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (spans, child_headers) = loop {
        let child: Option<serde_json::Value> = sqlx::query_scalar(
            "SELECT headers FROM outbox_event WHERE event_type = 'traced.child' AND (headers->>'parent_event_id')::bigint = $1",
        )
        .bind(parent)
        .fetch_optional(&pool)
        .await
        .unwrap();
        let spans = seen.lock().unwrap().clone();
        let names = |name: &str| {
            spans
                .iter()
                .any(|s| s.trace_id == TRACE_ID && s.name == name)
        };
        if let Some(child) = child {
            if names("outbox.handle") && event_dispatch(&spans).is_some() {
                break (spans, child);
            }
        }
        assert!(
            Instant::now() < deadline,
            "spans of trace {TRACE_ID} arrive: got {spans:#?}; log: {}",
            std::fs::read_to_string(dir.path().join("outbox.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let one = |name: &str| {
        spans
            .iter()
            .find(|s| s.trace_id == TRACE_ID && s.name == name)
            .unwrap()
            .clone()
    };
    let dispatch = event_dispatch(&spans).unwrap();
    let handle = one("outbox.handle");
    let publish = one("outbox.host.publish");
    assert!(spans.iter().all(|s| s.service == "outbox"), "{spans:#?}");
    assert_eq!(dispatch.parent_span_id, PRODUCER_SPAN, "{dispatch:?}");
    assert_eq!(handle.parent_span_id, PRODUCER_SPAN, "{handle:?}");
    assert_eq!(publish.parent_span_id, handle.span_id, "{publish:?}");

    // The batch's spans: `outbox.claim` with route, enqueue and record inside it, linked from
    // the event's dispatch span.
    let claim = spans
        .iter()
        .find(|s| s.name == "outbox.claim" && dispatch.links.contains(&s.span_id))
        .unwrap_or_else(|| panic!("the dispatch span links its batch: {spans:#?}"));
    for name in ["outbox.route", "outbox.enqueue", "outbox.record"] {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.name == name && s.parent_span_id == claim.span_id)
        {
            assert!(Instant::now() < deadline, "{name} inside {claim:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // The child names the span that published it, in the producer's trace.
    assert_eq!(
        child_headers["traceparent"],
        format!("00-{TRACE_ID}-{}-01", publish.span_id),
        "{child_headers}"
    );

    // SIGTERM: the host stops in order (and exports what is left) in good time.
    let pid = host.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), host.wait())
        .await
        .expect("outbox run stops after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let mut redis = redis::Client::open(
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
    )
    .unwrap()
    .get_multiplexed_async_connection()
    .await
    .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut redis)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
}
