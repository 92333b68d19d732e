//! The claim horizon: the earliest `available_at` a row that is claimable now, or will become
//! claimable later, can have. The claim and the idle wait read the claim index from there
//! instead of from its start, so they never walk the index entries that every finished event
//! leaves behind (two per event: its `pending` and its `processing` version), which only
//! `VACUUM` removes. Without it an empty claim costs more with every event that ever passed
//! through the table until a vacuum runs; with it, the claim reads the entries of the last
//! second or so, however long ago the table was vacuumed.
//!
//! Why a row can never be below the horizon: every writer of `available_at` sets it to its own
//! transaction's `now()` or later (publish clamps an earlier `available_at` to `now()`; a
//! claim, retry, release or requeue uses `now()` plus a delay), and a transaction's `now()` is
//! its start. So a row not yet committed is at or after the start of a transaction open right
//! now, and a committed one is seen by the scan for the oldest live row. The horizon is the
//! earliest of: the oldest live row (at or after the previous horizon), the start of the oldest
//! transaction open on this database, and now, in that order of reading (the open
//! transactions first, so one that commits in between is seen by the scan). Two gaps, both
//! closed by a full scan at a bounded interval ([`FULL_SCAN_EVERY`], or
//! [`FULL_SCAN_EVERY_INEXACT`]): sessions of other roles whose transaction starts this role may
//! not read (without `pg_read_all_stats`), covered by [`HIDDEN_MARGIN`] (a hidden transaction
//! open longer than that may wait for the next full scan); and a row written by hand with an
//! `available_at` in the past. When the oldest live row alone bounds the horizon, it also names
//! that row's id ([`ClaimHorizon::from_id`]), so claims inside a burst committed at one instant
//! start at the burst's first live row. [`HorizonTracker`] keeps one dispatcher's horizon
//! fresh; the claim loop never waits for its refresh but the first
//! ([`HorizonTracker::current_refreshed_behind`]). This module never locks or writes a row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{Context, StoreError};

/// How far before now the horizon stays while some session's transaction start is hidden
/// from this role (or a prepared transaction exists).
pub const HIDDEN_MARGIN: Duration = Duration::from_secs(60);

/// How often a dispatcher recomputes its horizon at the latest.
pub const HORIZON_REFRESH: Duration = Duration::from_secs(1);

/// Batches a dispatcher claims before it recomputes its horizon, however recent it is
/// ([`HorizonTracker::claimed`]). A claim reads the claim index from the horizon, so it walks
/// the entries of every row claimed since the horizon was computed (two per row, its `pending`
/// and its `processing` version, each looked up in the table) before it reaches its batch:
/// with a refresh once a second, a claim of 100 in a burst dispatched at 7,000 events/s read
/// 10,000 buffers, 70 µs of PostgreSQL's time per event. Recomputing after a few batches keeps
/// that walk to a few batches, for one more statement every few claims.
pub const HORIZON_REFRESH_AFTER_BATCHES: u64 = 4;

/// How often the oldest live row is looked up from the start of the index (catching a row
/// written by hand with a past `available_at`) when every open transaction was visible.
pub const FULL_SCAN_EVERY: Duration = Duration::from_secs(600);

/// The same while some transaction start was hidden ([`HIDDEN_MARGIN`]).
pub const FULL_SCAN_EVERY_INEXACT: Duration = Duration::from_secs(60);

/// A claim horizon and how it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimHorizon {
    /// No claimable row has an earlier `available_at` (`None`: the start of the index).
    pub at: Option<DateTime<Utc>>,
    /// Set when the oldest live row bounds the horizon alone (strictly earlier than every open
    /// transaction's start and now): no claimable row at `at` has a lower id either, so the
    /// claim reads the index from (`at`, `from_id`). Events committed together share one
    /// `available_at` (the transaction's start); without the id, every claim of a burst read
    /// the index entries its finished events left behind from the burst's first event (2 per
    /// event: 100,000 entries, 3 ms, per claim after 50,000 events).
    pub from_id: Option<i64>,
    /// False when some open transaction's start could not be read (the horizon then keeps
    /// [`HIDDEN_MARGIN`] before now).
    pub exact: bool,
}

impl ClaimHorizon {
    /// The horizon that excludes nothing: the claim reads the index from its start.
    pub fn everything() -> Self {
        Self {
            at: None,
            from_id: None,
            exact: true,
        }
    }
}

/// What the database said, before it is turned into a horizon ([`horizon_from`]).
#[derive(Debug, Clone, Copy)]
struct Observed {
    /// The database clock when the open transactions were read.
    now: DateTime<Utc>,
    /// The start of the oldest transaction open on this database (other sessions).
    oldest_transaction: Option<DateTime<Utc>>,
    /// Some session's transaction start was hidden from this role.
    hidden: bool,
    /// The oldest prepared (two-phase) transaction's `prepared` time.
    oldest_prepared: Option<DateTime<Utc>>,
    /// The earliest (`available_at`, `id`) of a pending or processing row (at or after the
    /// bound).
    oldest_live: Option<(DateTime<Utc>, i64)>,
}

