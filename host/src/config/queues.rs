//! `[queues."NAME"]`: per-queue options, and the sink each queue's events go to.
//!
//! Owns what a queue's table may say (ordering, which sink, the BullMQ job options) and the
//! rules that keep those options sane before the host keeps them: a BullMQ job id template that
//! can never render an id BullMQ refuses or one that names two jobs, bounded attempts, delays
//! and priorities. It never connects to Redis; the sinks read these options per batch.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a queue's events are handed off.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    /// A Redis Stream read by the host's own receivers (and their handler plugins). The default.
    #[default]
    Streams,
    /// BullMQ's own Redis format (a job hash, the wait list, the events stream...), processed by
    /// unmodified `bullmq` workers on Node.js.
    Bullmq,
}

impl SinkKind {
    /// The name used in `routes.toml`, logs and `outbox stats`.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Streams => "streams",
            SinkKind::Bullmq => "bullmq",
        }
    }
}

impl std::fmt::Display for SinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[queues."NAME"]`: options of one queue (a table per queue, so that more per-queue options
/// can join it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    /// Receivers run one entry of an ordering key at a time, in stream order, and hold back
    /// the key's later entries while an entry waits for a handler retry (see
    /// `receive::ordering`). Entries without an ordering key are not held back. Default false.
    /// Streams queues only (BullMQ workers do not keep an order per key).
    #[serde(default)]
    pub ordered: bool,
    /// Which sink the queue's events go to (`streams`, the default, or `bullmq`).
    #[serde(default)]
    pub sink: SinkKind,
    /// `[queues."NAME".bullmq]`: how jobs are added, for `sink = "bullmq"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bullmq: Option<BullmqOptions>,
    /// On a `bullmq` queue that `[handlers]` also binds: the binding is meant (its receiver
    /// drains the entries left in the queue's stream from before the switch to BullMQ). Without
    /// it such a binding is refused: new events would never reach that handler.
    #[serde(default)]
    pub keep_stream_handler: bool,
    /// Streams queues: keep about this many entries (`XADD` then `XTRIM MAXLEN ~`), dropping the
    /// oldest even when a consumer group has not read or acknowledged them (counted, and
    /// warned about). For queues nobody may read for a long time; off by default (the stream
    /// is trimmed only below what every group acknowledged). [`MIN_MAX_LEN`] to
    /// [`MAX_MAX_LEN`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_len: Option<u64>,
    /// Streams queues: entries handled at once by each host's receiver of this queue
    /// (`OUTBOX_RECEIVER_CONCURRENCY` when absent), 1 to [`MAX_QUEUE_CONCURRENCY`]. A reload
    /// changes it on running receivers: a lower value takes effect as running handlers finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Streams queues: at most `max` handler runs start per `duration_ms`, counted in Redis
    /// across every host (`rate_limit = { max = 100, duration_ms = 1000 }`). Entries beyond it
    /// wait in the stream, unread. Off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
}

/// The most entries one receiver of a queue may handle at once (`concurrency`).
pub const MAX_QUEUE_CONCURRENCY: u32 = 1024;

/// `[queues."NAME"] rate_limit`: at most `max` handler starts per `duration_ms` window, for the
/// whole queue (every host together). The window is fixed: it opens at the first start after
/// the last one closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Starts per window, 1 to [`MAX_RATE_LIMIT_MAX`].
    pub max: u32,
    /// The window, [`MIN_RATE_LIMIT_WINDOW_MS`] to [`MAX_RATE_LIMIT_WINDOW_MS`] ms.
    pub duration_ms: u64,
}

/// The most starts a rate limit window may allow.
pub const MAX_RATE_LIMIT_MAX: u32 = 1_000_000;

/// The shortest rate limit window: shorter ones are below what a Redis round trip and the
/// receivers' read wait can keep.
pub const MIN_RATE_LIMIT_WINDOW_MS: u64 = 100;

/// The longest rate limit window: one day.
pub const MAX_RATE_LIMIT_WINDOW_MS: u64 = 24 * 3600 * 1000;

