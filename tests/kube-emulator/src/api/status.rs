//! `Status` answers: the one place that turns a failure into the real API server's error body
//! (single-line JSON with `kind`, `apiVersion`, `metadata`, `status: "Failure"`, `message`,
//! `reason`, `details`, `code` equal to the HTTP status), and field-error collection for `422`.
//!
//! Must not decide *when* something fails; handlers do. Must not leak internal detail beyond the
//! message the real server would give.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::store::{ResourceType, StoreError};

/// One field error of a `422 Invalid` answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// The cause type (`FieldValueRequired`, `FieldValueInvalid`, …).
    pub reason: &'static str,
    /// The message without the field (`Required value`, `Invalid value: 1: …`).
    pub message: String,
    pub field: String,
}

/// Field errors collected while validating one object.
#[derive(Clone, Debug, Default)]
pub struct FieldErrors(pub Vec<Cause>);

/// How the real server prints a value inside a field error: strings quoted, the rest as JSON.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

impl FieldErrors {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn push(&mut self, reason: &'static str, field: &str, message: String) {
        self.0.push(Cause {
            reason,
            message,
            field: field.to_owned(),
        });
    }

    pub fn required(&mut self, field: &str, detail: &str) {
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        self.push("FieldValueRequired", field, message);
    }

    pub fn invalid(&mut self, field: &str, value: &Value, detail: &str) {
        self.push(
            "FieldValueInvalid",
            field,
            format!("Invalid value: {}: {detail}", show(value)),
        );
    }

    pub fn not_supported(&mut self, field: &str, value: &Value, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.push(
            "FieldValueNotSupported",
            field,
            format!(
                "Unsupported value: {}: supported values: {}",
                show(value),
                list.join(", ")
            ),
        );
    }

    pub fn forbidden(&mut self, field: &str, detail: &str) {
        self.push("FieldValueForbidden", field, format!("Forbidden: {detail}"));
    }

    pub fn duplicate(&mut self, field: &str, value: &Value) {
        self.push(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {}", show(value)),
        );
    }

    pub fn too_long(&mut self, field: &str, max: usize) {
        self.push(
            "FieldValueTooLong",
            field,
            format!("Too long: may not be more than {max} bytes"),
        );
    }

    /// `Ok` if nothing was collected, else the `422` for `Kind.group "name"`.
    pub fn into_result(self, rt: &ResourceType, name: &str) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(rt, name, self.0))
        }
    }
}

/// A failed request, answered as a `Status` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed to keep `Result<_, ApiError>` small.
    pub details: Box<Value>,
    /// The Status's `metadata.continue` (an expired list's fresh token).
    pub continue_token: Option<String>,
    pub retry_after: Option<u64>,
}

/// `details` naming an object: core resources omit `group`; `kind` is the plural resource.
fn object_details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": rt.plural});
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

