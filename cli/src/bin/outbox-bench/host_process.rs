//! A real `outbox run` process (the `outbox` binary next to `outbox-bench`), for the sections
//! that measure the host as operators run it: started on the bench database and prefix
//! (`--dispatcher-only` with HTTP off, or as [`RunOptions`] say: the full `run`, an HTTP
//! address, the configuration's own batch size), its stderr drained (last lines kept for
//! errors), read from `/proc` (memory, CPU time), stopped as an operator stops it. It measures
//! nothing itself.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use outbox_host::config::Settings;
use tokio::io::AsyncBufReadExt as _;
use tokio::process::{Child, Command};

/// Lines of a process's stderr kept for an error message.
const STDERR_TAIL: usize = 20;

/// The `outbox` binary beside this bench, if it was built.
pub(crate) fn outbox_binary() -> anyhow::Result<Option<PathBuf>> {
    let exe = std::env::current_exe()
        .context("locate outbox-bench")?
        .with_file_name("outbox");
    Ok(exe.is_file().then_some(exe))
}

/// How [`HostProcess::spawn_with`] starts `outbox run`.
pub(crate) struct RunOptions<'a> {
    /// `--config` (none: the binary's own default).
    pub(crate) config_path: Option<&'a Path>,
    /// `--dispatcher-only`; otherwise the full `run` (dispatcher and receivers).
    pub(crate) dispatcher_only: bool,
    /// `OUTBOX_HTTP_ADDR` (the empty string turns the listener off).
    pub(crate) http_addr: &'a str,
    /// `OUTBOX_DISPATCH_BATCH_SIZE`; none leaves it to the configuration (or the environment).
    pub(crate) batch_size: Option<i64>,
    /// `OUTBOX_PLUGIN_DIR`.
    pub(crate) plugin_dir: &'a Path,
}

/// One running `outbox run`.
pub(crate) struct HostProcess {
    child: Child,
    /// Its process id.
    pub(crate) pid: u32,
    stderr_tail: Arc<Mutex<Vec<String>>>,
    /// Its HTTP listener's address (`None`: HTTP off).
    http_addr: Option<String>,
}

impl HostProcess {
    /// Start `exe run --dispatcher-only` with `config_path` on the database and Redis prefix of
    /// `settings`, HTTP off, the bench's batch size.
    pub(crate) fn spawn(
        exe: &Path,
        config_path: Option<&Path>,
        settings: &Settings,
    ) -> anyhow::Result<Self> {
        Self::spawn_with(
            exe,
            settings,
            &RunOptions {
                config_path,
                dispatcher_only: true,
                http_addr: "",
                batch_size: Some(settings.dispatch_batch_size),
                plugin_dir: &settings.plugin_dir,
            },
        )
    }

    /// Start `exe run` as `options` say on the database, Redis and prefix of `settings`.
    pub(crate) fn spawn_with(
        exe: &Path,
        settings: &Settings,
        options: &RunOptions<'_>,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(exe);
        if let Some(path) = options.config_path {
            command.arg("--config").arg(path);
        }
        command.arg("run");
        if options.dispatcher_only {
            command.arg("--dispatcher-only");
        }
        if let Some(batch) = options.batch_size {
            command.env("OUTBOX_DISPATCH_BATCH_SIZE", batch.to_string());
        }
        command
            .env("DATABASE_URL", &settings.database_url)
            .env("REDIS_URL", &settings.redis_url)
            .env("OUTBOX_REDIS_PREFIX", &settings.redis_prefix)
            .env("OUTBOX_HTTP_ADDR", options.http_addr)
            .env("OUTBOX_PLUGIN_DIR", options.plugin_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("start {}", exe.display()))?;
        let pid = child.id().context("the outbox process has no pid")?;
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let tail = stderr_tail.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut tail) = tail.lock() {
                        if tail.len() == STDERR_TAIL {
                            tail.remove(0);
                        }
                        tail.push(line);
                    }
                }
            });
        }
        Ok(Self {
            child,
            pid,
            stderr_tail,
            http_addr: (!options.http_addr.is_empty()).then(|| options.http_addr.to_string()),
        })
    }

    /// Its HTTP listener's address; an error when it runs without one.
    pub(crate) fn http_addr(&self) -> anyhow::Result<&str> {
        self.http_addr
            .as_deref()
            .context("the outbox process runs without its HTTP listener")
    }

    /// The values of the unlabelled samples `names` of its `/metrics` page, in that order (0
    /// for a sample the page does not have yet: a counter shows up at its first increment).
    pub(crate) async fn metrics(&self, names: &[&str]) -> anyhow::Result<Vec<f64>> {
        let url = format!("http://{}/metrics", self.http_addr()?);
        let page = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("read {url}"))?
            .text()
            .await
            .with_context(|| format!("read {url}"))?;
        Ok(names.iter().map(|name| sample(&page, name)).collect())
    }

    /// Fail if the process has exited.
    pub(crate) fn ensure_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!("the outbox process exited early ({status})");
        }
        Ok(())
    }

    /// The last lines of its stderr.
    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr_tail
            .lock()
            .map(|t| t.join("\n"))
            .unwrap_or_default()
    }

    /// A `kB` field of its `/proc/PID/status` (`VmRSS:`, `VmHWM:`).
    pub(crate) fn status_kb(&self, field: &str) -> anyhow::Result<u64> {
        read_status_kb(self.pid, field)
    }

    /// SIGTERM (orderly shutdown, as an operator stops it), then SIGKILL after 30 s.
    pub(crate) async fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status()
            .await;
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A `kB` field of `/proc/PID/status`.
fn read_status_kb(pid: u32, field: &str) -> anyhow::Result<u64> {
    let path = PathBuf::from(format!("/proc/{pid}/status"));
    let status =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field} in {}", path.display()))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("parse {line:?}"))
}

/// CPU seconds (user + system) process `pid` has used so far, from `/proc/PID/stat`; 0 when it
/// is gone.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / clock_ticks_per_second()
}

/// CPU seconds used so far by every process whose command name is `name` (`postgres`,
/// `redis-server`).
pub(crate) fn cpu_seconds_of(name: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .map(cpu_seconds)
        .sum()
}

/// `sysconf(_SC_CLK_TCK)`: 100 on Linux for every architecture this runs on.
fn clock_ticks_per_second() -> f64 {
    100.0
}

/// The value of the unlabelled sample `name` in a Prometheus text page (`name value` on a line
/// of its own); 0 when the page has none.
fn sample(page: &str, name: &str) -> f64 {
    page.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_read_by_its_exact_name() {
        let page = "# HELP outbox_events_dispatched_total Events.\n# TYPE outbox_events_dispatched_total counter\noutbox_events_dispatched_total 3487\noutbox_dispatch_batch_seconds{quantile=\"0.5\"} 0.0016\noutbox_dispatch_batch_seconds_count 2477\n";
        assert_eq!(sample(page, "outbox_events_dispatched_total"), 3487.0);
        assert_eq!(sample(page, "outbox_dispatch_batch_seconds_count"), 2477.0);
        assert_eq!(
            sample(page, "outbox_dispatch_batch_seconds"),
            0.0,
            "labelled lines and longer names are other samples"
        );
        assert_eq!(sample(page, "outbox_missing_total"), 0.0);
    }
}
