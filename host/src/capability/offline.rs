//! The host services of an offline handler call (`outbox plugins call`): no database, Redis or
//! network, but the same checks as in a receiver.
//!
//! Owns [`OfflineHost`] (the policy, the grants and limits of the plugin, the HTTP fixtures and
//! the in-memory kv store of one offline run) and [`OfflineServices`], its implementation of
//! [`HandlerServices`]. Every call goes through the checks a receiver makes (key, value and
//! target bounds, the kv quotas of keys and bytes, the publish budget, child dispatch keys, headers and tenant,
//! the URL and port rules of the grants) and the capability policy, then is served from memory
//! and written down in an [`OfflineCall`]: a publish is recorded ("would publish", with the
//! dispatch key the host would give it) and answered with a negative id, a kv call works on the
//! in-memory store (seeded by the caller), and an HTTP request is answered by the first fixture
//! of the same method and URL or refused. It never writes to a database or Redis, never opens a
//! socket and never reads a signing secret; name resolution and the address rules that depend
//! on it happen only in a receiver.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::publish::{generation_limit, AskPolicy, ChildRules, Children, ParentEvent};
use super::{http, kv, CapabilityPolicy};
use crate::plugin::bindings::handler_world::outbox::plugin::{
    http as wit_http, publish as wit_publish,
};
use crate::plugin::bindings::HostCallError;
use crate::plugin::engine::HandlerServices;
use crate::plugin::LoadedPlugin;
use crate::publish::NewEvent;

/// Most HTTP fixtures one offline run accepts.
pub const MAX_HTTP_FIXTURES: usize = 1000;

/// One canned answer to an HTTP request of an offline call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFixture {
    /// The method it answers (any when absent), case-insensitive.
    #[serde(default)]
    pub method: Option<String>,
    /// The URL it answers, exactly as the plugin sends it.
    pub url: String,
    /// The status of the answer (default 200).
    #[serde(default = "ok_status")]
    pub status: u16,
    /// The headers of the answer.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The body: a string as is, any other JSON value as its JSON text (default empty).
    #[serde(default)]
    pub body: Option<serde_json::Value>,
}

fn ok_status() -> u16 {
    200
}

impl HttpFixture {
    fn answers(&self, method: &str, url: &str) -> bool {
        self.url == url
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
    }

    fn response(&self) -> wit_http::Response {
        let body = match &self.body {
            None => Vec::new(),
            Some(serde_json::Value::String(s)) => s.clone().into_bytes(),
            Some(other) => other.to_string().into_bytes(),
        };
        wit_http::Response {
            status: self.status,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            body,
        }
    }
}

/// One host call an offline handler call made, and how it ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum OfflineCall {
    /// A child the handler would publish (nothing was inserted).
    Publish {
        /// The child as the host would insert it: dispatch key, tenant and headers included.
        event_type: String,
        /// Its tenant.
        tenant_id: Option<String>,
        /// The dispatch key the host gives it (the same on every redelivery).
        dispatch_key: Option<String>,
        /// Its payload.
        payload: serde_json::Value,
        /// Its headers (the parent's, the child's own, the causation fields).
        headers: serde_json::Value,
        /// The id returned to the plugin (negative: offline, nothing was inserted).
        id: i64,
    },
    /// A kv call on the in-memory store.
    Kv {
        /// `get`, `set`, `delete`, `increment` or `compare-and-set`.
        op: &'static str,
        /// The plugin's key.
        key: String,
        /// What it returned, as text.
        result: String,
    },
    /// An HTTP request answered by a fixture.
    Http {
        /// The request's method.
        method: String,
        /// The request's URL.
        url: String,
        /// The status of the fixture's answer.
        status: u16,
        /// Which fixture answered (0-based, in the order given).
        fixture: usize,
    },
    /// A call the capability policy denied.
    Denied {
        /// The capability asked for.
        capability: String,
        /// Its target (event type, key, host).
        target: String,
        /// The policy's reason.
        reason: String,
    },
    /// A call that failed before or instead of being served (a bound, a bad input, no fixture).
    Failed {
        /// `publish`, `kv` or `http`.
        capability: &'static str,
        /// Why.
        error: String,
    },
}

/// One kv value of the in-memory store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OfflineKvValue {
    /// The value.
    pub value: String,
    /// The time to live it was given, in seconds (never counted down: an offline call lasts
    /// milliseconds).
    pub ttl_seconds: Option<u32>,
}

