//! Hosts section: one, two and three real `outbox run --dispatcher-only` processes on the same
//! database (`--hosts`), each run dispatching `--hosts-events` events committed at once after
//! every host has started: throughput against one host, each host's share of the events (from
//! `claimed_by` of the done rows: claims spread fairly, no host starved), and where the CPU went
//! (the host processes, PostgreSQL's and Redis's processes, from `/proc`), which says what
//! flattens the curve on this machine. The bench trims the queue stream (nobody consumes it
//! here) so Redis memory stays bounded.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::{Config, Settings};
use outbox_host::queue::QueueKeys;
use redis::streams::StreamMaxlen;
use redis::AsyncCommands as _;
use sqlx::PgPool;

use crate::common::{clear_redis, prepare, redis_connection};
use crate::host_process::{cpu_seconds, cpu_seconds_of, outbox_binary, HostProcess};
use crate::report::Report;
use crate::Args;

/// The queue `mail.welcome` events route to with the default `routes.toml`.
const QUEUE: &str = "outbox.mail";

/// The most hosts one run starts.
const MAX_HOSTS: usize = 4;

/// Figure keys per host count (the report's keys are static).
const RATE_KEYS: [&str; MAX_HOSTS] = [
    "hosts.rate_1",
    "hosts.rate_2",
    "hosts.rate_3",
    "hosts.rate_4",
];
const SHARE_KEYS: [&str; MAX_HOSTS] = [
    "hosts.smallest_share_1",
    "hosts.smallest_share_2",
    "hosts.smallest_share_3",
    "hosts.smallest_share_4",
];
const BUSY_KEYS: [&str; MAX_HOSTS] = [
    "hosts.busy_1",
    "hosts.busy_2",
    "hosts.busy_3",
    "hosts.busy_4",
];

/// What one run with `hosts` processes measured.
struct Run {
    hosts: usize,
    /// Events/s from the commit of the events to the last one done.
    rate: f64,
    /// Events each host dispatched, largest first.
    shares: Vec<i64>,
    /// CPU seconds of the host processes, PostgreSQL and Redis during the run.
    cpu_hosts: f64,
    cpu_postgres: f64,
    cpu_redis: f64,
    /// Wall seconds of the run.
    elapsed: f64,
}

/// Each host count in `--hosts`, then the figures against one host.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    let Some(exe) = outbox_binary()? else {
        report.skip(
            "hosts",
            "several hosts",
            "the outbox binary is not next to outbox-bench: build it (cargo build --release -p outbox-cli)",
        );
        return Ok(());
    };
    anyhow::ensure!(
        args.hosts_events >= 1000,
        "--hosts-events must be at least 1000"
    );
    anyhow::ensure!(
        args.hosts.iter().all(|n| (1..=MAX_HOSTS).contains(n)),
        "--hosts: 1 to {MAX_HOSTS} hosts per run"
    );
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    report.say(format_args!(
        "hosts: {} events committed at once, dispatched by {} outbox run --dispatcher-only processes on one database ({cores} cores)",
        args.hosts_events,
        args.hosts
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", then ")
    ));
    let mut runs = Vec::new();
    for &hosts in &args.hosts {
        runs.push(measure(args, report, config, pool, settings, &exe, hosts).await?);
    }
    clear_redis(settings).await?;
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("empty outbox_event after the hosts section")?;

    let one = runs.iter().find(|r| r.hosts == 1).map(|r| r.rate);
    for run in &runs {
        let i = run.hosts - 1;
        let figure = report.figure(
            "hosts",
            RATE_KEYS[i],
            format!("dispatch with {} host(s) on one database", run.hosts),
            run.rate,
            "events/s",
        );
        if let (Some(one), true) = (one, run.hosts > 1) {
            figure.against("hosts.rate_1", "one host", one);
        }
        if run.hosts > 1 {
            let fair = args.hosts_events as f64 / run.hosts as f64;
            let smallest = run.shares.last().copied().unwrap_or(0) as f64;
            report
                .figure(
                    "hosts",
                    SHARE_KEYS[i],
                    format!("events of the host with the fewest, {} hosts", run.hosts),
                    smallest,
                    "events",
                )
                .against("hosts.fair_share", "an even share", fair)
                .ratio_at_least(0.5);
        }
        let busy =
            (run.cpu_hosts + run.cpu_postgres + run.cpu_redis) / (run.elapsed * cores as f64);
        report.figure(
            "hosts",
            BUSY_KEYS[i],
            format!(
                "machine CPU in use, {} host(s) (hosts {:.0} %, PostgreSQL {:.0} %, Redis {:.0} % of one core)",
                run.hosts,
                100.0 * run.cpu_hosts / run.elapsed,
                100.0 * run.cpu_postgres / run.elapsed,
                100.0 * run.cpu_redis / run.elapsed
            ),
            100.0 * busy,
            "%",
        );
    }
    Ok(())
}

