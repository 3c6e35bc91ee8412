//! The deleting verbs: delete and deletecollection with `DeleteOptions` (propagation policy,
//! preconditions, grace periods, dry run), the finalizers that defer a deletion, namespace
//! termination, and dropping the kind of a deleted CRD.
//!
//! It must not create objects nor remove dependents itself: the garbage collector does, following
//! the propagation finalizers set here.

use serde_json::{Value, json};

use super::{ApiResult, modify_object, ok, present, selectors, str_at};
use crate::api::kinds;
use crate::api::status::{ApiError, Cause, delete_success};
use crate::api::{ApiState, Form, Query, Target};
use crate::store::{StoreError, now_timestamp};

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
