//! A BullMQ application on Node.js for the interop tests: `interop/bullmq/worker.js` (the real
//! `bullmq` package pinned there, installed by the README test command) run as a child process,
//! talking JSON lines: what its workers processed, what its `QueueEvents` saw, and answers to
//! commands (`inspect` with `getJobCounts`/`getJob`, `add` as a Node dispatcher would, `pause`).
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// `interop/bullmq`: the pinned `bullmq` package and the worker script.
pub fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/bullmq")
}

/// A BullMQ application on Node.js (`interop/bullmq/worker.js`): workers, QueueEvents
/// listeners and queues, talking JSON lines.
pub struct BullmqApp {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<Value>,
    /// Every line received so far.
    pub seen: Vec<Value>,
}

impl BullmqApp {
    /// Start the app on `queues` under `prefix` (on `REDIS_URL`); `workers: false` starts queues only (nothing is
    /// processed). Returns once it says it is ready.
    pub async fn start(prefix: &str, queues: &[&str], workers: bool) -> Self {
        let dir = interop_dir();
        assert!(
            dir.join("node_modules/bullmq/package.json").exists(),
            "{} has no node_modules/bullmq: run scripts/test.sh, which runs `npm ci` there",
            dir.display()
        );
        let mut child = Command::new("node")
            .arg(dir.join("worker.js"))
            .env("REDIS_URL", crate::redis_url())
            .env("BULL_PREFIX", prefix)
            .env("QUEUES", queues.join(","))
            .env("WORKERS", if workers { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start node (Node.js must be installed: scripts/test.sh installs it)");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => eprintln!("worker.js: {line}"),
                }
            }
        });
        let mut app = Self {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        };
        app.wait_for("the app to be ready", Duration::from_secs(30), |seen| {
            seen.iter().any(|v| v["kind"] == "ready")
        })
        .await;
        app
    }

    /// Take the lines received so far.
    pub fn poll(&mut self) {
        while let Ok(v) = self.lines.try_recv() {
            assert_ne!(v["kind"], "error", "worker.js reported an error: {v}");
            self.seen.push(v);
        }
    }

    /// Wait until `done(seen)` holds, or fail after `within`.
    pub async fn wait_for(
        &mut self,
        what: &str,
        within: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) {
        let start = Instant::now();
        loop {
            self.poll();
            if done(&self.seen) {
                return;
            }
            assert!(
                start.elapsed() < within,
                "timed out after {within:?} waiting for {what}; the app said: {:#?}",
                self.seen
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Send a command and wait for its answer (the first new line of `kind`).
    pub async fn command(&mut self, command: Value, kind: &str) -> Value {
        self.poll();
        let before = self.seen.len();
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        self.wait_for(
            &format!("the answer to {command}"),
            Duration::from_secs(10),
            |seen| seen[before..].iter().any(|v| v["kind"] == kind),
        )
        .await;
        self.seen[before..]
            .iter()
            .find(|v| v["kind"] == kind)
            .cloned()
            .unwrap()
    }

    /// Lines of `kind`.
    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.seen.iter().filter(|v| v["kind"] == kind).collect()
    }

    /// Ask the app to close its workers, listeners and queues, and wait for it to exit.
    pub async fn quit(mut self) {
        let _ = self.stdin.write_all(b"{\"cmd\":\"quit\"}\n").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    /// `(queue, job id)` -> how many times the worker's processor ran it.
    pub fn processed_counts(&self) -> HashMap<(String, String), usize> {
        let mut counts = HashMap::new();
        for v in self.of_kind("processed") {
            let key = (
                v["queue"].as_str().unwrap().to_string(),
                v["id"].as_str().unwrap().to_string(),
            );
            *counts.entry(key).or_insert(0) += 1;
        }
        counts
    }
}

/// Delete the keys of a test's BullMQ prefix.
pub async fn remove_bullmq_prefix(
    conn: &mut (impl redis::aio::ConnectionLike + Send + Sync),
    prefix: &str,
) {
    let keys: Vec<String> = conn.keys(format!("{prefix}:*")).await.unwrap();
    for chunk in keys.chunks(500) {
        let _: () = conn.del(chunk).await.unwrap();
    }
}
