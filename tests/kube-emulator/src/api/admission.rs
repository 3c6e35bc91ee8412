//! Validating admission webhooks, as kube-apiserver's `ValidatingAdmissionWebhook` plugin calls
//! them: every ValidatingWebhookConfiguration in the store is read at each write; each webhook
//! whose rules (operations, apiGroups, apiVersions, resources with subresources, scope),
//! `namespaceSelector` and `objectSelector` match a CREATE or UPDATE is sent an
//! `admission.k8s.io/v1` AdmissionReview (HTTP POST to `clientConfig.url?timeout=Ns`, JSON,
//! trusting only `clientConfig.caBundle` when it names one), all of them at once; the write goes
//! on only if every one allows it. A denial is the client's error with the real wording
//! (`admission webhook "<name>" denied the request: <message>`, the webhook's code, 400 when it
//! gives none below 400); a webhook that cannot be called, answers late (`timeoutSeconds`), with
//! another status than 2xx, more than [`MAX_RESPONSE`] bytes or an invalid review fails the write
//! with a 500 `Internal error occurred: failed calling webhook "<name>": …` under
//! `failurePolicy: Fail`, and is skipped under `Ignore`. A webhook's `warnings` become `Warning`
//! headers.
//!
//! It decides only whether a write is admitted: it must not change the object (no mutating
//! webhooks) or the store. Writes the `Emulator` makes itself (CRDs, Kueue queues) are not
//! admitted, as a cluster's bootstrap objects are not.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::authn::UserInfo;
use super::kinds::{self, WEBHOOK_CONFIGURATIONS};
use super::status::ApiError;
use super::{ApiState, Target};

/// The largest webhook answer read; a longer one is a failed call.
pub const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// The operation a write is admitted as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
        }
    }

    fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
        }
    }
}

/// One write to admit. Objects are in the storage shape; they are sent in the wire shape.
pub struct Attributes<'a> {
    pub operation: Operation,
    pub target: &'a Target,
    pub object: &'a Value,
    /// The stored object an UPDATE replaces.
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    pub user: &'a UserInfo,
}

/// HTTP clients for webhook calls, one per trusted CA bundle (`None`: the system's roots), kept
/// for the emulator's life so that a call does not load the roots again.
#[derive(Default)]
pub struct WebhookClients(Mutex<HashMap<Option<Vec<u8>>, reqwest::Client>>);

