//! Allowed hosts: which `Host` header values the operator endpoint answers.
//!
//! Owns the allowlist of the console and `/metrics` ([`AllowedHosts`]): the listener's own
//! address, `localhost`, `127.0.0.1` and `[::1]` on the listener's port, the host of
//! `OUTBOX_CONSOLE_PUBLIC_URL` and the entries of `OUTBOX_CONSOLE_ALLOWED_HOSTS`. A page fetched
//! under another name (a DNS-rebinding attack points a name the attacker owns at this address,
//! so the browser sends the attacker's name as `Host`) is refused with 421 before any handler
//! runs. `/healthz` and `/readyz` stay open to every `Host`: orchestrators probe them by the pod's
//! IP, and they show nothing an attacker could use. The checks of the two settings' values are
//! naming rules ([`crate::naming::check_host_entry`], [`crate::naming::check_public_url`]). It
//! never reads a request body and never calls anything.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::naming::split_host_port;

/// Paths every `Host` may reach (liveness and readiness probes).
pub const OPEN_PATHS: &[&str] = &["/healthz", "/readyz"];

/// One allowed `Host`: a host name or IP literal (lower case, IPv6 in brackets) and the ports
/// it is allowed with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AllowedHost {
    host: String,
    port: PortRule,
}

/// The ports an allowed host may come with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortRule {
    /// Any port, or none (an entry of `OUTBOX_CONSOLE_ALLOWED_HOSTS` without a port).
    Any,
    /// Exactly this port.
    Only(u16),
    /// No port (what a browser sends for the scheme's default port), or this default port.
    Default(u16),
}

impl PortRule {
    fn allows(self, port: Option<u16>) -> bool {
        match (self, port) {
            (PortRule::Any, _) => true,
            (PortRule::Only(want), Some(got)) => want == got,
            (PortRule::Only(_), None) => false,
            (PortRule::Default(_), None) => true,
            (PortRule::Default(want), Some(got)) => want == got,
        }
    }
}

/// The `Host` values the endpoint answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    allowed: Vec<AllowedHost>,
}

/// Whether the console's public URL is `https://` (its session cookie is then `Secure`).
pub fn is_https(public_url: &str) -> bool {
    public_url
        .get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
}

impl AllowedHosts {
    /// The allowlist of a listener bound to `local` (the address it really got), with the
    /// console's public URL (may be empty) and the extra entries.
    pub fn new(local: std::net::SocketAddr, public_url: &str, extra: &[String]) -> Self {
        let port = local.port();
        let mut allowed = vec![
            AllowedHost {
                host: "localhost".into(),
                port: PortRule::Only(port),
            },
            AllowedHost {
                host: "127.0.0.1".into(),
                port: PortRule::Only(port),
            },
            AllowedHost {
                host: "[::1]".into(),
                port: PortRule::Only(port),
            },
        ];
        if !local.ip().is_unspecified() {
            let host = match local.ip() {
                std::net::IpAddr::V4(ip) => ip.to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            };
            allowed.push(AllowedHost {
                host,
                port: PortRule::Only(port),
            });
        }
        if let Ok(url) = reqwest::Url::parse(public_url) {
            if let (Some(host), Some(default)) = (url.host_str(), url.port_or_known_default()) {
                allowed.push(AllowedHost {
                    host: host.to_ascii_lowercase(),
                    // A browser leaves the scheme's default port out of `Host`.
                    port: match url.port() {
                        Some(explicit) => PortRule::Only(explicit),
                        None => PortRule::Default(default),
                    },
                });
            }
        }
        for entry in extra {
            if let Some((host, port)) = split_host_port(entry) {
                allowed.push(AllowedHost {
                    host,
                    port: port.map_or(PortRule::Any, PortRule::Only),
                });
            }
        }
        Self { allowed }
    }

    /// Whether a request whose `Host` is `host` may be answered.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_host_port(host) else {
            return false;
        };
        self.allowed
            .iter()
            .any(|a| a.host == name && a.port.allows(port))
    }
}

/// Middleware: answer 421 to a request whose `Host` is not allowed, except on [`OPEN_PATHS`].
pub async fn check_host(
    State(allowed): State<std::sync::Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    if OPEN_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match host {
        Some(host) if allowed.allows(&host) => next.run(request).await,
        host => {
            let host = host.unwrap_or_default();
            let shown = crate::naming::clip(&host, 100);
            tracing::warn!(host = %shown, path = %request.uri().path(), "refused a request for a host this endpoint does not serve");
            let mut response = (
                StatusCode::MISDIRECTED_REQUEST,
                Body::from(format!(
                    "this endpoint does not answer for host {shown:?}: open it by an allowed name (OUTBOX_CONSOLE_PUBLIC_URL, OUTBOX_CONSOLE_ALLOWED_HOSTS)\n"
                )),
            )
                .into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::{check_host_entry, check_public_url};

    fn local(addr: &str) -> std::net::SocketAddr {
        addr.parse().unwrap()
    }

    #[test]
    fn loopback_names_and_the_listeners_address_are_allowed_on_its_port() {
        let hosts = AllowedHosts::new(local("127.0.0.1:9464"), "", &[]);
        for ok in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST:9464",
            "[::1]:9464",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:9464",
            "localhost:80",
            "localhost",
            "127.0.0.1",
            "",
            "127.0.0.1:notaport",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        let bound = AllowedHosts::new(local("10.0.0.5:9464"), "", &[]);
        assert!(bound.allows("10.0.0.5:9464"));
        let anywhere = AllowedHosts::new(local("0.0.0.0:9464"), "", &[]);
        assert!(!anywhere.allows("0.0.0.0:9464"));
    }

    #[test]
    fn the_public_urls_host_and_the_extra_entries_are_allowed() {
        let hosts = AllowedHosts::new(
            local("0.0.0.0:9464"),
            "https://Outbox.Example.com/console",
            &["proxy.internal".into(), "10.1.2.3:8080".into()],
        );
        assert!(hosts.allows("outbox.example.com"));
        assert!(hosts.allows("outbox.example.com:443"));
        assert!(!hosts.allows("outbox.example.com:8443"));
        assert!(hosts.allows("proxy.internal:1234"));
        assert!(hosts.allows("proxy.internal"));
        assert!(hosts.allows("10.1.2.3:8080"));
        assert!(!hosts.allows("10.1.2.3:9464"));
        let ported = AllowedHosts::new(local("127.0.0.1:9464"), "http://c.example:8080", &[]);
        assert!(ported.allows("c.example:8080") && !ported.allows("c.example"));
    }

    #[test]
    fn setting_values_are_checked() {
        assert!(check_public_url("").is_ok());
        assert!(check_public_url("https://outbox.example.com").is_ok());
        assert!(check_public_url("http://10.0.0.5:9464/").is_ok());
        assert!(check_public_url("outbox.example.com").is_err());
        assert!(check_public_url("ftp://outbox.example.com").is_err());
        assert!(check_public_url("https://user:pw@outbox.example.com").is_err());
        assert!(is_https("HTTPS://x.example") && !is_https("http://x.example"));
        assert!(check_host_entry("proxy.internal").is_ok());
        assert!(check_host_entry("[::1]:9464").is_ok());
        assert!(check_host_entry("10.0.0.5:9464").is_ok());
        assert!(check_host_entry("a b").is_err());
        assert!(check_host_entry("host:99999").is_err());
        assert!(check_host_entry(":80").is_err());
        assert!(check_host_entry("").is_err());
    }
}
