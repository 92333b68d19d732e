//! Request signing: the HMAC-SHA256 scheme of outbound HTTP requests, for the host (signing) and
//! for receiving services (verifying).
//!
//! Owns the header names, the canonical string a signature covers ([`signing_string`]),
//! [`sign_request`] and [`verify_signature`]. It never reads a secret from anywhere itself
//! (callers pass it in), never logs one, and never sends a request.
//!
//! # The scheme
//!
//! The host sends `x-outbox-timestamp: <unix seconds>` and
//! `x-outbox-signature: sha256=<hex HMAC-SHA256(secret, S)>`, where `S` is
//!
//! ```text
//! <timestamp> "\n" <METHOD> "\n" <host> "\n" <path and query> "\n" <body bytes>
//! ```
//!
//! - `METHOD` in upper case (`POST`);
//! - `host` as the `Host` header carries it: the lower-case host name (IPv6 in brackets), with
//!   `:port` only when the port is not the scheme's default (`api.example.com`,
//!   `127.0.0.1:8080`);
//! - `path and query` as in the request line: `/hook` or `/hook?a=1` (never empty: `/`).
//!
//! So a captured signature cannot be replayed against another endpoint, method or host, nor
//! with another body, and moving the timestamp breaks it. A receiver rebuilds `S` from what it
//! received (method, `Host` header, request target, raw body) and calls [`verify_signature`].

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header carrying the signing time (unix seconds) of a signed outbound request.
pub const TIMESTAMP_HEADER: &str = "x-outbox-timestamp";

/// Header carrying `sha256=<hex HMAC-SHA256(secret, signing string)>` (see the module docs).
pub const SIGNATURE_HEADER: &str = "x-outbox-signature";

type HmacSha256 = Hmac<Sha256>;

/// What a signature covers besides the timestamp: one request as it goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedRequest<'a> {
    /// The method (compared in upper case).
    pub method: &'a str,
    /// The `Host` header value: host, plus `:port` when not the scheme's default (compared in
    /// lower case).
    pub host: &'a str,
    /// Path and query of the request line (`/hook?a=1`).
    pub path_and_query: &'a str,
    /// The raw body.
    pub body: &'a [u8],
}

/// The bytes a signature covers: `"{timestamp}\n{METHOD}\n{host}\n{path_and_query}\n"`
/// followed by the body.
pub fn signing_string(timestamp: &str, request: &SignedRequest<'_>) -> Vec<u8> {
    let mut s = Vec::with_capacity(
        timestamp.len()
            + request.method.len()
            + request.host.len()
            + request.path_and_query.len()
            + request.body.len()
            + 4,
    );
    s.extend_from_slice(timestamp.as_bytes());
    s.push(b'\n');
    s.extend_from_slice(request.method.to_ascii_uppercase().as_bytes());
    s.push(b'\n');
    s.extend_from_slice(request.host.to_ascii_lowercase().as_bytes());
    s.push(b'\n');
    s.extend_from_slice(request.path_and_query.as_bytes());
    s.push(b'\n');
    s.extend_from_slice(request.body);
    s
}

