//! The `http` capability: outbound HTTP requests of a handler plugin.
//!
//! Owns the grant check (policy target: `host[:port]` of the URL), the client (no redirects),
//! the timeout and response size limits, the headers a plugin may not set, and signing with the
//! secret its grants name. It never sends a request before the policy allowed its host, never
//! follows a redirect (each hop must pass the policy), and never shows the signing secret to the
//! plugin or a log.

use std::time::Duration;

use super::signing::{sign_request, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use super::DeliveryScope;
use crate::plugin::bindings::handler_world::outbox::plugin::http as wit_http;
use crate::plugin::bindings::HostCallError;

/// The capability name the policy is asked about.
pub const CAPABILITY: &str = "http";

/// Default outbound HTTP timeout when the plugin gives none.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest outbound HTTP timeout a plugin may ask for.
pub const MAX_HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest outbound HTTP response body, bytes.
pub const MAX_HTTP_RESPONSE_BYTES: usize = 1 << 20;

/// The outbound HTTP client plugins' calls go through: rustls, no redirects (each hop must pass
/// the policy, so a 3xx comes back to the plugin as it is), default timeout.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(MAX_HTTP_TIMEOUT)
        .user_agent(concat!("outbox/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The policy target of a URL: `host`, or `host:port` when the port is not the scheme's
/// default (IPv6 hosts keep their brackets). `None` when the URL has no host.
pub fn http_target(url: &reqwest::Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// `http.send`: check the grant for the URL's host, build the request (signed when the grants
/// name a secret), send it and read the response within the limits.
pub(crate) async fn send(
    scope: &DeliveryScope,
    request: wit_http::Request,
) -> Result<wit_http::Response, HostCallError> {
    let url = reqwest::Url::parse(&request.url)
        .map_err(|e| HostCallError::Failed(format!("http: invalid url {:?}: {e}", request.url)))?;
    let target = http_target(&url)
        .ok_or_else(|| HostCallError::Failed(format!("http: url {:?} has no host", request.url)))?;
    scope.authorize(CAPABILITY, &target).await?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HostCallError::Failed(format!(
            "http: only http and https urls are allowed, got {}",
            url.scheme()
        )));
    }
    let method = reqwest::Method::from_bytes(request.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| HostCallError::Failed(format!("http: invalid method {:?}", request.method)))?;
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &request.headers {
        let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| HostCallError::Failed(format!("http: invalid header name {name:?}")))?;
        if header == reqwest::header::HOST
            || header == TIMESTAMP_HEADER
            || header == SIGNATURE_HEADER
        {
            return Err(HostCallError::Failed(format!(
                "http: header {name} is set by the host, not the plugin"
            )));
        }
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| HostCallError::Failed(format!("http: invalid value for header {name}")))?;
        headers.append(header, value);
    }
    let body = request.body.unwrap_or_default();
    if let Some(secret) = signing_secret(scope)? {
        let timestamp = chrono::Utc::now().timestamp();
        let signature = sign_request(&secret, timestamp, &body);
        let value = |s: String| {
            reqwest::header::HeaderValue::from_str(&s)
                .map_err(|e| HostCallError::Failed(format!("http: signing: {e}")))
        };
        headers.insert(TIMESTAMP_HEADER, value(timestamp.to_string())?);
        headers.insert(SIGNATURE_HEADER, value(signature)?);
    }
    let timeout = request
        .timeout_ms
        .map(|ms| Duration::from_millis(u64::from(ms)))
        .unwrap_or(DEFAULT_HTTP_TIMEOUT)
        .min(MAX_HTTP_TIMEOUT);
    let send = scope
        .host
        .http
        .request(method, url)
        .headers(headers)
        .body(body)
        .timeout(timeout)
        .send();
    let work = async move {
        let mut response = send.await.map_err(|e| format!("http: {e}"))?;
        if response
            .content_length()
            .is_some_and(|len| len > MAX_HTTP_RESPONSE_BYTES as u64)
        {
            return Err(too_large());
        }
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("http: reading the body: {e}"))?
        {
            if body.len() + chunk.len() > MAX_HTTP_RESPONSE_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(wit_http::Response {
            status,
            headers,
            body,
        })
    };
    // The client's per-request timeout bounds the whole exchange; this is a backstop.
    tokio::time::timeout(timeout + Duration::from_secs(1), work)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "http: no response within {} ms",
                timeout.as_millis()
            ))
        })
        .map_err(HostCallError::Failed)
}

/// The signing secret named by the plugin's grants, read now (`None`: no signing).
fn signing_secret(scope: &DeliveryScope) -> Result<Option<Vec<u8>>, HostCallError> {
    let Some(var) = &scope.plugin.spec.grants.http_signing_secret_env else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(secret) if !secret.is_empty() => Ok(Some(secret.into_bytes())),
        _ => Err(HostCallError::Failed(format!(
            "http: plugin '{}' must sign its requests with the secret in environment variable {var}, which is not set (or empty, or not UTF-8) in the host's environment; the request was not sent",
            scope.plugin.name
        ))),
    }
}

fn too_large() -> String {
    format!("http: the response body is over the limit of {MAX_HTTP_RESPONSE_BYTES} bytes")
}

#[cfg(test)]
mod tests {
    use super::http_target;

    #[test]
    fn http_targets() {
        let t = |u: &str| http_target(&reqwest::Url::parse(u).unwrap());
        assert_eq!(
            t("https://API.example.com/x?y=1").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            t("https://api.example.com:443/").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            t("http://localhost:8080/hook").as_deref(),
            Some("localhost:8080")
        );
        assert_eq!(t("http://[::1]:9000/").as_deref(), Some("[::1]:9000"));
        assert_eq!(
            t("http://user:pw@evil.example:81@good.example/").as_deref(),
            Some("good.example")
        );
        assert_eq!(t("mailto:a@b.c"), None);
    }
}
