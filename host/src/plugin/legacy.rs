//! Plugins built against the previous contract, `outbox:plugin@0.1.x`: loaded and called
//! unchanged, adapted to the current types at the boundary.
//!
//! Owns the 0.1 side of the engine: the prepared 0.1 worlds ([`PreparedV0_1`]), the host
//! functions a 0.1 plugin imports (each converts its arguments and calls the current
//! implementation on [`HostState`], so a 0.1 plugin gets exactly the same checks, limits and
//! policy), and the conversions of every record and variant between the two versions. A 0.1
//! handler cannot ask for `retry-after` nor call `kv.increment`/`kv.compare-and-set`: those are
//! not in its contract. It never adds behaviour of its own: a difference between a 0.1 and a
//! current plugin's treatment is a bug here.

use wasmtime::component::Linker;
use wasmtime::Store;

use super::bindings::v0_1::router_world as v1_router;
use super::bindings::v0_1::{handler_world as v1_handler, policy_world as v1_policy};
use super::bindings::{handler_world, router_world};
use super::bindings::{
    CapabilityRequest, Decision, Delivery, HostCallError, HttpRequest, HttpResponse, Outcome,
    WitEvent, WitNewEvent, WitRouteDecision,
};
use super::engine::{HostState, World};

/// The WIT package version of the previous contract, still loaded.
pub const PREVIOUS_WIT_VERSION: &str = "0.1.0";

/// A plugin built against `outbox:plugin@0.1.x`, pre-linked.
#[derive(Clone)]
pub(crate) enum PreparedV0_1 {
    /// A 0.1 router.
    Router(v1_router::RouterPre<HostState>),
    /// A 0.1 handler.
    Handler(v1_handler::HandlerPre<HostState>),
    /// A 0.1 policy.
    Policy(v1_policy::PolicyPre<HostState>),
}

impl PreparedV0_1 {
    /// Its world.
    pub(crate) fn world(&self) -> World {
        match self {
            PreparedV0_1::Router(_) => World::Router,
            PreparedV0_1::Handler(_) => World::Handler,
            PreparedV0_1::Policy(_) => World::Policy,
        }
    }

    /// The component it was compiled from.
    pub(crate) fn component(&self) -> &wasmtime::component::Component {
        match self {
            PreparedV0_1::Router(pre) => pre.instance_pre().component(),
            PreparedV0_1::Handler(pre) => pre.instance_pre().component(),
            PreparedV0_1::Policy(pre) => pre.instance_pre().component(),
        }
    }

    /// Wrap an `InstancePre` of a 0.1 component of `world`, checking its exports.
    pub(crate) fn new(
        world: World,
        pre: wasmtime::component::InstancePre<HostState>,
    ) -> wasmtime::Result<Self> {
        Ok(match world {
            World::Router => PreparedV0_1::Router(v1_router::RouterPre::new(pre)?),
            World::Handler => PreparedV0_1::Handler(v1_handler::HandlerPre::new(pre)?),
            World::Policy => PreparedV0_1::Policy(v1_policy::PolicyPre::new(pre)?),
        })
    }

    /// Instantiate it without calling anything (the cost every call pays first).
    pub(crate) async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<()> {
        match self {
            PreparedV0_1::Router(pre) => pre.instantiate_async(store).await.map(drop),
            PreparedV0_1::Handler(pre) => pre.instantiate_async(store).await.map(drop),
            PreparedV0_1::Policy(pre) => pre.instantiate_async(store).await.map(drop),
        }
    }
}

/// Add the 0.1 imports of `world` to `linker` (WASI is added by the caller).
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>, world: World) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    match world {
        World::Router => v1_router::Router::add_to_linker::<_, HasSelf<_>>(linker, |s| s),
        World::Handler => v1_handler::Handler::add_to_linker::<_, HasSelf<_>>(linker, |s| s),
        World::Policy => v1_policy::Policy::add_to_linker::<_, HasSelf<_>>(linker, |s| s),
    }
}

/// One call of a 0.1 router in `store`.
pub(crate) async fn route(
    store: &mut Store<HostState>,
    pre: &v1_router::RouterPre<HostState>,
    config: &str,
    events: &[WitEvent],
) -> wasmtime::Result<Vec<WitRouteDecision>> {
    let events: Vec<_> = events.iter().cloned().map(event_to_v0_1).collect();
    let instance = pre.instantiate_async(&mut *store).await?;
    let answer = instance
        .outbox_plugin_router_api()
        .call_route(&mut *store, config, &events)
        .await?;
    Ok(answer.into_iter().map(route_decision_from_v0_1).collect())
}

/// One call of a 0.1 handler in `store`.
pub(crate) async fn handle(
    store: &mut Store<HostState>,
    pre: &v1_handler::HandlerPre<HostState>,
    config: &str,
    delivery: &Delivery,
) -> wasmtime::Result<Outcome> {
    let delivery = v1_handler::exports::outbox::plugin::handler_api::Delivery {
        event: event_to_v0_1(delivery.event.clone()),
        queue: delivery.queue.clone(),
        attempt: delivery.attempt,
    };
    let instance = pre.instantiate_async(&mut *store).await?;
    let outcome = instance
        .outbox_plugin_handler_api()
        .call_handle(&mut *store, config, &delivery)
        .await?;
    use v1_handler::exports::outbox::plugin::handler_api::Outcome as V1Outcome;
    Ok(match outcome {
        V1Outcome::Ok => Outcome::Ok,
        V1Outcome::Retry(reason) => Outcome::Retry(reason),
        V1Outcome::Fail(reason) => Outcome::Fail(reason),
    })
}

