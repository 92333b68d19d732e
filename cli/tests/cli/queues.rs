//! `outbox queue pause|resume|list`: a pause is persisted with who and why, shown by `list` and
//! `stats`, audited, gated to admins; unknown queues and BullMQ queues are refused and change
//! nothing.

use sqlx::PgPool;

use crate::{cli_error, outbox, outbox_as, pool_url};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_queue_pause_resume_and_list_are_persisted_audited_and_checked(pool: PgPool) {
    let url = pool_url(&pool).await;
    let out = outbox(&url, &["operator", "add", "ada", "--role", "admin"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let admin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let out = outbox_as(
        &url,
        &admin,
        &["operator", "add", "vic", "--role", "viewer"],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    let viewer = String::from_utf8(out.stdout).unwrap().trim().to_string();

    // A viewer may list but not pause; no token at all may do neither.
    let out = outbox_as(&url, &viewer, &["queue", "pause", "outbox.workflow"]);
    assert!(!out.status.success());
    assert!(cli_error(&out).contains("admin"), "{}", cli_error(&out));
    let out = outbox(&url, &["queue", "list"]);
    assert!(!out.status.success());

    // Unknown names are errors listing the known queues; nothing is paused.
    let out = outbox_as(&url, &admin, &["queue", "pause", "outbox.nope"]);
    assert!(!out.status.success());
    let err = cli_error(&out);
    assert!(
        err.contains("unknown queue \"outbox.nope\"") && err.contains("outbox.workflow"),
        "{err}"
    );
    let out = outbox_as(&url, &admin, &["queue", "pause", "bad:name"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("queue names use"),
        "{}",
        cli_error(&out)
    );
    let long = "x".repeat(501);
    let out = outbox_as(
        &url,
        &admin,
        &["queue", "pause", "outbox.workflow", "--reason", &long],
    );
    assert!(!out.status.success());
    let out = outbox_as(
        &url,
        &admin,
        &[
            "queue",
            "pause",
            "outbox.workflow",
            "--reason",
            "two\nlines",
        ],
    );
    assert!(!out.status.success());
    let paused: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_queue_pause")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(paused, 0, "refused commands change nothing");

    // Pause: persisted with who and why; a second pause keeps the first.
    let out = outbox_as(
        &url,
        &admin,
        &[
            "queue",
            "pause",
            "outbox.workflow",
            "--reason",
            "executor upgrade",
        ],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    assert!(
        stdout(&out).contains("queue outbox.workflow paused"),
        "{}",
        stdout(&out)
    );
    let out = outbox_as(&url, &admin, &["queue", "pause", "outbox.workflow"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    assert!(
        stdout(&out).contains("already paused")
            && stdout(&out).contains("by ada: executor upgrade"),
        "{}",
        stdout(&out)
    );
    let row: (String, Option<String>) = sqlx::query_as(
        "SELECT paused_by, reason FROM outbox_queue_pause WHERE queue = 'outbox.workflow'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(row, ("ada".into(), Some("executor upgrade".into())));

    // list (text and JSON) and stats show it.
    let out = outbox_as(&url, &viewer, &["queue", "list"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let text = stdout(&out);
    assert!(
        text.contains("paused since") && text.contains("executor upgrade"),
        "{text}"
    );
    let out = outbox_as(&url, &viewer, &["queue", "list", "--json"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let workflow = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["queue"] == "outbox.workflow")
        .unwrap();
    assert_eq!(workflow["handler"], "workflow-trigger");
    assert_eq!(workflow["paused"]["paused_by"], "ada");
    assert!(workflow["concurrency"].as_u64().unwrap() >= 1);
    let mail = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["queue"] == "outbox.mail")
        .unwrap();
    assert!(mail["paused"].is_null());
    let out = outbox_as(&url, &viewer, &["stats"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("queue outbox.workflow is paused"),
        "{stderr}"
    );

    // Resume, then a resume of a running queue says so.
    let out = outbox_as(&url, &admin, &["queue", "resume", "outbox.workflow"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    assert!(stdout(&out).contains("resumed"), "{}", stdout(&out));
    let out = outbox_as(&url, &admin, &["queue", "resume", "outbox.workflow"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    assert!(stdout(&out).contains("was not paused"), "{}", stdout(&out));

    // Every pause and resume is in the audit trail.
    let audited: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT operator, command, rows_affected FROM outbox_audit
         WHERE command LIKE 'queue %' ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        vec![
            ("ada".into(), "queue pause".into(), 1),
            ("ada".into(), "queue pause".into(), 0),
            ("ada".into(), "queue resume".into(), 1),
            ("ada".into(), "queue resume".into(), 0),
        ]
    );
}
