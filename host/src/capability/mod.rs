//! Capabilities: what a handler plugin may ask of the host while it handles one delivery, each
//! capability in a module of its own.
//!
//! Owns:
//! - [`policy`]: the [`CapabilityPolicy`] (asks the policy plugin whether one host call may
//!   happen, fails closed, caches decisions, records every decision and denial);
//! - [`publish`], [`kv`], [`http`]: one host service each, with its grant check (the policy
//!   target it asks about), its limits (the `MAX_*` constants) and its implementation;
//! - [`signing`]: the signature scheme of outbound HTTP;
//! - [`offline`]: the same services for `outbox plugins call`, served from memory (kv),
//!   recorded (publish) and answered by fixtures (http), after the same checks and policy;
//! - the per-process `HandlerHost` (what every delivery shares: policy, database pool, Redis,
//!   key prefix and layout, HTTP clients, payload and generation limits, denial-event limiter,
//!   kv scripts) and the
//!   per-delivery `ReceiverServices`, the receiver's implementation of [`HandlerServices`], a
//!   thin dispatcher to the modules above.
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

use std::sync::{Arc, Mutex};

use crate::redis_conn::RedisConn;
use futures::future::BoxFuture;
use sqlx::PgPool;
use tracing::Instrument;

use crate::plugin::bindings::handler_world::outbox::plugin::{
    http as wit_http, publish as wit_publish,
};
use crate::plugin::bindings::HostCallError;
use crate::plugin::engine::HandlerServices;
use crate::plugin::LoadedPlugin;

pub mod http;
pub mod kv;
pub mod offline;
pub mod policy;
pub mod publish;
pub mod signing;

pub use policy::{CapabilityPolicy, DENIED_EVENT_TYPE, DENY_ALL};
use publish::{ChildRules, ParentEvent, PublishedChildren};

/// What every delivery of one receiver process shares: built once (by `Receivers::new`), then
/// [`services`](Self::services) makes the host services of each delivery.
pub(crate) struct HandlerHost {
    policy: Arc<CapabilityPolicy>,
    pool: PgPool,
    redis: RedisConn,
    keys: crate::queue::QueueKeys,
    http: http::EgressClients,
    max_payload_bytes: usize,
    /// The deepest generation of a child (`OUTBOX_MAX_EVENT_GENERATION`).
    max_generation: i32,
    /// Which denials become `plugin.capability-use.denied` events.
    denial_events: policy::DenialLimiter,
    /// The kv quota script.
    kv_scripts: kv::KvScripts,
}

