//! The wasmtime engine, narrowed to the one way outbox uses it.
//!
//! One [`PluginEngine`] per process: component model, pooling allocator, fuel metering and epoch
//! interruption (a ticker thread advances the epoch every millisecond while a call runs, and
//! rests while none does: `epoch_ticker`). Each call gets a fresh store from a pre-linked
//! `InstancePre`, with a [`CallLimiter`], fuel, a deadline and a deny-everything WASI context
//! (no files, env, sockets or inherited stdio; the guest's stderr is captured into memory so a
//! panic message can explain a trap).
//!
//! Limits of one call, and what enforces each:
//! - **time** (`timeout_ms`) covers computing *and* waiting. Every call is a future (wasmtime's
//!   async support: `instantiate_async`, async exports, WASI linked with `add_to_linker_async`,
//!   async host functions), and the whole of it (the wait for a call slot, instantiation, the
//!   guest, every host call it makes: WASI sleeps and polls, `kv`, `publish`, `http`, the policy
//!   calls those make) runs under one `tokio::time::timeout_at` deadline. A guest that sleeps or
//!   waits on a slow host call is dropped at the deadline: dropping the future unwinds the
//!   guest's fiber and drops the store, which gives its instance and memories back to the pool.
//!   A guest that computes yields to the executor at every epoch tick, and the first tick
//!   past the deadline traps it; fuel bounds its instructions. Either way the error reads
//!   "exceeded its time limit of N ms".
//! - **memory** (`memory_mb`) caps the bytes of *all* linear memories of the call together (a
//!   component may define several), and the counts of core instances, tables and memories are
//!   capped per call ([`CallLimiter`]), so one call holds a bounded share of the pooling
//!   allocator.
//! - **concurrency** (`max_concurrency`): a plugin runs at most that many calls at once (a
//!   semaphore per plugin, [`CallSlots`]), so a flood of calls of one plugin cannot take every
//!   pooling slot from the others; the wait for a slot counts against the call's time limit.
//! - **log** (`log.write`): each message is clipped and its control characters escaped (a guest
//!   cannot forge a host log line), and a call logs at most [`MAX_LOG_MESSAGES_PER_CALL`]
//!   messages and [`MAX_LOG_BYTES_PER_CALL`] bytes; the rest is dropped and counted in one
//!   "log budget exceeded" line.
//!
//! Where a call runs: a call is a future, and a running guest gives its thread back at every
//! epoch tick (1 ms; `tokio::task::yield_now`, so other tasks run before it resumes). So the
//! receivers await a handler call on their own task
//! ([`LoadedPlugin::handle`](super::LoadedPlugin::handle)): no hop to a blocking thread and
//! back per entry. The synchronous call methods (`call_router`, `call_handler`, `call_policy`)
//! drive the same future with [`block_on`] on a blocking thread, for a caller that has one (the
//! dispatcher's large batches, offline tools); the dispatcher awaits a small batch's router call
//! on its own task ([`LoadedPlugin::route`](super::LoadedPlugin::route)). Nested calls (the
//! policy a handler's host call asks) are awaited inside the outer call's future.
//!
//! The store data of a call and the host functions a guest reaches through it (`log`, and the
//! handler's `publish`, `kv`, `http` handed to its [`HandlerServices`]) live in `host_state`; the
//! wasmtime configuration (pooling allocator) in `limits`.
//!
//! Never: lets a guest hold a thread for more than one epoch tick at a time, or a call outlive
//! its deadline; hands a guest a file, an environment variable, a socket or the host's stdio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::WasiCtxBuilder;

use super::bindings::{handler_world, policy_world, router_world};
use super::epoch_ticker::EpochTicker;
pub use super::host_state::HandlerServices;
pub(crate) use super::host_state::HostState;
use super::host_state::{describe_failure, push_stderr, report_dropped_logs};
use super::legacy::{self, PreparedV0_1, PREVIOUS_WIT_VERSION};
use super::limits::{engine_config, CallLimiter, LogBudget};
pub use super::limits::{
    sanitize_log_message, CallSlots, CallUsage, PluginLimits, DEFAULT_MAX_CONCURRENCY,
    MAX_CONCURRENCY, MAX_INSTANCES_PER_CALL, MAX_LOG_BYTES_PER_CALL, MAX_LOG_MESSAGES_PER_CALL,
    MAX_LOG_MESSAGE_BYTES, MAX_MEMORIES_PER_CALL, MAX_MEMORY_MB, MAX_TABLES_PER_CALL,
    MAX_TABLE_ELEMENTS_PER_CALL,
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

/// Who a call is of: the plugin's name, its limits and its call slots.
#[derive(Clone, Copy)]
pub(crate) struct CallOf<'a> {
    /// Plugin name (in errors, logs and metrics).
    pub(crate) plugin: &'a Arc<str>,
    /// Its limits.
    pub(crate) limits: &'a PluginLimits,
    /// Its call slots.
    pub(crate) slots: &'a CallSlots,
    /// Whether waiting for a call slot counts against the call's time limit.
    pub(crate) slot_wait: SlotWait,
    /// Where to record what the call used of its limits, if anywhere.
    pub(crate) usage: Option<&'a std::sync::Mutex<CallUsage>>,
}

