//! Queue names: what a queue may be called, the suffix reserved for the host's own streams, and
//! how many queues one event may go to.

use super::NameError;

/// Longest queue name, bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 200;

/// The suffix of a queue's dead-letter stream (`{queue}.dead-letter`): no queue name may end in
/// it.
pub const DEAD_LETTER_SUFFIX: &str = ".dead-letter";

/// Most queues one event may be routed to (fan-out). A router answer naming more fails that
/// event (retried like any router failure).
pub const MAX_QUEUES_PER_EVENT: usize = 32;

/// Check a queue name. It becomes part of Redis keys (`{prefix}{queue}`, its markers, retry set
/// and dead-letter stream), so it must never be able to name one of the host's own keys: no `:`
/// (the host's keys are `{prefix}outbox:...`) and no [`DEAD_LETTER_SUFFIX`] ending (queue
/// `x.dead-letter` would be queue `x`'s dead-letter stream). The same rule holds for
/// `routes.toml`, router plugin answers and `outbox plugins call --queue`.
pub fn validate_queue_name(queue: &str) -> Result<(), NameError> {
    if queue.is_empty() || queue.len() > MAX_QUEUE_NAME_BYTES {
        return Err(NameError::QueueNameLength);
    }
    if !queue
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(NameError::QueueNameCharacters);
    }
    if queue.ends_with(DEAD_LETTER_SUFFIX) {
        return Err(NameError::QueueNameReserved);
    }
    Ok(())
}
