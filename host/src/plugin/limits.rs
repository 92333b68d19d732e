//! Limits of one plugin call, and bounds on what a guest hands back: the per-plugin limits
//! (`fuel`, `memory_mb`, `timeout_ms`, `max_concurrency`), the per-call caps and the pool sizes
//! they are checked against, the call slots of a plugin, the resource limiter of a call's store,
//! the per-call log budget, how a guest's log message is made fit to keep (a reason is
//! bounded by [`crate::naming::bounded_reason`]), and the engine's wasmtime configuration (the
//! pooling allocator those pool sizes configure). The engine (`engine.rs`) applies them; nothing
//! here runs WebAssembly.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::{InstanceAllocationStrategy, PoolingAllocationConfig};

/// Per-call limits of one plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// Fuel per call (about one unit per WebAssembly instruction).
    pub fuel: u64,
    /// Cap on the bytes of all linear memories of one call together.
    pub memory_bytes: usize,
    /// Wall-clock limit per call: computing, waiting for a call slot, sleeping and host calls.
    pub timeout: Duration,
    /// Calls of this plugin running at once; more wait for a slot (within their time limit).
    pub max_concurrency: usize,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            fuel: 2_000_000_000,
            memory_bytes: 64 << 20,
            timeout: Duration::from_millis(2000),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
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
                .map(|mb| usize::try_from(mb.min(MAX_MEMORY_MB) << 20).unwrap_or(usize::MAX))
                .unwrap_or(d.memory_bytes),
            timeout: spec
                .timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(d.timeout),
            max_concurrency: spec
                .max_concurrency
                .map(|n| {
                    usize::try_from(n)
                        .unwrap_or(usize::MAX)
                        .clamp(1, MAX_CONCURRENCY)
                })
                .unwrap_or(d.max_concurrency),
        }
    }
}

/// What one call used of its limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallUsage {
    /// Fuel burnt (about one unit per WebAssembly instruction).
    pub fuel: u64,
    /// Bytes its linear memories held together at the end (they only grow during a call: its
    /// peak).
    pub memory_bytes: usize,
}

/// Largest memory cap a plugin may ask for (also the pooling allocator's slot size).
pub const MAX_MEMORY_MB: u64 = 512;

/// Calls of one plugin running at once when its spec sets no `max_concurrency`.
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;

/// Largest `max_concurrency` a plugin may ask for: with the per-call caps below, one plugin
/// then holds at most half of the pooling allocator's instances, memories and tables (the
/// bound `routes.toml` is checked against, [`crate::naming::MAX_PLUGIN_CONCURRENCY`]).
pub const MAX_CONCURRENCY: usize = crate::naming::MAX_PLUGIN_CONCURRENCY;

/// Core instances one call may create (a component built with the SDK makes a handful).
pub const MAX_INSTANCES_PER_CALL: usize = 16;

/// Linear memories one call may create (a component built with the SDK has one).
pub const MAX_MEMORIES_PER_CALL: usize = 4;

/// Tables one call may create.
pub const MAX_TABLES_PER_CALL: usize = 8;

/// Elements of all tables of one call together.
pub const MAX_TABLE_ELEMENTS_PER_CALL: usize = 100_000;

/// Longest `log.write` message kept, in bytes (after escaping control characters).
pub const MAX_LOG_MESSAGE_BYTES: usize = 4096;

/// `log.write` messages one call may write; later ones are dropped and counted.
pub const MAX_LOG_MESSAGES_PER_CALL: usize = 256;

/// Bytes of `log.write` messages one call may write; later ones are dropped and counted.
pub const MAX_LOG_BYTES_PER_CALL: usize = 64 << 10;

// The pooling allocator's capacity (see `engine_config`). One plugin at `MAX_CONCURRENCY` calls,
// each at the per-call caps, must leave at least half of every pool to the other plugins.
pub(super) const POOL_COMPONENT_INSTANCES: u32 = 256;
pub(super) const POOL_CORE_INSTANCES: u32 = 1024;
pub(super) const POOL_MEMORIES: u32 = 256;
pub(super) const POOL_TABLES: u32 = 512;
const _: () = {
    assert!(MAX_CONCURRENCY * 2 <= POOL_COMPONENT_INSTANCES as usize);
    assert!(MAX_CONCURRENCY * MAX_INSTANCES_PER_CALL * 2 <= POOL_CORE_INSTANCES as usize);
    assert!(MAX_CONCURRENCY * MAX_MEMORIES_PER_CALL * 2 <= POOL_MEMORIES as usize);
    assert!(MAX_CONCURRENCY * MAX_TABLES_PER_CALL * 2 <= POOL_TABLES as usize);
};

/// The call slots of one plugin: at most `max_concurrency` of its calls run at once. Shared by
/// the versions of a plugin (a hot reload keeps the slots while the limit is unchanged).
#[derive(Debug, Clone)]
pub struct CallSlots {
    pub(super) semaphore: Arc<tokio::sync::Semaphore>,
    size: usize,
}

