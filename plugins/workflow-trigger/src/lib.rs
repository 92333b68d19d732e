//! `workflow-trigger`: the handler of the `outbox.workflow` queue (every `workflow.*` event).
//!
//! # Events
//!
//! - `workflow.trigger.event`, payload `{"trigger": "<name>", "data": <any JSON, default {}>}`:
//!   fans out to every enabled workflow of the config whose `trigger.event` is `<name>`, in config
//!   order, by publishing one `workflow.execution.requested` event each with payload
//!   `{"workflow_id": "<id>", "trigger_event_id": <this event's id>, "data": <data>}`. No match
//!   is fine (nothing to do).
//! - `workflow.execution.requested` and `workflow.execution.continue.requested`, payload a JSON
//!   object with a non-empty string `workflow_id` (all other fields are passed on untouched):
//!   handed to the executor as a job
//!   `{"kind": "execute" | "continue", "source_event_id": <id>, "request": <payload>}`:
//!   - executor `{"queue": "<queue>"}`: published as a `workflow.executor.job` event whose payload
//!     is the job plus `"queue": "<queue>"`. A plugin cannot write to a queue directly, so
//!     `routes.toml` must route `workflow.executor.` to that queue (a rule longer than
//!     `workflow.`, which would otherwise send the job back here);
//!   - executor `{"http": {"url": "<url>"}}`: the job is POSTed as JSON to `url` with an
//!     `idempotency-key: workflow-trigger-<event id>` header. 2xx is success; 408, 429 and 5xx
//!     are retried; any other status fails the delivery. (`secret_env`, if present, is left to
//!     the host: a plugin has no environment access, so it neither reads nor sends secrets.)
//! - `workflow.executor.job` reaching this handler means the routing rule above is missing: the
//!   delivery fails with that explanation.
//! - any other `workflow.*` type is not this handler's business: logged and acknowledged.
//!
//! # Failures
//!
//! A malformed payload fails the delivery (retrying cannot fix it). An invalid config, a missing
//! executor, a denied or failed host call are retried with backoff: an operator can fix
//! `routes.toml` or the grants and the hot-reloaded config takes over.
//!
//! Redelivery is safe: published children get dispatch keys derived from this event and their
//! index (deterministic, since the fan-out follows config order), and the HTTP executor gets an
//! idempotency key.
//!
//! # Config
//!
//! ```json
//! {
//!   "workflows": [{ "id": "onboarding", "enabled": true, "trigger": { "event": "user.signed-up" } }],
//!   "executor": { "queue": "outbox.workflow-executor" }
//! }
//! ```
//!
//! `enabled` defaults to `true`; a workflow without `trigger.event` is never event-triggered.

use outbox_plugin_sdk::handler::http::{self, Request};
use outbox_plugin_sdk::handler::{self, Delivery, Handler, Outcome};
use outbox_plugin_sdk::{log, Config, Event};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Fan-out request from a producer.
const TRIGGER_EVENT: &str = "workflow.trigger.event";
/// One workflow execution to start (published by the fan-out, or by anyone).
const EXECUTION_REQUESTED: &str = "workflow.execution.requested";
/// A paused execution to resume.
const CONTINUE_REQUESTED: &str = "workflow.execution.continue.requested";
/// A job for a queue-based executor (published by this handler).
const EXECUTOR_JOB: &str = "workflow.executor.job";

/// The plugin's config.
#[derive(Deserialize)]
struct TriggerConfig {
    #[serde(default)]
    workflows: Vec<Workflow>,
    executor: Option<Executor>,
}

/// One workflow definition (only what routing needs).
#[derive(Deserialize)]
struct Workflow {
    id: String,
    #[serde(default = "enabled_by_default")]
    enabled: bool,
    trigger: Option<Trigger>,
}

/// Serde default of [`Workflow::enabled`].
fn enabled_by_default() -> bool {
    true
}

/// What starts a workflow.
#[derive(Deserialize)]
struct Trigger {
    /// The trigger name of a `workflow.trigger.event`.
    event: Option<String>,
}

/// Where execution jobs go.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Executor {
    /// Publish a `workflow.executor.job` event meant for this queue.
    Queue(String),
    /// POST the job to an HTTP endpoint.
    Http(HttpExecutor),
}

/// An HTTP executor endpoint.
#[derive(Deserialize)]
struct HttpExecutor {
    url: String,
}

/// Payload of `workflow.trigger.event`.
#[derive(Deserialize)]
struct TriggerPayload {
    trigger: String,
    #[serde(default = "empty_object")]
    data: Value,
}

