//! `plugin-hook`: the handler of the `outbox.plugin-hook` queue. Fans a `plugin.hook.<hook>`
//! event out to every plugin subscribed to `<hook>`.
//!
//! For each subscriber, in config order, it publishes one `plugin.invoke.<plugin>` event with
//! payload
//!
//! ```json
//! {
//!   "hook": "<hook>",
//!   "plugin": "<plugin>",
//!   "event": { "id": 42, "event_type": "plugin.hook.<hook>", "event_version": 1,
//!              "tenant_id": null, "payload": { }, "created_at": "<RFC 3339>" }
//! }
//! ```
//!
//! which the invoke handler turns into a call of that plugin's hook export, provided the plugin
//! lists `<hook>` in its `hooks` in `routes.toml` (otherwise the job is dead-lettered unrun; the
//! hook event's id and tenant are taken from the job as the host recorded it). `routes.toml` must
//! route `plugin.invoke.` to the invoke handler's queue, and this plugin needs a `publish` grant
//! for `plugin.invoke.`. A hook nobody subscribes to is acknowledged with nothing published.
//! Redelivery publishes no duplicates: child dispatch keys derive from this event and the
//! child's index, and the order is the config's.
//!
//! A delivery fails when the event type is not `plugin.hook.<hook>` or its payload is not JSON.
//! An invalid config or a denied or failed publish is retried, so an operator can fix
//! `routes.toml` meanwhile.
//!
//! Config:
//!
//! ```json
//! { "subscribers": { "user.created": ["crm-sync", "welcome-mail"] } }
//! ```

use std::collections::BTreeMap;

use outbox_plugin_sdk::handler::{self, Delivery, Handler, Outcome};
use outbox_plugin_sdk::{log, Config, Event};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Type prefix of the events this handler consumes.
const HOOK_PREFIX: &str = "plugin.hook.";
/// Type prefix of the events it publishes (followed by the plugin name).
const INVOKE_PREFIX: &str = "plugin.invoke.";

/// The plugin's config.
#[derive(Deserialize)]
struct HookConfig {
    /// Hook name to subscribed plugin names.
    #[serde(default)]
    subscribers: BTreeMap<String, Vec<String>>,
}

/// Payload of a `plugin.invoke.<plugin>` event.
#[derive(Serialize)]
struct Invoke<'a> {
    hook: &'a str,
    plugin: &'a str,
    event: &'a HookEvent<'a>,
}

/// The hook event, as passed to the subscriber.
#[derive(Serialize)]
struct HookEvent<'a> {
    id: i64,
    event_type: &'a str,
    event_version: i32,
    tenant_id: Option<&'a str>,
    payload: Value,
    created_at: &'a str,
}

/// Publish one invoke event per subscriber of the event's hook.
fn fan_out(config: &HookConfig, event: &Event) -> Result<(), Outcome> {
    let hook = match event.event_type.strip_prefix(HOOK_PREFIX) {
        Some(hook) if !hook.is_empty() => hook,
        _ => {
            return Err(Outcome::fail(format!(
                "plugin-hook only handles {HOOK_PREFIX}<hook> events, not '{}'",
                event.event_type
            )))
        }
    };
    let Some(subscribers) = config.subscribers.get(hook) else {
        log::debug!("hook '{hook}' (event {}) has no subscribers", event.id);
        return Ok(());
    };
    let payload = event
        .payload_json()
        .map_err(|e| Outcome::fail(format!("malformed {} payload: {e}", event.event_type)))?;
    let hook_event = HookEvent {
        id: event.id,
        event_type: &event.event_type,
        event_version: event.event_version,
        tenant_id: event.tenant_id.as_deref(),
        payload,
        created_at: &event.created_at,
    };
    for plugin in subscribers {
        let invoke = Invoke {
            hook,
            plugin,
            event: &hook_event,
        };
        handler::publish(&format!("{INVOKE_PREFIX}{plugin}"), &invoke).map_err(|e| {
            Outcome::retry(format!("invoking plugin '{plugin}' for hook '{hook}': {e}"))
        })?;
    }
    log::info!(
        "hook '{hook}' (event {}) invoked {} plugin(s)",
        event.id,
        subscribers.len()
    );
    Ok(())
}

/// The exported handler.
struct PluginHook;

impl Handler for PluginHook {
    fn handle(config: &Config, delivery: Delivery) -> Outcome {
        match config.parse::<HookConfig>() {
            Ok(config) => fan_out(&config, &delivery.event)
                .err()
                .unwrap_or(Outcome::Ok),
            Err(e) => Outcome::retry(format!("plugin-hook: {e}")),
        }
    }
}

outbox_plugin_sdk::export_handler!(PluginHook);
