//! Connections a stage keeps between its statements (`store::KeptConnections`): reused with no
//! round trip to the pool, checked again after a second idle, and given up, all of them, after a
//! failed or unfinished statement; and a dispatcher whose kept connections were all cut delivers
//! what is published next without counting an attempt.

use std::time::Duration;

use outbox_host::store::KeptConnections;
use outbox_host::NewEvent;
use outbox_tests::{wait_for, TestEnv};
use serde_json::json;
use sqlx::PgPool;

/// Wait until event `id` is `done`.
async fn wait_done(env: &TestEnv, id: i64) {
    wait_for(
        &format!("event {id} done"),
        Duration::from_secs(15),
        async || env.status(id).await.0 == "done",
    )
    .await;
}

/// The backend process id of `conn`.
async fn backend_pid(conn: &mut sqlx::PgConnection) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
}

/// The backend process id of a lent connection.
async fn backend_of(kept: &KeptConnections) -> (i32, Result<(), sqlx::Error>) {
    let mut conn = kept.acquire().await.unwrap();
    let pid = backend_pid(&mut conn).await;
    conn.finished(&pid);
    match pid {
        Ok(pid) => (pid, Ok(())),
        Err(e) => (0, Err(e)),
    }
}

/// Terminate backend `pid` from a connection of `pool`, and wait until it is gone.
async fn terminate(pool: &PgPool, pid: i32) {
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(killed, "backend {pid} terminated");
    let start = std::time::Instant::now();
    loop {
        let alive: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                .bind(pid)
                .fetch_one(pool)
                .await
                .unwrap();
        if !alive {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "backend {pid} is still there"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn kept_connections_are_reused_and_all_given_up_after_a_failed_statement(pool: PgPool) {
    let kept = KeptConnections::new(pool.clone(), 2);
    let (first, ok) = backend_of(&kept).await;
    ok.unwrap();
    assert_eq!(kept.idle(), 1, "kept after a statement that went well");
    let (again, ok) = backend_of(&kept).await;
    ok.unwrap();
    assert_eq!(
        again, first,
        "the next statement runs on the kept connection"
    );

    // Two lent at once: both kept afterwards, up to the number asked for.
    let mut a = kept.acquire().await.unwrap();
    let mut b = kept.acquire().await.unwrap();
    let pid_a = backend_pid(&mut a).await.unwrap();
    let pid_b = backend_pid(&mut b).await.unwrap();
    assert_ne!(
        pid_a, pid_b,
        "the pool lends a second connection while the kept one is busy"
    );
    a.finished(&Ok::<(), ()>(()));
    b.finished(&Ok::<(), ()>(()));
    assert_eq!(kept.idle(), 2);

    // Both backends die (PostgreSQL restarted, say). Used within the second, a kept connection
    // is not pinged first: its statement fails, and every kept connection goes back to the pool.
    terminate(&pool, pid_a).await;
    terminate(&pool, pid_b).await;
    let (_, failed) = backend_of(&kept).await;
    assert!(
        failed.is_err(),
        "the statement on a dead kept connection fails"
    );
    assert_eq!(
        kept.idle(),
        0,
        "a failed statement gives up every kept connection"
    );
    let (fresh, ok) = backend_of(&kept).await;
    ok.expect("the retry runs on a connection that answers, not on the other dead one");
    assert!(fresh != pid_a && fresh != pid_b);
    assert_eq!(kept.idle(), 1);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_kept_connection_idle_for_a_second_is_checked_before_it_is_used(pool: PgPool) {
    let kept = KeptConnections::new(pool.clone(), 1);
    let (first, ok) = backend_of(&kept).await;
    ok.unwrap();
    terminate(&pool, first).await;
    tokio::time::sleep(outbox_host::store::PING_WHEN_IDLE_FOR + Duration::from_millis(100)).await;
    let (next, ok) = backend_of(&kept).await;
    ok.expect("an idle kept connection is pinged first, and a dead one replaced");
    assert_ne!(next, first);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_connection_whose_statement_never_finished_is_not_kept(pool: PgPool) {
    let kept = KeptConnections::new(pool.clone(), 1);
    let (_, ok) = backend_of(&kept).await;
    ok.unwrap();
    {
        let mut conn = kept.acquire().await.unwrap();
        let slow = sqlx::query("SELECT pg_sleep(2)").execute(&mut *conn);
        let cut = tokio::time::timeout(Duration::from_millis(100), slow).await;
        assert!(cut.is_err(), "the statement was cut short");
        // Dropped without `finished`: its reply is still on the way.
    }
    assert_eq!(kept.idle(), 0, "a connection cut mid-statement is not kept");
    let (_, ok) = backend_of(&kept).await;
    ok.expect("the next statement runs on a clean connection");
}

/// Kill every backend of the dispatcher's pool but the listening one while it idles: the next
/// event is claimed, handed off and recorded once, with its one attempt, on fresh connections.
#[sqlx::test(migrations = "../migrations")]
async fn a_dispatcher_delivers_without_burning_an_attempt_after_its_kept_connections_die(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(200);
    let dispatcher = env.dispatcher("kept").await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    let warm_up = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({"n": 1}))])
        .await[0];
    wait_done(&env, warm_up).await;

    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() AND query NOT ILIKE 'LISTEN%'",
    )
    .bind(&db)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert!(
        !killed.is_empty(),
        "the dispatcher's connections were there to cut"
    );

    let ids = env
        .publish_all(vec![
            NewEvent::new("mail.welcome", json!({"n": 2})),
            NewEvent::new("mail.welcome", json!({"n": 3})),
        ])
        .await;
    for id in &ids {
        wait_done(&env, *id).await;
        let (status, attempts, _) = env.status(*id).await;
        assert_eq!((status.as_str(), attempts), ("done", 1), "event {id}");
    }
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}
