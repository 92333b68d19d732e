//! `outbox plugins call FILE`: run a plugin once on given input, without a database or Redis,
//! and report its answer and cost. A handler's host calls are served offline
//! ([`outbox_host::capability::offline`]): kv from memory (seeded from `--kv`), publish
//! recorded as "would publish" with the dispatch key the host would give the child, http
//! answered from `--http-fixtures` or refused, each after the grants of `routes.toml` (or
//! `--grants`) and the capability policy `[policy]` names, as in a receiver.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::capability::offline::{HttpFixture, OfflineCall, OfflineHost};
use outbox_host::capability::{CapabilityPolicy, DENY_ALL};
use outbox_host::config::{Config, Grants, PluginSpec};
use outbox_host::plugin::bindings::{
    CapabilityRequest, Decision, DelayedRetry, Delivery, Outcome, WitRouteDecision,
};
use outbox_host::plugin::registry::plugin_config_json;
use outbox_host::plugin::{LoadedPlugin, PluginEngine, PluginLimits, PluginRegistry, World};
use outbox_host::routing::RouteDecision;
use outbox_host::store;

use super::{compile_file_offline, compiled_how, offline_engine, plugin_name_of, short_hash};

/// Largest `--kv` or `--http-fixtures` file read, bytes.
const MAX_INPUT_FILE_BYTES: u64 = 16 << 20;

/// What a call is expected to end with (`--expect`); a call that ends otherwise makes
/// `outbox plugins call` exit non-zero, so an author's CI can run it as a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallExpectation {
    /// A handler answers `ok` (the default for a handler).
    Ok,
    /// A handler answers `retry` or `retry-after`.
    Retry,
    /// A handler answers `fail`.
    Fail,
    /// At least one of a handler's host calls is denied (without it, any denial fails the call).
    Denied,
    /// A policy allows the request.
    Allow,
    /// A policy denies the request.
    Deny,
}

impl CallExpectation {
    /// As `--expect` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Retry => "retry",
            Self::Fail => "fail",
            Self::Denied => "denied",
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

/// What `outbox plugins call` printed, and the expectations the call did not meet (none: exit
/// 0).
#[derive(Debug, Clone)]
pub struct PluginCallReport {
    /// The readable answer and its cost.
    pub text: String,
    /// One line per unmet expectation (`the handler answered fail (...), expected ok`).
    pub unmet: Vec<String>,
}

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
    /// The delivery's attempt (handlers; 1 on first delivery).
    pub attempt: u32,
    /// `--kv FILE`: a JSON object seeding the handler's kv store (string or integer values).
    pub kv_seed: Option<std::path::PathBuf>,
    /// `--http-fixtures FILE`: a JSON array of canned HTTP answers.
    pub http_fixtures: Option<std::path::PathBuf>,
    /// `--grants JSON`: the handler's grants, instead of its `[plugins.NAME].grants`.
    pub grants: Option<String>,
    /// `--expect`: what the call must end with (a handler: `ok` and no denied host call unless
    /// given otherwise; a policy: anything unless given).
    pub expect: Vec<CallExpectation>,
}

/// The unmet expectations of a handler call that answered `outcome` after `denied` of its
/// host calls were denied.
fn unmet_by_handler(expect: &[CallExpectation], outcome: &Outcome, denied: usize) -> Vec<String> {
    let answered = match outcome {
        Outcome::Ok => (CallExpectation::Ok, String::new()),
        Outcome::Retry(reason) | Outcome::RetryAfter(DelayedRetry { reason, .. }) => {
            (CallExpectation::Retry, format!(" ({reason})"))
        }
        Outcome::Fail(reason) => (CallExpectation::Fail, format!(" ({reason})")),
    };
    let wanted = expect
        .iter()
        .copied()
        .find(|e| {
            matches!(
                e,
                CallExpectation::Ok | CallExpectation::Retry | CallExpectation::Fail
            )
        })
        .unwrap_or(CallExpectation::Ok);
    let mut unmet = Vec::new();
    if answered.0 != wanted {
        unmet.push(format!(
            "the handler answered {}{}, expected {} (--expect)",
            answered.0.as_str(),
            answered.1,
            wanted.as_str()
        ));
    }
    let denial_expected = expect.contains(&CallExpectation::Denied);
    if denied > 0 && !denial_expected {
        unmet.push(format!(
            "{denied} host call(s) denied (listed above); give --expect denied if the test expects a denial"
        ));
    }
    if denied == 0 && denial_expected {
        unmet.push("no host call was denied, expected at least one (--expect denied)".into());
    }
    unmet
}

