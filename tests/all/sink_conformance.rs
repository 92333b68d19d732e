//! The sink conformance suite: one set of checks, each run against every sink (Watermill's
//! `TestPubSub` is the model), against the real Redis (`REDIS_URL`, a key prefix and a BullMQ
//! prefix per test).
//!
//! Each check in [`checks`] is written once, for any [`SinkUnderTest`]; the [`conformance!`]
//! list at the bottom runs every check against every sink: the Redis Streams sink, the BullMQ
//! sink, NATS JetStream and RabbitMQ (through the dispatcher's per-queue sink, every suite queue
//! on that broker), and the per-queue sink with the suite's queues split over all four kinds.
//! A later sink is one more line in that list, with its harness (how to connect it, which kind
//! each queue is on) and, for a new queue system, how to read back what it wrote
//! ([`Landed::read`], the brokers' in `brokers`, with their own clients).
//!
//! What every sink must do: write exactly the fields of the wire contract (spelled out here
//! literally, not taken from the host's constants, so a renamed constant fails here); take a
//! batch spanning queues (and pipelines) with one result per item in input order; hand off
//! each (event, queue) once however often it is asked to (a re-claim after a crash; RabbitMQ,
//! which keeps no message ids, delivers it again with the same `message_id`); keep the events
//! of one ordering key in hand-off order; answer a dead queue system with an infrastructure
//! error per entry (never a refusal, never a lost event: once it is back the same hand-off
//! lands, once); and carry payloads, headers (a trace context among them) and keys at their
//! limits byte for byte.

mod brokers;
mod checks;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use outbox_host::config::{RoutesFile, Settings, SinkKind, DEFAULT_MAX_PAYLOAD_BYTES};
use outbox_host::fault::Service;
use outbox_host::queue::QueueKeys;
use outbox_host::redis_conn::{RedisConn, RedisTarget};
use outbox_host::sink::{BullmqSink, Enqueue, EnqueueResult, QueueSinks, RedisSink, Sink};
use outbox_host::store::ClaimedEvent;
use redis::AsyncCommands;
use serde_json::{json, Value};

use outbox_tests::bullmq_app::remove_bullmq_prefix;
use outbox_tests::{nats_url, rabbitmq_url, redis_url, OutageProxy};

use brokers::{expected_headers, message_id, BrokerWorld};

/// The queues every check uses.
const QUEUES: [&str; 4] = ["conf.a", "conf.b", "conf.c", "conf.d"];

/// How long an enqueue marker lives in the suite.
const DEDUPE_TTL: Duration = Duration::from_secs(3600);

/// Pipelines in flight per batch (more than one, so a batch runs pipelines side by side).
const CONCURRENCY: usize = 4;

/// One test's keys: a host key prefix and a BullMQ prefix of its own, and a direct Redis
/// connection for reading back.
struct World {
    prefix: String,
    bull_prefix: String,
    redis: RedisConn,
    /// The test's stream and exchange, when its sink uses the brokers.
    brokers: Option<BrokerWorld>,
}

/// Where a sink under test reaches each queue system (a proxy's address for the one a check
/// cuts off).
struct Urls {
    redis: String,
    nats: String,
    rabbitmq: String,
}

impl Urls {
    fn direct() -> Self {
        Self {
            redis: redis_url(),
            nats: nats_url(),
            rabbitmq: rabbitmq_url(),
        }
    }
}

impl World {
    async fn new(sink: &impl SinkUnderTest) -> Self {
        let id = uuid::Uuid::new_v4().simple();
        let redis = RedisTarget::parse(&redis_url())
            .unwrap()
            .shared()
            .await
            .expect("Redis at REDIS_URL must be running for the tests");
        let uses_brokers = QUEUES
            .iter()
            .any(|q| matches!(sink.kind_of(q), SinkKind::Nats | SinkKind::Rabbitmq));
        let brokers = match uses_brokers {
            true => Some(BrokerWorld::new(&id.to_string(), &QUEUES).await),
            false => None,
        };
        Self {
            prefix: format!("test:{id}:"),
            bull_prefix: format!("bullconf-{id}"),
            redis,
            brokers,
        }
    }

    fn brokers(&self) -> &BrokerWorld {
        self.brokers.as_ref().expect("a broker sink's world")
    }

