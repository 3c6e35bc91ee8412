//! batch/v1 Jobs at the API: defaulting (the generated selector and labels, the pod template's
//! defaults), spec validation with the real field causes, and matching a structured
//! `LabelSelector` against the template's labels.
//!
//! Pure object transformations: it must not touch the store or HTTP, nor do the Job
//! controller's work.

use serde_json::{Map, Value, json};

use super::pod::{default_pod_spec, validate_pod_spec};
use super::pod_failure_policy::{default_pod_failure_policy, validate_pod_failure_policy};
use super::{labels_of, str_at};
use crate::api::status::FieldErrors;

pub(super) fn prepare_job(job: &mut Value, errs: &mut FieldErrors) {
    let uid = str_at(job, "/metadata/uid").unwrap_or_default().to_owned();
    let name = str_at(job, "/metadata/name").unwrap_or_default().to_owned();
    if !job.get("spec").is_some_and(Value::is_object) {
        errs.required("spec.template", "");
        return;
    }
    let spec = &mut job["spec"];
    // Defaults (pkg/apis/batch/v1/defaults.go).
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    if spec.get("parallelism").is_none_or(Value::is_null) {
        spec["parallelism"] = json!(1);
    }
    if spec.get("backoffLimit").is_none_or(Value::is_null) {
        let per_index = spec.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null());
        spec["backoffLimit"] = json!(if per_index { i32::MAX as i64 } else { 6 });
    }
    if spec.get("completionMode").is_none_or(Value::is_null) {
        spec["completionMode"] = json!("NonIndexed");
    }
    if spec.get("suspend").is_none_or(Value::is_null) {
        spec["suspend"] = json!(false);
    }
    default_pod_failure_policy(spec);
    if spec.get("podReplacementPolicy").is_none_or(Value::is_null) {
        let has_pfp = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
        spec["podReplacementPolicy"] = json!(if has_pfp { "Failed" } else { "TerminatingOrFailed" });
    }
    if !spec.get("template").is_some_and(Value::is_object) {
        errs.required("spec.template", "");
        return;
    }
    if !spec["template"].get("spec").is_some_and(Value::is_object) {
        spec["template"]["spec"] = json!({});
    }
    if !spec["template"].get("metadata").is_some_and(Value::is_object) {
        spec["template"]["metadata"] = json!({});
    }
    default_pod_spec(&mut spec["template"]["spec"]);

    // Selector and the four template labels (pkg/registry/batch/job/strategy.go generateSelector).
    let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
    if !manual {
        if spec.get("selector").is_some_and(|s| !s.is_null()) {
            errs.invalid(
                "spec.selector",
                &spec["selector"],
                "`selector` will be auto-generated",
            );
        }
        let labels = &mut spec["template"]["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            labels[k] = json!(v);
        }
        spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    }
    let template_labels = spec["template"]["metadata"]["labels"].clone();
    if labels_of(job, "/metadata/labels").is_empty()
        && template_labels.as_object().is_some_and(|l| !l.is_empty())
    {
        job["metadata"]["labels"] = template_labels;
    }
    validate_job_spec(&job["spec"], errs);
}

pub(super) fn validate_job_spec(spec: &Value, errs: &mut FieldErrors) {
    for field in [
        "parallelism",
        "completions",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        if let Some(v) = spec.get(field).and_then(Value::as_i64)
            && v < 0
        {
            errs.invalid(
                &format!("spec.{field}"),
                &json!(v),
                "must be greater than or equal to 0",
            );
        }
    }
    if let Some(v) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && v <= 0
    {
        errs.invalid(
            "spec.activeDeadlineSeconds",
            &json!(v),
            "must be greater than or equal to 1",
        );
    }
    let mode = spec.get("completionMode").cloned().unwrap_or(json!("NonIndexed"));
    match mode.as_str() {
        Some("NonIndexed") => {}
        Some("Indexed") => {
            if spec.get("completions").is_none_or(Value::is_null) {
                errs.required("spec.completions", "when completion mode is Indexed");
            }
        }
        _ => errs.not_supported("spec.completionMode", &mode, &["NonIndexed", "Indexed"]),
    }
    validate_per_index_limits(spec, mode.as_str() == Some("Indexed"), errs);
    validate_pod_failure_policy(spec, errs);
    let template_spec = &spec["template"]["spec"];
    validate_pod_spec(template_spec, "spec.template.spec", errs);
    let policy = template_spec
        .get("restartPolicy")
        .cloned()
        .unwrap_or(json!("Always"));
    if !matches!(policy.as_str(), Some("OnFailure" | "Never")) {
        errs.not_supported(
            "spec.template.spec.restartPolicy",
            &policy,
            &["OnFailure", "Never"],
        );
    } else if spec.get("podFailurePolicy").is_some_and(|v| !v.is_null()) && policy.as_str() != Some("Never") {
        errs.invalid(
            "spec.template.spec.restartPolicy",
            &policy,
            "only \"Never\" is supported when podFailurePolicy is specified",
        );
    }
    // The selector must match the template's labels.
    let selector = spec.get("selector").cloned().unwrap_or(Value::Null);
    let template_labels = labels_of(spec, "/template/metadata/labels");
    if selector.is_null() {
        errs.required("spec.selector", "");
    } else if !label_selector_matches(&selector, &template_labels) {
        errs.invalid(
            "spec.template.metadata.labels",
            &Value::Object(template_labels),
            "`selector` does not match template `labels`",
        );
    }
}