/// Refuse `--expect` values that mean nothing for a plugin of `world`, or that contradict each
/// other.
fn check_expectations(expect: &[CallExpectation], world: World) -> anyhow::Result<()> {
    use CallExpectation as E;
    let fits = |e: &E| match world {
        World::Handler => matches!(e, E::Ok | E::Retry | E::Fail | E::Denied),
        World::Policy => matches!(e, E::Allow | E::Deny),
        World::Router => false,
    };
    if let Some(e) = expect.iter().find(|e| !fits(e)) {
        anyhow::bail!(
            "--expect {}: not an answer a {world} plugin gives (a handler: ok, retry, fail, denied; a policy: allow, deny; a router: none)",
            e.as_str()
        );
    }
    let answers = expect.iter().filter(|e| **e != E::Denied).count();
    anyhow::ensure!(
        answers <= 1,
        "--expect names more than one answer; a call gives one"
    );
    Ok(())
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
            arg.id.unwrap_or_else(|| outbox_host::numeric::len_i64(n)),
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

/// Where the routes file in use came from, for messages.
fn routes_source(config: &Config) -> String {
    config
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the built-in routes.toml".into())
}

/// The offline host of a handler call: the capability policy `[policy]` names (its plugin
/// loaded from the plugin directory, with its declared config), the kv seed and the HTTP
/// fixtures. Returns it and a description of the policy.
fn offline_host(
    config: &Config,
    engine: &PluginEngine,
    input: &PluginCallInput,
) -> anyhow::Result<(Arc<OfflineHost>, String)> {
    let registry = Arc::new(PluginRegistry::new(
        engine.clone(),
        config.settings.plugin_dir.clone(),
    ));
    let mut policy_name = config.routes.policy.plugin.as_str();
    let declared = config.routes.plugins.get(policy_name);
    // A plugin author's folder: no routes.toml (the built-in one is used) and no policy plugin
    // beside it. Host calls are then denied, saying how to check them against grants.
    let no_policy_here = config.path.is_none()
        && declared.is_some_and(|spec| !registry.file_of(policy_name, spec).exists());
    if no_policy_here {
        policy_name = DENY_ALL;
    }
    let policy_source = if no_policy_here {
        format!(
            "none found: no routes.toml here and no {} in {}, so every host call but log is denied (give --config ROUTES, or set OUTBOX_PLUGIN_DIR to the host's plugins, to check calls against grants)",
            config.routes.policy.plugin,
            config.settings.plugin_dir.display()
        )
    } else if policy_name == DENY_ALL {
        "deny-all (every host call but log is denied)".to_string()
    } else {
        let spec = declared.ok_or_else(|| {
            anyhow::anyhow!(
                "[policy] plugin = {policy_name:?} is not declared under [plugins] of {}",
                routes_source(config)
            )
        })?;
        let path = registry.file_of(policy_name, spec);
        let (compiled, _) = compile_file_offline(engine, &path).with_context(|| {
            format!(
                "the capability policy plugin {policy_name:?} decides the handler's host calls: build it (scripts/build-plugins.sh) or point OUTBOX_PLUGIN_DIR at it"
            )
        })?;
        anyhow::ensure!(
            compiled.world() == World::Policy,
            "{}: [policy] plugin {policy_name:?} is a {} plugin, not a policy",
            path.display(),
            compiled.world()
        );
        registry.serve_standalone(LoadedPlugin::standalone(
            engine,
            policy_name,
            compiled,
            PluginLimits::from_spec(spec),
            plugin_config_json(policy_name, spec, &config.routes, World::Policy),
            spec.clone(),
        ));
        format!("plugin {policy_name} ({})", path.display())
    };
    let policy = Arc::new(CapabilityPolicy::with_plugin(registry, policy_name));
    let kv_seed = match &input.kv_seed {
        Some(path) => read_kv_seed(path)?,
        None => BTreeMap::new(),
    };
    let fixtures = match &input.http_fixtures {
        Some(path) => {
            let text = read_input_file("--http-fixtures", path)?;
            serde_json::from_str::<Vec<HttpFixture>>(&text).with_context(|| {
                format!(
                    "--http-fixtures {}: expected a JSON array of {{\"method\"?, \"url\", \"status\"?, \"headers\"?, \"body\"?}}",
                    path.display()
                )
            })?
        }
        None => Vec::new(),
    };
    let host = OfflineHost::new(policy, fixtures, kv_seed, config.settings.max_payload_bytes)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .with_max_event_generation(config.settings.max_event_generation);
    Ok((Arc::new(host), policy_source))
}

/// Read one input file, bounded.
fn read_input_file(flag: &str, path: &std::path::Path) -> anyhow::Result<String> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("{flag} {}: cannot read it", path.display()))?
        .len();
    anyhow::ensure!(
        len <= MAX_INPUT_FILE_BYTES,
        "{flag} {}: {len} bytes, over the limit of {MAX_INPUT_FILE_BYTES}",
        path.display()
    );
    std::fs::read_to_string(path)
        .with_context(|| format!("{flag} {}: cannot read it", path.display()))
}

