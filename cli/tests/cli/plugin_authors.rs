//! A plugin author outside this repository: an installed `outbox` binary, copied away from the
//! checkout and run from another folder with nothing in its environment pointing back here,
//! scaffolds a plugin that builds and passes `plugins check` and `plugins call`; the SDK it
//! writes out is a standalone crate that `cargo package` accepts; the WIT package it writes out
//! is the one the host binds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::text;

/// The checkout this test runs from, which the installed binary must not know about.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap()
}

/// A build folder shared by the scaffold builds of every run (dependencies compile once).
fn shared_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-author-builds")
}

/// The `outbox` binary copied into `bin` as a plugin author installs it.
fn install_outbox(bin: &Path) -> PathBuf {
    std::fs::create_dir_all(bin).unwrap();
    let installed = bin.join("outbox");
    std::fs::copy(env!("CARGO_BIN_EXE_outbox"), &installed).unwrap();
    installed
}

/// Only what any shell has (`PATH`, `HOME` and rustup's and cargo's homes): nothing naming the
/// checkout, no `OUTBOX_*`, no `CARGO_*` of the test run.
fn author_command(program: &Path, cwd: &Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(cwd).env_clear();
    for keep in [
        "PATH",
        "HOME",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Some(value) = std::env::var_os(keep) {
            command.env(keep, value);
        }
    }
    command
}

/// Running a command to its end.
trait Run {
    /// Its output. A binary copied a moment ago can be briefly busy to exec (`ETXTBSY`: a
    /// process another test thread forked meanwhile may still hold the copy's write handle until
    /// it execs), so that one error is retried.
    fn run(&mut self) -> Output;
}

impl Run for Command {
    fn run(&mut self) -> Output {
        for _ in 0..100 {
            match self.output() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                result => return result.unwrap(),
            }
        }
        self.output().unwrap()
    }
}

fn succeeded(what: &str, out: &Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

/// Every file under `dir` whose text names `needle`.
fn files_naming(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    pending.push(path);
                }
            } else if std::fs::read_to_string(&path).is_ok_and(|t| t.contains(needle)) {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn an_installed_binary_scaffolds_a_plugin_that_builds_without_this_checkout() {
    let home = tempfile::tempdir().unwrap();
    let outbox = install_outbox(&home.path().join("bin"));
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let checkout = checkout();

    let out = author_command(&outbox, &work)
        .args(["plugins", "new", "greeter", "--world", "handler"])
        .run();
    let stdout = succeeded("plugins new", &out);
    let shown = format!("{stdout}{}", text(&out).1);
    assert!(
        !shown.contains(checkout.to_str().unwrap()),
        "the output names the checkout:\n{shown}"
    );
    let crate_dir = work.join("greeter");
    assert_eq!(
        files_naming(&crate_dir, checkout.to_str().unwrap()),
        Vec::<PathBuf>::new(),
        "scaffolded files name the checkout"
    );

    // The crate builds as is, with plain cargo, for the plugin target.
    let build = author_command(Path::new("cargo"), &crate_dir)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", shared_target())
        .run();
    succeeded("cargo build of the scaffold", &build);
    let wasm = shared_target().join("wasm32-wasip2/release/greeter.wasm");

    let check = author_command(&outbox, &work)
        .args(["plugins", "check"])
        .arg(&wasm)
        .run();
    let report = succeeded("plugins check", &check);
    assert!(
        report.contains("ok (world handler, outbox:plugin@0.2.0"),
        "{report}"
    );
    // The digest to pin, whole.
    let pinned = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha256 = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no sha256 line to paste:\n{report}"));
    assert_eq!(pinned.len(), 64, "{report}");

    let call = author_command(&outbox, &work)
        .args(["plugins", "call"])
        .arg(&wasm)
        .args([
            "--event",
            r#"{"event_type": "mail.welcome", "payload": {}}"#,
        ])
        .run();
    let answer = succeeded("plugins call", &call);
    assert!(answer.contains("ok"), "{answer}");
}

#[test]
fn the_sdk_written_out_is_a_standalone_crate_cargo_packages() {
    let home = tempfile::tempdir().unwrap();
    let outbox = install_outbox(&home.path().join("bin"));
    let sdk = home.path().join("shared/outbox-plugin-sdk");
    let out = author_command(&outbox, home.path())
        .args(["plugins", "sdk", "--out"])
        .arg(&sdk)
        .run();
    let said = succeeded("plugins sdk", &out);
    assert!(said.contains("outbox:plugin@0.2.0"), "{said}");
    let manifest = std::fs::read_to_string(sdk.join("Cargo.toml")).unwrap();
    assert!(
        !manifest.contains(".workspace") && !manifest.contains("workspace = true"),
        "{manifest}"
    );

    // `cargo package` builds the packaged crate on its own (for the machine's target).
    let package = author_command(Path::new("cargo"), &sdk)
        .args(["package", "--allow-dirty"])
        .env("CARGO_TARGET_DIR", shared_target())
        .run();
    succeeded("cargo package of the SDK", &package);
    let listed = author_command(Path::new("cargo"), &sdk)
        .args(["package", "--list", "--allow-dirty"])
        .run();
    let listed = succeeded("cargo package --list", &listed);
    for needed in [
        "src/lib.rs",
        "wit/outbox.wit",
        "wit/0.1/outbox.wit",
        "README.md",
    ] {
        assert!(
            listed.lines().any(|l| l == needed),
            "{needed} not packaged:\n{listed}"
        );
    }

    // A plugin made against the shared copy names it, and refuses a folder that is not an SDK.
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = author_command(&outbox, &work)
        .args(["plugins", "new", "by-tenant", "--world", "router", "--sdk"])
        .arg(&sdk)
        .run();
    succeeded("plugins new --sdk", &out);
    let cargo_toml = std::fs::read_to_string(work.join("by-tenant/Cargo.toml")).unwrap();
    assert!(
        cargo_toml.contains(&format!(
            "outbox-plugin-sdk = {{ path = \"{}\" }}",
            sdk.canonicalize().unwrap().display()
        )),
        "{cargo_toml}"
    );
    assert!(!work.join("by-tenant/outbox-plugin-sdk").exists());
    let out = author_command(&outbox, &work)
        .args(["plugins", "new", "other", "--world", "router", "--sdk"])
        .arg(&work)
        .run();
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("not the outbox plugin SDK"),
        "{}",
        text(&out).1
    );
    assert!(!work.join("other").exists());
}

