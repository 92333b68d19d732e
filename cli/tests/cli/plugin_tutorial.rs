//! The plugin tutorial of `docs/plugins.md` runs as written, in Rust, Python and JavaScript,
//! against a running `outbox run`: its `sh tutorial-<lang>` blocks are run with `bash` from the
//! folder a reader scaffolds in, its `toml tutorial-<lang>` blocks are added to the host's
//! `routes.toml` (as the reader adds the lines to the tables of those names), and each line of
//! its `text tutorial-<lang>` blocks must show in the host's log (digits stand for any number:
//! they are event ids).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::process::{Child, Command};

use crate::{pool_url, repo_path};

/// One block of the tutorial.
#[derive(Debug)]
enum Block {
    /// Commands to run.
    Shell(String),
    /// Lines to add to `routes.toml`.
    Routes(String),
    /// Lines the host logs.
    Logged(Vec<String>),
}

/// The tutorial blocks of `lang`, in order.
fn tutorial(lang: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo_path("docs/plugins.md")).unwrap();
    let tag = format!("tutorial-{lang}");
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None; // (kind, body)
    for line in text.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                let words: Vec<&str> = info.split_whitespace().collect();
                if words.len() == 2 && words[1] == tag {
                    open = Some((words[0].to_string(), String::new()));
                }
            }
            (Some((kind, body)), Some(_)) => {
                let body = std::mem::take(body);
                blocks.push(match kind.as_str() {
                    "sh" => Block::Shell(body),
                    "toml" => Block::Routes(body),
                    "text" => Block::Logged(body.lines().map(str::to_string).collect()),
                    other => panic!("tutorial block of kind {other}"),
                });
                open = None;
            }
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed {tag} block");
    blocks
}

/// Whether `line` shows `expected`, where each run of digits in `expected` matches any run.
fn shows(line: &str, expected: &str) -> bool {
    // The literal parts of `expected` around its runs of digits.
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut in_digits = false;
    for c in expected.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                parts.push(std::mem::take(&mut part));
            }
            in_digits = true;
        } else {
            in_digits = false;
            part.push(c);
        }
    }
    parts.push(part);
    let (first, rest) = parts.split_first().unwrap();
    line.match_indices(first.as_str()).any(|(at, _)| {
        let mut tail = &line[at + first.len()..];
        for part in rest {
            let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            if digits == 0 || !tail[digits..].starts_with(part.as_str()) {
                return false;
            }
            tail = &tail[digits + part.len()..];
        }
        true
    })
}

