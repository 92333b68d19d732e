//! Outbound HTTP, only to hosts and ports granted to the plugin in `routes.toml` (an entry
//! without a port allows the scheme's default port only). The host resolves names itself and
//! refuses loopback, link-local, private and other non-public addresses unless the grants name
//! that IP; it follows no redirects, caps responses at 1 MiB and, when the grants name a signing
//! secret, signs method, host, path and query, timestamp and body (see docs/plugins.md, "Signed
//! requests"), over `https://` only unless the grants allow plain http.
//!
//! ```no_run
//! use outbox_plugin_sdk::handler::http::{self, Request};
//!
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let response = http::send(Request::post("https://hooks.example.com/in").json(&[1, 2, 3])?)?;
//! if !response.is_success() {
//!     return Err(format!("webhook answered {}: {}", response.status, response.text()).into());
//! }
//! # Ok(())
//! # }
//! ```

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::bindings::handler::outbox::plugin::http as wit;
use crate::HostError;

/// An outbound HTTP request. Build one with [`Request::new`], [`Request::get`] or
/// [`Request::post`] and the builder methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// HTTP method, e.g. `GET`.
    pub method: String,
    /// Absolute URL; its host must be granted to the plugin.
    pub url: String,
    /// Request headers, in order.
    pub headers: Vec<(String, String)>,
    /// Request body, if any.
    pub body: Option<Vec<u8>>,
    /// Timeout in milliseconds; the host caps it with its own limit.
    pub timeout_ms: Option<u32>,
}

impl Request {
    /// A request with `method` to `url`, no headers and no body.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout_ms: None,
        }
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` request (add a body with [`Request::body`] or [`Request::json`]).
    pub fn post(url: impl Into<String>) -> Self {
        Self::new("POST", url)
    }

    /// Add a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Set the raw body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Set a JSON body and the matching `content-type` header.
    pub fn json<T: Serialize + ?Sized>(self, body: &T) -> Result<Self, HostError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| HostError::Failed(format!("request body is not serializable: {e}")))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Set the timeout in milliseconds.
    pub fn timeout_ms(mut self, timeout_ms: u32) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Response headers, in order.
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: Vec<u8>,
}

impl Response {
    /// True for a 2xx status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body deserialized from JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Send `request` and wait for the response. Any status (including 4xx/5xx) is a response;
/// an error means the call was refused or never completed.
pub fn send(request: Request) -> Result<Response, HostError> {
    let request = wit::Request {
        method: request.method,
        url: request.url,
        headers: request.headers,
        body: request.body,
        timeout_ms: request.timeout_ms,
    };
    let response = wit::send(&request)?;
    Ok(Response {
        status: response.status,
        headers: response.headers,
        body: response.body,
    })
}
