//! The pod status the kubelet writes, derived from what it remembers about a pod's run: each
//! container's `waiting`/`running`/`terminated` state, the termination message (the message file,
//! or the log tail with `FallbackToLogsOnError`), and the pod conditions with their reasons.
//!
//! Pure rendering: it must not change a run, write the store, or decide when a container starts
//! or stops (the kubelet's timeline does).

use serde_json::{Value, json};

use super::container_runtime::{go_duration, image_id, normalize_image};
use super::{ContainerRun, ContainerState, PodRun};
use crate::controllers::{SimConfig, disruption};
use crate::store::now_timestamp;

/// The real kubelet's limit for one container's termination message.
const MAX_TERMINATION_MESSAGE_BYTES: usize = 4096;
/// `FallbackToLogsOnError` takes at most this many lines / bytes of the log tail.
const FALLBACK_LOG_LINES: usize = 80;
const FALLBACK_LOG_BYTES: usize = 2048;

/// The `terminated` state of a container that exited with `code`.
pub(super) fn terminated(
    c: &ContainerRun,
    index: Option<u64>,
    pod: &str,
    code: i32,
    started_at: &str,
    finished_at: &str,
) -> Value {
    let mut t = json!({
        "exitCode": code,
        "reason": if code == 0 { "Completed" } else { "Error" },
        "startedAt": started_at,
        "finishedAt": finished_at,
    });
    if let Some(id) = &c.container_id {
        t["containerID"] = json!(id);
    }
    if let Some(message) = termination_message(c, index, pod, code) {
        t["message"] = json!(message);
    }
    t
}

/// The `terminated` state of a container the kernel's OOM killer ended: exit code 137 (SIGKILL),
/// reason `OOMKilled`.
pub(super) fn oom_killed(
    c: &ContainerRun,
    index: Option<u64>,
    pod: &str,
    started_at: &str,
    finished_at: &str,
) -> Value {
    let mut t = terminated(c, index, pod, 137, started_at, finished_at);
    t["reason"] = json!("OOMKilled");
    t
}

/// The pod conditions the kubelet writes itself; any other (`DisruptionTarget` set by the
/// Eviction API or the scheduler, readiness gates' types) is kept as it is.
const KUBELET_CONDITIONS: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

/// Puts the conditions of `current` (the pod's stored status) that the kubelet does not own in
/// front of the kubelet's own in `status`, as the kubelet's status manager keeps them. A
/// `DisruptionTarget` the kubelet sets itself (eviction) replaces a stored one.
pub(super) fn keep_foreign_conditions(status: &mut Value, current: &Value) {
    let Some(stored) = current.pointer("/status/conditions").and_then(Value::as_array) else {
        return;
    };
    let Some(own) = status.get_mut("conditions").and_then(Value::as_array_mut) else {
        return;
    };
    let foreign: Vec<Value> = stored
        .iter()
        .filter(|c| {
            let kind = c.get("type").and_then(Value::as_str).unwrap_or_default();
            !KUBELET_CONDITIONS.contains(&kind) && !own.iter().any(|o| o.get("type") == c.get("type"))
        })
        .cloned()
        .collect();
    if !foreign.is_empty() {
        own.splice(0..0, foreign);
    }
}

/// What the kubelet reports for a container that never ran when its pod is stopped.
pub(super) fn unknown_terminated(finished_at: &str) -> Value {
    json!({
        "exitCode": 137,
        "reason": "ContainerStatusUnknown",
        "message": "The container could not be located when the pod was terminated",
        "startedAt": null,
        "finishedAt": finished_at,
    })
}

/// `terminated.message`: the termination message file (here `EMULATOR_TERMINATION_MESSAGE`),
/// else, with `FallbackToLogsOnError` and a non-zero exit, the tail of the log.
fn termination_message(c: &ContainerRun, index: Option<u64>, pod: &str, code: i32) -> Option<String> {
    let written = c
        .behaviour
        .as_ref()
        .ok()
        .and_then(|b| b.termination_message_for(index, pod));
    if let Some(message) = written.filter(|m| !m.is_empty()) {
        return Some(truncate_front(&message, MAX_TERMINATION_MESSAGE_BYTES).to_owned());
    }
    if c.fallback_to_logs && code != 0 && !c.log.is_empty() {
        let start = c.log.len().saturating_sub(FALLBACK_LOG_LINES);
        let mut tail = String::new();
        for line in &c.log[start..] {
            tail.push_str(line);
            tail.push('\n');
        }
        return Some(truncate_back(&tail, FALLBACK_LOG_BYTES).to_owned());
    }
    None
}

