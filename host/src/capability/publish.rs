//! The `publish` capability: a handler publishes child events of the event it handles.
//!
//! Owns the grant checks (policy target: the child's event type; for a child in another tenant
//! than its parent, also `publish-tenant` with that tenant as target), the per-delivery budget of
//! publish calls, deterministic child dispatch keys (so a redelivery does not duplicate
//! children), the headers a child inherits, and the short transaction that inserts one event with
//! a deadline. It never lets a plugin choose a child's dispatch key, its causation headers or its
//! trace headers, never puts a child into another tenant than its parent's unless the policy
//! allowed that tenant, never lets one delivery publish more than
//! [`MAX_PUBLISH_CALLS_PER_DELIVERY`] times, and never inserts before the policy allowed it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{clip, DeliveryScope};
use crate::plugin::bindings::handler_world::outbox::plugin::publish as wit_publish;
use crate::plugin::bindings::{HostCallError, WitEvent};
use crate::publish::{
    publish_as, validate_as, validate_event_type, NewEvent, Publisher, MAX_KEY_BYTES,
};

/// The capability name the policy is asked about.
pub const CAPABILITY: &str = "publish";

/// The capability the policy is asked about when a child goes to another tenant than its
/// parent's (target: that tenant).
pub const TENANT_CAPABILITY: &str = "publish-tenant";

/// Publish calls one delivery may make (each call counts, whatever its outcome).
pub const MAX_PUBLISH_CALLS_PER_DELIVERY: u32 = 1000;

/// Longest tenant id a handler may give a child, bytes.
pub const MAX_TENANT_BYTES: usize = 255;

/// Deadline of one outbox insert issued for a plugin.
const DB_DEADLINE: Duration = Duration::from_secs(10);

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
}

impl From<&WitEvent> for ParentEvent {
    fn from(event: &WitEvent) -> Self {
        Self {
            id: event.id,
            event_type: event.event_type.clone(),
            tenant_id: event.tenant_id.clone(),
            headers: event.headers.clone(),
        }
    }
}

impl From<WitEvent> for ParentEvent {
    fn from(event: WitEvent) -> Self {
        Self {
            id: event.id,
            event_type: event.event_type,
            tenant_id: event.tenant_id,
            headers: event.headers,
        }
    }
}

/// Who decides whether a host call of one delivery may happen: the receiver's
/// [`DeliveryScope`] (the policy, and the denial's audit event) or the offline host's services
/// (the policy, and the denial recorded).
pub(crate) trait AskPolicy: Sync {
    /// `Ok` when `capability` on `target` is allowed, else the denial (or a malformed request).
    fn ask(
        &self,
        capability: &'static str,
        target: &str,
    ) -> impl std::future::Future<Output = Result<(), HostCallError>> + Send;
}

impl AskPolicy for DeliveryScope {
    fn ask(
        &self,
        capability: &'static str,
        target: &str,
    ) -> impl std::future::Future<Output = Result<(), HostCallError>> + Send {
        self.authorize(capability, target)
    }
}

/// The children one delivery has published so far: the call index (each call, whatever its
/// outcome, takes the next one) and the ids.
#[derive(Default)]
pub(crate) struct Children {
    next_index: u32,
    published: Arc<Mutex<Vec<i64>>>,
}

impl Children {
    /// Publish calls made so far (each took an index, whatever its outcome).
    pub(crate) fn calls_made(&self) -> u32 {
        self.next_index
    }

    /// The ids published (children, in call order; existing ids on redelivery), shared.
    pub(crate) fn published_ids_handle(&self) -> Arc<Mutex<Vec<i64>>> {
        self.published.clone()
    }

    /// `publish.send`: check the grant, build the child (dispatch key, inherited headers and
    /// tenant), validate it and insert it.
    pub(crate) async fn send(
        &mut self,
        scope: &DeliveryScope,
        event: wit_publish::NewEvent,
    ) -> Result<i64, HostCallError> {
        let child = self
            .prepare(
                &scope.parent,
                &scope.handler,
                scope.host.max_payload_bytes,
                event,
                scope,
            )
            .await?;
        let id = insert(scope, child).await.map_err(HostCallError::Failed)?;
        if let Ok(mut ids) = self.published.lock() {
            ids.push(id);
        }
        Ok(id)
    }

