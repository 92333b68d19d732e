//! Fault: telling an infrastructure blip from the event's own fault.
//!
//! Owns the one classification of PostgreSQL (sqlx), Redis, NATS JetStream and RabbitMQ
//! (AMQP) errors into [`Blip`]s (the brokers' in `brokers.rs`): a dropped,
//! reset, refused or timed-out connection, a server that is loading, busy, fenced read-only or
//! lost its scripts, a terminated backend, an exhausted pool, a serialization failure. A blip is
//! never an event's fault: callers retry it with [`crate::reconnect`]'s backoff, without counting
//! an attempt of the event, and count it in `outbox_infra_retries_total`. Everything this module
//! does not recognise is left to the caller's ordinary error path (for an event: its attempt and
//! the event backoff).
//!
//! It decides by error kind only (the redis crate's `ErrorKind` and I/O error kinds, the Redis
//! error code, sqlx's error variants and the SQLSTATE with its severity), never by message text,
//! and it never retries or waits itself.

use std::io;

mod brokers;

pub use brokers::{amqp_blip, nats_publish_blip};

use sqlx::postgres::{PgDatabaseError, PgSeverity};

/// The service a blip came from (the `service` label of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// PostgreSQL (the outbox tables).
    Postgres,
    /// Redis (the queues).
    Redis,
    /// NATS JetStream (`nats` queues).
    Nats,
    /// RabbitMQ (`rabbitmq` queues).
    Rabbitmq,
}

impl Service {
    /// `postgres`, `redis`, `nats` or `rabbitmq`.
    pub fn label(self) -> &'static str {
        match self {
            Service::Postgres => "postgres",
            Service::Redis => "redis",
            Service::Nats => "nats",
            Service::Rabbitmq => "rabbitmq",
        }
    }
}

/// What kind of blip (the `kind` label of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlipKind {
    /// The connection broke under a request (broken pipe, reset, unexpected end of stream).
    ConnectionDropped,
    /// Nothing listens (a restart or failover in progress).
    ConnectionRefused,
    /// The service did not answer in time.
    Timeout,
    /// Any other I/O failure on the connection.
    Io,
    /// Redis `LOADING`: loading its dataset after a restart.
    Loading,
    /// Redis `BUSY`: a script or function runs too long; a broker's client holding as many
    /// unconfirmed publishes as it may.
    Busy,
    /// A broker out of storage or memory, or a stream at its limits refusing new messages.
    ResourcesExceeded,
    /// Redis `NOSCRIPT`: the script cache was emptied (restart, `SCRIPT FLUSH`).
    NoScript,
    /// Redis `READONLY`: a replica, e.g. the old primary during a failover.
    ReadOnly,
    /// Redis `MASTERDOWN`: the replica lost its primary.
    MasterDown,
    /// Redis Cluster `TRYAGAIN`: a slot is being migrated.
    TryAgain,
    /// Redis Cluster `CLUSTERDOWN`.
    ClusterDown,
    /// Redis Cluster `MOVED` or `ASK` that reached the caller: the slot's owner changed and the
    /// client ran out of redirections (a primary that died, while the cluster fails over).
    SlotMoved,
    /// Redis Cluster: no connection to any node (every node unreachable).
    ClusterUnreachable,
    /// Redis Cluster: a write was not confirmed by the replicas in time (`WAIT`); it may be lost
    /// if its primary dies now, so it is done again (every such write is idempotent).
    NotReplicated,
    /// No pooled PostgreSQL connection within the acquire timeout.
    PoolTimedOut,
    /// The PostgreSQL pool was closed.
    PoolClosed,
    /// SQLSTATE class 08: connection exception.
    ConnectionException,
    /// SQLSTATE 57P01 `admin_shutdown`: the backend was terminated (`pg_terminate_backend`, a
    /// fast shutdown, a proxy restart).
    AdminShutdown,
    /// SQLSTATE 57P02 `crash_shutdown`: another backend crashed and the server restarts.
    CrashShutdown,
    /// SQLSTATE 57P03 `cannot_connect_now`: the server is starting or shutting down.
    CannotConnectNow,
    /// SQLSTATE 55000 as a FATAL error: the database does not accept connections right now
    /// (`ALLOW_CONNECTIONS false`). A FATAL error ends the session, so it can only be the
    /// connection being refused, not a statement's fault.
    NotAcceptingConnections,
    /// SQLSTATE 53300 `too_many_connections`.
    TooManyConnections,
    /// SQLSTATE 40001 `serialization_failure`.
    SerializationFailure,
    /// SQLSTATE 40P01 `deadlock_detected`.
    Deadlock,
}

