//! `[queues."NAME".bullmq]`: how the `bullmq` sink adds a queue's jobs.
//!
//! Owns the BullMQ job options a route may set and the rules that keep them sane before the
//! host keeps them: a job id template that can never render an id BullMQ refuses or one that
//! names two jobs, bounded attempts, delays and priorities, a prefix fit for a Redis key. It
//! never connects to Redis; the BullMQ sink reads these options per batch.

use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

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
