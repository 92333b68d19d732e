//! `outbox demo` on the local PostgreSQL and Redis: it runs end to end, and warns only about an
//! operator's out-of-range setting, never about the values it chooses for itself (its own
//! database, Redis prefix, poll interval and no HTTP endpoint).

use std::process::Command;

use crate::repo_path;

#[test]
fn the_demo_warns_about_an_operators_out_of_range_setting_but_not_about_its_own_choices() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
    for var in outbox_host::config::Settings::ENV_VARS {
        command.env_remove(var);
    }
    let out = command
        .arg("demo")
        .env(
            "DATABASE_URL",
            std::env::var("DATABASE_URL").expect("DATABASE_URL"),
        )
        .env("REDIS_URL", outbox_tests::redis_url())
        .env("OUTBOX_CONFIG", repo_path("routes.toml"))
        .env("OUTBOX_PLUGIN_DIR", repo_path("plugins/dist"))
        // The operator's own out-of-range value: runs as 1, with a warning.
        .env("OUTBOX_RECEIVER_CONCURRENCY", "0")
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .expect("run outbox demo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("is out of range"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0]
            .contains("OUTBOX_RECEIVER_CONCURRENCY=0 (from the env) is out of range: using 1"),
        "{stderr}"
    );
}
