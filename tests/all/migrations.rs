//! Migrations: several processes starting on one empty database at once.

use futures::future::join_all;
use outbox_host::store;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

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
