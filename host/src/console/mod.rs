//! Console: the operator web console served by `outbox run` beside `/metrics`.
//!
//! Owns the pages under `/console` (overview, event search, one event's trace, failed events and
//! dead letters with their repairs, plugins and routes, hosts and queues), the sign-in by
//! operator token and the session that follows it ([`session`]). Pages are rendered on the
//! server (every inserted value escaped by the template); the one script, served by the host,
//! only refreshes the live parts of a page while it is open, so nothing runs when nobody
//! watches. Reads need a viewer, actions an admin, the same identities, guardrails (dry-run
//! preview, then a confirmation) and audit trail as the CLI's commands.
//!
//! Its reads and sign-ins run on its own small pool ([`crate::store::console_pool`]:
//! `OUTBOX_CONSOLE_DB_CONNECTIONS` connections with `OUTBOX_CONSOLE_STATEMENT_TIMEOUT_MS`), so a
//! slow search or a burst of sign-ins never waits for, or holds, the dispatcher's connections;
//! a search cut by the timeout says so. Sign-in attempts are limited before any query
//! ([`sign_in_limit`]). Repairs and their audit rows go through the host's pool, as the CLI's do.
//!
//! It never changes a row or an entry except through the store's and receivers' own repair
//! operations, and it never holds a lock or a Redis call open across a page.

use std::sync::Arc;
use std::time::Duration;

use crate::redis_conn::RedisConn;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use sqlx::PgPool;
use tokio::sync::OnceCell;

use crate::config::Settings;
use crate::live_config::LiveConfig;
use crate::receive::DeadLetters;
use crate::store::Role;
use crate::trace::Tracer;

mod actions;
mod layout;
mod pages;
pub mod session;
pub mod sign_in_limit;

pub use session::Sessions;

/// How long a Redis read of a page may take before the page says Redis is unavailable.
const REDIS_READ_LIMIT: Duration = Duration::from_secs(2);

/// The console of one host: what its pages read and the sessions of those signed in.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    /// The console's own pool: reads and sign-ins.
    read_pool: PgPool,
    /// The host's pool: repairs and their audit rows.
    host_pool: PgPool,
    /// Sign-in attempts per client address and in all.
    sign_in_limit: sign_in_limit::SignInLimit,
    settings: Arc<Settings>,
    live: Option<LiveConfig>,
    worker_id: String,
    sessions: Sessions,
    redis: OnceCell<RedisConn>,
    tracer: OnceCell<Tracer>,
    dead_letters: OnceCell<DeadLetters>,
    /// Where the pages read open rows from the claim index (shared with the host's dispatcher
    /// when it runs one; see [`crate::store::claim_horizon`]).
    horizon: Arc<crate::store::HorizonTracker>,
}

impl Console {
    /// The console of the host `worker_id`: it reads the database of `pool` through its own
    /// small pool (`OUTBOX_CONSOLE_DB_CONNECTIONS`, `OUTBOX_CONSOLE_STATEMENT_TIMEOUT_MS`;
    /// connected at the first page), repairs through `pool`, and reads the Redis of `settings`
    /// (connected at the first page that needs it) and the live configuration.
    pub fn new(
        pool: PgPool,
        settings: Arc<Settings>,
        live: Option<LiveConfig>,
        worker_id: String,
        horizon: Arc<crate::store::HorizonTracker>,
    ) -> Self {
        let read_pool = crate::store::console_pool(
            &pool,
            settings.console_db_connections,
            settings.console_statement_timeout,
        );
        let sign_in_limit = sign_in_limit::SignInLimit::new(
            settings.console_sign_in_per_minute,
            settings.console_sign_in_global_per_minute,
        );
        Self {
            inner: Arc::new(Inner {
                read_pool,
                host_pool: pool,
                sign_in_limit,
                settings,
                live,
                worker_id,
                sessions: Sessions::default(),
                redis: OnceCell::new(),
                tracer: OnceCell::new(),
                dead_letters: OnceCell::new(),
                horizon,
            }),
        }
    }