    /// The routes putting each suite queue on the sink kind `sink` says.
    fn routes(&self, sink: &impl SinkUnderTest) -> RoutesFile {
        let mut text = String::from("[policy]\nplugin = \"deny-all\"\n");
        for queue in QUEUES {
            let table = match sink.kind_of(queue) {
                SinkKind::Streams => continue,
                SinkKind::Bullmq => format!("bullmq = {{ prefix = \"{}\" }}", self.bull_prefix),
                SinkKind::Nats => format!(
                    "nats = {{ stream = \"{}\", subject = \"{}\" }}",
                    self.brokers().stream,
                    self.brokers().subject(queue)
                ),
                SinkKind::Rabbitmq => {
                    format!(
                        "rabbitmq = {{ exchange = \"{}\" }}",
                        self.brokers().exchange
                    )
                }
            };
            text.push_str(&format!(
                "\n[queues.\"{queue}\"]\nsink = \"{}\"\n{table}\n",
                sink.kind_of(queue)
            ));
        }
        RoutesFile::parse(&text, Path::new("<sink conformance routes>")).unwrap()
    }

    /// Settings for a host on the queue systems `urls` names, under this world's prefix.
    fn settings(&self, urls: &Urls) -> Settings {
        Settings {
            redis_url: urls.redis.clone(),
            redis_prefix: self.prefix.clone(),
            nats_url: Some(urls.nats.clone()),
            rabbitmq_url: Some(urls.rabbitmq.clone()),
            dedupe_ttl: DEDUPE_TTL,
            dispatch_concurrency: CONCURRENCY,
            ..Settings::default()
        }
    }

    /// The per-queue sink the dispatcher uses, each queue on `sink`'s kind, its destinations
    /// checked as at a host's start.
    async fn queue_sinks(&self, sink: &impl SinkUnderTest, urls: &Urls) -> Arc<dyn Sink> {
        let routes = Arc::new(ArcSwap::from_pointee(self.routes(sink)));
        let sinks = QueueSinks::connect(&self.settings(urls), routes.clone())
            .await
            .unwrap();
        sinks.check_routes(&routes.load()).await.unwrap();
        Arc::new(sinks)
    }

    fn keys(&self) -> QueueKeys {
        QueueKeys::new(self.prefix.clone())
    }

    /// Delete every key this test wrote.
    async fn cleanup(&self) {
        let mut conn = self.redis.clone();
        for pattern in self.keys().match_patterns() {
            let keys: Vec<String> = conn.keys(pattern).await.unwrap_or_default();
            if !keys.is_empty() {
                let _: Result<(), _> = conn.del(keys).await;
            }
        }
        remove_bullmq_prefix(&mut conn, &self.bull_prefix).await;
        if let Some(brokers) = &self.brokers {
            brokers.cleanup(&QUEUES).await;
        }
    }
}

/// A sink the suite runs its checks against.
trait SinkUnderTest: Sync {
    /// The kind of queue system each suite queue is on with this sink.
    fn kind_of(&self, queue: &str) -> SinkKind;

    /// The sink, on the queue systems `urls` names, writing under `world`'s prefixes.
    async fn connect(&self, world: &World, urls: &Urls) -> Arc<dyn Sink>;

    /// The queue system the dead-system check cuts off.
    fn outage(&self) -> Service {
        Service::Redis
    }
}

/// The service a queue of `kind` is on.
fn service_of(kind: SinkKind) -> Service {
    match kind {
        SinkKind::Streams | SinkKind::Bullmq => Service::Redis,
        SinkKind::Nats => Service::Nats,
        SinkKind::Rabbitmq => Service::Rabbitmq,
    }
}

/// True when the queue system drops a repeated hand-off (all but RabbitMQ, which delivers it
/// again with the same message id).
fn dedupes(kind: SinkKind) -> bool {
    kind != SinkKind::Rabbitmq
}

/// The Redis Streams sink alone.
struct Streams;

impl SinkUnderTest for Streams {
    fn kind_of(&self, _queue: &str) -> SinkKind {
        SinkKind::Streams
    }

    async fn connect(&self, world: &World, urls: &Urls) -> Arc<dyn Sink> {
        Arc::new(
            RedisSink::connect(&urls.redis, &world.prefix, DEDUPE_TTL, CONCURRENCY)
                .await
                .unwrap(),
        )
    }
}

