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

use serde::Serialize;
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::BTreeSet;

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
    let mut differ = Differ {
        old_root: old,
        new_root: new,
        active_refs: Vec::new(),
        steps: 0,
        exhausted: false,
        changes: Vec::new(),
    };
    differ.compare(old, new, ROOT_PATH, 0);
    if differ.exhausted {
        differ.breaking(ROOT_PATH, "too complex to compare");
    }
    SchemaDiff {
        verdict: worst_of(&differ.changes),
        changes: differ.changes,
    }
}

/// Keywords that never affect validation.
#[rustfmt::skip]
const ANNOTATIONS: &[&str] = &[
    "title", "description", "examples", "$comment", "default", "deprecated", "readOnly",
    "writeOnly", "$schema", "$id", "$anchor", "$defs", "definitions",
];

/// Ordering of two constraint values: `Less` = NEW is looser, `Greater` = tighter, `None` = unknown.
type Tightness = fn(&Value, &Value) -> Option<Ordering>;

/// Constraints that only ever restrict a value, with how to order two of their values.
#[rustfmt::skip]
const CONSTRAINTS: &[(&str, Tightness)] = &[
    ("minimum", lower), ("exclusiveMinimum", lower), ("maximum", upper),
    ("exclusiveMaximum", upper), ("minLength", lower), ("maxLength", upper),
    ("minItems", lower), ("maxItems", upper), ("minProperties", lower),
    ("maxProperties", upper), ("minContains", lower), ("maxContains", upper),
    ("multipleOf", multiple), ("pattern", unknown), ("format", unknown),
    ("contentEncoding", unknown), ("contentMediaType", unknown), ("uniqueItems", unknown),
];

/// Sub-schema keywords that are only checked for equivalence.
#[rustfmt::skip]
const OPAQUE_SCHEMAS: &[&str] = &[
    "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedProperties",
    "unevaluatedItems",
];

/// Keywords with a dedicated comparison below.
#[rustfmt::skip]
const HANDLED: &[&str] = &[
    "$ref", "type", "enum", "const", "required", "properties", "additionalProperties",
    "patternProperties", "items", "prefixItems", "additionalItems", "allOf", "anyOf", "oneOf",
];

/// Whether a keyword's value has the JSON shape it needs.
type ShapeCheck = fn(&Value) -> bool;

/// Keywords whose value must have a given JSON shape to be understood.
#[rustfmt::skip]
const SHAPES: &[(&str, ShapeCheck)] = &[
    ("properties", Value::is_object), ("patternProperties", Value::is_object),
    ("required", Value::is_array), ("enum", Value::is_array), ("allOf", Value::is_array),
    ("anyOf", Value::is_array), ("oneOf", Value::is_array), ("prefixItems", Value::is_array),
];

/// JSON Schema's primitive type names.
const TYPES: &[&str] = &[
    "null", "boolean", "object", "array", "number", "string", "integer",
];

/// The `true` schema, standing in for an absent sub-schema.
static TRUE: Value = Value::Bool(true);

/// Walks both schemas in lock-step, collecting changes.
struct Differ<'a> {
    /// Document that OLD `$ref`s resolve against.
    old_root: &'a Value,
    /// Document that NEW `$ref`s resolve against.
    new_root: &'a Value,
    /// `(old, new)` ref targets currently being compared: revisiting one is a cycle.
    active_refs: Vec<(usize, usize)>,
    /// Comparisons made so far.
    steps: usize,
    /// Whether [`MAX_STEPS`] was passed (the diff then ends as breaking).
    exhausted: bool,
    /// Changes found so far.
    changes: Vec<SchemaChange>,
}

