//! Console layout: the frame every page shares (navigation, who is signed in, sign-out), the
//! sign-in and error pages, the chart, and the stylesheet and script the host serves.
//!
//! Owns only presentation: every value goes through the template, which escapes it; nothing
//! here reads the database or Redis.

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use super::Viewer;
use crate::numeric::{len_figure, signed_figure};
use crate::store::MinuteCounts;

const STYLESHEET: &str = include_str!("assets/console.css");
const SCRIPT: &str = include_str!("assets/console.js");

/// The pages of the navigation bar: (path, title).
const NAV: [(&str, &str); 6] = [
    ("/console", "Overview"),
    ("/console/events", "Events"),
    ("/console/failed", "Failed"),
    ("/console/dead-letters", "Dead letters"),
    ("/console/plugins", "Plugins & routes"),
    ("/console/workers", "Hosts & queues"),
];

/// A whole page: `title`, the navigation with `active` marked, and `body`.
pub fn page(viewer: &Viewer, active: &str, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · outbox" }
                link rel="stylesheet" href="/console/static/console.css";
                link rel="icon" href="data:,";
                script src="/console/static/console.js" defer {}
            }
            body {
                header.top {
                    span.brand { "outbox" }
                    nav {
                        @for (path, name) in NAV {
                            a href=(path) class=[(path == active).then_some("active")] { (name) }
                        }
                    }
                    span.who {
                        (viewer.operator.name) " (" (viewer.operator.role.as_str()) ")"
                        form.inline method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(viewer.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The sign-in page, with the reason of a refused token.
pub fn login_page(refused: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Sign in · outbox" }
                link rel="stylesheet" href="/console/static/console.css";
                link rel="icon" href="data:,";
            }
            body {
                main.narrow {
                    h1 { "outbox console" }
                    @if let Some(reason) = refused {
                        p.error id="login-error" { (reason) }
                    }
                    form method="post" action="/console/login" {
                        label for="token" { "Operator token" }
                        input #token type="password" name="token" autocomplete="off" required;
                        button type="submit" { "Sign in" }
                    }
                    p.hint { "A token is printed once by " code { "outbox operator add NAME --role viewer|admin" } "." }
                }
            }
        }
    }
}

/// A page saying what went wrong.
pub fn error_page(status: StatusCode, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (status.as_u16()) " · outbox" }
                link rel="stylesheet" href="/console/static/console.css";
                link rel="icon" href="data:,";
            }
            body {
                main.narrow {
                    h1 { (status.canonical_reason().unwrap_or("Error")) }
                    p.error id="error" { (message) }
                    p { a href="/console" { "Back to the overview" } }
                }
            }
        }
    }
}

/// `GET /console/static/console.css`.
pub async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        STYLESHEET,
    )
}

/// `GET /console/static/console.js`.
pub async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        SCRIPT,
    )
}

/// A time as the console shows it (UTC, to the second).
pub fn time(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A duration in seconds, short (`42 s`, `3 min`, `5 h`, `2 d`).
pub fn ago(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.0} h", s / 3600.0)
    } else {
        format!("{:.0} d", s / 86400.0)
    }
}

/// The status as a labelled badge.
pub fn status_badge(status: &str) -> Markup {
    html! { span class=(format!("badge {status}")) { (status) } }
}

/// The last hour as bars (handed off per minute) with failed attempts in red, and a caption
/// with the totals and the failure rate.
pub fn throughput_chart(minutes: &[MinuteCounts]) -> Markup {
    const W: f64 = 720.0;
    const H: f64 = 140.0;
    let max = minutes
        .iter()
        .map(|m| m.done.max(m.published).max(m.failed_attempts))
        .max()
        .unwrap_or(0)
        .max(1);
    let bar = W / len_figure(minutes.len().max(1));
    let height = |n: i64| {
        (signed_figure(n) / signed_figure(max) * (H - 10.0)).max(if n > 0 { 1.0 } else { 0.0 })
    };
    let done: i64 = minutes.iter().map(|m| m.done).sum();
    let published: i64 = minutes.iter().map(|m| m.published).sum();
    let failed: i64 = minutes.iter().map(|m| m.failed_attempts).sum();
    let rate = if done + failed > 0 {
        100.0 * signed_figure(failed) / signed_figure(done + failed)
    } else {
        0.0
    };
    html! {
        figure.chart {
            svg #throughput viewBox=(format!("0 0 {W} {H}")) preserveAspectRatio="none" role="img" aria-label="events per minute, last hour" {
                @for (i, m) in minutes.iter().enumerate() {
                    @let x = len_figure(i) * bar;
                    rect class="done" x=(format!("{x:.1}")) y=(format!("{:.1}", H - height(m.done))) width=(format!("{:.1}", bar * 0.6)) height=(format!("{:.1}", height(m.done))) {
                        title { (m.minute.format("%H:%M")) ": " (m.done) " handed off, " (m.published) " published, " (m.failed_attempts) " failed attempts" }
                    }
                    rect class="failed" x=(format!("{:.1}", x + bar * 0.6)) y=(format!("{:.1}", H - height(m.failed_attempts))) width=(format!("{:.1}", bar * 0.3)) height=(format!("{:.1}", height(m.failed_attempts))) {}
                }
                line x1="0" y1=(H) x2=(W) y2=(H) class="axis" {}
            }
            figcaption {
                "Last hour: " strong #hour-done { (done) } " handed off, "
                (published) " published, "
                strong #hour-failed { (failed) } " failed attempts ("
                span #failure-rate { (format!("{rate:.1}")) "%" } " of attempts); busiest minute " (max) "."
            }
        }
    }
}
