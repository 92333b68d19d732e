//! End-to-end tests: one binary, one module per feature, against the real PostgreSQL
//! (`DATABASE_URL`, a fresh database per test) and Redis (`REDIS_URL`, a key prefix per test).
//! Each guarantee has a test named after it.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]

mod alerts;
mod async_plugin_calls;
mod blips;
mod broker_destinations;
mod bullmq;
mod capabilities;
mod capability_bounds;
mod capability_http;
mod claim;
mod claim_horizon;
mod console;
mod console_access;
mod contracts;
mod dispatch;
mod dispatch_wake;
mod failures;
mod feedback_loops;
mod file_sizes;
mod guest_answers;
mod guest_languages;
mod handler_on_two_queues;
mod handler_outcomes;
mod hook_children;
mod http;
mod invoke_jobs;
mod kept_connections;
mod limits;
mod max_len;
mod migrations;
mod module_layers;
mod operators;
mod ordering;
mod pause_barrier;
mod plugin_files;
mod plugins;
mod publish;
mod queue_controls;
mod receive;
mod receive_claims;
mod receive_maintenance;
mod receiver_blips;
mod records_on_claim;
mod redis_cluster;
mod reload;
mod repair;
mod resp_decoding;
mod retention;
mod sink_conformance;
mod trace_context;
