//! `outbox plugins call FILE`: run a plugin once on given input, without a database or Redis,
//! and report its answer and cost.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::Config;
use outbox_host::config::PluginSpec;
use outbox_host::plugin::bindings::{
    CapabilityRequest, Decision, Delivery, Outcome, WitRouteDecision,
};
use outbox_host::plugin::registry::plugin_config_json;
use outbox_host::plugin::{LoadedPlugin, PluginEngine, PluginLimits, World};
use outbox_host::routing::RouteDecision;
use outbox_host::store;

use super::{compile_file_offline, plugin_name_of, short_hash};

/// What `outbox plugins call` hands the plugin.
#[derive(Debug, Clone, Default)]
pub struct PluginCallInput {
    /// `--events`: a JSON array of event objects (routers).
    pub events: Option<String>,
    /// `--event`: one event object (handlers) or one capability request (policies).
    pub event: Option<String>,
    /// The plugin's JSON config; default: what `routes.toml` gives a plugin of that name (for a
    /// router at least the routing table), else `{}`.
    pub config: Option<String>,
    /// Queue of the delivery (handlers).
    pub queue: String,
}

/// An event as `outbox plugins call` accepts it; everything but `event_type` has a default.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EventArg {
    event_type: String,
    #[serde(default)]
    payload: Option<serde_json::Value>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    id: Option<i64>,
    #[serde(default)]
    event_version: Option<i32>,
    #[serde(default)]
    headers: Option<serde_json::Value>,
    #[serde(default)]
    dispatch_key: Option<String>,
}

/// A capability request as `outbox plugins call` accepts it (`grants` as JSON or JSON text).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CapabilityRequestArg {
    plugin: String,
    capability: String,
    target: String,
    #[serde(default)]
    grants: Option<serde_json::Value>,
}

fn event_from_arg(arg: serde_json::Value, n: usize) -> anyhow::Result<store::ClaimedEvent> {
    let arg: EventArg = serde_json::from_value(arg).with_context(|| {
        format!("event {n}: expected {{\"event_type\": \"...\", \"payload\": {{...}}, \"tenant_id\"?: \"...\", \"id\"?: n}}")
    })?;
    outbox_host::publish::validate_event_type(&arg.event_type)
        .with_context(|| format!("event {n}"))?;
    let payload = arg.payload.unwrap_or_else(|| serde_json::json!({}));
    anyhow::ensure!(
        payload.is_object(),
        "event {n} ({}): payload must be a JSON object",
        arg.event_type
    );
    let headers = arg.headers.unwrap_or_else(|| serde_json::json!({}));
    anyhow::ensure!(
        headers.is_object(),
        "event {n} ({}): headers must be a JSON object",
        arg.event_type
    );
    Ok(store::ClaimedEvent {
        tenant_id: arg.tenant_id,
        event_version: arg.event_version.unwrap_or(1),
        headers: headers.to_string(),
        dispatch_key: arg.dispatch_key,
        ..store::ClaimedEvent::unclaimed(
            arg.id.unwrap_or(n as i64),
            arg.event_type,
            payload.to_string(),
        )
    })
}

fn parse_json_arg(flag: &str, text: &str) -> anyhow::Result<serde_json::Value> {
    serde_json::from_str(text).with_context(|| format!("{flag} is not valid JSON: {text:?}"))
}

/// Events from `--events` (an array, or one object) or `--event` (one object).
fn events_from_input(input: &PluginCallInput) -> anyhow::Result<Vec<store::ClaimedEvent>> {
    let values = match (&input.events, &input.event) {
        (Some(text), _) => match parse_json_arg("--events", text)? {
            serde_json::Value::Array(items) => items,
            obj @ serde_json::Value::Object(_) => vec![obj],
            _ => anyhow::bail!("--events must be a JSON array of event objects"),
        },
        (None, Some(text)) => vec![parse_json_arg("--event", text)?],
        (None, None) => anyhow::bail!("give the input with --events or --event"),
    };
    anyhow::ensure!(
        !values.is_empty(),
        "--events is empty: give at least one event"
    );
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| event_from_arg(v, i + 1))
        .collect()
}

/// The config a plugin of this name gets: `--plugin-config`, else what `routes.toml` gives the
/// plugin of that name (a router gets the routing table even when undeclared), else `{}`.
/// Returns the config JSON and where it came from.
fn call_config(
    config: &Config,
    name: &str,
    world: World,
    given: Option<&str>,
) -> anyhow::Result<(String, String)> {
    if let Some(text) = given {
        parse_json_arg("the plugin config", text)?;
        return Ok((text.to_string(), "given on the command line".into()));
    }
    let source = config
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the built-in routes.toml".into());
    if let Some(spec) = config.routes.plugins.get(name) {
        return Ok((
            plugin_config_json(name, spec, &config.routes, world),
            format!("[plugins.{name}] of {source}"),
        ));
    }
    if world == World::Router {
        let spec = empty_spec()?;
        return Ok((
            plugin_config_json(name, &spec, &config.routes, world),
            format!("the routing table of {source}"),
        ));
    }
    Ok(("{}".into(), "none ({})".into()))
}

/// A `[plugins.NAME]` declaration with nothing set.
fn empty_spec() -> anyhow::Result<PluginSpec> {
    toml::from_str("").context("an empty plugin spec")
}

