//! The wasmtime engine, narrowed to the one way outbox uses it.
//!
//! One [`PluginEngine`] per process: component model, pooling allocator, fuel metering and epoch
//! interruption (a ticker thread advances the epoch every millisecond for wall-clock limits).
//! Each call gets a fresh store from a pre-linked `InstancePre`, with a memory cap, fuel, a
//! deadline and a deny-everything WASI context (no files, env, sockets or inherited stdio; the
//! guest's stderr is captured into memory so a panic message can explain a trap).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{
    Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits,
    StoreLimitsBuilder, Trap,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{
    handler_world, policy_world, router_world, HostCallError, HttpRequest, HttpResponse,
    WitNewEvent,
};
use super::{PluginError, WIT_VERSION};

/// Which world a plugin implements (found from its exports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum World {
    /// Routes batches of events to queues.
    Router,
    /// Handles queue entries.
    Handler,
    /// Decides capability checks.
    Policy,
}

impl World {
    /// The world's name in the WIT package.
    pub fn as_str(self) -> &'static str {
        match self {
            World::Router => "router",
            World::Handler => "handler",
            World::Policy => "policy",
        }
    }

    fn export(self) -> &'static str {
        match self {
            World::Router => "router-api",
            World::Handler => "handler-api",
            World::Policy => "policy-api",
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-call limits of one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// Fuel per call (about one unit per WebAssembly instruction).
    pub fuel: u64,
    /// Linear memory cap per call, bytes.
    pub memory_bytes: usize,
    /// Wall-clock limit per call.
    pub timeout: Duration,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            fuel: 2_000_000_000,
            memory_bytes: 64 << 20,
            timeout: Duration::from_millis(2000),
        }
    }
}

impl PluginLimits {
    /// Defaults overridden by a `[plugins.NAME]` spec.
    pub fn from_spec(spec: &crate::config::PluginSpec) -> Self {
        let d = Self::default();
        Self {
            fuel: spec.fuel.unwrap_or(d.fuel),
            memory_bytes: spec
                .memory_mb
                .map(|mb| (mb.min(MAX_MEMORY_MB) as usize) << 20)
                .unwrap_or(d.memory_bytes),
            timeout: spec
                .timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(d.timeout),
        }
    }
}

/// Largest memory cap a plugin may ask for (also the pooling allocator's slot size).
pub const MAX_MEMORY_MB: u64 = 512;

/// Host services a handler plugin may call (`publish`, `kv`, `http`), provided by the receiver
/// for the delivery being handled (its implementation, in [`crate::capability`], checks every
/// call with the capability policy before doing anything).
pub trait HandlerServices: Send {
    /// `publish.send`.
    fn publish(&mut self, event: WitNewEvent) -> Result<i64, HostCallError>;
    /// `kv.get`.
    fn kv_get(&mut self, key: String) -> Result<Option<String>, HostCallError>;
    /// `kv.set`.
    fn kv_set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> Result<(), HostCallError>;
    /// `kv.delete`.
    fn kv_delete(&mut self, key: String) -> Result<bool, HostCallError>;
    /// `http.send`.
    fn http_send(&mut self, request: HttpRequest) -> Result<HttpResponse, HostCallError>;
}

/// The store data of one call.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    plugin: Arc<str>,
    stderr: MemoryOutputPipe,
    services: Option<Box<dyn HandlerServices>>,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl router_world::outbox::plugin::types::Host for HostState {}

impl router_world::outbox::plugin::log::Host for HostState {
    fn write(&mut self, level: router_world::outbox::plugin::log::Level, message: String) {
        use router_world::outbox::plugin::log::Level;
        let message: String = message.chars().take(4096).collect();
        let plugin = &*self.plugin;
        match level {
            Level::Trace => tracing::trace!(target: "outbox::plugin", plugin, "{message}"),
            Level::Debug => tracing::debug!(target: "outbox::plugin", plugin, "{message}"),
            Level::Info => tracing::info!(target: "outbox::plugin", plugin, "{message}"),
            Level::Warn => tracing::warn!(target: "outbox::plugin", plugin, "{message}"),
            Level::Error => tracing::error!(target: "outbox::plugin", plugin, "{message}"),
        }
    }
}

fn unavailable(what: &str) -> HostCallError {
    HostCallError::Denied(format!(
        "{what} is not available outside a receiver (offline call)"
    ))
}