/// What an offline run knows and keeps: the kv store and the calls made.
#[derive(Debug, Default)]
pub struct OfflineState {
    /// The kv store: the plugin's keys and values.
    pub kv: BTreeMap<String, OfflineKvValue>,
    /// Every host call, in order.
    pub calls: Vec<OfflineCall>,
}

/// What every offline call of one run shares: the policy deciding host calls, the HTTP
/// fixtures, the payload limit and the state.
pub struct OfflineHost {
    policy: Arc<CapabilityPolicy>,
    fixtures: Vec<HttpFixture>,
    max_payload_bytes: usize,
    max_generation: i32,
    state: Arc<Mutex<OfflineState>>,
}

impl OfflineHost {
    /// An offline host: `policy` decides every host call (as `[policy]` would in a receiver),
    /// `fixtures` answer HTTP requests (at most [`MAX_HTTP_FIXTURES`]), `kv` seeds the store
    /// (each key and value within the kv limits, at most the key quota), children are checked
    /// against `max_payload_bytes`.
    pub fn new(
        policy: Arc<CapabilityPolicy>,
        fixtures: Vec<HttpFixture>,
        kv_seed: BTreeMap<String, String>,
        max_payload_bytes: usize,
    ) -> Result<Self, String> {
        if fixtures.len() > MAX_HTTP_FIXTURES {
            return Err(format!(
                "at most {MAX_HTTP_FIXTURES} HTTP fixtures, got {}",
                fixtures.len()
            ));
        }
        if kv_seed.len() > kv::MAX_KV_KEYS_PER_PLUGIN {
            return Err(format!(
                "the kv seed holds {} keys, over the quota of {} keys per plugin",
                kv_seed.len(),
                kv::MAX_KV_KEYS_PER_PLUGIN
            ));
        }
        let mut state = OfflineState::default();
        for (key, value) in kv_seed {
            kv::check_key(&key).map_err(|e| format!("kv seed: {e}"))?;
            kv::check_value(&value, None).map_err(|e| format!("kv seed, key {key:?}: {e}"))?;
            state.kv.insert(
                key,
                OfflineKvValue {
                    value,
                    ttl_seconds: None,
                },
            );
        }
        Ok(Self {
            policy,
            fixtures,
            max_payload_bytes,
            max_generation: generation_limit(crate::config::DEFAULT_MAX_EVENT_GENERATION),
            state: Arc::new(Mutex::new(state)),
        })
    }

    /// Refuse children deeper than `max_generation` (`OUTBOX_MAX_EVENT_GENERATION`; the default
    /// otherwise), as a receiver does.
    pub fn with_max_event_generation(mut self, max_generation: u32) -> Self {
        self.max_generation = generation_limit(max_generation);
        self
    }

    /// The services of one delivery: `plugin` handling `parent` (the name children's dispatch
    /// keys carry is the plugin's, as for a plugin bound in `[handlers]`).
    pub fn services(
        self: &Arc<Self>,
        plugin: Arc<LoadedPlugin>,
        parent: ParentEvent,
    ) -> OfflineServices {
        OfflineServices {
            grants: super::policy::grants_json(&plugin),
            rules: ChildRules {
                handler: plugin.name.to_string(),
                run_key: plugin.name.to_string(),
                max_payload_bytes: self.max_payload_bytes,
                max_generation: self.max_generation,
            },
            host: self.clone(),
            plugin,
            parent,
            children: Children::default(),
        }
    }

    /// The kv store and the calls made so far.
    pub fn state(&self) -> OfflineState {
        self.state
            .lock()
            .map(|s| OfflineState {
                kv: s.kv.clone(),
                calls: s.calls.clone(),
            })
            .unwrap_or_default()
    }

    fn record(&self, call: OfflineCall) {
        if let Ok(mut state) = self.state.lock() {
            state.calls.push(call);
        }
    }
}

/// The [`HandlerServices`] of one offline delivery (see the module docs).
pub struct OfflineServices {
    host: Arc<OfflineHost>,
    plugin: Arc<LoadedPlugin>,
    parent: ParentEvent,
    rules: ChildRules,
    grants: String,
    children: Children,
}

impl OfflineServices {
    /// Ask the policy, as a receiver does; a denial is recorded and returned.
    async fn authorize(&self, capability: &str, target: &str) -> Result<(), HostCallError> {
        super::policy::validate_request(capability, target).map_err(HostCallError::Failed)?;
        let grants = &self.grants;
        match self
            .host
            .policy
            .check_with_grants_async(&self.plugin.name, || grants.clone(), capability, target)
            .await
        {
            Ok(()) => Ok(()),
            Err(reason) => {
                self.host.record(OfflineCall::Denied {
                    capability: capability.to_string(),
                    target: super::clip(target, super::policy::MAX_AUDIT_TARGET).to_string(),
                    reason: reason.clone(),
                });
                Err(HostCallError::Denied(reason))
            }
        }
    }

