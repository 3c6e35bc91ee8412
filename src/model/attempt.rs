//! A job's attempts (`JobAttempt`): each run of one of its completion indexes, as an
//! executor saw it start and end; how a later report of one folds in, and how its end reads
//! in words. The job keeps them (`Job::record_attempts` in `job.rs`: merged by the run's
//! name, numbered per index, bounded per job, each end an event).
//!
//! It owns the shape of an attempt; which facts of a pod or a process make an attempt is each
//! executor's to decide, and it must not read a clock.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::cause::FailureCause;

/// Most attempts a job keeps: every event row holds the job, attempts included, so a job
/// retried many times keeps its newest attempts and counts the older ones it let go
/// (`Job::attempts_omitted`).
pub const MAX_ATTEMPTS: usize = 32;

/// Longest reason or message an attempt keeps, in bytes.
pub const MAX_ATTEMPT_TEXT: usize = 512;

/// The event reason of an attempt's end, when the job's phase does not say it already.
pub const ATTEMPT_SUCCEEDED: &str = "AttemptSucceeded";
pub const ATTEMPT_FAILED: &str = "AttemptFailed";

/// Where an attempt is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AttemptState {
    Running,
    Succeeded,
    Failed,
}

/// One run of one completion index of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobAttempt {
    /// The run's name, unique in its job: the pod's name on Kubernetes, `index-<i>-run-<n>`
    /// (index i's n-th run) on the local executor. Its output's lines carry it as their
    /// `source`.
    pub name: String,
    /// The completion index it ran.
    pub index: i32,
    /// Its number among the attempts of its index, from 1; given by the job when it first
    /// learns of the attempt.
    #[serde(default)]
    pub number: i32,
    pub state: AttemptState,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i32>,
    /// The signal that ended its process, when one did (local executor).
    pub signal: Option<i32>,
    /// Why it failed; `None` while it runs and when it succeeded.
    pub cause: Option<FailureCause>,
    /// The executor's reason (a container's `terminated.reason`, a pod's reason, jobgate's
    /// own such as `DeadlineExceeded`).
    pub reason: Option<String>,
    /// The executor's words on how it ended (e.g. `run 2 (index 0) exited with code 1: …`).
    pub message: Option<String>,
    /// The pod that ran it (Kubernetes).
    pub pod: Option<String>,
    /// The process (and process group) that ran it (local executor).
    pub process_id: Option<i32>,
}

impl JobAttempt {
    /// A just-started attempt.
    pub fn running(name: String, index: i32, started_at: Option<DateTime<Utc>>) -> Self {
        Self {
            name,
            index,
            number: 0,
            state: AttemptState::Running,
            started_at,
            finished_at: None,
            exit_code: None,
            signal: None,
            cause: None,
            reason: None,
            message: None,
            pod: None,
            process_id: None,
        }
    }

    pub fn has_ended(&self) -> bool {
        self.state != AttemptState::Running
    }

    /// Which attempt ended how, in words, for its event (the job clips it to `MAX_ATTEMPT_TEXT` bytes).
    pub fn summary(&self) -> String {
        let outcome = match self.state {
            AttemptState::Running => "is running".to_owned(),
            AttemptState::Succeeded => "succeeded".to_owned(),
            AttemptState::Failed => {
                let how = match (self.exit_code, self.signal) {
                    (_, Some(signal)) => format!("failed: killed by signal {signal}"),
                    (Some(code), None) => format!("failed: exit code {code}"),
                    (None, None) => "failed".to_owned(),
                };
                match self.cause {
                    Some(cause) => format!("{how} ({})", cause.as_str()),
                    None => how,
                }
            }
        };
        let mut text = format!(
            "attempt {} of index {} ({}) {outcome}",
            self.number, self.index, self.name
        );
        if let Some(message) = self
            .message
            .as_deref()
            .filter(|_| self.state == AttemptState::Failed)
        {
            text.push_str(": ");
            text.push_str(message);
        }
        text
    }

    /// Folds a later report of the same attempt in: what it knows replaces what was known;
    /// an ended attempt never runs again.
    pub(super) fn update(&mut self, later: JobAttempt) {
        if self.has_ended() && !later.has_ended() {
            return;
        }
        let number = self.number;
        let started_at = self.started_at.or(later.started_at);
        let pod = later.pod.clone().or(self.pod.take());
        let process_id = later.process_id.or(self.process_id);
        *self = later;
        self.number = number;
        self.started_at = started_at;
        self.pod = pod;
        self.process_id = process_id;
    }

    /// Ends it, as its job ended (a cancellation, a deadline): it is not followed further.
    pub(super) fn end(&mut self, cause: FailureCause, reason: &str, now: DateTime<Utc>) {
        self.state = AttemptState::Failed;
        self.finished_at = Some(now);
        self.cause = Some(cause);
        self.reason = Some(reason.to_owned());
    }
}
