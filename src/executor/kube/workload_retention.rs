//! Retention of workload templates' objects: a finished object of a kind without a native
//! TTL gets its own deletion timer (never a sweep of all objects), set when its job finishes,
//! when its watch shows it finished and no longer tracked (after a restart, read back from
//! its annotations), or when a cancel patches it.
//!
//! It owns [`RetentionTimers`], the executor's part that remembers which deletions are
//! scheduled. It must not decide whether an object has finished beyond its template's rules.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use kube::api::{ApiResource, DeleteParams, DynamicObject};

use super::kinds::Kind;
use super::manifest::{JOB_ID_LABEL, TEMPLATE_ANNOTATION};
use super::{KubeShared, label};
use crate::model::MappedPhase;
use crate::templates::{Retention, WorkloadTemplate};

/// Finished workloads whose deletion is scheduled (namespace/name/uid).
#[derive(Default)]
pub(super) struct RetentionTimers {
    timers: DashMap<String, ()>,
}

impl KubeShared {
    /// How long the job's object is kept once finished, when jobgate must delete it.
    pub(super) fn retention_of(&self, id: &str) -> Option<Duration> {
        let t = self.jobs.tracked.get(id)?;
        let decoding = t.decoding.as_ref()?;
        retention_seconds(&decoding.template, t.ttl_seconds).map(Duration::from_secs)
    }

    /// An object of ours that jobgate no longer tracks: if it has finished and its template
    /// keeps finished objects for a while only, its deletion is scheduled (once).
    pub(super) fn retain_finished(
        self: &Arc<Self>,
        kind: &Arc<Kind>,
        resource: &ApiResource,
        obj: &DynamicObject,
    ) {
        let Some(template) = obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TEMPLATE_ANNOTATION))
            .and_then(|name| self.ctx.config.templates.get(name))
        else {
            return;
        };
        if Kind::key(template)
            != (
                kind.gvk.group.clone(),
                kind.gvk.version.clone(),
                kind.gvk.kind.clone(),
            )
        {
            return;
        }
        let ttl = obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TTL_ANNOTATION))
            .and_then(|v| v.parse().ok());
        let Some(seconds) = retention_seconds(template, ttl) else {
            return;
        };
        let value = serde_json::to_value(obj).unwrap_or_default();
        let decoded = template.status.decode(&value, &MappedPhase::default());
        if decoded.mapped.is_none_or(|m| !m.phase.is_terminal()) {
            return;
        }
        let finished = decoded.completion_time.unwrap_or_else(Utc::now);
        self.schedule_deletion(resource.clone(), obj, finished, Duration::from_secs(seconds));
    }

    /// Deletes `obj` `after` its finish, with its own timer (never a sweep of all objects).
    pub(super) fn schedule_deletion(
        self: &Arc<Self>,
        resource: ApiResource,
        obj: &DynamicObject,
        finished: DateTime<Utc>,
        after: Duration,
    ) {
        let (Some(namespace), Some(name), uid) = (
            obj.metadata.namespace.clone(),
            obj.metadata.name.clone(),
            obj.metadata.uid.clone(),
        ) else {
            return;
        };
        let job_id = label(&obj.metadata, JOB_ID_LABEL).map(str::to_owned);
        let key = format!("{namespace}/{name}/{}", uid.clone().unwrap_or_default());
        if self.retention.timers.insert(key.clone(), ()).is_some() {
            return; // already scheduled
        }
        let due = finished + chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
        let wait = (due - Utc::now()).to_std().unwrap_or_default();
        let shared = self.clone();
        self.ctx.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shared.ctx.shutdown.cancelled() => {
                    shared.retention.timers.remove(&key);
                    return;
                }
            }
            // The replica that owns the job's shard now deletes it.
            if job_id.as_deref().is_some_and(|id| !shared.acts_for(id)) {
                shared.retention.timers.remove(&key);
                return;
            }
            let api = shared.dynamic_api(&resource, &namespace);
            let params = DeleteParams {
                preconditions: uid.map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            let deleted = match &job_id {
                Some(id) => shared.acting_for(id, api.delete(&name, &params)).await,
                None => api.delete(&name, &params).await,
            };
            match deleted {
                Ok(_) => tracing::info!(%namespace, %name, kind = %resource.kind, "deleted a finished workload after its retention"),
                Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 404) => {}
                // Kept in the timers' set only while scheduled: the next list schedules it again.
                Err(e) => tracing::warn!(%namespace, %name, error = %e, "deleting a finished workload failed; retried at the next list"),
            }
            shared.retention.timers.remove(&key);
        });
    }
}

/// The annotation that keeps a job's `ttlSecondsAfterFinished` on its object.
pub(super) const TTL_ANNOTATION: &str = "jobgate.io/ttl-seconds-after-finished";

/// How long a finished object of `template` is kept, for a job whose
/// `ttlSecondsAfterFinished` is `ttl`; `None` when jobgate does not delete it.
pub(super) fn retention_seconds(template: &WorkloadTemplate, ttl: Option<i32>) -> Option<u64> {
    match template.retention.as_ref()? {
        Retention::Seconds(s) => Some(*s),
        Retention::JobTtl => ttl.map(|t| t.max(0) as u64),
    }
}
