//! RSS section: the resident memory of a real `outbox run --dispatcher-only` process (the
//! `outbox` binary next to `outbox-bench`) while it dispatches `--rss-events` pre-inserted
//! events: `VmRSS` from `/proc/PID/status` sampled as it goes, reported at 10 %, 50 % and 100 %
//! of the events done, and the peak (`VmHWM`). Flat means the last is not much above the first.
//! The bench only starts, watches and stops the process; it trims the queue stream (which nobody
//! consumes here) so Redis memory stays bounded, which the host's memory does not depend on.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::{Config, Settings};
use outbox_host::queue::QueueKeys;
use redis::streams::StreamMaxlen;
use redis::AsyncCommands as _;
use sqlx::PgPool;

use crate::common::{clear_redis, prepare, redis_connection};
use crate::host_process::{outbox_binary, HostProcess};
use crate::report::Report;
use crate::Args;

/// The queue `mail.welcome` events route to with the default `routes.toml`; trimmed while the
/// process runs.
const QUEUE: &str = "outbox.mail";

/// Stream entries kept when trimming [`QUEUE`].
const TRIM_TO: usize = 10_000;

/// How often memory and progress are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// One sample: events done so far and the process's resident memory in kB.
#[derive(Clone, Copy)]
struct Sample {
    /// Events recorded `done`.
    done: i64,
    /// `VmRSS` in kB.
    rss_kb: u64,
}

/// Spawn `outbox run --dispatcher-only` on `--rss-events` events and report its memory.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    let n = args.rss_events;
    anyhow::ensure!(n >= 10, "--rss-events must be at least 10");
    let Some(exe) = outbox_binary()? else {
        report.skip(
            "rss",
            "host memory",
            "the outbox binary is not next to outbox-bench: build it (cargo build --release -p outbox-cli)".to_string(),
        );
        return Ok(());
    };
    report.say(format_args!(
        "host memory: {} run --dispatcher-only, {n} pre-inserted mail.welcome events, batch {}",
        exe.display(),
        settings.dispatch_batch_size
    ));
    let filled = Instant::now();
    prepare(pool, settings, n).await?;
    report.say(format_args!(
        "  {n} events inserted in {:.1} s",
        filled.elapsed().as_secs_f64()
    ));

    let mut host = HostProcess::spawn(&exe, config.path.as_deref(), settings)?;
    let result = watch(report, &mut host, pool, settings, n).await;
    let peak_kb = host.status_kb("VmHWM:").unwrap_or(0);
    let tail = host.stderr_tail();
    host.stop().await;
    let samples = match result {
        Ok(samples) => samples,
        Err(e) => {
            return Err(e.context(format!("outbox run (last lines of its stderr):\n{tail}")));
        }
    };
    clear_redis(settings).await?;
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("empty outbox_event after the rss section")?;

    let at = |fraction: f64| -> anyhow::Result<Sample> {
        let threshold = crate::common::ceil_fraction(n, fraction);
        samples
            .iter()
            .find(|s| s.done >= threshold)
            .copied()
            .with_context(|| format!("no sample at {:.0} % of the events", fraction * 100.0))
    };
    let (first, mid, last) = (at(0.1)?, at(0.5)?, at(1.0)?);
    let mb = |kb: u64| kb as f64 / 1024.0;
    report.say(format_args!(
        "  RSS at 10 % ({} events): {:.1} MB, at 50 % ({}): {:.1} MB, at 100 % ({}): {:.1} MB, peak {:.1} MB",
        first.done,
        mb(first.rss_kb),
        mid.done,
        mb(mid.rss_kb),
        last.done,
        mb(last.rss_kb),
        mb(peak_kb)
    ));
    report
        .figure(
            "rss",
            "rss.end",
            format!("host RSS after {n} events (outbox run --dispatcher-only)"),
            mb(last.rss_kb),
            "MB",
        )
        .value_at_most(100.0);
    report
        .figure(
            "rss",
            "rss.growth",
            format!("host RSS at 100 % of {n} events against 10 %"),
            mb(last.rss_kb),
            "MB",
        )
        .against(
            "rss.at_10_percent",
            format!("RSS at 10 % ({} events)", first.done),
            mb(first.rss_kb),
        )
        .ratio_at_most(1.2);
    report.figure(
        "rss",
        "rss.at_50_percent",
        format!("host RSS at 50 % of {n} events"),
        mb(mid.rss_kb),
        "MB",
    );
    report.figure(
        "rss",
        "rss.peak",
        "host peak RSS (VmHWM)",
        mb(peak_kb),
        "MB",
    );
    Ok(())
}

/// Sample memory and progress until all `n` events are done.
async fn watch(
    report: &Report,
    host: &mut HostProcess,
    pool: &PgPool,
    settings: &Settings,
    n: i64,
) -> anyhow::Result<Vec<Sample>> {
    let stream =
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(QUEUE);
    let mut redis = redis_connection(settings).await?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(3600);
    let mut samples = Vec::new();
    let mut next_progress = 0.1;
    let mut last_trim = Instant::now();
    loop {
        host.ensure_running()?;
        let rss_kb = host.status_kb("VmRSS:").context("read VmRSS")?;
        let remaining: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_event WHERE status IN ('pending', 'processing')",
        )
        .fetch_one(pool)
        .await
        .context("count the events not done")?;
        let done = n - remaining;
        samples.push(Sample { done, rss_kb });
        if done as f64 >= n as f64 * next_progress {
            report.say(format_args!(
                "  {:>3.0} %: {done} events done after {:.1} s, RSS {:.1} MB",
                next_progress * 100.0,
                start.elapsed().as_secs_f64(),
                rss_kb as f64 / 1024.0
            ));
            while done as f64 >= n as f64 * next_progress {
                next_progress += 0.1;
            }
        }
        if done >= n {
            return Ok(samples);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {done} of {n} events done after an hour"
        );
        if last_trim.elapsed() >= Duration::from_secs(1) {
            let _: i64 = redis
                .xtrim(&stream, StreamMaxlen::Approx(TRIM_TO))
                .await
                .with_context(|| format!("trim {stream}"))?;
            last_trim = Instant::now();
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}
