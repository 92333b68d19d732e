//! Pools: how the host connects to PostgreSQL.
//!
//! Owns the host's pool ([`connect`]), the dispatcher's own pool on the same database with its
//! session settings ([`dispatch_pool`]), the policy both hand connections out by
//! ([`PING_WHEN_IDLE_FOR`]), the connections a stage keeps between its statements instead of
//! giving each back to the pool ([`KeptConnections`]) and the readiness check ([`ping`]). It
//! runs no statement of the outbox's own: those live with the stage that runs them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres};

use super::{redact, Context, StoreError};

/// Open a pool (no retry; see [`crate::dispatch::connect_postgres`] for the retrying variant).
///
/// Its sessions never JIT-compile (`jit = off`). PostgreSQL compiles, at every execution, a
/// statement whose estimated cost passes `jit_above_cost` (100,000 by default), and on a table
/// of millions of events the estimates of the host's own statements pass it even when they
/// read nothing: the heartbeat's release of stale hosts' claims, gated off while every host is
/// live, still spent 14 ms compiling against 2,000,000 rows. The host runs short statements
/// that read a batch or a bounded range; compiling one never pays.
pub async fn connect(database_url: &str, max_connections: u32) -> Result<PgPool, StoreError> {
    let options: PgConnectOptions = database_url
        .parse()
        .context(format!("invalid DATABASE_URL {database_url:?}"))?;
    pool_options(max_connections)
        .connect_with(options.application_name("outbox").options([("jit", "off")]))
        .await
        .context(format!("connect to PostgreSQL at {}", redact(database_url)))
}

/// Connections a dispatcher's [`dispatch_pool`] opens at most: a claim and an outcome record
/// for each of its three batches in flight, the idle wait and the claim horizon.
pub const DISPATCH_CONNECTIONS: u32 = 8;

/// The dispatcher's own pool on the database of `pool` (its options: address, credentials,
/// TLS), connected lazily, whose sessions commit with `synchronous_commit = off`: a claim or an
/// outcome record returns as soon as PostgreSQL has it in memory, not after the WAL flush (on
/// a disk whose `fdatasync` takes milliseconds, that wait was most of an event's commit-to-queue
/// time). What it can cost is bounded and already handled: a crash of PostgreSQL itself (not
/// of a host, not a dropped connection) can lose the last fraction of a second of those
/// commits, which leaves a claimed row `pending` (claimed again) or a handed-off row
/// `processing` (claimed again after its lease); the hand-off is idempotent per (event, queue)
/// and receivers keep a handled marker per (handler, event), so neither doubles an entry or a
/// handler run. Nothing a producer commits goes through this pool, and the database is never
/// left inconsistent (PostgreSQL's asynchronous commit).
///
/// Its sessions also plan with `enable_seqscan = off`. Every statement the dispatcher runs
/// reaches its rows through an index or a TID list (the claim index, the primary key, the
/// locked rows' `ctid`s), and a sequential scan of `outbox_event` is never the right plan for
/// one of them; but on statistics that say the table is empty (a fresh deployment: the table
/// was vacuumed or analyzed before the first burst), the planner chose one for every claim
/// and outcome record, sorting the whole table and checking every row against the batch's list
/// (20-40 ms per claim of 1000 with 40,000 rows waiting, most of PostgreSQL's CPU). With
/// sequential scans priced out it keeps the index and TID plans whatever the statistics say,
/// including in a generic plan cached while the table was empty.
///
/// And they plan with `enable_bitmapscan = off`, for the same reason: the claim must read the
/// claim index in order and stop at its batch. Between bursts the claim index holds only the
/// entries finished events left behind, and a claim planned then (a connection keeps its plan)
/// estimated one or two claimable rows: for every claim of the next burst it read every waiting
/// row into a bitmap and sorted them all to take a batch (29,500 rows and 27 ms for a claim of
/// 100 with 30,000 waiting, each claim costing as much as the backlog: three quarters of
/// PostgreSQL's time end to end on a host that had handled events before). A plain index scan
/// returns the rows in index order, so the claim reads its batch (and what lies before it since
/// the horizon) whatever the plan was made on.
///
/// And they plan with `plan_cache_mode = force_generic_plan`: a prepared statement is planned
/// once per connection. Left to choose, PostgreSQL kept re-planning the outcome record (a
/// statement of several data-modifying CTEs over arrays) at every batch, 0.45 ms of its CPU per
/// call: most of a batch's cost at a trickle of events, where each batch is one event. The
/// generic plans are the same index and TID plans (the bounds are parameters of index scans).
///
/// And they never JIT-compile (`jit = off`). PostgreSQL compiles a statement whose estimated
/// cost passes `jit_above_cost` (100,000 by default) at every execution, cached plan or not,
/// and with sequential scans priced out any plan that still holds one is estimated at 10^10:
/// the polling lease's statements read a sequence and a one-row table that way, so each
/// renewal (once a second while polling) was compiled with inlining and optimisation, 100-300
/// ms of PostgreSQL's CPU, and the claim loop waited for it: every second dispatching stopped
/// for that long while producers went on committing. No statement on these connections
/// touches more than a batch of rows, so compiling one never pays.
pub fn dispatch_pool(pool: &PgPool) -> PgPool {
    let options = (*pool.connect_options()).clone().options([
        ("synchronous_commit", "off"),
        ("enable_seqscan", "off"),
        ("enable_bitmapscan", "off"),
        ("plan_cache_mode", "force_generic_plan"),
        ("jit", "off"),
    ]);
    pool_options(DISPATCH_CONNECTIONS).connect_lazy_with(options)
}

