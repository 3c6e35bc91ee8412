//! A job as jobgate knows it (`Job`) and every change it may go through: acceptance, launch,
//! observation of its workload, cancellation and its dependencies. Each change returns the
//! `Transition` to record, or nothing when the job did not change.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::attempt::{
    ATTEMPT_FAILED, ATTEMPT_SUCCEEDED, AttemptState, JobAttempt, MAX_ATTEMPT_TEXT, MAX_ATTEMPTS,
};
use super::cause::FailureCause;
use super::phase::{Condition, JobPhase, Progress, QueueState, QueueStatus, WorkloadStatus, clip};
use super::spec::JobSpec;
use super::trace::JobTrace;

/// A job as jobgate knows it: its spec plus its observed state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub id: String,
    pub spec: JobSpec,
    pub phase: JobPhase,
    pub submitted_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// jobgate's conditions, explaining each phase it entered, plus the workload's own.
    pub conditions: Vec<Condition>,
    pub progress: Progress,
    pub message: Option<String>,
    pub result: Option<String>,
    pub idempotency_key: Option<String>,
    /// Who submitted the job (the authenticated identity's name, as shown), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter: Option<String>,
    /// The submitter's principal (`token:…`, `jwt:…`, `anonymous`), which scopes its
    /// idempotency keys; never shown. Absent on jobs stored before principals existed, whose
    /// keys are scoped by `submitter` (see [`Job::key_scope`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_key: Option<String>,
    /// The last status the executor observed.
    pub workload: WorkloadStatus,
    /// The cursor of the last event recorded for this job.
    pub last_event_seq: i64,
    /// Its runs, oldest first: the newest [`MAX_ATTEMPTS`](super::MAX_ATTEMPTS) of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<JobAttempt>,
    /// How many older attempts the job let go of to keep within that bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts_omitted: i32,
    /// The latest start among the attempts let go of: a report of one of them is not taken
    /// back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_omitted_through: Option<DateTime<Utc>>,
    /// When the executor accepted its workload (the Kubernetes create, the local spawn), as
    /// the service recorded it: where its queued time ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at: Option<DateTime<Utc>>,
    /// The trace it belongs to and its root span (see `trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<JobTrace>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// What an observation or a command changed about a job, ready to record as an event.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub previous_phase: Option<JobPhase>,
    pub phase: JobPhase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Job {
    /// A freshly accepted job, PENDING.
    pub fn accepted(id: String, spec: JobSpec, idempotency_key: Option<String>, now: DateTime<Utc>) -> Self {
        let total = Some(spec.completions);
        Self {
            id,
            spec,
            phase: JobPhase::Pending,
            submitted_at: now,
            started_at: None,
            finished_at: None,
            conditions: vec![Condition::truthy(
                "Accepted",
                "Submitted",
                Some("accepted by jobgate".into()),
                now,
            )],
            progress: Progress {
                total,
                ..Progress::default()
            },
            message: None,
            result: None,
            idempotency_key,
            submitter: None,
            submitter_key: None,
            workload: WorkloadStatus::default(),
            last_event_seq: 0,
            attempts: Vec::new(),
            attempts_omitted: 0,
            attempts_omitted_through: None,
            launched_at: None,
            trace: None,
        }
    }

    /// Records the executor's acceptance of its workload, the first time only. Returns
    /// whether it changed the job.
    pub fn record_launch(&mut self, now: DateTime<Utc>) -> bool {
        if self.launched_at.is_some() || self.phase.is_terminal() {
            return false;
        }
        self.launched_at = Some(now);
        true
    }

    /// The id of the trace it belongs to: its own, or (a job stored without one) its id's
    /// hex digits, so that every job has one.
    pub fn trace_id(&self) -> String {
        match &self.trace {
            Some(trace) => trace.trace_id.clone(),
            None => self.id.replace('-', ""),
        }
    }

    /// What the job's idempotency key is scoped by: its submitter's principal, or, for a job
    /// stored before principals existed, its submitter's name.
    pub fn key_scope(&self) -> Option<&str> {
        self.submitter_key.as_deref().or(self.submitter.as_deref())
    }

    /// Folds an executor's observation into the job. Returns the transition to record, or
    /// `None` when nothing a client can see changed. A terminal job never changes, and a
    /// stale status can never move the phase backward.
    /// Attempts are not part of it: see [`Job::record_attempts`].
    pub fn observe(&mut self, mut status: WorkloadStatus, now: DateTime<Utc>) -> Option<Transition> {
        status.attempts.clear();
        if self.phase.is_terminal() {
            return None;
        }
        let derived = status.derive_phase();
        let progress = Progress {
            succeeded: status.succeeded,
            failed: status.failed,
            active: status.active,
            ready: status.ready,
            total: match &status.mapped {
                Some(_) => status.total,
                None => Some(self.spec.completions),
            },
        };
        let before = (self.progress, self.result.clone(), self.message.clone());
        let previous = self.phase;
        let queue_entered = queue_change(self.workload.queue.as_deref(), status.queue.as_deref());
        self.progress = progress;
        if status.result.is_some() {
            self.result.clone_from(&status.result);
        }
        if status.message.is_some() {
            self.message.clone_from(&status.message);
        }
        if self.started_at.is_none() {
            self.started_at = status.start_time;
        }
        self.workload = status;
        // Kueue suspends an evicted or preempted job's workload until it is readmitted:
        // the one move back, to PENDING, saying why. Only Kueue suspends a queued job, and
        // it may have readmitted it already by the time the suspension is seen.
        if let Some(queue) = self.workload.queue.as_deref()
            && previous == JobPhase::Running
            && derived.phase == JobPhase::Pending
        {
            let (reason, message) = if queue.state.holds_quota() {
                (
                    "Requeued".to_owned(),
                    format!("Kueue queue {}: suspended by Kueue until readmitted", queue.name),
                )
            } else {
                (queue.state.event_reason().to_owned(), queue_message(queue))
            };
            self.phase = JobPhase::Pending;
            self.conditions.retain(|c| c.type_ != "Running");
            self.conditions.retain(|c| c.type_ != "Pending");
            self.conditions.push(Condition {
                type_: "Pending".into(),
                status: "True".into(),
                reason: Some(reason.clone()),
                message: Some(message.clone()),
                last_transition_time: Some(now),
            });
            self.message = Some(message.clone());
            return Some(Transition {
                previous_phase: Some(previous),
                phase: JobPhase::Pending,
                reason: Some(reason),
                message: Some(message),
            });
        }
        let moved = previous.can_advance_to(derived.phase);
        if moved {
            // A failure keeps the cause the executor saw after the condition's summary,
            // e.g. "Job has reached the specified backoff limit: run 3 exited with code 1".
            let detail = match (&derived.message, &self.workload.message) {
                (Some(summary), Some(cause)) if derived.phase == JobPhase::Failed => {
                    Some(format!("{summary}: {cause}"))
                }
                (Some(summary), _) => Some(summary.clone()),
                (None, cause) => cause.clone(),
            };
            self.enter(
                derived.phase,
                derived.reason.clone(),
                derived.message.clone(),
                now,
            );
            self.message = detail;
            if derived.phase.is_terminal() {
                // Runs still going when the job ended are not followed further.
                let reason = derived.reason.as_deref().unwrap_or("JobFinished");
                let cause = match reason {
                    "DeadlineExceeded" => FailureCause::DeadlineExceeded,
                    _ => FailureCause::Cancelled,
                };
                self.end_running_attempts(cause, reason, now);
            }
        }
        if !moved && let Some(queue) = queue_entered {
            // What Kueue decided is the news: the job waits (and why), or may run.
            let message = queue_message(&queue);
            if !queue.state.holds_quota() || self.phase == JobPhase::Pending {
                self.message = Some(message.clone());
            }
            return Some(Transition {
                previous_phase: Some(previous),
                phase: self.phase,
                reason: Some(queue.state.event_reason().to_owned()),
                message: Some(message),
            });
        }
        let after = (self.progress, self.result.clone(), self.message.clone());
        if !moved && before == after {
            return None;
        }
        let message_changed = before.2 != after.2;
        Some(Transition {
            previous_phase: Some(previous),
            phase: self.phase,
            reason: if moved {
                derived.reason
            } else {
                Some("ProgressUpdated".into())
            },
            message: if moved || message_changed {
                self.message.clone()
            } else {
                None
            },
        })
    }

    /// Records that creating the job's workload failed for a reason that may pass (the
    /// cluster is unreachable, overloaded or forbids it for now): the job stays PENDING with a
    /// `WorkloadCreated=False` condition saying why. Returns a transition only when the reason
    /// changes, so that retries do not flood the history.
    pub fn launch_delayed(&mut self, reason: &str, message: &str, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let unchanged = self.conditions.iter().any(|c| {
            c.type_ == WORKLOAD_CREATED && c.status == "False" && c.reason.as_deref() == Some(reason)
        });
        if unchanged {
            return None;
        }
        self.set_workload_created("False", reason, message, now);
        self.message = Some(message.to_owned());
        Some(Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
        })
    }

    /// Since when creating the job's workload has been failing for `reason` (the
    /// `WorkloadCreated=False` condition's transition time), if it is.
    pub fn launch_delayed_since(&self, reason: &str) -> Option<DateTime<Utc>> {
        self.conditions
            .iter()
            .find(|c| {
                c.type_ == WORKLOAD_CREATED && c.status == "False" && c.reason.as_deref() == Some(reason)
            })
            .and_then(|c| c.last_transition_time)
    }

    /// Records that the workload exists after earlier failed attempts; nothing to record when
    /// the first attempt succeeded.
    pub fn launch_succeeded(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        let delayed = self
            .conditions
            .iter()
            .any(|c| c.type_ == WORKLOAD_CREATED && c.status == "False");
        if self.phase.is_terminal() || !delayed {
            return None;
        }
        let message = "the workload was created";
        self.set_workload_created("True", "Created", message, now);
        self.message = None;
        Some(Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some("WorkloadCreated".into()),
            message: Some(message.into()),
        })
    }

    /// Fails a job whose workload cannot be created (the cluster rejected it for good).
    pub fn launch_failed(&mut self, reason: &str, message: &str, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let previous = self.phase;
        self.set_workload_created("False", reason, message, now);
        self.enter(
            JobPhase::Failed,
            Some(reason.to_owned()),
            Some(message.to_owned()),
            now,
        );
        Some(Transition {
            previous_phase: Some(previous),
            phase: JobPhase::Failed,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
        })
    }

    fn set_workload_created(&mut self, status: &str, reason: &str, message: &str, now: DateTime<Utc>) {
        self.conditions.retain(|c| c.type_ != WORKLOAD_CREATED);
        self.conditions.push(Condition {
            type_: WORKLOAD_CREATED.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_transition_time: Some(now),
        });
    }

    /// Holds a just-accepted job until `waiting` (the dependencies that have not finished)
    /// succeed: it stays PENDING with a `DependenciesSucceeded=False` condition.
    pub fn wait_for_dependencies(&mut self, waiting: &[String], now: DateTime<Utc>) -> Transition {
        let message = format!("waiting for {} to succeed", jobs_named(waiting));
        self.set_dependencies_condition("False", WAITING_FOR_DEPENDENCIES, &message, now);
        self.message = Some(message.clone());
        Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some(WAITING_FOR_DEPENDENCIES.into()),
            message: Some(message),
        }
    }

    /// Whether the job is held until its dependencies succeed.
    pub fn is_waiting_for_dependencies(&self) -> bool {
        !self.phase.is_terminal()
            && self
                .conditions
                .iter()
                .any(|c| c.type_ == DEPENDENCIES_SUCCEEDED && c.status == "False")
    }

    /// Every dependency succeeded: the job may launch.
    pub fn dependencies_succeeded(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        if !self.is_waiting_for_dependencies() {
            return None;
        }
        let message = "every dependency succeeded; the job can start".to_owned();
        self.set_dependencies_condition("True", DEPENDENCIES_SUCCEEDED, &message, now);
        self.message = None;
        Some(Transition {
            previous_phase: Some(self.phase),
            phase: self.phase,
            reason: Some(DEPENDENCIES_SUCCEEDED.into()),
            message: Some(message),
        })
    }

    /// A dependency ended without success (`phase`): the job fails without running.
    pub fn dependency_failed(
        &mut self,
        dependency: &str,
        phase: JobPhase,
        now: DateTime<Utc>,
    ) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let previous = self.phase;
        let message = format!("dependency {dependency} ended {phase}, so this job will not run");
        self.set_dependencies_condition("False", DEPENDENCY_FAILED, &message, now);
        self.enter(
            JobPhase::Failed,
            Some(DEPENDENCY_FAILED.into()),
            Some(message.clone()),
            now,
        );
        Some(Transition {
            previous_phase: Some(previous),
            phase: JobPhase::Failed,
            reason: Some(DEPENDENCY_FAILED.into()),
            message: Some(message),
        })
    }

    fn set_dependencies_condition(&mut self, status: &str, reason: &str, message: &str, now: DateTime<Utc>) {
        self.conditions.retain(|c| c.type_ != DEPENDENCIES_SUCCEEDED);
        self.conditions.push(Condition {
            type_: DEPENDENCIES_SUCCEEDED.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_transition_time: Some(now),
        });
    }

    /// Cancels the job, if it has not finished.
    pub fn cancel(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        if self.phase.is_terminal() {
            return None;
        }
        let previous = self.phase;
        let message = Some("cancelled by request".to_owned());
        self.enter(
            JobPhase::Cancelled,
            Some("CancelledByUser".into()),
            message.clone(),
            now,
        );
        self.progress.active = 0;
        self.end_running_attempts(FailureCause::Cancelled, "CancelledByUser", now);
        Some(Transition {
            previous_phase: Some(previous),
            phase: JobPhase::Cancelled,
            reason: Some("CancelledByUser".into()),
            message,
        })
    }

    fn enter(
        &mut self,
        phase: JobPhase,
        reason: Option<String>,
        message: Option<String>,
        now: DateTime<Utc>,
    ) {
        let type_ = match phase {
            JobPhase::Pending => "Pending",
            JobPhase::Running => "Running",
            JobPhase::Succeeded => "Complete",
            JobPhase::Failed => "Failed",
            JobPhase::Cancelled => "Cancelled",
        };
        self.phase = phase;
        if phase == JobPhase::Running && self.started_at.is_none() {
            self.started_at = Some(now);
        }
        if phase.is_terminal() {
            self.finished_at = Some(self.workload.completion_time.unwrap_or(now));
        }
        if message.is_some() {
            self.message.clone_from(&message);
        }
        self.conditions.retain(|c| c.type_ != type_);
        self.conditions.push(Condition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: reason.or_else(|| Some(type_.to_owned())),
            message,
            last_transition_time: Some(now),
        });
    }
}