impl Differ<'_> {
    /// Records one change.
    fn push(&mut self, path: &str, verdict: Compatibility, reason: impl Into<String>) {
        let reason = reason.into();
        self.changes.push(SchemaChange {
            path: path.to_string(),
            verdict,
            reason,
        });
    }

    /// Records a compatible change.
    fn compatible(&mut self, path: &str, reason: impl Into<String>) {
        self.push(path, Compatibility::Compatible, reason);
    }

    /// Records a breaking change.
    fn breaking(&mut self, path: &str, reason: impl Into<String>) {
        self.push(path, Compatibility::Breaking, reason);
    }

    /// The verdict of comparing two sub-schemas, without recording their changes.
    fn worst(&mut self, old: &Value, new: &Value, depth: usize) -> Compatibility {
        let saved = std::mem::take(&mut self.changes);
        self.compare(old, new, ROOT_PATH, depth);
        let verdict = if self.exhausted {
            Compatibility::Breaking
        } else {
            worst_of(&self.changes)
        };
        self.changes = saved;
        verdict
    }

    /// Compares two sub-schemas found at `path`, `depth` levels below the root.
    fn compare(&mut self, old: &Value, new: &Value, path: &str, depth: usize) {
        if old == new && !contains_ref(old) {
            return; // Equal and self-contained: nothing can differ underneath.
        }
        if depth > MAX_DEPTH {
            return self.breaking(path, "too deep to compare");
        }
        self.steps += 1;
        self.exhausted |= self.steps > MAX_STEPS;
        if self.exhausted {
            return;
        }
        if has_ref(old) || has_ref(new) {
            return self.compare_refs(old, new, path, depth);
        }
        let empty = Map::new();
        match (as_schema(old, &empty), as_schema(new, &empty)) {
            (Some(o), Some(n)) => self.compare_maps(o, n, path, depth),
            _ if old == new => {}
            (Some(_), None) if *new == Value::Bool(false) => {
                self.breaking(path, "schema now rejects every value (false)");
            }
            (None, Some(_)) if *old == Value::Bool(false) => {
                self.compatible(path, "old schema accepted no value (false)");
            }
            _ => self.breaking(path, "cannot prove compatible: not a JSON Schema"),
        }
    }

    /// Compares through `$ref`s (local only), cutting cycles.
    fn compare_refs(&mut self, old: &Value, new: &Value, path: &str, depth: usize) {
        let (old_root, new_root) = (self.old_root, self.new_root);
        let ((ot, osib), (nt, nsib)) = match (split_ref(old_root, old), split_ref(new_root, new)) {
            (Ok(o), Ok(n)) => (o, n),
            (Err(_), Err(_))
                if old.get("$ref") == new.get("$ref") && validating(old) == validating(new) =>
            {
                return
            }
            (Err(e), _) | (_, Err(e)) => {
                return self.breaking(path, format!("cannot prove compatible: {e}"));
            }
        };
        let key = (ot as *const Value as usize, nt as *const Value as usize);
        if !self.active_refs.contains(&key) {
            self.active_refs.push(key);
            self.compare(ot, nt, path, depth + 1);
            self.active_refs.pop();
        }
        if osib.is_some() || nsib.is_some() {
            let (os, ns) = (
                osib.as_ref().unwrap_or(&TRUE),
                nsib.as_ref().unwrap_or(&TRUE),
            );
            self.compare(os, ns, path, depth + 1);
        }
    }

    /// Compares two object schemas keyword by keyword.
    fn compare_maps(&mut self, o: &Obj, n: &Obj, path: &str, depth: usize) {
        for (kw, ok) in SHAPES {
            let (a, b) = (o.get(*kw), n.get(*kw));
            if a.into_iter().chain(b).any(|v| !ok(v)) && a != b {
                self.breaking(path, format!("cannot prove compatible: malformed `{kw}`"));
            }
        }
        self.compare_type(o.get("type"), n.get("type"), path);
        self.compare_allowed_values(o, n, path);
        self.compare_constraints(o, n, path);
        self.compare_properties(o, n, path, depth);
        self.compare_items(o, n, path, depth);
        self.compare_combinators(o, n, path, depth);
        let new_only = n.keys().filter(|k| !o.contains_key(*k));
        for kw in o.keys().chain(new_only) {
            let known = HANDLED.contains(&kw.as_str())
                || CONSTRAINTS.iter().any(|(c, _)| c == kw)
                || is_annotation(kw);
            let same = match (o.get(kw), n.get(kw)) {
                _ if known => true,
                (Some(a), Some(b)) if OPAQUE_SCHEMAS.contains(&kw.as_str()) => {
                    self.worst(a, b, depth + 1) == Compatibility::Identical
                }
                (a, b) => a == b,
            };
            if !same {
                self.breaking(path, format!("cannot prove compatible: `{kw}` changed"));
            }
        }
    }

    /// `type`: widening is compatible, narrowing or retyping is breaking.
    fn compare_type(&mut self, old: Option<&Value>, new: Option<&Value>, path: &str) {
        if old == new {
            return;
        }
        let (Some(os), Some(ns)) = (type_set(old), type_set(new)) else {
            return self.breaking(path, "cannot prove compatible: unrecognised `type`");
        };
        let covers = |set: &BTreeSet<&str>, t: &str| {
            set.contains(t) || (t == "integer" && set.contains("number"))
        };
        let shown = format!("{} -> {}", show_type(old), show_type(new));
        let widened = os.iter().all(|t| covers(&ns, t));
        let narrowed = ns.iter().all(|t| covers(&os, t));
        match (widened, narrowed) {
            (true, true) => {}
            (true, false) => self.compatible(path, format!("widened type {shown}")),
            (false, true) => self.breaking(path, format!("narrowed type {shown}")),
            (false, false) => self.breaking(path, format!("type changed {shown}")),
        }
    }

    /// `enum` / `const`: gaining values is compatible, losing one is breaking.
    fn compare_allowed_values(&mut self, o: &Obj, n: &Obj, path: &str) {
        match (allowed_values(o), allowed_values(n)) {
            (None, None) => {}
            (Some(_), None) => self.compatible(path, "removed enum/const restriction"),
            (None, Some(_)) => self.breaking(path, "added enum/const restriction"),
            (Some(old), Some(new)) => {
                for v in old.iter().filter(|v| !new.contains(v)) {
                    self.breaking(path, format!("enum value removed: {v}"));
                }
                for v in new.iter().filter(|v| !old.contains(v)) {
                    self.compatible(path, format!("enum value added: {v}"));
                }
            }
        }
    }

    /// Keywords that only restrict: dropping one relaxes, adding one tightens.
    fn compare_constraints(&mut self, o: &Obj, n: &Obj, path: &str) {
        for (kw, tightness) in CONSTRAINTS {
            let (a, b) = match (constraint(o, kw), constraint(n, kw)) {
                (Some(a), Some(b)) if a != b => (a, b),
                (Some(_), None) => {
                    self.compatible(path, format!("removed constraint {kw}"));
                    continue;
                }
                (None, Some(b)) => {
                    self.breaking(path, format!("added constraint {kw} {b}"));
                    continue;
                }
                _ => continue,
            };
            match tightness(a, b) {
                Some(Ordering::Equal) => {}
                Some(Ordering::Less) => self.compatible(path, format!("relaxed {kw} {a} -> {b}")),
                Some(Ordering::Greater) => {
                    self.breaking(path, format!("tightened {kw} {a} -> {b}"))
                }
                None => self.breaking(
                    path,
                    format!("cannot prove compatible: {kw} changed {a} -> {b}"),
                ),
            }
        }
    }

    /// `properties`, `required`, `additionalProperties` and `patternProperties`.
    fn compare_properties(&mut self, o: &Obj, n: &Obj, path: &str, depth: usize) {
        let empty = Map::new();
        let (op, np) = (
            object_kw(o, "properties", &empty),
            object_kw(n, "properties", &empty),
        );
        let (oreq, nreq) = (names(o, "required"), names(n, "required"));
        let added: Vec<&String> = np.keys().filter(|k| !op.contains_key(*k)).collect();
        for (key, os) in op {
            let child = child_path(path, key);
            if let Some(ns) = np.get(key) {
                self.compare(os, ns, &child, depth + 1);
                continue;
            }
            let mut twins = Vec::new();
            for candidate in &added {
                if let Some(ns) = np.get(*candidate) {
                    if self.worst(os, ns, depth + 1) == Compatibility::Identical {
                        twins.push(*candidate);
                    }
                }
            }
            match twins.as_slice() {
                [twin] => self.breaking(&child, format!("removed field (renamed to {twin}?)")),
                _ => self.breaking(&child, "removed field"),
            }
        }
        let old_patterns = object_kw(o, "patternProperties", &empty);
        for key in &added {
            let child = child_path(path, key);
            if nreq.contains(key.as_str()) && !oreq.contains(key.as_str()) {
                self.breaking(&child, "added field; field is newly required");
            } else if !old_patterns.is_empty() {
                self.breaking(
                    &child,
                    "cannot prove compatible: added field may match patternProperties",
                );
            } else {
                let label = if nreq.contains(key.as_str()) {
                    "added field"
                } else {
                    "added optional field"
                };
                self.compatible(&child, label);
                if let (Some(ap @ Value::Object(_)), Some(ns)) =
                    (o.get("additionalProperties"), np.get(*key))
                {
                    self.compare(ap, ns, &child, depth + 1);
                }
            }
        }
        for name in nreq.difference(&oreq) {
            if op.contains_key(*name) || !np.contains_key(*name) {
                self.breaking(&child_path(path, name), "field is newly required");
            }
        }
        for name in oreq.difference(&nreq) {
            if np.contains_key(*name) || !op.contains_key(*name) {
                let reason = "field is no longer required (old consumers rely on its presence)";
                self.breaking(&child_path(path, name), reason);
            }
        }
        let child = format!("{path}.*");
        let (oap, nap) = (o.get("additionalProperties"), n.get("additionalProperties"));
        self.compare_additional("additionalProperties", oap, nap, &child, depth);
        let new_patterns = object_kw(n, "patternProperties", &empty);
        for (pattern, os) in old_patterns {
            let child = format!("{path}[/{pattern}/]");
            match new_patterns.get(pattern) {
                Some(ns) => self.compare(os, ns, &child, depth + 1),
                None => self.compatible(&child, "removed patternProperties"),
            }
        }
        for pattern in new_patterns
            .keys()
            .filter(|p| !old_patterns.contains_key(*p))
        {
            let reason = format!("cannot prove compatible: added patternProperties /{pattern}/");
            self.breaking(path, reason);
        }
    }

    /// `additionalProperties` / `items`-like keywords, where absent means `true`.
    fn compare_additional(
        &mut self,
        kw: &str,
        old: Option<&Value>,
        new: Option<&Value>,
        path: &str,
        depth: usize,
    ) {
        let closed = |v: Option<&Value>| v == Some(&Value::Bool(false));
        let shown = |v: Option<&Value>| match v {
            None | Some(Value::Bool(true)) => "true".to_string(),
            Some(Value::Object(_)) => "schema".to_string(),
            Some(v) => v.to_string(),
        };
        match (closed(old), closed(new)) {
            (true, true) => {}
            (false, true) => self.breaking(path, format!("{kw} {} -> false", shown(old))),
            (true, false) => self.compatible(path, format!("{kw} false -> {}", shown(new))),
            (false, false) => {
                self.compare(old.unwrap_or(&TRUE), new.unwrap_or(&TRUE), path, depth + 1);
            }
        }
    }

    /// `items`, `prefixItems` and `additionalItems`.
    fn compare_items(&mut self, o: &Obj, n: &Obj, path: &str, depth: usize) {
        match (tuple(o), tuple(n)) {
            (None, None) => {}
            (Some(a), Some(b)) if a.len() == b.len() => {
                for (i, (os, ns)) in a.iter().zip(b).enumerate() {
                    self.compare(os, ns, &format!("{path}[{i}]"), depth + 1);
                }
            }
            _ => self.breaking(path, "cannot prove compatible: tuple items changed"),
        }
        self.compare_additional("items", rest(o), rest(n), &format!("{path}[]"), depth);
    }

    /// `allOf` pairwise; `anyOf` when every old branch survives; `oneOf` only if unchanged.
    fn compare_combinators(&mut self, o: &Obj, n: &Obj, path: &str, depth: usize) {
        for kw in ["allOf", "anyOf", "oneOf"] {
            let (old, new) = match (
                o.get(kw).and_then(Value::as_array),
                n.get(kw).and_then(Value::as_array),
            ) {
                (None, None) => continue,
                (Some(a), Some(b)) => (a, b),
                (Some(_), None) => {
                    self.breaking(path, format!("cannot prove compatible: {kw} removed"));
                    continue;
                }
                (None, Some(_)) => {
                    self.breaking(path, format!("cannot prove compatible: {kw} added"));
                    continue;
                }
            };
            if kw == "allOf" && old.len() == new.len() {
                // Branches describe the same instance: report inside them at this path.
                for (os, ns) in old.iter().zip(new) {
                    self.compare(os, ns, path, depth + 1);
                }
                continue;
            }
            let mut same = old.len() == new.len();
            for (os, ns) in old.iter().zip(new) {
                same = same && self.worst(os, ns, depth + 1) == Compatibility::Identical;
            }
            if same {
                continue;
            }
            if kw == "anyOf" && self.every_branch_kept(old, new, depth) {
                self.compatible(path, "anyOf still accepts every old alternative");
            } else {
                self.breaking(path, format!("cannot prove compatible: {kw} changed"));
            }
        }
    }

    /// True when each OLD alternative is compatibly matched by some NEW alternative.
    fn every_branch_kept(&mut self, old: &[Value], new: &[Value], depth: usize) -> bool {
        for os in old {
            let mut kept = false;
            for ns in new {
                if self.worst(os, ns, depth + 1) <= Compatibility::Compatible {
                    kept = true;
                    break;
                }
            }
            if !kept {
                return false;
            }
        }
        true
    }
}

