//! Ops: what operators run by hand — stats, routing explanations, the demo, plugin tools and
//! dead letters.
//!
//! Owns the human-facing output of the CLI (tables, JSON), one submodule per command family. It
//! goes through the same library calls as the host ([`crate::publish`](mod@crate::publish), [`crate::dispatch`],
//! [`crate::store`], [`crate::receive`], [`crate::plugin`]) and never writes SQL of its own
//! against rows a dispatcher may hold.

mod dead_letter;
mod demo;
mod plugins;
mod stats;

pub use dead_letter::{dead_letters, DeadLetterAction, DeadLetterSelection};
pub use demo::{run_demo, DEMO_DATABASE, DEMO_REDIS_PREFIX};
pub use plugins::*;
pub use stats::{describe_settings, explain_route, print_stats};

/// `url` with its database name replaced.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}