impl handler_world::outbox::plugin::publish::Host for HostState {
    fn send(&mut self, event: WitNewEvent) -> Result<i64, HostCallError> {
        match &mut self.services {
            Some(s) => s.publish(event),
            None => Err(unavailable("publish")),
        }
    }
}

impl handler_world::outbox::plugin::kv::Host for HostState {
    fn get(&mut self, key: String) -> Result<Option<String>, HostCallError> {
        match &mut self.services {
            Some(s) => s.kv_get(key),
            None => Err(unavailable("kv")),
        }
    }
    fn set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> Result<(), HostCallError> {
        match &mut self.services {
            Some(s) => s.kv_set(key, value, ttl_seconds),
            None => Err(unavailable("kv")),
        }
    }
    fn delete(&mut self, key: String) -> Result<bool, HostCallError> {
        match &mut self.services {
            Some(s) => s.kv_delete(key),
            None => Err(unavailable("kv")),
        }
    }
}

impl handler_world::outbox::plugin::http::Host for HostState {
    fn send(&mut self, request: HttpRequest) -> Result<HttpResponse, HostCallError> {
        match &mut self.services {
            Some(s) => s.http_send(request),
            None => Err(unavailable("http")),
        }
    }
}

/// A compiled, pre-linked plugin ready to instantiate per call.
#[derive(Clone)]
pub(crate) enum Prepared {
    /// A router.
    Router(router_world::RouterPre<HostState>),
    /// A handler.
    Handler(handler_world::HandlerPre<HostState>),
    /// A policy.
    Policy(policy_world::PolicyPre<HostState>),
}

impl Prepared {
    /// The world of this plugin.
    pub(crate) fn world(&self) -> World {
        match self {
            Prepared::Router(_) => World::Router,
            Prepared::Handler(_) => World::Handler,
            Prepared::Policy(_) => World::Policy,
        }
    }

    /// The component it was compiled from.
    pub(crate) fn component(&self) -> &Component {
        match self {
            Prepared::Router(pre) => pre.instance_pre().component(),
            Prepared::Handler(pre) => pre.instance_pre().component(),
            Prepared::Policy(pre) => pre.instance_pre().component(),
        }
    }
}

/// The process's wasmtime engine and one linker per world.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    router: Arc<Linker<HostState>>,
    handler: Arc<Linker<HostState>>,
    policy: Arc<Linker<HostState>>,
}

/// Epoch ticks per second (the wall-clock limit's resolution is one tick).
const EPOCH_TICK: Duration = Duration::from_millis(1);

