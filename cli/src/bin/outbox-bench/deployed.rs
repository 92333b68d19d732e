//! Deployed section: the `outbox` binary as it is deployed, timed from outside. The repository's
//! shipped `routes.toml` with one addition (`bench.` events to `outbox.bench-echo`, handled by
//! the echo test plugin), the shipped plugins and everything else as shipped (router plugin,
//! capability policy, alerts, gauges, the HTTP listener with the console), run as `outbox run`
//! next to `outbox-bench`. The bench starts the process, waits for `/readyz` (start-up is not
//! timed), commits events and watches the tables and the queue; it never dispatches or handles
//! an event itself. Every run starts on a freshly created database and an empty Redis prefix.
//!
//! - end to end: `--deployed-events` `bench.echo` events committed in one transaction into the
//!   idle full `outbox run`, timed from that COMMIT until the last `ok` receipt; against
//!   graphile-worker 0.18 timed the same way (its worker idle first, then the jobs committed),
//!   with its performance preset and with its defaults.
//! - dispatch: `outbox run --dispatcher-only`, batch 1000 and 100, `--deployed-dispatch-events`
//!   events over four types the shipped routes send to four queues, committed in one
//!   transaction, timed until every one is `done`; against the dispatch section's SQL limit on
//!   as many rows at the same batch.
//! - latency: the full `outbox run`, one event per transaction at 1000/s and 5000/s, commit to
//!   queue entry read from the stream as the latency section reads it.
//!
//! CPU per event is read from `/proc`: the `outbox` process, and every `postgres` and
//! `redis-server` process on the machine (the bench's own few polling queries included).

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::{RoutesFile, Settings};
use outbox_host::queue::{QueueEntry, QueueKeys};
use outbox_host::{numeric, publish, store, NewEvent};
use redis::AsyncCommands as _;
use sqlx::PgPool;

use crate::common::{
    clear_redis, percentile_index, recreate_database, redis_connection, BENCH_QUEUE,
};
use crate::dispatch::sql_limit;
use crate::e2e::{drain, GraphileWorkerRun};
use crate::host_process::{cpu_seconds, cpu_seconds_of, outbox_binary, HostProcess, RunOptions};
use crate::report::Report;
use crate::Args;

const SECTION: &str = "deployed";

/// The configuration the repository ships, from its root.
const SHIPPED_ROUTES: &str = "routes.toml";

/// The handler plugin added for the bench queue, and its file under the plugin directory.
const ECHO_PLUGIN: &str = "echo-handler";
const ECHO_PLUGIN_FILE: &str = "test/echo-handler.wasm";

/// Event types of the dispatch runs, round-robin: the shipped routes send them to four queues
/// (`outbox.mail`, `outbox.webhook`, `outbox.audit`, `outbox.search-index`).
const DISPATCH_TYPES: [&str; 4] = [
    "mail.deployed",
    "webhook.deployed",
    "audit.deployed",
    "search.index.deployed",
];

/// How long a timed run may take before it fails.
const RUN_DEADLINE: Duration = Duration::from_secs(600);

/// How long the host may take to answer `/readyz`.
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// A dispatch batch size and its figure keys.
struct DispatchCase {
    batch: i64,
    key: &'static str,
    baseline_key: &'static str,
    cpu_key: &'static str,
}

const DISPATCH_CASES: [DispatchCase; 2] = [
    DispatchCase {
        batch: 1000,
        key: "deployed.dispatch_b1000",
        baseline_key: "deployed.sql_limit_b1000",
        cpu_key: "deployed.dispatch_b1000_host_cpu",
    },
    DispatchCase {
        batch: 100,
        key: "deployed.dispatch_b100",
        baseline_key: "deployed.sql_limit_b100",
        cpu_key: "deployed.dispatch_b100_host_cpu",
    },
];

/// An offered load of the latency runs, its goals and its figure keys.
struct LatencyCase {
    rate: u64,
    p50_goal_ms: f64,
    p99_goal_ms: f64,
    p50_key: &'static str,
    p99_key: &'static str,
    cpu_key: &'static str,
}

