//! What the real API server does per kind on create and update: defaulting, validation (422 with
//! field causes), the status-subresource split, each kind's update strategy (whether a PUT needs a
//! resourceVersion, whether it may create), the events.k8s.io/v1 ↔ core/v1 Event mapping, and
//! turning a CustomResourceDefinition into a served kind.
//!
//! Owns only pure object transformations and checks. It must not touch the store or HTTP, and
//! must not do what controllers do (creating pods, writing Job status).

//!
//! # Layout
//! - this module: what holds for every kind (names, labels, the JSON shape, update strategies)
//!   and the per-kind dispatch of create and update.
//! - `pod`: pod spec defaulting and validation (pods and Job templates).
//! - `job`: Job defaulting (selector, labels) and spec validation.
//! - `pod_failure_policy`: a Job's `podFailurePolicy`/`podReplacementPolicy` defaults and validation.
//! - `lease`: Lease field types, the feature-gated fields, validation.
//! - `event`: the events.k8s.io/v1 ↔ core/v1 mapping and Event validation.
//! - `crd`: CustomResourceDefinition validation, status, and the kind it serves.
//! - `webhook_configuration`: ValidatingWebhookConfiguration defaults and validation.

mod crd;
mod event;
mod job;
mod lease;
mod pod;
mod pod_failure_policy;
#[cfg(test)]
mod tests;
mod webhook_configuration;

use serde_json::{Map, Value, json};

use super::status::{ApiError, FieldErrors};
use crate::store::ResourceType;

pub use crd::{crd_resource_type, crd_status};
pub use event::{from_wire, to_wire};
pub use job::label_selector_matches;
pub use pod::default_pod_spec;

use crd::validate_crd;
use event::validate_event;
use job::{prepare_job, validate_job_spec};
use lease::{check_lease_shape, prepare_lease};
use pod::validate_pod_spec;
use webhook_configuration::{default_webhook_configuration, validate_webhook_configuration};

/// Store key of admissionregistration.k8s.io/v1 ValidatingWebhookConfigurations.
pub const WEBHOOK_CONFIGURATIONS: &str = "validatingwebhookconfigurations.admissionregistration.k8s.io";

/// Store key under which objects of `rt` live. events.k8s.io/v1 Events are the core/v1 Events
/// (one storage, two shapes), as in the real server.
pub fn storage_key(rt: &ResourceType) -> String {
    if rt.group == "events.k8s.io" {
        "events".to_owned()
    } else {
        rt.key()
    }
}

/// Store key of coordination.k8s.io/v1 Leases.
const LEASES: &str = "leases.coordination.k8s.io";

/// Whether a PUT without `metadata.resourceVersion` is an unconditional update (the strategy's
/// `AllowUnconditionalUpdate`). Otherwise it is 422 `must be specified for an update`. True for
/// the built-in kinds except Leases, whose strategy refuses it: a lease holder must always prove
/// it saw the current version. False for custom kinds.
pub fn allows_unconditional_update(rt: &ResourceType) -> bool {
    let key = rt.key();
    key != LEASES && ResourceType::builtins().iter().any(|b| b.key() == key)
}

/// Whether a PUT to an absent object creates it (the strategy's `AllowCreateOnUpdate`): only
/// Leases among the kinds served here (that is how a first candidate may take a lease).
pub fn allows_create_on_update(rt: &ResourceType) -> bool {
    rt.key() == LEASES
}

/// A DNS-1123 subdomain: ≤ 253 chars of lowercase alphanumerics, `-` and `.`, alphanumeric at
/// both ends of each dot-separated part.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A DNS-1123 label: ≤ 63 chars of lowercase alphanumerics and `-`, alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Validates `metadata.name` for a kind: namespaces, and (in the real server) container-like
/// names need DNS labels, the rest DNS subdomains; Jobs also ≤ 63 (the name becomes a label).
pub fn validate_name(rt: &ResourceType, name: &str, errs: &mut FieldErrors) {
    let label_rule = rt.key() == "namespaces";
    if label_rule {
        if !is_dns_label(name) {
            errs.invalid("metadata.name", &json!(name), LABEL_MSG);
        }
    } else if !is_dns_subdomain(name) && (rt.plural != "events" || name.is_empty()) {
        errs.invalid("metadata.name", &json!(name), SUBDOMAIN_MSG);
    }
    if rt.key() == "jobs.batch" && name.len() > 63 {
        errs.invalid(
            "metadata.name",
            &json!(name),
            "must be no more than 63 characters",
        );
    }
}

