//! `prefix-router`: the default router plugin. Routes each event by the longest matching prefix
//! of its type, exactly like the host's native routing table.
//!
//! Config (the `[routes]` table of `routes.toml`, as JSON):
//!
//! ```json
//! { "routes": { "mail.": ["outbox.mail"], "*.deleted": ["outbox.audit", "outbox.search-index"] } }
//! ```
//!
//! A single queue may also be given as a plain string (`"mail.": "outbox.mail"`).
//!
//! Rules:
//! - the longest matching prefix wins;
//! - a prefix starting with `*` stands for any one first segment: `*rest` matches a type that
//!   contains a `.` and whose part from the first `.` on starts with `rest` (`*.deleted` matches
//!   `user.deleted` and `order.deleted.v2`, not `deleted`);
//! - between a literal and a wildcard prefix of the same length, the literal wins;
//! - an event no prefix matches gets `no-route` with the host's standard message.
//!
//! An invalid config (not the shape above, or a prefix with no queues) is refused by
//! `check_config`: the host retries the events (the config is at fault, not them) and refuses a
//! `routes.toml` that gives this router such a config.

use std::collections::BTreeMap;

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{log, Config, Event};
use serde::Deserialize;

/// The plugin's config: the routing table.
#[derive(Deserialize)]
struct RouterConfig {
    routes: BTreeMap<String, Queues>,
}

/// The destination of one prefix: one queue or a list (fan-out).
#[derive(Deserialize)]
#[serde(untagged)]
enum Queues {
    One(String),
    Many(Vec<String>),
}

/// One rule of the table.
struct Rule {
    prefix: String,
    queues: Vec<String>,
}

impl Rule {
    /// Whether this rule's prefix matches `event_type`.
    fn matches(&self, event_type: &str) -> bool {
        match self.prefix.strip_prefix('*') {
            Some(rest) => event_type
                .find('.')
                .is_some_and(|dot| event_type[dot..].starts_with(rest)),
            None => event_type.starts_with(&self.prefix),
        }
    }

    /// Sort key: longer prefixes first, and a literal before a wildcard of the same length.
    fn specificity(&self) -> (usize, bool) {
        (self.prefix.len(), !self.prefix.starts_with('*'))
    }
}

/// The routing table, most specific rule first, so the first match is the winner.
struct Table {
    rules: Vec<Rule>,
}

impl Table {
    /// Parse the plugin config into a table; errors read `invalid plugin config: ...`.
    fn from_config(config: &Config) -> Result<Self, String> {
        let config: RouterConfig = config.parse().map_err(|e| e.to_string())?;
        let mut rules = config
            .routes
            .into_iter()
            .map(|(prefix, queues)| {
                let queues = match queues {
                    Queues::One(queue) => vec![queue],
                    Queues::Many(queues) => queues,
                };
                if queues.is_empty() {
                    return Err(format!(
                        "invalid plugin config: prefix '{prefix}' has an empty queue list"
                    ));
                }
                Ok(Rule { prefix, queues })
            })
            .collect::<Result<Vec<_>, _>>()?;
        rules.sort_by_key(|rule| std::cmp::Reverse(rule.specificity()));
        Ok(Self { rules })
    }

    /// Route one event type.
    fn route(&self, event_type: &str) -> Route {
        match self.rules.iter().find(|rule| rule.matches(event_type)) {
            Some(rule) => Route::Queues(rule.queues.clone()),
            None => Route::NoRoute(format!(
                "no route matched event type '{event_type}' (add a prefix rule to [routes] in routes.toml)"
            )),
        }
    }
}

/// The exported router.
struct PrefixRouter;

impl Router for PrefixRouter {
    fn check_config(config: &Config) -> Result<(), String> {
        Table::from_config(config).map(|_| ())
    }

    fn route(config: &Config, events: Vec<Event>) -> Vec<Route> {
        match Table::from_config(config) {
            Ok(table) => events.iter().map(|e| table.route(&e.event_type)).collect(),
            // check_config refused this config before route was called; kept total all the same.
            Err(error) => {
                log::error!("prefix-router: {error}");
                vec![Route::NoRoute(format!("prefix-router: {error}")); events.len()]
            }
        }
    }
}

outbox_plugin_sdk::export_router!(PrefixRouter);

#[cfg(test)]
mod tests {
    use super::*;

    fn table(json: &str) -> Table {
        Table::from_config(&Config::new(json)).expect("valid config")
    }

    fn queues(route: Route) -> Vec<String> {
        match route {
            Route::Queues(queues) => queues,
            Route::NoRoute(reason) => panic!("unexpected no-route: {reason}"),
        }
    }

    #[test]
    fn longest_prefix_wins() {
        let t =
            table(r#"{"routes": {"tenant.": ["a"], "tenant.subscription.": ["b"], "mail.": "c"}}"#);
        assert_eq!(queues(t.route("tenant.subscription.created")), ["b"]);
        assert_eq!(queues(t.route("tenant.created")), ["a"]);
        assert_eq!(queues(t.route("mail.welcome")), ["c"]);
    }

    #[test]
    fn wildcard_matches_any_first_segment() {
        let t = table(r#"{"routes": {"*.deleted": ["audit", "search"]}}"#);
        assert_eq!(queues(t.route("user.deleted")), ["audit", "search"]);
        assert_eq!(queues(t.route("order.deleted.v2")), ["audit", "search"]);
        assert!(matches!(t.route("deleted"), Route::NoRoute(_)));
        assert!(matches!(t.route("user.created"), Route::NoRoute(_)));
        // Only the first segment is skipped: a later `.deleted` does not match.
        assert!(matches!(t.route("a.b.deleted"), Route::NoRoute(_)));
    }

    #[test]
    fn literal_beats_wildcard_of_equal_length() {
        // Both prefixes are 9 bytes long.
        let t = table(r#"{"routes": {"*.deleted": ["wild"], "user.dele": ["literal"]}}"#);
        assert_eq!(queues(t.route("user.deleted")), ["literal"]);
        // A longer wildcard still beats a shorter literal.
        let t = table(r#"{"routes": {"*.deleted": ["wild"], "user.": ["literal"]}}"#);
        assert_eq!(queues(t.route("user.deleted")), ["wild"]);
    }

    #[test]
    fn no_match_uses_the_host_message() {
        let t = table(r#"{"routes": {"mail.": ["outbox.mail"]}}"#);
        assert_eq!(
            t.route("billing.charge"),
            Route::NoRoute(
                "no route matched event type 'billing.charge' (add a prefix rule to [routes] in routes.toml)"
                    .into()
            )
        );
    }

    #[test]
    fn invalid_config_is_explained() {
        let err = Table::from_config(&Config::new(r#"{"routes": {"mail.": []}}"#))
            .err()
            .expect("empty queue list is rejected");
        assert_eq!(
            err,
            "invalid plugin config: prefix 'mail.' has an empty queue list"
        );
        assert!(Table::from_config(&Config::new(r#"{"routes": 3}"#)).is_err());
    }
}
