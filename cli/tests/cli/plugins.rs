//! `outbox plugins check|call|new`: the world is named and garbage refused, a router runs
//! offline, a sleeping plugin is cut at its time limit, plugin log lines are escaped and bounded,
//! and a new plugin crate is scaffolded without overwriting anything.

use std::process::{Command, Output};

use crate::{outbox, repo_path, text};

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
    assert!(
        stdout.contains("cost: compiled in ")
            || stdout.contains("cost: loaded from the compile cache in "),
        "{stdout}"
    );

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

/// `outbox plugins call` of the log-flood router on one `mail.welcome` event at `rust_log`:
/// its stdout and stderr, once it succeeded and routed the event to `outbox.audit`.
fn route_with_the_log_flood_plugin(rust_log: &str) -> (String, String) {
    let out = outbox_within(
        &[
            "plugins",
            "call",
            &repo_path("plugins/dist/test/log-flood.wasm"),
            "--events",
            r#"[{"event_type": "mail.welcome"}]"#,
        ],
        rust_log,
        std::time::Duration::from_secs(60),
    )
    .expect("outbox plugins call finished");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("mail.welcome -> outbox.audit"), "{stdout}");
    (stdout, stderr)
}

#[test]
fn cli_plugin_log_lines_are_escaped_and_bounded_per_call() {
    let (_, stderr) = route_with_the_log_flood_plugin("info");
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
fn cli_plugin_log_lines_below_the_log_level_are_neither_logged_nor_counted() {
    // The same flood at RUST_LOG=warn: its info lines are not the host's to log, so none is
    // written and none counts against the call's budget (no "budget exceeded" line either).
    let (_, stderr) = route_with_the_log_flood_plugin("warn");
    assert!(!stderr.contains(" flood "), "{stderr}");
    assert!(!stderr.contains("forged"), "{stderr}");
    assert!(!stderr.contains("log budget exceeded"), "{stderr}");
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
    // The SDK is vendored inside the crate, by a relative path: the crate builds wherever it
    // is moved (the build itself is `plugin_authors`' test).
    assert!(
        cargo_toml.contains("outbox-plugin-sdk = { path = \"outbox-plugin-sdk\" }"),
        "{cargo_toml}"
    );
    let vendored = parent.join("demo-router/outbox-plugin-sdk");
    assert!(vendored.join("Cargo.toml").is_file());
    assert!(vendored.join("wit/outbox.wit").is_file());

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
