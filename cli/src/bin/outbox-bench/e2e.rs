//! End-to-end section: `--e2e-events` pre-inserted `bench.` events routed (prefix-router plugin)
//! to the queue of the echo handler, one production [`Host`] (dispatcher and receivers, as
//! `outbox run` assembles them) started in the bench process and timed from its start until
//! every event has an `ok` receipt; the dispatch-only time of the same run; and graphile-worker
//! 0.18 (`bench/graphile-worker`, run with `node`) draining the same number of committed no-op
//! jobs with concurrency 10. The bench only starts the host and watches the receipts; it never
//! dispatches or handles an event itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::{Config, RoutesFile, Settings};
use outbox_host::Host;
use serde::Deserialize;
use sqlx::PgPool;

use crate::common::{clear_receiver_state, prepare_typed, BENCH_ROUTES};
use crate::report::Report;
use crate::Args;
use outbox_host::numeric;

/// The router plugin of the end-to-end run (the one `routes.toml` names).
const ROUTER_PLUGIN: &str = "prefix-router";

/// Where the graphile-worker baseline lives, from the repository root.
const GRAPHILE_WORKER_DIR: &str = "bench/graphile-worker";

/// What the host's run measured.
pub(crate) struct HostRun {
    /// Seconds of `Host::builder()...start()` (connect, migrate, compile plugins).
    pub(crate) start: f64,
    /// Seconds from the start call until the dispatcher had recorded every event `done`.
    pub(crate) dispatched: f64,
    /// Seconds from the start call until the first `ok` receipt.
    pub(crate) first_receipt: f64,
    /// Seconds from the start call until the last `ok` receipt.
    pub(crate) total: f64,
}

/// The graphile-worker script's one JSON line.
#[derive(Deserialize)]
pub(crate) struct GraphileWorkerRun {
    /// graphile-worker's version as installed.
    pub(crate) version: String,
    /// Jobs drained.
    pub(crate) jobs: i64,
    /// Jobs per second, from the worker's start call (`--warm`: from the jobs' COMMIT) until
    /// the job table was empty.
    pub(crate) jobs_per_second: f64,
    /// Milliseconds from the start call (`--warm`: the COMMIT) until the first job succeeded.
    pub(crate) first_job_ms: Option<f64>,
    /// The preset that ran (`defaults`, `performance`).
    #[serde(default)]
    pub(crate) preset: Option<String>,
    /// Jobs run at once.
    #[serde(default)]
    pub(crate) concurrency: Option<u64>,
    /// Whether graphile-worker started its local queue (the performance preset's batching).
    #[serde(default)]
    pub(crate) local_queue_started: Option<bool>,
    /// CPU µs of the node process per job over the timed window.
    #[serde(default)]
    pub(crate) cpu_us_per_job: Option<f64>,
    /// CPU µs of every PostgreSQL process per job over the timed window.
    #[serde(default)]
    pub(crate) postgres_cpu_us_per_job: Option<f64>,
    /// WAL bytes PostgreSQL wrote per job over the timed window (see the bench's `work`).
    #[serde(default)]
    pub(crate) wal_bytes_per_job: Option<f64>,
}

