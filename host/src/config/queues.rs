//! `[queues."NAME"]`: per-queue options, and the sink each queue's events go to.
//!
//! Owns what a queue's table may say (ordering, which sink, stream bounds, concurrency, rate
//! limit) and the rules that keep those options sane before the host keeps them; the BullMQ job
//! options of a `bullmq` queue are in `bullmq.rs`. It never connects to Redis; the sinks and
//! receivers read these options per batch.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{BullmqOptions, NatsOptions, RabbitmqOptions};

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
    /// A NATS JetStream stream (`[queues."NAME".nats]`, on `OUTBOX_NATS_URL`), read by the
    /// stream's own consumers.
    Nats,
    /// A RabbitMQ exchange (`[queues."NAME".rabbitmq]`, on `OUTBOX_RABBITMQ_URL`), read by
    /// whatever consumes the queues bound to it.
    Rabbitmq,
}

impl SinkKind {
    /// The name used in `routes.toml`, logs and `outbox stats`.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Streams => "streams",
            SinkKind::Bullmq => "bullmq",
            SinkKind::Nats => "nats",
            SinkKind::Rabbitmq => "rabbitmq",
        }
    }

    /// True for the one kind the host's own receivers read (`streams`); every other kind is
    /// read by the queue system's own consumers.
    pub fn host_receives(self) -> bool {
        self == SinkKind::Streams
    }

    /// Every kind, in the order `outbox stats` and the bench list them.
    pub const ALL: [SinkKind; 4] = [
        SinkKind::Streams,
        SinkKind::Bullmq,
        SinkKind::Nats,
        SinkKind::Rabbitmq,
    ];
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
    /// Which sink the queue's events go to (`streams`, the default, `bullmq`, `nats` or
    /// `rabbitmq`).
    #[serde(default)]
    pub sink: SinkKind,
    /// `[queues."NAME".bullmq]`: how jobs are added, for `sink = "bullmq"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bullmq: Option<BullmqOptions>,
    /// `[queues."NAME".nats]`: the JetStream stream and subject, for `sink = "nats"`
    /// (required there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<NatsOptions>,
    /// `[queues."NAME".rabbitmq]`: the exchange and routing key, for `sink = "rabbitmq"`
    /// (required there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rabbitmq: Option<RabbitmqOptions>,
    /// On a queue of another sink than `streams` that `[handlers]` also binds: the binding is
    /// meant (its receiver drains the entries left in the queue's stream from before the
    /// switch). Without it such a binding is refused: new events would never reach that
    /// handler.
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
    pub fn check(&self, handler: Option<&str>, queue: &str) -> Result<(), String> {
        let sink = self.sink;
        let receivers_only = |option: &str, otherwise: &str| -> Result<(), String> {
            if sink.host_receives() {
                Ok(())
            } else {
                Err(format!(
                    "{option} applies to streams queues (the host's receivers); {otherwise}"
                ))
            }
        };
        if let Some(max_len) = self.max_len {
            receivers_only(
                "max_len",
                "a queue on another sink keeps what its queue system is told to keep",
            )?;
            if !(MIN_MAX_LEN..=MAX_MAX_LEN).contains(&max_len) {
                return Err(format!(
                    "max_len = {max_len} is out of range: {MIN_MAX_LEN} to {MAX_MAX_LEN} entries"
                ));
            }
        }
        if let Some(n) = self.concurrency {
            receivers_only("concurrency", "its own consumers set theirs")?;
            if !(1..=MAX_QUEUE_CONCURRENCY).contains(&n) {
                return Err(format!(
                    "concurrency = {n} is out of range: 1 to {MAX_QUEUE_CONCURRENCY}"
                ));
            }
        }
        if let Some(limit) = &self.rate_limit {
            receivers_only(
                "rate_limit",
                "its own consumers take a limiter of their own",
            )?;
            limit.check()?;
        }
        if self.ordered {
            receivers_only(
                "ordered = true",
                "the dispatcher hands off one event of an ordering key at a time either way, and the queue system's consumers keep their own order",
            )?;
        }
        for (table, present, kind) in [
            ("bullmq", self.bullmq.is_some(), SinkKind::Bullmq),
            ("nats", self.nats.is_some(), SinkKind::Nats),
            ("rabbitmq", self.rabbitmq.is_some(), SinkKind::Rabbitmq),
        ] {
            if present && sink != kind {
                return Err(format!(
                    "has a [{table}] table but sink is \"{sink}\" (set sink = \"{table}\", or remove the table)"
                ));
            }
        }
        match (sink.host_receives(), handler, self.keep_stream_handler) {
            (true, _, true) => {
                return Err(
                    "keep_stream_handler only applies to a queue on another sink than streams (a streams queue's handler always runs)"
                        .into(),
                );
            }
            (false, Some(plugin), false) => {
                return Err(format!(
                    "sink = \"{sink}\" hands its events to the queue system's own consumers, but [handlers] binds it to '{plugin}', whose receiver reads the queue's stream and would never see a new event. Remove the binding (route the type to a second queue to run both), or set keep_stream_handler = true while the stream left from before the switch drains"
                ));
            }
            (false, None, true) => {
                return Err(
                    "keep_stream_handler = true, but [handlers] binds no handler to this queue"
                        .into(),
                );
            }
            _ => {}
        }
        match sink {
            SinkKind::Streams => Ok(()),
            SinkKind::Bullmq => self.bullmq_options().check(),
            SinkKind::Nats => match &self.nats {
                Some(options) => options.check(queue),
                None => Err(
                    "sink = \"nats\" needs a [nats] table naming its JetStream stream: nats = { stream = \"ORDERS\" }"
                        .into(),
                ),
            },
            SinkKind::Rabbitmq => match &self.rabbitmq {
                Some(options) => options.check(queue),
                None => Err(
                    "sink = \"rabbitmq\" needs a [rabbitmq] table naming its exchange: rabbitmq = { exchange = \"outbox\" }"
                        .into(),
                ),
            },
        }
    }
}

/// Check every `[queues]` table against `[handlers]`; the message names the queue.
pub(crate) fn check_queue_specs(
    queues: &BTreeMap<String, QueueSpec>,
    handlers: &BTreeMap<String, String>,
) -> Result<(), String> {
    for (queue, spec) in queues {
        spec.check(handlers.get(queue).map(String::as_str), queue)
            .map_err(|m| format!("[queues.\"{queue}\"] {m}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::bullmq::{MAX_BULLMQ_DELAY_MS, MAX_BULLMQ_PRIORITY};
    use crate::config::{JobData, KeepJobs};

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
        assert!(streams(Some(1), limit(1, 100)).check(None, "q").is_ok());
        assert!(streams(Some(1024), limit(1_000_000, 86_400_000))
            .check(None, "q")
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
            let err = spec.check(None, "q").unwrap_err();
            assert!(err.contains(wanted), "{err}");
        }
    }

    #[test]
    fn a_handler_binding_on_a_bullmq_queue_is_refused_unless_stated() {
        let spec = bullmq(BullmqOptions::default());
        let e = spec.check(Some("workflow-trigger"), "q").unwrap_err();
        assert!(e.contains("keep_stream_handler"), "{e}");
        let stated = QueueSpec {
            keep_stream_handler: true,
            ..spec.clone()
        };
        stated.check(Some("workflow-trigger"), "q").unwrap();
        assert!(stated
            .check(None, "q")
            .unwrap_err()
            .contains("binds no handler"));
        spec.check(None, "q").unwrap();
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
                "ordered = true applies to streams queues",
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
            let e = spec.check(None, "q").unwrap_err();
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
}
