//! Handlers written in Rust, Python (componentize-py) and JavaScript (ComponentizeJS), the three
//! examples in `plugins/examples/` with one behaviour, loaded by a real host like any `.wasm`
//! and handling real events end to end: each reads its event, counts it in kv, publishes a
//! child under its grants, answers retry and fail, and is stopped by its time limit and its
//! memory cap like any other guest.

use std::time::Duration;

use outbox_host::receive::DeadLetters;
use outbox_host::NewEvent;
use outbox_tests::{wait_for, PluginFixture, RunningHost, TestEnv};
use redis::AsyncCommands;
use serde_json::json;
use sqlx::PgPool;

/// (language, plugin name): each example is the plugin `<language>-handler`.
const LANGUAGES: [(&str, &str); 3] = [
    ("rust", "rust-handler"),
    ("python", "python-handler"),
    ("js", "js-handler"),
];

/// Events of type `example-<language>.*` go to `outbox.example-<language>`, handled by that
/// language's example, which may publish `example.child` (routed to a queue nobody reads).
fn routes() -> String {
    let mut routes = String::from("[routes]\n\"example.child\" = \"outbox.example-children\"\n");
    for (language, _) in LANGUAGES {
        routes.push_str(&format!(
            "\"example-{language}.\" = \"outbox.example-{language}\"\n"
        ));
    }
    routes.push_str("[router]\nplugin = \"native\"\n[handlers]\n");
    for (language, plugin) in LANGUAGES {
        routes.push_str(&format!("\"outbox.example-{language}\" = \"{plugin}\"\n"));
    }
    routes.push_str("[plugins.capability-policy]\n");
    for (_, plugin) in LANGUAGES {
        // A time limit short enough for the test, long enough for a first call of a large
        // guest; the default 64 MiB memory cap.
        routes.push_str(&format!(
            "[plugins.{plugin}]\ntimeout_ms = 1500\nconfig = {{ child_type = \"example.child\" }}\n\
             grants = {{ kv = true, publish = [\"example.child\"] }}\n"
        ));
    }
    routes
}

/// The final receipt of `id` (handled by `language`'s example) is `dead`, after `attempts` when
/// given, with an error naming one of `reasons`.
async fn dead_after(
    env: &TestEnv,
    language: &str,
    id: i64,
    attempts: Option<i32>,
    reasons: &[&str],
) {
    let receipt = env.receipt(id).await.unwrap();
    let error = receipt.2.clone().unwrap_or_default();
    assert!(
        receipt.0 == "dead"
            && attempts.is_none_or(|a| a == receipt.1)
            && reasons.iter().any(|r| error.contains(r)),
        "{language}: {receipt:?}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn handlers_in_rust_python_and_javascript_handle_events_end_to_end_within_their_limits(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.handler_max_retries = 1;
    env.settings.handler_backoff = vec![Duration::from_millis(100)];
    let mut plugins = vec!["capability-policy".to_string()];
    plugins.extend(LANGUAGES.iter().map(|(_, p)| format!("examples/{p}")));
    let plugins: Vec<&str> = plugins.iter().map(String::as_str).collect();
    let fixture = PluginFixture::new(&plugins, &routes());
    let running = RunningHost::start(&env, &fixture.config(&env.settings), "languages").await;

    let actions = ["ok", "retry", "fail", "spin", "hog"];
    let mut events = Vec::new();
    for (language, _) in LANGUAGES {
        for action in actions {
            events.push(NewEvent::new(
                format!("example-{language}.{action}"),
                json!({ "action": action, "user": 42 }),
            ));
        }
    }
    let ids = env.publish_all(events).await;
    // Every event ends handled (`ok`) or given up (`dead`); a receipt says `retry` meanwhile.
    wait_for(
        "every final outcome",
        Duration::from_secs(120),
        async || {
            for id in &ids {
                if !env
                    .receipt(*id)
                    .await
                    .is_some_and(|(result, _, _)| result == "ok" || result == "dead")
                {
                    return false;
                }
            }
            true
        },
    )
    .await;

    let mut redis = env.redis.clone();
    let dead = DeadLetters::connect(&env.settings).await.unwrap();
    for (n, (language, plugin)) in LANGUAGES.iter().enumerate() {
        let id = |action: &str| {
            ids[n * actions.len() + actions.iter().position(|a| *a == action).unwrap()]
        };
        // ok: counted in its kv namespace, its child published with the key the host gives it.
        let ok = env.receipt(id("ok")).await.unwrap();
        assert_eq!((ok.0.as_str(), ok.1), ("ok", 1), "{language}: {ok:?}");
        let seen: Option<String> = redis
            .get(format!("{}outbox:kv:{plugin}:seen", env.prefix))
            .await
            .unwrap();
        assert_eq!(seen.as_deref(), Some("1"), "{language}");
        let child: (serde_json::Value,) = sqlx::query_as(
            "SELECT payload FROM outbox_event WHERE event_type = 'example.child' AND dispatch_key = $1",
        )
        .bind(format!("child:{}:{plugin}:0", id("ok")))
        .fetch_one(&env.pool)
        .await
        .unwrap();
        assert_eq!(
            child.0,
            json!({ "parent": id("ok"), "count": 1 }),
            "{language}"
        );

        // retry: tried again, then given up after the configured retries, with its reason;
        // fail: dead at once; spin and hog: stopped by the sandbox (time or fuel, memory).
        dead_after(&env, language, id("retry"), Some(2), &["asked to retry"]).await;
        dead_after(&env, language, id("fail"), Some(1), &["asked to fail"]).await;
        dead_after(&env, language, id("spin"), None, &["time limit", "fuel"]).await;
        dead_after(&env, language, id("hog"), None, &["memory limit"]).await;
        let letters = dead
            .list(&[format!("outbox.example-{language}")])
            .await
            .unwrap();
        assert_eq!(letters.len(), 4, "{language}: {letters:?}");
    }
    running.stop().await;
    env.cleanup().await;
}
