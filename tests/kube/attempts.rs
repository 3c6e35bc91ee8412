//! A batch/v1 Job's attempts as jobgate shows them: each pod that ran is an attempt with its
//! completion index, number, times, exit code, cause and pod, its own log lines (the pod's
//! archived output), and each end an event of the job's history.

use serde_json::{Value, json};

use crate::common::cluster::Cluster;
use crate::support::{input, status_events};

const ATTEMPTS: &str = "phase attempts { name index number state startedAt finishedAt exitCode signal \
    cause reason message pod processId logLines(first: 100) { edges { node { text source } } } } \
    events(last: 100) { phase reason message }";

#[tokio::test]
async fn each_pod_of_a_retried_job_is_an_attempt_with_its_own_log() {
    let Some(cluster) = Cluster::emulated(
        "it scripts its pods through EMULATOR_FAIL_ATTEMPTS, EMULATOR_FAIL_EXIT_CODE, EMULATOR_LOG, EMULATOR_TERMINATION_MESSAGE",
    )
    .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(
            &[
                ("EMULATOR_FAIL_ATTEMPTS", "2"),
                ("EMULATOR_FAIL_EXIT_CODE", "5"),
                ("EMULATOR_LOG", "working\ndone"),
                ("EMULATOR_TERMINATION_MESSAGE", "from {pod}"),
            ],
            json!({"backoffLimit": 3}),
        ))
        .await;
    assert_eq!(status_events(&server, &id).await.last().unwrap().0, "SUCCEEDED");
    // The archive follows each pod's log to its end, after the job's outcome.
    let job = server
        .job_until(&id, ATTEMPTS, "every attempt's log is archived", |job| {
            job["attempts"].as_array().is_some_and(|a| {
                a.len() == 3
                    && a.iter()
                        .all(|a| a["logLines"]["edges"].as_array().unwrap().len() == 2)
            })
        })
        .await;
    let attempts = job["attempts"].as_array().unwrap();
    let mut pods = Vec::new();
    for (n, attempt) in attempts.iter().enumerate() {
        let pod = attempt["pod"].as_str().expect("its pod").to_owned();
        assert_eq!(attempt["name"], pod.as_str());
        assert!(pod.starts_with(&format!("jobgate-{id}")), "{attempt}");
        assert_eq!(attempt["index"], 0);
        assert_eq!(attempt["number"], n as i64 + 1, "{attempt}");
        assert!(
            attempt["startedAt"].is_string() && attempt["finishedAt"].is_string(),
            "{attempt}"
        );
        assert!(attempt["processId"].is_null());
        let lines: Vec<(&Value, &Value)> = attempt["logLines"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (&e["node"]["text"], &e["node"]["source"]))
            .collect();
        assert_eq!(
            lines,
            [(&json!("working"), &json!(pod)), (&json!("done"), &json!(pod))],
            "only its own pod's lines: {attempt}"
        );
        assert_eq!(attempt["message"], format!("from {pod}"));
        pods.push(pod);
    }
    let outcome = |a: &Value| {
        (
            a["state"].as_str().unwrap().to_owned(),
            a["exitCode"].as_i64(),
            a["cause"].as_str().map(str::to_owned),
        )
    };
    assert_eq!(
        attempts.iter().map(outcome).collect::<Vec<_>>(),
        [
            ("FAILED".to_owned(), Some(5), Some("ERROR".to_owned())),
            ("FAILED".to_owned(), Some(5), Some("ERROR".to_owned())),
            ("SUCCEEDED".to_owned(), Some(0), None),
        ]
    );
    // Each pod's end is an event of the job's history, naming it.
    let events = job["events"].as_array().unwrap();
    for (pod, reason) in pods
        .iter()
        .zip(["AttemptFailed", "AttemptFailed", "AttemptSucceeded"])
    {
        assert!(
            events
                .iter()
                .any(|e| e["reason"] == reason
                    && e["message"].as_str().is_some_and(|m| m.contains(pod.as_str()))),
            "no {reason} event for {pod}: {events:?}"
        );
    }
}

#[tokio::test]
async fn a_pod_past_the_deadline_is_an_attempt_ended_by_it() {
    let Some(cluster) = Cluster::emulated("it scripts its pods through EMULATOR_GATE").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(
            &[("EMULATOR_GATE", "never-opened")],
            json!({"activeDeadlineSeconds": 1}),
        ))
        .await;
    assert_eq!(status_events(&server, &id).await.last().unwrap().0, "FAILED");
    let job = server
        .job_until(&id, ATTEMPTS, "the pod's end is an attempt's", |job| {
            job["attempts"][0]["state"] == "FAILED"
        })
        .await;
    let attempt = &job["attempts"][0];
    assert_eq!(attempt["cause"], "DEADLINE_EXCEEDED", "{job}");
    assert!(attempt["pod"].is_string());
}
