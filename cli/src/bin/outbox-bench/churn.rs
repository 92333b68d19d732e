//! Churn section: whether the claim stays flat as events pass through the table. Events go
//! through the real dispatcher (claim, route, enqueue, record: the row versions and dead index
//! entries production leaves) in chunks, with no `VACUUM` by the bench, only what the
//! database's autovacuum does with the table's own settings. At each checkpoint
//! (`--churn-checkpoints`, cumulative events through the table) the section times the
//! dispatcher on `--churn-probe` fresh events and the empty claim (nothing due, read from the
//! claim horizon as the dispatcher reads it, and from the start for comparison), against the
//! same two measured on a freshly created, vacuumed table first. The rows finished stay in the
//! table (as within the retention period); Redis is cleared between chunks.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::routing::RouterHandle;
use outbox_host::store;
use sqlx::PgPool;

use outbox_host::queue::QueueKeys;

use crate::common::{clear_redis, host_throughput, redis_connection};
use crate::report::Report;
use crate::Args;
use outbox_host::numeric;

/// The queue `mail.welcome` events route to with the default `routes.toml`.
const QUEUE: &str = "outbox.mail";

/// Events inserted and dispatched at once while churning.
const CHUNK: i64 = 200_000;

/// Empty claims timed per measurement (the median is reported).
const EMPTY_CLAIMS: usize = 21;

/// What one point of the curve measured.
struct Point {
    /// Events through the table before it.
    passed: i64,
    /// Dispatcher events/s on the probe.
    rate: f64,
    /// Median ms of a claim finding nothing due (from the horizon).
    empty_claim_ms: f64,
    /// The same read from the start of the claim index.
    from_start_ms: f64,
    /// Dead tuples of `outbox_event` right after the probe (`pg_stat_user_tables`).
    dead_tuples: i64,
    /// Size of the claim index, bytes.
    claim_index_bytes: i64,
    /// `outbox_event` with its indexes and TOAST, bytes.
    table_bytes: i64,
    /// Redis memory of the queue stream holding the probe's entries, bytes.
    stream_bytes: i64,
    /// Redis `used_memory` growth over one probe run (stream entries and enqueue markers).
    redis_bytes: i64,
    /// WAL written over one probe run.
    wal_bytes: i64,
}

