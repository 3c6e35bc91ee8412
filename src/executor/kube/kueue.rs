//! Kueue: the one watcher of Kueue's `Workload` objects (kueue.x-k8s.io/v1beta1) per watched
//! scope, started only when Kueue integration is on, and what a Workload's conditions say of
//! the queued job it stands for.
//!
//! Kueue creates one Workload per queued object (a batch Job, a PyTorchJob, ...), owned by it
//! (a controller ownerReference), and does not copy the object's labels: a Workload is linked
//! to its job by that owner, whose name is the job's workload name (`jobgate-<job id>`), in
//! the tracked job's namespace. Workloads of objects jobgate did not create are ignored.
//!
//! What the Workload says ([`QueueStatus`]) is merged with what the job's own object says:
//! each tracked queued job keeps its object's last status ([`QueueTrack`]), so that a change
//! of either is reported as one whole status, through the same path as every other change.
//!
//! It must not decide phases (the job model does, `Job::observe`), nor write to the cluster:
//! Kueue suspends and unsuspends the objects itself.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::Value;

use super::Inner;
use super::manifest::workload_name;
use super::tracking;
use super::watch::{Handler, WatcherHealth, follow_events, watch_stream};
use crate::model::{Condition, QueueState, QueueStatus, WorkloadStatus};

/// Kueue's API group and the version jobgate reads.
pub const GROUP: &str = "kueue.x-k8s.io";
pub const VERSION: &str = "v1beta1";

impl Inner {
    /// For an event of a queued job's object or Workload (`job_id`): the job's report order,
    /// held until the report is sent; `None` for other jobs.
    pub(super) async fn queue_order(&self, job_id: Option<&str>) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let order = self.tracked.get(job_id?)?.queue.as_ref()?.order.clone();
        Some(order.lock_owned().await)
    }
}

/// The Workload resource, for kube-rs' dynamic API.
fn workload_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, "Workload"), "workloads")
}

/// The jobgate job a Workload stands for: its controller owner's name is a job's workload
/// name.
fn owner_job_id(object: &Value) -> Option<String> {
    let owners = object.pointer("/metadata/ownerReferences")?.as_array()?;
    owners
        .iter()
        .filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .find_map(|o| {
            let name = o.get("name")?.as_str()?;
            let id = name.strip_prefix(&workload_name(""))?;
            (workload_name(id) == name && !id.is_empty()).then(|| id.to_owned())
        })
}

fn condition(value: &Value) -> Option<Condition> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    Some(Condition {
        type_: text("type")?,
        status: text("status")?,
        reason: text("reason"),
        message: text("message"),
        last_transition_time: value
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc)),
    })
}

/// What a Workload's status says of its job, in `queue` (the job's LocalQueue, when the
/// Workload's spec names none): finished, else evicted (preempted), else admitted, else
/// holding quota, else pending with the reason Kueue gives. Kueue resets Evicted and
/// Preempted to False when it reserves quota again, so a True one is current.
pub(super) fn queue_status(object: &Value, queue: &str) -> QueueStatus {
    let conditions: Vec<Condition> = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(condition).collect())
        .unwrap_or_default();
    let is_true = |type_: &str| conditions.iter().find(|c| c.type_ == type_ && c.is_true());
    let (state, behind) = if let Some(c) = is_true("Finished") {
        (QueueState::Finished, Some(c))
    } else if let Some(c) = is_true("Evicted") {
        let state = if is_true("Preempted").is_some() {
            QueueState::Preempted
        } else {
            QueueState::Evicted
        };
        (state, Some(c))
    } else if let Some(c) = is_true("Admitted") {
        (QueueState::Admitted, Some(c))
    } else if let Some(c) = is_true("QuotaReserved") {
        (QueueState::QuotaReserved, Some(c))
    } else {
        let waiting = conditions.iter().find(|c| c.type_ == "QuotaReserved");
        (QueueState::Pending, waiting)
    };
    QueueStatus {
        name: object
            .pointer("/spec/queueName")
            .and_then(Value::as_str)
            .unwrap_or(queue)
            .to_owned(),
        state,
        reason: behind.and_then(|c| c.reason.clone()),
        message: behind.and_then(|c| c.message.clone()),
        cluster_queue: state
            .holds_quota()
            .then(|| {
                object
                    .pointer("/status/admission/clusterQueue")?
                    .as_str()
                    .map(str::to_owned)
            })
            .flatten(),
        since: behind.and_then(|c| c.last_transition_time),
        conditions: conditions.clone(),
    }
}

/// What an added or changed Workload means: the job it stands for, with its merged status,
/// when that changed. Deleted Workloads mean nothing: Kueue deletes them with their object,
/// whose own watcher reports that.
fn applied(inner: &Inner, job_id: String, value: &Value) -> Option<(String, WorkloadStatus)> {
    let mut record = inner.tracked.get_mut(&job_id)?;
    let t = &mut *record;
    let namespace = value.pointer("/metadata/namespace").and_then(Value::as_str);
    if t.finishing || namespace != Some(t.namespace.as_str()) {
        return None;
    }
    let last_sent = t.last_sent;
    let queue = t.queue.as_mut()?;
    let rv = value
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|rv| rv.parse::<u64>().ok());
    if let Some(rv) = rv {
        if rv <= queue.rv {
            return None; // stale
        }
        queue.rv = rv;
    }
    let name = queue.status.as_ref().map(|q| q.name.clone()).unwrap_or_default();
    let status = queue_status(value, &name);
    if queue.status.as_deref() == Some(&status) {
        return None;
    }
    queue.status = Some(Box::new(status));
    let mut report = queue.workload.clone();
    report.queue.clone_from(&queue.status);
    let digest = tracking::digest(&report);
    if last_sent == Some(digest) {
        return None;
    }
    t.last_sent = Some(digest);
    Some((job_id, report))
}