/// How long a pooled connection may have been idle and still be handed out without a ping.
pub const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// The options of the host's pools: at most `max_connections`, a 5 s acquire timeout, and a
/// connection that sat idle for [`PING_WHEN_IDLE_FOR`] or longer pinged before it is handed out
/// (a dead one is closed and another taken), one in use more recently handed out as is.
///
/// sqlx's default pings every connection it hands out, and pings it again when it comes back:
/// with both, a statement cost three round trips to PostgreSQL; at a trickle of events (a claim,
/// an outcome record and a receipt write per event) the pings outnumbered the statements, and an
/// acquire ping sat in front of every claim. A connection cut while in use,
/// or within the second, fails its statement instead of being replaced silently; every caller
/// already treats that as a blip (retried on a fresh connection, no attempt counted), and the
/// ping on return, which sqlx always makes, closes the dead connection.
fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                use sqlx::Connection;
                Ok(meta.idle_for < PING_WHEN_IDLE_FOR || conn.ping().await.is_ok())
            })
        })
}

/// Connections one stage keeps between its statements, up to a number it chooses, instead of
/// giving each back to the pool.
///
/// sqlx's pool pings every connection given back to it (a `Sync` and its `ReadyForQuery`, on a
/// task of its own) before anyone may take it again: one more round trip to PostgreSQL after
/// every statement, which wakes a backend and the host's threads once more. At a trickle of
/// events (a claim, an outcome record and a receipt write per event) those pings were as many
/// as the statements. A stage whose statements run one after another (the claim loop, a receipt
/// writer) or a few at once (a dispatcher's batches in flight) takes its connections here:
///
/// - after a statement that went well ([`KeptConnection::finished`] with `Ok`), the connection
///   comes back to this stage's list, not to the pool, with no round trip;
/// - one that sat in the list for [`PING_WHEN_IDLE_FOR`] or longer is pinged before it is used
///   again (the pool's own rule), and a dead one is closed;
/// - after a statement that failed, that connection and every kept one go back to the pool,
///   which pings each and closes the dead ones: a connection cut takes them all, so a retry
///   runs on a connection that answers, not on the next dead one; one whose caller never said
///   how it went (its future was dropped mid-statement) goes back to the pool alone;
/// - when every kept connection is in use, the pool lends one, kept afterwards if the list has
///   room.
///
/// The kept connections count against the pool's size for as long as the stage lives.
#[derive(Clone)]
pub struct KeptConnections {
    inner: Arc<Kept>,
}

