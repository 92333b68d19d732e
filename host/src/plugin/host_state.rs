//! The store data of one plugin call and the host functions a guest reaches through it.
//!
//! Owns [`HostState`] (the WASI context, the call's resource limiter, its log budget, the
//! captured stderr and the handler's [`HandlerServices`]), the host side of the `log`,
//! `publish`, `kv` and `http` imports (each a thin hand-over to the services: the checks live
//! in [`crate::capability`]), and how a call's end is told: the dropped-log line and the
//! account of a failure. It never hands a guest a file, an environment variable, a socket or
//! the host's stdio, and never lets a guest's log message through unbounded or unescaped.

use std::sync::Arc;

use futures::future::BoxFuture;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{
    handler_world, router_world, HostCallError, HttpRequest, HttpResponse, WitNewEvent,
};
use super::epoch_ticker::Ticking;
use super::limits::{
    sanitize_log_message, CallLimiter, LogBudget, PluginLimits, MAX_LOG_BYTES_PER_CALL,
    MAX_LOG_MESSAGES_PER_CALL,
};
use super::PLUGIN_LOG_TARGET;

/// Host services a handler plugin may call (`publish`, `kv`, `http`), provided for the delivery
/// being handled by a receiver or by `outbox plugins call` (their one implementation, in
/// [`crate::capability`], runs every call through its capability's checks and the capability
/// policy before its backend does anything). Each returns a future that the call
/// awaits under its time limit: a slow database, Redis or network answer is cut at the call's
/// deadline (the future is dropped).
pub trait HandlerServices: Send {
    /// `publish.send`.
    fn publish(&mut self, event: WitNewEvent) -> BoxFuture<'_, Result<i64, HostCallError>>;
    /// `kv.get`.
    fn kv_get(&mut self, key: String) -> BoxFuture<'_, Result<Option<String>, HostCallError>>;
    /// `kv.set`.
    fn kv_set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<(), HostCallError>>;
    /// `kv.delete`.
    fn kv_delete(&mut self, key: String) -> BoxFuture<'_, Result<bool, HostCallError>>;
    /// `kv.increment`.
    fn kv_increment(
        &mut self,
        key: String,
        delta: i64,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<i64, HostCallError>>;
    /// `kv.compare-and-set`.
    fn kv_compare_and_set(
        &mut self,
        key: String,
        expected: Option<String>,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> BoxFuture<'_, Result<bool, HostCallError>>;
    /// `http.send`.
    fn http_send(
        &mut self,
        request: HttpRequest,
    ) -> BoxFuture<'_, Result<HttpResponse, HostCallError>>;
}

/// The store data of one call.
pub(crate) struct HostState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limiter: CallLimiter,
    pub(super) plugin: Arc<str>,
    pub(super) stderr: MemoryOutputPipe,
    pub(super) services: Option<Box<dyn HandlerServices>>,
    pub(super) log: LogBudget,
    /// Keeps the epoch ticking while this store lives.
    pub(super) _ticking: Ticking,
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
    /// A message at a level the host does not log (its `RUST_LOG`) costs nothing more than its
    /// copy out of the guest: it is neither escaped nor counted against the call's budget.
    async fn write(&mut self, level: router_world::outbox::plugin::log::Level, message: String) {
        use router_world::outbox::plugin::log::Level;
        let logged = match level {
            Level::Trace => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::TRACE),
            Level::Debug => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::DEBUG),
            Level::Info => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::INFO),
            Level::Warn => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::WARN),
            Level::Error => tracing::enabled!(target: PLUGIN_LOG_TARGET, tracing::Level::ERROR),
        };
        if !logged {
            return;
        }
        let budget = &mut self.log;
        if budget.messages >= MAX_LOG_MESSAGES_PER_CALL || budget.bytes >= MAX_LOG_BYTES_PER_CALL {
            // Spent: drop without looking at the message.
            budget.dropped += 1;
            return;
        }
        let message = sanitize_log_message(&message);
        if budget.bytes + message.len() > MAX_LOG_BYTES_PER_CALL {
            budget.bytes = MAX_LOG_BYTES_PER_CALL;
            budget.dropped += 1;
            return;
        }
        budget.messages += 1;
        budget.bytes += message.len();
        let plugin = &*self.plugin;
        match level {
            Level::Trace => tracing::trace!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
            Level::Debug => tracing::debug!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
            Level::Info => tracing::info!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
            Level::Warn => tracing::warn!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
            Level::Error => tracing::error!(target: PLUGIN_LOG_TARGET, plugin, "{message}"),
        }
    }
}

