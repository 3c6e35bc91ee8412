//! What the Job watcher's events mean for the jobs they belong to: matching each Job to its
//! tracked job, and reconciling after every list.
//!
//! It owns the per-job decisions made from batch Jobs: a stale event (an older
//! resourceVersion) is ignored, a changed status is reported once, a decided Job is finished
//! (its final status awaited, then its pods' result, failure cause and log tail captured and
//! reported), a Job deleted before it finished is reported with what its pods prove, and
//! after each (re-)list a job known to exist before the list began but missing from it is
//! reported as vanished. Objects of workload kinds get the same treatment in `workloads.rs`.
//!
//! It must not decide phases: it reports the Job's status as the cluster shows it (see
//! `status.rs`), and the job model derives the phase.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::Utc;
use k8s_openapi::api::batch::v1::Job as K8sJob;

use super::manifest::JOB_ID_LABEL;
use super::status::{self, PodInfo};
use super::{Inner, Tracked, label, resource_version};
use crate::model::WorkloadStatus;

impl Inner {
    /// A Job was added or changed.
    pub(super) async fn on_job(self: &Arc<Self>, job: K8sJob) {
        let Some(id) = label(&job.metadata, JOB_ID_LABEL).map(str::to_owned) else {
            return;
        };
        let status = status::workload_status(&job);
        let decided = status::is_decided(&status);
        {
            let Some(mut t) = self.tracked.get_mut(&id) else {
                return; // not ours, or already finished
            };
            if t.decoding.is_some() {
                return; // a workload template's job: its object is another kind's
            }
            if let Some(rv) = resource_version(&job.metadata) {
                if rv <= t.last_rv {
                    return; // stale: never move backward
                }
                t.last_rv = rv;
            }
            if t.finishing {
                if decided {
                    t.settled = Some(status);
                    drop(t);
                    self.jobs_version.send_modify(|v| *v += 1);
                }
                return;
            }
            if decided {
                t.finishing = true;
                t.settled = Some(status.clone());
            } else if t.last_sent.as_ref() == Some(&status) {
                return;
            } else {
                t.last_sent = Some(status.clone());
            }
        }
        if decided {
            self.spawn_finish(id);
        } else {
            self.send(id, status).await;
        }
    }

    /// A Job was deleted. Ours are deleted by their TTL after jobgate saw them finish (and
    /// untracked them), or by a cancel (untracked first); any other deletion of an
    /// unfinished job is reported.
    pub(super) fn on_job_deleted(self: &Arc<Self>, job: K8sJob) {
        let Some(id) = label(&job.metadata, JOB_ID_LABEL).map(str::to_owned) else {
            return;
        };
        let status = status::workload_status(&job);
        {
            let Some(mut t) = self.tracked.get_mut(&id) else {
                return;
            };
            if t.finishing || t.decoding.is_some() {
                return;
            }
            t.finishing = true;
            if status::is_decided(&status) {
                t.settled = Some(status.clone());
            }
        }
        if status::is_decided(&status) {
            self.spawn_finish(id);
        } else {
            self.spawn_vanished(id);
        }
    }

    /// After a full list of `namespace` (all namespaces when `None`): every job known to
    /// exist before the list began and missing from it vanished while nobody watched.
    pub(super) fn reconcile(
        self: &Arc<Self>,
        namespace: Option<&str>,
        list_epoch: u64,
        seen: &HashSet<String>,
    ) {
        let vanished = self.vanished_from_list(namespace, list_epoch, seen, |t| t.decoding.is_none());
        for id in vanished {
            tracing::warn!(job = %id, "its Kubernetes Job is gone though it never finished");
            self.spawn_vanished(id);
        }
    }

    /// The tracked jobs `of_list` selects that were known to exist before the list
    /// `list_epoch` of `namespace` began and are missing from it (`seen`): they vanished while
    /// nobody watched. Each is marked finishing, so that it is reported once.
    pub(super) fn vanished_from_list(
        &self,
        namespace: Option<&str>,
        list_epoch: u64,
        seen: &HashSet<String>,
        of_list: impl Fn(&Tracked) -> bool,
    ) -> Vec<String> {
        self.tracked
            .iter_mut()
            .filter_map(|mut t| {
                let eligible = of_list(&t)
                    && namespace.is_none_or(|ns| t.namespace == ns)
                    && !t.finishing
                    && t.confirmed_epoch.is_some_and(|e| e < list_epoch)
                    && !seen.contains(t.key());
                eligible.then(|| {
                    t.finishing = true;
                    t.key().clone()
                })
            })
            .collect()
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
            if !inner.wait_for_pods(&id, Some(counted)).await {
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
                return Some(settled);
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Some(settled),
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
