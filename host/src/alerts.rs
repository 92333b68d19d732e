//! Alerts: what an operator must hear about before users notice, raised by one host at a time.
//!
//! Owns the checks ([`observe`]: pending events older than 60 s, failed events, dead-letter
//! stream lengths, queue entries left unacknowledged longer than the receiver lease, hosts whose
//! heartbeat stopped), when each alert starts and stops firing ([`AlertBook::evaluate`], a pure
//! function of what was observed and when), a warning log line when one starts and an info line
//! when it clears, and the gauges an alerting rule reads (`outbox_alert_firing{alert}` and the
//! figures behind them). Only the host holding the PostgreSQL advisory lock [`ALERT_LOCK`] on its
//! own connection evaluates ([`alerts_loop`]); a host that dies or loses that connection loses the
//! lock with it, and another host takes over at its next try. It never changes an event, a queue
//! or a host's row.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::redis_conn::RedisConn;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::live_config::LiveConfig;
use crate::numeric::{figure, len_figure, signed_figure};
use crate::queue::QueueKeys;
use crate::store;

/// The advisory lock key of the alerting host (any host of one database contends for it).
pub use crate::store::ALERT_LOCK;

/// Pending events count as old after this long (the backlog alert counts only those).
pub const PENDING_OLD_AFTER: Duration = Duration::from_secs(60);

/// A host whose heartbeat (every 10 s) is older than this is reported dead.
pub const DEAD_HOST_AFTER: Duration = Duration::from_secs(60);

/// Hosts silent for longer than this are no longer reported (long gone, not news).
pub const DEAD_HOST_FORGOTTEN_AFTER: Duration = Duration::from_secs(86_400);

/// The alerts, by the name their gauge and log line carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Alert {
    /// More than `OUTBOX_PENDING_ALERT_COUNT` pending events older than 60 s, for longer than
    /// `OUTBOX_PENDING_ALERT_FOR`.
    PendingBacklog,
    /// The number of `failed` events grew since the last check.
    FailedGrowing,
    /// A dead-letter stream grew since the last check.
    DeadLettersGrowing,
    /// Queue entries delivered and left unacknowledged longer than the receiver lease.
    StalledEntries,
    /// A host's heartbeat stopped.
    DeadHost,
}

impl Alert {
    /// Every alert.
    pub const ALL: [Alert; 5] = [
        Alert::PendingBacklog,
        Alert::FailedGrowing,
        Alert::DeadLettersGrowing,
        Alert::StalledEntries,
        Alert::DeadHost,
    ];

    /// The alert's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Alert::PendingBacklog => "pending_backlog",
            Alert::FailedGrowing => "failed_growing",
            Alert::DeadLettersGrowing => "dead_letters_growing",
            Alert::StalledEntries => "stalled_entries",
            Alert::DeadHost => "dead_host",
        }
    }
}

/// What one check saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// Pending events older than [`PENDING_OLD_AFTER`].
    pub pending_old: i64,
    /// Events in `failed`.
    pub failed: i64,
    /// Entries in each handler-bound queue's dead-letter stream.
    pub dead_letters: BTreeMap<String, u64>,
    /// Entries of each handler-bound queue unacknowledged longer than the receiver lease.
    pub stalled: BTreeMap<String, u64>,
    /// Hosts whose heartbeat stopped, with seconds since it did.
    pub dead_hosts: BTreeMap<String, i64>,
}

/// The thresholds the alerts use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertLimits {
    /// Old pending events above this start the backlog clock.
    pub pending_count: i64,
    /// How long the backlog must last to fire.
    pub pending_for: Duration,
}

/// A change of an alert's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertChange {
    /// Started firing, with what it is about.
    Fired(Alert, String),
    /// Stopped firing.
    Cleared(Alert),
}

/// What the alerting host remembers between checks.
#[derive(Debug, Clone, Default)]
pub struct AlertBook {
    firing: BTreeMap<Alert, String>,
    backlog_since: Option<Instant>,
    last: Option<Observation>,
}

