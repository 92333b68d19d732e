//! Receive section: receiver throughput with the echo handler plugin at several concurrencies,
//! and the per-entry cost of one entry handled alone, split into its parts (handler call,
//! blocking-pool hop, the receiver's Redis claim and finish, a receipt in a writer batch). Every
//! part is measured by calling the receiver's own code, never a copy of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::live_config::LiveConfig;
use outbox_host::plugin::bindings::{Delivery, Outcome};
use outbox_host::plugin::wit_event::to_wit_event;
use outbox_host::queue::{QueueEntry, QueueKeys, CONSUMER_GROUP};
use outbox_host::receive::{write_receipts, HandledAs, Receipt, Settled, RECEIPT_BATCH};
use redis::AsyncCommands;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::common::{
    bench_event, bench_receivers, clear_receiver_state, fill_queue, redis_connection,
    BENCH_HANDLER, BENCH_QUEUE,
};
use crate::report::Report;
use crate::Args;
use outbox_host::numeric;

/// Handler name the receipt and Redis bookkeeping measurements write under.
const BOOKKEEPING_HANDLER: &str = "bench-receipt";

/// Receiver throughput per concurrency, then the serial per-entry cost and its parts.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
) -> anyhow::Result<()> {
    let n = args.receive_entries;
    report.say(format_args!(
        "receiver: {n} entries pre-filled on {BENCH_QUEUE}, handler {BENCH_HANDLER} (test/echo-handler.wasm), one Receivers, best of {} rounds",
        args.rounds
    ));
    let mut settings = settings.clone();
    settings.shutdown_grace = Duration::from_secs(5);
    let mut best = Vec::new();
    for &concurrency in &args.receive_concurrency {
        let mut best_rate = 0f64;
        for round in 1..=args.rounds {
            let rate = receiver_throughput(pool, &settings, live, concurrency, n).await?;
            report.say(format_args!(
                "  round {round}: receiver_concurrency {concurrency:>3}: {rate:>8.0} events/s"
            ));
            best_rate = best_rate.max(rate);
        }
        best.push((concurrency, best_rate));
    }
    let summary: Vec<String> = best
        .iter()
        .map(|(c, r)| format!("{r:.0} events/s at concurrency {c}"))
        .collect();
    report.say(format_args!(
        "receiver throughput (claim + wasm handler + ack + receipt per entry): {}",
        summary.join(", ")
    ));
    if let Some((concurrency, rate)) = best.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)) {
        report.figure(
            "receive",
            "receive.throughput",
            format!("receiver throughput, echo handler (best: concurrency {concurrency})"),
            rate,
            "events/s",
        );
    }

    // Per-entry cost, one entry at a time, and its parts.
    let serial_n = 500usize.min(n.max(1));
    let serial = serial_handle_entry(pool, &settings, live, serial_n).await?;
    let (wasm, wasm_hopped) = handler_call_cost(live, 2000).await?;
    let receipt = receipt_batch_cost(pool).await?;
    let redis_cost = redis_bookkeeping_cost(pool, &settings, live, serial_n).await?;
    let hop = (wasm_hopped - wasm).max(0.0);
    // Receipts are written by a background task in batches, off the entry's path: a receipt's
    // share of a full writer batch is shown for comparison only.
    let other = serial - wasm - hop - redis_cost;
    let us = |d: f64| d * 1e6;
    report.say(format_args!(
        "per-entry cost, serial (handle_entry one at a time, {serial_n} entries): {:.0} us = wasm handler call {:.0} us ({:.0}%) + blocking-pool hop {:.0} us ({:.0}%) + Redis claim + finish (2 round trips) {:.0} us ({:.0}%) + other (services, parsing, scheduling, queueing the receipt) {:.0} us ({:.0}%); a receipt costs {:.1} us in a writer batch of {RECEIPT_BATCH} (receipts are batched off the entry's path)",
        us(serial),
        us(wasm),
        100.0 * wasm / serial,
        us(hop),
        100.0 * hop / serial,
        us(redis_cost),
        100.0 * redis_cost / serial,
        us(other),
        100.0 * other / serial,
        us(receipt),
    ));
    report.figure(
        "receive",
        "receive.serial_entry",
        "one entry handled alone (claim + handler + finish)",
        us(serial),
        "us",
    );
    clear_receiver_state(pool, &settings).await?;
    Ok(())
}