/// The `x-outbox-signature` value of a request signed at `timestamp` (unix seconds):
/// `sha256=<hex HMAC-SHA256(secret, signing_string)>`.
#[allow(clippy::expect_used)] // HMAC takes keys of any length: `new_from_slice` cannot fail here
pub fn sign_request(secret: &[u8], timestamp: i64, request: &SignedRequest<'_>) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(&signing_string(&timestamp.to_string(), request));
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Check a signed request as its receiving service should: `timestamp` (the
/// `x-outbox-timestamp` header) within `max_age_secs` of `now_unix` either way, and
/// `signature_header` (the `x-outbox-signature` header) the HMAC of the signing string of
/// `timestamp` and `request` (what the service received), compared in constant time. `Err` says
/// why the request must be rejected. A replay inside the window passes: a receiver that must see
/// each request once also remembers recent signatures.
pub fn verify_signature(
    secret: &[u8],
    timestamp: &str,
    request: &SignedRequest<'_>,
    signature_header: &str,
    now_unix: i64,
    max_age_secs: i64,
) -> Result<(), String> {
    let signed_at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| format!("{TIMESTAMP_HEADER} is not a unix time in seconds: {timestamp:?}"))?;
    let age = now_unix.saturating_sub(signed_at);
    if age > max_age_secs {
        return Err(format!(
            "request signed {age} s ago, over the limit of {max_age_secs} s (a replay?)"
        ));
    }
    let ahead = signed_at.saturating_sub(now_unix);
    if ahead > max_age_secs {
        return Err(format!(
            "request signed {ahead} s in the future, over the limit of {max_age_secs} s"
        ));
    }
    let hex_sig = signature_header
        .trim()
        .strip_prefix("sha256=")
        .ok_or_else(|| format!("{SIGNATURE_HEADER} must look like sha256=<hex>"))?;
    let signature = hex::decode(hex_sig).map_err(|_| format!("{SIGNATURE_HEADER} is not hex"))?;
    let mut mac = HmacSha256::new_from_slice(secret).map_err(|e| e.to_string())?;
    mac.update(&signing_string(timestamp.trim(), request));
    mac.verify_slice(&signature).map_err(|_| {
        "signature does not match (wrong secret, or the method, host, path, body or timestamp was altered)"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cret";
    const NOW: i64 = 1_800_000_000;

    fn request(body: &[u8]) -> SignedRequest<'_> {
        SignedRequest {
            method: "POST",
            host: "api.example.com",
            path_and_query: "/hook?x=1",
            body,
        }
    }

    #[test]
    fn signature_roundtrip() {
        let body = br#"{"hello":"world"}"#;
        let sig = sign_request(SECRET, NOW, &request(body));
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64, "{sig}");
        verify_signature(SECRET, &NOW.to_string(), &request(body), &sig, NOW + 3, 300).unwrap();
        // A known vector, computed independently of `signing_string`.
        let mut mac = HmacSha256::new_from_slice(SECRET).unwrap();
        mac.update(b"1800000000\nPOST\napi.example.com\n/hook?x=1\n");
        let empty = sign_request(SECRET, NOW, &request(b""));
        assert_eq!(
            empty,
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        );
        // Method and host compare case-insensitively, as HTTP does.
        let lower = SignedRequest {
            method: "post",
            host: "API.example.com",
            ..request(b"")
        };
        verify_signature(SECRET, "1800000000", &lower, &empty, NOW, 300).unwrap();
    }

    #[test]
    fn forgeries_are_rejected() {
        let body = b"amount=10";
        let ts = NOW.to_string();
        let sig = sign_request(SECRET, NOW, &request(body));
        let err = verify_signature(b"other", &ts, &request(body), &sig, NOW, 300).unwrap_err();
        assert!(err.contains("does not match"), "{err}");
        assert!(verify_signature(SECRET, &ts, &request(b"amount=1000"), &sig, NOW, 300).is_err());
        // The same body to another method, host or path does not verify.
        let other = [
            SignedRequest {
                method: "PUT",
                ..request(body)
            },
            SignedRequest {
                host: "evil.example.com",
                ..request(body)
            },
            SignedRequest {
                host: "api.example.com:8443",
                ..request(body)
            },
            SignedRequest {
                path_and_query: "/admin?x=1",
                ..request(body)
            },
            SignedRequest {
                path_and_query: "/hook?x=2",
                ..request(body)
            },
        ];
        for forged in other {
            assert!(
                verify_signature(SECRET, &ts, &forged, &sig, NOW, 300).is_err(),
                "{forged:?}"
            );
        }
        // Moving the timestamp (to dodge the replay window) breaks the signature.
        let later = (NOW + 100).to_string();
        assert!(verify_signature(SECRET, &later, &request(body), &sig, NOW + 100, 300).is_err());
        // Malformed headers.
        let r = request(body);
        assert!(verify_signature(SECRET, &ts, &r, &sig[7..], NOW, 300).is_err());
        assert!(verify_signature(SECRET, &ts, &r, "sha256=zz", NOW, 300).is_err());
        assert!(verify_signature(SECRET, &ts, &r, "sha256=", NOW, 300).is_err());
        let truncated = &sig[..sig.len() - 2];
        assert!(verify_signature(SECRET, &ts, &r, truncated, NOW, 300).is_err());
        assert!(verify_signature(SECRET, "soon", &r, &sig, NOW, 300).is_err());
    }

    #[test]
    fn replays_outside_the_window_are_rejected() {
        let r = request(b"x");
        let ts = NOW.to_string();
        let sig = sign_request(SECRET, NOW, &r);
        verify_signature(SECRET, &ts, &r, &sig, NOW + 300, 300).unwrap();
        let err = verify_signature(SECRET, &ts, &r, &sig, NOW + 301, 300).unwrap_err();
        assert!(err.contains("replay"), "{err}");
        let err = verify_signature(SECRET, &ts, &r, &sig, NOW - 301, 300).unwrap_err();
        assert!(err.contains("future"), "{err}");
        assert!(verify_signature(SECRET, &ts, &r, &sig, i64::MIN, 300).is_err());
        assert!(verify_signature(SECRET, &i64::MIN.to_string(), &r, &sig, NOW, 300).is_err());
    }
}