    /// Record `result` of a `capability` call that failed (denials are recorded by
    /// [`authorize`](Self::authorize)) and hand it back.
    fn failed<T>(
        &self,
        capability: &'static str,
        result: Result<T, HostCallError>,
    ) -> Result<T, HostCallError> {
        if let Err(HostCallError::Failed(error)) = &result {
            self.host.record(OfflineCall::Failed {
                capability,
                error: error.clone(),
            });
        }
        result
    }

    async fn publish_offline(
        &mut self,
        event: wit_publish::NewEvent,
    ) -> Result<i64, HostCallError> {
        let parent = self.parent.clone();
        let rules = self.rules.clone();
        let mut children = std::mem::take(&mut self.children);
        let child = children.prepare(&parent, &rules, event, &*self).await;
        self.children = children;
        let child: NewEvent = self.failed("publish", child)?.event;
        let id = -i64::from(self.children.calls_made());
        self.host.record(OfflineCall::Publish {
            event_type: child.event_type,
            tenant_id: child.tenant_id,
            dispatch_key: child.dispatch_key,
            payload: child.payload,
            headers: child.headers,
            id,
        });
        Ok(id)
    }

    /// Run one kv operation on the store after the checks and the policy; `op` gets the store
    /// and returns the answer and its text for the record.
    async fn kv_offline<T>(
        &self,
        name: &'static str,
        key: &str,
        checks: Result<(), String>,
        op: impl FnOnce(&mut BTreeMap<String, OfflineKvValue>) -> Result<(T, String), String>,
    ) -> Result<T, HostCallError> {
        let checked = kv::check_key(key)
            .and(checks)
            .map_err(HostCallError::Failed);
        self.failed("kv", checked)?;
        self.authorize(kv::CAPABILITY, key).await?;
        let answer = {
            let Ok(mut state) = self.host.state.lock() else {
                return Err(HostCallError::Failed(
                    "kv: the offline store is poisoned".into(),
                ));
            };
            op(&mut state.kv)
        };
        match answer {
            Ok((value, text)) => {
                self.host.record(OfflineCall::Kv {
                    op: name,
                    key: key.to_string(),
                    result: text,
                });
                Ok(value)
            }
            Err(error) => self.failed("kv", Err(HostCallError::Failed(error))),
        }
    }

    async fn http_offline(
        &self,
        request: wit_http::Request,
    ) -> Result<wit_http::Response, HostCallError> {
        let parsed = http::parse_url(&request.url).map_err(HostCallError::Failed);
        let (url, target) = self.failed("http", parsed)?;
        self.authorize(http::CAPABILITY, &target).await?;
        let destination = http::check_destination(&url, &self.plugin.spec.grants)
            .map(drop)
            .and_then(|()| http::request_headers(&request.headers).map(drop))
            .map_err(HostCallError::Failed);
        self.failed("http", destination)?;
        let method = request.method.to_ascii_uppercase();
        let Some((index, fixture)) = self
            .host
            .fixtures
            .iter()
            .enumerate()
            .find(|(_, f)| f.answers(&method, &request.url))
        else {
            let error = format!(
                "http: no fixture answers {method} {} (an offline call sends no request; give the answer in a fixture file with --http-fixtures)",
                request.url
            );
            return self.failed("http", Err(HostCallError::Failed(error)));
        };
        self.host.record(OfflineCall::Http {
            method,
            url: request.url,
            status: fixture.status,
            fixture: index,
        });
        Ok(fixture.response())
    }
}

impl AskPolicy for OfflineServices {
    fn ask(
        &self,
        capability: &'static str,
        target: &str,
    ) -> impl std::future::Future<Output = Result<(), HostCallError>> + Send {
        self.authorize(capability, target)
    }
}

