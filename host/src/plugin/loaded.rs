//! One plugin as it serves: a compiled version of its file ([`CompiledPlugin`]) with its name,
//! limits, config, declaration, call slots and counters ([`LoadedPlugin`]), and the one way to
//! call it ([`LoadedPlugin::call_router`], [`LoadedPlugin::call_handler`],
//! [`LoadedPlugin::call_policy`]: world check, limits, config, counters, the reasons in its
//! answers bounded).
//!
//! It never runs a call on the async executor: the call methods are synchronous and block the
//! (blocking) thread they are called on until the call ends or its time limit cuts it (async
//! callers await [`LoadedPlugin::handle`]). It never decides which version serves (that is
//! [`super::registry`]) nor what a plugin may do (that is the capability policy's job).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::bindings::{
    CapabilityRequest, Decision, DelayedRetry, Delivery, Outcome, WitEvent, WitRouteDecision,
};
use super::engine::{
    block_on, CallOf, CallSlots, CallUsage, HandlerServices, PluginEngine, PluginLimits, Prepared,
    SlotWait, World,
};
use super::remembered_routes::RememberedRoutes;
use super::{PluginError, WIT_VERSION};
use crate::config::PluginSpec;

/// One compiled version of a plugin file.
pub struct CompiledPlugin {
    /// What the host instantiates per call.
    pub(crate) prepared: Prepared,
    /// SHA-256 of the file, hex.
    pub hash: String,
    /// When this version was loaded.
    pub loaded_at: DateTime<Utc>,
    /// File it came from.
    pub path: PathBuf,
}

impl CompiledPlugin {
    /// The world this plugin implements.
    pub fn world(&self) -> World {
        self.prepared.world()
    }

    /// The WIT package its export was built against (`outbox:plugin@0.1.0`); the host's own
    /// version when the export carries none.
    pub fn exported_package(&self) -> String {
        let component = self.prepared.component();
        let export = format!("outbox:plugin/{}-api@", self.world());
        let found = component
            .component_type()
            .exports(component.engine())
            .find_map(|(name, _)| name.strip_prefix(export.as_str()).map(str::to_string));
        format!("outbox:plugin@{}", found.as_deref().unwrap_or(WIT_VERSION))
    }
}

/// A plugin as it serves now: a compiled version plus its config, limits and grants.
pub struct LoadedPlugin {
    /// Name from `[plugins.NAME]`.
    pub name: Arc<str>,
    /// The compiled version.
    pub compiled: Arc<CompiledPlugin>,
    /// Per-call limits.
    pub limits: PluginLimits,
    /// `[plugins.NAME].config` as JSON text (router plugins also get the routing table).
    pub config_json: String,
    /// The declaration it was loaded from.
    pub spec: PluginSpec,
    /// Calls since this plugin name was first loaded.
    pub calls: Arc<AtomicU64>,
    /// Failed calls since this plugin name was first loaded.
    pub errors: Arc<AtomicU64>,
    /// Microseconds spent in its calls (waits for host calls included) since this plugin name
    /// was first loaded.
    pub busy_micros: Arc<AtomicU64>,
    /// At most `limits.max_concurrency` calls of this plugin run at once.
    pub(super) slots: CallSlots,
    /// A router declaring `router_by_type`: its answers by event type, for this version and
    /// config only (see [`super::remembered_routes`]).
    pub(super) remembered_routes: RememberedRoutes,
    /// The engine that compiled it and runs its calls.
    pub(super) engine: PluginEngine,
}

impl LoadedPlugin {
    /// A plugin loaded outside any registry (`outbox plugins call FILE`): `compiled` served as
    /// `name` with these limits, config and declaration, its counters starting at zero.
    pub fn standalone(
        engine: &PluginEngine,
        name: &str,
        compiled: Arc<CompiledPlugin>,
        limits: PluginLimits,
        config_json: String,
        spec: PluginSpec,
    ) -> Self {
        Self {
            name: Arc::from(name),
            compiled,
            limits,
            config_json,
            spec,
            calls: Arc::default(),
            errors: Arc::default(),
            busy_micros: Arc::default(),
            slots: CallSlots::new(limits.max_concurrency),
            remembered_routes: RememberedRoutes::default(),
            engine: engine.clone(),
        }
    }

    /// Average cost of one fresh instantiation of this plugin (a new store with its limits and
    /// an instance from the pre-linked component, no call) over `iterations`: what every call
    /// pays before the guest runs. Not counted as calls. Runs WebAssembly setup: call it from a
    /// blocking thread.
    pub fn time_instantiation(&self, iterations: u32) -> Result<std::time::Duration, PluginError> {
        block_on(self.engine.time_instantiation(
            &self.name,
            &self.compiled.prepared,
            &self.limits,
            iterations,
        ))?
    }