impl BlipKind {
    /// The metric label (`connection_dropped`, `noscript`, `admin_shutdown`, ...).
    pub fn label(self) -> &'static str {
        match self {
            BlipKind::ConnectionDropped => "connection_dropped",
            BlipKind::ConnectionRefused => "connection_refused",
            BlipKind::Timeout => "timeout",
            BlipKind::Io => "io",
            BlipKind::Loading => "loading",
            BlipKind::Busy => "busy",
            BlipKind::ResourcesExceeded => "resources_exceeded",
            BlipKind::NoScript => "noscript",
            BlipKind::ReadOnly => "readonly",
            BlipKind::MasterDown => "masterdown",
            BlipKind::TryAgain => "tryagain",
            BlipKind::ClusterDown => "clusterdown",
            BlipKind::SlotMoved => "slot_moved",
            BlipKind::ClusterUnreachable => "cluster_unreachable",
            BlipKind::NotReplicated => "not_replicated",
            BlipKind::PoolTimedOut => "pool_timed_out",
            BlipKind::PoolClosed => "pool_closed",
            BlipKind::ConnectionException => "connection_exception",
            BlipKind::AdminShutdown => "admin_shutdown",
            BlipKind::CrashShutdown => "crash_shutdown",
            BlipKind::CannotConnectNow => "cannot_connect_now",
            BlipKind::NotAcceptingConnections => "not_accepting_connections",
            BlipKind::TooManyConnections => "too_many_connections",
            BlipKind::SerializationFailure => "serialization_failure",
            BlipKind::Deadlock => "deadlock",
        }
    }
}

/// An infrastructure blip: which service, and what kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blip {
    /// Where it happened.
    pub service: Service,
    /// What happened.
    pub kind: BlipKind,
}

impl Blip {
    /// Count one retry caused by this blip at `stage` (`claim`, `enqueue`, `record`,
    /// `receiver_outcome`, `receipts`, ...) in `outbox_infra_retries_total`.
    pub fn count_retry(self, stage: &'static str) {
        self.count_retries(stage, 1);
    }

    /// Count `n` retries at once (e.g. the events of a batch put back after a Redis blip).
    pub fn count_retries(self, stage: &'static str, n: u64) {
        metrics::counter!(
            "outbox_infra_retries_total",
            "service" => self.service.label(),
            "kind" => self.kind.label(),
            "stage" => stage
        )
        .increment(n);
    }
}

impl std::fmt::Display for Blip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.service.label(), self.kind.label())
    }
}

/// The blip behind a Redis error, if it is one. A refusal of the request itself (`WRONGTYPE`,
/// `ERR`, `OOM`, a script error) is not a blip.
pub fn redis_blip(error: &redis::RedisError) -> Option<Blip> {
    use redis::ErrorKind as K;
    let kind = match error.kind() {
        K::IoError => io_blip_kind(error),
        K::BusyLoadingError => BlipKind::Loading,
        K::NoScriptError => BlipKind::NoScript,
        K::ReadOnly => BlipKind::ReadOnly,
        K::MasterDown => BlipKind::MasterDown,
        K::TryAgain => BlipKind::TryAgain,
        K::ClusterDown => BlipKind::ClusterDown,
        K::Moved | K::Ask => BlipKind::SlotMoved,
        K::ClusterConnectionNotFound => BlipKind::ClusterUnreachable,
        // BUSY has no kind of its own in the redis crate: it arrives as an extension code.
        K::ExtensionError if error.code() == Some("BUSY") => BlipKind::Busy,
        _ => return None,
    };
    Some(Blip {
        service: Service::Redis,
        kind,
    })
}

