//! `outbox-host`: a transactional outbox host.
//!
//! Follow one event through the modules in order: [`publish`](mod@publish) (an application writes it in its
//! own transaction) → [`store`] (claim with a lease) → [`dispatch`] (the claim loop) →
//! [`routing`] (which queues) → [`sink`] (Redis Streams, idempotent) → [`receive`] (consumer
//! groups run the handler plugin bound to each queue) → [`plugin`] (the sandboxed WebAssembly
//! runtime behind routing, handlers and capability checks) → [`capability`] (what a handler may
//! ask of the host: policy, publish, kv, http, request signing). [`queue`] is the Redis wire
//! contract sink, receivers and operators share (key names, entry fields); [`reconnect`] is the
//! backoff every loop uses while PostgreSQL or Redis are away, and [`fault`] tells such an
//! infrastructure blip (retried without counting against any event) from an event's own fault. Operators use the `outbox`
//! command (crate `outbox-cli`); this library never prints.
//! [`naming`] holds the naming and bounds rules every floor shares and [`numeric`] the number
//! conversions (both import nothing of the crate); [`config`] reads `routes.toml` and the environment; [`host`] assembles a process; [`http`]
//! serves metrics and health; [`trace_context`] carries the W3C trace context in `headers`.
//!
//! Embedding the dispatcher in an application:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let host = outbox_host::Host::builder()
//!     .config(outbox_host::config::Config::from_env()?)
//!     .start()
//!     .await?;
//! // ... serve the application ...
//! host.shutdown().await;
//! # Ok(()) }
//! ```

pub mod alerts;
pub mod allowed_hosts;
pub mod capability;
pub mod config;
pub mod console;
pub mod contracts;
pub mod dispatch;
pub mod fault;
pub mod host;
pub mod http;
pub mod live_config;
pub mod naming;
pub mod numeric;
pub mod plugin;
pub mod publish;
#[allow(
    clippy::disallowed_methods,
    reason = "a home of raw Redis commands (clippy.toml)"
)]
pub mod queue;
#[allow(
    clippy::disallowed_methods,
    reason = "a home of raw Redis commands (clippy.toml)"
)]
pub mod queue_pause;
#[allow(
    clippy::disallowed_methods,
    reason = "a home of raw Redis commands (clippy.toml)"
)]
pub mod receive;
pub mod reconnect;
#[allow(
    clippy::disallowed_methods,
    reason = "a home of raw Redis commands (clippy.toml)"
)]
pub mod redis_conn;
pub mod routing;
#[allow(
    clippy::disallowed_methods,
    reason = "a home of raw Redis commands (clippy.toml)"
)]
pub mod sink;
#[allow(
    clippy::disallowed_methods,
    reason = "the home of raw SQL (clippy.toml)"
)]
pub mod store;
pub mod trace;
pub mod trace_context;

pub use host::{Host, HostBuilder, HostError};
pub use publish::{publish, NewEvent, PublishError};
