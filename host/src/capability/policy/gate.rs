//! The gate every host call of one delivery passes before its capability's backend runs: the
//! request check ([`validate_request`]), the capability policy, and what a refusal leaves
//! behind.
//!
//! Owns [`Gate`] (one per delivery: the calling plugin, its grants as the policy reads them,
//! the event it handles and how its children are made) and the [`Refusals`] a host keeps: a
//! receiver writes a denial as a `plugin.capability-use.denied` event ([`AuditEvents`]), an
//! offline call writes every denial and failure down. The same gate, with the same checks, runs
//! in both. It never performs the host call it decides about, and never reports a denial the
//! policy's [`DenialLimiter`] holds back.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;

use super::denials::{denial_event, Denial, DenialLimiter};
use super::{validate_request, CapabilityPolicy, DENIAL_REPORT_WINDOW};
use crate::capability::publish::postgres::PostgresPublish;
use crate::capability::publish::{AskPolicy, ChildRules, ParentEvent};
use crate::plugin::bindings::HostCallError;

/// What a host keeps of the calls it refused: a receiver writes a denial as an audit event
/// ([`AuditEvents`]) and keeps no failure (the plugin sees it); an offline call writes both
/// down.
pub(crate) trait Refusals: Send + Sync {
    /// The policy denied `capability` on `target` of the delivery of `gate` with `reason`.
    fn denied<'a>(
        &'a self,
        gate: &'a Gate,
        capability: &'a str,
        target: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ()>;

    /// A call of `capability` failed (a check, or its backend) with `error`.
    fn failed(&self, capability: &'static str, error: &str);
}

/// The gate of one delivery's host calls.
pub(crate) struct Gate {
    /// The calling plugin.
    pub(crate) plugin: Arc<str>,
    /// The event being handled: the parent of children and denial events.
    pub(crate) parent: ParentEvent,
    /// How its children are made (the handler's name among them).
    pub(crate) rules: ChildRules,
    /// The plugin's grants as the policy plugin reads them (built once per delivery).
    grants: String,
    /// Whether a denial is also an event (`[policy] publish_denials`, read once per delivery).
    publish_denials: bool,
    policy: Arc<CapabilityPolicy>,
    refusals: Arc<dyn Refusals>,
}

impl Gate {
    /// The gate of `plugin` (whose grants, as JSON, are `grants`) handling `parent` under
    /// `rules`, deciding with `policy` and keeping refusals in `refusals`.
    pub(crate) fn new(
        policy: Arc<CapabilityPolicy>,
        refusals: Arc<dyn Refusals>,
        plugin: Arc<str>,
        grants: String,
        parent: ParentEvent,
        rules: ChildRules,
    ) -> Self {
        Self {
            publish_denials: policy.publish_denials(),
            plugin,
            parent,
            rules,
            grants,
            policy,
            refusals,
        }
    }

    /// Check the request ([`validate_request`]: `Failed` when malformed, before any policy
    /// runs), run the policy; on a denial hand it to the host's [`Refusals`] and return
    /// `Denied`.
    pub(crate) async fn authorize(
        &self,
        capability: &str,
        target: &str,
    ) -> Result<(), HostCallError> {
        validate_request(capability, target).map_err(HostCallError::Failed)?;
        let grants = &self.grants;
        let Err(reason) = self
            .policy
            .check_with_grants_async(&self.plugin, || grants.clone(), capability, target)
            .await
        else {
            return Ok(());
        };
        self.refusals
            .denied(self, capability, target, &reason)
            .await;
        Err(HostCallError::Denied(reason))
    }

    /// Hand a failed `result` of a `capability` call to the host's [`Refusals`] (denials were
    /// handed over by [`authorize`](Self::authorize)), and return it.
    pub(crate) fn kept<T>(
        &self,
        capability: &'static str,
        result: Result<T, HostCallError>,
    ) -> Result<T, HostCallError> {
        if let Err(HostCallError::Failed(error)) = &result {
            self.refusals.failed(capability, error);
        }
        result
    }
}

impl AskPolicy for Gate {
    fn ask(
        &self,
        capability: &'static str,
        target: &str,
    ) -> impl std::future::Future<Output = Result<(), HostCallError>> + Send {
        self.authorize(capability, target)
    }
}

/// A receiver's [`Refusals`]: a denial is written as a `plugin.capability-use.denied` event
/// (when `[policy] publish_denials` is on, at most one per plugin and capability per
/// [`DENIAL_REPORT_WINDOW`], carrying the count of those suppressed); failures are the plugin's.
pub(crate) struct AuditEvents {
    limiter: DenialLimiter,
    publish: Arc<PostgresPublish>,
}

impl AuditEvents {
    /// Denial events inserted with `publish`.
    pub(crate) fn new(publish: Arc<PostgresPublish>) -> Self {
        Self {
            limiter: DenialLimiter::new(DENIAL_REPORT_WINDOW),
            publish,
        }
    }

    async fn write(&self, gate: &Gate, capability: &str, target: &str, reason: &str) {
        let admitted = || self.limiter.admit(&gate.plugin, capability, Instant::now());
        let Some(suppressed_before) = gate.publish_denials.then(admitted).flatten() else {
            return;
        };
        let denial = Denial {
            plugin: &gate.plugin,
            capability,
            target,
            reason,
            suppressed_before,
        };
        let event = denial_event(&denial, &gate.parent, &gate.rules.handler);
        // An audit event is caused by the handler run like a child (one generation deeper) but
        // never refused for it: the denial must be on record.
        let generation = gate.parent.generation.max(0).saturating_add(1);
        if let Err(e) = self
            .publish
            .insert_event(event, generation, gate.rules.max_payload_bytes)
            .await
        {
            tracing::error!(
                target: "outbox::audit",
                plugin = &*gate.plugin,
                capability,
                error = %e,
                "could not write the capability denial event"
            );
        }
    }
}

impl Refusals for AuditEvents {
    fn denied<'a>(
        &'a self,
        gate: &'a Gate,
        capability: &'a str,
        target: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(self.write(gate, capability, target, reason))
    }

    fn failed(&self, _capability: &'static str, _error: &str) {}
}
