//! Deployed churn: whether a freshly started `outbox run` still dispatches at a fresh table's
//! rate after millions of events went through the table. Events go through the table the way
//! production sends them: committed in chunks into a running `outbox run --dispatcher-only`
//! (claim, route, hand-off, record), finished rows left in place (as within the retention
//! period), no `VACUUM` by the bench (only autovacuum where the server runs it, with the table's
//! own settings; the log says whether it does). At each checkpoint (`--deployed-churn`,
//! cumulative events) that host stops and a new one starts on the same table, and
//! `--deployed-dispatch-events` events are timed through it, against the same measured first on
//! a freshly created table (also a fresh `outbox run`). Redis is cleared between chunks: the
//! streams hold nothing the next measurement reads.

use std::path::Path;

use outbox_host::config::Settings;
use outbox_host::numeric;
use sqlx::PgPool;

use crate::common::clear_redis;
use crate::deployment::{dispatch_timed, fresh_database, start_host, stop_host, Deployment};
use crate::report::Report;
use crate::Args;

const SECTION: &str = "deployed";

/// Events committed and dispatched at once while churning.
const CHURN_CHUNK: i64 = 200_000;

/// Time `n` events through a freshly started `outbox run --dispatcher-only` on `pool`'s
/// database, `rounds` times (a fresh process each): the best rate in events/s. The fresh table
/// and every checkpoint get the same number of tries, so one slow run on a noisy machine does
/// not decide the ratio.
async fn probe(
    exe: &Path,
    deployment: &Deployment,
    settings: &Settings,
    pool: &PgPool,
    n: i64,
    rounds: usize,
) -> anyhow::Result<f64> {
    let mut best: f64 = 0.0;
    for _ in 0..rounds.max(1) {
        let mut host = start_host(exe, deployment, settings, pool, true, None).await?;
        let result = dispatch_timed(&mut host, pool, n).await;
        let run = stop_host(host, result).await?;
        clear_redis(settings).await?;
        best = best.max(numeric::signed_figure(n) / run.seconds);
    }
    Ok(best)
}

/// Send `events` more events through the table: committed `CHURN_CHUNK` at a time into one
/// running `outbox run --dispatcher-only`, each chunk dispatched before the next.
async fn churn(
    exe: &Path,
    deployment: &Deployment,
    settings: &Settings,
    pool: &PgPool,
    events: i64,
) -> anyhow::Result<()> {
    let mut host = start_host(exe, deployment, settings, pool, true, None).await?;
    let mut result = Ok(());
    let mut sent = 0;
    while sent < events {
        let chunk = CHURN_CHUNK.min(events - sent);
        if let Err(e) = dispatch_timed(&mut host, pool, chunk).await {
            result = Err(e.context(format!("churn: {sent} of {events} events through")));
            break;
        }
        sent += chunk;
        if let Err(e) = clear_redis(settings).await {
            result = Err(e);
            break;
        }
    }
    stop_host(host, result).await
}

/// `deployed.churn` (one figure per checkpoint): a fresh `outbox run`'s dispatch rate after
/// each checkpoint against a fresh table's.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    settings: &Settings,
    exe: &Path,
    deployment: &Deployment,
    database: &str,
) -> anyhow::Result<()> {
    let mut checkpoints = args.deployed_churn.clone();
    checkpoints.sort_unstable();
    checkpoints.dedup();
    checkpoints.retain(|&c| c > 0);
    if checkpoints.is_empty() {
        return Ok(());
    }
    let n = args.deployed_dispatch_events;
    let (pool, bench) = fresh_database(settings, database).await?;
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&pool)
        .await
        .unwrap_or_else(|e| format!("unknown ({e})"));
    report.say(format_args!(
        "  churn: {n} events through a freshly started `outbox run --dispatcher-only` after {} events went through the table ({CHURN_CHUNK} at a time through one running host, no VACUUM by the bench; autovacuum is {autovacuum} on this server), against a fresh table, best of {} fresh processes each",
        checkpoints.iter().map(i64::to_string).collect::<Vec<_>>().join(", "),
        args.rounds.max(1)
    ));
    let fresh = match probe(exe, deployment, &bench, &pool, n, args.rounds).await {
        Ok(rate) => rate,
        Err(e) => {
            pool.close().await;
            return Err(e.context("churn: the fresh table's run"));
        }
    };
    report.say(format_args!("    fresh table: {fresh:.0} events/s"));
    // Events through the table so far: the fresh table's runs.
    let runs_per_probe = numeric::len_i64(args.rounds.max(1));
    let mut passed = n * runs_per_probe;
    for checkpoint in checkpoints {
        let step = async {
            churn(exe, deployment, &bench, &pool, (checkpoint - passed).max(0)).await?;
            clear_redis(&bench).await?;
            probe(exe, deployment, &bench, &pool, n, args.rounds).await
        };
        let rate = match step.await {
            Ok(rate) => rate,
            Err(e) => {
                pool.close().await;
                return Err(e.context(format!("churn: after {checkpoint} events")));
            }
        };
        passed = passed.max(checkpoint) + n * runs_per_probe;
        report.say(format_args!(
            "    after {checkpoint} events: {rate:.0} events/s ({:.2} of the fresh table)",
            rate / fresh
        ));
        report
            .figure(
                SECTION,
                "deployed.churn",
                format!(
                    "deployed dispatch, {n} events through a fresh `outbox run` after {checkpoint} went through the table"
                ),
                rate,
                "events/s",
            )
            .against(
                "deployed.churn_fresh",
                "the same on a freshly created table",
                fresh,
            )
            .ratio_at_least(0.9);
    }
    pool.close().await;
    Ok(())
}
