//! The pod-failure back-off of one Job: how many pods failed since the last success, and how long
//! the controller waits before it creates the next pod (the exponential delay of `SimConfig`).
//!
//! It must not create or delete pods; the controller asks it how long to wait.

use std::time::Duration;

use tokio::time::Instant;

use crate::controllers::SimConfig;

/// The pod-failure back-off of one Job: consecutive failures since the last success.
#[derive(Debug, Clone, Default)]
pub(super) struct BackoffRecord {
    uid: String,
    failures_after_last_success: u32,
    last_failure: Option<Instant>,
}

impl BackoffRecord {
    pub(super) fn updated(
        &self,
        uid: &str,
        new_succeeded: usize,
        new_failed: usize,
        now: Instant,
    ) -> BackoffRecord {
        let mut next = if self.uid == uid {
            self.clone()
        } else {
            BackoffRecord {
                uid: uid.to_owned(),
                ..Default::default()
            }
        };
        if new_succeeded > 0 && new_failed == 0 {
            next.failures_after_last_success = 0;
            next.last_failure = None;
        } else if new_failed > 0 {
            // A success in the same batch resets the count first: only these failures remain.
            let base = if new_succeeded > 0 {
                0
            } else {
                next.failures_after_last_success
            };
            next.failures_after_last_success = base + u32::try_from(new_failed).unwrap_or(u32::MAX);
            next.last_failure = Some(now);
        }
        next
    }

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
