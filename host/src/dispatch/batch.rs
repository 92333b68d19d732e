//! One claimed batch's life after the claim: route it, enqueue it through the sink (skipping the
//! destinations a fan-out event already reached), decide each event's outcome (done, retry with
//! backoff, failed, released after a blip) and record the outcomes in one write.
//!
//! Owns the batch's spans and counters and whose fault an outcome is. It never holds a row lock
//! across the sink call (the lease protects the rows) and never retries a PostgreSQL write past
//! half the lease.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tracing::Instrument;

use super::route::Routed;
use super::{BatchReport, Dispatcher};
use crate::fault::{self, Blip};
use crate::reconnect::retry_blips;
use crate::routing::RouteDecision;
use crate::sink::{Enqueue, EnqueueResult};
use crate::store::{
    self, Claim, ClaimedEvent, Context as _, DeliveryRecord, EventOutcome, RecordedCounts,
};

impl Dispatcher {
    /// How long a batch may keep retrying its PostgreSQL writes through blips: half the lease
    /// from when the batch started, well before another host may take the rows over.
    fn write_deadline(&self, started: Instant) -> Instant {
        started + self.settings.claim_lease / 2
    }

    /// Route, enqueue and record one claimed batch.
    ///
    /// Spans (debug level, see [`crate::trace_context`]): `outbox.claim` for the batch, with
    /// `outbox.route`, `outbox.enqueue` and `outbox.record` inside it, and one `outbox.dispatch`
    /// per event, a child of the event's producer (its `traceparent`) linked to the batch's.
    pub async fn dispatch_claim(&self, claim: Claim) -> Result<BatchReport, store::StoreError> {
        let started = Instant::now();
        let batch_span = tracing::debug_span!(parent: None, "outbox.claim", claimed = claim.events.len(), worker = %self.worker_id);
        let event_spans = dispatch_spans(&batch_span, &claim.events);
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        let recovered = claim.events.iter().filter(|e| e.recovered_lease).count();
        if recovered > 0 {
            tracing::warn!(
                recovered,
                "took over events whose lease expired (a host died or stalled)"
            );
            metrics::counter!("outbox_lease_recovered_total").increment(recovered as u64);
        }
        let (claim, decisions) = self
            .route(claim)
            .instrument(tracing::debug_span!(parent: &batch_span, "outbox.route"))
            .await;

        // Fan-out events that may have been partly handed off before (retried after a partial
        // failure, or requeued by an operator, which starts the attempts again): skip the
        // destinations already done. Every fan-out event is looked up, whatever its attempt:
        // a requeued one is on attempt 1 again, and its enqueue markers may have expired.
        let fan_out_ids: Vec<i64> = claim
            .events
            .iter()
            .zip(&decisions)
            .filter(|(_, d)| matches!(d, Routed::Route(RouteDecision::Queues(q)) if q.len() > 1))
            .map(|(e, _)| e.id)
            .collect();
        let already = retry_blips(
            "read delivered destinations",
            "record",
            self.write_deadline(started),
            |e: &store::StoreError| fault::postgres_blip(&e.source),
            || store::delivered_destinations(&self.pool, &fan_out_ids),
        )
        .await?;

        let mut items = Vec::new();
        for (event, decision) in claim.events.iter().zip(&decisions) {
            if let Routed::Route(RouteDecision::Queues(queues)) = decision {
                let done = already.get(&event.id);
                for queue in queues {
                    if !done.is_some_and(|d| d.contains(queue)) {
                        items.push(Enqueue { event, queue });
                    }
                }
            }
        }
        let results = self
            .sink
            .enqueue_all(&items)
            .instrument(
                tracing::debug_span!(parent: &batch_span, "outbox.enqueue", entries = items.len()),
            )
            .await;
        let redis_unavailable = results.iter().any(|r| r.blip().is_some());

        let mut per_event: HashMap<i64, Vec<(&str, &EnqueueResult)>> = HashMap::new();
        for (item, result) in items.iter().zip(&results) {
            per_event
                .entry(item.event.id)
                .or_default()
                .push((item.queue, result));
        }
        let added = results
            .iter()
            .filter(|r| matches!(r, EnqueueResult::Added(_)))
            .count();
        self.stats
            .enqueued
            .fetch_add(added as u64, Ordering::Relaxed);

        let mut outcomes = Vec::with_capacity(claim.events.len());
        let mut deliveries = Vec::new();
        for (event, decision) in claim.events.iter().zip(&decisions) {
            let outcome = match decision {
                Routed::BrokeContract(reason) => {
                    tracing::error!(event_id = event.id, event_type = %event.event_type, "{reason}; event failed");
                    EventOutcome::Failed {
                        error: reason.clone(),
                    }
                }
                Routed::Route(RouteDecision::NoRoute(reason)) => {
                    tracing::error!(event_id = event.id, event_type = %event.event_type, "{reason}; event failed");
                    metrics::counter!("outbox_no_route_total").increment(1);
                    EventOutcome::Failed {
                        error: reason.clone(),
                    }
                }
                Routed::Route(RouteDecision::Error(error)) => {
                    self.retry_or_fail(event, error.clone())
                }
                Routed::Route(RouteDecision::Queues(queues)) => {
                    let results = per_event.remove(&event.id).unwrap_or_default();
                    if queues.len() > 1 {
                        // A blipped destination is not recorded: it was not this attempt's fault.
                        for (queue, result) in results.iter().filter(|(_, r)| r.blip().is_none()) {
                            deliveries.push(DeliveryRecord {
                                event_id: event.id,
                                destination: queue.to_string(),
                                stream_id: result.stream_id().map(str::to_string),
                                error: result.error().map(str::to_string),
                            });
                        }
                    }
                    let refused: Vec<&str> = results
                        .iter()
                        .filter(|(_, r)| r.blip().is_none())
                        .filter_map(|(_, r)| r.error())
                        .collect();
                    let blipped: Vec<(&str, Blip)> = results
                        .iter()
                        .filter_map(|(_, r)| Some((r.error()?, r.blip()?)))
                        .collect();
                    if !refused.is_empty() {
                        self.retry_or_fail(event, refused.join("; "))
                    } else if let Some((_, blip)) = blipped.first() {
                        blip.count_retry("enqueue");
                        let errors: Vec<&str> = blipped.iter().map(|(e, _)| *e).collect();
                        tracing::debug!(event_id = event.id, %blip, "hand-off hit an infrastructure blip; released without counting the attempt");
                        EventOutcome::Released {
                            error: errors.join("; "),
                        }
                    } else {
                        EventOutcome::Done
                    }
                }
            };
            outcomes.push((event.id, outcome));
        }

        // A small batch all done rides on the claim loop's next claim (see `records_on_claim`);
        // any other, or one no claim took in time, records itself.
        let counts = async {
            if let Some(done) = self
                .records
                .ride(&claim, &outcomes, !deliveries.is_empty())
                .await
            {
                self.stats.recorded_on_claim.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("outbox_dispatch_records_on_claim_total").increment(1);
                return Ok(RecordedCounts {
                    done,
                    ..RecordedCounts::default()
                });
            }
            retry_blips(
                "record batch outcomes",
                "record",
                self.write_deadline(started),
                |e: &store::StoreError| fault::postgres_blip(&e.source),
                || async {
                    let mut conn = self
                        .statements
                        .acquire()
                        .await
                        .context("record_outcomes: acquire a connection")?;
                    let recorded =
                        store::record_outcomes(&mut *conn, &claim, &outcomes, &deliveries).await;
                    conn.finished(&recorded);
                    recorded
                },
            )
            .await
        }
        .instrument(tracing::debug_span!(parent: &batch_span, "outbox.record"))
        .await?;
        for (span, (_, outcome)) in event_spans.iter().zip(&outcomes) {
            span.record("outcome", outcome_label(outcome));
        }
        self.stats.done.fetch_add(counts.done, Ordering::Relaxed);
        self.stats
            .retried
            .fetch_add(counts.retried, Ordering::Relaxed);
        self.stats
            .failed
            .fetch_add(counts.failed, Ordering::Relaxed);
        self.stats
            .released
            .fetch_add(counts.released, Ordering::Relaxed);
        metrics::counter!("outbox_events_dispatched_total").increment(counts.done);
        metrics::counter!("outbox_events_retried_total").increment(counts.retried);
        metrics::counter!("outbox_events_failed_total").increment(counts.failed);
        metrics::histogram!("outbox_dispatch_batch_seconds")
            .record(started.elapsed().as_secs_f64());
        let lost = (outcomes.len() as u64)
            .saturating_sub(counts.done + counts.retried + counts.failed + counts.released);
        if lost > 0 {
            tracing::warn!(
                lost,
                "lease lost before recording (or recorded by an earlier try whose reply was lost); another host finishes those events"
            );
        }
        Ok(BatchReport {
            claimed: claim.events.len(),
            done: counts.done,
            retried: counts.retried,
            failed: counts.failed,
            released: counts.released,
            redis_unavailable,
        })
    }

