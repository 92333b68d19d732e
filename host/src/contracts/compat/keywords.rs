//! What each JSON Schema keyword means to the compatibility verdict: which keywords only
//! document, which only restrict (and how to order two of their values), which have a dedicated
//! comparison, and small readers of a schema object's keywords.
//!
//! Pure functions over one schema object: it must never walk into sub-schemas, resolve a `$ref`
//! or record a change (that is [`super::differ`]).

use serde_json::Value;
use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::Obj;

/// Keywords that never affect validation.
#[rustfmt::skip]
pub(super) const ANNOTATIONS: &[&str] = &[
    "title", "description", "examples", "$comment", "default", "deprecated", "readOnly",
    "writeOnly", "$schema", "$id", "$anchor", "$defs", "definitions",
];

/// Ordering of two constraint values: `Less` = NEW is looser, `Greater` = tighter, `None` = unknown.
pub(super) type Tightness = fn(&Value, &Value) -> Option<Ordering>;

/// Constraints that only ever restrict a value, with how to order two of their values.
#[rustfmt::skip]
pub(super) const CONSTRAINTS: &[(&str, Tightness)] = &[
    ("minimum", lower), ("exclusiveMinimum", lower), ("maximum", upper),
    ("exclusiveMaximum", upper), ("minLength", lower), ("maxLength", upper),
    ("minItems", lower), ("maxItems", upper), ("minProperties", lower),
    ("maxProperties", upper), ("minContains", lower), ("maxContains", upper),
    ("multipleOf", multiple), ("pattern", unknown), ("format", unknown),
    ("contentEncoding", unknown), ("contentMediaType", unknown), ("uniqueItems", unknown),
];

/// Sub-schema keywords that are only checked for equivalence.
#[rustfmt::skip]
pub(super) const OPAQUE_SCHEMAS: &[&str] = &[
    "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedProperties",
    "unevaluatedItems",
];

/// Keywords with a dedicated comparison below.
#[rustfmt::skip]
pub(super) const HANDLED: &[&str] = &[
    "$ref", "type", "enum", "const", "required", "properties", "additionalProperties",
    "patternProperties", "items", "prefixItems", "additionalItems", "allOf", "anyOf", "oneOf",
];

/// Whether a keyword's value has the JSON shape it needs.
pub(super) type ShapeCheck = fn(&Value) -> bool;

/// Keywords whose value must have a given JSON shape to be understood.
#[rustfmt::skip]
pub(super) const SHAPES: &[(&str, ShapeCheck)] = &[
    ("properties", Value::is_object), ("patternProperties", Value::is_object),
    ("required", Value::is_array), ("enum", Value::is_array), ("allOf", Value::is_array),
    ("anyOf", Value::is_array), ("oneOf", Value::is_array), ("prefixItems", Value::is_array),
];

/// JSON Schema's primitive type names.
pub(super) const TYPES: &[&str] = &[
    "null", "boolean", "object", "array", "number", "string", "integer",
];

/// The `true` schema, standing in for an absent sub-schema.
pub(super) static TRUE: Value = Value::Bool(true);

/// A constraint keyword's value, treating `uniqueItems: false` as absent.
pub(super) fn constraint<'v>(m: &'v Obj, kw: &str) -> Option<&'v Value> {
    m.get(kw)
        .filter(|v| !(kw == "uniqueItems" && **v == Value::Bool(false)))
}

/// Positional item schemas: `prefixItems`, or an array-valued `items` (drafts 4-2019).
pub(super) fn tuple(m: &Obj) -> Option<&Vec<Value>> {
    m.get("prefixItems")
        .or_else(|| m.get("items"))
        .and_then(Value::as_array)
}

/// Schema for items past the tuple: `items`, or `additionalItems` after an `items` array.
pub(super) fn rest(m: &Obj) -> Option<&Value> {
    match m.get("items") {
        Some(Value::Array(_)) => m.get("additionalItems"),
        items => items,
    }
}

/// Keywords that document but never validate.
pub(super) fn is_annotation(kw: &str) -> bool {
    ANNOTATIONS.contains(&kw) || kw.starts_with("x-")
}

/// An object schema's keywords, with `true` as the empty object; `None` otherwise.
pub(super) fn as_schema<'v>(v: &'v Value, empty: &'v Obj) -> Option<&'v Obj> {
    match v {
        Value::Object(m) => Some(m),
        Value::Bool(true) => Some(empty),
        _ => None,
    }
}

/// Types allowed by a `type` keyword (absent = all); `None` when it is not understood.
pub(super) fn type_set<'v>(v: Option<&'v Value>) -> Option<BTreeSet<&'v str>> {
    let known = |t: &'v Value| t.as_str().filter(|t| TYPES.contains(t));
    match v {
        None => Some(TYPES.iter().copied().collect()),
        Some(Value::Array(list)) => list.iter().map(known).collect(),
        Some(t) => known(t).map(|t| BTreeSet::from([t])),
    }
}

/// `type` as shown in reasons: `string`, `[string, null]`, or `any` when absent.
pub(super) fn show_type(v: Option<&Value>) -> String {
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
pub(super) fn allowed_values(m: &Obj) -> Option<Vec<&Value>> {
    let list = m.get("enum").and_then(Value::as_array);
    match (list, m.get("const")) {
        (None, None) => None,
        (Some(list), None) => Some(list.iter().collect()),
        (None, Some(c)) => Some(vec![c]),
        (Some(list), Some(c)) => Some(list.iter().filter(|v| *v == c).collect()),
    }
}

/// An object-valued keyword, or `empty`.
pub(super) fn object_kw<'v>(m: &'v Obj, kw: &str, empty: &'v Obj) -> &'v Obj {
    m.get(kw).and_then(Value::as_object).unwrap_or(empty)
}

/// The strings of an array-valued keyword such as `required`.
pub(super) fn names<'v>(m: &'v Obj, kw: &str) -> BTreeSet<&'v str> {
    let list = m
        .get(kw)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    list.iter().filter_map(Value::as_str).collect()
}

/// `payload.key`, or `payload["odd key"]` for keys that are not plain identifiers.
pub(super) fn child_path(path: &str, key: &str) -> String {
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
pub(super) fn lower(old: &Value, new: &Value) -> Option<Ordering> {
    new.as_f64()?.partial_cmp(&old.as_f64()?)
}

/// Upper bound: NEW is tighter when smaller.
pub(super) fn upper(old: &Value, new: &Value) -> Option<Ordering> {
    old.as_f64()?.partial_cmp(&new.as_f64()?)
}

/// `multipleOf`: looser when the new divisor divides the old one.
pub(super) fn multiple(old: &Value, new: &Value) -> Option<Ordering> {
    let ratio = old.as_f64()? / new.as_f64()?;
    (ratio.is_finite() && ratio >= 1.0 && (ratio - ratio.round()).abs() < 1e-9)
        .then_some(Ordering::Less)
}

/// Constraints whose values cannot be ordered (regexes, formats, ...).
pub(super) fn unknown(_: &Value, _: &Value) -> Option<Ordering> {
    None
}
