//! The local executor's retry bookkeeping: what one failed run leads to under the job's
//! `backoffLimit` and retry policy (`RetryBook::after_failure`), as the Job controller decides
//! it for a failed pod, with the same reasons and messages; failures per completion index and
//! the indexes that failed; the back-off before the next run, and until when it holds: per
//! index with `backoffLimitPerIndex`, job-wide otherwise, as the Job controller keeps it.
//!
//! The rules' matching is the model's (`RetryPolicy::decide`), shared with the Kubernetes
//! executor; this module keeps the counts, which the runner stores with its state so that a
//! restart resumes them. It must not start, stop or wait for processes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{FailedRun, JOB_CONTAINER, JobSpec, RetryAction};

/// What the runner does after a failed run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Run the index again, after the back-off.
    Retry,
    /// The index has failed: it is not run again; the job goes on with the others.
    IndexFailed,
    /// The job fails now, with the Job controller's reason and message.
    FailJob { reason: &'static str, message: String },
}

/// The reason and message of a job whose indexes failed once every index has ended.
pub(super) const FAILED_INDEXES: (&str, &str) = ("FailedIndexes", "Job has failed indexes");
const MAX_FAILED_INDEXES: (&str, &str) = (
    "MaxFailedIndexesExceeded",
    "Job has exceeded the specified maximal number of failed indexes",
);
const LOST_IN_RESTART: (&str, &str) = (
    "GatewayRestarted",
    "runs in progress were lost when jobgate restarted and the backoff limit is reached",
);

const BACKOFF_LIMIT: (&str, &str) = (
    "BackoffLimitExceeded",
    "Job has reached the specified backoff limit",
);

/// The counts retry decisions need, kept across restarts in the runner's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RetryBook {
    /// Counted failures of each index (with `backoffLimitPerIndex`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    index_failures: BTreeMap<i32, i32>,
    /// Indexes that failed and are not run again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(super) failed_indexes: BTreeSet<i32>,
    /// Every failed run, ignored ones included: the job-wide back-off grows with them.
    #[serde(default)]
    failures: u32,
    /// Every failed run of each index, ignored ones included (with `backoffLimitPerIndex`):
    /// the index's own back-off grows with them, as the Job controller's per-index back-off
    /// does with a pod's `job-index-failure-count` plus `job-index-ignored-failure-count`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    index_runs_failed: BTreeMap<i32, u32>,
    /// Until when no run starts: the job-wide back-off. Wall-clock time, so that a restart
    /// keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backing_off_until: Option<DateTime<Utc>>,
    /// Until when each index backing off does not run again (with `backoffLimitPerIndex`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    index_backing_off_until: BTreeMap<i32, DateTime<Utc>>,
}

/// A failed run as the runner saw it.
pub(super) struct RunFailure<'a> {
    pub(super) index: i32,
    /// The exit code, 128 + N for a run killed by signal N; `None` when it never ran.
    pub(super) exit_code: Option<i32>,
    /// How the Job controller's message names the run (`run 3 (index 0)`).
    pub(super) subject: &'a str,
}

impl RetryBook {
    /// Counts one failed run in `failed` (the job's counted failures, `status.failed`) and
    /// decides what follows, in the Job controller's order: a `FAIL_JOB` rule, then
    /// `backoffLimit`, then the index's own limit and `maxFailedIndexes`.
    pub(super) fn after_failure(
        &mut self,
        spec: &JobSpec,
        failed: &mut i32,
        run: &RunFailure<'_>,
    ) -> Verdict {
        self.failed_run(run.index);
        let codes = run.exit_code.map(|c| [(JOB_CONTAINER, c)]);
        let decision = spec.retry_policy.as_ref().and_then(|policy| {
            let failed_run = FailedRun {
                exit_codes: codes.as_ref().map(|c| &c[..]).unwrap_or_default(),
                disrupted: false,
            };
            policy.decide(&failed_run, run.subject)
        });
        let action = decision.as_ref().map(|d| d.action);
        if action == Some(RetryAction::Ignore) {
            return Verdict::Retry;
        }
        *failed += 1;
        if let (Some(RetryAction::FailJob), Some(decision)) = (action, decision) {
            return Verdict::FailJob {
                reason: "PodFailurePolicy",
                message: decision.message,
            };
        }
        self.count(spec, *failed, run.index, action == Some(RetryAction::FailIndex))
    }

    /// Counts a run lost when jobgate restarted (no rule can match it) in `failed` and, as
    /// any failed run of its index, against the index's limit; `index` is `None` for a run
    /// whose index is not on record, which counts against `backoffLimit` alone.
    pub(super) fn after_lost_run(&mut self, spec: &JobSpec, failed: &mut i32, index: Option<i32>) -> Verdict {
        *failed += 1;
        // The limit reached by runs a restart took says so, not as if the runs had failed.
        if *failed > spec.backoff_limit {
            self.failures = self.failures.saturating_add(1);
            return fail_job(LOST_IN_RESTART);
        }
        let Some(index) = index else {
            self.failures = self.failures.saturating_add(1);
            return Verdict::Retry;
        };
        self.failed_run(index);
        self.count(spec, *failed, index, false)
    }