/// Most failed indexes an Indexed Job may allow (`maxFailedIndexes`).
const MAX_FAILED_INDEXES: i64 = 100_000;
/// Above this many completions a Job with `backoffLimitPerIndex` must bound its failed indexes
/// and its parallelism more tightly.
const COMPLETIONS_SOFT_LIMIT: i64 = 100_000;
const HIGH_COMPLETIONS_LIMIT: i64 = 10_000;

/// `backoffLimitPerIndex` and `maxFailedIndexes`, with the causes of `pkg/apis/batch/validation`:
/// both need Indexed completion; `maxFailedIndexes` needs `backoffLimitPerIndex`, at most
/// `completions` and 100,000 (`FailIndex` is checked with the pod failure policy).
fn validate_per_index_limits(spec: &Value, indexed: bool, errs: &mut FieldErrors) {
    let int = |k: &str| spec.get(k).and_then(Value::as_i64);
    let per_index = spec.get("backoffLimitPerIndex").filter(|v| !v.is_null());
    let max_failed = spec.get("maxFailedIndexes").filter(|v| !v.is_null());
    if max_failed.is_some() && per_index.is_none() {
        errs.required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified");
    }
    if indexed {
        if let (Some(max), Some(completions)) = (int("maxFailedIndexes"), int("completions"))
            && max > completions
        {
            errs.invalid(
                "spec.maxFailedIndexes",
                &json!(max),
                "must be less than or equal to completions",
            );
        }
        if let Some(max) = int("maxFailedIndexes")
            && max > MAX_FAILED_INDEXES
        {
            errs.invalid(
                "spec.maxFailedIndexes",
                &json!(max),
                &format!("must be less than or equal to {MAX_FAILED_INDEXES}"),
            );
        }
        if per_index.is_some() && int("completions").is_some_and(|c| c > COMPLETIONS_SOFT_LIMIT) {
            let why = format!(
                "must be less than or equal to {HIGH_COMPLETIONS_LIMIT} when completions are above \
                 {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
            );
            match int("maxFailedIndexes") {
                None => errs.required(
                    "spec.maxFailedIndexes",
                    &format!("must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"),
                ),
                Some(max) if max > HIGH_COMPLETIONS_LIMIT => {
                    errs.invalid("spec.maxFailedIndexes", &json!(max), &why);
                }
                Some(_) => {}
            }
            if let Some(p) = int("parallelism")
                && p > HIGH_COMPLETIONS_LIMIT
            {
                errs.invalid("spec.parallelism", &json!(p), &why);
            }
        }
    } else {
        for (field, value) in [
            ("backoffLimitPerIndex", per_index),
            ("maxFailedIndexes", max_failed),
        ] {
            if let Some(v) = value {
                errs.invalid(&format!("spec.{field}"), v, "requires indexed completion mode");
            }
        }
    }
}

/// Whether a structured `LabelSelector` (`matchLabels`, `matchExpressions`) matches labels.
pub fn label_selector_matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    let exprs = selector.get("matchExpressions").and_then(Value::as_array);
    if match_labels.is_none_or(Map::is_empty) && exprs.is_none_or(Vec::is_empty) {
        // An empty selector matches nothing for Jobs (validation: "empty selector is invalid").
        return false;
    }
    let ok_labels = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let ok_exprs = exprs.into_iter().flatten().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let actual = labels.get(key).and_then(Value::as_str);
        match e.get("operator").and_then(Value::as_str) {
            Some("In") => actual.is_some_and(|a| values.contains(&a)),
            Some("NotIn") => actual.is_none_or(|a| !values.contains(&a)),
            Some("Exists") => actual.is_some(),
            Some("DoesNotExist") => actual.is_none(),
            _ => false,
        }
    });
    ok_labels && ok_exprs
}