const LATENCY_CASES: [LatencyCase; 2] = [
    LatencyCase {
        rate: 1000,
        p50_goal_ms: 1.0,
        p99_goal_ms: 5.0,
        p50_key: "deployed.latency_1000_p50",
        p99_key: "deployed.latency_1000_p99",
        cpu_key: "deployed.latency_1000_host_cpu",
    },
    LatencyCase {
        rate: 5000,
        p50_goal_ms: 2.0,
        p99_goal_ms: 10.0,
        p50_key: "deployed.latency_5000_p50",
        p99_key: "deployed.latency_5000_p99",
        cpu_key: "deployed.latency_5000_host_cpu",
    },
];

/// The shipped configuration with the bench queue added, and a plugin directory holding the
/// shipped plugins and the echo handler; removed when dropped.
struct Deployment {
    dir: PathBuf,
    config_path: PathBuf,
    plugin_dir: PathBuf,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// CPU seconds used so far by the host process, PostgreSQL and Redis.
#[derive(Clone, Copy)]
struct Cpu {
    host: f64,
    postgres: f64,
    redis: f64,
}

impl Cpu {
    fn now(pid: u32) -> Self {
        Self {
            host: cpu_seconds(pid),
            postgres: cpu_seconds_of("postgres"),
            redis: cpu_seconds_of("redis-server"),
        }
    }

    /// CPU µs per event of each since `before`, over `n` events.
    fn per_event_since(self, before: Self, n: i64) -> Self {
        let per = |after: f64, before: f64| (after - before) * 1e6 / numeric::signed_figure(n);
        Self {
            host: per(self.host, before.host),
            postgres: per(self.postgres, before.postgres),
            redis: per(self.redis, before.redis),
        }
    }
}

/// One timed run: seconds from the COMMIT to the end, and CPU µs per event over that window.
struct Timed {
    seconds: f64,
    cpu: Cpu,
}

/// One latency run.
struct LatencyRun {
    p50: f64,
    p99: f64,
    max: f64,
    /// Events committed per second, as achieved.
    achieved: f64,
    events: usize,
    cpu: Cpu,
}

/// End to end, dispatch and latency of the deployed binary, and their baselines.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    settings: &Settings,
) -> anyhow::Result<()> {
    let Some(exe) = outbox_binary()? else {
        report.skip(
            SECTION,
            "the deployed binary",
            "the outbox binary is not next to outbox-bench: build it (cargo build --release -p outbox-cli)",
        );
        return Ok(());
    };
    anyhow::ensure!(
        args.deployed_events > 0,
        "--deployed-events must be at least 1"
    );
    anyhow::ensure!(
        args.deployed_dispatch_events >= 4,
        "--deployed-dispatch-events must be at least 4"
    );
    anyhow::ensure!(args.rounds >= 1, "--rounds must be at least 1");
    let deployment = deployment(settings)?;
    let database = format!("{}_deployed", args.database);
    report.say(format_args!(
        "deployed: {} as shipped ({SHIPPED_ROUTES} + \"bench.\" = \"{BENCH_QUEUE}\" handled by {ECHO_PLUGIN}; plugins from {}), database {database}, HTTP on, timed from the COMMIT of the events",
        exe.display(),
        settings.plugin_dir.display()
    ));
    end_to_end(args, report, settings, &exe, &deployment, &database).await?;
    dispatch(args, report, settings, &exe, &deployment, &database).await?;
    latency(args, report, settings, &exe, &deployment, &database).await?;
    clear_redis(settings).await?;
    Ok(())
}

