//! The writing verbs: create, update (PUT, with create-on-update where the kind allows it) and
//! patch (every patch type), for the main endpoint and `/status`; also the `Emulator`'s create
//! path and serving the kind of a written CRD.
//!
//! Each write is one store transaction; per-kind rules come from `kinds`; validating admission
//! webhooks (`admission`) see the object about to be stored, after defaulting and validation,
//! before the transaction (an update whose object moved meanwhile is prepared and admitted
//! again). It must not delete.

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{ApiResult, modify_object, ok, present, str_at};
use crate::api::admission::{self, Attributes, Operation};
use crate::api::authn::UserInfo;
use crate::api::kinds;
use crate::api::patch::{self, PatchType};
use crate::api::schema;
use crate::api::status::{ApiError, Cause, json_response};
use crate::api::{ApiState, Form, Query, Target};
use crate::store::{ResourceType, StoreError, now_timestamp, random_suffix};

fn parse_object(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .or_else(|_| serde_yaml_ng::from_slice(body))
        .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok(v)
}

/// `apiVersion`/`kind` in a body, if present, must be the URL's.
fn check_type(rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    let api_version = str_at(body, "/apiVersion").filter(|s| !s.is_empty());
    let kind = str_at(body, "/kind").filter(|s| !s.is_empty());
    if api_version.is_some_and(|v| v != rt.api_version()) || kind.is_some_and(|k| k != rt.kind) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            api_version.unwrap_or_default(),
            rt.api_version()
        )));
    }
    Ok(())
}

fn check_namespace(t: &Target, body: &Value) -> Result<(), ApiError> {
    if let (Some(url_ns), Some(body_ns)) = (
        t.ns(),
        str_at(body, "/metadata/namespace").filter(|s| !s.is_empty()),
    ) && url_ns != body_ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// The structural schema a custom resource is held to: its CRD's, for the served version.
/// `None` for built-in kinds (their rules are `kinds`') and CRDs without a schema.
fn crd_schema(api: &ApiState, t: &Target) -> Option<Value> {
    if ResourceType::builtins().iter().any(|b| b.key() == t.rt.key()) {
        return None;
    }
    let crd = api.store.get(
        "customresourcedefinitions.apiextensions.k8s.io",
        None,
        &format!("{}.{}", t.rt.plural, t.rt.group),
    )?;
    schema::crd_version_schema(&crd, &t.rt.version).cloned()
}

/// Prunes a custom resource per its schema and applies `fieldValidation` to the unknown fields
/// dropped: `Strict` refuses the request (400), `Warn` (the default) adds a warning each,
/// `Ignore` drops them silently.
fn prune_unknown(
    schema: Option<&Value>,
    q: &Query,
    object: &mut Value,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let Some(schema) = schema else { return Ok(()) };
    let dropped = schema::prune_object(schema, object);
    if dropped.is_empty() {
        return Ok(());
    }
    let unknown: Vec<String> = dropped.iter().map(|f| format!("unknown field {f:?}")).collect();
    match q.get("fieldValidation").unwrap_or("Warn") {
        "Strict" => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            unknown.join(", ")
        ))),
        "Ignore" => Ok(()),
        _ => {
            warnings.extend(unknown);
            Ok(())
        }
    }
}

/// Validates a custom resource about to be stored against its schema (422 with field causes).
fn validate_schema(t: &Target, schema: Option<&Value>, object: &Value) -> Result<(), ApiError> {
    let Some(schema) = schema else { return Ok(()) };
    let name = str_at(object, "/metadata/name").unwrap_or_default();
    schema::validate_object(schema, object).into_result(&t.rt, name)
}

/// A response with one `Warning` header per warning, as the API server sends them
/// (`299 - "unknown field \"spec.x\""`).
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {w:?}");
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

/// Create, shared by POST, apply-on-absent and create-on-update: the object prepared, admitted,
/// then stored. `body` is in the wire shape.
async fn create_object(
    api: &ApiState,
    t: &Target,
    q: &Query,
    user: &UserInfo,
    body: Value,
    warnings: &mut Vec<String>,
) -> Result<Value, ApiError> {
    let object = prepare_new(api, t, q, body, warnings)?;
    let attributes = Attributes {
        operation: Operation::Create,
        target: t,
        object: &object,
        old: None,
        dry_run: q.dry_run(),
        user,
    };
    warnings.extend(admission::validate(api, attributes).await?);
    store_new(api, t, q, object)
}

