//! Claim-cost section: what one claim of a batch costs ([`store::claim_due_events`], the
//! dispatcher's own claim) with `--claim-small` finished rows in `outbox_event` against
//! `--claim-large` (default 10,000 against 10,000,000), the same number of claimable rows in
//! both; plus the plan of [`store::CLAIM_SQL`] (run with `EXPLAIN ANALYZE` in a transaction that
//! is rolled back) showing the partial index serves it and how many buffers it touches. The rows
//! go into the real table, as the store writes them; the section empties it when done.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::store;
use sqlx::PgPool;

use crate::common::clear_redis;
use crate::report::Report;
use crate::Args;
use outbox_host::numeric;

/// The index the claim must read its due rows from.
const CLAIM_INDEX: &str = "outbox_event_claimable_idx";

/// Claims made before the timed ones (connections and caches warm).
const WARM_UP_CLAIMS: usize = 2;

/// What one table size measured.
struct Case {
    /// Finished rows in the table.
    finished: i64,
    /// Median seconds of one claim.
    median: f64,
    /// Shared buffers (hit + read) the claim statement touched, from `EXPLAIN ANALYZE`.
    buffers: i64,
    /// The statement's plan, in text.
    plan: String,
}

/// Claim cost with few and with many finished rows, their ratio, and the plans.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    anyhow::ensure!(args.claim_samples > 0, "--claim-samples must be at least 1");
    // Enough claimable rows for every claim of a case to take a full batch.
    let claimable = args.batch * numeric::len_i64(args.claim_samples + WARM_UP_CLAIMS + 1);
    report.say(format_args!(
        "claim cost: one claim of {} (store::claim_due_events), {claimable} claimable rows, with {} and with {} finished rows in outbox_event; median of {} claims",
        args.batch, args.claim_small, args.claim_large, args.claim_samples
    ));
    clear_redis(settings).await?;
    let small = measure(args, report, pool, args.claim_small, claimable).await?;
    let large = measure(args, report, pool, args.claim_large, claimable).await?;
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("empty outbox_event after the claim-cost section")?;

    for case in [&small, &large] {
        anyhow::ensure!(
            case.plan.contains(CLAIM_INDEX),
            "the claim did not use {CLAIM_INDEX} with {} finished rows:\n{}",
            case.finished,
            case.plan
        );
    }
    report.detail(
        "claim-cost",
        "claim_cost.plan_large",
        format!(
            "plan of store::CLAIM_SQL with {} finished rows (EXPLAIN ANALYZE, rolled back):\n{}",
            large.finished, large.plan
        ),
    );
    report
        .figure(
            "claim-cost",
            "claim_cost.large",
            format!(
                "one claim of {} with {} finished rows",
                args.batch, large.finished
            ),
            large.median * 1e3,
            "ms",
        )
        .against(
            "claim_cost.small",
            format!("with {} finished rows", small.finished),
            small.median * 1e3,
        )
        .ratio_at_most(1.5);
    report
        .figure(
            "claim-cost",
            "claim_cost.buffers_large",
            format!(
                "buffers one claim touches with {} finished rows (plan uses {CLAIM_INDEX})",
                large.finished
            ),
            large.buffers as f64,
            "buffers",
        )
        .against(
            "claim_cost.buffers_small",
            format!("with {} finished rows", small.finished),
            small.buffers as f64,
        )
        .ratio_at_most(1.5);
    Ok(())
}

/// Fill the table with `finished` done rows and `claimable` pending ones, vacuum and analyze it
/// (as autovacuum would), then time claims and explain one.
async fn measure(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    finished: i64,
    claimable: i64,
) -> anyhow::Result<Case> {
    let filled = Instant::now();
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("truncate outbox_event")?;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, processed_at)
         SELECT 'bench.finished', '{}'::jsonb, 'done', 1, now() FROM generate_series(1, $1)",
    )
    .bind(finished)
    .execute(pool)
    .await
    .with_context(|| format!("insert {finished} finished rows"))?;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id)
         SELECT 'mail.welcome', jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10)
         FROM generate_series(1, $1) g",
    )
    .bind(claimable)
    .execute(pool)
    .await
    .context("insert the claimable rows")?;
    sqlx::query("VACUUM ANALYZE outbox_event")
        .execute(pool)
        .await
        .context("vacuum outbox_event")?;
    report.say(format_args!(
        "  {finished} finished + {claimable} claimable rows inserted, vacuumed and analyzed in {:.1} s",
        filled.elapsed().as_secs_f64()
    ));

    let (plan, buffers) = explain_claim(pool, args.batch).await?;
    let lease = Duration::from_secs(300);
    for _ in 0..WARM_UP_CLAIMS {
        store::claim_due_events(pool, "bench-claim-cost", args.batch, lease).await?;
    }
    let mut times = Vec::with_capacity(args.claim_samples);
    for _ in 0..args.claim_samples {
        let start = Instant::now();
        let claim = store::claim_due_events(pool, "bench-claim-cost", args.batch, lease).await?;
        times.push(start.elapsed().as_secs_f64());
        anyhow::ensure!(
            numeric::len_i64(claim.events.len()) == args.batch,
            "a claim took {} rows, not {}",
            claim.events.len(),
            args.batch
        );
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    report.say(format_args!(
        "  with {finished} finished rows: claim median {:.2} ms (min {:.2}, max {:.2}), {buffers} shared buffers",
        median * 1e3,
        times[0] * 1e3,
        times[times.len() - 1] * 1e3
    ));
    Ok(Case {
        finished,
        median,
        buffers,
        plan,
    })
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of [`store::CLAIM_SQL`] in a transaction rolled back afterwards:
/// the plan as text and the shared buffers (hit + read) the whole statement touched.
async fn explain_claim(pool: &PgPool, batch: i64) -> anyhow::Result<(String, i64)> {
    let mut tx = pool.begin().await?;
    let lines: Vec<String> = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) {}",
        store::CLAIM_SQL
    ))
    .bind(batch)
    .bind("bench-explain")
    .bind(300.0_f64)
    .bind(None::<chrono::DateTime<chrono::Utc>>)
    .bind(None::<i64>)
    .fetch_all(&mut *tx)
    .await
    .context("EXPLAIN the claim")?;
    tx.rollback().await?;

    let mut tx = pool.begin().await?;
    let json: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}",
        store::CLAIM_SQL
    ))
    .bind(batch)
    .bind("bench-explain")
    .bind(300.0_f64)
    .bind(None::<chrono::DateTime<chrono::Utc>>)
    .bind(None::<i64>)
    .fetch_one(&mut *tx)
    .await
    .context("EXPLAIN the claim (JSON)")?;
    tx.rollback().await?;
    let top = &json[0]["Plan"];
    let blocks = |field: &str| top[field].as_i64().unwrap_or(0);
    let buffers = blocks("Shared Hit Blocks") + blocks("Shared Read Blocks");
    anyhow::ensure!(buffers > 0, "EXPLAIN reported no buffers: {json}");
    Ok((lines.join("\n"), buffers))
}
