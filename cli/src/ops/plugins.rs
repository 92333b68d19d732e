//! `outbox plugins list|check|call|new`: list, check, try out and scaffold WebAssembly plugins.

use std::time::{Duration, Instant};

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};

use anyhow::Context as _;
use outbox_host::config::Config;
use outbox_host::plugin::bindings::handler_world::exports::outbox::plugin::handler_api::{
    Delivery, Outcome,
};
use outbox_host::plugin::bindings::policy_world::exports::outbox::plugin::policy_api::{
    CapabilityRequest, Decision,
};
use outbox_host::plugin::bindings::router_world::exports::outbox::plugin::router_api::RouteDecision as WitRouteDecision;
use outbox_host::plugin::engine::Prepared;
use outbox_host::plugin::registry::{compile_bytes, plugin_config_json, CompiledPlugin};
use outbox_host::plugin::{PluginEngine, PluginInfo, PluginLimits, World, WIT_VERSION};
use outbox_host::store;

/// A heartbeat older than this means the host is not running.
const LIVE_HEARTBEAT_SECONDS: u32 = 60;

/// One running host and the plugins its heartbeat reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LivePluginWorker {
    /// Worker id (`outbox_worker.id`).
    pub id: String,
    /// Host name of the process.
    pub host: String,
    /// Seconds since its last heartbeat.
    pub last_seen_seconds_ago: f64,
    /// Its plugins with their counters.
    pub plugins: Vec<PluginInfo>,
}

/// One plugin `routes.toml` declares, loaded offline (no host running).
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeclaredPlugin {
    /// Name from `[plugins.NAME]`.
    pub name: String,
    /// Its world, when it loaded.
    pub world: Option<String>,
    /// First 16 hex digits of its SHA-256, when it was readable.
    pub hash: Option<String>,
    /// The file.
    pub file: String,
    /// Why it does not load, if it does not.
    pub error: Option<String>,
}

/// `outbox plugins list`: the plugins of live hosts (heartbeat within 60 s) with their call and
/// error counts; without a live host (or a reachable database) the plugins `routes.toml` declares,
/// compiled from the plugin directory, with a note saying so.
pub async fn print_plugins(config: &Config, json: bool) -> anyhow::Result<()> {
    let note = match live_plugin_workers(&config.settings.database_url).await {
        Ok(workers) if !workers.is_empty() => return print_live_plugins(&workers, json),
        Ok(_) => format!(
            "no live host (no heartbeat with plugins in the last {LIVE_HEARTBEAT_SECONDS} s)"
        ),
        Err(e) => match e.chain().nth(1).map(|_| e.root_cause()) {
            Some(cause) => format!("no live host information ({e}: {cause})"),
            None => format!("no live host information ({e})"),
        },
    };
    let dir = plugin_dir_of(config);
    let declared = {
        let config = config.clone();
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || load_declared_plugins(&config, &dir))
            .await
            .context("loading plugins")??
    };
    let source = config
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the built-in routes.toml".into());
    let note = format!(
        "{note}; showing the plugins {source} declares, loaded from {}",
        dir.display()
    );
    if json {
        println!(
            "{}",
            serde_json::json!({"source": "declared", "note": note, "plugins": declared})
        );
        return Ok(());
    }
    println!("{note}");
    if declared.is_empty() {
        println!("(no [plugins] declared)");
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(vec!["plugin", "world", "hash", "file", "calls", "errors"]);
    for p in &declared {
        t.add_row(vec![
            Cell::new(&p.name),
            Cell::new(p.world.as_deref().unwrap_or("?")),
            Cell::new(p.hash.as_deref().unwrap_or("-")),
            Cell::new(&p.file),
            Cell::new("not running"),
            Cell::new("not running"),
        ]);
    }
    println!("{t}");
    for p in &declared {
        if let Some(e) = &p.error {
            println!("{}: cannot load: {e}", p.name);
        }
    }
    Ok(())
}

