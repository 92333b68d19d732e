//! Host services for handler plugins: the capability policy and the `publish`, `kv` and `http`
//! imports a handler may call while it handles one delivery.
//!
//! Owns:
//! - [`CapabilityPolicy`]: asks the policy plugin (WebAssembly, from the registry) whether one
//!   host call may happen, fails closed, and records every decision (metric) and every denial
//!   (audit log line, metric);
//! - [`ReceiverServices`]: the receiver's implementation of [`HandlerServices`] for one delivery
//!   (children published with deterministic dispatch keys, a per-plugin Redis namespace, outbound
//!   HTTP with optional HMAC signing);
//! - [`sign_request`] / [`verify_signature`]: the signature scheme of outbound HTTP.
//!
//! Never:
//! - performs a host call (database write, Redis command, network request) before the policy
//!   allowed it; on a denial the only thing written is the `plugin.capability-use.denied` audit
//!   event (when `[policy] publish_denials` is on);
//! - lets a plugin reach outside its own key namespace, or pick its children's dispatch keys;
//! - shows a signing secret to a plugin or writes it to a log;
//! - blocks the async executor: the methods run on the blocking thread of a wasm call and wait
//!   on async work through a runtime handle, each with a deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use hmac::{Hmac, Mac};
use redis::aio::ConnectionManager;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use super::bindings::handler_world::outbox::plugin::{http, publish as wit_publish};
use super::bindings::policy_world::exports::outbox::plugin::policy_api::{
    CapabilityRequest, Decision,
};
use super::bindings::{HostError, WitEvent};
use super::engine::{HandlerServices, Prepared};
use super::registry::{LoadedPlugin, PluginRegistry};
use crate::config::RoutesFile;
use crate::publish::{publish_with_limit, validate, NewEvent};

/// `[policy] plugin` value that refuses every capability but `log` without running WebAssembly.
pub const DENY_ALL: &str = "deny-all";

/// Event type of the audit event written for a denied host call.
pub const DENIED_EVENT_TYPE: &str = "plugin.capability-use.denied";

/// Longest kv key, bytes.
pub const MAX_KV_KEY_BYTES: usize = 512;

/// Largest kv value, bytes.
pub const MAX_KV_VALUE_BYTES: usize = 1 << 20;

/// Default outbound HTTP timeout when the plugin gives none.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest outbound HTTP timeout a plugin may ask for.
pub const MAX_HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest outbound HTTP response body, bytes.
pub const MAX_HTTP_RESPONSE_BYTES: usize = 1 << 20;

/// Header carrying the signing time (unix seconds) of a signed outbound request.
pub const TIMESTAMP_HEADER: &str = "x-outbox-timestamp";

/// Header carrying `sha256=<hex HMAC-SHA256(secret, "{timestamp}.{body}")>`.
pub const SIGNATURE_HEADER: &str = "x-outbox-signature";

/// Deadline of one Redis command issued for a plugin.
const KV_DEADLINE: Duration = Duration::from_secs(5);

/// Deadline of one outbox insert issued for a plugin.
const DB_DEADLINE: Duration = Duration::from_secs(10);

/// Longest target quoted in audit lines and denial events (kv keys are checked after the policy).
const MAX_AUDIT_TARGET: usize = 512;

type HmacSha256 = Hmac<Sha256>;

/// Decides capability checks by calling the configured policy plugin. Reads `[policy] plugin`
/// and looks the policy plugin up on every check, so a reloaded `routes.toml` or policy `.wasm`
/// takes effect at once.
pub struct CapabilityPolicy {
    registry: Arc<PluginRegistry>,
    source: PolicySource,
    /// Decisions of the policy plugin, keyed by everything they depend on (policy version and
    /// config, caller, capability, target, grants): a policy is a pure function of its request,
    /// so an identical request under the same policy version gets the same answer without
    /// instantiating WebAssembly again. A reload changes the key; failures are never cached.
    decisions: std::sync::Mutex<HashMap<String, Result<(), String>>>,
}