/// What [`KeptConnections`] clones share.
struct Kept {
    pool: PgPool,
    keep: usize,
    /// Connections between statements, each with when it last went back here; the last one
    /// back is taken first, so the others are the ones that go idle.
    idle: Mutex<Vec<(PoolConnection<Postgres>, Instant)>>,
}

impl KeptConnections {
    /// Keep up to `keep` (at least 1) connections of `pool`.
    pub fn new(pool: PgPool, keep: usize) -> Self {
        Self {
            inner: Arc::new(Kept {
                pool,
                keep: keep.max(1),
                idle: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A connection for the next statement: a kept one when one is free (pinged first when it
    /// sat idle for [`PING_WHEN_IDLE_FOR`]), else one from the pool.
    pub async fn acquire(&self) -> Result<KeptConnection, sqlx::Error> {
        loop {
            let Some((mut conn, since)) = self.inner.idle_list().pop() else {
                break;
            };
            let recent = since.elapsed() < PING_WHEN_IDLE_FOR;
            if recent || sqlx::Connection::ping(&mut *conn).await.is_ok() {
                return Ok(self.lend(conn));
            }
            // Dead: closed, not given back to the pool to be pinged once more.
            conn.close_on_drop();
        }
        let conn = self.inner.pool.acquire().await?;
        Ok(self.lend(conn))
    }

    /// How many connections wait in the list now.
    pub fn idle(&self) -> usize {
        self.inner.idle_list().len()
    }

    fn lend(&self, conn: PoolConnection<Postgres>) -> KeptConnection {
        KeptConnection {
            kept: Arc::clone(&self.inner),
            conn,
        }
    }
}

impl Kept {
    fn idle_list(&self) -> std::sync::MutexGuard<'_, Vec<(PoolConnection<Postgres>, Instant)>> {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        // Giving a connection back to the pool spawns a task: without a runtime (the process
        // is ending) the connections are closed where they are instead.
        if tokio::runtime::Handle::try_current().is_err() {
            for (conn, _) in self.idle_list().drain(..) {
                drop(conn.detach());
            }
        }
    }
}

/// A connection lent by [`KeptConnections`] for one statement (or a few in a row); it is a
/// [`PgConnection`] to run them on. Say how they went with [`finished`](Self::finished); one
/// dropped without that (its future was dropped mid-statement) goes back to the pool, whose
/// release ping waits out or closes what the statement left on it.
pub struct KeptConnection {
    kept: Arc<Kept>,
    conn: PoolConnection<Postgres>,
}

impl KeptConnection {
    /// The statement's result decides where the connection goes: `Ok` keeps it for the next
    /// statement, an error gives it and every kept connection back to the pool.
    pub fn finished<T, E>(self, result: &Result<T, E>) {
        let Self { kept, conn } = self;
        let mut idle = kept.idle_list();
        if result.is_err() {
            // Given back to the pool outside the lock (each spawns its release ping).
            let others = std::mem::take(&mut *idle);
            drop(idle);
            drop(others);
            drop(conn);
        } else if idle.len() < kept.keep {
            idle.push((conn, Instant::now()));
        } else {
            // The list is full: this one goes back to the pool.
            drop(idle);
            drop(conn);
        }
    }
}

impl std::ops::Deref for KeptConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for KeptConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// Whether PostgreSQL answers on a connection of `pool` (what readiness checks).
pub async fn ping(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query("SELECT 1")
        .execute(pool)
        .await
        .context("check PostgreSQL")?;
    Ok(())
}