/// `deployed.e2e` against graphile-worker's performance preset and its defaults.
async fn end_to_end(
    args: &Args,
    report: &mut Report,
    settings: &Settings,
    exe: &Path,
    deployment: &Deployment,
    database: &str,
) -> anyhow::Result<()> {
    let n = args.deployed_events;
    report.say(format_args!(
        "  end to end: {n} bench.echo events committed in one transaction into an idle `outbox run` (dispatcher + receivers, batch as configured), until every ok receipt"
    ));
    let mut best: Option<Timed> = None;
    for round in 1..=args.rounds {
        let (pool, bench) = fresh_database(settings, database).await?;
        let host = start_host(exe, deployment, &bench, &pool, false, None).await;
        let result = match host {
            Ok(mut host) => {
                let result = e2e_timed(&mut host, &pool, n).await;
                stop_host(host, result).await
            }
            Err(e) => Err(e),
        };
        pool.close().await;
        let run = result?;
        report.say(format_args!(
            "    round {round}: {:.2} s, {:.0} events/s; CPU µs/event: host {:.1}, PostgreSQL {:.1}, Redis {:.1}",
            run.seconds,
            numeric::signed_figure(n) / run.seconds,
            run.cpu.host,
            run.cpu.postgres,
            run.cpu.redis
        ));
        if best.as_ref().is_none_or(|b| run.seconds < b.seconds) {
            best = Some(run);
        }
    }
    let best = best.context("no end-to-end round ran")?;
    let rate = numeric::signed_figure(n) / best.seconds;

    let gw_database = format!("{}_gw", args.database);
    let preset = graphile_worker(args, report, settings, &gw_database, n, "performance").await;
    let defaults = graphile_worker(args, report, settings, &gw_database, n, "defaults").await;

    let name = format!(
        "deployed end to end, {n} events committed at once: outbox run (dispatch + echo handler + receipt)"
    );
    let figure = report.figure(
        SECTION,
        "deployed.e2e_vs_preset",
        name.clone(),
        rate,
        "events/s",
    );
    if let Some(gw) = &preset {
        figure
            .against("deployed.gw_preset", gw_name(gw), gw.jobs_per_second)
            .ratio_at_least(1.0);
    } else {
        figure.ratio_at_least(1.0);
    }
    let figure = report.figure(SECTION, "deployed.e2e_vs_defaults", name, rate, "events/s");
    if let Some(gw) = &defaults {
        figure
            .against("deployed.gw_defaults", gw_name(gw), gw.jobs_per_second)
            .ratio_at_least(4.0);
    } else {
        figure.ratio_at_least(4.0);
    }
    let figure = report.figure(
        SECTION,
        "deployed.e2e_host_cpu",
        "deployed end to end: outbox process CPU per event",
        best.cpu.host,
        "µs/event",
    );
    if let Some(cpu) = preset.as_ref().and_then(|gw| gw.cpu_us_per_job) {
        figure.against(
            "deployed.gw_preset_cpu",
            "graphile-worker (performance preset): node CPU per job",
            cpu,
        );
    }
    let figure = report.figure(
        SECTION,
        "deployed.e2e_postgres_cpu",
        "deployed end to end: PostgreSQL CPU per event",
        best.cpu.postgres,
        "µs/event",
    );
    if let Some(cpu) = preset.as_ref().and_then(|gw| gw.postgres_cpu_us_per_job) {
        figure.against(
            "deployed.gw_preset_postgres_cpu",
            "graphile-worker (performance preset): PostgreSQL CPU per job",
            cpu,
        );
    }
    report.figure(
        SECTION,
        "deployed.e2e_redis_cpu",
        "deployed end to end: Redis CPU per event",
        best.cpu.redis,
        "µs/event",
    );
    Ok(())
}

/// What a graphile-worker run was, in words.
fn gw_name(gw: &GraphileWorkerRun) -> String {
    format!(
        "graphile-worker {} ({} preset, concurrency {}{}), warm, {} jobs",
        gw.version,
        gw.preset.as_deref().unwrap_or("?"),
        gw.concurrency.unwrap_or(0),
        match gw.local_queue_started {
            Some(true) => ", local queue 500, complete batching",
            _ => "",
        },
        gw.jobs
    )
}

/// The best of `--rounds` warm graphile-worker runs of `preset` on `n` jobs.
async fn graphile_worker(
    args: &Args,
    report: &mut Report,
    settings: &Settings,
    database: &str,
    n: i64,
    preset: &str,
) -> Option<GraphileWorkerRun> {
    let what = format!("graphile-worker baseline ({preset} preset)");
    let mut best: Option<GraphileWorkerRun> = None;
    for round in 1..=args.rounds {
        let run = drain(
            report,
            SECTION,
            &what,
            settings,
            database,
            n,
            &["--warm", "--preset", preset],
        )
        .await?;
        if preset == "performance" && run.local_queue_started != Some(true) {
            report.skip(
                SECTION,
                what,
                "graphile-worker did not start its local queue: the performance preset did not take effect",
            );
            return None;
        }
        report.say(format_args!(
            "    graphile-worker {} {preset} (concurrency {}), round {round}: {:.0} jobs/s; CPU µs/job: node {:.1}, PostgreSQL {:.1}",
            run.version,
            run.concurrency.unwrap_or(0),
            run.jobs_per_second,
            run.cpu_us_per_job.unwrap_or(f64::NAN),
            run.postgres_cpu_us_per_job.unwrap_or(f64::NAN)
        ));
        if best
            .as_ref()
            .is_none_or(|b| run.jobs_per_second > b.jobs_per_second)
        {
            best = Some(run);
        }
    }
    best
}