/// Cached policy decisions kept at most (the cache is cleared when full).
const MAX_CACHED_DECISIONS: usize = 4096;

/// Where the policy plugin's name comes from.
enum PolicySource {
    /// `[policy] plugin` of the routes file in force.
    Live(Arc<ArcSwap<RoutesFile>>),
    /// A fixed name.
    Fixed(Arc<str>),
}

impl CapabilityPolicy {
    /// A policy that follows `[policy] plugin` of the live `routes` (hot reload included).
    pub fn new(registry: Arc<PluginRegistry>, routes: Arc<ArcSwap<RoutesFile>>) -> Self {
        Self {
            registry,
            source: PolicySource::Live(routes),
            decisions: Default::default(),
        }
    }

    /// A policy that always asks plugin `policy_plugin` ([`DENY_ALL`] for none): offline tools,
    /// benches and tests.
    pub fn with_plugin(registry: Arc<PluginRegistry>, policy_plugin: &str) -> Self {
        Self {
            registry,
            source: PolicySource::Fixed(Arc::from(policy_plugin)),
            decisions: Default::default(),
        }
    }

    /// Decide whether `plugin` may use `capability` (`log`, `publish`, `kv` or `http`) on
    /// `target` (the event type, the key, or `host[:port]`). `Err` carries the denial reason.
    /// Fails closed: with `deny-all`, no policy plugin loaded or a plugin of another world,
    /// everything but `log` is denied; a policy call that traps or times out denies (`log`
    /// included). Otherwise the policy plugin decides, `log` included. Records the
    /// decision metric, and the audit line and metric of a denial. Runs WebAssembly: call it
    /// from a blocking thread.
    pub fn check(
        &self,
        plugin: &LoadedPlugin,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        self.check_with_grants(&plugin.name, || grants_json(plugin), capability, target)
    }

    /// [`check`](Self::check) with the caller's grants JSON (built once per delivery).
    fn check_with_grants(
        &self,
        plugin: &str,
        grants: impl FnOnce() -> String,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        let result = self.decide(plugin, grants, capability, target);
        let label = capability_label(capability);
        let decision = if result.is_ok() { "allow" } else { "deny" };
        metrics::counter!("outbox_capability_checks_total", "capability" => label, "decision" => decision)
            .increment(1);
        if let Err(reason) = &result {
            tracing::warn!(
                target: "outbox::audit",
                plugin,
                capability,
                target = clip(target, MAX_AUDIT_TARGET),
                reason = reason.as_str(),
                "capability denied"
            );
            metrics::counter!("outbox_capability_denied_total", "capability" => label, "plugin" => plugin.to_string())
                .increment(1);
        }
        result
    }

    fn decide(
        &self,
        plugin: &str,
        grants: impl FnOnce() -> String,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        let routes;
        let policy_name: &str = match &self.source {
            PolicySource::Fixed(name) => name,
            PolicySource::Live(live) => {
                routes = live.load_full();
                &routes.policy.plugin
            }
        };
        // Without a working policy plugin every call but `log` is refused (fail closed).
        let fail_closed = |why: String| {
            if capability == "log" {
                Ok(())
            } else {
                Err(format!("plugin '{plugin}' may not use {capability}: {why}"))
            }
        };
        if policy_name == DENY_ALL {
            return fail_closed(
                "[policy] plugin = \"deny-all\" refuses every capability but log".to_string(),
            );
        }
        let Some(policy) = self.registry.get(policy_name) else {
            return fail_closed(format!(
                "the capability policy plugin '{policy_name}' is not loaded, so every call is denied (fail closed)"
            ));
        };
        let Prepared::Policy(pre) = &policy.compiled.prepared else {
            return fail_closed(format!(
                "[policy] plugin '{policy_name}' is a {} plugin, not a policy (fail closed)",
                policy.world()
            ));
        };
        let request = CapabilityRequest {
            plugin: plugin.to_string(),
            capability: capability.to_string(),
            target: target.to_string(),
            grants: grants(),
        };
        let key = [
            policy.compiled.hash.as_str(),
            policy.config_json.as_str(),
            request.plugin.as_str(),
            request.capability.as_str(),
            request.target.as_str(),
            request.grants.as_str(),
        ]
        .join("\u{0}");
        if let Some(cached) = self
            .decisions
            .lock()
            .ok()
            .and_then(|d| d.get(&key).cloned())
        {
            return cached;
        }
        let answer = self.registry.engine().call_policy(
            &policy.name,
            pre,
            &policy.limits,
            &policy.config_json,
            &request,
        );
        policy.record_call(answer.is_ok());
        let decision = match answer {
            Ok(Decision::Allow) => Ok(()),
            Ok(Decision::Deny(reason)) => Err(reason),
            Err(e) => {
                return Err(format!(
                    "plugin '{plugin}' may not use {capability}: the capability policy failed, so the call is denied (fail closed): {e}"
                ))
            }
        };
        if let Ok(mut decisions) = self.decisions.lock() {
            if decisions.len() >= MAX_CACHED_DECISIONS {
                decisions.clear();
            }
            decisions.insert(key, decision.clone());
        }
        decision
    }
}

