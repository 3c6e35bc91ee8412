//! The pod-failure back-off of one Job: how many pods failed since the last success, when the
//! latest of them finished, and how long the controller waits before it creates the next pod
//! (the exponential delay of `SimConfig`), counted as upstream's `backoffRecord` counts it.
//!
//! It must not create or delete pods; the controller asks it how long to wait.

use std::time::Duration;

use tokio::time::Instant;

use crate::controllers::SimConfig;

/// The pod-failure back-off of one Job: consecutive failures since the last success, and when
/// the latest of them finished (the real controller's `failuresAfterLastSuccess` and
/// `lastFailureTime`).
#[derive(Debug, Clone, Default)]
pub(super) struct BackoffRecord {
    uid: String,
    failures_after_last_success: u32,
    last_failure: Option<Instant>,
}

impl BackoffRecord {
    /// The record after one sync counted `succeeded` and `failed` new finished pods, each given
    /// by when it finished. Failures add up; a success resets the count, and of the failures
    /// counted with it only those that finished after the latest success remain.
    pub(super) fn updated(&self, uid: &str, succeeded: &[Instant], failed: &[Instant]) -> BackoffRecord {
        let mut next = if self.uid == uid {
            self.clone()
        } else {
            BackoffRecord {
                uid: uid.to_owned(),
                ..Default::default()
            }
        };
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        match succeeded.iter().max() {
            None => {
                if let Some(latest) = failed.iter().max() {
                    next.failures_after_last_success = next
                        .failures_after_last_success
                        .saturating_add(count(failed.len()));
                    next.last_failure = Some(*latest);
                }
            }
            Some(last_success) => {
                let after: Vec<&Instant> = failed.iter().filter(|f| *f > last_success).collect();
                next.failures_after_last_success = count(after.len());
                next.last_failure = after.into_iter().max().copied();
            }
        }
        next
    }

    /// How long the controller still waits before it creates a pod: the back-off for the
    /// failures counted, measured from when the latest of them finished (not from when the
    /// controller noticed it).
    pub(super) fn remaining(&self, config: &SimConfig, now: Instant) -> Duration {
        let Some(last) = self.last_failure else {
            return Duration::ZERO;
        };
        let backoff = SimConfig::backoff(
            config.pod_failure_backoff,
            config.pod_failure_backoff_max,
            self.failures_after_last_success,
        );
        backoff.saturating_sub(now.saturating_duration_since(last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SimConfig {
        SimConfig::real_cluster()
    }

    #[test]
    fn consecutive_failures_double_the_wait_from_the_latest_failure() {
        let t0 = Instant::now();
        let one = BackoffRecord::default().updated("u", &[], &[t0]);
        assert_eq!(
            one.remaining(&config(), t0 + Duration::from_secs(1)),
            Duration::from_secs(9)
        );
        let later = t0 + Duration::from_secs(12);
        let two = one.updated("u", &[], &[later]);
        assert_eq!(two.remaining(&config(), later), Duration::from_secs(20));
    }

    #[test]
    fn a_success_resets_the_count_and_keeps_only_the_failures_after_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let failing = BackoffRecord::default().updated("u", &[], &[t0, t0 + s]);
        assert_eq!(failing.remaining(&config(), t0 + s), Duration::from_secs(20));
        let reset = failing.updated("u", &[t0 + 2 * s], &[]);
        assert_eq!(reset.remaining(&config(), t0 + 2 * s), Duration::ZERO);
        let mixed = failing.updated("u", &[t0 + 2 * s], &[t0 + s / 2, t0 + 3 * s]);
        assert_eq!(mixed.remaining(&config(), t0 + 3 * s), Duration::from_secs(10));
        let another_job = failing.updated("v", &[], &[]);
        assert_eq!(another_job.remaining(&config(), t0 + s), Duration::ZERO);
    }
}
