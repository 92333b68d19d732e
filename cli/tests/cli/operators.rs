//! Operators: roles gate the destructive commands, and admin repairs are audited.

use sqlx::PgPool;

use crate::{cli_error, outbox, outbox_as, pool_url};

#[sqlx::test(migrations = "../migrations")]
async fn cli_operator_roles_gate_destructive_commands_and_admin_repairs_are_audited(pool: PgPool) {
    let url = pool_url(&pool).await;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, last_error)
         SELECT 'mail.welcome', '{}', 'failed', 6, 'smtp refused' FROM generate_series(1, 3)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let failed = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_event WHERE status = 'failed'")
            .fetch_one(&pool)
            .await
            .unwrap()
    };

    // No operator yet: the command says how to make the first one, and changes nothing.
    let out = outbox(&url, &["requeue", "--status", "failed"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("no operator exists yet: create the first admin with `outbox operator add NAME --role admin`"),
        "{}",
        cli_error(&out)
    );
    let out = outbox(&url, &["operator", "add", "first", "--role", "viewer"]);
    assert!(
        cli_error(&out).contains("the first one must be an admin"),
        "{}",
        cli_error(&out)
    );

    let out = outbox(&url, &["operator", "add", "alice", "--role", "admin"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let admin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(admin.starts_with("obx_"), "{admin}");
    let stored: String =
        sqlx::query_scalar("SELECT token_sha256 FROM outbox_operator WHERE name = 'alice'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_ne!(stored, admin, "only a hash of the token is stored");

    // A later operator needs an admin's token.
    let out = outbox(&url, &["operator", "add", "bob", "--role", "viewer"]);
    assert!(
        cli_error(&out).contains("needs an operator token with the admin role"),
        "{}",
        cli_error(&out)
    );
    let out = outbox_as(
        &url,
        &admin,
        &["operator", "add", "bob", "--role", "viewer"],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    let viewer = String::from_utf8(out.stdout).unwrap().trim().to_string();

    // A viewer may read but not repair, and its refused requeue changes nothing.
    let out = outbox_as(&url, &viewer, &["stats", "--json"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let out = outbox_as(&url, &viewer, &["requeue", "--status", "failed"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains(
            "operator bob has the viewer role; `requeue` needs admin: nothing was changed"
        ),
        "{}",
        cli_error(&out)
    );
    assert_eq!(failed().await, 3);
    let out = outbox_as(&url, "obx_forged", &["stats"]);
    assert!(cli_error(&out).contains("not valid"), "{}", cli_error(&out));

    // An admin's requeue runs, and is in the audit trail with its filter and effect.
    let out = outbox_as(
        &url,
        &admin,
        &["requeue", "--status", "failed", "--dry-run"],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    let out = outbox_as(&url, &admin, &["requeue", "--status", "failed"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    assert_eq!(failed().await, 0);
    let out = outbox_as(&url, &viewer, &["audit", "--json"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let audit: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let requeues: Vec<&serde_json::Value> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["command"] == "requeue")
        .collect();
    assert_eq!(requeues.len(), 2, "{audit}");
    assert_eq!(requeues[0]["operator"], "alice");
    assert_eq!(requeues[0]["dry_run"], false);
    assert_eq!(requeues[0]["rows_affected"], 3);
    assert_eq!(requeues[0]["arguments"]["filter"]["statuses"][0], "failed");
    assert_eq!(requeues[1]["dry_run"], true);
    let history_actor: String =
        sqlx::query_scalar("SELECT DISTINCT actor FROM outbox_event_history")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(history_actor, "alice");

    // Revoked, a token stops working; the last admin cannot be revoked.
    let out = outbox_as(&url, &admin, &["operator", "revoke", "alice"]);
    assert!(
        cli_error(&out).contains("is the last admin"),
        "{}",
        cli_error(&out)
    );
    let out = outbox_as(&url, &admin, &["operator", "revoke", "bob"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let out = outbox_as(&url, &viewer, &["stats"]);
    assert!(
        cli_error(&out).contains("not valid (unknown or revoked)"),
        "{}",
        cli_error(&out)
    );
}
