//! BullMQ section: the dispatcher's throughput into BullMQ's job format against the same
//! dispatcher into Redis Streams, in the same run: `--events` `mail.welcome` events dispatched
//! once with `outbox.mail` a stream and once with `[queues."outbox.mail"] sink = "bullmq"`
//! (BullMQ keys under the bench's Redis prefix), both through [`QueueSinks`], the production
//! sink. The BullMQ run's wait list is then checked to hold one job per event. It drives the
//! production dispatcher and never re-implements a sink.

use std::sync::Arc;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use outbox_host::config::{BullmqOptions, Config, QueueSpec, RoutesFile, Settings, SinkKind};
use outbox_host::queue::bullmq::key as bull_key;
use outbox_host::queue::{BullmqQueueKeys, QueueKeys};
use outbox_host::routing::RouterHandle;
use outbox_host::sink::QueueSinks;
use redis::AsyncCommands;
use sqlx::PgPool;

use crate::common::{host_throughput_into, prepare, redis_connection};
use crate::report::Report;
use crate::Args;

/// The queue `mail.welcome` events go to under the configured routes.
const MAIL_QUEUE: &str = "outbox.mail";

/// Best of `args.rounds` for the streams and the BullMQ run, and their ratio.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
) -> anyhow::Result<()> {
    let events = args.events;
    let prefix = format!(
        "{}bull",
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).prefix()
    );
    let streams_routes = config.routes.clone();
    let mut bullmq_routes = config.routes.clone();
    bullmq_routes.queues.insert(
        MAIL_QUEUE.to_string(),
        QueueSpec {
            sink: SinkKind::Bullmq,
            bullmq: Some(BullmqOptions {
                prefix: prefix.clone(),
                ..BullmqOptions::default()
            }),
            ..QueueSpec::default()
        },
    );
    report.say(format_args!(
        "bullmq: {events} pre-inserted mail.welcome events into {MAIL_QUEUE} as a stream and as BullMQ jobs (prefix {prefix}), batch {}",
        args.batch
    ));
    let mut best_streams = 0f64;
    let mut best_bullmq = 0f64;
    for round in 1..=args.rounds {
        prepare(pool, settings, events).await?;
        let streams = dispatch(pool, settings, router, events, &streams_routes).await?;
        prepare(pool, settings, events).await?;
        let bullmq = dispatch(pool, settings, router, events, &bullmq_routes).await?;
        check_jobs(settings, &prefix, events).await?;
        report.say(format_args!(
            "  round {round}: streams {streams:>9.0} events/s | BullMQ jobs {bullmq:>9.0} events/s (ratio {:.2}; one job per event in the wait list)",
            bullmq / streams
        ));
        best_streams = best_streams.max(streams);
        best_bullmq = best_bullmq.max(bullmq);
    }
    report
        .figure(
            "bullmq",
            "bullmq.host",
            "dispatch throughput into BullMQ's job format",
            best_bullmq,
            "events/s",
        )
        .against(
            "bullmq.streams",
            "the same events into a Redis Stream",
            best_streams,
        )
        .ratio_at_least(0.7);
    Ok(())
}

/// The production dispatcher over [`QueueSinks`] with `routes` in force; events/s.
async fn dispatch(
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
    events: i64,
    routes: &RoutesFile,
) -> anyhow::Result<f64> {
    let sinks = QueueSinks::connect(settings, Arc::new(ArcSwap::from_pointee(routes.clone())))
        .await
        .context("connect the sinks")?;
    host_throughput_into(pool, settings, router.clone(), events, sinks).await
}

/// The BullMQ run left one job per event waiting.
async fn check_jobs(settings: &Settings, prefix: &str, events: i64) -> anyhow::Result<()> {
    let mut conn = redis_connection(settings).await?;
    let wait = BullmqQueueKeys::new(prefix, MAIL_QUEUE).key(bull_key::WAIT);
    let jobs: i64 = conn.llen(&wait).await.context("read the wait list")?;
    anyhow::ensure!(jobs == events, "{jobs} jobs in {wait} for {events} events");
    Ok(())
}
