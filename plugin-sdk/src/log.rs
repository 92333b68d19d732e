//! Logging into the host's log, attributed to the calling plugin. Every world may log.
//!
//! Use the macros (`log::info!("routed {n} events")`) or [`write()`] directly.

use crate::bindings::router::outbox::plugin::log as wit;

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

/// Write one log line at `level`.
pub fn write(level: Level, message: &str) {
    let level = match level {
        Level::Trace => wit::Level::Trace,
        Level::Debug => wit::Level::Debug,
        Level::Info => wit::Level::Info,
        Level::Warn => wit::Level::Warn,
        Level::Error => wit::Level::Error,
    };
    wit::write(level, message);
}

#[doc(inline)]
pub use crate::{
    __log_debug as debug, __log_error as error, __log_info as info, __log_trace as trace,
    __log_warn as warn,
};

/// Log a `format!`-style message at trace level: `log::trace!("...", args)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_trace {
    ($($arg:tt)+) => {
        $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)+))
    };
}

/// Log a `format!`-style message at debug level: `log::debug!("...", args)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_debug {
    ($($arg:tt)+) => {
        $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)+))
    };
}

/// Log a `format!`-style message at info level: `log::info!("...", args)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_info {
    ($($arg:tt)+) => {
        $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)+))
    };
}

/// Log a `format!`-style message at warn level: `log::warn!("...", args)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_warn {
    ($($arg:tt)+) => {
        $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)+))
    };
}

/// Log a `format!`-style message at error level: `log::error!("...", args)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __log_error {
    ($($arg:tt)+) => {
        $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)+))
    };
}
