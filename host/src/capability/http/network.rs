//! The `http` capability's network backend: a receiver's requests go out through reqwest.
//!
//! Owns the clients (no redirects, no proxy, a resolver that vets every address it returns and
//! hands exactly those to the connector; one client per set of granted IP addresses), reading
//! the signing secret and signing a request, the exchange's deadline and the response size
//! limit. It is reached only through [`HttpInstance::send`](super::HttpInstance::send), with
//! requests that passed the checks and the policy; it never resolves a name twice for one
//! connection, never follows a redirect, and never shows the signing secret to the plugin or a
//! log.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use super::egress::vet_resolved;
use super::{
    path_and_query, CheckedRequest, HttpBackend, MAX_HTTP_RESPONSE_BYTES, MAX_HTTP_TIMEOUT,
};
use crate::capability::signing::{sign_request, SignedRequest, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::plugin::bindings::handler_world::outbox::plugin::http as wit_http;

/// Clients kept for plugins whose grants name IP addresses (one per distinct set; the map is
/// cleared when full, which only costs a rebuild).
const MAX_CLIENTS: usize = 64;

/// The outbound HTTP client plugins' calls go through when their grants name no IP address:
/// rustls, no redirects (each hop must pass the policy, so a 3xx comes back to the plugin as it
/// is), no proxy (a proxy would resolve the name where the host cannot vet it), and a resolver
/// that refuses a name resolving to any non-public address.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    client_allowing(Arc::from(Vec::new()))
}

/// [`http_client`] whose resolver also accepts the addresses in `allowed` (IPs the grants name).
fn client_allowing(allowed: Arc<[IpAddr]>) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(VettingResolver { allowed }))
        .timeout(MAX_HTTP_TIMEOUT)
        .user_agent(concat!("outbox/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The clients of one process: the shared one, and one per set of granted IP addresses.
pub(crate) struct EgressClients {
    default: reqwest::Client,
    by_allowed_ips: Mutex<HashMap<Vec<IpAddr>, reqwest::Client>>,
}

impl EgressClients {
    /// Clients around `default` (built with [`http_client`]).
    pub(crate) fn new(default: reqwest::Client) -> Self {
        Self {
            default,
            by_allowed_ips: Mutex::default(),
        }
    }

    /// The client whose resolver accepts exactly the non-public addresses in `allowed`.
    fn for_allowed(&self, allowed: &[IpAddr]) -> Result<reqwest::Client, String> {
        if allowed.is_empty() {
            return Ok(self.default.clone());
        }
        let mut clients = self
            .by_allowed_ips
            .lock()
            .map_err(|_| "http: client cache poisoned".to_string())?;
        if let Some(client) = clients.get(allowed) {
            return Ok(client.clone());
        }
        let client = client_allowing(Arc::from(allowed.to_vec()))
            .map_err(|e| format!("http: building the client: {e}"))?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(allowed.to_vec(), client.clone());
        Ok(client)
    }
}

/// The resolver of plugin clients: resolves once, vets every address ([`vet_resolved`]), and
/// hands exactly those addresses to the connector, so the address checked is the one dialled.
struct VettingResolver {
    allowed: Arc<[IpAddr]>,
}

/// The error type reqwest's resolver interface carries.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A name refused by [`VettingResolver`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

impl reqwest::dns::Resolve for VettingResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.allowed.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            vet_resolved(&name, &addrs, &allowed).map_err(Refused)?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok::<_, BoxError>(addrs)
        })
    }
}

/// An error and its sources, `: `-separated (reqwest hides the resolver's reason in a source).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// The network backend of a receiver: its clients.
pub(crate) struct NetworkHttp {
    clients: EgressClients,
}

impl NetworkHttp {
    /// Requests sent with `default` (built with [`http_client`]) or, for plugins whose grants
    /// name IPs, clients of their own made here.
    pub(crate) fn new(default: reqwest::Client) -> Self {
        Self {
            clients: EgressClients::new(default),
        }
    }

    /// Sign `request` when its grants name a secret, send it and read the response within the
    /// limits.
    async fn exchange(
        &self,
        plugin: &str,
        request: CheckedRequest,
    ) -> Result<wit_http::Response, String> {
        let CheckedRequest {
            method,
            url,
            target,
            mut headers,
            body,
            timeout,
            destination,
            signing_secret_env,
            ..
        } = request;
        if let Some(secret) = signing_secret(plugin, signing_secret_env.as_deref())? {
            let timestamp = chrono::Utc::now().timestamp();
            let path = path_and_query(&url);
            let signed = SignedRequest {
                method: method.as_str(),
                host: &target,
                path_and_query: &path,
                body: &body,
            };
            let signature = sign_request(&secret, timestamp, &signed);
            let value = |s: String| {
                reqwest::header::HeaderValue::from_str(&s)
                    .map_err(|e| format!("http: signing: {e}"))
            };
            headers.insert(TIMESTAMP_HEADER, value(timestamp.to_string())?);
            headers.insert(SIGNATURE_HEADER, value(signature)?);
        }
        let client = self.clients.for_allowed(&destination.allowed_ips)?;
        let send = client
            .request(method, url)
            .headers(headers)
            .body(body)
            .timeout(timeout)
            .send();
        let work = async move {
            let mut response = send
                .await
                .map_err(|e| format!("http: {}", with_sources(&e)))?;
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
                .map_err(|e| format!("http: reading the body: {}", with_sources(&e)))?
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
    }
}

impl HttpBackend for NetworkHttp {
    fn send<'a>(
        &'a self,
        plugin: &'a str,
        request: CheckedRequest,
    ) -> BoxFuture<'a, Result<wit_http::Response, String>> {
        Box::pin(self.exchange(plugin, request))
    }
}

/// The signing secret in environment variable `var` (the grants' `http_signing_secret_env`),
/// read now (`None`: no signing).
fn signing_secret(plugin: &str, var: Option<&str>) -> Result<Option<Vec<u8>>, String> {
    let Some(var) = var else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(secret) if !secret.is_empty() => Ok(Some(secret.into_bytes())),
        _ => Err(format!(
            "http: plugin '{plugin}' must sign its requests with the secret in environment variable {var}, which is not set (or empty, or not UTF-8) in the host's environment; the request was not sent"
        )),
    }
}

fn too_large() -> String {
    format!("http: the response body is over the limit of {MAX_HTTP_RESPONSE_BYTES} bytes")
}