impl RateLimit {
    /// Check the bounds; the message names the offending field.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_RATE_LIMIT_MAX).contains(&self.max) {
            return Err(format!(
                "rate_limit.max = {} is out of range: 1 to {MAX_RATE_LIMIT_MAX}",
                self.max
            ));
        }
        if !(MIN_RATE_LIMIT_WINDOW_MS..=MAX_RATE_LIMIT_WINDOW_MS).contains(&self.duration_ms) {
            return Err(format!(
                "rate_limit.duration_ms = {} is out of range: {MIN_RATE_LIMIT_WINDOW_MS} to {MAX_RATE_LIMIT_WINDOW_MS} (a day)",
                self.duration_ms
            ));
        }
        Ok(())
    }

    /// `100 per 1000 ms`, for `outbox queue list` and `stats`.
    pub fn summary(&self) -> String {
        format!("{} per {} ms", self.max, self.duration_ms)
    }
}

/// The smallest `max_len`: Redis trims whole stream nodes (100 entries by default), so a
/// smaller bound would mostly be noise.
pub const MIN_MAX_LEN: u64 = 1000;

/// The largest `max_len`.
pub const MAX_MAX_LEN: u64 = 1_000_000_000;

impl QueueSpec {
    /// The BullMQ options in force for this queue (the defaults when the table is absent).
    pub fn bullmq_options(&self) -> std::borrow::Cow<'_, BullmqOptions> {
        match &self.bullmq {
            Some(options) => std::borrow::Cow::Borrowed(options),
            None => std::borrow::Cow::Owned(BullmqOptions::default()),
        }
    }

    /// Check this queue's table; `handler` is the plugin `[handlers]` binds to it, if any.
    /// The message names the offending option.
    pub fn check(&self, handler: Option<&str>) -> Result<(), String> {
        if let Some(max_len) = self.max_len {
            if self.sink == SinkKind::Bullmq {
                return Err(
                    "max_len applies to streams queues; a BullMQ queue keeps what its removeOnComplete and removeOnFail say"
                        .into(),
                );
            }
            if !(MIN_MAX_LEN..=MAX_MAX_LEN).contains(&max_len) {
                return Err(format!(
                    "max_len = {max_len} is out of range: {MIN_MAX_LEN} to {MAX_MAX_LEN} entries"
                ));
            }
        }
        if let Some(n) = self.concurrency {
            if self.sink == SinkKind::Bullmq {
                return Err(
                    "concurrency applies to streams queues (the host's receivers); BullMQ workers set their own"
                        .into(),
                );
            }
            if !(1..=MAX_QUEUE_CONCURRENCY).contains(&n) {
                return Err(format!(
                    "concurrency = {n} is out of range: 1 to {MAX_QUEUE_CONCURRENCY}"
                ));
            }
        }
        if let Some(limit) = &self.rate_limit {
            if self.sink == SinkKind::Bullmq {
                return Err(
                    "rate_limit applies to streams queues (the host's receivers); BullMQ workers take a limiter of their own"
                        .into(),
                );
            }
            limit.check()?;
        }
        match self.sink {
            SinkKind::Streams => {
                if self.bullmq.is_some() {
                    return Err(
                        "has a [bullmq] table but sink is \"streams\" (set sink = \"bullmq\", or remove the table)"
                            .into(),
                    );
                }
                if self.keep_stream_handler {
                    return Err(
                        "keep_stream_handler only applies to sink = \"bullmq\" (a streams queue's handler always runs)"
                            .into(),
                    );
                }
            }
            SinkKind::Bullmq => {
                if self.ordered {
                    return Err(
                        "ordered = true needs sink = \"streams\": BullMQ workers run a queue's jobs concurrently, with no order per key"
                            .into(),
                    );
                }
                match (handler, self.keep_stream_handler) {
                    (Some(plugin), false) => {
                        return Err(format!(
                            "sink = \"bullmq\" hands its events to BullMQ workers, but [handlers] binds it to '{plugin}', whose receiver reads the queue's stream and would never see a new event. Remove the binding (route the type to a second queue to run both), or set keep_stream_handler = true while the stream left from before the switch drains"
                        ));
                    }
                    (None, true) => {
                        return Err(
                            "keep_stream_handler = true, but [handlers] binds no handler to this queue"
                                .into(),
                        );
                    }
                    _ => {}
                }
                self.bullmq_options().check()?;
            }
        }
        Ok(())
    }
}

