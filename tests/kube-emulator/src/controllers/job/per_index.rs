//! `spec.backoffLimitPerIndex` and `spec.maxFailedIndexes` of Indexed Jobs, as the real
//! controller implements them (`indexed_job_utils.go`, `backoff_utils.go`):
//!
//! - every pod of such a Job carries `batch.kubernetes.io/job-index-failure-count`: the failures
//!   of its index before it (and `…-index-ignored-failure-count` for failures an `Ignore` rule
//!   matched, when there were any), taken from the failed pod it replaces;
//! - an index fails when a failed pod of it is counted and its failure count already reached the
//!   limit (so the limit + 1st counted failure fails the index), or at once when the pod matches a
//!   `FailIndex` rule; failed indexes are kept in `status.failedIndexes` (interval syntax, `""`
//!   while none), never get a new pod, and the Job fails with `MaxFailedIndexesExceeded` once
//!   more than `maxFailedIndexes` have failed, else with `FailedIndexes` ("Job has failed
//!   indexes") once every index has succeeded or failed;
//! - the tracking finalizer of the latest failed pod of an index that is neither done nor active
//!   stays until its replacement exists (the replacement's counts are read from it);
//! - the pod-failure back-off is per index: the replacement waits for the back-off of the index's
//!   failures (ignored ones too), counted from when the replaced pod finished; the Job-wide
//!   back-off does not apply.
//!
//! It must not create or delete pods nor write the status: the sync and `pods` do, asking it.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::failure_policy::{self, Action};
use super::indexes::Intervals;
use super::tracking::has_tracking_finalizer;
use super::{Spec, completion_index};
use crate::controllers::SimConfig;
use crate::controllers::objects;

/// The failures of a pod's index before it.
pub(super) const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// The failures of a pod's index before it that an `Ignore` rule matched.
pub(super) const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

/// A failed pod whose tracking finalizer stays until its index has a replacement, and when it
/// finished.
#[derive(Debug, Clone)]
pub(super) struct Replaced {
    pub pod: Value,
    pub finished: Instant,
}

/// An annotation's count; 0 when missing, malformed, negative or beyond int32, as upstream reads it.
fn count(pod: &Value, key: &str) -> i64 {
    objects::annotation(pod, key)
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|n| (0..=i64::from(i32::MAX)).contains(n))
        .unwrap_or(0)
}

/// Counted plus ignored failures of the pod's index before it.
fn absolute_count(pod: &Value) -> i64 {
    count(pod, INDEX_FAILURE_COUNT) + count(pod, INDEX_IGNORED_FAILURE_COUNT)
}

/// Whether this failed pod fails its index (`isIndexFailed`).
fn fails_its_index(spec: &Spec<'_>, limit: i64, pod: &Value) -> bool {
    if !spec.is_pod_failed(pod) {
        return false;
    }
    let matched = failure_policy::match_pod(spec.failure_policy, pod);
    if matched.action == Some(Action::FailIndex) {
        return true;
    }
    matched.count && count(pod, INDEX_FAILURE_COUNT) >= limit
}

/// `status.failedIndexes` with the indexes that failed since (`calculateFailedIndexes`): the
/// pods still holding their tracking finalizer that fail their index.
pub(super) fn failed_indexes(spec: &Spec<'_>, previous: Option<&str>, pods: &[Value]) -> Intervals {
    let completions = spec.completions.and_then(|c| u64::try_from(c).ok()).unwrap_or(0);
    let mut failed = Intervals::parse(previous.unwrap_or_default(), completions);
    let Some(limit) = spec.backoff_limit_per_index else {
        return failed;
    };
    for pod in pods {
        if has_tracking_finalizer(pod)
            && let Some(ix) = spec.valid_index(pod)
            && fails_its_index(spec, limit, pod)
        {
            failed.insert(ix);
        }
    }
    failed
}

/// The Job's outcome from its indexes, if any: `(reason, message)` of the `FailureTarget`.
pub(super) fn outcome(
    spec: &Spec<'_>,
    failed: &Intervals,
    succeeded: &Intervals,
) -> Option<(&'static str, &'static str)> {
    let completions = u64::try_from(spec.completions?).unwrap_or(0);
    if let Some(max) = spec.max_failed_indexes
        && failed.total() > u64::try_from(max).unwrap_or(0)
    {
        return Some((
            "MaxFailedIndexesExceeded",
            "Job has exceeded the specified maximal number of failed indexes",
        ));
    }
    (failed.total() > 0 && failed.total() + succeeded.total() >= completions)
        .then_some(("FailedIndexes", "Job has failed indexes"))
}

