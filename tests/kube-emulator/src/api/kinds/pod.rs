//! Pod spec defaulting and validation as the real server applies them, for pods and for the pod
//! template of a Job.
//!
//! Pure object transformations: it must not touch the store or HTTP.

use serde_json::{Value, json};

use super::{LABEL_MSG, is_dns_label};
use crate::api::status::FieldErrors;

/// Pod spec defaults (`pkg/apis/core/v1/defaults.go`), in place. `restart_default` is the
/// restartPolicy an unset one becomes (`Always` for pods and Job templates alike).
pub fn default_pod_spec(spec: &mut Value) {
    let Some(s) = spec.as_object_mut() else { return };
    s.entry("restartPolicy").or_insert_with(|| json!("Always"));
    s.entry("dnsPolicy").or_insert_with(|| json!("ClusterFirst"));
    s.entry("schedulerName")
        .or_insert_with(|| json!("default-scheduler"));
    s.entry("securityContext").or_insert_with(|| json!({}));
    s.entry("terminationGracePeriodSeconds")
        .or_insert_with(|| json!(30));
    for list in ["initContainers", "containers"] {
        if let Some(containers) = s.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                let image = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                // The tag is what follows the last ':' after the last '/' (a registry port is not a tag).
                let tag = image
                    .rsplit('/')
                    .next()
                    .and_then(|last| last.split_once(':'))
                    .map(|(_, t)| t);
                let untagged_or_latest = !image.contains('@') && tag.is_none_or(|t| t == "latest");
                c.entry("imagePullPolicy").or_insert_with(|| {
                    json!(if untagged_or_latest {
                        "Always"
                    } else {
                        "IfNotPresent"
                    })
                });
                c.entry("terminationMessagePath")
                    .or_insert_with(|| json!("/dev/termination-log"));
                c.entry("terminationMessagePolicy")
                    .or_insert_with(|| json!("File"));
                c.entry("resources").or_insert_with(|| json!({}));
            }
        }
    }
}

/// Pod spec validation shared by pods and Job templates. `path` is the spec's field path.
pub(super) fn validate_pod_spec(spec: &Value, path: &str, errs: &mut FieldErrors) {
    let containers = spec.get("containers").and_then(Value::as_array);
    match containers {
        None => errs.required(&format!("{path}.containers"), ""),
        Some(list) if list.is_empty() => errs.required(&format!("{path}.containers"), ""),
        Some(_) => {}
    }
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let field = format!("{path}.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => errs.required(&format!("{field}.name"), ""),
                Some(name) if !is_dns_label(name) => {
                    errs.invalid(&format!("{field}.name"), &json!(name), LABEL_MSG)
                }
                Some(name) => {
                    if !seen.insert(name.to_owned()) {
                        errs.duplicate(&format!("{field}.name"), &json!(name));
                    }
                }
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(|i| i.trim().is_empty())
            {
                errs.required(&format!("{field}.image"), "");
            }
        }
    }
    if let Some(policy) = spec.get("restartPolicy")
        && !matches!(policy.as_str(), Some("Always" | "OnFailure" | "Never"))
    {
        errs.not_supported(
            &format!("{path}.restartPolicy"),
            policy,
            &["Always", "OnFailure", "Never"],
        );
    }
}
