//! Routing through router plugins: the [`Router`] seam implemented in WebAssembly.
//!
//! Owns splitting a batch between the default router plugin and `[router.overrides]` (longest
//! prefix), handing each plugin its events as WIT records (payload and headers only for a
//! router whose spec sets `router_payload`: [`to_router_event`]), and mapping answers back to
//! [`RouteDecision`]s; a plugin declaring `router_by_type` is asked only about event types it
//! has not answered yet (see [`crate::plugin::remembered_routes`]). It looks each plugin up once
//! per batch, so a hot reload takes effect at the next batch and never inside one. It never
//! touches PostgreSQL or Redis.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{
    PrefixMatcher, RouteDecider, RouteDecision, RouteTable, Router, RouterError, TypePattern,
};
use crate::config::RoutesFile;
use crate::naming::NATIVE_ROUTER;
use crate::plugin::bindings::{WitEvent, WitRouteDecision as WitDecision};
use crate::plugin::engine::block_on;
use crate::plugin::wit_event::to_router_event;
use crate::plugin::{PluginError, PluginRegistry};
use crate::store::ClaimedEvent;

/// Routes with router plugins from the registry, as `[router]` in `routes.toml` says.
pub struct PluginRouter {
    registry: Arc<PluginRegistry>,
    default_plugin: String,
    /// `[router.overrides]`: prefix -> plugin; plugin `native` means the built-in table.
    overrides: PrefixMatcher<String>,
    native: RouteTable,
}

impl PluginRouter {
    /// A router for `routes` (its `[router]` section and table) over loaded plugins.
    pub fn new(registry: Arc<PluginRegistry>, routes: &RoutesFile) -> Self {
        Self {
            registry,
            default_plugin: routes.router.plugin.clone(),
            overrides: PrefixMatcher::new(
                routes
                    .router
                    .overrides
                    .iter()
                    .map(|(prefix, plugin)| (TypePattern::new(prefix.clone()), plugin.clone())),
            ),
            native: routes.route_table(),
        }
    }

    /// The router plugin that routes `event_type`: the most specific override, or the default
    /// plugin (`native`: the built-in table).
    fn plugin_for(&self, event_type: &str) -> &str {
        self.overrides
            .find(event_type)
            .map_or(self.default_plugin.as_str(), |(_, plugin)| plugin.as_str())
    }

    /// Route `events` a group per router plugin (the default one, each override's), one call
    /// each; see [`Router::route_batch`].
    async fn route_groups(
        &self,
        events: &[ClaimedEvent],
    ) -> Result<Vec<RouteDecision>, RouterError> {
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let plugin = self.plugin_for(&e.event_type);
            match groups.iter_mut().find(|(p, _)| *p == plugin) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((plugin, vec![i])),
            }
        }
        let mut decisions: Vec<Option<RouteDecision>> = vec![None; events.len()];
        for (plugin, indices) in groups {
            let batch: Vec<&ClaimedEvent> = indices.iter().map(|i| &events[*i]).collect();
            match self.route_with(plugin, &batch).await {
                Ok(answer) => {
                    for (i, d) in indices.into_iter().zip(answer) {
                        decisions[i] = Some(d);
                    }
                }
                // A refused config fails every event the same way: no point in one by one.
                Err(e @ PluginError::Config { .. }) => {
                    for i in indices {
                        decisions[i] = Some(RouteDecision::Error(e.to_string()));
                    }
                }
                Err(e) if groups_is_whole(events.len(), batch.len()) => {
                    return Err(RouterError {
                        router: plugin.to_string(),
                        message: e.to_string(),
                    })
                }
                Err(e) => {
                    // Only this plugin's events fail; the others keep their answers.
                    for i in indices {
                        decisions[i] = Some(RouteDecision::Error(e.to_string()));
                    }
                }
            }
        }
        Ok(decisions
            .into_iter()
            .map(|d| {
                d.unwrap_or_else(|| {
                    RouteDecision::Error("no router answered for this event".into())
                })
            })
            .collect())
    }

    /// Route `events` with one router plugin (at most one instantiation, one call for the batch;
    /// none when it declares `router_by_type` and every type's answer is remembered), awaited on
    /// the caller's task.
    pub async fn route_with(
        &self,
        plugin_name: &str,
        events: &[&ClaimedEvent],
    ) -> Result<Vec<RouteDecision>, PluginError> {
        if plugin_name == NATIVE_ROUTER {
            return Ok(events
                .iter()
                .map(|e| self.native.route(&e.event_type))
                .collect());
        }
        let plugin = self
            .registry
            .get(plugin_name)
            .ok_or_else(|| PluginError::NotLoaded(plugin_name.to_string()))?;
        let answer = if plugin.spec.router_by_type {
            plugin.route_by_type(events).await?
        } else {
            let payload = plugin.spec.router_payload;
            let wit_events: Vec<WitEvent> =
                events.iter().map(|e| to_router_event(e, payload)).collect();
            plugin.route(&wit_events).await?
        };
        let router = format!("plugin {plugin_name}");
        Ok(answer
            .into_iter()
            .map(|d| {
                match d {
                    WitDecision::Queues(queues) => RouteDecision::Queues(queues),
                    WitDecision::NoRoute(reason) => RouteDecision::NoRoute(reason),
                }
                .checked(&router)
            })
            .collect())
    }
}

impl Router for PluginRouter {
    fn name(&self) -> &str {
        &self.default_plugin
    }

    fn decider(&self, event_type: &str) -> RouteDecider {
        match self.plugin_for(event_type) {
            NATIVE_ROUTER => self.native.decider(event_type),
            plugin => RouteDecider::Router(plugin.to_string()),
        }
    }

    fn route_batch(&self, events: &[ClaimedEvent]) -> Result<Vec<RouteDecision>, RouterError> {
        block_on(self.route_events(events)).unwrap_or_else(|e| {
            Err(RouterError {
                router: self.default_plugin.clone(),
                message: e.to_string(),
            })
        })
    }

    fn route_events<'a>(
        &'a self,
        events: &'a [ClaimedEvent],
    ) -> BoxFuture<'a, Result<Vec<RouteDecision>, RouterError>> {
        Box::pin(self.route_groups(events))
    }
}

fn groups_is_whole(total: usize, group: usize) -> bool {
    total == group && total > 1
}
