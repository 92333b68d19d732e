//! Queue: the Redis wire contract between the sinks, the receivers and operators, in one tree.
//!
//! - [`keys`]: every Redis key name the host builds ([`QueueKeys`], from a prefix and a
//!   [`KeyLayout`]);
//! - [`entry`]: the stream entry format ([`QueueEntry`]: what the sink writes with `XADD`, what
//!   receivers read, what retries and dead letters add, what a replay strips), every field name
//!   a constant in [`field`];
//! - [`receipt`]: the entries of the receipts stream the outcome scripts append to;
//! - [`streams`]: the streams sink's enqueue script (marker, `XADD`, `max_len` trim) and the
//!   trim counts it keeps;
//! - [`bullmq`]: BullMQ 5's key layout and job hash, and the script that adds a job as
//!   `Queue.add` does;
//! - [`backlog`]: the per-queue figures operators read (`outbox stats`, the console, alerts).
//!
//! Here also the consumer group name and the idempotency marker values. Every Lua script that
//! writes these keys from the sink lives beside them, and no field name the Rust side defines is
//! written out in a script: a script is a template whose `$NAME`s are filled in once from the
//! constants ([`script_with_names`]), or gets the names as arguments. Existing data must stay
//! readable: it never changes a key or a field name without a migration. Only [`backlog`]
//! performs I/O (reads), and nothing here decides what happens to an entry.

pub mod backlog;
pub mod bullmq;
pub mod entry;
pub mod keys;
pub mod receipt;
pub mod streams;

pub use backlog::{
    queue_backlogs, queue_backlogs_with_consumers, stalled_and_dead, BrokerHandoffs, BullmqCounts,
    QueueBacklog, StalledAndDead, StreamConsumers, TrimmedCounts,
};
pub use bullmq::{job_data, BullmqQueueKeys};
pub use entry::{field, QueueEntry, ReadEntries};
pub use keys::{KeyLayout, QueueKeys};

/// Consumer group every outbox receiver joins on a queue's stream.
pub const CONSUMER_GROUP: &str = "outbox";

/// What a queue's dead-letter stream adds to the queue's stream key (`{prefix}{queue}.dead-letter`).
/// A queue name never ends with it (see [`crate::naming::validate_queue_name`]).
pub use crate::naming::DEAD_LETTER_SUFFIX;

/// Value of a handled marker while a consumer runs the handler: `running:<owner token>`, the
/// token being [`claim_owner`] (unique per claim). Every outcome script (ok, retry, dead letter)
/// and the claim's renewal first compare the marker with the caller's `running:<owner token>`
/// and change nothing when it differs: a consumer whose claim lapsed and was taken over can
/// neither clear nor overwrite the new owner's marker, acknowledge the entry nor re-add it.
/// Markers written before owner tokens (`running:<consumer>`) read the same way: running.
pub const MARKER_RUNNING: &str = "running:";
/// Value of a handled marker once the handler finished (kept for the idempotency TTL).
pub const MARKER_DONE_OK: &str = "done:ok";

/// Whether a handled marker's value says the handler already finished.
pub fn marker_is_done(value: &str) -> bool {
    value.starts_with("done")
}

/// The owner token of one claim by `consumer`: `<consumer>:<nonce as 16 hex digits>`. The nonce
/// (random per claim) tells two claims of one consumer apart, e.g. a claim that lapsed while
/// its handler ran and the same consumer's later claim of the reclaimed entry.
pub fn claim_owner(consumer: &str, nonce: u64) -> String {
    format!("{consumer}:{nonce:016x}")
}

/// The handled marker's value while the claim with owner token `owner` runs the handler.
pub fn marker_running(owner: &str) -> String {
    format!("{MARKER_RUNNING}{owner}")
}

/// Lua functions that order stream entry ids (`<ms>-<seq>`) as Redis does, for the scripts
/// that compare them: `stream_id_after(a, b)` is true when `a` comes after `b`. A script that
/// uses them is written after this text ([`with_stream_id_order`]).
pub const STREAM_ID_ORDER_LUA: &str = r#"
local function split_stream_id(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function stream_id_after(a, b)
  local am, as = split_stream_id(a)
  local bm, bs = split_stream_id(b)
  return am > bm or (am == bm and as > bs)
end
"#;

/// `script` with [`STREAM_ID_ORDER_LUA`]'s functions defined before it.
pub fn with_stream_id_order(script: &str) -> String {
    format!("{STREAM_ID_ORDER_LUA}{script}")
}

/// The text of a Lua script from its `template`: each `$NAME` is replaced by the Lua string
/// literal of the value `names` gives `NAME` (e.g. `("TRIMMED", "trimmed")` turns `$TRIMMED`
/// into `'trimmed'`). This is how a script names a field the Rust side defines without
/// writing the name out a second time; it runs once per script and process (the scripts are
/// `LazyLock`s). `$` is not Lua syntax, so it only ever marks a name; longer names are put in
/// first, so `$A_B` is never read as `$A` followed by `_B`. A template that names a `$NAME`
/// `names` does not give keeps the `$`, and Redis refuses the script when it is loaded: every
/// script of the tree is rendered by a unit test that checks no `$` is left.
pub fn script_with_names(template: &str, names: &[(&str, &str)]) -> String {
    let mut names = names.to_vec();
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut text = template.to_string();
    for (name, value) in names {
        let literal = format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"));
        text = text.replace(&format!("${name}"), &literal);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        assert_eq!(claim_owner("c1", 0xab), "c1:00000000000000ab");
        assert_eq!(
            marker_running(&claim_owner("c1", 1)),
            "running:c1:0000000000000001"
        );
        assert!(marker_is_done(MARKER_DONE_OK));
        assert!(!marker_is_done(&marker_running("c1")));
    }

    #[test]
    fn names_go_into_a_script_as_lua_strings_longest_first() {
        let text = script_with_names(
            "return {$A, $A_B, $Q}",
            &[("A", "a"), ("A_B", "ab"), ("Q", "it's")],
        );
        assert_eq!(text, r"return {'a', 'ab', 'it\'s'}");
    }
}
