//! The local executor's attempts: each run the runner starts is one, named
//! `index-<i>-run-<n>` (its completion index and the job's run number), which is also the
//! `source` of the lines it writes; how a run's end (an exit, a signal, a deadline, a
//! restart of jobgate) reads as an attempt and its cause.
//!
//! It owns only that translation: it must not start, watch or stop processes (the runner
//! does) nor decide the job's phase.

use chrono::{DateTime, Utc};

use super::RunRecord;
use crate::model::{AttemptState, FailureCause, JobAttempt};

/// The name of the run number `run` of index `index`: unique in its job, because an index
/// runs once at a time and the run number grows with every run that ends.
pub(super) fn run_name(index: i32, run: i32) -> String {
    format!("index-{index}-run-{run}")
}

/// How a run's process ended.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RunExit {
    pub(super) code: Option<i32>,
    pub(super) signal: Option<i32>,
}

/// A run that has just started.
pub(super) fn started(record: &RunRecord) -> JobAttempt {
    let mut attempt = JobAttempt::running(
        run_name(record.index, record.run),
        record.index,
        record.started_at,
    );
    attempt.process_id = Some(record.pgid);
    attempt
}

/// A run that ended by itself: it succeeded, or failed with `exit` (`why`: the runner's words).
pub(super) fn ended(record: &RunRecord, success: bool, exit: RunExit, why: Option<String>) -> JobAttempt {
    let mut attempt = started(record);
    attempt.finished_at = Some(Utc::now());
    attempt.exit_code = exit.code;
    attempt.signal = exit.signal;
    if success {
        attempt.state = AttemptState::Succeeded;
    } else {
        attempt.state = AttemptState::Failed;
        attempt.cause = Some(FailureCause::Error);
        attempt.reason = Some("Error".to_owned());
        attempt.message = why;
    }
    attempt
}

/// A run that could not start at all (`why`), as a container that fails to start.
pub(super) fn not_started(index: i32, run: i32, why: &str, now: DateTime<Utc>) -> JobAttempt {
    let mut attempt = JobAttempt::running(run_name(index, run), index, Some(now));
    attempt.state = AttemptState::Failed;
    attempt.finished_at = Some(now);
    attempt.cause = Some(FailureCause::Error);
    attempt.reason = Some("StartError".to_owned());
    attempt.message = Some(why.to_owned());
    attempt
}

/// A run jobgate stopped: the job failed for `reason` (`DeadlineExceeded`, the backoff limit
/// reached by another run), or jobgate restarted while it ran (`GatewayRestarted`).
pub(super) fn stopped(record: &RunRecord, reason: &str, message: &str) -> JobAttempt {
    let mut attempt = started(record);
    attempt.state = AttemptState::Failed;
    attempt.finished_at = Some(Utc::now());
    attempt.cause = Some(match reason {
        "DeadlineExceeded" => FailureCause::DeadlineExceeded,
        "GatewayRestarted" => FailureCause::GatewayRestarted,
        _ => FailureCause::Cancelled,
    });
    attempt.reason = Some(reason.to_owned());
    attempt.message = Some(message.to_owned());
    attempt
}