/// One call of a 0.1 policy in `store`.
pub(crate) async fn check(
    store: &mut Store<HostState>,
    pre: &v1_policy::PolicyPre<HostState>,
    config: &str,
    request: &CapabilityRequest,
) -> wasmtime::Result<Decision> {
    let request = v1_policy::exports::outbox::plugin::policy_api::CapabilityRequest {
        plugin: request.plugin.clone(),
        capability: request.capability.clone(),
        target: request.target.clone(),
        grants: request.grants.clone(),
    };
    let instance = pre.instantiate_async(&mut *store).await?;
    let decision = instance
        .outbox_plugin_policy_api()
        .call_check(&mut *store, config, &request)
        .await?;
    use v1_policy::exports::outbox::plugin::policy_api::Decision as V1Decision;
    Ok(match decision {
        V1Decision::Allow => Decision::Allow,
        V1Decision::Deny(reason) => Decision::Deny(reason),
    })
}

fn event_to_v0_1(e: WitEvent) -> v1_router::outbox::plugin::types::Event {
    v1_router::outbox::plugin::types::Event {
        id: e.id,
        event_type: e.event_type,
        event_version: e.event_version,
        tenant_id: e.tenant_id,
        payload: e.payload,
        headers: e.headers,
        dispatch_key: e.dispatch_key,
        created_at: e.created_at,
    }
}

fn route_decision_from_v0_1(
    d: v1_router::exports::outbox::plugin::router_api::RouteDecision,
) -> WitRouteDecision {
    use v1_router::exports::outbox::plugin::router_api::RouteDecision as V1;
    match d {
        V1::Queues(queues) => WitRouteDecision::Queues(queues),
        V1::NoRoute(reason) => WitRouteDecision::NoRoute(reason),
    }
}

fn host_error_to_v0_1(e: HostCallError) -> v1_router::outbox::plugin::types::HostError {
    use v1_router::outbox::plugin::types::HostError as V1;
    match e {
        HostCallError::Denied(reason) => V1::Denied(reason),
        HostCallError::Failed(reason) => V1::Failed(reason),
    }
}

// The host functions of a 0.1 plugin: each is the current one, its types converted.

impl v1_router::outbox::plugin::types::Host for HostState {}

impl v1_router::outbox::plugin::log::Host for HostState {
    async fn write(&mut self, level: v1_router::outbox::plugin::log::Level, message: String) {
        use router_world::outbox::plugin::log::{Host, Level};
        use v1_router::outbox::plugin::log::Level as V1;
        let level = match level {
            V1::Trace => Level::Trace,
            V1::Debug => Level::Debug,
            V1::Info => Level::Info,
            V1::Warn => Level::Warn,
            V1::Error => Level::Error,
        };
        Host::write(self, level, message).await
    }
}

impl v1_handler::outbox::plugin::publish::Host for HostState {
    async fn send(
        &mut self,
        event: v1_handler::outbox::plugin::publish::NewEvent,
    ) -> Result<i64, v1_router::outbox::plugin::types::HostError> {
        use handler_world::outbox::plugin::publish::Host;
        let event = WitNewEvent {
            event_type: event.event_type,
            payload: event.payload,
            tenant_id: event.tenant_id,
            headers: event.headers,
        };
        Host::send(self, event).await.map_err(host_error_to_v0_1)
    }
}

impl v1_handler::outbox::plugin::kv::Host for HostState {
    async fn get(
        &mut self,
        key: String,
    ) -> Result<Option<String>, v1_router::outbox::plugin::types::HostError> {
        use handler_world::outbox::plugin::kv::Host;
        Host::get(self, key).await.map_err(host_error_to_v0_1)
    }

    async fn set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> Result<(), v1_router::outbox::plugin::types::HostError> {
        use handler_world::outbox::plugin::kv::Host;
        Host::set(self, key, value, ttl_seconds)
            .await
            .map_err(host_error_to_v0_1)
    }

    async fn delete(
        &mut self,
        key: String,
    ) -> Result<bool, v1_router::outbox::plugin::types::HostError> {
        use handler_world::outbox::plugin::kv::Host;
        Host::delete(self, key).await.map_err(host_error_to_v0_1)
    }
}

impl v1_handler::outbox::plugin::http::Host for HostState {
    async fn send(
        &mut self,
        request: v1_handler::outbox::plugin::http::Request,
    ) -> Result<
        v1_handler::outbox::plugin::http::Response,
        v1_router::outbox::plugin::types::HostError,
    > {
        use handler_world::outbox::plugin::http::Host;
        let request = HttpRequest {
            method: request.method,
            url: request.url,
            headers: request.headers,
            body: request.body,
            timeout_ms: request.timeout_ms,
        };
        let HttpResponse {
            status,
            headers,
            body,
        } = Host::send(self, request)
            .await
            .map_err(host_error_to_v0_1)?;
        Ok(v1_handler::outbox::plugin::http::Response {
            status,
            headers,
            body,
        })
    }
}