impl CallSlots {
    /// `size` slots (at least one).
    pub fn new(size: usize) -> Self {
        let size = size.max(1);
        Self {
            semaphore: Arc::new(tokio::sync::Semaphore::new(size)),
            size,
        }
    }

    /// How many calls may run at once.
    pub fn size(&self) -> usize {
        self.size
    }

    /// How many calls hold a slot now (running, or creating their store).
    pub fn in_use(&self) -> usize {
        self.size.saturating_sub(self.semaphore.available_permits())
    }
}

/// The resource limiter of one call: all linear memories of the store together stay within the
/// plugin's memory cap (not each memory on its own), table elements likewise, and the counts of
/// core instances, tables and memories stay within the per-call caps.
#[derive(Debug)]
pub(crate) struct CallLimiter {
    memory_cap: usize,
    memory_used: usize,
    /// The last growth allowed, given back if the growth then fails.
    memory_pending: usize,
    table_elements_used: usize,
    table_pending: usize,
    /// Set when the call hit a cap: how [`describe_failure`] explains it.
    pub(super) exceeded: Option<String>,
}

/// A call hit a cap of its [`CallLimiter`] (the error a memory or table growth traps with).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LimitExceeded(String);

impl CallLimiter {
    /// A limiter capping all memories of the call at `memory_cap` bytes together.
    pub(crate) fn new(memory_cap: usize) -> Self {
        Self {
            memory_cap,
            memory_used: 0,
            memory_pending: 0,
            table_elements_used: 0,
            table_pending: 0,
            exceeded: None,
        }
    }

    /// Bytes of linear memory the call's memories hold now.
    pub(crate) fn memory_used(&self) -> usize {
        self.memory_used
    }

    fn exceed(&mut self, message: String) -> wasmtime::Error {
        self.exceeded = Some(message.clone());
        wasmtime::Error::new(LimitExceeded(message))
    }
}

/// `bytes` as MiB: whole (`64 MiB`), or to two decimals, cut not rounded, so a total just over a
/// whole cap never reads as the cap (`64.06 MiB`: memories grow by 64 KiB pages).
fn mib_text(bytes: usize) -> String {
    const MIB: usize = 1 << 20;
    match bytes % MIB {
        0 => format!("{} MiB", bytes / MIB),
        rest => format!("{}.{:02} MiB", bytes / MIB, rest * 100 / MIB),
    }
}

impl wasmtime::ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let more = desired.saturating_sub(current);
        let total = self.memory_used.saturating_add(more);
        if total > self.memory_cap {
            return Err(self.exceed(format!(
                "exceeded its memory limit of {} (all its memories together would hold {})",
                mib_text(self.memory_cap),
                mib_text(total)
            )));
        }
        self.memory_used = total;
        self.memory_pending = more;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_used -= std::mem::take(&mut self.memory_pending);
        Ok(())
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let more = desired.saturating_sub(current);
        let total = self.table_elements_used.saturating_add(more);
        if total > MAX_TABLE_ELEMENTS_PER_CALL {
            return Err(self.exceed(format!(
                "exceeded its table limit of {MAX_TABLE_ELEMENTS_PER_CALL} elements per call"
            )));
        }
        self.table_elements_used = total;
        self.table_pending = more;
        Ok(true)
    }

    fn table_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.table_elements_used -= std::mem::take(&mut self.table_pending);
        Ok(())
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES_PER_CALL
    }

    fn tables(&self) -> usize {
        MAX_TABLES_PER_CALL
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES_PER_CALL
    }
}

/// What one call has logged so far, against the per-call log budget.
#[derive(Debug, Default)]
pub(crate) struct LogBudget {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
    pub(crate) dropped: usize,
}

/// A guest's log message as the host logs it: control characters (newlines, carriage returns,
/// escape sequences), Unicode line/paragraph separators and bidirectional overrides are written
/// as visible escapes (`\n`, `\u{1b}`), so a message stays on one line and cannot pass for a
/// host log line; then clipped to [`MAX_LOG_MESSAGE_BYTES`] bytes at a character boundary.
/// A message that needs neither (printable ASCII within the limit, as most are) is returned as
/// it is, not copied.
pub fn sanitize_log_message(message: &str) -> Cow<'_, str> {
    use std::fmt::Write as _;
    if message.len() <= MAX_LOG_MESSAGE_BYTES
        && message.bytes().all(|b| (b' '..b'\x7f').contains(&b))
    {
        return Cow::Borrowed(message);
    }
    const CLIPPED: &str = " [clipped]";
    let mut out = String::with_capacity(message.len().min(MAX_LOG_MESSAGE_BYTES) + CLIPPED.len());
    for c in message.chars() {
        let before = out.len();
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
        if out.len() > MAX_LOG_MESSAGE_BYTES {
            out.truncate(before);
            out.push_str(CLIPPED);
            break;
        }
    }
    Cow::Owned(out)
}

/// Bytes at the start of each pooled linear memory reset in place (not decommitted) when its
/// slot is given back: a Rust guest's 1 MiB stack and its small heap.
const KEEP_RESIDENT_MEMORY_BYTES: usize = 2 << 20;

/// Bytes of each pooled table reset in place when its slot is given back.
const KEEP_RESIDENT_TABLE_BYTES: usize = 64 << 10;

