//! Dead letters: entries whose handler gave up, in `<queue>.dead-letter` streams.
//!
//! Owns listing, replaying (back onto the queue, idempotency record cleared) and dropping them.

use std::collections::HashMap;

use redis::aio::ConnectionManager;
use redis::AsyncCommands;

use super::{ctx, QueueEntry, ReceiveError};
use crate::config::Settings;

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
    conn: ConnectionManager,
    prefix: String,
}

impl DeadLetters {
    /// Connect.
    pub async fn connect(settings: &Settings) -> Result<Self, ReceiveError> {
        let client = ctx(redis::Client::open(settings.redis_url.as_str()), || {
            "invalid REDIS_URL".into()
        })?;
        let conn = ctx(ConnectionManager::new(client).await, || {
            "connect to Redis".into()
        })?;
        Ok(Self {
            conn,
            prefix: settings.redis_prefix.clone(),
        })
    }

    /// Entries in the dead-letter stream of each of `queues`.
    pub async fn list(&self, queues: &[String]) -> Result<Vec<DeadLetter>, ReceiveError> {
        let mut out = Vec::new();
        let mut conn = self.conn.clone();
        for queue in queues {
            let key = format!("{}{}.dead-letter", self.prefix, queue);
            let reply: redis::streams::StreamRangeReply =
                ctx(conn.xrange_all(&key).await, || format!("read {key}"))?;
            for id in reply.ids {
                let entry = QueueEntry::from_stream(&id);
                out.push(DeadLetter {
                    queue: queue.clone(),
                    dead_letter_id: id.id.clone(),
                    event_id: entry.event_id(),
                    event_type: entry.get("event_type").unwrap_or_default().to_string(),
                    error: entry.get("error").unwrap_or_default().to_string(),
                    attempts: entry.handler_attempt(),
                    dead_at: entry.get("dead_at").unwrap_or_default().to_string(),
                    fields: entry.fields.into_iter().collect(),
                });
            }
        }
        Ok(out)
    }

    /// Put a dead letter back on its queue (attempts start again at 1; the handler's
    /// idempotency record is cleared so it runs), and remove it from the dead-letter stream.
    pub async fn replay(&self, letter: &DeadLetter) -> Result<String, ReceiveError> {
        let mut conn = self.conn.clone();
        let mut fields: Vec<(String, String)> = letter
            .fields
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "error"
                        | "handler"
                        | "queue"
                        | "dead_at"
                        | "handler_attempt"
                        | "last_error"
                        | "retry_nonce"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        fields.sort();
        fields.push(("replayed_from".into(), letter.dead_letter_id.clone()));
        let stream = format!("{}{}", self.prefix, letter.queue);
        let dead = format!("{}{}.dead-letter", self.prefix, letter.queue);
        let handler = letter.fields.get("handler").cloned().unwrap_or_default();
        let marker = format!(
            "{}outbox:handled:{}:{}",
            self.prefix,
            handler,
            letter.event_id.unwrap_or(0)
        );
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
        let dead = format!("{}{}.dead-letter", self.prefix, letter.queue);
        let _: i64 = ctx(conn.xdel(&dead, &[&letter.dead_letter_id]).await, || {
            format!("drop {}", letter.dead_letter_id)
        })?;
        Ok(())
    }
}
