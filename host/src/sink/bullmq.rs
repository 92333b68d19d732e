//! BullMQ sink: adds each routed event as a job in BullMQ's own Redis format, so that an
//! unmodified `bullmq` `Worker` (BullMQ 5, Node.js) processes it, exactly once per (event,
//! queue).
//!
//! Owns the hand-off: per queue, the job options from `[queues."NAME".bullmq]` (read per batch
//! from the routes in force), per event the job id from the queue's template (default
//! `outbox-<event id>`), the name (the event type) and the data (the event as JSON,
//! [`crate::queue::job_data`], or with `data = "payload"` the payload alone), run through the
//! add script of [`crate::queue::bullmq`] (what BullMQ 5's `Queue.add` writes, key for key,
//! plus the host's enqueue marker). Key names, the job hash and the script are
//! [`crate::queue::bullmq`]'s; it never builds a key itself. It never touches PostgreSQL and
//! never decides retries: BullMQ's own `attempts`/`backoff` retry a job whose processor throws.

use std::collections::HashMap;
use std::sync::Arc;

use crate::redis_conn::RedisConn;
use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::script::{Calls, EnqueueScript};
use super::{Enqueue, EnqueueResult, Sink, SinkError};
use crate::config::{BullmqOptions, JobData, RoutesFile};
use crate::queue::bullmq::add_job_script;
use crate::queue::{job_data, BullmqQueueKeys, QueueKeys};

/// What the sink writes for one queue in one batch, prepared once per queue.
struct QueueJobs {
    options: BullmqOptions,
    queue_keys: BullmqQueueKeys,
    /// KEYS[3..=12] of the add script ([`BullmqQueueKeys::add_job_keys`]).
    keys: [String; 10],
    /// The job options after `"jobId":...,` (a JSON object's remaining members and `}`).
    opts_tail: String,
    delay: u64,
    priority: u32,
}

impl QueueJobs {
    fn new(queue: &str, options: BullmqOptions) -> Self {
        let keys = BullmqQueueKeys::new(&options.prefix, queue);
        let opts = serde_json::Value::Object(options.job_opts()).to_string();
        // `{"attempts":0,...}` -> `"attempts":0,...}`: the job's opts are `{"jobId":ID,` + tail.
        let opts_tail = opts.get(1..).unwrap_or("}").to_string();
        Self {
            delay: options.delay_ms.unwrap_or(0),
            priority: options.priority.unwrap_or(0),
            keys: keys.add_job_keys(),
            queue_keys: keys,
            options,
            opts_tail,
        }
    }

    fn job_key(&self, job_id: &str) -> String {
        self.queue_keys.job(job_id)
    }

    fn opts(&self, job_id: &str) -> String {
        let id = serde_json::Value::String(job_id.to_string()).to_string();
        if self.opts_tail == "}" {
            format!("{{\"jobId\":{id}}}")
        } else {
            format!("{{\"jobId\":{id},{}", self.opts_tail)
        }
    }
}

/// The BullMQ sink: per-queue options from the routes in force.
#[derive(Clone)]
pub struct BullmqSink {
    script: EnqueueScript,
    keys: QueueKeys,
    dedupe_ttl_secs: u64,
    routes: Arc<ArcSwap<RoutesFile>>,
}

impl BullmqSink {
    /// A sink over `conn` (the host's Redis), with the host's enqueue markers under `keys`, each
    /// kept `dedupe_ttl_secs`; queue options come from `routes` at each batch. Loads the script.
    pub async fn new(
        conn: RedisConn,
        keys: QueueKeys,
        dedupe_ttl_secs: u64,
        concurrency: usize,
        routes: Arc<ArcSwap<RoutesFile>>,
    ) -> Result<Self, SinkError> {
        let sink = Self {
            script: EnqueueScript::new(
                conn,
                add_job_script(),
                Calls::PerEntry,
                "the BullMQ add script",
                concurrency,
            ),
            keys,
            dedupe_ttl_secs: dedupe_ttl_secs.max(1),
            routes,
        };
        sink.script.load().await?;
        Ok(sink)
    }

    /// Each pipeline ends with `WAIT replicas 1000` (see [`super::RedisSink::waiting_for_replicas`]).
    pub fn waiting_for_replicas(mut self, replicas: usize) -> Self {
        self.script = self.script.waiting_for_replicas(replicas);
        self
    }

    /// Add every hand-off as a job, with each queue's options in `routes`. Results come back in
    /// input order; the job id stands where the streams sink gives the entry id.
    pub async fn enqueue_with(
        &self,
        items: &[Enqueue<'_>],
        routes: &RoutesFile,
    ) -> Vec<EnqueueResult> {
        let mut queues: HashMap<&str, QueueJobs> = HashMap::new();
        for item in items {
            queues
                .entry(item.queue)
                .or_insert_with(|| QueueJobs::new(item.queue, routes.bullmq_options(item.queue)));
        }
        let timestamp = chrono::Utc::now().timestamp_millis().max(0);
        let args = |one: &[Enqueue<'_>], cmd: &mut redis::Pipeline| {
            let Some((item, jobs)) = one
                .first()
                .and_then(|item| Some((item, queues.get(item.queue)?)))
            else {
                return;
            };
            let event = item.event;
            let job_id = jobs.options.job_id(event.id, item.queue);
            cmd.arg(12)
                .arg(self.keys.enqueued_marker(item.queue, event.id))
                .arg(jobs.job_key(&job_id));
            for key in &jobs.keys {
                cmd.arg(key);
            }
            cmd.arg(self.dedupe_ttl_secs)
                .arg(&job_id)
                .arg(&event.event_type);
            match jobs.options.data {
                JobData::Event => cmd.arg(job_data(event)),
                JobData::Payload => cmd.arg(&event.payload),
            };
            cmd.arg(jobs.opts(&job_id))
                .arg(timestamp)
                .arg(jobs.delay)
                .arg(jobs.priority);
        };
        self.script.run_all(items, &args).await
    }
}

impl Sink for BullmqSink {
    fn name(&self) -> &str {
        "bullmq"
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        async move {
            let routes = self.routes.load_full();
            self.enqueue_with(items, &routes).await
        }
        .boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        super::redis_streams::ping(self.script.connection()).boxed()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn job_opts_carry_the_job_id_first_then_the_queue_options() {
        let jobs = QueueJobs::new(
            "outbox.mail",
            BullmqOptions {
                attempts: Some(3),
                ..BullmqOptions::default()
            },
        );
        let opts: serde_json::Value = serde_json::from_str(&jobs.opts("outbox-42")).unwrap();
        assert_eq!(
            opts,
            serde_json::json!({"jobId": "outbox-42", "attempts": 3})
        );
        assert_eq!(jobs.job_key("outbox-42"), "bull:outbox.mail:outbox-42");
        assert_eq!(jobs.keys[0], "bull:outbox.mail:wait");
    }
}