/// How a call's wait for one of its plugin's call slots is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotWait {
    /// Against the call's time limit, like everything else the call waits for: the caller must
    /// go on (the dispatcher's router, a policy check inside another call, the CLI).
    WithinTimeLimit,
    /// Before the call's time limit starts: the caller holds its work safely while it waits
    /// (a receiver, whose claim on the entry is renewed meanwhile), so a queue of calls behind
    /// `max_concurrency` is backpressure, not the plugin's time.
    BeforeTimeLimit,
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
    /// A plugin of any world built against the previous contract, `outbox:plugin@0.1.x`.
    V0_1(PreparedV0_1),
}

impl Prepared {
    /// The world of this plugin.
    pub(crate) fn world(&self) -> World {
        match self {
            Prepared::Router(_) => World::Router,
            Prepared::Handler(_) => World::Handler,
            Prepared::Policy(_) => World::Policy,
            Prepared::V0_1(pre) => pre.world(),
        }
    }

    /// The component it was compiled from.
    pub(crate) fn component(&self) -> &Component {
        match self {
            Prepared::Router(pre) => pre.instance_pre().component(),
            Prepared::Handler(pre) => pre.instance_pre().component(),
            Prepared::Policy(pre) => pre.instance_pre().component(),
            Prepared::V0_1(pre) => pre.component(),
        }
    }
}

/// Which version of the contract a component was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contract {
    /// The current one, [`WIT_VERSION`] (any compatible version).
    Current,
    /// The previous one, [`PREVIOUS_WIT_VERSION`] (any compatible version).
    V0_1,
}

/// The process's wasmtime engine and one linker per world and contract version.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    /// Advances the epoch while a store of this engine lives.
    ticker: EpochTicker,
    /// The compile cache in use, if any (its hit and miss counts).
    cache: Option<wasmtime::Cache>,
    router: Arc<Linker<HostState>>,
    handler: Arc<Linker<HostState>>,
    policy: Arc<Linker<HostState>>,
    /// Linkers of the previous contract: router, handler, policy.
    v0_1: Arc<[Linker<HostState>; 3]>,
}

impl PluginEngine {
    /// Create the engine (pooling allocator when the OS allows it) and start its epoch ticker;
    /// every plugin is compiled (no compile cache).
    pub fn new() -> Result<Self, PluginError> {
        Self::with_compile_cache(None)
    }

