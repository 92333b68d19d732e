//! Compatibility classifier for event contracts (`outbox contracts diff OLD NEW`).
//!
//! **Owns:** classifying the change between two JSON Schemas of *one* event type into
//! [`Compatibility::Identical`], [`Compatibility::Compatible`] or [`Compatibility::Breaking`],
//! with one [`SchemaChange`] (path + reason) per difference found.
//!
//! **Perspective.** Events are produced with NEW and consumed by handlers written against
//! OLD; stored events valid under OLD may be replayed to handlers written against NEW.
//! A change is *compatible* when every payload valid under OLD is still valid under NEW
//! **and** consumers of OLD still find every field they relied on. Widening (a wider type,
//! an added enum value, a dropped constraint) is therefore compatible, even though an OLD
//! consumer may then see a value it did not expect: that is the product's chosen trade-off.
//!
//! **Debatable rules chosen here:**
//! - required -> optional is *breaking* ("field is no longer required"): the schema got
//!   wider, but OLD consumers rely on the field's presence and NEW producers may now omit it.
//!   Removing any declared property is breaking for the same reason.
//! - An added optional property is compatible (the usual open-content-model convention),
//!   unless OLD constrained unknown properties through an `additionalProperties` schema
//!   (the new property is then compared against it) or `patternProperties` (cannot prove).
//! - A rename is reported as a breaking "removed field (renamed to X?)" when exactly one
//!   added sibling has an equivalent schema, plus the addition itself.
//! - Documentation keywords (`title`, `description`, `examples`, `$comment`, `default`,
//!   `deprecated`, `readOnly`, `writeOnly`, `$schema`, `$id`, `$anchor`, `x-*`) are ignored:
//!   changes to them report nothing. `$defs`/`definitions` are only compared where a
//!   `$ref` reaches them.
//! - Anything this module cannot decide (`oneOf`, `not`, `if`/`then`/`else`, a changed
//!   `pattern`, unknown keywords, malformed keywords, unresolvable `$ref`) is *breaking*
//!   with a reason starting "cannot prove compatible: ". So is a `$ref` chain that loops
//!   back on itself without reaching a schema. An unresolvable `$ref` left unchanged on both
//!   sides (e.g. the same remote URL) is treated as unchanged: the referenced document is
//!   not part of this diff. Recursive schemas (`$ref` cycles through `properties`/`items`)
//!   are compared once per pair of definitions.
//!
//! **Must never:** fetch remote `$ref`s (only `#`-pointers into the same document are
//! resolved), panic on any input (non-object schemas, `true`/`false`, wrong-typed keywords),
//! recurse without bound (schema depth is capped at [`MAX_DEPTH`], work at [`MAX_STEPS`],
//! and `$ref` cycles are cut), or report a change as compatible without proving it.
//!
//! **Layout:** this module holds the verdict types and [`diff_schemas`]; `differ` walks both
//! schemas in lock-step and records each change, `keywords` knows what each JSON Schema keyword
//! means for compatibility (tables and readers), `refs` resolves local `$ref`s.

mod differ;
mod keywords;
mod refs;
#[cfg(test)]
mod tests;

use serde::Serialize;
use serde_json::{Map, Value};

/// A schema object's keywords.
type Obj = Map<String, Value>;

/// Deepest schema nesting compared; deeper differences are reported as breaking.
pub const MAX_DEPTH: usize = 64;
/// Most sub-schema comparisons for one diff; past that the diff is reported as breaking.
pub const MAX_STEPS: usize = 100_000;
/// Path of the schema root in [`SchemaChange::path`].
pub const ROOT_PATH: &str = "payload";

/// How a change affects consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compatibility {
    /// No semantic difference (documentation-only changes included).
    Identical,
    /// Safe: every OLD payload stays valid and every relied-upon field stays.
    Compatible,
    /// Unsafe, or not provably safe.
    Breaking,
}

/// One difference found, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaChange {
    /// JSON path of the field, e.g. `payload.user.id` (root = `payload`); `[]` is an array
    /// element, `.*` an additional property, `[0]` a tuple item, `["a.b"]` an odd key.
    pub path: String,
    /// `compatible` or `breaking`.
    pub verdict: Compatibility,
    /// Human reason, e.g. "added optional field", "widened type integer -> number",
    /// "removed field", "field is newly required", "enum value removed: \"gold\"".
    pub reason: String,
}

/// The verdict on a whole change: the worst of its changes (Identical when none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaDiff {
    /// Worst verdict among `changes`, or `Identical` when there are none.
    pub verdict: Compatibility,
    /// Every difference found, in a deterministic order.
    pub changes: Vec<SchemaChange>,
}

/// Compare `old` and `new` (both JSON Schema documents as serde_json::Value).
pub fn diff_schemas(old: &Value, new: &Value) -> SchemaDiff {
    if old == new {
        return SchemaDiff {
            verdict: Compatibility::Identical,
            changes: Vec::new(),
        };
    }
    differ::Differ::new(old, new).run()
}

/// Worst verdict among `changes`; `Identical` when empty.
fn worst_of(changes: &[SchemaChange]) -> Compatibility {
    changes
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Compatibility::Identical)
}
