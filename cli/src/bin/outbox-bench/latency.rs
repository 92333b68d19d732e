//! Latency section: commit-to-enqueue latency at a steady offered load, one event per
//! transaction, read back from the queue stream the router sends `mail.welcome` to.

use std::time::Duration;

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::queue::QueueKeys;
use outbox_host::routing::RouterHandle;
use outbox_host::sink::RedisSink;
use outbox_host::NewEvent;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::common::{
    bench_dispatcher, commit_one, prepare, spawn_arrival_reader, ArrivalLatencies,
};
use crate::report::Report;
use crate::Args;

/// The queue `mail.welcome` events route to.
const LATENCY_QUEUE: &str = "outbox.mail";

/// Percentiles of commit-to-enqueue latency at `args.rate` events/s.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
) -> anyhow::Result<()> {
    prepare(pool, settings, 0).await?;
    let (p50, p99, max) = latency(
        pool,
        settings,
        router.clone(),
        args.rate,
        args.latency_events,
    )
    .await?;
    report.say(format_args!(
        "latency at {} events/s offered ({} events, one per transaction, batch 100): commit-to-enqueue p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        args.rate, args.latency_events, p50, p99, max
    ));
    let at = format!("at {} events/s", args.rate);
    report.figure(
        "latency",
        "latency.p50",
        format!("commit-to-enqueue latency p50 {at}"),
        p50,
        "ms",
    );
    report.figure(
        "latency",
        "latency.p99",
        format!("commit-to-enqueue latency p99 {at}"),
        p99,
        "ms",
    );
    Ok(())
}

/// Publish at a steady rate, one event per transaction, and time commit -> stream entry.
async fn latency(
    pool: &PgPool,
    settings: &Settings,
    router: RouterHandle,
    rate: u64,
    count: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    let mut settings = settings.clone();
    settings.dispatch_batch_size = 100;
    let sink = RedisSink::from_settings(&settings).await?;
    let dispatcher = bench_dispatcher(pool, &settings, router, sink, "bench-latency").await?;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let stream =
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(LATENCY_QUEUE);
    let reading = CancellationToken::new();
    let reader_task = spawn_arrival_reader(&settings, stream, count, reading.clone())?;
    // The reader stops with this run, whichever way it ends.
    let _stop_reading = reading.drop_guard();

    let mut committed = Vec::with_capacity(count);
    let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..count {
        tick.tick().await;
        committed.push(
            commit_one(
                pool,
                NewEvent::new("mail.welcome", serde_json::json!({"i": i})),
            )
            .await?,
        );
    }
    let seen = tokio::time::timeout(Duration::from_secs(60), reader_task)
        .await
        .context("events did not all reach the queue within 60 s")??;
    shutdown.cancel();
    task.await?;
    let lat = ArrivalLatencies::new(&committed, &seen);
    anyhow::ensure!(lat.len() > 0, "no published event reached {LATENCY_QUEUE}");
    Ok((
        lat.percentile(0.5),
        lat.percentile(0.99),
        lat.percentile(1.0),
    ))
}