/// `Job.batch` or `Pod`: how Invalid messages name a kind.
fn qualified_kind(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: Box::new(Value::Null),
            continue_token: None,
            retry_after: None,
        }
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Box::new(object_details(rt, name)),
            ..Self::new(404, "NotFound", format!("{} {name:?} not found", rt.key()))
        }
    }

    /// `403 Forbidden` for `qualified` (`pods`, `jobs.batch`) and `name` (empty for a
    /// collection), saying `why`; `details` names the plural resource (and group, and name).
    pub fn forbidden(qualified: &str, group: &str, resource: &str, name: &str, why: &str) -> Self {
        let mut details = serde_json::Map::new();
        if !name.is_empty() {
            details.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            details.insert("group".into(), json!(group));
        }
        details.insert("kind".into(), json!(resource));
        let message = if name.is_empty() {
            format!("{qualified} is forbidden: {why}")
        } else {
            format!("{qualified} {name:?} is forbidden: {why}")
        };
        ApiError {
            details: Box::new(Value::Object(details)),
            ..Self::new(403, "Forbidden", message)
        }
    }

    /// `401 Unauthorized`: the request carries no credentials the server knows.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// An unknown path, group or resource.
    pub fn no_route() -> Self {
        ApiError {
            details: Box::new(json!({})),
            ..Self::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    }

    pub fn namespace_not_found(namespace: &str) -> Self {
        ApiError {
            details: Box::new(json!({"name": namespace, "kind": "namespaces"})),
            ..Self::new(404, "NotFound", format!("namespaces {namespace:?} not found"))
        }
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Box::new(object_details(rt, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", rt.key()),
            )
        }
    }

    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        ApiError {
            details: Box::new(object_details(rt, name)),
            ..Self::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on {} {name:?}: {why}", rt.key()),
            )
        }
    }

    pub fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> Self {
        Self::invalid_kind(&qualified_kind(rt), &rt.group, &rt.kind, name, causes)
    }

    /// A 422 about something other than a stored kind (e.g. `ListOptions.meta.k8s.io`).
    pub fn invalid_kind(qualified: &str, group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let parts: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let mut details = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        ApiError {
            details: Box::new(details),
            ..Self::new(
                422,
                "Invalid",
                format!("{qualified} {name:?} is invalid: {summary}"),
            )
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed() -> Self {
        ApiError {
            details: Box::new(json!({})),
            ..Self::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        }
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {content_type:?})",
                accepted.join(", ")
            ),
        )
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_many_requests() -> Self {
        Self::too_many_requests_after(1)
    }

    /// 429 asking the client to wait `seconds` (header and `details` both say it).
    pub fn too_many_requests_after(seconds: u64) -> Self {
        ApiError {
            details: Box::new(json!({"retryAfterSeconds": seconds})),
            retry_after: Some(seconds),
            ..Self::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            )
        }
    }

    pub fn internal(cause: &str) -> Self {
        ApiError {
            details: Box::new(json!({"causes": [{"message": cause}]})),
            ..Self::new(500, "InternalError", format!("Internal error occurred: {cause}"))
        }
    }

    /// A Status given whole (an admission webhook's denial): any code, a reason from
    /// `metav1.StatusReason` or none (`""`, left out of the body, as the real server omits it).
    pub fn with_status(code: u16, reason: &'static str, message: String, details: Value) -> Self {
        ApiError {
            details: Box::new(details),
            ..Self::new(code, reason, message)
        }
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// An injected failure with the given HTTP status.
    pub fn injected(code: u16) -> Self {
        match code {
            429 => Self::too_many_requests(),
            500 => Self::internal("injected fault"),
            503 => Self::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => Self::timeout("the server was unable to return a response in the time allotted"),
            400 => Self::bad_request("injected fault"),
            403 => Self::new(403, "Forbidden", "injected fault"),
            404 => Self::no_route(),
            409 => Self::new(409, "Conflict", "injected fault"),
            410 => Self::expired("injected fault"),
            other => Self::new(other, "InternalError", format!("injected fault ({other})")),
        }
    }

    /// Maps a store failure on object `name` of kind `rt` to what the real server answers.
    pub fn from_store(rt: &ResourceType, name: &str, e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::not_found(rt, name),
            StoreError::AlreadyExists => Self::already_exists(rt, name),
            StoreError::Conflict(why) => Self::conflict(rt, name, &why),
            StoreError::Invalid(msg) => {
                // Store messages read "field: detail"; keep that split in the cause.
                let (field, detail) = msg.split_once(": ").unwrap_or(("", msg.as_str()));
                let reason = if detail.starts_with("Forbidden") {
                    "FieldValueForbidden"
                } else {
                    "FieldValueInvalid"
                };
                Self::invalid(
                    rt,
                    name,
                    vec![Cause {
                        reason,
                        message: detail.to_owned(),
                        field: field.to_owned(),
                    }],
                )
            }
            StoreError::Expired { .. } => Self::expired(e.to_string()),
        }
    }

    /// The `Status` object.
    pub fn body(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": match &self.continue_token { Some(c) => json!({"continue": c}), None => json!({}) },
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        });
        if self.reason.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.remove("reason");
        }
        if !self.details.is_null() {
            status["details"] = (*self.details).clone();
        }
        status["code"] = json!(self.code);
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// A JSON answer with `Content-Type: application/json`, compact (kube-rs splits on newlines).
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut response = (code, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = json_response(code, &self.body());
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// A request refused by API Priority and Fairness, as kube-apiserver writes it: `429` with a
/// `Retry-After` header and a plain-text body (Go's `http.Error`: `text/plain; charset=utf-8`,
/// `X-Content-Type-Options: nosniff`, the message and a newline), not a `Status`. Clients see an
/// error whose body does not parse as a Status.
pub fn flow_control_rejection(retry_after_seconds: u64) -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        "Too many requests, please try again later.\n",
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_seconds));
    response
}

/// The `Status` a successful immediate delete answers with.
pub fn delete_success(rt: &ResourceType, name: &str, uid: Option<&str>) -> Value {
    let mut details = object_details(rt, name);
    if let Some(uid) = uid {
        details["uid"] = json!(uid);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs() -> ResourceType {
        ResourceType::builtins()
            .into_iter()
            .find(|r| r.key() == "jobs.batch")
            .expect("jobs")
    }

    #[test]
    fn bodies_match_the_real_server() {
        assert_eq!(
            ApiError::not_found(&jobs(), "pi").body(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "jobs.batch \"pi\" not found", "reason": "NotFound",
                   "details": {"name": "pi", "group": "batch", "kind": "jobs"}, "code": 404})
        );
        let mut errs = FieldErrors::default();
        errs.not_supported(
            "spec.template.spec.restartPolicy",
            &json!("Always"),
            &["OnFailure", "Never"],
        );
        let e = errs.into_result(&jobs(), "pi").expect_err("invalid");
        assert_eq!(
            e.message,
            "Job.batch \"pi\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
        );
        assert_eq!(e.details["kind"], "Job");
        assert_eq!(e.details["causes"][0]["reason"], "FieldValueNotSupported");
        let pods = ResourceType::builtins()
            .into_iter()
            .find(|r| r.key() == "pods")
            .expect("pods");
        assert!(ApiError::not_found(&pods, "p").details.get("group").is_none());
        assert_eq!(ApiError::too_many_requests().retry_after, Some(1));
    }
}