/// The calling plugin's grants as the policy plugin reads them.
fn grants_json(plugin: &LoadedPlugin) -> String {
    serde_json::to_string(&plugin.spec.grants).unwrap_or_else(|_| "{}".to_string())
}

/// A bounded metric label for a capability name.
fn capability_label(capability: &str) -> &'static str {
    match capability {
        "log" => "log",
        "publish" => "publish",
        "kv" => "kv",
        "http" => "http",
        _ => "other",
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

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

/// The outbound HTTP client plugins' calls go through: rustls, no redirects (each hop must pass
/// the policy, so a 3xx comes back to the plugin as it is), default timeout.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(MAX_HTTP_TIMEOUT)
        .user_agent(concat!("outbox/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The [`HandlerServices`] of one delivery: `publish`, `kv` and `http` for the handler plugin,
/// each checked by the [`CapabilityPolicy`] first. Build it on the async side (it captures the
/// current tokio runtime), keep [`published_ids_handle`](Self::published_ids_handle), then hand
/// it to `PluginEngine::call_handler` (which runs on a blocking thread).
pub struct ReceiverServices {
    handle: tokio::runtime::Handle,
    plugin: Arc<LoadedPlugin>,
    policy: Arc<CapabilityPolicy>,
    pool: PgPool,
    redis: ConnectionManager,
    key_prefix: String,
    http: reqwest::Client,
    parent: ParentEvent,
    handler: String,
    max_payload_bytes: usize,
    publish_denials: bool,
    grants: String,
    next_publish_index: u32,
    published: Arc<Mutex<Vec<i64>>>,
}

impl ReceiverServices {
    /// Services for `plugin` while it handles `parent` as handler `handler` (the name that goes
    /// into children's dispatch keys and `causation_handler`).
    ///
    /// - `redis`, `key_prefix`: the kv store and the host's Redis key prefix;
    /// - `http`: the outbound client; build it with [`http_client`], which does not follow
    ///   redirects (a followed redirect would reach a host the policy never saw);
    /// - `max_payload_bytes`: payload limit of children (`OUTBOX_MAX_PAYLOAD_BYTES`);
    /// - `publish_denials`: `[policy] publish_denials`, write a `plugin.capability-use.denied`
    ///   event per denial.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (it captures `Handle::current()`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        plugin: Arc<LoadedPlugin>,
        policy: Arc<CapabilityPolicy>,
        pool: PgPool,
        redis: ConnectionManager,
        key_prefix: String,
        http: reqwest::Client,
        parent: impl Into<ParentEvent>,
        handler: String,
        max_payload_bytes: usize,
        publish_denials: bool,
    ) -> Self {
        Self {
            handle: tokio::runtime::Handle::current(),
            grants: grants_json(&plugin),
            plugin,
            policy,
            pool,
            redis,
            key_prefix,
            http,
            parent: parent.into(),
            handler,
            max_payload_bytes,
            publish_denials,
            next_publish_index: 0,
            published: Arc::default(),
        }
    }

    /// The ids this delivery publishes (children, in call order; existing ids on redelivery),
    /// shared: it stays readable after `self` moves into the wasm store.
    pub fn published_ids_handle(&self) -> Arc<Mutex<Vec<i64>>> {
        self.published.clone()
    }

    /// Run the policy; on a denial write the audit event (if configured) and return `Denied`.
    fn authorize(&self, capability: &str, target: &str) -> Result<(), HostError> {
        let grants = &self.grants;
        let Err(reason) =
            self.policy
                .check_with_grants(&self.plugin.name, || grants.clone(), capability, target)
        else {
            return Ok(());
        };
        if self.publish_denials {
            if let Err(e) = self.record_denial(capability, target, &reason) {
                tracing::error!(
                    target: "outbox::audit",
                    plugin = &*self.plugin.name,
                    capability,
                    error = %e,
                    "could not write the capability denial event"
                );
            }
        }
        Err(HostError::Denied(reason))
    }

    /// Insert the `plugin.capability-use.denied` event (idempotent per parent, handler,
    /// capability and target).
    fn record_denial(&self, capability: &str, target: &str, reason: &str) -> Result<i64, String> {
        let payload = serde_json::json!({
            "plugin": &*self.plugin.name,
            "capability": capability,
            "target": clip(target, MAX_AUDIT_TARGET),
            "reason": reason,
            "parent_event_id": self.parent.id,
            "handler": self.handler,
        });
        let key = denial_dispatch_key(self.parent.id, &self.handler, capability, target);
        let mut event = NewEvent::new(DENIED_EVENT_TYPE, payload)
            .with_dispatch_key(key)
            .with_headers(self.child_headers(None));
        event.tenant_id = self.parent.tenant_id.clone();
        self.insert(event)
    }

    /// A child's headers: the parent's (anything but an object counts as `{}`), then the
    /// child's own, then the causation fields (which a plugin cannot override).
    fn child_headers(
        &self,
        extra: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> serde_json::Value {
        let mut headers = match serde_json::from_str::<serde_json::Value>(&self.parent.headers) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        merge_headers(&mut headers, extra, self.parent.id, &self.handler);
        serde_json::Value::Object(headers)
    }

    /// Insert one event in its own short transaction; the existing id when its dispatch key was
    /// used before.
    fn insert(&self, event: NewEvent) -> Result<i64, String> {
        let pool = &self.pool;
        let limit = self.max_payload_bytes.max(1024);
        let work = async move {
            let mut tx = pool.begin().await.map_err(|e| format!("publish: {e}"))?;
            let id = publish_with_limit(&mut tx, event, limit)
                .await
                .map_err(|e| e.to_string())?;
            tx.commit()
                .await
                .map_err(|e| format!("publish: commit: {e}"))?;
            Ok(id)
        };
        self.handle.block_on(async {
            tokio::time::timeout(DB_DEADLINE, work)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "publish: the database did not answer within {} s",
                        DB_DEADLINE.as_secs()
                    ))
                })
        })
    }

    /// Run one Redis command with the kv deadline.
    fn redis<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, HostError> {
        let mut conn = self.redis.clone();
        self.handle.block_on(async move {
            match tokio::time::timeout(KV_DEADLINE, cmd.query_async::<T>(&mut conn)).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(e)) => Err(HostError::Failed(format!("kv: {e}"))),
                Err(_) => Err(HostError::Failed(format!(
                    "kv: Redis did not answer within {} s",
                    KV_DEADLINE.as_secs()
                ))),
            }
        })
    }

    /// The namespaced Redis key of a plugin key, after checking its length.
    fn kv_key(&self, key: &str) -> Result<String, HostError> {
        if key.is_empty() || key.len() > MAX_KV_KEY_BYTES {
            return Err(HostError::Failed(format!(
                "kv keys are 1 to {MAX_KV_KEY_BYTES} bytes, got {}",
                key.len()
            )));
        }
        Ok(kv_redis_key(&self.key_prefix, &self.plugin.name, key))
    }

    /// The signing secret named by the plugin's grants, read now (`None`: no signing).
    fn signing_secret(&self) -> Result<Option<Vec<u8>>, HostError> {
        let Some(var) = &self.plugin.spec.grants.http_signing_secret_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(secret) if !secret.is_empty() => Ok(Some(secret.into_bytes())),
            _ => Err(HostError::Failed(format!(
                "http: plugin '{}' must sign its requests with the secret in environment variable {var}, which is not set (or empty, or not UTF-8) in the host's environment; the request was not sent",
                self.plugin.name
            ))),
        }
    }
}

