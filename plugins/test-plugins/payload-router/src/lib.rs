//! TEST ONLY: a content-based router. Each event goes to the queue its payload names
//! (`{"queue": "outbox.audit"}`), and only when its headers carry `"route": "by-payload"`. An
//! event whose payload or headers arrived empty (the host withholds them from routers whose
//! spec does not ask for them) gets `no-route` saying which one was missing. Config: ignored.

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct PayloadRouter;

fn route(event: &Event) -> Route {
    if event.payload.is_empty() {
        return Route::NoRoute(format!("payload of event {} withheld", event.id));
    }
    if event.headers.is_empty() {
        return Route::NoRoute(format!("headers of event {} withheld", event.id));
    }
    let headers = event.headers_json().unwrap_or_default();
    if headers["route"] != "by-payload" {
        return Route::NoRoute(format!("headers of event {} lack the route", event.id));
    }
    match event.payload_json().unwrap_or_default()["queue"].as_str() {
        Some(queue) => Route::queue(queue),
        None => Route::NoRoute(format!("payload of event {} names no queue", event.id)),
    }
}

impl Router for PayloadRouter {
    fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
        events.iter().map(route).collect()
    }
}

outbox_plugin_sdk::export_router!(PayloadRouter);
