//! Reading Kubernetes status: a batch/v1 Job's status as a [`WorkloadStatus`], and what a
//! pod tells about its run (index, phase, exit code, termination message).
//!
//! Phases are not decided here: the job model derives them from the conditions copied here
//! (Complete, Failed, SuccessCriteriaMet, FailureTarget, Suspended). This module only
//! translates shapes, tolerating both the ≥1.31 condition sequence and the older one.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::model::{Condition, MAX_RESULT_BYTES, WorkloadStatus, clip};

/// A Kubernetes timestamp as jobgate's.
fn time(t: &Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

/// Conditions after which the Job's outcome is decided.
const DECIDED: [&str; 4] = ["Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"];

/// The Job's status as jobgate's executors report it.
pub fn workload_status(job: &K8sJob) -> WorkloadStatus {
    let Some(status) = &job.status else {
        return WorkloadStatus::default();
    };
    let conditions = status
        .conditions
        .iter()
        .flatten()
        .map(|c| Condition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            // Before 1.31 the Complete condition carried no reason.
            reason: c.reason.clone().filter(|r| !r.is_empty()).or_else(|| {
                (c.type_ == "Complete" && c.status == "True").then(|| "CompletionsReached".to_owned())
            }),
            message: c.message.clone().filter(|m| !m.is_empty()),
            last_transition_time: c.last_transition_time.as_ref().and_then(time),
        })
        .collect();
    WorkloadStatus {
        conditions,
        start_time: status.start_time.as_ref().and_then(time),
        completion_time: status.completion_time.as_ref().and_then(time),
        active: status.active.unwrap_or(0),
        ready: status.ready.unwrap_or(0),
        succeeded: status.succeeded.unwrap_or(0),
        failed: status.failed.unwrap_or(0),
        completed_indexes: status
            .completed_indexes
            .as_deref()
            .map(parse_indexes)
            .unwrap_or_default(),
        ..WorkloadStatus::default()
    }
}

/// Whether the status says the outcome is decided (success or failure).
pub fn is_decided(status: &WorkloadStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.is_true() && DECIDED.contains(&c.type_.as_str()))
}

/// Whether the decided outcome is a success.
pub fn is_success(status: &WorkloadStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.is_true() && (c.type_ == "Complete" || c.type_ == "SuccessCriteriaMet"))
}

/// Parses an interval list such as `"0-2,5,7-8"`; malformed parts are skipped.
pub fn parse_indexes(s: &str) -> BTreeSet<i32> {
    let mut set = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>())
                    && a <= b
                    && b - a <= 1_000_000
                {
                    set.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    set.insert(i);
                }
            }
        }
    }
    set
}

/// What jobgate keeps of one pod of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    pub namespace: Option<String>,
    /// It holds jobgate's log finalizer: its log is still to be archived.
    pub archiving: bool,
    /// It has a deletionTimestamp.
    pub deleting: bool,
    /// The container whose state and log are the run's: the job's own, else the first.
    pub container: Option<String>,
    pub index: Option<i32>,
    pub phase: PodPhase,
    /// Whether the job's container has started (its logs can be read).
    pub started: bool,
    pub exit_code: Option<i32>,
    /// The termination message (the result file, or the log tail of a failed run).
    pub message: Option<String>,
    /// `terminated.reason` or the pod's own reason (Error, OOMKilled, DeadlineExceeded…).
    pub reason: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: Option<DateTime<Utc>>,
    /// When its container started running.
    pub started_at: Option<DateTime<Utc>>,
    /// The reason of its `DisruptionTarget` condition, when the cluster is ending it
    /// (`PreemptionByScheduler`, `EvictionByEvictionAPI`, `TerminationByKubelet`…).
    pub disruption: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl PodPhase {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// The job's container's view of a pod.
pub fn pod_info(pod: &Pod) -> Option<PodInfo> {
    let name = pod.metadata.name.clone()?;
    let labels = pod.metadata.labels.as_ref();
    let annotations = pod.metadata.annotations.as_ref();
    let index = labels
        .and_then(|l| l.get("batch.kubernetes.io/job-completion-index"))
        .or_else(|| annotations.and_then(|a| a.get("batch.kubernetes.io/job-completion-index")))
        .and_then(|i| i.parse().ok());
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        _ => PodPhase::Pending,
    };
    let container = status.and_then(|s| s.container_statuses.as_ref()).and_then(|cs| {
        cs.iter()
            .find(|c| c.name == super::manifest::CONTAINER_NAME)
            .or(cs.first())
    });
    let state = container.and_then(|c| c.state.as_ref());
    let terminated = state.and_then(|s| s.terminated.as_ref());
    let started = state.is_some_and(|s| s.running.is_some() || s.terminated.is_some());
    Some(PodInfo {
        name,
        namespace: pod.metadata.namespace.clone(),
        archiving: pod
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == super::manifest::LOG_FINALIZER)),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        container: container.map(|c| c.name.clone()),
        index,
        phase,
        started,
        exit_code: terminated.map(|t| t.exit_code),
        message: terminated
            .and_then(|t| t.message.clone())
            .filter(|m| !m.is_empty())
            .map(|m| clip(m, MAX_RESULT_BYTES)),
        reason: terminated
            .and_then(|t| t.reason.clone())
            .or_else(|| status.and_then(|s| s.reason.clone())),
        finished_at: terminated.and_then(|t| t.finished_at.as_ref()).and_then(time),
        created_at: pod.metadata.creation_timestamp.as_ref().and_then(time),
        started_at: terminated
            .and_then(|t| t.started_at.as_ref())
            .or_else(|| {
                state
                    .and_then(|s| s.running.as_ref())
                    .and_then(|r| r.started_at.as_ref())
            })
            .and_then(time),
        disruption: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
            })
            .map(|c| c.reason.clone().unwrap_or_else(|| "DisruptionTarget".to_owned())),
    })
}