impl HandlerServices for ReceiverServices {
    fn publish(&mut self, event: wit_publish::NewEvent) -> Result<i64, HostError> {
        // Index every call, whatever its outcome, so call i of a redelivery gets key i again.
        let index = self.next_publish_index;
        self.next_publish_index += 1;
        self.authorize("publish", &event.event_type)?;
        let payload: serde_json::Value = serde_json::from_str(&event.payload).map_err(|e| {
            HostError::Failed(format!(
                "payload of {} is not valid JSON: {e}",
                event.event_type
            ))
        })?;
        let extra = match event.headers.as_deref() {
            None => None,
            Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(serde_json::Value::Object(map)) => Some(map),
                _ => {
                    return Err(HostError::Failed(format!(
                        "headers of {} must be a JSON object",
                        event.event_type
                    )))
                }
            },
        };
        let mut child = NewEvent::new(event.event_type, payload)
            .with_dispatch_key(child_dispatch_key(self.parent.id, &self.handler, index))
            .with_headers(self.child_headers(extra));
        child.tenant_id = event.tenant_id.or_else(|| self.parent.tenant_id.clone());
        validate(&child, self.max_payload_bytes).map_err(|e| HostError::Failed(e.to_string()))?;
        let id = self.insert(child).map_err(HostError::Failed)?;
        if let Ok(mut ids) = self.published.lock() {
            ids.push(id);
        }
        Ok(id)
    }

    fn kv_get(&mut self, key: String) -> Result<Option<String>, HostError> {
        self.authorize("kv", &key)?;
        let key = self.kv_key(&key)?;
        self.redis(redis::cmd("GET").arg(key).clone())
    }

    fn kv_set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> Result<(), HostError> {
        self.authorize("kv", &key)?;
        let key = self.kv_key(&key)?;
        if value.len() > MAX_KV_VALUE_BYTES {
            return Err(HostError::Failed(format!(
                "kv values are at most {MAX_KV_VALUE_BYTES} bytes, got {}",
                value.len()
            )));
        }
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value);
        match ttl_seconds {
            Some(0) => {
                return Err(HostError::Failed(
                    "kv: ttl_seconds must be at least 1".into(),
                ))
            }
            Some(ttl) => {
                cmd.arg("EX").arg(ttl);
            }
            None => {}
        }
        self.redis::<()>(cmd)
    }

    fn kv_delete(&mut self, key: String) -> Result<bool, HostError> {
        self.authorize("kv", &key)?;
        let key = self.kv_key(&key)?;
        let removed: i64 = self.redis(redis::cmd("DEL").arg(key).clone())?;
        Ok(removed > 0)
    }

    fn http_send(&mut self, request: http::Request) -> Result<http::Response, HostError> {
        let url = reqwest::Url::parse(&request.url)
            .map_err(|e| HostError::Failed(format!("http: invalid url {:?}: {e}", request.url)))?;
        let target = http_target(&url)
            .ok_or_else(|| HostError::Failed(format!("http: url {:?} has no host", request.url)))?;
        self.authorize("http", &target)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HostError::Failed(format!(
                "http: only http and https urls are allowed, got {}",
                url.scheme()
            )));
        }
        let method = reqwest::Method::from_bytes(request.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| HostError::Failed(format!("http: invalid method {:?}", request.method)))?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &request.headers {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HostError::Failed(format!("http: invalid header name {name:?}")))?;
            if header == reqwest::header::HOST
                || header == TIMESTAMP_HEADER
                || header == SIGNATURE_HEADER
            {
                return Err(HostError::Failed(format!(
                    "http: header {name} is set by the host, not the plugin"
                )));
            }
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| HostError::Failed(format!("http: invalid value for header {name}")))?;
            headers.append(header, value);
        }
        let body = request.body.unwrap_or_default();
        if let Some(secret) = self.signing_secret()? {
            let timestamp = chrono::Utc::now().timestamp();
            let signature = sign_request(&secret, timestamp, &body);
            let value = |s: String| {
                reqwest::header::HeaderValue::from_str(&s)
                    .map_err(|e| HostError::Failed(format!("http: signing: {e}")))
            };
            headers.insert(TIMESTAMP_HEADER, value(timestamp.to_string())?);
            headers.insert(SIGNATURE_HEADER, value(signature)?);
        }
        let timeout = request
            .timeout_ms
            .map(|ms| Duration::from_millis(u64::from(ms)))
            .unwrap_or(DEFAULT_HTTP_TIMEOUT)
            .min(MAX_HTTP_TIMEOUT);
        let send = self
            .http
            .request(method, url)
            .headers(headers)
            .body(body)
            .timeout(timeout)
            .send();
        let work = async move {
            let mut response = send.await.map_err(|e| format!("http: {e}"))?;
            if response
                .content_length()
                .is_some_and(|len| len > MAX_HTTP_RESPONSE_BYTES as u64)
            {
                return Err(too_large());
            }
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_string(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| format!("http: reading the body: {e}"))?
            {
                if body.len() + chunk.len() > MAX_HTTP_RESPONSE_BYTES {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(http::Response {
                status,
                headers,
                body,
            })
        };
        // The client's per-request timeout bounds the whole exchange; this is a backstop.
        self.handle.block_on(async move {
            tokio::time::timeout(timeout + Duration::from_secs(1), work)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "http: no response within {} ms",
                        timeout.as_millis()
                    ))
                })
                .map_err(HostError::Failed)
        })
    }
}