/// The `--kv` seed: a JSON object of string (or integer, stored as its decimal text) values.
fn read_kv_seed(path: &std::path::Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text = read_input_file("--kv", path)?;
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text)
        .with_context(|| {
            format!(
                "--kv {}: expected a JSON object of keys and values",
                path.display()
            )
        })?;
    object
        .into_iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(s) => Ok((key, s)),
            serde_json::Value::Number(n) if n.is_i64() => Ok((key, n.to_string())),
            other => anyhow::bail!(
                "--kv {}: the value of {key:?} must be a string or an integer, got {other}",
                path.display()
            ),
        })
        .collect()
}

/// One line per host call of an offline handler call.
fn describe_calls(calls: &[OfflineCall]) -> String {
    if calls.is_empty() {
        return "host calls: none\n".into();
    }
    let mut out = format!(
        "host calls ({}; offline: nothing was written, stored or sent):\n",
        calls.len()
    );
    for call in calls {
        let line = match call {
            OfflineCall::Publish {
                event_type,
                tenant_id,
                dispatch_key,
                payload,
                ..
            } => format!(
                "would publish {event_type} (dispatch key {}, tenant {}): {payload}",
                dispatch_key.as_deref().unwrap_or("none"),
                tenant_id.as_deref().unwrap_or("none")
            ),
            OfflineCall::Kv { op, key, result } => format!("kv {op} {key:?}: {result}"),
            OfflineCall::Http {
                method,
                url,
                status,
                fixture,
            } => format!("http {method} {url}: {status} (fixture {})", fixture + 1),
            OfflineCall::Denied {
                capability,
                target,
                reason,
            } => format!("denied: {capability} {target:?}: {reason}"),
            OfflineCall::Failed { capability, error } => format!("failed: {capability}: {error}"),
        };
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `bytes` in MiB, for a report.
#[allow(
    clippy::cast_precision_loss,
    reason = "a memory size shown to one decimal: exact far past any plugin's memory"
)]
fn bytes_as_mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// A `[plugins.NAME]` declaration with nothing set.
fn empty_spec() -> anyhow::Result<PluginSpec> {
    toml::from_str("").context("an empty plugin spec")
}

