//! Feedback loops: handlers that may publish events which come back to a queue they handle,
//! found in `routes.toml` alone (`outbox routes check` warns about each).
//!
//! Owns the static analysis. Its graph has a node per handler-bound queue and an edge from queue
//! A to queue B when A's handler holds a `publish` grant for some event type the routing table
//! sends to B; each edge keeps one such type as its example, found by routing it through the
//! real table, so an edge is never a guess. Every cycle of that graph is a [`FeedbackLoop`]: at
//! run time the host ends one after `OUTBOX_MAX_EVENT_GENERATION` generations with a dead letter
//! (see `capability::publish`). The host's plugin-invoke handler publishes with the grants of
//! the plugins subscribed to hooks, since it runs them.
//!
//! It reads grants the way the default capability policy does (`publish` entries are type
//! prefixes) and routes with `[routes]` (the native table, which is also what the default
//! `prefix-router` applies). It never loads a plugin, runs a router or a policy, or connects to
//! anything: what another router plugin, a `[router.overrides]` entry or a custom policy decides
//! is not analysed, and [`FeedbackReport::unanalysed`] says so.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use super::{RouteDecision, RouteTable};
use crate::config::RoutesFile;
use crate::naming::{validate_event_type, BUILTIN_PLUGIN_INVOKE, DENY_ALL, NATIVE_ROUTER};

/// The router plugin that applies `[routes]` exactly as the native table does.
const TABLE_ROUTER_PLUGIN: &str = "prefix-router";

/// What completes a type prefix into an example event type (`mail.` -> `mail.example`).
const FILLER: &str = "example";

/// One step of a loop: the handler of `queue` may publish `example_type` (its grant `grant`
/// allows it), which routes to the next step's queue.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FeedbackStep {
    /// A handler-bound queue.
    pub queue: String,
    /// Who publishes: the plugin bound to `queue`, or for the plugin-invoke handler the
    /// subscribed plugin it runs (`builtin:plugin-invoke running <plugin>`).
    pub handler: String,
    /// The `publish` grant (a type prefix) that allows `example_type`.
    pub grant: String,
    /// An event type the grant allows and the table routes to the next step's queue.
    pub example_type: String,
}

/// A cycle of handler-bound queues: each step's handler may publish an event the next step's
/// queue receives, and the last step's event comes back to the first step's queue.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FeedbackLoop {
    /// The steps, starting from the queue whose name sorts first.
    pub steps: Vec<FeedbackStep>,
}

impl fmt::Display for FeedbackLoop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(first) = self.steps.first() else {
            return Ok(());
        };
        if let [only] = self.steps.as_slice() {
            return write!(
                f,
                "handler {} of {} may publish {} (grant {:?}), which routes back to {}",
                only.handler, only.queue, only.example_type, only.grant, only.queue
            );
        }
        for step in &self.steps {
            write!(
                f,
                "{} (handler {}) publishes {} (grant {:?}) -> ",
                step.queue, step.handler, step.example_type, step.grant
            )?;
        }
        write!(f, "{}", first.queue)
    }
}

/// What [`feedback_loops`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedbackReport {
    /// Every cycle, each once, in name order.
    pub loops: Vec<FeedbackLoop>,
    /// What routes or grants the analysis could not see (a router plugin that is not the
    /// table, `[router.overrides]`, a custom policy plugin), one sentence each.
    pub unanalysed: Vec<String>,
}