fn print_live_plugins(workers: &[LivePluginWorker], json: bool) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::json!({"source": "live", "workers": workers})
        );
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "worker",
        "plugin",
        "world",
        "hash",
        "loaded at",
        "calls",
        "errors",
    ]);
    for w in workers {
        let worker = format!(
            "{} ({}, {:.0} s ago)",
            w.id, w.host, w.last_seen_seconds_ago
        );
        if w.plugins.is_empty() {
            t.add_row(vec![Cell::new(&worker), Cell::new("(no plugins loaded)")]);
        }
        for p in &w.plugins {
            t.add_row(vec![
                Cell::new(&worker),
                Cell::new(&p.name),
                Cell::new(&p.world),
                Cell::new(&p.hash),
                Cell::new(&p.loaded_at),
                Cell::new(p.calls),
                Cell::new(p.errors),
            ]);
        }
    }
    println!("{t}");
    Ok(())
}

/// Running hosts (heartbeat within 60 s) whose heartbeat carries a plugin list.
pub async fn live_plugin_workers(database_url: &str) -> anyhow::Result<Vec<LivePluginWorker>> {
    let pool = tokio::time::timeout(Duration::from_secs(3), store::connect(database_url, 1))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "timed out connecting to PostgreSQL at {}",
                store::redact(database_url)
            )
        })??;
    let heartbeats =
        store::live_workers_with_plugins(&pool, Duration::from_secs(LIVE_HEARTBEAT_SECONDS.into()))
            .await;
    pool.close().await;
    heartbeats?
        .into_iter()
        .map(|w| {
            let plugins = w.counters.get("plugins").cloned().unwrap_or_default();
            Ok(LivePluginWorker {
                plugins: serde_json::from_value(plugins)
                    .with_context(|| format!("worker {}: unreadable plugin list", w.id))?,
                host: w.host_name,
                last_seen_seconds_ago: w.last_seen_seconds_ago,
                id: w.id,
            })
        })
        .collect()
}

/// The plugin directory as `outbox plugins` commands see it: `settings.plugin_dir`, or, when
/// that relative path does not exist from here, the same path next to the routes file.
pub fn plugin_dir_of(config: &Config) -> std::path::PathBuf {
    let dir = &config.settings.plugin_dir;
    if dir.is_relative() && !dir.exists() {
        if let Some(base) = config.path.as_deref().and_then(std::path::Path::parent) {
            let candidate = base.join(dir);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    dir.clone()
}

/// Compile every plugin `config` declares from `dir` (CPU-heavy: call on a blocking thread).
pub fn load_declared_plugins(
    config: &Config,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<DeclaredPlugin>> {
    if config.routes.plugins.is_empty() {
        return Ok(vec![]);
    }
    let engine = PluginEngine::new()?;
    Ok(config
        .routes
        .plugins
        .iter()
        .map(|(name, spec)| {
            let path = dir.join(spec.file.clone().unwrap_or_else(|| format!("{name}.wasm")));
            let file = path.display().to_string();
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) => {
                    return DeclaredPlugin {
                        name: name.clone(),
                        world: None,
                        hash: None,
                        file,
                        error: Some(format!("cannot read {}: {e}", path.display())),
                    }
                }
            };
            match compile_bytes(&engine, name, &bytes, &path) {
                Ok(c) => DeclaredPlugin {
                    name: name.clone(),
                    world: Some(c.prepared.world().to_string()),
                    hash: Some(short_hash(&c.hash).to_string()),
                    file,
                    error: None,
                },
                Err(e) => DeclaredPlugin {
                    name: name.clone(),
                    world: None,
                    hash: None,
                    file,
                    error: Some(e.to_string()),
                },
            }
        })
        .collect())
}

fn short_hash(hash: &str) -> &str {
    &hash[..hash.len().min(16)]
}

/// The plugin name a file stands for: its stem (`plugins/dist/prefix-router.wasm` ->
/// `prefix-router`).
pub fn plugin_name_of(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "plugin".into())
}

/// The `outbox:plugin@VERSION` package a compiled plugin's export was built against.
fn exported_package(engine: &PluginEngine, prepared: &Prepared) -> String {
    let component = match prepared {
        Prepared::Router(p) => p.instance_pre().component(),
        Prepared::Handler(p) => p.instance_pre().component(),
        Prepared::Policy(p) => p.instance_pre().component(),
    };
    let export = format!("outbox:plugin/{}-api@", prepared.world());
    let ty = component.component_type();
    let found = ty
        .exports(engine.engine())
        .find_map(|(name, _)| name.strip_prefix(export.as_str()).map(str::to_string));
    format!("outbox:plugin@{}", found.as_deref().unwrap_or(WIT_VERSION))
}