#[test]
fn the_wit_written_out_is_the_contract_the_host_binds() {
    let dir = tempfile::tempdir().unwrap();
    let wit = dir.path().join("wit");
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["plugins", "wit", "--out"])
        .arg(&wit)
        .run();
    succeeded("plugins wit", &out);
    let repo_wit = checkout().join("plugin-sdk/wit");
    for file in ["outbox.wit", "0.1/outbox.wit"] {
        assert_eq!(
            std::fs::read_to_string(wit.join(file)).unwrap(),
            std::fs::read_to_string(repo_wit.join(file)).unwrap(),
            "{file}"
        );
    }
    // Not over a folder holding something else, and over its own only with --force.
    let again = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["plugins", "wit", "--out"])
        .arg(&wit)
        .run();
    assert!(!again.status.success());
    assert!(text(&again).1.contains("--force"), "{}", text(&again).1);
    let forced = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["plugins", "wit", "--force", "--out"])
        .arg(&wit)
        .run();
    succeeded("plugins wit --force", &forced);
}

#[test]
fn python_and_javascript_handlers_are_scaffolded_built_and_called() {
    let home = tempfile::tempdir().unwrap();
    let outbox = install_outbox(&home.path().join("bin"));
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    for (lang, hint, build) in [
        ("python", "./build.sh", vec!["./build.sh"]),
        (
            "js",
            "npm install && npm run build",
            vec!["npm install --no-audit --no-fund", "npm run build"],
        ),
    ] {
        let name = format!("hello-{lang}");
        let out = author_command(&outbox, &work)
            .args([
                "plugins", "new", &name, "--world", "handler", "--lang", lang,
            ])
            .run();
        let said = succeeded(&format!("plugins new --lang {lang}"), &out);
        assert!(said.contains(hint), "{said}");
        let project = work.join(&name);
        assert!(project.join("wit/outbox.wit").is_file());
        for step in &build {
            let built = author_command(Path::new("sh"), &project)
                .args(["-c", step])
                .run();
            succeeded(&format!("{lang}: {step}"), &built);
        }
        let wasm = project.join(format!("{name}.wasm"));
        let check = author_command(&outbox, &project)
            .args(["plugins", "check"])
            .arg(&wasm)
            .run();
        let report = succeeded(&format!("{lang}: plugins check"), &check);
        assert!(
            report.contains("ok (world handler, outbox:plugin@0.2.0"),
            "{report}"
        );
        let call = author_command(&outbox, &project)
            .args(["plugins", "call"])
            .arg(&wasm)
            .args([
                "--event",
                r#"{"event_type": "mail.welcome", "payload": {"to": "ada"}}"#,
            ])
            .run();
        let answer = succeeded(&format!("{lang}: plugins call"), &call);
        assert!(
            answer.contains("mail.welcome (from outbox.test): ok"),
            "{answer}"
        );
        let logged = text(&call).1;
        assert!(
            logged.contains(&format!("{name}: event 1 (mail.welcome)")),
            "{logged}"
        );
    }
    // Routers and policies are Rust's.
    let out = author_command(&outbox, &work)
        .args([
            "plugins",
            "new",
            "py-router",
            "--world",
            "router",
            "--lang",
            "python",
        ])
        .run();
    assert!(!out.status.success());
    assert!(text(&out).1.contains("only handlers"), "{}", text(&out).1);
}