    /// The routes of the console, under `/console`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/console", get(pages::overview))
            .route("/console/", get(|| async { Redirect::to("/console") }))
            .route("/console/live/overview", get(pages::overview_live))
            .route(
                "/console/login",
                get(session::login_page).post(session::login),
            )
            .route("/console/logout", post(session::logout))
            .route("/console/events", get(pages::events))
            .route("/console/events/{id}", get(pages::event))
            .route("/console/live/events/{id}", get(pages::event_live))
            .route("/console/failed", get(actions::failed))
            .route("/console/failed/preview", post(actions::failed_preview))
            .route("/console/failed/apply", post(actions::failed_apply))
            .route("/console/dead-letters", get(actions::dead_letters))
            .route(
                "/console/dead-letters/preview",
                post(actions::dead_letters_preview),
            )
            .route(
                "/console/dead-letters/apply",
                post(actions::dead_letters_apply),
            )
            .route("/console/plugins", get(pages::plugins))
            .route("/console/workers", get(pages::workers))
            .route("/console/static/console.css", get(layout::stylesheet))
            .route("/console/static/console.js", get(layout::script))
            .layer(axum::middleware::map_response(security_headers))
            .with_state(self)
    }

    /// The `Host` values the endpoint serving this console on `local` answers (see
    /// [`crate::allowed_hosts`]).
    pub fn allowed_hosts(&self, local: std::net::SocketAddr) -> crate::allowed_hosts::AllowedHosts {
        let settings = &self.inner.settings;
        crate::allowed_hosts::AllowedHosts::new(
            local,
            &settings.console_public_url,
            &settings.console_allowed_hosts,
        )
    }

    /// The console's own pool, which its pages and sign-ins read through (not the host's).
    pub fn read_pool(&self) -> &PgPool {
        &self.inner.read_pool
    }

    fn pool(&self) -> &PgPool {
        &self.inner.read_pool
    }

    /// The claim horizon to read open rows from, refreshed through the console's pool.
    async fn horizon(&self) -> crate::store::ClaimHorizon {
        self.inner.horizon.current(&self.inner.read_pool).await
    }

    /// The host's pool: repairs and audit rows, as the CLI writes them.
    fn host_pool(&self) -> &PgPool {
        &self.inner.host_pool
    }

    /// Whether the session cookie is `Secure` (`OUTBOX_CONSOLE_PUBLIC_URL` is `https://`).
    fn secure_cookie(&self) -> bool {
        crate::allowed_hosts::is_https(&self.inner.settings.console_public_url)
    }

    /// A Redis connection (made at first use; the reason when Redis is down).
    async fn redis(&self) -> Result<RedisConn, String> {
        let connect = async {
            crate::redis_conn::connect_shared(
                &self.inner.settings.redis_url,
                &self.inner.settings.redis_prefix,
            )
            .await
            .map_err(|e| format!("Redis: {e}"))
        };
        within_limit(self.inner.redis.get_or_try_init(|| connect))
            .await
            .cloned()
    }

    async fn tracer(&self) -> Result<&Tracer, String> {
        let Some(live) = &self.inner.live else {
            return Err("this host runs without a routes file: no trace".into());
        };
        let connect = Tracer::connect(
            self.inner.read_pool.clone(),
            &self.inner.settings,
            live.router.clone(),
        );
        within_limit(
            self.inner
                .tracer
                .get_or_try_init(|| async { connect.await.map_err(|e| e.to_string()) }),
        )
        .await
    }

    async fn dead_letter_store(&self) -> Result<&DeadLetters, String> {
        let connect = DeadLetters::connect(&self.inner.settings);
        within_limit(
            self.inner
                .dead_letters
                .get_or_try_init(|| async { connect.await.map_err(|e| e.to_string()) }),
        )
        .await
    }
}

