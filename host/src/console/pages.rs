//! Console read pages: overview, event search, one event, plugins and routes, hosts and queues.
//!
//! Owns reading and rendering; each page reads a bounded amount (one search page, the last
//! hour by minute, at most 100 hosts) and a Redis read that does not answer within
//! [`super::REDIS_READ_LIMIT`] leaves its part of the page saying so instead of hanging it. It
//! never changes anything.

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Html;
use chrono::{DateTime, NaiveDateTime, Utc};
use maud::{html, Markup};

use super::layout::{self, ago, status_badge, time};
use super::{within_limit, Console, ConsoleError, Params, Viewer, REDIS_READ_LIMIT};
use crate::config::SinkKind;
use crate::queue::QueueBacklog;
use crate::queue::QueueKeys;
use crate::routing::explain_route;
use crate::store::{self, EventSearch, EVENT_STATUSES};
use crate::trace::EventTrace;

/// Hosts whose heartbeat is older than this are not live (three missed 10 s heartbeats and more).
const LIVE_HOST_SECONDS: i64 = 90;
/// Rows per search page.
const PAGE_ROWS: i64 = 50;
/// Generations of children an event page shows.
const TRACE_DEPTH: usize = 3;

type Page = Result<Html<String>, ConsoleError>;

/// `GET /console`: the overview, its figures refreshed live.
pub async fn overview(State(console): State<Console>, headers: HeaderMap) -> Page {
    let viewer = console.viewer(&headers).await?;
    let body = overview_body(&console).await?;
    Ok(Html(
        layout::page(
            &viewer,
            "/console",
            "Overview",
            html! {
                div #overview data-live="/console/live/overview" { (body) }
            },
        )
        .into_string(),
    ))
}

/// `GET /console/live/overview`: the overview's figures alone.
pub async fn overview_live(State(console): State<Console>, headers: HeaderMap) -> Page {
    console.viewer(&headers).await?;
    Ok(Html(
        html! { div { (overview_body(&console).await?) } }.into_string(),
    ))
}