fn unavailable(what: &str) -> HostCallError {
    HostCallError::Denied(format!(
        "{what} is not available outside a receiver (offline call)"
    ))
}

impl handler_world::outbox::plugin::publish::Host for HostState {
    async fn send(&mut self, event: WitNewEvent) -> Result<i64, HostCallError> {
        match &mut self.services {
            Some(s) => s.publish(event).await,
            None => Err(unavailable("publish")),
        }
    }
}

impl handler_world::outbox::plugin::kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<String>, HostCallError> {
        match &mut self.services {
            Some(s) => s.kv_get(key).await,
            None => Err(unavailable("kv")),
        }
    }
    async fn set(
        &mut self,
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> Result<(), HostCallError> {
        match &mut self.services {
            Some(s) => s.kv_set(key, value, ttl_seconds).await,
            None => Err(unavailable("kv")),
        }
    }
    async fn delete(&mut self, key: String) -> Result<bool, HostCallError> {
        match &mut self.services {
            Some(s) => s.kv_delete(key).await,
            None => Err(unavailable("kv")),
        }
    }
    async fn increment(
        &mut self,
        key: String,
        delta: i64,
        ttl_seconds: Option<u32>,
    ) -> Result<i64, HostCallError> {
        match &mut self.services {
            Some(s) => s.kv_increment(key, delta, ttl_seconds).await,
            None => Err(unavailable("kv")),
        }
    }
    async fn compare_and_set(
        &mut self,
        key: String,
        expected: Option<String>,
        value: String,
        ttl_seconds: Option<u32>,
    ) -> Result<bool, HostCallError> {
        match &mut self.services {
            Some(s) => {
                s.kv_compare_and_set(key, expected, value, ttl_seconds)
                    .await
            }
            None => Err(unavailable("kv")),
        }
    }
}

impl handler_world::outbox::plugin::http::Host for HostState {
    async fn send(&mut self, request: HttpRequest) -> Result<HttpResponse, HostCallError> {
        match &mut self.services {
            Some(s) => s.http_send(request).await,
            None => Err(unavailable("http")),
        }
    }
}

/// One line for the log messages a call dropped over its budget.
pub(super) fn report_dropped_logs(plugin: &str, log: &LogBudget) {
    if log.dropped > 0 {
        metrics::counter!("outbox_plugin_log_dropped_total", "plugin" => plugin.to_string())
            .increment(log.dropped as u64);
        tracing::warn!(
            target: PLUGIN_LOG_TARGET,
            plugin,
            dropped = log.dropped,
            "log budget exceeded: {} messages of this call dropped (budget: {MAX_LOG_MESSAGES_PER_CALL} messages, {MAX_LOG_BYTES_PER_CALL} bytes per call)",
            log.dropped
        );
    }
}

/// A readable account of a failed call: which limit was hit, or the trap and what the guest
/// printed to stderr (a Rust panic message, say).
pub(super) fn describe_failure(
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
        _ if store.data().limiter.exceeded.is_some() => {
            store.data().limiter.exceeded.clone().unwrap_or_default()
        }
        Some(trap) => format!("trapped: {trap}"),
        None => {
            let root = error.root_cause().to_string();
            let root = root.lines().next().unwrap_or_default();
            format!("failed: {root}")
        }
    };
    push_stderr(&mut message, &store.data().stderr);
    message
}

/// Append what the guest printed to stderr (a Rust panic message, say), clipped.
pub(super) fn push_stderr(message: &mut String, stderr: &MemoryOutputPipe) {
    let stderr = stderr.contents();
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
}
