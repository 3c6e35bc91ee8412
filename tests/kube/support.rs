//! What the Kubernetes tests share: a job input for the emulated kubelet, the fields read of
//! a job, a job's phase history (with reasons) once it has finished, a job ended by its
//! deadline, every job's events until some are terminal, and the check that no job's phase
//! moves backward.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

use crate::common::{self, GqlWs, Server};

/// A job input for the emulated kubelet: `image` is required on Kubernetes.
pub(crate) fn input(env: &[(&str, &str)], extra: Value) -> Value {
    let mut input = json!({
        "image": "busybox:1.36",
        "command": ["echo", "hello"],
        "env": env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
    });
    if let Value::Object(extra) = extra {
        input.as_object_mut().unwrap().extend(extra);
    }
    input
}

/// What the tests read of a job: `server.job_with(id, JOB_FIELDS)`.
pub(crate) const JOB_FIELDS: &str = "id name phase message result startedAt finishedAt submitter \
    progress { succeeded failed active ready total } conditions { type status reason message } \
    logs(tailLines: 50)";

/// The job's phase changes, (phase, reason), once it has finished: followed through
/// `jobStatus` until it completes, then read from the recorded history, which holds the
/// phases a subscription that started late would not see (a fast job may be done before
/// the subscription starts).
pub(crate) async fn status_events(server: &Server, id: &str) -> Vec<(String, Option<String>)> {
    let last = server.wait_terminal(id).await.pop();
    let data = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { events(last: 1000) { phase previousPhase reason } } }",
            json!({"id": id}),
        )
        .await;
    let history: Vec<(String, Option<String>)> = data["job"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["phase"] != e["previousPhase"])
        .map(|e| {
            (
                e["phase"].as_str().unwrap().to_owned(),
                e["reason"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        history.last().map(|e| &e.0),
        last.as_ref(),
        "jobStatus ended on the last recorded phase"
    );
    history
}

/// Submits a job whose pod runs until the job's deadline (1 s) ends it, and returns its id
/// and its phase history (see [`status_events`]) once it has failed.
pub(crate) async fn job_past_its_deadline(server: &Server) -> (String, Vec<(String, Option<String>)>) {
    let id = server
        .submit(input(
            &[("EMULATOR_GATE", "never-opened")],
            json!({"activeDeadlineSeconds": 1}),
        ))
        .await;
    let events = status_events(server, &id).await;
    (id, events)
}

/// The reason of the job's condition `type_`, if that condition holds.
pub(crate) fn reason_of(job: &Value, type_: &str) -> Option<String> {
    common::condition(job, type_)
        .filter(|c| c["status"] == "True")
        .and_then(|c| c["reason"].as_str().map(str::to_owned))
}

/// All events of every job from the beginning, until each of `ids` is terminal.
pub(crate) async fn history_until_all_terminal(
    server: &Server,
    ids: &HashSet<String>,
) -> Vec<(String, String)> {
    let mut ws = GqlWs::connect(server).await;
    ws.subscribe(
        "all",
        "subscription { jobEvents(after: \"0\") { phase job { id } } }",
        json!({}),
    )
    .await;
    let mut events = Vec::new();
    let mut done = HashSet::new();
    while done.len() < ids.len() {
        let msg = ws.recv().await;
        let e = &msg["payload"]["data"]["jobEvents"];
        assert!(e.is_object(), "{msg}");
        let id = e["job"]["id"].as_str().unwrap().to_owned();
        let phase = e["phase"].as_str().unwrap().to_owned();
        if matches!(phase.as_str(), "SUCCEEDED" | "FAILED" | "CANCELLED") && ids.contains(&id) {
            done.insert(id.clone());
        }
        events.push((id, phase));
    }
    events
}

fn rank(phase: &str) -> u8 {
    match phase {
        "PENDING" => 0,
        "RUNNING" => 1,
        _ => 2,
    }
}

/// No job's phase ever moves backward, and none changes after a terminal phase.
pub(crate) fn assert_forward_only(events: &[(String, String)]) {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for (id, phase) in events {
        if let Some(prev) = last.get(id.as_str()) {
            assert!(
                rank(phase) >= rank(prev),
                "job {id} moved back from {prev} to {phase}"
            );
            assert!(
                rank(prev) < 2 || prev == phase,
                "job {id} changed after its terminal phase {prev}: {phase}"
            );
        }
        last.insert(id, phase);
    }
}
