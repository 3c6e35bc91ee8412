//! `spec.podFailurePolicy`: which rule a failed pod matches, and what that means for the Job
//! (`FailJob` with the real message, `Ignore` = not counted, `Count` = counted as usual). Rules are
//! read from the Job's JSON on each use; a rule that does not parse matches nothing.
//! `FailIndex` counts the failure like `Count` and fails the pod's index at once (`per_index`).

use serde_json::Value;

use crate::controllers::objects::{self, str_at};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    FailJob,
    Ignore,
    Count,
    FailIndex,
}

/// The outcome of matching one failed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Match {
    /// `Some(message)` for a `FailJob` rule.
    pub fail_job: Option<String>,
    /// Whether the pod counts towards `failed` (false for `Ignore`).
    pub count: bool,
    pub action: Option<Action>,
}

const NO_MATCH: Match = Match {
    fail_job: None,
    count: true,
    action: None,
};

/// Matches `pod` against the Job's `podFailurePolicy` (`policy` = `spec.podFailurePolicy`).
pub(crate) fn match_pod(policy: Option<&Value>, pod: &Value) -> Match {
    let Some(rules) = policy.and_then(|p| p.get("rules")).and_then(Value::as_array) else {
        return NO_MATCH;
    };
    for (i, rule) in rules.iter().enumerate() {
        let action = match str_at(rule, "/action") {
            Some("FailJob") => Action::FailJob,
            Some("Ignore") => Action::Ignore,
            Some("Count") => Action::Count,
            Some("FailIndex") => Action::FailIndex,
            _ => continue,
        };
        let subject = if let Some(req) = rule.get("onExitCodes").filter(|v| !v.is_null()) {
            match matching_container(pod, req) {
                Some((container, code)) => format!(
                    "Container {container} for pod {} failed with exit code {code} matching {} rule at index {i}",
                    objects::display(pod),
                    action_name(action)
                ),
                None => continue,
            }
        } else if let Some(reqs) = rule.get("onPodConditions").and_then(Value::as_array) {
            match matching_condition(pod, reqs) {
                Some(kind) => format!(
                    "Pod {} has condition {kind} matching {} rule at index {i}",
                    objects::display(pod),
                    action_name(action)
                ),
                None => continue,
            }
        } else {
            continue;
        };
        return match action {
            Action::FailJob => Match {
                fail_job: Some(subject),
                count: true,
                action: Some(action),
            },
            Action::Ignore => Match {
                fail_job: None,
                count: false,
                action: Some(action),
            },
            Action::Count | Action::FailIndex => Match {
                fail_job: None,
                count: true,
                action: Some(action),
            },
        };
    }
    NO_MATCH
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::FailJob => "FailJob",
        Action::Ignore => "Ignore",
        Action::Count => "Count",
        Action::FailIndex => "FailIndex",
    }
}

/// The first terminated container (then init container) with a non-zero exit code that
/// satisfies the `onExitCodes` requirement.
fn matching_container(pod: &Value, req: &Value) -> Option<(String, i64)> {
    let name = str_at(req, "/containerName");
    let operator = str_at(req, "/operator")?;
    let values: Vec<i64> = req
        .get("values")?
        .as_array()?
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    for list in ["/status/containerStatuses", "/status/initContainerStatuses"] {
        for status in pod
            .pointer(list)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let Some(code) = status
                .pointer("/state/terminated/exitCode")
                .and_then(Value::as_i64)
            else {
                continue;
            };
            let container = str_at(status, "/name").unwrap_or_default();
            if code == 0 || name.is_some_and(|n| n != container) {
                continue;
            }
            let matched = match operator {
                "In" => values.contains(&code),
                "NotIn" => !values.contains(&code),
                _ => false,
            };
            if matched {
                return Some((container.to_owned(), code));
            }
        }
    }
    None
}

/// The first of the pod's conditions (in the pod's order) that one of the patterns matches by
/// type and status.
fn matching_condition(pod: &Value, reqs: &[Value]) -> Option<String> {
    let conditions = pod.pointer("/status/conditions").and_then(Value::as_array)?;
    conditions.iter().find_map(|c| {
        let kind = str_at(c, "/type")?;
        let status = str_at(c, "/status");
        reqs.iter()
            .any(|req| {
                str_at(req, "/type") == Some(kind) && status == Some(str_at(req, "/status").unwrap_or("True"))
            })
            .then(|| kind.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn failed_pod(code: i64) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Failed", "containerStatuses": [
            {"name": "main", "state": {"terminated": {"exitCode": code}}}]}})
    }

    #[test]
    fn fail_job_ignore_and_count() {
        let policy = json!({"rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]});
        let m = match_pod(Some(&policy), &failed_pod(42));
        assert_eq!(
            m.fail_job.as_deref(),
            Some("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1")
        );
        assert!(!match_pod(Some(&policy), &failed_pod(3)).count);
        assert_eq!(match_pod(Some(&policy), &failed_pod(1)), NO_MATCH);
        assert_eq!(match_pod(None, &failed_pod(42)), NO_MATCH);
        let not_in =
            json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}]});
        assert!(match_pod(Some(&not_in), &failed_pod(2)).fail_job.is_some());
        assert!(match_pod(Some(&not_in), &failed_pod(1)).fail_job.is_none());
    }
}
