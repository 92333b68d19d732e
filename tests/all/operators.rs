//! Operators and their audit trail under concurrency: of several `operator add` racing on an
//! empty table exactly one bootstraps the first admin, two admins revoking each other at once
//! leave one, and a change whose audit row cannot be written is not kept.

use std::sync::Arc;

use outbox_host::queue_pause::QueuePauseControl;
use outbox_host::store::{self, AccessError, Operator, Role};
use outbox_tests::TestEnv;
use redis::AsyncCommands;
use sqlx::PgPool;
use tokio::sync::Barrier;

/// How many commands race.
const RACERS: usize = 8;

#[sqlx::test(migrations = "../migrations")]
async fn of_concurrent_first_operator_adds_exactly_one_bootstraps_an_admin(pool: PgPool) {
    for round in 0..5 {
        sqlx::query("TRUNCATE outbox_operator, outbox_audit")
            .execute(&pool)
            .await
            .unwrap();
        let start = Arc::new(Barrier::new(RACERS));
        let racers: Vec<_> = (0..RACERS)
            .map(|i| {
                let (pool, start) = (pool.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store::add_operator_audited(&pool, None, &format!("first-{i}"), Role::Admin)
                        .await
                })
            })
            .collect();
        let mut bootstrapped = 0;
        for racer in racers {
            match racer.await.unwrap() {
                Ok(added) => {
                    assert_eq!(added.by, store::BOOTSTRAP);
                    bootstrapped += 1;
                }
                Err(AccessError::NoToken { .. }) => {}
                Err(e) => panic!("round {round}: a losing add fails for want of a token, not {e}"),
            }
        }
        let operators = store::list_operators(&pool).await.unwrap();
        assert_eq!(
            (bootstrapped, operators.len()),
            (1, 1),
            "round {round}: exactly one first admin ({operators:?})"
        );
        let audited: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox_audit WHERE command = 'operator add'")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(audited, 1, "round {round}: the one add is audited");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn two_admins_revoking_each_other_at_once_leave_one_admin(pool: PgPool) {
    for round in 0..5 {
        sqlx::query("TRUNCATE outbox_operator, outbox_audit")
            .execute(&pool)
            .await
            .unwrap();
        let a = store::add_operator(&pool, "admin-a", Role::Admin, "test")
            .await
            .unwrap();
        let b = store::add_operator(&pool, "admin-b", Role::Admin, "test")
            .await
            .unwrap();
        let start = Arc::new(Barrier::new(2));
        let racers: Vec<_> = [(a, "admin-b"), (b, "admin-a")]
            .into_iter()
            .map(|(token, victim)| {
                let (pool, start) = (pool.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store::revoke_operator_audited(&pool, Some(&token), victim).await
                })
            })
            .collect();
        let mut revoked = 0;
        for racer in racers {
            match racer.await.unwrap() {
                Ok(()) => revoked += 1,
                // Refused: its revoker was revoked first, or the victim is the last admin.
                Err(AccessError::BadToken | AccessError::Invalid(_)) => {}
                Err(e) => panic!("round {round}: unexpected error {e}"),
            }
        }
        let admins = store::list_operators(&pool)
            .await
            .unwrap()
            .into_iter()
            .filter(|o| o.role == "admin" && o.revoked_at.is_none())
            .count();
        assert_eq!(
            (revoked, admins),
            (1, 1),
            "round {round}: one revocation goes through and one admin remains"
        );
    }
}

/// Make every audit row of `command` fail to insert (a CHECK the table refuses it with).
async fn refuse_audit_of(pool: &PgPool, command: &str) {
    sqlx::query(&format!(
        "ALTER TABLE outbox_audit ADD CONSTRAINT test_refuses_{} CHECK (command <> '{command}')",
        command.replace(' ', "_")
    ))
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_change_whose_audit_row_cannot_be_written_is_not_kept(pool: PgPool) {
    let env = TestEnv::new(pool.clone()).await;
    let admin_token = store::add_operator(&pool, "ada", Role::Admin, "test")
        .await
        .unwrap();
    store::add_operator(&pool, "bob", Role::Admin, "test")
        .await
        .unwrap();
    let ada = Operator {
        name: "ada".into(),
        role: Role::Admin,
    };

    // operator add
    refuse_audit_of(&pool, "operator add").await;
    let added = store::add_operator_audited(&pool, Some(&admin_token), "carl", Role::Viewer).await;
    assert!(added.is_err(), "the add fails with its audit row");
    assert!(
        !store::list_operators(&pool)
            .await
            .unwrap()
            .iter()
            .any(|o| o.name == "carl"),
        "an unaudited add is not kept"
    );

    // operator revoke
    refuse_audit_of(&pool, "operator revoke").await;
    assert!(
        store::revoke_operator_audited(&pool, Some(&admin_token), "bob")
            .await
            .is_err()
    );
    assert!(
        store::list_operators(&pool)
            .await
            .unwrap()
            .iter()
            .any(|o| o.name == "bob" && o.revoked_at.is_none()),
        "an unaudited revocation is not kept"
    );

    // queue pause: neither the row nor the Redis pause key is kept.
    refuse_audit_of(&pool, "queue pause").await;
    let control = QueuePauseControl::connect(&env.settings).await.unwrap();
    assert!(control
        .pause(&pool, &ada, "outbox.audited", None)
        .await
        .is_err());
    assert!(store::paused_queues(&pool).await.unwrap().is_empty());
    let mut conn = env.redis.clone();
    let key: Option<String> = conn
        .get(format!("{}outbox:paused:outbox.audited", env.prefix))
        .await
        .unwrap();
    assert_eq!(key, None, "no pause key without the pause");

    // release
    refuse_audit_of(&pool, "release").await;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, claimed_by, claim_expires_at)
         VALUES ('audit.probe', '{}', 'processing', 'gone-host', now() + interval '1 hour')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert!(
        store::release_claims_audited(&pool, &ada, "gone-host", false)
            .await
            .is_err()
    );
    let still_claimed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_event WHERE claimed_by = 'gone-host' AND status = 'processing'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(still_claimed, 1, "an unaudited release is not kept");
    let audited: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_audit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(audited, 0);
}