async fn overview_body(console: &Console) -> Result<Markup, ConsoleError> {
    let pool = console.pool();
    let horizon = console.horizon().await;
    let (counts, minutes, oldest, hosts) = tokio::try_join!(
        store::console_counts(pool, horizon),
        store::throughput_last_hour(pool),
        store::oldest_due_pending_seconds(pool, horizon),
        store::hosts_seen(pool, LIVE_HOST_SECONDS),
    )?;
    let queues = queue_rows(console).await;
    let alerts: Vec<(String, String, String)> = hosts
        .iter()
        .flat_map(|h| {
            h.counters["alerts_firing"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(alert, about)| {
                    (
                        alert.clone(),
                        about.as_str().unwrap_or_default().to_string(),
                        h.id.clone(),
                    )
                })
        })
        .collect();
    Ok(html! {
        div.cards {
            @for (label, n, id) in [("pending", counts.pending, "count-pending"), ("processing", counts.processing, "count-processing"), ("failed", counts.failed, "count-failed"), ("cancelled", counts.cancelled, "count-cancelled")] {
                a.card href=(format!("/console/events?status={label}")) { span.n id=(id) { (count(n)) } span.label { (label) } }
            }
            div.card { span.n #count-done { @if counts.done_is_estimate { "≈ " } (counts.done_estimate) } span.label { "done" @if counts.done_is_estimate { " (estimate)" } } }
            div.card { span.n #oldest-pending { (oldest.map(ago).unwrap_or_else(|| "none".into())) } span.label { "oldest due event waiting" } }
            div.card { span.n #live-hosts { (hosts.len()) } span.label { "live hosts" } }
        }
        h2 { "Alerts firing" }
        @if alerts.is_empty() {
            p #alerts { "None." }
        } @else {
            table #alerts { tr { th { "alert" } th { "about" } th { "raised by" } }
                @for (alert, about, host) in &alerts { tr { td.error { (alert) } td { (about) } td { (host) } } }
            }
        }
        h2 { "Throughput" }
        (layout::throughput_chart(&minutes))
        h2 { "Queues" }
        (queue_table(&queues))
        h2 { "Live hosts" }
        (host_table(&hosts))
        p.live-status { "Refreshed every few seconds while this page is open." }
    })
}

/// A capped count: `100000+` above [`store::COUNT_CAP`].
fn count(n: i64) -> String {
    if n > store::COUNT_CAP {
        format!("{}+", store::COUNT_CAP)
    } else {
        n.to_string()
    }
}

/// One queue as the overview and the hosts page show it.
struct QueueRow {
    queue: String,
    sink: SinkKind,
    handler: Option<String>,
    groups: Vec<String>,
    /// Paused (`outbox queue pause`): since when, by whom, why; or why it could not be read.
    paused: Result<Option<store::QueuePause>, String>,
    backlog: Result<QueueBacklog, String>,
}

/// Every queue of the routes in force with what Redis holds for it (bounded by
/// [`REDIS_READ_LIMIT`]).
async fn queue_rows(console: &Console) -> Vec<QueueRow> {
    let Some(live) = &console.inner.live else {
        return Vec::new();
    };
    let routes = live.routes.load_full();
    let names = routes.queue_names();
    let paused = within_limit(store::paused_queues(console.pool())).await;
    let backlogs = match console.redis().await {
        Ok(mut conn) => {
            let keys = QueueKeys::for_redis_url(
                &console.inner.settings.redis_prefix,
                &console.inner.settings.redis_url,
            );
            within_limit(crate::queue::queue_backlogs_with_consumers(
                &mut conn, &keys, &routes, &names,
            ))
            .await
            .map_err(|e| format!("Redis: {e}"))
        }
        Err(e) => Err(e),
    };
    names
        .iter()
        .enumerate()
        .map(|(i, queue)| QueueRow {
            queue: queue.clone(),
            sink: routes.sink_of(queue),
            handler: routes.handlers.get(queue).cloned(),
            groups: routes
                .queue_groups
                .iter()
                .filter(|(_, members)| members.contains(queue))
                .map(|(g, _)| g.clone())
                .collect(),
            paused: match &paused {
                Ok(all) => Ok(all.iter().find(|p| &p.queue == queue).cloned()),
                Err(e) => Err(e.clone()),
            },
            backlog: match &backlogs {
                Ok(all) => all.get(i).cloned().ok_or_else(|| "not read".to_string()),
                Err(e) => Err(e.clone()),
            },
        })
        .collect()
}

fn queue_table(rows: &[QueueRow]) -> Markup {
    let number = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_else(|| "–".into());
    html! {
        @if rows.is_empty() {
            p { "No queue is named by the routes in force." }
        } @else {
            table #queues {
                tr { th { "queue" } th { "sink" } th { "handler" } th { "queue groups" } th { "state" } th.num { "length / waiting" } th.num { "pending (unacked)" } th.num { "consumer lag" } th.num { "dead letters" } th.num { "oldest unfinished" } th { "BullMQ active / delayed / completed / failed" } th { "broker published / confirmed / failed" } }
                @for row in rows {
                    tr {
                        td { (row.queue) } td { (row.sink.as_str()) }
                        td { (row.handler.as_deref().unwrap_or("–")) }
                        td { (if row.groups.is_empty() { "–".to_string() } else { row.groups.join(", ") }) }
                        @match &row.paused {
                            Ok(Some(p)) => td.paused { "paused by " (p.paused_by) " " (ago(crate::numeric::signed_figure((chrono::Utc::now() - p.paused_at).num_seconds().max(0)))) @if let Some(r) = &p.reason { ": " (r) } }
                            Ok(None) => td { "running" }
                            Err(e) => td.error { (e) }
                        }
                        @match &row.backlog {
                            Ok(b) => {
                                @let c = b.consumers;
                                td.num { (b.waiting) }
                                td.num { (number(c.and_then(|c| c.pending))) }
                                td.num { (number(c.and_then(|c| c.lag))) }
                                td.num { (number(c.map(|c| c.dead_letters))) }
                                td.num { (c.and_then(|c| c.oldest_entry_age_seconds).map(ago).unwrap_or_else(|| "–".into())) }
                                td { @if let Some(j) = b.bullmq { (j.active) " / " (j.delayed) " / " (j.completed) " / " (j.failed) } @else { "–" } }
                                td { @if let Some(h) = b.broker { (h.summary()) } @else { "–" } }
                            }
                            Err(e) => { td.error colspan="7" { (e) } }
                        }
                    }
                }
            }
        }
    }
}

fn host_table(hosts: &[store::HostRow]) -> Markup {
    html! {
        @if hosts.is_empty() {
            p { "No host has sent a heartbeat in the last " (LIVE_HOST_SECONDS) " s." }
        } @else {
            table #hosts {
                tr { th { "host" } th { "machine" } th { "queue group" } th { "version" } th { "started" } th { "last heartbeat" } th.num { "events done" } th.num { "entries enqueued" } }
                @for h in hosts {
                    tr {
                        td { (h.id) } td { (h.host_name) } td { (h.queue_group.as_deref().unwrap_or("all")) } td { (h.version) }
                        td { (time(&h.started_at)) } td { (ago(h.last_seen_seconds_ago)) " ago" }
                        td.num { (h.counters["done"].as_u64().unwrap_or(0)) }
                        td.num { (h.counters["enqueued"].as_u64().unwrap_or(0)) }
                    }
                }
            }
        }
    }
}

