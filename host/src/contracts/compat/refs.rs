//! Same-document `$ref`s: finding them, resolving `#` / `#/json/pointer` references, and
//! splitting a `$ref` node into its target and its sibling keywords.
//!
//! It must never fetch anything (remote and file references are unresolvable here) and never
//! follow a chain of references without bound (a chain that loops back is an error).

use serde_json::Value;

use super::keywords::is_annotation;
use super::{Obj, MAX_DEPTH};

/// Whether `v` is an object with a `$ref` keyword.
pub(super) fn has_ref(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key("$ref"))
}

/// Whether any object inside `v` has a `$ref` key (iterative: no recursion).
pub(super) fn contains_ref(v: &Value) -> bool {
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
pub(super) fn split_ref<'x>(
    root: &'x Value,
    node: &'x Value,
) -> Result<(&'x Value, Option<Value>), String> {
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
pub(super) fn resolve<'r>(root: &'r Value, reference: &str) -> Option<&'r Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() || pointer.starts_with('/') {
        root.pointer(pointer)
    } else {
        None
    }
}

/// A schema's own validating keywords besides `$ref` (annotations dropped).
pub(super) fn validating(node: &Value) -> Obj {
    let map = node.as_object().into_iter().flatten();
    map.filter(|(k, _)| *k != "$ref" && !is_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
