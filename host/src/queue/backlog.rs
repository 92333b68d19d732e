//! Queue backlogs: what each queue holds in Redis right now, the per-queue figures operators
//! read (`outbox stats`, the console's queue pages, the alert checks and their gauges).
//!
//! Owns [`QueueBacklog`] and its reads: for a streams queue its length, memory, trim counts and
//! (with [`queue_backlogs_with_consumers`]) what the receivers' consumer group has not finished;
//! for a BullMQ queue its job counts as `Queue.getJobCounts` counts them; for a NATS or
//! RabbitMQ queue what the hosts counted of its hand-offs ([`BrokerHandoffs`]). The keys and field
//! names are the tree's ([`super::QueueKeys`], [`super::bullmq::key`],
//! [`super::streams::trim_field`]). Every queue's reads go in one pipeline on one node (one per
//! queue on a cluster). It only reads: it never writes a key or changes an entry.

use std::collections::{BTreeMap, HashMap};

use super::bullmq::key as bull_key;
use super::keys::broker_field;
use super::streams::trim_field;
use super::{BullmqQueueKeys, KeyLayout, QueueKeys, CONSUMER_GROUP};
use crate::config::{RoutesFile, SinkKind};

/// What one queue holds in Redis right now (for `outbox stats`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueueBacklog {
    /// The queue.
    pub queue: String,
    /// Its sink.
    pub sink: SinkKind,
    /// Streams: entries in the stream (`XLEN`, handled ones included until trimmed). BullMQ:
    /// jobs waiting for a worker (`wait`, `paused` and `prioritized`). NATS and RabbitMQ: 0,
    /// the broker holds the messages (its own tools tell what waits).
    pub waiting: u64,
    /// NATS and RabbitMQ only: what the hosts counted of the messages they handed over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<BrokerHandoffs>,
    /// BullMQ only: jobs being processed, delayed (including retries in backoff), completed
    /// and failed, as `Queue.getJobCounts` counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bullmq: Option<BullmqCounts>,
    /// Streams only: what the receivers' consumer group has not finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumers: Option<StreamConsumers>,
    /// Streams only: bytes the stream takes in Redis (`MEMORY USAGE`, sampled; `None` before
    /// its first entry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Streams only: what `max_len` has trimmed so far (`None`: nothing, or no `max_len`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trimmed: Option<TrimmedCounts>,
}

/// What `max_len` trimmed from one stream since it was set (kept in Redis, summed over every
/// host): entries in all, and those some consumer group had not finished.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct TrimmedCounts {
    /// Entries trimmed.
    pub entries: u64,
    /// Of those, per consumer group: entries it had not read yet.
    pub unread: BTreeMap<String, u64>,
    /// Of those, per consumer group: entries it had read and not acknowledged.
    pub unacked: BTreeMap<String, u64>,
}

impl TrimmedCounts {
    /// The counts from the trim hash's fields (`trimmed`, `<group>:unread`, `<group>:unacked`).
    fn from_fields(fields: HashMap<String, u64>) -> Option<Self> {
        let mut counts = TrimmedCounts::default();
        for (field, n) in fields {
            if field == trim_field::TRIMMED {
                counts.entries = n;
            } else if let Some(group) = field.strip_suffix(trim_field::UNREAD_SUFFIX) {
                counts.unread.insert(group.to_string(), n);
            } else if let Some(group) = field.strip_suffix(trim_field::UNACKED_SUFFIX) {
                counts.unacked.insert(group.to_string(), n);
            }
        }
        (counts.entries > 0).then_some(counts)
    }
}

/// What the hosts counted of a broker queue's hand-offs, since the queue's first (summed over
/// every host; see [`super::keys::broker_field`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct BrokerHandoffs {
    /// Messages published.
    pub published: u64,
    /// Of those, acknowledged or confirmed as stored by the broker.
    pub confirmed: u64,
    /// Of those, dropped by JetStream as a re-publish of a message it had.
    pub duplicates: u64,
    /// Of those, refused (a missing destination, unroutable, too large).
    pub failed: u64,
    /// Of those, not answered (a blip; handed off again).
    pub unavailable: u64,
}

impl BrokerHandoffs {
    /// The counts from the hash's fields.
    fn from_fields(fields: HashMap<String, u64>) -> Self {
        let get = |name: &str| fields.get(name).copied().unwrap_or(0);
        Self {
            published: get(broker_field::PUBLISHED),
            confirmed: get(broker_field::CONFIRMED),
            duplicates: get(broker_field::DUPLICATES),
            failed: get(broker_field::FAILED),
            unavailable: get(broker_field::UNAVAILABLE),
        }
    }

    /// `published / confirmed / failed` (with duplicates and blips when there were any), for
    /// tables.
    pub fn summary(&self) -> String {
        let mut text = format!("{} / {} / {}", self.published, self.confirmed, self.failed);
        if self.duplicates > 0 {
            text.push_str(&format!(", {} duplicates", self.duplicates));
        }
        if self.unavailable > 0 {
            text.push_str(&format!(", {} unanswered", self.unavailable));
        }
        text
    }
}

