//! Where the output goes: a reader that went away ends a command quietly.

use std::process::Command;

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
