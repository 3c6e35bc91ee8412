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

use super::KubeShared;
use super::status::{self, PodInfo};
use super::tracking::{Action, Vanish};
use crate::model::WorkloadStatus;

impl KubeShared {
    /// Carries out what the tracking decided about batch Jobs.
    pub(super) async fn carry_out_job_actions(self: &Arc<Self>, actions: Vec<Action<K8sJob>>) {
        for action in actions {
            match action {
                Action::Report { job_id, status } => self.send(job_id, status).await,
                // The decided status is kept in the record: the final one may follow.
                Action::Finish { job_id, .. } => self.spawn_finish(job_id),
                Action::Settled { job_id } => {
                    tracing::debug!(job = %job_id, "its decided status changed");
                    self.jobs.bump();
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
        let shared = self.clone();
        self.ctx.tasks.spawn(async move {
            let Some(completions) = shared.jobs.tracked.get(&id).map(|t| t.completions) else {
                return;
            };
            // Pods deleted with the Job may still be on their way through the pod watch.
            shared.wait_for_pods(&id, None).await;
            let pods: Vec<PodInfo> = shared.pods.infos(&id);
            let status = status::vanished(completions, &pods, Utc::now());
            shared.send(id.clone(), status).await;
            shared.untrack(&id);
        });
    }

    /// Captures a decided job's result, failure cause and log tail, then reports it.
    fn spawn_finish(self: &Arc<Self>, id: String) {
        let shared = self.clone();
        self.ctx.tasks.spawn(async move {
            let Some(mut status) = shared.wait_for_final_status(&id).await else {
                return; // shutting down: the next start re-lists and finishes it
            };
            let counted = status.succeeded + status.failed;
            if !shared.wait_for_pods(&id, Some(counted)).await || !shared.wait_for_archive(&id).await {
                return;
            }
            let Some(namespace) = shared.jobs.namespace(&id) else {
                return;
            };
            let pods: Vec<PodInfo> = shared.pods.infos(&id);
            if status::is_success(&status) {
                status.result = status::result_of(&pods);
            } else {
                status.message = status::failure_of(&pods);
            }
            let lines = shared.capture_logs(&id, &namespace, &pods).await;
            status.executor_state = serde_json::json!({ "logTail": lines });
            shared.send(id.clone(), status).await;
            shared.untrack(&id);
        });
    }

    /// Waits until the pod watch shows every pod of the job terminal (and at least
    /// `counted` of them), or the finish grace passes. False when shutting down.
    pub(super) async fn wait_for_pods(&self, id: &str, counted: Option<i32>) -> bool {
        self.pods
            .wait_for_pods(id, counted, self.ctx.config.finish_grace, &self.ctx.shutdown)
            .await
    }

    /// The job's decided status once the controller has written its final condition
    /// (counts settle then), or the newest one when the finish grace passes first (the Job
    /// was deleted, or the controller predates the interim conditions). `None` when shutting
    /// down.
    async fn wait_for_final_status(&self, id: &str) -> Option<WorkloadStatus> {
        let deadline = tokio::time::Instant::now() + self.ctx.config.finish_grace;
        let mut changes = self.jobs.version.subscribe();
        loop {
            let settled = self.jobs.tracked.get(id)?.settled.clone()?;
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
                _ = self.ctx.shutdown.cancelled() => return None,
            }
        }
    }
}
