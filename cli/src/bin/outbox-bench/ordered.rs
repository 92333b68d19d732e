//! Ordered section: the dispatcher's throughput with ordering keys against the same dispatcher
//! without them, in the same run: `--ordered-events` events dispatched once with no ordering key
//! and once spread round-robin over `--ordered-keys` keys (so the claim holds back every event
//! whose key has an earlier one pending or processing), both with batch `--ordered-batch`. The
//! keyed run's streams are then read back to check each key's entries came out in id order. It
//! drives the production dispatcher ([`host_throughput`]) and never re-implements the claim.

use std::collections::HashMap;

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::queue::QueueKeys;
use outbox_host::routing::RouterHandle;
use redis::AsyncCommands;
use sqlx::PgPool;

use crate::common::{host_throughput, prepare, redis_connection};
use crate::report::Report;
use crate::Args;

/// The queue `mail.welcome` events go to under the configured routes.
const MAIL_QUEUE: &str = "outbox.mail";

/// Best of `args.rounds` for the unordered and the keyed run, and their ratio.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
) -> anyhow::Result<()> {
    let events = args.ordered_events;
    let keys = args.ordered_keys.max(1);
    let settings = Settings {
        dispatch_batch_size: args.ordered_batch,
        ..settings.clone()
    };
    report.say(format_args!(
        "ordered: {events} pre-inserted mail.welcome events, unordered and over {keys} ordering keys, batch {}",
        args.ordered_batch
    ));
    let mut best_unordered = 0f64;
    let mut best_ordered = 0f64;
    for round in 1..=args.rounds {
        prepare(pool, &settings, events).await?;
        let unordered = host_throughput(pool, &settings, router.clone(), events).await?;
        prepare_keyed(pool, &settings, events, keys).await?;
        let ordered = host_throughput(pool, &settings, router.clone(), events).await?;
        check_order_per_key(pool, &settings).await?;
        report.say(format_args!(
            "  round {round}: unordered {unordered:>9.0} events/s | over {keys} ordering keys {ordered:>9.0} events/s (ratio {:.2}; stream order = id order for every key)",
            ordered / unordered
        ));
        best_unordered = best_unordered.max(unordered);
        best_ordered = best_ordered.max(ordered);
    }
    report
        .figure(
            "ordered",
            "ordered.keyed",
            format!("dispatch throughput with ordering keys ({keys} keys)"),
            best_ordered,
            "events/s",
        )
        .against(
            "ordered.unordered",
            "the same events without ordering keys",
            best_unordered,
        )
        .ratio_at_least(0.8);
    Ok(())
}

/// [`prepare`] with `events` events spread round-robin over `keys` ordering keys.
async fn prepare_keyed(
    pool: &PgPool,
    settings: &Settings,
    events: i64,
    keys: i64,
) -> anyhow::Result<()> {
    prepare(pool, settings, 0).await?;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id, ordering_key) SELECT 'mail.welcome', jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10), 'key-' || (g % $2) FROM generate_series(1, $1) g",
    )
    .bind(events)
    .bind(keys)
    .execute(pool)
    .await
    .context("insert the keyed bench events")?;
    sqlx::query("VACUUM ANALYZE outbox_event")
        .execute(pool)
        .await
        .context("vacuum outbox_event")?;
    Ok(())
}

/// Every key's entries in the mail stream come in id order.
async fn check_order_per_key(pool: &PgPool, settings: &Settings) -> anyhow::Result<()> {
    let key_of: HashMap<i64, String> =
        sqlx::query_as("SELECT id, ordering_key FROM outbox_event WHERE ordering_key IS NOT NULL")
            .fetch_all(pool)
            .await
            .context("read the ordering keys")?
            .into_iter()
            .collect();
    let mut conn = redis_connection(settings).await?;
    let stream =
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(MAIL_QUEUE);
    let entries: redis::streams::StreamRangeReply = conn
        .xrange_all(&stream)
        .await
        .context("read the mail stream")?;
    let mut last: HashMap<&str, i64> = HashMap::new();
    for entry in &entries.ids {
        let id: i64 = entry
            .get::<String>("event_id")
            .and_then(|id| id.parse().ok())
            .context("an entry without event_id")?;
        let Some(key) = key_of.get(&id) else {
            continue;
        };
        if let Some(before) = last.insert(key, id) {
            anyhow::ensure!(
                before < id,
                "ordering key {key}: event {id} was enqueued after {before}"
            );
        }
    }
    anyhow::ensure!(
        entries.ids.len() == key_of.len(),
        "{} entries in {stream} for {} keyed events",
        entries.ids.len(),
        key_of.len()
    );
    Ok(())
}
