//! Console sessions: signing in with an operator token, the session cookie, and the checks
//! every request passes (session, role, CSRF token, origin).
//!
//! Owns the sessions of one host, in memory, at most [`SESSIONS_MAX`], each ending after
//! [`SESSION_IDLE`] without a request. The cookie (`HttpOnly`, `SameSite=Strict`, path
//! `/console`, and `Secure` when `OUTBOX_CONSOLE_PUBLIC_URL` is `https://`) carries a random
//! session id; only its SHA-256 is kept, and the operator's token is
//! never kept at all: the operator row is checked again at every request, so a revoked
//! operator is out at its next click. Every form carries the session's CSRF token, and a form
//! posted from another origin is refused. A sign-in attempt over the limit of its client address
//! or of all of them ([`super::sign_in_limit`]) is answered 429 before anything is read.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{RawForm, State};
use axum::http::{header, Extensions, HeaderMap};
use axum::response::{Html, IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};

use super::{layout, Console, ConsoleError, Params, Viewer};
use crate::store::{self, Operator, Role};

/// The session cookie's name.
pub const COOKIE: &str = "outbox_console";
/// Sessions kept at most (the oldest goes first when a new one needs room).
pub const SESSIONS_MAX: usize = 1000;
/// A session ends after this long without a request.
pub const SESSION_IDLE: Duration = Duration::from_secs(8 * 3600);
/// A failed sign-in answers after this long (tokens are 256 random bits; this only keeps a
/// guessing script slow and the log quiet).
const FAILED_SIGN_IN_DELAY: Duration = Duration::from_millis(300);

#[derive(Debug, Clone)]
struct Session {
    operator: String,
    csrf: String,
    last_seen: Instant,
}

/// The sessions of one host's console.
#[derive(Debug, Default)]
pub struct Sessions {
    by_hash: Mutex<HashMap<String, Session>>,
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

/// Equal in constant time (the CSRF token comparison).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Sessions {
    /// Start a session for `operator`; returns its id (for the cookie).
    fn start(&self, operator: &str) -> String {
        let id = random_hex();
        let now = Instant::now();
        if let Ok(mut sessions) = self.by_hash.lock() {
            sessions.retain(|_, s| now.duration_since(s.last_seen) < SESSION_IDLE);
            if sessions.len() >= SESSIONS_MAX {
                if let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.last_seen)
                    .map(|(k, _)| k.clone())
                {
                    sessions.remove(&oldest);
                }
            }
            sessions.insert(
                sha256_hex(&id),
                Session {
                    operator: operator.to_string(),
                    csrf: random_hex(),
                    last_seen: now,
                },
            );
        }
        id
    }

    /// The session `id` names, touched (`None`: unknown or ended).
    fn find(&self, id: &str) -> Option<Session> {
        let mut sessions = self.by_hash.lock().ok()?;
        let key = sha256_hex(id);
        let session = sessions.get_mut(&key)?;
        if session.last_seen.elapsed() >= SESSION_IDLE {
            sessions.remove(&key);
            return None;
        }
        session.last_seen = Instant::now();
        Some(session.clone())
    }

    fn end(&self, id: &str) {
        if let Ok(mut sessions) = self.by_hash.lock() {
            sessions.remove(&sha256_hex(id));
        }
    }
}

/// The session id of the request's cookie.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

impl Console {
    /// The signed-in operator of this request, checked again against `outbox_operator`.
    pub async fn viewer(&self, headers: &HeaderMap) -> Result<Viewer, ConsoleError> {
        let id = session_id(headers).ok_or(ConsoleError::SignIn)?;
        let session = self.inner.sessions.find(id).ok_or(ConsoleError::SignIn)?;
        let Some(role) = store::operator_still_valid(self.pool(), &session.operator).await? else {
            self.inner.sessions.end(id);
            return Err(ConsoleError::SignIn);
        };
        Ok(Viewer {
            operator: Operator {
                name: session.operator,
                role,
            },
            csrf: session.csrf,
        })
    }