    /// Counts one failed run of `index`, ignored or not, for the back-off.
    fn failed_run(&mut self, index: i32) {
        self.failures = self.failures.saturating_add(1);
        let runs = self.index_runs_failed.entry(index).or_insert(0);
        *runs = runs.saturating_add(1);
    }

    fn count(&mut self, spec: &JobSpec, failed: i32, index: i32, fail_index: bool) -> Verdict {
        if failed > spec.backoff_limit {
            return fail_job(BACKOFF_LIMIT);
        }
        let Some(policy) = &spec.retry_policy else {
            return Verdict::Retry;
        };
        let Some(limit) = policy.backoff_limit_per_index else {
            return Verdict::Retry;
        };
        let failures = self.index_failures.entry(index).or_insert(0);
        *failures += 1;
        if !fail_index && *failures <= limit {
            return Verdict::Retry;
        }
        self.failed_indexes.insert(index);
        if policy
            .max_failed_indexes
            .is_some_and(|max| self.failed_indexes.len() as i64 > i64::from(max))
        {
            return fail_job(MAX_FAILED_INDEXES);
        }
        Verdict::IndexFailed
    }

    /// The back-off before the next run of `index`: the policy's, else the executor's default
    /// (`default_delay`, doubling per failure up to `default_cap`). With
    /// `backoffLimitPerIndex` it grows with the index's own failed runs (ignored ones
    /// included); otherwise with the job's (the policy's back-off) or its counted failures
    /// (the default).
    pub(super) fn delay(
        &self,
        spec: &JobSpec,
        index: i32,
        failed: i32,
        default_delay: Duration,
        default_cap: Duration,
    ) -> Duration {
        let policy = spec.retry_policy.as_ref();
        let per_index = per_index(spec).then(|| self.index_runs_failed.get(&index).copied().unwrap_or(0));
        if let Some(backoff) = policy.and_then(|p| p.backoff.as_ref()) {
            let failures = per_index.unwrap_or(self.failures);
            let seconds = backoff.delay_seconds(failures, random_fraction());
            return Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO);
        }
        let failures = per_index.map_or(failed, |n| i32::try_from(n).unwrap_or(i32::MAX));
        let doublings = (failures.max(1) - 1).min(16) as u32;
        default_delay
            .saturating_mul(2u32.saturating_pow(doublings))
            .min(default_cap)
    }
}

/// Whether the job's back-off is kept per index (`backoffLimitPerIndex`), as the Job
/// controller keeps it.
fn per_index(spec: &JobSpec) -> bool {
    spec.retry_policy
        .as_ref()
        .is_some_and(|p| p.backoff_limit_per_index.is_some())
}

impl RetryBook {
    /// `index` failed and is retried once `delay` from `now` has passed: it alone with
    /// `backoffLimitPerIndex` (the other indexes start meanwhile), otherwise the whole job (no
    /// run starts until then).
    pub(super) fn back_off(&mut self, spec: &JobSpec, index: i32, delay: Duration, now: DateTime<Utc>) {
        let until = chrono::Duration::from_std(delay)
            .ok()
            .and_then(|delay| now.checked_add_signed(delay))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        if per_index(spec) {
            self.index_backing_off_until.insert(index, until);
        } else {
            self.backing_off_until = Some(until);
        }
    }

    /// Forgets the back-offs over at `now`, so that only those still running wake the runner.
    pub(super) fn forget_past_back_offs(&mut self, now: DateTime<Utc>) {
        self.backing_off_until = self.backing_off_until.filter(|t| *t > now);
        self.index_backing_off_until.retain(|_, t| *t > now);
    }

    /// Whether `index` may start at `now`.
    pub(super) fn may_start(&self, index: i32, now: DateTime<Utc>) -> bool {
        self.backing_off_until.is_none_or(|t| t <= now)
            && self.index_backing_off_until.get(&index).is_none_or(|t| *t <= now)
    }

    /// When the next back-off still running ends.
    pub(super) fn next_back_off_end(&self) -> Option<DateTime<Utc>> {
        (self.backing_off_until.iter())
            .chain(self.index_backing_off_until.values())
            .min()
            .copied()
    }
}