/// The curve: fresh, then each checkpoint; figures against the fresh table.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
) -> anyhow::Result<()> {
    anyhow::ensure!(args.churn_probe > 0, "--churn-probe must be at least 1");
    let mut checkpoints = args.churn_checkpoints.clone();
    checkpoints.sort_unstable();
    checkpoints.dedup();
    report.say(format_args!(
        "churn: the dispatcher on {} fresh events and the empty claim, on a fresh table and after {} events went through it (no manual VACUUM)",
        args.churn_probe,
        checkpoints
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("truncate outbox_event")?;
    sqlx::query("VACUUM ANALYZE outbox_event")
        .execute(pool)
        .await
        .context("vacuum outbox_event")?;
    let fresh = probe(args, report, pool, settings, router, 0).await?;
    let mut passed = args.churn_probe * numeric::len_i64(args.rounds.max(1));
    let mut points = Vec::new();
    for checkpoint in checkpoints {
        let started = Instant::now();
        while passed < checkpoint {
            let chunk = CHUNK.min(checkpoint - passed);
            insert_pending(pool, chunk).await?;
            host_throughput(pool, settings, router.clone(), chunk).await?;
            clear_redis(settings).await?;
            passed += chunk;
        }
        report.say(format_args!(
            "  {passed} events through the table ({:.0} s of churn)",
            started.elapsed().as_secs_f64()
        ));
        let point = probe(args, report, pool, settings, router, passed).await?;
        passed += args.churn_probe * numeric::len_i64(args.rounds.max(1));
        points.push(point);
    }
    for point in &points {
        report
            .figure(
                "churn",
                "churn.rate",
                format!(
                    "dispatch of {} events after {} passed through the table",
                    args.churn_probe, point.passed
                ),
                point.rate,
                "events/s",
            )
            .against("churn.rate_fresh", "on a fresh table", fresh.rate)
            .ratio_at_least(0.9);
        report
            .figure(
                "churn",
                "churn.empty_claim",
                format!(
                    "claim with nothing due after {} events ({} dead tuples, claim index {} MB)",
                    point.passed,
                    point.dead_tuples,
                    point.claim_index_bytes / (1 << 20)
                ),
                point.empty_claim_ms,
                "ms",
            )
            .against(
                "churn.empty_claim_fresh",
                "on a fresh table",
                fresh.empty_claim_ms,
            );
        report
            .figure(
                "churn",
                "churn.empty_claim_from_start",
                format!(
                    "the same claim reading the claim index from its start, after {} events",
                    point.passed
                ),
                point.from_start_ms,
                "ms",
            )
            .against(
                "churn.empty_claim_from_start_fresh",
                "on a fresh table",
                fresh.from_start_ms,
            );
    }
    if let Some(last) = points.last() {
        let in_table = last.passed + args.churn_probe * numeric::len_i64(args.rounds.max(1));
        let events = in_table as f64;
        report.figure(
            "churn",
            "churn.table_bytes_per_event",
            format!("outbox_event with indexes per event, {in_table} events in it, never vacuumed"),
            last.table_bytes as f64 / events,
            "bytes",
        );
        report.figure(
            "churn",
            "churn.redis_bytes_per_event",
            "Redis memory per event dispatched (used_memory: the stream entry and its enqueue marker)",
            last.redis_bytes as f64 / args.churn_probe as f64,
            "bytes",
        );
        report.figure(
            "churn",
            "churn.wal_bytes_per_event",
            "PostgreSQL WAL per event dispatched (claim and done versions, their index entries)",
            last.wal_bytes as f64 / args.churn_probe as f64,
            "bytes",
        );
        report.figure(
            "churn",
            "churn.stream_bytes_per_entry",
            "Redis memory per queue entry (MEMORY USAGE of the stream)",
            last.stream_bytes as f64 / args.churn_probe as f64,
            "bytes",
        );
    }
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("empty outbox_event after the churn section")?;
    Ok(())
}

/// Insert `n` pending `mail.welcome` events (one statement).
async fn insert_pending(pool: &PgPool, n: i64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id)
         SELECT 'mail.welcome', jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10)
         FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(pool)
    .await
    .with_context(|| format!("insert {n} pending events"))?;
    Ok(())
}

