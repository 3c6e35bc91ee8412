//! Pruning: what the API server drops from a custom resource before it stores it. A field the
//! schema does not know goes (and is reported) unless its node says
//! `x-kubernetes-preserve-unknown-fields: true`; a map's values follow `additionalProperties`;
//! the root, and every `x-kubernetes-embedded-resource`, keep `apiVersion`, `kind` and ObjectMeta's
//! fields of `metadata`. A null where the schema does not allow null is dropped silently, as
//! the API server does before defaulting.
//!
//! Must not judge values (that is `validate`): a value of the wrong type is left for it.

use serde_json::Value;

use super::{MAX_DEPTH, OBJECT_META_FIELDS};

pub(super) fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool) == Some(true)
}

/// A child's path as the API server prints it: `spec.foo`, `spec.items[0]`.
pub(super) fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The schema of a map's value under `key`: its property, else `additionalProperties` (when
/// that is a schema).
pub(super) fn property_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// Whether `key` of an object at this node is the resource's own (`apiVersion`, `kind`,
/// `metadata`) rather than the schema's.
pub(super) fn resource_field(schema: &Value, root: bool, key: &str) -> bool {
    (root || flag(schema, "x-kubernetes-embedded-resource"))
        && matches!(key, "apiVersion" | "kind" | "metadata")
}

/// Prunes `value` (at `path`) per `schema`; `root` for the resource itself. Appends the
/// dropped unknown fields to `dropped`.
pub fn prune(
    schema: &Value,
    value: &mut Value,
    path: &str,
    root: bool,
    depth: usize,
    dropped: &mut Vec<String>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields")
                || schema.get("additionalProperties") == Some(&Value::Bool(true));
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let at = child(path, &key);
                if resource_field(schema, root, &key) {
                    if key == "metadata"
                        && let Some(Value::Object(meta)) = map.get_mut("metadata")
                    {
                        meta.retain(|field, _| {
                            let known = OBJECT_META_FIELDS.contains(&field.as_str());
                            if !known {
                                dropped.push(child(&at, field));
                            }
                            known
                        });
                    }
                    continue;
                }
                match property_schema(schema, &key) {
                    Some(sub) => {
                        if map[&key].is_null() && !flag(sub, "nullable") {
                            map.remove(&key);
                        } else if let Some(v) = map.get_mut(&key) {
                            prune(sub, v, &at, false, depth + 1, dropped);
                        }
                    }
                    None if preserve => {}
                    None => {
                        map.remove(&key);
                        dropped.push(at);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(
                        item_schema,
                        item,
                        &format!("{path}[{i}]"),
                        false,
                        depth + 1,
                        dropped,
                    );
                }
            }
        }
        _ => {}
    }
}