/// The default BullMQ key prefix (BullMQ's own default).
pub const DEFAULT_BULLMQ_PREFIX: &str = "bull";

/// The default job id template: `outbox-42` for event 42, the same in every queue the event
/// goes to (each BullMQ queue has its own job ids).
pub const DEFAULT_BULLMQ_JOB_ID: &str = "outbox-{id}";

/// Longest BullMQ prefix and job id template accepted.
const MAX_BULLMQ_NAME_BYTES: usize = 128;

/// Most attempts a route may give a BullMQ job.
pub const MAX_BULLMQ_ATTEMPTS: u32 = 1000;

/// BullMQ's highest priority value (`PRIORITY_LIMIT`, 2^21).
pub const MAX_BULLMQ_PRIORITY: u32 = 1 << 21;

/// Longest delay (job `delay`, backoff `delay_ms`) a route may set: 365 days.
pub const MAX_BULLMQ_DELAY_MS: u64 = 365 * 24 * 3600 * 1000;

/// `[queues."NAME".bullmq]`: how the `bullmq` sink adds a queue's jobs. Each option is the
/// BullMQ job option of the same meaning (`attempts`, `backoff`, `removeOnComplete`,
/// `removeOnFail`, `priority`, `delay`), written into the job's `opts` as `Queue.add` would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BullmqOptions {
    /// Key prefix (BullMQ's `prefix` option; default `bull`). Use a hash tag (`{bull}`) on a
    /// Redis Cluster.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Job id template: `{id}` (the event id, required) and `{queue}` (the queue name), with
    /// letters, digits, `.`, `_` and `-` around them. Default `outbox-{id}`.
    #[serde(default = "default_job_id")]
    pub job_id: String,
    /// What the job's `data` holds: the event envelope (default) or its payload alone (for
    /// workers written against a dispatcher that added the payload as the data).
    #[serde(default)]
    pub data: JobData,
    /// Tries in all, the first included (BullMQ `attempts`; BullMQ's default is one try).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Delay between tries (BullMQ `backoff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BullmqBackoff>,
    /// What to keep of completed jobs (BullMQ `removeOnComplete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_on_complete: Option<KeepJobs>,
    /// What to keep of failed jobs (BullMQ `removeOnFail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_on_fail: Option<KeepJobs>,
    /// BullMQ `priority`: 1 is the highest, up to 2^21; 0 or absent: no priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// BullMQ `delay`: the job waits this long in the delayed set before a worker may take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

fn default_prefix() -> String {
    DEFAULT_BULLMQ_PREFIX.to_string()
}

fn default_job_id() -> String {
    DEFAULT_BULLMQ_JOB_ID.to_string()
}

impl Default for BullmqOptions {
    fn default() -> Self {
        Self {
            prefix: default_prefix(),
            job_id: default_job_id(),
            data: JobData::default(),
            attempts: None,
            backoff: None,
            remove_on_complete: None,
            remove_on_fail: None,
            priority: None,
            delay_ms: None,
        }
    }
}

/// What a BullMQ job's `data` holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobData {
    /// `{ id, type, version, tenant, payload, headers, dispatchKey, orderingKey, createdAt }`.
    #[default]
    Event,
    /// The event's payload, as published.
    Payload,
}

/// BullMQ's built-in backoff strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackoffKind {
    /// The same delay before every retry.
    Fixed,
    /// `delay_ms * 2^(attempt - 1)`.
    Exponential,
}

/// `backoff = { type = "exponential", delay_ms = 1000 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BullmqBackoff {
    /// The strategy.
    #[serde(rename = "type")]
    pub kind: BackoffKind,
    /// Its base delay.
    pub delay_ms: u64,
}

