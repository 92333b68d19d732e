//! The native routing table: `[routes]` of `routes.toml` applied inside the host.
//!
//! Owns [`RouteRule`], [`RouteTable`] (longest matching prefix wins, through the shared
//! [`PrefixMatcher`]), building the table of a routes file ([`RoutesFile::route_table`]) and the
//! standard "no route" message. It never runs WebAssembly and never
//! touches the database or Redis.

use std::fmt;

use super::pattern::{PrefixMatcher, TypePattern};
use super::{RouteDecider, RouteDecision, Router, RouterError};
use crate::config::RoutesFile;
use crate::store::ClaimedEvent;

/// One rule of the routing table: a type prefix and the queues it sends to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RouteRule {
    /// Event type prefix, e.g. `mail.` or `tenant.subscription.`; a leading `*` matches any one
    /// first segment (`*.deleted` matches `user.deleted` and `order.deleted.v2`).
    pub prefix: String,
    /// Destination queues (two or more: fan-out).
    pub queues: Vec<String>,
}

/// The native routing table: longest matching prefix wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTable {
    rules: PrefixMatcher<RouteRule>,
}

impl RouteTable {
    /// Build a table; rules are kept most specific first so the first match is the longest.
    pub fn new(rules: Vec<RouteRule>) -> Self {
        Self {
            rules: PrefixMatcher::new(
                rules
                    .into_iter()
                    .map(|rule| (TypePattern::new(rule.prefix.clone()), rule)),
            ),
        }
    }

    /// The rules, most specific first.
    pub fn rules(&self) -> &[RouteRule] {
        self.rules.values()
    }

    /// The rule that routes `event_type`, if any.
    pub fn rule_for(&self, event_type: &str) -> Option<&RouteRule> {
        self.rules.find(event_type).map(|(_, rule)| rule)
    }

    /// Route one event type.
    pub fn route(&self, event_type: &str) -> RouteDecision {
        match self.rule_for(event_type) {
            Some(rule) => RouteDecision::Queues(rule.queues.clone()),
            None => RouteDecision::NoRoute(no_route_message(event_type)),
        }
    }
}

impl RoutesFile {
    /// The routing table of `[routes]`.
    pub fn route_table(&self) -> RouteTable {
        RouteTable::new(
            self.routes
                .iter()
                .map(|(prefix, queues)| RouteRule {
                    prefix: prefix.clone(),
                    queues: queues.to_vec(),
                })
                .collect(),
        )
    }
}

/// The `last_error` text of an event that no rule routes.
pub fn no_route_message(event_type: &str) -> String {
    format!(
        "no route matched event type '{event_type}' (add a prefix rule to [routes] in routes.toml)"
    )
}

impl Router for RouteTable {
    fn name(&self) -> &str {
        "native-table"
    }

    fn route_batch(&self, events: &[ClaimedEvent]) -> Result<Vec<RouteDecision>, RouterError> {
        Ok(events.iter().map(|e| self.route(&e.event_type)).collect())
    }

    fn decider(&self, event_type: &str) -> RouteDecider {
        match self.rule_for(event_type) {
            Some(rule) => RouteDecider::Rule(rule.clone()),
            None => RouteDecider::NoRule,
        }
    }
}

impl fmt::Display for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for rule in self.rules() {
            writeln!(f, "{:<28} -> {}", rule.prefix, rule.queues.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prefix: &str, queue: &str) -> RouteRule {
        RouteRule {
            prefix: prefix.into(),
            queues: vec![queue.into()],
        }
    }

    #[test]
    fn table_keeps_rules_most_specific_first_and_routes_by_the_longest_match() {
        let table = RouteTable::new(vec![
            rule("mail.", "outbox.mail"),
            rule("*.deleted", "outbox.audit"),
            rule("mail.bounce.", "outbox.webhook"),
        ]);
        let prefixes: Vec<&str> = table.rules().iter().map(|r| r.prefix.as_str()).collect();
        assert_eq!(prefixes, ["mail.bounce.", "*.deleted", "mail."]);
        assert_eq!(
            table.route("mail.bounce.hard"),
            RouteDecision::Queues(vec!["outbox.webhook".into()])
        );
        assert_eq!(
            table.route("mail.deleted"),
            RouteDecision::Queues(vec!["outbox.audit".into()])
        );
        assert_eq!(
            table.decider("mail.welcome"),
            RouteDecider::Rule(rule("mail.", "outbox.mail"))
        );
        assert_eq!(table.decider("nope"), RouteDecider::NoRule);
        assert_eq!(
            table.route("nope"),
            RouteDecision::NoRoute(no_route_message("nope"))
        );
    }
}
