//! Invoke: runs the handler plugin bound to a queue on one entry.
//!
//! Owns turning a queue entry into the plugin's event, checking a `plugin.invoke.*` job before
//! it runs anything (the plugin it names must match the job's type, be declared, subscribe to
//! the job's hook in its `hooks` and be a handler; otherwise the job fails and is
//! dead-lettered), building the hook event from what the host knows, building the handler's
//! host services (with the generation the entry carries: a job's subscriber publishes one
//! generation below the job), calling the plugin off the async executor, and turning a delivery
//! whose child was refused for its generation into a dead letter whatever the handler answered
//! (a retry would be refused again: the loop ends there). A job keyed as a host child
//! (`child:`) stands for its parent event: that parent must exist in `outbox_event` and be the
//! hook's own `plugin.hook.<hook>` event, and the hook event the subscriber gets is that row
//! (id, type, version, tenant, payload, time), never the job's payload; so a row written
//! straight into `outbox_event` by a role that may insert there cannot present its own content
//! as another event. Any other job stands for itself. It never touches the entry's Redis state:
//! the caller records the outcome.

use std::time::Duration;

use crate::capability::publish::ParentEvent;
use crate::plugin::bindings::handler_world::exports::outbox::plugin::handler_api::{
    DelayedRetry, Delivery, Outcome,
};
use crate::plugin::bindings::WitEvent;
use crate::plugin::{PluginError, World};

use std::sync::Arc;

use super::{QueueEntry, BUILTIN_PLUGIN_INVOKE};
use crate::capability::HandlerHost;
use crate::config::RoutesFile;
use crate::live_config::LiveConfig;
use crate::store;

/// Type prefix of plugin-invoke jobs: `plugin.invoke.<plugin>`.
const INVOKE_PREFIX: &str = "plugin.invoke.";
/// Type prefix of hook events: `plugin.hook.<hook>`.
const HOOK_PREFIX: &str = "plugin.hook.";
/// Dispatch key prefix of the events a handler publishes (see
/// [`crate::capability::publish::child_dispatch_key`]: `child:<parent id>:<run key>:<index>`),
/// reserved for the host's own events.
const CHILD_KEY_PREFIX: &str = "child:";
/// The header in which the host names a child's parent event (a plugin cannot set it).
const PARENT_HEADER: &str = "parent_event_id";

/// The longest delay a handler may ask for with `retry-after`; a longer one is cut to it (and
/// the cut logged).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Why a handler did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HandlerFailure {
    /// Try again later, up to `OUTBOX_HANDLER_MAX_RETRIES`: after `after` when the handler chose
    /// the delay (`retry-after`, at most [`MAX_RETRY_AFTER`]), else after the handler backoff.
    /// A trap, a panic, a time or memory limit and a plugin not loaded are retries too.
    Retry {
        /// Why, as recorded in the receipt and the log.
        reason: String,
        /// The handler's own delay, if it gave one.
        after: Option<Duration>,
    },
    /// Give up now: dead-letter the entry.
    Fail(String),
}

impl HandlerFailure {
    /// A retry after the handler backoff.
    fn retry(reason: String) -> Self {
        HandlerFailure::Retry {
            reason,
            after: None,
        }
    }
}