/// One run: start `hosts` processes, wait for their heartbeats, commit the events, wait until
/// every one is done, read the shares and CPU, stop the processes.
async fn measure(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
    exe: &std::path::Path,
    hosts: usize,
) -> anyhow::Result<Run> {
    prepare(pool, settings, 0).await?;
    let mut processes = Vec::with_capacity(hosts);
    for _ in 0..hosts {
        processes.push(HostProcess::spawn(exe, config.path.as_deref(), settings)?);
    }
    let result = dispatch_with(args, pool, settings, &mut processes, hosts).await;
    let tails: Vec<String> = processes.iter().map(HostProcess::stderr_tail).collect();
    for process in processes {
        process.stop().await;
    }
    let run = result.map_err(|e| {
        e.context(format!(
            "outbox run (last lines of each host's stderr):\n{}",
            tails.join("\n--\n")
        ))
    })?;
    report.say(format_args!(
        "  {hosts} host(s): {:.0} events/s in {:.1} s; shares {}; CPU s: hosts {:.1}, PostgreSQL {:.1}, Redis {:.1}",
        run.rate,
        run.elapsed,
        run.shares
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" / "),
        run.cpu_hosts,
        run.cpu_postgres,
        run.cpu_redis
    ));
    Ok(run)
}

/// The timed part of [`measure`].
async fn dispatch_with(
    args: &Args,
    pool: &PgPool,
    settings: &Settings,
    processes: &mut [HostProcess],
    hosts: usize,
) -> anyhow::Result<Run> {
    // Every host is up (heartbeat written) before the events exist.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for p in processes.iter_mut() {
            p.ensure_running()?;
        }
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_worker WHERE last_seen > now() - interval '30 seconds'",
        )
        .fetch_one(pool)
        .await
        .context("count the hosts' heartbeats")?;
        if usize::try_from(live).unwrap_or(0) >= hosts {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {live} of {hosts} hosts started in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = args.hosts_events;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id)
         SELECT 'mail.welcome', jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10)
         FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(pool)
    .await
    .context("insert the events")?;
    let pids: Vec<u32> = processes.iter().map(|p| p.pid).collect();
    let cpu = || {
        (
            pids.iter().copied().map(cpu_seconds).sum::<f64>(),
            cpu_seconds_of("postgres"),
            cpu_seconds_of("redis-server"),
        )
    };
    let before = cpu();
    let start = Instant::now();
    let stream =
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(QUEUE);
    let mut redis = redis_connection(settings).await?;
    let deadline = start + Duration::from_secs(3600);
    let mut last_trim = Instant::now();
    loop {
        for p in processes.iter_mut() {
            p.ensure_running()?;
        }
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
            "{remaining} events not done after an hour"
        );
        if last_trim.elapsed() >= Duration::from_secs(1) {
            let _: i64 = redis
                .xtrim(&stream, StreamMaxlen::Approx(10_000))
                .await
                .with_context(|| format!("trim {stream}"))?;
            last_trim = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = cpu();
    let mut shares: Vec<i64> = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_event WHERE status = 'done' GROUP BY claimed_by",
    )
    .fetch_all(pool)
    .await
    .context("count each host's events")?;
    shares.sort_unstable_by(|a, b| b.cmp(a));
    // A host that dispatched nothing has no group: count it as a share of 0.
    shares.resize(hosts.max(shares.len()), 0);
    Ok(Run {
        hosts,
        rate: n as f64 / elapsed,
        shares,
        cpu_hosts: after.0 - before.0,
        cpu_postgres: after.1 - before.1,
        cpu_redis: after.2 - before.2,
        elapsed,
    })
}