/// The BullMQ sink alone.
struct Bullmq;

impl SinkUnderTest for Bullmq {
    fn kind_of(&self, _queue: &str) -> SinkKind {
        SinkKind::Bullmq
    }

    async fn connect(&self, world: &World, urls: &Urls) -> Arc<dyn Sink> {
        let redis_url = urls.redis.as_str();
        let conn = RedisTarget::with_key_prefix(redis_url, &world.prefix)
            .unwrap()
            .shared()
            .await
            .unwrap();
        let routes = Arc::new(ArcSwap::from_pointee(world.routes(self)));
        Arc::new(
            BullmqSink::new(
                conn,
                QueueKeys::for_redis_url(world.prefix.clone(), redis_url),
                DEDUPE_TTL.as_secs(),
                CONCURRENCY,
                routes,
            )
            .await
            .unwrap(),
        )
    }
}

/// A broker's sink (through the per-queue sink the dispatcher uses), every suite queue on it.
struct OnBroker(SinkKind);

impl SinkUnderTest for OnBroker {
    fn kind_of(&self, _queue: &str) -> SinkKind {
        self.0
    }

    async fn connect(&self, world: &World, urls: &Urls) -> Arc<dyn Sink> {
        world.queue_sinks(self, urls).await
    }

    fn outage(&self) -> Service {
        service_of(self.0)
    }
}

/// The per-queue sink the dispatcher uses with one suite queue on each kind (`conf.a` streams,
/// `conf.b` BullMQ, `conf.c` NATS, `conf.d` RabbitMQ), so every batch of several queues spans
/// them all.
struct PerQueue;

impl SinkUnderTest for PerQueue {
    fn kind_of(&self, queue: &str) -> SinkKind {
        let at = QUEUES.iter().position(|q| *q == queue).unwrap_or(0);
        SinkKind::ALL[at % SinkKind::ALL.len()]
    }

    async fn connect(&self, world: &World, urls: &Urls) -> Arc<dyn Sink> {
        world.queue_sinks(self, urls).await
    }
}

/// One entry (a stream entry, a BullMQ job) as a consumer of its queue sees it.
#[derive(Debug, Clone, PartialEq)]
struct Landed {
    /// Its id: the stream entry id, or the job id.
    id: String,
    /// The event it carries.
    event_id: i64,
    /// Its fields (a JSON field parsed; BullMQ's `timestamp` checked and replaced by
    /// `"<timestamp>"`).
    fields: BTreeMap<String, Value>,
}

impl Landed {
    /// What `queue` holds, in the order its consumers take it.
    async fn read(world: &World, kind: SinkKind, queue: &str) -> Vec<Landed> {
        let mut conn = world.redis.clone();
        match kind {
            SinkKind::Streams => {
                let reply: redis::streams::StreamRangeReply =
                    conn.xrange_all(world.keys().stream(queue)).await.unwrap();
                reply
                    .ids
                    .into_iter()
                    .map(|entry| {
                        let fields: BTreeMap<String, Value> = entry
                            .map
                            .iter()
                            .map(|(k, v)| {
                                let text: String = redis::from_redis_value(v).unwrap();
                                (k.clone(), Value::String(text))
                            })
                            .collect();
                        Landed {
                            event_id: fields["event_id"].as_str().unwrap().parse().unwrap(),
                            id: entry.id,
                            fields,
                        }
                    })
                    .collect()
            }
            SinkKind::Bullmq => {
                let base = format!("{}:{queue}:", world.bull_prefix);
                // `Queue.add` pushes on the left of `wait`; a worker takes from the right.
                let mut wait: Vec<String> =
                    conn.lrange(format!("{base}wait"), 0, -1).await.unwrap();
                wait.reverse();
                let now_ms = chrono::Utc::now().timestamp_millis();
                let mut landed = Vec::new();
                for job_id in wait {
                    let hash: HashMap<String, String> =
                        conn.hgetall(format!("{base}{job_id}")).await.unwrap();
                    let mut fields = BTreeMap::new();
                    for (name, value) in hash {
                        let value = match name.as_str() {
                            "data" | "opts" => serde_json::from_str(&value).unwrap(),
                            "timestamp" => {
                                let at: i64 = value.parse().unwrap();
                                assert!((now_ms - 600_000..=now_ms).contains(&at), "{value}");
                                Value::String("<timestamp>".into())
                            }
                            _ => Value::String(value),
                        };
                        fields.insert(name, value);
                    }
                    landed.push(Landed {
                        event_id: fields["data"]["id"].as_i64().unwrap(),
                        id: job_id,
                        fields,
                    });
                }
                landed
            }
            SinkKind::Nats | SinkKind::Rabbitmq => {
                let messages = match kind {
                    SinkKind::Nats => world.brokers().read_nats(queue).await,
                    _ => world.brokers().read_rabbitmq(queue).await,
                };
                messages
                    .into_iter()
                    .map(|(id, fields)| Landed {
                        event_id: fields["Outbox-Event-Id"].as_str().unwrap().parse().unwrap(),
                        id,
                        fields,
                    })
                    .collect()
            }
        }
    }