/// The handler feedback loops of `routes` (see the module docs).
pub fn feedback_loops(routes: &RoutesFile) -> FeedbackReport {
    if routes.policy.plugin == DENY_ALL {
        // No handler may publish anything: no loop.
        return FeedbackReport::default();
    }
    let table = routes.route_table();
    let publishers = publishers(routes);
    // queue -> next queue -> the step that leads there (the first found, by grant and type).
    let mut edges: BTreeMap<&str, BTreeMap<String, FeedbackStep>> = BTreeMap::new();
    for (queue, handlers) in &publishers {
        for (handler, grants) in handlers {
            for grant in grants {
                for example_type in example_types(grant, &table) {
                    let RouteDecision::Queues(targets) = table.route(&example_type) else {
                        continue;
                    };
                    for target in targets {
                        if !routes.handlers.contains_key(&target) {
                            continue;
                        }
                        edges
                            .entry(*queue)
                            .or_default()
                            .entry(target)
                            .or_insert_with(|| FeedbackStep {
                                queue: queue.to_string(),
                                handler: handler.clone(),
                                grant: grant.clone(),
                                example_type: example_type.clone(),
                            });
                    }
                }
            }
        }
    }
    let mut loops = BTreeSet::new();
    for start in edges.keys() {
        if let Some(cycle) = shortest_cycle(start, &edges) {
            loops.insert(cycle);
        }
    }
    FeedbackReport {
        loops: loops.into_iter().collect(),
        unanalysed: unanalysed(routes),
    }
}

/// Handler-bound queue -> (who publishes, their `publish` grants).
fn publishers(routes: &RoutesFile) -> BTreeMap<&str, Vec<(String, Vec<String>)>> {
    let mut out: BTreeMap<&str, Vec<(String, Vec<String>)>> = BTreeMap::new();
    for (queue, handler) in &routes.handlers {
        let entry = out.entry(queue.as_str()).or_default();
        if handler == BUILTIN_PLUGIN_INVOKE {
            for (plugin, spec) in routes.plugins.iter().filter(|(_, s)| !s.hooks.is_empty()) {
                entry.push((
                    format!("{BUILTIN_PLUGIN_INVOKE} running {plugin}"),
                    spec.grants.publish.clone(),
                ));
            }
        } else if let Some(spec) = routes.plugins.get(handler) {
            entry.push((handler.clone(), spec.grants.publish.clone()));
        }
    }
    out
}

/// Event types that `grant` (a type prefix) allows, one per rule of `table` that some such type
/// can reach, plus the grant completed on its own: valid event types only.
fn example_types(grant: &str, table: &RouteTable) -> BTreeSet<String> {
    let mut candidates = vec![grant.to_string()];
    for rule in table.rules() {
        if let Some(candidate) = meeting_point(grant, &rule.prefix) {
            candidates.push(candidate);
        }
    }
    candidates
        .into_iter()
        .map(|t| complete(&t))
        .filter(|t| t.starts_with(grant) && validate_event_type(t).is_ok())
        .collect()
}

/// A type prefix both `grant` (a literal prefix) and the routing pattern `rule` accept, if they
/// can meet.
fn meeting_point(grant: &str, rule: &str) -> Option<String> {
    let Some(rest) = rule.strip_prefix('*') else {
        // Two literal prefixes meet when one extends the other.
        return if rule.starts_with(grant) {
            Some(rule.to_string())
        } else if grant.starts_with(rule) {
            Some(grant.to_string())
        } else {
            None
        };
    };
    // `*rest`: any first segment, then `rest` from the first dot on.
    if rest.is_empty() {
        return Some(grant.to_string());
    }
    if !rest.starts_with('.') {
        return None;
    }
    match grant.find('.') {
        Some(dot) => {
            let (first, after) = grant.split_at(dot);
            if after.starts_with(rest) {
                Some(grant.to_string())
            } else if rest.starts_with(after) {
                Some(format!("{first}{rest}"))
            } else {
                None
            }
        }
        None => {
            let first = if grant.is_empty() { FILLER } else { grant };
            Some(format!("{first}{rest}"))
        }
    }
}

/// A type prefix completed into a whole event type: an empty last segment or a missing second
/// one is filled in.
fn complete(prefix: &str) -> String {
    if prefix.is_empty() {
        format!("{FILLER}.{FILLER}")
    } else if prefix.ends_with('.') {
        format!("{prefix}{FILLER}")
    } else if !prefix.contains('.') {
        format!("{prefix}.{FILLER}")
    } else {
        prefix.to_string()
    }
}