/// The result of a successful job: the termination message of its last successful run (the
/// highest completion index, then the latest to finish).
pub fn result_of<'a>(pods: impl IntoIterator<Item = &'a PodInfo>) -> Option<String> {
    pods.into_iter()
        .filter(|p| p.phase == PodPhase::Succeeded && p.message.is_some())
        .max_by_key(|p| (p.index, p.finished_at))
        .and_then(|p| p.message.clone())
}

/// Why a failed job failed, from its last failed run: `pod X (index 2) exited with code 1:
/// <termination message>`.
pub fn failure_of<'a>(pods: impl IntoIterator<Item = &'a PodInfo>) -> Option<String> {
    let pod = pods
        .into_iter()
        .filter(|p| p.phase == PodPhase::Failed)
        .max_by_key(|p| (p.finished_at, p.created_at))?;
    let mut why = format!("pod {}", pod.name);
    if let Some(i) = pod.index {
        why.push_str(&format!(" (index {i})"));
    }
    match (pod.exit_code, &pod.reason) {
        (Some(code), Some(reason)) => why.push_str(&format!(" exited with code {code} ({reason})")),
        (Some(code), None) => why.push_str(&format!(" exited with code {code}")),
        (None, Some(reason)) => why.push_str(&format!(" failed: {reason}")),
        (None, None) => why.push_str(" failed"),
    }
    if let Some(m) = &pod.message {
        why.push_str(": ");
        why.push_str(m.trim_end());
    }
    Some(clip(why, MAX_RESULT_BYTES))
}