/// The object a create would store: checked, defaulted, named and validated.
fn prepare_new(
    api: &ApiState,
    t: &Target,
    q: &Query,
    body: Value,
    warnings: &mut Vec<String>,
) -> Result<Value, ApiError> {
    check_type(&t.rt, &body)?;
    check_namespace(t, &body)?;
    let mut object = kinds::from_wire(&t.rt, body);
    kinds::check_shape(&t.rt, &object)?;
    let schema = crd_schema(api, t);
    prune_unknown(schema.as_ref(), q, &mut object, warnings)?;
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    if t.rt.namespaced {
        let ns = t.ns().unwrap_or_default();
        if api.store.get("namespaces", None, ns).is_none() {
            return Err(ApiError::namespace_not_found(ns));
        }
        object["metadata"]["namespace"] = json!(ns);
    }
    let meta = object["metadata"]
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    // The server assigns these; what a client sends is discarded.
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "selfLink",
    ] {
        meta.remove(field);
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let name = if name.is_empty() {
        let prefix = meta
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                &t.rt,
                "",
                vec![Cause {
                    reason: "FieldValueRequired",
                    message: "Required value: name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
            ));
        }
        let prefix: String = prefix.chars().take(58).collect();
        format!("{prefix}{}", random_suffix(5))
    } else {
        name
    };
    meta.insert("name".into(), json!(name));
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    kinds::prepare_create(&t.rt, &mut object)?;
    validate_schema(t, schema.as_ref(), &object)?;
    Ok(object)
}

/// Stores a prepared object (or, with `dryRun`, shows what would be stored).
fn store_new(api: &ApiState, t: &Target, q: &Query, mut object: Value) -> Result<Value, ApiError> {
    let name = str_at(&object, "/metadata/name").unwrap_or_default().to_owned();
    if q.dry_run() {
        object["metadata"]["creationTimestamp"] = json!(now_timestamp());
        object["metadata"]["generation"] = json!(1);
        return Ok(object);
    }
    let created = api
        .store
        .create(&t.storage, t.ns(), object)
        .map_err(|e| match e {
            StoreError::NotFound => ApiError::namespace_not_found(t.ns().unwrap_or_default()),
            other => ApiError::from_store(&t.rt, &name, other),
        })?;
    if t.storage == "customresourcedefinitions.apiextensions.k8s.io" {
        register_crd(api, &created);
    }
    Ok(created)
}

/// Serves a created or updated CRD's kind and marks it Established (as the apiextensions
/// controller does, in a separate status write).
fn register_crd(api: &ApiState, crd: &Value) {
    if let Some(rt) = kinds::crd_resource_type(crd) {
        api.store.register(rt);
    }
    let name = str_at(crd, "/metadata/name").unwrap_or_default();
    let status = kinds::crd_status(crd, &now_timestamp());
    if let Err(e) = api.store.modify(
        "customresourcedefinitions.apiextensions.k8s.io",
        None,
        name,
        &mut |o| {
            o["status"] = status.clone();
            Ok(())
        },
    ) {
        tracing::warn!(crd = name, error = %e, "could not mark the CRD established");
    }
}

pub async fn create(api: &ApiState, t: &Target, q: &Query, user: &UserInfo, body: &[u8]) -> ApiResult {
    let body = parse_object(body)?;
    let mut warnings = Vec::new();
    let created = create_object(api, t, q, user, body, &mut warnings).await?;
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &present(t, &created, &Form::Full)),
        &warnings,
    ))
}

