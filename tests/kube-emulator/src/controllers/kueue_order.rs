//! The order in which the simulated Kueue holds a ClusterQueue's pending workloads, shared by
//! its admission pass and by the visibility API (`api::kueue_visibility`), so that the
//! positions a client reads are the order admission follows.
//!
//! As in Kueue's queue manager: higher `spec.priority` first, then the earlier queue time
//! (the eviction time of a requeued workload, its creation otherwise), then the name. A
//! ClusterQueue's `queueingStrategy` (`BestEffortFIFO`, `StrictFIFO`) orders alike; the
//! strategies differ in whether a head that does not fit blocks the others, which admission
//! does not model (every pending workload that fits is admitted). A workload's priority is
//! resolved once, when its Workload is created, as Kueue's job reconciler does: the value of
//! the WorkloadPriorityClass its Job's `kueue.x-k8s.io/priority-class` label names, else the
//! value of the PriorityClass its pod template's `priorityClassName` names, else that of the
//! PriorityClass marked `globalDefault`, else 0.
//!
//! It must not write anything: it reads the store and sorts.

use std::cmp::Reverse;

use serde_json::{Value, json};

use super::kueue::{holds_quota, is_true};
use super::objects::{self, is_deleting, str_at};
use crate::store::Store;

pub(crate) const LOCAL_QUEUES: &str = "localqueues.kueue.x-k8s.io";
pub(crate) const CLUSTER_QUEUES: &str = "clusterqueues.kueue.x-k8s.io";
const WORKLOAD_PRIORITY_CLASSES: &str = "workloadpriorityclasses.kueue.x-k8s.io";
const PRIORITY_CLASSES: &str = "priorityclasses.scheduling.k8s.io";
/// The Job label naming a WorkloadPriorityClass.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";

fn class_value(class: &Value) -> i64 {
    class.get("value").and_then(Value::as_i64).unwrap_or(0)
}

/// The priority fields of the Workload of `job`: `priority`, and `priorityClassName` with
/// `priorityClassSource` when a class gave it.
pub(crate) fn workload_priority(store: &Store, job: &Value) -> Value {
    if let Some(name) = objects::label(job, PRIORITY_CLASS_LABEL)
        && let Some(class) = store.get(WORKLOAD_PRIORITY_CLASSES, None, name)
    {
        return json!({"priority": class_value(&class), "priorityClassName": name,
            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"});
    }
    let pod_class = str_at(job, "/spec/template/spec/priorityClassName").filter(|n| !n.is_empty());
    let class = match pod_class {
        Some(name) => store.get(PRIORITY_CLASSES, None, name),
        None => {
            let (defaults, _) = store.list(PRIORITY_CLASSES, None, &|c| {
                c.get("globalDefault").and_then(Value::as_bool) == Some(true)
            });
            defaults.into_iter().max_by_key(class_value)
        }
    };
    match class {
        Some(class) => json!({"priority": class_value(&class), "priorityClassName": objects::name(&class),
            "priorityClassSource": "scheduling.k8s.io/priorityclass"}),
        None => json!({"priority": 0}),
    }
}

/// A workload's priority (`spec.priority`, 0 when unset).
pub(crate) fn priority(workload: &Value) -> i64 {
    workload
        .pointer("/spec/priority")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// When a workload joined its queue: its eviction for a requeued one (it goes behind the
/// others of its priority), its creation otherwise.
fn queue_time(workload: &Value) -> String {
    super::kueue::condition(workload, "Evicted")
        .and_then(|c| str_at(c, "/lastTransitionTime"))
        .or_else(|| str_at(workload, "/metadata/creationTimestamp"))
        .unwrap_or_default()
        .to_owned()
}

/// Sorts workloads into queue order.
pub(crate) fn sort_in_queue_order(workloads: &mut [&Value]) {
    workloads.sort_by_key(|w| (Reverse(priority(w)), queue_time(w), objects::name(w).to_owned()));
}

/// Whether a workload waits in its queue: it holds no quota, is not finished and is not
/// being deleted.
pub(crate) fn is_pending(workload: &Value) -> bool {
    !holds_quota(workload) && !is_true(workload, "Finished") && !is_deleting(workload)
}

/// The ClusterQueue the LocalQueue `namespace/name` points at, when that LocalQueue exists.
pub(crate) fn cluster_queue_of_local(store: &Store, namespace: &str, name: &str) -> Option<String> {
    let local = store.get(LOCAL_QUEUES, Some(namespace), name)?;
    Some(
        str_at(&local, "/spec/clusterQueue")
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The pending workloads of ClusterQueue `name` in queue order, or `None` when it does not
/// exist. A workload belongs to the ClusterQueue its LocalQueue points at.
pub(crate) fn pending_workloads(store: &Store, name: &str) -> Option<Vec<Value>> {
    store.get(CLUSTER_QUEUES, None, name)?;
    // The store's lock is held while a list filters: the LocalQueues are read after it.
    let (workloads, _) = store.list(super::kueue::WORKLOADS, None, &|w| is_pending(w));
    let mut refs: Vec<&Value> = workloads
        .iter()
        .filter(|w| {
            cluster_queue_of_local(
                store,
                objects::namespace(w).unwrap_or_default(),
                str_at(w, "/spec/queueName").unwrap_or_default(),
            )
            .as_deref()
                == Some(name)
        })
        .collect();
    sort_in_queue_order(&mut refs);
    Some(refs.into_iter().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_priority_first_then_queue_time() {
        let w = |name: &str, priority: i64, created: &str| json!({"metadata": {"name": name, "creationTimestamp": created}, "spec": {"priority": priority}});
        let (a, b, c) = (
            w("a", 0, "2026-01-01T00:00:01Z"),
            w("b", 10, "2026-01-01T00:00:02Z"),
            w("c", 0, "2026-01-01T00:00:00Z"),
        );
        let mut order = vec![&a, &b, &c];
        sort_in_queue_order(&mut order);
        let names: Vec<&str> = order.iter().map(|w| objects::name(w)).collect();
        assert_eq!(names, ["b", "c", "a"]);
    }
}