/// Serde default of [`TriggerPayload::data`].
fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// Payload of `workflow.execution.requested` (what the fan-out publishes).
#[derive(Serialize)]
struct ExecutionRequested<'a> {
    workflow_id: &'a str,
    trigger_event_id: i64,
    data: &'a Value,
}

/// What the executor receives.
#[derive(Serialize)]
struct ExecutorJob<'a> {
    /// The target queue (queue executors only).
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<&'a str>,
    kind: &'static str,
    source_event_id: i64,
    request: &'a Map<String, Value>,
}

/// Publish one `workflow.execution.requested` per enabled workflow triggered by `event`.
fn fan_out(config: &TriggerConfig, event: &Event) -> Result<(), Outcome> {
    let payload: TriggerPayload = event
        .payload()
        .map_err(|e| Outcome::fail(format!("malformed {TRIGGER_EVENT} payload: {e}")))?;
    let matching = config.workflows.iter().filter(|w| {
        w.enabled
            && w.trigger.as_ref().and_then(|t| t.event.as_deref()) == Some(payload.trigger.as_str())
    });
    let mut count = 0;
    for workflow in matching {
        let request = ExecutionRequested {
            workflow_id: &workflow.id,
            trigger_event_id: event.id,
            data: &payload.data,
        };
        handler::publish(EXECUTION_REQUESTED, &request).map_err(|e| {
            Outcome::retry(format!(
                "publishing {EXECUTION_REQUESTED} for workflow '{}': {e}",
                workflow.id
            ))
        })?;
        count += 1;
    }
    log::info!(
        "trigger '{}' (event {}) started {count} workflow execution(s)",
        payload.trigger,
        event.id
    );
    Ok(())
}

/// Hand an execution request to the configured executor.
fn hand_off(config: &TriggerConfig, event: &Event, kind: &'static str) -> Result<(), Outcome> {
    let request: Map<String, Value> = event
        .payload()
        .map_err(|e| Outcome::fail(format!("malformed {} payload: {e}", event.event_type)))?;
    match request.get("workflow_id") {
        Some(Value::String(id)) if !id.is_empty() => {}
        _ => {
            return Err(Outcome::fail(format!(
                "malformed {} payload: `workflow_id` must be a non-empty string",
                event.event_type
            )))
        }
    }
    let mut job = ExecutorJob {
        queue: None,
        kind,
        source_event_id: event.id,
        request: &request,
    };
    match &config.executor {
        None => Err(Outcome::retry(
            "workflow-trigger has no executor configured (set `executor` in its config)",
        )),
        Some(Executor::Queue(queue)) => {
            job.queue = Some(queue);
            handler::publish(EXECUTOR_JOB, &job)
                .map(drop)
                .map_err(|e| Outcome::retry(format!("publishing {EXECUTOR_JOB}: {e}")))
        }
        Some(Executor::Http(executor)) => post_job(executor, event, &job),
    }
}

/// POST a job to an HTTP executor.
fn post_job(executor: &HttpExecutor, event: &Event, job: &ExecutorJob) -> Result<(), Outcome> {
    let request = Request::post(&executor.url)
        .header("idempotency-key", format!("workflow-trigger-{}", event.id))
        .json(job)
        .map_err(Outcome::fail)?;
    let response = http::send(request)
        .map_err(|e| Outcome::retry(format!("executor {}: {e}", executor.url)))?;
    let status = response.status;
    match status {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => Err(Outcome::retry(format!(
            "executor {} answered {status}: {}",
            executor.url,
            response.text()
        ))),
        _ => Err(Outcome::fail(format!(
            "executor {} rejected the job with {status}: {}",
            executor.url,
            response.text()
        ))),
    }
}

/// The exported handler.
struct WorkflowTrigger;

impl Handler for WorkflowTrigger {
    fn handle(config: &Config, delivery: Delivery) -> Outcome {
        let config: TriggerConfig = match config.parse() {
            Ok(config) => config,
            Err(e) => return Outcome::retry(format!("workflow-trigger: {e}")),
        };
        let event = &delivery.event;
        let result = match event.event_type.as_str() {
            TRIGGER_EVENT => fan_out(&config, event),
            EXECUTION_REQUESTED => hand_off(&config, event, "execute"),
            CONTINUE_REQUESTED => hand_off(&config, event, "continue"),
            EXECUTOR_JOB => Err(Outcome::fail(format!(
                "{EXECUTOR_JOB} reached workflow-trigger: route 'workflow.executor.' to the \
                 executor queue in routes.toml"
            ))),
            other => {
                log::warn!(
                    "workflow-trigger ignores event {} of type '{other}'",
                    event.id
                );
                Ok(())
            }
        };
        result.err().unwrap_or(Outcome::Ok)
    }
}

outbox_plugin_sdk::export_handler!(WorkflowTrigger);
