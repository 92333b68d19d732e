//! Deployed section: the `outbox` binary as it is deployed, timed from outside. The repository's
//! shipped `routes.toml` with one addition (`bench.` events to `outbox.bench-echo`, handled by
//! the echo test plugin), the shipped plugins and everything else as shipped (router plugin,
//! capability policy, alerts, gauges, the HTTP listener with the console), run as `outbox run`
//! next to `outbox-bench`. The bench starts the process, waits for `/readyz` (start-up is not
//! timed), commits events and watches the tables and the queue; it never dispatches or handles
//! an event itself. Every run starts on a freshly created database and an empty Redis prefix.
//!
//! - end to end: `--deployed-events` `bench.echo` events committed in one transaction into the
//!   idle full `outbox run`, warmed up first (its first 2,000 events handled untimed, so that it
//!   runs on the plans a running host keeps), timed from that COMMIT until the last `ok`
//!   receipt; against graphile-worker 0.18 timed the same way (its worker idle first, then the
//!   jobs committed), with its performance preset and with its defaults.
//! - dispatch: `outbox run --dispatcher-only`, batch 1000 and 100, `--deployed-dispatch-events`
//!   events over four types the shipped routes send to four queues, committed in one
//!   transaction, timed until every one is `done`; against the dispatch section's SQL limit on
//!   as many rows at the same batch, on the same freshly created table (not vacuumed) with its
//!   session set as the dispatcher's (asynchronous commit, no sequential scans).
//! - latency (`deployed_latency`): the full `outbox run`, one event per transaction at 1000/s and
//!   5000/s, commit to queue entry read from the stream as the latency section reads it.
//! - churn (`deployed_churn`): a freshly started `outbox run --dispatcher-only` after
//!   `--deployed-churn` events went through the table, against a fresh table.
//!
//! CPU per event is read from `/proc`: the `outbox` process, and every `postgres` and
//! `redis-server` process on the machine (the bench's own few polling queries included).

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::{numeric, store};

use crate::common::{clear_redis, redis_connection, BENCH_QUEUE};
use crate::deployment::{
    deployment, dispatch_timed, e2e_timed, fresh_database, insert_dispatch_events, on_fresh_host,
    Deployment, E2E_WARM_UP_EVENTS, ECHO_PLUGIN, SHIPPED_ROUTES,
};
use crate::dispatch::sql_limit;
use crate::e2e::{drain, GraphileWorkerRun};
use crate::host_process::{cpu_seconds, cpu_seconds_of, outbox_binary};
use crate::report::Report;
use crate::work::Work;
use crate::Args;
use crate::{deployed_churn, deployed_latency};

const SECTION: &str = "deployed";

/// Event types of the dispatch runs, round-robin: the shipped routes send them to four queues
/// (`outbox.mail`, `outbox.webhook`, `outbox.audit`, `outbox.search-index`).
pub(crate) const DISPATCH_TYPES: [&str; 4] = [
    "mail.deployed",
    "webhook.deployed",
    "audit.deployed",
    "search.index.deployed",
];

/// How long a timed run may take before it fails.
pub(crate) const RUN_DEADLINE: Duration = Duration::from_secs(600);

/// A dispatch batch size and its figure keys.
struct DispatchCase {
    batch: i64,
    key: &'static str,
    baseline_key: &'static str,
    cpu_key: &'static str,
    postgres_cpu_key: &'static str,
    limit_postgres_cpu_key: &'static str,
}

const DISPATCH_CASES: [DispatchCase; 2] = [
    DispatchCase {
        batch: 1000,
        key: "deployed.dispatch_b1000",
        baseline_key: "deployed.sql_limit_b1000",
        cpu_key: "deployed.dispatch_b1000_host_cpu",
        postgres_cpu_key: "deployed.dispatch_b1000_postgres_cpu",
        limit_postgres_cpu_key: "deployed.sql_limit_b1000_postgres_cpu",
    },
    DispatchCase {
        batch: 100,
        key: "deployed.dispatch_b100",
        baseline_key: "deployed.sql_limit_b100",
        cpu_key: "deployed.dispatch_b100_host_cpu",
        postgres_cpu_key: "deployed.dispatch_b100_postgres_cpu",
        limit_postgres_cpu_key: "deployed.sql_limit_b100_postgres_cpu",
    },
];

