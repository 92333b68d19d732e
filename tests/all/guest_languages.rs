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

/// The receipt of `event_id`: result, attempts, error.
async fn receipt(env: &TestEnv, event_id: i64) -> Option<(String, i32, Option<String>)> {
    sqlx::query_as("SELECT result, attempts, error FROM outbox_receipt WHERE event_id = $1")
        .bind(event_id)
        .fetch_optional(&env.pool)
        .await
        .unwrap()
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
                if !receipt(&env, *id)
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
        let ok = receipt(&env, id("ok")).await.unwrap();
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

        // retry: tried again, then given up after the configured retries, with its reason.
        let retried = receipt(&env, id("retry")).await.unwrap();
        assert_eq!(
            (retried.0.as_str(), retried.1),
            ("dead", 2),
            "{language}: {retried:?}"
        );
        assert!(
            retried
                .2
                .as_deref()
                .unwrap_or_default()
                .contains("asked to retry"),
            "{language}: {retried:?}"
        );
        // fail: dead at once.
        let failed = receipt(&env, id("fail")).await.unwrap();
        assert_eq!(
            (failed.0.as_str(), failed.1),
            ("dead", 1),
            "{language}: {failed:?}"
        );
        assert!(
            failed
                .2
                .as_deref()
                .unwrap_or_default()
                .contains("asked to fail"),
            "{language}: {failed:?}"
        );
        // spin and hog: stopped by the sandbox (time or fuel, memory), each attempt.
        let spun = receipt(&env, id("spin")).await.unwrap();
        let spun_error = spun.2.clone().unwrap_or_default();
        assert!(
            spun.0 == "dead" && (spun_error.contains("time limit") || spun_error.contains("fuel")),
            "{language}: {spun:?}"
        );
        let hogged = receipt(&env, id("hog")).await.unwrap();
        assert!(
            hogged.0 == "dead"
                && hogged
                    .2
                    .as_deref()
                    .unwrap_or_default()
                    .contains("memory limit"),
            "{language}: {hogged:?}"
        );
        let letters = dead
            .list(&[format!("outbox.example-{language}")])
            .await
            .unwrap();
        assert_eq!(letters.len(), 4, "{language}: {letters:?}");
    }
    running.stop().await;
    env.cleanup().await;
}