    /// The plugin's world.
    pub fn world(&self) -> World {
        self.compiled.prepared.world()
    }

    /// Calls of this plugin name holding one of its `max_concurrency` call slots now; the
    /// calls beyond them wait for a slot.
    pub fn calls_running(&self) -> usize {
        self.slots.in_use()
    }

    /// Count one call, its result and the time it took since `started`.
    pub fn record_call(&self, ok: bool, started: std::time::Instant) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.busy_micros.fetch_add(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("outbox_plugin_errors_total", "plugin" => self.name.to_string())
                .increment(1);
        }
        metrics::counter!("outbox_plugin_calls_total", "plugin" => self.name.to_string())
            .increment(1);
    }

    /// Route `events` with this router plugin: one instantiation, one call for the batch, with
    /// the plugin's limits and config; counted in its calls/errors. An answer that does not
    /// hold exactly one decision per event (in order) is a failed call.
    /// [`PluginError::WrongWorld`] (not counted as a call) when this is not a router.
    /// Runs WebAssembly and blocks until the call ends or its time limit cuts it: call it from a
    /// blocking thread (see [`block_on`]), or await [`route`](Self::route).
    pub fn call_router(&self, events: &[WitEvent]) -> Result<Vec<WitRouteDecision>, PluginError> {
        block_on(self.route(events)).and_then(|answer| answer)
    }

    /// [`call_router`](Self::call_router) as a future, awaited on the caller's task (how the
    /// dispatcher routes a small batch): the guest gives the thread back at every epoch tick,
    /// and the call ends at its time limit wherever it is.
    pub async fn route(&self, events: &[WitEvent]) -> Result<Vec<WitRouteDecision>, PluginError> {
        if self.world() != World::Router {
            return Err(self.wrong_world(World::Router));
        }
        let started = std::time::Instant::now();
        let answer = self.run_router(events).await.and_then(|answer| {
            if answer.len() == events.len() {
                Ok(answer)
            } else {
                Err(PluginError::Call {
                    plugin: self.name.to_string(),
                    message: format!(
                        "returned {} routes for {} events",
                        answer.len(),
                        events.len()
                    ),
                })
            }
        });
        self.record_call(answer.is_ok(), started);
        answer
    }

    /// Handle one delivery with this handler plugin, its host calls served by `services`
    /// (`None`: offline, every host call answers "not available"), with the plugin's limits and
    /// config; counted in its calls/errors. [`PluginError::WrongWorld`] (not counted as a call)
    /// when this is not a handler. Runs WebAssembly and blocks until the call ends or its time
    /// limit cuts it (host calls included): call it from a blocking thread (see [`block_on`]);
    /// async code awaits [`handle`](Self::handle) instead.
    pub fn call_handler(
        &self,
        services: Option<Box<dyn HandlerServices>>,
        delivery: &Delivery,
    ) -> Result<Outcome, PluginError> {
        block_on(self.handle(services, delivery)).and_then(|outcome| outcome)
    }

    /// [`call_handler`](Self::call_handler), also returning what the call used of its limits
    /// (fuel, memory), whatever its end: for `outbox plugins call` and the bench.
    pub fn call_handler_measured(
        &self,
        services: Option<Box<dyn HandlerServices>>,
        delivery: &Delivery,
    ) -> (Result<Outcome, PluginError>, CallUsage) {
        let usage = std::sync::Mutex::new(CallUsage::default());
        let of = CallOf {
            usage: Some(&usage),
            ..self.call_of()
        };
        let outcome = block_on(self.handle_with(of, services, delivery)).and_then(|o| o);
        let usage = usage.into_inner().unwrap_or_else(|e| e.into_inner());
        (outcome, usage)
    }

    /// [`call_handler`](Self::call_handler) as a future, awaited on the caller's task (how the
    /// receivers run handlers): the guest gives the thread back at every epoch tick, and the
    /// call ends at its time limit wherever it is.
    pub async fn handle(
        &self,
        services: Option<Box<dyn HandlerServices>>,
        delivery: &Delivery,
    ) -> Result<Outcome, PluginError> {
        self.handle_with(self.call_of(), services, delivery).await
    }

    /// [`handle`](Self::handle), except that waiting for one of the plugin's call slots
    /// (`max_concurrency`) does not count against the call's time limit, which starts once a
    /// slot is held. For callers whose work is safe while it waits (the receivers: the entry's
    /// claim is renewed meanwhile), so more deliveries in flight than the plugin has slots
    /// queue for them instead of timing out; the wait is bounded by the calls ahead, each cut at
    /// its own time limit.
    pub async fn handle_queued(
        &self,
        services: Option<Box<dyn HandlerServices>>,
        delivery: &Delivery,
    ) -> Result<Outcome, PluginError> {
        let of = CallOf {
            slot_wait: SlotWait::BeforeTimeLimit,
            ..self.call_of()
        };
        self.handle_with(of, services, delivery).await
    }

    async fn handle_with(
        &self,
        of: CallOf<'_>,
        services: Option<Box<dyn HandlerServices>>,
        delivery: &Delivery,
    ) -> Result<Outcome, PluginError> {
        if self.world() != World::Handler {
            return Err(self.wrong_world(World::Handler));
        }
        let started = std::time::Instant::now();
        let outcome = self
            .engine
            .call_handler(
                of,
                &self.compiled.prepared,
                services,
                &self.config_json,
                delivery,
            )
            .await
            .map(|outcome| match outcome {
                Outcome::Retry(reason) => Outcome::Retry(super::bounded_reason(&reason)),
                Outcome::RetryAfter(DelayedRetry { reason, delay_ms }) => {
                    Outcome::RetryAfter(DelayedRetry {
                        reason: super::bounded_reason(&reason),
                        delay_ms,
                    })
                }
                Outcome::Fail(reason) => Outcome::Fail(super::bounded_reason(&reason)),
                ok => ok,
            });
        self.record_call(outcome.is_ok(), started);
        outcome
    }

    /// Ask this policy plugin about one capability request, with the plugin's limits and
    /// config; counted in its calls/errors. [`PluginError::WrongWorld`] (not counted as a call)
    /// when this is not a policy. Runs WebAssembly and blocks until the call ends or its time
    /// limit cuts it: call it from a blocking thread (see [`block_on`]).
    pub fn call_policy(&self, request: &CapabilityRequest) -> Result<Decision, PluginError> {
        block_on(self.call_policy_in_call(request)).and_then(|decision| decision)
    }

    /// [`call_policy`](Self::call_policy) as a future, for a policy check made by a host call
    /// of another plugin's call: awaited inside that call's future (under its deadline as well
    /// as this plugin's own).
    pub(crate) async fn call_policy_in_call(
        &self,
        request: &CapabilityRequest,
    ) -> Result<Decision, PluginError> {
        if self.world() != World::Policy {
            return Err(self.wrong_world(World::Policy));
        }
        let started = std::time::Instant::now();
        let decision = self
            .engine
            .call_policy(
                self.call_of(),
                &self.compiled.prepared,
                &self.config_json,
                request,
            )
            .await
            .map(|decision| match decision {
                Decision::Deny(reason) => Decision::Deny(super::bounded_reason(&reason)),
                allow => allow,
            });
        self.record_call(decision.is_ok(), started);
        decision
    }

    /// Whether this router plugin accepts its config: one call with an empty batch, not counted
    /// as a call. `Err` only when the plugin refused its config (`Router::check_config` in the
    /// SDK); any other failure of the empty call is left to the calls that route events. Not a
    /// router: `Ok`. Runs WebAssembly: call it from a blocking thread.
    pub fn check_router_config(&self) -> Result<(), PluginError> {
        if self.world() != World::Router {
            return Ok(());
        }
        match block_on(self.run_router(&[])).and_then(|answer| answer) {
            Err(e @ PluginError::Config { .. }) => Err(e),
            _ => Ok(()),
        }
    }

    /// One router call, a refused config reported as [`PluginError::Config`].
    async fn run_router(&self, events: &[WitEvent]) -> Result<Vec<WitRouteDecision>, PluginError> {
        self.engine
            .call_router(
                self.call_of(),
                &self.compiled.prepared,
                &self.config_json,
                events,
            )
            .await
            .map_err(|e| self.explain_config_refusal(e))
    }

    /// A failed router call whose guest said its config is invalid, as [`PluginError::Config`].
    fn explain_config_refusal(&self, error: PluginError) -> PluginError {
        match &error {
            PluginError::Call { message, .. } => match message.split_once(ROUTER_CONFIG_REFUSED) {
                Some((_, reason)) => PluginError::Config {
                    plugin: self.name.to_string(),
                    message: reason
                        .trim_start_matches(':')
                        .trim()
                        .trim_end_matches(')')
                        .to_string(),
                },
                None => error,
            },
            _ => error,
        }
    }

    fn call_of(&self) -> CallOf<'_> {
        CallOf {
            plugin: &self.name,
            limits: &self.limits,
            slots: &self.slots,
            slot_wait: SlotWait::WithinTimeLimit,
            usage: None,
        }
    }

    fn wrong_world(&self, expected: World) -> PluginError {
        PluginError::WrongWorld {
            plugin: self.name.to_string(),
            expected,
            found: self.world(),
        }
    }
}

/// How a router built with the SDK says it refuses its config (the SDK panics with this text
/// first, `outbox_plugin_sdk::router::INVALID_CONFIG_MARK`; the WIT answer has no error case).
const ROUTER_CONFIG_REFUSED: &str = "outbox router: invalid plugin config";
