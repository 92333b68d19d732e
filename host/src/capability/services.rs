//! The factors a host shares between deliveries, and the host services of one delivery built
//! from them.
//!
//! Owns [`Factors`] (the policy, one backend per capability, the denial and failure keeping,
//! the child limits: what a receiver or an offline call assembles once) and [`DeliveryServices`]
//! (one delivery's per-capability state: its [`Gate`], kv namespace, http grants and children),
//! its implementation of [`HandlerServices`]. The services are a thin dispatcher: each call goes
//! to the checked entry point of its capability, with the backend of the host that assembled
//! the factors, and a failure is handed to the host's refusals. It never reaches a backend but
//! through a capability's entry point, so a receiver and `outbox plugins call` run the same
//! checks.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tracing::Instrument;

use super::http::{HttpBackend, HttpInstance};
use super::kv::{KvAnswer, KvBackend, KvInstance, KvOp};
use super::policy::gate::{Gate, Refusals};
use super::policy::{grants_json, CapabilityPolicy};
use super::publish::{ChildRules, Children, ParentEvent, PublishBackend, PublishedChildren};
use crate::config::PluginSpec;
use crate::plugin::bindings::handler_world::outbox::plugin::{
    http as wit_http, publish as wit_publish,
};
use crate::plugin::bindings::HostCallError;
use crate::plugin::engine::HandlerServices;

/// What every delivery of one host shares: the policy, the backend of each capability, where
/// refusals go, and the limits of children.
#[derive(Clone)]
pub(crate) struct Factors {
    /// Decides every host call.
    pub(crate) policy: Arc<CapabilityPolicy>,
    /// The kv store.
    pub(crate) kv: Arc<dyn KvBackend>,
    /// Where children go.
    pub(crate) publish: Arc<dyn PublishBackend>,
    /// Where requests go.
    pub(crate) http: Arc<dyn HttpBackend>,
    /// What is kept of denials and failures.
    pub(crate) refusals: Arc<dyn Refusals>,
    /// Payload limit of children (`OUTBOX_MAX_PAYLOAD_BYTES`).
    pub(crate) max_payload_bytes: usize,
    /// The deepest generation of a child (`OUTBOX_MAX_EVENT_GENERATION`).
    pub(crate) max_generation: i32,
}

impl Factors {
    /// The services of one delivery: plugin `plugin` (declared as `spec`) handling `parent` as
    /// handler `handler`, its children's dispatch keys naming the run `run_key`
    /// ([`super::publish::run_key`]); the span current here is the parent of the host calls'
    /// spans.
    pub(crate) fn services(
        self: &Arc<Self>,
        plugin: &Arc<str>,
        spec: &PluginSpec,
        parent: ParentEvent,
        handler: &str,
        run_key: String,
    ) -> DeliveryServices {
        let rules = ChildRules {
            handler: handler.to_string(),
            run_key,
            max_payload_bytes: self.max_payload_bytes,
            max_generation: self.max_generation,
        };
        DeliveryServices {
            gate: Gate::new(
                self.policy.clone(),
                self.refusals.clone(),
                plugin.clone(),
                grants_json(&spec.grants),
                parent,
                rules,
            ),
            kv: KvInstance::new(plugin.clone(), spec.kv_max_bytes),
            http: HttpInstance::new(plugin.clone(), spec.grants.clone()),
            children: Children::default(),
            factors: self.clone(),
            span: tracing::Span::current(),
        }
    }
}

/// The [`HandlerServices`] of one delivery: `publish`, `kv` and `http` for the handler plugin,
/// each through its capability's checked entry point (the policy asked first), with the
/// backends of the host that made it.
pub(crate) struct DeliveryServices {
    gate: Gate,
    kv: KvInstance,
    http: HttpInstance,
    children: Children,
    factors: Arc<Factors>,
    /// The delivery's span: the parent of each host call's span.
    span: tracing::Span,
}

impl DeliveryServices {
    /// What this delivery's publish calls leave behind (the ids published, in call order,
    /// existing ids on redelivery; a child refused for its generation), shared: it stays
    /// readable after `self` moves into the wasm store.
    pub(crate) fn published_handle(&self) -> Arc<Mutex<PublishedChildren>> {
        self.children.published_handle()
    }

    /// One kv operation through [`KvInstance::call`], a failure kept.
    async fn run_kv(&self, op: KvOp) -> Result<KvAnswer, HostCallError> {
        let answer = self.kv.call(&self.gate, &*self.factors.kv, op).await;
        self.gate.kept("kv", answer)
    }

    /// One kv operation in its span.
    fn kv_call<T: Send + 'static>(
        &mut self,
        op: KvOp,
        answer: impl FnOnce(KvAnswer) -> Result<T, HostCallError> + Send + 'static,
    ) -> BoxFuture<'_, Result<T, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.span, "outbox.host.kv", op = op.name());
        Box::pin(async move { answer(self.run_kv(op).await?) }.instrument(span))
    }
}

impl HandlerServices for DeliveryServices {
    fn publish(
        &mut self,
        event: wit_publish::NewEvent,
    ) -> BoxFuture<'_, Result<i64, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.span, "outbox.host.publish", event_type = %event.event_type);
        Box::pin(
            async move {
                let sent = self
                    .children
                    .send(&self.gate, &*self.factors.publish, event)
                    .await;
                self.gate.kept("publish", sent)
            }
            .instrument(span),
        )
    }

    fn kv_get(&mut self, key: String) -> BoxFuture<'_, Result<Option<String>, HostCallError>> {
        self.kv_call(KvOp::Get { key }, |answer| match answer {
            KvAnswer::Value(value) => Ok(value),
            other => Err(other.mismatch("get")),
        })
    }

    fn kv_set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<(), HostCallError>> {
        let op = KvOp::Set {
            key,
            value,
            ttl_seconds,
        };
        self.kv_call(op, |answer| match answer {
            KvAnswer::Done => Ok(()),
            other => Err(other.mismatch("set")),
        })
    }

    fn kv_delete(&mut self, key: String) -> BoxFuture<'_, Result<bool, HostCallError>> {
        self.kv_call(KvOp::Delete { key }, |answer| match answer {
            KvAnswer::Existed(existed) => Ok(existed),
            other => Err(other.mismatch("delete")),
        })
    }

    fn kv_increment(
        &mut self,
        key: String,
        delta: i64,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<i64, HostCallError>> {
        let op = KvOp::Increment {
            key,
            delta,
            ttl_seconds,
        };
        self.kv_call(op, |answer| match answer {
            KvAnswer::Counter(value) => Ok(value),
            other => Err(other.mismatch("increment")),
        })
    }

    fn kv_compare_and_set(
        &mut self,
        key: String,
        expected: Option<String>,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<bool, HostCallError>> {
        let op = KvOp::CompareAndSet {
            key,
            expected,
            value,
            ttl_seconds,
        };
        self.kv_call(op, |answer| match answer {
            KvAnswer::Stored(stored) => Ok(stored),
            other => Err(other.mismatch("compare-and-set")),
        })
    }

    fn http_send(
        &mut self,
        request: wit_http::Request,
    ) -> BoxFuture<'_, Result<wit_http::Response, HostCallError>> {
        let span = tracing::debug_span!(parent: &self.span, "outbox.host.http");
        Box::pin(
            async move {
                let answer = self
                    .http
                    .send(&self.gate, &*self.factors.http, request)
                    .await;
                self.gate.kept("http", answer)
            }
            .instrument(span),
        )
    }
}