/// `outbox plugins call FILE`: compile a plugin and run it once on the given input, without a
/// database, Redis or network (a handler's host calls are served offline, see the module
/// docs). Returns the readable answer and its cost; a plugin that traps or breaks its contract
/// is an error; an answer other than `input.expect` is listed in [`PluginCallReport::unmet`].
/// CPU-heavy and blocking: call on a blocking thread.
pub fn call_plugin_file(
    config: &Config,
    path: &std::path::Path,
    input: &PluginCallInput,
) -> anyhow::Result<PluginCallReport> {
    let engine = offline_engine(&config.settings)?;
    let (compiled, compile_time) = compile_file_offline(&engine, path)?;
    let name = plugin_name_of(path);
    let world = compiled.world();
    check_expectations(&input.expect, world)?;
    let mut unmet = Vec::new();
    let (config_json, config_source) = call_config(config, &name, world, input.config.as_deref())?;
    // A plugin declared in routes.toml runs with its declared limits, as the host would.
    let (mut spec, grants_source) = match config.routes.plugins.get(&name) {
        Some(spec) => (
            spec.clone(),
            format!("[plugins.{name}] of {}", routes_source(config)),
        ),
        None => (
            empty_spec()?,
            "none (not declared in routes.toml)".to_string(),
        ),
    };
    let grants_source = match &input.grants {
        Some(text) => {
            spec.grants = serde_json::from_value::<Grants>(parse_json_arg("--grants", text)?)
                .context("--grants: expected {\"publish\": [...], \"publish_tenants\": [...], \"kv\": true, \"http\": [...]}")?;
            "given on the command line".to_string()
        }
        None => grants_source,
    };
    let limits = PluginLimits::from_spec(&spec);
    let router_payload = spec.router_payload;
    let mut out = format!(
        "{name}: world {world}, sha256 {}, config: {config_source}\n",
        short_hash(&compiled.hash)
    );
    let plugin = Arc::new(LoadedPlugin::standalone(
        &engine,
        &name,
        compiled,
        limits,
        config_json,
        spec,
    ));
    let failed = |e: outbox_host::plugin::PluginError, took: Duration| {
        anyhow::anyhow!("{e} (after {:.1} ms)", took.as_secs_f64() * 1e3)
    };
    // What a handler's call used of its limits.
    let mut used = None;
    let call_time = match world {
        World::Router => {
            let events = events_from_input(input)?;
            // Payload and headers only when the spec asks for them, as the dispatcher does.
            let wit: Vec<_> = events
                .iter()
                .map(|e| outbox_host::plugin::wit_event::to_router_event(e, router_payload))
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
            anyhow::ensure!(input.attempt >= 1, "--attempt starts at 1");
            let event = events.remove(0);
            let delivery = Delivery {
                event: outbox_host::plugin::wit_event::to_wit_event(&event),
                queue: input.queue.clone(),
                attempt: input.attempt,
            };
            let (host, policy_source) = offline_host(config, &engine, input)?;
            out.push_str(&format!(
                "grants: {grants_source}; capability policy: {policy_source}\n"
            ));
            let services = host.services(plugin.clone(), (&delivery.event).into());
            let started = Instant::now();
            let (outcome, usage) = plugin.call_handler_measured(Some(services), &delivery);
            let call_time = started.elapsed();
            used = Some(usage);
            let state = host.state();
            // The host calls show even when the call failed: they explain what it tried.
            out.push_str(&describe_calls(&state.calls));
            let outcome = outcome.map_err(|e| failed(e, call_time))?;
            let denied = state
                .calls
                .iter()
                .filter(|c| matches!(c, OfflineCall::Denied { .. }))
                .count();
            unmet = unmet_by_handler(&input.expect, &outcome, denied);
            let what = format!("{} (from {})", event.event_type, input.queue);
            out.push_str(&match outcome {
                Outcome::Ok => format!("{what}: ok\n"),
                Outcome::Retry(reason) => format!("{what}: retry ({reason})\n"),
                Outcome::RetryAfter(DelayedRetry { reason, delay_ms }) => {
                    format!("{what}: retry after {delay_ms} ms ({reason})\n")
                }
                Outcome::Fail(reason) => format!("{what}: fail ({reason})\n"),
            });
            let keys = match state.kv.len() {
                1 => "1 key".to_string(),
                n => format!("{n} keys"),
            };
            out.push_str(&format!("kv after the call: {keys}\n"));
            for (key, value) in &state.kv {
                let ttl = value
                    .ttl_seconds
                    .map(|t| format!(" (ttl {t} s)"))
                    .unwrap_or_default();
                out.push_str(&format!("  {key:?} = {:?}{ttl}\n", value.value));
            }
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
            let answered = match &decision {
                Decision::Allow => CallExpectation::Allow,
                Decision::Deny(_) => CallExpectation::Deny,
            };
            if let Some(wanted) = input.expect.first().filter(|w| **w != answered) {
                unmet.push(format!(
                    "the policy answered {}, expected {} (--expect)",
                    answered.as_str(),
                    wanted.as_str()
                ));
            }
            out.push_str(&match decision {
                Decision::Allow => format!("{what}: allow\n"),
                Decision::Deny(reason) => format!("{what}: deny ({reason})\n"),
            });
            call_time
        }
    };
    let used = used
        .map(|u: outbox_host::plugin::CallUsage| {
            format!(
                ", used {} fuel and {:.1} MiB of memory",
                u.fuel,
                bytes_as_mib(u.memory_bytes)
            )
        })
        .unwrap_or_default();
    out.push_str(&format!(
        "cost: {}, instantiate + call {:.1} ms{used} (wall time; limits: {} fuel, {} MiB, {} ms)",
        compiled_how(&engine, compile_time),
        call_time.as_secs_f64() * 1e3,
        limits.fuel,
        limits.memory_bytes >> 20,
        limits.timeout.as_millis()
    ));
    Ok(PluginCallReport { text: out, unmet })
}