/// `deployed.dispatch_b1000` and `deployed.dispatch_b100` against the SQL limit.
async fn dispatch(
    args: &Args,
    report: &mut Report,
    settings: &Settings,
    exe: &Path,
    deployment: &Deployment,
    database: &str,
) -> anyhow::Result<()> {
    let n = args.deployed_dispatch_events;
    report.say(format_args!(
        "  dispatch: {n} events over {} committed in one transaction into an idle `outbox run --dispatcher-only`, until every one is done",
        DISPATCH_TYPES.join(", ")
    ));
    for case in &DISPATCH_CASES {
        let mut best_limit = 0f64;
        let mut best: Option<Timed> = None;
        for round in 1..=args.rounds {
            let (pool, _) = fresh_database(settings, database).await?;
            insert_dispatch_events(&pool, n).await?;
            sqlx::query("VACUUM ANALYZE outbox_event")
                .execute(&pool)
                .await
                .context("vacuum outbox_event")?;
            let limit = sql_limit(&pool, case.batch, n).await;
            pool.close().await;
            let limit = limit?;

            let (pool, bench) = fresh_database(settings, database).await?;
            let result =
                match start_host(exe, deployment, &bench, &pool, true, Some(case.batch)).await {
                    Ok(mut host) => {
                        let result = dispatch_timed(&mut host, &pool, n).await;
                        stop_host(host, result).await
                    }
                    Err(e) => Err(e),
                };
            pool.close().await;
            let run = result?;
            let rate = numeric::signed_figure(n) / run.seconds;
            report.say(format_args!(
                "    batch {}, round {round}: SQL limit {limit:.0} events/s | outbox run --dispatcher-only {rate:.0} events/s ({:.2} s); CPU µs/event: host {:.1}, PostgreSQL {:.1}, Redis {:.1}",
                case.batch, run.seconds, run.cpu.host, run.cpu.postgres, run.cpu.redis
            ));
            best_limit = best_limit.max(limit);
            if best.as_ref().is_none_or(|b| run.seconds < b.seconds) {
                best = Some(run);
            }
        }
        let best = best.context("no dispatch round ran")?;
        report
            .figure(
                SECTION,
                case.key,
                format!(
                    "deployed dispatch, batch {}, {n} events committed at once over 4 queues",
                    case.batch
                ),
                numeric::signed_figure(n) / best.seconds,
                "events/s",
            )
            .against(
                case.baseline_key,
                format!(
                    "SQL limit (one client: claim with payloads + mark done), batch {}",
                    case.batch
                ),
                best_limit,
            )
            .ratio_at_least(0.8);
        report.figure(
            SECTION,
            case.cpu_key,
            format!(
                "deployed dispatch, batch {}: outbox process CPU per event",
                case.batch
            ),
            best.cpu.host,
            "µs/event",
        );
    }
    Ok(())
}

