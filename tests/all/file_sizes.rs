//! Guard rails on file size: no Rust file under a `src/` folder over [`MAX_SOURCE_LINES`] lines
//! (inline test modules count), and no other Rust file (integration tests, their harness,
//! examples, build scripts) over [`MAX_TEST_LINES`], in every crate of the repository (`host`,
//! `cli`, `plugin-sdk`, `tests` and the `plugins` workspace).
//!
//! A file past its limit is split by subject, not trimmed: a source file into a folder of modules
//! that each say what they own, a big inline test module into a sibling `tests.rs` (`#[cfg(test)]
//! mod tests;`), a test file into a folder of modules under the same test binary (a new binary
//! links wasmtime again). The walk only reads files; it never builds or runs anything.

use std::path::{Path, PathBuf};

/// Longest Rust source file under a `src/` folder, in lines.
const MAX_SOURCE_LINES: usize = 700;
/// Longest other Rust file (tests and their harness, examples, build scripts), in lines.
const MAX_TEST_LINES: usize = 1_000;
/// The folders of the repository holding Rust crates.
const CRATE_ROOTS: &[&str] = &["host", "cli", "plugin-sdk", "tests", "plugins"];
/// Folders never walked: build output, built plugins, dependencies, hidden folders.
const SKIPPED: &[&str] = &["target", "dist", "node_modules"];

/// The repository's root (this crate is `tests/` in it).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, skipping [`SKIPPED`] and hidden folders.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !name.starts_with('.') && !SKIPPED.contains(&name) {
                rust_files(&path, found);
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// Every Rust file of the repository's crates, relative to the repository, in order.
fn repository_rust_files() -> Vec<PathBuf> {
    let root = repository();
    let mut found = Vec::new();
    for crate_root in CRATE_ROOTS {
        rust_files(&root.join(crate_root), &mut found);
    }
    let mut relative: Vec<PathBuf> = found
        .into_iter()
        .map(|p| p.strip_prefix(&root).expect("under the root").to_path_buf())
        .collect();
    relative.sort();
    relative
}

/// The limit a file is held to: a source file's when a `src` folder holds it, else a test file's.
fn limit_of(path: &Path) -> (usize, &'static str) {
    if path.components().any(|c| c.as_os_str() == "src") {
        (MAX_SOURCE_LINES, "source file")
    } else {
        (MAX_TEST_LINES, "test file")
    }
}

#[test]
fn every_source_file_stays_under_700_lines_and_every_test_file_under_1000() {
    let root = repository();
    let mut over = Vec::new();
    for path in repository_rust_files() {
        let text = std::fs::read_to_string(root.join(&path))
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let lines = text.lines().count();
        let (limit, kind) = limit_of(&path);
        if lines > limit {
            over.push(format!(
                "  {}: {lines} lines, over the {limit} of a {kind}",
                path.display()
            ));
        }
    }
    assert!(
        over.is_empty(),
        "{} files are too long; split each by subject (see tests/all/file_sizes.rs):\n{}",
        over.len(),
        over.join("\n")
    );
}

#[test]
fn the_file_size_walk_sees_every_crate_and_tells_sources_from_tests() {
    let files = repository_rust_files();
    for crate_root in CRATE_ROOTS {
        assert!(
            files.iter().any(|p| p.starts_with(crate_root)),
            "no Rust file found under {crate_root}/"
        );
    }
    assert!(files.iter().any(|p| p == Path::new("host/src/lib.rs")));
    assert!(!files
        .iter()
        .any(|p| p.components().any(|c| c.as_os_str() == "target")));
    assert_eq!(limit_of(Path::new("host/src/lib.rs")).0, MAX_SOURCE_LINES);
    assert_eq!(
        limit_of(Path::new("plugins/prefix-router/src/lib.rs")).0,
        MAX_SOURCE_LINES
    );
    assert_eq!(limit_of(Path::new("tests/all/main.rs")).0, MAX_TEST_LINES);
    assert_eq!(limit_of(Path::new("cli/tests/cli.rs")).0, MAX_TEST_LINES);
}