/// CPU seconds used so far by the host process, PostgreSQL and Redis.
#[derive(Clone, Copy)]
pub(crate) struct Cpu {
    pub(crate) host: f64,
    pub(crate) postgres: f64,
    pub(crate) redis: f64,
}

impl Cpu {
    pub(crate) fn now(pid: u32) -> Self {
        Self {
            host: cpu_seconds(pid),
            postgres: cpu_seconds_of("postgres"),
            redis: cpu_seconds_of("redis-server"),
        }
    }

    /// CPU µs per event of each since `before`, over `n` events.
    pub(crate) fn per_event_since(self, before: Self, n: i64) -> Self {
        let per = |after: f64, before: f64| us_per_event(after - before, n);
        Self {
            host: per(self.host, before.host),
            postgres: per(self.postgres, before.postgres),
            redis: per(self.redis, before.redis),
        }
    }
}

/// `seconds` of CPU spread over `n` events, in µs per event.
fn us_per_event(seconds: f64, n: i64) -> f64 {
    seconds * 1e6 / numeric::signed_figure(n)
}

/// One timed run: seconds from the COMMIT to the end, CPU µs per event over that window, and
/// (end to end) the work counted per event.
pub(crate) struct Timed {
    pub(crate) seconds: f64,
    pub(crate) cpu: Cpu,
    pub(crate) work: Option<Work>,
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
    deployed_latency::run(args, report, settings, &exe, &deployment, &database).await?;
    deployed_churn::run(args, report, settings, &exe, &deployment, &database).await?;
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
        "  end to end: {n} bench.echo events committed in one transaction into an idle `outbox run` (dispatcher + receivers, batch as configured) that handled {} events before, until every ok receipt",
        E2E_WARM_UP_EVENTS
    ));
    let mut best: Option<Timed> = None;
    for round in 1..=args.rounds {
        let run = on_fresh_host(
            exe,
            deployment,
            settings,
            database,
            false,
            None,
            async |host, pool, _| {
                let mut redis = redis_connection(settings).await?;
                e2e_timed(host, pool, &mut redis, n).await
            },
        )
        .await?;
        report.say(format_args!(
            "    round {round}: {:.2} s, {:.0} events/s; CPU µs/event: host {:.1}, PostgreSQL {:.1}, Redis {:.1}",
            run.seconds,
            numeric::signed_figure(n) / run.seconds,
            run.cpu.host,
            run.cpu.postgres,
            run.cpu.redis
        ));
        if let Some(work) = run.work {
            report.say(format_args!(
                "      work per event: PostgreSQL WAL {:.0} bytes; Redis {:.2} commands ({:.3} script calls, their commands counted)",
                work.wal_bytes, work.redis_commands, work.redis_scripts
            ));
        }
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
    cpu_ceiling(report, &best.cpu, preset.as_ref());
    if let Some(work) = best.work {
        let figure = report.figure(
            SECTION,
            "deployed.e2e_wal_bytes",
            "deployed end to end: PostgreSQL WAL per event",
            work.wal_bytes,
            "bytes/event",
        );
        if let Some(wal) = preset.as_ref().and_then(|gw| gw.wal_bytes_per_job) {
            figure.against(
                "deployed.gw_preset_wal_bytes",
                "graphile-worker (performance preset): PostgreSQL WAL per job",
                wal,
            );
        }
        report.figure(
            SECTION,
            "deployed.e2e_redis_commands",
            "deployed end to end: Redis commands per event (a script's own counted)",
            work.redis_commands,
            "commands/event",
        );
    }
    Ok(())
}