/// A constraint keyword's value, treating `uniqueItems: false` as absent.
fn constraint<'v>(m: &'v Obj, kw: &str) -> Option<&'v Value> {
    m.get(kw)
        .filter(|v| !(kw == "uniqueItems" && **v == Value::Bool(false)))
}

/// Positional item schemas: `prefixItems`, or an array-valued `items` (drafts 4-2019).
fn tuple(m: &Obj) -> Option<&Vec<Value>> {
    m.get("prefixItems")
        .or_else(|| m.get("items"))
        .and_then(Value::as_array)
}

/// Schema for items past the tuple: `items`, or `additionalItems` after an `items` array.
fn rest(m: &Obj) -> Option<&Value> {
    match m.get("items") {
        Some(Value::Array(_)) => m.get("additionalItems"),
        items => items,
    }
}

/// Worst verdict among `changes`; `Identical` when empty.
fn worst_of(changes: &[SchemaChange]) -> Compatibility {
    changes
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Compatibility::Identical)
}

/// Keywords that document but never validate.
fn is_annotation(kw: &str) -> bool {
    ANNOTATIONS.contains(&kw) || kw.starts_with("x-")
}

/// An object schema's keywords, with `true` as the empty object; `None` otherwise.
fn as_schema<'v>(v: &'v Value, empty: &'v Obj) -> Option<&'v Obj> {
    match v {
        Value::Object(m) => Some(m),
        Value::Bool(true) => Some(empty),
        _ => None,
    }
}

