//! The object verbs: get, list (with `limit`/`continue` and the resourceVersion rules), create,
//! update (PUT), patch, delete (propagation, preconditions, grace periods, finalizers) and
//! deletecollection, for the main endpoint and the `/status` subresource.
//!
//! Every write goes through one [`Store`] call so that it is atomic and produces exactly one
//! watch event; per-kind rules come from [`super::kinds`]. Must not stream (see `watch`, `logs`).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::kinds;
use super::patch::{self, PatchType};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, Cause, delete_success, json_response};
use super::{ApiState, Form, Query, Snapshot, Target, table};
use crate::store::{ChangeKind, ResourceType, Store, StoreError, now_timestamp, random_suffix};

type ApiResult = Result<Response, ApiError>;

/// How long a request for a future resourceVersion waits before `504 Too large resource version`.
const FUTURE_RV_WAIT: Duration = Duration::from_secs(3);

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn ok(body: &Value) -> ApiResult {
    Ok(json_response(StatusCode::OK, body))
}

/// The object as a client sees it (wire shape, metadata-only if asked).
fn present(t: &Target, object: &Value, form: &Form) -> Value {
    let wire = kinds::to_wire(&t.rt, object);
    match form {
        Form::Full => wire,
        Form::Metadata => kinds::partial_metadata(&wire),
        // A single object as a one-row Table.
        Form::Table(include) => table::table(
            &t.rt,
            std::slice::from_ref(object),
            include,
            json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)}),
        ),
    }
}

fn list_options_invalid(field: &str, message: &str) -> ApiError {
    ApiError::invalid_kind(
        "ListOptions.meta.k8s.io",
        "meta.k8s.io",
        "ListOptions",
        "",
        vec![Cause {
            reason: "FieldValueForbidden",
            message: message.to_owned(),
            field: field.to_owned(),
        }],
    )
}

/// Parsed `labelSelector` and `fieldSelector` (400 on bad syntax or an unsupported field).
pub(crate) fn selectors(t: &Target, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels =
        LabelSelector::parse(q.get("labelSelector").unwrap_or_default()).map_err(ApiError::bad_request)?;
    // kubectl prefixes this with "Unable to find … that match label selector …" itself.
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default(), &t.storage)
        .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// Waits (briefly) until the store reaches `rv`; `false` if it did not.
pub(crate) async fn wait_for_rv(store: &Store, rv: u64) -> bool {
    if store.current_rv() >= rv {
        return true;
    }
    let Ok((_, mut rx)) = store.watch(None) else {
        return false;
    };
    let wait = async {
        while store.current_rv() < rv {
            if rx.recv().await.is_err() && store.current_rv() < rv {
                // Lagged means changes happened: re-check; Closed cannot happen while we hold a store.
                tokio::task::yield_now().await;
            }
        }
    };
    tokio::time::timeout(FUTURE_RV_WAIT, wait).await.is_ok()
}

fn too_large_rv() -> ApiError {
    let mut e = ApiError::timeout("Too large resource version");
    *e.details =
        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]});
    e
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

pub async fn get(api: &ApiState, t: &Target, q: &Query, form: &Form) -> ApiResult {
    if let Some(rv) = q.value("resourceVersion")
        && rv != "0"
        && !wait_for_rv(&api.store, parse_rv(rv)?).await
    {
        return Err(too_large_rv());
    }
    let object = api
        .store
        .get(&t.storage, t.ns(), t.name())
        .ok_or_else(|| ApiError::not_found(&t.rt, t.name()))?;
    ok(&present(t, &object, form))
}

/// The objects of `t` at exactly `rv`, rebuilt from the store's history (each object touched
/// after `rv` takes its state from before its first later change). `None` if history no longer
/// reaches back that far.
fn state_at(api: &ApiState, t: &Target, rv: u64, filter: &dyn Fn(&Value) -> bool) -> Option<Vec<Value>> {
    let (later, _rx) = api.store.watch(Some(rv)).ok()?;
    let (current, _) = api.store.list(&t.storage, t.ns(), &|_| true);
    let key = |o: &Value| {
        (
            str_at(o, "/metadata/namespace").unwrap_or_default().to_owned(),
            str_at(o, "/metadata/name").unwrap_or_default().to_owned(),
        )
    };
    let mut state: std::collections::BTreeMap<(String, String), Value> =
        current.into_iter().map(|o| (key(&o), o)).collect();
    let mut seen = std::collections::HashSet::new();
    for change in later.iter().filter(|c| c.resource == t.storage) {
        let k = key(&change.object);
        if t.ns().is_some_and(|ns| ns != k.0) || !seen.insert(k.clone()) {
            continue;
        }
        match (change.kind, &change.previous) {
            (ChangeKind::Added, _) | (_, None) => {
                state.remove(&k);
            }
            (_, Some(previous)) => {
                state.insert(k, (**previous).clone());
            }
        }
    }
    Some(state.into_values().filter(|o| filter(o)).collect())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    id: u64,
    offset: usize,
}

