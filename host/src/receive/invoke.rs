//! Invoke: runs the handler plugin bound to a queue on one entry.
//!
//! Owns turning a queue entry into the plugin's event (and a `plugin.invoke.*` job into the
//! subscribed plugin and its hook event), building the handler's host services, and calling the
//! plugin off the async executor. It never touches the entry's Redis state: the caller records
//! the outcome.

use crate::plugin::bindings::handler_world::exports::outbox::plugin::handler_api::{
    Delivery, Outcome,
};
use crate::plugin::bindings::WitEvent;
use crate::plugin::PluginError;

use super::{QueueEntry, Receivers, BUILTIN_PLUGIN_INVOKE};

/// Why a handler did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HandlerFailure {
    /// Try again later (after the handler backoff), up to `OUTBOX_HANDLER_MAX_RETRIES`.
    Retry(String),
    /// Give up now: dead-letter the entry.
    Fail(String),
}

/// A queue entry as the event a handler plugin receives.
trait ToWitEvent {
    fn to_wit_event(&self) -> Result<WitEvent, String>;
}

impl ToWitEvent for QueueEntry {
    fn to_wit_event(&self) -> Result<WitEvent, String> {
        let id = self.event_id().ok_or("entry has no numeric event_id")?;
        let event_type = self.event_type().ok_or("entry has no event_type")?;
        Ok(WitEvent {
            id,
            event_type: event_type.to_string(),
            event_version: self.event_version(),
            tenant_id: self.tenant_id().map(str::to_string),
            payload: self.payload().to_string(),
            headers: self.headers().to_string(),
            dispatch_key: self.dispatch_key().map(str::to_string),
            created_at: self.created_at().to_string(),
        })
    }
}

impl Receivers {
    /// Run the handler; returns the outcome, the ids it published, and whom the receipt is
    /// about (for a plugin-invoke job: the hook event and the subscribed plugin).
    pub(super) async fn run_handler(
        &self,
        queue: &str,
        handler: &str,
        entry: &QueueEntry,
        attempt: u32,
    ) -> (Result<(), HandlerFailure>, Vec<i64>, (i64, String)) {
        let mut receipt = (entry.event_id().unwrap_or(0), handler.to_string());
        let mut event = match entry.to_wit_event() {
            Ok(e) => e,
            Err(e) => {
                return (
                    Err(HandlerFailure::Fail(format!("malformed entry: {e}"))),
                    vec![],
                    receipt,
                )
            }
        };
        let mut plugin_name = handler.to_string();
        if handler == BUILTIN_PLUGIN_INVOKE {
            // A plugin-invoke job: call the subscribed plugin's hook with the hook event.
            match parse_invoke_job(&event) {
                Ok((plugin, hook_event)) => {
                    plugin_name = plugin;
                    event = hook_event;
                    receipt = (event.id, plugin_name.clone());
                }
                Err(e) => return (Err(HandlerFailure::Fail(e)), vec![], receipt),
            }
        }
        let Some(plugin) = self.live.registry.get(&plugin_name) else {
            return (
                Err(HandlerFailure::Retry(format!(
                    "handler plugin {plugin_name} is not loaded"
                ))),
                vec![],
                receipt,
            );
        };
        let services = self
            .handler_host
            .services(plugin.clone(), event.clone(), &plugin_name);
        let published = services.published_ids_handle();
        let delivery = Delivery {
            event,
            queue: queue.to_string(),
            attempt,
        };
        let joined = tokio::task::spawn_blocking(move || {
            plugin.call_handler(Some(Box::new(services)), &delivery)
        })
        .await;
        let published = published.lock().map(|p| p.clone()).unwrap_or_default();
        let outcome = match joined {
            Ok(Ok(Outcome::Ok)) => Ok(()),
            Ok(Ok(Outcome::Retry(reason))) => Err(HandlerFailure::Retry(reason)),
            Ok(Ok(Outcome::Fail(reason))) => Err(HandlerFailure::Fail(reason)),
            Ok(Err(e @ PluginError::WrongWorld { .. })) => Err(HandlerFailure::Fail(e.to_string())),
            Ok(Err(e)) => Err(HandlerFailure::Retry(e.to_string())),
            Err(e) => Err(HandlerFailure::Retry(format!("handler task failed: {e}"))),
        };
        (outcome, published, receipt)
    }
}

/// A `plugin.invoke.*` job's target plugin and the hook event it carries.
pub(super) fn parse_invoke_job(job: &WitEvent) -> Result<(String, WitEvent), String> {
    let payload: serde_json::Value = serde_json::from_str(&job.payload)
        .map_err(|e| format!("plugin-invoke job {}: payload is not JSON: {e}", job.id))?;
    let plugin = payload["plugin"]
        .as_str()
        .ok_or_else(|| format!("plugin-invoke job {}: no 'plugin'", job.id))?;
    let hook = payload["hook"]
        .as_str()
        .ok_or_else(|| format!("plugin-invoke job {}: no 'hook'", job.id))?;
    let inner = &payload["event"];
    let event = WitEvent {
        id: inner["id"].as_i64().unwrap_or(job.id),
        event_type: inner["event_type"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("plugin.hook.{hook}")),
        event_version: inner["event_version"].as_i64().unwrap_or(1) as i32,
        tenant_id: inner["tenant_id"]
            .as_str()
            .map(str::to_string)
            .or_else(|| job.tenant_id.clone()),
        payload: inner
            .get("payload")
            .map(|p| p.to_string())
            .unwrap_or_else(|| "{}".into()),
        headers: job.headers.clone(),
        dispatch_key: job.dispatch_key.clone(),
        created_at: inner["created_at"]
            .as_str()
            .unwrap_or(&job.created_at)
            .to_string(),
    };
    Ok((plugin.to_string(), event))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(payload: &str) -> WitEvent {
        WitEvent {
            id: 9,
            event_type: "plugin.invoke.audit".into(),
            event_version: 1,
            tenant_id: Some("t1".into()),
            payload: payload.into(),
            headers: "{}".into(),
            dispatch_key: None,
            created_at: "2024-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn invoke_job_names_plugin_and_hook_event() {
        let (plugin, event) = parse_invoke_job(&job(
            r#"{"plugin":"audit","hook":"published","event":{"id":5,"payload":{"a":1}}}"#,
        ))
        .unwrap();
        assert_eq!(plugin, "audit");
        assert_eq!(event.id, 5);
        assert_eq!(event.event_type, "plugin.hook.published");
        assert_eq!(event.payload, r#"{"a":1}"#);
        assert_eq!(event.tenant_id.as_deref(), Some("t1"));
        assert!(parse_invoke_job(&job(r#"{"hook":"x"}"#)).is_err());
        assert!(parse_invoke_job(&job("not json")).is_err());
    }

    #[test]
    fn entry_becomes_the_plugins_event() {
        let entry = QueueEntry::from_flat(
            "1-0",
            &[
                "event_id".into(),
                "3".into(),
                "event_type".into(),
                "a.b".into(),
                "tenant_id".into(),
                "".into(),
            ],
        );
        let event = entry.to_wit_event().unwrap();
        assert_eq!((event.id, event.event_type.as_str()), (3, "a.b"));
        assert_eq!(event.event_version, 1);
        assert_eq!(event.tenant_id, None);
        assert_eq!(event.payload, "{}");
        let no_type = QueueEntry::from_flat("1-0", &["event_id".into(), "3".into()]);
        assert!(no_type.to_wit_event().is_err());
    }
}
