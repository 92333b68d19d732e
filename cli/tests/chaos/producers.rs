//! Producers: concurrent application transactions that publish events (through
//! `outbox_host::publish` or the SQL function `outbox_publish`, alternately), commit most and
//! roll some back, and remember which dispatch keys were committed and which were rolled back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::NewEvent;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sqlx::PgPool;

use super::world::{HOOK, TRIGGER};

/// What a producer's event is meant to exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `mail.chaos`: one plain queue, no handler.
    Plain,
    /// `fanout.chaos`: three queues.
    FanOut,
    /// `workflow.trigger.event`: the `workflow-trigger` handler starts three workflows.
    Trigger,
    /// `plugin.hook.chaos`: the `plugin-hook` handler invokes three subscribers.
    Hook,
    /// `nowhere.chaos`: no route; fails by design.
    Unrouted,
}

impl Kind {
    /// The event type.
    pub fn event_type(self) -> &'static str {
        match self {
            Kind::Plain => "mail.chaos",
            Kind::FanOut => "fanout.chaos",
            Kind::Trigger => "workflow.trigger.event",
            Kind::Hook => "plugin.hook.chaos",
            Kind::Unrouted => "nowhere.chaos",
        }
    }

    /// A kind at random: `handled` percent half triggers, half hooks; 2 % unrouted; the rest
    /// two plain events to one fan-out.
    fn pick(rng: &mut StdRng, handled: u32) -> Self {
        let roll = rng.random_range(0..100);
        if roll < handled / 2 {
            Kind::Trigger
        } else if roll < handled {
            Kind::Hook
        } else if roll < handled + 2 {
            Kind::Unrouted
        } else if roll % 3 == 0 {
            Kind::FanOut
        } else {
            Kind::Plain
        }
    }
}

/// What the producers did.
#[derive(Default, Debug)]
pub struct Produced {
    /// Committed events: (dispatch key, kind).
    pub committed: Vec<(String, Kind)>,
    /// Dispatch keys of events whose transaction was rolled back.
    pub rolled_back: Vec<String>,
    /// Dispatch keys of events whose commit returned an error (committed or not: the audit
    /// looks them up).
    pub uncertain: Vec<(String, Kind)>,
    /// Transactions committed and rolled back.
    pub transactions: (u64, u64),
}

/// How many events to produce, and how.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Events to commit in all.
    pub events: usize,
    /// Producer tasks.
    pub producers: usize,
    /// Spread evenly over this long (zero: as fast as they can).
    pub spread: Duration,
    /// Percent of events for the handlers (half triggers, half hooks).
    pub handled_percent: u32,
    /// Seed of the mix.
    pub seed: u64,
}

/// Run the plan's producers until its events are committed in all; 1 in 10 transactions rolls
/// back.
pub async fn produce(pool: PgPool, plan: Plan) -> Produced {
    let Plan {
        events, producers, ..
    } = plan;
    let share = events.div_ceil(producers);
    let mut tasks = Vec::new();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let run: Arc<str> = Arc::from(&run[..8]);
    for p in 0..producers {
        let pool = pool.clone();
        let run = run.clone();
        let quota = share.min(events - (share * p).min(events));
        tasks.push(tokio::spawn(async move {
            one_producer(pool, p, quota, plan, &run).await
        }));
    }
    let mut all = Produced::default();
    for t in tasks {
        let p = t.await.unwrap();
        all.committed.extend(p.committed);
        all.rolled_back.extend(p.rolled_back);
        all.uncertain.extend(p.uncertain);
        all.transactions.0 += p.transactions.0;
        all.transactions.1 += p.transactions.1;
    }
    all
}

async fn one_producer(pool: PgPool, p: usize, quota: usize, plan: Plan, run: &str) -> Produced {
    let mut rng = StdRng::seed_from_u64(plan.seed.wrapping_add(p as u64));
    let spread = plan.spread;
    let started = Instant::now();
    let mut out = Produced::default();
    let mut seq = 0u64;
    while out.committed.len() + out.uncertain.len() < quota {
        // Keep to the schedule: the share committed so far never runs ahead of the time spent.
        let ahead_by = spread.mul_f64(
            f64::from(u32::try_from(out.committed.len()).unwrap())
                / f64::from(u32::try_from(quota).unwrap()),
        );
        if let Some(wait) = ahead_by.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let left = quota - out.committed.len() - out.uncertain.len();
        let n = rng.random_range(1..=4usize).min(left);
        let rollback = rng.random_bool(0.1);
        let via_sql = rng.random_bool(0.5);
        let mut tx = pool.begin().await.expect("producer begin");
        let mut batch = Vec::with_capacity(n);
        for _ in 0..n {
            seq += 1;
            let kind = Kind::pick(&mut rng, plan.handled_percent);
            let key = format!("chaos:{run}:{p}:{seq}");
            let payload = match kind {
                Kind::Trigger => {
                    json!({ "trigger": TRIGGER, "data": { "producer": p, "seq": seq } })
                }
                Kind::Hook => json!({ "hook": HOOK, "producer": p, "seq": seq }),
                _ => json!({ "producer": p, "seq": seq }),
            };
            if via_sql {
                let _: i64 = sqlx::query_scalar("SELECT outbox_publish($1, $2, NULL, $3)")
                    .bind(kind.event_type())
                    .bind(&payload)
                    .bind(&key)
                    .fetch_one(&mut *tx)
                    .await
                    .expect("outbox_publish");
            } else {
                outbox_host::publish(
                    &mut tx,
                    NewEvent::new(kind.event_type(), payload).with_dispatch_key(key.clone()),
                )
                .await
                .expect("publish");
            }
            batch.push((key, kind));
        }
        if rollback {
            tx.rollback().await.expect("rollback");
            out.transactions.1 += 1;
            out.rolled_back.extend(batch.into_iter().map(|(k, _)| k));
        } else {
            match tx.commit().await {
                Ok(()) => out.committed.extend(batch),
                Err(e) => {
                    eprintln!("producer {p}: commit failed ({e}); the audit looks the keys up");
                    out.uncertain.extend(batch);
                }
            }
            out.transactions.0 += 1;
        }
    }
    out
}