/// The first `max` bytes of `s`, cut at a character boundary.
fn truncate_front(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The last `max` bytes of `s`, cut at a character boundary.
fn truncate_back(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

fn condition(kind: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> Value {
    let mut c = json!({"type": kind, "status": status, "lastProbeTime": null});
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    if let Some(message) = message {
        c["message"] = json!(message);
    }
    c
}

/// The whole pod status for the run's current state. Conditions keep their previous
/// `lastTransitionTime` while their status does not change.
pub(super) fn build_status(run: &PodRun, pod: &Value, config: &SimConfig) -> Value {
    let phase = run.phase();
    let unready: Vec<&str> = run
        .containers
        .iter()
        .filter(|c| !matches!(c.state, ContainerState::Running { .. }))
        .map(|c| c.name.as_str())
        .collect();
    let unready_message = format!("containers with unready status: [{}]", unready.join(" "));
    let (ready, ready_reason, ready_message) = match phase {
        "Succeeded" => ("False", Some("PodCompleted"), None),
        "Failed" => ("False", Some("PodFailed"), None),
        _ if unready.is_empty() => ("True", None, None),
        _ => (
            "False",
            Some("ContainersNotReady"),
            Some(unready_message.as_str()),
        ),
    };
    let sandbox_ready = run.started && !run.is_terminal();
    let mut conditions = Vec::new();
    if let Some(message) = &run.evicted {
        conditions.push(condition(
            disruption::DISRUPTION_TARGET,
            "True",
            Some(disruption::TERMINATION_BY_KUBELET),
            Some(message),
        ));
    }
    conditions.extend([
        condition(
            "PodReadyToStartContainers",
            if sandbox_ready { "True" } else { "False" },
            None,
            None,
        ),
        condition(
            "Initialized",
            "True",
            (phase == "Succeeded").then_some("PodCompleted"),
            None,
        ),
        condition("Ready", ready, ready_reason, ready_message),
        condition("ContainersReady", ready, ready_reason, ready_message),
        condition("PodScheduled", "True", None, None),
    ]);
    let previous = pod.pointer("/status/conditions").and_then(Value::as_array);
    let now = now_timestamp();
    for c in &mut conditions {
        let same = previous.and_then(|prev| {
            prev.iter()
                .find(|p| p.get("type") == c.get("type") && p.get("status") == c.get("status"))
        });
        c["lastTransitionTime"] = same
            .and_then(|p| p.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
    }
    let container_statuses: Vec<Value> = run
        .containers
        .iter()
        .map(|c| {
            let running = matches!(c.state, ContainerState::Running { .. });
            let pulled = c.container_id.is_some();
            let image = if pulled { normalize_image(&c.image) } else { c.image.clone() };
            let state = match &c.state {
                ContainerState::Creating => json!({"waiting": {"reason": "ContainerCreating"}}),
                ContainerState::PullError => json!({"waiting": {
                    "reason": "ErrImagePull",
                    "message": format!("failed to pull and unpack image \"{}\": emulated pull error", normalize_image(&c.image)),
                }}),
                ContainerState::ConfigError(message) => {
                    json!({"waiting": {"reason": "CreateContainerConfigError", "message": message}})
                }
                ContainerState::Running { started_at, .. } => json!({"running": {"startedAt": started_at}}),
                ContainerState::BackOff { delay, .. } => json!({"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": format!(
                        "back-off {} restarting failed container={} pod={}_{}({})",
                        go_duration(*delay), c.name, run.name, run.namespace, run.uid
                    ),
                }}),
                ContainerState::Terminated(t) => json!({"terminated": t}),
            };
            let mut s = json!({
                "name": c.name,
                "image": image,
                "imageID": if pulled { image_id(&c.image) } else { String::new() },
                "ready": running,
                "started": running,
                "restartCount": c.restart_count,
                "lastState": c.last_state,
                "state": state,
            });
            if let Some(id) = &c.container_id {
                s["containerID"] = json!(id);
            }
            s
        })
        .collect();
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": config.host_ip,
        "hostIPs": [{"ip": config.host_ip}],
        "startTime": run.start_time,
        "containerStatuses": container_statuses,
        "qosClass": run.qos_class,
    });
    if let Some(message) = &run.evicted {
        status["reason"] = json!("Evicted");
        status["message"] = json!(message);
    }
    keep_foreign_conditions(&mut status, pod);
    if run.started {
        status["podIP"] = json!(run.pod_ip);
        status["podIPs"] = json!([{"ip": run.pod_ip}]);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_front("héllo", 2), "h");
        assert_eq!(truncate_back("héllo", 4), "llo");
        assert_eq!(truncate_back("abc", 10), "abc");
    }
}
