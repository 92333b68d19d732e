//! Handler feedback loops: every event a handler publishes is one generation deeper than the
//! event it handles, and past `OUTBOX_MAX_EVENT_GENERATION` the host refuses the child, counts
//! the refusal and dead-letters the delivery, so a handler whose children route back to its own
//! queue stops instead of publishing for ever. Only the host sets a generation: what a producer
//! publishes is generation 0, whatever it writes.

use std::collections::HashMap;
use std::time::Duration;

use outbox_host::receive::DeadLetters;
use outbox_host::{publish, NewEvent};
use outbox_tests::{wait_for, PluginFixture, RunningHost, TestEnv};
use serde_json::json;
use sqlx::PgPool;

const QUEUE: &str = "outbox.loop";

/// `feedback-loop` handles `outbox.loop` and publishes a child of the type it handles, which
/// routes back to `outbox.loop`: a loop.
const ROUTES: &str = r#"
[routes]
"loop." = "outbox.loop"

[router]
plugin = "native"

[handlers]
"outbox.loop" = "feedback-loop"

[plugins.capability-policy]

[plugins.feedback-loop]
grants = { publish = ["loop."] }
"#;

/// `outbox_publish_generation_refused_total` for `plugin`, as the process-wide recorder has it
/// (installed on first use).
fn generation_refusals(plugin: &str) -> f64 {
    let Some(handle) = outbox_host::http::prometheus() else {
        return 0.0;
    };
    let label = format!("plugin=\"{plugin}\"");
    handle
        .render()
        .lines()
        .filter(|l| l.starts_with("outbox_publish_generation_refused_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_handler_whose_children_route_back_to_its_queue_stops_at_the_generation_limit(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let refused_before = generation_refusals("feedback-loop");
    let fixture = PluginFixture::new(&["capability-policy", "test/feedback-loop"], ROUTES);
    let config = fixture.config(&env.settings);
    let host = RunningHost::start(&env, &config, "loops").await;
    let root = env
        .publish_all(vec![NewEvent::new("loop.ping", json!({}))])
        .await[0];
    let dead = DeadLetters::connect(&config.settings).await.unwrap();
    // Either the chain ends in a dead letter, or it runs past the limit (the loop).
    wait_for(
        "a dead letter, or more events than 8 generations",
        Duration::from_secs(60),
        async || {
            !dead.list(&[QUEUE.into()]).await.unwrap().is_empty()
                || env.count_type("loop.ping").await > 9
        },
    )
    .await;
    // The chain has stopped: nothing more comes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.count_type("loop.ping").await,
        9,
        "the root and one child per generation 1 to 8, then nothing"
    );
    let rows: Vec<(i64, i32, serde_json::Value)> =
        sqlx::query_as("SELECT id, generation, headers FROM outbox_event ORDER BY id")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    let generations: Vec<i32> = rows.iter().map(|(_, g, _)| *g).collect();
    assert_eq!(generations, (0..=8).collect::<Vec<i32>>());
    assert_eq!(rows[0].0, root);
    for pair in rows.windows(2) {
        assert_eq!(
            pair[1].2["parent_event_id"],
            json!(pair[0].0),
            "each generation is the child of the one before"
        );
    }
    let last = rows[8].0;

    let letters = dead.list(&[QUEUE.into()]).await.unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(
        letter.event_id,
        Some(last),
        "the generation-8 event's delivery"
    );
    assert_eq!(letter.fields["handler"], "feedback-loop");
    assert_eq!(letter.attempts, 1, "dead-lettered at once, not retried");
    for needle in [
        &format!("event {last} is generation 8"),
        "OUTBOX_MAX_EVENT_GENERATION = 8",
    ] {
        assert!(
            letter.error.contains(needle),
            "{needle:?} in {}",
            letter.error
        );
    }
    let (result, error): (String, Option<String>) = sqlx::query_as(
        "SELECT result, error FROM outbox_receipt WHERE event_id = $1 AND handler = 'feedback-loop'",
    )
    .bind(last)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(result, "dead");
    assert!(
        error.unwrap_or_default().contains("generation 8"),
        "the receipt says why"
    );
    assert!(
        generation_refusals("feedback-loop") >= refused_before + 1.0,
        "the refusal is counted"
    );
    host.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_producer_cannot_set_an_events_generation(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    // The Rust publisher has no generation to set; a header of that name is only a header.
    let forged = json!({"generation": 7, "outbox_generation": 7});
    let rust = env
        .publish_all(vec![
            NewEvent::new("loop.ping", json!({})).with_headers(forged.clone())
        ])
        .await[0];
    // Nor has the SQL function: it takes no generation, and a header does not make one.
    let sql: i64 = sqlx::query_scalar("SELECT outbox_publish('loop.ping', '{}', p_headers => $1)")
        .bind(&forged)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let named = sqlx::query("SELECT outbox_publish('loop.ping', '{}', p_generation => 5)")
        .execute(&env.pool)
        .await
        .unwrap_err();
    assert!(
        named.to_string().contains("does not exist"),
        "outbox_publish has no generation parameter: {named}"
    );
    let generations: Vec<i32> =
        sqlx::query_scalar("SELECT generation FROM outbox_event WHERE id = ANY($1) ORDER BY id")
            .bind(vec![rust, sql])
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(generations, vec![0, 0]);
    // A writer going around the function cannot store a negative one either.
    let negative = sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, generation) VALUES ('loop.ping', '{}', -1)",
    )
    .execute(&env.pool)
    .await
    .unwrap_err();
    assert!(
        negative
            .to_string()
            .contains("outbox_event_generation_nonnegative"),
        "{negative}"
    );

    // On the queue a producer's event carries no generation (it reads as 0, so its handler's
    // children are generation 1), whatever the producer's headers say.
    let mut tx = env.pool.begin().await.unwrap();
    publish(
        &mut tx,
        NewEvent::new("loop.ping", json!({})).with_headers(forged),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let dispatcher = env
        .dispatcher_with("producers", TestEnv::table_with(&[("loop.", &[QUEUE])]))
        .await;
    dispatcher.drain().await.unwrap();
    let entries: Vec<HashMap<String, String>> = env.entries(QUEUE).await;
    assert_eq!(entries.len(), 3);
    for entry in &entries {
        assert!(!entry.contains_key("generation"), "{entry:?}");
    }
    env.cleanup().await;
}