/// `routes` with the tables of `fragment` added (keys of a table both have are the fragment's).
fn merged(routes: &str, fragment: &str) -> String {
    fn merge(into: &mut toml::Table, from: toml::Table) {
        for (key, value) in from {
            match (into.get_mut(&key), value) {
                (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
                (_, value) => {
                    into.insert(key, value);
                }
            }
        }
    }
    let mut table: toml::Table = routes.parse().unwrap();
    merge(&mut table, fragment.parse().unwrap());
    toml::to_string(&table).unwrap()
}

/// The reader's machine: the host's routes file and plugin directory, a folder to scaffold in,
/// and `outbox run` on them, logging into a file.
struct Setup {
    dir: tempfile::TempDir,
    db_url: String,
    prefix: String,
    host: Child,
}

impl Setup {
    async fn start(pool: &PgPool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        for name in [
            "prefix-router",
            "capability-policy",
            "workflow-trigger",
            "plugin-hook",
        ] {
            std::fs::copy(
                repo_path(&format!("plugins/dist/{name}.wasm")),
                plugins.join(format!("{name}.wasm")),
            )
            .unwrap();
        }
        std::fs::copy(repo_path("routes.toml"), dir.path().join("routes.toml")).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let db_url = pool_url(pool).await;
        let prefix = format!("cli-tutorial-{}:", uuid::Uuid::new_v4().simple());
        let log = std::fs::File::create(dir.path().join("host.log")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
        for var in outbox_host::config::Settings::ENV_VARS {
            command.env_remove(var);
        }
        let host = command
            .arg("run")
            .envs(Self::env_of(dir.path(), &db_url, &prefix))
            .env("OUTBOX_HTTP_ADDR", "")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn outbox run");
        let setup = Self {
            dir,
            db_url,
            prefix,
            host,
        };
        setup
            .wait_for_log("outbox host started", Duration::from_secs(60))
            .await;
        setup
    }

    /// The environment the tutorial's reader has, and the host runs with.
    fn env_of(dir: &Path, db_url: &str, prefix: &str) -> Vec<(String, String)> {
        vec![
            ("DATABASE_URL".into(), db_url.into()),
            ("REDIS_URL".into(), outbox_tests::redis_url()),
            ("OUTBOX_REDIS_PREFIX".into(), prefix.into()),
            (
                "OUTBOX_CONFIG".into(),
                dir.join("routes.toml").display().to_string(),
            ),
            (
                "OUTBOX_PLUGIN_DIR".into(),
                dir.join("plugins").display().to_string(),
            ),
        ]
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("host.log")).unwrap_or_default()
    }

    /// Wait until a line of the host's log shows `expected`.
    async fn wait_for_log(&self, expected: &str, timeout: Duration) {
        let started = Instant::now();
        while !self.log().lines().any(|line| shows(line, expected)) {
            assert!(
                started.elapsed() < timeout,
                "the host did not log {expected:?} within {timeout:?}; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Run one block of commands as the reader does, from the folder they scaffold in.
    async fn run(&self, commands: &str) {
        let bin = Path::new(env!("CARGO_BIN_EXE_outbox")).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .args(["-e", "-o", "pipefail", "-c", commands])
            .current_dir(self.dir.path().join("work"))
            .envs(Self::env_of(self.dir.path(), &self.db_url, &self.prefix))
            .env("PATH", path)
            .env("RUST_LOG", "warn")
            // The reader's cargo, not the test run's: no linting compiler, no shared target.
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .env_remove("CLIPPY_ARGS")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{commands}\nfailed:\n{}\n{}\nthe host's log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    fn add_routes(&self, fragment: &str) {
        let path = self.dir.path().join("routes.toml");
        let routes = std::fs::read_to_string(&path).unwrap();
        // Written whole in one rename, as an editor saves it.
        let next = self.dir.path().join(".routes.toml.new");
        std::fs::write(&next, merged(&routes, fragment)).unwrap();
        std::fs::rename(&next, &path).unwrap();
    }
}

#[test]
fn digits_in_an_expected_log_line_stand_for_any_number() {
    assert!(shows(
        "INFO outbox::plugin: greeter: event 17 (greet.hello) plugin=\"greeter\"",
        "greeter: event 1 (greet.hello)"
    ));
    assert!(!shows(
        "greeter: event x (greet.hello)",
        "greeter: event 1 (greet.hello)"
    ));
    assert!(!shows(
        "greeter: greeted event 2 (greet.hello)",
        "greeter: event 1 (greet.hello)"
    ));
}

#[sqlx::test(migrations = "../migrations")]
async fn the_plugin_tutorial_runs_as_written_in_rust_python_and_javascript(pool: PgPool) {
    let mut setup = Setup::start(&pool).await;
    for lang in ["rust", "python", "js"] {
        let blocks = tutorial(lang);
        assert!(
            blocks
                .iter()
                .filter(|b| matches!(b, Block::Shell(_)))
                .count()
                >= 3,
            "{lang}: {blocks:?}"
        );
        for block in &blocks {
            match block {
                Block::Shell(commands) => setup.run(commands).await,
                Block::Routes(fragment) => setup.add_routes(fragment),
                Block::Logged(lines) => {
                    for line in lines {
                        // A large guest compiles for some seconds at its first load.
                        setup.wait_for_log(line, Duration::from_secs(180)).await;
                    }
                }
            }
        }
    }
    assert!(
        setup.log().contains("plugin reloaded"),
        "no hot reload in the host's log:\n{}",
        setup.log()
    );
    setup.host.kill().await.ok();
}