/// Whether `v` is an object with a `$ref` keyword.
fn has_ref(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key("$ref"))
}

/// Whether any object inside `v` has a `$ref` key (iterative: no recursion).
fn contains_ref(v: &Value) -> bool {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) if m.contains_key("$ref") => return true,
            Value::Object(m) => stack.extend(m.values()),
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    false
}

/// Splits `{"$ref": R, ...}` into R's target in `root` and its other validating keywords.
fn split_ref<'x>(root: &'x Value, node: &'x Value) -> Result<(&'x Value, Option<Value>), String> {
    let Some(reference) = node.get("$ref") else {
        return Ok((node, None));
    };
    let Some(reference) = reference.as_str() else {
        return Err("malformed $ref".to_string());
    };
    let target = resolve(root, reference).ok_or_else(|| {
        format!("unresolvable $ref {reference:?} (only local #/ pointers are followed)")
    })?;
    // A chain of `$ref`s that comes back to itself never reaches a schema.
    let mut seen = vec![node];
    let mut hop = target;
    while let Some(next) = hop.get("$ref").and_then(Value::as_str) {
        if seen.iter().any(|s| std::ptr::eq(*s, hop)) || seen.len() > MAX_DEPTH {
            return Err(format!("$ref {reference:?} is a cycle of references"));
        }
        seen.push(hop);
        let Some(next) = resolve(root, next) else {
            break;
        };
        hop = next;
    }
    let rest = validating(node);
    Ok((target, (!rest.is_empty()).then_some(Value::Object(rest))))
}

