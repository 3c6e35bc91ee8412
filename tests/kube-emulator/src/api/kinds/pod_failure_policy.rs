//! A batch/v1 Job's `spec.podFailurePolicy` and `spec.podReplacementPolicy` at the API: the
//! default status `True` of an `onPodConditions` pattern, and the validation causes of
//! `pkg/apis/batch/validation` (actions, `FailIndex` only with `backoffLimitPerIndex`,
//! `onExitCodes` operators, container names and values, pattern statuses, and
//! `podReplacementPolicy: Failed` when a policy is set).
//!
//! Pure object transformations: it must not touch the store or HTTP.

use serde_json::{Value, json};

use super::str_at;
use crate::api::status::FieldErrors;

const ACTIONS: [&str; 4] = ["Count", "FailIndex", "FailJob", "Ignore"];
const OPERATORS: [&str; 2] = ["In", "NotIn"];
const STATUSES: [&str; 3] = ["False", "True", "Unknown"];

fn valid_values(values: &[&str]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("valid values: [{}]", quoted.join(" "))
}

/// Defaults a missing `status` of every `onPodConditions` pattern to `True`.
pub(super) fn default_pod_failure_policy(spec: &mut Value) {
    let Some(rules) = spec
        .pointer_mut("/podFailurePolicy/rules")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for pattern in rules
        .iter_mut()
        .filter_map(|r| r.get_mut("onPodConditions").and_then(Value::as_array_mut))
        .flatten()
    {
        if pattern.is_object() && pattern.get("status").is_none_or(Value::is_null) {
            pattern["status"] = json!("True");
        }
    }
}

pub(super) fn validate_pod_failure_policy(spec: &Value, errs: &mut FieldErrors) {
    let has_policy = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    if let Some(replacement) = spec.get("podReplacementPolicy").filter(|v| !v.is_null()) {
        let field = "spec.podReplacementPolicy";
        if has_policy {
            if replacement.as_str() != Some("Failed") {
                errs.not_supported(field, replacement, &["Failed"]);
            }
        } else if !matches!(replacement.as_str(), Some("Failed" | "TerminatingOrFailed")) {
            errs.not_supported(field, replacement, &["Failed", "TerminatingOrFailed"]);
        }
    }
    let per_index = spec.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null());
    let mut containers: Vec<&str> = Vec::new();
    for list in ["/template/spec/containers", "/template/spec/initContainers"] {
        for c in spec.pointer(list).and_then(Value::as_array).into_iter().flatten() {
            containers.extend(str_at(c, "/name"));
        }
    }
    let rules = spec
        .pointer("/podFailurePolicy/rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("spec.podFailurePolicy.rules[{i}]");
        let action = rule.get("action").cloned().unwrap_or(Value::Null);
        match action.as_str() {
            None | Some("") => errs.required(&format!("{path}.action"), &valid_values(&ACTIONS)),
            Some("FailIndex") if !per_index => errs.invalid(
                &format!("{path}.action"),
                &action,
                "requires the backoffLimitPerIndex to be set",
            ),
            Some(a) if !ACTIONS.contains(&a) => {
                errs.not_supported(&format!("{path}.action"), &action, &ACTIONS)
            }
            Some(_) => {}
        }
        if let Some(on_exit) = rule.get("onExitCodes").filter(|v| !v.is_null()) {
            validate_on_exit_codes(on_exit, &format!("{path}.onExitCodes"), &containers, errs);
        }
        let patterns = rule
            .get("onPodConditions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (j, pattern) in patterns.iter().enumerate() {
            let field = format!("{path}.onPodConditions[{j}].status");
            let status = pattern.get("status").cloned().unwrap_or(Value::Null);
            match status.as_str() {
                None | Some("") => errs.required(&field, &valid_values(&STATUSES)),
                Some(s) if !STATUSES.contains(&s) => errs.not_supported(&field, &status, &STATUSES),
                Some(_) => {}
            }
            if str_at(pattern, "/type").is_none_or(str::is_empty) {
                errs.required(&format!("{path}.onPodConditions[{j}].type"), "");
            }
        }
    }
}

fn validate_on_exit_codes(on_exit: &Value, path: &str, containers: &[&str], errs: &mut FieldErrors) {
    let operator = on_exit.get("operator").cloned().unwrap_or(Value::Null);
    match operator.as_str() {
        None | Some("") => errs.required(&format!("{path}.operator"), &valid_values(&OPERATORS)),
        Some(op) if !OPERATORS.contains(&op) => {
            errs.not_supported(&format!("{path}.operator"), &operator, &OPERATORS);
        }
        Some(_) => {}
    }
    if let Some(name) = on_exit.get("containerName").filter(|v| !v.is_null())
        && !name.as_str().is_some_and(|n| containers.contains(&n))
    {
        errs.invalid(
            &format!("{path}.containerName"),
            name,
            "must be one of the container or initContainer names in the pod template",
        );
    }
    let values: Vec<i64> = on_exit
        .get("values")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    if values.is_empty() {
        errs.invalid(
            &format!("{path}.values"),
            &json!(values),
            "at least one value is required",
        );
    }
    let mut seen: Vec<i64> = Vec::new();
    for (j, &v) in values.iter().enumerate() {
        if operator.as_str() == Some("In") && v == 0 {
            errs.invalid(
                &format!("{path}.values[{j}]"),
                &json!(v),
                "must not be 0 for the In operator",
            );
        }
        if seen.contains(&v) {
            errs.duplicate(&format!("{path}.values[{j}]"), &json!(v));
        } else {
            seen.push(v);
        }
    }
    if values.windows(2).any(|w| w[0] > w[1]) {
        errs.invalid(&format!("{path}.values"), &json!(values), "must be ordered");
    }
}