/// The host end to end, graphile-worker on the same workload, and their ratio.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    let n = args.e2e_events;
    anyhow::ensure!(n > 0, "--e2e-events must be at least 1");
    report.say(format_args!(
        "end to end: {n} pre-inserted bench.echo events -> {ROUTER_PLUGIN} -> outbox.bench-echo -> echo handler, one Host (dispatcher + receivers, batch {}), until every receipt is written",
        settings.dispatch_batch_size
    ));
    let mut best: Option<HostRun> = None;
    for round in 1..=args.rounds {
        let run = host_end_to_end(pool, settings, n).await?;
        report.say(format_args!(
            "  round {round}: host start {:.0} ms, first receipt after {:.0} ms, all dispatched after {:.2} s ({:.0} events/s), all receipts after {:.2} s ({:.0} events/s)",
            run.start * 1e3,
            run.first_receipt * 1e3,
            run.dispatched,
            n as f64 / run.dispatched,
            run.total,
            n as f64 / run.total
        ));
        if best.as_ref().is_none_or(|b| run.total < b.total) {
            best = Some(run);
        }
    }
    let best = best.context("--rounds must be at least 1")?;
    let host_rate = n as f64 / best.total;

    let graphile = graphile_worker(args, report, settings, n).await;
    let figure = report.figure(
        "e2e",
        "e2e.host",
        format!("end to end, {n} events: dispatch + echo handler + receipt"),
        host_rate,
        "events/s",
    );
    if let Some(gw) = &graphile {
        figure
            .against(
                "e2e.graphile_worker",
                format!(
                    "graphile-worker {} (concurrency 10, no-op task), {} jobs",
                    gw.version, gw.jobs
                ),
                gw.jobs_per_second,
            )
            .ratio_at_least(4.0);
    }
    report
        .figure(
            "e2e",
            "e2e.host_vs_dispatch",
            "end to end against dispatch alone (same run)",
            host_rate,
            "events/s",
        )
        .against(
            "e2e.dispatch_only",
            "all events dispatched (same run)",
            n as f64 / best.dispatched,
        );
    let first = report.figure(
        "e2e",
        "e2e.first_receipt",
        "time to the first receipt, from the host's start call",
        best.first_receipt * 1e3,
        "ms",
    );
    if let Some(first_job_ms) = graphile.as_ref().and_then(|gw| gw.first_job_ms) {
        first.against(
            "e2e.graphile_worker_first_job",
            "graphile-worker: first job done, from its start call",
            first_job_ms,
        );
    }
    report.figure(
        "e2e",
        "e2e.host_start",
        "host start (connect, migrate, compile plugins, start tasks)",
        best.start * 1e3,
        "ms",
    );
    Ok(())
}

/// One host from its start call until every one of `n` pre-inserted events has an `ok` receipt.
pub(crate) async fn host_end_to_end(
    pool: &PgPool,
    settings: &Settings,
    n: i64,
) -> anyhow::Result<HostRun> {
    prepare_typed(pool, settings, n, "bench.echo").await?;
    clear_receiver_state(pool, settings).await?;
    let text = format!(
        "{BENCH_ROUTES}\n[router]\nplugin = \"{ROUTER_PLUGIN}\"\n\n[plugins.{ROUTER_PLUGIN}]\n"
    );
    let routes = RoutesFile::parse(&text, Path::new("<outbox-bench end-to-end routes>"))?;
    let config = Config {
        path: None,
        routes,
        settings: settings.clone(),
    };

    let start = Instant::now();
    let host = Host::builder()
        .config(config)
        .pool(pool.clone())
        .worker_id("bench-e2e")
        .dispatcher_enabled(true)
        .receivers_enabled(true)
        .start()
        .await
        .context("start the host")?;
    let started = start.elapsed().as_secs_f64();
    let result = watch_receipts(&host, pool, n, start).await;
    host.shutdown().await;
    let (dispatched, first_receipt, total) = result?;
    Ok(HostRun {
        start: started,
        dispatched,
        first_receipt,
        total,
    })
}

