//! The `publish` capability: a handler publishes child events of the event it handles.
//!
//! Owns the grant checks (policy target: the child's event type; for a child in another tenant
//! than its parent, also `publish-tenant` with that tenant as target), the per-delivery budget of
//! publish calls, the size bounds of what a guest hands over (checked before anything is
//! parsed), a child's generation (its parent's + 1, refused past `OUTBOX_MAX_EVENT_GENERATION`:
//! that ends a handler feedback loop, and the receiver dead-letters the delivery), deterministic
//! child dispatch keys (so a redelivery does not duplicate children; one handler run's keys are
//! distinct from another run's, see [`run_key`]), the headers a child inherits, and the one
//! checked entry point, [`Children::send`], through which every child reaches a
//! [`PublishBackend`]: [`postgres`] in a receiver (the short transaction that inserts it), the
//! [`recorder`] in an offline call. It never lets a plugin choose a child's
//! dispatch key, generation, causation headers or trace headers, never puts a child into another
//! tenant than its parent's unless the policy allowed that tenant, never lets one delivery
//! publish more than [`MAX_PUBLISH_CALLS_PER_DELIVERY`] times, never parses a payload or headers
//! text over its bound, and never inserts before the policy allowed it.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

use super::clip;
use super::policy::gate::Gate;
use crate::plugin::bindings::handler_world::outbox::plugin::publish as wit_publish;
use crate::plugin::bindings::{HostCallError, WitEvent};
use crate::publish::{validate_as, validate_event_type, NewEvent, Publisher, MAX_KEY_BYTES};
use crate::queue::KeyLayout;

pub(crate) mod postgres;
pub(crate) mod recorder;

/// The capability name the policy is asked about.
pub const CAPABILITY: &str = "publish";

/// The capability the policy is asked about when a child goes to another tenant than its
/// parent's (target: that tenant).
pub const TENANT_CAPABILITY: &str = "publish-tenant";

/// Publish calls one delivery may make (each call counts, whatever its outcome).
pub const MAX_PUBLISH_CALLS_PER_DELIVERY: u32 = 1000;

/// Longest tenant id a handler may give a child, bytes.
pub const MAX_TENANT_BYTES: usize = 255;

/// Longest headers text a handler may give a child, bytes (checked before it is parsed).
pub const MAX_CHILD_HEADERS_BYTES: usize = 64 * 1024;

/// The event being handled: the parent of whatever the handler publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentEvent {
    /// `outbox_event.id`.
    pub id: i64,
    /// Its type.
    pub event_type: String,
    /// Its tenant (children inherit it unless they set their own).
    pub tenant_id: Option<String>,
    /// Its headers, a JSON object as text (children inherit them).
    pub headers: String,
    /// Its generation (0: a producer's event): its children are one deeper. What the host
    /// stored, from the queue entry, never from the event's payload or headers.
    pub generation: i32,
}

impl ParentEvent {
    /// The same event, of generation `generation`.
    pub fn with_generation(mut self, generation: i32) -> Self {
        self.generation = generation;
        self
    }
}

impl From<&WitEvent> for ParentEvent {
    /// The event a handler is handed, as generation 0 (set the stored one with
    /// [`ParentEvent::with_generation`]).
    fn from(event: &WitEvent) -> Self {
        Self {
            id: event.id,
            event_type: event.event_type.clone(),
            tenant_id: event.tenant_id.clone(),
            headers: event.headers.clone(),
            generation: 0,
        }
    }
}

impl From<WitEvent> for ParentEvent {
    /// The event a handler is handed, as generation 0 (set the stored one with
    /// [`ParentEvent::with_generation`]).
    fn from(event: WitEvent) -> Self {
        Self {
            id: event.id,
            event_type: event.event_type,
            tenant_id: event.tenant_id,
            headers: event.headers,
            generation: 0,
        }
    }
}

/// How the children of one handler run are made, besides the parent: the names they carry and
/// their bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChildRules {
    /// The handler's name: children's `causation_handler`, and the plugin a refusal is counted
    /// for.
    pub(crate) handler: String,
    /// The handler run's name in children's dispatch keys ([`run_key`]).
    pub(crate) run_key: String,
    /// Largest child payload, bytes (`OUTBOX_MAX_PAYLOAD_BYTES`).
    pub(crate) max_payload_bytes: usize,
    /// The deepest generation a child may have (`OUTBOX_MAX_EVENT_GENERATION`).
    pub(crate) max_generation: i32,
}