/// A kv write into the store under the quotas, as the Redis scripts decide: `Err` when `key` is
/// new and the store holds the key quota, or when the write grows the bytes of keys and values
/// the store holds past `max_bytes`.
fn store(
    kv_store: &mut BTreeMap<String, OfflineKvValue>,
    (plugin, max_bytes): (&str, u64),
    key: &str,
    value: String,
    ttl_seconds: Option<u32>,
) -> Result<(), String> {
    let size = |k: &str, v: &OfflineKvValue| (k.len() + v.value.len()) as u64;
    let old = kv_store.get(key).map(|v| size(key, v));
    if old.is_none() && kv_store.len() >= kv::MAX_KV_KEYS_PER_PLUGIN {
        return Err(kv::quota_reached(plugin));
    }
    let old = old.unwrap_or(0);
    let new = (key.len() + value.len()) as u64;
    if new > old {
        let held: u64 = kv_store.iter().map(|(k, v)| size(k, v)).sum();
        if held - old + new > max_bytes {
            return Err(kv::byte_quota_reached(plugin, max_bytes, key, value.len()));
        }
    }
    kv_store.insert(key.to_string(), OfflineKvValue { value, ttl_seconds });
    Ok(())
}

impl HandlerServices for OfflineServices {
    fn publish(
        &mut self,
        event: wit_publish::NewEvent,
    ) -> BoxFuture<'_, Result<i64, HostCallError>> {
        Box::pin(self.publish_offline(event))
    }

    fn kv_get(&mut self, key: String) -> BoxFuture<'_, Result<Option<String>, HostCallError>> {
        Box::pin(async move {
            self.kv_offline("get", &key, Ok(()), |kv_store| {
                let value = kv_store.get(&key).map(|v| v.value.clone());
                let text = format!("{value:?}");
                Ok((value, text))
            })
            .await
        })
    }

    fn kv_set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<(), HostCallError>> {
        let plugin = self.plugin.name.clone();
        let quota = kv::KvMaxBytes::of(self.plugin.spec.kv_max_bytes);
        Box::pin(async move {
            let checks = kv::check_value(&value, ttl_seconds);
            self.kv_offline("set", &key, checks, |kv_store| {
                let text = format!("stored {value:?}");
                store(kv_store, (&plugin, quota), &key, value, ttl_seconds).map(|()| ((), text))
            })
            .await
        })
    }

    fn kv_delete(&mut self, key: String) -> BoxFuture<'_, Result<bool, HostCallError>> {
        Box::pin(async move {
            self.kv_offline("delete", &key, Ok(()), |kv_store| {
                let existed = kv_store.remove(&key).is_some();
                Ok((existed, format!("{existed}")))
            })
            .await
        })
    }

    fn kv_increment(
        &mut self,
        key: String,
        delta: i64,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<i64, HostCallError>> {
        let plugin = self.plugin.name.clone();
        let quota = kv::KvMaxBytes::of(self.plugin.spec.kv_max_bytes);
        Box::pin(async move {
            let checks = kv::check_ttl(ttl_seconds);
            self.kv_offline("increment", &key, checks, |kv_store| {
                let (current, ttl) = match kv_store.get(&key) {
                    None => (0, ttl_seconds),
                    Some(v) => match v.value.parse::<i64>() {
                        Ok(n) => (n, v.ttl_seconds),
                        Err(_) => {
                            return Err(format!(
                                "kv: cannot increment {key:?}: its value is not a 64-bit integer or the sum overflows ({:?})",
                                v.value
                            ))
                        }
                    },
                };
                let Some(next) = current.checked_add(delta) else {
                    return Err(format!(
                        "kv: cannot increment {key:?}: its value is not a 64-bit integer or the sum overflows ({current} + {delta})"
                    ));
                };
                store(kv_store, (&plugin, quota), &key, next.to_string(), ttl)?;
                Ok((next, next.to_string()))
            })
            .await
        })
    }

    fn kv_compare_and_set(
        &mut self,
        key: String,
        expected: Option<String>,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<bool, HostCallError>> {
        let plugin = self.plugin.name.clone();
        let quota = kv::KvMaxBytes::of(self.plugin.spec.kv_max_bytes);
        Box::pin(async move {
            let checks = kv::check_value(&value, ttl_seconds).and_then(|()| match &expected {
                Some(expected) => kv::check_value(expected, None),
                None => Ok(()),
            });
            self.kv_offline("compare-and-set", &key, checks, |kv_store| {
                let current = kv_store.get(&key).map(|v| v.value.as_str());
                if current != expected.as_deref() {
                    return Ok((false, format!("not stored: the value is {current:?}")));
                }
                let text = format!("stored {value:?}");
                store(kv_store, (&plugin, quota), &key, value, ttl_seconds).map(|()| (true, text))
            })
            .await
        })
    }

    fn http_send(
        &mut self,
        request: wit_http::Request,
    ) -> BoxFuture<'_, Result<wit_http::Response, HostCallError>> {
        Box::pin(self.http_offline(request))
    }
}
