//! Queue keys: every Redis key name the host builds, under one prefix (`OUTBOX_REDIS_PREFIX`).
//!
//! Owns [`QueueKeys`] (a queue's stream, its markers, retry set, dead-letter stream, trim counts,
//! rate limit window, pause key and receipts stream; a plugin's kv keys) and [`KeyLayout`] (one
//! node, or a Redis Cluster where a queue's keys share its stream's hash slot). It takes plain
//! values (a prefix and a layout), never the settings, and performs no I/O. It never renames a
//! key existing data has without a migration.

use super::DEAD_LETTER_SUFFIX;

/// How the host's Redis keys are laid out.
///
/// On one Redis node every key is [`Classic`](KeyLayout::Classic) (the names existing data
/// has). On a Redis Cluster every key one script or `MULTI` touches together must live in one
/// hash slot, so the keys are [`Slotted`](KeyLayout::Slotted): everything of a queue carries the
/// hash tag `{<prefix><queue>}` (the queue's stream itself keeps its name `<prefix><queue>`,
/// which hashes to the same slot as that tag), and a plugin's kv keys carry `{<plugin>}`.
/// The layout follows `REDIS_URL` ([`KeyLayout::for_redis_url`]); it is never mixed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyLayout {
    /// One node: the key names existing data has.
    #[default]
    Classic,
    /// A Redis Cluster: a queue's keys share its stream's slot, a plugin's kv keys share one.
    Slotted,
}

impl KeyLayout {
    /// The layout of the Redis `redis_url` names: [`Slotted`](Self::Slotted) for a cluster.
    pub fn for_redis_url(redis_url: &str) -> Self {
        Self::for_cluster(crate::redis_conn::names_cluster(redis_url))
    }

    /// [`Slotted`](Self::Slotted) on a Redis Cluster (`cluster`), else
    /// [`Classic`](Self::Classic).
    pub fn for_cluster(cluster: bool) -> Self {
        if cluster {
            KeyLayout::Slotted
        } else {
            KeyLayout::Classic
        }
    }
}

/// Every Redis key name the host uses, under one prefix (`OUTBOX_REDIS_PREFIX`), in one
/// [`KeyLayout`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueKeys {
    prefix: String,
    layout: KeyLayout,
}