impl PluginEngine {
    /// Create the engine (pooling allocator when the OS allows it) and start its epoch ticker.
    pub fn new() -> Result<Self, PluginError> {
        let engine = match Engine::new(&engine_config(true)) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "pooling allocator unavailable; using on-demand instances");
                Engine::new(&engine_config(false))
                    .map_err(|e| PluginError::Engine(format!("{e:#}")))?
            }
        };
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("outbox-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => return,
                }
            })
            .map_err(|e| PluginError::Engine(format!("epoch ticker: {e}")))?;
        let linker = |add: fn(&mut Linker<HostState>) -> wasmtime::Result<()>| -> Result<Arc<Linker<HostState>>, PluginError> {
            let mut linker = Linker::new(&engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
            add(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
            Ok(Arc::new(linker))
        };
        use wasmtime::component::HasSelf;
        let router = linker(|l| router_world::Router::add_to_linker::<_, HasSelf<_>>(l, |s| s))?;
        let handler = linker(|l| handler_world::Handler::add_to_linker::<_, HasSelf<_>>(l, |s| s))?;
        let policy = linker(|l| policy_world::Policy::add_to_linker::<_, HasSelf<_>>(l, |s| s))?;
        Ok(Self {
            engine,
            router,
            handler,
            policy,
        })
    }

    /// The underlying engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compile `bytes`, find the world it implements, check the WIT version and link it.
    /// CPU-heavy: call it on a blocking thread.
    pub(crate) fn prepare(&self, plugin: &str, bytes: &[u8]) -> Result<Prepared, PluginError> {
        let invalid = |message: String| PluginError::Invalid {
            plugin: plugin.to_string(),
            message,
        };
        if bytes.starts_with(b"\0asm\x01\0\0\0") {
            return Err(invalid(
                "this is a core WebAssembly module, not a component: build it for wasm32-wasip2 with outbox-plugin-sdk".into(),
            ));
        }
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| invalid(format!("not a valid WebAssembly component: {e:#}")))?;
        let world = self.world_of(&component).map_err(invalid)?;
        let linker = match world {
            World::Router => &self.router,
            World::Handler => &self.handler,
            World::Policy => &self.policy,
        };
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            invalid(format!(
                "does not fit the {world} world (it imports something the host does not grant to {world} plugins): {e:#}"
            ))
        })?;
        let fit =
            |e: wasmtime::Error| invalid(format!("exports do not match the {world} world: {e:#}"));
        Ok(match world {
            World::Router => Prepared::Router(router_world::RouterPre::new(pre).map_err(fit)?),
            World::Handler => Prepared::Handler(handler_world::HandlerPre::new(pre).map_err(fit)?),
            World::Policy => Prepared::Policy(policy_world::PolicyPre::new(pre).map_err(fit)?),
        })
    }

    /// The world a component exports, refusing an incompatible WIT package version.
    fn world_of(&self, component: &Component) -> Result<World, String> {
        let ty = component.component_type();
        let mut found = Vec::new();
        for (name, _) in ty.exports(&self.engine) {
            let Some(rest) = name.strip_prefix("outbox:plugin/") else {
                continue;
            };
            let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
            for world in [World::Router, World::Handler, World::Policy] {
                if iface == world.export() {
                    if !compatible(version, WIT_VERSION) {
                        return Err(format!(
                            "built against outbox:plugin@{version}, but this host implements outbox:plugin@{WIT_VERSION}: rebuild it with a compatible outbox-plugin-sdk"
                        ));
                    }
                    found.push(world);
                }
            }
        }
        match found.as_slice() {
            [world] => Ok(*world),
            [] => Err("exports none of outbox:plugin/router-api, handler-api or policy-api: is it built with outbox-plugin-sdk's export_router!/export_handler!/export_policy!?".into()),
            _ => Err(format!("exports several worlds ({found:?}); a plugin implements exactly one")),
        }
    }

    fn store(
        &self,
        plugin: &Arc<str>,
        limits: &PluginLimits,
        services: Option<Box<dyn HandlerServices>>,
    ) -> Result<Store<HostState>, wasmtime::Error> {
        let stderr = MemoryOutputPipe::new(8192);
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .allow_blocking_current_thread(false)
            .build();
        let state = HostState {
            wasi,
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .instances(64)
                .tables(64)
                .memories(16)
                .trap_on_grow_failure(true)
                .build(),
            plugin: plugin.clone(),
            stderr,
            services,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_fuel(limits.fuel)?;
        let ticks = (limits.timeout.as_millis() as u64 / EPOCH_TICK.as_millis() as u64).max(1);
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        Ok(store)
    }

    /// Run one call of a router plugin. Low level: callers with a loaded plugin use
    /// [`LoadedPlugin::call_router`](super::LoadedPlugin::call_router), which also checks the
    /// world and counts the call.
    pub(crate) fn call_router(
        &self,
        plugin: &Arc<str>,
        pre: &router_world::RouterPre<HostState>,
        limits: &PluginLimits,
        config: &str,
        events: &[super::bindings::WitEvent],
    ) -> Result<Vec<super::bindings::WitRouteDecision>, PluginError> {
        self.run(plugin, limits, None, |store| {
            let instance = pre.instantiate(&mut *store)?;
            instance
                .outbox_plugin_router_api()
                .call_route(&mut *store, config, events)
        })
    }

    /// Run one call of a handler plugin with the receiver's services. Low level: callers with a
    /// loaded plugin use [`LoadedPlugin::call_handler`](super::LoadedPlugin::call_handler).
    pub(crate) fn call_handler(
        &self,
        plugin: &Arc<str>,
        pre: &handler_world::HandlerPre<HostState>,
        limits: &PluginLimits,
        services: Option<Box<dyn HandlerServices>>,
        config: &str,
        delivery: &super::bindings::Delivery,
    ) -> Result<super::bindings::Outcome, PluginError> {
        self.run(plugin, limits, services, |store| {
            let instance = pre.instantiate(&mut *store)?;
            instance
                .outbox_plugin_handler_api()
                .call_handle(&mut *store, config, delivery)
        })
    }

    /// Run one call of a policy plugin. Low level: callers with a loaded plugin use
    /// [`LoadedPlugin::call_policy`](super::LoadedPlugin::call_policy).
    pub(crate) fn call_policy(
        &self,
        plugin: &Arc<str>,
        pre: &policy_world::PolicyPre<HostState>,
        limits: &PluginLimits,
        config: &str,
        request: &super::bindings::CapabilityRequest,
    ) -> Result<super::bindings::Decision, PluginError> {
        self.run(plugin, limits, None, |store| {
            let instance = pre.instantiate(&mut *store)?;
            instance
                .outbox_plugin_policy_api()
                .call_check(&mut *store, config, request)
        })
    }

    /// Average cost of creating a store and instantiating a pre-linked plugin, without calling
    /// it (what every call pays before the guest runs); see
    /// [`LoadedPlugin::time_instantiation`](super::LoadedPlugin::time_instantiation).
    pub(crate) fn time_instantiation(
        &self,
        plugin: &Arc<str>,
        prepared: &Prepared,
        limits: &PluginLimits,
        iterations: u32,
    ) -> Result<Duration, PluginError> {
        let fail = |e: wasmtime::Error| PluginError::Call {
            plugin: plugin.to_string(),
            message: format!("{e:#}"),
        };
        let started = Instant::now();
        for _ in 0..iterations {
            let mut store = self.store(plugin, limits, None).map_err(fail)?;
            match prepared {
                Prepared::Router(pre) => {
                    pre.instantiate(&mut store).map_err(fail)?;
                }
                Prepared::Handler(pre) => {
                    pre.instantiate(&mut store).map_err(fail)?;
                }
                Prepared::Policy(pre) => {
                    pre.instantiate(&mut store).map_err(fail)?;
                }
            }
        }
        Ok(started.elapsed() / iterations.max(1))
    }

    fn run<R>(
        &self,
        plugin: &Arc<str>,
        limits: &PluginLimits,
        services: Option<Box<dyn HandlerServices>>,
        call: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        let started = Instant::now();
        let mut store = self
            .store(plugin, limits, services)
            .map_err(|e| PluginError::Call {
                plugin: plugin.to_string(),
                message: format!("cannot create a store: {e:#}"),
            })?;
        let result = call(&mut store);
        metrics::histogram!("outbox_plugin_call_seconds", "plugin" => plugin.to_string())
            .record(started.elapsed().as_secs_f64());
        result.map_err(|e| PluginError::Call {
            plugin: plugin.to_string(),
            message: describe_failure(&e, limits, &store),
        })
    }
}