/// `outbox plugins call FILE`: compile a plugin and run it once on the given input, without a
/// database or Redis (a handler's host services answer "not available"). Returns the readable
/// answer and its cost; a plugin that traps or breaks its contract is an error.
/// CPU-heavy and blocking: call on a blocking thread.
pub fn call_plugin_file(
    config: &Config,
    path: &std::path::Path,
    input: &PluginCallInput,
) -> anyhow::Result<String> {
    let engine = PluginEngine::new()?;
    let (compiled, compile_time) = compile_file_offline(&engine, path)?;
    let name = plugin_name_of(path);
    let world = compiled.world();
    let (config_json, config_source) = call_config(config, &name, world, input.config.as_deref())?;
    // A plugin declared in routes.toml runs with its declared limits, as the host would.
    let spec = match config.routes.plugins.get(&name) {
        Some(spec) => spec.clone(),
        None => empty_spec()?,
    };
    let limits = PluginLimits::from_spec(&spec);
    let router_payload = spec.router_payload;
    let mut out = format!(
        "{name}: world {world}, sha256 {}, config: {config_source}\n",
        short_hash(&compiled.hash)
    );
    let plugin = LoadedPlugin::standalone(&engine, &name, compiled, limits, config_json, spec);
    let failed = |e: outbox_host::plugin::PluginError, took: Duration| {
        anyhow::anyhow!("{e} (after {:.1} ms)", took.as_secs_f64() * 1e3)
    };
    let call_time = match world {
        World::Router => {
            let events = events_from_input(input)?;
            // Payload and headers only when the spec asks for them, as the dispatcher does.
            let wit: Vec<_> = events
                .iter()
                .map(|e| outbox_host::plugin::router::to_router_event(e, router_payload))
                .collect();
            let started = Instant::now();
            let answer = plugin.call_router(&wit);
            let call_time = started.elapsed();
            let answer = answer.map_err(|e| failed(e, call_time))?;
            for (event, decision) in events.iter().zip(answer) {
                // Shown as the dispatcher would act on it (the same checks and bounds).
                let decision = match decision {
                    WitRouteDecision::Queues(q) => RouteDecision::Queues(q),
                    WitRouteDecision::NoRoute(reason) => RouteDecision::NoRoute(reason),
                }
                .checked(&format!("plugin {}", plugin.name));
                let line = match decision {
                    RouteDecision::Queues(q) => format!("{} -> {}", event.event_type, q.join(", ")),
                    RouteDecision::NoRoute(reason) => {
                        format!("{}: no route ({reason})", event.event_type)
                    }
                    RouteDecision::Error(error) => format!(
                        "{}: {error} (the host would fail this call for the event and retry it)",
                        event.event_type
                    ),
                };
                out.push_str(&line);
                out.push('\n');
            }
            call_time
        }
        World::Handler => {
            anyhow::ensure!(
                input.event.is_some() || input.events.is_some(),
                "a handler takes one event: --event '{{\"event_type\": \"...\", \"payload\": {{...}}}}'"
            );
            let mut events = events_from_input(input)?;
            anyhow::ensure!(
                events.len() == 1,
                "a handler handles one event at a time; got {}",
                events.len()
            );
            outbox_host::config::validate_queue_name(&input.queue)
                .map_err(|e| anyhow::anyhow!("--queue: {e}"))?;
            let event = events.remove(0);
            let delivery = Delivery {
                event: outbox_host::plugin::router::to_wit_event(&event),
                queue: input.queue.clone(),
                attempt: 1,
            };
            let started = Instant::now();
            let outcome = plugin.call_handler(None, &delivery);
            let call_time = started.elapsed();
            let outcome = outcome.map_err(|e| failed(e, call_time))?;
            out.push_str(&match outcome {
                Outcome::Ok => format!("{} (from {}): ok\n", event.event_type, input.queue),
                Outcome::Retry(reason) => format!(
                    "{} (from {}): retry ({reason})\n",
                    event.event_type, input.queue
                ),
                Outcome::Fail(reason) => format!(
                    "{} (from {}): fail ({reason})\n",
                    event.event_type, input.queue
                ),
            });
            call_time
        }
        World::Policy => {
            let text = input.event.as_deref().ok_or_else(|| {
                anyhow::anyhow!("a policy takes one capability request: --event '{{\"plugin\": \"...\", \"capability\": \"publish\", \"target\": \"...\", \"grants\": {{...}}}}'")
            })?;
            let arg: CapabilityRequestArg = serde_json::from_value(parse_json_arg(
                "--event", text,
            )?)
            .context("--event: expected {\"plugin\", \"capability\", \"target\", \"grants\"?}")?;
            let grants = match arg.grants {
                None => "{}".to_string(),
                Some(serde_json::Value::String(s)) => s,
                Some(v) => v.to_string(),
            };
            let request = CapabilityRequest {
                plugin: arg.plugin,
                capability: arg.capability,
                target: arg.target,
                grants,
            };
            let started = Instant::now();
            let decision = plugin.call_policy(&request);
            let call_time = started.elapsed();
            let decision = decision.map_err(|e| failed(e, call_time))?;
            let what = format!(
                "{} {} {:?}",
                request.plugin, request.capability, request.target
            );
            out.push_str(&match decision {
                Decision::Allow => format!("{what}: allow\n"),
                Decision::Deny(reason) => format!("{what}: deny ({reason})\n"),
            });
            call_time
        }
    };
    out.push_str(&format!(
        "cost: compile {:.1} ms, instantiate + call {:.1} ms (wall time; limits: {} fuel, {} MiB, {} ms)",
        compile_time.as_secs_f64() * 1e3,
        call_time.as_secs_f64() * 1e3,
        limits.fuel,
        limits.memory_bytes >> 20,
        limits.timeout.as_millis()
    ));
    Ok(out)
}
