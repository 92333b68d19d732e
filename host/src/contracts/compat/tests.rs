//! The compatibility table and the classifier's bounds: every rule of [`super`] on a case.

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