/// The horizon those observations allow.
fn horizon_from(seen: Observed) -> ClaimHorizon {
    let margin = chrono::Duration::from_std(HIDDEN_MARGIN).unwrap_or(chrono::Duration::MAX);
    let mut at = seen.now;
    let mut exact = true;
    if let Some(t) = seen.oldest_transaction {
        at = at.min(t);
    }
    if seen.hidden {
        at = at.min(seen.now - margin);
        exact = false;
    }
    if let Some(p) = seen.oldest_prepared {
        // A prepared transaction began before it was prepared, by an unknown time.
        at = at.min(p - margin);
        exact = false;
    }
    let mut from_id = None;
    if let Some((live, id)) = seen.oldest_live {
        if live < at {
            // Every row a transaction commits from now on is stamped at its start or later:
            // after `live`. So the rows at `live` are all committed, and the scan saw the
            // first of them.
            from_id = Some(id);
        }
        at = at.min(live);
    }
    ClaimHorizon {
        at: Some(at),
        from_id,
        exact,
    }
}

/// Compute the claim horizon. `from`: the previous horizon, below which no live row can be
/// (the scan for the oldest live row starts there); [`ClaimHorizon::everything`] scans the
/// whole claim index.
pub async fn claim_horizon(pool: &PgPool, from: ClaimHorizon) -> Result<ClaimHorizon, StoreError> {
    // Open transactions first: one that commits after this read is seen by the scan below.
    let (now, oldest_transaction, hidden): (DateTime<Utc>, Option<DateTime<Utc>>, Option<bool>) =
        sqlx::query_as(
            // A session this role may not read shows NULL in every column but its pid, user
            // and database (backend_type and state included).
            "SELECT now(), min(xact_start), bool_or(backend_type IS NULL OR state IS NULL)
             FROM pg_stat_activity
             WHERE datname = current_database()
               AND (backend_type = 'client backend' OR backend_type IS NULL)
               AND pid <> pg_backend_pid()",
        )
        .fetch_one(pool)
        .await
        .context("claim horizon: read the open transactions")?;
    let oldest_prepared: Option<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT min(prepared) FROM pg_prepared_xacts WHERE database = current_database()",
    )
    .fetch_one(pool)
    .await
    .context("claim horizon: read the prepared transactions")?;
    let oldest_live: Option<(DateTime<Utc>, i64)> = sqlx::query_as(
        "SELECT available_at, id FROM outbox_event
         WHERE status IN ('pending', 'processing')
           AND (available_at, id) >= (coalesce($1, '-infinity'::timestamptz),
                                      coalesce($2, -9223372036854775808))
         ORDER BY available_at, id
         LIMIT 1",
    )
    .bind(from.at)
    .bind(from.from_id)
    .fetch_optional(pool)
    .await
    .context("claim horizon: find the oldest live row")?;
    Ok(horizon_from(Observed {
        now,
        oldest_transaction,
        hidden: hidden.unwrap_or(false),
        oldest_prepared,
        oldest_live,
    }))
}

/// One dispatcher's claim horizon: recomputed every [`HORIZON_REFRESH`], or sooner once
/// [`HORIZON_REFRESH_AFTER_BATCHES`] batches were claimed from it (from the previous one; from
/// the start of the index every [`FULL_SCAN_EVERY`], or [`FULL_SCAN_EVERY_INEXACT`] while it is
/// not exact). While it cannot be computed (PostgreSQL away), the last one stays in
/// force.
#[derive(Debug, Default)]
pub struct HorizonTracker {
    state: std::sync::Mutex<TrackedHorizon>,
    /// Set while a refresh started by [`HorizonTracker::current_refreshed_behind`] runs.
    refreshing: AtomicBool,
}

/// The horizon in force and when it was computed.
#[derive(Debug, Default, Clone, Copy)]
struct TrackedHorizon {
    /// `None` until first computed: claims read the whole index.
    current: Option<ClaimHorizon>,
    refreshed: Option<std::time::Instant>,
    full_scan: Option<std::time::Instant>,
    /// Rows claimed from `current` so far.
    claimed: u64,
    /// Whether those rows reached [`HORIZON_REFRESH_AFTER_BATCHES`] batches: `current` is then
    /// recomputed however recent it is.
    walked_far: bool,
}

