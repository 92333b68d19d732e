//! Repairs: `outbox dead-letter list|replay|drop`, `outbox requeue` (a dry run in text and JSON,
//! a large run asks first) and `outbox release` of a dead host's claims.

use std::process::Command;

use outbox_host::store::Role;
use sqlx::PgPool;

use crate::{cli_error, outbox, outbox_as, pool_url, text, xlen};

#[sqlx::test(migrations = "../migrations")]
async fn cli_dead_letter_list_replay_and_drop(pool: PgPool) {
    let url = pool_url(&pool).await;
    let token = outbox_host::store::add_operator(&pool, "dl-admin", Role::Admin, "test")
        .await
        .unwrap();
    let prefix = format!("cli-test-{}:", std::process::id());
    let client = redis::Client::open(
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
    )
    .unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let dead = format!("{prefix}outbox.workflow.dead-letter");
    for event in ["41", "42"] {
        let _: String = redis::cmd("XADD")
            .arg(&dead)
            .arg("*")
            .arg("event_id")
            .arg(event)
            .arg("event_type")
            .arg("workflow.trigger.event")
            .arg("payload")
            .arg("{}")
            .arg("handler")
            .arg("workflow-trigger")
            .arg("handler_attempt")
            .arg("3")
            .arg("error")
            .arg("gave up after 3 attempts: boom")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_outbox"))
            .args(args)
            .env(
                "OUTBOX_CONFIG",
                concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
            )
            .env("OUTBOX_REDIS_PREFIX", &prefix)
            .env("DATABASE_URL", &url)
            .env("OUTBOX_OPERATOR_TOKEN", &token)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let out = run(&["dead-letter", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["selected"].as_array().unwrap().len(), 2);
    assert_eq!(
        listed["selected"][0]["error"],
        "gave up after 3 attempts: boom"
    );

    let out = run(&["dead-letter", "replay", "--event", "41", "--dry-run"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("dry run: 1 entries would be replayed"));
    let len: i64 = redis::cmd("XLEN")
        .arg(&dead)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 2, "dry run changes nothing");

    let out = run(&["dead-letter", "replay", "--event", "41"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let queued: Vec<redis::Value> = redis::cmd("XRANGE")
        .arg(format!("{prefix}outbox.workflow"))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(queued.len(), 1, "replayed onto the queue");
    let out = run(&["dead-letter", "drop", "--event", "42"]);
    assert!(out.status.success());
    let len: i64 = redis::cmd("XLEN")
        .arg(&dead)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0);
    let _: () = redis::cmd("DEL")
        .arg(&dead)
        .arg(format!("{prefix}outbox.workflow"))
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_dead_letter_drop_without_a_filter_needs_all_and_unknown_names_are_errors(
    pool: PgPool,
) {
    let url = pool_url(&pool).await;
    let token = outbox_host::store::add_operator(&pool, "dl-admin", Role::Admin, "test")
        .await
        .unwrap();
    let prefix = format!("cli-dl-all-{}:", std::process::id());
    let client = redis::Client::open(
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
    )
    .unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let dead = format!("{prefix}outbox.workflow.dead-letter");
    for event in ["51", "52"] {
        let _: String = redis::cmd("XADD")
            .arg(&dead)
            .arg("*")
            .arg("event_id")
            .arg(event)
            .arg("event_type")
            .arg("workflow.trigger.event")
            .arg("error")
            .arg("boom")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_outbox"))
            .args(args)
            .env(
                "OUTBOX_CONFIG",
                concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
            )
            .env("OUTBOX_REDIS_PREFIX", &prefix)
            .env("DATABASE_URL", &url)
            .env("OUTBOX_OPERATOR_TOKEN", &token)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let len = async |conn: &mut redis::aio::MultiplexedConnection| xlen(conn, &dead).await;

    let out = run(&["dead-letter", "drop"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("add --all to mean it"),
        "{}",
        cli_error(&out)
    );
    let out = run(&["dead-letter", "drop", "--all"]);
    assert!(!out.status.success(), "no terminal to ask on and no --yes");
    assert!(
        cli_error(&out).contains("--all would change 2 dead letters: add --yes"),
        "{}",
        cli_error(&out)
    );
    assert_eq!(len(&mut conn).await, 2, "nothing dropped");

    let out = run(&["dead-letter", "list", "--queue", "nope.nope"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("unknown queue \"nope.nope\"")
            && cli_error(&out).contains("outbox.workflow"),
        "{}",
        cli_error(&out)
    );
    let out = run(&["dead-letter", "drop", "--event", "99999"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("no dead letter matches event 99999"),
        "{}",
        cli_error(&out)
    );
    let out = run(&["run", "--queue-group", "nope"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("unknown queue group \"nope\": routes.toml has")
            && cli_error(&out).contains("general"),
        "{}",
        cli_error(&out)
    );

    let out = run(&["dead-letter", "drop", "--all", "--yes"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    assert_eq!(len(&mut conn).await, 0);
    let _: () = redis::cmd("DEL")
        .arg(&dead)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_requeue_dry_run_json_matches_the_text_and_a_large_run_asks_first(pool: PgPool) {
    let url = pool_url(&pool).await;
    let token = outbox_host::store::add_operator(&pool, "requeuer", Role::Admin, "test")
        .await
        .unwrap();
    let outbox = |url: &str, args: &[&str]| outbox_as(url, &token, args);
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, last_error)
         SELECT 'mail.welcome', '{}', CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'failed' END, 6,
                'smtp refused'
         FROM generate_series(1, 150) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let statuses = || async {
        sqlx::query_as::<_, (i64, String)>("SELECT id, status FROM outbox_event ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap()
    };
    let before = statuses().await;
    let args = ["requeue", "--type-prefix", "mail.", "--dry-run"];
    let (text_out, _) = text(&outbox(&url, &args));
    let json_out = outbox(&url, &[&args[..], &["--json"]].concat());
    assert!(json_out.status.success(), "{}", cli_error(&json_out));
    let json: serde_json::Value = serde_json::from_slice(&json_out.stdout).expect("JSON");
    assert_eq!(statuses().await, before, "a dry run changes nothing");
    assert_eq!(json["action"], "requeue");
    assert_eq!(json["dry_run"], true);
    assert_eq!(json["planned"], 135);
    assert_eq!(json["changed"], 0);
    assert_eq!(json["skipped"]["pending"], 15);
    assert!(
        text_out
            .starts_with("requeue (dry run, nothing changes): 135 rows to pending: ids 1, 2, 3,"),
        "{text_out}"
    );
    assert!(
        text_out.contains("skipped 15 pending rows: it is waiting to be dispatched already"),
        "{text_out}"
    );

    // 135 rows is above the default confirmation threshold (100): without a terminal to ask on
    // and without --yes, the run is refused and changes nothing.
    let refused = outbox(&url, &["requeue", "--type-prefix", "mail."]);
    assert!(!refused.status.success());
    assert!(
        cli_error(&refused)
            .contains("would change 135 rows, more than --confirm-above 100: add --yes"),
        "{}",
        cli_error(&refused)
    );
    assert_eq!(statuses().await, before);

    let ran = outbox(
        &url,
        &["requeue", "--type-prefix", "mail.", "--yes", "--json"],
    );
    assert!(ran.status.success(), "{}", cli_error(&ran));
    let ran: serde_json::Value = serde_json::from_slice(&ran.stdout).expect("JSON");
    assert_eq!(ran["changed"], 135);
    assert_eq!(
        ran["ids"], json["ids"],
        "the run changed exactly the rows the dry run listed"
    );
    let changed: Vec<serde_json::Value> = statuses()
        .await
        .into_iter()
        .zip(&before)
        .filter(|(after, before)| after != *before)
        .map(|(after, _)| serde_json::json!(after.0))
        .collect();
    assert_eq!(serde_json::Value::Array(changed), json["ids"]);
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_release_gives_back_a_dead_hosts_claims_and_stats_flags_it(pool: PgPool) {
    let url = pool_url(&pool).await;
    let out = outbox(&url, &["operator", "add", "ada", "--role", "admin"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let admin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    sqlx::query(
        "INSERT INTO outbox_worker (id, host_name, version, last_seen)
         VALUES ('dead-host', 'h', '0', now() - interval '5 minutes'), ('busy-host', 'h', '0', now())",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, claimed_by, claimed_at, claim_expires_at, available_at)
         SELECT 'mail.welcome', '{}', 'processing', 1, CASE WHEN g <= 3 THEN 'dead-host' ELSE 'busy-host' END,
                now(), now() + interval '5 minutes', now() + interval '5 minutes'
         FROM generate_series(1, 5) g",
    )
    .execute(&pool)
    .await
    .unwrap();

    // stats names the stale host and its held claims.
    let out = outbox_as(&url, &admin, &["stats"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("host dead-host is silent for") && stderr.contains("still holds 3 claims"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(stale)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Unknown hosts and live ones are refused; a dead one's claims come back, audited.
    let out = outbox_as(&url, &admin, &["release", "--worker", "nope"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("no host \"nope\""),
        "{}",
        cli_error(&out)
    );
    let out = outbox_as(&url, &admin, &["release", "--worker", "busy-host"]);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("may still be working"),
        "{}",
        cli_error(&out)
    );
    let out = outbox_as(&url, &admin, &["release", "--worker", "dead-host"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("release: 3 claims of host dead-host"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let states: Vec<(String, i32, Option<String>)> =
        sqlx::query_as("SELECT status, attempts, claimed_by FROM outbox_event ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        states
            .iter()
            .map(|s| (s.0.as_str(), s.1))
            .collect::<Vec<_>>(),
        vec![
            ("pending", 0),
            ("pending", 0),
            ("pending", 0),
            ("processing", 1),
            ("processing", 1)
        ]
    );
    let audit: (String, String, i64) = sqlx::query_as(
        "SELECT operator, command, rows_affected FROM outbox_audit ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(audit, ("ada".into(), "release".into(), 3));
}
