//! Deployed latency: commit to queue entry through the full `outbox run` as deployed, one event
//! per transaction at 1000/s and 5000/s offered, from producers on sessions of their own; the
//! entry is read from the queue's stream as the latency section reads it, and the run ends when
//! every receipt is written, so the CPU window covers the handling too. Before each, the
//! baseline: the same producers at the same rate with no `outbox` process, which says what
//! commit rate the machine allows producers at all.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::queue::QueueKeys;
use outbox_host::{numeric, store, NewEvent};
use sqlx::PgPool;

use crate::common::{
    commit_one, redis_connection, spawn_arrival_reader, ArrivalLatencies, Committed, BENCH_QUEUE,
};
use crate::deployed::Cpu;
use crate::deployment::{fresh_database, on_fresh_host, Deployment};
use crate::host_process::{cpu_seconds_of, HostProcess};
use crate::report::Report;
use crate::work::Work;
use crate::Args;

const SECTION: &str = "deployed";

/// An offered load of the latency runs, its goals and its figure keys.
struct LatencyCase {
    rate: u64,
    p50_goal_ms: f64,
    p99_goal_ms: f64,
    p50_key: &'static str,
    p99_key: &'static str,
    reached_key: &'static str,
    alone_key: &'static str,
    cpu_key: &'static str,
    per_claim_key: &'static str,
}

const LATENCY_CASES: [LatencyCase; 2] = [
    LatencyCase {
        rate: 1000,
        p50_goal_ms: 1.0,
        p99_goal_ms: 5.0,
        p50_key: "deployed.latency_1000_p50",
        p99_key: "deployed.latency_1000_p99",
        reached_key: "deployed.latency_1000_reached",
        alone_key: "deployed.latency_1000_producers_alone",
        cpu_key: "deployed.latency_1000_host_cpu",
        per_claim_key: "deployed.latency_1000_events_per_claim",
    },
    LatencyCase {
        rate: 5000,
        p50_goal_ms: 2.0,
        p99_goal_ms: 10.0,
        p50_key: "deployed.latency_5000_p50",
        p99_key: "deployed.latency_5000_p99",
        reached_key: "deployed.latency_5000_reached",
        alone_key: "deployed.latency_5000_producers_alone",
        cpu_key: "deployed.latency_5000_host_cpu",
        per_claim_key: "deployed.latency_5000_events_per_claim",
    },
];

/// One latency run.
struct LatencyRun {
    p50: f64,
    p99: f64,
    max: f64,
    /// `p50` with every event counted from `COMMIT` sent (an upper bound).
    p50_from_sent: f64,
    /// `p99` with every event counted from `COMMIT` sent (an upper bound).
    p99_from_sent: f64,
    /// Entries read before their producer saw the commit's reply.
    read_before_reply: usize,
    /// Events committed per second, as achieved.
    achieved: f64,
    events: usize,
    cpu: Cpu,
    /// Events per claim that brought any (the dispatcher's batches, from its `/metrics`).
    events_per_claim: f64,
    /// WAL and Redis commands per event.
    work: Work,
}

