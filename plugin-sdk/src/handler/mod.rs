//! The `handler` world: consume one queue's entries, one delivery at a time.
//!
//! Implement [`Handler`] and export it with [`export_handler!`](crate::export_handler). Only
//! handlers may call back into the host beyond logging: [`publish`] new events, use the
//! per-plugin key-value store ([`kv`]) and make outbound [`http`] calls. Each call is checked by
//! the capability policy first; a refused call returns [`HostError::Denied`].

pub mod http;
pub mod kv;

use serde::Serialize;

use crate::bindings::handler::exports::outbox::plugin::handler_api::{
    Delivery as WitDelivery, Guest, Outcome as WitOutcome,
};
use crate::bindings::handler::outbox::plugin::publish as wit_publish;
use crate::{Config, Event, HostError};

/// One queue entry handed to a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The event.
    pub event: Event,
    /// The queue the entry was read from.
    pub queue: String,
    /// 1 on first delivery, 2 on the first retry, ...
    pub attempt: u32,
}

/// What became of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the entry is acknowledged.
    Ok,
    /// Try again later (with backoff); the reason is recorded.
    Retry(String),
    /// Give up now: the entry goes to the dead-letter stream with this reason.
    Fail(String),
}

impl Outcome {
    /// [`Outcome::Retry`] with any displayable reason.
    pub fn retry(reason: impl std::fmt::Display) -> Self {
        Self::Retry(reason.to_string())
    }

    /// [`Outcome::Fail`] with any displayable reason.
    pub fn fail(reason: impl std::fmt::Display) -> Self {
        Self::Fail(reason.to_string())
    }
}

/// A handler plugin (a queue consumer).
pub trait Handler {
    /// Handle one delivery. `config` is the plugin's JSON config from `routes.toml`.
    ///
    /// Deliveries are at least once: a handler must tolerate seeing the same event again. Events
    /// it publishes get dispatch keys derived from the parent event, so republishing on a
    /// redelivery creates no duplicates.
    fn handle(config: &Config, delivery: Delivery) -> Outcome;
}

/// Adapts a [`Handler`] to the generated `handler-api` export. Used by [`export_handler!`](crate::export_handler).
#[doc(hidden)]
pub struct HandlerExport<H>(std::marker::PhantomData<H>);

impl<H: Handler> Guest for HandlerExport<H> {
    fn handle(config: String, delivery: WitDelivery) -> WitOutcome {
        let delivery = Delivery {
            event: delivery.event.into(),
            queue: delivery.queue,
            attempt: delivery.attempt,
        };
        match H::handle(&Config::new(config), delivery) {
            Outcome::Ok => WitOutcome::Ok,
            Outcome::Retry(reason) => WitOutcome::Retry(reason),
            Outcome::Fail(reason) => WitOutcome::Fail(reason),
        }
    }
}

/// Export a [`Handler`] implementation as this component's `handler-api`.
///
/// ```no_run
/// use outbox_plugin_sdk::{handler::{Delivery, Handler, Outcome}, log, Config};
///
/// struct Audit;
///
/// impl Handler for Audit {
///     fn handle(_config: &Config, delivery: Delivery) -> Outcome {
///         log::info!("audit event {} ({})", delivery.event.id, delivery.event.event_type);
///         Outcome::Ok
///     }
/// }
///
/// outbox_plugin_sdk::export_handler!(Audit);
/// ```
#[macro_export]
macro_rules! export_handler {
    ($handler:ty) => {
        const _: () = {
            type __OutboxHandlerExport = $crate::handler::HandlerExport<$handler>;
            $crate::__private::handler::__export_handler_world!(
                __OutboxHandlerExport with_types_in $crate::__private::handler
            );
        };
    };
}

/// Publish a new outbox event with the parent event's tenant; returns its id.
///
/// Shorthand for `NewEvent::new(event_type, payload)?.send()`. On redelivery of the parent, the
/// host returns the id of the event published the first time instead of inserting a duplicate.
pub fn publish<T: Serialize + ?Sized>(event_type: &str, payload: &T) -> Result<i64, HostError> {
    NewEvent::new(event_type, payload)?.send()
}

/// An event to publish, for when [`publish`] is not enough (other tenant, extra headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    event_type: String,
    payload: String,
    tenant_id: Option<String>,
    headers: Option<String>,
}

impl NewEvent {
    /// A new event of `event_type` whose payload is `payload` serialized as JSON (it must
    /// serialize to a JSON object).
    pub fn new<T: Serialize + ?Sized>(event_type: &str, payload: &T) -> Result<Self, HostError> {
        Ok(Self {
            event_type: event_type.to_owned(),
            payload: to_json("payload", payload)?,
            tenant_id: None,
            headers: None,
        })
    }

    /// Publish for this tenant instead of the parent event's.
    pub fn tenant(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    /// Extra headers (serialized to a JSON object); the parent's correlation headers are kept.
    pub fn headers<T: Serialize + ?Sized>(mut self, headers: &T) -> Result<Self, HostError> {
        self.headers = Some(to_json("headers", headers)?);
        Ok(self)
    }

    /// Insert the event into the outbox; returns its id.
    pub fn send(self) -> Result<i64, HostError> {
        let event = wit_publish::NewEvent {
            event_type: self.event_type,
            payload: self.payload,
            tenant_id: self.tenant_id,
            headers: self.headers,
        };
        wit_publish::send(&event).map_err(HostError::from)
    }
}

/// Serialize `value` as JSON text, reporting failures as [`HostError::Failed`].
fn to_json<T: Serialize + ?Sized>(what: &str, value: &T) -> Result<String, HostError> {
    serde_json::to_string(value)
        .map_err(|e| HostError::Failed(format!("{what} is not serializable as JSON: {e}")))
}
