//! The publish capability's PostgreSQL backend: a receiver's children and denial events go into
//! the outbox table.
//!
//! Owns the short transaction that inserts one host event (a child or a denial event) with its
//! deadline. It is reached only through [`Children::send`](super::Children::send) (children that
//! passed the checks and the policy) and the receiver's denial events; it never inserts an event
//! a plugin built without the host's checks.

use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::PgPool;

use super::{ChildRules, PreparedChild, PublishBackend};
use crate::publish::{publish_as, NewEvent, Publisher};

/// Deadline of one outbox insert issued for a plugin.
const DB_DEADLINE: Duration = Duration::from_secs(10);

/// The outbox table of a receiver's database.
pub(crate) struct PostgresPublish {
    pool: PgPool,
}

impl PostgresPublish {
    /// Inserts through `pool`.
    pub(crate) fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Insert one host event (a child or a denial: reserved key prefixes allowed) of generation
    /// `generation`, its payload within `max_payload_bytes` (at least 1 KiB), in its own short
    /// transaction; the existing id when its dispatch key already names the same event.
    pub(crate) async fn insert_event(
        &self,
        event: NewEvent,
        generation: i32,
        max_payload_bytes: usize,
    ) -> Result<i64, String> {
        let pool = &self.pool;
        let limit = max_payload_bytes.max(1024);
        let work = async move {
            let mut tx = pool.begin().await.map_err(|e| format!("publish: {e}"))?;
            let id = publish_as(&mut tx, event, limit, Publisher::Host, generation)
                .await
                .map_err(|e| e.to_string())?;
            tx.commit()
                .await
                .map_err(|e| format!("publish: commit: {e}"))?;
            Ok(id)
        };
        tokio::time::timeout(DB_DEADLINE, work)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "publish: the database did not answer within {} s",
                    DB_DEADLINE.as_secs()
                ))
            })
    }
}

impl PublishBackend for PostgresPublish {
    fn insert<'a>(
        &'a self,
        child: PreparedChild,
        rules: &'a ChildRules,
    ) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(self.insert_event(child.event, child.generation, rules.max_payload_bytes))
    }
}
