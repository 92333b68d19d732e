//! `Host` names of the operator endpoint: the entries of `OUTBOX_CONSOLE_ALLOWED_HOSTS` and
//! the console's public URL (`OUTBOX_CONSOLE_PUBLIC_URL`). URLs are parsed with the `url` crate
//! (as re-exported by `reqwest`).

use super::{clip, NameError};

/// Longest `Host` entry accepted in the settings (a DNS name is at most 253 bytes, plus a port).
pub const MAX_HOST_BYTES: usize = 260;

/// `host[:port]` split, the host lower-cased (`[::1]:9464` -> (`[::1]`, 9464)); `None` when the
/// port is not a number.
pub fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
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
pub fn check_host_entry(entry: &str) -> Result<(), NameError> {
    let valid_chars = entry
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'));
    let parsed = split_host_port(entry).filter(|(host, _)| !host.is_empty());
    if entry.is_empty() || entry.len() > MAX_HOST_BYTES || !valid_chars || parsed.is_none() {
        return Err(NameError::HostEntry(clip(entry, 80).to_string()));
    }
    Ok(())
}

/// Check `OUTBOX_CONSOLE_PUBLIC_URL`: empty, or an `http://` or `https://` URL with a host and
/// no user or password.
pub fn check_public_url(url: &str) -> Result<(), NameError> {
    if url.is_empty() {
        return Ok(());
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| NameError::PublicUrlUnparsable {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(NameError::PublicUrlScheme(url.to_string()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(NameError::PublicUrlNoHost(url.to_string()));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(NameError::PublicUrlCredentials(url.to_string()));
    }
    Ok(())
}
