//! Server-side printing: `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` (what kubectl's
//! human-readable `get` asks for) answered with a `meta.k8s.io/v1` `Table`, with the real
//! server's columns for Jobs (Name, Status, Completions, Duration, Age), Pods (Name, Ready,
//! Status, Restarts, Age), Namespaces (Name, Status, Age), Events (Last Seen, Type, Reason,
//! Object, Message), Leases (Name, Holder, Age) and Name/Age for the rest (as for CRDs without
//! printer columns).
//!
//! Row objects follow `includeObject` (`Metadata` by default, `Object`, `None`). Pure functions of
//! the objects and the current time; must not read the store.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::kinds;
use crate::store::ResourceType;

/// Whether an `Accept` header asks for a Table.
pub fn wanted(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn column(name: &str, kind: &str, format: &str, description: &str) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": description, "priority": 0})
}

fn columns(rt: &ResourceType) -> Vec<Value> {
    let name = column(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace.",
    );
    let age = column(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    match kinds::storage_key(rt).as_str() {
        "jobs.batch" => vec![
            name,
            column("Status", "string", "", "Status of the job."),
            column(
                "Completions",
                "string",
                "",
                "The desired number of successfully finished pods the job should be run with.",
            ),
            column("Duration", "string", "", "Time required to complete the job."),
            age,
        ],
        "pods" => vec![
            name,
            column(
                "Ready",
                "string",
                "",
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            column(
                "Status",
                "string",
                "",
                "The aggregate status of the containers in this pod.",
            ),
            column(
                "Restarts",
                "string",
                "",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            age,
        ],
        "namespaces" => vec![
            name,
            column("Status", "string", "", "The status of the namespace"),
            age,
        ],
        "leases.coordination.k8s.io" => vec![
            name,
            column(
                "Holder",
                "string",
                "",
                "holderIdentity contains the identity of the holder of a current lease.",
            ),
            age,
        ],
        "events" => vec![
            column("Last Seen", "string", "", "Time when last event occurred."),
            column("Type", "string", "", "Type of the event."),
            column("Reason", "string", "", "Reason of the event."),
            column("Object", "string", "", "The object this event is about."),
            column("Message", "string", "", "Message of the event."),
        ],
        _ => vec![name, age],
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn time_at(v: &Value, pointer: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(str_at(v, pointer))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The real printers' short durations (`k8s.io/apimachinery/pkg/util/duration.HumanDuration`).
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 && s % 60 != 0 => format!("{m}m{}s", s % 60),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 && m % 60 != 0 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 && h % 24 != 0 => format!("{d}d{}h", h % 24),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y{}d", d / 365, d % 365),
    }
}

fn age(object: &Value, pointer: &str, now: DateTime<Utc>) -> String {
    time_at(object, pointer).map_or_else(
        || "<unknown>".to_owned(),
        |t| human_duration((now - t).num_seconds()),
    )
}

fn has_condition(job: &Value, kind: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

fn job_cells(job: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let status = if job
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        "Terminating"
    } else {
        [
            "Complete",
            "Failed",
            "FailureTarget",
            "SuccessCriteriaMet",
            "Suspended",
        ]
        .into_iter()
        .find(|c| has_condition(job, c))
        .unwrap_or("Running")
    };
    let succeeded = job
        .pointer("/status/succeeded")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let completions = match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = job
                .pointer("/spec/parallelism")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            if parallelism > 1 {
                format!("{succeeded}/1 of {parallelism}")
            } else {
                format!("{succeeded}/1")
            }
        }
    };
    let duration = match (
        time_at(job, "/status/startTime"),
        time_at(job, "/status/completionTime"),
    ) {
        (Some(start), Some(end)) => human_duration((end - start).num_seconds()),
        (Some(start), None) => human_duration((now - start).num_seconds()),
        _ => String::new(),
    };
    vec![
        json!(str_at(job, "/metadata/name")),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(job, "/metadata/creationTimestamp", now)),
    ]
}

fn pod_cells(pod: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let statuses: Vec<&Value> = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let ready = statuses.iter().filter(|c| c["ready"] == true).count();
    let restarts: i64 = statuses.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
    let mut status = str_at(pod, "/status/reason").to_owned();
    if status.is_empty() {
        status = str_at(pod, "/status/phase").to_owned();
    }
    for c in &statuses {
        let waiting = str_at(c, "/state/waiting/reason");
        let terminated = str_at(c, "/state/terminated/reason");
        if !waiting.is_empty() {
            status = waiting.to_owned();
        } else if !terminated.is_empty() {
            status = terminated.to_owned();
        }
    }
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        status = "Terminating".to_owned();
    }
    vec![
        json!(str_at(pod, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
        json!(age(pod, "/metadata/creationTimestamp", now)),
    ]
}

fn event_cells(event: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let last = ["/lastTimestamp", "/eventTime", "/metadata/creationTimestamp"]
        .into_iter()
        .find(|p| time_at(event, p).is_some())
        .map_or_else(|| "<unknown>".to_owned(), |p| age(event, p, now));
    let object = format!(
        "{}/{}",
        str_at(event, "/involvedObject/kind").to_ascii_lowercase(),
        str_at(event, "/involvedObject/name")
    );
    let message = if event.get("message").is_some() {
        str_at(event, "/message")
    } else {
        str_at(event, "/note")
    };
    vec![
        json!(last),
        json!(str_at(event, "/type")),
        json!(str_at(event, "/reason")),
        json!(object),
        json!(message),
    ]
}

/// One row for a stored object (storage shape); `wire` is the object as the client sees it.
fn row(rt: &ResourceType, stored: &Value, wire: &Value, include: &str, now: DateTime<Utc>) -> Value {
    let cells = match kinds::storage_key(rt).as_str() {
        "jobs.batch" => job_cells(stored, now),
        "pods" => pod_cells(stored, now),
        "namespaces" => vec![
            json!(str_at(stored, "/metadata/name")),
            json!(str_at(stored, "/status/phase")),
            json!(age(stored, "/metadata/creationTimestamp", now)),
        ],
        "events" => event_cells(stored, now),
        "leases.coordination.k8s.io" => vec![
            json!(str_at(stored, "/metadata/name")),
            json!(str_at(stored, "/spec/holderIdentity")),
            json!(age(stored, "/metadata/creationTimestamp", now)),
        ],
        _ => vec![
            json!(str_at(stored, "/metadata/name")),
            json!(age(stored, "/metadata/creationTimestamp", now)),
        ],
    };
    let mut row = json!({"cells": cells});
    match include {
        "None" => {}
        "Object" => row["object"] = wire.clone(),
        _ => row["object"] = kinds::partial_metadata(wire),
    }
    row
}

/// A Table of stored objects. `metadata` is the list metadata (resourceVersion, continue).
pub fn table(rt: &ResourceType, stored: &[Value], include: &str, metadata: Value) -> Value {
    let now = Utc::now();
    let rows: Vec<Value> = stored
        .iter()
        .map(|o| row(rt, o, &kinds::to_wire(rt, o), include, now))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(rt),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (7200, "120m"),
            (3 * 3600 + 60, "3h1m"),
            (9 * 3600, "9h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn job_and_pod_rows() {
        let jobs = ResourceType::builtins()
            .into_iter()
            .find(|r| r.key() == "jobs.batch")
            .expect("jobs");
        let job = json!({"metadata": {"name": "pi", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"completions": 2},
            "status": {"succeeded": 2, "startTime": "2025-01-01T00:00:00Z", "completionTime": "2025-01-01T00:00:07Z",
                       "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}});
        let t = table(&jobs, &[job], "Metadata", json!({"resourceVersion": "5"}));
        assert_eq!(t["rows"][0]["cells"][1], "Complete");
        assert_eq!(t["rows"][0]["cells"][2], "2/2");
        assert_eq!(t["rows"][0]["cells"][3], "7s");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["columnDefinitions"].as_array().map(Vec::len), Some(5));

        let pods = ResourceType::builtins()
            .into_iter()
            .find(|r| r.key() == "pods")
            .expect("pods");
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"ready": false, "restartCount": 1, "state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        let t = table(&pods, &[pod], "None", json!({}));
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["p", "0/1", "ContainerCreating", "1", "<unknown>"])
        );
        assert!(t["rows"][0].get("object").is_none());
        assert!(wanted(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wanted("application/json"));
    }
}