impl QueueKeys {
    /// Keys under `prefix` (may be empty), laid out for one Redis node.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self::with_layout(prefix, KeyLayout::Classic)
    }

    /// Keys under `prefix` in `layout`.
    pub fn with_layout(prefix: impl Into<String>, layout: KeyLayout) -> Self {
        Self {
            prefix: prefix.into(),
            layout,
        }
    }

    /// Keys under `prefix` (`OUTBOX_REDIS_PREFIX`) in the layout the Redis `redis_url`
    /// (`REDIS_URL`) names needs ([`KeyLayout::for_redis_url`]).
    pub fn for_redis_url(prefix: impl Into<String>, redis_url: &str) -> Self {
        Self::with_layout(prefix, KeyLayout::for_redis_url(redis_url))
    }

    /// The prefix every key starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The layout of these keys.
    pub fn layout(&self) -> KeyLayout {
        self.layout
    }

    /// `KEYS`/`SCAN` patterns that together match every key under this prefix: `<prefix>*`, and
    /// on a cluster also `{<prefix>*` (the keys that start with a queue's hash tag).
    pub fn match_patterns(&self) -> Vec<String> {
        match self.layout {
            KeyLayout::Classic => vec![format!("{}*", self.prefix)],
            KeyLayout::Slotted => vec![format!("{}*", self.prefix), format!("{{{}*", self.prefix)],
        }
    }

    /// A key of `queue` on a cluster: `{<prefix><queue>}<rest>` (the queue's slot).
    fn in_queue_slot(&self, queue: &str, rest: std::fmt::Arguments<'_>) -> String {
        format!("{{{}{}}}{}", self.prefix, queue, rest)
    }

    /// A queue's stream: `{prefix}{queue}` (the same name in both layouts).
    pub fn stream(&self, queue: &str) -> String {
        format!("{}{}", self.prefix, queue)
    }

    /// The sink's dedupe marker of (event, queue): `{prefix}outbox:enqueued:{queue}:{event_id}`
    /// (on a cluster `{{prefix}{queue}}:outbox:enqueued:{event_id}`).
    pub fn enqueued_marker(&self, queue: &str, event_id: i64) -> String {
        match self.layout {
            KeyLayout::Classic => {
                format!("{}outbox:enqueued:{}:{}", self.prefix, queue, event_id)
            }
            KeyLayout::Slotted => {
                self.in_queue_slot(queue, format_args!(":outbox:enqueued:{event_id}"))
            }
        }
    }

    /// The receiver's idempotency marker of (handler, event) for entries of `queue`:
    /// `{prefix}outbox:handled:{handler}:{event_id}` (on a cluster, where it must share the
    /// queue's slot, `{{prefix}{queue}}:outbox:handled:{handler}:{event_id}`: one marker per
    /// queue, handler and event). Its value is `running:<owner token>` while one claim runs the
    /// handler (expires after the receiver lease unless the owner renews it), then
    /// [`MARKER_DONE_OK`](super::MARKER_DONE_OK) for `OUTBOX_IDEMPOTENCY_TTL_SECONDS`; a retry or a dead letter
    /// deletes it. Only the claim's owner changes it (see [`MARKER_RUNNING`](super::MARKER_RUNNING)).
    pub fn handled_marker(&self, queue: &str, handler: &str, event_id: i64) -> String {
        match self.layout {
            KeyLayout::Classic => {
                format!("{}outbox:handled:{}:{}", self.prefix, handler, event_id)
            }
            KeyLayout::Slotted => {
                self.in_queue_slot(queue, format_args!(":outbox:handled:{handler}:{event_id}"))
            }
        }
    }

    /// A queue's counts of entries `max_len` trimmed (a hash, its fields in
    /// [`super::streams::trim_field`]): `{prefix}outbox:trimmed:{queue}` (on a cluster
    /// `{{prefix}{queue}}:outbox:trimmed`).
    pub fn trimmed(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}outbox:trimmed:{}", self.prefix, queue),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!(":outbox:trimmed")),
        }
    }

    /// A broker queue's hand-off counts (a hash, its fields in [`broker_field`]), summed over
    /// every host: `{prefix}outbox:broker:{queue}` (on a cluster
    /// `{{prefix}{queue}}:outbox:broker`).
    pub fn broker_handoffs(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}outbox:broker:{}", self.prefix, queue),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!(":outbox:broker")),
        }
    }

    /// A queue's rate limit window (a hash: `opened`, `used`; expires with the window):
    /// `{prefix}outbox:rate:{queue}` (on a cluster `{{prefix}{queue}}:outbox:rate`).
    pub fn rate_limit(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}outbox:rate:{}", self.prefix, queue),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!(":outbox:rate")),
        }
    }

    /// A queue's pause key, the barrier of a pause: while it exists no idempotency claim on the
    /// queue is granted, so no handler call of the queue starts (see `crate::queue_pause`). Its
    /// value names the operator who paused it. `{prefix}outbox:paused:{queue}` (on a cluster
    /// `{{prefix}{queue}}:outbox:paused`, in the slot of the queue's handled markers).
    pub fn paused(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}outbox:paused:{}", self.prefix, queue),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!(":outbox:paused")),
        }
    }

    /// A queue's sorted set of delayed retries: `{prefix}outbox:retry:{queue}` (on a cluster
    /// `{{prefix}{queue}}:outbox:retry`).
    pub fn retry_set(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}outbox:retry:{}", self.prefix, queue),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!(":outbox:retry")),
        }
    }

    /// A queue's dead-letter stream: `{prefix}{queue}.dead-letter` (on a cluster
    /// `{{prefix}{queue}}.dead-letter`).
    pub fn dead_letter_stream(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}{}{DEAD_LETTER_SUFFIX}", self.prefix, queue),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!("{DEAD_LETTER_SUFFIX}")),
        }
    }

    /// The receipts stream that outcomes on `queue` append to: `{prefix}outbox:receipts`, one
    /// for all queues (on a cluster, where it must share the queue's slot, one per queue:
    /// `{{prefix}{queue}}:outbox:receipts`). Each outcome step appends the handler run's receipt
    /// to it atomically with the outcome (its entries: [`super::receipt`]); the receipt writer moves
    /// them to `outbox_receipt` (see `receive::receipts`).
    pub fn receipts_stream(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}outbox:receipts", self.prefix),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!(":outbox:receipts")),
        }
    }

    /// Plugin `plugin`'s kv key `key`: `{prefix}outbox:kv:{plugin}:{key}` (on a cluster
    /// `{prefix}outbox:kv:{{plugin}}:{key}`: a plugin's keys and their index share one slot). A
    /// `:`, `%`, `{` or `}` in the plugin name is percent-encoded, so one plugin's keys never
    /// reach into another's.
    pub fn kv(&self, plugin: &str, key: &str) -> String {
        let mut out = self.kv_namespace(plugin);
        out.push_str(key);
        out
    }

    /// The prefix of every kv key of plugin `plugin`: `{prefix}outbox:kv:{plugin}:` (the plugin
    /// name percent-encoded as in [`kv`](Self::kv)).
    pub fn kv_namespace(&self, plugin: &str) -> String {
        let mut out = String::with_capacity(self.prefix.len() + plugin.len() + 12);
        out.push_str(&self.prefix);
        out.push_str("outbox:kv:");
        self.push_plugin(&mut out, plugin);
        out.push(':');
        out
    }

    /// The index of plugin `plugin`'s kv keys, a sorted set (member: the plugin's key, score:
    /// its expiry in unix milliseconds, `+inf` without one) that bounds how many keys a plugin
    /// holds: `{prefix}outbox:kv-index:{plugin}` (on a cluster `{prefix}outbox:kv-index:{{plugin}}`).
    pub fn kv_index(&self, plugin: &str) -> String {
        let mut out = String::with_capacity(self.prefix.len() + plugin.len() + 18);
        out.push_str(&self.prefix);
        out.push_str("outbox:kv-index:");
        self.push_plugin(&mut out, plugin);
        out
    }

    /// The sizes of plugin `plugin`'s kv keys, a hash (field: the plugin's key, value: its
    /// length plus its value's; field `""`: their total) that bounds the bytes a plugin holds:
    /// `{prefix}outbox:kv-bytes:{plugin}` (on a cluster `{prefix}outbox:kv-bytes:{{plugin}}`).
    pub fn kv_bytes(&self, plugin: &str) -> String {
        let mut out = String::with_capacity(self.prefix.len() + plugin.len() + 18);
        out.push_str(&self.prefix);
        out.push_str("outbox:kv-bytes:");
        self.push_plugin(&mut out, plugin);
        out
    }

    /// A plugin name in a key, encoded (see [`push_encoded`]); on a cluster inside a hash tag.
    fn push_plugin(&self, out: &mut String, plugin: &str) {
        match self.layout {
            KeyLayout::Classic => push_encoded(out, plugin),
            KeyLayout::Slotted => {
                out.push('{');
                push_encoded(out, plugin);
                out.push('}');
            }
        }
    }
}

