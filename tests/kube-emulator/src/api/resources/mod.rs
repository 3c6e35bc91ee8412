//! The object verbs: get, list (with `limit`/`continue` and the resourceVersion rules), create,
//! update (PUT), patch, delete (propagation, preconditions, grace periods, finalizers) and
//! deletecollection, for the main endpoint and the `/status` subresource.
//!
//! Every write goes through one [`Store`](crate::store::Store) call so that it is atomic and
//! produces exactly one watch event; per-kind rules come from [`super::kinds`]. Must not stream
//! (see `watch`, `logs`).
//!
//! # Layout
//! - this module: what every verb shares (the presented object, selectors, the one-transaction
//!   write).
//! - `read`: get and list (resourceVersion semantics, pagination, continue tokens).
//! - `write`: create, update (PUT) and patch, and registering a written CRD's kind.
//! - `delete`: delete and deletecollection (propagation, preconditions, grace, finalizers).

mod delete;
mod read;
mod write;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::kinds;
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, json_response};
use super::{ApiState, Form, Query, Target, table};
use crate::store::StoreError;

pub use delete::{delete, delete_collection};
pub use read::{get, list};
pub(crate) use read::{too_large_rv, wait_for_rv};
pub use write::{create, create_from_value, patch, update};

type ApiResult = Result<Response, ApiError>;

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

/// Parsed `labelSelector` and `fieldSelector` (400 on bad syntax or an unsupported field).
pub(crate) fn selectors(t: &Target, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels =
        LabelSelector::parse(q.get("labelSelector").unwrap_or_default()).map_err(ApiError::bad_request)?;
    // kubectl prefixes this with "Unable to find … that match label selector …" itself.
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default(), &t.storage)
        .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
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