impl HandlerHost {
    /// The shared part of the host services.
    ///
    /// - `policy`: decides every host call; it also says whether a denial is written as a
    ///   `plugin.capability-use.denied` event (`[policy] publish_denials`, read per delivery);
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
        keys: crate::queue::QueueKeys,
        http: reqwest::Client,
        max_payload_bytes: usize,
        max_generation: i32,
    ) -> Self {
        Self {
            policy,
            pool,
            redis,
            keys,
            http: http::EgressClients::new(http),
            max_payload_bytes,
            max_generation,
            denial_events: policy::DenialLimiter::new(policy::DENIAL_REPORT_WINDOW),
            kv_scripts: kv::KvScripts::new(),
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
    /// calls' spans. Keep [`published_handle`](ReceiverServices::published_handle), then hand
    /// it to [`LoadedPlugin::handle`].
    pub(crate) fn services(
        self: &Arc<Self>,
        plugin: Arc<LoadedPlugin>,
        parent: ParentEvent,
        handler: &str,
        queue: &str,
    ) -> ReceiverServices {
        ReceiverServices {
            scope: DeliveryScope {
                grants: policy::grants_json(&plugin),
                publish_denials: self.policy.publish_denials(),
                rules: ChildRules {
                    handler: handler.to_string(),
                    run_key: publish::run_key(handler, queue, self.keys.layout()),
                    max_payload_bytes: self.max_payload_bytes,
                    max_generation: self.max_generation,
                },
                host: self.clone(),
                plugin,
                parent,
                span: tracing::Span::current(),
            },
            children: publish::Children::default(),
        }
    }
}

/// What one delivery's host calls know: the shared host, the calling plugin, the event being
/// handled and how its children are made (the handler's name among them). Every capability
/// module takes it and starts with [`authorize`](Self::authorize).
pub(crate) struct DeliveryScope {
    host: Arc<HandlerHost>,
    plugin: Arc<LoadedPlugin>,
    parent: ParentEvent,
    rules: ChildRules,
    grants: String,
    publish_denials: bool,
    /// The delivery's span: the parent of each host call's span.
    span: tracing::Span,
}

impl DeliveryScope {
    /// Check the request ([`policy::validate_request`]: `Failed` when malformed, before any
    /// policy runs), run the policy; on a denial write the audit event (if configured and not
    /// rate-limited by the [`policy::DenialLimiter`]) and return `Denied`.
    async fn authorize(&self, capability: &str, target: &str) -> Result<(), HostCallError> {
        policy::validate_request(capability, target).map_err(HostCallError::Failed)?;
        let grants = &self.grants;
        let Err(reason) = self
            .host
            .policy
            .check_with_grants_async(&self.plugin.name, || grants.clone(), capability, target)
            .await
        else {
            return Ok(());
        };
        let admitted = || {
            self.host
                .denial_events
                .admit(&self.plugin.name, capability, std::time::Instant::now())
        };
        if let Some(suppressed_before) = self.publish_denials.then(admitted).flatten() {
            let denial = policy::Denial {
                plugin: &self.plugin.name,
                capability,
                target,
                reason: &reason,
                suppressed_before,
            };
            let event = policy::denial_event(&denial, &self.parent, &self.rules.handler);
            // An audit event is caused by the handler run like a child (one generation deeper)
            // but never refused for it: the denial must be on record.
            let generation = self.parent.generation.max(0).saturating_add(1);
            if let Err(e) = publish::insert(self, event, generation).await {
                tracing::error!(
                    target: "outbox::audit",
                    plugin = &*self.plugin.name,
                    capability,
                    error = %e,
                    "could not write the capability denial event"
                );
            }
        }
        Err(HostCallError::Denied(reason))
    }
}

/// The [`HandlerServices`] of one delivery: `publish`, `kv` and `http` for the handler plugin,
/// each checked by the [`CapabilityPolicy`] first; made by `HandlerHost::services`. A thin
/// dispatcher: each call goes to the module of its capability.
pub(crate) struct ReceiverServices {
    scope: DeliveryScope,
    children: publish::Children,
}

impl ReceiverServices {
    /// What this delivery's publish calls leave behind (the ids published, in call order,
    /// existing ids on redelivery; a child refused for its generation), shared: it stays
    /// readable after `self` moves into the wasm store.
    pub(crate) fn published_handle(&self) -> Arc<Mutex<PublishedChildren>> {
        self.children.published_handle()
    }
}

impl HandlerServices for ReceiverServices {
    fn publish(
        &mut self,
        event: wit_publish::NewEvent,
    ) -> BoxFuture<'_, Result<i64, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.scope.span, "outbox.host.publish", event_type = %event.event_type);
        Box::pin(self.children.send(&self.scope, event).instrument(span))
    }

    fn kv_get(&mut self, key: String) -> BoxFuture<'_, Result<Option<String>, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.scope.span, "outbox.host.kv", op = "get");
        Box::pin(async move { kv::get(&self.scope, &key).await }.instrument(span))
    }

    fn kv_set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<(), HostCallError>> {
        let span = tracing::debug_span!(parent: &self.scope.span, "outbox.host.kv", op = "set");
        Box::pin(
            async move { kv::set(&self.scope, &key, value, ttl_seconds).await }.instrument(span),
        )
    }

    fn kv_delete(&mut self, key: String) -> BoxFuture<'_, Result<bool, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.scope.span, "outbox.host.kv", op = "delete");
        Box::pin(async move { kv::delete(&self.scope, &key).await }.instrument(span))
    }

    fn kv_increment(
        &mut self,
        key: String,
        delta: i64,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<i64, HostCallError>> {
        let span =
            tracing::debug_span!(parent: &self.scope.span, "outbox.host.kv", op = "increment");
        Box::pin(
            async move { kv::increment(&self.scope, &key, delta, ttl_seconds).await }
                .instrument(span),
        )
    }

    fn kv_compare_and_set(
        &mut self,
        key: String,
        expected: Option<String>,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<bool, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.scope.span, "outbox.host.kv", op = "compare-and-set");
        Box::pin(
            async move {
                kv::compare_and_set(&self.scope, &key, expected.as_deref(), value, ttl_seconds)
                    .await
            }
            .instrument(span),
        )
    }

    fn http_send(
        &mut self,
        request: wit_http::Request,
    ) -> BoxFuture<'_, Result<wit_http::Response, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.scope.span, "outbox.host.http");
        Box::pin(http::send(&self.scope, request).instrument(span))
    }
}

/// The clip every capability uses (the rule lives in [`crate::naming`]).
pub(crate) use crate::naming::clip;