/// Resolves a same-document `#` / `#/json/pointer` reference.
fn resolve<'r>(root: &'r Value, reference: &str) -> Option<&'r Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() || pointer.starts_with('/') {
        root.pointer(pointer)
    } else {
        None
    }
}

/// A schema's own validating keywords besides `$ref` (annotations dropped).
fn validating(node: &Value) -> Obj {
    let map = node.as_object().into_iter().flatten();
    map.filter(|(k, _)| *k != "$ref" && !is_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Types allowed by a `type` keyword (absent = all); `None` when it is not understood.
fn type_set<'v>(v: Option<&'v Value>) -> Option<BTreeSet<&'v str>> {
    let known = |t: &'v Value| t.as_str().filter(|t| TYPES.contains(t));
    match v {
        None => Some(TYPES.iter().copied().collect()),
        Some(Value::Array(list)) => list.iter().map(known).collect(),
        Some(t) => known(t).map(|t| BTreeSet::from([t])),
    }
}

/// `type` as shown in reasons: `string`, `[string, null]`, or `any` when absent.
fn show_type(v: Option<&Value>) -> String {
    match v {
        None => "any".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(list)) => {
            let names: Vec<String> = list.iter().map(|t| show_type(Some(t))).collect();
            format!("[{}]", names.join(", "))
        }
        Some(other) => other.to_string(),
    }
}

/// Values allowed by `enum` and/or `const`; `None` when unrestricted.
fn allowed_values(m: &Obj) -> Option<Vec<&Value>> {
    let list = m.get("enum").and_then(Value::as_array);
    match (list, m.get("const")) {
        (None, None) => None,
        (Some(list), None) => Some(list.iter().collect()),
        (None, Some(c)) => Some(vec![c]),
        (Some(list), Some(c)) => Some(list.iter().filter(|v| *v == c).collect()),
    }
}

/// An object-valued keyword, or `empty`.
fn object_kw<'v>(m: &'v Obj, kw: &str, empty: &'v Obj) -> &'v Obj {
    m.get(kw).and_then(Value::as_object).unwrap_or(empty)
}

/// The strings of an array-valued keyword such as `required`.
fn names<'v>(m: &'v Obj, kw: &str) -> BTreeSet<&'v str> {
    let list = m
        .get(kw)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    list.iter().filter_map(Value::as_str).collect()
}

/// `payload.key`, or `payload["odd key"]` for keys that are not plain identifiers.
fn child_path(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", Value::from(key))
    }
}

/// Lower bound: NEW is tighter when larger.
fn lower(old: &Value, new: &Value) -> Option<Ordering> {
    new.as_f64()?.partial_cmp(&old.as_f64()?)
}

/// Upper bound: NEW is tighter when smaller.
fn upper(old: &Value, new: &Value) -> Option<Ordering> {
    old.as_f64()?.partial_cmp(&new.as_f64()?)
}

/// `multipleOf`: looser when the new divisor divides the old one.
fn multiple(old: &Value, new: &Value) -> Option<Ordering> {
    let ratio = old.as_f64()? / new.as_f64()?;
    (ratio.is_finite() && ratio >= 1.0 && (ratio - ratio.round()).abs() < 1e-9)
        .then_some(Ordering::Less)
}

