//! `outbox publish`: bad input is refused with the same message as the Rust and SQL producers
//! and writes nothing; a used dispatch key, a delay, a version and a tenant behave as documented;
//! an event no route matches is published with a warning.

use std::process::Command;

use sqlx::PgPool;

use crate::{cli_error, count, database_url, outbox, pool_url, text};

#[sqlx::test(migrations = "../migrations")]
async fn cli_bad_input_is_rejected_with_a_clear_error_and_writes_nothing(pool: PgPool) {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let url = database_url(&db);
    let cases: &[(&[&str], &str)] = &[
        (
            &["publish", "Mail", "--payload", "{}"],
            "invalid event type \"Mail\"",
        ),
        (
            &["publish", "mail.welcome", "--payload", "[1, 2]"],
            "must be a JSON object, got an array",
        ),
        (
            &["publish", "mail.welcome", "--payload", "{not json"],
            "--payload is not valid JSON",
        ),
        (
            &[
                "publish",
                "mail.welcome",
                "--payload",
                "{}",
                "--colour",
                "red",
            ],
            "unexpected argument '--colour'",
        ),
        (&["publish", "mail.welcome"], "--payload <PAYLOAD>"),
    ];
    for (args, expected) in cases {
        let out = outbox(&url, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(
            stderr.contains(expected),
            "{args:?}: expected {expected:?} in:\n{stderr}"
        );
    }
    let big = format!("{{\"blob\": \"{}\"}}", "x".repeat(300 * 1024));
    let file = std::env::temp_dir().join(format!("outbox-cli-{db}.json"));
    std::fs::write(&file, big).unwrap();
    let out = outbox(
        &url,
        &[
            "publish",
            "mail.welcome",
            "--payload",
            &format!("@{}", file.display()),
        ],
    );
    std::fs::remove_file(&file).ok();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("over the limit of 262144 bytes"));
    assert_eq!(count(&pool).await, 0, "nothing written");

    let out = outbox(
        &url,
        &[
            "publish",
            "mail.welcome",
            "--payload",
            "{\"to\": \"a@b.c\"}",
            "--tenant",
            "t1",
            "--dispatch-key",
            "k1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let again = outbox(
        &url,
        &[
            "publish",
            "mail.welcome",
            "--payload",
            "{\"to\": \"a@b.c\"}",
            "--tenant",
            "t1",
            "--dispatch-key",
            "k1",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        id.to_string()
    );
    assert_eq!(count(&pool).await, 1);
}

#[sqlx::test(migrations = "../migrations")]
async fn rust_sql_and_cli_reject_the_same_producer_input_with_the_same_message(pool: PgPool) {
    let url = pool_url(&pool).await;
    let long = "k".repeat(513);
    let key_rule = "must be 1 to 512 bytes of printable ASCII without spaces";
    let reserved = "a prefix reserved for the host's own events";
    // (dispatch key, ordering key, what the message says)
    let cases: &[(Option<&str>, Option<&str>, String)] = &[
        (
            Some(""),
            None,
            format!("dispatch_key of mail.welcome {key_rule}"),
        ),
        (
            Some("two words"),
            None,
            format!("dispatch_key of mail.welcome {key_rule}"),
        ),
        (
            Some("tab\tkey"),
            None,
            format!("dispatch_key of mail.welcome {key_rule}"),
        ),
        (
            Some("clé"),
            None,
            format!("dispatch_key of mail.welcome {key_rule}"),
        ),
        (
            Some(&long),
            None,
            format!("dispatch_key of mail.welcome {key_rule}"),
        ),
        (
            None,
            Some(""),
            format!("ordering_key of mail.welcome {key_rule}"),
        ),
        (
            None,
            Some("user 7"),
            format!("ordering_key of mail.welcome {key_rule}"),
        ),
        (
            None,
            Some(&long),
            format!("ordering_key of mail.welcome {key_rule}"),
        ),
        (
            Some("child:1:audit-log:0"),
            None,
            format!("dispatch_key of mail.welcome starts with child:, {reserved}"),
        ),
        (
            Some("denied:1:h:kv:k"),
            None,
            format!("dispatch_key of mail.welcome starts with denied:, {reserved}"),
        ),
    ];
    for (dispatch_key, ordering_key, expected) in cases {
        let mut event = outbox_host::NewEvent::new("mail.welcome", serde_json::json!({}));
        event.dispatch_key = dispatch_key.map(str::to_string);
        event.ordering_key = ordering_key.map(str::to_string);
        let mut tx = pool.begin().await.unwrap();
        let rust = outbox_host::publish(&mut tx, event)
            .await
            .unwrap_err()
            .to_string();
        tx.rollback().await.unwrap();
        let sql = match sqlx::query(
            "SELECT outbox_publish('mail.welcome', '{}'::jsonb, NULL, $1, '{}'::jsonb, $2)",
        )
        .bind(dispatch_key)
        .bind(ordering_key)
        .execute(&pool)
        .await
        {
            Err(sqlx::Error::Database(e)) => e.message().to_string(),
            other => panic!("{dispatch_key:?} {ordering_key:?}: SQL gave {other:?}"),
        };
        let mut args = vec!["publish", "mail.welcome", "--payload", "{}"];
        if let Some(k) = dispatch_key {
            args.extend(["--dispatch-key", k]);
        }
        if let Some(k) = ordering_key {
            args.extend(["--ordering-key", k]);
        }
        let out = outbox(&url, &args);
        assert!(!out.status.success(), "{args:?} must fail");
        assert_eq!(
            (rust.as_str(), sql.as_str(), cli_error(&out).as_str()),
            (
                expected.as_str(),
                format!("outbox_publish: {expected}").as_str(),
                expected.as_str()
            ),
            "{dispatch_key:?} {ordering_key:?}"
        );
    }
    assert_eq!(count(&pool).await, 0, "nothing written");
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_publish_of_a_different_event_under_a_used_dispatch_key_fails(pool: PgPool) {
    let url = pool_url(&pool).await;
    let publish = |payload: &str| {
        outbox(
            &url,
            &[
                "publish",
                "mail.welcome",
                "--payload",
                payload,
                "--dispatch-key",
                "k1",
            ],
        )
    };
    let first = publish("{\"n\": 1}");
    assert!(first.status.success(), "{}", cli_error(&first));
    let id = String::from_utf8_lossy(&first.stdout).trim().to_string();
    let other = publish("{\"n\": 2}");
    assert_eq!(other.status.code(), Some(1));
    assert_eq!(
        cli_error(&other),
        format!("dispatch_key k1 already names event {id} with a different payload")
    );
    assert_eq!(count(&pool).await, 1);
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_publish_sets_delay_and_version_says_whether_it_inserted_and_refuses_an_empty_tenant(
    pool: PgPool,
) {
    let url = pool_url(&pool).await;
    let publish = |extra: &[&str]| {
        let mut args = vec!["publish", "mail.welcome", "--payload", "{\"to\":\"a@b.c\"}"];
        args.extend_from_slice(extra);
        outbox(&url, &args)
    };
    let out = publish(&[
        "--dispatch-key",
        "welcome:1",
        "--delay",
        "3600",
        "--event-version",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let first: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(first["inserted"], true);
    assert_eq!(first["dispatch_key"], "welcome:1");
    let (version, delayed): (i32, bool) = sqlx::query_as(
        "SELECT event_version, available_at > now() + interval '3500 seconds' FROM outbox_event WHERE id = $1",
    )
    .bind(first["id"].as_i64().unwrap())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((version, delayed), (2, true));

    let again = publish(&["--dispatch-key", "welcome:1", "--json"]);
    assert!(again.status.success(), "{}", cli_error(&again));
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        (again["id"].clone(), again["inserted"].clone()),
        (first["id"].clone(), false.into())
    );
    let text = publish(&["--dispatch-key", "welcome:1"]);
    assert!(String::from_utf8_lossy(&text.stderr)
        .contains("already existed under dispatch key welcome:1"));

    let at = publish(&["--available-at", "2030-01-01T00:00:00Z"]);
    assert!(at.status.success(), "{}", cli_error(&at));

    // An empty tenant is refused the same way by the CLI, the Rust API and the SQL function.
    let rule = "tenant_id of mail.welcome must not be empty (leave it out for no tenant)";
    let cli = publish(&["--tenant", ""]);
    assert!(!cli.status.success());
    assert!(cli_error(&cli).contains(rule), "{}", cli_error(&cli));
    let mut tx = pool.begin().await.unwrap();
    let rust = outbox_host::publish(
        &mut tx,
        outbox_host::NewEvent::new("mail.welcome", serde_json::json!({})).with_tenant(""),
    )
    .await
    .unwrap_err();
    assert!(rust.to_string().contains(rule), "{rust}");
    drop(tx);
    let sql = sqlx::query("SELECT outbox_publish('mail.welcome', '{}'::jsonb, '')")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(sql.to_string().contains(rule), "{sql}");
    assert_eq!(
        count(&pool).await,
        2,
        "nothing written by the refused calls"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_publish_warns_when_no_route_matches_and_routes_check_warns_about_ungrouped_handler_queues(
    pool: PgPool,
) {
    let url = pool_url(&pool).await;
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.toml");
    std::fs::write(
        &routes,
        "[routes]\n\"mail.\" = \"outbox.mail\"\n\"audit.\" = \"outbox.audit\"\n\n[router]\nplugin = \"native\"\n\n\
         [handlers]\n\"outbox.mail\" = \"echo\"\n\"outbox.audit\" = \"echo\"\n\n\
         [queue_groups]\ngeneral = [\"outbox.mail\"]\n\n[policy]\nplugin = \"deny-all\"\n\n[plugins.echo]\nfile = \"test/echo-handler.wasm\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_outbox"))
            .args(args)
            .env("DATABASE_URL", &url)
            .env("OUTBOX_CONFIG", &routes)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let out = run(&["publish", "nowhere.at-all", "--payload", "{}"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("warning: no route matches nowhere.at-all: the event will be stored, then fail at dispatch"),
        "{stderr}"
    );
    let out = run(&["publish", "mail.welcome", "--payload", "{}"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    assert!(!text(&out).1.contains("warning"), "{}", text(&out).1);

    let out = run(&["routes", "check"]);
    assert!(out.status.success(), "{}", cli_error(&out));
    let (_, stderr) = text(&out);
    assert!(
        stderr
            .contains("warning: outbox.audit is bound to handler echo but no queue group lists it")
            && !stderr.contains("outbox.mail is bound"),
        "{stderr}"
    );
}