/// `read`, cut at [`REDIS_READ_LIMIT`]: a page says Redis is unavailable instead of hanging.
async fn within_limit<T, E: std::fmt::Display>(
    read: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(REDIS_READ_LIMIT, read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("Redis did not answer in time".into()),
    }
}

/// Why a console request did not get its page.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// Not signed in (or the session ended): go to the sign-in page.
    #[error("sign in first")]
    SignIn,
    /// Signed in, but the role is not enough.
    #[error("{0}")]
    Forbidden(String),
    /// A form's CSRF token or origin is wrong.
    #[error("this form is out of date or did not come from this console: reload the page and try again (nothing was changed)")]
    Csrf,
    /// The request is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// No such thing.
    #[error("{0}")]
    NotFound(String),
    /// Too many sign-in attempts: try again after this long.
    #[error("too many sign-in attempts: try again in {} s", .0.as_secs().max(1))]
    TooManyAttempts(Duration),
    /// PostgreSQL or Redis failed.
    #[error("{0}")]
    Unavailable(String),
}

impl From<crate::store::StoreError> for ConsoleError {
    fn from(e: crate::store::StoreError) -> Self {
        if crate::store::is_statement_timeout(&e) {
            return ConsoleError::Unavailable(format!(
                "{}: this read took longer than the console allows (OUTBOX_CONSOLE_STATEMENT_TIMEOUT_MS) and was cancelled; narrow it (a type prefix, a tenant, a shorter time range) and try again",
                e.context
            ));
        }
        if matches!(e.source, sqlx::Error::PoolTimedOut) {
            return ConsoleError::Unavailable(format!(
                "{}: every database connection of the console is busy (OUTBOX_CONSOLE_DB_CONNECTIONS); try again in a moment",
                e.context
            ));
        }
        ConsoleError::Unavailable(e.to_string())
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let status = match &self {
            ConsoleError::SignIn => return Redirect::to("/console/login").into_response(),
            ConsoleError::Forbidden(_) | ConsoleError::Csrf => StatusCode::FORBIDDEN,
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound(_) => StatusCode::NOT_FOUND,
            ConsoleError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ConsoleError::TooManyAttempts(wait) => {
                let seconds = wait.as_secs_f64().ceil().max(1.0).to_string();
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, seconds)],
                    axum::response::Html(layout::login_page(Some(&self.to_string())).into_string()),
                )
                    .into_response();
            }
        };
        (
            status,
            axum::response::Html(layout::error_page(status, &self.to_string()).into_string()),
        )
            .into_response()
    }
}

/// What a signed-in request may do: its operator, role and the form token of its session.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// The operator.
    pub operator: crate::store::Operator,
    /// The session's CSRF token, put in every form.
    pub csrf: String,
}

impl Viewer {
    fn is_admin(&self) -> bool {
        self.operator.role == Role::Admin
    }
}

/// The headers every console answer carries: nothing is framed, sniffed, cached, or loaded
/// from anywhere but the host.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Whether `addr` (host:port) listens on loopback only.
pub fn is_loopback(addr: &str) -> bool {
    match addr.parse::<std::net::SocketAddr>() {
        Ok(a) => a.ip().is_loopback(),
        Err(_) => addr.starts_with("localhost:"),
    }
}

/// The `Host` a request was sent to (for the same-origin check of forms).
fn request_host(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::HOST).and_then(|h| h.to_str().ok())
}

/// The fields of a query string or a form, in order (a field may repeat: the selected rows of
/// a table).
#[derive(Debug, Clone, Default)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Parse `application/x-www-form-urlencoded` text.
    pub fn parse(text: &[u8]) -> Self {
        Params(
            form_urlencoded::parse(text)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`, trimmed, unless empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// Every non-empty value of `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
            .collect()
    }

    /// Every field (for carrying a preview's choice into its confirmation form).
    pub fn fields(&self) -> &[(String, String)] {
        &self.0
    }
}
