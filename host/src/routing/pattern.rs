//! Event type patterns: the one place that says whether a routing prefix matches an event type
//! and which of several matching prefixes wins.
//!
//! Owns [`TypePattern`] (a literal prefix such as `mail.` or a wildcard such as `*.deleted`), its
//! [`Specificity`] and the [`PrefixMatcher`] that keeps patterns most specific first. Both the
//! native [`RouteTable`](super::RouteTable) and the `[router.overrides]` of the plugin router use
//! it. It never validates patterns (the config does that) and never knows what a match leads to.

use std::fmt;

/// A routing prefix for event types: a literal prefix (`mail.` matches `mail.welcome`), or a
/// leading `*` standing for any one first segment (`*.deleted` matches `user.deleted` and
/// `order.deleted.v2`, not `deleted`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TypePattern(String);

/// How specific a [`TypePattern`] is; the greater wins. Longer patterns are more specific, and
/// between two of the same length a literal beats a wildcard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Specificity {
    len: usize,
    literal: bool,
}

impl TypePattern {
    /// The pattern written as `prefix` (as in `routes.toml`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self(prefix.into())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this pattern matches `event_type`.
    pub fn matches(&self, event_type: &str) -> bool {
        match self.0.strip_prefix('*') {
            Some(rest) => event_type
                .find('.')
                .is_some_and(|dot| event_type[dot..].starts_with(rest)),
            None => event_type.starts_with(&self.0),
        }
    }

    /// How specific this pattern is, to pick the winner among several matches.
    pub fn specificity(&self) -> Specificity {
        Specificity {
            len: self.0.len(),
            literal: !self.0.starts_with('*'),
        }
    }
}

impl fmt::Display for TypePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Patterns, each with a value, kept most specific first so the first match is the winner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixMatcher<T> {
    patterns: Vec<TypePattern>,
    values: Vec<T>,
}

impl<T> Default for PrefixMatcher<T> {
    fn default() -> Self {
        Self {
            patterns: Vec::new(),
            values: Vec::new(),
        }
    }
}

impl<T> PrefixMatcher<T> {
    /// A matcher over `entries`; patterns of equal specificity keep their given order.
    pub fn new(entries: impl IntoIterator<Item = (TypePattern, T)>) -> Self {
        let mut entries: Vec<(TypePattern, T)> = entries.into_iter().collect();
        entries.sort_by_key(|(pattern, _)| std::cmp::Reverse(pattern.specificity()));
        let (patterns, values) = entries.into_iter().unzip();
        Self { patterns, values }
    }

    /// The most specific pattern matching `event_type`, with its value.
    pub fn find(&self, event_type: &str) -> Option<(&TypePattern, &T)> {
        self.patterns
            .iter()
            .position(|p| p.matches(event_type))
            .map(|i| (&self.patterns[i], &self.values[i]))
    }

    /// The patterns, most specific first.
    pub fn patterns(&self) -> &[TypePattern] {
        &self.patterns
    }

    /// The values, in the order of [`PrefixMatcher::patterns`].
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// Whether there is no pattern at all.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> TypePattern {
        TypePattern::new(s)
    }

    #[test]
    fn literal_pattern_matches_by_prefix() {
        assert!(p("mail.").matches("mail.welcome"));
        assert!(p("mail.").matches("mail."));
        assert!(!p("mail.").matches("mail"));
        assert!(!p("mail.").matches("email.welcome"));
        assert!(p("mail.bounce").matches("mail.bouncer"));
    }

    #[test]
    fn wildcard_stands_for_one_first_segment() {
        assert!(p("*.deleted").matches("user.deleted"));
        assert!(p("*.deleted").matches("order.deleted.v2"));
        assert!(!p("*.deleted").matches("deleted"));
        assert!(!p("*.deleted").matches("deleted.user"));
        assert!(!p("*.deleted").matches("a.b.deleted"));
        assert!(p("*.").matches("a.b"));
        assert!(!p("*.").matches("ab"));
    }

    #[test]
    fn longer_beats_shorter_and_literal_beats_wildcard_of_same_length() {
        assert!(p("mail.bounce.").specificity() > p("mail.").specificity());
        assert!(p("*.deleted.").specificity() > p("order.").specificity());
        assert!(p("user.del").specificity() > p("*.delete").specificity());
        assert!(p("*.deleted").specificity() < p("user.dele").specificity());
    }

    #[test]
    fn matcher_finds_the_most_specific_match() {
        let m = PrefixMatcher::new([
            (p("mail."), "mail"),
            (p("*.deleted"), "wild"),
            (p("mail.bounce."), "bounce"),
            (p("user.dele"), "literal"),
        ]);
        assert_eq!(
            m.patterns()
                .iter()
                .map(TypePattern::as_str)
                .collect::<Vec<_>>(),
            ["mail.bounce.", "user.dele", "*.deleted", "mail."]
        );
        assert_eq!(m.values(), ["bounce", "literal", "wild", "mail"]);
        assert_eq!(m.find("mail.bounce.hard").map(|(_, v)| *v), Some("bounce"));
        assert_eq!(m.find("mail.welcome").map(|(_, v)| *v), Some("mail"));
        assert_eq!(m.find("mail.deleted").map(|(_, v)| *v), Some("wild"));
        assert_eq!(m.find("user.deleted").map(|(_, v)| *v), Some("literal"));
        assert_eq!(
            m.find("order.deleted").map(|(p, _)| p.as_str()),
            Some("*.deleted")
        );
        assert!(m.find("billing.paid").is_none());
        assert!(PrefixMatcher::<()>::default().is_empty());
    }
}
