//! The brokers' blips: which NATS JetStream publish errors and which RabbitMQ (AMQP) errors are
//! the infrastructure's, not the event's.
//!
//! Decided by the clients' error kinds, the JetStream API error code and the AMQP reply code,
//! never by message text. A refusal that names the destination (no stream takes the subject,
//! an exchange that does not exist, a message above the broker's size limit) is not a blip: it
//! is a configuration error or the event's own fault, and the caller reports it as a failed
//! hand-off.

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::ErrorCode;
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};

use super::{io_error_blip_kind, Blip, BlipKind, Service};

/// The blip behind a JetStream publish error (sending it or waiting for its acknowledgement),
/// if it is one: no acknowledgement in time, the connection gone under it, too many
/// publishes awaiting acknowledgement, a stream or server out of resources, a cluster without
/// a leader. A message above the server's size limit, no stream for the subject, or a stream
/// other than the expected one is not.
pub fn nats_publish_blip(error: &PublishError) -> Option<Blip> {
    let kind = match error.kind() {
        PublishErrorKind::TimedOut => BlipKind::Timeout,
        PublishErrorKind::BrokenPipe => BlipKind::ConnectionDropped,
        PublishErrorKind::MaxAckPending => BlipKind::Busy,
        PublishErrorKind::Other => jetstream_code_blip_kind(error)?,
        _ => return None,
    };
    Some(Blip {
        service: Service::Nats,
        kind,
    })
}

/// The blip a JetStream API error code stands for; a send that failed before any answer (the
/// client's connection task gone) is a dropped connection.
fn jetstream_code_blip_kind(error: &PublishError) -> Option<BlipKind> {
    let Some(source) = std::error::Error::source(error) else {
        return Some(BlipKind::ConnectionDropped);
    };
    let Some(api) = source.downcast_ref::<async_nats::jetstream::Error>() else {
        // Not an answer of the server: the request could not be sent or read.
        return Some(BlipKind::Io);
    };
    match api.error_code() {
        ErrorCode::INSUFFICIENT_RESOURCES
        | ErrorCode::STORAGE_RESOURCES_EXCEEDED
        | ErrorCode::MEMORY_RESOURCES_EXCEEDED
        | ErrorCode::ACCOUNT_RESOURCES_EXCEEDED
        | ErrorCode::TEMP_STORAGE_FAILED => Some(BlipKind::ResourcesExceeded),
        ErrorCode::CLUSTER_NOT_LEADER => Some(BlipKind::ClusterDown),
        _ => None,
    }
}

/// The blip behind a RabbitMQ client error, if it is one: an I/O error, a connection or
/// channel closed under the request (a broker restart, a dropped connection, a channel another
/// publish's refusal closed), a missed heartbeat, the broker forcing the connection closed or
/// failing internally, a resource it is short of. A refusal of the request itself (no such
/// exchange, access refused, a precondition, a frame too large) is not.
pub fn amqp_blip(error: &lapin::Error) -> Option<Blip> {
    use lapin::ErrorKind as K;
    let kind = match error.kind() {
        K::IOError(e) => io_error_blip_kind(e),
        K::InvalidChannelState(..) | K::InvalidConnectionState(_) | K::InvalidChannel(_) => {
            BlipKind::ConnectionDropped
        }
        K::MissingHeartbeatError => BlipKind::Timeout,
        K::ChannelsLimitReached => BlipKind::Busy,
        K::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED) => BlipKind::AdminShutdown,
            AMQPErrorKind::Hard(AMQPHardError::INTERNALERROR) => BlipKind::Io,
            AMQPErrorKind::Hard(AMQPHardError::RESOURCEERROR) => BlipKind::ResourcesExceeded,
            AMQPErrorKind::Soft(AMQPSoftError::RESOURCELOCKED) => BlipKind::Busy,
            _ => return None,
        },
        _ => return None,
    };
    Some(Blip {
        service: Service::Rabbitmq,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::Arc;

    use lapin::protocol::AMQPError;

    use super::*;

    fn amqp(kind: lapin::ErrorKind) -> Option<BlipKind> {
        amqp_blip(&lapin::Error::from(kind)).map(|b| {
            assert_eq!(b.service, Service::Rabbitmq);
            b.kind
        })
    }

    fn amqp_reply(kind: AMQPErrorKind) -> Option<BlipKind> {
        amqp(lapin::ErrorKind::ProtocolError(AMQPError::new(
            kind,
            "reply".into(),
        )))
    }

    #[test]
    fn nats_timeouts_dropped_connections_and_full_acks_are_blips() {
        for (kind, wanted) in [
            (PublishErrorKind::TimedOut, Some(BlipKind::Timeout)),
            (
                PublishErrorKind::BrokenPipe,
                Some(BlipKind::ConnectionDropped),
            ),
            (PublishErrorKind::MaxAckPending, Some(BlipKind::Busy)),
            (PublishErrorKind::MaxPayloadExceeded, None),
            (PublishErrorKind::StreamNotFound, None),
        ] {
            let got = nats_publish_blip(&PublishError::new(kind)).map(|b| b.kind);
            assert_eq!(got, wanted, "{kind:?}");
        }
    }

    #[test]
    fn amqp_io_errors_and_closed_channels_are_blips() {
        assert_eq!(
            amqp(lapin::ErrorKind::IOError(Arc::new(io::Error::from(
                io::ErrorKind::ConnectionRefused
            )))),
            Some(BlipKind::ConnectionRefused)
        );
        assert_eq!(
            amqp(lapin::ErrorKind::InvalidConnectionState(
                lapin::ConnectionState::Closed
            )),
            Some(BlipKind::ConnectionDropped)
        );
        assert_eq!(
            amqp(lapin::ErrorKind::MissingHeartbeatError),
            Some(BlipKind::Timeout)
        );
    }

    #[test]
    fn amqp_refusals_of_the_request_are_not_blips_but_a_forced_close_is() {
        assert_eq!(
            amqp_reply(AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)),
            None
        );
        assert_eq!(
            amqp_reply(AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED)),
            None
        );
        assert_eq!(
            amqp_reply(AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED)),
            Some(BlipKind::AdminShutdown)
        );
        assert_eq!(
            amqp_reply(AMQPErrorKind::Hard(AMQPHardError::RESOURCEERROR)),
            Some(BlipKind::ResourcesExceeded)
        );
    }
}
