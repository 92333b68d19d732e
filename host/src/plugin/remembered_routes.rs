//! Remembered routes: the answers of a router plugin that decides by event type alone
//! (`router_by_type` in its `[plugins.NAME]`), kept per event type so it is asked once per type.
//!
//! Owns the bounded map of one loaded plugin version's answers ([`RememberedRoutes`], a field of
//! [`LoadedPlugin`]: a hot reload of the file or of its config builds a new `LoadedPlugin`, so
//! nothing an earlier version or config answered is ever reused) and routing claimed events
//! through it ([`LoadedPlugin::route_by_type`]). Only answers are remembered: a failed call
//! remembers nothing and fails as it did. It never decides a route itself and never remembers an
//! answer of a plugin whose spec does not declare `router_by_type`.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::bindings::WitRouteDecision;
use super::wit_event::to_router_event;
use super::{LoadedPlugin, PluginError};
use crate::store::ClaimedEvent;

/// The most event types one plugin version's answers are remembered for; past it, a type not
/// remembered yet is asked every time (as without `router_by_type`), so producers inventing types
/// cannot grow the host's memory.
pub const REMEMBERED_TYPES: usize = 4096;

/// One loaded router version's answers by event type (see the module comment).
#[derive(Default)]
pub struct RememberedRoutes {
    by_type: Mutex<HashMap<String, WitRouteDecision>>,
}

impl RememberedRoutes {
    /// The answer remembered for `event_type`, if any.
    pub fn get(&self, event_type: &str) -> Option<WitRouteDecision> {
        self.by_type.lock().ok()?.get(event_type).cloned()
    }

    /// Remember `decision` for `event_type`, unless [`REMEMBERED_TYPES`] types are remembered
    /// already.
    pub fn remember(&self, event_type: &str, decision: &WitRouteDecision) {
        if let Ok(mut by_type) = self.by_type.lock() {
            if by_type.len() < REMEMBERED_TYPES && !by_type.contains_key(event_type) {
                by_type.insert(event_type.to_string(), decision.clone());
            }
        }
    }

    /// How many event types have a remembered answer.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_type.lock().map_or(0, |by_type| by_type.len())
    }
}

impl LoadedPlugin {
    /// Route `events` with this router plugin, which declares `router_by_type`: each event whose
    /// type has a remembered answer gets it without a call; the others are asked in one call
    /// (one instantiation) carrying one event per type not remembered yet, and their answers are
    /// remembered. No call at all when every type is remembered. Errors as
    /// [`route`](Self::route) (nothing remembered then).
    pub async fn route_by_type(
        &self,
        events: &[&ClaimedEvent],
    ) -> Result<Vec<WitRouteDecision>, PluginError> {
        let mut answers: Vec<Option<WitRouteDecision>> = events
            .iter()
            .map(|e| self.remembered_routes.get(&e.event_type))
            .collect();
        let mut asked: Vec<&ClaimedEvent> = Vec::new();
        let mut asked_types: HashSet<&str> = HashSet::new();
        for (event, answer) in events.iter().zip(&answers) {
            if answer.is_none() && asked_types.insert(event.event_type.as_str()) {
                asked.push(event);
            }
        }
        if asked.is_empty() {
            return Ok(answers.into_iter().flatten().collect());
        }
        let wit_events: Vec<_> = asked.iter().map(|e| to_router_event(e, false)).collect();
        let answered = self.route(&wit_events).await?;
        let by_type: HashMap<&str, WitRouteDecision> = asked
            .iter()
            .zip(answered)
            .map(|(event, decision)| {
                self.remembered_routes
                    .remember(&event.event_type, &decision);
                (event.event_type.as_str(), decision)
            })
            .collect();
        for (event, answer) in events.iter().zip(answers.iter_mut()) {
            if answer.is_none() {
                *answer = by_type.get(event.event_type.as_str()).cloned();
            }
        }
        // `route` answers exactly one decision per event asked, so every event has one.
        answers
            .into_iter()
            .map(|answer| {
                answer.ok_or_else(|| PluginError::Call {
                    plugin: self.name.to_string(),
                    message: "no answer for an event type it was asked about".into(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_one_answer_per_type_and_no_more_types_than_the_bound() {
        let remembered = RememberedRoutes::default();
        let mail = WitRouteDecision::Queues(vec!["outbox.mail".into()]);
        remembered.remember("mail.welcome", &mail);
        // The first answer stays: one type never maps to two answers.
        remembered.remember("mail.welcome", &WitRouteDecision::NoRoute("later".into()));
        assert!(matches!(
            remembered.get("mail.welcome"),
            Some(WitRouteDecision::Queues(q)) if q == vec!["outbox.mail".to_string()]
        ));
        assert!(remembered.get("mail.other").is_none());
        for i in 0..REMEMBERED_TYPES + 10 {
            remembered.remember(&format!("t.{i}"), &mail);
        }
        assert_eq!(remembered.len(), REMEMBERED_TYPES);
        assert!(remembered
            .get(&format!("t.{}", REMEMBERED_TYPES + 5))
            .is_none());
    }
}