/// Commit-to-queue latency of the full `outbox run` at each offered load.
async fn latency(
    args: &Args,
    report: &mut Report,
    settings: &Settings,
    exe: &Path,
    deployment: &Deployment,
    database: &str,
) -> anyhow::Result<()> {
    for case in &LATENCY_CASES {
        let events = usize::try_from(case.rate.saturating_mul(args.deployed_latency_seconds))
            .context("--deployed-latency-seconds is too large")?;
        anyhow::ensure!(events > 0, "--deployed-latency-seconds must be at least 1");
        let (pool, bench) = fresh_database(settings, database).await?;
        let result = match start_host(exe, deployment, &bench, &pool, false, None).await {
            Ok(mut host) => {
                let result = latency_timed(&mut host, &pool, &bench, case.rate, events).await;
                stop_host(host, result).await
            }
            Err(e) => Err(e),
        };
        pool.close().await;
        let run = result?;
        report.say(format_args!(
            "  latency at {} events/s offered ({} events of bench.echo, one per transaction, achieved {:.0}/s, full `outbox run`): commit to queue entry p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; CPU µs/event: host {:.1}, PostgreSQL {:.1}, Redis {:.1}",
            case.rate, run.events, run.achieved, run.p50, run.p99, run.max, run.cpu.host, run.cpu.postgres, run.cpu.redis
        ));
        // The producers may fall short of the offered load on a busy machine: the figures say
        // what was reached.
        let at = format!(
            "at {} events/s offered ({:.0}/s reached), one per transaction",
            case.rate, run.achieved
        );
        if run.achieved < 0.9 * numeric::figure(case.rate) {
            report.say(format_args!(
                "    note: the producers reached {:.0} of {} events/s offered; the latency figures are at that rate",
                run.achieved, case.rate
            ));
        }
        report
            .figure(
                SECTION,
                case.p50_key,
                format!("deployed commit-to-queue latency p50 {at}"),
                run.p50,
                "ms",
            )
            .value_at_most(case.p50_goal_ms);
        report
            .figure(
                SECTION,
                case.p99_key,
                format!("deployed commit-to-queue latency p99 {at}"),
                run.p99,
                "ms",
            )
            .value_at_most(case.p99_goal_ms);
        report.figure(
            SECTION,
            case.cpu_key,
            format!("deployed {at}: outbox process CPU per event (dispatch, handler, receipt)"),
            run.cpu.host,
            "µs/event",
        );
    }
    Ok(())
}