    /// [`new`](Self::new), keeping compiled plugins in `cache` (see
    /// [`compile_cache`](super::compile_cache)) so a plugin compiled before, by this process or
    /// an earlier one, is loaded without compiling it again.
    pub fn with_compile_cache(cache: Option<wasmtime::Cache>) -> Result<Self, PluginError> {
        let configured = |pooling: bool| {
            let mut config = engine_config(pooling);
            config.cache(cache.clone());
            Engine::new(&config)
        };
        let engine = match configured(true) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "pooling allocator unavailable; using on-demand instances");
                configured(false).map_err(|e| PluginError::Engine(format!("{e:#}")))?
            }
        };
        let ticker = EpochTicker::start(&engine)
            .map_err(|e| PluginError::Engine(format!("epoch ticker: {e}")))?;
        let linker = |add: &dyn Fn(&mut Linker<HostState>) -> wasmtime::Result<()>| -> Result<Linker<HostState>, PluginError> {
            let mut linker = Linker::new(&engine);
            wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
            add(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
            Ok(linker)
        };
        use wasmtime::component::HasSelf;
        let router = linker(&|l| router_world::Router::add_to_linker::<_, HasSelf<_>>(l, |s| s))?;
        let handler =
            linker(&|l| handler_world::Handler::add_to_linker::<_, HasSelf<_>>(l, |s| s))?;
        let policy = linker(&|l| policy_world::Policy::add_to_linker::<_, HasSelf<_>>(l, |s| s))?;
        let v0_1 = [World::Router, World::Handler, World::Policy]
            .map(|world| linker(&|l| legacy::add_to_linker(l, world)));
        let [r, h, p] = v0_1;
        Ok(Self {
            engine,
            ticker,
            cache,
            router: Arc::new(router),
            handler: Arc::new(handler),
            policy: Arc::new(policy),
            v0_1: Arc::new([r?, h?, p?]),
        })
    }

    /// Plugins loaded from the compile cache and plugins compiled (and stored in it) by this
    /// engine so far; `None` without a cache.
    pub fn compile_cache_counts(&self) -> Option<(usize, usize)> {
        self.cache
            .as_ref()
            .map(|c| (c.cache_hits(), c.cache_misses()))
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
        let (world, contract) = self.world_of(&component).map_err(invalid)?;
        let linker = match (contract, world) {
            (Contract::Current, World::Router) => &*self.router,
            (Contract::Current, World::Handler) => &*self.handler,
            (Contract::Current, World::Policy) => &*self.policy,
            (Contract::V0_1, World::Router) => &self.v0_1[0],
            (Contract::V0_1, World::Handler) => &self.v0_1[1],
            (Contract::V0_1, World::Policy) => &self.v0_1[2],
        };
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            invalid(format!(
                "does not fit the {world} world (it imports something the host does not grant to {world} plugins): {e:#}"
            ))
        })?;
        let fit =
            |e: wasmtime::Error| invalid(format!("exports do not match the {world} world: {e:#}"));
        Ok(match (contract, world) {
            (Contract::V0_1, world) => Prepared::V0_1(PreparedV0_1::new(world, pre).map_err(fit)?),
            (Contract::Current, World::Router) => {
                Prepared::Router(router_world::RouterPre::new(pre).map_err(fit)?)
            }
            (Contract::Current, World::Handler) => {
                Prepared::Handler(handler_world::HandlerPre::new(pre).map_err(fit)?)
            }
            (Contract::Current, World::Policy) => {
                Prepared::Policy(policy_world::PolicyPre::new(pre).map_err(fit)?)
            }
        })
    }

    /// The world a component exports and the contract version it was built against, refusing
    /// a WIT package version the host does not bind.
    fn world_of(&self, component: &Component) -> Result<(World, Contract), String> {
        let ty = component.component_type();
        let mut found = Vec::new();
        for (name, _) in ty.exports(&self.engine) {
            let Some(rest) = name.strip_prefix("outbox:plugin/") else {
                continue;
            };
            let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
            for world in [World::Router, World::Handler, World::Policy] {
                if iface == world.export() {
                    let contract = if compatible(version, WIT_VERSION) {
                        Contract::Current
                    } else if compatible(version, PREVIOUS_WIT_VERSION) {
                        Contract::V0_1
                    } else {
                        return Err(format!(
                            "built against outbox:plugin@{version}, but this host implements outbox:plugin@{WIT_VERSION} (and still loads plugins built against outbox:plugin@{PREVIOUS_WIT_VERSION}): rebuild it with a compatible outbox-plugin-sdk"
                        ));
                    };
                    found.push((world, contract));
                }
            }
        }
        match found.as_slice() {
            [found] => Ok(*found),
            [] => Err("exports none of outbox:plugin/router-api, handler-api or policy-api: is it built with outbox-plugin-sdk's export_router!/export_handler!/export_policy!?".into()),
            _ => Err(format!(
                "exports several worlds ({:?}); a plugin implements exactly one",
                found.iter().map(|(world, _)| *world).collect::<Vec<_>>()
            )),
        }
    }

    fn store(
        &self,
        plugin: &Arc<str>,
        limits: &PluginLimits,
        time_left: Duration,
        services: Option<Box<dyn HandlerServices>>,
        stderr: MemoryOutputPipe,
    ) -> Result<Store<HostState>, wasmtime::Error> {
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .allow_blocking_current_thread(false)
            .build();
        let state = HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: CallLimiter::new(limits.memory_bytes),
            plugin: plugin.clone(),
            stderr,
            services,
            log: LogBudget::default(),
            _ticking: self.ticker.ticking(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_fuel(limits.fuel)?;
        // Every epoch tick a running guest gives its thread back to the executor, so a guest
        // that computes holds an executor thread for one tick at a time; once the call's
        // deadline has passed, the next tick traps it instead.
        let deadline = Instant::now() + time_left;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::task::yield_now()),
                ))
            }
        });
        Ok(store)
    }

    /// Run one call of a router plugin. Low level: callers with a loaded plugin use
    /// [`LoadedPlugin::call_router`](super::LoadedPlugin::call_router), which also checks the
    /// world and counts the call.
    pub(crate) async fn call_router(
        &self,
        of: CallOf<'_>,
        prepared: &Prepared,
        config: &str,
        events: &[super::bindings::WitEvent],
    ) -> Result<Vec<super::bindings::WitRouteDecision>, PluginError> {
        self.run(
            of,
            None,
            async |store: &mut Store<HostState>| match prepared {
                Prepared::Router(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance
                        .outbox_plugin_router_api()
                        .call_route(&mut *store, config, events)
                        .await
                }
                Prepared::V0_1(PreparedV0_1::Router(pre)) => {
                    legacy::route(store, pre, config, events).await
                }
                other => Err(not_of_world(other, World::Router)),
            },
        )
        .await
    }

    /// Run one call of a handler plugin with the receiver's services. Low level: callers with a
    /// loaded plugin use [`LoadedPlugin::call_handler`](super::LoadedPlugin::call_handler).
    pub(crate) async fn call_handler(
        &self,
        of: CallOf<'_>,
        prepared: &Prepared,
        services: Option<Box<dyn HandlerServices>>,
        config: &str,
        delivery: &super::bindings::Delivery,
    ) -> Result<super::bindings::Outcome, PluginError> {
        self.run(
            of,
            services,
            async |store: &mut Store<HostState>| match prepared {
                Prepared::Handler(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance
                        .outbox_plugin_handler_api()
                        .call_handle(&mut *store, config, delivery)
                        .await
                }
                Prepared::V0_1(PreparedV0_1::Handler(pre)) => {
                    legacy::handle(store, pre, config, delivery).await
                }
                other => Err(not_of_world(other, World::Handler)),
            },
        )
        .await
    }

    /// Run one call of a policy plugin. Low level: callers with a loaded plugin use
    /// [`LoadedPlugin::call_policy`](super::LoadedPlugin::call_policy).
    pub(crate) async fn call_policy(
        &self,
        of: CallOf<'_>,
        prepared: &Prepared,
        config: &str,
        request: &super::bindings::CapabilityRequest,
    ) -> Result<super::bindings::Decision, PluginError> {
        self.run(
            of,
            None,
            async |store: &mut Store<HostState>| match prepared {
                Prepared::Policy(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance
                        .outbox_plugin_policy_api()
                        .call_check(&mut *store, config, request)
                        .await
                }
                Prepared::V0_1(PreparedV0_1::Policy(pre)) => {
                    legacy::check(store, pre, config, request).await
                }
                other => Err(not_of_world(other, World::Policy)),
            },
        )
        .await
    }

    /// Average cost of creating a store and instantiating a pre-linked plugin, without calling
    /// it (what every call pays before the guest runs); see
    /// [`LoadedPlugin::time_instantiation`](super::LoadedPlugin::time_instantiation).
    pub(crate) async fn time_instantiation(
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
            let stderr = MemoryOutputPipe::new(8192);
            let mut store = self
                .store(plugin, limits, limits.timeout, None, stderr)
                .map_err(fail)?;
            match prepared {
                Prepared::Router(pre) => {
                    pre.instantiate_async(&mut store).await.map_err(fail)?;
                }
                Prepared::Handler(pre) => {
                    pre.instantiate_async(&mut store).await.map_err(fail)?;
                }
                Prepared::Policy(pre) => {
                    pre.instantiate_async(&mut store).await.map_err(fail)?;
                }
                Prepared::V0_1(pre) => {
                    pre.instantiate(&mut store).await.map_err(fail)?;
                }
            }
        }
        Ok(started.elapsed() / iterations.max(1))
    }

    /// One call: wait for a call slot, make a store, run `call` in it, all before one deadline
    /// (`limits.timeout` from now). At the deadline the call's future is dropped wherever it
    /// waits (for a slot, in a WASI sleep or poll, in a host call); a computing guest is trapped
    /// by the epoch deadline set to the same instant.
    async fn run<R>(
        &self,
        of: CallOf<'_>,
        services: Option<Box<dyn HandlerServices>>,
        call: impl AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        let CallOf {
            plugin,
            limits,
            slots,
            slot_wait,
            usage,
        } = of;
        let failed = |message: String| PluginError::Call {
            plugin: plugin.to_string(),
            message,
        };
        let waited = match slot_wait {
            SlotWait::WithinTimeLimit => None,
            SlotWait::BeforeTimeLimit => match slots.semaphore.acquire().await {
                Ok(permit) => Some(permit),
                Err(_) => return Err(failed("its call slots are closed".into())),
            },
        };
        let started = Instant::now();
        let deadline = tokio::time::Instant::now()
            .checked_add(limits.timeout)
            .unwrap_or_else(far_future);
        let acquire = async {
            match waited {
                Some(permit) => Ok(permit),
                None => slots.semaphore.acquire().await,
            }
        };
        let _permit = match tokio::time::timeout_at(deadline, acquire).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(failed("its call slots are closed".into())),
            Err(_) => {
                metrics::counter!("outbox_plugin_timeouts_total", "plugin" => plugin.to_string())
                    .increment(1);
                return Err(failed(format!(
                    "exceeded its time limit of {} ms waiting for a call slot (all {} of its max_concurrency slots were busy)",
                    limits.timeout.as_millis(),
                    slots.size()
                )));
            }
        };
        let stderr = MemoryOutputPipe::new(8192);
        let time_left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let mut store = self
            .store(plugin, limits, time_left, services, stderr.clone())
            .map_err(|e| failed(format!("cannot create a store: {e:#}")))?;
        let result = tokio::time::timeout_at(deadline, call(&mut store)).await;
        if let Some(Ok(mut usage)) = usage.map(|u| u.lock()) {
            *usage = CallUsage {
                fuel: limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0)),
                memory_bytes: store.data().limiter.memory_used(),
            };
        }
        metrics::histogram!("outbox_plugin_call_seconds", "plugin" => plugin.to_string())
            .record(started.elapsed().as_secs_f64());
        report_dropped_logs(plugin, &store.data().log);
        match result {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(failed(describe_failure(&e, limits, &store))),
            Err(_) => {
                // The call's future is gone (its fiber unwound); dropping the store below gives
                // its instance and memories back to the pool.
                metrics::counter!("outbox_plugin_timeouts_total", "plugin" => plugin.to_string())
                    .increment(1);
                let mut message = format!(
                    "exceeded its time limit of {} ms while waiting (a sleep, a poll or a host call)",
                    limits.timeout.as_millis()
                );
                push_stderr(&mut message, &stderr);
                Err(failed(message))
            }
        }
    }
}