/// What a stream's consumer group (the host's receivers) has not finished, and its dead letters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StreamConsumers {
    /// Entries delivered to a receiver and not acknowledged yet (`None`: no receiver group).
    pub pending: Option<u64>,
    /// Entries not delivered to any receiver yet (`None`: no receiver group, or Redis cannot
    /// tell after a trim).
    pub lag: Option<u64>,
    /// Entries in the queue's dead-letter stream.
    pub dead_letters: u64,
    /// Age in seconds of the oldest entry not finished: the oldest unacknowledged or
    /// undelivered one (with no receiver group: the oldest entry). `None`: nothing waits.
    pub oldest_entry_age_seconds: Option<f64>,
}

/// A BullMQ queue's job counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BullmqCounts {
    /// `active` list.
    pub active: u64,
    /// `delayed` set.
    pub delayed: u64,
    /// `completed` set.
    pub completed: u64,
    /// `failed` set.
    pub failed: u64,
}

/// Read every queue's backlog in one pipeline: `queues` with their sinks from `routes`, stream
/// keys under `keys`.
pub async fn queue_backlogs(
    conn: &mut impl redis::aio::ConnectionLike,
    keys: &QueueKeys,
    routes: &RoutesFile,
    queues: &[String],
) -> Result<Vec<QueueBacklog>, redis::RedisError> {
    const BULLMQ_LENGTHS: [(&str, &str); 7] = [
        ("LLEN", bull_key::WAIT),
        ("LLEN", bull_key::PAUSED),
        ("ZCARD", bull_key::PRIORITIZED),
        ("LLEN", bull_key::ACTIVE),
        ("ZCARD", bull_key::DELAYED),
        ("ZCARD", bull_key::COMPLETED),
        ("ZCARD", bull_key::FAILED),
    ];
    let reads = |pipe: &mut redis::Pipeline, queue: &str| match routes.sink_of(queue) {
        SinkKind::Streams => {
            pipe.cmd("XLEN").arg(keys.stream(queue));
            pipe.cmd("MEMORY").arg("USAGE").arg(keys.stream(queue));
            pipe.cmd("HGETALL").arg(keys.trimmed(queue));
        }
        SinkKind::Bullmq => {
            let bull = BullmqQueueKeys::new(&routes.bullmq_options(queue).prefix, queue);
            for (command, suffix) in BULLMQ_LENGTHS {
                pipe.cmd(command).arg(bull.key(suffix));
            }
        }
        // The broker holds these queues' messages; Redis holds what the hosts counted.
        SinkKind::Nats | SinkKind::Rabbitmq => {
            pipe.cmd("HGETALL").arg(keys.broker_handoffs(queue));
        }
    };
    let replies: Vec<redis::Value> = match keys.layout() {
        // One round trip for every queue.
        KeyLayout::Classic => {
            let mut pipe = redis::pipe();
            for queue in queues {
                reads(&mut pipe, queue);
            }
            pipe.query_async(conn).await?
        }
        // A pipeline reaches one slot: one per queue.
        KeyLayout::Slotted => {
            let mut replies = Vec::new();
            for queue in queues {
                let mut pipe = redis::pipe();
                reads(&mut pipe, queue);
                let answers: Vec<redis::Value> = pipe.query_async(conn).await?;
                replies.extend(answers);
            }
            replies
        }
    };
    let mut replies = replies.into_iter();
    let mut reply = || replies.next().unwrap_or(redis::Value::Nil);
    let number = |v: redis::Value| redis::from_redis_value::<u64>(&v).unwrap_or(0);
    Ok(queues
        .iter()
        .map(|queue| match routes.sink_of(queue) {
            SinkKind::Streams => QueueBacklog {
                queue: queue.clone(),
                sink: SinkKind::Streams,
                waiting: number(reply()),
                broker: None,
                bullmq: None,
                consumers: None,
                memory_bytes: redis::from_redis_value::<Option<u64>>(&reply()).unwrap_or(None),
                trimmed: redis::from_redis_value(&reply())
                    .ok()
                    .and_then(TrimmedCounts::from_fields),
            },
            SinkKind::Bullmq => QueueBacklog {
                queue: queue.clone(),
                sink: SinkKind::Bullmq,
                waiting: number(reply()) + number(reply()) + number(reply()),
                broker: None,
                bullmq: Some(BullmqCounts {
                    active: number(reply()),
                    delayed: number(reply()),
                    completed: number(reply()),
                    failed: number(reply()),
                }),
                consumers: None,
                memory_bytes: None,
                trimmed: None,
            },
            sink @ (SinkKind::Nats | SinkKind::Rabbitmq) => QueueBacklog {
                queue: queue.clone(),
                sink,
                waiting: 0,
                broker: Some(BrokerHandoffs::from_fields(
                    redis::from_redis_value(&reply()).unwrap_or_default(),
                )),
                bullmq: None,
                consumers: None,
                memory_bytes: None,
                trimmed: None,
            },
        })
        .collect())
}

