//! What is recorded about a job's changes: a `Transition` (about to be recorded) and a
//! `JobEvent` (recorded, with its cursor `seq`).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::job::Job;
use super::phase::JobPhase;

/// What an observation or a command changed about a job, ready to record as an event.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub previous_phase: Option<JobPhase>,
    pub phase: JobPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// One recorded status change of a job; `seq` is its cursor.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEvent {
    pub seq: i64,
    pub job_id: String,
    pub phase: JobPhase,
    pub previous_phase: Option<JobPhase>,
    pub at: DateTime<Utc>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The job as it was right after this event.
    pub job: Arc<Job>,
}