/// A handler's `retry-after` delay as the host keeps it: at most [`MAX_RETRY_AFTER`].
fn retry_after_delay(queue: &str, event_id: i64, delay_ms: u64) -> Duration {
    let asked = Duration::from_millis(delay_ms);
    if asked > MAX_RETRY_AFTER {
        tracing::warn!(%queue, event_id, asked = ?asked, used = ?MAX_RETRY_AFTER, "handler asked for a retry later than the longest delay allowed; using the longest");
        return MAX_RETRY_AFTER;
    }
    asked
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

/// Runs handler plugins: the configuration in force (routes, plugins) and the host services
/// handlers get, nothing else.
#[derive(Clone)]
pub(super) struct Invoker {
    live: LiveConfig,
    handler_host: Arc<HandlerHost>,
}

impl Invoker {
    /// Run the handlers `live` binds with the host services of `handler_host`.
    pub(super) fn new(live: LiveConfig, handler_host: Arc<HandlerHost>) -> Self {
        Self { live, handler_host }
    }

    /// The versions `handler` declares when it does not support `entry`'s event version
    /// (`None`: it does, or declares nothing, or is the host's own plugin-invoke handler).
    pub(super) fn unsupported_version(&self, handler: &str, entry: &QueueEntry) -> Option<String> {
        let routes = self.live.routes.load();
        let supported = routes.plugins.get(handler)?.supported_versions.as_ref()?;
        let event_type = entry.event_type().unwrap_or_default();
        (!supported.supports(event_type, entry.event_version()))
            .then(|| supported.describe_for(event_type))
    }

    /// Run the handler; returns the outcome, the ids it published, and whom the receipt is
    /// about (for a plugin-invoke job: the hook event and the subscribed plugin).
    pub(super) async fn run(
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
            // A plugin-invoke job: call the subscribed plugin's hook with the hook event, once
            // the job is checked against the config in force and the plugin loaded.
            let job = match check_invoke_job(&event, &self.live.routes.load()) {
                Ok(job) => job,
                Err(e) => return (Err(refused_invoke_job(queue, e)), vec![], receipt),
            };
            let world = self.live.registry.get(&job.plugin).map(|p| p.world());
            if let Some(world) = world.filter(|w| *w != World::Handler) {
                let e = format!(
                    "refused plugin-invoke job {}: plugin {:?} is a {world} plugin, not a handler",
                    event.id, job.plugin
                );
                return (Err(refused_invoke_job(queue, e)), vec![], receipt);
            }
            let job = match self.with_stored_parent(queue, event.id, job).await {
                Ok(job) => job,
                Err(failure) => return (Err(failure), vec![], receipt),
            };
            plugin_name = job.plugin;
            event = job.event;
            receipt = (event.id, plugin_name.clone());
        }
        let Some(plugin) = self.live.registry.get(&plugin_name) else {
            return (
                Err(HandlerFailure::retry(format!(
                    "handler plugin {plugin_name} is not loaded"
                ))),
                vec![],
                receipt,
            );
        };
        // The generation is the entry's (for a job: the job's, one below its subscriber's
        // children), as the host stored it.
        let parent = ParentEvent::from(&event).with_generation(entry.generation());
        let services = self
            .handler_host
            .services(plugin.clone(), parent, &plugin_name, queue);
        let published = services.published_handle();
        let delivery = Delivery {
            event,
            queue: queue.to_string(),
            attempt,
        };
        // Awaited on this task: the guest yields at every epoch tick, so it cannot hold the
        // executor thread, and the call ends at its time limit. That limit starts once one of
        // the plugin's call slots is free: more deliveries than slots queue for them (the claim
        // is renewed meanwhile) instead of timing out.
        let called = plugin
            .handle_queued(Some(Box::new(services)), &delivery)
            .await;
        let published = published.lock().map(|p| p.clone()).unwrap_or_default();
        let event_id = delivery.event.id;
        if let Some(refused) = published.generation_refused {
            // Whatever the handler answered: the child it meant to publish was not written, and
            // would be refused again on every retry.
            tracing::warn!(%queue, event_id, handler = %plugin_name, reason = %refused, "a child was refused for its generation; dead-lettering the delivery");
            return (Err(HandlerFailure::Fail(refused)), published.ids, receipt);
        }
        let outcome = match called {
            Ok(Outcome::Ok) => Ok(()),
            Ok(Outcome::Retry(reason)) => Err(HandlerFailure::retry(reason)),
            Ok(Outcome::RetryAfter(DelayedRetry { reason, delay_ms })) => {
                Err(HandlerFailure::Retry {
                    reason,
                    after: Some(retry_after_delay(queue, event_id, delay_ms)),
                })
            }
            Ok(Outcome::Fail(reason)) => Err(HandlerFailure::Fail(reason)),
            Err(e @ PluginError::WrongWorld { .. }) => Err(HandlerFailure::Fail(e.to_string())),
            // A trap, a panic, a limit: the call failed, the event did not; retried like any
            // failure, up to the configured retries.
            Err(e) => Err(HandlerFailure::retry(e.to_string())),
        };
        (outcome, published.ids, receipt)
    }

    /// A job that claims a parent (a host child): read the parent as stored; it must exist and
    /// be the hook's own event, and the hook event becomes that row. A job without one is
    /// returned as it is. A database failure is retried.
    async fn with_stored_parent(
        &self,
        queue: &str,
        job_id: i64,
        mut job: InvokeJob,
    ) -> Result<InvokeJob, HandlerFailure> {
        let Some(parent_id) = job.parent else {
            return Ok(job);
        };
        let refuse = |why: String| {
            refused_invoke_job(queue, format!("refused plugin-invoke job {job_id}: {why}"))
        };
        let parent = store::hook_parent(self.handler_host.pool(), parent_id)
            .await
            .map_err(|e| HandlerFailure::retry(e.to_string()))?;
        let Some(parent) = parent else {
            return Err(refuse(format!(
                "its parent event {parent_id} does not exist"
            )));
        };
        if parent.event_type != job.event.event_type {
            return Err(refuse(format!(
                "its parent event {parent_id} is a {:?} event, not a {:?} event: only a hook event is fanned out to its subscribers",
                parent.event_type, job.event.event_type
            )));
        }
        job.event.id = parent.id;
        job.event.event_version = parent.event_version;
        job.event.tenant_id = parent.tenant_id;
        job.event.payload = parent.payload;
        job.event.created_at = parent
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        Ok(job)
    }
}

