//! Capabilities: what a handler plugin may ask of the host while it handles one delivery, each
//! capability a factor of its own (Spin's model).
//!
//! Each capability module owns its part of the configuration, its checks and one checked entry
//! point over a backend trait; the host that assembles the factors picks the backends:
//!
//! | capability | checked entry point | receiver backend | offline backend |
//! |---|---|---|---|
//! | [`kv`] | `KvInstance::call` | Redis ([`kv::redis`]) | memory ([`kv::memory`]) |
//! | [`publish`] | `Children::send` | PostgreSQL ([`publish::postgres`]) | recorder ([`publish::recorder`]) |
//! | [`http`] | `HttpInstance::send` | reqwest ([`http::network`]) | fixtures ([`http::fixtures`]) |
//! | [`policy`] | `Gate::authorize` | the policy plugin `[policy]` names | the same, or a fixed answer |
//!
//! Also owns [`signing`] (the signature scheme of outbound HTTP), [`services`] (the factors a
//! host shares between deliveries and the per-delivery
//! [`HandlerServices`](crate::plugin::engine::HandlerServices) built from them, a
//! thin dispatcher to the entry points above), the receiver's [`HandlerHost`] (Redis, PostgreSQL,
//! reqwest) and [`offline`]'s `OfflineHost` (memory, recorder, fixtures: `outbox plugins call`),
//! which run the very same checks.
//!
//! Never:
//! - performs a host call (database write, Redis command, network request) before the policy
//!   allowed it; on a denial the only thing written is the `plugin.capability-use.denied` audit
//!   event (when `[policy] publish_denials` is on, at most one per plugin and capability per
//!   `policy::DENIAL_REPORT_WINDOW`, carrying the count of those suppressed);
//! - keeps anything a guest hands over without a bound (key and value sizes, a kv key quota per
//!   plugin, children per delivery, response sizes, policy targets and reasons);
//! - lets a plugin reach outside its own key namespace, or pick its children's dispatch keys or
//!   generations;
//! - shows a signing secret to a plugin or writes it to a log;
//! - blocks the async executor: the services are futures awaited inside the wasm call's future,
//!   under the call's time limit (a host call still running at the call's deadline is dropped
//!   with the call); each also has its own deadline.

use std::sync::Arc;

use sqlx::PgPool;

use crate::plugin::LoadedPlugin;
use crate::queue::{KeyLayout, QueueKeys};
use crate::redis_conn::RedisConn;

pub mod http;
pub mod kv;
pub mod offline;
pub mod policy;
pub mod publish;
pub(crate) mod services;
pub mod signing;

pub use policy::{CapabilityPolicy, DENIED_EVENT_TYPE, DENY_ALL};
use publish::ParentEvent;
use services::{DeliveryServices, Factors};

/// What every delivery of one receiver process shares: the factors over the receiver's backends
/// (Redis, PostgreSQL, reqwest), built once (by `Receivers::new`); then
/// [`services`](Self::services) makes the host services of each delivery.
pub(crate) struct HandlerHost {
    factors: Arc<Factors>,
    pool: PgPool,
    layout: KeyLayout,
}

impl HandlerHost {
    /// The shared part of the host services.
    ///
    /// - `policy`: decides every host call; it also says whether a denial is written as a
    ///   `plugin.capability-use.denied` event (`[policy] publish_denials`, read per delivery);
    /// - `pool`: where children and denial events are inserted;
    /// - `redis`, `keys`: the kv store and the host's Redis keys (prefix and layout);
    /// - `http`: the outbound client; build it with [`http::http_client`], which does not follow
    ///   redirects (a followed redirect would reach a host the policy never saw), uses no proxy
    ///   and vets every address a name resolves to (plugins whose grants name IPs get clients
    ///   of their own, made here);
    /// - `max_payload_bytes`: payload limit of children (`OUTBOX_MAX_PAYLOAD_BYTES`);
    /// - `max_generation`: the deepest generation of a child (`OUTBOX_MAX_EVENT_GENERATION`).
    pub(crate) fn new(
        policy: Arc<CapabilityPolicy>,
        pool: PgPool,
        redis: RedisConn,
        keys: QueueKeys,
        http: reqwest::Client,
        max_payload_bytes: usize,
        max_generation: i32,
    ) -> Self {
        let layout = keys.layout();
        let publish = Arc::new(publish::postgres::PostgresPublish::new(pool.clone()));
        let factors = Factors {
            policy,
            kv: Arc::new(kv::redis::RedisKv::new(redis, keys)),
            http: Arc::new(http::network::NetworkHttp::new(http)),
            refusals: Arc::new(policy::gate::AuditEvents::new(publish.clone())),
            publish,
            max_payload_bytes,
            max_generation,
        };
        Self {
            factors: Arc::new(factors),
            pool,
            layout,
        }
    }

    /// The database pool the host calls use.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The services of one delivery: `plugin` handling `parent` (with its stored generation) as
    /// handler `handler` (the name that goes into children's `causation_handler` and, with
    /// `queue` on a Redis Cluster, their dispatch keys: [`publish::run_key`]) on an entry of
    /// `queue`; the span current here (the receiver's `outbox.handle`) is the parent of the host
    /// calls' spans. Keep [`published_handle`](DeliveryServices::published_handle), then hand
    /// it to [`LoadedPlugin::handle`].
    pub(crate) fn services(
        &self,
        plugin: Arc<LoadedPlugin>,
        parent: ParentEvent,
        handler: &str,
        queue: &str,
    ) -> DeliveryServices {
        let run_key = publish::run_key(handler, queue, self.layout);
        self.factors
            .services(&plugin.name, &plugin.spec, parent, handler, run_key)
    }
}

/// The clip every capability uses (the rule lives in [`crate::naming`]).
pub(crate) use crate::naming::clip;

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests look at Redis directly (clippy.toml)"
)]
mod tests;
