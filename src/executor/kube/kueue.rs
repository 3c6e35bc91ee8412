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
//! What one Workload event means for its job is a pure state machine ([`workload_event`]):
//! the job's record and one event in, the status to report out; the watcher's glue looks the
//! record up, holds the job's report order and sends the report. Plain event sequences test
//! it (`kueue_tests.rs`).
//!
//! It must not decide phases (the job model does, `Job::observe`), nor write to the cluster:
//! Kueue suspends and unsuspends the objects itself.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::Value;

use super::KubeShared;
use super::manifest::workload_name;
use super::tracking::{self, Tracked};
use super::watch::{Handler, WatcherHealth, follow_events, watch_stream};
use crate::model::{Condition, QueueState, QueueStatus, WorkloadStatus};

/// Kueue's API group and the version jobgate reads.
pub const GROUP: &str = "kueue.x-k8s.io";
pub const VERSION: &str = "v1beta1";

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

/// One event of a Workload, as plain values.
#[derive(Clone, Debug)]
pub(super) enum WorkloadEvent {
    /// The Workload was added or changed, or a (re-)list shows it.
    Applied(Value),
    /// The Workload was deleted.
    Deleted(Value),
}

impl WorkloadEvent {
    fn object(&self) -> &Value {
        match self {
            Self::Applied(object) | Self::Deleted(object) => object,
        }
    }
}

/// What one event of its Workload means for the tracked queued job whose record is `t`:
/// the job's merged status to report, when that changed. Deleted Workloads mean nothing:
/// Kueue deletes them with their object, whose own watcher reports that. Pure: it reads the
/// event and changes the record, nothing else.
pub(super) fn workload_event(t: &mut Tracked, event: &WorkloadEvent) -> Option<WorkloadStatus> {
    let WorkloadEvent::Applied(value) = event else {
        return None;
    };
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
    Some(report)
}

/// The Workload watcher of one scope.
struct WorkloadEvents(Arc<KubeShared>);

impl Handler<DynamicObject> for WorkloadEvents {
    async fn event(&mut self, event: watcher::Event<DynamicObject>) {
        let (watcher::Event::InitApply(object)
        | watcher::Event::Apply(object)
        | watcher::Event::Delete(object)) = &event
        else {
            return; // the markers of a list: a Workload missing from one means nothing
        };
        let Ok(value) = serde_json::to_value(object) else {
            return;
        };
        let event = match event {
            watcher::Event::Delete(_) => WorkloadEvent::Deleted(value),
            _ => WorkloadEvent::Applied(value),
        };
        let Some(job_id) = owner_job_id(event.object()) else {
            return; // not a Workload of a job of ours
        };
        let _order = self.0.jobs.queue_order(Some(&job_id)).await;
        let report = self
            .0
            .jobs
            .tracked
            .get_mut(&job_id)
            .and_then(|mut t| workload_event(&mut t, &event));
        if let Some(status) = report {
            self.0.positions.workload_changed();
            self.0.send(job_id, status).await;
        }
    }
}

impl KubeShared {
    /// Starts the Workload watcher of each scope, when Kueue integration is on. Every
    /// replica watches them all (Workloads carry no shard label); only the jobs it tracks
    /// (its shards') are reported.
    pub(super) fn start_kueue_watchers(self: &Arc<Self>, watchers: &mut Vec<Arc<WatcherHealth>>) {
        if !self.ctx.config.kueue {
            return;
        }
        let resource = workload_resource();
        for scope in self.ctx.watch_scopes() {
            let where_ = scope.as_deref().unwrap_or("all namespaces").to_owned();
            let api: Api<DynamicObject> = match &scope {
                Some(ns) => Api::namespaced_with(self.ctx.client.clone(), ns, &resource),
                None => Api::all_with(self.ctx.client.clone(), &resource),
            };
            let health = WatcherHealth::new(format!("kueue workloads in {where_}"), &self.ctx.config.metrics);
            watchers.push(health.clone());
            let mut events = WorkloadEvents(self.clone());
            let shared = self.clone();
            let stream = watch_stream(api, watcher::Config::default());
            self.ctx.tasks.spawn(async move {
                follow_events(stream, Some(&health), &shared.ctx.shutdown, &mut events).await;
            });
        }
    }
}

#[cfg(test)]
#[path = "kueue_tests.rs"]
mod tests;
