//! The `pattern` keyword of contract schemas, run under two budgets of regex backtracking.
//!
//! Owns the keyword that replaces JSON Schema's `pattern` in every compiled contract
//! ([`with_budgeted_patterns`]) and the budgets it runs under. A pattern the linear engine (the
//! `regex` crate: no look-around, no back-references) can run is matched by it, in time linear
//! in the string, and costs nothing. A pattern that needs the backtracking engine
//! (`fancy-regex`) is tried with a limit of [`FIRST_ATTEMPT_STEPS`] backtracking steps, then
//! with limits ten times larger up to [`PATTERN_STEPS_PER_MATCH`] (the per-match budget), and
//! every attempt is charged its whole limit to the payload being checked
//! ([`within_payload_budget`]), which may spend [`PATTERN_STEPS_PER_PAYLOAD`] steps in all (the
//! per-payload budget). A value past the per-match budget, or a payload past its budget, is a
//! [`PatternRefusal`] for the whole payload, whatever the schema around the pattern (`not`,
//! `anyOf`) would make of a failed match; once refused, no more pattern of that payload runs.
//! The other regexes of a schema (`patternProperties`) are compiled for the linear engine only.
//!
//! It never decides anything else about a payload and never keeps one.

use std::cell::RefCell;
use std::fmt;

use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::Location;
use jsonschema::{Keyword, PatternOptions, ValidationError, ValidationOptions, Validator};
use serde_json::{Map, Value};

/// Backtracking steps one value may take to match one pattern (the per-match budget).
pub const PATTERN_STEPS_PER_MATCH: u64 = 1_000_000;
/// Backtracking steps all the pattern matches of one payload check may take together (the
/// per-payload budget): ten values at the per-match budget, about a quarter of a second.
pub const PATTERN_STEPS_PER_PAYLOAD: u64 = 10 * PATTERN_STEPS_PER_MATCH;
/// The limit of the first attempt at a backtracking match; each next attempt allows ten times
/// more, up to [`PATTERN_STEPS_PER_MATCH`].
pub const FIRST_ATTEMPT_STEPS: u64 = 100;

/// Why the pattern checks of a payload were stopped: the payload is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternRefusal {
    /// One value needs more than [`PATTERN_STEPS_PER_MATCH`] steps to match `pattern`.
    PerMatch {
        /// The pattern, as the contract writes it.
        pattern: String,
    },
    /// The payload's pattern matches together need more than [`PATTERN_STEPS_PER_PAYLOAD`]
    /// steps; `pattern` is the one being matched when it ran out.
    PerPayload {
        /// The pattern, as the contract writes it.
        pattern: String,
    },
    /// The regex engine failed on `pattern` (a bug of the engine, caught).
    Engine {
        /// The pattern, as the contract writes it.
        pattern: String,
        /// What the engine said.
        message: String,
    },
}

impl fmt::Display for PatternRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PerMatch { pattern } => write!(
                f,
                "a value needs more than {PATTERN_STEPS_PER_MATCH} regex backtracking steps to match pattern {pattern:?} (the per-match budget)"
            ),
            Self::PerPayload { pattern } => write!(
                f,
                "the payload's pattern checks need more than {PATTERN_STEPS_PER_PAYLOAD} regex backtracking steps in all (the per-payload budget; it ran out matching pattern {pattern:?})"
            ),
            Self::Engine { pattern, message } => {
                write!(f, "pattern {pattern:?} could not be evaluated: {message}")
            }
        }
    }
}

/// What one payload check may still spend, and why it was stopped.
struct Spending {
    steps_left: u64,
    refused: Option<PatternRefusal>,
}

thread_local! {
    /// The payload check running on this thread ([`within_payload_budget`]), if any.
    static SPENDING: RefCell<Option<Spending>> = const { RefCell::new(None) };
}

/// Run `check` (the validation of one payload, on this thread) with a fresh budget of
/// `steps` backtracking steps for its pattern matches: its result, or why its patterns were
/// stopped (the payload is then refused, whatever `check` returned).
pub(crate) fn within_payload_budget<T>(
    steps: u64,
    check: impl FnOnce() -> T,
) -> Result<T, PatternRefusal> {
    /// Puts back the check this one ran inside of (none in practice), even on a panic.
    struct Scope(Option<Spending>);
    impl Drop for Scope {
        fn drop(&mut self) {
            let outer = self.0.take();
            SPENDING.with(|s| *s.borrow_mut() = outer);
        }
    }
    let outer = SPENDING.with(|s| {
        s.borrow_mut().replace(Spending {
            steps_left: steps,
            refused: None,
        })
    });
    let _scope = Scope(outer);
    let result = check();
    let refused = SPENDING.with(|s| s.borrow_mut().as_mut().and_then(|s| s.refused.take()));
    match refused {
        Some(refusal) => Err(refusal),
        None => Ok(result),
    }
}

/// Whether the payload check on this thread was refused already (its patterns stop).
fn refused() -> bool {
    SPENDING.with(|s| s.borrow().as_ref().is_some_and(|s| s.refused.is_some()))
}

/// Refuse the payload check on this thread (the first reason stays).
fn refuse(refusal: PatternRefusal) {
    SPENDING.with(|s| {
        if let Some(spending) = s.borrow_mut().as_mut() {
            spending.refused.get_or_insert(refusal);
        }
    });
}

/// Charge `steps` to the payload check on this thread: `false` (and the payload refused) when
/// it has not that many left. Outside a payload check only the per-match budget applies.
fn charge(steps: u64, pattern: &str) -> bool {
    let enough = SPENDING.with(|s| match s.borrow_mut().as_mut() {
        Some(spending) if spending.steps_left >= steps => {
            spending.steps_left -= steps;
            true
        }
        Some(_) => false,
        None => true,
    });
    if !enough {
        refuse(PatternRefusal::PerPayload {
            pattern: pattern.to_string(),
        });
    }
    enough
}