    /// The signed-in operator of a form that changes something: the session, the admin role,
    /// the form's CSRF token and the origin must all hold.
    pub async fn admin_form(
        &self,
        headers: &HeaderMap,
        form: &Params,
        command: &str,
    ) -> Result<Viewer, ConsoleError> {
        let viewer = self.viewer(headers).await?;
        check_form(headers, form, &viewer)?;
        if viewer.operator.role < Role::Admin {
            return Err(ConsoleError::Forbidden(format!(
                "operator {} has the viewer role; {command} needs admin: nothing was changed",
                viewer.operator.name
            )));
        }
        Ok(viewer)
    }
}

/// The CSRF token and the origin of a posted form.
fn check_form(headers: &HeaderMap, form: &Params, viewer: &Viewer) -> Result<(), ConsoleError> {
    if !form.get("csrf").is_some_and(|t| same(t, &viewer.csrf)) {
        return Err(ConsoleError::Csrf);
    }
    same_origin(headers)
}

/// A form posted from a page of another origin is refused (browsers send `Origin` with every
/// POST; a request without it is not a browser's and has no cookie to abuse).
fn same_origin(headers: &HeaderMap) -> Result<(), ConsoleError> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return Ok(());
    };
    let origin_host = origin
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or(origin);
    match super::request_host(headers) {
        Some(host) if host == origin_host => Ok(()),
        _ => Err(ConsoleError::Csrf),
    }
}

/// `GET /console/login`.
pub async fn login_page() -> Response {
    Html(layout::login_page(None).into_string()).into_response()
}

/// The session cookie set to `value` for `max_age` seconds (`Secure` when `secure`).
fn session_cookie(value: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
}

/// `POST /console/login`: a viewer or admin token starts a session. The attempt is counted
/// against the client address's and the global limit first: over either, 429 with
/// `Retry-After`, and nothing is read.
pub async fn login(
    State(console): State<Console>,
    extensions: Extensions,
    headers: HeaderMap,
    RawForm(body): RawForm,
) -> Result<Response, ConsoleError> {
    let client = extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    if let Err(wait) = console.inner.sign_in_limit.attempt(client) {
        tracing::warn!(client = ?client, "console sign-in refused: too many attempts");
        return Err(ConsoleError::TooManyAttempts(wait));
    }
    same_origin(&headers)?;
    let form = Params::parse(&body);
    let token = form.get("token");
    match store::authorize(console.pool(), token, Role::Viewer, "console").await {
        Ok(operator) => {
            let id = console.inner.sessions.start(&operator.name);
            tracing::info!(operator = %operator.name, role = operator.role.as_str(), "console sign-in");
            let cookie = session_cookie(&id, SESSION_IDLE.as_secs(), console.secure_cookie());
            Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/console")).into_response())
        }
        Err(store::AccessError::Store(e)) => Err(e.into()),
        Err(e) => {
            tracing::warn!("console sign-in refused: {e}");
            tokio::time::sleep(FAILED_SIGN_IN_DELAY).await;
            Ok((
                axum::http::StatusCode::UNAUTHORIZED,
                Html(layout::login_page(Some(&e.to_string())).into_string()),
            )
                .into_response())
        }
    }
}

/// `POST /console/logout`.
pub async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    RawForm(body): RawForm,
) -> Result<Response, ConsoleError> {
    let viewer = console.viewer(&headers).await?;
    check_form(&headers, &Params::parse(&body), &viewer)?;
    if let Some(id) = session_id(&headers) {
        console.inner.sessions.end(id);
    }
    let cookie = session_cookie("", 0, console.secure_cookie());
    Ok((
        [(header::SET_COOKIE, cookie)],
        Redirect::to("/console/login"),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; outbox_console=abc; b=2".parse().unwrap(),
        );
        assert_eq!(session_id(&headers), Some("abc"));
    }

    #[test]
    fn a_form_from_another_origin_is_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:9464".parse().unwrap());
        headers.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(same_origin(&headers).is_err());
        headers.insert(header::ORIGIN, "http://127.0.0.1:9464".parse().unwrap());
        assert!(same_origin(&headers).is_ok());
    }

    #[test]
    fn sessions_end_and_are_bounded() {
        let sessions = Sessions::default();
        let id = sessions.start("alice");
        assert_eq!(sessions.find(&id).unwrap().operator, "alice");
        sessions.end(&id);
        assert!(sessions.find(&id).is_none());
        for _ in 0..SESSIONS_MAX + 5 {
            sessions.start("bob");
        }
        assert!(sessions.by_hash.lock().unwrap().len() <= SESSIONS_MAX);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
