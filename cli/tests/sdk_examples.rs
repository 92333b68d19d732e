//! Every code example in the plugin SDK's documentation compiles, as is, in a crate made by
//! `outbox plugins new` (its template's dependencies only, built for wasm32-wasip2): what a
//! plugin author pastes into a fresh crate works. The SDK's own doc tests cannot show this,
//! since they see the SDK's dependencies too.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]
// A test crate: a failed unwrap is a failed test, with the reason in the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// One example: where it is, and its code with rustdoc's hidden lines (`# `) shown.
struct Example {
    place: String,
    code: String,
}

/// The Rust code blocks of the doc comments (`//!` and `///`) of every file under `dir`.
fn examples(dir: &Path, out: &mut Vec<Example>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            examples(&path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut block: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            let Some(doc) = trimmed
                .strip_prefix("//!")
                .or_else(|| trimmed.strip_prefix("///"))
            else {
                continue;
            };
            let doc = doc.strip_prefix(' ').unwrap_or(doc);
            match (&mut block, doc.strip_prefix("```")) {
                (None, Some(info)) => {
                    let rust = info.is_empty()
                        || info
                            .split(',')
                            .all(|a| matches!(a.trim(), "rust" | "no_run" | "should_panic"));
                    if rust {
                        block = Some((n + 1, String::new()));
                    } else {
                        block = Some((0, String::new())); // not Rust: skipped
                    }
                }
                (Some((start, code)), Some(_)) => {
                    if *start > 0 {
                        out.push(Example {
                            place: format!("{}:{start}", path.display()),
                            code: std::mem::take(code),
                        });
                    }
                    block = None;
                }
                (Some((_, code)), None) => {
                    let shown = doc
                        .strip_prefix("# ")
                        .or_else(|| (doc == "#").then_some(""))
                        .unwrap_or(doc);
                    code.push_str(shown);
                    code.push('\n');
                }
                (None, None) => {}
            }
        }
    }
}

#[test]
fn every_sdk_doc_example_compiles_in_a_scaffolded_crate() {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk/src");
    let mut found = Vec::new();
    examples(&sdk, &mut found);
    assert!(
        found.len() >= 6,
        "only {} examples found in {}",
        found.len(),
        sdk.display()
    );
    let parent = tempfile::tempdir().unwrap();
    // One build directory and one SDK for every example: the dependencies compile once.
    let target = parent.path().join("target");
    let shared_sdk = parent.path().join("outbox-plugin-sdk");
    let written = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["plugins", "sdk", "--out"])
        .arg(&shared_sdk)
        .output()
        .unwrap();
    assert!(
        written.status.success(),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
    let mut failures = Vec::new();
    for (i, example) in found.iter().enumerate() {
        let world = if example.code.contains("export_router!") {
            "router"
        } else if example.code.contains("export_policy!") {
            "policy"
        } else {
            "handler"
        };
        let name = format!("example-{i}");
        let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
            .args(["plugins", "new", &name, "--world", world, "--dir"])
            .arg(parent.path())
            .arg("--sdk")
            .arg(&shared_sdk)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let crate_dir = parent.path().join(&name);
        // The example is the crate: items at the top level, as a plugin's lib.rs holds them.
        std::fs::write(crate_dir.join("src/lib.rs"), &example.code).unwrap();
        let check = Command::new(env!("CARGO"))
            .args(["check", "--quiet", "--target", "wasm32-wasip2"])
            .current_dir(&crate_dir)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            // The test command lints the workspace by running clippy as its compiler; a plugin
            // author's crate is built by plain rustc.
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS")
            .output()
            .unwrap();
        if !check.status.success() {
            failures.push(format!(
                "{} ({world}):\n{}\n{}",
                example.place,
                example.code,
                String::from_utf8_lossy(&check.stderr)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "examples that do not compile in a scaffolded crate:\n\n{}",
        failures.join("\n\n")
    );
}
