//! The simulation driven through the store alone (no HTTP): each test writes objects the way the
//! API layer stores them and watches what the controllers make of them.
//!
//! The fixtures live here; the tests, one module per controller: `job_controller` (pods, counting,
//! back-off, deadlines, suspension, failure policies, many Jobs at once), `kubelet` (gates,
//! termination messages, pods that cannot start), `cleanup` (TTL, the garbage collector),
//! `failure_causes` (OOM kills, evictions, preemption and the failure policies that match them),
//! `index_limits` (`backoffLimitPerIndex`, `maxFailedIndexes`, `FailIndex`).

mod cleanup;
mod failure_causes;
mod index_limits;
mod job_controller;
mod kubelet;

use std::time::Duration;

use serde_json::{Value, json};

use super::{SimConfig, Simulation, start};
use crate::store::{ChangeKind, Store};

const WAIT: Duration = Duration::from_secs(20);

/// A Job as the API server stores it after defaulting (§6.2): selector, the four template labels,
/// `status: {}`. `extra` is merged into `spec`, `env` goes into the container.
fn job(name: &str, extra: Value, env: &[(&str, &str)]) -> Value {
    let uid = uuid::Uuid::new_v4().to_string();
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
        "controller-uid": uid, "job-name": name,
    });
    let env: Vec<Value> = env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    let mut spec = json!({
        "parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
        "suspend": false, "podReplacementPolicy": "TerminatingOrFailed", "manualSelector": false,
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
        "template": {"metadata": {"labels": labels}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["echo", "hello", name],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "env": env}],
        }},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if v.is_null() {
                spec.remove(k);
            } else {
                spec.insert(k.clone(), v.clone());
            }
        }
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "uid": uid, "labels": labels}, "spec": spec, "status": {}})
}

fn sim(store: &Store) -> std::sync::Arc<Simulation> {
    start(store.clone(), SimConfig::default())
}

/// Waits until `done` holds for the Job (checked after every change), returning every state the
/// Job went through, in order.
async fn follow_job(store: &Store, name: &str, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let (_, mut rx) = store.watch(None).expect("watch");
    let mut seen = Vec::new();
    let check = |seen: &mut Vec<Value>| -> bool {
        match store.get("jobs.batch", Some("default"), name) {
            Some(j) => {
                let finished = done(&j);
                if seen.last() != Some(&j) {
                    seen.push(j);
                }
                finished
            }
            None => false,
        }
    };
    if check(&mut seen) {
        return seen;
    }
    let result = tokio::time::timeout(WAIT, async {
        loop {
            match rx.recv().await {
                Ok(change) => {
                    if change.resource == "jobs.batch" && change.object["metadata"]["name"] == name {
                        if seen.last() != Some(&*change.object) {
                            seen.push((*change.object).clone());
                        }
                        if change.kind != ChangeKind::Deleted && done(&change.object) {
                            return;
                        }
                    }
                }
                Err(e) => panic!("change stream: {e}"),
            }
        }
    })
    .await;
    if result.is_err() {
        panic!(
            "job {name} never reached the expected state; last: {:#}",
            seen.last().cloned().unwrap_or_default()
        );
    }
    seen
}

/// Waits until `done` holds for the store.
async fn until(store: &Store, what: &str, done: impl Fn(&Store) -> bool) {
    let (_, mut rx) = store.watch(None).expect("watch");
    if done(store) {
        return;
    }
    let ok = tokio::time::timeout(WAIT, async {
        loop {
            let _ = rx.recv().await;
            if done(store) {
                return;
            }
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out waiting for {what}");
}

fn condition_types(job: &Value) -> Vec<String> {
    job["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| c["status"] == "True")
                .map(|c| c["type"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn has_condition(job: &Value, kind: &str) -> bool {
    condition_types(job).iter().any(|c| c == kind)
}

fn finished(job: &Value) -> bool {
    has_condition(job, "Complete") || has_condition(job, "Failed")
}

fn pods_of(store: &Store, job: &str) -> Vec<Value> {
    store
        .list("pods", Some("default"), &|p| {
            p["metadata"]["labels"]["job-name"] == job
        })
        .0
}

fn events_for(store: &Store, name: &str) -> Vec<(String, String)> {
    let (events, _) = store.list("events", Some("default"), &|e| {
        e["involvedObject"]["name"] == name
    });
    events
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_owned(),
                e["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}