/// The outcome of a job whose Kubernetes Job vanished before jobgate saw it finish: what its
/// pods prove, else a failure with reason `WorkloadDeleted`.
pub fn vanished<'a>(
    completions: i32,
    pods: impl IntoIterator<Item = &'a PodInfo> + Clone,
    now: DateTime<Utc>,
) -> WorkloadStatus {
    let succeeded_indexes: BTreeSet<i32> = pods
        .clone()
        .into_iter()
        .filter(|p| p.phase == PodPhase::Succeeded)
        .map(|p| p.index.unwrap_or(0))
        .collect();
    let succeeded = pods
        .clone()
        .into_iter()
        .filter(|p| p.phase == PodPhase::Succeeded)
        .count() as i32;
    let failed = pods
        .clone()
        .into_iter()
        .filter(|p| p.phase == PodPhase::Failed)
        .count() as i32;
    let done = if completions > 1 {
        succeeded_indexes.len() as i32 >= completions
    } else {
        succeeded >= completions
    };
    let mut status = WorkloadStatus {
        succeeded: if completions > 1 {
            succeeded_indexes.len() as i32
        } else {
            succeeded
        },
        failed,
        completed_indexes: if completions > 1 {
            succeeded_indexes
        } else {
            BTreeSet::new()
        },
        ..WorkloadStatus::default()
    };
    if done {
        let message = "the Kubernetes Job was deleted; its pods had all completed".to_owned();
        status.conditions.push(Condition::truthy(
            "Complete",
            "CompletionsReached",
            Some(message),
            now,
        ));
        status.result = result_of(pods);
        status.completion_time = Some(now);
    } else {
        let message = "the Kubernetes Job was deleted before it finished".to_owned();
        status
            .conditions
            .push(Condition::truthy("Failed", "WorkloadDeleted", Some(message), now));
        status.message = failure_of(pods);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobPhase;

    fn job(status: serde_json::Value) -> K8sJob {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn complete_after_success_criteria_is_succeeded_with_its_reason() {
        let s = workload_status(&job(serde_json::json!({
            "completionTime": "2026-04-26T18:37:06Z",
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": "2026-04-26T18:37:06Z"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastTransitionTime": "2026-04-26T18:37:06Z"}],
            "ready": 0, "startTime": "2026-04-26T18:35:42Z", "succeeded": 6, "terminating": 0, "uncountedTerminatedPods": {}
        })));
        assert!(is_decided(&s) && is_success(&s));
        assert_eq!(s.succeeded, 6);
        let d = s.derive_phase();
        assert_eq!(d.phase, JobPhase::Succeeded);
        assert_eq!(d.reason.as_deref(), Some("CompletionsReached"));
    }

    #[test]
    fn failure_target_alone_already_decides_failure() {
        let s = workload_status(&job(serde_json::json!({
            "conditions": [{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}],
            "active": 1, "startTime": "2026-04-26T18:35:42Z"
        })));
        assert!(is_decided(&s) && !is_success(&s));
        let d = s.derive_phase();
        assert_eq!(d.phase, JobPhase::Failed);
        assert_eq!(d.reason.as_deref(), Some("DeadlineExceeded"));
    }

    #[test]
    fn pre_1_31_complete_without_reason_still_succeeds() {
        let s = workload_status(&job(serde_json::json!({
            "conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1
        })));
        assert_eq!(s.derive_phase().phase, JobPhase::Succeeded);
        assert_eq!(s.derive_phase().reason.as_deref(), Some("CompletionsReached"));
    }

    #[test]
    fn suspended_is_pending_and_active_is_running() {
        let s = workload_status(&job(serde_json::json!({
            "conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended"}]
        })));
        assert!(!is_decided(&s));
        assert_eq!(s.derive_phase().phase, JobPhase::Pending);
        assert_eq!(s.derive_phase().reason.as_deref(), Some("JobSuspended"));
        let s = workload_status(&job(
            serde_json::json!({"active": 2, "ready": 1, "startTime": "2026-04-26T18:35:42Z"}),
        ));
        assert_eq!((s.active, s.ready), (2, 1));
        assert_eq!(s.derive_phase().phase, JobPhase::Running);
        let resumed = workload_status(&job(serde_json::json!({
            "conditions": [{"type": "Suspended", "status": "False", "reason": "JobResumed"}], "active": 1
        })));
        assert_eq!(
            resumed.derive_phase().phase,
            JobPhase::Running,
            "a False condition means nothing"
        );
    }

    #[test]
    fn completed_indexes_are_parsed_tolerantly() {
        assert_eq!(parse_indexes("0-2,5,7-8"), BTreeSet::from([0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_indexes(""), BTreeSet::new());
        assert_eq!(parse_indexes("x,3,5-4,2-"), BTreeSet::from([3]));
    }

    fn pod(
        name: &str,
        index: Option<i32>,
        phase: PodPhase,
        exit: Option<i32>,
        message: Option<&str>,
    ) -> PodInfo {
        PodInfo {
            name: name.into(),
            namespace: Some("default".into()),
            archiving: false,
            deleting: false,
            container: Some("job".into()),
            index,
            phase,
            started: true,
            exit_code: exit,
            message: message.map(Into::into),
            reason: exit.map(|c| if c == 0 { "Completed" } else { "Error" }.into()),
            finished_at: Some(Utc::now()),
            created_at: Some(Utc::now()),
            started_at: None,
            disruption: None,
        }
    }

    #[test]
    fn result_and_failure_come_from_the_runs() {
        let pods = [
            pod("a", Some(0), PodPhase::Succeeded, Some(0), Some("r0")),
            pod("b", Some(1), PodPhase::Succeeded, Some(0), Some("r1")),
            pod("c", Some(1), PodPhase::Failed, Some(2), Some("bad input")),
        ];
        assert_eq!(result_of(&pods).as_deref(), Some("r1"));
        assert_eq!(
            failure_of(&pods).as_deref(),
            Some("pod c (index 1) exited with code 2 (Error): bad input")
        );
    }

    #[test]
    fn a_vanished_job_keeps_what_its_pods_prove() {
        let now = Utc::now();
        let done = [pod("a", None, PodPhase::Succeeded, Some(0), Some("42"))];
        let s = vanished(1, &done, now);
        assert_eq!(s.derive_phase().phase, JobPhase::Succeeded);
        assert_eq!(s.result.as_deref(), Some("42"));
        let s = vanished(2, &done, now);
        assert_eq!(s.derive_phase().phase, JobPhase::Failed);
        assert_eq!(s.derive_phase().reason.as_deref(), Some("WorkloadDeleted"));
        let s = vanished(1, &[], now);
        assert_eq!(s.derive_phase().reason.as_deref(), Some("WorkloadDeleted"));
    }
}
