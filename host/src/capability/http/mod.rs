//! The `http` capability: outbound HTTP requests of a handler plugin.
//!
//! Owns what `http` means whatever sends the request: the grant check (policy target:
//! `host[:port]` of the URL), the URL, method and header checks (no header the host sets), the
//! egress rules the host enforces whatever the policy says ([`egress`]: the port a grant
//! allows, the addresses a request may reach), the signing rules of the grants (no signing over
//! plain `http://` unless allowed), the timeout and response limits, and the one checked entry
//! point, [`HttpInstance::send`], through which every request reaches an [`HttpBackend`]:
//! [`network`] in a receiver (reqwest, signing with the secret its grants name), [`fixtures`] in
//! an offline call. It never hands a backend a request before the policy allowed its host and
//! the egress rules and checks passed.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::policy::gate::Gate;
use super::signing::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::config::Grants;
use crate::plugin::bindings::handler_world::outbox::plugin::http as wit_http;
use crate::plugin::bindings::HostCallError;

pub(crate) mod egress;
pub(crate) mod fixtures;
pub(crate) mod network;

pub use egress::{http_target, non_public_kind};
pub use network::http_client;

/// The capability name the policy is asked about.
pub const CAPABILITY: &str = "http";

/// Default outbound HTTP timeout when the plugin gives none.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest outbound HTTP timeout a plugin may ask for.
pub const MAX_HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest outbound HTTP response body, bytes.
pub const MAX_HTTP_RESPONSE_BYTES: usize = 1 << 20;

/// Longest URL a plugin may ask for, bytes (checked before the policy runs).
pub const MAX_HTTP_URL_BYTES: usize = 8192;

/// Refuse to sign a plain `http://` request unless the grants allow it: the signature, the
/// timestamp and the body would cross the network readable and alterable.
pub(crate) fn check_signing_scheme(
    url: &reqwest::Url,
    grants: &Grants,
    plugin: &str,
) -> Result<(), String> {
    if url.scheme() == "https" || grants.http_signing_allow_plain_http {
        return Ok(());
    }
    Err(format!(
        "http: plugin '{plugin}' signs its requests, and {} is plain http: the host does not sign over plain http (use https, or set http_signing_allow_plain_http = true in its grants); the request was not sent",
        http_target(url).unwrap_or_default()
    ))
}

/// The path and query of a URL as its request line carries them (`/` at least).
pub(crate) fn path_and_query(url: &reqwest::Url) -> String {
    let path = match url.path() {
        "" => "/",
        p => p,
    };
    match url.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    }
}

/// Parse and check a URL before the policy sees it: length, scheme, host.
pub(crate) fn parse_url(raw: &str) -> Result<(reqwest::Url, String), String> {
    if raw.len() > MAX_HTTP_URL_BYTES {
        return Err(format!(
            "http: urls are at most {MAX_HTTP_URL_BYTES} bytes, got {}",
            raw.len()
        ));
    }
    let url = reqwest::Url::parse(raw).map_err(|e| {
        format!(
            "http: invalid url {:?}: {e}",
            super::clip(raw, super::policy::MAX_AUDIT_TARGET)
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "http: only http and https urls are allowed, got {}",
            url.scheme()
        ));
    }
    let target = http_target(&url).ok_or_else(|| format!("http: url {url} has no host"))?;
    Ok((url, target))
}

/// The headers a plugin gives a request, checked: valid names and values, none of those the
/// host sets (`host`, the signing headers).
pub(crate) fn request_headers(
    given: &[(String, String)],
) -> Result<reqwest::header::HeaderMap, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in given {
        let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("http: invalid header name {name:?}"))?;
        if header == reqwest::header::HOST
            || header == TIMESTAMP_HEADER
            || header == SIGNATURE_HEADER
        {
            return Err(format!(
                "http: header {name} is set by the host, not the plugin"
            ));
        }
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| format!("http: invalid value for header {name}"))?;
        headers.append(header, value);
    }
    Ok(headers)
}

/// A request that passed the checks, the policy and the egress rules, as a backend gets it.
pub(crate) struct CheckedRequest {
    /// The method, upper case.
    pub(crate) method: reqwest::Method,
    /// The URL, parsed.
    pub(crate) url: reqwest::Url,
    /// The URL exactly as the plugin gave it.
    pub(crate) raw_url: String,
    /// `host[:port]`: the policy target, the `Host` header and the host a signature covers.
    pub(crate) target: String,
    /// The plugin's headers, checked.
    pub(crate) headers: reqwest::header::HeaderMap,
    /// The body.
    pub(crate) body: Vec<u8>,
    /// The time the exchange may take (at most [`MAX_HTTP_TIMEOUT`]).
    pub(crate) timeout: Duration,
    /// What the egress rules allow the URL's name to resolve to.
    pub(crate) destination: egress::Destination,
    /// The environment variable of the signing secret, when the grants name one (the scheme was
    /// checked: https, or plain http the grants allow).
    pub(crate) signing_secret_env: Option<String>,
}

