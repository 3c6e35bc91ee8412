//! Events, stored once as core/v1 and served through both core/v1 and events.k8s.io/v1: the
//! field renames between the two, and Event validation.
//!
//! Pure object transformations: it must not touch the store or HTTP.

use serde_json::{Value, json};

use super::str_at;
use crate::api::status::FieldErrors;
use crate::store::ResourceType;

pub(super) fn validate_event(rt: &ResourceType, event: &Value, errs: &mut FieldErrors) {
    let ns = str_at(event, "/metadata/namespace").unwrap_or_default();
    let involved_ns = str_at(event, "/involvedObject/namespace").unwrap_or_default();
    // Events about cluster-scoped objects live in `default`.
    if !involved_ns.is_empty() && involved_ns != ns {
        errs.invalid(
            "involvedObject.namespace",
            &json!(involved_ns),
            "does not match event.namespace",
        );
    }
    if let Some(t) = event.get("type")
        && !t.is_null()
        && !matches!(t.as_str(), Some("Normal" | "Warning"))
    {
        errs.not_supported("type", t, &["Normal", "Warning"]);
    }
    if rt.group != "events.k8s.io" {
        return;
    }
    // events.k8s.io/v1 create rules (stored in core shape: reportingController lives in
    // reportingComponent, note in message).
    if event.get("eventTime").is_none_or(Value::is_null) {
        errs.required("eventTime", "");
    }
    for (stored, wire, max) in [
        ("reportingComponent", "reportingController", 0usize),
        ("reportingInstance", "reportingInstance", 128),
        ("action", "action", 128),
        ("reason", "reason", 128),
    ] {
        match event.get(stored).and_then(Value::as_str) {
            None | Some("") => errs.required(wire, ""),
            Some(v) if max > 0 && v.len() > max => errs.too_long(wire, max),
            Some(_) => {}
        }
    }
    if event
        .get("message")
        .and_then(Value::as_str)
        .is_some_and(|n| n.len() > 1024)
    {
        errs.too_long("note", 1024);
    }
    for (stored, wire) in [
        ("source", "deprecatedSource"),
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
    ] {
        if event.get(stored).is_some_and(|v| !v.is_null() && v != &json!({})) {
            errs.forbidden(wire, "deprecated field must not be set");
        }
    }
    if let Some(series) = event.get("series").filter(|s| !s.is_null()) {
        if series.get("count").and_then(Value::as_i64).is_none_or(|c| c < 2) {
            errs.invalid(
                "series.count",
                series.get("count").unwrap_or(&Value::Null),
                "should be at least 2",
            );
        }
        if series.get("lastObservedTime").is_none_or(Value::is_null) {
            errs.required("series.lastObservedTime", "");
        }
    }
}

/// Field renames between events.k8s.io/v1 (wire) and core/v1 (storage).
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// An incoming object of kind `rt` in the storage shape.
pub fn from_wire(rt: &ResourceType, mut object: Value) -> Value {
    if rt.group == "events.k8s.io"
        && let Some(map) = object.as_object_mut()
    {
        for (wire, stored) in EVENT_FIELDS {
            if let Some(v) = map.remove(wire) {
                map.insert(stored.to_owned(), v);
            }
        }
        map.insert("apiVersion".into(), json!("v1"));
        map.insert("kind".into(), json!("Event"));
    }
    object
}

/// A stored object in the shape of kind `rt` (the identity except for events.k8s.io/v1).
pub fn to_wire(rt: &ResourceType, object: &Value) -> Value {
    let mut object = object.clone();
    if rt.group == "events.k8s.io"
        && let Some(map) = object.as_object_mut()
    {
        for (wire, stored) in EVENT_FIELDS {
            if let Some(v) = map.remove(stored) {
                map.insert(wire.to_owned(), v);
            }
        }
        map.insert("apiVersion".into(), json!(rt.api_version()));
    }
    object
}
