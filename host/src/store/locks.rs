//! The PostgreSQL advisory locks the host takes, each under a key of its own.
//!
//! Owns the keys: every advisory lock of the host is named here, so that two features never
//! share one by accident (a retention batch once waited on the queue pause lock because both
//! used the same number). Each key is `outbox` in its high bytes and a number of its own in the
//! low ones. Which statement takes a lock, and for how long, stays with the store code that
//! needs it; this module never holds one.

use sqlx::PgConnection;

/// Held (session level) by the host that raises the alerts; see `crate::alerts`.
pub const ALERT_LOCK: i64 = 0x6f75_7462_6f78_0001;

/// Orders changes of the pause rows with the Redis pause keys: taken exclusively by a pause or
/// resume, shared by the hosts' re-reads of the table (transaction level); see
/// [`super::PauseLock`].
pub const PAUSE_LOCK: i64 = 0x6f75_7462_6f78_0002;

/// Held by a retention batch for its transaction: one host of a database deletes at a time.
pub const RETENTION_LOCK: i64 = 0x6f75_7462_6f78_0003;

/// Held (session level) by the process applying migrations; see [`super::migrate`].
pub const MIGRATION_LOCK: i64 = 0x6f75_7462_6f78_0004;

/// Every advisory lock key of the host, by name.
pub const ADVISORY_LOCKS: [(&str, i64); 4] = [
    ("alerts", ALERT_LOCK),
    ("queue pause", PAUSE_LOCK),
    ("retention", RETENTION_LOCK),
    ("migrations", MIGRATION_LOCK),
];

/// Take the session-level advisory lock `key` on `conn` if no other session holds it, without
/// waiting: whether this session holds it now. It is held until released or the session ends.
pub async fn try_advisory_lock(conn: &mut PgConnection, key: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(conn)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advisory_lock_has_a_key_of_its_own() {
        for (i, (name, key)) in ADVISORY_LOCKS.iter().enumerate() {
            for (other, other_key) in &ADVISORY_LOCKS[i + 1..] {
                assert_ne!(
                    key, other_key,
                    "{name} and {other} share an advisory lock key"
                );
            }
        }
    }
}
