//! How long a text the host keeps may be: [`clip`] cuts at a character boundary, and
//! [`bounded_reason`] makes a plugin's reason fit to keep (bounded, on one line).

/// At most `max` bytes of `s`, cut at a character boundary (audit lines, bounded keys, values
/// shown in refusals).
pub fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Longest reason the host keeps from a plugin answer (a no-route, retry, fail or deny reason),
/// bytes. Longer ones are cut and marked.
pub const MAX_REASON_BYTES: usize = 1024;

/// A reason a plugin handed back, as the host may keep it (in `last_error`, a Redis entry, a
/// log line, the policy cache): at most [`MAX_REASON_BYTES`] bytes, cut at a character boundary
/// and marked `…` when cut, with every control character (newlines included) replaced by a
/// space so the text stays on one line and cannot forge a host log line.
pub fn bounded_reason(reason: &str) -> String {
    const CUT_MARK: &str = "…";
    let cut = reason.len() > MAX_REASON_BYTES;
    let kept = if cut {
        clip(reason, MAX_REASON_BYTES - CUT_MARK.len())
    } else {
        reason
    };
    let mut bounded: String = kept
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if cut {
        bounded.push_str(CUT_MARK);
    }
    bounded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_cuts_at_char_boundaries() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("abc", 10), "abc");
    }

    #[test]
    fn a_plugin_reason_is_clipped_and_kept_on_one_line() {
        assert_eq!(bounded_reason("fine"), "fine");
        assert_eq!(
            bounded_reason("bad\n2026-11-30T00:00:00Z INFO outbox::audit: forged\r\t\u{1b}[31m"),
            "bad 2026-11-30T00:00:00Z INFO outbox::audit: forged   [31m"
        );
        let long = "é".repeat(10 * MAX_REASON_BYTES);
        let clipped = bounded_reason(&long);
        assert!(clipped.len() <= MAX_REASON_BYTES, "{}", clipped.len());
        assert!(clipped.ends_with('…'));
        assert!(clipped.starts_with("éé"));
        let exact = "a".repeat(MAX_REASON_BYTES);
        assert_eq!(bounded_reason(&exact), exact);
    }
}
