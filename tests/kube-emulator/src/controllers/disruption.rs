//! Disruptions that other components than the kubelet start: the API server's Eviction API and the
//! scheduler's preemption. Both first mark the pod with the `DisruptionTarget` condition (as
//! Kubernetes ≥ 1.31 does, `PodDisruptionConditions` being on) and then delete it gracefully; the
//! kubelet stops its containers as for any deleted pod and keeps the condition, so a Job's
//! `podFailurePolicy` can match it once the pod is `Failed`.
//!
//! - Eviction API (`pods/{name}/eviction`): reason `EvictionByEvictionAPI`, message
//!   `Eviction API: evicting`; no Event. Disruption budgets are not checked (none are emulated).
//! - Preemption: reason `PreemptionByScheduler`, message `<schedulerName>: preempting to
//!   accommodate a higher priority pod`; a `Normal` `Preempted` Event from the scheduler.
//!
//! The kubelet's own node-pressure eviction lives with the kubelet (`kubelet::eviction`). This
//! module must not stop containers or write any other part of the pod status.

use serde_json::{Value, json};

use super::events::{EventType, Recorder, SCHEDULER};
use super::objects::{self, is_deleting, str_at};
use crate::store::{Store, StoreError, now_timestamp};

/// The pod condition a disruption sets.
pub(crate) const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub(crate) const EVICTION_BY_EVICTION_API: &str = "EvictionByEvictionAPI";
pub(crate) const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";
pub(crate) const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// What a disruption found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disrupted {
    /// The pod was marked and its deletion started.
    Marked,
    /// The pod was already being deleted: nothing changed.
    AlreadyDeleting,
    /// No such pod.
    NotFound,
}

/// Sets (or replaces) the `DisruptionTarget` condition in a status's `conditions`, keeping the
/// last transition time when nothing about it changes, as `UpdatePodCondition` does.
pub(crate) fn set_disruption_target(status: &mut Value, reason: &str, message: &str, now: &str) {
    if !status.is_object() {
        *status = json!({});
    }
    let condition = json!({
        "type": DISRUPTION_TARGET, "status": "True", "lastProbeTime": null,
        "lastTransitionTime": now, "reason": reason, "message": message,
    });
    let list = status
        .as_object_mut()
        .map(|m| m.entry("conditions").or_insert_with(|| json!([])));
    let Some(list) = list.and_then(Value::as_array_mut) else {
        return;
    };
    match list
        .iter_mut()
        .find(|c| str_at(c, "/type") == Some(DISRUPTION_TARGET))
    {
        Some(existing) => {
            let same_status = str_at(existing, "/status") == Some("True");
            let kept = existing.get("lastTransitionTime").cloned();
            *existing = condition;
            if same_status && let Some(kept) = kept {
                existing["lastTransitionTime"] = kept;
            }
        }
        None => list.push(condition),
    }
}

/// Marks the pod with `DisruptionTarget` (`reason`, `message`) and deletes it gracefully.
fn mark_and_delete(
    store: &Store,
    namespace: &str,
    name: &str,
    reason: &str,
    message: &dyn Fn(&Value) -> String,
) -> Result<(Disrupted, Option<Value>), StoreError> {
    let Some(pod) = store.get("pods", Some(namespace), name) else {
        return Ok((Disrupted::NotFound, None));
    };
    if is_deleting(&pod) {
        return Ok((Disrupted::AlreadyDeleting, Some(pod)));
    }
    let uid = objects::uid(&pod).to_owned();
    let text = message(&pod);
    let now = now_timestamp();
    let marked = store.modify("pods", Some(namespace), name, &mut |o| {
        if objects::uid(o) != uid {
            return Err(StoreError::Conflict("the pod was replaced".into()));
        }
        set_disruption_target(&mut o["status"], reason, &text, &now);
        Ok(())
    });
    let marked = match marked {
        Ok(p) => p,
        Err(StoreError::NotFound) => return Ok((Disrupted::NotFound, None)),
        Err(e) => return Err(e),
    };
    match objects::delete_gracefully(store, "pods", Some(namespace), name, Some(&uid))? {
        objects::Deletion::Absent => Ok((Disrupted::NotFound, None)),
        _ => Ok((Disrupted::Marked, Some(marked))),
    }
}

/// The Eviction API (`POST pods/{name}/eviction`): `DisruptionTarget` with reason
/// `EvictionByEvictionAPI`, then a graceful delete.
pub fn evict(store: &Store, namespace: &str, name: &str) -> Result<Disrupted, StoreError> {
    mark_and_delete(store, namespace, name, EVICTION_BY_EVICTION_API, &|_| {
        "Eviction API: evicting".to_owned()
    })
    .map(|(d, _)| d)
}

/// The scheduler preempting the pod for a higher-priority one on `node`: `DisruptionTarget` with
/// reason `PreemptionByScheduler`, a graceful delete, and the `Preempted` Event.
pub(crate) fn preempt(
    store: &Store,
    recorder: &Recorder,
    node: &str,
    namespace: &str,
    name: &str,
) -> Result<Disrupted, StoreError> {
    let (outcome, pod) = mark_and_delete(store, namespace, name, PREEMPTION_BY_SCHEDULER, &|pod| {
        let scheduler = str_at(pod, "/spec/schedulerName")
            .filter(|s| !s.is_empty())
            .unwrap_or("default-scheduler");
        format!("{scheduler}: preempting to accommodate a higher priority pod")
    })?;
    if outcome == Disrupted::Marked
        && let Some(pod) = pod
    {
        recorder.record(
            store,
            &pod,
            EventType::Normal,
            "Preempted",
            &format!("Preempted by a pod on node {node}"),
            SCHEDULER,
        );
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_is_added_once_and_keeps_its_transition_time() {
        let mut status = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        set_disruption_target(
            &mut status,
            EVICTION_BY_EVICTION_API,
            "Eviction API: evicting",
            "t1",
        );
        set_disruption_target(
            &mut status,
            EVICTION_BY_EVICTION_API,
            "Eviction API: evicting",
            "t2",
        );
        let conditions = status["conditions"].as_array().expect("list");
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1]["lastTransitionTime"], "t1");
        assert_eq!(conditions[1]["reason"], EVICTION_BY_EVICTION_API);
        let mut empty = Value::Null;
        set_disruption_target(&mut empty, PREEMPTION_BY_SCHEDULER, "m", "t");
        assert_eq!(empty["conditions"][0]["type"], DISRUPTION_TARGET);
    }
}
