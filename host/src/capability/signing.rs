//! Request signing: the HMAC-SHA256 scheme of outbound HTTP requests, for the host (signing) and
//! for receiving services (verifying).
//!
//! Owns the header names, [`sign_request`] and [`verify_signature`]. It never reads a secret from
//! anywhere itself (callers pass it in), never logs one, and never sends a request.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header carrying the signing time (unix seconds) of a signed outbound request.
pub const TIMESTAMP_HEADER: &str = "x-outbox-timestamp";

/// Header carrying `sha256=<hex HMAC-SHA256(secret, "{timestamp}.{body}")>`.
pub const SIGNATURE_HEADER: &str = "x-outbox-signature";

type HmacSha256 = Hmac<Sha256>;

/// The `x-outbox-signature` value of a request: `sha256=<hex HMAC-SHA256(secret,
/// "{timestamp}.{body}")>`.
#[allow(clippy::expect_used)] // HMAC takes keys of any length: `new_from_slice` cannot fail here
pub fn sign_request(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Check a signed request as its receiving service should: `timestamp` (the
/// `x-outbox-timestamp` header) within `max_age_secs` of `now_unix` either way, and
/// `signature_header` (the `x-outbox-signature` header) the HMAC of `"{timestamp}.{body}"`,
/// compared in constant time. `Err` says why the request must be rejected. A replay inside the
/// window passes: a receiver that must see each request once also remembers recent signatures.
pub fn verify_signature(
    secret: &[u8],
    timestamp: &str,
    body: &[u8],
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
    mac.update(timestamp.trim().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&signature).map_err(|_| {
        "signature does not match (wrong secret, or the request was altered)".to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"s3cret";
    const NOW: i64 = 1_800_000_000;

    #[test]
    fn signature_roundtrip() {
        let body = br#"{"hello":"world"}"#;
        let sig = sign_request(SECRET, NOW, body);
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64, "{sig}");
        verify_signature(SECRET, &NOW.to_string(), body, &sig, NOW + 3, 300).unwrap();
        // Empty body, and a known vector: HMAC-SHA256("s3cret", "1800000000.").
        let empty = sign_request(SECRET, NOW, b"");
        verify_signature(SECRET, "1800000000", b"", &empty, NOW, 300).unwrap();
        let mut mac = HmacSha256::new_from_slice(SECRET).unwrap();
        mac.update(b"1800000000.");
        assert_eq!(
            empty,
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        );
    }

    #[test]
    fn forgeries_are_rejected() {
        let body = b"amount=10";
        let ts = NOW.to_string();
        let sig = sign_request(SECRET, NOW, body);
        let err = verify_signature(b"other", &ts, body, &sig, NOW, 300).unwrap_err();
        assert!(err.contains("does not match"), "{err}");
        assert!(verify_signature(SECRET, &ts, b"amount=1000", &sig, NOW, 300).is_err());
        // Moving the timestamp (to dodge the replay window) breaks the signature.
        let later = (NOW + 100).to_string();
        assert!(verify_signature(SECRET, &later, body, &sig, NOW + 100, 300).is_err());
        // Malformed headers.
        assert!(verify_signature(SECRET, &ts, body, &sig[7..], NOW, 300).is_err());
        assert!(verify_signature(SECRET, &ts, body, "sha256=zz", NOW, 300).is_err());
        assert!(verify_signature(SECRET, &ts, body, "sha256=", NOW, 300).is_err());
        let truncated = &sig[..sig.len() - 2];
        assert!(verify_signature(SECRET, &ts, body, truncated, NOW, 300).is_err());
        assert!(verify_signature(SECRET, "soon", body, &sig, NOW, 300).is_err());
    }

    #[test]
    fn replays_outside_the_window_are_rejected() {
        let body = b"x";
        let ts = NOW.to_string();
        let sig = sign_request(SECRET, NOW, body);
        verify_signature(SECRET, &ts, body, &sig, NOW + 300, 300).unwrap();
        let err = verify_signature(SECRET, &ts, body, &sig, NOW + 301, 300).unwrap_err();
        assert!(err.contains("replay"), "{err}");
        let err = verify_signature(SECRET, &ts, body, &sig, NOW - 301, 300).unwrap_err();
        assert!(err.contains("future"), "{err}");
        assert!(verify_signature(SECRET, &ts, body, &sig, i64::MIN, 300).is_err());
        assert!(verify_signature(SECRET, &i64::MIN.to_string(), body, &sig, NOW, 300).is_err());
    }
}
