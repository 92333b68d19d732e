//! Event types and the routing prefixes that match them.

use super::NameError;

/// Longest event type, in bytes.
pub const MAX_EVENT_TYPE_BYTES: usize = 255;

/// Check an event type: lowercase, dot-separated, at least two non-empty segments, at most
/// [`MAX_EVENT_TYPE_BYTES`].
pub fn validate_event_type(event_type: &str) -> Result<(), NameError> {
    let ok = event_type.len() <= MAX_EVENT_TYPE_BYTES
        && event_type.split('.').count() >= 2
        && event_type.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(NameError::EventType(event_type.to_string()))
    }
}

/// Check a routing prefix (`[routes]`, `[router.overrides]`): lowercase segments separated by
/// dots, optional leading `*` standing for a whole first segment.
pub fn validate_prefix(prefix: &str) -> Result<(), NameError> {
    let body = prefix.strip_prefix('*').unwrap_or(prefix);
    if prefix.is_empty() {
        return Err(NameError::Prefix("empty prefix"));
    }
    if body.contains('*') {
        return Err(NameError::Prefix(
            "'*' is only allowed as the whole first segment",
        ));
    }
    if prefix.starts_with('*') && !(body.is_empty() || body.starts_with('.')) {
        return Err(NameError::Prefix(
            "'*' must stand for a whole first segment, as in '*.deleted'",
        ));
    }
    if !body
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
    {
        return Err(NameError::Prefix(
            "prefixes use lowercase letters, digits, '_', '-' and '.'",
        ));
    }
    if body.contains("..") {
        return Err(NameError::Prefix("empty segment ('..')"));
    }
    if !prefix.starts_with('*') && body.starts_with('.') {
        return Err(NameError::Prefix(
            "empty first segment (no event type starts with '.'; a prefix starts with a segment or '*', as in 'mail.' or '*.deleted')",
        ));
    }
    Ok(())
}