/// The shipped `routes.toml` plus the bench queue, written to a temporary directory with a
/// plugin directory of the shipped plugins and the echo handler.
fn deployment(settings: &Settings) -> anyhow::Result<Deployment> {
    let text = std::fs::read_to_string(SHIPPED_ROUTES).with_context(|| {
        format!("read the shipped {SHIPPED_ROUTES} (run the bench from the repository root)")
    })?;
    let mut doc: toml::Table = text
        .parse()
        .with_context(|| format!("parse {SHIPPED_ROUTES}"))?;
    table_mut(&mut doc, "routes")?.insert("bench.".into(), BENCH_QUEUE.into());
    table_mut(&mut doc, "handlers")?.insert(BENCH_QUEUE.into(), ECHO_PLUGIN.into());
    table_mut(&mut doc, "plugins")?.insert(ECHO_PLUGIN.into(), toml::Table::new().into());
    // Consumed with every group (`outbox run` without --queue-group) and with `general`.
    if let Some(general) = table_mut(&mut doc, "queue_groups")?
        .get_mut("general")
        .and_then(toml::Value::as_array_mut)
    {
        general.push(BENCH_QUEUE.into());
    }
    let plugins: Vec<String> = doc
        .get("plugins")
        .and_then(toml::Value::as_table)
        .map(|t| {
            t.iter()
                .filter(|(_, v)| v.get("file").is_none())
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    let written = toml::to_string(&doc).context("write the deployed configuration")?;

    let dir = std::env::temp_dir().join(format!("outbox-bench-deployed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let plugin_dir = dir.join("plugins");
    std::fs::create_dir_all(&plugin_dir)
        .with_context(|| format!("create {}", plugin_dir.display()))?;
    let deployment = Deployment {
        config_path: dir.join("routes.toml"),
        plugin_dir,
        dir,
    };
    RoutesFile::parse(&written, &deployment.config_path)
        .context("the shipped routes.toml with the bench queue added does not validate")?;
    std::fs::write(&deployment.config_path, &written)
        .with_context(|| format!("write {}", deployment.config_path.display()))?;

    let shipped = &settings.plugin_dir;
    let entries = std::fs::read_dir(shipped)
        .with_context(|| format!("read {} (run scripts/build-plugins.sh)", shipped.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            if let Some(name) = path.file_name() {
                std::fs::copy(&path, deployment.plugin_dir.join(name))
                    .with_context(|| format!("copy {}", path.display()))?;
            }
        }
    }
    let echo = shipped.join(ECHO_PLUGIN_FILE);
    std::fs::copy(
        &echo,
        deployment.plugin_dir.join(format!("{ECHO_PLUGIN}.wasm")),
    )
    .with_context(|| {
        format!(
            "copy {} (run scripts/build-plugins.sh, test plugins included)",
            echo.display()
        )
    })?;
    for name in plugins {
        let file = deployment.plugin_dir.join(format!("{name}.wasm"));
        anyhow::ensure!(
            file.is_file(),
            "plugin {name} of {SHIPPED_ROUTES} is not in {}: run scripts/build-plugins.sh",
            shipped.display()
        );
    }
    Ok(deployment)
}

/// The table `key` of `doc`, created when missing.
fn table_mut<'a>(doc: &'a mut toml::Table, key: &str) -> anyhow::Result<&'a mut toml::Table> {
    doc.entry(key)
        .or_insert(toml::Table::new().into())
        .as_table_mut()
        .with_context(|| format!("[{key}] of {SHIPPED_ROUTES} is not a table"))
}

/// Recreate and migrate the database `name` and empty the bench's Redis prefix: a pool on it,
/// and `settings` pointing there.
async fn fresh_database(settings: &Settings, name: &str) -> anyhow::Result<(PgPool, Settings)> {
    recreate_database(settings, name).await?;
    let mut bench = settings.clone();
    bench.database_url = store::with_database(&settings.database_url, name);
    let pool = store::connect(&bench.database_url, 16)
        .await
        .with_context(|| format!("connect to the database {name}"))?;
    store::migrate(&pool)
        .await
        .with_context(|| format!("migrate the database {name}"))?;
    clear_redis(&bench).await?;
    Ok((pool, bench))
}

/// Start `outbox run` (full, or `--dispatcher-only`) with the deployed configuration and an
/// HTTP listener on a free port, and wait until it is ready: `/readyz` answers 200 and its
/// heartbeat is in `outbox_worker`.
async fn start_host(
    exe: &Path,
    deployment: &Deployment,
    settings: &Settings,
    pool: &PgPool,
    dispatcher_only: bool,
    batch_size: Option<i64>,
) -> anyhow::Result<HostProcess> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("find a free port")?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut host = HostProcess::spawn_with(
        exe,
        settings,
        &RunOptions {
            config_path: Some(&deployment.config_path),
            dispatcher_only,
            http_addr: &addr,
            batch_size,
            plugin_dir: &deployment.plugin_dir,
        },
    )?;
    // The full run is ready once its receiver of the bench queue has made its consumer group
    // (which creates the stream).
    let stream = (!dispatcher_only).then(|| {
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(BENCH_QUEUE)
    });
    match wait_ready(&mut host, &addr, pool, settings, stream.as_deref()).await {
        Ok(()) => Ok(host),
        Err(e) => {
            stop_host(
                host,
                Err(e.context("the outbox process did not become ready")),
            )
            .await
        }
    }
}

/// Poll `/readyz` until 200, then the heartbeat, then (full run) until `stream` exists, then
/// let the host settle.
async fn wait_ready(
    host: &mut HostProcess,
    addr: &str,
    pool: &PgPool,
    settings: &Settings,
    stream: Option<&str>,
) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .context("build the HTTP client")?;
    let url = format!("http://{addr}/readyz");
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        host.ensure_running()?;
        let last = match client.get(&url).send().await {
            Ok(r) if r.status().is_success() => break,
            Ok(r) => format!("status {}", r.status()),
            Err(e) => e.to_string(),
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "{url} did not answer 200 within {} s (last: {last})",
            READY_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        host.ensure_running()?;
        let live: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_worker")
            .fetch_one(pool)
            .await
            .context("read the host's heartbeat")?;
        if live > 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no heartbeat in outbox_worker within {} s",
            READY_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(stream) = stream {
        let mut redis = redis_connection(settings).await?;
        loop {
            host.ensure_running()?;
            let exists: bool = redis
                .exists(stream)
                .await
                .with_context(|| format!("look for {stream}"))?;
            if exists {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "no receiver made {stream} within {} s",
                READY_DEADLINE.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Idle before the clock starts: its first (empty) claims and reads are done.
    tokio::time::sleep(Duration::from_millis(500)).await;
    host.ensure_running()
}

/// Stop `host` (SIGTERM); a failed `result` gets the last lines of its stderr.
async fn stop_host<T>(host: HostProcess, result: anyhow::Result<T>) -> anyhow::Result<T> {
    let tail = host.stderr_tail();
    host.stop().await;
    result.map_err(|e| e.context(format!("outbox run (last lines of its stderr):\n{tail}")))
}

/// Commit `n` `bench.echo` events in one transaction and time until every `ok` receipt.
async fn e2e_timed(host: &mut HostProcess, pool: &PgPool, n: i64) -> anyhow::Result<Timed> {
    let mut tx = pool.begin().await.context("begin")?;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id) SELECT 'bench.echo', jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10) FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(&mut *tx)
    .await
    .context("insert the bench events")?;
    let last: i64 = sqlx::query_scalar("SELECT max(id) FROM outbox_event")
        .fetch_one(&mut *tx)
        .await
        .context("read the last event id")?;
    let before = Cpu::now(host.pid);
    let start = Instant::now();
    tx.commit().await.context("commit the bench events")?;
    let deadline = start + RUN_DEADLINE;
    // Cheap until the last event has its receipt (one primary-key probe), then the count.
    loop {
        host.ensure_running()?;
        let last_done: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM outbox_receipt WHERE event_id = $1)")
                .bind(last)
                .fetch_one(pool)
                .await
                .context("look for the last event's receipt")?;
        if last_done {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the last event had no receipt after {} s",
            RUN_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    loop {
        host.ensure_running()?;
        let (ok, not_ok): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE result = 'ok'), count(*) FILTER (WHERE result <> 'ok') FROM outbox_receipt",
        )
        .fetch_one(pool)
        .await
        .context("count receipts")?;
        anyhow::ensure!(
            not_ok == 0,
            "{not_ok} receipts other than ok ({ok} ok of {n})"
        );
        if ok >= n {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {ok} of {n} ok receipts after {} s",
            RUN_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = Cpu::now(host.pid).per_event_since(before, n);
    Ok(Timed { seconds, cpu })
}

/// Insert `n` events over [`DISPATCH_TYPES`], round-robin, in one statement.
async fn insert_dispatch_events<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    n: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id) SELECT ($2::text[])[1 + g % 4], jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10) FROM generate_series(1, $1) g",
    )
    .bind(n)
    .bind(&DISPATCH_TYPES[..])
    .execute(executor)
    .await
    .context("insert the dispatch events")?;
    Ok(())
}