/// A time given in a search form: RFC 3339, or `YYYY-MM-DD HH:MM[:SS]` / `YYYY-MM-DDTHH:MM` in
/// UTC (what a `datetime-local` field sends), or a date.
fn parse_time(field: &str, text: &str) -> Result<DateTime<Utc>, ConsoleError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    Err(ConsoleError::BadRequest(format!(
        "{field}: {text:?} is not a time (use 2026-12-01T10:00 in UTC, or RFC 3339)"
    )))
}

fn parse_id(field: &str, text: &str) -> Result<i64, ConsoleError> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ConsoleError::BadRequest(format!("{field}: {text:?} is not an event id")))
}

/// The search a query string asks for.
fn search_of(params: &Params) -> Result<EventSearch, ConsoleError> {
    Ok(EventSearch {
        id: params.get("id").map(|v| parse_id("id", v)).transpose()?,
        type_prefix: params.get("type").map(str::to_string),
        tenant: params.get("tenant").map(str::to_string),
        status: params.get("status").map(str::to_string),
        since: params
            .get("since")
            .map(|v| parse_time("from", v))
            .transpose()?,
        until: params
            .get("until")
            .map(|v| parse_time("until", v))
            .transpose()?,
        dispatch_key: params.get("dispatch_key").map(str::to_string),
        before: params
            .get("before")
            .map(|v| parse_id("before", v))
            .transpose()?,
        before_at: params
            .get("before_at")
            .map(|v| parse_time("before_at", v))
            .transpose()?,
    })
}

/// The query string of the next page: the search's fields with the keyset replaced.
fn search_query(params: &Params, page: &store::EventPage) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params.fields() {
        if k != "before" && k != "before_at" && !v.trim().is_empty() {
            query.append_pair(k, v.trim());
        }
    }
    if let Some(before) = page.next_before {
        query.append_pair("before", &before.to_string());
    }
    if let Some(at) = page.next_before_at {
        query.append_pair(
            "before_at",
            &at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        );
    }
    query.finish()
}

