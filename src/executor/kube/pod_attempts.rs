//! A Kubernetes job's attempts: each pod of its workload that started (or ended) is one,
//! named by the pod, read from what the pod watch keeps ([`PodInfo`]); the pod's facts
//! decide its cause (`OOMKilled`, a `DisruptionTarget` condition for eviction and preemption,
//! `DeadlineExceeded`, else an error).
//!
//! It owns only that translation: it must not watch pods (the pod watch does), keep them
//! (`pods.rs` keeps each job's attempts as its pods change) nor report.

use chrono::{DateTime, Utc};

use super::status::{PodInfo, PodPhase};
use crate::model::{AttemptState, FailureCause, JobAttempt, MAX_ATTEMPTS, WorkloadStatus};

/// The attempts the pods make, oldest pod first: pods that never started and have not ended
/// (waiting to be scheduled, pulling their image) are not attempts yet. A pod the Job
/// controller stopped because the job's deadline passed (at `deadline`, see
/// [`deadline_passed`]) failed for that. At most [`MAX_ATTEMPTS`], as a job keeps: past
/// that, the oldest ended ones are left out.
pub(super) fn of_pods(pods: &[PodInfo], deadline: Option<DateTime<Utc>>) -> Vec<JobAttempt> {
    let mut pods: Vec<&PodInfo> = pods
        .iter()
        .filter(|p| p.started || p.phase.is_terminal())
        .collect();
    pods.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
    let mut attempts: Vec<JobAttempt> = pods.into_iter().map(|pod| attempt_of(pod, deadline)).collect();
    while attempts.len() > MAX_ATTEMPTS {
        let Some(oldest) = attempts.iter().position(JobAttempt::has_ended) else {
            break;
        };
        attempts.remove(oldest);
    }
    attempts
}

/// When the Job controller decided the job's deadline had passed, if its status says it did.
pub(super) fn deadline_passed(status: &WorkloadStatus) -> Option<DateTime<Utc>> {
    status
        .conditions
        .iter()
        .filter(|c| c.is_true() && matches!(c.type_.as_str(), "FailureTarget" | "Failed"))
        .filter(|c| c.reason.as_deref() == Some("DeadlineExceeded"))
        .map(|c| c.last_transition_time.unwrap_or(DateTime::<Utc>::MIN_UTC))
        .min()
}

fn attempt_of(pod: &PodInfo, deadline: Option<DateTime<Utc>>) -> JobAttempt {
    // Stopped by the controller at the deadline: it ended then, or has not yet.
    let stopped_at_deadline = deadline.is_some_and(|at| pod.finished_at.is_none_or(|end| end >= at));
    let mut attempt = JobAttempt::running(
        pod.name.clone(),
        pod.index.unwrap_or(0),
        pod.started_at.or(pod.created_at),
    );
    attempt.pod = Some(pod.name.clone());
    attempt.exit_code = pod.exit_code;
    match pod.phase {
        PodPhase::Pending | PodPhase::Running => {
            // Still running while the cluster ends it: its end comes with its phase.
        }
        PodPhase::Succeeded => {
            attempt.state = AttemptState::Succeeded;
            attempt.finished_at = pod.finished_at.or(pod.created_at);
            attempt.reason.clone_from(&pod.reason);
            // Its termination message: the result it wrote.
            attempt.message.clone_from(&pod.message);
        }
        PodPhase::Failed => {
            attempt.state = AttemptState::Failed;
            attempt.finished_at = pod.finished_at.or(pod.created_at);
            let cause = cause_of(pod.reason.as_deref(), pod.disruption.as_deref());
            attempt.cause = Some(match cause {
                FailureCause::Error if stopped_at_deadline => FailureCause::DeadlineExceeded,
                cause => cause,
            });
            attempt.reason = pod.disruption.clone().or_else(|| pod.reason.clone());
            attempt.message.clone_from(&pod.message);
        }
    }
    attempt
}

/// Why a failed pod failed: the container's or pod's reason, and its `DisruptionTarget`
/// condition's, as the Job controller's pod failure policy reads them.
fn cause_of(reason: Option<&str>, disruption: Option<&str>) -> FailureCause {
    match (reason, disruption) {
        (Some("OOMKilled"), _) => FailureCause::OomKilled,
        (_, Some("PreemptionByScheduler" | "PreemptionByKubeScheduler"))
        | (Some("Preempted" | "Preempting"), _) => FailureCause::Preempted,
        (_, Some(_)) | (Some("Evicted"), _) => FailureCause::Evicted,
        (Some("DeadlineExceeded"), _) => FailureCause::DeadlineExceeded,
        _ => FailureCause::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_pod_says_why() {
        assert_eq!(cause_of(Some("OOMKilled"), None), FailureCause::OomKilled);
        assert_eq!(
            cause_of(Some("Error"), Some("PreemptionByScheduler")),
            FailureCause::Preempted
        );
        assert_eq!(
            cause_of(Some("Error"), Some("EvictionByEvictionAPI")),
            FailureCause::Evicted
        );
        assert_eq!(cause_of(Some("Evicted"), None), FailureCause::Evicted);
        assert_eq!(
            cause_of(Some("DeadlineExceeded"), None),
            FailureCause::DeadlineExceeded
        );
        assert_eq!(cause_of(Some("Error"), None), FailureCause::Error);
        assert_eq!(cause_of(None, None), FailureCause::Error);
    }
}
