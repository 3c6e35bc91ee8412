//! `JobEvent`: one recorded change of a job, with its cursor `seq`, as the store keeps it and
//! subscribers receive it. (The change before it is recorded is a `job::Transition`.)

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::job::Job;
use super::phase::JobPhase;

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