impl AlertBook {
    /// The alerts firing now, with what each is about.
    pub fn firing(&self) -> &BTreeMap<Alert, String> {
        &self.firing
    }

    /// Take `seen` (observed at `now`) into account: which alerts start or stop firing.
    pub fn evaluate(
        &mut self,
        seen: Observation,
        now: Instant,
        limits: AlertLimits,
    ) -> Vec<AlertChange> {
        let mut wanted: BTreeMap<Alert, String> = BTreeMap::new();
        if seen.pending_old > limits.pending_count {
            let since = *self.backlog_since.get_or_insert(now);
            if now.duration_since(since) >= limits.pending_for {
                wanted.insert(
                    Alert::PendingBacklog,
                    format!(
                        "{} pending events older than {} s for {} s (limit {})",
                        seen.pending_old,
                        PENDING_OLD_AFTER.as_secs(),
                        now.duration_since(since).as_secs(),
                        limits.pending_count
                    ),
                );
            }
        } else {
            self.backlog_since = None;
        }
        if let Some(last) = &self.last {
            if seen.failed > last.failed {
                wanted.insert(
                    Alert::FailedGrowing,
                    format!("failed events grew from {} to {}", last.failed, seen.failed),
                );
            }
            let grown: Vec<String> = seen
                .dead_letters
                .iter()
                .filter(|(queue, n)| **n > last.dead_letters.get(*queue).copied().unwrap_or(0))
                .map(|(queue, n)| format!("{queue}: {n}"))
                .collect();
            if !grown.is_empty() {
                wanted.insert(
                    Alert::DeadLettersGrowing,
                    format!("dead-letter streams grew ({})", grown.join(", ")),
                );
            }
        }
        let stalled: Vec<String> = seen
            .stalled
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(queue, n)| format!("{queue}: {n}"))
            .collect();
        if !stalled.is_empty() {
            wanted.insert(
                Alert::StalledEntries,
                format!(
                    "entries unacknowledged longer than the receiver lease ({})",
                    stalled.join(", ")
                ),
            );
        }
        if !seen.dead_hosts.is_empty() {
            let hosts: Vec<String> = seen
                .dead_hosts
                .iter()
                .map(|(host, ago)| format!("{host} ({ago} s ago)"))
                .collect();
            wanted.insert(
                Alert::DeadHost,
                format!("heartbeat stopped: {}", hosts.join(", ")),
            );
        }
        self.last = Some(seen);
        let mut changes = Vec::new();
        for alert in Alert::ALL {
            match (self.firing.contains_key(&alert), wanted.remove(&alert)) {
                (false, Some(about)) => {
                    changes.push(AlertChange::Fired(alert, about.clone()));
                    self.firing.insert(alert, about);
                }
                (true, Some(about)) => {
                    self.firing.insert(alert, about);
                }
                (true, None) => {
                    changes.push(AlertChange::Cleared(alert));
                    self.firing.remove(&alert);
                }
                (false, None) => {}
            }
        }
        changes
    }

    /// Forget everything (this host no longer raises alerts).
    pub fn reset(&mut self) {
        *self = AlertBook::default();
    }
}