fn too_large() -> String {
    format!("http: the response body is over the limit of {MAX_HTTP_RESPONSE_BYTES} bytes")
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
    bounded_key(format!("child:{parent_id}:{handler}:{index}"))
}

/// Dispatch key of the denial event for one (parent, handler, capability, target).
pub fn denial_dispatch_key(
    parent_id: i64,
    handler: &str,
    capability: &str,
    target: &str,
) -> String {
    bounded_key(format!(
        "denied:{parent_id}:{handler}:{capability}:{target}"
    ))
}

/// Keys over the 512-character dispatch key limit keep a readable head and a hash of the whole.
fn bounded_key(key: String) -> String {
    const MAX: usize = 512;
    if key.len() <= MAX {
        return key;
    }
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    format!("{}~sha256:{digest}", clip(&key, MAX - 8 - digest.len()))
}

/// The Redis key of plugin `plugin`'s key `key`: `{prefix}outbox:kv:{plugin}:{key}`. A `:` or
/// `%` in the plugin name is percent-encoded, so no two plugins can share a key.
pub fn kv_redis_key(prefix: &str, plugin: &str, key: &str) -> String {
    crate::queue::QueueKeys::new(prefix).kv(plugin, key)
}

/// The policy target of a URL: `host`, or `host:port` when the port is not the scheme's
/// default (IPv6 hosts keep their brackets). `None` when the URL has no host.
pub fn http_target(url: &reqwest::Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// The `x-outbox-signature` value of a request: `sha256=<hex HMAC-SHA256(secret,
/// "{timestamp}.{body}")>`.
pub fn sign_request(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Check a signed request as its receiving service should: `timestamp` (the
/// `x-outbox-timestamp` header) within `max_age_secs` of `now_unix` either way, and
/// `signature_header` (the `x-outbox-signature` header) the HMAC of `"{timestamp}.{body}"`,
/// compared in constant time. `Err` says why the request must be rejected. A replay inside the
/// window passes: a receiver that must see each request once also remembers recent signatures.
pub fn verify_signature(
    secret: &[u8],
    timestamp: &str,
    body: &[u8],
    signature_header: &str,
    now_unix: i64,
    max_age_secs: i64,
) -> Result<(), String> {
    let signed_at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| format!("{TIMESTAMP_HEADER} is not a unix time in seconds: {timestamp:?}"))?;
    let age = now_unix.saturating_sub(signed_at);
    if age > max_age_secs {
        return Err(format!(
            "request signed {age} s ago, over the limit of {max_age_secs} s (a replay?)"
        ));
    }
    let ahead = signed_at.saturating_sub(now_unix);
    if ahead > max_age_secs {
        return Err(format!(
            "request signed {ahead} s in the future, over the limit of {max_age_secs} s"
        ));
    }
    let hex_sig = signature_header
        .trim()
        .strip_prefix("sha256=")
        .ok_or_else(|| format!("{SIGNATURE_HEADER} must look like sha256=<hex>"))?;
    let signature = hex::decode(hex_sig).map_err(|_| format!("{SIGNATURE_HEADER} is not hex"))?;
    let mut mac = HmacSha256::new_from_slice(secret).map_err(|e| e.to_string())?;
    mac.update(timestamp.trim().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&signature).map_err(|_| {
        "signature does not match (wrong secret, or the request was altered)".to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cret";
    const NOW: i64 = 1_800_000_000;

    #[test]
    fn signature_roundtrip() {
        let body = br#"{"hello":"world"}"#;
        let sig = sign_request(SECRET, NOW, body);
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64, "{sig}");
        verify_signature(SECRET, &NOW.to_string(), body, &sig, NOW + 3, 300).unwrap();
        // Empty body, and a known vector: HMAC-SHA256("s3cret", "1800000000.").
        let empty = sign_request(SECRET, NOW, b"");
        verify_signature(SECRET, "1800000000", b"", &empty, NOW, 300).unwrap();
        let mut mac = HmacSha256::new_from_slice(SECRET).unwrap();
        mac.update(b"1800000000.");
        assert_eq!(
            empty,
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        );
    }

    #[test]
    fn forgeries_are_rejected() {
        let body = b"amount=10";
        let ts = NOW.to_string();
        let sig = sign_request(SECRET, NOW, body);
        let err = verify_signature(b"other", &ts, body, &sig, NOW, 300).unwrap_err();
        assert!(err.contains("does not match"), "{err}");
        assert!(verify_signature(SECRET, &ts, b"amount=1000", &sig, NOW, 300).is_err());
        // Moving the timestamp (to dodge the replay window) breaks the signature.
        let later = (NOW + 100).to_string();
        assert!(verify_signature(SECRET, &later, body, &sig, NOW + 100, 300).is_err());
        // Malformed headers.
        assert!(verify_signature(SECRET, &ts, body, &sig[7..], NOW, 300).is_err());
        assert!(verify_signature(SECRET, &ts, body, "sha256=zz", NOW, 300).is_err());
        assert!(verify_signature(SECRET, &ts, body, "sha256=", NOW, 300).is_err());
        let truncated = &sig[..sig.len() - 2];
        assert!(verify_signature(SECRET, &ts, body, truncated, NOW, 300).is_err());
        assert!(verify_signature(SECRET, "soon", body, &sig, NOW, 300).is_err());
    }

    #[test]
    fn replays_outside_the_window_are_rejected() {
        let body = b"x";
        let ts = NOW.to_string();
        let sig = sign_request(SECRET, NOW, body);
        verify_signature(SECRET, &ts, body, &sig, NOW + 300, 300).unwrap();
        let err = verify_signature(SECRET, &ts, body, &sig, NOW + 301, 300).unwrap_err();
        assert!(err.contains("replay"), "{err}");
        let err = verify_signature(SECRET, &ts, body, &sig, NOW - 301, 300).unwrap_err();
        assert!(err.contains("future"), "{err}");
        assert!(verify_signature(SECRET, &ts, body, &sig, i64::MIN, 300).is_err());
        assert!(verify_signature(SECRET, &i64::MIN.to_string(), body, &sig, NOW, 300).is_err());
    }

    #[test]
    fn kv_keys_are_namespaced_per_plugin() {
        assert_eq!(
            kv_redis_key("", "counter", "hits"),
            "outbox:kv:counter:hits"
        );
        assert_eq!(
            kv_redis_key("app1:", "counter", "a:b"),
            "app1:outbox:kv:counter:a:b"
        );
        // Plugin "a" key "b:c" and plugin "a:b" key "c" must not meet.
        assert_ne!(kv_redis_key("", "a", "b:c"), kv_redis_key("", "a:b", "c"));
        assert_eq!(kv_redis_key("", "a:b", "c"), "outbox:kv:a%3Ab:c");
        assert_ne!(kv_redis_key("", "a%3Ab", "c"), kv_redis_key("", "a:b", "c"));
    }

    #[test]
    fn http_targets() {
        let t = |u: &str| http_target(&reqwest::Url::parse(u).unwrap());
        assert_eq!(
            t("https://API.example.com/x?y=1").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            t("https://api.example.com:443/").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            t("http://localhost:8080/hook").as_deref(),
            Some("localhost:8080")
        );
        assert_eq!(t("http://[::1]:9000/").as_deref(), Some("[::1]:9000"));
        assert_eq!(
            t("http://user:pw@evil.example:81@good.example/").as_deref(),
            Some("good.example")
        );
        assert_eq!(t("mailto:a@b.c"), None);
    }

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

    #[test]
    fn clip_cuts_at_char_boundaries() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("abc", 10), "abc");
    }

    fn registry() -> Arc<PluginRegistry> {
        let engine = super::super::PluginEngine::new().unwrap();
        Arc::new(PluginRegistry::new(engine, "/nonexistent"))
    }

    #[test]
    fn deny_all_and_missing_policy_deny_everything_but_log() {
        let grants = || r#"{"kv": true}"#.to_string();
        let deny_all = CapabilityPolicy::with_plugin(registry(), DENY_ALL);
        assert_eq!(deny_all.check_with_grants("x", grants, "log", ""), Ok(()));
        let err = deny_all
            .check_with_grants("x", grants, "kv", "k")
            .unwrap_err();
        assert!(err.contains("deny-all"), "{err}");
        let missing = CapabilityPolicy::with_plugin(registry(), "capability-policy");
        assert_eq!(missing.check_with_grants("x", grants, "log", ""), Ok(()));
        let err = missing
            .check_with_grants("x", grants, "publish", "a.b")
            .unwrap_err();
        assert!(err.contains("'capability-policy' is not loaded"), "{err}");
    }

    /// The real policy plugin, when `scripts/build-plugins.sh` has built it.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_policy_plugin_decides() {
        let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
        if !dist.join("capability-policy.wasm").exists() {
            eprintln!("skipped: plugins/dist/capability-policy.wasm is not built");
            return;
        }
        let mut routes = crate::config::RoutesFile::default();
        let spec: crate::config::PluginSpec = toml::from_str("").unwrap();
        routes.plugins.insert("capability-policy".into(), spec);
        let engine = super::super::PluginEngine::new().unwrap();
        let registry = Arc::new(PluginRegistry::new(engine, dist));
        registry.apply_config(&routes).await.unwrap();
        let policy = CapabilityPolicy::with_plugin(registry, "capability-policy");
        let decisions = tokio::task::spawn_blocking(move || {
            let grants = || r#"{"publish": ["workflow."], "kv": false}"#.to_string();
            let started = std::time::Instant::now();
            let allowed = policy.check_with_grants("x", grants, "publish", "workflow.run");
            let elapsed = started.elapsed();
            let denied = policy.check_with_grants("x", grants, "kv", "k");
            (allowed, denied, elapsed)
        })
        .await
        .unwrap();
        assert_eq!(decisions.0, Ok(()));
        assert!(decisions.1.unwrap_err().contains("kv is not granted"));
        eprintln!("one policy check took {:?}", decisions.2);
    }
}