fn io_blip_kind(error: &redis::RedisError) -> BlipKind {
    if error.is_connection_dropped() {
        BlipKind::ConnectionDropped
    } else if error.is_connection_refusal() {
        BlipKind::ConnectionRefused
    } else if error.is_timeout() {
        BlipKind::Timeout
    } else {
        BlipKind::Io
    }
}

/// The blip behind a sqlx error, if it is one. A statement's own error (a constraint, a syntax
/// error, a missing table) is not a blip.
pub fn postgres_blip(error: &sqlx::Error) -> Option<Blip> {
    let kind = match error {
        sqlx::Error::Io(e) => io_error_blip_kind(e),
        sqlx::Error::PoolTimedOut => BlipKind::PoolTimedOut,
        sqlx::Error::PoolClosed => BlipKind::PoolClosed,
        sqlx::Error::WorkerCrashed => BlipKind::ConnectionDropped,
        sqlx::Error::Database(db) => {
            let fatal = db
                .try_downcast_ref::<PgDatabaseError>()
                .is_some_and(|pg| matches!(pg.severity(), PgSeverity::Fatal | PgSeverity::Panic));
            sqlstate_blip_kind(db.code().as_deref()?, fatal)?
        }
        _ => return None,
    };
    Some(Blip {
        service: Service::Postgres,
        kind,
    })
}

/// The blip an I/O error on a connection stands for (every one is a blip).
fn io_error_blip_kind(error: &io::Error) -> BlipKind {
    match error.kind() {
        io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::NotConnected
        | io::ErrorKind::UnexpectedEof => BlipKind::ConnectionDropped,
        io::ErrorKind::ConnectionRefused => BlipKind::ConnectionRefused,
        io::ErrorKind::TimedOut => BlipKind::Timeout,
        _ => BlipKind::Io,
    }
}