/// Commit `n` dispatch events in one transaction and time until every one is done.
async fn dispatch_timed(host: &mut HostProcess, pool: &PgPool, n: i64) -> anyhow::Result<Timed> {
    let mut tx = pool.begin().await.context("begin")?;
    insert_dispatch_events(&mut *tx, n).await?;
    let last: i64 = sqlx::query_scalar("SELECT max(id) FROM outbox_event")
        .fetch_one(&mut *tx)
        .await
        .context("read the last event id")?;
    let before = Cpu::now(host.pid);
    let start = Instant::now();
    tx.commit().await.context("commit the dispatch events")?;
    let deadline = start + RUN_DEADLINE;
    // Cheap until the last event is done (one primary-key probe), then the claim index's count.
    loop {
        host.ensure_running()?;
        let last_done: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM outbox_event WHERE id = $1 AND status = 'done')",
        )
        .bind(last)
        .fetch_one(pool)
        .await
        .context("look at the last event")?;
        if last_done {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the last event was not done after {} s",
            RUN_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    loop {
        host.ensure_running()?;
        let remaining: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_event WHERE status IN ('pending', 'processing')",
        )
        .fetch_one(pool)
        .await
        .context("count the events not done")?;
        if remaining == 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{remaining} of {n} events not done after {} s",
            RUN_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = Cpu::now(host.pid).per_event_since(before, n);
    let failed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status <> 'done'")
            .fetch_one(pool)
            .await
            .context("count the events not done")?;
    anyhow::ensure!(failed == 0, "{failed} of {n} events ended other than done");
    Ok(Timed { seconds, cpu })
}

