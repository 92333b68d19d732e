//! Dead letters: entries whose handler gave up, in `<queue>.dead-letter` streams.
//!
//! Owns listing, replaying (back onto the queue, idempotency record cleared) and dropping them.
//! Key names and fields come from [`crate::queue`]; it never builds one itself.

use std::collections::HashMap;

use crate::redis_conn::RedisConn;
use redis::AsyncCommands;

use super::{ctx, ReceiveError};
use crate::config::Settings;
use crate::queue::{field, QueueEntry, QueueKeys};

/// One entry of a dead-letter stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetter {
    /// Queue it came from.
    pub queue: String,
    /// Its id in the dead-letter stream.
    pub dead_letter_id: String,
    /// The outbox event id.
    pub event_id: Option<i64>,
    /// Event type.
    pub event_type: String,
    /// Why it was dead-lettered.
    pub error: String,
    /// Handler attempts made.
    pub attempts: u32,
    /// When.
    pub dead_at: String,
    /// All fields.
    pub fields: HashMap<String, String>,
}

/// Dead-letter operations for `outbox dead-letter`.
pub struct DeadLetters {
    conn: RedisConn,
    keys: QueueKeys,
}

impl DeadLetters {
    /// Connect.
    pub async fn connect(settings: &Settings) -> Result<Self, ReceiveError> {
        let conn = ctx(
            crate::redis_conn::connect_shared(&settings.redis_url, &settings.redis_prefix).await,
            || "connect to Redis".into(),
        )?;
        Ok(Self {
            conn,
            keys: QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url),
        })
    }

    /// Entries in the dead-letter stream of each of `queues`.
    pub async fn list(&self, queues: &[String]) -> Result<Vec<DeadLetter>, ReceiveError> {
        let mut out = Vec::new();
        let mut conn = self.conn.clone();
        for queue in queues {
            let key = self.keys.dead_letter_stream(queue);
            let reply: redis::streams::StreamRangeReply =
                ctx(conn.xrange_all(&key).await, || format!("read {key}"))?;
            out.extend(reply.ids.iter().map(|id| Self::letter(queue, id)));
        }
        Ok(out)
    }

    /// The newest `per_queue` entries of each of `queues`' dead-letter streams, newest first
    /// (what a page shows: a stream of a million dead letters is not read whole).
    pub async fn list_newest(
        &self,
        queues: &[String],
        per_queue: usize,
    ) -> Result<Vec<DeadLetter>, ReceiveError> {
        let mut out = Vec::new();
        let mut conn = self.conn.clone();
        for queue in queues {
            let key = self.keys.dead_letter_stream(queue);
            let reply: redis::streams::StreamRangeReply = ctx(
                conn.xrevrange_count(&key, "+", "-", per_queue).await,
                || format!("read {key}"),
            )?;
            out.extend(reply.ids.iter().map(|id| Self::letter(queue, id)));
        }
        Ok(out)
    }

    /// The dead letter `dead_letter_id` of `queue`, if it is still there.
    pub async fn find(
        &self,
        queue: &str,
        dead_letter_id: &str,
    ) -> Result<Option<DeadLetter>, ReceiveError> {
        let key = self.keys.dead_letter_stream(queue);
        let mut conn = self.conn.clone();
        let reply: redis::streams::StreamRangeReply = ctx(
            conn.xrange(&key, dead_letter_id, dead_letter_id).await,
            || format!("read {key}"),
        )?;
        Ok(reply.ids.first().map(|id| Self::letter(queue, id)))
    }

    fn letter(queue: &str, id: &redis::streams::StreamId) -> DeadLetter {
        let entry = QueueEntry::from_stream(id);
        DeadLetter {
            queue: queue.to_string(),
            dead_letter_id: id.id.clone(),
            event_id: entry.event_id(),
            event_type: entry.get(field::EVENT_TYPE).unwrap_or_default().to_string(),
            error: entry.get(field::ERROR).unwrap_or_default().to_string(),
            attempts: entry.handler_attempt(),
            dead_at: entry.get(field::DEAD_AT).unwrap_or_default().to_string(),
            fields: entry.fields.clone().into_iter().collect(),
        }
    }

    /// Put a dead letter back on its queue (attempts start again at 1; the handler's
    /// idempotency record is cleared so it runs), and remove it from the dead-letter stream.
    pub async fn replay(&self, letter: &DeadLetter) -> Result<String, ReceiveError> {
        let mut conn = self.conn.clone();
        let fields = QueueEntry::replay_fields(&letter.fields, &letter.dead_letter_id);
        let stream = self.keys.stream(&letter.queue);
        let dead = self.keys.dead_letter_stream(&letter.queue);
        let handler = letter
            .fields
            .get(field::HANDLER)
            .cloned()
            .unwrap_or_default();
        let marker =
            self.keys
                .handled_marker(&letter.queue, &handler, letter.event_id.unwrap_or(0));
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(&marker)
            .ignore()
            .xadd(&stream, "*", &fields)
            .xdel(&dead, &[&letter.dead_letter_id])
            .ignore();
        let (id,): (String,) = ctx(pipe.query_async(&mut conn).await, || {
            format!("replay {} to {}", letter.dead_letter_id, letter.queue)
        })?;
        Ok(id)
    }

    /// Delete a dead letter for good.
    pub async fn drop_letter(&self, letter: &DeadLetter) -> Result<(), ReceiveError> {
        let mut conn = self.conn.clone();
        let dead = self.keys.dead_letter_stream(&letter.queue);
        let _: i64 = ctx(conn.xdel(&dead, &[&letter.dead_letter_id]).await, || {
            format!("drop {}", letter.dead_letter_id)
        })?;
        Ok(())
    }
}
