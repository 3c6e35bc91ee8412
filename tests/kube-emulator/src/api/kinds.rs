//! What the real API server does per kind on create and update: defaulting, validation (422 with
//! field causes), the status-subresource split, each kind's update strategy (whether a PUT needs a
//! resourceVersion, whether it may create), the events.k8s.io/v1 ↔ core/v1 Event mapping, and
//! turning a CustomResourceDefinition into a served kind.
//!
//! Owns only pure object transformations and checks. It must not touch the store or HTTP, and
//! must not do what controllers do (creating pods, writing Job status).

use serde_json::{Map, Value, json};

use super::status::{ApiError, FieldErrors};
use crate::store::ResourceType;

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
fn validate_pod_spec(spec: &Value, path: &str, errs: &mut FieldErrors) {
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

/// The LeaseSpec field types the real decoder enforces (`int32`s, strings, `MicroTime`s).
fn check_lease_shape(
    lease: &Value,
    wrong: &dyn Fn(&str, &str) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let Some(spec) = lease.get("spec").and_then(Value::as_object) else {
        return Ok(());
    };
    for (field, value) in spec {
        let ok = value.is_null()
            || match field.as_str() {
                "holderIdentity" | "strategy" | "preferredHolder" => value.is_string(),
                "leaseDurationSeconds" | "leaseTransitions" => {
                    value.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
                }
                "acquireTime" | "renewTime" => value
                    .as_str()
                    .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()),
                // Unknown fields are dropped by the real decoder; see `prepare_lease`.
                _ => true,
            };
        if !ok {
            let want = match field.as_str() {
                "leaseDurationSeconds" | "leaseTransitions" => "int32",
                "acquireTime" | "renewTime" => "MicroTime",
                _ => "string",
            };
            return wrong(&format!("LeaseSpec.spec.{field}"), want);
        }
    }
    Ok(())
}

/// Lease create and update (`pkg/registry/coordination/lease/strategy.go`,
/// `pkg/apis/coordination/validation`), with the CoordinatedLeaderElection feature gate off as on
/// a default v1.33 server: `strategy` and `preferredHolder` are dropped unless the stored lease
/// (`old`) already had them. The spec keeps only LeaseSpec's fields (the decoder drops the rest),
/// the times are re-encoded as `MicroTime` (UTC, six fractional digits), and
/// `leaseDurationSeconds` must be > 0, `leaseTransitions` >= 0.
fn prepare_lease(old: Option<&Value>, lease: &mut Value, errs: &mut FieldErrors) {
    if !lease.get("spec").is_some_and(Value::is_object) {
        // LeaseSpec is a struct field: the real server always writes `spec`, `{}` when empty.
        lease["spec"] = json!({});
    }
    let Some(spec) = lease["spec"].as_object_mut() else {
        return;
    };
    spec.retain(|field, value| {
        !value.is_null()
            && matches!(
                field.as_str(),
                "holderIdentity"
                    | "leaseDurationSeconds"
                    | "acquireTime"
                    | "renewTime"
                    | "leaseTransitions"
                    | "strategy"
                    | "preferredHolder"
            )
    });
    for gated in ["strategy", "preferredHolder"] {
        if old.is_none_or(|o| o.pointer(&format!("/spec/{gated}")).is_none_or(Value::is_null)) {
            spec.remove(gated);
        }
    }
    for field in ["acquireTime", "renewTime"] {
        if let Some(t) = spec
            .get(field)
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        {
            let micro = t
                .with_timezone(&chrono::Utc)
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
            spec.insert(field.to_owned(), json!(micro));
        }
    }
    if let Some(d) = spec.get("leaseDurationSeconds").and_then(Value::as_i64)
        && d <= 0
    {
        errs.invalid("spec.leaseDurationSeconds", &json!(d), "must be greater than 0");
    }
    if let Some(n) = spec.get("leaseTransitions").and_then(Value::as_i64)
        && n < 0
    {
        errs.invalid(
            "spec.leaseTransitions",
            &json!(n),
            "must be greater than or equal to 0",
        );
    }
    let strategy_set = spec
        .get("strategy")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if spec
        .get("preferredHolder")
        .and_then(Value::as_str)
        .is_some_and(|h| !h.is_empty())
        && !strategy_set
    {
        errs.forbidden(
            "spec.preferredHolder",
            "may only be specified if `strategy` is defined",
        );
    }
}