/// Slots not in use whose memory stays resident (each holds only the pages its last call
/// touched, up to [`KEEP_RESIDENT_MEMORY_BYTES`]).
const MAX_WARM_SLOTS: u32 = 32;

/// The wasmtime configuration of the process's engine: component model, fuel, epoch
/// interruption and, when `pooling`, the pooling allocator sized by the pool constants above.
pub(super) fn engine_config(pooling: bool) -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    config.epoch_interruption(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    if pooling {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(POOL_COMPONENT_INSTANCES)
            .total_core_instances(POOL_CORE_INSTANCES)
            .total_memories(POOL_MEMORIES)
            .total_tables(POOL_TABLES)
            .max_memory_size(usize::try_from(MAX_MEMORY_MB << 20).unwrap_or(usize::MAX))
            // A slot given back is reset for the next call by rewriting only the pages the last
            // call touched (found with the PAGEMAP_SCAN ioctl where the kernel has it, Linux
            // 6.7+), instead of `madvise` on the whole memory: the madvise, the TLB shootdown
            // it sends to every other core and the page faults that refill the memory were
            // about a quarter of a receiver's CPU. What a call left behind is gone either way.
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY_BYTES)
            .table_keep_resident(KEEP_RESIDENT_TABLE_BYTES)
            // Bounds the memory kept resident by slots not in use.
            .max_unused_warm_slots(MAX_WARM_SLOTS);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn a_total_just_over_the_memory_cap_never_reads_as_the_cap() {
        let mib = 1usize << 20;
        assert_eq!(mib_text(64 * mib), "64 MiB");
        assert_eq!(mib_text(64 * mib + (64 << 10)), "64.06 MiB");
        assert_eq!(mib_text(64 * mib + mib / 2), "64.50 MiB");
    }

    #[test]
    fn memory_cap_counts_every_memory_of_the_call_together() {
        let mib = 1usize << 20;
        let mut limiter = CallLimiter::new(16 * mib);
        // Three memories of 5 MiB each fit a 16 MiB cap; each on its own always did.
        for _ in 0..3 {
            assert!(limiter.memory_growing(0, 5 * mib, None).unwrap());
        }
        assert_eq!(limiter.memory_used(), 15 * mib);
        // A fourth memory of 5 MiB is under the cap alone, but not with the others.
        let err = limiter.memory_growing(0, 5 * mib, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "exceeded its memory limit of 16 MiB (all its memories together would hold 20 MiB)"
        );
        assert!(limiter.exceeded.is_some());
        // Growing one memory by 1 MiB still fits; a failed growth gives its share back.
        assert!(limiter.memory_growing(5 * mib, 6 * mib, None).unwrap());
        limiter
            .memory_grow_failed(wasmtime::Error::msg("over the memory's maximum"))
            .unwrap();
        assert_eq!(limiter.memory_used(), 15 * mib);
        assert!(limiter.memory_growing(5 * mib, 6 * mib, None).unwrap());
        assert!(limiter.memory_growing(6 * mib, 7 * mib, None).is_err());
        assert_eq!(limiter.memories(), MAX_MEMORIES_PER_CALL);
        assert_eq!(limiter.instances(), MAX_INSTANCES_PER_CALL);
    }

    #[test]
    fn guest_log_messages_cannot_forge_host_lines() {
        let forged = "ok\n2026-01-01T00:00:00Z  INFO outbox::audit: capability allowed\r\x1b[2J\u{2028}\u{202e}x\ty";
        let clean = sanitize_log_message(forged);
        assert_eq!(
            clean,
            "ok\\n2026-01-01T00:00:00Z  INFO outbox::audit: capability allowed\\r\\u{1b}[2J\\u{2028}\\u{202e}x\\ty"
        );
        assert!(!clean.chars().any(|c| c.is_control()));
        assert_eq!(sanitize_log_message("plain, ünïcödé"), "plain, ünïcödé");
        // Printable ASCII within the limit is not copied; a DEL (0x7f) is a control character.
        assert!(matches!(
            sanitize_log_message("plain {\"a\":1} ~"),
            Cow::Borrowed(_)
        ));
        assert_eq!(sanitize_log_message("a\x7fb"), "a\\u{7f}b");
        let at_limit = "x".repeat(MAX_LOG_MESSAGE_BYTES);
        assert!(matches!(sanitize_log_message(&at_limit), Cow::Borrowed(_)));
        let over = sanitize_log_message(&"x".repeat(MAX_LOG_MESSAGE_BYTES + 1)).into_owned();
        assert!(over.ends_with(" [clipped]"));
        let long = sanitize_log_message(&"é".repeat(10_000)).into_owned();
        assert!(long.len() <= MAX_LOG_MESSAGE_BYTES + " [clipped]".len());
        assert!(long.ends_with(" [clipped]"), "{}", &long[long.len() - 20..]);
        let escapes = sanitize_log_message(&"\n".repeat(10_000)).into_owned();
        assert!(escapes.len() <= MAX_LOG_MESSAGE_BYTES + " [clipped]".len());
    }
}
