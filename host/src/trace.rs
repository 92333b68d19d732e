//! Trace: the whole life of one event in one value, for `outbox trace` (and a console).
//!
//! Owns putting together what PostgreSQL knows (the row, its history of failed attempts,
//! requeues and cancels, fan-out deliveries, handler receipts: [`crate::store`]'s trace reads)
//! with what Redis knows (the stream entry each destination got, from the sink's enqueue markers
//! while they live; dead letters of the event), and following the events its handlers published,
//! as a tree bounded in depth and size. It never writes anywhere.

use crate::redis_conn::RedisConn;
use chrono::{DateTime, TimeZone, Utc};
use redis::AsyncCommands;
use sqlx::PgPool;

use crate::config::Settings;
use crate::queue::QueueKeys;
use crate::receive::{DeadLetter, DeadLetters, ReceiveError};
use crate::routing::{route_one_on_blocking_thread, RouteDecision, RouterHandle};
use crate::store::{
    self, ClaimedEvent, HistoryEntry, StoreError, TracedDelivery, TracedEvent, TracedReceipt,
};

/// Most events one trace shows (the event and its descendants); the rest is counted as cut.
pub const TRACE_MAX_EVENTS: usize = 200;

/// A trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// PostgreSQL failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] ReceiveError),
    /// Redis failed while reading an enqueue marker.
    #[error("read the enqueue marker {key}: {source}")]
    Marker {
        /// The marker.
        key: String,
        /// The error.
        #[source]
        source: redis::RedisError,
    },
}

/// One destination queue of an event and what became of the hand-off.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TracedDestination {
    /// The queue.
    pub queue: String,
    /// Its stream entry id, when known.
    pub stream_id: Option<String>,
    /// When the entry was added (from its id).
    pub enqueued_at: Option<DateTime<Utc>>,
    /// `handed off`, `not handed off` (a fan-out destination that failed), or `unknown` (no
    /// record left: the enqueue marker expired after `OUTBOX_DEDUPE_TTL_SECONDS`).
    pub state: String,
    /// Hand-off attempts at this destination (fan-out only).
    pub attempts: Option<i32>,
    /// The last error at this destination (fan-out only).
    pub last_error: Option<String>,
    /// Where this comes from: `delivery` (the fan-out row) or `marker` (the sink's marker).
    pub source: String,
}

/// The life of one event and of the events its handlers published.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EventTrace {
    /// The row.
    pub event: TracedEvent,
    /// Failed attempts (host, time, error), requeues and cancels, oldest first.
    pub history: Vec<HistoryEntry>,
    /// Each destination and its hand-off.
    pub destinations: Vec<TracedDestination>,
    /// Why no destination is listed, when routing it now gives none.
    pub routing_note: Option<String>,
    /// Each handler's receipt.
    pub receipts: Vec<TracedReceipt>,
    /// Dead letters of this event on its destinations.
    pub dead_letters: Vec<DeadLetter>,
    /// The events its handlers published, each traced the same way.
    pub children: Vec<EventTrace>,
    /// Children not shown (the trace's depth or size bound).
    pub children_cut: usize,
}

/// Reads traces: the database, Redis, and the router in force (to name the queues of an event
/// that was not fanned out).
pub struct Tracer {
    pool: PgPool,
    conn: RedisConn,
    keys: QueueKeys,
    dead: DeadLetters,
    router: RouterHandle,
}

