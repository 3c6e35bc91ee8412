//! Carrying out what batch Jobs' events mean for their jobs (decided in `tracking.rs`):
//! reporting a changed status, finishing a decided job (its final status awaited, then its
//! pods' result, failure cause and log tail captured and reported), and reporting a job whose
//! Job vanished with what its pods prove. Objects of workload kinds get the same treatment in
//! `workloads.rs`.
//!
//! It must not decide what an event means (`tracking.rs` does) nor phases: it reports the
//! Job's status as the cluster shows it (see `status.rs`), and the job model derives the
//! phase.

use std::sync::Arc;

use chrono::Utc;
use k8s_openapi::api::batch::v1::Job as K8sJob;

use super::Inner;
use super::status::{self, PodInfo};
use super::tracking::{Action, Vanish};
use crate::model::WorkloadStatus;

impl Inner {
    /// Carries out what the tracking decided about batch Jobs.
    pub(super) async fn carry_out_job_actions(self: &Arc<Self>, actions: Vec<Action<K8sJob>>) {
        for action in actions {
            match action {
                Action::Report { job_id, status } => self.send(job_id, status).await,
                // The decided status is kept in the record: the final one may follow.
                Action::Finish { job_id, .. } => self.spawn_finish(job_id),
                Action::Settled { job_id } => {
                    tracing::debug!(job = %job_id, "its decided status changed");
                    self.jobs_version.send_modify(|v| *v += 1);
                }
                Action::Vanished { job_id, how } => {
                    if how == Vanish::Unlisted {
                        tracing::warn!(job = %job_id, "its Kubernetes Job is gone though it never finished");
                    }
                    self.spawn_vanished(job_id);
                }
                // Finished, cancelled, or not ours: nothing is left to do for a batch Job.
                Action::Untracked { .. } => {}
            }
        }
    }

    fn spawn_vanished(self: &Arc<Self>, id: String) {
        let inner = self.clone();
        self.tasks.spawn(async move {
            let Some(completions) = inner.tracked.get(&id).map(|t| t.completions) else {
                return;
            };
            // Pods deleted with the Job may still be on their way through the pod watch.
            inner.wait_for_pods(&id, None).await;
            let pods: Vec<PodInfo> = inner.pods.get(&id).map(|p| p.infos()).unwrap_or_default();
            let status = status::vanished(completions, &pods, Utc::now());
            inner.send(id.clone(), status).await;
            inner.untrack(&id);
        });
    }

    /// Captures a decided job's result, failure cause and log tail, then reports it.
    fn spawn_finish(self: &Arc<Self>, id: String) {
        let inner = self.clone();
        self.tasks.spawn(async move {
            let Some(mut status) = inner.wait_for_final_status(&id).await else {
                return; // shutting down: the next start re-lists and finishes it
            };
            let counted = status.succeeded + status.failed;
            if !inner.wait_for_pods(&id, Some(counted)).await || !inner.wait_for_archive(&id).await {
                return;
            }
            let Some(namespace) = inner.tracked.get(&id).map(|t| t.namespace.clone()) else {
                return;
            };
            let pods: Vec<PodInfo> = inner.pods.get(&id).map(|p| p.infos()).unwrap_or_default();
            if status::is_success(&status) {
                status.result = status::result_of(&pods);
            } else {
                status.message = status::failure_of(&pods);
            }
            let lines = inner.capture_logs(&id, &namespace, &pods).await;
            status.executor_state = serde_json::json!({ "logTail": lines });
            inner.send(id.clone(), status).await;
            inner.untrack(&id);
        });
    }

    /// The job's decided status once the controller has written its final condition
    /// (counts settle then), or the newest one when the finish grace passes first (the Job
    /// was deleted, or the controller predates the interim conditions). `None` when shutting
    /// down.
    async fn wait_for_final_status(&self, id: &str) -> Option<WorkloadStatus> {
        let deadline = tokio::time::Instant::now() + self.config.finish_grace;
        let mut changes = self.jobs_version.subscribe();
        loop {
            let settled = self.tracked.get(id)?.settled.clone()?;
            let is_final = settled
                .conditions
                .iter()
                .any(|c| c.is_true() && (c.type_ == "Complete" || c.type_ == "Failed"));
            if is_final {
                return Some(*settled);
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Some(*settled),
                _ = self.shutdown.cancelled() => return None,
            }
        }
    }

    /// The job is done with: its final status is reported, or it is no longer ours.
    pub(super) fn untrack(&self, id: &str) {
        self.tracked.remove(id);
        self.pods.remove(id);
    }
}
