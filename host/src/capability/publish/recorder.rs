//! The publish capability's recorder: the backend of an offline call (`outbox plugins call`).
//!
//! Owns what an offline call does with a child that passed the checks and the policy: writes it
//! down as an [`OfflineCall::Publish`] ("would publish", with the dispatch key the host gives
//! it) and answers with a negative id. It never inserts anything anywhere.

use futures::future::BoxFuture;

use super::{ChildRules, PreparedChild, PublishBackend};
use crate::capability::offline::{OfflineCall, OfflineLog};

/// The publish backend of an offline run.
pub(crate) struct Recorder {
    log: OfflineLog,
}

impl Recorder {
    /// Children written down in `log`.
    pub(crate) fn new(log: OfflineLog) -> Self {
        Self { log }
    }
}

impl PublishBackend for Recorder {
    fn insert<'a>(
        &'a self,
        child: PreparedChild,
        _rules: &'a ChildRules,
    ) -> BoxFuture<'a, Result<i64, String>> {
        // Negative: nothing was inserted; -1 for the first publish call of the delivery.
        let id = -i64::from(child.index) - 1;
        let event = child.event;
        self.log.record(OfflineCall::Publish {
            event_type: event.event_type,
            tenant_id: event.tenant_id,
            dispatch_key: event.dispatch_key,
            payload: event.payload,
            headers: event.headers,
            id,
        });
        Box::pin(std::future::ready(Ok(id)))
    }
}