/// An alert check failed.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    /// PostgreSQL failed.
    #[error("alert check: {0}")]
    Postgres(#[from] crate::store::StoreError),
    /// Redis failed.
    #[error("alert check: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Look at everything the alerts watch: the outbox table (its open rows from the claim
/// `horizon`), the handler-bound `queues`' streams and dead-letter streams, and the hosts'
/// heartbeats.
pub async fn observe(
    pool: &PgPool,
    horizon: &store::HorizonTracker,
    redis: &mut RedisConn,
    keys: &QueueKeys,
    queues: &[String],
    receiver_lease: Duration,
) -> Result<Observation, AlertError> {
    let horizon = horizon.current(pool).await;
    let table = store::pending_and_failed(pool, PENDING_OLD_AFTER, horizon).await?;
    let mut seen = Observation {
        pending_old: table.late,
        failed: table.failed,
        dead_hosts: store::silent_workers(pool, DEAD_HOST_AFTER, DEAD_HOST_FORGOTTEN_AFTER)
            .await?
            .into_iter()
            .collect(),
        ..Observation::default()
    };
    for queue in queues {
        let read = crate::queue::stalled_and_dead(redis, keys, queue, receiver_lease).await?;
        seen.dead_letters.insert(queue.clone(), read.dead_letters);
        seen.stalled.insert(queue.clone(), read.stalled);
    }
    Ok(seen)
}

/// Set the gauges of `seen` and of the alerts firing in `book`.
fn export(seen: &Observation, book: &AlertBook) {
    metrics::gauge!("outbox_alert_pending_old_events").set(signed_figure(seen.pending_old));
    metrics::gauge!("outbox_alert_failed_events").set(signed_figure(seen.failed));
    metrics::gauge!("outbox_alert_dead_hosts").set(len_figure(seen.dead_hosts.len()));
    for (queue, n) in &seen.dead_letters {
        metrics::gauge!("outbox_dead_letter_entries", "queue" => queue.clone()).set(figure(*n));
    }
    for (queue, n) in &seen.stalled {
        metrics::gauge!("outbox_stalled_entries", "queue" => queue.clone()).set(figure(*n));
    }
    for alert in Alert::ALL {
        let firing = book.firing().contains_key(&alert);
        metrics::gauge!("outbox_alert_firing", "alert" => alert.as_str()).set(if firing {
            1.0
        } else {
            0.0
        });
    }
}

/// Set each queue's gauges: length (BullMQ: jobs waiting), and for a stream its memory, its
/// unacknowledged entries, consumer lag and the age of its oldest unfinished entry.
fn export_queues(backlogs: &[crate::queue::QueueBacklog]) {
    for b in backlogs {
        let queue = b.queue.clone();
        metrics::gauge!("outbox_queue_length", "queue" => queue.clone(), "sink" => b.sink.as_str())
            .set(figure(b.waiting));
        if let Some(bytes) = b.memory_bytes {
            metrics::gauge!("outbox_queue_memory_bytes", "queue" => queue.clone())
                .set(figure(bytes));
        }
        if let Some(c) = &b.consumers {
            metrics::gauge!("outbox_queue_unacked_entries", "queue" => queue.clone())
                .set(figure(c.pending.unwrap_or(0)));
            metrics::gauge!("outbox_queue_lag_entries", "queue" => queue.clone())
                .set(figure(c.lag.unwrap_or(0)));
            metrics::gauge!("outbox_queue_oldest_entry_age_seconds", "queue" => queue)
                .set(c.oldest_entry_age_seconds.unwrap_or(0.0));
        }
    }
}

/// Log each change and count it.
fn report(changes: &[AlertChange]) {
    for change in changes {
        match change {
            AlertChange::Fired(alert, about) => {
                tracing::warn!(alert = alert.as_str(), %about, "alert firing");
                metrics::counter!("outbox_alerts_fired_total", "alert" => alert.as_str())
                    .increment(1);
            }
            AlertChange::Cleared(alert) => {
                tracing::info!(alert = alert.as_str(), "alert cleared");
            }
        }
    }
}

/// This host's claim to raise the alerts: [`ALERT_LOCK`] held on a connection of its own.
pub struct AlertLeader {
    options: PgConnectOptions,
    conn: Option<PgConnection>,
}

impl AlertLeader {
    /// Not holding the lock yet; contends on the database `pool` connects to.
    pub fn for_pool(pool: &PgPool) -> Self {
        Self {
            options: (*pool.connect_options()).clone(),
            conn: None,
        }
    }

    /// Whether this host raises the alerts now: still holding the lock (its connection is
    /// alive), or it just took it.
    pub async fn hold(&mut self) -> Result<bool, sqlx::Error> {
        if let Some(c) = self.conn.as_mut() {
            // A session lock lives as long as its connection.
            if c.ping().await.is_ok() {
                return Ok(true);
            }
            self.conn = None;
        }
        let mut c = PgConnection::connect_with(&self.options).await?;
        let got = store::try_advisory_lock(&mut c, ALERT_LOCK).await?;
        if got {
            self.conn = Some(c);
        }
        Ok(got)
    }
}

/// The alerts this host raises now (alert name -> what it is about), shared with its heartbeat
/// so that every host's console can show them: empty unless this host holds [`ALERT_LOCK`].
pub type FiringAlerts = std::sync::Arc<std::sync::Mutex<BTreeMap<String, String>>>;

/// Evaluate the alerts every `interval` while this host holds [`ALERT_LOCK`], until shutdown;
/// the alerts firing are kept in `firing`. Open rows are read from the claim `horizon`.
pub async fn alerts_loop(
    pool: PgPool,
    horizon: std::sync::Arc<store::HorizonTracker>,
    live: Option<LiveConfig>,
    settings: std::sync::Arc<Settings>,
    firing: FiringAlerts,
    shutdown: CancellationToken,
) {
    let publish = |book: &AlertBook| {
        if let Ok(mut shared) = firing.lock() {
            *shared = book
                .firing()
                .iter()
                .map(|(alert, about)| (alert.as_str().to_string(), about.clone()))
                .collect();
        }
    };
    let keys = QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url);
    let limits = AlertLimits {
        pending_count: settings.pending_alert_count,
        pending_for: settings.pending_alert_for,
    };
    let mut leader = AlertLeader::for_pool(&pool);
    let mut redis: Option<RedisConn> = None;
    let mut book = AlertBook::default();
    loop {
        match leader.hold().await {
            Ok(true) => {
                let queues: Vec<String> = live
                    .as_ref()
                    .map(|l| l.routes.load().handlers.keys().cloned().collect())
                    .unwrap_or_default();
                let conn = match redis.as_mut() {
                    Some(c) => Some(c),
                    None => crate::redis_conn::connect_shared(
                        &settings.redis_url,
                        &settings.redis_prefix,
                    )
                    .await
                    .ok()
                    .map(|c| redis.insert(c)),
                };
                if let Some(conn) = conn {
                    match observe(
                        &pool,
                        &horizon,
                        conn,
                        &keys,
                        &queues,
                        settings.receiver_lease,
                    )
                    .await
                    {
                        Ok(seen) => {
                            let changes = book.evaluate(seen.clone(), Instant::now(), limits);
                            report(&changes);
                            export(&seen, &book);
                            publish(&book);
                        }
                        Err(e) => tracing::warn!(error = %e, "alert check failed; trying again"),
                    }
                    if let Some(live) = &live {
                        let routes = live.routes.load_full();
                        match crate::queue::queue_backlogs_with_consumers(
                            conn,
                            &keys,
                            &routes,
                            &routes.queue_names(),
                        )
                        .await
                        {
                            Ok(backlogs) => export_queues(&backlogs),
                            Err(e) => {
                                tracing::warn!(error = %e, "queue gauges not read; trying again")
                            }
                        }
                    }
                }
            }
            Ok(false) => {
                if !book.firing().is_empty() || book.last.is_some() {
                    // Another host raises the alerts now: ours go quiet.
                    book.reset();
                    export(&Observation::default(), &book);
                    publish(&book);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "alert lock: cannot reach PostgreSQL; trying again")
            }
        }
        if crate::reconnect::sleep_or_shutdown(settings.alert_interval, &shutdown).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: AlertLimits = AlertLimits {
        pending_count: 1000,
        pending_for: Duration::from_secs(300),
    };

    fn fired(changes: &[AlertChange]) -> Vec<Alert> {
        changes
            .iter()
            .filter_map(|c| match c {
                AlertChange::Fired(a, _) => Some(*a),
                AlertChange::Cleared(_) => None,
            })
            .collect()
    }

    fn cleared(changes: &[AlertChange]) -> Vec<Alert> {
        changes
            .iter()
            .filter_map(|c| match c {
                AlertChange::Cleared(a) => Some(*a),
                AlertChange::Fired(..) => None,
            })
            .collect()
    }

    #[test]
    fn a_pending_backlog_fires_only_after_lasting_and_clears_when_it_drains() {
        let mut book = AlertBook::default();
        let t0 = Instant::now();
        let backlog = Observation {
            pending_old: 1500,
            ..Observation::default()
        };
        assert!(book.evaluate(backlog.clone(), t0, LIMITS).is_empty());
        assert!(book
            .evaluate(backlog.clone(), t0 + Duration::from_secs(299), LIMITS)
            .is_empty());
        let changes = book.evaluate(backlog.clone(), t0 + Duration::from_secs(300), LIMITS);
        assert_eq!(fired(&changes), [Alert::PendingBacklog]);
        assert!(book.firing()[&Alert::PendingBacklog].contains("1500 pending events"));
        let changes = book.evaluate(
            Observation::default(),
            t0 + Duration::from_secs(310),
            LIMITS,
        );
        assert_eq!(cleared(&changes), [Alert::PendingBacklog]);
        // A dip below the limit starts the clock again.
        book.evaluate(backlog.clone(), t0 + Duration::from_secs(320), LIMITS);
        assert!(book
            .evaluate(backlog, t0 + Duration::from_secs(400), LIMITS)
            .is_empty());
    }

    #[test]
    fn growing_failures_and_dead_letters_fire_and_clear_once_they_stop_growing() {
        let mut book = AlertBook::default();
        let t = Instant::now();
        let at = |failed: i64, dead: u64| Observation {
            failed,
            dead_letters: BTreeMap::from([("outbox.mail".to_string(), dead)]),
            ..Observation::default()
        };
        assert!(
            book.evaluate(at(5, 2), t, LIMITS).is_empty(),
            "a first look has no trend"
        );
        let changes = book.evaluate(at(7, 3), t, LIMITS);
        assert_eq!(
            fired(&changes),
            [Alert::FailedGrowing, Alert::DeadLettersGrowing]
        );
        assert!(book.firing()[&Alert::DeadLettersGrowing].contains("outbox.mail: 3"));
        let changes = book.evaluate(at(7, 3), t, LIMITS);
        assert_eq!(
            cleared(&changes),
            [Alert::FailedGrowing, Alert::DeadLettersGrowing]
        );
        let changes = book.evaluate(at(6, 1), t, LIMITS);
        assert!(
            changes.is_empty(),
            "shrinking (a requeue, a replay) is not an alert"
        );
    }

    #[test]
    fn stalled_entries_and_dead_hosts_fire_while_they_last() {
        let mut book = AlertBook::default();
        let t = Instant::now();
        let bad = Observation {
            stalled: BTreeMap::from([("outbox.mail".to_string(), 4)]),
            dead_hosts: BTreeMap::from([("host-a".to_string(), 95)]),
            ..Observation::default()
        };
        let changes = book.evaluate(bad.clone(), t, LIMITS);
        assert_eq!(fired(&changes), [Alert::StalledEntries, Alert::DeadHost]);
        assert!(book.firing()[&Alert::DeadHost].contains("host-a (95 s ago)"));
        assert!(
            book.evaluate(bad, t, LIMITS).is_empty(),
            "no repeat while firing"
        );
        let changes = book.evaluate(Observation::default(), t, LIMITS);
        assert_eq!(cleared(&changes), [Alert::StalledEntries, Alert::DeadHost]);
    }
}