/// The error of a call made on a plugin of another world (the registry checks the world before
/// calling, so this is a bug if it is ever seen).
fn not_of_world(prepared: &Prepared, expected: World) -> wasmtime::Error {
    wasmtime::Error::msg(format!(
        "called as a {expected} plugin, but it is a {} plugin",
        prepared.world()
    ))
}

/// An instant no call reaches (a timeout too large to add to now).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86400 * 365 * 30)
}

/// Drive a plugin call's future to completion on the current thread, which should be a
/// blocking thread (`spawn_blocking`, or a thread outside any runtime): the guest runs on this
/// thread. Inside a tokio runtime it uses the runtime's timers and I/O (the receiver's Redis and
/// database connections); outside one, a small runtime of the engine.
///
/// Called by mistake from an async task of a multi-threaded runtime (as `outbox run` has), the
/// call still runs: `block_in_place` first hands the worker's other tasks to another thread,
/// so nothing panics and the executor keeps running. Async code should still not rely on it:
/// it awaits [`LoadedPlugin::handle`](super::LoadedPlugin::handle), or routes with
/// [`route_one_on_blocking_thread`](crate::routing::route_one_on_blocking_thread).
///
/// # Panics
///
/// When called from an async task of a current-thread runtime (tokio can block no executor
/// thread there); run the call in `tokio::task::spawn_blocking` instead.
pub fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, PluginError> {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        return Ok(match handle.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(future))
            }
            _ => handle.block_on(future),
        });
    }
    static FALLBACK: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    let runtime = FALLBACK.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("outbox-plugin-timers")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    match runtime {
        Ok(runtime) => Ok(runtime.handle().block_on(future)),
        Err(e) => Err(PluginError::Engine(format!(
            "no tokio runtime to run a plugin call on: {e}"
        ))),
    }
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
    use super::*;

    #[test]
    fn wit_versions_follow_semver() {
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.3", "0.1.0"));
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("1.0.0", "0.1.0"));
        assert!(!compatible("", "0.1.0"));
    }
}
