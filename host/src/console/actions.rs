//! Console actions: failed events (requeue, cancel) and dead letters (replay, drop).
//!
//! Owns the console side of a repair, with the CLI's guardrails: nothing changes without a
//! preview first (a dry run: the rows or entries it would change, what it leaves alone and
//! why, the warnings), then an explicit confirmation that carries the same choice; a repair
//! without any selection or filter is refused; both steps need an admin and are written to the
//! audit trail (the preview as a dry run). The rows are chosen and changed by
//! [`store::plan_repair`] and [`store::apply_repair`], the dead letters by
//! [`crate::receive::DeadLetters`]: the same code the CLI runs.

use axum::extract::{RawForm, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Html;
use maud::{html, Markup};

use super::layout::{self, status_badge, time};
use super::{within_limit, Console, ConsoleError, Params, Viewer};
use crate::receive::DeadLetter;
use crate::store::{self, RepairAction, RepairPlan, RowFilter};

/// Rows one console repair changes at most (the preview says how many more match).
const REPAIR_LIMIT: u64 = 10_000;
/// Rows the failed page lists.
const FAILED_ROWS: i64 = 200;
/// Dead letters a page lists.
const DEAD_LETTERS_SHOWN: usize = 500;

type Page = Result<Html<String>, ConsoleError>;

/// The hidden fields that carry a form's choice into the next step (its CSRF token apart).
fn carried(params: &Params) -> Markup {
    html! {
        @for (k, v) in params.fields() {
            @if k != "csrf" && k != "action" {
                input type="hidden" name=(k) value=(v);
            }
        }
    }
}

fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}