/// The shortest way from `start` back to `start`, as steps, rotated to begin at the queue whose
/// name sorts first (so one cycle found from each of its queues is reported once).
fn shortest_cycle(
    start: &str,
    edges: &BTreeMap<&str, BTreeMap<String, FeedbackStep>>,
) -> Option<FeedbackLoop> {
    // Breadth first: `came_from[q]` is the step that first reached q.
    let mut came_from: BTreeMap<&str, &FeedbackStep> = BTreeMap::new();
    let mut todo = VecDeque::from([start]);
    while let Some(queue) = todo.pop_front() {
        for (next, step) in edges.get(queue).into_iter().flatten() {
            if next == start {
                let mut steps = vec![step.clone()];
                let mut at = queue;
                while at != start {
                    let back = came_from[at];
                    steps.push(back.clone());
                    at = back.queue.as_str();
                }
                steps.reverse();
                let first = steps
                    .iter()
                    .enumerate()
                    .min_by(|(_, a), (_, b)| a.queue.cmp(&b.queue))
                    .map(|(i, _)| i)
                    .unwrap_or(0);
                steps.rotate_left(first);
                return Some(FeedbackLoop { steps });
            }
            if !came_from.contains_key(next.as_str()) {
                came_from.insert(next.as_str(), step);
                todo.push_back(next.as_str());
            }
        }
    }
    None
}

