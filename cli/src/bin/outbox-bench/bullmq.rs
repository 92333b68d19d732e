//! BullMQ section: the dispatcher's throughput into BullMQ's job format against the same
//! dispatcher into Redis Streams, in the same run: `--events` `mail.welcome` events dispatched
//! once with `outbox.mail` a stream and once with `[queues."outbox.mail"] sink = "bullmq"`
//! (BullMQ keys under the bench's Redis prefix), both through `QueueSinks`, the production
//! sink. The BullMQ run's wait list is then checked to hold one job per event. It drives the
//! production dispatcher and never re-implements a sink.

use anyhow::Context as _;
use outbox_host::config::{BullmqOptions, Config, QueueSpec, Settings, SinkKind};
use outbox_host::queue::bullmq::key as bull_key;
use outbox_host::queue::{BullmqQueueKeys, QueueKeys};
use outbox_host::routing::RouterHandle;
use redis::AsyncCommands;
use sqlx::PgPool;

use crate::common::{host_throughput_on_routes, prepare, redis_connection};
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
        let streams =
            host_throughput_on_routes(pool, settings, router, events, &streams_routes).await?;
        prepare(pool, settings, events).await?;
        let bullmq =
            host_throughput_on_routes(pool, settings, router, events, &bullmq_routes).await?;
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

/// The BullMQ run left one job per event waiting.
async fn check_jobs(settings: &Settings, prefix: &str, events: i64) -> anyhow::Result<()> {
    let mut conn = redis_connection(settings).await?;
    let wait = BullmqQueueKeys::new(prefix, MAIL_QUEUE).key(bull_key::WAIT);
    let jobs: i64 = conn.llen(&wait).await.context("read the wait list")?;
    anyhow::ensure!(jobs == events, "{jobs} jobs in {wait} for {events} events");
    Ok(())
}