/// Constraints whose values cannot be ordered (regexes, formats, ...).
fn unknown(_: &Value, _: &Value) -> Option<Ordering> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use Compatibility::{Breaking, Compatible, Identical};

    fn obj(props: Value, required: Value) -> Value {
        json!({"type": "object", "properties": props, "required": required})
    }

    /// Builds `{"properties": {"a": {"properties": {"a": ... leaf}}}}`, `levels` deep.
    fn nested(levels: usize, leaf: Value) -> Value {
        (0..levels).fold(
            leaf,
            |inner, _| json!({"type": "object", "properties": {"a": inner}}),
        )
    }

    /// (name, old, new, verdict, path, reason substring); path/reason unchecked when verdict is Identical.
    fn cases() -> Vec<(
        &'static str,
        Value,
        Value,
        Compatibility,
        &'static str,
        &'static str,
    )> {
        let id = json!({"type": "string"});
        let tree = |leaf: &str| {
            json!({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
                "value": {"type": leaf}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}})
        };
        vec![
            (
                "identical",
                obj(json!({"id": id}), json!(["id"])),
                obj(json!({"id": id}), json!(["id"])),
                Identical,
                "",
                "",
            ),
            (
                "docs only",
                json!({"type": "string", "description": "a", "title": "t"}),
                json!({"type": "string", "description": "b", "examples": ["x"], "$comment": "c", "x-owner": "team"}),
                Identical,
                "",
                "",
            ),
            (
                "added optional",
                obj(json!({"id": id}), json!(["id"])),
                obj(json!({"id": id, "note": {"type": "string"}}), json!(["id"])),
                Compatible,
                "payload.note",
                "added optional field",
            ),
            (
                "added required",
                obj(json!({"id": id}), json!(["id"])),
                obj(
                    json!({"id": id, "tier": {"type": "string"}}),
                    json!(["id", "tier"]),
                ),
                Breaking,
                "payload.tier",
                "field is newly required",
            ),
            (
                "optional -> required",
                obj(json!({"id": id, "n": id}), json!(["id"])),
                obj(json!({"id": id, "n": id}), json!(["id", "n"])),
                Breaking,
                "payload.n",
                "field is newly required",
            ),
            (
                "required -> optional",
                obj(json!({"id": id, "n": id}), json!(["id", "n"])),
                obj(json!({"id": id, "n": id}), json!(["id"])),
                Breaking,
                "payload.n",
                "no longer required",
            ),
            (
                "removed field",
                obj(json!({"id": id, "n": id}), json!([])),
                obj(json!({"id": id}), json!([])),
                Breaking,
                "payload.n",
                "removed field",
            ),
            (
                "rename",
                obj(json!({"user_id": {"type": "integer"}, "n": id}), json!([])),
                obj(
                    json!({"customer_id": {"type": "integer", "description": "x"}, "n": id}),
                    json!([]),
                ),
                Breaking,
                "payload.user_id",
                "renamed to customer_id?",
            ),
            (
                "integer -> number",
                json!({"type": "integer"}),
                json!({"type": "number"}),
                Compatible,
                "payload",
                "widened type integer -> number",
            ),
            (
                "nullable",
                json!({"type": "string"}),
                json!({"type": ["string", "null"]}),
                Compatible,
                "payload",
                "widened type string -> [string, null]",
            ),
            (
                "retype",
                json!({"type": "string"}),
                json!({"type": "integer"}),
                Breaking,
                "payload",
                "type changed string -> integer",
            ),
            (
                "number -> integer",
                json!({"type": "number"}),
                json!({"type": "integer"}),
                Breaking,
                "payload",
                "narrowed type number -> integer",
            ),
            (
                "type dropped",
                json!({"type": "string"}),
                json!({}),
                Compatible,
                "payload",
                "widened type string -> any",
            ),
            (
                "enum gains",
                json!({"enum": ["gold"]}),
                json!({"enum": ["gold", "silver"]}),
                Compatible,
                "payload",
                "enum value added: \"silver\"",
            ),
            (
                "enum loses",
                json!({"enum": ["gold", "silver"]}),
                json!({"enum": ["silver"]}),
                Breaking,
                "payload",
                "enum value removed: \"gold\"",
            ),
            (
                "const changed",
                json!({"const": 1}),
                json!({"const": 2}),
                Breaking,
                "payload",
                "enum value removed: 1",
            ),
            (
                "format removed",
                json!({"type": "string", "format": "email"}),
                json!({"type": "string"}),
                Compatible,
                "payload",
                "removed constraint format",
            ),
            (
                "maxLength added",
                json!({"type": "string"}),
                json!({"type": "string", "maxLength": 5}),
                Breaking,
                "payload",
                "added constraint maxLength 5",
            ),
            (
                "tighter maximum",
                json!({"maximum": 100}),
                json!({"maximum": 50}),
                Breaking,
                "payload",
                "tightened maximum 100 -> 50",
            ),
            (
                "looser minLength",
                json!({"minLength": 3}),
                json!({"minLength": 1}),
                Compatible,
                "payload",
                "relaxed minLength 3 -> 1",
            ),
            (
                "multipleOf divisor",
                json!({"multipleOf": 4}),
                json!({"multipleOf": 2}),
                Compatible,
                "payload",
                "relaxed multipleOf",
            ),
            (
                "pattern changed",
                json!({"pattern": "^a"}),
                json!({"pattern": "^b"}),
                Breaking,
                "payload",
                "cannot prove compatible: pattern changed",
            ),
            (
                "uniqueItems added",
                json!({"type": "array"}),
                json!({"type": "array", "uniqueItems": true}),
                Breaking,
                "payload",
                "added constraint uniqueItems",
            ),
            (
                "closed",
                json!({"type": "object"}),
                json!({"type": "object", "additionalProperties": false}),
                Breaking,
                "payload.*",
                "additionalProperties true -> false",
            ),
            (
                "opened",
                json!({"additionalProperties": false}),
                json!({}),
                Compatible,
                "payload.*",
                "additionalProperties false -> true",
            ),
            (
                "additionalProperties schema vs added field",
                json!({"additionalProperties": {"type": "string"}}),
                json!({"additionalProperties": {"type": "string"}, "properties": {"n": {"type": "integer"}}}),
                Breaking,
                "payload.n",
                "type changed string -> integer",
            ),
            (
                "nested",
                obj(
                    json!({"user": obj(json!({"id": id}), json!(["id"]))}),
                    json!(["user"]),
                ),
                obj(
                    json!({"user": obj(json!({"id": {"type": "integer"}}), json!(["id"]))}),
                    json!(["user"]),
                ),
                Breaking,
                "payload.user.id",
                "type changed",
            ),
            (
                "array items",
                json!({"properties": {"tags": {"type": "array", "items": {"type": "string"}}}}),
                json!({"properties": {"tags": {"type": "array", "items": {"type": "integer"}}}}),
                Breaking,
                "payload.tags[]",
                "type changed",
            ),
            (
                "odd key",
                json!({"properties": {"a.b": {"type": "string"}}}),
                json!({"properties": {}}),
                Breaking,
                "payload[\"a.b\"]",
                "removed field",
            ),
            (
                "$defs ref",
                json!({"properties": {"m": {"$ref": "#/$defs/money"}}, "$defs": {"money": {"type": "integer"}}}),
                json!({"properties": {"m": {"$ref": "#/$defs/money"}}, "$defs": {"money": {"type": "string"}}}),
                Breaking,
                "payload.m",
                "type changed integer -> string",
            ),
            (
                "definitions docs only",
                json!({"$ref": "#/definitions/a", "definitions": {"a": {"type": "string"}}}),
                json!({"$ref": "#/definitions/a", "definitions": {"a": {"type": "string", "description": "d"}}}),
                Identical,
                "",
                "",
            ),
            (
                "ref inlined",
                json!({"$ref": "#/$defs/a", "$defs": {"a": {"type": "integer"}}}),
                json!({"type": "number"}),
                Compatible,
                "payload",
                "widened type integer -> number",
            ),
            (
                "recursive ref docs",
                tree("string"),
                {
                    let mut t = tree("string");
                    t["title"] = json!("Tree");
                    t
                },
                Identical,
                "",
                "",
            ),
            (
                "recursive ref change",
                tree("string"),
                tree("integer"),
                Breaking,
                "payload.value",
                "type changed string -> integer",
            ),
            (
                "ref target deleted",
                json!({"$ref": "#/$defs/a", "$defs": {"a": {}}}),
                json!({"$ref": "#/$defs/a"}),
                Breaking,
                "payload",
                "cannot prove compatible: unresolvable $ref",
            ),
            (
                "remote ref",
                json!({"$ref": "https://example.com/a.json"}),
                json!({"$ref": "https://example.com/b.json"}),
                Breaking,
                "payload",
                "cannot prove compatible: unresolvable $ref",
            ),
            (
                "oneOf changed",
                json!({"oneOf": [{"type": "string"}]}),
                json!({"oneOf": [{"type": "string"}, {"type": "null"}]}),
                Breaking,
                "payload",
                "cannot prove compatible: oneOf changed",
            ),
            (
                "oneOf docs only",
                json!({"oneOf": [{"type": "string"}]}),
                json!({"oneOf": [{"type": "string", "title": "s"}]}),
                Identical,
                "",
                "",
            ),
            (
                "anyOf gains",
                json!({"anyOf": [{"type": "string"}]}),
                json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
                Compatible,
                "payload",
                "anyOf still accepts every old alternative",
            ),
            (
                "anyOf loses",
                json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
                json!({"anyOf": [{"type": "string"}]}),
                Breaking,
                "payload",
                "cannot prove compatible: anyOf changed",
            ),
            (
                "allOf member",
                json!({"allOf": [{"properties": {"id": id}}]}),
                json!({"allOf": [{"properties": {}}]}),
                Breaking,
                "payload.id",
                "removed field",
            ),
            (
                "not added",
                json!({"type": "string"}),
                json!({"type": "string", "not": {"const": ""}}),
                Breaking,
                "payload",
                "cannot prove compatible: `not` changed",
            ),
            (
                "if/then changed",
                json!({"if": {"required": ["a"]}, "then": {"required": ["b"]}}),
                json!({"if": {"required": ["a"]}, "then": {"required": ["c"]}}),
                Breaking,
                "payload",
                "cannot prove compatible: `then` changed",
            ),
            (
                "unknown keyword",
                json!({"nullable": false}),
                json!({"nullable": true}),
                Breaking,
                "payload",
                "cannot prove compatible: `nullable` changed",
            ),
            (
                "true -> false",
                json!(true),
                json!(false),
                Breaking,
                "payload",
                "rejects every value",
            ),
            (
                "false -> schema",
                json!(false),
                json!({"type": "string"}),
                Compatible,
                "payload",
                "accepted no value",
            ),
            (
                "not a schema",
                json!(42),
                json!("x"),
                Breaking,
                "payload",
                "not a JSON Schema",
            ),
            (
                "malformed keyword",
                json!({"required": ["a"]}),
                json!({"required": "a"}),
                Breaking,
                "payload",
                "malformed `required`",
            ),
            (
                "weird type",
                json!({"type": "string"}),
                json!({"type": "text"}),
                Breaking,
                "payload",
                "unrecognised `type`",
            ),
            (
                "tuple",
                json!({"items": [{"type": "string"}]}),
                json!({"items": [{"type": "integer"}]}),
                Breaking,
                "payload[0]",
                "type changed",
            ),
            (
                "too deep",
                nested(100, json!({"type": "string"})),
                nested(100, json!({"type": "integer"})),
                Breaking,
                "",
                "too deep to compare",
            ),
        ]
    }

    #[test]
    fn table() {
        let cases = cases();
        assert!(cases.len() >= 25);
        for (name, old, new, verdict, path, reason) in cases {
            let diff = diff_schemas(&old, &new);
            assert_eq!(diff.verdict, verdict, "{name}: {diff:#?}");
            if verdict == Identical {
                assert!(diff.changes.is_empty(), "{name}: {diff:#?}");
            } else {
                let hit = diff.changes.iter().any(|c| {
                    c.verdict == verdict
                        && c.reason.contains(reason)
                        && (path.is_empty() || c.path == path)
                });
                assert!(
                    hit,
                    "{name}: no {verdict:?} change at {path:?} with {reason:?} in {diff:#?}"
                );
            }
        }
    }

    #[test]
    fn a_schema_is_identical_to_itself_and_to_a_redocumented_copy() {
        for (name, old, new, ..) in cases() {
            for schema in [old, new] {
                assert_eq!(diff_schemas(&schema, &schema).verdict, Identical, "{name}");
                if let Value::Object(mut map) = schema.clone() {
                    map.insert("description".into(), json!("changed docs"));
                    let diff = diff_schemas(&schema, &Value::Object(map));
                    assert_eq!(diff.verdict, Identical, "{name}: {diff:#?}");
                }
            }
        }
    }

    #[test]
    fn never_panics_on_odd_inputs() {
        let odd = [
            json!(null),
            json!(1),
            json!("s"),
            json!([]),
            json!([true]),
            json!(true),
            json!(false),
            json!({}),
            json!({"type": 5}),
            json!({"type": []}),
            json!({"properties": []}),
            json!({"properties": {"a": 1}}),
            json!({"required": "x"}),
            json!({"required": [1, "a"]}),
            json!({"$ref": 5}),
            json!({"$ref": "#/a~"}),
            json!({"$ref": "#"}),
            json!({"$ref": "#x"}),
            json!({"$ref": "#", "minimum": 1}),
            json!({"items": [1, 2]}),
            json!({"items": false, "additionalItems": 3}),
            json!({"enum": 3}),
            json!({"const": null}),
            json!({"minimum": "x", "multipleOf": 0}),
            json!({"multipleOf": 0.1}),
            json!({"anyOf": {}}),
            json!({"oneOf": [1]}),
            json!({"additionalProperties": 7}),
            json!({"patternProperties": {"(": 1}}),
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        ];
        for (i, a) in odd.iter().enumerate() {
            for (j, b) in odd.iter().enumerate() {
                let diff = diff_schemas(a, b);
                assert_eq!(diff.verdict, worst_of(&diff.changes), "{a} vs {b}");
                if i == j {
                    assert_eq!(diff.verdict, Identical, "{a}: {diff:#?}");
                }
                if a.is_object() != b.is_object() && !a.is_boolean() && !b.is_boolean() {
                    assert_eq!(diff.verdict, Breaking, "{a} vs {b}: {diff:#?}");
                }
            }
        }
    }

    #[test]
    fn verdict_is_worst_change_and_serializes_snake_case() -> Result<(), serde_json::Error> {
        let old = obj(
            json!({"a": {"type": "integer"}, "b": {"type": "string"}}),
            json!([]),
        );
        let new = obj(json!({"a": {"type": "number"}}), json!([]));
        let diff = diff_schemas(&old, &new);
        assert_eq!(diff.verdict, Breaking);
        assert_eq!(diff.changes.len(), 2, "{diff:#?}");
        let out = serde_json::to_value(&diff)?;
        assert_eq!(out["verdict"], "breaking");
        assert_eq!(out["changes"][0]["verdict"], "compatible");
        assert_eq!(out["changes"][0]["path"], "payload.a");
        Ok(())
    }

    #[test]
    fn huge_fan_out_is_bounded() {
        let branches: Vec<Value> = (0..400)
            .map(|i| json!({"properties": {format!("f{i}"): {"type": "string"}}}))
            .collect();
        let mut shuffled = branches.clone();
        shuffled.reverse();
        let diff = diff_schemas(
            &json!({"anyOf": branches}),
            &json!({"anyOf": shuffled, "title": "t"}),
        );
        assert_eq!(diff.verdict, Compatible, "{diff:#?}");
    }
}