/// For each index neither done nor active, the latest failed pod still holding its tracking
/// finalizer (`getPodsWithDelayedDeletionPerIndex`): the one with the most failures, the later
/// finished among equals.
pub(super) fn replaced_pods(
    spec: &Spec<'_>,
    pods: &[Value],
    active_pods: &[Value],
    succeeded: &Intervals,
    failed: &Intervals,
    finished_at: &dyn Fn(&Value) -> Instant,
) -> HashMap<u64, Replaced> {
    let mut active = Intervals::default();
    for ix in active_pods.iter().filter_map(completion_index) {
        active.insert(ix);
    }
    let mut out: HashMap<u64, Replaced> = HashMap::new();
    for pod in pods {
        if !has_tracking_finalizer(pod) || !spec.is_pod_failed(pod) {
            continue;
        }
        let Some(ix) = spec.valid_index(pod) else {
            continue;
        };
        if succeeded.has(ix) || failed.has(ix) || active.has(ix) {
            continue;
        }
        let finished = finished_at(pod);
        let later = out
            .get(&ix)
            .is_none_or(|kept| absolute_count(&kept.pod) <= absolute_count(pod) && finished >= kept.finished);
        if later {
            out.insert(
                ix,
                Replaced {
                    pod: pod.clone(),
                    finished,
                },
            );
        }
    }
    out
}

/// The failure counts a new pod of an index carries (`getNewIndexFailureCounts`): those of the
/// pod it replaces plus that pod's own failure, counted or ignored.
pub(super) fn new_failure_counts(spec: &Spec<'_>, replaced: Option<&Replaced>) -> (i64, i64) {
    let Some(Replaced { pod, .. }) = replaced else {
        return (0, 0);
    };
    let (failures, ignored) = (
        count(pod, INDEX_FAILURE_COUNT),
        count(pod, INDEX_IGNORED_FAILURE_COUNT),
    );
    if failure_policy::match_pod(spec.failure_policy, pod).count {
        (failures + 1, ignored)
    } else {
        (failures, ignored + 1)
    }
}

/// Of `indexes`, those whose back-off is over; when none is, how long until the first one is.
pub(super) fn ready_indexes(
    config: &SimConfig,
    indexes: Vec<u64>,
    replaced: &HashMap<u64, Replaced>,
    now: Instant,
) -> Result<Vec<u64>, Duration> {
    let mut ready = Vec::new();
    let mut soonest: Option<Duration> = None;
    for ix in indexes {
        let wait = replaced.get(&ix).map_or(Duration::ZERO, |r| {
            let failures = u32::try_from(absolute_count(&r.pod) + 1).unwrap_or(u32::MAX);
            SimConfig::backoff(
                config.pod_failure_backoff,
                config.pod_failure_backoff_max,
                failures,
            )
            .saturating_sub(now.saturating_duration_since(r.finished))
        });
        if wait.is_zero() {
            ready.push(ix);
        } else {
            soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
        }
    }
    match soonest {
        Some(wait) if ready.is_empty() => Err(wait),
        _ => Ok(ready),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn failed_pod(ix: u64, failures: i64) -> Value {
        json!({"metadata": {"name": format!("p-{ix}-{failures}"), "namespace": "ns",
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "annotations": {"batch.kubernetes.io/job-completion-index": ix.to_string(),
                INDEX_FAILURE_COUNT: failures.to_string()}},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 3}}}]}})
    }

    fn job(extra: Value) -> Value {
        let mut spec = json!({"completions": 4, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
            "template": {"spec": {"restartPolicy": "Never"}}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({"spec": spec})
    }

    #[test]
    fn an_index_fails_on_the_failure_past_its_limit_or_a_fail_index_rule() {
        let j = job(json!({}));
        let spec = Spec::read(&j);
        let pods = [failed_pod(0, 0), failed_pod(1, 1), failed_pod(2, 2)];
        assert_eq!(failed_indexes(&spec, Some("3"), &pods).to_string(), "1-3");
        let j = job(json!({"podFailurePolicy": {"rules": [
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}}));
        let spec = Spec::read(&j);
        assert_eq!(failed_indexes(&spec, None, &pods[..1]).to_string(), "0");
    }

    #[test]
    fn outcomes_and_counts_follow_upstream() {
        let j = job(json!({"maxFailedIndexes": 1}));
        let spec = Spec::read(&j);
        let failed = Intervals::parse("0", 4);
        assert_eq!(outcome(&spec, &failed, &Intervals::parse("1,2", 4)), None);
        assert_eq!(
            outcome(&spec, &failed, &Intervals::parse("1-3", 4)).map(|o| o.0),
            Some("FailedIndexes")
        );
        assert_eq!(
            outcome(&spec, &Intervals::parse("0,1", 4), &Intervals::default()).map(|o| o.0),
            Some("MaxFailedIndexesExceeded")
        );
        let now = Instant::now();
        let replaced = Replaced {
            pod: failed_pod(2, 1),
            finished: now,
        };
        assert_eq!(new_failure_counts(&spec, Some(&replaced)), (2, 0));
        assert_eq!(new_failure_counts(&spec, None), (0, 0));
        let config = SimConfig::real_cluster();
        let waiting = HashMap::from([(2, replaced)]);
        assert_eq!(
            ready_indexes(&config, vec![2], &waiting, now + Duration::from_secs(5)),
            Err(Duration::from_secs(15))
        );
        assert_eq!(ready_indexes(&config, vec![1, 2], &waiting, now), Ok(vec![1]));
    }
}