    fn retry_or_fail(&self, event: &ClaimedEvent, error: String) -> EventOutcome {
        if event.attempts > self.settings.max_retries {
            tracing::error!(event_id = event.id, event_type = %event.event_type, attempts = event.attempts, %error, "giving up: event failed");
            EventOutcome::Failed {
                error: format!("gave up after {} attempts: {error}", event.attempts),
            }
        } else {
            let delay = self.settings.backoff_after(event.attempts);
            tracing::warn!(event_id = event.id, event_type = %event.event_type, attempt = event.attempts, retry_in = ?delay, %error, "dispatch failed; will retry");
            EventOutcome::Retry { error, delay }
        }
    }
}

/// One `outbox.dispatch` span per event of a claimed batch: a child of the event's producer
/// (its `traceparent`), linked to the batch's span. None while the batch's span is disabled (no
/// exporter): then nothing is parsed.
fn dispatch_spans(batch: &tracing::Span, events: &[ClaimedEvent]) -> Vec<tracing::Span> {
    if batch.is_disabled() {
        return Vec::new();
    }
    events
        .iter()
        .map(|event| {
            let span = tracing::debug_span!(parent: None, "outbox.dispatch", event_id = event.id, event_type = %event.event_type, outcome = tracing::field::Empty);
            crate::trace_context::set_remote_parent(&span, &event.headers);
            span.follows_from(batch);
            span
        })
        .collect()
}

/// What an event's dispatch came to, for its span.
fn outcome_label(outcome: &EventOutcome) -> &'static str {
    match outcome {
        EventOutcome::Done => "done",
        EventOutcome::Retry { .. } => "retry",
        EventOutcome::Failed { .. } => "failed",
        EventOutcome::Released { .. } => "released",
    }
}
