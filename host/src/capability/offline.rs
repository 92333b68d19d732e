//! The offline host of a handler call (`outbox plugins call`): no database, Redis or network,
//! but the same checks as in a receiver.
//!
//! Owns [`OfflineHost`], which assembles the capability factors over the offline backends (kv
//! in memory, [`crate::capability::kv::memory`]; publish recorded,
//! [`crate::capability::publish::recorder`]; http answered by fixtures,
//! [`crate::capability::http::fixtures`]) with the policy `[policy]` names, and what one run
//! writes down ([`OfflineCall`], [`OfflineState`], kept in an [`OfflineLog`], which also keeps
//! every denial and failure). Every call goes through the checked entry point of its
//! capability, exactly as in a receiver; only the backend differs. It holds no check of its
//! own, never writes to a database or Redis, never opens a socket and never reads a signing
//! secret; name resolution and the address rules that depend on it happen only in a receiver.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::http::fixtures::FixtureHttp;
use super::kv::memory::MemoryKv;
use super::policy::gate::{Gate, Refusals};
use super::policy::MAX_AUDIT_TARGET;
use super::publish::recorder::Recorder;
use super::publish::{generation_limit, ParentEvent};
use super::services::{DeliveryServices, Factors};
use super::{clip, kv, CapabilityPolicy};
use crate::config::PluginSpec;
use crate::plugin::engine::HandlerServices;
use crate::plugin::LoadedPlugin;

pub use super::http::fixtures::{HttpFixture, MAX_HTTP_FIXTURES};

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

/// What an offline run writes down, shared by its backends: the kv store, every call made, every
/// denial and failure (its [`Refusals`]).
#[derive(Clone, Default)]
pub(crate) struct OfflineLog(Arc<Mutex<OfflineState>>);

impl OfflineLog {
    /// Write `call` down.
    pub(crate) fn record(&self, call: OfflineCall) {
        if let Ok(mut state) = self.0.lock() {
            state.calls.push(call);
        }
    }

    /// Run `op` on the kv store.
    pub(crate) fn with_kv<T>(
        &self,
        op: impl FnOnce(&mut BTreeMap<String, OfflineKvValue>) -> T,
    ) -> Result<T, String> {
        let mut state = self
            .0
            .lock()
            .map_err(|_| "kv: the offline store is poisoned".to_string())?;
        Ok(op(&mut state.kv))
    }

    /// The kv store and the calls made so far.
    fn snapshot(&self) -> OfflineState {
        self.0
            .lock()
            .map(|s| OfflineState {
                kv: s.kv.clone(),
                calls: s.calls.clone(),
            })
            .unwrap_or_default()
    }
}

impl Refusals for OfflineLog {
    fn denied<'a>(
        &'a self,
        _gate: &'a Gate,
        capability: &'a str,
        target: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ()> {
        self.record(OfflineCall::Denied {
            capability: capability.to_string(),
            target: clip(target, MAX_AUDIT_TARGET).to_string(),
            reason: reason.to_string(),
        });
        Box::pin(std::future::ready(()))
    }

    fn failed(&self, capability: &'static str, error: &str) {
        self.record(OfflineCall::Failed {
            capability,
            error: error.to_string(),
        });
    }
}

/// What every offline call of one run shares: the factors over the offline backends and what
/// the run writes down.
pub struct OfflineHost {
    factors: Arc<Factors>,
    log: OfflineLog,
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
        let log = OfflineLog(Arc::new(Mutex::new(state)));
        let factors = Factors {
            policy,
            kv: Arc::new(MemoryKv::new(log.clone())),
            publish: Arc::new(Recorder::new(log.clone())),
            http: Arc::new(FixtureHttp::new(fixtures, log.clone())),
            refusals: Arc::new(log.clone()),
            max_payload_bytes,
            max_generation: generation_limit(crate::config::DEFAULT_MAX_EVENT_GENERATION),
        };
        Ok(Self {
            factors: Arc::new(factors),
            log,
        })
    }

    /// Refuse children deeper than `max_generation` (`OUTBOX_MAX_EVENT_GENERATION`; the default
    /// otherwise), as a receiver does.
    pub fn with_max_event_generation(mut self, max_generation: u32) -> Self {
        Arc::make_mut(&mut self.factors).max_generation = generation_limit(max_generation);
        self
    }

    /// The services of one delivery: `plugin` handling `parent` (the name children's dispatch
    /// keys carry is the plugin's, as for a plugin bound in `[handlers]`); hand them to
    /// [`LoadedPlugin::call_handler`].
    pub fn services(
        &self,
        plugin: Arc<LoadedPlugin>,
        parent: ParentEvent,
    ) -> Box<dyn HandlerServices> {
        Box::new(self.delivery(&plugin.name, &plugin.spec, parent))
    }

    /// The services of one delivery of plugin `plugin`, declared as `spec`, handling `parent`.
    pub(crate) fn delivery(
        &self,
        plugin: &Arc<str>,
        spec: &PluginSpec,
        parent: ParentEvent,
    ) -> DeliveryServices {
        self.factors
            .services(plugin, spec, parent, plugin, plugin.to_string())
    }

    /// The kv store and the calls made so far.
    pub fn state(&self) -> OfflineState {
        self.log.snapshot()
    }
}
