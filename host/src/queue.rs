//! Queue: the Redis wire contract between the sink, the receivers and operators.
//!
//! Owns every Redis key name the host builds ([`QueueKeys`], from `OUTBOX_REDIS_PREFIX`), the
//! consumer group name, the idempotency marker values, and the stream entry format
//! ([`QueueEntry`]: what the sink writes with `XADD`, what receivers read, what retries and
//! dead letters add, what a replay strips), with every field name as a constant in [`field`].
//! Existing data must stay readable: it never changes a key or a field name without a
//! migration. It performs no I/O and never decides what happens to an entry.

use std::collections::HashMap;

use redis::streams::StreamId;

use crate::store::ClaimedEvent;

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

/// Field names of a queue stream entry.
pub mod field {
    /// The outbox event id (decimal).
    pub const EVENT_ID: &str = "event_id";
    /// Dot-separated event type.
    pub const EVENT_TYPE: &str = "event_type";
    /// Schema version of the payload (decimal).
    pub const EVENT_VERSION: &str = "event_version";
    /// Tenant (empty: none).
    pub const TENANT_ID: &str = "tenant_id";
    /// Payload as JSON text.
    pub const PAYLOAD: &str = "payload";
    /// Headers as JSON text.
    pub const HEADERS: &str = "headers";
    /// Producer idempotency key (empty: none).
    pub const DISPATCH_KEY: &str = "dispatch_key";
    /// When the event was published (RFC 3339, microseconds, `Z`).
    pub const CREATED_AT: &str = "created_at";
    /// Dispatch attempt that enqueued the entry (decimal).
    pub const ATTEMPT: &str = "attempt";
    /// The event's ordering key; written only for events that have one (absent: unordered).
    /// Receivers of a queue marked `ordered` run one entry of a key at a time.
    pub const ORDERING_KEY: &str = "ordering_key";
    /// The event's generation (decimal; see `capability::publish`); written only for events a
    /// handler published (absent, as on every entry written before it existed: 0).
    pub const GENERATION: &str = "generation";
    /// Handler attempt of a redelivered entry (absent: 1).
    pub const HANDLER_ATTEMPT: &str = "handler_attempt";
    /// The error of the previous handler attempt (retries only).
    pub const LAST_ERROR: &str = "last_error";
    /// Makes each scheduled retry a distinct member of the retry set.
    pub const RETRY_NONCE: &str = "retry_nonce";
    /// Why the entry was dead-lettered (dead-letter streams only).
    pub const ERROR: &str = "error";
    /// The handler that gave up (dead-letter streams only).
    pub const HANDLER: &str = "handler";
    /// The queue the entry came from (dead-letter streams only).
    pub const QUEUE: &str = "queue";
    /// When it was dead-lettered (dead-letter streams only).
    pub const DEAD_AT: &str = "dead_at";
    /// The dead-letter entry a replayed entry came from.
    pub const REPLAYED_FROM: &str = "replayed_from";