impl TrackedHorizon {
    /// See [`HorizonTracker::claimed`].
    fn count_claimed(&mut self, rows: usize, batch_size: i64) {
        self.claimed = self.claimed.saturating_add(rows as u64);
        let batch = u64::try_from(batch_size).unwrap_or(1).max(1);
        self.walked_far = self.claimed >= batch.saturating_mul(HORIZON_REFRESH_AFTER_BATCHES);
    }

    /// `None` when the horizon is fresh; otherwise `Some(from)`, where the next computation's
    /// scan for the oldest live row starts ([`ClaimHorizon::everything`]: the start of the
    /// index).
    fn due(&self, now: std::time::Instant) -> Option<ClaimHorizon> {
        let stale = |at: Option<std::time::Instant>, every: Duration| {
            at.is_none_or(|at| now.duration_since(at) >= every)
        };
        let full_every = match self.current {
            Some(h) if h.exact => FULL_SCAN_EVERY,
            _ => FULL_SCAN_EVERY_INEXACT,
        };
        if stale(self.full_scan, full_every) {
            Some(ClaimHorizon::everything())
        } else if stale(self.refreshed, HORIZON_REFRESH) || self.walked_far {
            Some(self.current.unwrap_or_else(ClaimHorizon::everything))
        } else {
            None
        }
    }
}

impl HorizonTracker {
    /// The horizon to claim from now, recomputed on `pool` when it is due.
    pub async fn current(&self, pool: &PgPool) -> ClaimHorizon {
        let now = std::time::Instant::now();
        let tracked = *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let current = tracked.current.unwrap_or_else(ClaimHorizon::everything);
        let Some(from) = tracked.due(now) else {
            return current;
        };
        match claim_horizon(pool, from).await {
            Ok(horizon) => {
                if current.exact && !horizon.exact {
                    tracing::info!(
                        "some sessions' transaction starts are hidden from this role (grant it pg_read_all_stats): claims read the claim index from {:?} before now",
                        HIDDEN_MARGIN
                    );
                }
                let mut state = self
                    .state
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                state.current = Some(horizon);
                state.refreshed = Some(now);
                state.claimed = 0;
                state.walked_far = false;
                if from.at.is_none() {
                    state.full_scan = Some(now);
                }
                horizon
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot compute the claim horizon; the last one stays");
                current
            }
        }
    }

    /// The horizon to claim from now, without waiting for its refresh: when one is due, it is
    /// computed on `pool` by a task of its own (one at a time) while this returns the horizon
    /// in force, which stays a valid lower bound (see the module comment: no row becomes
    /// claimable below a horizon once it was computed). Only the first horizon is waited for
    /// (before it, a claim would read the whole index). The claim loop takes its horizon here:
    /// a refresh is three statements one after another (about 1.6 ms on a busy 2-core
    /// machine), and waiting for it before every fourth claim held the claim loop up for a
    /// tenth of its time at batch 100.
    pub async fn current_refreshed_behind(self: &Arc<Self>, pool: &PgPool) -> ClaimHorizon {
        let tracked = *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(current) = tracked.current else {
            return self.current(pool).await;
        };
        let due = tracked.due(std::time::Instant::now()).is_some();
        if due && !self.refreshing.swap(true, Ordering::AcqRel) {
            let refresh = RefreshRunning(Arc::clone(self));
            let pool = pool.clone();
            tokio::spawn(async move {
                refresh.0.current(&pool).await;
                drop(refresh);
            });
        }
        current
    }

    /// Count `rows` claimed from the current horizon by a claim of up to `batch_size` rows: once
    /// [`HORIZON_REFRESH_AFTER_BATCHES`] such batches were claimed from it, [`Self::current`]
    /// recomputes it.
    pub fn claimed(&self, rows: usize, batch_size: i64) {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .count_claimed(rows, batch_size);
    }
}

/// The one refresh [`HorizonTracker::current_refreshed_behind`] runs at a time: dropping it
/// (the refresh finished, panicked, or its task was dropped with the runtime) lets the next one
/// start. Without it, a refresh that never finished would leave the horizon where it was for
/// good, and every claim would walk more of the claim index than the last.
struct RefreshRunning(Arc<HorizonTracker>);

impl Drop for RefreshRunning {
    fn drop(&mut self) {
        self.0.refreshing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
    }

    fn seen() -> Observed {
        Observed {
            now: at(0),
            oldest_transaction: None,
            hidden: false,
            oldest_prepared: None,
            oldest_live: None,
        }
    }

