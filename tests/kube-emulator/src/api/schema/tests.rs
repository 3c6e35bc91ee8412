use serde_json::json;

use super::{prune_object, validate_object};

fn schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "minLength": 1},
                    "replicas": {"type": "integer", "minimum": 0, "maximum": 8},
                    "mode": {"type": "string", "enum": ["a", "b"]},
                    "port": {"x-kubernetes-int-or-string": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                    "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"k": {"type": "object"}}},
                    "embedded": {"type": "object", "x-kubernetes-embedded-resource": true},
                },
            },
        },
    })
}

#[test]
fn pruning_keeps_what_the_schema_knows_and_names_what_it_drops() {
    let mut object = json!({
        "apiVersion": "x/v1", "kind": "X",
        "metadata": {"name": "a", "labels": {"l": "v"}, "bogus": 1},
        "spec": {
            "image": "i", "imagee": "typo",
            "labels": {"any": "thing"},
            "items": [{"n": 1, "m": 2}],
            "open": {"free": {"deep": 1}, "k": {"gone": 1}},
            "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "zz": 1}, "spec": {}},
            "replicas": null,
        },
        "top": 1,
    });
    let dropped = prune_object(&schema(), &mut object);
    assert_eq!(
        dropped,
        [
            "metadata.bogus",
            "spec.embedded.metadata.zz",
            "spec.embedded.spec",
            "spec.imagee",
            "spec.items[0].m",
            "spec.open.k.gone",
            "top",
        ]
    );
    assert_eq!(
        object,
        json!({
            "apiVersion": "x/v1", "kind": "X",
            "metadata": {"name": "a", "labels": {"l": "v"}},
            "spec": {
                "image": "i",
                "labels": {"any": "thing"},
                "items": [{"n": 1}],
                "open": {"free": {"deep": 1}, "k": {}},
                "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
            },
        })
    );
}

#[test]
fn validation_speaks_kube_openapi() {
    let object = json!({
        "metadata": {"name": "a"},
        "spec": {"replicas": "2", "mode": "c", "port": true, "items": [{"n": 1.5}], "labels": {"k": 1}},
    });
    let errs = validate_object(&schema(), &object);
    let messages: Vec<String> = errs
        .0
        .iter()
        .map(|c| format!("{}: {} ({})", c.field, c.message, c.reason))
        .collect();
    assert_eq!(
        messages,
        [
            "spec.image: Required value (FieldValueRequired)",
            "spec.items[0].n: Invalid value: \"number\": spec.items[0].n in body must be of type integer: \"number\" (FieldValueTypeInvalid)",
            "spec.labels.k: Invalid value: \"integer\": spec.labels.k in body must be of type string: \"integer\" (FieldValueTypeInvalid)",
            "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\" (FieldValueNotSupported)",
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\" (FieldValueTypeInvalid)",
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\" (FieldValueTypeInvalid)",
        ]
    );
    let bounds = validate_object(&schema(), &json!({"spec": {"image": "", "replicas": 9}}));
    let messages: Vec<&str> = bounds.0.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "Invalid value: \"\": spec.image in body should be at least 1 chars long",
            "Invalid value: 9: spec.replicas in body should be less than or equal to 8",
        ]
    );
}
