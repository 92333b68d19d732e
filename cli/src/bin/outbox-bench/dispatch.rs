//! Dispatch section: the dispatcher's throughput (claim, route, Redis, record) against two
//! baselines on the same database in the same run: the SQL limit (pgbench-style plain SQL, one
//! client: claim a batch with `FOR UPDATE SKIP LOCKED` fetching id, type and payload, then mark
//! it done) and the store's own claim and record statements without routing or Redis. Never
//! routes or enqueues by itself; the SQL limit is written out here because it is a baseline,
//! not the host's code.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::routing::RouterHandle;
use outbox_host::store;
use sqlx::{PgConnection, PgPool, Row};

use crate::common::{host_throughput, prepare};
use crate::report::Report;
use crate::Args;
use outbox_host::numeric;

/// The claim of the SQL limit: the host's claim shape (lock due rows in claim order with
/// `SKIP LOCKED`, update them by TID) returning only what a dispatcher must fetch (id, type,
/// payload), with nothing else (no lease bookkeeping beyond the status, no headers, no tenant).
const SQL_LIMIT_CLAIM: &str = r#"
    WITH due AS (
        SELECT ctid FROM outbox_event
        WHERE status IN ('pending', 'processing') AND available_at <= now()
        ORDER BY available_at, id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE outbox_event e
    SET status = 'processing', available_at = now() + interval '5 minutes'
    WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM due))
    RETURNING e.id, e.event_type, e.payload::text AS payload
"#;

/// The mark-done of the SQL limit.
const SQL_LIMIT_DONE: &str =
    "UPDATE outbox_event SET status = 'done', processed_at = now() WHERE id = ANY($1)";

/// Best of `args.rounds` for each baseline and the host, and their ratios.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
) -> anyhow::Result<()> {
    report.say(format_args!(
        "dispatch: {} pre-inserted mail.welcome events, batch {}",
        args.events, args.batch
    ));
    let mut best_limit = 0f64;
    let mut best_store = 0f64;
    let mut best_host = 0f64;
    for round in 1..=args.rounds {
        prepare(pool, settings, args.events).await?;
        let limit = sql_limit(pool, args.batch, args.events).await?;
        prepare(pool, settings, args.events).await?;
        let store_only = store_statements(pool, args.batch, args.events).await?;
        prepare(pool, settings, args.events).await?;
        let host = host_throughput(pool, settings, router.clone(), args.events).await?;
        report.say(format_args!(
            "  round {round}: SQL limit (claim with payloads + mark done) {limit:>9.0} events/s | store statements only {store_only:>9.0} events/s | host (claim + route + Redis + record) {host:>9.0} events/s"
        ));
        best_limit = best_limit.max(limit);
        best_store = best_store.max(store_only);
        best_host = best_host.max(host);
    }
    report
        .figure(
            "dispatch",
            "dispatch.host",
            "dispatch throughput (claim + route + Redis + record)",
            best_host,
            "events/s",
        )
        .against(
            "dispatch.sql_limit",
            "SQL limit (one client: claim with payloads + mark done)",
            best_limit,
        )
        .ratio_at_least(0.7);
    report
        .figure(
            "dispatch",
            "dispatch.host_vs_store",
            "dispatch throughput against the store's statements",
            best_host,
            "events/s",
        )
        .against(
            "dispatch.store_statements",
            "store claim + record statements only",
            best_store,
        );
    Ok(())
}

/// The SQL limit: one connection, claim `batch` rows fetching id, type and payload into the
/// client, then mark them done; until nothing is due. Events/s.
pub(crate) async fn sql_limit(pool: &PgPool, batch: i64, events: i64) -> anyhow::Result<f64> {
    let mut conn = pool
        .acquire()
        .await
        .context("connect the SQL limit client")?;
    let conn: &mut PgConnection = &mut conn;
    let start = Instant::now();
    let mut n = 0i64;
    let mut payload_bytes = 0usize;
    loop {
        let rows = sqlx::query(SQL_LIMIT_CLAIM)
            .bind(batch)
            .fetch_all(&mut *conn)
            .await
            .context("SQL limit: claim")?;
        if rows.is_empty() {
            break;
        }
        let mut ids = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.try_get("id")?;
            let event_type: String = row.try_get("event_type")?;
            let payload: String = row.try_get("payload")?;
            payload_bytes += event_type.len() + payload.len();
            ids.push(id);
        }
        sqlx::query(SQL_LIMIT_DONE)
            .bind(&ids)
            .execute(&mut *conn)
            .await
            .context("SQL limit: mark done")?;
        n += numeric::len_i64(ids.len());
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    anyhow::ensure!(n == events, "SQL limit processed {n} of {events}");
    anyhow::ensure!(payload_bytes > 0, "SQL limit fetched no payloads");
    Ok(rate)
}

/// The store's claim and record statements alone ([`store::claim_due_events`],
/// [`store::record_outcomes`]), same batch size, no routing, no Redis. Events/s.
async fn store_statements(pool: &PgPool, batch: i64, events: i64) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut n = 0;
    loop {
        let claim =
            store::claim_due_events(pool, "baseline", batch, Duration::from_secs(300)).await?;
        if claim.events.is_empty() {
            break;
        }
        n += numeric::len_i64(claim.events.len());
        let outcomes: Vec<_> = claim
            .events
            .iter()
            .map(|e| (e.id, store::EventOutcome::Done))
            .collect();
        store::record_outcomes(pool, &claim, &outcomes, &[]).await?;
    }
    anyhow::ensure!(n == events, "store statements processed {n} of {events}");
    Ok(n as f64 / start.elapsed().as_secs_f64())
}