/// The name a run of `handler` on an entry of `queue` goes by in the dispatch keys of what it
/// publishes: the handler's name where one handler runs once per event (one Redis node: its
/// idempotency marker is per handler and event, whichever queue the entry came from), and
/// `<handler>@<queue>` where it runs once per queue (a Redis Cluster: its marker lives in each
/// queue's slot), so that two runs of one handler on one event never share a child's key. Queue
/// names hold no `@` or `:`, plugin names no `@`. One node keeps the keys its children always
/// had.
pub fn run_key(handler: &str, queue: &str, layout: KeyLayout) -> String {
    match layout {
        KeyLayout::Classic => handler.to_string(),
        KeyLayout::Slotted => format!("{handler}@{queue}"),
    }
}

/// A child ready to insert: the event, its generation and the publish call that made it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PreparedChild {
    /// The event.
    pub(crate) event: NewEvent,
    /// Its generation (its parent's + 1).
    pub(crate) generation: i32,
    /// The 0-based number of the publish call of its delivery that made it.
    pub(crate) index: u32,
}

/// Where the children of a delivery go: the outbox table in a receiver
/// ([`postgres::PostgresPublish`]), a record in an offline call ([`recorder::Recorder`]).
/// Reached only through [`Children::send`], with children that passed the checks and the policy.
pub(crate) trait PublishBackend: Send + Sync {
    /// Insert `child` (made under `rules`); its id (on redelivery, the existing one).
    fn insert<'a>(
        &'a self,
        child: PreparedChild,
        rules: &'a ChildRules,
    ) -> BoxFuture<'a, Result<i64, String>>;
}

/// What one delivery's publish calls left behind, shared with the receiver: it stays readable
/// after the services move into the wasm store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PublishedChildren {
    /// The ids published (children, in call order; existing ids on redelivery).
    pub(crate) ids: Vec<i64>,
    /// Why a child was refused for its generation, if one was: the receiver dead-letters the
    /// delivery with it, whatever the handler answered (retrying would only be refused again).
    pub(crate) generation_refused: Option<String>,
}

/// Who decides whether a host call of one delivery may happen: the delivery's [`Gate`] (the
/// policy, and what a denial leaves behind), or a stand-in in tests.
pub(crate) trait AskPolicy: Sync {
    /// `Ok` when `capability` on `target` is allowed, else the denial (or a malformed request).
    fn ask(
        &self,
        capability: &'static str,
        target: &str,
    ) -> impl std::future::Future<Output = Result<(), HostCallError>> + Send;
}

/// The children one delivery has published so far: the call index (each call, whatever its
/// outcome, takes the next one), the ids and a refusal for depth.
#[derive(Default)]
pub(crate) struct Children {
    next_index: u32,
    published: Arc<Mutex<PublishedChildren>>,
}

impl Children {
    /// What the publish calls left behind (ids, a refusal for depth), shared.
    pub(crate) fn published_handle(&self) -> Arc<Mutex<PublishedChildren>> {
        self.published.clone()
    }

    /// The checked entry point of `publish` (`publish.send`): check the child and ask `gate`
    /// ([`prepare`](Self::prepare)), then insert it with `backend`.
    pub(crate) async fn send(
        &mut self,
        gate: &Gate,
        backend: &dyn PublishBackend,
        event: wit_publish::NewEvent,
    ) -> Result<i64, HostCallError> {
        let child = self.prepare(&gate.parent, &gate.rules, event, gate).await?;
        let id = backend
            .insert(child, &gate.rules)
            .await
            .map_err(HostCallError::Failed)?;
        if let Ok(mut published) = self.published.lock() {
            published.ids.push(id);
        }
        Ok(id)
    }