    /// What a sink of `kind` must write for `event` on `queue` under `prefix`: the wire
    /// contract, spelled out.
    fn expected(
        kind: SinkKind,
        event: &ClaimedEvent,
        queue: &str,
        prefix: &str,
    ) -> BTreeMap<String, Value> {
        let created_at = event
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let text = |s: &str| Value::String(s.to_string());
        match kind {
            SinkKind::Streams => {
                let mut fields = BTreeMap::from([
                    ("event_id".to_string(), text(&event.id.to_string())),
                    ("event_type".into(), text(&event.event_type)),
                    (
                        "event_version".into(),
                        text(&event.event_version.to_string()),
                    ),
                    (
                        "tenant_id".into(),
                        text(event.tenant_id.as_deref().unwrap_or("")),
                    ),
                    ("payload".into(), text(&event.payload)),
                    ("headers".into(), text(&event.headers)),
                    (
                        "dispatch_key".into(),
                        text(event.dispatch_key.as_deref().unwrap_or("")),
                    ),
                    ("created_at".into(), text(&created_at)),
                    ("attempt".into(), text(&event.attempts.to_string())),
                ]);
                if let Some(key) = &event.ordering_key {
                    fields.insert("ordering_key".into(), text(key));
                }
                if event.generation > 0 {
                    fields.insert("generation".into(), text(&event.generation.to_string()));
                }
                fields
            }
            SinkKind::Bullmq => BTreeMap::from([
                ("name".to_string(), text(&event.event_type)),
                (
                    "data".into(),
                    json!({
                        "id": event.id,
                        "type": event.event_type,
                        "version": event.event_version,
                        "tenant": event.tenant_id,
                        "payload": serde_json::from_str::<Value>(&event.payload).unwrap(),
                        "headers": serde_json::from_str::<Value>(&event.headers).unwrap(),
                        "dispatchKey": event.dispatch_key,
                        "orderingKey": event.ordering_key,
                        "createdAt": created_at,
                    }),
                ),
                (
                    "opts".into(),
                    json!({"jobId": format!("outbox-{}", event.id), "attempts": 0}),
                ),
                ("timestamp".into(), text("<timestamp>")),
                ("delay".into(), text("0")),
                ("priority".into(), text("0")),
            ]),
            SinkKind::Nats => {
                let mut fields = expected_headers(event, queue);
                fields.insert(
                    "Nats-Msg-Id".into(),
                    text(&message_id(prefix, queue, event.id)),
                );
                fields
            }
            SinkKind::Rabbitmq => {
                let mut fields = expected_headers(event, queue);
                fields.insert("<content-type>".into(), text("application/json"));
                fields.insert("<type>".into(), text(&event.event_type));
                fields.insert("<app-id>".into(), text("outbox"));
                fields.insert("<delivery-mode>".into(), json!(2));
                fields
            }
        }
    }
}