/// Dispatch `--churn-probe` new events (best of `--rounds`) and time empty claims.
async fn probe(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
    passed: i64,
) -> anyhow::Result<Point> {
    // Best of `--rounds` (a checkpoint landing in one run moves it), as the other sections.
    let mut rate = 0f64;
    let mut redis = redis_connection(settings).await?;
    let mut redis_bytes = 0i64;
    let mut wal_bytes = 0i64;
    let mut reads: Vec<(String, i64)> = Vec::new();
    for _ in 0..args.rounds.max(1) {
        clear_redis(settings).await?;
        insert_pending(pool, args.churn_probe).await?;
        // Start each timed run from written-out buffers (not a VACUUM: dead rows stay), so a
        // checkpoint of the churn's writes does not land in it.
        sqlx::query("CHECKPOINT")
            .execute(pool)
            .await
            .context("CHECKPOINT before a churn probe")?;
        let reads_before = block_reads(pool).await?;
        let memory_before = redis_used_memory(&mut redis).await?;
        let wal_before: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(pool)
            .await?;
        rate = rate.max(host_throughput(pool, settings, router.clone(), args.churn_probe).await?);
        redis_bytes = redis_used_memory(&mut redis).await? - memory_before;
        reads = block_reads(pool)
            .await?
            .into_iter()
            .map(|(name, n)| {
                let before = reads_before
                    .iter()
                    .find(|(b, _)| *b == name)
                    .map_or(0, |(_, n)| *n);
                (name, n - before)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        wal_bytes = sqlx::query_scalar("SELECT (pg_current_wal_lsn() - $1::text::pg_lsn)::bigint")
            .bind(wal_before)
            .fetch_one(pool)
            .await?;
    }
    let stream =
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(QUEUE);
    let stream_bytes: Option<i64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&stream)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut redis)
        .await
        .with_context(|| format!("MEMORY USAGE {stream}"))?;
    clear_redis(settings).await?;
    // The claim as the dispatcher makes it (from its horizon), and read from the start.
    let horizon = store::claim_horizon(pool, store::ClaimHorizon::everything()).await?;
    let empty_claim_ms = median_empty_claim(pool, args.batch, horizon).await?;
    let from_start_ms =
        median_empty_claim(pool, args.batch, store::ClaimHorizon::everything()).await?;
    let (dead_tuples, claim_index_bytes, table_bytes): (i64, i64, i64) = sqlx::query_as(
        "SELECT n_dead_tup, pg_relation_size('outbox_event_claimable_idx'),
                pg_total_relation_size('outbox_event')
         FROM pg_stat_user_tables WHERE relname = 'outbox_event'",
    )
    .fetch_one(pool)
    .await
    .context("read the table's dead tuples")?;
    let stream_bytes = stream_bytes.unwrap_or(0);
    reads.sort_by_key(|r| std::cmp::Reverse(r.1));
    report.say(format_args!(
        "  blocks read from outside shared buffers during the last timed run: {}",
        reads
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    report.say(format_args!(
        "  after {passed} events: dispatch {rate:.0} events/s, empty claim {empty_claim_ms:.2} ms (read from the start: {from_start_ms:.2} ms), {dead_tuples} dead tuples, claim index {} MB, outbox_event {} MB ({} bytes per event passed), queue stream {} bytes per entry, Redis {} bytes and WAL {} bytes per event dispatched",
        claim_index_bytes / (1 << 20),
        table_bytes / (1 << 20),
        table_bytes / (passed + args.churn_probe * numeric::len_i64(args.rounds.max(1))),
        stream_bytes / args.churn_probe,
        redis_bytes / args.churn_probe,
        wal_bytes / args.churn_probe
    ));
    Ok(Point {
        passed,
        rate,
        empty_claim_ms,
        from_start_ms,
        dead_tuples,
        claim_index_bytes,
        table_bytes,
        stream_bytes,
        redis_bytes,
        wal_bytes,
    })
}

/// Median ms of [`EMPTY_CLAIMS`] claims finding nothing due, reading the index from `horizon`.
async fn median_empty_claim(
    pool: &PgPool,
    batch: i64,
    horizon: store::ClaimHorizon,
) -> anyhow::Result<f64> {
    let lease = Duration::from_secs(300);
    let mut times = Vec::with_capacity(EMPTY_CLAIMS);
    for _ in 0..EMPTY_CLAIMS {
        let start = Instant::now();
        let claim =
            store::claim_due_events_from(pool, "bench-churn", batch, lease, horizon).await?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(claim.events.is_empty(), "an empty claim took rows");
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Redis `used_memory` (bytes), from `INFO memory`.
async fn redis_used_memory(
    redis: &mut (impl redis::aio::ConnectionLike + Send + Sync),
) -> anyhow::Result<i64> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(redis)
        .await
        .context("INFO memory")?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory in INFO memory")
}

/// Blocks each relation of the outbox tables read from outside shared buffers so far
/// (`pg_statio_user_tables` heap and TOAST, `pg_statio_user_indexes` per index).
async fn block_reads(pool: &PgPool) -> anyhow::Result<Vec<(String, i64)>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT relname || ' heap', heap_blks_read + coalesce(toast_blks_read, 0)
         FROM pg_statio_user_tables WHERE relname LIKE 'outbox_%'
         UNION ALL
         SELECT indexrelname, idx_blks_read FROM pg_statio_user_indexes WHERE relname LIKE 'outbox_%'",
    )
    .fetch_all(pool)
    .await
    .context("read pg_statio")?;
    Ok(rows)
}
