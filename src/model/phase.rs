//! Phases and the workload status they are derived from: `JobPhase` and its forward-only
//! rule, the conditions and progress an executor observes (`WorkloadStatus`), and how a phase
//! follows from them. Knows nothing of where a status came from.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where a job is in its life. Phases only move forward: PENDING → RUNNING → SUCCEEDED |
/// FAILED, and PENDING/RUNNING → CANCELLED; a terminal phase never changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobPhase {
    pub const ALL: [JobPhase; 5] = [
        JobPhase::Pending,
        JobPhase::Running,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    fn rank(self) -> u8 {
        match self {
            Self::Pending => 0,
            Self::Running => 1,
            Self::Succeeded | Self::Failed | Self::Cancelled => 2,
        }
    }

    /// Whether a job in `self` may move to `next`. Staying put is not a move.
    pub fn can_advance_to(self, next: JobPhase) -> bool {
        !self.is_terminal() && next.rank() > self.rank()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for JobPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Kubernetes-style condition: why a job is in its phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_transition_time: Option<DateTime<Utc>>,
}

impl Condition {
    pub fn truthy(type_: &str, reason: &str, message: impl Into<Option<String>>, at: DateTime<Utc>) -> Self {
        Self {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: Some(reason.to_owned()),
            message: message.into(),
            last_transition_time: Some(at),
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// Counts of a job's runs, as a batch/v1 Job reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    /// Active runs that are ready (Kubernetes: pods whose Ready condition is true).
    #[serde(default)]
    pub ready: i32,
    pub total: Option<i32>,
}

/// What an executor observes of a job's workload, shaped like a batch/v1 `JobStatus` so that
/// every executor reports the same thing and the phase is derived by one rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// The workload's own conditions (Complete, Failed, SuccessCriteriaMet, FailureTarget,
    /// Suspended, ...).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    pub start_time: Option<DateTime<Utc>>,
    pub completion_time: Option<DateTime<Utc>>,
    #[serde(default)]
    pub active: i32,
    #[serde(default)]
    pub ready: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    /// Completion indexes that have succeeded (Indexed completion mode).
    #[serde(default)]
    pub completed_indexes: BTreeSet<i32>,
    /// The result (termination message) of the workload, at most [`MAX_RESULT_BYTES`].
    pub result: Option<String>,
    /// A human-readable explanation from the executor, e.g. the tail of a failed run's log.
    pub message: Option<String>,
    /// Executor-private facts needed to recover after a restart (e.g. process groups).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub executor_state: serde_json::Value,
    /// How many runs make the whole, when the workload says (templates' kinds); the job's
    /// `completions` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i32>,
    /// The phase a template's status rules decoded, for kinds that are not shaped like a
    /// batch/v1 Job; it takes precedence over the conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapped: Option<MappedPhase>,
    /// Where the job stands in its Kueue queue, once Kueue's Workload for it was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Box<QueueStatus>>,
    /// Attempts that started or ended since the executor's last report (or all it knows):
    /// the job keeps them (`Job::record_attempts`), never the stored status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<super::attempt::JobAttempt>,
}

/// Where a queued job stands in Kueue, as Kueue's Workload for it says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// The LocalQueue.
    pub name: String,
    pub state: QueueState,
    /// The reason and message of the Workload condition behind `state`: for a pending
    /// job, why Kueue does not admit it (e.g. insufficient quota).
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The ClusterQueue that reserved quota for it, while it holds some.
    pub cluster_queue: Option<String>,
    /// When it entered `state`.
    pub since: Option<DateTime<Utc>>,
    /// The Workload's own conditions (QuotaReserved, Admitted, Evicted, Preempted, ...).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Where a waiting job stands in its queue now: read when asked, never stored (it changes
/// whenever any job ahead of it moves).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueuePlace {
    /// 1-based place among the jobs waiting in the same queue: jobgate's local queue, or
    /// Kueue's ClusterQueue.
    pub position: Option<u32>,
    /// 1-based place among its tenant's waiting jobs (local queue) or in its Kueue
    /// LocalQueue.
    pub local_queue_position: Option<u32>,
    /// When it may start, where an honest estimate can be made.
    pub estimated_start_at: Option<DateTime<Utc>>,
    /// How the estimate was made, or why none can be.
    pub estimate: Option<String>,
}

/// A queued job's state in Kueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum QueueState {
    /// Waiting for quota.
    Pending,
    /// Quota is reserved; admission checks may still be running.
    QuotaReserved,
    /// Admitted: its workload may run.
    Admitted,
    /// Evicted (and suspended again) until readmitted.
    Evicted,
    /// Preempted to make room for another workload; requeued until readmitted.
    Preempted,
    /// Its workload finished and released its quota.
    Finished,
}

impl QueueState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::QuotaReserved => "QUOTA_RESERVED",
            Self::Admitted => "ADMITTED",
            Self::Evicted => "EVICTED",
            Self::Preempted => "PREEMPTED",
            Self::Finished => "FINISHED",
        }
    }

    /// Whether a job in this state holds quota and may run.
    pub fn holds_quota(self) -> bool {
        matches!(self, Self::QuotaReserved | Self::Admitted | Self::Finished)
    }

    /// The reason of the event recorded when a job enters this state.
    pub fn event_reason(self) -> &'static str {
        match self {
            Self::Pending => "QueuedPending",
            Self::QuotaReserved => "QuotaReserved",
            Self::Admitted => "Admitted",
            Self::Evicted => "Evicted",
            Self::Preempted => "Preempted",
            Self::Finished => "QueueFinished",
        }
    }
}

/// A phase decoded by a template's rules, with the reason and message that explain it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappedPhase {
    pub phase: JobPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Default for MappedPhase {
    fn default() -> Self {
        Self {
            phase: JobPhase::Pending,
            reason: None,
            message: None,
        }
    }
}

/// The largest result kept, as for a Kubernetes termination message.
pub const MAX_RESULT_BYTES: usize = 4096;

/// `s` cut to at most `max` bytes, on a character boundary (results and termination
/// messages are bounded like Kubernetes', e.g. to [`MAX_RESULT_BYTES`]).
pub fn clip(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// A phase derived from a workload status, with the reason that explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DerivedPhase {
    pub phase: JobPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl WorkloadStatus {
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_ && c.is_true())
    }

    /// The phase this status means, from its conditions first, as the batch/v1 Job
    /// controller defines them: SuccessCriteriaMet or Complete → SUCCEEDED; FailureTarget or
    /// Failed → FAILED with its reason; Suspended → PENDING; active runs or a start time →
    /// RUNNING; otherwise PENDING.
    pub fn derive_phase(&self) -> DerivedPhase {
        if let Some(m) = &self.mapped {
            return DerivedPhase {
                phase: m.phase,
                reason: m.reason.clone(),
                message: m.message.clone(),
            };
        }
        let from = |phase, c: &Condition| DerivedPhase {
            phase,
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
        for (type_, phase) in [
            ("Complete", JobPhase::Succeeded),
            ("SuccessCriteriaMet", JobPhase::Succeeded),
            ("Failed", JobPhase::Failed),
            ("FailureTarget", JobPhase::Failed),
        ] {
            if let Some(c) = self.condition(type_) {
                return from(phase, c);
            }
        }
        if let Some(c) = self.condition("Suspended") {
            return from(JobPhase::Pending, c);
        }
        if self.active > 0 || self.start_time.is_some() {
            return DerivedPhase {
                phase: JobPhase::Running,
                reason: Some("Started".into()),
                message: None,
            };
        }
        DerivedPhase {
            phase: JobPhase::Pending,
            reason: None,
            message: None,
        }
    }
}