fn fail_job((reason, message): (&'static str, &str)) -> Verdict {
    Verdict::FailJob {
        reason,
        message: message.to_owned(),
    }
}

/// A uniformly random number in [0, 1), for the back-off's jitter.
fn random_fraction() -> f64 {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        return 0.0;
    }
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SubmitRequest, ValidationLimits};

    fn spec(policy: serde_json::Value, completions: i32, backoff_limit: Option<i32>) -> JobSpec {
        SubmitRequest {
            command: Some(vec!["true".into()]),
            completions: Some(completions),
            backoff_limit,
            retry_policy: Some(serde_json::from_value(policy).unwrap()),
            ..SubmitRequest::default()
        }
        .validate(&ValidationLimits::default())
        .unwrap()
    }

    fn failure(index: i32, code: i32) -> RunFailure<'static> {
        RunFailure {
            index,
            exit_code: Some(code),
            subject: "run 1 (index 0)",
        }
    }

    #[test]
    fn ignored_failures_are_not_counted_and_fail_job_stops_at_once() {
        let spec = spec(
            serde_json::json!({"rules": [
                {"action": "IGNORE", "exitCodes": {"operator": "IN", "values": [42]}},
                {"action": "FAIL_JOB", "exitCodes": {"operator": "IN", "values": [3]}},
            ]}),
            1,
            Some(0),
        );
        let (mut book, mut failed) = (RetryBook::default(), 0);
        assert_eq!(
            book.after_failure(&spec, &mut failed, &failure(0, 42)),
            Verdict::Retry
        );
        assert_eq!(failed, 0);
        let Verdict::FailJob { reason, message } = book.after_failure(&spec, &mut failed, &failure(0, 3))
        else {
            panic!("FAIL_JOB")
        };
        assert_eq!((reason, failed), ("PodFailurePolicy", 1));
        assert_eq!(
            message,
            "Container job for run 1 (index 0) failed with exit code 3 matching FailJob rule at index 1"
        );
        assert_eq!(
            book.after_failure(&spec, &mut 0, &failure(0, 1)),
            fail_job(BACKOFF_LIMIT),
            "no rule: counted against backoffLimit 0"
        );
    }

    #[test]
    fn indexes_fail_on_their_own_limit_and_the_job_past_max_failed_indexes() {
        let spec = spec(
            serde_json::json!({"backoffLimitPerIndex": 1, "maxFailedIndexes": 1, "rules": [
                {"action": "FAIL_INDEX", "exitCodes": {"operator": "IN", "values": [5]}},
            ]}),
            4,
            None,
        );
        assert_eq!(
            spec.backoff_limit,
            i32::MAX,
            "unbounded, as the Job controller's default"
        );
        let (mut book, mut failed) = (RetryBook::default(), 0);
        assert_eq!(
            book.after_failure(&spec, &mut failed, &failure(1, 1)),
            Verdict::Retry
        );
        assert_eq!(
            book.after_failure(&spec, &mut failed, &failure(1, 1)),
            Verdict::IndexFailed
        );
        assert_eq!(
            book.after_failure(&spec, &mut failed, &failure(2, 5)),
            fail_job(MAX_FAILED_INDEXES),
            "FAIL_INDEX fails index 2 at once: two failed indexes, one allowed"
        );
        assert_eq!(failed, 3);
    }

    #[test]
    fn the_back_off_is_kept_per_index_with_backoff_limit_per_index_and_per_job_otherwise() {
        let backoff = serde_json::json!({"initialSeconds": 1, "factor": 10, "maxSeconds": 1000});
        let (default, cap) = (Duration::from_millis(20), Duration::from_secs(10));
        let per_index = spec(
            serde_json::json!({"backoffLimitPerIndex": 5, "backoff": backoff}),
            2,
            None,
        );
        let job_wide = spec(serde_json::json!({"backoff": backoff}), 2, Some(5));
        for (spec, second_index_waits) in [(&per_index, 1), (&job_wide, 100)] {
            let (mut book, mut failed) = (RetryBook::default(), 0);
            book.after_failure(spec, &mut failed, &failure(0, 1));
            book.after_failure(spec, &mut failed, &failure(0, 1));
            assert_eq!(book.delay(spec, 0, failed, default, cap), Duration::from_secs(10));
            book.after_failure(spec, &mut failed, &failure(1, 1));
            assert_eq!(
                book.delay(spec, 1, failed, default, cap),
                Duration::from_secs(second_index_waits)
            );
        }
        // The executor's default back-off too, ignored failures included per index.
        let ignoring = spec(
            serde_json::json!({"backoffLimitPerIndex": 5, "rules": [
                {"action": "IGNORE", "exitCodes": {"operator": "IN", "values": [42]}},
            ]}),
            2,
            None,
        );
        let (mut book, mut failed) = (RetryBook::default(), 0);
        book.after_failure(&ignoring, &mut failed, &failure(0, 42));
        book.after_failure(&ignoring, &mut failed, &failure(0, 42));
        assert_eq!(book.delay(&ignoring, 0, failed, default, cap), default * 2);
        assert_eq!(book.delay(&ignoring, 1, failed, default, cap), default);
        // A run lost in a restart counts against its index, and one of no known index only
        // against the job.
        book.after_lost_run(&ignoring, &mut failed, Some(1));
        book.after_lost_run(&ignoring, &mut failed, None);
        assert_eq!(failed, 2);
        assert_eq!(book.index_failures.get(&1), Some(&1));
        assert_eq!(book.index_failures.len(), 1);
    }
}