/// The Workload watcher of one scope.
struct WorkloadEvents(Arc<Inner>);

impl Handler<DynamicObject> for WorkloadEvents {
    async fn event(&mut self, event: watcher::Event<DynamicObject>) {
        match event {
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                let Ok(value) = serde_json::to_value(&object) else {
                    return;
                };
                let Some(job_id) = owner_job_id(&value) else {
                    return; // not a Workload of a job of ours
                };
                let _order = self.0.queue_order(Some(&job_id)).await;
                if let Some((job_id, status)) = applied(&self.0, job_id, &value) {
                    self.0.send(job_id, status).await;
                }
            }
            watcher::Event::Init | watcher::Event::InitDone | watcher::Event::Delete(_) => {}
        }
    }
}

impl Inner {
    /// Starts the Workload watcher of each scope, when Kueue integration is on. Every
    /// replica watches them all (Workloads carry no shard label); only the jobs it tracks
    /// (its shards') are reported.
    pub(super) fn start_kueue_watchers(self: &Arc<Self>, watchers: &mut Vec<Arc<WatcherHealth>>) {
        if !self.config.kueue {
            return;
        }
        let resource = workload_resource();
        for scope in self.watch_scopes() {
            let where_ = scope.as_deref().unwrap_or("all namespaces").to_owned();
            let api: Api<DynamicObject> = match &scope {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
                None => Api::all_with(self.client.clone(), &resource),
            };
            let health = WatcherHealth::new(format!("kueue workloads in {where_}"), &self.config.metrics);
            watchers.push(health.clone());
            let mut events = WorkloadEvents(self.clone());
            let inner = self.clone();
            let stream = watch_stream(api, watcher::Config::default());
            self.tasks.spawn(async move {
                follow_events(stream, Some(&health), &inner.shutdown, &mut events).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn workload(conditions: Value) -> Value {
        json!({
            "metadata": {"name": "job-jobgate-x-1a2b3", "namespace": "default",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "jobgate-0190-abc",
                    "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 1}]},
            "status": {"conditions": conditions, "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": []}}
        })
    }

    fn c(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1})
    }

    #[test]
    fn links_a_workload_to_its_owner_job() {
        assert_eq!(owner_job_id(&workload(json!([]))).as_deref(), Some("0190-abc"));
        let mut foreign = workload(json!([]));
        foreign["metadata"]["ownerReferences"][0]["name"] = json!("someone-elses");
        assert_eq!(owner_job_id(&foreign), None);
        let mut not_controller = workload(json!([]));
        not_controller["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        assert_eq!(owner_job_id(&not_controller), None);
    }

    #[test]
    fn reads_each_state_from_the_conditions() {
        let pending = queue_status(
            &workload(json!([c(
                "QuotaReserved",
                "False",
                "Pending",
                "couldn't assign flavors to pod set main: insufficient unused quota for pods in flavor default-flavor, 1 more needed"
            )])),
            "team-a",
        );
        assert_eq!(pending.state, QueueState::Pending);
        assert_eq!(pending.reason.as_deref(), Some("Pending"));
        assert!(pending.message.unwrap().contains("insufficient unused quota"));
        assert_eq!(pending.cluster_queue, None, "no quota held");

        let admitted = queue_status(
            &workload(json!([
                c(
                    "QuotaReserved",
                    "True",
                    "QuotaReserved",
                    "Quota reserved in ClusterQueue cluster-queue"
                ),
                c("Admitted", "True", "Admitted", "The workload is admitted")
            ])),
            "team-a",
        );
        assert_eq!(admitted.state, QueueState::Admitted);
        assert_eq!(admitted.cluster_queue.as_deref(), Some("cluster-queue"));
        assert_eq!(admitted.conditions.len(), 2);

        let preempted = queue_status(
            &workload(json!([
                c(
                    "QuotaReserved",
                    "False",
                    "Preempted",
                    "Preempted to accommodate a higher priority Workload"
                ),
                c(
                    "Admitted",
                    "False",
                    "NoReservation",
                    "The workload has no reservation"
                ),
                c(
                    "Evicted",
                    "True",
                    "Preempted",
                    "Preempted to accommodate a higher priority Workload"
                ),
                c(
                    "Preempted",
                    "True",
                    "InClusterQueue",
                    "Preempted to accommodate a higher priority Workload"
                )
            ])),
            "team-a",
        );
        assert_eq!(preempted.state, QueueState::Preempted);
        assert_eq!(preempted.reason.as_deref(), Some("Preempted"));

        let readmitted = queue_status(
            &workload(json!([
                c(
                    "QuotaReserved",
                    "True",
                    "QuotaReserved",
                    "Quota reserved in ClusterQueue cluster-queue"
                ),
                c("Admitted", "True", "Admitted", "The workload is admitted"),
                c("Evicted", "False", "QuotaReserved", "Previously: Preempted")
            ])),
            "team-a",
        );
        assert_eq!(
            readmitted.state,
            QueueState::Admitted,
            "a False Evicted is history"
        );

        let finished = queue_status(
            &workload(json!([
                c("Admitted", "True", "Admitted", "The workload is admitted"),
                c("Finished", "True", "Succeeded", "Job finished successfully")
            ])),
            "team-a",
        );
        assert_eq!(finished.state, QueueState::Finished);
    }
}
