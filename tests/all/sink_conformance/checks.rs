//! The checks of the sink conformance suite, each written once for any [`SinkUnderTest`]: what
//! every sink must do (see the suite's module comment); `conformance!` runs each against every
//! sink.

use super::*;

/// Enqueue, then read back: every field of the wire contract, exactly.
pub async fn enqueue_then_read_back_with_the_exact_fields(sink: &impl SinkUnderTest) {
    let world = World::new(sink).await;
    let under_test = sink.connect(&world, &Urls::direct()).await;
    let mut unicode = ClaimedEvent::unclaimed(
        3,
        "note.added",
        r#"{"text": "h\u00e9llo \"w\"\n 🚀 é", "n": [1, 2.5, null, true]}"#,
    );
    unicode.headers = r#"{"x-note": "ü"}"#.into();
    let events = vec![
        full_event(1),
        ClaimedEvent::unclaimed(2, "mail.welcome", "{}"),
        unicode,
    ];
    let items = fan_out(&events, |_| QUEUES.to_vec());
    let results = under_test.enqueue_all(&items).await;
    let ids = all_added(under_test.name(), &results);
    assert_holds_exactly(&world, sink, &items, &ids).await;
    world.cleanup().await;
}

/// One batch spanning every queue and several pipelines: one result per item in input
/// order, each queue holding exactly its events.
pub async fn a_batch_of_mixed_queues(sink: &impl SinkUnderTest) {
    let world = World::new(sink).await;
    let under_test = sink.connect(&world, &Urls::direct()).await;
    let events: Vec<ClaimedEvent> = (1..=150)
        .map(|id| ClaimedEvent::unclaimed(id, "mixed.event", format!(r#"{{"n": {id}}}"#)))
        .collect();
    let items = fan_out(&events, |i| {
        QUEUES
            .iter()
            .enumerate()
            .filter(|(q, _)| i % (q + 1) == 0)
            .map(|(_, queue)| *queue)
            .collect()
    });
    assert!(items.len() > 256, "more than two pipelines");
    let results = under_test.enqueue_all(&items).await;
    assert_eq!(results.len(), items.len(), "one result per item");
    let ids = all_added(under_test.name(), &results);
    assert_holds_exactly(&world, sink, &items, &ids).await;
    world.cleanup().await;
}

/// Handing the same (event, queue) off again (a re-claim after a crash, with its attempt
/// counted up) adds nothing and answers with the first hand-off's id.
pub async fn re_enqueue_of_the_same_event_adds_no_second_entry(sink: &impl SinkUnderTest) {
    let world = World::new(sink).await;
    let under_test = sink.connect(&world, &Urls::direct()).await;
    let events: Vec<ClaimedEvent> = (1..=10).map(full_event).collect();
    let items = fan_out(&events, |_| QUEUES.to_vec());
    let first = all_added(under_test.name(), &under_test.enqueue_all(&items).await);

    let mut again: Vec<ClaimedEvent> = events.clone();
    for e in &mut again {
        e.attempts += 1;
    }
    again.push(full_event(11));
    let again_items = fan_out(&again, |_| QUEUES.to_vec());
    let results = under_test.enqueue_all(&again_items).await;
    let repeat_of = |kind: SinkKind, id: &str| match dedupes(kind) {
        true => EnqueueResult::AlreadyEnqueued(id.to_string()),
        // Delivered again, under the same message id.
        false => EnqueueResult::Added(id.to_string()),
    };
    for (i, result) in results.iter().enumerate() {
        let kind = sink.kind_of(again_items[i].queue);
        if i < first.len() {
            assert_eq!(result, &repeat_of(kind, &first[i]), "item {i} ({kind})");
        } else {
            assert!(matches!(result, EnqueueResult::Added(_)), "{result:?}");
        }
    }
    // And a third time, in a batch of its own.
    for (i, result) in under_test.enqueue_all(&items).await.iter().enumerate() {
        let kind = sink.kind_of(items[i].queue);
        assert_eq!(result, &repeat_of(kind, &first[i]), "item {i} ({kind})");
    }
    let mut all_items = items.clone();
    all_items.extend(again_items[first.len()..].iter().cloned());
    let repeated = first.len();
    let mut ids = first;
    ids.extend(
        results[repeated..]
            .iter()
            .map(|r| r.stream_id().unwrap().to_string()),
    );
    // The entries keep what the first hand-off wrote (attempt 2, not 3).
    let deduping: Vec<&str> = QUEUES
        .into_iter()
        .filter(|q| dedupes(sink.kind_of(q)))
        .collect();
    assert_holds_exactly_in(&world, sink, &all_items, &ids, &deduping).await;
    // A stream is left as if the repeats never came: nothing appended and deleted again (a
    // deleted entry after a consumer group's last delivered id keeps that id behind the
    // stream's last one for good, and Redis reports the group's lag as unknown).
    for queue in QUEUES
        .into_iter()
        .filter(|q| sink.kind_of(q) == SinkKind::Streams)
    {
        let mut conn = world.redis.clone();
        let info: HashMap<String, redis::Value> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(world.keys().stream(queue))
            .query_async(&mut conn)
            .await
            .unwrap();
        let text = |name: &str| redis::from_redis_value::<String>(&info[name]).unwrap();
        let count = |name: &str| redis::from_redis_value::<u64>(&info[name]).unwrap();
        assert_eq!(
            text("max-deleted-entry-id"),
            "0-0",
            "{queue}: an entry deleted"
        );
        assert_eq!(
            count("entries-added"),
            count("length"),
            "{queue}: entries added"
        );
    }
    // RabbitMQ delivers every hand-off: events 1-10 three times, 11 once, every copy under
    // the message id of its (event, queue).
    for queue in QUEUES.into_iter().filter(|q| !dedupes(sink.kind_of(q))) {
        let mut copies: BTreeMap<i64, usize> = BTreeMap::new();
        for landed in Landed::read(&world, sink.kind_of(queue), queue).await {
            assert_eq!(landed.id, message_id(&world.prefix, queue, landed.event_id));
            *copies.entry(landed.event_id).or_default() += 1;
        }
        let wanted: BTreeMap<i64, usize> = (1..=11)
            .map(|id| (id, if id <= 10 { 3 } else { 1 }))
            .collect();
        assert_eq!(copies, wanted, "{queue}: at least once, same message id");
    }
    world.cleanup().await;
}

/// The events of one ordering key, handed off as the claim hands them (at most one per key
/// per batch, batch after batch), reach each queue in that order, with their key.
pub async fn ordering_within_an_ordering_key(sink: &impl SinkUnderTest) {
    let world = World::new(sink).await;
    let under_test = sink.connect(&world, &Urls::direct()).await;
    let keys = ["acct-1", "acct-2", "acct-3"];
    let mut next_id = 1;
    for _round in 0..12 {
        let mut batch = Vec::new();
        for key in keys {
            let mut e = ClaimedEvent::unclaimed(next_id, "account.changed", "{}");
            e.ordering_key = Some(key.into());
            batch.push(e);
            next_id += 1;
        }
        batch.push(ClaimedEvent::unclaimed(next_id, "account.seen", "{}"));
        next_id += 1;
        let items = fan_out(&batch, |_| QUEUES.to_vec());
        all_added(under_test.name(), &under_test.enqueue_all(&items).await);
    }
    for queue in QUEUES {
        let kind = sink.kind_of(queue);
        let landed = Landed::read(&world, kind, queue).await;
        assert_eq!(landed.len(), 48, "{queue}");
        for key in keys {
            let order: Vec<i64> = landed
                .iter()
                .filter(|l| {
                    l.fields.get("ordering_key") == Some(&json!(key))
                        || l.fields.get("Outbox-Ordering-Key") == Some(&json!(key))
                        || l.fields.get("data").map(|d| &d["orderingKey"]) == Some(&json!(key))
                })
                .map(|l| l.event_id)
                .collect();
            assert_eq!(order.len(), 12, "{queue} ({kind:?}): every event of {key}");
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "{queue} ({kind:?}): {key} in hand-off order: {order:?}"
            );
        }
    }
    world.cleanup().await;
}

/// With its queue system gone (Redis, NATS or RabbitMQ, cut off by a proxy), every hand-off
/// to it is an infrastructure error (a blip of that service, never a refusal) while the
/// others land, the sink's ping fails, and once it is back the same hand-off lands, once.
pub async fn a_dead_queue_system_is_an_infrastructure_error_and_loses_no_event(
    sink: &impl SinkUnderTest,
) {
    let world = World::new(sink).await;
    let service = sink.outage();
    let (proxy, urls) = match service {
        Service::Nats => {
            let proxy = OutageProxy::nats().await;
            let nats = proxy.nats_url();
            (
                proxy,
                Urls {
                    nats,
                    ..Urls::direct()
                },
            )
        }
        Service::Rabbitmq => {
            let proxy = OutageProxy::rabbitmq().await;
            let rabbitmq = proxy.amqp_url(&rabbitmq_url());
            (
                proxy,
                Urls {
                    rabbitmq,
                    ..Urls::direct()
                },
            )
        }
        _ => {
            let proxy = OutageProxy::redis().await;
            let redis = proxy.redis_url();
            (
                proxy,
                Urls {
                    redis,
                    ..Urls::direct()
                },
            )
        }
    };
    let under_test = sink.connect(&world, &urls).await;
    let cut_off = |queue: &str| service_of(sink.kind_of(queue)) == service;
    let warm: Vec<ClaimedEvent> = vec![full_event(1)];
    let warm_items = fan_out(&warm, |_| QUEUES.to_vec());
    let mut all_items = warm_items.clone();
    let mut ids = all_added(
        under_test.name(),
        &under_test.enqueue_all(&warm_items).await,
    );

    proxy.cut();
    let events: Vec<ClaimedEvent> = (2..=6).map(full_event).collect();
    let items = fan_out(&events, |_| QUEUES.to_vec());
    let mut blipped = Vec::new();
    for (item, result) in items.iter().zip(under_test.enqueue_all(&items).await) {
        if !cut_off(item.queue) {
            assert!(matches!(result, EnqueueResult::Added(_)), "{result:?}");
            all_items.push(item.clone());
            ids.push(result.stream_id().unwrap().to_string());
            continue;
        }
        let blip = result
            .blip()
            .unwrap_or_else(|| panic!("a blip, got {result:?}"));
        assert_eq!(blip.service, service, "{result:?}");
        assert!(result.error().is_some_and(|e| !e.is_empty()));
        blipped.push(item.clone());
    }
    assert!(!blipped.is_empty());
    assert!(
        under_test.ping().await.is_err(),
        "ping fails while {service:?} is gone"
    );

    proxy.restore().await;
    // The dispatcher hands the released events off again until the system answers.
    let deadline = Instant::now() + Duration::from_secs(40);
    let results = loop {
        let results = under_test.enqueue_all(&blipped).await;
        if results.iter().all(|r| r.blip().is_none()) {
            break results;
        }
        assert!(Instant::now() < deadline, "{service:?} back: {results:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for result in &results {
        assert!(result.stream_id().is_some(), "{result:?}");
    }
    under_test.ping().await.unwrap();
    all_items.extend(blipped.iter().cloned());
    ids.extend(results.iter().map(|r| r.stream_id().unwrap().to_string()));
    assert_holds_exactly(&world, sink, &all_items, &ids).await;
    world.cleanup().await;
}

/// A payload of exactly `OUTBOX_MAX_PAYLOAD_BYTES` (the default), large headers, and
/// dispatch and ordering keys at their limit land byte for byte.
pub async fn big_payloads_at_the_limit(sink: &impl SinkUnderTest) {
    let world = World::new(sink).await;
    let under_test = sink.connect(&world, &Urls::direct()).await;
    let key = "k".repeat(outbox_host::publish::MAX_KEY_BYTES - 4);
    // JetStream takes at most 64 KiB of headers per message, the event's headers object
    // among them: with a NATS queue the object stays below that (and one above it is
    // refused, below).
    let on_nats = QUEUES.iter().any(|q| sink.kind_of(q) == SinkKind::Nats);
    let headers_len = if on_nats { 48 * 1024 } else { 64 * 1024 };
    let events: Vec<ClaimedEvent> = (1..=4)
        .map(|id| {
            let mut e = full_event(id);
            e.payload = json_text_of_len(DEFAULT_MAX_PAYLOAD_BYTES, id);
            e.headers = json_text_of_len(headers_len, id + 100);
            e.dispatch_key = Some(format!("{key}{id:04}"));
            e.ordering_key = Some(format!("{key}{id:04}"));
            e
        })
        .collect();
    for e in &events {
        assert_eq!(e.payload.len(), DEFAULT_MAX_PAYLOAD_BYTES);
        assert_eq!(
            e.dispatch_key.as_ref().map(String::len),
            Some(outbox_host::publish::MAX_KEY_BYTES)
        );
    }
    let items = fan_out(&events, |_| QUEUES.to_vec());
    let ids = all_added(under_test.name(), &under_test.enqueue_all(&items).await);
    assert_holds_exactly(&world, sink, &items, &ids).await;
    if on_nats {
        let mut too_big = full_event(9);
        too_big.headers = json_text_of_len(64 * 1024, 9);
        let events = [too_big];
        let items = fan_out(&events, |_| QUEUES.to_vec());
        let results = under_test.enqueue_all(&items).await;
        for (item, result) in items.iter().zip(&results) {
            if sink.kind_of(item.queue) == SinkKind::Nats {
                let EnqueueResult::Failed(error) = result else {
                    panic!("refused, not {result:?}");
                };
                assert!(error.contains("64 KiB of headers"), "{error}");
            }
        }
    }
    world.cleanup().await;
}

/// A JSON object text of exactly `len` bytes: multi-byte characters, escapes and `seed`.
fn json_text_of_len(len: usize, seed: i64) -> String {
    let head = format!(r#"{{"seed": {seed}, "text": "é\"\\🚀"#);
    let tail = "\"}";
    let fill = len - head.len() - tail.len();
    let text = format!("{head}{}{tail}", "x".repeat(fill));
    assert_eq!(text.len(), len);
    serde_json::from_str::<Value>(&text).expect("valid JSON");
    text
}