/// Read and compile one plugin file offline; returns it and the compile time.
fn compile_file_offline(
    engine: &PluginEngine,
    path: &std::path::Path,
) -> anyhow::Result<(std::sync::Arc<CompiledPlugin>, Duration)> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("{}: cannot read the plugin file", path.display()))?;
    anyhow::ensure!(
        bytes.starts_with(b"\0asm"),
        "{}: plugin {}: not a WebAssembly file (it does not start with the \\0asm magic bytes): build it for wasm32-wasip2 with outbox-plugin-sdk",
        path.display(),
        plugin_name_of(path)
    );
    let started = Instant::now();
    let compiled = compile_bytes(engine, &plugin_name_of(path), &bytes, path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((compiled, started.elapsed()))
}

/// `outbox plugins check FILE`: compile one `.wasm` file and check it against the world it
/// exports, offline. Returns the one-line report
/// (`FILE: ok (world router, outbox:plugin@0.1.0, sha256 <16 hex>, compiled in N ms)`).
/// CPU-heavy: call on a blocking thread.
pub fn check_plugin_file(path: &std::path::Path) -> anyhow::Result<String> {
    let engine = PluginEngine::new()?;
    let (compiled, took) = compile_file_offline(&engine, path)?;
    Ok(format!(
        "{}: ok (world {}, {}, sha256 {}, compiled in {} ms)",
        path.display(),
        compiled.prepared.world(),
        exported_package(&engine, &compiled.prepared),
        short_hash(&compiled.hash),
        took.as_millis()
    ))
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
        let spec: outbox_host::config::PluginSpec =
            toml::from_str("").context("an empty plugin spec")?;
        return Ok((
            plugin_config_json(name, &spec, &config.routes, world),
            format!("the routing table of {source}"),
        ));
    }
    Ok(("{}".into(), "none ({})".into()))
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
    let name: std::sync::Arc<str> = plugin_name_of(path).into();
    let world = compiled.prepared.world();
    let (config_json, config_source) = call_config(config, &name, world, input.config.as_deref())?;
    let limits = PluginLimits::default();
    let mut out = format!(
        "{name}: world {world}, sha256 {}, config: {config_source}\n",
        short_hash(&compiled.hash)
    );
    let failed = |e: outbox_host::plugin::PluginError, took: Duration| {
        anyhow::anyhow!("{e} (after {:.1} ms)", took.as_secs_f64() * 1e3)
    };
    let call_time = match &compiled.prepared {
        Prepared::Router(pre) => {
            let events = events_from_input(input)?;
            let wit: Vec<_> = events
                .iter()
                .map(outbox_host::plugin::router::to_wit_event)
                .collect();
            let started = Instant::now();
            let answer = engine.call_router(&name, pre, &limits, &config_json, &wit);
            let call_time = started.elapsed();
            let answer = answer.map_err(|e| failed(e, call_time))?;
            anyhow::ensure!(
                answer.len() == events.len(),
                "plugin {name} returned {} routes for {} events (a router must return exactly one per event, in order)",
                answer.len(),
                events.len()
            );
            for (event, decision) in events.iter().zip(answer) {
                let line = match decision {
                    WitRouteDecision::Queues(q) if q.is_empty() => format!(
                        "{}: no queue (the host treats an empty list as an error)",
                        event.event_type
                    ),
                    WitRouteDecision::Queues(q) => {
                        let bad: Vec<&String> = q
                            .iter()
                            .filter(|q| outbox_host::config::validate_queue_name(q).is_err())
                            .collect();
                        let mut line = format!("{} -> {}", event.event_type, q.join(", "));
                        if !bad.is_empty() {
                            line.push_str(&format!(
                                "  (invalid queue name {bad:?}: the host would fail this event)"
                            ));
                        }
                        line
                    }
                    WitRouteDecision::NoRoute(reason) => {
                        format!("{}: no route ({reason})", event.event_type)
                    }
                };
                out.push_str(&line);
                out.push('\n');
            }
            call_time
        }
        Prepared::Handler(pre) => {
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
            let outcome = engine.call_handler(&name, pre, &limits, None, &config_json, &delivery);
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
        Prepared::Policy(pre) => {
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
            let decision = engine.call_policy(&name, pre, &limits, &config_json, &request);
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

/// The SDK templates, embedded so `outbox plugins new` works from any directory.
const PLUGIN_TEMPLATES: [(World, &str, &str); 3] = [
    (
        World::Router,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/router/Cargo.toml.tmpl"
        )),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/router/src/lib.rs.tmpl"
        )),
    ),
    (
        World::Handler,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/handler/Cargo.toml.tmpl"
        )),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/handler/src/lib.rs.tmpl"
        )),
    ),
    (
        World::Policy,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/policy/Cargo.toml.tmpl"
        )),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/policy/src/lib.rs.tmpl"
        )),
    ),
];

