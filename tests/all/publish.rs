//! Publishing: transactional, idempotent, validated before anything is written.

use outbox_host::{publish, store, NewEvent, PublishError};
use outbox_tests::TestEnv;
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrations = "../migrations")]
async fn rolled_back_publish_leaves_nothing(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let mut tx = env.pool.begin().await.unwrap();
    let id = publish(
        &mut tx,
        NewEvent::new("mail.welcome", json!({"to": "a@b.c"})),
    )
    .await
    .unwrap();
    assert!(id > 0);
    tx.rollback().await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "a rolled-back publish must leave no event");
}

/// Dispatch keys are unique through an index of only the rows that have one: events without a
/// key (most of them) add nothing to it at publish, claim or done, and a key is still refused a
/// second row through both publish paths.
#[sqlx::test(migrations = "../migrations")]
async fn the_dispatch_key_index_holds_only_keyed_events_and_keeps_keys_unique(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    env.publish_all(
        (0..1000)
            .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
            .collect(),
    )
    .await;
    let _: i64 = sqlx::query_scalar("SELECT outbox_publish('mail.welcome', '{}'::jsonb)")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    env.dispatcher("w1").await.drain().await.unwrap();
    assert_eq!(env.count("done").await, 1001);
    let index_bytes: i64 =
        sqlx::query_scalar("SELECT pg_relation_size('outbox_event_dispatch_key_idx')")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        index_bytes, 8192,
        "the metapage alone: no entry for a keyless event"
    );

    let first = env
        .publish_all(vec![
            NewEvent::new("mail.welcome", json!({})).with_dispatch_key("k-1")
        ])
        .await[0];
    let again: i64 =
        sqlx::query_scalar("SELECT outbox_publish('mail.welcome', '{}'::jsonb, NULL, 'k-1')")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(first, again);
    let raw = sqlx::query("INSERT INTO outbox_event (event_type, payload, dispatch_key) VALUES ('mail.welcome', '{}', 'k-1')")
        .execute(&env.pool)
        .await
        .unwrap_err();
    assert!(
        raw.to_string().contains("outbox_event_dispatch_key_idx"),
        "{raw}"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn duplicate_dispatch_key_gives_one_event(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let first = env
        .publish_all(vec![
            NewEvent::new("mail.welcome", json!({"n": 1})).with_dispatch_key("k-1")
        ])
        .await[0];
    // The same event again (headers may differ: trace context) gives the first id.
    let second = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({"n": 1}))
            .with_dispatch_key("k-1")
            .with_headers(
                json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
            )])
        .await[0];
    assert_eq!(first, second);
    // The SQL function for other languages behaves the same.
    let third: i64 = sqlx::query_scalar(
        "SELECT outbox_publish('mail.welcome', '{\"n\":1}'::jsonb, NULL, 'k-1')",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(first, third);
    let rows: Vec<(i64, serde_json::Value)> =
        sqlx::query_as("SELECT id, payload FROM outbox_event")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![(first, json!({"n": 1}))],
        "the first event wins, nothing else is written"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn sql_function_publishes_inside_the_callers_transaction(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let mut tx = env.pool.begin().await.unwrap();
    let id: i64 = sqlx::query_scalar(
        "SELECT outbox_publish('audit.login', '{\"user\": 7}'::jsonb, 'tenant-a', NULL, '{\"trace\": \"t1\"}'::jsonb)",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(env.count("pending").await, 0, "rolled back with the caller");
    let id2: i64 = sqlx::query_scalar(
        "SELECT outbox_publish('audit.login', '{\"user\": 7}'::jsonb, 'tenant-a')",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert!(id2 > id);
    let (tenant, status): (Option<String>, String) =
        sqlx::query_as("SELECT tenant_id, status FROM outbox_event WHERE id = $1")
            .bind(id2)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        (tenant.as_deref(), status.as_str()),
        (Some("tenant-a"), "pending")
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_input_to_publish_is_rejected_and_writes_nothing(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let mut tx = env.pool.begin().await.unwrap();
    let bad_type = publish(&mut tx, NewEvent::new("MailWelcome", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(bad_type, PublishError::InvalidEventType(_)));
    assert!(
        bad_type.to_string().contains("lowercase dot-separated"),
        "{bad_type}"
    );
    let one_segment = publish(&mut tx, NewEvent::new("mail", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(one_segment, PublishError::InvalidEventType(_)));
    let not_object = publish(&mut tx, NewEvent::new("mail.welcome", json!("text")))
        .await
        .unwrap_err();
    assert_eq!(
        not_object.to_string(),
        "payload of mail.welcome must be a JSON object, got a string"
    );
    let big = json!({"blob": "x".repeat(300 * 1024)});
    let oversize = publish(&mut tx, NewEvent::new("mail.welcome", big))
        .await
        .unwrap_err();
    assert!(
        oversize
            .to_string()
            .contains("over the limit of 262144 bytes"),
        "{oversize}"
    );
    tx.commit().await.unwrap();

    for (sql, expected) in [
        ("SELECT outbox_publish('Bad.Type', '{}'::jsonb)", "invalid event type"),
        ("SELECT outbox_publish('mail.welcome', '[1,2]'::jsonb)", "payload must be a JSON object, got array"),
        ("SELECT outbox_publish('mail.welcome', '{\"text\": \"longer than ten bytes\"}'::jsonb, NULL, NULL, '{}'::jsonb, NULL, 1, NULL, 10)", "over the limit of 10 bytes"),
    ] {
        let err = sqlx::query(sql).execute(&env.pool).await.unwrap_err();
        assert!(err.to_string().contains(expected), "{sql}: {err}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

/// The SQL error's message (what `RAISE EXCEPTION` said).
fn sql_message(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(e) => e.message().to_string(),
        other => other.to_string(),
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dispatch_key_names_one_event_and_different_content_is_a_conflict(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let first = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({"n": 1}))
            .with_tenant("t1")
            .with_dispatch_key("k-1")])
        .await[0];
    let cases = [
        (
            NewEvent::new("mail.welcome", json!({"n": 2})).with_tenant("t1"),
            "'mail.welcome', '{\"n\": 2}'::jsonb, 't1'",
            "payload",
        ),
        (
            NewEvent::new("mail.welcome", json!({"n": 1})).with_tenant("t2"),
            "'mail.welcome', '{\"n\": 1}'::jsonb, 't2'",
            "tenant",
        ),
        (
            NewEvent::new("mail.goodbye", json!({"n": 1})),
            "'mail.goodbye', '{\"n\": 1}'::jsonb, NULL",
            "event type, tenant",
        ),
    ];
    for (event, sql_args, differs) in cases {
        let expected =
            format!("dispatch_key k-1 already names event {first} with a different {differs}");
        let mut tx = env.pool.begin().await.unwrap();
        let err = publish(&mut tx, event.with_dispatch_key("k-1"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, PublishError::DispatchKeyConflict { existing_id, .. } if existing_id == first)
        );
        assert_eq!(err.to_string(), expected);
        tx.rollback().await.unwrap();
        let err = sqlx::query(&format!("SELECT outbox_publish({sql_args}, 'k-1')"))
            .execute(&env.pool)
            .await
            .unwrap_err();
        assert_eq!(sql_message(&err), format!("outbox_publish: {expected}"));
    }
    // Same content, other headers: the first id, from both entry points.
    let again = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({"n": 1}))
            .with_tenant("t1")
            .with_dispatch_key("k-1")
            .with_headers(
                json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
            )])
        .await[0];
    let sql_again: i64 = sqlx::query_scalar(
        "SELECT outbox_publish('mail.welcome', '{\"n\": 1}'::jsonb, 't1', 'k-1', '{\"x\": 1}'::jsonb)",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!((again, sql_again), (first, first));
    assert_eq!(env.count("pending").await, 1);
}

#[sqlx::test(migrations = "../migrations")]
async fn producers_cannot_use_the_hosts_dispatch_key_prefixes(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    for (key, prefix) in [
        ("child:1:audit-log:0", "child:"),
        ("denied:1:h:kv:k", "denied:"),
    ] {
        let expected = format!(
            "dispatch_key of mail.welcome starts with {prefix}, a prefix reserved for the host's own events"
        );
        let mut tx = env.pool.begin().await.unwrap();
        let err = publish(
            &mut tx,
            NewEvent::new("mail.welcome", json!({})).with_dispatch_key(key),
        )
        .await
        .unwrap_err();
        assert_eq!(err.to_string(), expected);
        tx.rollback().await.unwrap();
        let err = sqlx::query("SELECT outbox_publish('mail.welcome', '{}'::jsonb, NULL, $1)")
            .bind(key)
            .execute(&env.pool)
            .await
            .unwrap_err();
        assert_eq!(sql_message(&err), format!("outbox_publish: {expected}"));
    }
    assert_eq!(env.count("pending").await, 0);
}

#[sqlx::test(migrations = "../migrations")]
async fn sql_callers_cannot_raise_the_hosts_payload_limit(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let big = json!({"blob": "x".repeat(300 * 1024)});
    let err = sqlx::query(
        "SELECT outbox_publish('mail.welcome', $1, NULL, NULL, '{}'::jsonb, NULL, 1, NULL, 10000000)",
    )
    .bind(&big)
    .execute(&env.pool)
    .await
    .unwrap_err();
    assert!(
        sql_message(&err).ends_with("over the limit of 262144 bytes"),
        "{err}"
    );
    // The host records its own limit at start; that one is the ceiling.
    store::record_max_payload_bytes(&env.pool, 1024 * 1024)
        .await
        .unwrap();
    let id: i64 = sqlx::query_scalar(
        "SELECT outbox_publish('mail.welcome', $1, NULL, NULL, '{}'::jsonb, NULL, 1, NULL, 10000000)",
    )
    .bind(&big)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert!(id > 0);
    // A caller may still lower it.
    let err = sqlx::query(
        "SELECT outbox_publish('mail.welcome', '{\"a\": 1}'::jsonb, NULL, NULL, '{}'::jsonb, NULL, 1, NULL, 5)",
    )
    .execute(&env.pool)
    .await
    .unwrap_err();
    assert!(
        sql_message(&err).ends_with("over the limit of 5 bytes"),
        "{err}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn outbox_publish_resolves_names_through_its_own_search_path_not_the_callers(pool: PgPool) {
    // Its settings pin the search path: pg_catalog, its own schema, pg_temp last.
    let config: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(proconfig) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE p.proname = 'outbox_publish' AND n.nspname = 'public'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        config,
        vec!["search_path=pg_catalog, public, pg_temp".to_string()]
    );

    // A caller whose search path puts a look-alike table first still publishes into the outbox.
    let mut conn = pool.acquire().await.unwrap();
    for statement in [
        "CREATE SCHEMA lookalike",
        "CREATE TABLE lookalike.outbox_event (LIKE public.outbox_event INCLUDING ALL)",
        "SET search_path = lookalike, public",
    ] {
        sqlx::query(statement).execute(&mut *conn).await.unwrap();
    }
    let id: i64 = sqlx::query_scalar("SELECT public.outbox_publish('mail.welcome', '{}'::jsonb)")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let (in_outbox, in_lookalike): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM public.outbox_event WHERE id = $1),
                (SELECT count(*) FROM lookalike.outbox_event)",
    )
    .bind(id)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!((in_outbox, in_lookalike), (1, 0));
}
