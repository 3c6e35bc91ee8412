//! Why a run of a job failed (`FailureCause`): the one vocabulary that attempts record, retry
//! rules match and both executors report, whatever the executor.
//!
//! It owns the names only; which facts of a pod or a process mean which cause is each
//! executor's to decide, and what a cause leads to is the retry rules'.

use serde::{Deserialize, Serialize};

/// Why a run failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureCause {
    /// The program failed: a non-zero exit code, or a signal it did not get from jobgate or
    /// the cluster.
    Error,
    /// The kernel's OOM killer ended it (Kubernetes: the container terminated `OOMKilled`).
    OomKilled,
    /// It was evicted: node pressure, a drain, the Eviction API (Kubernetes: a
    /// `DisruptionTarget` condition other than preemption, or the pod's reason `Evicted`).
    Evicted,
    /// A workload of higher priority took its place (Kubernetes: `DisruptionTarget` with
    /// reason `PreemptionByScheduler`).
    Preempted,
    /// The job's `activeDeadlineSeconds` passed while it ran.
    DeadlineExceeded,
    /// jobgate restarted while it ran and could not follow it to its end (local executor).
    GatewayRestarted,
    /// The job was cancelled while it ran.
    Cancelled,
}

impl FailureCause {
    /// Every cause, in declaration order.
    pub const ALL: [FailureCause; 7] = [
        Self::Error,
        Self::OomKilled,
        Self::Evicted,
        Self::Preempted,
        Self::DeadlineExceeded,
        Self::GatewayRestarted,
        Self::Cancelled,
    ];

    /// The name clients see (`OOM_KILLED`), the same as its JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "ERROR",
            Self::OomKilled => "OOM_KILLED",
            Self::Evicted => "EVICTED",
            Self::Preempted => "PREEMPTED",
            Self::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Self::GatewayRestarted => "GATEWAY_RESTARTED",
            Self::Cancelled => "CANCELLED",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FailureCause;

    #[test]
    fn a_cause_is_named_as_its_json_spells_it() {
        for cause in FailureCause::ALL {
            let json = serde_json::to_value(cause).unwrap();
            assert_eq!(json, cause.as_str());
            assert_eq!(serde_json::from_value::<FailureCause>(json).unwrap(), cause);
        }
    }
}