/// BullMQ's `KeepJobs`: `true` (remove at once), `false` (keep), a count of jobs to keep, or
/// `{ age = SECONDS, count = N }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KeepJobs {
    /// `true`: remove the job when it finishes; `false`: keep every job.
    Remove(bool),
    /// Keep the latest N jobs.
    Count(u64),
    /// Keep jobs younger than `age` seconds and/or the latest `count`.
    Keep {
        /// Maximum age in seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        age: Option<u64>,
        /// Maximum count.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
    },
}

impl KeepJobs {
    /// The value as BullMQ stores it in a job's `opts`.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            KeepJobs::Remove(b) => serde_json::Value::Bool(b),
            KeepJobs::Count(n) => serde_json::Value::from(n),
            KeepJobs::Keep { age, count } => {
                let mut map = serde_json::Map::new();
                if let Some(age) = age {
                    map.insert("age".into(), age.into());
                }
                if let Some(count) = count {
                    map.insert("count".into(), count.into());
                }
                serde_json::Value::Object(map)
            }
        }
    }
}

impl BullmqOptions {
    /// Check every option; the message names the offending one.
    pub fn check(&self) -> Result<(), String> {
        check_prefix(&self.prefix)?;
        check_job_id_template(&self.job_id)?;
        if let Some(n) = self.attempts {
            if !(1..=MAX_BULLMQ_ATTEMPTS).contains(&n) {
                return Err(format!(
                    "bullmq.attempts must be 1 to {MAX_BULLMQ_ATTEMPTS}, got {n}"
                ));
            }
        }
        if let Some(backoff) = &self.backoff {
            if backoff.delay_ms > MAX_BULLMQ_DELAY_MS {
                return Err(format!(
                    "bullmq.backoff.delay_ms must be at most {MAX_BULLMQ_DELAY_MS} (365 days), got {}",
                    backoff.delay_ms
                ));
            }
        }
        if let Some(p) = self.priority {
            if p > MAX_BULLMQ_PRIORITY {
                return Err(format!(
                    "bullmq.priority must be 0 to {MAX_BULLMQ_PRIORITY} (BullMQ's limit), got {p}"
                ));
            }
        }
        if let Some(d) = self.delay_ms {
            if d > MAX_BULLMQ_DELAY_MS {
                return Err(format!(
                    "bullmq.delay_ms must be at most {MAX_BULLMQ_DELAY_MS} (365 days), got {d}"
                ));
            }
        }
        for (name, keep) in [
            ("remove_on_complete", &self.remove_on_complete),
            ("remove_on_fail", &self.remove_on_fail),
        ] {
            if let Some(KeepJobs::Keep {
                age: None,
                count: None,
            }) = keep
            {
                return Err(format!(
                    "bullmq.{name}: give age (seconds) and/or count, or true/false, or a count"
                ));
            }
        }
        Ok(())
    }

    /// The job id of `event_id` in `queue`, from the template.
    pub fn job_id(&self, event_id: i64, queue: &str) -> String {
        render_job_id(&self.job_id, event_id, queue)
    }

    /// The job options as BullMQ's `Queue.add` stores them in the job hash (`opts`), without
    /// `jobId`, as a JSON object.
    pub fn job_opts(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut opts = serde_json::Map::new();
        // `Queue.add` always stores attempts (0 when not given: one try).
        opts.insert("attempts".into(), self.attempts.unwrap_or(0).into());
        if let Some(backoff) = &self.backoff {
            opts.insert(
                "backoff".into(),
                serde_json::json!({
                    "type": match backoff.kind {
                        BackoffKind::Fixed => "fixed",
                        BackoffKind::Exponential => "exponential",
                    },
                    "delay": backoff.delay_ms,
                }),
            );
        }
        if let Some(keep) = self.remove_on_complete {
            opts.insert("removeOnComplete".into(), keep.to_json());
        }
        if let Some(keep) = self.remove_on_fail {
            opts.insert("removeOnFail".into(), keep.to_json());
        }
        if let Some(p) = self.priority.filter(|p| *p > 0) {
            opts.insert("priority".into(), p.into());
        }
        if let Some(d) = self.delay_ms.filter(|d| *d > 0) {
            opts.insert("delay".into(), d.into());
        }
        opts
    }

