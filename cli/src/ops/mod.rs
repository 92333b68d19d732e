//! Ops: one function per command of `outbox` — the host (migrate, run, drain), publish, stats,
//! routes, event contracts, the demo, plugin tools, dead letters, repairs of outbox rows
//! (requeue, cancel), queue controls, operators, the audit trail and trace.
//!
//! Owns the human-facing output of the CLI (tables, JSON, progress), one submodule per command
//! family; [`crate::run`] picks the function, [`crate::opt`] holds the arguments. It goes through
//! the same library calls as the host (`outbox_host::publish`, `dispatch`, `store`, `receive`,
//! `plugin`, the `HostBuilder`) and never writes SQL of its own: every query it needs is a
//! function of `outbox_host::store`.

use outbox_host::config::Config;
use outbox_host::store;
use sqlx::PgPool;

mod access;
mod confirm;
mod contracts;
mod dead_letter;
mod demo;
mod host;
mod plugin_commands;
mod plugins;
mod publish;
mod queues;
mod repair;
mod routes;
mod stats;
mod trace;

pub use access::{
    add_operator, list_operators, print_audit, release_worker, require, revoke_operator,
};
pub use contracts::{check_contracts, diff_contract_files, list_contracts, show_contract};
pub use dead_letter::{dead_letters, DeadLetterAction, DeadLetterSelection};
pub use demo::run_demo;
pub use host::{drain, migrate, run_host};
pub use plugin_commands::{
    call_plugin, check_plugin, list_plugins, new_plugin, write_plugin_sdk, write_plugin_wit,
};
pub use plugins::*;
pub use publish::publish;
pub use queues::{list_queues, pause_queue, resume_queue};
pub use repair::{repair_rows, RepairOptions};
pub use routes::{check_routes, which_route};
pub use stats::{no_route_warning, print_config, stats};
pub use trace::print_trace;

/// The database of `config`, migrated: what a command that reads or writes it opens first (two
/// connections).
pub async fn open_store(config: &Config) -> anyhow::Result<PgPool> {
    let pool = store::connect(&config.settings.database_url, 2).await?;
    store::migrate(&pool).await?;
    Ok(pool)
}
