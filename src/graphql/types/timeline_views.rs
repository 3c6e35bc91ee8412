//! `Job.timeline`: the segments of a job's life (`model::TimelineSegment`) as the API shows
//! them. It maps names only; what a segment is, is `model::timeline`'s.

use async_graphql::{Enum, SimpleObject};
use chrono::{DateTime, Utc};

use crate::model::{Job, SegmentKind, TimelineSegment};

/// What a segment of a job's life is.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "TimelineSegmentKind")]
pub enum TimelineSegmentKindView {
    /// Accepted, waiting to be handed to the executor (its dependencies, the launch queue).
    Queued,
    /// Handed to the executor (the Kubernetes create, the local spawn) until its first run
    /// started.
    Launching,
    /// One run of one completion index (`attempt` names it).
    Attempt,
    /// From the last run's end until jobgate recorded the job's end, its output archived.
    Finishing,
}

/// One segment of where a job's time went.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "TimelineSegment")]
pub struct TimelineSegmentObject {
    pub kind: TimelineSegmentKindView,
    /// Unique in the job: `queued`, `launching`, `attempt <run name>`, `finishing`.
    pub name: String,
    pub started_at: DateTime<Utc>,
    /// Null while the segment lasts.
    pub ended_at: Option<DateTime<Utc>>,
    /// Its length in seconds, once it ended.
    pub duration_seconds: Option<f64>,
    /// For an attempt: the run's name (as `JobAttempt.name`).
    pub attempt: Option<String>,
    /// For an attempt: its completion index.
    pub attempt_index: Option<i32>,
    /// For an attempt that ended: its exit code, when it had one.
    pub exit_code: Option<i32>,
    /// Whether the segment is a failed attempt.
    pub failed: bool,
}

impl From<TimelineSegment> for TimelineSegmentObject {
    fn from(segment: TimelineSegment) -> Self {
        let kind = match segment.kind {
            SegmentKind::Queued => TimelineSegmentKindView::Queued,
            SegmentKind::Launching => TimelineSegmentKindView::Launching,
            SegmentKind::Attempt => TimelineSegmentKindView::Attempt,
            SegmentKind::Finishing => TimelineSegmentKindView::Finishing,
        };
        let failed = segment.failed();
        Self {
            kind,
            duration_seconds: segment
                .end
                .map(|end| (end - segment.start).num_milliseconds() as f64 / 1000.0),
            name: segment.name,
            started_at: segment.start,
            ended_at: segment.end,
            attempt: segment.attempt.as_ref().map(|a| a.name.clone()),
            attempt_index: segment.attempt.as_ref().map(|a| a.index),
            exit_code: segment.attempt.as_ref().and_then(|a| a.exit_code),
            failed,
        }
    }
}

/// A job's timeline, as shown.
pub fn timeline_of(job: &Job) -> Vec<TimelineSegmentObject> {
    job.timeline().into_iter().map(Into::into).collect()
}