/// `GET /console/events`: search by id, type prefix, tenant, status, time range, dispatch key;
/// newest first, one page at a time by keyset.
pub async fn events(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Page {
    let viewer = console.viewer(&headers).await?;
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let search = search_of(&params)?;
    let page = store::search_events(console.pool(), &search, PAGE_ROWS)
        .await
        .map_err(|e| match e {
            store::SearchError::Invalid(m) => ConsoleError::BadRequest(m),
            store::SearchError::Store(e) => e.into(),
        })?;
    let field = |name: &str| params.get(name).unwrap_or_default().to_string();
    let body = html! {
        form.search method="get" action="/console/events" {
            label { "id" input type="number" name="id" min="1" value=(field("id")); }
            label { "type prefix" input type="text" name="type" placeholder="mail." value=(field("type")); }
            label { "tenant" input type="text" name="tenant" value=(field("tenant")); }
            label { "status" select name="status" {
                option value="" { "any" }
                @for s in EVENT_STATUSES { option value=(s) selected[params.get("status") == Some(s)] { (s) } }
            } }
            label { "from (UTC)" input type="datetime-local" name="since" value=(field("since")); }
            label { "until (UTC)" input type="datetime-local" name="until" value=(field("until")); }
            label { "dispatch key" input type="text" name="dispatch_key" value=(field("dispatch_key")); }
            button.primary type="submit" { "Search" }
        }
        (event_table(&page.events))
        @if page.next_before.is_some() {
            p { a #next-page href=(format!("/console/events?{}", search_query(&params, &page))) { "Older events →" } }
        }
    };
    Ok(Html(
        layout::page(&viewer, "/console/events", "Events", body).into_string(),
    ))
}

fn event_table(events: &[store::EventSummary]) -> Markup {
    html! {
        @if events.is_empty() {
            p #no-events { "No event matches." }
        } @else {
            table #events {
                tr { th { "id" } th { "type" } th { "tenant" } th { "status" } th.num { "attempts" } th { "published" } th { "dispatch key" } th { "last error" } }
                @for e in events {
                    tr {
                        td { a href=(format!("/console/events/{}", e.id)) { (e.id) } }
                        td { (e.event_type) " v" (e.event_version) }
                        td { (e.tenant.as_deref().unwrap_or("")) }
                        td { (status_badge(&e.status)) }
                        td.num { (e.attempts) }
                        td { (time(&e.created_at)) }
                        td { (e.dispatch_key.as_deref().unwrap_or("")) }
                        td.error { (e.last_error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}

/// `GET /console/events/{id}`: the life of one event, as `outbox trace` shows it.
pub async fn event(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Page {
    let viewer = console.viewer(&headers).await?;
    let id = parse_id("event", &id)?;
    let body = event_body(&console, &viewer, id).await?;
    Ok(Html(
        layout::page(
            &viewer,
            "/console/events",
            &format!("Event {id}"),
            html! { div #event data-live=(format!("/console/live/events/{id}")) { (body) } },
        )
        .into_string(),
    ))
}

/// `GET /console/live/events/{id}`: the event's page body alone.
pub async fn event_live(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Page {
    let viewer = console.viewer(&headers).await?;
    let id = parse_id("event", &id)?;
    Ok(Html(
        html! { div { (event_body(&console, &viewer, id).await?) } }.into_string(),
    ))
}

async fn event_body(console: &Console, viewer: &Viewer, id: i64) -> Result<Markup, ConsoleError> {
    let payload = store::event_payload(console.pool(), id)
        .await?
        .ok_or_else(|| ConsoleError::NotFound(format!("no event {id}")))?;
    let payload = serde_json::from_str::<serde_json::Value>(&payload)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or(payload);
    let tracer = console.tracer().await.map_err(ConsoleError::Unavailable)?;
    let trace = tokio::time::timeout(REDIS_READ_LIMIT * 2, tracer.trace(id, TRACE_DEPTH))
        .await
        .map_err(|_| ConsoleError::Unavailable("the trace did not finish in time".into()))?
        .map_err(|e| ConsoleError::Unavailable(e.to_string()))?
        .ok_or_else(|| ConsoleError::NotFound(format!("no event {id}")))?;
    let repairable = matches!(trace.event.status.as_str(), "failed" | "cancelled");
    Ok(html! {
        @if repairable {
            form.actions method="post" action="/console/failed/preview" {
                input type="hidden" name="csrf" value=(viewer.csrf);
                input type="hidden" name="id" value=(id);
                button #requeue name="action" value="requeue" disabled[!viewer.is_admin()] title=[(!viewer.is_admin()).then_some("needs the admin role")] { "Requeue…" }
                @if trace.event.status == "failed" {
                    button.danger name="action" value="cancel" disabled[!viewer.is_admin()] { "Cancel…" }
                }
            }
        }
        (trace_markup(&trace))
        h2 { "Payload" }
        pre #payload { (payload) }
        h2 { "Headers" }
        pre #headers { (serde_json::to_string_pretty(&trace.event.headers).unwrap_or_default()) }
    })
}

fn trace_markup(trace: &EventTrace) -> Markup {
    let e = &trace.event;
    html! {
        table.event-facts {
            tr { th { "type" } td { (e.event_type) " v" (e.event_version) } th { "status" } td #status { (status_badge(&e.status)) } }
            tr { th { "tenant" } td { (e.tenant_id.as_deref().unwrap_or("–")) } th { "attempts" } td { (e.attempts) } }
            tr { th { "dispatch key" } td { (e.dispatch_key.as_deref().unwrap_or("–")) } th { "ordering key" } td { (e.ordering_key.as_deref().unwrap_or("–")) } }
            tr { th { "published" } td { (time(&e.created_at)) } th { "next claim / lease end" } td { (time(&e.available_at)) } }
            tr { th { "claimed by" } td { (e.claimed_by.as_deref().unwrap_or("–")) } th { "finished" } td { (e.processed_at.as_ref().map(time).unwrap_or_else(|| "–".into())) } }
            @if let Some(error) = &e.last_error { tr { th { "last error" } td.error colspan="3" { (error) } } }
        }
        h2 { "Destinations" }
        @if let Some(note) = &trace.routing_note { p.warning { (note) } }
        @if trace.destinations.is_empty() { p { "None." } } @else {
            table #destinations {
                tr { th { "queue" } th { "hand-off" } th { "entry / job id" } th { "enqueued" } th.num { "attempts" } th { "last error" } }
                @for d in &trace.destinations {
                    tr { td { (d.queue) } td { (d.state) } td { (d.stream_id.as_deref().unwrap_or("–")) }
                         td { (d.enqueued_at.as_ref().map(time).unwrap_or_default()) }
                         td.num { (d.attempts.map(|a| a.to_string()).unwrap_or_default()) }
                         td.error { (d.last_error.as_deref().unwrap_or("")) } }
                }
            }
        }
        h2 { "History" }
        @if trace.history.is_empty() { p { "No failed attempt, requeue or cancel." } } @else {
            table #history {
                tr { th { "at" } th { "what" } th { "by" } th { "from → to" } th.num { "attempts" } th { "error" } }
                @for h in &trace.history {
                    tr { td { (time(&h.at)) } td { (h.action) } td { (h.actor) } td { (h.from_status) " → " (h.to_status) } td.num { (h.attempts) } td.error { (h.last_error.as_deref().unwrap_or("")) } }
                }
            }
        }
        h2 { "Handlers" }
        @if trace.receipts.is_empty() { p { "No handler receipt." } } @else {
            table #receipts {
                tr { th { "handler" } th { "queue" } th { "result" } th.num { "attempts" } th.num { "ms" } th { "published" } th { "error" } }
                @for r in &trace.receipts {
                    tr { td { (r.handler) } td { (r.queue) } td { (status_badge(&r.result)) } td.num { (r.attempts) } td.num { (format!("{:.1}", r.duration_ms)) }
                         td { @for child in &r.published_ids { a href=(format!("/console/events/{child}")) { (child) } " " } }
                         td.error { (r.error.as_deref().unwrap_or("")) } }
                }
            }
        }
        @if !trace.dead_letters.is_empty() {
            h2 { "Dead letters" }
            table #event-dead-letters {
                tr { th { "queue" } th { "entry" } th.num { "attempts" } th { "dead at" } th { "error" } }
                @for d in &trace.dead_letters { tr { td { (d.queue) } td { (d.dead_letter_id) } td.num { (d.attempts) } td { (d.dead_at) } td.error { (d.error) } } }
            }
        }
        @if !trace.children.is_empty() {
            h2 { "Events its handlers published" }
            (children_tree(&trace.children, trace.children_cut))
        }
    }
}

fn children_tree(children: &[EventTrace], cut: usize) -> Markup {
    html! {
        ul.tree {
            @for child in children {
                li {
                    a href=(format!("/console/events/{}", child.event.id)) { "event " (child.event.id) }
                    " " (child.event.event_type) " " (status_badge(&child.event.status))
                    @if !child.children.is_empty() { (children_tree(&child.children, child.children_cut)) }
                }
            }
            @if cut > 0 { li { (cut) " more not shown" } }
        }
    }
}

/// `GET /console/plugins`: the plugins serving on this host, its reload history, the routes in
/// force and a "which queues for this type?" box.
pub async fn plugins(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Page {
    let viewer = console.viewer(&headers).await?;
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let Some(live) = &console.inner.live else {
        return Ok(Html(
            layout::page(
                &viewer,
                "/console/plugins",
                "Plugins & routes",
                html! { p { "This host runs without a routes file." } },
            )
            .into_string(),
        ));
    };
    let routes = live.routes.load_full();
    let plugins = live.registry.list();
    let history = live.reload_history();
    // The router may be a plugin: explain_route runs it on a blocking thread, never here.
    let asked = match params.get("type") {
        Some(t) => Some(explain_route(live.router.current(), &routes, t).await),
        None => None,
    };
    let body = html! {
        p.hint { "Plugins and reloads of host " (console.inner.worker_id) "." }
        @if let Some(waiting) = live.pending_reload() { p.warning #pending-reload { (waiting) } }
        table #plugins {
            tr { th { "plugin" } th { "world" } th { "hash" } th { "loaded" } th.num { "calls" } th.num { "errors" } th.num { "time used (ms)" } th { "file" } }
            @for p in &plugins {
                tr { td { (p.name) } td { (p.world) } td { code { (p.hash) } } td { (p.loaded_at) } td.num { (p.calls) } td.num { (p.errors) } td.num { (p.busy_ms) } td { (p.file) } }
            }
        }
        h2 { "Reload history" }
        @if history.is_empty() { p #reloads { "No reload since this host started." } } @else {
            table #reloads {
                tr { th { "at" } th { "what" } th { "result" } th { "detail" } }
                @for r in &history {
                    tr { td { (time(&r.at)) } td { (r.what) } td { (status_badge(r.result)) } td class=[(r.result == "rejected").then_some("error")] { (r.detail) } }
                }
            }
        }
        h2 { "Routes" }
        p { "Router: " code { (routes.router.plugin) } @for (prefix, plugin) in &routes.router.overrides { ", override " code { (prefix) } " → " code { (plugin) } } }
        table #routes {
            tr { th { "type prefix" } th { "queues" } th { "sinks" } th { "handlers" } }
            @for rule in routes.route_table().rules() {
                tr { td { code { (rule.prefix) } } td { (rule.queues.join(", ")) }
                     td { (rule.queues.iter().map(|q| routes.sink_of(q).as_str()).collect::<Vec<_>>().join(", ")) }
                     td { (rule.queues.iter().filter_map(|q| routes.handlers.get(q).map(|h| format!("{q}: {h}"))).collect::<Vec<_>>().join(", ")) } }
            }
        }
        form.search method="get" action="/console/plugins" {
            label { "Which queues for this type?" input #which-type type="text" name="type" placeholder="mail.welcome" value=(params.get("type").unwrap_or_default()); }
            button type="submit" { "Explain" }
        }
        @if let Some(answer) = asked { pre #which-answer { (answer.to_string()) } }
    };
    Ok(Html(
        layout::page(&viewer, "/console/plugins", "Plugins & routes", body).into_string(),
    ))
}

/// `GET /console/workers`: hosts, queue groups, receivers and what each queue holds.
pub async fn workers(State(console): State<Console>, headers: HeaderMap) -> Page {
    let viewer = console.viewer(&headers).await?;
    let hosts = store::hosts_seen(console.pool(), 24 * 3600).await?;
    let (live, stale): (Vec<_>, Vec<_>) = hosts
        .into_iter()
        .partition(|h| h.last_seen_seconds_ago <= crate::numeric::signed_figure(LIVE_HOST_SECONDS));
    let queues = queue_rows(&console).await;
    let groups = console
        .inner
        .live
        .as_ref()
        .map(|l| l.routes.load().queue_groups.clone())
        .unwrap_or_default();
    let body = html! {
        h2 { "Live hosts" }
        (host_table(&live))
        @if !stale.is_empty() {
            h2 { "Hosts whose heartbeat stopped (last 24 h)" }
            (host_table(&stale))
        }
        h2 { "Queue groups" }
        @if groups.is_empty() { p { "No queue group: every host runs every handler-bound queue." } } @else {
            table #groups {
                tr { th { "group" } th { "queues" } th { "live hosts running it" } }
                @for (group, members) in &groups {
                    tr { td { (group) } td { (members.join(", ")) }
                         td { (live.iter().filter(|h| h.queue_group.as_deref() == Some(group.as_str())).map(|h| h.id.as_str()).collect::<Vec<_>>().join(", ")) } }
                }
            }
        }
        h2 { "Queues and receivers" }
        (queue_table(&queues))
    };
    Ok(Html(
        layout::page(&viewer, "/console/workers", "Hosts & queues", body).into_string(),
    ))
}
