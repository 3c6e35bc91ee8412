//! Small accessors for objects held as JSON, and the deletion rules every simulated controller
//! uses when it deletes something (graceful pods, finalizers), mirroring what the API server
//! does for a DELETE from a client. Nothing here keeps state.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::store::{Store, StoreError, now_timestamp};

/// The finalizer the Job controller puts on its pods until it has counted them.
pub(crate) const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub(crate) const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub(crate) const ORPHAN_FINALIZER: &str = "orphan";

pub(crate) fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

pub(crate) fn name(object: &Value) -> &str {
    str_at(object, "/metadata/name").unwrap_or_default()
}

pub(crate) fn namespace(object: &Value) -> Option<&str> {
    str_at(object, "/metadata/namespace").filter(|ns| !ns.is_empty())
}

pub(crate) fn uid(object: &Value) -> &str {
    str_at(object, "/metadata/uid").unwrap_or_default()
}

pub(crate) fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.get("metadata")?.get("labels")?.get(key)?.as_str()
}

pub(crate) fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.get("metadata")?.get("annotations")?.get(key)?.as_str()
}

pub(crate) fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

pub(crate) fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub(crate) fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    finalizers(object).contains(&finalizer)
}

/// The `ownerReferences` entries, as JSON objects.
pub(crate) fn owner_references(object: &Value) -> &[Value] {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The ownerReference with `controller: true`, if any.
pub(crate) fn controller_ref(object: &Value) -> Option<&Value> {
    owner_references(object)
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The pod's phase, `""` when unset.
pub(crate) fn pod_phase(pod: &Value) -> &str {
    str_at(pod, "/status/phase").unwrap_or_default()
}

pub(crate) fn pod_is_terminal(pod: &Value) -> bool {
    matches!(pod_phase(pod), "Succeeded" | "Failed")
}

/// Whether the pod's `Ready` condition is True.
pub(crate) fn pod_is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conds| {
            conds
                .iter()
                .any(|c| c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True")))
        })
}

/// Parses an RFC 3339 timestamp as the API writes them.
pub(crate) fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Removes `finalizer` from the object, if it is there. A missing object counts as done (it is
/// gone, which is what removing the finalizer was for).
pub(crate) fn remove_finalizer(
    store: &Store,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
    finalizer: &str,
) -> Result<(), StoreError> {
    let result = store.modify(resource, namespace, name, &mut |o| {
        if let Some(list) = o
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f.as_str() != Some(finalizer));
        }
        Ok(())
    });
    match result {
        Ok(_) | Err(StoreError::NotFound) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a deletion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deletion {
    /// The object is gone.
    Removed,
    /// The object got (or already had) a `deletionTimestamp` and stays until its finalizers are
    /// removed or, for a pod, until its containers have stopped.
    Deferred,
    /// There was nothing to delete.
    Absent,
}

/// Deletes an object the way a DELETE with default options does, so that what the controllers
/// delete behaves like what a client deletes:
/// - a pod that is bound to a node and not terminal is deleted gracefully: `deletionTimestamp =
///   now + terminationGracePeriodSeconds` (default 30); the kubelet then stops it;
/// - an object with finalizers gets `deletionTimestamp` and stays until they are gone;
/// - anything else is removed at once.
///
/// With `uid`, the object must still be that incarnation (`Conflict` otherwise), like a DELETE
/// with `preconditions.uid`.
pub(crate) fn delete_gracefully(
    store: &Store,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
    uid: Option<&str>,
) -> Result<Deletion, StoreError> {
    let Some(current) = store.get(resource, namespace, name) else {
        return Ok(Deletion::Absent);
    };
    if let Some(uid) = uid
        && self::uid(&current) != uid
    {
        return Err(StoreError::Conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            self::uid(&current)
        )));
    }
    if is_deleting(&current) {
        return Ok(Deletion::Deferred);
    }
    let grace = if resource == "pods"
        && str_at(&current, "/spec/nodeName").is_some_and(|n| !n.is_empty())
        && !pod_is_terminal(&current)
    {
        current
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30)
            .max(0)
    } else {
        0
    };
    if grace == 0 && finalizers(&current).is_empty() {
        return match store.delete(resource, namespace, name, uid) {
            Ok(_) => Ok(Deletion::Removed),
            Err(StoreError::NotFound) => Ok(Deletion::Absent),
            Err(e) => Err(e),
        };
    }
    let expected_uid = self::uid(&current).to_owned();
    let at = Utc::now() + chrono::Duration::seconds(grace);
    let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let result = store.modify(resource, namespace, name, &mut |o| {
        if self::uid(o) != expected_uid {
            return Err(StoreError::Conflict("the object was replaced".into()));
        }
        if !is_deleting(o)
            && let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert(
                "deletionTimestamp".into(),
                json!(if grace == 0 {
                    now_timestamp()
                } else {
                    stamp.clone()
                }),
            );
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        }
        Ok(())
    });
    match result {
        Ok(after) if store.get(resource, namespace, name).is_none() && is_deleting(&after) => {
            Ok(Deletion::Removed)
        }
        Ok(_) => Ok(Deletion::Deferred),
        Err(StoreError::NotFound) => Ok(Deletion::Absent),
        Err(e) => Err(e),
    }
}

/// A reference to the object for `involvedObject`/logs: `namespace/name`.
pub(crate) fn display(object: &Value) -> String {
    match namespace(object) {
        Some(ns) => format!("{ns}/{}", name(object)),
        None => name(object).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    }

    #[test]
    fn unscheduled_pod_goes_at_once_and_bound_pod_waits() {
        let store = Store::new();
        store.create("pods", Some("default"), pod("a")).expect("a");
        assert_eq!(
            delete_gracefully(&store, "pods", Some("default"), "a", None),
            Ok(Deletion::Removed)
        );
        assert!(store.get("pods", Some("default"), "a").is_none());

        let mut bound = pod("b");
        bound["spec"]["nodeName"] = json!("n");
        bound["status"] = json!({"phase": "Running"});
        store.create("pods", Some("default"), bound).expect("b");
        assert_eq!(
            delete_gracefully(&store, "pods", Some("default"), "b", None),
            Ok(Deletion::Deferred)
        );
        let b = store.get("pods", Some("default"), "b").expect("still there");
        assert_eq!(b["metadata"]["deletionGracePeriodSeconds"], 30);
        assert!(is_deleting(&b));
        assert_eq!(
            delete_gracefully(&store, "pods", Some("default"), "nope", None),
            Ok(Deletion::Absent)
        );
    }

    #[test]
    fn finalizers_defer_and_uid_precondition_holds() {
        let store = Store::new();
        let mut p = pod("c");
        p["metadata"]["finalizers"] = json!([JOB_TRACKING_FINALIZER]);
        store.create("pods", Some("default"), p).expect("c");
        assert!(matches!(
            delete_gracefully(&store, "pods", Some("default"), "c", Some("other")),
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(
            delete_gracefully(&store, "pods", Some("default"), "c", None),
            Ok(Deletion::Deferred)
        );
        remove_finalizer(&store, "pods", Some("default"), "c", JOB_TRACKING_FINALIZER).expect("remove");
        assert!(
            store.get("pods", Some("default"), "c").is_none(),
            "gone with its last finalizer"
        );
        remove_finalizer(&store, "pods", Some("default"), "c", JOB_TRACKING_FINALIZER)
            .expect("absent is fine");
    }
}