/// The object to store for a write through the main endpoint or `/status`, given the stored one
/// and the client's version of the whole object (storage shape).
fn merge_write(
    t: &Target,
    current: &Value,
    mut incoming: Value,
    status_only: bool,
) -> Result<Value, ApiError> {
    if status_only {
        let mut next = current.clone();
        next["status"] = incoming.get("status").cloned().unwrap_or(Value::Null);
        if next["status"].is_null()
            && let Some(m) = next.as_object_mut()
        {
            m.remove("status");
        }
        // The client's resourceVersion stays a precondition.
        next["metadata"]["resourceVersion"] = incoming["metadata"]["resourceVersion"].clone();
        return Ok(next);
    }
    if t.rt.status_subresource {
        match current.get("status") {
            Some(s) => incoming["status"] = s.clone(),
            None => {
                if let Some(m) = incoming.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
    kinds::prepare_update(&t.rt, current, &mut incoming)?;
    Ok(incoming)
}

pub async fn update(api: &ApiState, t: &Target, q: &Query, user: &UserInfo, body: &[u8]) -> ApiResult {
    let body = parse_object(body)?;
    check_type(&t.rt, &body)?;
    check_namespace(t, &body)?;
    if let Some(name) = str_at(&body, "/metadata/name")
        && name != t.name()
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            t.name()
        )));
    }
    let status_only = t.sub.as_deref() == Some("status");
    // Create-on-update (Leases): an absent object is created whatever resourceVersion was sent,
    // as the real store's GuaranteedUpdate does. If a concurrent create wins, this is an update.
    if kinds::allows_create_on_update(&t.rt)
        && !status_only
        && api.store.get(&t.storage, t.ns(), t.name()).is_none()
    {
        kinds::check_shape(&t.rt, &body)?;
        let mut object = body.clone();
        object["metadata"]["name"] = json!(t.name());
        match create_object(api, t, q, user, object, &mut Vec::new()).await {
            Ok(created) => {
                return Ok(json_response(
                    StatusCode::CREATED,
                    &present(t, &created, &Form::Full),
                ));
            }
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    let has_rv = str_at(&body, "/metadata/resourceVersion").is_some_and(|s| !s.is_empty());
    if !has_rv && !kinds::allows_unconditional_update(&t.rt) {
        // The real message names the resource, not the kind (`leases.coordination.k8s.io "x" is
        // invalid`, details.kind `leases`): the generic store builds it from the resource.
        return Err(ApiError::invalid_kind(
            &t.rt.key(),
            &t.rt.group,
            &t.rt.plural,
            t.name(),
            vec![Cause {
                reason: "FieldValueInvalid",
                message: "Invalid value: 0x0: must be specified for an update".into(),
                field: "metadata.resourceVersion".into(),
            }],
        ));
    }
    let mut incoming = kinds::from_wire(&t.rt, body);
    kinds::check_shape(&t.rt, &incoming)?;
    let schema = crd_schema(api, t);
    let mut warnings = Vec::new();
    prune_unknown(schema.as_ref(), q, &mut incoming, &mut warnings)?;
    if !incoming.get("metadata").is_some_and(Value::is_object) {
        incoming["metadata"] = json!({});
    }
    let updated = admitted_modify(api, t, q, user, &mut warnings, &mut |current| {
        let mut next = merge_write(t, current, incoming.clone(), status_only)?;
        if !has_rv && let Some(m) = next["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        validate_schema(t, schema.as_ref(), &next)?;
        *current = next;
        Ok(())
    })
    .await?;
    if t.storage == "customresourcedefinitions.apiextensions.k8s.io" && !q.dry_run() && !status_only {
        register_crd(api, &updated);
    }
    Ok(with_warnings(ok(&present(t, &updated, &Form::Full))?, &warnings))
}

fn patch_options_invalid(field: &str, message: &str) -> ApiError {
    ApiError::invalid_kind(
        "PatchOptions.meta.k8s.io",
        "meta.k8s.io",
        "PatchOptions",
        "",
        vec![Cause {
            reason: if message.starts_with("Required") {
                "FieldValueRequired"
            } else {
                "FieldValueForbidden"
            },
            message: message.to_owned(),
            field: field.to_owned(),
        }],
    )
}

pub async fn patch(
    api: &ApiState,
    t: &Target,
    q: &Query,
    user: &UserInfo,
    content_type: &str,
    body: &[u8],
) -> ApiResult {
    let builtin = ResourceType::builtins().iter().any(|b| b.key() == t.rt.key());
    let kind = PatchType::from_content_type(content_type)
        .filter(|k| builtin || *k != PatchType::Strategic)
        .ok_or_else(|| {
            let accepted: Vec<&str> = patch::ACCEPTED
                .iter()
                .copied()
                .filter(|a| builtin || *a != "application/strategic-merge-patch+json")
                .collect();
            ApiError::unsupported_media_type(content_type, &accepted)
        })?;
    if q.flag("force") && kind != PatchType::Apply {
        return Err(patch_options_invalid(
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    if kind == PatchType::Apply && q.value("fieldManager").is_none() {
        return Err(patch_options_invalid(
            "fieldManager",
            "Required value: is required for apply patch",
        ));
    }
    let patch_body = patch::parse_body(kind, body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let status_only = t.sub.as_deref() == Some("status");
    if kind == PatchType::Apply && !status_only && api.store.get(&t.storage, t.ns(), t.name()).is_none() {
        let mut object = patch_body;
        kinds::check_shape(&t.rt, &kinds::from_wire(&t.rt, object.clone()))?;
        if !object.get("metadata").is_some_and(Value::is_object) {
            object["metadata"] = json!({});
        }
        if str_at(&object, "/metadata/name").is_some_and(|n| n != t.name()) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({})",
                str_at(&object, "/metadata/name").unwrap_or_default(),
                t.name()
            )));
        }
        object["metadata"]["name"] = json!(t.name());
        let mut warnings = Vec::new();
        let created = create_object(api, t, q, user, object, &mut warnings).await?;
        return Ok(with_warnings(
            json_response(StatusCode::CREATED, &present(t, &created, &Form::Full)),
            &warnings,
        ));
    }
    let schema = crd_schema(api, t);
    let mut warnings = Vec::new();
    let mut admitted_warnings = Vec::new();
    let updated = admitted_modify(api, t, q, user, &mut admitted_warnings, &mut |current| {
        let mut wire = kinds::to_wire(&t.rt, current);
        patch::apply(kind, &mut wire, &patch_body, builtin).map_err(|e| match e {
            patch::PatchError::Malformed(m) => ApiError::bad_request(m),
            patch::PatchError::Failed(m) => ApiError::invalid(
                &t.rt,
                t.name(),
                vec![Cause {
                    reason: "FieldValueInvalid",
                    message: m,
                    field: String::new(),
                }],
            ),
        })?;
        let mut patched = kinds::from_wire(&t.rt, wire);
        kinds::check_shape(&t.rt, &patched)?;
        // The patched object is decoded as a request body is: pruned before it is merged.
        warnings.clear();
        prune_unknown(schema.as_ref(), q, &mut patched, &mut warnings)?;
        if !patched.get("metadata").is_some_and(Value::is_object) {
            patched["metadata"] = json!({});
        }
        let next = merge_write(t, current, patched, status_only)?;
        validate_schema(t, schema.as_ref(), &next)?;
        *current = next;
        Ok(())
    })
    .await?;
    warnings.extend(admitted_warnings);
    if t.storage == "customresourcedefinitions.apiextensions.k8s.io" && !q.dry_run() && !status_only {
        register_crd(api, &updated);
    }
    Ok(with_warnings(ok(&present(t, &updated, &Form::Full))?, &warnings))
}

/// Creates an object through the API's create path (defaulting, validation), for the
/// `Emulator` (e.g. CRDs from YAML). `namespace` is used for namespaced kinds.
pub fn create_from_value(api: &ApiState, object: Value, namespace: Option<&str>) -> Result<Value, ApiError> {
    let api_version = str_at(&object, "/apiVersion").unwrap_or_default().to_owned();
    let kind = str_at(&object, "/kind").unwrap_or_default().to_owned();
    let rt = api
        .store
        .resources()
        .into_iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "no kind {kind:?} is registered for version {api_version:?}"
            ))
        })?;
    let namespace = if rt.namespaced {
        Some(
            str_at(&object, "/metadata/namespace")
                .or(namespace)
                .unwrap_or("default")
                .to_owned(),
        )
    } else {
        None
    };
    let t = Target {
        storage: kinds::storage_key(&rt),
        rt,
        namespace,
        name: None,
        sub: None,
        legacy_watch: false,
    };
    let q = Query::default();
    let object = prepare_new(api, &t, &q, object, &mut Vec::new())?;
    store_new(api, &t, &q, object)
}

