//! CustomResourceDefinitions: validation, the status the apiextensions controller gives an
//! accepted CRD, and the kind a CRD serves.
//!
//! Pure object transformations: it must not touch the store (registering the kind is the
//! resources module's).

use serde_json::{Value, json};

use super::str_at;
use crate::api::status::FieldErrors;
use crate::store::ResourceType;

pub(super) fn validate_crd(crd: &Value, errs: &mut FieldErrors) {
    let group = str_at(crd, "/spec/group").unwrap_or_default();
    let plural = str_at(crd, "/spec/names/plural").unwrap_or_default();
    if group.is_empty() {
        errs.required("spec.group", "");
    }
    if plural.is_empty() {
        errs.required("spec.names.plural", "");
    }
    if ResourceType::builtins()
        .iter()
        .any(|b| b.group == group && b.plural == plural)
    {
        errs.invalid(
            "spec.names.plural",
            &json!(plural),
            "a built-in resource already has this name",
        );
    }
    if str_at(crd, "/spec/names/kind").unwrap_or_default().is_empty() {
        errs.required("spec.names.kind", "");
    }
    let scope = crd.pointer("/spec/scope").cloned().unwrap_or(Value::Null);
    if !matches!(scope.as_str(), Some("Namespaced" | "Cluster")) {
        errs.not_supported("spec.scope", &scope, &["Cluster", "Namespaced"]);
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    if versions.is_none_or(Vec::is_empty) {
        errs.required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        );
    }
    let name = str_at(crd, "/metadata/name").unwrap_or_default();
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errs.invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        );
    }
}

/// The kind a CRD serves: its storage version (or first served one), names, scope, and whether
/// that version has the status subresource. Only that one version is served.
pub fn crd_resource_type(crd: &Value) -> Option<ResourceType> {
    let spec = crd.get("spec")?;
    let versions = spec.get("versions")?.as_array()?;
    let version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .or_else(|| {
            versions
                .iter()
                .find(|v| v.get("served").and_then(Value::as_bool) != Some(false))
        })?;
    let names = spec.get("names")?;
    let kind = names.get("kind")?.as_str()?.to_owned();
    Some(ResourceType {
        group: spec.get("group")?.as_str()?.to_owned(),
        version: version.get("name")?.as_str()?.to_owned(),
        plural: names.get("plural")?.as_str()?.to_owned(),
        singular: names
            .get("singular")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| kind.to_ascii_lowercase()),
        kind,
        namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
        status_subresource: version.pointer("/subresources/status").is_some()
            || spec.pointer("/subresources/status").is_some(),
        short_names: names
            .get("shortNames")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default(),
    })
}

/// The status the apiextensions controller gives an accepted CRD.
pub fn crd_status(crd: &Value, now: &str) -> Value {
    let condition = |t: &str, reason: &str, message: &str| json!({"type": t, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now});
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}
