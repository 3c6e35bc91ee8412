//! admissionregistration.k8s.io/v1 ValidatingWebhookConfigurations: the defaults the real
//! server gives a webhook and the validation it applies (`pkg/apis/admissionregistration`'s
//! defaults and validation), so that a configuration the emulator accepts is one a cluster
//! accepts, with one documented exception: a `clientConfig.url` may be plain `http://` when its
//! host is the loopback address (tests' receivers), where a cluster takes `https://` only.
//!
//! Pure object transformations: it must not touch the store or call webhooks (`api::admission`
//! does).

use serde_json::{Value, json};

use super::is_dns_subdomain;
use crate::api::status::FieldErrors;

/// Operations a rule may name.
const OPERATIONS: &[&str] = &["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];

/// Defaults every webhook of a configuration as the real server does: `failurePolicy: Fail`,
/// `matchPolicy: Equivalent`, empty `namespaceSelector`/`objectSelector`, `timeoutSeconds: 10`,
/// and each rule's `scope: "*"`.
pub(super) fn default_webhook_configuration(object: &mut Value) {
    let Some(hooks) = object.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for hook in hooks.iter_mut().filter(|h| h.is_object()) {
        for (field, default) in [
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(10)),
        ] {
            if hook.get(field).is_none_or(Value::is_null) {
                hook[field] = default;
            }
        }
        if let Some(rules) = hook.get_mut("rules").and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter(|r| r.is_object()) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule["scope"] = json!("*");
                }
            }
        }
    }
}

/// Whether `url`'s host is the loopback address (`127.0.0.1`, `[::1]`, `localhost`).
fn loopback(url: &reqwest::Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

fn validate_url(field: &str, text: &str, errs: &mut FieldErrors) {
    let Ok(url) = reqwest::Url::parse(text) else {
        errs.invalid(field, &json!(text), "host must be specified");
        return;
    };
    match url.scheme() {
        "https" => {}
        "http" if loopback(&url) => {}
        _ => errs.invalid(field, &json!(text), "'https' is the only allowed URL scheme"),
    }
    if url.host().is_none() {
        errs.invalid(field, &json!(text), "host must be specified");
    }
    if !url.username().is_empty() || url.password().is_some() {
        errs.invalid(
            field,
            &json!(text),
            "user information is not permitted in the URL",
        );
    }
    if url.fragment().is_some() || url.query().is_some() {
        errs.invalid(
            field,
            &json!(text),
            "fragments and query parameters are not permitted in the URL",
        );
    }
}

fn validate_rule(field: &str, rule: &Value, errs: &mut FieldErrors) {
    for list in ["operations", "apiGroups", "apiVersions", "resources"] {
        let items = rule.get(list).and_then(Value::as_array);
        if items.is_none_or(Vec::is_empty) {
            errs.required(&format!("{field}.{list}"), "");
            continue;
        }
        for (i, item) in items.into_iter().flatten().enumerate() {
            if list == "operations" && !item.as_str().is_some_and(|o| OPERATIONS.contains(&o)) {
                errs.not_supported(&format!("{field}.{list}[{i}]"), item, OPERATIONS);
            }
            if item.as_str().is_none_or(str::is_empty) && list != "apiGroups" {
                errs.required(&format!("{field}.{list}[{i}]"), "");
            }
        }
    }
    let scope = rule.get("scope").cloned().unwrap_or(json!("*"));
    if !matches!(scope.as_str(), Some("*" | "Cluster" | "Namespaced")) {
        errs.not_supported(&format!("{field}.scope"), &scope, &["*", "Cluster", "Namespaced"]);
    }
}

/// Validates a configuration (after defaulting); field paths as the real server names them.
pub(super) fn validate_webhook_configuration(object: &Value, errs: &mut FieldErrors) {
    let Some(hooks) = object.get("webhooks").and_then(Value::as_array) else {
        return;
    };
    let mut names = std::collections::HashSet::new();
    for (i, hook) in hooks.iter().enumerate() {
        let at = |f: &str| format!("webhooks[{i}].{f}");
        let name = hook.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            errs.required(&at("name"), "");
        } else if !is_dns_subdomain(name) || name.split('.').count() < 3 {
            errs.invalid(
                &at("name"),
                &json!(name),
                "should be a domain with at least three segments separated by dots",
            );
        } else if !names.insert(name) {
            errs.duplicate(&at("name"), &json!(name));
        }
        let url = hook.pointer("/clientConfig/url").and_then(Value::as_str);
        let service = hook.pointer("/clientConfig/service").filter(|s| !s.is_null());
        match (url, service) {
            (Some(url), None) => validate_url(&at("clientConfig.url"), url, errs),
            (None, Some(_)) => errs.forbidden(
                &at("clientConfig.service"),
                "the emulator runs no Services: use clientConfig.url",
            ),
            _ => errs.required(&at("clientConfig"), "exactly one of url or service is required"),
        }
        if let Some(bundle) = hook.pointer("/clientConfig/caBundle").filter(|b| !b.is_null())
            && !bundle.as_str().is_some_and(|b| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(b).is_ok()
            })
        {
            errs.invalid(&at("clientConfig.caBundle"), bundle, "must be base64-encoded PEM");
        }
        for (j, rule) in hook
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            validate_rule(&at(&format!("rules[{j}]")), rule, errs);
        }
        let policy = hook.get("failurePolicy").cloned().unwrap_or(Value::Null);
        if !matches!(policy.as_str(), Some("Fail" | "Ignore")) {
            errs.not_supported(&at("failurePolicy"), &policy, &["Fail", "Ignore"]);
        }
        let match_policy = hook.get("matchPolicy").cloned().unwrap_or(Value::Null);
        if !matches!(match_policy.as_str(), Some("Exact" | "Equivalent")) {
            errs.not_supported(&at("matchPolicy"), &match_policy, &["Equivalent", "Exact"]);
        }
        match hook.get("sideEffects").filter(|s| !s.is_null()) {
            None => errs.required(&at("sideEffects"), ""),
            Some(effects) if !matches!(effects.as_str(), Some("None" | "NoneOnDryRun")) => {
                errs.not_supported(&at("sideEffects"), effects, &["None", "NoneOnDryRun"]);
            }
            Some(_) => {}
        }
        let versions: Vec<&str> = hook
            .get("admissionReviewVersions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !versions.contains(&"v1") && !versions.contains(&"v1beta1") {
            errs.required(&at("admissionReviewVersions"), "must specify one of v1, v1beta1");
        } else if !versions.contains(&"v1") {
            // The emulator sends admission.k8s.io/v1 reviews only.
            errs.invalid(
                &at("admissionReviewVersions"),
                &json!(versions),
                "the emulator speaks admission.k8s.io/v1 only",
            );
        }
        let timeout = hook.get("timeoutSeconds").cloned().unwrap_or(Value::Null);
        if !timeout.as_i64().is_some_and(|t| (1..=30).contains(&t)) {
            errs.invalid(
                &at("timeoutSeconds"),
                &timeout,
                "the timeout value must be between 1 and 30 seconds",
            );
        }
    }
}
