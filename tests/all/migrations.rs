//! Migrations: several processes starting on one empty database at once; a migration applied to
//! a table already holding events.

use futures::future::join_all;
use outbox_host::store;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// The migration that moves the checks of an event's payload, headers, version and generation
/// from `outbox_event` onto domains.
const VALUE_CHECKS_ON_DOMAINS: i64 = 20261205000003;

/// `outbox run` starting while an `outbox publish` (or another replica) starts: each applies the
/// migrations, and none may fail with "deadlock detected" (a `CREATE INDEX CONCURRENTLY` waits
/// for every open statement, so a process queued on the migration lock would block the holder)
/// or leave an index half built.
#[sqlx::test(migrations = false)]
async fn processes_migrating_an_empty_database_at_once_all_succeed(pool: PgPool) {
    let options = (*pool.connect_options()).clone();
    let processes: Vec<PgPool> = (0..4)
        .map(|_| {
            PgPoolOptions::new()
                .max_connections(2)
                .connect_lazy_with(options.clone())
        })
        .collect();
    let results = join_all(processes.iter().map(store::migrate)).await;
    for (n, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "process {n}: {result:?}");
    }

    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        applied,
        i64::try_from(store::MIGRATOR.iter().count()).unwrap()
    );
    let invalid: Vec<String> = sqlx::query_scalar(
        "SELECT indexrelid::regclass::text FROM pg_index WHERE NOT indisvalid OR NOT indisready",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(invalid.is_empty(), "indexes left half built: {invalid:?}");
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory'
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(held, 0, "every migration lock is released");
    for process in processes {
        process.close().await;
    }
}

/// The files of `outbox_event` and its indexes, by name.
async fn event_table_files(pool: &PgPool) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT c.relname::text, c.relfilenode::bigint FROM pg_class c
         WHERE c.oid = 'outbox_event'::regclass
            OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'outbox_event'::regclass)
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Moving the value checks onto domains, on a table already holding events: neither the table
/// nor any index is rewritten (their files stay: no long lock on a large table), every row stays
/// as it was, each check still refuses a bad value by its old name (on insert and on an update
/// setting the column), and the table keeps only the checks an update must run (status, event
/// type), so a claim or an outcome record plans and runs no other.
#[sqlx::test(migrations = false)]
async fn value_checks_move_to_domains_without_rewriting_the_table_or_an_index(pool: PgPool) {
    // Every migration before the move, from copies of their files.
    let earlier = tempfile::tempdir().unwrap();
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    for migration in store::MIGRATOR
        .iter()
        .filter(|m| m.version < VALUE_CHECKS_ON_DOMAINS)
    {
        let name = format!(
            "{}_{}.sql",
            migration.version,
            migration.description.replace(' ', "_")
        );
        std::fs::copy(folder.join(&name), earlier.path().join(&name)).unwrap();
    }
    sqlx::migrate::Migrator::new(earlier.path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, headers, event_version, generation, status)
         SELECT 'mail.welcome', jsonb_build_object('i', i), '{\"h\": 1}', 2, i % 3,
                CASE WHEN i % 2 = 0 THEN 'done' ELSE 'pending' END
         FROM generate_series(1, 2000) AS i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let rows = "SELECT md5(string_agg(row(id, event_type, payload::text, headers::text,
                    event_version::int, generation::int, status)::text, ',' ORDER BY id))
                FROM outbox_event";
    let before: String = sqlx::query_scalar(rows).fetch_one(&pool).await.unwrap();
    let files = event_table_files(&pool).await;

    store::migrate(&pool).await.unwrap();

    assert_eq!(
        event_table_files(&pool).await,
        files,
        "the table and its indexes keep their files (nothing rewritten or rebuilt)"
    );
    let after: String = sqlx::query_scalar(rows).fetch_one(&pool).await.unwrap();
    assert_eq!(after, before, "every row as it was");
    let table_checks: Vec<String> = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint
         WHERE conrelid = 'outbox_event'::regclass AND contype = 'c' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        table_checks,
        ["outbox_event_status_check", "outbox_event_type_check"],
        "the table keeps only the checks an update must run"
    );

    let refused = [
        (
            "INSERT INTO outbox_event (event_type, payload) VALUES ('mail.welcome', '[1]')",
            "outbox_event_payload_object",
        ),
        (
            "INSERT INTO outbox_event (event_type, payload, headers) VALUES ('mail.welcome', '{}', '\"x\"')",
            "outbox_event_headers_object",
        ),
        (
            "INSERT INTO outbox_event (event_type, payload, event_version) VALUES ('mail.welcome', '{}', 0)",
            "outbox_event_version_positive",
        ),
        (
            "INSERT INTO outbox_event (event_type, payload, generation) VALUES ('mail.welcome', '{}', -1)",
            "outbox_event_generation_nonnegative",
        ),
        (
            "INSERT INTO outbox_event (event_type, payload) VALUES ('Mail', '{}')",
            "outbox_event_type_check",
        ),
        (
            "UPDATE outbox_event SET payload = 'null' WHERE id = (SELECT min(id) FROM outbox_event)",
            "outbox_event_payload_object",
        ),
        (
            "UPDATE outbox_event SET headers = '[]' WHERE id = (SELECT min(id) FROM outbox_event)",
            "outbox_event_headers_object",
        ),
        (
            "UPDATE outbox_event SET status = 'lost' WHERE id = (SELECT min(id) FROM outbox_event)",
            "outbox_event_status_check",
        ),
    ];
    for (statement, constraint) in refused {
        let error = sqlx::query(statement).execute(&pool).await.unwrap_err();
        let database = error.as_database_error().unwrap();
        assert_eq!(
            database.code().as_deref(),
            Some("23514"),
            "{statement}: {error}"
        );
        assert!(
            error.to_string().contains(constraint),
            "{statement}: {error}"
        );
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 2000, "nothing refused was written");
    // Clients read the columns as their base types (the wire names jsonb and integer).
    let (payload, version, generation): (serde_json::Value, i32, i32) = sqlx::query_as(
        "SELECT payload, event_version, generation FROM outbox_event ORDER BY id LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (payload, version, generation),
        (serde_json::json!({"i": 1}), 2, 1)
    );
}