/// One [`Receivers`](outbox_host::receive::Receivers) consuming a pre-filled queue with `concurrency` handlers in flight, until
/// every entry has an `ok` receipt.
async fn receiver_throughput(
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
    concurrency: usize,
    n: usize,
) -> anyhow::Result<f64> {
    clear_receiver_state(pool, settings).await?;
    let mut conn = redis_connection(settings).await?;
    fill_queue(
        &mut conn,
        &QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url),
        BENCH_QUEUE,
        1,
        n,
    )
    .await?;
    let mut settings = settings.clone();
    settings.receiver_concurrency = concurrency;
    let receivers = bench_receivers(pool, &settings, live, "bench-receiver").await?;
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(receivers.consume(BENCH_QUEUE.to_string(), shutdown.clone()));
    let deadline = start + Duration::from_secs(300);
    let rate = loop {
        let (ok, other): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE result = 'ok'), count(*) FILTER (WHERE result <> 'ok') FROM outbox_receipt",
        )
        .fetch_one(pool)
        .await
        .context("count receipts")?;
        if ok >= numeric::len_i64(n) {
            break n as f64 / start.elapsed().as_secs_f64();
        }
        if other > 0 || Instant::now() > deadline {
            shutdown.cancel();
            let _ = task.await;
            anyhow::bail!("receiver run: {ok} ok and {other} other receipts of {n} entries");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    shutdown.cancel();
    task.await?;
    Ok(rate)
}

/// Average seconds of [`Receivers::handle_entry`](outbox_host::receive::Receivers::handle_entry) run on `n` entries one after another (claim,
/// handler call, finish script, receipt): the latency of one entry with nothing else running.
async fn serial_handle_entry(
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
    n: usize,
) -> anyhow::Result<f64> {
    clear_receiver_state(pool, settings).await?;
    let receivers = bench_receivers(pool, settings, live, "bench-serial").await?;
    let mut conn = redis_connection(settings).await?;
    fill_queue(&mut conn, receivers.keys(), BENCH_QUEUE, 1, n).await?;
    receivers.ensure_group(BENCH_QUEUE).await?;
    let stream = receivers.keys().stream(BENCH_QUEUE);
    let opts = redis::streams::StreamReadOptions::default()
        .group(CONSUMER_GROUP, "bench-serial")
        .count(n);
    let reply: redis::streams::StreamReadReply = conn
        .xread_options(&[&stream], &[">"], &opts)
        .await
        .with_context(|| format!("read {stream}"))?;
    let entries: Vec<QueueEntry> = reply
        .keys
        .iter()
        .flat_map(|k| k.ids.iter())
        .map(QueueEntry::from_stream)
        .collect();
    anyhow::ensure!(entries.len() == n, "read {} of {n} entries", entries.len());
    // Warm up the connections and the pooling allocator on a few entries first.
    let warm = 20.min(n / 2);
    for entry in &entries[..warm] {
        receivers.handle_entry(BENCH_QUEUE, entry.clone()).await;
    }
    let start = Instant::now();
    for entry in &entries[warm..] {
        let handled = receivers.handle_entry(BENCH_QUEUE, entry.clone()).await;
        anyhow::ensure!(handled == HandledAs::Ok, "entry handled as {handled:?}");
    }
    Ok(start.elapsed().as_secs_f64() / (n - warm) as f64)
}