impl Tracer {
    /// A tracer on `pool` and the Redis of `settings`, routing with `router`.
    pub async fn connect(
        pool: PgPool,
        settings: &Settings,
        router: RouterHandle,
    ) -> Result<Self, TraceError> {
        let dead = DeadLetters::connect(settings).await?;
        let conn = crate::redis_conn::connect_shared(&settings.redis_url, &settings.redis_prefix)
            .await
            .map_err(|source| ReceiveError {
                context: "connect to Redis".into(),
                source,
            })?;
        Ok(Self {
            pool,
            conn,
            keys: QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url),
            dead,
            router,
        })
    }

    /// The trace of event `id` with its descendants down to `depth` generations (at most
    /// [`TRACE_MAX_EVENTS`] events in all), or `None` when there is no such event.
    pub async fn trace(&self, id: i64, depth: usize) -> Result<Option<EventTrace>, TraceError> {
        let mut budget = TRACE_MAX_EVENTS;
        self.trace_within(id, depth, &mut budget).await
    }

    async fn trace_within(
        &self,
        id: i64,
        depth: usize,
        budget: &mut usize,
    ) -> Result<Option<EventTrace>, TraceError> {
        let Some(event) = store::traced_event(&self.pool, id).await? else {
            return Ok(None);
        };
        *budget = budget.saturating_sub(1);
        let history = store::event_history(&self.pool, id).await?;
        let receipts = store::event_receipts(&self.pool, id).await?;
        let (destinations, routing_note) = self.destinations(&event).await?;
        let queues: Vec<String> = destinations.iter().map(|d| d.queue.clone()).collect();
        let dead_letters = self
            .dead
            .list(&queues)
            .await?
            .into_iter()
            .filter(|l| l.event_id == Some(id))
            .collect();
        let mut child_ids: Vec<i64> = receipts
            .iter()
            .flat_map(|r| r.published_ids.iter().copied())
            .collect();
        child_ids.sort_unstable();
        child_ids.dedup();
        let mut children = Vec::new();
        let mut children_cut = 0;
        for child in child_ids {
            if depth == 0 || *budget == 0 {
                children_cut += 1;
                continue;
            }
            match Box::pin(self.trace_within(child, depth - 1, budget)).await? {
                Some(trace) => children.push(trace),
                None => children_cut += 1,
            }
        }
        Ok(Some(EventTrace {
            event,
            history,
            destinations,
            routing_note,
            receipts,
            dead_letters,
            children,
            children_cut,
        }))
    }

    /// The destinations of `event`: its fan-out delivery rows when it has them, else the queues
    /// the router in force names, each with the stream entry its enqueue marker records.
    async fn destinations(
        &self,
        event: &TracedEvent,
    ) -> Result<(Vec<TracedDestination>, Option<String>), TraceError> {
        let rows = store::event_deliveries(&self.pool, event.id).await?;
        if !rows.is_empty() {
            return Ok((rows.into_iter().map(from_delivery).collect(), None));
        }
        let payload = store::event_payload(&self.pool, event.id).await?;
        let claimed = ClaimedEvent {
            id: event.id,
            tenant_id: event.tenant_id.clone(),
            event_type: event.event_type.clone(),
            event_version: event.event_version,
            payload: payload.unwrap_or_else(|| "{}".into()),
            headers: event.headers.to_string(),
            dispatch_key: event.dispatch_key.clone(),
            ordering_key: event.ordering_key.clone(),
            attempts: event.attempts,
            created_at: event.created_at,
            recovered_lease: false,
            generation: 0,
        };
        let decision = route_one_on_blocking_thread(self.router.current(), claimed).await;
        let queues = match decision {
            RouteDecision::Queues(queues) => queues,
            RouteDecision::NoRoute(why) => {
                return Ok((Vec::new(), Some(format!("no route: {why}"))))
            }
            RouteDecision::Error(why) => {
                return Ok((Vec::new(), Some(format!("routing failed: {why}"))))
            }
        };
        let mut destinations = Vec::with_capacity(queues.len());
        for queue in queues {
            let key = self.keys.enqueued_marker(&queue, event.id);
            let marker: Option<String> = self
                .conn
                .clone()
                .get(&key)
                .await
                .map_err(|source| TraceError::Marker { key, source })?;
            let stream_id = marker.filter(|m| !m.is_empty());
            destinations.push(TracedDestination {
                enqueued_at: stream_id.as_deref().and_then(entry_time),
                state: if stream_id.is_some() {
                    "handed off".into()
                } else if event.status == "done" {
                    "handed off (marker expired)".into()
                } else {
                    "unknown".into()
                },
                stream_id,
                queue,
                attempts: None,
                last_error: None,
                source: "marker".into(),
            });
        }
        Ok((destinations, None))
    }
}

/// A fan-out delivery row as a destination.
fn from_delivery(row: TracedDelivery) -> TracedDestination {
    TracedDestination {
        enqueued_at: row
            .delivered_at
            .or_else(|| row.stream_id.as_deref().and_then(entry_time)),
        state: if row.status == "done" {
            "handed off".into()
        } else {
            "not handed off".into()
        },
        queue: row.destination,
        stream_id: row.stream_id,
        attempts: Some(row.attempts),
        last_error: row.last_error,
        source: "delivery".into(),
    }
}

/// When a stream entry was added, from its id (`<ms>-<seq>`).
fn entry_time(stream_id: &str) -> Option<DateTime<Utc>> {
    let ms: i64 = stream_id.split('-').next()?.parse().ok()?;
    Utc.timestamp_millis_opt(ms).single()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_give_their_entry_time() {
        let t = entry_time("1796056338642-0").unwrap();
        assert_eq!(t.timestamp_millis(), 1796056338642);
        assert!(entry_time("nonsense").is_none());
        assert!(entry_time("").is_none());
    }
}
