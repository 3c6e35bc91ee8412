//! Custom resources against their CRD's structural `openAPIV3Schema`, as kube-apiserver treats
//! them: unknown fields pruned (reported back so that the handler can warn or refuse, per
//! `fieldValidation`), non-nullable nulls dropped, and the remaining object validated (types,
//! `required`, `enum`, int-or-string, maps, bounds, lengths, patterns), each failure a field
//! error of the real server's wording.
//!
//! Pure functions of a schema and an object. It must not touch the store or HTTP (the
//! resources module finds the CRD and answers), and must not default, run CEL rules
//! (`x-kubernetes-validations`) or check formats: those are left to the operators' own
//! admission in a real cluster, and nothing here claims them.
//!
//! # Layout
//! - this module: finding a version's schema in a CRD, and the two entry points.
//! - `prune`: dropping what the schema does not know, and nulls where null is not allowed.
//! - `validate`: the value checks, collected as field errors.

mod prune;
#[cfg(test)]
mod tests;
mod validate;

use serde_json::Value;

use crate::api::status::FieldErrors;

pub use prune::prune;
pub use validate::validate;

/// How deep into a schema pruning and validation descend. Structural schemas are finite, so
/// this only bounds a pathological CRD; below it nothing more is pruned or checked.
pub const MAX_DEPTH: usize = 128;

/// The fields of `metadata` a resource (the root, or an `x-kubernetes-embedded-resource`) keeps:
/// ObjectMeta's. The API server decodes `metadata` into ObjectMeta, so anything else is dropped.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The `openAPIV3Schema` of `version` in a CRD (per version, or the CRD-wide
/// `spec.validation` of the old form), if it has one.
pub fn crd_version_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    let per_version = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"));
    per_version.or_else(|| crd.pointer("/spec/validation/openAPIV3Schema"))
}

/// Prunes `object` (a whole custom resource) per `schema` and returns the unknown fields it
/// dropped, as the API server names them (`spec.foo`, `spec.items[0].bar`).
pub fn prune_object(schema: &Value, object: &mut Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune(schema, object, "", true, 0, &mut dropped);
    dropped
}

/// Validates a whole custom resource against `schema`. The root's `apiVersion`, `kind` and
/// `metadata` are the API server's own (checked elsewhere), not the schema's.
pub fn validate_object(schema: &Value, object: &Value) -> FieldErrors {
    let mut errs = FieldErrors::default();
    validate(schema, object, "", true, 0, &mut errs);
    errs
}