/// A job's attempts, as executors report them.
impl Job {
    /// Folds attempts an executor reported into the job: a new one is numbered after the
    /// others of its index, a known one is updated. Returns one transition per attempt that
    /// ended here (to record as events, before the job's own), and whether anything changed.
    /// A terminal job keeps its attempts as they were.
    pub fn record_attempts(&mut self, reported: Vec<JobAttempt>) -> (Vec<Transition>, bool) {
        let mut ended = Vec::new();
        let mut changed = false;
        if self.phase.is_terminal() {
            return (ended, changed);
        }
        for attempt in reported {
            let mut attempt = attempt;
            attempt.reason = attempt.reason.map(|r| clip(r, MAX_ATTEMPT_TEXT));
            attempt.message = attempt.message.map(|m| clip(m, MAX_ATTEMPT_TEXT));
            let summary = match self.attempts.iter_mut().find(|a| a.name == attempt.name) {
                Some(known) => {
                    let was_ended = known.has_ended();
                    let before = known.clone();
                    known.update(attempt);
                    changed |= *known != before;
                    (!was_ended && known.has_ended()).then(|| known.clone())
                }
                None => {
                    // One the job let go of (see `MAX_ATTEMPTS`) is not taken back.
                    let omitted = self
                        .attempts_omitted_through
                        .is_some_and(|through| attempt.started_at.is_none_or(|started| started <= through));
                    if omitted {
                        continue;
                    }
                    let mut attempt = attempt;
                    attempt.number = self.attempts_of_index(attempt.index) + 1;
                    changed = true;
                    let ended_now = attempt.has_ended();
                    self.attempts.push(attempt.clone());
                    ended_now.then_some(attempt)
                }
            };
            if let Some(attempt) = summary {
                ended.push(Transition {
                    previous_phase: Some(self.phase),
                    phase: self.phase,
                    reason: Some(
                        if attempt.state == AttemptState::Succeeded {
                            ATTEMPT_SUCCEEDED
                        } else {
                            ATTEMPT_FAILED
                        }
                        .to_owned(),
                    ),
                    message: Some(clip(attempt.summary(), MAX_ATTEMPT_TEXT)),
                });
            }
        }
        self.bound_attempts();
        (ended, changed)
    }

