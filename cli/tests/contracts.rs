//! `outbox contracts` and contract checks on `outbox publish`: readable errors, exit codes a
//! producer's CI can use, and nothing written for a payload that breaks its contract.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]
// A test crate: a failed unwrap is a failed test, with the reason in the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use sqlx::PgPool;

/// Run `outbox` with `routes.toml` (and so `contracts/`) in `dir`.
fn outbox_in(dir: &Path, db_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("OUTBOX_CONFIG", dir.join("routes.toml"))
        .env_remove("OUTBOX_CONTRACTS_DIR")
        .env_remove("OUTBOX_CONTRACTS_MODE")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn pool_url(pool: &PgPool) -> String {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    outbox_host::store::with_database(&base, &db)
}

const ROUTES: &str = "[routes]\n\"mail.\" = \"outbox.mail\"\n[router]\nplugin = \"native\"\n";

const WELCOME_V1: &str = r#"
event_type = "mail.welcome"
owner = "growth"
description = "A user confirmed their address."

[versions.1.schema]
type = "object"
required = ["user_id"]
properties = { user_id = { type = "integer" }, email = { type = "string" } }
"#;

fn project(mode: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("routes.toml"),
        format!("[settings]\ncontracts_mode = \"{mode}\"\n{ROUTES}"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("contracts")).unwrap();
    std::fs::write(dir.path().join("contracts/mail.welcome.toml"), WELCOME_V1).unwrap();
    dir
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_publish_checks_the_contract_before_writing(pool: PgPool) {
    let url = pool_url(&pool).await;
    let dir = project("strict");
    let out = outbox_in(
        dir.path(),
        &url,
        &[
            "publish",
            "mail.welcome",
            "--payload",
            r#"{"user_id": "7"}"#,
        ],
    );
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("mail.welcome v1 breaks its contract: payload.user_id: expected integer, got string (rule: type)"),
        "{err}"
    );
    let out = outbox_in(
        dir.path(),
        &url,
        &["publish", "mail.other", "--payload", "{}"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("mail.other has no contract"),
        "{:?}",
        text(&out)
    );
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(written, 0, "nothing written for refused events");
    let out = outbox_in(
        dir.path(),
        &url,
        &["publish", "mail.welcome", "--payload", r#"{"user_id": 7}"#],
    );
    assert!(out.status.success(), "{:?}", text(&out));
}

#[test]
fn cli_contracts_list_show_and_check() {
    let dir = project("permissive");
    let url = "postgres://unused@127.0.0.1:1/none";
    let out = outbox_in(dir.path(), url, &["contracts", "list", "--json"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["contracts"][0]["event_type"], "mail.welcome");
    assert_eq!(listed["contracts"][0]["owner"], "growth");
    let out = outbox_in(dir.path(), url, &["contracts", "show", "mail.welcome"]);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("owner:       growth") && stdout.contains("\"user_id\""),
        "{stdout}"
    );
    let out = outbox_in(dir.path(), url, &["contracts", "check"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("ok (1 event types, 1 versions)"));
    // A broken file: exit 1, naming the file and the field.
    std::fs::write(
        dir.path().join("contracts/mail.reset.toml"),
        "event_type = \"mail.reset\"\nowner = \"growth\"\ndescription = \"d\"\n[versions.1]\nschema = { type = 5 }\n",
    )
    .unwrap();
    let out = outbox_in(dir.path(), url, &["contracts", "check"]);
    assert_eq!(out.status.code(), Some(1));
    let (_, err) = text(&out);
    assert!(err.contains("mail.reset.toml: versions.1.schema"), "{err}");
}

/// (old schema, new schema, exit code, words the output must hold)
const DIFF_CASES: &[(&str, &str, i32, &str)] = &[
    (
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
        0,
        "identical",
    ),
    (
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
        r#"{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}"#,
        0,
        "compatible",
    ),
    (
        r#"{"type": "object", "properties": {"a": {"type": "integer"}}}"#,
        r#"{"type": "object", "properties": {"a": {"type": "number"}}}"#,
        0,
        "compatible",
    ),
    (
        r#"{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}"#,
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
        1,
        "payload.b",
    ),
    (
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
        r#"{"type": "object", "properties": {"a": {"type": "integer"}}}"#,
        1,
        "payload.a",
    ),
    (
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
        r#"{"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}}"#,
        1,
        "required",
    ),
];

#[test]
fn cli_contracts_diff_exit_codes_follow_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old.json"), dir.path().join("new.json"));
    let url = "postgres://unused@127.0.0.1:1/none";
    for (before, after, code, words) in DIFF_CASES {
        std::fs::write(&old, before).unwrap();
        std::fs::write(&new, after).unwrap();
        let out = outbox_in(
            dir.path(),
            url,
            &[
                "contracts",
                "diff",
                old.to_str().unwrap(),
                new.to_str().unwrap(),
            ],
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{before} -> {after}: {stdout}{stderr}"
        );
        assert!(stdout.contains(words), "{before} -> {after}: {stdout}");
    }
    // Contract files: a new version may break, a version changed in place may not.
    let v2 = format!(
        "{WELCOME_V1}\n[versions.2.schema]\ntype = \"object\"\nrequired = [\"account\"]\nproperties = {{ account = {{ type = \"string\" }} }}\n"
    );
    let (old, new) = (
        dir.path().join("old.toml"),
        dir.path().join("mail.welcome.toml"),
    );
    std::fs::write(&old, WELCOME_V1).unwrap();
    std::fs::write(&new, &v2).unwrap();
    let out = outbox_in(
        dir.path(),
        url,
        &[
            "contracts",
            "diff",
            old.to_str().unwrap(),
            new.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert!(text(&out).0.contains("v2: added"), "{:?}", text(&out));
    let out = outbox_in(
        dir.path(),
        url,
        &[
            "contracts",
            "diff",
            new.to_str().unwrap(),
            old.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "removing a version breaks");
    let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(diff["verdict"], "breaking");
    assert_eq!(diff["versions"][0]["change"], "removed");
    // An unreadable file: exit 2.
    let out = outbox_in(
        dir.path(),
        url,
        &[
            "contracts",
            "diff",
            "/nonexistent.json",
            new.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
}