    /// Everything `publish.send` does before the insert: take the call's index (every call,
    /// whatever its outcome, takes one), check the budget, the child's generation (refused past
    /// `rules.max_generation`: counted, and kept for the receiver to dead-letter the delivery),
    /// the type, the tenant and the sizes of the payload and headers texts (before parsing
    /// them), ask `policy` about the type and, for another tenant, about that tenant, then build
    /// the child of `parent` under `rules` (its dispatch key, inherited headers and tenant) and
    /// validate it.
    pub(crate) async fn prepare(
        &mut self,
        parent: &ParentEvent,
        rules: &ChildRules,
        event: wit_publish::NewEvent,
        policy: &impl AskPolicy,
    ) -> Result<PreparedChild, HostCallError> {
        // Index every call, whatever its outcome, so call i of a redelivery gets key i again.
        let index = self.next_index;
        self.next_index = self.next_index.saturating_add(1);
        check_budget(index).map_err(HostCallError::Failed)?;
        let generation = match child_generation(parent, &event.event_type, rules.max_generation) {
            Ok(generation) => generation,
            Err(refusal) => {
                metrics::counter!("outbox_publish_generation_refused_total", "plugin" => rules.handler.clone())
                    .increment(1);
                if let Ok(mut published) = self.published.lock() {
                    published.generation_refused.get_or_insert(refusal.clone());
                }
                return Err(HostCallError::Failed(refusal));
            }
        };
        validate_event_type(&event.event_type).map_err(|e| HostCallError::Failed(e.to_string()))?;
        let tenant = child_tenant(parent.tenant_id.as_deref(), event.tenant_id.as_deref())
            .map_err(HostCallError::Failed)?;
        check_sizes(&event, rules.max_payload_bytes).map_err(HostCallError::Failed)?;
        policy.ask(CAPABILITY, &event.event_type).await?;
        if let TenantCheck::Other(other) = &tenant {
            policy.ask(TENANT_CAPABILITY, other).await?;
        }
        let payload: serde_json::Value = serde_json::from_str(&event.payload).map_err(|e| {
            HostCallError::Failed(format!(
                "payload of {} is not valid JSON: {e}",
                event.event_type
            ))
        })?;
        let extra = match event.headers.as_deref() {
            None => None,
            Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(serde_json::Value::Object(map)) => Some(map),
                _ => {
                    return Err(HostCallError::Failed(format!(
                        "headers of {} must be a JSON object",
                        event.event_type
                    )))
                }
            },
        };
        let mut child = NewEvent::new(event.event_type, payload)
            .with_dispatch_key(child_dispatch_key(parent.id, &rules.run_key, index))
            .with_headers(child_headers(parent, &rules.handler, extra));
        child.tenant_id = event.tenant_id.or_else(|| parent.tenant_id.clone());
        validate_as(&child, rules.max_payload_bytes, Publisher::Host)
            .map_err(|e| HostCallError::Failed(e.to_string()))?;
        Ok(PreparedChild {
            event: child,
            generation,
            index,
        })
    }
}

/// The generation of a child of `parent` (of type `child_type`): the parent's + 1, or the
/// refusal when that is deeper than `max_generation`.
pub(crate) fn child_generation(
    parent: &ParentEvent,
    child_type: &str,
    max_generation: i32,
) -> Result<i32, String> {
    let generation = parent.generation.max(0).saturating_add(1);
    if generation <= max_generation {
        return Ok(generation);
    }
    Err(format!(
        "publish: refused {}: event {} is generation {}, and children deeper than generation {max_generation} are refused (OUTBOX_MAX_EVENT_GENERATION = {max_generation}; a producer's event is generation 0, each event a handler publishes one more than its parent). Events that keep coming back to the handlers that publish them are a feedback loop: `outbox routes check` names the loops in routes.toml",
        clip(child_type, crate::naming::MAX_EVENT_TYPE_BYTES),
        parent.id,
        parent.generation,
    ))
}

/// `OUTBOX_MAX_EVENT_GENERATION` as a generation (the setting is at most 10000).
pub(crate) fn generation_limit(setting: u32) -> i32 {
    i32::try_from(setting).unwrap_or(i32::MAX)
}

