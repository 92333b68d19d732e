//! Receipts stream entries: what the outcome scripts append to the receipts stream
//! ([`QueueKeys::receipts_stream`](super::QueueKeys::receipts_stream), `<prefix>outbox:receipts`)
//! in the same step as the outcome, and what the receipt writer reads back from it.
//!
//! Owns the entry's field names. An entry has one field, [`RECEIPT_FIELD`], whose value is the
//! receipt update as JSON (tagged by `k`: an `outcome` with `e` event id, `h` handler, `q`
//! queue, `r` result, `a` attempts, `d` duration in ms, `p` published ids, `x` error; or a
//! `duplicate` with `e` and `h`), encoded and decoded by `receive::receipts`. A Lua script that
//! appends a receipt gets this name from here, never written out. It never changes a field name
//! without a migration (entries written by a running host must stay readable by the next) and
//! performs no I/O.

/// The field of a receipts stream entry that holds the receipt update as JSON.
pub const RECEIPT_FIELD: &str = "receipt";