/// `options` with [`BudgetedPattern`] as the `pattern` keyword, and the linear engine for every
/// other regex of the schema.
pub(crate) fn with_budgeted_patterns(options: ValidationOptions<'_>) -> ValidationOptions<'_> {
    options
        .with_keyword("pattern", compile_pattern)
        .with_pattern_options(PatternOptions::regex())
}

/// The limits of the attempts at one backtracking match, smallest first.
fn attempt_limits() -> impl Iterator<Item = u64> {
    std::iter::successors(Some(FIRST_ATTEMPT_STEPS), |steps| {
        (*steps < PATTERN_STEPS_PER_MATCH).then(|| (steps * 10).min(PATTERN_STEPS_PER_MATCH))
    })
}

/// The keyword factory: `pattern`'s value compiled once, for the engine it needs.
fn compile_pattern<'a>(
    _parent: &'a Map<String, Value>,
    value: &'a Value,
    _location: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let Some(source) = value.as_str() else {
        return Err(ValidationError::schema(format!(
            "pattern must be a string, got {value}"
        )));
    };
    let schema = serde_json::json!({ "pattern": source });
    let matcher = match jsonschema::options()
        .with_pattern_options(PatternOptions::regex())
        .build(&schema)
    {
        Ok(linear) => Matcher::Linear(linear),
        Err(_) => Matcher::Backtracking(
            attempt_limits()
                .map(|steps| {
                    jsonschema::options()
                        .with_pattern_options(
                            PatternOptions::fancy_regex()
                                .backtrack_limit(usize::try_from(steps).unwrap_or(usize::MAX)),
                        )
                        .build(&schema)
                        .map(|validator| (steps, validator))
                })
                .collect::<Result<_, _>>()
                .map_err(|e| ValidationError::schema(format!("pattern {source:?}: {e}")))?,
        ),
    };
    Ok(Box::new(BudgetedPattern {
        source: source.to_string(),
        matcher,
    }))
}

/// One `pattern` of a contract schema.
struct BudgetedPattern {
    /// The pattern as written.
    source: String,
    matcher: Matcher,
}

enum Matcher {
    /// Runs on the linear engine; never charged.
    Linear(Validator),
    /// Needs the backtracking engine: the same pattern under each attempt's step limit.
    Backtracking(Vec<(u64, Validator)>),
}

impl BudgetedPattern {
    /// Whether `text` matches, within the budgets (`false` once the payload is refused).
    fn matches(&self, text: &str) -> bool {
        if refused() {
            return false;
        }
        let subject = Value::String(text.to_string());
        let attempts = match &self.matcher {
            Matcher::Linear(validator) => return validator.is_valid(&subject),
            Matcher::Backtracking(attempts) => attempts,
        };
        for (steps, validator) in attempts {
            if !charge(*steps, &self.source) {
                return false;
            }
            match validator.validate(&subject) {
                Ok(()) => return true,
                Err(e) => match e.kind() {
                    ValidationErrorKind::BacktrackLimitExceeded { .. } => continue,
                    ValidationErrorKind::Pattern { .. } => return false,
                    _ => {
                        refuse(PatternRefusal::Engine {
                            pattern: self.source.clone(),
                            message: e.to_string(),
                        });
                        return false;
                    }
                },
            }
        }
        refuse(PatternRefusal::PerMatch {
            pattern: self.source.clone(),
        });
        false
    }
}

impl<'i> Keyword<'i> for BudgetedPattern {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        match instance.as_str() {
            Some(text) if !self.matches(text) => Err(ValidationError::custom(format!(
                "{instance} does not match {:?}",
                self.source
            ))),
            _ => Ok(()),
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        instance.as_str().is_none_or(|text| self.matches(text))
    }
}

/// Whether `source` is a valid pattern that only the backtracking engine runs.
fn needs_backtracking(source: &str) -> bool {
    let schema = serde_json::json!({ "pattern": source });
    jsonschema::options()
        .with_pattern_options(PatternOptions::regex())
        .build(&schema)
        .is_err()
        && jsonschema::options().build(&schema).is_ok()
}

/// The first `patternProperties` key of `schema` (at any depth) that only the backtracking
/// engine runs, if any: what a schema refused for it is told.
pub(crate) fn backtracking_pattern_property(schema: &Value) -> Option<String> {
    match schema {
        Value::Object(map) => map
            .get("patternProperties")
            .and_then(Value::as_object)
            .and_then(|patterns| patterns.keys().find(|k| needs_backtracking(k)).cloned())
            .or_else(|| map.values().find_map(backtracking_pattern_property)),
        Value::Array(items) => items.iter().find_map(backtracking_pattern_property),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_grow_tenfold_up_to_the_per_match_budget() {
        assert_eq!(
            attempt_limits().collect::<Vec<_>>(),
            vec![100, 1_000, 10_000, 100_000, 1_000_000]
        );
    }

    #[test]
    fn outside_a_payload_check_only_the_per_match_budget_applies() {
        assert!(charge(PATTERN_STEPS_PER_PAYLOAD * 2, "x"));
        assert_eq!(
            within_payload_budget(10, || charge(11, "^(a)\\1$")),
            Err(PatternRefusal::PerPayload {
                pattern: "^(a)\\1$".into()
            })
        );
        assert_eq!(within_payload_budget(10, || charge(10, "p")), Ok(true));
        assert!(!refused(), "the scope ends with the check");
    }
}
