//! Allowed hosts: which `Host` header values the operator endpoint answers.
//!
//! Owns the allowlist of the console and `/metrics` ([`AllowedHosts`]): the listener's own
//! address, `localhost`, `127.0.0.1` and `[::1]` on the listener's port, the host of
//! `OUTBOX_CONSOLE_PUBLIC_URL` and the entries of `OUTBOX_CONSOLE_ALLOWED_HOSTS`. A page fetched
//! under another name (a DNS-rebinding attack points a name the attacker owns at this address,
//! so the browser sends the attacker's name as `Host`) is refused with 421 before any handler
//! runs. `/healthz` and `/readyz` stay open to every `Host`: orchestrators probe them by the pod's
//! IP, and they show nothing an attacker could use. It also owns the checks of the two settings'
//! values. It never reads a request body and never calls anything.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Paths every `Host` may reach (liveness and readiness probes).
pub const OPEN_PATHS: &[&str] = &["/healthz", "/readyz"];

/// Longest `Host` entry accepted in the settings (a DNS name is at most 253 bytes, plus a port).
const MAX_HOST_BYTES: usize = 260;

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

/// `host[:port]` split, the host lower-cased (`[::1]:9464` -> (`[::1]`, 9464)); `None` when the
/// port is not a number.
fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim().to_ascii_lowercase();
    let (host, port) = if text.starts_with('[') {
        match text.split_once(']') {
            Some((ip, "")) => (format!("{ip}]"), None),
            Some((ip, rest)) => (format!("{ip}]"), Some(rest.strip_prefix(':')?)),
            None => return None,
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    Some((host, port))
}

/// Check one entry of `OUTBOX_CONSOLE_ALLOWED_HOSTS`: `host` or `host:port`, a DNS name or an IP
/// literal (IPv6 in brackets).
pub fn check_host_entry(entry: &str) -> Result<(), String> {
    let valid_chars = entry
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'));
    let parsed = split_host_port(entry).filter(|(host, _)| !host.is_empty());
    if entry.is_empty() || entry.len() > MAX_HOST_BYTES || !valid_chars || parsed.is_none() {
        let shown = crate::capability::clip(entry, 80);
        return Err(format!(
            "{shown:?} is not a host: use a name or an IP address, optionally with :port (e.g. outbox.example.com or 10.0.0.5:9464)"
        ));
    }
    Ok(())
}

/// Check `OUTBOX_CONSOLE_PUBLIC_URL`: empty, or an `http://` or `https://` URL with a host and
/// no user or password.
pub fn check_public_url(url: &str) -> Result<(), String> {
    if url.is_empty() {
        return Ok(());
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "{url:?} must start with https:// (or http:// for a console that is not behind TLS)"
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("{url:?} must not carry a user or password"));
    }
    Ok(())
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
            let shown = crate::capability::clip(&host, 100);
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
