//! One JSON Schema validation error as the lines a producer reads: the field path, what was
//! expected and the rule (`payload.user_id: expected integer, got string (rule: type)`).
//!
//! Text only: it never decides whether a payload passes, and every line it makes is clipped
//! to the contract error bound.

use super::clip;

/// One validation error as `path: what was expected (rule: keyword)`; `additionalProperties`
/// gives one line per unexpected field.
pub(super) fn describe_error(error: &jsonschema::ValidationError<'_>) -> Vec<String> {
    use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
    let path = instance_path(error.instance_path());
    let rule = error.kind().keyword().to_string();
    let line = |path: &str, what: String| clip(format!("{path}: {what} (rule: {rule})"));
    match error.kind() {
        Kind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => t.to_string(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            vec![line(
                &path,
                format!("expected {expected}, got {}", json_type(error.instance())),
            )]
        }
        Kind::Required { property } => {
            let name = property.as_str().map(str::to_string).unwrap_or_default();
            vec![line(
                &join_path(&path, &name),
                "required field is missing".into(),
            )]
        }
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
            unexpected
                .iter()
                .map(|name| line(&join_path(&path, name), "field is not allowed".into()))
                .collect()
        }
        Kind::Enum { options } => vec![line(
            &path,
            format!("expected one of {}, got {}", options, error.instance()),
        )],
        Kind::Constant { expected_value } => vec![line(
            &path,
            format!("expected {expected_value}, got {}", error.instance()),
        )],
        _ => vec![line(&path, error.to_string())],
    }
}

/// `payload.user.id`, `payload.items[2]`, `payload["odd key"]`.
fn instance_path(location: &jsonschema::paths::Location) -> String {
    use jsonschema::paths::LocationSegment;
    let mut path = String::from("payload");
    for segment in location.iter() {
        match segment {
            LocationSegment::Property(name) => path = join_path(&path, &name),
            LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

fn join_path(path: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{name}")
    } else {
        format!("{path}[{}]", serde_json::Value::String(name.to_string()))
    }
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}
