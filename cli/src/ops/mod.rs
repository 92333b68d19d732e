//! Ops: what operators run by hand — stats, routing explanations, event contracts, the demo,
//! plugin tools, dead letters, repairs of outbox rows (requeue, cancel), operators and the audit trail.
//!
//! Owns the human-facing output of the CLI (tables, JSON, progress), one submodule per command
//! family. It goes through the same library calls as the host (`outbox_host::publish`,
//! `dispatch`, `store`, `receive`, `plugin`) and never writes SQL of its own: every query it
//! needs is a function of `outbox_host::store`.

mod access;
mod confirm;
mod contracts;
mod dead_letter;
mod demo;
mod plugins;
mod queues;
mod repair;
mod stats;
mod trace;

pub use access::{
    add_operator, list_operators, print_audit, release_worker, require, revoke_operator,
};
pub use contracts::{
    check_contracts, diff_contract_files, list_contracts, show_contract, EXIT_BREAKING,
};
pub use dead_letter::{dead_letters, DeadLetterAction, DeadLetterSelection};
pub use demo::run_demo;
pub use plugins::*;
pub use queues::{list_queues, pause_queue, resume_queue};
pub use repair::{repair_rows, RepairOptions};
pub use stats::{describe_settings, explain_route, no_route_warning, print_stats};
pub use trace::print_trace;
