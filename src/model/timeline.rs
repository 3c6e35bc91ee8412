//! Where a job's time went (`Job::timeline`): its life cut into segments (queued, launching,
//! each attempt, finishing), each with a start and, once over, an end. The one description of
//! those segments: the API shows it and the span emitter turns each ended segment into a span.
//!
//! It reads only what the job records (`submitted_at`, `launched_at`, its attempts,
//! `finished_at`); it must not read a clock.

use chrono::{DateTime, Utc};

use super::attempt::{AttemptState, JobAttempt};
use super::job::Job;

/// What a segment of a job's life is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// Accepted, waiting to be handed to the executor (dependencies, the launch outbox).
    Queued,
    /// Handed to the executor (the Kubernetes create, the local spawn) until its first run
    /// started.
    Launching,
    /// One run of one completion index.
    Attempt,
    /// From the last run's end until jobgate recorded the job's end (its output archived).
    Finishing,
}

impl SegmentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Launching => "launching",
            Self::Attempt => "attempt",
            Self::Finishing => "finishing",
        }
    }
}

/// One segment of a job's life.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineSegment {
    pub kind: SegmentKind,
    /// Unique in its job: the kind's name, or `attempt <run name>` for an attempt.
    pub name: String,
    pub start: DateTime<Utc>,
    /// `None` while the segment lasts.
    pub end: Option<DateTime<Utc>>,
    /// The attempt an `Attempt` segment stands for.
    pub attempt: Option<JobAttempt>,
}

impl TimelineSegment {
    fn new(kind: SegmentKind, start: DateTime<Utc>, end: Option<DateTime<Utc>>) -> Self {
        Self {
            kind,
            name: kind.as_str().to_owned(),
            start,
            // Clocks of different machines (a pod's, jobgate's) may disagree a little: a
            // segment never ends before it starts.
            end: end.map(|end| end.max(start)),
            attempt: None,
        }
    }

    /// Whether it stands for a failure: a failed attempt, or the end of a job that did not
    /// succeed.
    pub fn failed(&self) -> bool {
        self.attempt
            .as_ref()
            .is_some_and(|a| a.state == AttemptState::Failed)
    }
}

impl Job {
    /// The job's segments, in the order they began: queued, launching (once handed to the
    /// executor), each attempt by start, finishing (once the job is over and it ran).
    pub fn timeline(&self) -> Vec<TimelineSegment> {
        let over = self.finished_at.filter(|_| self.phase.is_terminal());
        let mut attempts: Vec<&JobAttempt> = self.attempts.iter().collect();
        attempts.sort_by_key(|a| a.started_at);
        let first_run = attempts
            .iter()
            .filter_map(|a| a.started_at)
            .min()
            .or(self.started_at);
        let mut segments = Vec::with_capacity(attempts.len() + 3);
        // Queued until handed to the executor; a run seen before the launch was recorded
        // ends it too.
        let queued_end = match (self.launched_at, first_run) {
            (Some(launched), Some(run)) => Some(launched.min(run)),
            (launched, run) => launched.or(run).or(over),
        };
        let queued = TimelineSegment::new(SegmentKind::Queued, self.submitted_at, queued_end);
        let launch_start = queued.end;
        segments.push(queued);
        let Some(launch_start) = launch_start.filter(|_| self.launched_at.is_some() || first_run.is_some())
        else {
            return segments;
        };
        let launching_end = first_run.or(over);
        segments.push(TimelineSegment::new(
            SegmentKind::Launching,
            launch_start,
            launching_end,
        ));
        let mut last_end = launching_end.unwrap_or(launch_start);
        for attempt in attempts {
            let start = attempt.started_at.unwrap_or(launch_start).max(launch_start);
            let end = attempt.finished_at.or(over);
            let mut segment = TimelineSegment::new(SegmentKind::Attempt, start, end);
            segment.name = format!("attempt {}", attempt.name);
            segment.attempt = Some(attempt.clone());
            if let Some(end) = segment.end {
                last_end = last_end.max(end);
            }
            segments.push(segment);
        }
        if let Some(over) = over {
            segments.push(TimelineSegment::new(
                SegmentKind::Finishing,
                last_end.min(over),
                Some(over),
            ));
        }
        segments
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::model::{JobPhase, JobSpec, SubmitRequest, ValidationLimits};

    fn spec() -> JobSpec {
        SubmitRequest {
            command: Some(vec!["true".into()]),
            ..SubmitRequest::default()
        }
        .validate(&ValidationLimits::default())
        .unwrap()
    }

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn a_finished_job_is_queued_launching_its_attempts_and_finishing() {
        let mut job = Job::accepted("j".into(), spec(), None, at(0));
        assert_eq!(job.timeline().len(), 1);
        assert_eq!(job.timeline()[0].end, None);
        job.launched_at = Some(at(2));
        let mut first = JobAttempt::running("index-0-run-1".into(), 0, Some(at(3)));
        first.state = AttemptState::Failed;
        first.finished_at = Some(at(5));
        let mut second = JobAttempt::running("index-0-run-2".into(), 0, Some(at(6)));
        second.state = AttemptState::Succeeded;
        second.finished_at = Some(at(9));
        job.attempts = vec![second, first];
        job.phase = JobPhase::Succeeded;
        job.finished_at = Some(at(10));
        let timeline = job.timeline();
        let names: Vec<&str> = timeline.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "queued",
                "launching",
                "attempt index-0-run-1",
                "attempt index-0-run-2",
                "finishing"
            ]
        );
        let spans: Vec<_> = timeline.iter().map(|s| (s.start, s.end.unwrap())).collect();
        assert_eq!(
            spans,
            [
                (at(0), at(2)),
                (at(2), at(3)),
                (at(3), at(5)),
                (at(6), at(9)),
                (at(9), at(10))
            ]
        );
        assert!(timeline[2].failed());
        assert!(!timeline[3].failed());
    }

    #[test]
    fn a_job_cancelled_while_queued_has_one_segment() {
        let mut job = Job::accepted("j".into(), spec(), None, at(0));
        job.phase = JobPhase::Cancelled;
        job.finished_at = Some(at(4));
        let timeline = job.timeline();
        assert_eq!(timeline.len(), 1);
        assert_eq!(timeline[0].end, Some(at(4)));
    }
}