/// The blip a SQLSTATE stands for (`fatal`: the server ended the session with it).
fn sqlstate_blip_kind(code: &str, fatal: bool) -> Option<BlipKind> {
    Some(match code {
        "57P01" => BlipKind::AdminShutdown,
        "57P02" => BlipKind::CrashShutdown,
        "57P03" => BlipKind::CannotConnectNow,
        "53300" => BlipKind::TooManyConnections,
        "40001" => BlipKind::SerializationFailure,
        "40P01" => BlipKind::Deadlock,
        "55000" if fatal => BlipKind::NotAcceptingConnections,
        c if c.starts_with("08") => BlipKind::ConnectionException,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn redis_kind(e: redis::RedisError) -> Option<BlipKind> {
        redis_blip(&e).map(|b| {
            assert_eq!(b.service, Service::Redis);
            b.kind
        })
    }

    fn redis_io(kind: io::ErrorKind) -> Option<BlipKind> {
        redis_kind(io::Error::from(kind).into())
    }

    fn redis_server(kind: redis::ErrorKind) -> Option<BlipKind> {
        redis_kind(
            (
                kind,
                "An error was signalled by the server",
                "detail".to_string(),
            )
                .into(),
        )
    }

    fn redis_code(code: &str) -> Option<BlipKind> {
        redis_kind(redis::make_extension_error(code.to_string(), None))
    }

    #[test]
    fn redis_broken_pipe_reset_and_eof_are_dropped_connections() {
        for kind in [
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::UnexpectedEof,
        ] {
            assert_eq!(
                redis_io(kind),
                Some(BlipKind::ConnectionDropped),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn redis_refused_connection_is_a_blip() {
        assert_eq!(
            redis_io(io::ErrorKind::ConnectionRefused),
            Some(BlipKind::ConnectionRefused)
        );
    }

    #[test]
    fn redis_timeout_is_a_blip() {
        assert_eq!(redis_io(io::ErrorKind::TimedOut), Some(BlipKind::Timeout));
    }

    #[test]
    fn redis_other_io_errors_are_blips() {
        assert_eq!(
            redis_io(io::ErrorKind::ConnectionAborted),
            Some(BlipKind::Io)
        );
        assert_eq!(redis_io(io::ErrorKind::Other), Some(BlipKind::Io));
    }

    #[test]
    fn redis_loading_is_a_blip() {
        assert_eq!(
            redis_server(redis::ErrorKind::BusyLoadingError),
            Some(BlipKind::Loading)
        );
    }

    #[test]
    fn redis_busy_is_a_blip() {
        assert_eq!(redis_code("BUSY"), Some(BlipKind::Busy));
    }

    #[test]
    fn redis_noscript_is_a_blip() {
        assert_eq!(
            redis_server(redis::ErrorKind::NoScriptError),
            Some(BlipKind::NoScript)
        );
    }

    #[test]
    fn redis_readonly_is_a_blip() {
        assert_eq!(
            redis_server(redis::ErrorKind::ReadOnly),
            Some(BlipKind::ReadOnly)
        );
    }

    #[test]
    fn redis_masterdown_is_a_blip() {
        assert_eq!(
            redis_server(redis::ErrorKind::MasterDown),
            Some(BlipKind::MasterDown)
        );
    }

    #[test]
    fn redis_tryagain_is_a_blip() {
        assert_eq!(
            redis_server(redis::ErrorKind::TryAgain),
            Some(BlipKind::TryAgain)
        );
    }

    #[test]
    fn redis_clusterdown_is_a_blip() {
        assert_eq!(
            redis_server(redis::ErrorKind::ClusterDown),
            Some(BlipKind::ClusterDown)
        );
    }

    #[test]
    fn redis_cluster_redirections_reaching_the_caller_are_blips() {
        assert_eq!(
            redis_server(redis::ErrorKind::Moved),
            Some(BlipKind::SlotMoved)
        );
        assert_eq!(
            redis_server(redis::ErrorKind::Ask),
            Some(BlipKind::SlotMoved)
        );
        assert_eq!(
            redis_server(redis::ErrorKind::ClusterConnectionNotFound),
            Some(BlipKind::ClusterUnreachable)
        );
        // A script or pipeline across slots is the host's bug or the config's, not a blip.
        assert_eq!(redis_server(redis::ErrorKind::CrossSlot), None);
    }

    #[test]
    fn redis_refusals_of_the_request_are_not_blips() {
        assert_eq!(redis_code("WRONGTYPE"), None);
        assert_eq!(redis_code("OOM"), None);
        assert_eq!(redis_code("NOPERM"), None);
        assert_eq!(redis_server(redis::ErrorKind::ResponseError), None);
        assert_eq!(redis_server(redis::ErrorKind::TypeError), None);
        assert_eq!(redis_server(redis::ErrorKind::ExecAbortError), None);
        assert_eq!(redis_server(redis::ErrorKind::AuthenticationFailed), None);
        // Classification is by kind, not text: a refusal that mentions a connection is still one.
        assert_eq!(
            redis_kind(
                (
                    redis::ErrorKind::ResponseError,
                    "connection reset",
                    "broken pipe timed out".to_string()
                )
                    .into()
            ),
            None
        );
    }

    fn pg_kind(e: sqlx::Error) -> Option<BlipKind> {
        postgres_blip(&e).map(|b| {
            assert_eq!(b.service, Service::Postgres);
            b.kind
        })
    }

    fn pg_io(kind: io::ErrorKind) -> Option<BlipKind> {
        pg_kind(sqlx::Error::Io(io::Error::from(kind)))
    }

    /// A database error carrying only a SQLSTATE (as a driver other than PostgreSQL's would).
    #[derive(Debug)]
    struct Coded(&'static str);

    impl std::fmt::Display for Coded {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error {}", self.0)
        }
    }

    impl std::error::Error for Coded {}

    impl sqlx::error::DatabaseError for Coded {
        fn message(&self) -> &str {
            "terminating connection due to administrator command"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn pg_code(code: &'static str) -> Option<BlipKind> {
        pg_kind(sqlx::Error::Database(Box::new(Coded(code))))
    }

    #[test]
    fn postgres_dropped_connections_are_blips() {
        for kind in [
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::NotConnected,
            io::ErrorKind::UnexpectedEof,
        ] {
            assert_eq!(pg_io(kind), Some(BlipKind::ConnectionDropped), "{kind:?}");
        }
    }

    #[test]
    fn postgres_refused_connection_is_a_blip() {
        assert_eq!(
            pg_io(io::ErrorKind::ConnectionRefused),
            Some(BlipKind::ConnectionRefused)
        );
    }

    #[test]
    fn postgres_io_timeout_and_other_io_errors_are_blips() {
        assert_eq!(pg_io(io::ErrorKind::TimedOut), Some(BlipKind::Timeout));
        assert_eq!(pg_io(io::ErrorKind::Other), Some(BlipKind::Io));
    }

    #[test]
    fn postgres_pool_timeout_is_a_blip() {
        assert_eq!(
            pg_kind(sqlx::Error::PoolTimedOut),
            Some(BlipKind::PoolTimedOut)
        );
    }

    #[test]
    fn postgres_pool_closed_is_a_blip() {
        assert_eq!(pg_kind(sqlx::Error::PoolClosed), Some(BlipKind::PoolClosed));
    }

    #[test]
    fn postgres_connection_exception_class_08_is_a_blip() {
        for code in ["08000", "08003", "08006", "08001", "08004"] {
            assert_eq!(pg_code(code), Some(BlipKind::ConnectionException), "{code}");
        }
    }

    #[test]
    fn postgres_admin_shutdown_is_a_blip() {
        assert_eq!(pg_code("57P01"), Some(BlipKind::AdminShutdown));
    }

    #[test]
    fn postgres_crash_shutdown_is_a_blip() {
        assert_eq!(pg_code("57P02"), Some(BlipKind::CrashShutdown));
    }

    #[test]
    fn postgres_cannot_connect_now_is_a_blip() {
        assert_eq!(pg_code("57P03"), Some(BlipKind::CannotConnectNow));
    }

    #[test]
    fn postgres_too_many_connections_is_a_blip() {
        assert_eq!(pg_code("53300"), Some(BlipKind::TooManyConnections));
    }

    #[test]
    fn postgres_serialization_failure_is_a_blip() {
        assert_eq!(pg_code("40001"), Some(BlipKind::SerializationFailure));
    }

    #[test]
    fn postgres_deadlock_is_a_blip() {
        assert_eq!(pg_code("40P01"), Some(BlipKind::Deadlock));
    }

    #[test]
    fn postgres_database_not_accepting_connections_is_a_blip_only_when_fatal() {
        assert_eq!(
            sqlstate_blip_kind("55000", true),
            Some(BlipKind::NotAcceptingConnections)
        );
        assert_eq!(sqlstate_blip_kind("55000", false), None);
        // Without the PostgreSQL severity it is a statement's error.
        assert_eq!(pg_code("55000"), None);
    }

    #[test]
    fn postgres_statement_errors_are_not_blips() {
        for code in [
            "23505", "42P01", "42601", "22P02", "42501", "3D000", "28P01",
        ] {
            assert_eq!(pg_code(code), None, "{code}");
        }
        assert_eq!(pg_kind(sqlx::Error::RowNotFound), None);
        assert_eq!(pg_kind(sqlx::Error::Protocol("bad".into())), None);
    }
}