/// What the analysis cannot see in `routes`, one sentence each.
fn unanalysed(routes: &RoutesFile) -> Vec<String> {
    let mut out = Vec::new();
    let router = routes.router.plugin.as_str();
    let table_router = router == NATIVE_ROUTER
        || (router == TABLE_ROUTER_PLUGIN
            && routes.plugins.get(router).is_none_or(|spec| {
                spec.file
                    .as_deref()
                    .is_none_or(|f| f == "prefix-router.wasm")
                    && spec.config.as_ref().and_then(|c| c.get("routes")).is_none()
            }));
    if !table_router {
        out.push(format!(
            "router plugin {router} decides the routes: only the [routes] table was analysed for feedback loops"
        ));
    }
    if !routes.router.overrides.is_empty() {
        let prefixes: Vec<&str> = routes.router.overrides.keys().map(String::as_str).collect();
        out.push(format!(
            "[router.overrides] route {} with router plugins: those types were analysed with the [routes] table only",
            prefixes.join(", ")
        ));
    }
    if routes.policy.plugin != "capability-policy" {
        out.push(format!(
            "policy plugin {} decides publish calls: feedback loops were looked for as if publish grants were type prefixes",
            routes.policy.plugin
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn routes(toml: &str) -> RoutesFile {
        RoutesFile::parse(toml, Path::new("routes.toml")).unwrap()
    }

    #[test]
    fn types_meet_patterns_only_where_both_allow_them() {
        assert_eq!(meeting_point("loop.", "loop."), Some("loop.".into()));
        assert_eq!(
            meeting_point("loop.", "loop.ping."),
            Some("loop.ping.".into())
        );
        assert_eq!(
            meeting_point("loop.ping.", "loop."),
            Some("loop.ping.".into())
        );
        assert_eq!(meeting_point("loop.", "mail."), None);
        assert_eq!(
            meeting_point("user.", "*.deleted"),
            Some("user.deleted".into())
        );
        assert_eq!(
            meeting_point("user.del", "*.deleted"),
            Some("user.deleted".into())
        );
        assert_eq!(
            meeting_point("user.deleted.x", "*.deleted"),
            Some("user.deleted.x".into())
        );
        assert_eq!(meeting_point("user.created", "*.deleted"), None);
        assert_eq!(meeting_point("us", "*.deleted"), Some("us.deleted".into()));
        assert_eq!(
            meeting_point("", "*.deleted"),
            Some("example.deleted".into())
        );
        assert_eq!(complete("loop."), "loop.example");
        assert_eq!(complete("loop"), "loop.example");
        assert_eq!(complete(""), "example.example");
        assert_eq!(complete("loop.ping"), "loop.ping");
    }

    #[test]
    fn a_handler_whose_grant_routes_back_to_its_queue_is_a_loop() {
        let report = feedback_loops(&routes(
            r#"
            [routes]
            "loop." = "outbox.loop"
            "mail." = "outbox.mail"
            [router]
            plugin = "native"
            [plugins.capability-policy]
            [handlers]
            "outbox.loop" = "looper"
            "outbox.mail" = "mailer"
            [plugins.looper]
            grants = { publish = ["loop.ping"] }
            [plugins.mailer]
            grants = { publish = ["audit."] }
            "#,
        ));
        assert_eq!(report.unanalysed, Vec::<String>::new());
        assert_eq!(report.loops.len(), 1, "{report:?}");
        assert_eq!(
            report.loops[0].to_string(),
            "handler looper of outbox.loop may publish loop.ping (grant \"loop.ping\"), which routes back to outbox.loop"
        );
    }

    #[test]
    fn a_loop_through_another_handler_is_found_once_and_named_step_by_step() {
        let report = feedback_loops(&routes(
            r#"
            [routes]
            "a." = "outbox.a"
            "b." = "outbox.b"
            "b.quiet." = "outbox.sink"
            [router]
            plugin = "native"
            [plugins.capability-policy]
            [handlers]
            "outbox.a" = "ping"
            "outbox.b" = "pong"
            [plugins.ping]
            grants = { publish = ["b."] }
            [plugins.pong]
            grants = { publish = ["a.reply"] }
            "#,
        ));
        assert_eq!(report.loops.len(), 1, "{report:?}");
        assert_eq!(
            report.loops[0].to_string(),
            "outbox.a (handler ping) publishes b.example (grant \"b.\") -> outbox.b (handler pong) publishes a.reply (grant \"a.reply\") -> outbox.a"
        );
    }

    #[test]
    fn grants_that_only_reach_longer_rules_elsewhere_are_no_loop() {
        // `loop.` goes back to outbox.loop, but the handler may only publish `loop.out.`, which a
        // longer rule sends elsewhere; a wildcard sends `*.done` to an unhandled queue.
        let report = feedback_loops(&routes(
            r#"
            [routes]
            "loop." = "outbox.loop"
            "loop.out." = "outbox.out"
            "*.done" = "outbox.done"
            [router]
            plugin = "native"
            [plugins.capability-policy]
            [handlers]
            "outbox.loop" = "looper"
            [plugins.looper]
            grants = { publish = ["loop.out.", "x.done"] }
            "#,
        ));
        assert_eq!(report.loops, vec![], "{report:?}");
    }

    #[test]
    fn hook_subscribers_publish_through_the_invoke_handler() {
        let report = feedback_loops(&routes(
            r#"
            [routes]
            "plugin.hook." = "outbox.plugin-hook"
            "plugin.invoke." = "outbox.plugin-invoke"
            [router]
            plugin = "native"
            [plugins.capability-policy]
            [handlers]
            "outbox.plugin-hook" = "plugin-hook"
            "outbox.plugin-invoke" = "builtin:plugin-invoke"
            [plugins.plugin-hook]
            grants = { publish = ["plugin.invoke."] }
            [plugins.echo]
            hooks = ["order.paid"]
            grants = { publish = ["plugin.hook.order."] }
            "#,
        ));
        assert_eq!(report.loops.len(), 1, "{report:?}");
        let steps = &report.loops[0].steps;
        assert_eq!(steps[0].queue, "outbox.plugin-hook");
        assert_eq!(steps[1].handler, "builtin:plugin-invoke running echo");
    }

    #[test]
    fn what_a_router_plugin_decides_is_named_as_not_analysed() {
        let report = feedback_loops(&routes(
            r#"
            [routes]
            "a." = "outbox.a"
            [router]
            plugin = "my-router"
            [router.overrides]
            "form." = "my-router"
            [plugins.my-router]
            [plugins.capability-policy]
            "#,
        ));
        assert_eq!(report.unanalysed.len(), 2, "{report:?}");
        assert!(report.unanalysed[0].contains("router plugin my-router"));
        assert!(report.unanalysed[1].contains("form."));
    }
}