fn encode_token(token: &ContinueToken) -> String {
    let raw = serde_json::to_vec(token).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_token(s: &str) -> Option<ContinueToken> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&raw).ok()
}

pub async fn list(api: &ApiState, t: &Target, q: &Query, form: &Form) -> ApiResult {
    let (labels, fields) = selectors(t, q)?;
    let filtered = !labels.is_empty() || !fields.is_empty();
    let filter = |o: &Value| labels.matches(o) && fields.matches(&t.storage, o);
    let limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let rv_param = q.value("resourceVersion");
    let rv_match = q.value("resourceVersionMatch");
    if q.flag("sendInitialEvents") {
        return Err(list_options_invalid(
            "sendInitialEvents",
            "Forbidden: sendInitialEvents is forbidden for list",
        ));
    }

    let (items, rv, offset) = if let Some(token) = q.value("continue") {
        if rv_match.is_some() {
            return Err(list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if rv_param.is_some_and(|r| r != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let token = decode_token(token)
            .ok_or_else(|| ApiError::bad_request(format!("continue key is not valid: {token:?}")))?;
        match api
            .snapshot(token.id)
            .filter(|(rv, _)| *rv == token.rv && *rv >= api.store.oldest_rv())
        {
            Some((rv, items)) => (items, rv, token.offset),
            None => {
                // A fresh, inconsistent continuation from the current state, as etcd offers.
                let (current, now) = api.store.list_shared(&t.storage, t.ns(), &filter);
                let rest: Vec<Arc<Value>> = current.into_iter().skip(token.offset).collect();
                let id = api.save_snapshot(Snapshot {
                    rv: now,
                    items: Arc::new(rest),
                });
                let mut e = ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                );
                e.continue_token = Some(encode_token(&ContinueToken {
                    rv: now,
                    id,
                    offset: 0,
                }));
                return Err(e);
            }
        }
    } else {
        let exact = match (rv_match, rv_param) {
            (Some("Exact"), None | Some("0")) => {
                return Err(list_options_invalid(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
            (Some(_), None) => {
                return Err(list_options_invalid(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            (Some("Exact"), Some(rv)) => Some(parse_rv(rv)?),
            (Some("NotOlderThan"), _) => None,
            (Some(other), _) => {
                return Err(list_options_invalid(
                    "resourceVersionMatch",
                    &format!("Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""),
                ));
            }
            // Legacy rule: a limit with a non-zero resourceVersion means "exactly".
            (None, Some(rv)) if rv != "0" && limit.is_some() => Some(parse_rv(rv)?),
            (None, _) => None,
        };
        if let Some(rv) = rv_param.filter(|r| *r != "0")
            && !wait_for_rv(&api.store, parse_rv(rv)?).await
        {
            return Err(too_large_rv());
        }
        match exact {
            Some(rv) if rv < api.store.current_rv() => {
                let items = state_at(api, t, rv, &filter).ok_or_else(|| {
                    ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        api.store.oldest_rv()
                    ))
                })?;
                (Arc::new(items.into_iter().map(Arc::new).collect()), rv, 0)
            }
            _ => {
                let (items, rv) = api.store.list_shared(&t.storage, t.ns(), &filter);
                (Arc::new(items), rv, 0)
            }
        }
    };

    let end = limit.map_or(items.len(), |l| (offset + l).min(items.len()));
    let stored_page = &items[offset.min(end)..end];
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if end < items.len() {
        let id = if offset == 0 {
            api.save_snapshot(Snapshot {
                rv,
                items: items.clone(),
            })
        } else {
            decode_token(q.value("continue").unwrap_or_default()).map_or(0, |t| t.id)
        };
        metadata["continue"] = json!(encode_token(&ContinueToken { rv, id, offset: end }));
        if !filtered {
            metadata["remainingItemCount"] = json!(items.len() - end);
        }
    }
    let (kind, api_version) = match form {
        Form::Table(include) => {
            let rows: Vec<Value> = stored_page.iter().map(|o| (**o).clone()).collect();
            return ok(&table::table(&t.rt, &rows, include, metadata));
        }
        Form::Metadata => (
            "PartialObjectMetadataList".to_owned(),
            "meta.k8s.io/v1".to_owned(),
        ),
        Form::Full => (format!("{}List", t.rt.kind), t.rt.api_version()),
    };
    let page: Vec<Value> = stored_page.iter().map(|o| present(t, o, form)).collect();
    ok(&json!({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": page}))
}

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

/// Create, shared by POST and apply-on-absent. `body` is in the wire shape.
fn create_object(api: &ApiState, t: &Target, q: &Query, body: Value) -> Result<Value, ApiError> {
    check_type(&t.rt, &body)?;
    check_namespace(t, &body)?;
    let mut object = kinds::from_wire(&t.rt, body);
    kinds::check_shape(&t.rt, &object)?;
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

pub fn create(api: &ApiState, t: &Target, q: &Query, body: &[u8]) -> ApiResult {
    let body = parse_object(body)?;
    let created = create_object(api, t, q, body)?;
    Ok(json_response(
        StatusCode::CREATED,
        &present(t, &created, &Form::Full),
    ))
}

/// Runs `f` on the stored object in one store transaction, carrying an [`ApiError`] out of it.
/// With `dry_run`, `f` runs on a copy and nothing is stored.
fn modify_object(
    api: &ApiState,
    t: &Target,
    dry_run: bool,
    f: &mut dyn FnMut(&mut Value) -> Result<(), ApiError>,
) -> Result<Value, ApiError> {
    if dry_run {
        let mut object = api
            .store
            .get(&t.storage, t.ns(), t.name())
            .ok_or_else(|| ApiError::not_found(&t.rt, t.name()))?;
        let before = object["metadata"]["resourceVersion"].clone();
        f(&mut object)?;
        let after = &object["metadata"]["resourceVersion"];
        if !after.is_null() && *after != before {
            return Err(ApiError::conflict(
                &t.rt,
                t.name(),
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        return Ok(object);
    }
    let mut failure: Option<ApiError> = None;
    let result = api.store.modify(&t.storage, t.ns(), t.name(), &mut |o| {
        f(o).map_err(|e| {
            failure = Some(e);
            StoreError::Invalid(String::new())
        })
    });
    match (result, failure) {
        (_, Some(e)) => Err(e),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(ApiError::from_store(&t.rt, t.name(), e)),
    }
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

pub fn update(api: &ApiState, t: &Target, q: &Query, body: &[u8]) -> ApiResult {
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
        match create_object(api, t, q, object) {
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
    if !incoming.get("metadata").is_some_and(Value::is_object) {
        incoming["metadata"] = json!({});
    }
    let updated = modify_object(api, t, q.dry_run(), &mut |current| {
        let mut next = merge_write(t, current, incoming.clone(), status_only)?;
        if !has_rv && let Some(m) = next["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        *current = next;
        Ok(())
    })?;
    if t.storage == "customresourcedefinitions.apiextensions.k8s.io" && !q.dry_run() && !status_only {
        register_crd(api, &updated);
    }
    ok(&present(t, &updated, &Form::Full))
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

pub fn patch(api: &ApiState, t: &Target, q: &Query, content_type: &str, body: &[u8]) -> ApiResult {
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
        let created = create_object(api, t, q, object)?;
        return Ok(json_response(
            StatusCode::CREATED,
            &present(t, &created, &Form::Full),
        ));
    }
    let updated = modify_object(api, t, q.dry_run(), &mut |current| {
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
        if !patched.get("metadata").is_some_and(Value::is_object) {
            patched["metadata"] = json!({});
        }
        *current = merge_write(t, current, patched, status_only)?;
        Ok(())
    })?;
    if t.storage == "customresourcedefinitions.apiextensions.k8s.io" && !q.dry_run() && !status_only {
        register_crd(api, &updated);
    }
    ok(&present(t, &updated, &Form::Full))
}

/// `DeleteOptions` from the body and the query string.
#[derive(Debug, Default)]
struct DeleteOptions {
    propagation: Option<String>,
    grace: Option<i64>,
    uid: Option<String>,
    resource_version: Option<String>,
    dry_run: bool,
}

fn delete_options(q: &Query, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let mut o = DeleteOptions {
        propagation: q.value("propagationPolicy").map(str::to_owned),
        grace: q.int("gracePeriodSeconds")?,
        dry_run: q.dry_run(),
        ..DeleteOptions::default()
    };
    if q.get("orphanDependents").is_some() && o.propagation.is_none() {
        o.propagation = Some(
            if q.flag("orphanDependents") {
                "Orphan"
            } else {
                "Background"
            }
            .to_owned(),
        );
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        let b: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        if let Some(p) = str_at(&b, "/propagationPolicy") {
            o.propagation = Some(p.to_owned());
        } else if let Some(orphan) = b.get("orphanDependents").and_then(Value::as_bool) {
            o.propagation = Some(if orphan { "Orphan" } else { "Background" }.to_owned());
        }
        if let Some(g) = b.get("gracePeriodSeconds").and_then(Value::as_i64) {
            o.grace = Some(g);
        }
        o.uid = str_at(&b, "/preconditions/uid").map(str::to_owned);
        o.resource_version = str_at(&b, "/preconditions/resourceVersion").map(str::to_owned);
        if b.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"))
        {
            o.dry_run = true;
        }
    }
    if let Some(p) = &o.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid_kind(
            "DeleteOptions.meta.k8s.io",
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![Cause {
                reason: "FieldValueNotSupported",
                message: format!(
                    "Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                ),
                field: "propagationPolicy".into(),
            }],
        ));
    }
    Ok(o)
}

fn pod_is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// What a delete did.
enum Deleted {
    /// Removed now: the last state.
    Removed(Value),
    /// Marked for deletion (finalizers or a graceful pod): the current state.
    Deferred(Value),
}

/// Deletes one object by the real server's rules (see the module docs of `crate::api`).
fn delete_one(api: &ApiState, t: &Target, name: &str, o: &DeleteOptions) -> Result<Deleted, ApiError> {
    let current = api
        .store
        .get(&t.storage, t.ns(), name)
        .ok_or_else(|| ApiError::not_found(&t.rt, name))?;
    let uid = str_at(&current, "/metadata/uid").unwrap_or_default().to_owned();
    if let Some(want) = &o.uid
        && *want != uid
    {
        return Err(ApiError::conflict(
            &t.rt,
            name,
            &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
        ));
    }
    let current_rv = str_at(&current, "/metadata/resourceVersion")
        .unwrap_or_default()
        .to_owned();
    if let Some(want) = &o.resource_version
        && *want != current_rv
    {
        return Err(ApiError::conflict(
            &t.rt,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {current_rv}"
            ),
        ));
    }
    let is_pod = t.storage == "pods";
    let default_policy = if t.storage == "jobs.batch" {
        "Orphan"
    } else {
        "Background"
    };
    let policy = o.propagation.as_deref().unwrap_or(default_policy);
    let add_finalizer = match policy {
        "Orphan" => Some("orphan"),
        "Foreground" => Some("foregroundDeletion"),
        _ => None,
    };
    let grace = if is_pod
        && !pod_is_terminal(&current)
        && str_at(&current, "/spec/nodeName").is_some_and(|n| !n.is_empty())
    {
        o.grace
            .or_else(|| {
                current
                    .pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    } else {
        0
    };
    let finalizers: Vec<String> = current
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let deleting = current
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    if t.storage == "namespaces" {
        return delete_namespace(api, t, name, current, o.dry_run);
    }
    if deleting {
        // A repeated delete may only shorten a pod's grace period.
        if is_pod && o.grace == Some(0) && !o.dry_run {
            let v = modify_object(
                api,
                &Target {
                    name: Some(name.to_owned()),
                    ..t.clone()
                },
                false,
                &mut |obj| {
                    obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                    obj["metadata"]["deletionTimestamp"] = json!(now_timestamp());
                    Ok(())
                },
            )?;
            return Ok(if api.store.get(&t.storage, t.ns(), name).is_none() {
                Deleted::Removed(v)
            } else {
                Deleted::Deferred(v)
            });
        }
        return Ok(Deleted::Deferred(current));
    }
    // Background with dependents needs no finalizer: the garbage collector finds them.
    let orphan_or_foreground = add_finalizer.is_some();
    if finalizers.is_empty() && grace == 0 && !orphan_or_foreground {
        if o.dry_run {
            return Ok(Deleted::Removed(current));
        }
        let removed = api
            .store
            .delete(&t.storage, t.ns(), name, Some(&uid))
            .map_err(|e| ApiError::from_store(&t.rt, name, e))?;
        if t.storage == "customresourcedefinitions.apiextensions.k8s.io" {
            unregister_crd(api, &removed);
        }
        return Ok(Deleted::Removed(removed));
    }
    let stamp = (chrono::Utc::now() + chrono::Duration::seconds(grace))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let target = Target {
        name: Some(name.to_owned()),
        ..t.clone()
    };
    let marked = modify_object(api, &target, o.dry_run, &mut |obj| {
        if str_at(obj, "/metadata/uid") != Some(uid.as_str()) {
            return Err(ApiError::conflict(&t.rt, name, "the object was replaced"));
        }
        obj["metadata"]["deletionTimestamp"] = json!(stamp);
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if let Some(f) = add_finalizer {
            let list = &mut obj["metadata"]["finalizers"];
            if !list.is_array() {
                *list = json!([]);
            }
            if let Some(a) = list.as_array_mut()
                && !a.iter().any(|x| x == f)
            {
                a.push(json!(f));
            }
        }
        Ok(())
    })?;
    let gone = !o.dry_run && api.store.get(&t.storage, t.ns(), name).is_none();
    Ok(if gone {
        Deleted::Removed(marked)
    } else {
        Deleted::Deferred(marked)
    })
}

/// A namespace goes Terminating (MODIFIED), its contents are deleted, then it is removed.
fn delete_namespace(
    api: &ApiState,
    t: &Target,
    name: &str,
    current: Value,
    dry_run: bool,
) -> Result<Deleted, ApiError> {
    if dry_run {
        return Ok(Deleted::Deferred(current));
    }
    let terminating = modify_object(api, t, false, &mut |o| {
        o["metadata"]["deletionTimestamp"] = json!(now_timestamp());
        o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        o["status"]["phase"] = json!("Terminating");
        Ok(())
    })?;
    for rt in api.store.resources().into_iter().filter(|r| r.namespaced) {
        let key = kinds::storage_key(&rt);
        if key != rt.key() {
            continue;
        }
        let (items, _) = api.store.list(&key, Some(name), &|_| true);
        for item in items {
            let item_name = str_at(&item, "/metadata/name").unwrap_or_default();
            if let Err(e) = api.store.delete(&key, Some(name), item_name, None)
                && e != StoreError::NotFound
            {
                tracing::warn!(namespace = name, object = item_name, error = %e, "namespace cleanup");
            }
        }
    }
    match api.store.delete("namespaces", None, name, None) {
        Ok(_) | Err(StoreError::NotFound) => {}
        Err(e) => return Err(ApiError::from_store(&t.rt, name, e)),
    }
    Ok(Deleted::Deferred(terminating))
}

/// Removes a deleted CRD's kind and its objects (each a DELETED event to its watchers).
fn unregister_crd(api: &ApiState, crd: &Value) {
    let Some(rt) = kinds::crd_resource_type(crd) else {
        return;
    };
    let key = rt.key();
    let (items, _) = api.store.list(&key, None, &|_| true);
    for item in items {
        let ns = str_at(&item, "/metadata/namespace");
        let name = str_at(&item, "/metadata/name").unwrap_or_default();
        let _ = api.store.delete(&key, ns, name, None);
    }
    api.store.unregister(&key);
}

pub fn delete(api: &ApiState, t: &Target, q: &Query, body: &[u8]) -> ApiResult {
    let options = delete_options(q, body)?;
    match delete_one(api, t, t.name(), &options)? {
        Deleted::Deferred(object) => ok(&present(t, &object, &Form::Full)),
        // Pods answer with the deleted object; most kinds with a Status.
        Deleted::Removed(object) if t.storage == "pods" || t.storage == "namespaces" => {
            ok(&present(t, &object, &Form::Full))
        }
        Deleted::Removed(object) => ok(&delete_success(&t.rt, t.name(), str_at(&object, "/metadata/uid"))),
    }
}

pub fn delete_collection(api: &ApiState, t: &Target, q: &Query, body: &[u8]) -> ApiResult {
    let options = delete_options(q, body)?;
    let (labels, fields) = selectors(t, q)?;
    let (items, _) = api.store.list(&t.storage, t.ns(), &|o| {
        labels.matches(o) && fields.matches(&t.storage, o)
    });
    let mut deleted = Vec::new();
    for item in items {
        let name = str_at(&item, "/metadata/name").unwrap_or_default().to_owned();
        let target = Target {
            namespace: str_at(&item, "/metadata/namespace")
                .map(str::to_owned)
                .or_else(|| t.namespace.clone()),
            name: Some(name.clone()),
            ..t.clone()
        };
        match delete_one(api, &target, &name, &options) {
            Ok(Deleted::Removed(o) | Deleted::Deferred(o)) => deleted.push(present(t, &o, &Form::Full)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = api.store.current_rv();
    ok(&json!({
        "kind": format!("{}List", t.rt.kind),
        "apiVersion": t.rt.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": deleted,
    }))
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
    create_object(api, &t, &Query::default(), object)
}