/// Average seconds of one echo handler call through [`LoadedPlugin::call_handler`] (fresh
/// instance, no host services): `.0` in a tight loop on one blocking thread, `.1` each call sent
/// to the blocking pool from async code and awaited, as the receiver runs it.
///
/// [`LoadedPlugin::call_handler`]: outbox_host::plugin::LoadedPlugin::call_handler
async fn handler_call_cost(live: &LiveConfig, calls: u32) -> anyhow::Result<(f64, f64)> {
    let plugin = live
        .registry
        .get(BENCH_HANDLER)
        .with_context(|| format!("{BENCH_HANDLER} not loaded"))?;
    let delivery = Arc::new(Delivery {
        event: to_wit_event(&bench_event(7)),
        queue: BENCH_QUEUE.to_string(),
        attempt: 1,
    });
    let call = move || -> anyhow::Result<()> {
        let outcome = plugin.call_handler(None, &delivery)?;
        anyhow::ensure!(
            matches!(outcome, Outcome::Ok),
            "echo handler did not return ok"
        );
        Ok(())
    };
    let tight = {
        let call = call.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<f64> {
            for _ in 0..100 {
                call()?;
            }
            let start = Instant::now();
            for _ in 0..calls {
                call()?;
            }
            Ok(start.elapsed().as_secs_f64() / f64::from(calls))
        })
        .await??
    };
    for _ in 0..20 {
        tokio::task::spawn_blocking(call.clone()).await??;
    }
    let start = Instant::now();
    for _ in 0..calls {
        tokio::task::spawn_blocking(call.clone()).await??;
    }
    let hopped = start.elapsed().as_secs_f64() / f64::from(calls);
    Ok((tight, hopped))
}

/// Average seconds per receipt of [`write_receipts`] on full batches of [`RECEIPT_BATCH`]
/// receipts, the largest batch the receivers' receipt writer sends in one statement.
async fn receipt_batch_cost(pool: &PgPool) -> anyhow::Result<f64> {
    let batch = |batch_no: i64| -> Vec<Receipt> {
        (0..numeric::len_i64(RECEIPT_BATCH))
            .map(|i| Receipt {
                event_id: -(batch_no * numeric::len_i64(RECEIPT_BATCH) + i + 1),
                handler: BOOKKEEPING_HANDLER.into(),
                queue: BENCH_QUEUE.into(),
                result: "ok",
                attempts: 1,
                duration_ms: 0.1,
                published: Vec::new(),
                error: None,
            })
            .collect()
    };
    let batches = 4;
    // Warm up with one batch of other events first.
    write_receipts(pool, &batch(batches)).await?;
    let start = Instant::now();
    for b in 0..batches {
        write_receipts(pool, &batch(b)).await?;
    }
    let cost = start.elapsed().as_secs_f64()
        / (numeric::signed_figure(batches) * numeric::len_figure(RECEIPT_BATCH));
    sqlx::query("DELETE FROM outbox_receipt WHERE handler = $1")
        .bind(BOOKKEEPING_HANDLER)
        .execute(pool)
        .await
        .context("delete the bench receipts")?;
    Ok(cost)
}

/// Average seconds of the receiver's two Redis round trips per entry, one at a time:
/// [`Receivers::claim_entry`](outbox_host::receive::Receivers::claim_entry) (the idempotency claim) and [`Receivers::finish_ok`](outbox_host::receive::Receivers::finish_ok) (the `done`
/// marker and `XACK` in one step).
async fn redis_bookkeeping_cost(
    pool: &PgPool,
    settings: &Settings,
    live: &LiveConfig,
    n: usize,
) -> anyhow::Result<f64> {
    let receivers = bench_receivers(pool, settings, live, "bench-bookkeeping").await?;
    receivers.ensure_group(BENCH_QUEUE).await?;
    let one = async |event_id: i64| -> anyhow::Result<()> {
        let claim = receivers
            .claim_entry(BENCH_QUEUE, BOOKKEEPING_HANDLER, event_id)
            .await?
            .with_context(|| format!("event {event_id} already claimed"))?;
        let settled = receivers
            .finish_ok(BENCH_QUEUE, &claim, "0-1", None)
            .await?;
        anyhow::ensure!(
            settled == Settled::Recorded,
            "event {event_id}: the claim was lost"
        );
        Ok(())
    };
    for i in 0..20 {
        one(1_000_000 + i).await?;
    }
    let start = Instant::now();
    for i in 0..numeric::len_i64(n) {
        one(i).await?;
    }
    Ok(start.elapsed().as_secs_f64() / n as f64)
}