    #[test]
    fn a_horizon_is_recomputed_once_four_batches_were_claimed_from_it() {
        let now = std::time::Instant::now();
        let horizon = ClaimHorizon {
            at: Some(at(0)),
            from_id: Some(7),
            exact: true,
        };
        let mut tracked = TrackedHorizon {
            current: Some(horizon),
            refreshed: Some(now),
            full_scan: Some(now),
            ..TrackedHorizon::default()
        };
        assert_eq!(tracked.due(now), None, "just computed");
        for _ in 0..3 {
            tracked.count_claimed(100, 100);
        }
        tracked.count_claimed(99, 100);
        assert_eq!(
            tracked.due(now),
            None,
            "399 rows: under four batches of 100"
        );
        tracked.count_claimed(1, 100);
        assert_eq!(
            tracked.due(now),
            Some(horizon),
            "four batches claimed: recomputed from itself, before its second is up"
        );

        // At a trickle (a row or none per claim) it is recomputed by time alone.
        let mut trickle = TrackedHorizon {
            current: Some(horizon),
            refreshed: Some(now),
            full_scan: Some(now),
            ..TrackedHorizon::default()
        };
        for _ in 0..100 {
            trickle.count_claimed(1, 100);
        }
        assert_eq!(trickle.due(now), None);
        assert_eq!(trickle.due(now + HORIZON_REFRESH), Some(horizon));
    }

    #[test]
    fn a_refresh_that_never_finishes_does_not_stop_the_next_one() {
        // A PostgreSQL that accepts connections and never answers: the refresh hangs until its
        // task is dropped with the runtime, as a task that panicked unwinds.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("postgres://nobody@{}/none", silent.local_addr().unwrap());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let tracker = Arc::new(HorizonTracker::default());
        tracker.state.lock().unwrap().current = Some(ClaimHorizon::everything());
        runtime.block_on(async {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .acquire_timeout(Duration::from_secs(600))
                .connect_lazy(&url)
                .unwrap();
            let horizon = tracker.current_refreshed_behind(&pool).await;
            assert_eq!(horizon, ClaimHorizon::everything(), "the horizon in force");
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                tracker.refreshing.load(Ordering::Acquire),
                "the refresh hangs"
            );
        });
        drop(runtime);
        assert!(
            !tracker.refreshing.load(Ordering::Acquire),
            "the refresh's task is gone: the next claim may start another"
        );
    }

    #[test]
    fn the_horizon_is_the_earliest_of_now_the_oldest_open_transaction_and_the_oldest_live_row() {
        assert_eq!(
            horizon_from(seen()),
            ClaimHorizon {
                at: Some(at(0)),
                from_id: None,
                exact: true
            }
        );
        let live_later = Observed {
            oldest_live: Some((at(30), 7)),
            ..seen()
        };
        assert_eq!(horizon_from(live_later).at, Some(at(0)), "never after now");
        let open = Observed {
            oldest_transaction: Some(at(-5)),
            oldest_live: Some((at(-2), 7)),
            ..seen()
        };
        assert_eq!(
            horizon_from(open).at,
            Some(at(-5)),
            "a transaction open since -5 s may still commit a row stamped -5 s"
        );
        let backlog = Observed {
            oldest_transaction: Some(at(-5)),
            oldest_live: Some((at(-300), 7)),
            ..seen()
        };
        assert_eq!(horizon_from(backlog).at, Some(at(-300)));
    }

    #[test]
    fn the_claim_reads_from_the_oldest_live_rows_id_only_when_that_row_alone_bounds_the_horizon() {
        let backlog = Observed {
            oldest_transaction: Some(at(-5)),
            oldest_live: Some((at(-300), 4_000)),
            ..seen()
        };
        assert_eq!(horizon_from(backlog).from_id, Some(4_000));
        // A transaction open since that instant may still commit a row stamped with it, with
        // any id: the claim reads every row of the instant.
        let tie = Observed {
            oldest_transaction: Some(at(-300)),
            oldest_live: Some((at(-300), 4_000)),
            ..seen()
        };
        assert_eq!(horizon_from(tie).at, Some(at(-300)));
        assert_eq!(horizon_from(tie).from_id, None);
        let now = Observed {
            oldest_live: Some((at(0), 4_000)),
            ..seen()
        };
        assert_eq!(horizon_from(now).from_id, None);
        let hidden = Observed {
            hidden: true,
            oldest_live: Some((at(-30), 4_000)),
            ..seen()
        };
        assert_eq!(horizon_from(hidden).from_id, None, "the margin is earlier");
    }

    #[test]
    fn a_hidden_or_prepared_transaction_keeps_the_horizon_a_margin_before_now() {
        let hidden = Observed {
            hidden: true,
            oldest_live: Some((at(-1), 7)),
            ..seen()
        };
        assert_eq!(
            horizon_from(hidden),
            ClaimHorizon {
                at: Some(at(-60)),
                from_id: None,
                exact: false
            }
        );
        let prepared = Observed {
            oldest_prepared: Some(at(-10)),
            ..seen()
        };
        assert_eq!(horizon_from(prepared).at, Some(at(-70)));
        assert!(!horizon_from(prepared).exact);
    }
}
