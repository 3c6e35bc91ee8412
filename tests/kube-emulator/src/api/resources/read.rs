//! The reading verbs: get and list, with the resourceVersion rules (`0`, `NotOlderThan`,
//! `Exact`, waiting briefly for a future version), `limit`/`continue` pagination over one kept
//! snapshot, and a list rebuilt at an older resourceVersion from the store's history.
//!
//! It must not write the store.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::{ApiResult, ok, present, selectors, str_at};
use crate::api::status::{ApiError, Cause};
use crate::api::{ApiState, Form, Query, Snapshot, Target, table};
use crate::store::{ChangeKind, Store};

/// How long a request for a future resourceVersion waits before `504 Too large resource version`
/// (the watch cache's `blockTimeout`).
pub(crate) const FUTURE_RV_WAIT: Duration = Duration::from_secs(3);

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

/// The watch cache's answer when it did not reach `requested` in time: `504 Timeout`, "Too large
/// resource version: N, current: M", cause `ResourceVersionTooLarge`, retry after 1 s.
pub(crate) fn too_large_rv(requested: u64, current: u64) -> ApiError {
    let mut e = ApiError::timeout(format!(
        "Timeout: Too large resource version: {requested}, current: {current}"
    ));
    *e.details = json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    });
    e.retry_after = Some(1);
    e
}

/// Waits for `rv` (see [`wait_for_rv`]), or the `504` a too-new resourceVersion gets.
async fn fresh_enough(store: &Store, rv: u64) -> Result<(), ApiError> {
    if wait_for_rv(store, rv).await {
        Ok(())
    } else {
        Err(too_large_rv(rv, store.current_rv()))
    }
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

pub async fn get(api: &ApiState, t: &Target, q: &Query, form: &Form) -> ApiResult {
    if let Some(rv) = q.value("resourceVersion")
        && rv != "0"
    {
        fresh_enough(&api.store, parse_rv(rv)?).await?;
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
        if let Some(rv) = rv_param.filter(|r| *r != "0") {
            fresh_enough(&api.store, parse_rv(rv)?).await?;
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
