//! The `outbox` binary: bad input gives a clear error, a non-zero exit and writes nothing.

use std::process::{Command, Output};

use sqlx::PgPool;

fn database_url(db: &str) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    outbox_host::ops::with_database(&base, db)
}

fn outbox(db_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env(
            "OUTBOX_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        )
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox")
}

async fn count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(pool)
        .await
        .unwrap()
}

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
    let out = outbox(&url, &["publish", "mail.welcome", "--payload", &format!("@{}", file.display())]);
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
            "{}",
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

#[test]
fn cli_routes_which_explains_the_rule() {
    let out = outbox(
        "postgres://unused",
        &["routes", "which", "tenant.subscription.created"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "tenant.subscription.created -> outbox.notification (rule \"tenant.subscription.\")"
    );
    let out = outbox(
        "postgres://unused",
        &[
            "routes",
            "check",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