fn labels_of(v: &Value, pointer: &str) -> Map<String, Value> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn validate_labels(object: &Value, errs: &mut FieldErrors) {
    for (k, v) in labels_of(object, "/metadata/labels") {
        if !super::selector::valid_label_key(&k) {
            errs.invalid(
                "metadata.labels",
                &json!(k),
                "name part must consist of alphanumeric characters, '-', '_' or '.'",
            );
        }
        match v.as_str() {
            Some(s) if super::selector::valid_label_value(s) => {}
            _ => errs.invalid(&format!("metadata.labels: {k}"), &v, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
        }
    }
}

/// Rejects objects whose well-known fields have the wrong JSON type (what the real server's
/// decoder answers with a 400), so that later steps can rely on the shape: `metadata` an object,
/// `labels`/`annotations` maps of strings, `finalizers` a list of strings, `ownerReferences` a
/// list, and for built-in kinds `spec`/`status` objects.
pub fn check_shape(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    let wrong = |field: &str, want: &str| {
        Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {field} into Go struct field of type {want} (decoding {})",
            rt.kind
        )))
    };
    let Some(map) = object.as_object() else {
        return wrong("object", "an object");
    };
    let meta = match map.get("metadata") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(m)) => m,
        Some(_) => return wrong("metadata", "ObjectMeta"),
    };
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) if m.values().all(Value::is_string) => {}
            Some(_) => return wrong(&format!("metadata.{field}"), "map[string]string"),
        }
    }
    match meta.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(_) => return wrong("metadata.finalizers", "[]string"),
    }
    match meta.get("ownerReferences") {
        None | Some(Value::Null) | Some(Value::Array(_)) => {}
        Some(_) => return wrong("metadata.ownerReferences", "[]OwnerReference"),
    }
    for field in ["name", "namespace", "generateName", "resourceVersion", "uid"] {
        match meta.get(field) {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(_) => return wrong(&format!("metadata.{field}"), "string"),
        }
    }
    let builtin = ResourceType::builtins().iter().any(|b| b.key() == rt.key());
    if builtin {
        for field in ["spec", "status"] {
            match map.get(field) {
                None | Some(Value::Null) | Some(Value::Object(_)) => {}
                Some(_) => return wrong(field, "an object"),
            }
        }
        if storage_key(rt) == LEASES {
            check_lease_shape(object, &wrong)?;
        }
        if storage_key(rt) == "jobs.batch" {
            for pointer in [
                "/spec/template",
                "/spec/template/spec",
                "/spec/template/metadata",
                "/spec/selector",
            ] {
                match object.pointer(pointer) {
                    None | Some(Value::Null) | Some(Value::Object(_)) => {}
                    Some(_) => return wrong(&pointer[1..].replace('/', "."), "an object"),
                }
            }
        }
    }
    Ok(())
}