    /// Everything `publish.send` does before the insert: take the call's index (every call,
    /// whatever its outcome, takes one), check the budget, the type and the tenant, ask
    /// `policy` about the type and, for another tenant, about that tenant, then
    /// build the child of `parent` published by `handler` (its dispatch key, inherited headers
    /// and tenant) and validate it against `max_payload_bytes`. The offline host
    /// ([`super::offline`]) builds its children with it too.
    pub(crate) async fn prepare(
        &mut self,
        parent: &ParentEvent,
        handler: &str,
        max_payload_bytes: usize,
        event: wit_publish::NewEvent,
        policy: &impl AskPolicy,
    ) -> Result<NewEvent, HostCallError> {
        // Index every call, whatever its outcome, so call i of a redelivery gets key i again.
        let index = self.next_index;
        self.next_index = self.next_index.saturating_add(1);
        check_budget(index).map_err(HostCallError::Failed)?;
        validate_event_type(&event.event_type).map_err(|e| HostCallError::Failed(e.to_string()))?;
        let tenant = child_tenant(parent.tenant_id.as_deref(), event.tenant_id.as_deref())
            .map_err(HostCallError::Failed)?;
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
            .with_dispatch_key(child_dispatch_key(parent.id, handler, index))
            .with_headers(child_headers(parent, handler, extra));
        child.tenant_id = event.tenant_id.or_else(|| parent.tenant_id.clone());
        validate_as(&child, max_payload_bytes, Publisher::Host)
            .map_err(|e| HostCallError::Failed(e.to_string()))?;
        Ok(child)
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

/// Insert one host event (a child or a denial: reserved key prefixes allowed) in its own short
/// transaction; the existing id when its dispatch key already names the same event.
pub(crate) async fn insert(scope: &DeliveryScope, event: NewEvent) -> Result<i64, String> {
    let pool = &scope.host.pool;
    let limit = scope.host.max_payload_bytes.max(1024);
    let work = async move {
        let mut tx = pool.begin().await.map_err(|e| format!("publish: {e}"))?;
        let id = publish_as(&mut tx, event, limit, Publisher::Host)
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

/// Dispatch key of the `index`-th child (0-based, in call order) that `handler` publishes while
/// handling event `parent_id`; the same on every redelivery, so children are not duplicated.
pub fn child_dispatch_key(parent_id: i64, handler: &str, index: u32) -> String {
    bounded_dispatch_key(format!("child:{parent_id}:{handler}:{index}"))
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
mod tests {
    use super::*;
    use crate::capability::policy::denial_dispatch_key;

    #[test]
    fn dispatch_keys_are_deterministic_and_bounded() {
        assert_eq!(
            child_dispatch_key(42, "workflow-trigger", 0),
            "child:42:workflow-trigger:0"
        );
        assert_eq!(denial_dispatch_key(42, "h", "kv", "k"), "denied:42:h:kv:k");
        let long = "k".repeat(2000);
        let a = denial_dispatch_key(42, "h", "kv", &long);
        let b = denial_dispatch_key(42, "h", "kv", &format!("{long}x"));
        assert!(a.len() <= 512 && b.len() <= 512, "{}", a.len());
        assert_ne!(a, b);
        assert_eq!(a, denial_dispatch_key(42, "h", "kv", &long));
        let spaced = denial_dispatch_key(42, "h", "kv", "a key\n");
        assert!(spaced.starts_with("denied:42:h:kv:sha256:"), "{spaced}");
        assert!(spaced.bytes().all(|b| b.is_ascii_graphic()), "{spaced}");
    }

    #[test]
    fn children_stay_in_the_parents_tenant_unless_checked() {
        assert_eq!(child_tenant(Some("acme"), None), Ok(TenantCheck::Parent));
        assert_eq!(
            child_tenant(Some("acme"), Some("acme")),
            Ok(TenantCheck::Parent)
        );
        assert_eq!(child_tenant(None, None), Ok(TenantCheck::Parent));
        assert_eq!(
            child_tenant(Some("acme"), Some("globex")),
            Ok(TenantCheck::Other("globex".into()))
        );
        assert_eq!(
            child_tenant(None, Some("acme")),
            Ok(TenantCheck::Other("acme".into()))
        );
        assert!(child_tenant(Some("acme"), Some("")).is_err());
        assert!(child_tenant(None, Some(&"t".repeat(MAX_TENANT_BYTES + 1))).is_err());
    }

    #[test]
    fn the_publish_budget_ends_at_the_limit() {
        assert!(check_budget(0).is_ok());
        assert!(check_budget(MAX_PUBLISH_CALLS_PER_DELIVERY - 1).is_ok());
        let err = check_budget(MAX_PUBLISH_CALLS_PER_DELIVERY).unwrap_err();
        assert!(err.contains("at most 1000 events"), "{err}");
        assert!(check_budget(u32::MAX).is_err());
    }

    #[test]
    fn child_headers_keep_the_parent_and_cannot_forge_causation() {
        let mut headers = serde_json::json!({"traceparent": "00-abc", "x": 1})
            .as_object()
            .unwrap()
            .clone();
        let extra =
            serde_json::json!({"x": 2, "parent_event_id": 999, "causation_handler": "evil"})
                .as_object()
                .cloned();
        merge_headers(&mut headers, extra, 7, "h");
        assert_eq!(
            serde_json::Value::Object(headers),
            serde_json::json!({"traceparent": "00-abc", "x": 2, "parent_event_id": 7, "causation_handler": "h"})
        );
    }
}