    /// Fields a delivery adds on top of the event; dropped when the entry starts over.
    pub(crate) const DELIVERY: [&str; 2] = [HANDLER_ATTEMPT, LAST_ERROR];
    /// Fields a replay drops: what delivery and dead-lettering added.
    pub(crate) const NOT_REPLAYED: [&str; 7] = [
        ERROR,
        HANDLER,
        QUEUE,
        DEAD_AT,
        HANDLER_ATTEMPT,
        LAST_ERROR,
        RETRY_NONCE,
    ];
}

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
        if crate::redis_conn::names_cluster(redis_url) {
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

    /// Keys under `OUTBOX_REDIS_PREFIX` of `settings`, in the layout its `REDIS_URL` needs.
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        Self::with_layout(
            settings.redis_prefix.clone(),
            KeyLayout::for_redis_url(&settings.redis_url),
        )
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
    /// [`MARKER_DONE_OK`] for `OUTBOX_IDEMPOTENCY_TTL_SECONDS`; a retry or a dead letter
    /// deletes it. Only the claim's owner changes it (see [`MARKER_RUNNING`]).
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

    /// A queue's counts of entries `max_len` trimmed (a hash: `trimmed`, and per consumer group
    /// `<group>:unread`, `<group>:unacked`): `{prefix}outbox:trimmed:{queue}` (on a cluster
    /// `{{prefix}{queue}}:outbox:trimmed`).
    pub fn trimmed(&self, queue: &str) -> String {
        match self.layout {
            KeyLayout::Classic => format!("{}outbox:trimmed:{}", self.prefix, queue),
            KeyLayout::Slotted => self.in_queue_slot(queue, format_args!(":outbox:trimmed")),
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
    /// to it atomically with the outcome; the receipt writer moves them to `outbox_receipt`
    /// (see `receive::receipts`).
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

/// One queue stream entry: its id and its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// Stream entry id.
    pub stream_id: String,
    /// Fields as written by the sink (plus `handler_attempt` on retries), sorted by name when
    /// read from Redis.
    pub fields: Vec<(String, String)>,
}

impl QueueEntry {
    /// The fields the sink writes for `event` (in this order), values as Redis receives them;
    /// then `ordering_key`, only when the event has one, and `generation`, only when it is
    /// above 0.
    pub fn encode(event: &ClaimedEvent) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            (field::EVENT_ID, event.id.to_string()),
            (field::EVENT_TYPE, event.event_type.clone()),
            (field::EVENT_VERSION, event.event_version.to_string()),
            (
                field::TENANT_ID,
                event.tenant_id.clone().unwrap_or_default(),
            ),
            (field::PAYLOAD, event.payload.clone()),
            (field::HEADERS, event.headers.clone()),
            (
                field::DISPATCH_KEY,
                event.dispatch_key.clone().unwrap_or_default(),
            ),
            (
                field::CREATED_AT,
                event
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            ),
            (field::ATTEMPT, event.attempts.to_string()),
        ];
        if let Some(key) = &event.ordering_key {
            fields.push((field::ORDERING_KEY, key.clone()));
        }
        if event.generation > 0 {
            fields.push((field::GENERATION, event.generation.to_string()));
        }
        fields
    }

    /// An entry as read with `XREAD`/`XRANGE` (field values as text, fields sorted by name).
    pub fn from_stream(id: &StreamId) -> Self {
        let fields = id
            .map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    redis::from_redis_value::<String>(v).unwrap_or_default(),
                )
            })
            .collect();
        Self::from_fields(id.id.clone(), fields)
    }

    /// An entry from its id and a flat `[name, value, name, value, ...]` list (as in an
    /// `XAUTOCLAIM` reply); a trailing name without a value is ignored.
    pub fn from_flat(stream_id: impl Into<String>, flat: &[String]) -> Self {
        let fields = flat
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect();
        Self::from_fields(stream_id.into(), fields)
    }

    fn from_fields(stream_id: String, mut fields: Vec<(String, String)>) -> Self {
        fields.sort();
        Self { stream_id, fields }
    }

    /// A field's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A field's value unless it is absent or empty.
    fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// The outbox event id.
    pub fn event_id(&self) -> Option<i64> {
        self.get(field::EVENT_ID)?.parse().ok()
    }

    /// The event type, unless absent or empty.
    pub fn event_type(&self) -> Option<&str> {
        self.non_empty(field::EVENT_TYPE)
    }

    /// The payload schema version (1 when absent or not a number).
    pub fn event_version(&self) -> i32 {
        self.get(field::EVENT_VERSION)
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
    }

    /// The tenant, unless absent or empty.
    pub fn tenant_id(&self) -> Option<&str> {
        self.non_empty(field::TENANT_ID)
    }

    /// The payload JSON text (`{}` when absent).
    pub fn payload(&self) -> &str {
        self.get(field::PAYLOAD).unwrap_or("{}")
    }

    /// The headers JSON text (`{}` when absent).
    pub fn headers(&self) -> &str {
        self.get(field::HEADERS).unwrap_or("{}")
    }

    /// The producer idempotency key, unless absent or empty.
    pub fn dispatch_key(&self) -> Option<&str> {
        self.non_empty(field::DISPATCH_KEY)
    }

    /// The ordering key, unless absent or empty (an entry without one is unordered).
    pub fn ordering_key(&self) -> Option<&str> {
        self.non_empty(field::ORDERING_KEY)
    }

    /// The event's generation: 0 when absent (a producer's event, or an entry written before
    /// the field existed), unreadable or negative.
    pub fn generation(&self) -> i32 {
        self.get(field::GENERATION)
            .and_then(|g| g.parse::<i32>().ok())
            .unwrap_or(0)
            .max(0)
    }

    /// When the event was published, as written (empty when absent).
    pub fn created_at(&self) -> &str {
        self.get(field::CREATED_AT).unwrap_or_default()
    }

    /// Handler attempt of this delivery (1 on first delivery).
    pub fn handler_attempt(&self) -> u32 {
        self.get(field::HANDLER_ATTEMPT)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1)
    }

    /// The fields, flat, for delivery attempt `attempt`: what an earlier delivery added is
    /// replaced by `handler_attempt = attempt` at the end.
    pub fn with_attempt(&self, attempt: u32) -> Vec<String> {
        let mut flat = Vec::with_capacity(self.fields.len() * 2 + 2);
        for (k, v) in &self.fields {
            if !field::DELIVERY.contains(&k.as_str()) {
                flat.push(k.clone());
                flat.push(v.clone());
            }
        }
        flat.push(field::HANDLER_ATTEMPT.into());
        flat.push(attempt.to_string());
        flat
    }

    /// The fields, flat, of this entry's next delivery after a failed `attempt` (what goes into
    /// the retry set): `handler_attempt = attempt + 1` (at most `u32::MAX`), the error, and a
    /// nonce.
    pub fn retry_fields(&self, attempt: u32, last_error: &str) -> Vec<String> {
        let mut flat = self.with_attempt(attempt.saturating_add(1));
        flat.push(field::LAST_ERROR.into());
        flat.push(last_error.to_string());
        flat.push(field::RETRY_NONCE.into());
        flat.push(format!("{}:{}", self.stream_id, attempt));
        flat
    }

    /// The fields, flat, of this entry's dead-letter entry.
    pub fn dead_letter_fields(
        &self,
        error: &str,
        handler: &str,
        queue: &str,
        dead_at: &str,
    ) -> Vec<String> {
        let mut flat = self.with_attempt(self.handler_attempt());
        for (name, value) in [
            (field::ERROR, error),
            (field::HANDLER, handler),
            (field::QUEUE, queue),
            (field::DEAD_AT, dead_at),
        ] {
            flat.push(name.into());
            flat.push(value.to_string());
        }
        flat
    }

    /// The fields of a dead letter put back on its queue: the event's fields (sorted by name),
    /// without what delivery and dead-lettering added, plus `replayed_from`.
    pub fn replay_fields(
        dead_letter: &HashMap<String, String>,
        dead_letter_id: &str,
    ) -> Vec<(String, String)> {
        let mut fields: Vec<(String, String)> = dead_letter
            .iter()
            .filter(|(k, _)| !field::NOT_REPLAYED.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        fields.sort();
        fields.push((field::REPLAYED_FROM.into(), dead_letter_id.to_string()));
        fields
    }
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

    fn event() -> ClaimedEvent {
        let mut e = ClaimedEvent::unclaimed(7, "mail.welcome", r#"{"to":"a@b"}"#);
        e.tenant_id = Some("t1".into());
        e.event_version = 3;
        e.headers = r#"{"h":1}"#.into();
        e.dispatch_key = Some("k-1".into());
        e.attempts = 2;
        e.created_at = chrono::DateTime::parse_from_rfc3339("2024-05-06T07:08:09.123456Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap();
        e
    }

    fn read_back(fields: &[(&str, String)]) -> QueueEntry {
        let flat: Vec<String> = fields
            .iter()
            .flat_map(|(k, v)| [k.to_string(), v.clone()])
            .collect();
        QueueEntry::from_flat("1-0", &flat)
    }

    #[test]
    fn encode_writes_todays_fields() {
        let fields = QueueEntry::encode(&event());
        let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "event_id",
                "event_type",
                "event_version",
                "tenant_id",
                "payload",
                "headers",
                "dispatch_key",
                "created_at",
                "attempt"
            ]
        );
        assert_eq!(fields[0].1, "7");
        assert_eq!(fields[7].1, "2024-05-06T07:08:09.123456Z");
        assert_eq!(fields[8].1, "2");
    }

    #[test]
    fn encode_decode_round_trip() {
        let entry = read_back(&QueueEntry::encode(&event()));
        assert_eq!(entry.stream_id, "1-0");
        assert_eq!(entry.event_id(), Some(7));
        assert_eq!(entry.event_type(), Some("mail.welcome"));
        assert_eq!(entry.event_version(), 3);
        assert_eq!(entry.tenant_id(), Some("t1"));
        assert_eq!(entry.payload(), r#"{"to":"a@b"}"#);
        assert_eq!(entry.headers(), r#"{"h":1}"#);
        assert_eq!(entry.dispatch_key(), Some("k-1"));
        assert_eq!(entry.created_at(), "2024-05-06T07:08:09.123456Z");
        assert_eq!(entry.get(field::ATTEMPT), Some("2"));
        assert_eq!(entry.handler_attempt(), 1);
    }

    #[test]
    fn the_ordering_key_is_written_only_when_the_event_has_one() {
        let mut keyed = event();
        keyed.ordering_key = Some("account-9".into());
        let fields = QueueEntry::encode(&keyed);
        assert_eq!(fields.len(), 10);
        assert_eq!(fields[9], (field::ORDERING_KEY, "account-9".to_string()));
        assert_eq!(read_back(&fields).ordering_key(), Some("account-9"));
        let unkeyed = read_back(&QueueEntry::encode(&event()));
        assert_eq!(unkeyed.ordering_key(), None);
        assert_eq!(
            unkeyed.get(field::ORDERING_KEY),
            None,
            "no empty field either"
        );
        // A retry keeps the key.
        let retried = QueueEntry::from_flat("2-0", &read_back(&fields).retry_fields(1, "boom"));
        assert_eq!(retried.ordering_key(), Some("account-9"));
    }

    #[test]
    fn the_generation_is_written_only_above_zero_and_reads_as_zero_when_absent() {
        let mut child = event();
        child.generation = 3;
        let fields = QueueEntry::encode(&child);
        assert_eq!(fields.last(), Some(&(field::GENERATION, "3".to_string())));
        let entry = read_back(&fields);
        assert_eq!(entry.generation(), 3);
        // A retry, a dead letter and its replay keep it.
        let retried = QueueEntry::from_flat("2-0", &entry.retry_fields(1, "boom"));
        assert_eq!(retried.generation(), 3);
        let dead = QueueEntry::from_flat("3-0", &retried.dead_letter_fields("e", "h", "q", "t"));
        let map: HashMap<String, String> = dead.fields.iter().cloned().collect();
        let replayed = QueueEntry::replay_fields(&map, "3-0");
        assert!(replayed.contains(&(field::GENERATION.to_string(), "3".to_string())));
        // A producer's event (and every entry written before the field existed) has none.
        let root = QueueEntry::encode(&event());
        assert!(root.iter().all(|(name, _)| *name != field::GENERATION));
        assert_eq!(read_back(&root).generation(), 0);
        for junk in ["", "x", "-4"] {
            let entry = QueueEntry::from_flat("1-0", &["generation".into(), junk.into()]);
            assert_eq!(entry.generation(), 0, "{junk:?}");
        }
    }

    #[test]
    fn absent_options_decode_as_none() {
        let entry = read_back(&QueueEntry::encode(&ClaimedEvent::unclaimed(
            1, "a.b", "{}",
        )));
        assert_eq!(entry.tenant_id(), None);
        assert_eq!(entry.dispatch_key(), None);
        assert_eq!(entry.get(field::TENANT_ID), Some(""));
    }

    #[test]
    fn retry_and_dead_letter_round_trip() {
        let first = read_back(&QueueEntry::encode(&event()));
        let retried = QueueEntry::from_flat("2-0", &first.retry_fields(1, "boom"));
        assert_eq!(retried.handler_attempt(), 2);
        assert_eq!(retried.get(field::LAST_ERROR), Some("boom"));
        assert_eq!(retried.get(field::RETRY_NONCE), Some("1-0:1"));
        assert_eq!(retried.event_id(), Some(7));
        // A second retry replaces what the first added instead of repeating it.
        let again = QueueEntry::from_flat("3-0", &retried.retry_fields(2, "bang"));
        assert_eq!(again.handler_attempt(), 3);
        assert_eq!(again.get(field::LAST_ERROR), Some("bang"));
        assert_eq!(
            again
                .fields
                .iter()
                .filter(|(k, _)| k == field::HANDLER_ATTEMPT)
                .count(),
            1
        );

        let dead = QueueEntry::from_flat(
            "4-0",
            &again.dead_letter_fields("gave up", "mailer", "outbox.mail", "now"),
        );
        assert_eq!(dead.get(field::ERROR), Some("gave up"));
        assert_eq!(dead.get(field::HANDLER), Some("mailer"));
        assert_eq!(dead.get(field::QUEUE), Some("outbox.mail"));
        assert_eq!(dead.get(field::DEAD_AT), Some("now"));
        assert_eq!(dead.handler_attempt(), 3);

        let map: HashMap<String, String> = dead.fields.iter().cloned().collect();
        let replayed = QueueEntry::replay_fields(&map, "4-0");
        let mut expected: Vec<(String, String)> = QueueEntry::encode(&event())
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        expected.sort();
        expected.push((field::REPLAYED_FROM.into(), "4-0".into()));
        assert_eq!(replayed, expected);
    }
}