/// Create-time handling of a kind: defaults, validation, and discarding a submitted status for
/// kinds with a status subresource. `object` has its final name and uid already.
pub fn prepare_create(rt: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    let name = str_at(object, "/metadata/name").unwrap_or_default().to_owned();
    let mut errs = FieldErrors::default();
    validate_name(rt, &name, &mut errs);
    validate_labels(object, &mut errs);
    if rt.status_subresource && rt.key() != "customresourcedefinitions.apiextensions.k8s.io" {
        // A built-in kind's status is a struct (`{}` when empty); a custom resource's is
        // dropped, as the custom resource strategy does, so its schema never sees an empty one.
        if ResourceType::builtins().iter().any(|b| b.key() == rt.key()) {
            object["status"] = json!({});
        } else if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
    }
    match storage_key(rt).as_str() {
        "jobs.batch" => prepare_job(object, &mut errs),
        "pods" => {
            if !object.get("spec").is_some_and(Value::is_object) {
                object["spec"] = json!({});
            }
            default_pod_spec(&mut object["spec"]);
            validate_pod_spec(&object["spec"], "spec", &mut errs);
            object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        "namespaces" => {
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        }
        "events" => validate_event(rt, object, &mut errs),
        LEASES => prepare_lease(None, object, &mut errs),
        "customresourcedefinitions.apiextensions.k8s.io" => {
            object["status"] = json!({});
            validate_crd(object, &mut errs);
        }
        WEBHOOK_CONFIGURATIONS => {
            default_webhook_configuration(object);
            validate_webhook_configuration(object, &mut errs);
        }
        _ => {}
    }
    errs.into_result(rt, &name)
}

/// Update-time checks and re-defaulting for the main endpoint. `old` is the stored object; `new`
/// is the object about to be stored (status already restored by the caller).
pub fn prepare_update(rt: &ResourceType, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    let name = str_at(old, "/metadata/name").unwrap_or_default().to_owned();
    let mut errs = FieldErrors::default();
    validate_labels(new, &mut errs);
    match storage_key(rt).as_str() {
        "jobs.batch" => {
            if new.get("spec").is_some_and(Value::is_object) && new["spec"]["template"]["spec"].is_object() {
                default_pod_spec(&mut new["spec"]["template"]["spec"]);
            }
            let manual = old["spec"]["manualSelector"].as_bool() == Some(true);
            for field in [
                "selector",
                "completionMode",
                "podFailurePolicy",
                "backoffLimitPerIndex",
                "template",
            ] {
                let a = old["spec"].get(field).filter(|v| !v.is_null());
                let b = new["spec"].get(field).filter(|v| !v.is_null());
                // An unset selector on update keeps the generated one (clients rarely echo it).
                if field == "selector" && b.is_none() && !manual {
                    new["spec"]["selector"] = old["spec"]["selector"].clone();
                    continue;
                }
                if a != b {
                    errs.invalid(
                        &format!("spec.{field}"),
                        b.unwrap_or(&Value::Null),
                        "field is immutable",
                    );
                }
            }
            let indexed = old["spec"]["completionMode"].as_str() == Some("Indexed");
            if !indexed && old["spec"].get("completions") != new["spec"].get("completions") {
                errs.invalid(
                    "spec.completions",
                    new["spec"].get("completions").unwrap_or(&Value::Null),
                    "field is immutable",
                );
            }
            if errs.is_empty() {
                validate_job_spec(&new["spec"], &mut errs);
            }
        }
        "pods" => {
            if new["spec"].is_object() {
                default_pod_spec(&mut new["spec"]);
            }
            // Only images, activeDeadlineSeconds and added tolerations may change in a pod spec.
            let mut a = old["spec"].clone();
            let mut b = new["spec"].clone();
            for spec in [&mut a, &mut b] {
                for list in ["containers", "initContainers"] {
                    if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                            c.remove("image");
                        }
                    }
                }
                if let Some(s) = spec.as_object_mut() {
                    s.remove("activeDeadlineSeconds");
                    s.remove("tolerations");
                }
            }
            if a != b {
                errs.forbidden(
                    "spec",
                    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                );
            }
        }
        LEASES => prepare_lease(Some(old), new, &mut errs),
        "events" if rt.group == "events.k8s.io" => {
            for field in [
                "reason",
                "action",
                "involvedObject",
                "reportingComponent",
                "reportingInstance",
                "eventTime",
                "type",
            ] {
                if old.get(field) != new.get(field) {
                    let wire = match field {
                        "involvedObject" => "regarding",
                        "reportingComponent" => "reportingController",
                        f => f,
                    };
                    errs.invalid(wire, new.get(field).unwrap_or(&Value::Null), "field is immutable");
                }
            }
        }
        WEBHOOK_CONFIGURATIONS => {
            default_webhook_configuration(new);
            validate_webhook_configuration(new, &mut errs);
        }
        _ => {}
    }
    errs.into_result(rt, &name)
}

/// Metadata-only form of an object (`Accept: …;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`).
pub fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}
