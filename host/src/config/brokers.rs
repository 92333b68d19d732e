//! `[queues."NAME".nats]` and `[queues."NAME".rabbitmq]`: where a queue on a broker beyond
//! Redis hands its events.
//!
//! Owns the destination a `nats` queue (a JetStream stream and a subject) or a `rabbitmq`
//! queue (an exchange and a routing key) names, and the rules that keep those names valid for
//! the broker before the host keeps them: a subject without wildcards or empty tokens, a
//! stream name JetStream accepts, an exchange name and routing key within AMQP's limits. It
//! never connects to a broker: whether the stream or exchange exists is checked by the sink,
//! at start and at every reload (`sink::nats`, `sink::rabbitmq`).

use serde::{Deserialize, Serialize};

/// Longest stream name, subject, exchange name or routing key accepted (AMQP's short string
/// limit; NATS has none of its own below it that matters here).
pub const MAX_BROKER_NAME_BYTES: usize = 255;

/// `[queues."NAME".nats]`: the JetStream stream that stores a `nats` queue's messages and the
/// subject they are published on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsOptions {
    /// The stream that must store the queue's messages. The operator creates it (its subjects
    /// must take `subject`, its duplicate window must cover `OUTBOX_CLAIM_LEASE_MS`); the host
    /// checks both at start and at every reload, and every publish names it
    /// (`Nats-Expected-Stream`), so a message never lands in another stream.
    pub stream: String,
    /// The subject each event is published on. Default: the queue name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl NatsOptions {
    /// The subject the queue `queue`'s events are published on.
    pub fn subject_for<'a>(&'a self, queue: &'a str) -> &'a str {
        self.subject.as_deref().unwrap_or(queue)
    }

    /// Check the stream name and the subject `queue`'s events get; the message names the
    /// option.
    pub fn check(&self, queue: &str) -> Result<(), String> {
        check_stream_name(&self.stream).map_err(|m| format!("nats.stream {m}"))?;
        check_subject(self.subject_for(queue)).map_err(|m| match &self.subject {
            Some(_) => format!("nats.subject {m}"),
            None => format!("the queue name, the default nats.subject, {m}; set nats.subject"),
        })
    }
}

/// `[queues."NAME".rabbitmq]`: the exchange a `rabbitmq` queue's messages are published to and
/// their routing key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RabbitmqOptions {
    /// The exchange (it must exist: checked at start and at every reload). `""` is RabbitMQ's
    /// default exchange, which routes by queue name.
    pub exchange: String,
    /// The routing key. Default: the queue name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_key: Option<String>,
}

impl RabbitmqOptions {
    /// The routing key of the queue `queue`'s messages.
    pub fn routing_key_for<'a>(&'a self, queue: &'a str) -> &'a str {
        self.routing_key.as_deref().unwrap_or(queue)
    }

    /// Check the exchange name and the routing key; the message names the option.
    pub fn check(&self, queue: &str) -> Result<(), String> {
        check_exchange_name(&self.exchange).map_err(|m| format!("rabbitmq.exchange {m}"))?;
        let key = self.routing_key_for(queue);
        if key.len() > MAX_BROKER_NAME_BYTES {
            return Err(format!(
                "rabbitmq.routing_key is {} bytes; at most {MAX_BROKER_NAME_BYTES}",
                key.len()
            ));
        }
        if key.chars().any(char::is_control) {
            return Err("rabbitmq.routing_key holds a control character".into());
        }
        Ok(())
    }
}

/// A JetStream stream name: 1 to 255 bytes of letters, digits, `_` and `-` (JetStream refuses
/// `.`, `*`, `>`, path separators and whitespace; the narrower rule keeps a name one thing).
fn check_stream_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_BROKER_NAME_BYTES {
        return Err(format!("must be 1 to {MAX_BROKER_NAME_BYTES} bytes"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        return Err(format!(
            "'{name}' may hold only letters, digits, '_' and '-'"
        ));
    }
    Ok(())
}

/// A literal NATS subject: tokens of printable ASCII without whitespace, separated by single
/// dots, no wildcard (`*`, `>`), 1 to 255 bytes.
fn check_subject(subject: &str) -> Result<(), String> {
    if subject.is_empty() || subject.len() > MAX_BROKER_NAME_BYTES {
        return Err(format!("must be 1 to {MAX_BROKER_NAME_BYTES} bytes"));
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Err(format!(
                "'{subject}' has an empty token (a leading, trailing or double '.')"
            ));
        }
        if token == "*" || token == ">" || token.contains(['*', '>']) {
            return Err(format!(
                "'{subject}' holds a wildcard: a queue publishes on one literal subject"
            ));
        }
        if !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err(format!(
                "'{subject}' may hold only printable ASCII without spaces"
            ));
        }
    }
    Ok(())
}

/// An AMQP exchange name: up to 255 bytes of letters, digits, `-`, `_`, `.` and `:` (RabbitMQ's
/// rule); empty names the default exchange. The `amq.` prefix is RabbitMQ's own, but its
/// predeclared exchanges (`amq.direct`, `amq.topic`, ...) may be published to.
fn check_exchange_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_BROKER_NAME_BYTES {
        return Err(format!("must be at most {MAX_BROKER_NAME_BYTES} bytes"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        return Err(format!(
            "'{name}' may hold only letters, digits, '-', '_', '.' and ':'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nats(stream: &str, subject: Option<&str>) -> NatsOptions {
        NatsOptions {
            stream: stream.into(),
            subject: subject.map(Into::into),
        }
    }

    #[test]
    fn a_nats_destination_names_one_stream_and_one_literal_subject() {
        assert!(nats("ORDERS", None).check("outbox.orders").is_ok());
        assert_eq!(
            nats("ORDERS", None).subject_for("outbox.orders"),
            "outbox.orders"
        );
        assert!(nats("ORDERS", Some("orders.placed")).check("q").is_ok());
        for (stream, subject, wanted) in [
            ("", None, "nats.stream must be 1 to 255"),
            ("OR.DERS", None, "nats.stream 'OR.DERS' may hold only"),
            (
                "ORDERS",
                Some("orders.*"),
                "nats.subject 'orders.*' holds a wildcard",
            ),
            ("ORDERS", Some("orders.>"), "holds a wildcard"),
            ("ORDERS", Some("orders..placed"), "an empty token"),
            (
                "ORDERS",
                Some("orders placed"),
                "printable ASCII without spaces",
            ),
        ] {
            let error = nats(stream, subject).check("q").unwrap_err();
            assert!(error.contains(wanted), "{error}");
        }
        let error = nats("ORDERS", None).check("outbox.").unwrap_err();
        assert!(error.contains("the default nats.subject"), "{error}");
    }

    #[test]
    fn a_rabbitmq_destination_is_checked_against_amqp_limits() {
        let ok = RabbitmqOptions {
            exchange: "outbox.events".into(),
            routing_key: None,
        };
        assert!(ok.check("q").is_ok());
        assert_eq!(ok.routing_key_for("q"), "q");
        let default_exchange = RabbitmqOptions {
            exchange: String::new(),
            routing_key: Some("jobs".into()),
        };
        assert!(default_exchange.check("q").is_ok());
        let bad = RabbitmqOptions {
            exchange: "out box".into(),
            routing_key: None,
        };
        assert!(bad.check("q").unwrap_err().contains("rabbitmq.exchange"));
        let long = RabbitmqOptions {
            exchange: "x".into(),
            routing_key: Some("k".repeat(256)),
        };
        assert!(long.check("q").unwrap_err().contains("256 bytes"));
    }
}