/// Poll until `n` `ok` receipts exist: seconds since `start` until everything was dispatched,
/// until the first receipt and until the last.
async fn watch_receipts(
    host: &Host,
    pool: &PgPool,
    n: i64,
    start: Instant,
) -> anyhow::Result<(f64, f64, f64)> {
    let router = host.router().current();
    anyhow::ensure!(
        router.name() == ROUTER_PLUGIN,
        "the {ROUTER_PLUGIN} plugin did not load (router {}): run scripts/build-plugins.sh",
        router.name()
    );
    let stats = host
        .dispatcher()
        .context("the host runs no dispatcher")?
        .stats();
    let receivers = host
        .receivers()
        .context("the host runs no receivers for outbox.bench-echo")?;
    let deadline = start + Duration::from_secs(600);
    let mut dispatched = None;
    let mut first_receipt = None;
    let mut last_check = Instant::now();
    loop {
        if dispatched.is_none() && stats.done.load(Ordering::Relaxed) >= numeric::count(n) {
            dispatched = Some(start.elapsed().as_secs_f64());
        }
        // The receipt writer's own count of committed receipts is watched while it runs (a
        // count(*) of the growing table every few ms would load the database being measured);
        // the table itself is counted once a second and once the writer says every receipt is
        // in, and only the table's count ends the run.
        let written = receivers.receipts_written();
        let now = start.elapsed().as_secs_f64();
        if written > 0 && first_receipt.is_none() {
            first_receipt = Some(now);
        }
        if written >= numeric::count(n) || last_check.elapsed() >= Duration::from_secs(1) {
            last_check = Instant::now();
            let (receipts, not_ok): (i64, i64) = sqlx::query_as(
                "SELECT count(*), count(*) FILTER (WHERE result <> 'ok') FROM outbox_receipt",
            )
            .fetch_one(pool)
            .await
            .context("count receipts")?;
            anyhow::ensure!(
                not_ok == 0,
                "{not_ok} receipts other than ok ({receipts} receipts of {n} events)"
            );
            if receipts >= n {
                let dispatched = dispatched.unwrap_or(now);
                return Ok((dispatched, first_receipt.unwrap_or(now), now));
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {written} of {n} receipts after 600 s ({} dispatched)",
            stats.done.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Run the graphile-worker baseline on `n` jobs, or say why it was skipped.
async fn graphile_worker(
    args: &Args,
    report: &mut Report,
    settings: &Settings,
    n: i64,
) -> Option<GraphileWorkerRun> {
    let database = format!("{}_gw", args.database);
    report.say(format_args!(
        "  graphile-worker: {n} jobs committed in one transaction (graphile_worker.add_jobs) in database {database}, concurrency 10, no-op task, logging off"
    ));
    drain(
        report,
        "e2e",
        "graphile-worker baseline",
        settings,
        &database,
        n,
        &[],
    )
    .await
}

/// Run `bench/graphile-worker/drain.mjs` on `n` jobs in `database` with `extra` arguments; its
/// JSON line, or `None` after recording in `section` why `what` was skipped.
pub(crate) async fn drain(
    report: &mut Report,
    section: &'static str,
    what: &str,
    settings: &Settings,
    database: &str,
    n: i64,
    extra: &[&str],
) -> Option<GraphileWorkerRun> {
    let dir = PathBuf::from(GRAPHILE_WORKER_DIR);
    if !dir.join("node_modules").join("graphile-worker").is_dir() {
        report.skip(
            section,
            what,
            format!("{GRAPHILE_WORKER_DIR}/node_modules is missing: run `npm ci` there (scripts/bench.sh does) from the repository root"),
        );
        return None;
    }
    let output = tokio::process::Command::new("node")
        .arg("drain.mjs")
        .arg("--jobs")
        .arg(n.to_string())
        .arg("--database")
        .arg(database)
        .args(extra)
        .current_dir(&dir)
        .env("DATABASE_URL", &settings.database_url)
        .kill_on_drop(true)
        .output()
        .await;
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            report.skip(section, what, format!("cannot run `node`: {e}"));
            return None;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let parsed = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .map(serde_json::from_str::<GraphileWorkerRun>);
    match (output.status.success(), parsed) {
        (true, Some(Ok(run))) if run.jobs == n => {
            report.say(format_args!(
                "  graphile-worker {}: {:.0} jobs/s",
                run.version, run.jobs_per_second
            ));
            Some(run)
        }
        (status_ok, parsed) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            let why = match (status_ok, parsed) {
                (false, _) => format!("node exited with {}", output.status),
                (true, Some(Err(e))) => format!("its output is not the expected JSON line: {e}"),
                (true, Some(Ok(run))) => format!("it drained {} jobs, not {n}", run.jobs),
                (true, None) => "it printed nothing".to_string(),
            };
            report.skip(
                section,
                what,
                format!(
                    "failed: {why}; stderr: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ),
            );
            None
        }
    }
}