    /// Ends every attempt still running, as the job ended (a cancellation): they will not be
    /// followed any further.
    fn end_running_attempts(&mut self, cause: FailureCause, reason: &str, now: DateTime<Utc>) {
        for attempt in self.attempts.iter_mut().filter(|a| !a.has_ended()) {
            attempt.end(cause, reason, now);
        }
    }

    /// How many attempts of `index` the job has known, those it let go of included.
    fn attempts_of_index(&self, index: i32) -> i32 {
        let kept = self
            .attempts
            .iter()
            .filter(|a| a.index == index)
            .map(|a| a.number);
        kept.max().unwrap_or(0)
    }

    /// Keeps at most [`MAX_ATTEMPTS`]: the oldest ended ones go first, counted.
    fn bound_attempts(&mut self) {
        while self.attempts.len() > MAX_ATTEMPTS {
            let Some(oldest) = self.attempts.iter().position(JobAttempt::has_ended) else {
                return;
            };
            let gone = self.attempts.remove(oldest);
            self.attempts_omitted += 1;
            let through = gone.started_at.or(gone.finished_at);
            self.attempts_omitted_through = self.attempts_omitted_through.max(through);
        }
    }
}

/// The queue status a job entered, when its state or explanation differ from `before`'s.
fn queue_change(before: Option<&QueueStatus>, after: Option<&QueueStatus>) -> Option<QueueStatus> {
    let after = after?;
    let same = before
        .is_some_and(|b| b.state == after.state && b.reason == after.reason && b.message == after.message);
    (!same).then(|| after.clone())
}