fn engine_config(pooling: bool) -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    config.epoch_interruption(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    if pooling {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(256)
            .total_core_instances(1024)
            .total_memories(256)
            .total_tables(512)
            .max_memory_size((MAX_MEMORY_MB as usize) << 20);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// A readable account of a failed call: which limit was hit, or the trap and what the guest
/// printed to stderr (a Rust panic message, say).
fn describe_failure(
    error: &wasmtime::Error,
    limits: &PluginLimits,
    store: &Store<HostState>,
) -> String {
    let mut message = match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!(
            "ran out of fuel ({} units per call): an endless loop?",
            limits.fuel
        ),
        Some(Trap::Interrupt) => format!(
            "exceeded its time limit of {} ms",
            limits.timeout.as_millis()
        ),
        Some(trap) => format!("trapped: {trap}"),
        None => {
            let root = error.root_cause().to_string();
            let root = root.lines().next().unwrap_or_default();
            if format!("{error:#}").contains("forcing trap when growing memory") {
                format!(
                    "exceeded its memory limit of {} MiB ({root})",
                    limits.memory_bytes >> 20
                )
            } else {
                format!("failed: {root}")
            }
        }
    };
    let stderr = store.data().stderr.contents();
    let stderr = String::from_utf8_lossy(&stderr);
    let stderr: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let stderr = stderr.join(" ");
    if !stderr.is_empty() {
        let tail: String = stderr.chars().take(600).collect();
        message.push_str(&format!(" (guest stderr: {tail})"));
    }
    message
}

/// Whether a plugin built against WIT `version` works with the host's `host` version (semver:
/// same major, and for 0.x the same minor).
pub fn compatible(version: &str, host: &str) -> bool {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    match (parse(version), parse(host)) {
        (Some((0, a)), Some((0, b))) => a == b,
        (Some((a, _)), Some((b, _))) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::compatible;

    #[test]
    fn wit_versions_follow_semver() {
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.3", "0.1.0"));
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("1.0.0", "0.1.0"));
        assert!(!compatible("", "0.1.0"));
    }
}