/// How many times an update whose object moved while it was being admitted is prepared and
/// admitted again before it answers 409, as the real store's update loop retries.
const ADMISSION_ATTEMPTS: usize = 5;

/// [`modify_object`] through validating admission: when a webhook's rules name this update,
/// `f` runs on a copy of the stored object, the result is admitted, then `f` runs again in the
/// store transaction, provided the object has not moved meanwhile (else all again). The
/// webhooks' warnings are added to `warnings`.
async fn admitted_modify(
    api: &ApiState,
    t: &Target,
    q: &Query,
    user: &UserInfo,
    warnings: &mut Vec<String>,
    f: &mut (dyn FnMut(&mut Value) -> Result<(), ApiError> + Send),
) -> Result<Value, ApiError> {
    if !admission::wanted(api, Operation::Update, t) {
        return modify_object(api, t, q.dry_run(), f);
    }
    let moved_meanwhile = || {
        ApiError::conflict(
            &t.rt,
            t.name(),
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    };
    for _ in 0..ADMISSION_ATTEMPTS {
        let current = api
            .store
            .get(&t.storage, t.ns(), t.name())
            .ok_or_else(|| ApiError::not_found(&t.rt, t.name()))?;
        let seen = current["metadata"]["resourceVersion"].clone();
        let mut next = current.clone();
        f(&mut next)?;
        // A stale resourceVersion from the client is a conflict before any webhook is asked.
        let after = &next["metadata"]["resourceVersion"];
        if !after.is_null() && *after != seen {
            return Err(moved_meanwhile());
        }
        let attributes = Attributes {
            operation: Operation::Update,
            target: t,
            object: &next,
            old: Some(&current),
            dry_run: q.dry_run(),
            user,
        };
        let admitted = admission::validate(api, attributes).await?;
        let mut moved = false;
        let result = modify_object(api, t, q.dry_run(), &mut |o| {
            if o["metadata"]["resourceVersion"] != seen {
                moved = true;
                return Err(moved_meanwhile());
            }
            f(o)
        });
        if !moved {
            warnings.extend(admitted);
            return result;
        }
    }
    Err(moved_meanwhile())
}