/// Publish `events` `bench.echo` events at `rate`/s, one per transaction (several producers),
/// read the queue stream as the latency section does, and time commit -> stream entry; then
/// wait for every receipt so the CPU window covers the handling too.
async fn latency_timed(
    host: &mut HostProcess,
    pool: &PgPool,
    settings: &Settings,
    rate: u64,
    events: usize,
) -> anyhow::Result<LatencyRun> {
    let stream =
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(BENCH_QUEUE);
    let mut reader = redis_connection(settings).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let reader_stop = stop.clone();
    let reader_task = tokio::spawn(async move {
        let mut seen: HashMap<i64, Instant> = HashMap::with_capacity(events);
        let mut last = "0-0".to_string();
        let opts = redis::streams::StreamReadOptions::default()
            .block(200)
            .count(1000);
        while seen.len() < events && !reader_stop.is_cancelled() {
            let reply: redis::streams::StreamReadReply =
                match reader.xread_options(&[&stream], &[&last], &opts).await {
                    Ok(r) => r,
                    Err(_) => continue,
                };
            let now = Instant::now();
            for key in reply.keys {
                for entry in key.ids {
                    let id = QueueEntry::from_stream(&entry).event_id().unwrap_or(0);
                    seen.insert(id, now);
                    last = entry.id;
                }
            }
        }
        seen
    });

    // One producer per 500 events/s: each commits every 2 ms or so, staggered.
    let producers = u32::try_from(rate.div_ceil(500).max(1)).context("rate too high")?;
    let period =
        Duration::from_nanos(1_000_000_000u64.saturating_mul(u64::from(producers)) / rate.max(1));
    let per_producer = events / usize::try_from(producers)?;
    let extra = events % usize::try_from(producers)?;
    let before = Cpu::now(host.pid);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..producers {
        let pool = pool.clone();
        let index = usize::try_from(p)?;
        let count = per_producer + usize::from(index < extra);
        let offset = period / producers * p;
        tasks.push(tokio::spawn(async move {
            let mut committed: Vec<(i64, Instant)> = Vec::with_capacity(count);
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::from_std(start + offset), period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for i in 0..count {
                tick.tick().await;
                let mut tx = pool.begin().await?;
                let id = publish(
                    &mut tx,
                    NewEvent::new("bench.echo", serde_json::json!({"producer": p, "i": i})),
                )
                .await?;
                tx.commit().await?;
                committed.push((id, Instant::now()));
            }
            anyhow::Ok(committed)
        }));
    }
    let mut committed: Vec<(i64, Instant)> = Vec::with_capacity(events);
    for task in tasks {
        committed.extend(task.await.context("a producer panicked")??);
    }
    let publish_seconds = start.elapsed().as_secs_f64();
    let reader_deadline = Instant::now() + Duration::from_secs(60);
    while !reader_task.is_finished() && Instant::now() < reader_deadline {
        host.ensure_running()?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    let seen = reader_task.await.context("the stream reader panicked")?;
    let n = numeric::len_i64(events);
    // Every receipt written: the CPU window covers the handling of every event.
    loop {
        host.ensure_running()?;
        let receipts: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt")
            .fetch_one(pool)
            .await
            .context("count receipts")?;
        if receipts >= n {
            break;
        }
        anyhow::ensure!(
            Instant::now() < reader_deadline,
            "only {receipts} of {n} receipts 60 s after the last commit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = Cpu::now(host.pid).per_event_since(before, n);

    let mut lat: Vec<f64> = committed
        .iter()
        .filter_map(|(id, c)| {
            seen.get(id)
                .map(|s| s.saturating_duration_since(*c).as_secs_f64() * 1000.0)
        })
        .collect();
    let missing = events - lat.len();
    anyhow::ensure!(
        missing * 100 <= events,
        "{missing} of {events} committed events were not read from {BENCH_QUEUE}'s stream within 60 s"
    );
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[percentile_index(lat.len(), p)];
    Ok(LatencyRun {
        p50: pct(0.5),
        p99: pct(0.99),
        max: lat.last().copied().unwrap_or(0.0),
        achieved: numeric::len_figure(events) / publish_seconds,
        events,
        cpu,
    })
}