/// The end-to-end CPU per event summed over the three processes against graphile-worker's
/// (node and PostgreSQL) per job, and the rate that sum allows on this machine's cores were
/// every core busy with nothing else, against the rate the preset reached: when the ceiling is
/// below the preset's rate, no scheduling or pipelining reaches the preset, only less CPU per
/// event does; and the rate PostgreSQL's and Redis's share alone allows (the host taken as
/// free), which says whether the host's code can close the gap at all.
fn cpu_ceiling(report: &mut Report, cpu: &Cpu, preset: Option<&GraphileWorkerRun>) {
    let summed = cpu.host + cpu.postgres + cpu.redis;
    if !summed.is_finite() || summed <= 0.0 {
        return;
    }
    let figure = report.figure(
        SECTION,
        "deployed.e2e_cpu",
        "deployed end to end: CPU per event, outbox process + PostgreSQL + Redis",
        summed,
        "µs/event",
    );
    let preset_cpu = preset.and_then(|gw| Some(gw.cpu_us_per_job? + gw.postgres_cpu_us_per_job?));
    if let Some(per_job) = preset_cpu {
        figure.against(
            "deployed.gw_preset_cpu_summed",
            "graphile-worker (performance preset): node + PostgreSQL CPU per job",
            per_job,
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    rate_allowed(
        report,
        "deployed.e2e_cpu_ceiling",
        format!(
            "deployed end to end: events/s that CPU per event allows on {cores} cores, all busy"
        ),
        summed,
        cores,
        preset,
    );
    // The same with the host's own CPU taken as nothing: what PostgreSQL and Redis do per event
    // alone. Below the preset's rate, no change to the host's code reaches it; only fewer rows,
    // index entries and commands per event do.
    rate_allowed(
        report,
        "deployed.e2e_cpu_ceiling_stores",
        format!(
            "deployed end to end: events/s PostgreSQL's and Redis's CPU per event alone allow on {cores} cores (the outbox process taken as free)"
        ),
        cpu.postgres + cpu.redis,
        cores,
        preset,
    );
}

/// The events/s that `us_per_event` of CPU allows on `cores` cores, every one busy with it
/// alone, against the rate the preset reached; nothing when `us_per_event` is no positive
/// figure.
fn rate_allowed(
    report: &mut Report,
    key: &'static str,
    name: String,
    us_per_event: f64,
    cores: usize,
    preset: Option<&GraphileWorkerRun>,
) {
    if !us_per_event.is_finite() || us_per_event <= 0.0 {
        return;
    }
    let figure = report.figure(
        SECTION,
        key,
        name,
        numeric::len_figure(cores) * 1e6 / us_per_event,
        "events/s",
    );
    if let Some(gw) = preset {
        figure.against(
            "deployed.gw_preset",
            "graphile-worker (performance preset), as measured",
            gw.jobs_per_second,
        );
    }
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
        // The best SQL limit round's rate and its PostgreSQL CPU µs per event.
        let mut best_limit = (0f64, f64::NAN);
        let mut best: Option<Timed> = None;
        for round in 1..=args.rounds {
            // The SQL limit on the table the host meets: freshly created, the events committed
            // in one transaction, not vacuumed; its session set as the dispatcher's are
            // (asynchronous commit, no sequential scans).
            let (pool, _) = fresh_database(settings, database).await?;
            insert_dispatch_events(&pool, n).await?;
            let dispatch_sessions = store::dispatch_pool(&pool);
            let before = cpu_seconds_of("postgres");
            let limit = sql_limit(&dispatch_sessions, case.batch, n).await;
            let limit_postgres = us_per_event(cpu_seconds_of("postgres") - before, n);
            dispatch_sessions.close().await;
            pool.close().await;
            let limit = limit?;

            let run = on_fresh_host(
                exe,
                deployment,
                settings,
                database,
                true,
                Some(case.batch),
                async |host, pool, _| dispatch_timed(host, pool, n).await,
            )
            .await?;
            let rate = numeric::signed_figure(n) / run.seconds;
            report.say(format_args!(
                "    batch {}, round {round}: SQL limit {limit:.0} events/s (PostgreSQL {limit_postgres:.1} µs/event) | outbox run --dispatcher-only {rate:.0} events/s ({:.2} s); CPU µs/event: host {:.1}, PostgreSQL {:.1}, Redis {:.1}",
                case.batch, run.seconds, run.cpu.host, run.cpu.postgres, run.cpu.redis
            ));
            if limit > best_limit.0 {
                best_limit = (limit, limit_postgres);
            }
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
                best_limit.0,
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
        // Whether the dispatcher's statements cost PostgreSQL more than the SQL limit's pair.
        report
            .figure(
                SECTION,
                case.postgres_cpu_key,
                format!(
                    "deployed dispatch, batch {}: PostgreSQL CPU per event",
                    case.batch
                ),
                best.cpu.postgres,
                "µs/event",
            )
            .against(
                case.limit_postgres_cpu_key,
                format!("SQL limit, batch {}: PostgreSQL CPU per event", case.batch),
                best_limit.1,
            );
    }
    Ok(())
}
