//! Validation of a pruned custom resource against its structural schema, with kube-openapi's
//! messages as the API server turns them into field errors: a wrong type is
//! `FieldValueTypeInvalid` (`Invalid value: "string": spec.x in body must be of type integer:
//! "string"`), a missing required field `Required value`, a value outside `enum`
//! `Unsupported value`, a too long string `Too long`, a too long list `Too many`, the other
//! bounds `Invalid value` with kube-openapi's sentence.
//!
//! Must not change the object (pruning did), and stops below a node whose type is wrong, as
//! kube-openapi does.

use serde_json::{Number, Value};

use super::MAX_DEPTH;
use super::prune::{child, flag, property_schema, resource_field};
use crate::api::status::{Cause, FieldErrors};

/// How the API server prints a value inside a field error: strings quoted, the rest as JSON.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// A Go `%v` of a schema bound (a float64): `1`, `0.5`.
fn bound(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => f.to_string(),
        None => n.to_string(),
    }
}

fn push(errs: &mut FieldErrors, reason: &'static str, path: &str, message: String) {
    errs.0.push(Cause {
        reason,
        message,
        field: path.to_owned(),
    });
}

/// kube-openapi's "… in body …" sentence as the detail of an `Invalid value`.
fn invalid(errs: &mut FieldErrors, path: &str, value: &Value, sentence: &str) {
    push(
        errs,
        "FieldValueInvalid",
        path,
        format!("Invalid value: {}: {path} in body {sentence}", show(value)),
    );
}

/// The JSON type kube-openapi infers for a value.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, value: &Value) -> bool {
    let have = json_type(value);
    have == want
        || (want == "number" && have == "integer")
        // A float with no fraction is an integer to kube-openapi (1.0 is 1).
        || (want == "integer" && value.as_f64().is_some_and(|f| f.fract() == 0.0))
}

fn type_invalid(errs: &mut FieldErrors, path: &str, want: &str, value: &Value) {
    let have = json_type(value);
    push(
        errs,
        "FieldValueTypeInvalid",
        path,
        format!("Invalid value: {have:?}: {path} in body must be of type {want}: {have:?}"),
    );
}

/// Validates `value` (at `path`) against `schema`, appending field errors to `errs`.
pub fn validate(schema: &Value, value: &Value, path: &str, root: bool, depth: usize, errs: &mut FieldErrors) {
    if depth > MAX_DEPTH {
        return;
    }
    let want = schema.get("type").and_then(Value::as_str);
    if value.is_null() {
        if !flag(schema, "nullable")
            && let Some(want) = want
        {
            type_invalid(errs, path, want, value);
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(json_type(value), "integer" | "string") {
            type_invalid(errs, path, "integer,string", value);
            return;
        }
    } else if let Some(want) = want
        && !type_matches(want, value)
    {
        type_invalid(errs, path, want, value);
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed
            .iter()
            .map(|v| match v {
                Value::String(s) => format!("{s:?}"),
                other => format!("{:?}", other.to_string()),
            })
            .collect();
        push(
            errs,
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                show(value),
                list.join(", ")
            ),
        );
    }
    match value {
        Value::String(s) => validate_string(schema, s, value, path, errs),
        Value::Number(n) => validate_number(schema, n, value, path, errs),
        Value::Array(items) => {
            let count = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && count > max
            {
                push(
                    errs,
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {count}: must have at most {max} items"),
                );
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && count < min
            {
                invalid(
                    errs,
                    path,
                    &Value::from(count),
                    &format!("should have at least {min} items"),
                );
            }
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    validate(item_schema, item, &format!("{path}[{i}]"), false, depth + 1, errs);
                }
            }
        }
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(key) = required.as_str()
                    && !map.contains_key(key)
                    && !resource_field(schema, root, key)
                {
                    push(
                        errs,
                        "FieldValueRequired",
                        &child(path, key),
                        "Required value".into(),
                    );
                }
            }
            for (key, v) in map {
                if resource_field(schema, root, key) {
                    continue;
                }
                if let Some(sub) = property_schema(schema, key) {
                    validate(sub, v, &child(path, key), false, depth + 1, errs);
                }
            }
        }
        _ => {}
    }
}

fn validate_string(schema: &Value, s: &str, value: &Value, path: &str, errs: &mut FieldErrors) {
    let chars = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        push(
            errs,
            "FieldValueTooLong",
            path,
            format!("Too long: may not be more than {max} bytes"),
        );
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        invalid(errs, path, value, &format!("should be at least {min} chars long"));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // An upstream pattern this engine cannot compile is not enforced rather than refused.
        if let Ok(re) = regex::Regex::new(pattern)
            && !re.is_match(s)
        {
            invalid(errs, path, value, &format!("should match '{pattern}'"));
        }
    }
}

fn validate_number(schema: &Value, n: &Number, value: &Value, path: &str, errs: &mut FieldErrors) {
    let Some(x) = n.as_f64() else { return };
    if let Some(min) = schema.get("minimum").and_then(Value::as_number)
        && let Some(m) = min.as_f64()
    {
        let exclusive = flag(schema, "exclusiveMinimum");
        if exclusive && x <= m {
            invalid(
                errs,
                path,
                value,
                &format!("should be greater than {}", bound(min)),
            );
        } else if !exclusive && x < m {
            invalid(
                errs,
                path,
                value,
                &format!("should be greater than or equal to {}", bound(min)),
            );
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_number)
        && let Some(m) = max.as_f64()
    {
        let exclusive = flag(schema, "exclusiveMaximum");
        if exclusive && x >= m {
            invalid(errs, path, value, &format!("should be less than {}", bound(max)));
        } else if !exclusive && x > m {
            invalid(
                errs,
                path,
                value,
                &format!("should be less than or equal to {}", bound(max)),
            );
        }
    }
}