/// Commit-to-queue latency of the full `outbox run` at each offered load.
pub(crate) async fn run(
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
        let alone = producers_alone(&pool, &bench, case.rate, events).await;
        pool.close().await;
        let alone = alone?;
        report.say(format_args!(
            "  producers alone at {} events/s offered (no `outbox` process, the insert trigger quiet as under a polling dispatcher): reached {:.0}/s; PostgreSQL CPU µs/commit {:.1}",
            case.rate, alone.achieved, alone.postgres_us
        ));
        let run = on_fresh_host(
            exe,
            deployment,
            settings,
            database,
            false,
            None,
            async |host, pool, bench| latency_timed(host, pool, bench, case.rate, events).await,
        )
        .await?;
        report.say(format_args!(
            "  latency at {} events/s offered ({} events of bench.echo, one per transaction, achieved {:.0}/s, full `outbox run`): commit to queue entry p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (from COMMIT sent, an upper bound: p50 {:.2} ms, p99 {:.2} ms); CPU µs/event: host {:.1}, PostgreSQL {:.1}, Redis {:.1}",
            case.rate, run.events, run.achieved, run.p50, run.p99, run.max, run.p50_from_sent, run.p99_from_sent, run.cpu.host, run.cpu.postgres, run.cpu.redis
        ));
        // What a claim costs when it carries about one event: the light load's cost per event.
        report.say(format_args!(
            "    {:.2} events per claim; per event: PostgreSQL CPU beyond the producers' own commit (alone: {:.1} µs) {:.1} µs, WAL {:.0} bytes (the commit's included); Redis {:.2} commands ({:.2} script calls, their commands counted; the bench's stream reader's XREADs included)",
            run.events_per_claim,
            alone.postgres_us,
            run.cpu.postgres - alone.postgres_us,
            run.work.wal_bytes,
            run.work.redis_commands,
            run.work.redis_scripts
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
        if run.read_before_reply > 0 {
            report.say(format_args!(
                "    note: {} of {} entries were read before their producer saw the commit's reply (its runtime ran late on a busy machine): those count from COMMIT sent",
                run.read_before_reply, run.events
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
        report
            .figure(
                SECTION,
                case.reached_key,
                format!(
                    "deployed at {} events/s offered, one per transaction: events/s the producers reached with `outbox run` handling them",
                    case.rate
                ),
                run.achieved,
                "events/s",
            )
            .against(
                case.alone_key,
                format!(
                    "the same producers with no `outbox` process (PostgreSQL {:.0} µs/commit)",
                    alone.postgres_us
                ),
                alone.achieved,
            );
        report.figure(
            SECTION,
            case.cpu_key,
            format!("deployed {at}: outbox process CPU per event (dispatch, handler, receipt)"),
            run.cpu.host,
            "µs/event",
        );
        report.figure(
            SECTION,
            case.per_claim_key,
            format!("deployed {at}: events per claim that brought any"),
            run.events_per_claim,
            "events",
        );
    }
    Ok(())
}

/// The host's counters of dispatched events and of claimed batches (one per claim that brought
/// events: the batch duration histogram's count), in this order.
const DISPATCH_COUNTS: [&str; 2] = [
    "outbox_events_dispatched_total",
    "outbox_dispatch_batch_seconds_count",
];

/// Events/s one latency producer offers: it commits one event per transaction, one after
/// another, every 1/`PRODUCER_RATE` s.
const PRODUCER_RATE: u64 = 100;

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
    let stop = tokio_util::sync::CancellationToken::new();
    let reader_task = spawn_arrival_reader(settings, stream, events, stop.clone())?;

    let producers = Producers::open(settings, rate).await?;
    let mut redis = redis_connection(settings).await?;
    let work_before = Work::now(pool, &mut redis).await?;
    let claims_before = host.metrics(&DISPATCH_COUNTS).await?;
    let before = Cpu::now(host.pid);
    let (committed, publish_seconds) = producers.commit(events).await?;
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
    // The producers' sessions stay open until now: a PostgreSQL process that has exited no
    // longer shows its CPU time.
    let cpu = Cpu::now(host.pid).per_event_since(before, n);
    producers.close().await;
    let work = Work::now(pool, &mut redis)
        .await?
        .per_event_since(work_before, n);
    let claims_after = host.metrics(&DISPATCH_COUNTS).await?;
    let grew = |i: usize| claims_after[i] - claims_before[i];
    let events_per_claim = grew(0) / grew(1).max(1.0);

    let lat = ArrivalLatencies::new(&committed, &seen);
    let missing = events - lat.len();
    anyhow::ensure!(
        missing * 100 <= events,
        "{missing} of {events} committed events were not read from {BENCH_QUEUE}'s stream within 60 s"
    );
    Ok(LatencyRun {
        p50: lat.percentile(0.5),
        p99: lat.percentile(0.99),
        max: lat.percentile(1.0),
        p50_from_sent: lat.percentile_from_sent(0.5),
        p99_from_sent: lat.percentile_from_sent(0.99),
        read_before_reply: lat.read_before_reply,
        achieved: numeric::len_figure(events) / publish_seconds,
        events,
        cpu,
        events_per_claim,
        work,
    })
}

/// The latency runs' producers: one per [`PRODUCER_RATE`] events/s, each on a session of its
/// own, committing one event per transaction on its own clock, staggered. A producer runs one
/// transaction after another (begin, insert, commit), and on a busy machine one takes more than
/// the 2 ms that one producer per 500 events/s had, so those fell short of the offered 5,000/s.
///
/// They run on a runtime of their own (one thread, their sessions driven by it), apart from the
/// bench's: a commit is stamped when its reply reaches the producers, not after whatever else
/// the bench's runtime had queued.
struct Producers {
    /// Where their tasks run.
    runtime: tokio::runtime::Handle,
    /// The runtime itself, held to be shut down when the producers are dropped.
    owned_runtime: Option<tokio::runtime::Runtime>,
    pool: PgPool,
    producers: u32,
    rate: u64,
}

impl Producers {
    /// Open every producer's session for `rate` events/s on the database of `settings` before
    /// the clock starts: a connection made during the run would hold its producer back by the
    /// connection's setup.
    async fn open(settings: &Settings, rate: u64) -> anyhow::Result<Self> {
        let producers =
            u32::try_from(rate.div_ceil(PRODUCER_RATE).max(1)).context("rate too high")?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("producers")
            .enable_all()
            .build()
            .context("start the producers' runtime")?;
        let url = settings.database_url.clone();
        let pool = runtime
            .spawn(async move {
                let pool = store::connect(&url, producers)
                    .await
                    .context("connect the producers")?;
                let mut sessions = Vec::new();
                for _ in 0..producers {
                    sessions.push(pool.acquire().await.context("connect a producer")?);
                }
                drop(sessions);
                anyhow::Ok(pool)
            })
            .await
            .context("the producers' setup panicked")??;
        Ok(Self {
            runtime: runtime.handle().clone(),
            owned_runtime: Some(runtime),
            pool,
            producers,
            rate,
        })
    }

    /// Commit `events` `bench.echo` events at the offered rate, one per transaction: each
    /// event's [`Committed`] (its id, when `COMMIT` was sent, when its reply came), and the
    /// seconds from the first tick to the last commit.
    async fn commit(&self, events: usize) -> anyhow::Result<(Vec<Committed>, f64)> {
        let producers = self.producers;
        let period = Duration::from_nanos(
            1_000_000_000u64.saturating_mul(u64::from(producers)) / self.rate.max(1),
        );
        let per_producer = events / usize::try_from(producers)?;
        let extra = events % usize::try_from(producers)?;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for p in 0..producers {
            let pool = self.pool.clone();
            let index = usize::try_from(p)?;
            let count = per_producer + usize::from(index < extra);
            let offset = period / producers * p;
            tasks.push(self.runtime.spawn(async move {
                let mut committed: Vec<Committed> = Vec::with_capacity(count);
                let mut tick = tokio::time::interval_at(
                    tokio::time::Instant::from_std(start + offset),
                    period,
                );
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                for i in 0..count {
                    tick.tick().await;
                    committed.push(
                        commit_one(
                            &pool,
                            NewEvent::new("bench.echo", serde_json::json!({"producer": p, "i": i})),
                        )
                        .await?,
                    );
                }
                anyhow::Ok(committed)
            }));
        }
        let mut committed: Vec<Committed> = Vec::with_capacity(events);
        for task in tasks {
            committed.extend(task.await.context("a producer panicked")??);
        }
        Ok((committed, start.elapsed().as_secs_f64()))
    }

    /// Close every producer's session (on their runtime, which drives them), then their
    /// runtime (on drop).
    async fn close(self) {
        let pool = self.pool.clone();
        let _ = self.runtime.spawn(async move { pool.close().await }).await;
    }
}

impl Drop for Producers {
    fn drop(&mut self) {
        // A runtime may not be dropped from within another's task; this one needs no waiting.
        if let Some(runtime) = self.owned_runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What the producers reach with no `outbox` process at all: events/s and PostgreSQL's CPU µs
/// per commit.
struct ProducersAlone {
    achieved: f64,
    postgres_us: f64,
}

/// The latency runs' baseline: the same producers at the same offered `rate` into the fresh
/// database of `settings` with no host running, the insert trigger quiet as it is while a
/// dispatcher polls (a polling lease announced through the host's own store call, withdrawn at
/// the end). What they reach is the most any dispatcher could see on this machine.
async fn producers_alone(
    pool: &PgPool,
    settings: &Settings,
    rate: u64,
    events: usize,
) -> anyhow::Result<ProducersAlone> {
    const WORKER: &str = "outbox-bench-producers-alone";
    let producers = Producers::open(settings, rate).await?;
    let run_ms = u64::try_from(events)
        .unwrap_or(u64::MAX)
        .saturating_mul(1000)
        / rate.max(1);
    let lease = Duration::from_secs(60) + Duration::from_millis(run_ms);
    store::announce_polling(pool, WORKER, lease)
        .await
        .context("announce a polling lease")?;
    let before = cpu_seconds_of("postgres");
    let committed = producers.commit(events).await;
    // Read before the producers' sessions close: an exited PostgreSQL process no longer shows
    // its CPU time.
    let postgres = cpu_seconds_of("postgres") - before;
    producers.close().await;
    store::withdraw_polling(pool, WORKER)
        .await
        .context("withdraw the polling lease")?;
    let (committed, seconds) = committed?;
    let n = numeric::len_figure(committed.len()).max(1.0);
    Ok(ProducersAlone {
        achieved: n / seconds,
        postgres_us: postgres * 1e6 / n,
    })
}