/// Report a refused plugin-invoke job (audit log, metric); the job fails with `reason`.
fn refused_invoke_job(queue: &str, reason: String) -> HandlerFailure {
    tracing::warn!(target: "outbox::audit", %queue, %reason, "refused a plugin-invoke job");
    metrics::counter!("outbox_invoke_jobs_refused_total", "queue" => queue.to_string())
        .increment(1);
    HandlerFailure::Fail(reason)
}

/// A checked `plugin.invoke.*` job: the subscribed plugin to run and the hook event it gets.
#[derive(Debug, Clone)]
pub(super) struct InvokeJob {
    /// The subscribed plugin.
    pub(super) plugin: String,
    /// The hook event handed to it.
    pub(super) event: WitEvent,
    /// The event the job claims the host fanned it out from (`None`: it stands for itself).
    pub(super) parent: Option<i64>,
}

/// Check the plugin-invoke job `job` (its event, as its queue entry carries it) against the
/// config in force and build the hook event it asks for. Refused, with the reason: a payload
/// that is not a JSON object naming `plugin` and `hook`; a job whose type is not
/// `plugin.invoke.<plugin>`; a plugin not declared under `[plugins]` or without `<hook>` in its
/// `hooks`; a hook event whose type is not `plugin.hook.<hook>`; a host child that names no
/// parent. The hook event's id is the parent the job claims ([`claimed_parent`]), which the
/// receiver then checks against the stored row and takes the event from; a job without one
/// stands for itself (its id, tenant, headers and dispatch key; payload, version and creation
/// time from its payload).
pub(super) fn check_invoke_job(job: &WitEvent, routes: &RoutesFile) -> Result<InvokeJob, String> {
    let refuse = |why: String| format!("refused plugin-invoke job {}: {why}", job.id);
    let payload: serde_json::Value = serde_json::from_str(&job.payload)
        .map_err(|e| refuse(format!("payload is not JSON: {e}")))?;
    let plugin = payload["plugin"]
        .as_str()
        .ok_or_else(|| refuse("no 'plugin' in the payload".into()))?;
    let hook = payload["hook"]
        .as_str()
        .ok_or_else(|| refuse("no 'hook' in the payload".into()))?;
    if job.event_type.strip_prefix(INVOKE_PREFIX) != Some(plugin) {
        return Err(refuse(format!(
            "its type {:?} does not name the plugin it asks for ({plugin:?})",
            job.event_type
        )));
    }
    let Some(spec) = routes.plugins.get(plugin) else {
        return Err(refuse(format!(
            "plugin {plugin:?} is not declared under [plugins]"
        )));
    };
    if !spec.hooks.iter().any(|h| h == hook) {
        return Err(refuse(format!(
            "plugin {plugin:?} does not subscribe to hook {hook:?} (hooks = {:?} in [plugins.{plugin}])",
            spec.hooks
        )));
    }
    let parent = claimed_parent(job).map_err(refuse)?;
    let hook_type = format!("{HOOK_PREFIX}{hook}");
    let inner = &payload["event"];
    if let Some(claimed) = inner["event_type"].as_str() {
        if claimed != hook_type {
            return Err(refuse(format!(
                "its hook event has type {claimed:?}, not {hook_type:?}"
            )));
        }
    }
    let event = WitEvent {
        id: parent.unwrap_or(job.id),
        event_type: hook_type,
        event_version: inner["event_version"]
            .as_i64()
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(1),
        tenant_id: job.tenant_id.clone(),
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
    Ok(InvokeJob {
        plugin: plugin.to_string(),
        event,
        parent,
    })
}

/// The parent a plugin-invoke job claims: a job keyed as a host child (`child:`, a prefix
/// producers may not publish with) names it in its `parent_event_id` header, which the host
/// sets on every child it writes; `None` for any other job, which stands for itself. The claim
/// is only a claim (a row written straight into the table can say anything): the receiver
/// checks it against the stored parent before the job runs. Only the prefix of the key is read,
/// never the rest of its format.
fn claimed_parent(job: &WitEvent) -> Result<Option<i64>, String> {
    let is_child = job
        .dispatch_key
        .as_deref()
        .is_some_and(|key| key.starts_with(CHILD_KEY_PREFIX));
    if !is_child {
        return Ok(None);
    }
    serde_json::from_str::<serde_json::Value>(&job.headers)
        .ok()
        .and_then(|headers| headers.get(PARENT_HEADER).and_then(|id| id.as_i64()))
        .map(Some)
        .ok_or_else(|| {
            format!("its dispatch key marks it as a host child, but its headers name no {PARENT_HEADER}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::publish::child_dispatch_key;
    use crate::config::PluginSpec;

    fn job(payload: &str) -> WitEvent {
        WitEvent {
            id: 9,
            event_type: "plugin.invoke.audit".into(),
            event_version: 1,
            tenant_id: Some("t1".into()),
            payload: payload.into(),
            headers: r#"{"parent_event_id":5,"causation_handler":"plugin-hook"}"#.into(),
            dispatch_key: Some(child_dispatch_key(5, "plugin-hook", 0)),
            created_at: "2024-01-01T00:00:00Z".into(),
        }
    }

    fn routes(hooks: &[&str]) -> RoutesFile {
        let mut routes = RoutesFile::default();
        routes.plugins.insert(
            "audit".into(),
            PluginSpec {
                hooks: hooks.iter().map(|h| h.to_string()).collect(),
                ..PluginSpec::default()
            },
        );
        routes
    }

    #[test]
    fn invoke_job_names_a_subscribed_plugin_and_its_hook_event() {
        let job = check_invoke_job(
            &job(r#"{"plugin":"audit","hook":"published","event":{"id":5,"payload":{"a":1}}}"#),
            &routes(&["published"]),
        )
        .unwrap();
        assert_eq!(job.plugin, "audit");
        assert_eq!(job.event.id, 5);
        assert_eq!(job.event.event_type, "plugin.hook.published");
        assert_eq!(job.event.payload, r#"{"a":1}"#);
        assert_eq!(job.event.tenant_id.as_deref(), Some("t1"));
    }

    #[test]
    fn invoke_job_ids_and_tenants_come_from_the_host() {
        let forged = r#"{"plugin":"audit","hook":"published","event":{"id":77,"tenant_id":"other","payload":{}}}"#;
        let job = check_invoke_job(&job(forged), &routes(&["published"])).unwrap();
        assert_eq!(
            job.event.id, 5,
            "the parent the host named in the child's header"
        );
        assert_eq!(job.parent, Some(5));
        assert_eq!(job.event.tenant_id.as_deref(), Some("t1"));
        // A job no handler published (no child key) stands for itself.
        let mut direct = self::job(forged);
        direct.dispatch_key = Some("producer-key".into());
        let job = check_invoke_job(&direct, &routes(&["published"])).unwrap();
        assert_eq!(job.event.id, 9);
        direct.dispatch_key = None;
        let job = check_invoke_job(&direct, &routes(&["published"])).unwrap();
        assert_eq!(job.event.id, 9);
    }

    #[test]
    fn invoke_jobs_outside_the_declared_subscriptions_are_refused() {
        let ok = r#"{"plugin":"audit","hook":"published"}"#;
        let refused = |payload: &str, hooks: &[&str]| {
            check_invoke_job(&job(payload), &routes(hooks)).unwrap_err()
        };
        assert!(refused(ok, &[]).contains("does not subscribe to hook \"published\""));
        assert!(refused(ok, &["other"]).contains("does not subscribe"));
        assert!(
            refused(r#"{"plugin":"ghost","hook":"published"}"#, &["published"])
                .contains("does not name the plugin")
        );
        let mut ghost = job(r#"{"plugin":"ghost","hook":"published"}"#);
        ghost.event_type = "plugin.invoke.ghost".into();
        let e = check_invoke_job(&ghost, &routes(&["published"])).unwrap_err();
        assert!(e.contains("\"ghost\" is not declared"), "{e}");
        assert!(refused(
            r#"{"plugin":"audit","hook":"published","event":{"event_type":"plugin.hook.other"}}"#,
            &["published"]
        )
        .contains("not \"plugin.hook.published\""));
        assert!(refused(r#"{"hook":"x"}"#, &["x"]).contains("no 'plugin'"));
        assert!(refused("not json", &["x"]).contains("not JSON"));
        assert!(refused(ok, &[]).starts_with("refused plugin-invoke job 9: "));
    }

    #[test]
    fn host_children_claim_the_parent_their_host_header_names() {
        let mut job = job("{}");
        for parent in [1, 42, i64::MAX] {
            job.headers = format!(r#"{{"parent_event_id":{parent}}}"#);
            assert_eq!(claimed_parent(&job), Ok(Some(parent)));
        }
        // Whatever follows the prefix: only `child:` is read from the key.
        job.dispatch_key = Some("child:some-other-format".into());
        assert_eq!(claimed_parent(&job), Ok(Some(i64::MAX)));
        // A host child that names no parent is refused.
        for headers in ["{}", r#"{"parent_event_id":"5"}"#, "not json"] {
            job.headers = headers.into();
            assert!(claimed_parent(&job)
                .unwrap_err()
                .contains("name no parent_event_id"));
        }
        // Any other job stands for itself, whatever its headers say.
        job.headers = r#"{"parent_event_id":5}"#.into();
        job.dispatch_key = Some("producer-key".into());
        assert_eq!(claimed_parent(&job), Ok(None));
        job.dispatch_key = None;
        assert_eq!(claimed_parent(&job), Ok(None));
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