/// Create-time handling of a kind: defaults, validation, and discarding a submitted status for
/// kinds with a status subresource. `object` has its final name and uid already.
pub fn prepare_create(rt: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    let name = str_at(object, "/metadata/name").unwrap_or_default().to_owned();
    let mut errs = FieldErrors::default();
    validate_name(rt, &name, &mut errs);
    validate_labels(object, &mut errs);
    if rt.status_subresource && rt.key() != "customresourcedefinitions.apiextensions.k8s.io" {
        object["status"] = json!({});
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
        _ => {}
    }
    errs.into_result(rt, &name)
}

fn prepare_job(job: &mut Value, errs: &mut FieldErrors) {
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

fn validate_job_spec(spec: &Value, errs: &mut FieldErrors) {
    for field in [
        "parallelism",
        "completions",
        "backoffLimit",
        "ttlSecondsAfterFinished",
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
    if spec.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null()) && mode.as_str() != Some("Indexed") {
        errs.forbidden("spec.backoffLimitPerIndex", "requires indexed completion mode");
    }
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
        _ => {}
    }
    errs.into_result(rt, &name)
}

fn validate_event(rt: &ResourceType, event: &Value, errs: &mut FieldErrors) {
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

fn validate_crd(crd: &Value, errs: &mut FieldErrors) {
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

/// Metadata-only form of an object (`Accept: …;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`).
pub fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(key: &str) -> ResourceType {
        ResourceType::builtins()
            .into_iter()
            .find(|r| r.key() == key)
            .expect("builtin")
    }

    fn job() -> Value {
        json!({"metadata": {"name": "pi", "uid": "u-1", "namespace": "default"},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "main", "image": "busybox:1.36"}]}}},
               "status": {"active": 3}})
    }

    #[test]
    fn job_defaults_like_the_api_server() {
        let mut j = job();
        prepare_create(&rt("jobs.batch"), &mut j).expect("valid");
        assert_eq!(j["status"], json!({}));
        assert_eq!(j["spec"]["completions"], 1);
        assert_eq!(j["spec"]["parallelism"], 1);
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["completionMode"], "NonIndexed");
        assert_eq!(
            j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u-1"
        );
        let labels = &j["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(
            j["metadata"]["labels"], *labels,
            "an unlabelled Job takes its template's labels"
        );
        let c = &j["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 30);
    }

    #[test]
    fn job_validation_causes() {
        type Case = (Box<dyn Fn(&mut Value)>, &'static str, &'static str);
        let cases: Vec<Case> = vec![
            (
                Box::new(|j| {
                    if let Some(s) = j["spec"]["template"]["spec"].as_object_mut() {
                        s.remove("restartPolicy");
                    }
                }),
                "spec.template.spec.restartPolicy",
                "FieldValueNotSupported",
            ),
            (
                Box::new(|j| j["spec"]["parallelism"] = json!(-1)),
                "spec.parallelism",
                "FieldValueInvalid",
            ),
            (
                Box::new(|j| j["spec"]["completionMode"] = json!("Indexed")),
                "spec.completions",
                "FieldValueRequired",
            ),
            (
                Box::new(|j| j["spec"]["template"]["spec"]["containers"][0]["image"] = json!("")),
                "spec.template.spec.containers[0].image",
                "FieldValueRequired",
            ),
            (
                Box::new(|j| {
                    if let Some(c) = j["spec"]["template"]["spec"]["containers"][0].as_object_mut() {
                        c.remove("name");
                    }
                }),
                "spec.template.spec.containers[0].name",
                "FieldValueRequired",
            ),
            (
                Box::new(|j| j["metadata"]["name"] = json!("Bad_Name")),
                "metadata.name",
                "FieldValueInvalid",
            ),
            (
                Box::new(|j| j["metadata"]["name"] = json!("a".repeat(64))),
                "metadata.name",
                "FieldValueInvalid",
            ),
            (
                Box::new(|j| {
                    j["spec"]["manualSelector"] = json!(true);
                    j["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
                }),
                "spec.template.metadata.labels",
                "FieldValueInvalid",
            ),
        ];
        for (mutate, field, reason) in cases {
            let mut j = job();
            mutate(&mut j);
            // With parallelism set, completions is not defaulted: Indexed then lacks it.
            if j["spec"]["completionMode"] == "Indexed" {
                j["spec"]["parallelism"] = json!(2);
            }
            let e = prepare_create(&rt("jobs.batch"), &mut j).expect_err(field);
            assert_eq!(e.code, 422);
            let causes = e.details["causes"].as_array().cloned().unwrap_or_default();
            assert!(
                causes
                    .iter()
                    .any(|c| c["field"] == field && c["reason"] == reason),
                "{field} {reason}: {causes:?}"
            );
        }
    }

    #[test]
    fn job_update_immutability() {
        let mut j = job();
        prepare_create(&rt("jobs.batch"), &mut j).expect("valid");
        let mut changed = j.clone();
        changed["spec"]["parallelism"] = json!(3);
        prepare_update(&rt("jobs.batch"), &j, &mut changed).expect("parallelism is mutable");
        let mut changed = j.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
        let e = prepare_update(&rt("jobs.batch"), &j, &mut changed).expect_err("template immutable");
        assert!(
            e.message.contains("spec.template: Invalid value"),
            "{}",
            e.message
        );
    }

    #[test]
    fn events_map_between_apis() {
        let ev = rt("events.events.k8s.io");
        let wire = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x", "namespace": "default"},
            "regarding": {"name": "pi", "namespace": "default"}, "note": "hi", "reportingController": "c", "reportingInstance": "i",
            "action": "A", "reason": "R", "type": "Normal", "eventTime": "2025-01-01T00:00:01.000000Z"});
        let mut stored = from_wire(&ev, wire.clone());
        assert_eq!(stored["involvedObject"]["name"], "pi");
        assert_eq!(stored["message"], "hi");
        assert_eq!(stored["apiVersion"], "v1");
        prepare_create(&ev, &mut stored).expect("valid event");
        assert_eq!(to_wire(&ev, &stored), wire);
        let mut missing = from_wire(&ev, json!({"metadata": {"name": "y", "namespace": "default"}}));
        let e = prepare_create(&ev, &mut missing).expect_err("invalid");
        assert!(e.message.contains("eventTime: Required value"), "{}", e.message);
    }

    #[test]
    fn lease_strategy_fields_and_validation() {
        let leases = rt("leases.coordination.k8s.io");
        assert!(!allows_unconditional_update(&leases) && allows_create_on_update(&leases));
        assert!(
            allows_unconditional_update(&rt("jobs.batch")) && !allows_create_on_update(&rt("jobs.batch"))
        );
        let mut l = json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "unknown": 1,
            "renewTime": "2026-01-01T01:00:00.5+01:00", "strategy": "OldestEmulationVersion"}});
        prepare_create(&leases, &mut l).expect("valid");
        assert_eq!(
            l["spec"],
            json!({"holderIdentity": "a", "renewTime": "2026-01-01T00:00:00.500000Z"})
        );
        // A stored lease that has a gated field keeps it on update (the gate's rule).
        let old = json!({"metadata": {"name": "l"}, "spec": {"strategy": "OldestEmulationVersion"}});
        let mut new = json!({"metadata": {"name": "l"}, "spec": {"strategy": "OldestEmulationVersion", "preferredHolder": "b"}});
        prepare_update(&leases, &old, &mut new).expect("valid");
        assert_eq!(new["spec"], json!({"strategy": "OldestEmulationVersion"}));
        let mut bad = json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": "15"}});
        assert_eq!(
            check_shape(&leases, &bad).expect_err("a string duration").code,
            400
        );
        bad["spec"]["leaseDurationSeconds"] = json!(-3);
        let e = prepare_create(&leases, &mut bad).expect_err("negative");
        assert!(
            e.message
                .contains("spec.leaseDurationSeconds: Invalid value: -3: must be greater than 0"),
            "{}",
            e.message
        );
    }

    #[test]
    fn crd_becomes_a_resource_type() {
        let crd = json!({"metadata": {"name": "pytorchjobs.kubeflow.org"}, "spec": {"group": "kubeflow.org", "scope": "Namespaced",
            "names": {"kind": "PyTorchJob", "plural": "pytorchjobs", "singular": "pytorchjob", "shortNames": ["ptj"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
        let mut c = crd.clone();
        prepare_create(&rt("customresourcedefinitions.apiextensions.k8s.io"), &mut c).expect("valid");
        let t = crd_resource_type(&crd).expect("type");
        assert_eq!(t.key(), "pytorchjobs.kubeflow.org");
        assert!(t.namespaced && t.status_subresource);
        assert_eq!(t.short_names, ["ptj"]);
    }
}