/// A plugin name in a key: `:`, `%`, `{` and `}` percent-encoded, so one plugin's keys never
/// reach into another's and a name never opens or closes a hash tag.
fn push_encoded(out: &mut String, plugin: &str) {
    for c in plugin.chars() {
        match c {
            ':' => out.push_str("%3A"),
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// The fields of a broker queue's hand-off counts ([`QueueKeys::broker_handoffs`]): what the
/// hosts know of the messages they handed to NATS JetStream or RabbitMQ.
pub mod broker_field {
    /// Messages published (each hand-off tried, a repeated one included).
    pub const PUBLISHED: &str = "published";
    /// Of those, acknowledged or confirmed by the broker as stored.
    pub const CONFIRMED: &str = "confirmed";
    /// Of those, dropped by JetStream as a duplicate of a message it had (a re-publish).
    pub const DUPLICATES: &str = "duplicates";
    /// Of those, refused: a missing stream or exchange, a message returned unroutable, too
    /// large (counted as the event's attempt).
    pub const FAILED: &str = "failed";
    /// Of those, not answered: a blip (handed off again, no attempt counted).
    pub const UNAVAILABLE: &str = "unavailable";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_todays_names() {
        let keys = QueueKeys::new("app1:");
        assert_eq!(keys.stream("outbox.mail"), "app1:outbox.mail");
        assert_eq!(
            keys.enqueued_marker("outbox.mail", 42),
            "app1:outbox:enqueued:outbox.mail:42"
        );
        assert_eq!(
            keys.handled_marker("outbox.mail", "mailer", 42),
            "app1:outbox:handled:mailer:42"
        );
        assert_eq!(keys.receipts_stream("outbox.mail"), "app1:outbox:receipts");
        assert_eq!(
            keys.retry_set("outbox.mail"),
            "app1:outbox:retry:outbox.mail"
        );
        assert_eq!(
            keys.dead_letter_stream("outbox.mail"),
            "app1:outbox.mail.dead-letter"
        );
        assert_eq!(keys.kv("counter", "a:b"), "app1:outbox:kv:counter:a:b");
        let bare = QueueKeys::new("");
        assert_eq!(bare.stream("q"), "q");
        assert_eq!(bare.kv("counter", "hits"), "outbox:kv:counter:hits");
    }

    /// The part of `key` Redis Cluster hashes: the first non-empty `{...}`, else all of it.
    fn hashed_part(key: &str) -> &str {
        if let Some(open) = key.find('{') {
            if let Some(len) = key[open + 1..].find('}') {
                if len > 0 {
                    return &key[open + 1..open + 1 + len];
                }
            }
        }
        key
    }

    #[test]
    fn on_a_cluster_every_key_of_a_queue_shares_its_streams_slot() {
        let keys = QueueKeys::with_layout("app1:", KeyLayout::Slotted);
        let queue = "outbox.mail";
        let stream = keys.stream(queue);
        assert_eq!(stream, "app1:outbox.mail", "the stream keeps its name");
        for key in [
            keys.enqueued_marker(queue, 42),
            keys.handled_marker(queue, "mailer", 42),
            keys.trimmed(queue),
            keys.rate_limit(queue),
            keys.paused(queue),
            keys.retry_set(queue),
            keys.dead_letter_stream(queue),
            keys.receipts_stream(queue),
        ] {
            assert_eq!(hashed_part(&key), stream, "{key}");
            assert!(
                keys.match_patterns()
                    .iter()
                    .any(|p| key.starts_with(p.trim_end_matches('*'))),
                "{key} is found by the prefix's patterns"
            );
        }
        assert_eq!(
            keys.enqueued_marker(queue, 42),
            "{app1:outbox.mail}:outbox:enqueued:42"
        );
        assert_ne!(
            keys.receipts_stream(queue),
            keys.receipts_stream("outbox.other"),
            "one receipts stream per queue"
        );
        // A plugin's kv keys and their index share one slot, another plugin's another.
        assert_eq!(hashed_part(&keys.kv("counter", "a:b")), "counter");
        assert_eq!(hashed_part(&keys.kv_index("counter")), "counter");
        assert_eq!(hashed_part(&keys.kv_bytes("counter")), "counter");
        assert!(keys
            .kv("counter", "x")
            .starts_with(&keys.kv_namespace("counter")));
        assert_eq!(hashed_part(&keys.kv("a{b}", "k")), "a%7Bb%7D");
        assert_eq!(
            KeyLayout::for_redis_url("redis+cluster://127.0.0.1:7101"),
            KeyLayout::Slotted
        );
        assert_eq!(
            KeyLayout::for_redis_url("redis://127.0.0.1:6379/"),
            KeyLayout::Classic
        );
    }

    #[test]
    fn kv_plugin_names_cannot_reach_other_plugins() {
        let keys = QueueKeys::default();
        assert_eq!(keys.kv("a:b", "c"), "outbox:kv:a%3Ab:c");
        assert_eq!(keys.kv("a%b", "c"), "outbox:kv:a%25b:c");
        assert_ne!(keys.kv("a:b", "c"), keys.kv("a", "b:c"));
    }
}
