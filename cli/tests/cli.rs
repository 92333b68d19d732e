//! The `outbox` binary: bad input gives a clear error, a non-zero exit and writes nothing.

// A test crate: a failed unwrap is a failed test, with the reason in the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use outbox_host::store::Role;
use sqlx::PgPool;

mod cli {
    mod demo;
    mod host_process;
    mod otlp;
    mod plugins_call;
    mod queues;
}

fn database_url(db: &str) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    outbox_host::store::with_database(&base, db)
}

/// The URL of the database `pool` (a `sqlx::test` database) connects to.
async fn pool_url(pool: &PgPool) -> String {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    database_url(&db)
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

/// [`outbox`] as the operator holding `token`.
fn outbox_as(db_url: &str, token: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env(
            "OUTBOX_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        )
        .env("OUTBOX_OPERATOR_TOKEN", token)
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

/// The CLI's error line without its `error: ` lead.
fn cli_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().last().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
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
    // The shipped routes.toml routes through prefix-router, found in plugins/dist beside it
    // whatever the working directory.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "tenant.subscription.created -> outbox.notification (router plugin \"prefix-router\")"
    );
    // A handler-bound destination names its handler and the queue groups that run it.
    let out = outbox(
        "postgres://unused",
        &["routes", "which", "workflow.trigger.event"],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().nth(1),
        Some("  outbox.workflow: handler workflow-trigger, queue groups general"),
        "{stdout}"
    );
    let out = outbox(
        "postgres://unused",
        &["routes", "which", "workflow.trigger.event", "--json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["consumers"],
        serde_json::json!([{"queue": "outbox.workflow", "sink": "streams", "handler": "workflow-trigger", "queue_groups": ["general"]}])
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

fn repo_path(rel: &str) -> String {
    format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_plugins_check_names_the_world_and_rejects_garbage() {
    let file = repo_path("plugins/dist/prefix-router.wasm");
    let out = outbox("postgres://unused", &["plugins", "check", &file]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(": ok (world router, outbox:plugin@0.2.0, sha256 "),
        "{stdout}"
    );
    // A plugin built against the previous contract still checks, and says which one it uses.
    let legacy = repo_path("plugins/dist/test/legacy-router.wasm");
    let out = outbox("postgres://unused", &["plugins", "check", &legacy]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(": ok (world router, outbox:plugin@0.1.0, sha256 "),
        "{stdout}"
    );

    let junk = std::env::temp_dir().join(format!("outbox-cli-junk-{}.wasm", std::process::id()));
    std::fs::write(&junk, b"this is not WebAssembly").unwrap();
    let out = outbox(
        "postgres://unused",
        &["plugins", "check", junk.to_str().unwrap()],
    );
    std::fs::remove_file(&junk).ok();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("not a WebAssembly file"),
        "expected a clear message in:\n{stderr}"
    );
}

#[test]
fn cli_plugins_call_routes_events_offline_and_reports_traps() {
    let events = r#"[
        {"event_type": "mail.welcome", "payload": {"to": "a@b.c"}},
        {"event_type": "tenant.subscription.created", "tenant_id": "t1"},
        {"event_type": "nope.x"}
    ]"#;
    let out = outbox(
        "postgres://unused",
        &[
            "plugins",
            "call",
            &repo_path("plugins/dist/prefix-router.wasm"),
            "--events",
            events,
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("mail.welcome -> outbox.mail"), "{stdout}");
    assert!(
        stdout.contains("tenant.subscription.created -> outbox.notification"),
        "{stdout}"
    );
    assert!(stdout.contains("nope.x: no route ("), "{stdout}");
    assert!(stdout.contains("cost: compile "), "{stdout}");

    let out = outbox(
        "postgres://unused",
        &[
            "plugins",
            "call",
            &repo_path("plugins/dist/test/trap.wasm"),
            "--events",
            r#"[{"event_type": "mail.welcome"}]"#,
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "a trap must fail: {stdout}");
    assert!(
        stderr.contains("plugin trap: trapped"),
        "expected a readable trap in:\n{stderr}"
    );
    assert!(!stderr.contains("panicked at host/"), "{stderr}");
}

/// Run `outbox` with `args` and `RUST_LOG=rust_log`, killing it after `limit`: `None` when it
/// did not finish in time. Its output goes to files (a full pipe would stall it).
fn outbox_within(args: &[&str], rust_log: &str, limit: std::time::Duration) -> Option<Output> {
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("outbox-cli-within-{}-{run}", std::process::id()));
    let (out_path, err_path) = (base.with_extension("stdout"), base.with_extension("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", "postgres://unused")
        .env(
            "OUTBOX_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        )
        .env("RUST_LOG", rust_log)
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("run outbox");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: std::fs::read(&err_path).unwrap(),
    };
    std::fs::remove_file(&out_path).ok();
    std::fs::remove_file(&err_path).ok();
    Some(output)
}

#[test]
fn cli_plugins_call_cuts_a_sleeping_plugin_at_its_time_limit() {
    // Not declared in routes.toml: the default limit of 2000 ms applies. Before: the call slept
    // for u64::MAX ns (the limit was only checked while computing).
    let started = std::time::Instant::now();
    let out = outbox_within(
        &[
            "plugins",
            "call",
            &repo_path("plugins/dist/test/sleep-forever.wasm"),
            "--events",
            r#"[{"event_type": "mail.welcome"}]"#,
        ],
        "warn",
        std::time::Duration::from_secs(30),
    )
    .expect("outbox plugins call waited on a sleeping plugin");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("plugin sleep-forever: exceeded its time limit of 2000 ms"),
        "{stderr}"
    );
}

#[test]
fn cli_plugin_log_lines_are_escaped_and_bounded_per_call() {
    let out = outbox_within(
        &[
            "plugins",
            "call",
            &repo_path("plugins/dist/test/log-flood.wasm"),
            "--events",
            r#"[{"event_type": "mail.welcome"}]"#,
        ],
        "info",
        std::time::Duration::from_secs(60),
    )
    .expect("outbox plugins call finished");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("mail.welcome -> outbox.audit"), "{stdout}");
    // The forged line stays inside the plugin's own line, escaped.
    assert!(
        stderr.contains(
            r"ok\n2026-01-01T00:00:00Z  INFO outbox::audit: capability allowed\r\u{1b}[2Jforged"
        ),
        "{stderr}"
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("2026-01-01T00:00:00Z")),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "raw escape sequence in the log");
    // 10 000 lines of 4 KiB asked; the per-call budget (64 KiB) keeps 15, then one line says so.
    let flood = stderr.lines().filter(|l| l.contains(" flood ")).count();
    assert_eq!(flood, 15, "flood lines kept");
    assert_eq!(
        stderr.matches("log budget exceeded").count(),
        1,
        "{}",
        stderr.lines().last().unwrap_or_default()
    );
    assert!(
        stderr.contains("9985 messages of this call dropped"),
        "{}",
        stderr.lines().last().unwrap_or_default()
    );
}

#[test]
fn cli_plugins_new_scaffolds_a_crate_and_refuses_to_overwrite() {
    let parent = std::env::temp_dir().join(format!(
        "outbox-cli-new-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let dir = parent.to_str().unwrap();
    let args = [
        "plugins",
        "new",
        "demo-router",
        "--world",
        "router",
        "--dir",
        dir,
    ];
    let out = outbox("postgres://unused", &args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("cargo build --release --target wasm32-wasip2"),
        "{stdout}"
    );
    let cargo_toml = std::fs::read_to_string(parent.join("demo-router/Cargo.toml")).unwrap();
    let lib_rs = std::fs::read_to_string(parent.join("demo-router/src/lib.rs")).unwrap();
    assert!(!cargo_toml.contains("{{"), "{cargo_toml}");
    assert!(!lib_rs.contains("{{"), "{lib_rs}");
    assert!(
        cargo_toml.contains("name = \"demo-router\""),
        "{cargo_toml}"
    );
    assert!(lib_rs.contains("export_router!"), "{lib_rs}");
    // The SDK path is absolute and points at a plugin SDK (the one of the tree the binary was
    // built from).
    let sdk = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("outbox-plugin-sdk = { path = \""))
        .and_then(|rest| rest.split('"').next())
        .expect("an outbox-plugin-sdk path dependency");
    let sdk = std::path::Path::new(sdk);
    assert!(
        sdk.is_absolute() && sdk.ends_with("plugin-sdk"),
        "{cargo_toml}"
    );
    assert!(sdk.join("Cargo.toml").is_file(), "{cargo_toml}");

    let again = outbox("postgres://unused", &args);
    assert!(!again.status.success());
    assert!(text(&again).1.contains("already exists"));
    let bad = outbox(
        "postgres://unused",
        &[
            "plugins", "new", "Bad_Name", "--world", "router", "--dir", dir,
        ],
    );
    assert!(!bad.status.success());
    assert!(text(&bad).1.contains("invalid plugin name"));
    std::fs::remove_dir_all(&parent).ok();
}

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

/// A routes file whose `[router.overrides]` sends `special.` through a second instance of the
/// prefix-router plugin configured to pick `outbox.webhook`, where the native table says
/// `outbox.audit`; `legacy.` stays on the native table; everything else goes through the default
/// router plugin.
const OVERRIDE_ROUTES: &str = r#"
[routes]
"mail." = "outbox.mail"
"special." = "outbox.audit"
"legacy." = "outbox.audit"

[router]
plugin = "prefix-router"

[router.overrides]
"special." = "special-router"
"legacy." = "native"

[policy]
plugin = "deny-all"

[plugins.prefix-router]

[plugins.special-router]
file = "prefix-router.wasm"
config = { routes = { "special." = "outbox.webhook" } }
"#;

/// `outbox` with `routes` as its config file, plugins from `plugins/dist` and its own Redis prefix.
fn outbox_with_routes(
    db_url: &str,
    routes: &std::path::Path,
    prefix: &str,
    args: &[&str],
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("OUTBOX_CONFIG", routes)
        .env("OUTBOX_PLUGIN_DIR", repo_path("plugins/dist"))
        .env("OUTBOX_REDIS_PREFIX", prefix)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox")
}

fn write_override_routes(name: &str) -> std::path::PathBuf {
    let file = std::env::temp_dir().join(format!(
        "outbox-cli-{name}-{}-routes.toml",
        std::process::id()
    ));
    std::fs::write(&file, OVERRIDE_ROUTES).unwrap();
    file
}

#[test]
fn cli_routes_which_names_the_router_plugin_that_decides() {
    let routes = write_override_routes("which");
    let which = |event_type: &str| {
        let out = outbox_with_routes(
            "postgres://unused",
            &routes,
            "unused:",
            &["routes", "which", event_type],
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        stdout.trim().to_string()
    };
    assert_eq!(
        which("special.created"),
        "special.created -> outbox.webhook (router plugin \"special-router\")"
    );
    assert_eq!(
        which("mail.welcome"),
        "mail.welcome -> outbox.mail (router plugin \"prefix-router\")"
    );
    assert_eq!(
        which("legacy.thing"),
        "legacy.thing -> outbox.audit (rule \"legacy.\")"
    );
    let nope = which("nope.x");
    assert!(
        nope.starts_with("nope.x: no route") && nope.ends_with("(router plugin \"prefix-router\")"),
        "{nope}"
    );

    // `--json` carries the same answer as the text line, field by field.
    let which_json = |event_type: &str| {
        let out = outbox_with_routes(
            "postgres://unused",
            &routes,
            "unused:",
            &["routes", "which", event_type, "--json"],
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        serde_json::from_str::<serde_json::Value>(stdout.trim()).unwrap()
    };
    assert_eq!(
        which_json("special.created"),
        serde_json::json!({
            "event_type": "special.created",
            "queues": ["outbox.webhook"],
            "decided_by": "router",
            "decider": "special-router",
            "no_route": null,
            "error": null,
            "consumers": [{"queue": "outbox.webhook", "sink": "streams", "handler": null, "queue_groups": []}],
        })
    );
    assert_eq!(
        which_json("legacy.thing"),
        serde_json::json!({
            "event_type": "legacy.thing",
            "queues": ["outbox.audit"],
            "decided_by": "rule",
            "decider": "legacy.",
            "no_route": null,
            "error": null,
            "consumers": [{"queue": "outbox.audit", "sink": "streams", "handler": null, "queue_groups": []}],
        })
    );
    let nope_json = which_json("nope.x");
    assert_eq!(nope_json["queues"], serde_json::json!([]));
    assert_eq!(nope_json["decided_by"], "router");
    let reason = nope_json["no_route"].as_str().unwrap();
    assert!(nope.contains(reason), "{nope} / {reason}");
    std::fs::remove_file(&routes).ok();
}

#[test]
fn a_host_started_from_another_working_directory_loads_plugins_beside_its_routes_file() {
    // A deployment folder: routes.toml and plugins/dist/ beside it; the host runs from elsewhere.
    let deploy = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(deploy.path().join("plugins/dist")).unwrap();
    std::fs::copy(
        repo_path("plugins/dist/prefix-router.wasm"),
        deploy.path().join("plugins/dist/prefix-router.wasm"),
    )
    .unwrap();
    let routes = deploy.path().join("routes.toml");
    std::fs::write(
        &routes,
        "[routes]\n\"mail.\" = \"outbox.mail\"\n[router]\nplugin = \"prefix-router\"\n[policy]\nplugin = \"deny-all\"\n[plugins.prefix-router]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["routes", "which", "mail.welcome"])
        .current_dir(elsewhere.path())
        .env("OUTBOX_CONFIG", &routes)
        .env_remove("OUTBOX_PLUGIN_DIR")
        .env("RUST_LOG", "info")
        .output()
        .expect("run outbox");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.trim(),
        "mail.welcome -> outbox.mail (router plugin \"prefix-router\")",
        "{stderr}"
    );
    let dist = std::fs::canonicalize(deploy.path().join("plugins/dist")).unwrap();
    assert!(
        stderr.contains("plugins load from") && stderr.contains(&dist.display().to_string()),
        "the host says where plugins load from:\n{stderr}"
    );
}

async fn xlen(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("XLEN").arg(key).query_async(conn).await.unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_drain_routes_through_the_configured_override_plugin(pool: PgPool) {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let url = database_url(&db);
    let routes = write_override_routes(&db);
    // sqlx names test databases after the test, so the name repeats from run to run: the Redis
    // prefix must not, or enqueue markers left by an earlier run would hide this run's entries.
    let prefix = format!(
        "cli-drain-{db}-{}-{}:",
        std::process::id(),
        chrono::Utc::now().timestamp_micros()
    );
    let run = |args: &[&str]| {
        let out = outbox_with_routes(&url, &routes, &prefix, args);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}: {stderr}");
        stdout
    };
    run(&["publish", "special.created", "--payload", "{}"]);
    run(&["publish", "mail.welcome", "--payload", "{}"]);
    let drained = run(&["drain"]);
    assert!(drained.contains("drained: 2 claimed, 2 done"), "{drained}");
    std::fs::remove_file(&routes).ok();

    let client = redis::Client::open(
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
    )
    .unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    assert_eq!(
        xlen(&mut conn, &format!("{prefix}outbox.webhook")).await,
        1,
        "the override plugin decided"
    );
    assert_eq!(
        xlen(&mut conn, &format!("{prefix}outbox.audit")).await,
        0,
        "not the native table"
    );
    assert_eq!(xlen(&mut conn, &format!("{prefix}outbox.mail")).await, 1);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// A reader that went away (`outbox routes which T | head -0`) ends the command quietly: here
/// the pipe's read end is closed before the command writes its first line, so the write fails
/// with a broken pipe every time. It used to panic ("failed printing to stdout: Broken pipe").
#[test]
fn cli_output_into_a_closed_pipe_exits_quietly_without_a_panic() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["routes", "which", "tenant.subscription.created"])
        .env("DATABASE_URL", "postgres://unused")
        .env(
            "OUTBOX_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        )
        .env("RUST_LOG", "warn")
        .stdout(writer)
        .output()
        .expect("run outbox");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
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
async fn cli_commands_that_do_not_route_go_on_with_a_broken_routes_file(pool: PgPool) {
    let url = pool_url(&pool).await;
    let token = outbox_host::store::add_operator(&pool, "broken-cfg", Role::Admin, "test")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("routes.toml");
    std::fs::write(&broken, "[routes\n\"mail.\" = ").unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_outbox"))
            .args(args)
            .env("DATABASE_URL", &url)
            .env("OUTBOX_CONFIG", &broken)
            .env("OUTBOX_OPERATOR_TOKEN", &token)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    for args in [
        &["publish", "mail.welcome", "--payload", "{\"to\":\"a@b.c\"}"][..],
        &["stats", "--json"],
        &["config"],
        &["dead-letter", "list", "--queue", "outbox.mail", "--json"],
        &["requeue", "--status", "failed", "--dry-run"],
    ] {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", cli_error(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("warning:")
                && stderr.contains("going on with settings from the environment"),
            "{args:?} warns about the broken file: {stderr}"
        );
    }
    assert_eq!(count(&pool).await, 1, "the publish went through");
    // Commands that route still refuse a broken file.
    let out = run(&["routes", "which", "mail.welcome"]);
    assert!(!out.status.success());
    let out = run(&["dead-letter", "list"]);
    assert!(
        cli_error(&out).contains("no handler-bound queue is known"),
        "{}",
        cli_error(&out)
    );
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

#[test]
fn routes_check_warns_about_handlers_whose_children_come_back_to_their_queue() {
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.toml");
    // `looper` feeds its own queue; `ping` and `pong` feed each other's; `mailer` feeds nobody.
    std::fs::write(
        &routes,
        r#"
[routes]
"loop." = "outbox.loop"
"ping." = "outbox.ping"
"pong." = "outbox.pong"
"mail." = "outbox.mail"
"audit." = "outbox.audit"

[router]
plugin = "native"

[handlers]
"outbox.loop" = "looper"
"outbox.ping" = "ping"
"outbox.pong" = "pong"
"outbox.mail" = "mailer"

[plugins.capability-policy]

[plugins.looper]
file = "test/feedback-loop.wasm"
grants = { publish = ["loop."] }

[plugins.ping]
file = "test/feedback-loop.wasm"
grants = { publish = ["pong.reply"] }

[plugins.pong]
file = "test/feedback-loop.wasm"
grants = { publish = ["ping."] }

[plugins.mailer]
file = "test/echo-handler.wasm"
grants = { publish = ["audit."] }
"#,
    )
    .unwrap();
    let out = outbox(
        "postgres://unused",
        &["routes", "check", routes.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    let (_, stderr) = text(&out);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("feedback loop"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert_eq!(
        warnings[0],
        "warning: feedback loop: handler looper of outbox.loop may publish loop.example (grant \"loop.\"), which routes back to outbox.loop; the host stops such a chain at generation 8 (OUTBOX_MAX_EVENT_GENERATION) with a dead letter"
    );
    assert_eq!(
        warnings[1],
        "warning: feedback loop: outbox.ping (handler ping) publishes pong.reply (grant \"pong.reply\") -> outbox.pong (handler pong) publishes ping.example (grant \"ping.\") -> outbox.ping; the host stops such a chain at generation 8 (OUTBOX_MAX_EVENT_GENERATION) with a dead letter"
    );
    assert!(!stderr.contains("outbox.mail"), "{stderr}");
}
