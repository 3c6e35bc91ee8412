//! `batch/v1` JobStatus as the Job controller writes it, with the real server's omission rules:
//! `active`, `succeeded`, `failed` omitted when 0; `ready` and `terminating` are pointers (shown
//! as 0); `uncountedTerminatedPods` is `{}` when empty; fields this controller does not know are
//! kept as they are.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<i64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub completed_indexes: String,
    /// Set (`""` while none) exactly when the Job has `backoffLimitPerIndex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_indexes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncounted_terminated_pods: Option<Uncounted>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Uncounted {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub succeeded: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub last_probe_time: Option<String>,
    #[serde(default)]
    pub last_transition_time: Option<String>,
}

impl Condition {
    pub(crate) fn new(kind: &str, status: &str, reason: &str, message: &str, now: &str) -> Condition {
        Condition {
            kind: kind.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_probe_time: Some(now.to_owned()),
            last_transition_time: Some(now.to_owned()),
        }
    }

    pub(crate) fn is_true(&self) -> bool {
        self.status == "True"
    }
}

pub(crate) const COMPLETE: &str = "Complete";
pub(crate) const FAILED: &str = "Failed";
pub(crate) const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
pub(crate) const FAILURE_TARGET: &str = "FailureTarget";
pub(crate) const SUSPENDED: &str = "Suspended";

impl JobStatus {
    pub(crate) fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    pub(crate) fn is_true(&self, kind: &str) -> bool {
        self.condition(kind).is_some_and(Condition::is_true)
    }

    /// `Complete` or `Failed` is True: the Job is done and nothing may change it any more.
    pub(crate) fn is_finished(&self) -> bool {
        self.is_true(COMPLETE) || self.is_true(FAILED)
    }

    /// Sets a condition the way `ensureJobConditionStatus` does: replaces it when its status,
    /// reason or message differ, appends it when absent unless it would be `False`. Returns
    /// whether anything changed.
    pub(crate) fn ensure_condition(
        &mut self,
        kind: &str,
        status: &str,
        reason: &str,
        message: &str,
        now: &str,
    ) -> bool {
        if let Some(c) = self.conditions.iter_mut().find(|c| c.kind == kind) {
            if c.status != status || c.reason != reason || c.message != message {
                *c = Condition::new(kind, status, reason, message, now);
                return true;
            }
            return false;
        }
        if status != "False" {
            self.conditions
                .push(Condition::new(kind, status, reason, message, now));
            return true;
        }
        false
    }

    pub(crate) fn uncounted(&mut self) -> &mut Uncounted {
        self.uncounted_terminated_pods
            .get_or_insert_with(Uncounted::default)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn round_trips_with_the_real_omission_rules() {
        let stored = json!({"active": 1, "ready": 0, "startTime": "2026-04-26T18:35:42Z", "succeeded": 1,
            "terminating": 0, "uncountedTerminatedPods": {}, "somethingNew": {"x": 1}});
        let status: JobStatus = serde_json::from_value(stored.clone()).expect("parse");
        assert_eq!(status.active, 1);
        assert_eq!(serde_json::to_value(&status).expect("serialize"), stored);
        let empty: JobStatus = serde_json::from_value(json!({})).expect("parse");
        assert_eq!(serde_json::to_value(&empty).expect("serialize"), json!({}));
    }

    #[test]
    fn ensure_condition_follows_the_real_rules() {
        let mut s = JobStatus::default();
        assert!(!s.ensure_condition(SUSPENDED, "False", "JobResumed", "Job resumed", "t0"));
        assert!(s.ensure_condition(SUSPENDED, "True", "JobSuspended", "Job suspended", "t1"));
        assert!(!s.ensure_condition(SUSPENDED, "True", "JobSuspended", "Job suspended", "t2"));
        assert!(s.ensure_condition(SUSPENDED, "False", "JobResumed", "Job resumed", "t3"));
        let c = s.condition(SUSPENDED).expect("kept");
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.as_deref()),
            ("False", Some("t3"))
        );
    }
}