/// Refuse a payload text over `max_payload_bytes` or a headers text over
/// [`MAX_CHILD_HEADERS_BYTES`] before either is parsed (the payload's serialised size is
/// checked again once it is parsed).
pub(crate) fn check_sizes(
    event: &wit_publish::NewEvent,
    max_payload_bytes: usize,
) -> Result<(), String> {
    if event.payload.len() > max_payload_bytes {
        return Err(format!(
            "payload of {} is {} bytes, over the limit of {max_payload_bytes} bytes",
            event.event_type,
            event.payload.len()
        ));
    }
    match &event.headers {
        Some(headers) if headers.len() > MAX_CHILD_HEADERS_BYTES => Err(format!(
            "headers of {} are {} bytes, over the limit of {MAX_CHILD_HEADERS_BYTES} bytes",
            event.event_type,
            headers.len()
        )),
        _ => Ok(()),
    }
}

/// Refuse the call once a delivery has made [`MAX_PUBLISH_CALLS_PER_DELIVERY`] publish calls
/// (`index` is the 0-based number of this call).
pub(crate) fn check_budget(index: u32) -> Result<(), String> {
    if index < MAX_PUBLISH_CALLS_PER_DELIVERY {
        return Ok(());
    }
    Err(format!(
        "publish: a delivery may publish at most {MAX_PUBLISH_CALLS_PER_DELIVERY} events (publish calls per handler call), and this handler call reached it"
    ))
}

/// Which tenant a child goes to, as far as the policy is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TenantCheck {
    /// The parent's tenant (or none, like the parent): the `publish` grant is enough.
    Parent,
    /// Another tenant: the policy must also allow `publish-tenant` for it.
    Other(String),
}

/// The tenant check of a child that asks for `requested` (`None`: the parent's) under a parent
/// in tenant `parent`; `Err` for a tenant id that is empty or over [`MAX_TENANT_BYTES`].
pub(crate) fn child_tenant(
    parent: Option<&str>,
    requested: Option<&str>,
) -> Result<TenantCheck, String> {
    let Some(requested) = requested else {
        return Ok(TenantCheck::Parent);
    };
    if requested.is_empty() || requested.len() > MAX_TENANT_BYTES {
        return Err(format!(
            "publish: tenant ids are 1 to {MAX_TENANT_BYTES} bytes, got {}",
            requested.len()
        ));
    }
    if Some(requested) == parent {
        Ok(TenantCheck::Parent)
    } else {
        Ok(TenantCheck::Other(requested.to_string()))
    }
}

/// A child's headers: the parent's (anything but an object counts as `{}`), then the child's
/// own, then the causation fields (which a plugin cannot override). The trace headers are the
/// host's too: the publishing span's context when spans are exported, else the parent's
/// ([`crate::trace_context::set_child_trace`]).
pub(crate) fn child_headers(
    parent: &ParentEvent,
    handler: &str,
    mut extra: Option<serde_json::Map<String, serde_json::Value>>,
) -> serde_json::Value {
    let mut headers = match serde_json::from_str::<serde_json::Value>(&parent.headers) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    crate::trace_context::set_child_trace(&mut headers, extra.as_mut());
    merge_headers(&mut headers, extra, parent.id, handler);
    serde_json::Value::Object(headers)
}

/// Merge a child's own headers over the inherited ones, then set the causation fields.
fn merge_headers(
    headers: &mut serde_json::Map<String, serde_json::Value>,
    extra: Option<serde_json::Map<String, serde_json::Value>>,
    parent_id: i64,
    handler: &str,
) {
    if let Some(extra) = extra {
        headers.extend(extra);
    }
    headers.insert("parent_event_id".into(), parent_id.into());
    headers.insert("causation_handler".into(), handler.into());
}

/// Dispatch key of the `index`-th child (0-based, in call order) that the handler run named
/// `run_key` ([`run_key`]: the handler's name, or `<handler>@<queue>` on a Redis Cluster)
/// publishes while handling event `parent_id`: `child:<parent_id>:<run_key>:<index>`, the same
/// on every redelivery, so children are not duplicated.
pub fn child_dispatch_key(parent_id: i64, run_key: &str, index: u32) -> String {
    bounded_dispatch_key(format!("child:{parent_id}:{run_key}:{index}"))
}

/// Keys over the 512-byte dispatch key limit keep a readable head and a hash of the whole.
pub(crate) fn bounded_dispatch_key(key: String) -> String {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    format!(
        "{}~sha256:{digest}",
        clip(&key, MAX_KEY_BYTES - 8 - digest.len())
    )
}

#[cfg(test)]
mod tests;
