//! Languages section: the example handler written in Rust, Python (componentize-py) and
//! JavaScript (ComponentizeJS), the three in `plugins/examples/` with one behaviour, each
//! compiled and called as a receiver calls it: the component's size and compile time, then
//! instantiate + call per delivery (its JSON payload parsed, one kv increment, one log line;
//! the host calls served in memory, allowed) and how much of it is instantiation alone, the fuel
//! a call burns and the memory its instance holds. The Python and JavaScript figures are set against the Rust handler's.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::capability::offline::OfflineHost;
use outbox_host::capability::CapabilityPolicy;
use outbox_host::config::{PluginSpec, Settings};
use outbox_host::plugin::bindings::{Delivery, Outcome};
use outbox_host::plugin::registry::compile_bytes;
use outbox_host::plugin::{CallUsage, LoadedPlugin, PluginEngine, PluginLimits, PluginRegistry};
use outbox_host::store::ClaimedEvent;

use crate::report::Report;

/// One example and the keys of its figures.
struct Example {
    language: &'static str,
    plugin: &'static str,
    call_key: &'static str,
    memory_key: &'static str,
    compile_key: &'static str,
}

/// The examples, Rust first (the others are set against it).
const EXAMPLES: [Example; 3] = [
    Example {
        language: "Rust",
        plugin: "rust-handler",
        call_key: "languages.rust_call",
        memory_key: "languages.rust_memory",
        compile_key: "languages.rust_compile",
    },
    Example {
        language: "Python",
        plugin: "python-handler",
        call_key: "languages.python_call",
        memory_key: "languages.python_memory",
        compile_key: "languages.python_compile",
    },
    Example {
        language: "JavaScript",
        plugin: "js-handler",
        call_key: "languages.js_call",
        memory_key: "languages.js_memory",
        compile_key: "languages.js_compile",
    },
];

/// Calls timed per language, after the warm-up.
const CALLS: u32 = 200;

/// What one example costs.
struct Cost {
    bytes: usize,
    compile: Duration,
    per_call: Duration,
    /// Of which instantiating alone (a fresh store and instance, no call).
    instantiate: Duration,
    usage: CallUsage,
}

/// Compile the example at `path` with a fresh engine (no compile cache) and time [`CALLS`]
/// deliveries of one event through it. Blocking: run it on a blocking thread.
fn measure(plugin: &str, path: &Path, max_payload_bytes: usize) -> anyhow::Result<Cost> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "{}: build the examples with scripts/build-plugins.sh and scripts/build-plugin-examples.sh",
            path.display()
        )
    })?;
    let engine = PluginEngine::new()?;
    let started = Instant::now();
    let compiled = compile_bytes(&engine, plugin, &bytes, path)?;
    let compile = started.elapsed();
    let mut spec: PluginSpec = toml::from_str("grants = { kv = true }")?;
    spec.memory_mb = Some(64);
    let loaded = Arc::new(LoadedPlugin::standalone(
        &engine,
        plugin,
        compiled,
        PluginLimits::from_spec(&spec),
        "{}".into(),
        spec,
    ));
    let registry = Arc::new(PluginRegistry::new(engine.clone(), "."));
    let policy = Arc::new(CapabilityPolicy::answering(registry, Ok(())));
    let host = OfflineHost::new(policy, vec![], BTreeMap::new(), max_payload_bytes)
        .map_err(anyhow::Error::msg)?;
    let event = ClaimedEvent::unclaimed(7, "example.signup", r#"{"action": "ok", "user": 42}"#);
    let delivery = Delivery {
        event: outbox_host::plugin::wit_event::to_wit_event(&event),
        queue: "outbox.example".into(),
        attempt: 1,
    };
    let call = || -> anyhow::Result<CallUsage> {
        let services = host.services(loaded.clone(), (&delivery.event).into());
        match loaded.call_handler_measured(Some(services), &delivery) {
            (Ok(Outcome::Ok), usage) => Ok(usage),
            (answer, _) => anyhow::bail!("{plugin} answered {answer:?}, not ok"),
        }
    };
    for _ in 0..10 {
        call()?;
    }
    let started = Instant::now();
    let mut usage = CallUsage::default();
    for _ in 0..CALLS {
        usage = call()?;
    }
    let per_call = started.elapsed() / CALLS;
    Ok(Cost {
        bytes: bytes.len(),
        compile,
        per_call,
        instantiate: loaded.time_instantiation(CALLS)?,
        usage,
    })
}

#[allow(
    clippy::cast_precision_loss,
    reason = "sizes shown to one decimal: exact far past any component's size"
)]
fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Compile and call each example; one figure per language and measure, Python's and
/// JavaScript's calls against Rust's.
pub(crate) async fn run(report: &mut Report, settings: &Settings) -> anyhow::Result<()> {
    let dir = settings.plugin_dir.join("examples");
    let mut rust_call_us = None;
    for example in &EXAMPLES {
        let path = dir.join(format!("{}.wasm", example.plugin));
        let max_payload = settings.max_payload_bytes;
        let plugin = example.plugin;
        let cost =
            tokio::task::spawn_blocking(move || measure(plugin, &path, max_payload)).await??;
        let call_us = cost.per_call.as_secs_f64() * 1e6;
        let language = example.language;
        report.say(format_args!(
            "{language} handler: {:.1} MiB component, compiled in {:.0} ms; a call (instantiate + handle, one kv increment, one log line) {call_us:.0} us, of which instantiating {:.0} us; {} fuel, {:.1} MiB of memory",
            mib(cost.bytes),
            cost.compile.as_secs_f64() * 1e3,
            cost.instantiate.as_secs_f64() * 1e6,
            cost.usage.fuel,
            mib(cost.usage.memory_bytes),
        ));
        let figure = report.figure(
            "languages",
            example.call_key,
            format!("handler call, {language} example (instantiate + handle)"),
            call_us,
            "us",
        );
        match rust_call_us {
            None => rust_call_us = Some(call_us),
            Some(rust) => {
                figure.against(EXAMPLES[0].call_key, "the Rust example", rust);
            }
        }
        report.figure(
            "languages",
            example.memory_key,
            format!("memory of a call's instance, {language} example"),
            mib(cost.usage.memory_bytes),
            "MiB",
        );
        report.figure(
            "languages",
            example.compile_key,
            format!("compile time, {language} example"),
            cost.compile.as_secs_f64() * 1e3,
            "ms",
        );
    }
    Ok(())
}
