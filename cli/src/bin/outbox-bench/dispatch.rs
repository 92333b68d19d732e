//! Dispatch section: the dispatcher's throughput (claim, route, Redis, record) against the
//! claim and mark-done statements alone, same batch size. Never routes or enqueues by itself.

use std::time::{Duration, Instant};

use outbox_host::config::Settings;
use outbox_host::routing::RouterHandle;
use outbox_host::store;
use sqlx::PgPool;

use crate::common::{host_throughput, prepare};
use crate::Args;

/// Best of `args.rounds` for the baseline and the host, and their ratio.
pub(crate) async fn run(
    args: &Args,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
) -> anyhow::Result<()> {
    let mut best_base = 0f64;
    let mut best_host = 0f64;
    for round in 1..=args.rounds {
        prepare(pool, settings, args.events).await?;
        let base = baseline(pool, args.batch, args.events).await?;
        prepare(pool, settings, args.events).await?;
        let host = host_throughput(pool, settings, router.clone(), args.events).await?;
        println!("  round {round}: baseline (claim + mark done SQL) {base:>9.0} events/s | host (claim + route + Redis + record) {host:>9.0} events/s");
        best_base = best_base.max(base);
        best_host = best_host.max(host);
    }
    println!("throughput: host {best_host:.0} events/s, baseline {best_base:.0} events/s, ratio host/baseline = {:.2}", best_host / best_base);
    Ok(())
}

/// The claim and mark-done statements alone, same batch size, no routing, no Redis.
async fn baseline(pool: &PgPool, batch: i64, events: i64) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut n = 0;
    loop {
        let claim =
            store::claim_due_events(pool, "baseline", batch, Duration::from_secs(300)).await?;
        if claim.events.is_empty() {
            break;
        }
        n += claim.events.len() as i64;
        let outcomes: Vec<_> = claim
            .events
            .iter()
            .map(|e| (e.id, store::EventOutcome::Done))
            .collect();
        store::record_outcomes(pool, &claim, &outcomes, &[]).await?;
    }
    anyhow::ensure!(n == events, "baseline processed {n} of {events}");
    Ok(n as f64 / start.elapsed().as_secs_f64())
}