/// Where the requests of a delivery go: the network in a receiver ([`network::NetworkHttp`]),
/// fixtures in an offline call ([`fixtures::FixtureHttp`]). Reached only through
/// [`HttpInstance::send`].
pub(crate) trait HttpBackend: Send + Sync {
    /// Send `request` of `plugin`; `Err` is the message the plugin sees.
    fn send<'a>(
        &'a self,
        plugin: &'a str,
        request: CheckedRequest,
    ) -> BoxFuture<'a, Result<wit_http::Response, String>>;
}

/// The http capability of one delivery: the calling plugin and its grants.
pub(crate) struct HttpInstance {
    plugin: Arc<str>,
    grants: Grants,
}

impl HttpInstance {
    /// The http capability of `plugin` under `grants` (its `[plugins.NAME].grants`).
    pub(crate) fn new(plugin: Arc<str>, grants: Grants) -> Self {
        Self { plugin, grants }
    }

    /// The checked entry point of `http` (`http.send`): check the URL, ask `gate` about its
    /// host, check the egress rules, the method, the headers and the signing scheme, then hand
    /// the request to `backend`.
    pub(crate) async fn send(
        &self,
        gate: &Gate,
        backend: &dyn HttpBackend,
        request: wit_http::Request,
    ) -> Result<wit_http::Response, HostCallError> {
        let (url, target) = parse_url(&request.url).map_err(HostCallError::Failed)?;
        gate.authorize(CAPABILITY, &target).await?;
        let checked = self
            .check(url, target, request)
            .map_err(HostCallError::Failed)?;
        backend
            .send(&self.plugin, checked)
            .await
            .map_err(HostCallError::Failed)
    }

    /// The checks after the policy: the egress rules, the method, the headers and, when the
    /// grants name a signing secret, the scheme.
    fn check(
        &self,
        url: reqwest::Url,
        target: String,
        request: wit_http::Request,
    ) -> Result<CheckedRequest, String> {
        let destination = egress::check_destination(&url, &self.grants)?;
        let method = reqwest::Method::from_bytes(request.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("http: invalid method {:?}", request.method))?;
        let headers = request_headers(&request.headers)?;
        let signing_secret_env = self.grants.http_signing_secret_env.clone();
        if signing_secret_env.is_some() {
            check_signing_scheme(&url, &self.grants, &self.plugin)?;
        }
        let timeout = request
            .timeout_ms
            .map(|ms| Duration::from_millis(u64::from(ms)))
            .unwrap_or(DEFAULT_HTTP_TIMEOUT)
            .min(MAX_HTTP_TIMEOUT);
        Ok(CheckedRequest {
            method,
            url,
            raw_url: request.url,
            target,
            headers,
            body: request.body.unwrap_or_default(),
            timeout,
            destination,
            signing_secret_env,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(u: &str) -> reqwest::Url {
        reqwest::Url::parse(u).unwrap()
    }

    fn grants(http: &[&str]) -> Grants {
        Grants {
            http: http.iter().map(|s| s.to_string()).collect(),
            ..Grants::default()
        }
    }

    #[test]
    fn signing_over_plain_http_needs_the_grant() {
        let mut g = grants(&["127.0.0.1:8080"]);
        let err = check_signing_scheme(&url("http://127.0.0.1:8080/"), &g, "p").unwrap_err();
        assert!(err.contains("plain http"), "{err}");
        assert!(check_signing_scheme(&url("https://127.0.0.1:8080/"), &g, "p").is_ok());
        g.http_signing_allow_plain_http = true;
        assert!(check_signing_scheme(&url("http://127.0.0.1:8080/"), &g, "p").is_ok());
    }

    #[test]
    fn urls_are_checked_before_the_policy() {
        assert!(parse_url(&format!(
            "https://a.example/{}",
            "x".repeat(MAX_HTTP_URL_BYTES)
        ))
        .is_err());
        assert!(parse_url("ftp://a.example/").is_err());
        assert!(parse_url("https://a.example/p?q=1").is_ok());
        assert_eq!(path_and_query(&url("https://a.example")), "/");
        assert_eq!(path_and_query(&url("https://a.example/p?q=1")), "/p?q=1");
    }
}