impl WebhookClients {
    fn client(&self, ca_bundle: Option<&[u8]>) -> Result<reqwest::Client, String> {
        let key = ca_bundle.map(<[u8]>::to_vec);
        let mut clients = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        // No proxy from the environment and no redirects: the call goes where the URL says.
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .http1_only();
        if let Some(pem) = ca_bundle {
            let roots = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("could not read the CA bundle: {e}"))?;
            builder = builder.tls_built_in_root_certs(false);
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        let client = builder
            .build()
            .map_err(|e| format!("could not build the webhook client: {e}"))?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// A webhook of a stored configuration (defaulted and validated when it was written).
struct Webhook {
    name: String,
    url: String,
    ca_bundle: Option<Vec<u8>>,
    fail_open: bool,
    timeout: Duration,
    rules: Vec<Value>,
    namespace_selector: Value,
    object_selector: Value,
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Every webhook of every configuration, in the order of the configurations' names and then
/// of their lists.
fn webhooks(api: &ApiState) -> Vec<Webhook> {
    let (configurations, _) = api.store.list(WEBHOOK_CONFIGURATIONS, None, &|_| true);
    let mut out = Vec::new();
    for configuration in &configurations {
        for hook in configuration
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = |p: &str| hook.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let ca_bundle = hook
                .pointer("/clientConfig/caBundle")
                .and_then(Value::as_str)
                .and_then(|b| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(b).ok()
                })
                .filter(|b| !b.is_empty());
            out.push(Webhook {
                name: text("/name").to_owned(),
                url: text("/clientConfig/url").to_owned(),
                ca_bundle,
                fail_open: text("/failurePolicy") == "Ignore",
                timeout: Duration::from_secs(
                    hook.get("timeoutSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(10)
                        .clamp(1, 30),
                ),
                rules: hook
                    .get("rules")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                namespace_selector: hook.get("namespaceSelector").cloned().unwrap_or(json!({})),
                object_selector: hook.get("objectSelector").cloned().unwrap_or(json!({})),
            });
        }
    }
    out
}

/// Whether one of `items` is `value` or `*`.
fn names(items: &[&str], value: &str) -> bool {
    items.iter().any(|i| *i == "*" || *i == value)
}

/// Whether a rule's `resources` name `resource` (with `sub`resource): `jobs`, `*` (every
/// resource, no subresource), `jobs/status`, `jobs/*`, `*/status`, `*/*`.
fn names_resource(items: &[&str], resource: &str, sub: Option<&str>) -> bool {
    items.iter().any(|item| {
        let (r, s) = item.split_once('/').map_or((*item, None), |(r, s)| (r, Some(s)));
        (r == "*" || r == resource)
            && match (s, sub) {
                (None, None) => true,
                (Some(s), Some(sub)) => s == "*" || s == sub,
                _ => false,
            }
    })
}

fn rule_matches(rule: &Value, operation: Operation, t: &Target) -> bool {
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    names(&strings(rule.get("operations")), operation.as_str())
        && names(&strings(rule.get("apiGroups")), &t.rt.group)
        && names(&strings(rule.get("apiVersions")), &t.rt.version)
        && names_resource(&strings(rule.get("resources")), &t.rt.plural, t.sub.as_deref())
        && match scope {
            "Cluster" => !t.rt.namespaced,
            "Namespaced" => t.rt.namespaced,
            _ => true,
        }
}

/// A structured label selector over `labels`; the empty selector matches everything.
fn selects(selector: &Value, labels: &Map<String, Value>) -> bool {
    let empty = |field: &str| {
        selector.get(field).is_none_or(|v| {
            v.as_object().is_some_and(Map::is_empty) || v.as_array().is_some_and(Vec::is_empty)
        })
    };
    (empty("matchLabels") && empty("matchExpressions")) || kinds::label_selector_matches(selector, labels)
}

fn labels(object: Option<&Value>) -> Map<String, Value> {
    object
        .and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Whether some webhook's rules name this operation on this resource (selectors aside): when
/// none does, a write need not be prepared twice to be admitted.
pub fn wanted(api: &ApiState, operation: Operation, t: &Target) -> bool {
    webhooks(api)
        .iter()
        .any(|h| h.rules.iter().any(|r| rule_matches(r, operation, t)))
}

fn hook_matches(api: &ApiState, hook: &Webhook, a: &Attributes<'_>) -> bool {
    if !hook.rules.iter().any(|r| rule_matches(r, a.operation, a.target)) {
        return false;
    }
    // The namespace's labels for a namespaced object, a Namespace's own; other cluster-scoped
    // objects are not filtered by namespace.
    let namespace_ok = if a.target.rt.key() == "namespaces" {
        selects(&hook.namespace_selector, &labels(Some(a.object)))
    } else if let Some(ns) = a.target.ns() {
        let namespace = api.store.get("namespaces", None, ns);
        selects(&hook.namespace_selector, &labels(namespace.as_ref()))
    } else {
        true
    };
    // An update is sent when the selector matches the object before or after it.
    let object_ok = selects(&hook.object_selector, &labels(Some(a.object)))
        || a.old
            .is_some_and(|old| selects(&hook.object_selector, &labels(Some(old))));
    namespace_ok && object_ok
}

/// Admits a write: `Ok` with the webhooks' warnings, or the error the client gets.
pub async fn validate(api: &ApiState, a: Attributes<'_>) -> Result<Vec<String>, ApiError> {
    let hooks: Vec<Webhook> = webhooks(api)
        .into_iter()
        .filter(|h| hook_matches(api, h, &a))
        .collect();
    if hooks.is_empty() {
        return Ok(Vec::new());
    }
    let review = review(&a);
    let answers =
        futures::future::join_all(hooks.iter().map(|hook| call(&api.webhook_clients, hook, &review))).await;
    let mut warnings = Vec::new();
    let mut refusal = None;
    for (hook, answer) in hooks.iter().zip(answers) {
        match answer {
            Ok(response) => {
                warnings.extend(strings(response.get("warnings")).into_iter().map(str::to_owned));
                if response.get("allowed").and_then(Value::as_bool) != Some(true) {
                    refusal.get_or_insert_with(|| denied(&hook.name, response.get("status")));
                }
            }
            Err(why) if hook.fail_open => {
                tracing::warn!(webhook = %hook.name, error = %why, "failed calling webhook, failing open");
            }
            Err(why) => {
                tracing::warn!(webhook = %hook.name, error = %why, "failed calling webhook, failing closed");
                refusal.get_or_insert_with(|| {
                    ApiError::internal(&format!("failed calling webhook {:?}: {why}", hook.name))
                });
            }
        }
    }
    match refusal {
        Some(e) => Err(e),
        None => Ok(warnings),
    }
}

/// The AdmissionReview sent for `a` (without its `uid`, set per call).
fn review(a: &Attributes<'_>) -> Value {
    let t = a.target;
    let gvk = json!({"group": t.rt.group, "version": t.rt.version, "kind": t.rt.kind});
    let gvr = json!({"group": t.rt.group, "version": t.rt.version, "resource": t.rt.plural});
    let object = kinds::to_wire(&t.rt, a.object);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut request = json!({
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": name,
        "operation": a.operation.as_str(),
        "userInfo": {"username": a.user.name, "groups": a.user.groups},
        "object": object,
        "oldObject": a.old.map(|o| kinds::to_wire(&t.rt, o)),
        "dryRun": a.dry_run,
        "options": {"kind": a.operation.options_kind(), "apiVersion": "meta.k8s.io/v1"},
    });
    if let Some(sub) = &t.sub {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    if let Some(ns) = t.ns() {
        request["namespace"] = json!(ns);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Calls one webhook; `Ok` with the review's `response`, or why the call failed (worded as
/// client-go words it, after `failed calling webhook "<name>": `).
async fn call(clients: &WebhookClients, hook: &Webhook, review: &Value) -> Result<Value, String> {
    let uid = uuid::Uuid::new_v4().to_string();
    let mut review = review.clone();
    review["request"]["uid"] = json!(uid);
    // client-go's REST client tells the webhook its deadline in the query.
    let url = format!("{}?timeout={}s", hook.url, hook.timeout.as_secs());
    let client = clients.client(hook.ca_bundle.as_deref())?;
    let exchange = async {
        let mut response = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, */*")
            .body(review.to_string())
            .send()
            .await
            .map_err(|e| failed_post(&url, &e))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed_post(&url, &e))? {
            if body.len() + chunk.len() > MAX_RESPONSE {
                return Err(format!(
                    "failed to call webhook: the response is longer than {MAX_RESPONSE} bytes"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, body))
    };
    let (status, body) = match tokio::time::timeout(hook.timeout, exchange).await {
        Ok(answer) => answer?,
        Err(_) => {
            return Err(format!(
                "failed to call webhook: Post {url:?}: context deadline exceeded"
            ));
        }
    };
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        return Err(if status.as_u16() == 500 && !text.is_empty() {
            format!(
                "failed to call webhook: an error on the server ({text:?}) has prevented the request from succeeding"
            )
        } else {
            format!(
                "failed to call webhook: the server responded with the status code {} but did not return more information",
                status.as_u16()
            )
        });
    }
    let answer: Value =
        serde_json::from_slice(&body).map_err(|e| format!("received invalid webhook response: {e}"))?;
    let api_version = answer
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        ));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("received invalid webhook response: webhook response was absent".to_owned());
    };
    let got = response.get("uid").and_then(Value::as_str).unwrap_or_default();
    if got != uid {
        return Err(format!(
            "received invalid webhook response: expected response.uid={uid:?}, got {got:?}"
        ));
    }
    Ok(response.clone())
}

/// Why a POST did not get an answer, as Go's HTTP client says it.
fn failed_post(url: &str, e: &reqwest::Error) -> String {
    let mut chain = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        source = s.source();
    }
    let lower = chain.to_ascii_lowercase();
    let why = if e.is_timeout() {
        "context deadline exceeded".to_owned()
    } else if lower.contains("connection refused") {
        let address = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port_or_known_default()?)))
            .unwrap_or_default();
        format!("dial tcp {address}: connect: connection refused")
    } else if lower.contains("certificate") || lower.contains("unknownissuer") {
        "tls: failed to verify certificate: x509: certificate signed by unknown authority".to_owned()
    } else {
        chain
    };
    format!("failed to call webhook: Post {url:?}: {why}")
}

/// The reasons a Status may carry (`metav1.StatusReason`): a webhook's own is kept when it is
/// one of these.
const REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

/// The error a denial is: the webhook's `status` with the message prefixed by who denied it,
/// a code of at least 400 (400 when it gives none).
fn denied(name: &str, status: Option<&Value>) -> ApiError {
    let empty = json!({});
    let status = status.filter(|s| s.is_object()).unwrap_or(&empty);
    let text = |f: &str| status.get(f).and_then(Value::as_str).unwrap_or_default();
    let denied_by = format!("admission webhook {name:?} denied the request");
    let message = match (text("message"), text("reason")) {
        (m, _) if !m.is_empty() => format!("{denied_by}: {m}"),
        (_, r) if !r.is_empty() => format!("{denied_by}: {r}"),
        _ => format!("{denied_by} without explanation"),
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let reason = REASONS
        .iter()
        .copied()
        .find(|r| *r == text("reason"))
        .unwrap_or("");
    ApiError::with_status(
        code,
        reason,
        message,
        status.get("details").cloned().unwrap_or(Value::Null),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_match_with_their_subresources() {
        assert!(names_resource(&["jobs"], "jobs", None));
        assert!(!names_resource(&["jobs"], "jobs", Some("status")));
        assert!(names_resource(&["*"], "pods", None));
        assert!(!names_resource(&["*"], "pods", Some("status")));
        assert!(names_resource(&["*/*"], "pods", Some("status")));
        assert!(names_resource(&["jobs/*"], "jobs", Some("status")));
        assert!(names_resource(&["*/status"], "jobs", Some("status")));
        assert!(!names_resource(&["pods"], "jobs", None));
    }

    #[test]
    fn a_denial_keeps_the_webhooks_code_and_reason_and_defaults_to_400() {
        let e = denied(
            "deny.example.com",
            Some(&json!({"message": "no", "code": 403, "reason": "Forbidden"})),
        );
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (
                403,
                "Forbidden",
                "admission webhook \"deny.example.com\" denied the request: no"
            )
        );
        let e = denied("deny.example.com", None);
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (
                400,
                "",
                "admission webhook \"deny.example.com\" denied the request without explanation"
            )
        );
        let e = denied("d.example.com", Some(&json!({"reason": "Custom", "code": 200})));
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "admission webhook \"d.example.com\" denied the request: Custom"
            )
        );
    }

    #[test]
    fn empty_selectors_select_everything() {
        let labels = Map::new();
        assert!(selects(&json!({}), &labels));
        assert!(selects(&json!({"matchLabels": {}}), &labels));
        assert!(!selects(&json!({"matchLabels": {"a": "b"}}), &labels));
        let mut labelled = Map::new();
        labelled.insert("a".into(), json!("b"));
        assert!(selects(
            &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}),
            &labelled
        ));
    }
}