    /// One line for `outbox routes which` and `outbox stats`: prefix and the options set.
    pub fn summary(&self) -> String {
        let mut parts = vec![
            format!("prefix {}", self.prefix),
            format!("job id {}", self.job_id),
        ];
        if self.data == JobData::Payload {
            parts.push("data = payload".into());
        }
        if let Some(n) = self.attempts {
            parts.push(format!("attempts {n}"));
        }
        if let Some(b) = &self.backoff {
            let kind = match b.kind {
                BackoffKind::Fixed => "fixed",
                BackoffKind::Exponential => "exponential",
            };
            parts.push(format!("backoff {kind} {} ms", b.delay_ms));
        }
        if let Some(p) = self.priority.filter(|p| *p > 0) {
            parts.push(format!("priority {p}"));
        }
        if let Some(d) = self.delay_ms.filter(|d| *d > 0) {
            parts.push(format!("delay {d} ms"));
        }
        parts.join(", ")
    }
}

/// A BullMQ key prefix: 1 to 128 of letters, digits, `.`, `_`, `-`, `:`, `{`, `}` (a hash tag
/// for Redis Cluster).
fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() || prefix.len() > MAX_BULLMQ_NAME_BYTES {
        return Err(format!(
            "bullmq.prefix must be 1 to {MAX_BULLMQ_NAME_BYTES} characters"
        ));
    }
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '{' | '}'))
    {
        return Err(format!(
            "bullmq.prefix {prefix:?}: use letters, digits, '.', '_', '-', ':' and a {{hash tag}}"
        ));
    }
    Ok(())
}

/// A job id template renders ids BullMQ accepts and that name one event each: `{id}` present
/// (so two events never share an id, and the id always has a digit, so it never equals one of
/// BullMQ's own key names such as `wait` or `meta`), no `:` (BullMQ 5 refuses it in custom ids),
/// and a literal part that is not only digits (an integer id is refused by BullMQ and would
/// collide with the ids it numbers itself).
fn check_job_id_template(template: &str) -> Result<(), String> {
    if template.is_empty() || template.len() > MAX_BULLMQ_NAME_BYTES {
        return Err(format!(
            "bullmq.job_id must be 1 to {MAX_BULLMQ_NAME_BYTES} characters"
        ));
    }
    if !template.contains("{id}") {
        return Err(format!(
            "bullmq.job_id {template:?} must contain {{id}} (the event id), or two events would share a job id"
        ));
    }
    let literal = template.replace("{id}", "").replace("{queue}", "");
    if let Some(c) = literal
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "bullmq.job_id {template:?}: {c:?} is not allowed (letters, digits, '.', '_', '-' around {{id}} and {{queue}}; BullMQ refuses ':' in custom job ids)"
        ));
    }
    if literal.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "bullmq.job_id {template:?} renders integer ids, which BullMQ refuses (they would collide with the ids it numbers itself): add a prefix such as \"outbox-{{id}}\""
        ));
    }
    Ok(())
}

/// Fill a (checked) job id template.
fn render_job_id(template: &str, event_id: i64, queue: &str) -> String {
    template
        .replace("{id}", &event_id.to_string())
        .replace("{queue}", queue)
}