/// What a job's queue status says, for its message and events: Kueue's own message, or its
/// state in words.
fn queue_message(queue: &QueueStatus) -> String {
    let detail = queue.message.clone().unwrap_or_else(|| match queue.state {
        QueueState::Pending => "waiting for quota".to_owned(),
        QueueState::QuotaReserved => "quota reserved".to_owned(),
        QueueState::Admitted => "admitted".to_owned(),
        QueueState::Evicted => "evicted".to_owned(),
        QueueState::Preempted => "preempted".to_owned(),
        QueueState::Finished => "finished".to_owned(),
    });
    format!("Kueue queue {}: {detail}", queue.name)
}

/// The condition that says whether a job's workload could be created.
pub const WORKLOAD_CREATED: &str = "WorkloadCreated";
/// The condition that says whether a job's dependencies have succeeded (jobs with `dependsOn`).
pub const DEPENDENCIES_SUCCEEDED: &str = "DependenciesSucceeded";
pub const WAITING_FOR_DEPENDENCIES: &str = "WaitingForDependencies";
pub const DEPENDENCY_FAILED: &str = "DependencyFailed";

/// "job a", "jobs a and b", "jobs a, b and 3 more".
fn jobs_named(ids: &[String]) -> String {
    match ids {
        [one] => format!("job {one}"),
        [a, b] => format!("jobs {a} and {b}"),
        [a, b, rest @ ..] => format!("jobs {a}, {b} and {} more", rest.len()),
        [] => "no job".to_owned(),
    }
}