/// A fully populated event (every optional field set).
fn full_event(id: i64) -> ClaimedEvent {
    let mut e = ClaimedEvent::unclaimed(id, "order.placed", r#"{"order": 7, "lines": [1, 2]}"#);
    e.tenant_id = Some("acme".into());
    e.event_version = 3;
    e.headers =
        r#"{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#.into();
    e.dispatch_key = Some(format!("order-{id}"));
    e.ordering_key = Some("account-9".into());
    e.generation = 2;
    e.attempts = 2;
    e
}

/// The items of `events` fanned out: each event to each queue `to` names for it.
fn fan_out<'a>(events: &'a [ClaimedEvent], to: impl Fn(usize) -> Vec<&'a str>) -> Vec<Enqueue<'a>> {
    events
        .iter()
        .enumerate()
        .flat_map(|(i, event)| to(i).into_iter().map(move |queue| Enqueue { event, queue }))
        .collect()
}

/// Every result added; the ids, per item.
fn all_added(sink: &str, results: &[EnqueueResult]) -> Vec<String> {
    results
        .iter()
        .map(|r| match r {
            EnqueueResult::Added(id) => id.clone(),
            other => panic!("{sink}: expected Added, got {other:?}"),
        })
        .collect()
}

/// What each queue holds, checked against `items` (the hand-offs that were made): every
/// (event, queue) exactly once, with exactly the fields of the wire contract, under the id its
/// result gave (`ids`, per item).
async fn assert_holds_exactly(
    world: &World,
    sink: &impl SinkUnderTest,
    items: &[Enqueue<'_>],
    ids: &[String],
) {
    assert_holds_exactly_in(world, sink, items, ids, &QUEUES).await;
}

/// [`assert_holds_exactly`] for the queues `queues` only.
async fn assert_holds_exactly_in(
    world: &World,
    sink: &impl SinkUnderTest,
    items: &[Enqueue<'_>],
    ids: &[String],
    queues: &[&str],
) {
    for &queue in queues {
        let kind = sink.kind_of(queue);
        let landed = Landed::read(world, kind, queue).await;
        let mut want: Vec<(i64, &str, &ClaimedEvent)> = items
            .iter()
            .zip(ids)
            .filter(|(item, _)| item.queue == queue)
            .map(|(item, id)| (item.event.id, id.as_str(), item.event))
            .collect();
        want.sort_by_key(|(event_id, _, _)| *event_id);
        let mut got: Vec<&Landed> = landed.iter().collect();
        got.sort_by_key(|l| l.event_id);
        assert_eq!(
            got.iter().map(|l| l.event_id).collect::<Vec<_>>(),
            want.iter().map(|(e, _, _)| *e).collect::<Vec<_>>(),
            "{queue} ({kind:?}) holds each of its events once"
        );
        for (landed, (_, id, event)) in got.into_iter().zip(want) {
            assert_eq!(landed.id, id, "{queue}: the id the result gave");
            assert_eq!(
                landed.fields,
                Landed::expected(kind, event, queue, &world.prefix),
                "{queue} ({kind:?}): the fields of event {}",
                event.id
            );
        }
    }
}

/// Every check against every sink listed: `name => harness`, one line per sink. Each pair
/// becomes a module `name` with one test per check (`sink_conformance::streams::...`).
macro_rules! conformance {
    ($($name:ident => $sink:expr),* $(,)?) => {$(
        mod $name {
            use super::*;

            #[tokio::test]
            async fn enqueue_then_read_back_with_the_exact_fields() {
                checks::enqueue_then_read_back_with_the_exact_fields(&$sink).await;
            }

            #[tokio::test]
            async fn a_batch_of_mixed_queues() {
                checks::a_batch_of_mixed_queues(&$sink).await;
            }

            #[tokio::test]
            async fn re_enqueue_of_the_same_event_adds_no_second_entry() {
                checks::re_enqueue_of_the_same_event_adds_no_second_entry(&$sink).await;
            }

            #[tokio::test]
            async fn ordering_within_an_ordering_key() {
                checks::ordering_within_an_ordering_key(&$sink).await;
            }

            #[tokio::test]
            async fn a_dead_queue_system_is_an_infrastructure_error_and_loses_no_event() {
                checks::a_dead_queue_system_is_an_infrastructure_error_and_loses_no_event(&$sink)
                    .await;
            }

            #[tokio::test]
            async fn big_payloads_at_the_limit() {
                checks::big_payloads_at_the_limit(&$sink).await;
            }
        }
    )*};
}

conformance! {
    streams => Streams,
    bullmq => Bullmq,
    nats => OnBroker(SinkKind::Nats),
    rabbitmq => OnBroker(SinkKind::Rabbitmq),
    per_queue => PerQueue,
}