/// Check every `[queues]` table against `[handlers]`; the message names the queue.
pub(crate) fn check_queue_specs(
    queues: &BTreeMap<String, QueueSpec>,
    handlers: &BTreeMap<String, String>,
) -> Result<(), String> {
    for (queue, spec) in queues {
        spec.check(handlers.get(queue).map(String::as_str))
            .map_err(|m| format!("[queues.\"{queue}\"] {m}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn bullmq(options: BullmqOptions) -> QueueSpec {
        QueueSpec {
            sink: SinkKind::Bullmq,
            bullmq: Some(options),
            ..QueueSpec::default()
        }
    }

    #[test]
    fn queue_concurrency_and_rate_limits_out_of_range_or_on_bullmq_are_rejected() {
        let streams = |concurrency, rate_limit| QueueSpec {
            concurrency,
            rate_limit,
            ..QueueSpec::default()
        };
        let limit = |max, duration_ms| Some(RateLimit { max, duration_ms });
        assert!(streams(Some(1), limit(1, 100)).check(None).is_ok());
        assert!(streams(Some(1024), limit(1_000_000, 86_400_000))
            .check(None)
            .is_ok());
        for (spec, wanted) in [
            (streams(Some(0), None), "concurrency = 0 is out of range"),
            (
                streams(Some(1025), None),
                "concurrency = 1025 is out of range",
            ),
            (streams(None, limit(0, 1000)), "rate_limit.max = 0"),
            (streams(None, limit(5, 99)), "rate_limit.duration_ms = 99"),
            (
                streams(None, limit(5, 86_400_001)),
                "rate_limit.duration_ms = 86400001",
            ),
            (
                QueueSpec {
                    concurrency: Some(4),
                    ..bullmq(BullmqOptions::default())
                },
                "concurrency applies to streams queues",
            ),
            (
                QueueSpec {
                    rate_limit: limit(5, 1000),
                    ..bullmq(BullmqOptions::default())
                },
                "rate_limit applies to streams queues",
            ),
        ] {
            let err = spec.check(None).unwrap_err();
            assert!(err.contains(wanted), "{err}");
        }
    }

    #[test]
    fn job_id_templates_that_could_name_two_jobs_or_be_refused_by_bullmq_are_rejected() {
        for (template, wanted) in [
            ("outbox-{id}", None),
            ("{queue}-{id}", None),
            ("evt.{id}_x", None),
            ("outbox:{id}", Some("':' is not allowed")),
            ("{id}", Some("integer ids")),
            ("7{id}", Some("integer ids")),
            ("outbox", Some("must contain {id}")),
            ("out box-{id}", Some("' ' is not allowed")),
            ("{ID}-{id}", Some("'{' is not allowed")),
            ("", Some("1 to 128")),
        ] {
            let result = check_job_id_template(template);
            match wanted {
                None => assert!(result.is_ok(), "{template:?}: {result:?}"),
                Some(part) => {
                    let e = result.unwrap_err();
                    assert!(e.contains(part), "{template:?}: {e}");
                }
            }
        }
        assert_eq!(
            render_job_id("{queue}-{id}", 42, "outbox.mail"),
            "outbox.mail-42"
        );
    }

    #[test]
    fn job_opts_are_stored_as_queue_add_stores_them() {
        let options = BullmqOptions {
            attempts: Some(3),
            backoff: Some(BullmqBackoff {
                kind: BackoffKind::Exponential,
                delay_ms: 1000,
            }),
            remove_on_complete: Some(KeepJobs::Remove(true)),
            remove_on_fail: Some(KeepJobs::Keep {
                age: Some(3600),
                count: None,
            }),
            priority: Some(0),
            delay_ms: Some(250),
            ..BullmqOptions::default()
        };
        assert_eq!(
            serde_json::Value::Object(options.job_opts()),
            serde_json::json!({
                "attempts": 3,
                "backoff": {"type": "exponential", "delay": 1000},
                "removeOnComplete": true,
                "removeOnFail": {"age": 3600},
                "delay": 250,
            })
        );
        assert_eq!(
            serde_json::Value::Object(BullmqOptions::default().job_opts()),
            serde_json::json!({"attempts": 0})
        );
    }

    #[test]
    fn a_handler_binding_on_a_bullmq_queue_is_refused_unless_stated() {
        let spec = bullmq(BullmqOptions::default());
        let e = spec.check(Some("workflow-trigger")).unwrap_err();
        assert!(e.contains("keep_stream_handler"), "{e}");
        let stated = QueueSpec {
            keep_stream_handler: true,
            ..spec.clone()
        };
        stated.check(Some("workflow-trigger")).unwrap();
        assert!(stated.check(None).unwrap_err().contains("binds no handler"));
        spec.check(None).unwrap();
    }

    #[test]
    fn bounds_and_misplaced_options_are_refused() {
        let cases: Vec<(QueueSpec, &str)> = vec![
            (
                bullmq(BullmqOptions {
                    attempts: Some(0),
                    ..BullmqOptions::default()
                }),
                "attempts must be 1 to",
            ),
            (
                bullmq(BullmqOptions {
                    priority: Some(MAX_BULLMQ_PRIORITY + 1),
                    ..BullmqOptions::default()
                }),
                "priority must be",
            ),
            (
                bullmq(BullmqOptions {
                    delay_ms: Some(MAX_BULLMQ_DELAY_MS + 1),
                    ..BullmqOptions::default()
                }),
                "delay_ms must be at most",
            ),
            (
                bullmq(BullmqOptions {
                    prefix: "bull prefix".into(),
                    ..BullmqOptions::default()
                }),
                "bullmq.prefix",
            ),
            (
                bullmq(BullmqOptions {
                    remove_on_fail: Some(KeepJobs::Keep {
                        age: None,
                        count: None,
                    }),
                    ..BullmqOptions::default()
                }),
                "remove_on_fail",
            ),
            (
                QueueSpec {
                    ordered: true,
                    ..bullmq(BullmqOptions::default())
                },
                "ordered = true needs sink",
            ),
            (
                QueueSpec {
                    bullmq: Some(BullmqOptions::default()),
                    ..QueueSpec::default()
                },
                "sink is \"streams\"",
            ),
            (
                QueueSpec {
                    max_len: Some(MIN_MAX_LEN - 1),
                    ..QueueSpec::default()
                },
                "max_len = 999 is out of range",
            ),
            (
                QueueSpec {
                    max_len: Some(MAX_MAX_LEN + 1),
                    ..QueueSpec::default()
                },
                "out of range",
            ),
            (
                QueueSpec {
                    max_len: Some(5000),
                    ..bullmq(BullmqOptions::default())
                },
                "max_len applies to streams queues",
            ),
        ];
        for (spec, part) in cases {
            let e = spec.check(None).unwrap_err();
            assert!(e.contains(part), "{spec:?}: {e}");
        }
    }

    #[test]
    fn routes_toml_declares_a_bullmq_queue_and_refuses_a_handler_binding_on_it() {
        let path = std::path::Path::new("routes.toml");
        let text = r#"
[routes]
"mail." = "emails"
[queues."emails"]
sink = "bullmq"
[queues."emails".bullmq]
prefix = "{bull}"
attempts = 5
backoff = { type = "exponential", delay_ms = 1000 }
remove_on_complete = { age = 3600 }
remove_on_fail = 100
data = "payload"
[policy]
plugin = "deny-all"
"#;
        let routes = crate::config::RoutesFile::parse(text, path).unwrap();
        assert_eq!(routes.sink_of("emails"), SinkKind::Bullmq);
        assert_eq!(routes.sink_of("other"), SinkKind::Streams);
        let options = routes.bullmq_options("emails");
        assert_eq!(options.prefix, "{bull}");
        assert_eq!(options.data, JobData::Payload);
        assert_eq!(options.remove_on_fail, Some(KeepJobs::Count(100)));
        assert_eq!(options.job_id(42, "emails"), "outbox-42");

        let bound = format!("{text}\n[handlers]\n\"emails\" = \"mailer\"\n[plugins.mailer]\n");
        let e = crate::config::RoutesFile::parse(&bound, path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[queues.\"emails\"]") && e.contains("keep_stream_handler"),
            "{e}"
        );
        let typo = text.replace("attempts = 5", "attempt = 5");
        let e = crate::config::RoutesFile::parse(&typo, path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("attempt"), "{e}");
        let bad_id = text.replace("data = \"payload\"", "job_id = \"outbox:{id}\"");
        let e = crate::config::RoutesFile::parse(&bad_id, path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("BullMQ refuses ':'"), "{e}");
    }

    #[test]
    fn keep_jobs_parse_every_bullmq_form() {
        #[derive(Deserialize)]
        struct T {
            a: KeepJobs,
            b: KeepJobs,
            c: KeepJobs,
        }
        let t: T = toml::from_str("a = true\nb = 1000\nc = { age = 60, count = 5 }").unwrap();
        assert_eq!(t.a, KeepJobs::Remove(true));
        assert_eq!(t.b, KeepJobs::Count(1000));
        assert_eq!(t.c.to_json(), serde_json::json!({"age": 60, "count": 5}));
    }
}
