//! The walk of one diff: both schemas compared in lock-step, one [`SchemaChange`] recorded per
//! difference, under the depth and step bounds.
//!
//! Owns the comparison of each keyword family (type, enum/const, constraints, properties, items,
//! combinators) and the cycle cut on `$ref`s. It must never resolve a reference itself (that is
//! [`super::refs`]), never recurse past [`MAX_DEPTH`] or [`MAX_STEPS`], and never record a change
//! as compatible without proving it.

use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::keywords::{
    allowed_values, as_schema, child_path, constraint, is_annotation, names, object_kw, rest,
    show_type, tuple, type_set, CONSTRAINTS, HANDLED, OPAQUE_SCHEMAS, SHAPES, TRUE,
};
use super::refs::{contains_ref, has_ref, split_ref, validating};
use super::{
    worst_of, Compatibility, Obj, SchemaChange, SchemaDiff, MAX_DEPTH, MAX_STEPS, ROOT_PATH,
};

/// Walks both schemas in lock-step, collecting changes.
pub(super) struct Differ<'a> {
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

impl<'a> Differ<'a> {
    /// A walk of `old` against `new`, whose `$ref`s resolve in their own documents.
    pub(super) fn new(old: &'a Value, new: &'a Value) -> Self {
        Self {
            old_root: old,
            new_root: new,
            active_refs: Vec::new(),
            steps: 0,
            exhausted: false,
            changes: Vec::new(),
        }
    }

    /// Compare the two roots and return the verdict: the worst change, breaking when the walk
    /// ran out of steps.
    pub(super) fn run(mut self) -> SchemaDiff {
        let (old, new) = (self.old_root, self.new_root);
        self.compare(old, new, ROOT_PATH, 0);
        if self.exhausted {
            self.breaking(ROOT_PATH, "too complex to compare");
        }
        SchemaDiff {
            verdict: worst_of(&self.changes),
            changes: self.changes,
        }
    }
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