/// [`queue_backlogs`], plus each stream queue's consumer figures ([`StreamConsumers`]): a few
/// more reads per stream queue.
pub async fn queue_backlogs_with_consumers(
    conn: &mut impl redis::aio::ConnectionLike,
    keys: &QueueKeys,
    routes: &RoutesFile,
    queues: &[String],
) -> Result<Vec<QueueBacklog>, redis::RedisError> {
    let mut backlogs = queue_backlogs(conn, keys, routes, queues).await?;
    for backlog in &mut backlogs {
        if backlog.sink == SinkKind::Streams {
            backlog.consumers = Some(stream_consumers(conn, keys, &backlog.queue).await?);
        }
    }
    Ok(backlogs)
}

/// The milliseconds part of a stream entry id.
fn id_millis(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

async fn stream_consumers(
    conn: &mut impl redis::aio::ConnectionLike,
    keys: &QueueKeys,
    queue: &str,
) -> Result<StreamConsumers, redis::RedisError> {
    let stream = keys.stream(queue);
    let dead_letters: u64 = redis::cmd("XLEN")
        .arg(keys.dead_letter_stream(queue))
        .query_async(conn)
        .await?;
    let groups: Vec<HashMap<String, redis::Value>> = match redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(&stream)
        .query_async(conn)
        .await
    {
        Ok(groups) => groups,
        // No stream yet: nothing waits.
        Err(e) if e.kind() == redis::ErrorKind::ResponseError => Vec::new(),
        Err(e) => return Err(e),
    };
    let group = groups.iter().find(|g| {
        g.get("name")
            .and_then(|v| redis::from_redis_value::<String>(v).ok())
            .as_deref()
            == Some(CONSUMER_GROUP)
    });
    let field = |name: &str| {
        group
            .and_then(|g| g.get(name))
            .and_then(|v| redis::from_redis_value::<u64>(v).ok())
    };
    let (pending, lag) = (field("pending"), field("lag"));
    // The oldest unfinished entry: the oldest unacknowledged one, or the first not delivered
    // (after the group's last delivered id); with no group, the stream's first entry.
    let mut oldest: Option<u64> = None;
    let last_delivered = group
        .and_then(|g| g.get("last-delivered-id"))
        .and_then(|v| redis::from_redis_value::<String>(v).ok());
    if group.is_some() && pending.unwrap_or(0) > 0 {
        let summary: redis::Value = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(CONSUMER_GROUP)
            .query_async(conn)
            .await?;
        if let redis::Value::Array(parts) = summary {
            if let Some(min) = parts
                .get(1)
                .and_then(|v| redis::from_redis_value::<String>(v).ok())
            {
                oldest = id_millis(&min);
            }
        }
    }
    let start = match (&group, &last_delivered) {
        (Some(_), Some(id)) => format!("({id}"),
        (Some(_), None) => "-".to_string(),
        (None, _) => "-".to_string(),
    };
    let first: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&stream)
        .arg(&start)
        .arg("+")
        .arg("COUNT")
        .arg(1)
        .query_async(conn)
        .await?;
    if let Some(first) = first.ids.first().and_then(|e| id_millis(&e.id)) {
        oldest = Some(oldest.map_or(first, |o| o.min(first)));
    }
    let now_ms = crate::numeric::count(chrono::Utc::now().timestamp_millis());
    Ok(StreamConsumers {
        pending,
        lag,
        dead_letters,
        oldest_entry_age_seconds: oldest
            .map(|ms| crate::numeric::figure(now_ms.saturating_sub(ms)) / 1000.0),
    })
}

/// What the alert checks read of one streams queue: its dead letters and the entries its
/// receivers have held longer than a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StalledAndDead {
    /// Entries in the queue's dead-letter stream.
    pub dead_letters: u64,
    /// Entries delivered to a receiver and idle for at least the lease (at most 1,000
    /// counted; 0 when the queue has no receiver group yet).
    pub stalled: u64,
}

/// The most stalled entries [`stalled_and_dead`] counts on one queue.
const STALLED_COUNT_MAX: usize = 1000;

/// Read `queue`'s dead letters and its entries idle for at least `lease` (see
/// [`StalledAndDead`]).
pub async fn stalled_and_dead(
    conn: &mut impl redis::aio::ConnectionLike,
    keys: &QueueKeys,
    queue: &str,
    lease: std::time::Duration,
) -> Result<StalledAndDead, redis::RedisError> {
    let dead_letters: u64 = redis::cmd("XLEN")
        .arg(keys.dead_letter_stream(queue))
        .query_async(conn)
        .await?;
    let stalled: redis::RedisResult<Vec<redis::Value>> = redis::cmd("XPENDING")
        .arg(keys.stream(queue))
        .arg(CONSUMER_GROUP)
        .arg("IDLE")
        .arg(crate::numeric::millis(lease))
        .arg("-")
        .arg("+")
        .arg(STALLED_COUNT_MAX)
        .query_async(conn)
        .await;
    let stalled = match stalled {
        Ok(entries) => u64::try_from(entries.len()).unwrap_or(u64::MAX),
        // No stream or no group yet: nothing delivered, nothing stalled.
        Err(e) if e.code() == Some("NOGROUP") => 0,
        Err(e) => return Err(e),
    };
    Ok(StalledAndDead {
        dead_letters,
        stalled,
    })
}
