//! End-to-end tests: one binary, one module per feature, against the real PostgreSQL
//! (`DATABASE_URL`, a fresh database per test) and Redis (`REDIS_URL`, a key prefix per test).
//! Each guarantee has a test named after it.

mod claim;
mod dispatch;
mod failures;
mod hook_children;
mod http;
mod plugins;
mod publish;
mod receive;
mod reload;
