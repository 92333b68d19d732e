//! The `handler` world: consume one queue's entries, one delivery at a time.
//!
//! Implement [`Handler`] and export it with [`export_handler!`](crate::export_handler). Only
//! handlers may call back into the host beyond logging: [`publish`] new events, use the
//! per-plugin key-value store ([`kv`]) and make outbound [`http`] calls. Each call is checked by
//! the capability policy first; a refused call returns [`HostError::Denied`].

pub mod http;
pub mod kv;

use serde::Serialize;

use std::time::Duration;

use crate::bindings::handler::exports::outbox::plugin::handler_api::{
    DelayedRetry, Delivery as WitDelivery, Guest, Outcome as WitOutcome,
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
///
/// A retry of either kind counts as an attempt: after `OUTBOX_HANDLER_MAX_RETRIES` retries the
/// entry goes to the dead-letter stream. A trap or a panic of the handler, or a call cut at its
/// time or memory limit, is retried the same way (with the configured backoff).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the entry is acknowledged.
    Ok,
    /// Try again later (after the host's handler backoff); the reason is recorded.
    Retry(String),
    /// Try again after `delay` instead of the backoff: a rate-limited API's `Retry-After`, a
    /// resource that is not ready yet. The host caps the delay at 24 hours. Build it with
    /// [`Outcome::retry_after`].
    RetryAfter {
        /// Why; recorded like a [`Outcome::Retry`] reason.
        reason: String,
        /// How long until the next delivery (millisecond precision).
        delay: Duration,
    },
    /// Give up now: the entry goes to the dead-letter stream with this reason.
    Fail(String),
}

impl Outcome {
    /// [`Outcome::Retry`] with any displayable reason.
    pub fn retry(reason: impl std::fmt::Display) -> Self {
        Self::Retry(reason.to_string())
    }

    /// [`Outcome::RetryAfter`]: try again after `delay`, with any displayable reason.
    ///
    /// ```no_run
    /// use outbox_plugin_sdk::handler::{http, Outcome};
    /// use std::time::Duration;
    ///
    /// # fn call() -> Result<(), outbox_plugin_sdk::HostError> {
    /// let response = http::send(http::Request::get("https://api.example.com/quota"))?;
    /// # let _ = handle(response);
    /// # Ok(())
    /// # }
    /// fn handle(response: http::Response) -> Outcome {
    ///     if response.status == 429 {
    ///         let seconds = response
    ///             .header("retry-after")
    ///             .and_then(|s| s.parse().ok())
    ///             .unwrap_or(30);
    ///         return Outcome::retry_after("rate limited by the API", Duration::from_secs(seconds));
    ///     }
    ///     Outcome::Ok
    /// }
    /// ```
    pub fn retry_after(reason: impl std::fmt::Display, delay: Duration) -> Self {
        Self::RetryAfter {
            reason: reason.to_string(),
            delay,
        }
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
            Outcome::RetryAfter { reason, delay } => WitOutcome::RetryAfter(DelayedRetry {
                reason,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            }),
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