/// Check a new plugin's name: lowercase letters, digits and '-', starting with a letter.
pub fn validate_plugin_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    anyhow::ensure!(
        ok,
        "invalid plugin name {name:?}: use lowercase letters, digits and single '-', starting with a letter (at most 64 characters), e.g. \"form-router\""
    );
    Ok(())
}

/// This repository's `plugin-sdk`, absolute (`OUTBOX_PLUGIN_SDK` overrides the path the binary
/// was built from).
pub fn plugin_sdk_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::var_os("OUTBOX_PLUGIN_SDK")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk"));
    let dir = dir.canonicalize().with_context(|| {
        format!(
            "the plugin SDK is not at {} (set OUTBOX_PLUGIN_SDK to the outbox repository's plugin-sdk directory)",
            dir.display()
        )
    })?;
    anyhow::ensure!(
        dir.join("Cargo.toml").is_file(),
        "{} is not the plugin SDK (no Cargo.toml)",
        dir.display()
    );
    Ok(dir)
}

/// `outbox plugins new NAME --world W`: write a plugin crate from the SDK template into
/// `parent/NAME` (refusing to overwrite anything). Returns the directory and the next steps.
pub fn scaffold_plugin(
    name: &str,
    world: World,
    parent: &std::path::Path,
) -> anyhow::Result<(std::path::PathBuf, String)> {
    validate_plugin_name(name)?;
    let sdk = plugin_sdk_dir()?;
    let (_, cargo_toml, lib_rs) = PLUGIN_TEMPLATES
        .iter()
        .find(|(w, _, _)| *w == world)
        .expect("a template per world");
    // The path goes into a TOML basic string.
    let sdk_toml = sdk
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let cargo_toml = cargo_toml
        .replace("{{sdk_path}}", &sdk_toml)
        .replace("{{name}}", name);
    let lib_rs = lib_rs
        .replace("{{sdk_path}}", &sdk.display().to_string())
        .replace("{{name}}", name);
    let dir = parent.join(name);
    if dir.exists() {
        anyhow::bail!(
            "{} already exists; not overwriting it (choose another name or --dir)",
            dir.display()
        );
    }
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::create_dir(dir.join("src"))
        .with_context(|| format!("creating {}/src", dir.display()))?;
    std::fs::write(dir.join("Cargo.toml"), cargo_toml)
        .with_context(|| format!("writing {}/Cargo.toml", dir.display()))?;
    std::fs::write(dir.join("src/lib.rs"), lib_rs)
        .with_context(|| format!("writing {}/src/lib.rs", dir.display()))?;
    let artifact = name.replace('-', "_");
    let next = format!(
        "created {world} plugin {name} in {dir} (SDK: {sdk})\n\
         next steps:\n  \
           cd {dir}\n  \
           cargo build --release --target wasm32-wasip2\n  \
           outbox plugins check target/wasm32-wasip2/release/{artifact}.wasm\n  \
           outbox plugins call target/wasm32-wasip2/release/{artifact}.wasm {input}\n\
         then copy the .wasm into the plugin directory as {name}.wasm and declare [plugins.{name}] in routes.toml",
        dir = dir.display(),
        sdk = sdk.display(),
        input = match world {
            World::Router => r#"--events '[{"event_type": "mail.welcome"}]' --plugin-config '{"queue": "outbox.mail"}'"#,
            World::Handler => r#"--event '{"event_type": "mail.welcome", "payload": {}}'"#,
            World::Policy => r#"--event '{"plugin": "p", "capability": "kv", "target": "k"}'"#,
        }
    );
    Ok((dir, next))
}