/// `GET /console/failed`: failed (or cancelled) events, filterable, each selectable.
pub async fn failed(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Page {
    let viewer = console.viewer(&headers).await?;
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let status = match params.get("status") {
        Some("cancelled") => "cancelled",
        _ => "failed",
    };
    let search = store::EventSearch {
        status: Some(status.into()),
        type_prefix: params.get("type").map(str::to_string),
        tenant: params.get("tenant").map(str::to_string),
        ..Default::default()
    };
    let page = store::search_events(console.pool(), &search, FAILED_ROWS)
        .await
        .map_err(|e| match e {
            store::SearchError::Invalid(m) => ConsoleError::BadRequest(m),
            store::SearchError::Store(e) => e.into(),
        })?;
    let field = |name: &str| params.get(name).unwrap_or_default().to_string();
    let admin = viewer.is_admin();
    let body = html! {
        form.search method="get" action="/console/failed" {
            label { "status" select name="status" {
                option value="failed" selected[status == "failed"] { "failed" }
                option value="cancelled" selected[status == "cancelled"] { "cancelled" }
            } }
            label { "type prefix" input type="text" name="type" value=(field("type")); }
            label { "tenant" input type="text" name="tenant" value=(field("tenant")); }
            button type="submit" { "Filter" }
        }
        @if !admin { p.hint #viewer-note { "Your role is viewer: you can look, an admin can repair." } }
        form #failed-form method="post" action="/console/failed/preview" {
            (csrf(&viewer))
            input type="hidden" name="status" value=(status);
            @if let Some(t) = params.get("type") { input type="hidden" name="type" value=(t); }
            @if let Some(t) = params.get("tenant") { input type="hidden" name="tenant" value=(t); }
            div.actions {
                button #requeue-selected name="action" value="requeue" disabled[!admin] { "Requeue selected…" }
                @if status == "failed" { button.danger #cancel-selected name="action" value="cancel" disabled[!admin] { "Cancel selected…" } }
                label { input type="checkbox" name="scope" value="filter"; " every " (status) " event matching the filter (not only the selected ones)" }
            }
            @if page.events.is_empty() {
                p #no-failed { "No " (status) " event matches." }
            } @else {
                table #failed {
                    tr { th { input type="checkbox" data-select-all="id" aria-label="select all"; } th { "id" } th { "type" } th { "tenant" } th { "status" } th.num { "attempts" } th { "published" } th { "last error" } }
                    @for e in &page.events {
                        tr {
                            td { input type="checkbox" name="id" value=(e.id) aria-label=(format!("select event {}", e.id)); }
                            td { a href=(format!("/console/events/{}", e.id)) { (e.id) } }
                            td { (e.event_type) } td { (e.tenant.as_deref().unwrap_or("")) }
                            td { (status_badge(&e.status)) } td.num { (e.attempts) }
                            td { (time(&e.created_at)) } td.error { (e.last_error.as_deref().unwrap_or("")) }
                        }
                    }
                }
                @if page.next_before.is_some() { p.hint { "Showing the newest " (FAILED_ROWS) "; a filter action covers every match." } }
            }
        }
    };
    Ok(Html(
        layout::page(&viewer, "/console/failed", "Failed events", body).into_string(),
    ))
}

/// The action and the rows a posted form asks for.
fn repair_of(form: &Params) -> Result<(RepairAction, RowFilter), ConsoleError> {
    let action = match form.get("action") {
        Some("requeue") => RepairAction::Requeue,
        Some("cancel") => RepairAction::Cancel,
        other => {
            return Err(ConsoleError::BadRequest(format!(
                "unknown action {:?}: requeue or cancel",
                other.unwrap_or("")
            )))
        }
    };
    let mut filter = RowFilter::default();
    if form.get("scope") == Some("filter") {
        filter.statuses = form
            .get("status")
            .map(|s| vec![s.to_string()])
            .unwrap_or_default();
        filter.type_prefix = form.get("type").map(str::to_string);
        filter.tenant = form.get("tenant").map(str::to_string);
    } else {
        for id in form.all("id") {
            filter.ids.push(
                id.parse()
                    .map_err(|_| ConsoleError::BadRequest(format!("{id:?} is not an event id")))?,
            );
        }
        if filter.ids.is_empty() {
            return Err(ConsoleError::BadRequest(
                "select the events first, or tick \"every event matching the filter\" (nothing was changed)".into(),
            ));
        }
    }
    Ok((action, filter))
}

/// A posted repair, checked and planned: the same form plans the same rows at preview and
/// at confirmation.
struct Planned {
    viewer: Viewer,
    action: RepairAction,
    plan: RepairPlan,
    /// The filter and limit, as the audit trail and the history rows record them.
    arguments: serde_json::Value,
}

/// Read the action and rows `form` asks for, check its sender may repair, and plan it.
async fn planned(
    console: &Console,
    headers: &HeaderMap,
    form: &Params,
) -> Result<Planned, ConsoleError> {
    let (action, filter) = repair_of(form)?;
    let viewer = console.admin_form(headers, form, action.as_str()).await?;
    let plan = store::plan_repair(
        console.host_pool(),
        action,
        &filter,
        Some(REPAIR_LIMIT),
        console.inner.settings.idempotency_ttl,
    )
    .await
    .map_err(|e| match e {
        store::RepairError::Refused(m) => ConsoleError::BadRequest(m),
        store::RepairError::Store(e) => e.into(),
    })?;
    let arguments =
        serde_json::json!({ "filter": &filter, "limit": REPAIR_LIMIT, "via": "console" });
    Ok(Planned {
        viewer,
        action,
        plan,
        arguments,
    })
}

/// `POST /console/failed/preview`: what a requeue or cancel would change (a dry run, audited).
pub async fn failed_preview(
    State(console): State<Console>,
    headers: HeaderMap,
    RawForm(body): RawForm,
) -> Page {
    let form = Params::parse(&body);
    let Planned {
        viewer,
        action,
        plan,
        arguments,
    } = planned(&console, &headers, &form).await?;
    store::record_audit(
        console.host_pool(),
        &viewer.operator,
        action.as_str(),
        &arguments,
        true,
        plan.ids.len() as u64,
    )
    .await?;
    let verb = action.as_str();
    let shown: Vec<String> = plan.ids.iter().take(50).map(i64::to_string).collect();
    let body = html! {
        p #preview-summary { "Dry run: " strong { (plan.ids.len()) } " events would change to " (action.to_status()) "." }
        @if !shown.is_empty() { p { "ids " (shown.join(", ")) @if plan.ids.len() > shown.len() { " and " (plan.ids.len() - shown.len()) " more" } } }
        ul {
            @for (status, count) in &plan.skipped { li { "left alone: " (count) " " (status) " rows: " (plan.skipped_why.get(status).map(String::as_str).unwrap_or("")) } }
            @if !plan.missing_ids.is_empty() { li { "no such event: " (plan.missing_ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")) } }
            @if plan.beyond_limit > 0 { li.warning { (plan.beyond_limit) " more rows match beyond the limit of " (REPAIR_LIMIT) "; run it again for them" } }
            @for w in &plan.warnings { li.warning { "warning: " (w) } }
        }
        @if plan.ids.is_empty() {
            p { "Nothing to " (verb) ". " a href="/console/failed" { "Back" } }
        } @else {
            form method="post" action="/console/failed/apply" {
                (csrf(&viewer))
                (carried(&form))
                button.primary #confirm name="action" value=(verb) { "Yes, " (verb) " " (plan.ids.len()) " events" }
                " " a href="/console/failed" { "Back" }
            }
        }
    };
    Ok(Html(
        layout::page(
            &viewer,
            "/console/failed",
            &format!("{verb}: preview"),
            body,
        )
        .into_string(),
    ))
}

/// `POST /console/failed/apply`: carry out a previewed requeue or cancel.
pub async fn failed_apply(
    State(console): State<Console>,
    headers: HeaderMap,
    RawForm(body): RawForm,
) -> Page {
    let form = Params::parse(&body);
    let Planned {
        viewer,
        action,
        plan,
        arguments,
    } = planned(&console, &headers, &form).await?;
    let report = store::apply_repair(
        console.host_pool(),
        &plan,
        &viewer.operator.name,
        &arguments,
        |_| {},
    )
    .await?;
    // `apply_repair` wrote the audit row in the statements that changed the rows; a plan with
    // nothing to change is recorded here.
    if plan.ids.is_empty() {
        store::record_audit(
            console.host_pool(),
            &viewer.operator,
            action.as_str(),
            &arguments,
            false,
            0,
        )
        .await?;
    }
    tracing::info!(operator = %viewer.operator.name, action = action.as_str(), changed = report.changed, "console repair");
    let body = html! {
        p.ok #result { (action.as_str()) ": " (report.changed) " events changed to " (action.to_status()) "."
            @if report.changed_meanwhile > 0 { " " (report.changed_meanwhile) " left alone: their status changed since the preview." } }
        @if plan.ids.len() <= 20 {
            ul { @for id in &plan.ids { li { a href=(format!("/console/events/{id}")) { "event " (id) } } } }
        }
        p { a href="/console/failed" { "Back to failed events" } }
    };
    Ok(Html(
        layout::page(&viewer, "/console/failed", action.as_str(), body).into_string(),
    ))
}

/// The handler-bound queues of the routes in force (the only queues with dead letters).
fn handler_bound_queues(console: &Console) -> Vec<String> {
    console
        .inner
        .live
        .as_ref()
        .map(|l| l.routes.load().handlers.keys().cloned().collect())
        .unwrap_or_default()
}

/// `queue` as a dead-letter page or form names it, checked before any Redis call: it must meet
/// the queue naming rule and be a handler-bound queue of the routes in force; otherwise a 404
/// saying why.
fn known_dead_letter_queue(console: &Console, queue: &str) -> Result<(), ConsoleError> {
    let shown = crate::naming::clip(queue, 80);
    if let Err(rule) = crate::naming::validate_queue_name(queue) {
        return Err(ConsoleError::NotFound(format!(
            "no queue {shown:?}: {rule} (nothing was read or changed)"
        )));
    }
    if !handler_bound_queues(console).iter().any(|q| q == queue) {
        return Err(ConsoleError::NotFound(format!(
            "no queue {shown:?} among the handler-bound queues of the routes in force, so it has no dead letters (nothing was read or changed)"
        )));
    }
    Ok(())
}

/// The queues a dead-letter page lists: `asked` once checked, else every handler-bound one.
fn dead_letter_queues(console: &Console, asked: Option<&str>) -> Result<Vec<String>, ConsoleError> {
    match asked {
        Some(queue) => {
            known_dead_letter_queue(console, queue)?;
            Ok(vec![queue.to_string()])
        }
        None => Ok(handler_bound_queues(console)),
    }
}

/// The newest [`DEAD_LETTERS_SHOWN`] dead letters of each of `queues`.
async fn list_dead_letters(
    console: &Console,
    queues: &[String],
) -> Result<Vec<DeadLetter>, ConsoleError> {
    let store = console
        .dead_letter_store()
        .await
        .map_err(ConsoleError::Unavailable)?;
    within_limit(store.list_newest(queues, DEAD_LETTERS_SHOWN))
        .await
        .map_err(ConsoleError::Unavailable)
}

fn letter_key(letter: &DeadLetter) -> String {
    format!("{}|{}", letter.queue, letter.dead_letter_id)
}

/// `GET /console/dead-letters`: every dead letter of the handler-bound queues.
pub async fn dead_letters(
    State(console): State<Console>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Page {
    let viewer = console.viewer(&headers).await?;
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let queues = dead_letter_queues(&console, params.get("queue"))?;
    let letters = list_dead_letters(&console, &queues).await?;
    let admin = viewer.is_admin();
    let body = html! {
        form.search method="get" action="/console/dead-letters" {
            label { "queue" select name="queue" {
                option value="" { "every handler-bound queue" }
                @for q in handler_bound_queues(&console) { option value=(q) selected[params.get("queue") == Some(q.as_str())] { (q) } }
            } }
            button type="submit" { "Filter" }
        }
        @if !admin { p.hint { "Your role is viewer: you can look, an admin can replay or drop." } }
        form method="post" action="/console/dead-letters/preview" {
            (csrf(&viewer))
            div.actions {
                button #replay-selected name="action" value="replay" disabled[!admin] { "Replay selected…" }
                button.danger #drop-selected name="action" value="drop" disabled[!admin] { "Drop selected…" }
            }
            @if letters.is_empty() { p #no-dead-letters { "No dead letters in " (queues.join(", ")) "." } } @else {
                table #dead-letters {
                    tr { th { input type="checkbox" data-select-all="letter" aria-label="select all"; } th { "queue" } th { "entry" } th { "event" } th { "type" } th.num { "attempts" } th { "dead at" } th { "error" } }
                    @for l in &letters {
                        tr {
                            td { input type="checkbox" name="letter" value=(letter_key(l)) aria-label=(format!("select {}", l.dead_letter_id)); }
                            td { (l.queue) } td { (l.dead_letter_id) }
                            td { @if let Some(id) = l.event_id { a href=(format!("/console/events/{id}")) { (id) } } }
                            td { (l.event_type) } td.num { (l.attempts) } td { (l.dead_at) } td.error { (l.error) }
                        }
                    }
                }
                @if letters.len() >= DEAD_LETTERS_SHOWN { p.hint { "Showing the newest " (DEAD_LETTERS_SHOWN) " of each queue; replay or drop them to see older ones." } }
            }
        }
    };
    Ok(Html(
        layout::page(&viewer, "/console/dead-letters", "Dead letters", body).into_string(),
    ))
}

/// The action and the dead letters a posted form picks (re-read from Redis: an entry replayed
/// or dropped meanwhile is no longer there and is left out).
async fn letters_of(
    console: &Console,
    form: &Params,
) -> Result<(&'static str, Vec<DeadLetter>, Vec<String>), ConsoleError> {
    let action = match form.get("action") {
        Some("replay") => "dead-letter replay",
        Some("drop") => "dead-letter drop",
        other => {
            return Err(ConsoleError::BadRequest(format!(
                "unknown action {:?}: replay or drop",
                other.unwrap_or("")
            )))
        }
    };
    let wanted = form.all("letter");
    if wanted.is_empty() {
        return Err(ConsoleError::BadRequest(
            "select the dead letters first (nothing was changed)".into(),
        ));
    }
    if wanted.len() > DEAD_LETTERS_SHOWN {
        return Err(ConsoleError::BadRequest(format!(
            "at most {DEAD_LETTERS_SHOWN} dead letters at a time (nothing was changed)"
        )));
    }
    let mut picked = Vec::with_capacity(wanted.len());
    for key in wanted {
        let Some((queue, id)) = key.rsplit_once('|') else {
            return Err(ConsoleError::BadRequest(format!(
                "{key:?} names no dead letter (nothing was changed)"
            )));
        };
        known_dead_letter_queue(console, queue)?;
        picked.push((key, queue, id));
    }
    let store = console
        .dead_letter_store()
        .await
        .map_err(ConsoleError::Unavailable)?;
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (key, queue, id) in picked {
        let letter = within_limit(store.find(queue, id))
            .await
            .map_err(ConsoleError::Unavailable)?;
        match letter {
            Some(letter) => found.push(letter),
            None => missing.push(key.to_string()),
        }
    }
    Ok((action, found, missing))
}

/// `POST /console/dead-letters/preview`: what a replay or drop would change (audited as a dry
/// run).
pub async fn dead_letters_preview(
    State(console): State<Console>,
    headers: HeaderMap,
    RawForm(body): RawForm,
) -> Page {
    let form = Params::parse(&body);
    let viewer = console
        .admin_form(&headers, &form, "dead-letter replay or drop")
        .await?;
    let (command, letters, missing) = letters_of(&console, &form).await?;
    let arguments = serde_json::json!({ "letters": form.all("letter"), "via": "console" });
    store::record_audit(
        console.host_pool(),
        &viewer.operator,
        command,
        &arguments,
        true,
        letters.len() as u64,
    )
    .await?;
    let verb = form.get("action").unwrap_or_default();
    let body = html! {
        p #preview-summary { "Dry run: " strong { (letters.len()) } " dead letters would be " (if verb == "replay" { "replayed to their queues" } else { "dropped for good" }) "." }
        ul {
            @for l in &letters {
                li { (l.queue) " " (l.dead_letter_id) " — " (l.event_type) " (event " (l.event_id.map(|i| i.to_string()).unwrap_or_default()) ")"
                    @if verb == "replay" && l.attempts > 1 { span.warning { " — already ran " (l.attempts) " times: make sure its handler is fixed" } } }
            }
            @for m in &missing { li.warning { (m) ": no longer a dead letter (replayed or dropped meanwhile)" } }
        }
        @if letters.is_empty() { p { "Nothing to do. " a href="/console/dead-letters" { "Back" } } } @else {
            form method="post" action="/console/dead-letters/apply" {
                (csrf(&viewer))
                @for l in &letters { input type="hidden" name="letter" value=(letter_key(l)); }
                button.primary #confirm name="action" value=(verb) { "Yes, " (verb) " " (letters.len()) " dead letters" }
                " " a href="/console/dead-letters" { "Back" }
            }
        }
    };
    Ok(Html(
        layout::page(
            &viewer,
            "/console/dead-letters",
            &format!("{command}: preview"),
            body,
        )
        .into_string(),
    ))
}

/// `POST /console/dead-letters/apply`: carry out a previewed replay or drop.
pub async fn dead_letters_apply(
    State(console): State<Console>,
    headers: HeaderMap,
    RawForm(body): RawForm,
) -> Page {
    let form = Params::parse(&body);
    let viewer = console
        .admin_form(&headers, &form, "dead-letter replay or drop")
        .await?;
    let (command, letters, missing) = letters_of(&console, &form).await?;
    let store = console
        .dead_letter_store()
        .await
        .map_err(ConsoleError::Unavailable)?;
    let mut done: Vec<String> = Vec::new();
    let mut failed: Option<String> = None;
    for letter in &letters {
        let result = if command == "dead-letter replay" {
            store.replay(letter).await.map(|id| {
                format!(
                    "{} replayed to {} as {id}",
                    letter.dead_letter_id, letter.queue
                )
            })
        } else {
            store
                .drop_letter(letter)
                .await
                .map(|()| format!("{} dropped from {}", letter.dead_letter_id, letter.queue))
        };
        match result {
            Ok(line) => done.push(line),
            Err(e) => {
                failed = Some(format!("{}: {e}", letter.dead_letter_id));
                break;
            }
        }
    }
    let arguments = serde_json::json!({ "letters": form.all("letter"), "via": "console" });
    store::record_audit(
        console.host_pool(),
        &viewer.operator,
        command,
        &arguments,
        false,
        done.len() as u64,
    )
    .await?;
    tracing::info!(operator = %viewer.operator.name, command, changed = done.len(), "console dead-letter repair");
    let body = html! {
        p.ok #result { (command) ": " (done.len()) " done." }
        ul { @for line in &done { li { (line) } } @for m in &missing { li.warning { (m) ": no longer a dead letter" } } }
        @if let Some(e) = failed { p.error { "stopped at " (e) "; the rest were left alone." } }
        p { a href="/console/dead-letters" { "Back to dead letters" } }
    };
    Ok(Html(
        layout::page(&viewer, "/console/dead-letters", command, body).into_string(),
    ))
}
