//! Jobs running to their outcome as batch/v1 Jobs: result and logs, retries then the
//! controller's failure reason, deadlines, indexed jobs within their parallelism, a Job removed
//! by its TTL keeping its history, and logs followed as the pods write them.

use serde_json::json;

use crate::common::cluster::Cluster;
use crate::common::{self, GqlWs};
use crate::support::{JOB_FIELDS, input, job_past_its_deadline, reason_of, status_events};

#[tokio::test]
async fn a_job_runs_as_a_batch_v1_job_with_its_result_and_logs() {
    let Some(cluster) =
        Cluster::emulated("it scripts its pods through EMULATOR_LOG, EMULATOR_TERMINATION_MESSAGE").await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    let id = server
        .submit(input(
            &[
                ("EMULATOR_LOG", "line one\nline two"),
                ("EMULATOR_TERMINATION_MESSAGE", "42"),
            ],
            json!({
                "name": "hello",
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1"}},
                "ttlSecondsAfterFinished": 600,
                "idempotencyKey": "hello-1",
            }),
        ))
        .await;
    let phases: Vec<String> = status_events(&server, &id)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(phases.last().map(String::as_str), Some("SUCCEEDED"), "{phases:?}");
    assert!(phases.contains(&"RUNNING".to_owned()), "{phases:?}");
    let done = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(done["result"], "42", "the termination message: {done}");
    assert_eq!(done["progress"]["succeeded"], 1);
    assert_eq!(done["submitter"], "anonymous");
    assert_eq!(
        reason_of(&done, "Complete").as_deref(),
        Some("CompletionsReached")
    );
    let logs = done["logs"].as_str().unwrap();
    assert!(logs.contains("line one\nline two"), "{logs:?}");

    // What the cluster holds: one Job under a name derived from the id, labelled and annotated.
    let k = cluster.jobs().get(&format!("jobgate-{id}")).await.unwrap();
    let labels = k.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "jobgate");
    assert_eq!(labels["jobgate.io/job-id"], id);
    let annotations = k.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["jobgate.io/submitter"], "anonymous");
    assert_eq!(annotations["jobgate.io/idempotency-key"], "hello-1");
    let spec = k.spec.as_ref().unwrap();
    assert_eq!(spec.ttl_seconds_after_finished, Some(600));
    let container = &spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("busybox:1.36"));
    let requests = container.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["cpu"].0, "250m");
    assert_eq!(
        k.status.as_ref().unwrap().succeeded,
        Some(1),
        "jobgate's outcome is the cluster's"
    );

    // /metrics counts the API requests that did it and each watcher's lists and events.
    let metrics = common::scrape(&server).await;
    let at_least = |series: &str, n: f64| {
        let v = metrics.get(series).copied().unwrap_or(0.0);
        assert!(v >= n, "{series} = {v}, expected at least {n}");
    };
    at_least("jobgate_kube_requests_total{verb=\"create\",code=\"201\"}", 1.0);
    at_least("jobgate_kube_requests_total{verb=\"list\",code=\"200\"}", 2.0);
    at_least("jobgate_kube_requests_total{verb=\"watch\",code=\"200\"}", 2.0);
    at_least(
        "jobgate_job_phase_transitions_total{from=\"RUNNING\",to=\"SUCCEEDED\"}",
        1.0,
    );
    let watchers: Vec<&String> = metrics
        .keys()
        .filter(|k| k.starts_with("jobgate_watcher_relists_total{"))
        .collect();
    assert!(watchers.iter().any(|k| k.contains("jobs in")), "{watchers:?}");
    assert!(watchers.iter().any(|k| k.contains("pods in")), "{watchers:?}");
    assert!(
        metrics
            .keys()
            .any(|k| k.starts_with("jobgate_watcher_seconds_since_last_event{")),
        "{:?}",
        metrics.keys().collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_failing_job_is_retried_then_fails_with_the_controllers_reason() {
    let Some(cluster) = Cluster::emulated("it drives the emulated kubelet, scripts its pods through EMULATOR_EXIT_CODE, EMULATOR_FAIL_ATTEMPTS, EMULATOR_TERMINATION_MESSAGE").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(
            &[
                ("EMULATOR_EXIT_CODE", "3"),
                ("EMULATOR_TERMINATION_MESSAGE", "bad input"),
            ],
            json!({"backoffLimit": 2}),
        ))
        .await;
    let events = status_events(&server, &id).await;
    let last = events.last().unwrap();
    assert_eq!(last.0, "FAILED");
    assert_eq!(last.1.as_deref(), Some("BackoffLimitExceeded"));
    let done = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(done["progress"]["failed"], 3, "backoffLimit 2: three failed pods");
    let message = done["message"].as_str().unwrap();
    assert!(
        message.contains("backoff limit")
            && message.contains("exited with code 3")
            && message.contains("bad input"),
        "the controller's summary and the last pod's cause: {message}"
    );
    assert_eq!(cluster.emu().simulation().pods_created(), 3);

    // A job whose first two runs fail, with room to retry: it succeeds.
    let id = server
        .submit(input(
            &[("EMULATOR_FAIL_ATTEMPTS", "2")],
            json!({"backoffLimit": 3}),
        ))
        .await;
    assert_eq!(status_events(&server, &id).await.last().unwrap().0, "SUCCEEDED");
    let done = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(done["progress"]["failed"], 2);
    assert_eq!(done["progress"]["succeeded"], 1);
}

#[tokio::test]
async fn a_deadline_fails_the_job_with_deadline_exceeded() {
    let Some(cluster) = Cluster::emulated("it scripts its pods through EMULATOR_GATE").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let (_, events) = job_past_its_deadline(&server).await;
    assert_eq!(
        events.last().unwrap(),
        &("FAILED".to_owned(), Some("DeadlineExceeded".to_owned())),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e.0 == "RUNNING"), "{events:?}");
}

#[tokio::test]
async fn an_indexed_job_runs_every_index_within_its_parallelism() {
    let Some(cluster) = Cluster::emulated("it scripts its pods through EMULATOR_TERMINATION_MESSAGE").await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "e",
        "subscription { jobEvents { phase job { progress { active succeeded } } } }",
        json!({}),
    )
    .await;
    server.wait_subscriptions_live(1).await;
    let id = server
        .submit(input(
            &[("EMULATOR_TERMINATION_MESSAGE", "done {index}")],
            json!({"completions": 4, "parallelism": 2}),
        ))
        .await;
    let mut max_active = 0;
    loop {
        let msg = ws.recv().await;
        let e = &msg["payload"]["data"]["jobEvents"];
        max_active = max_active.max(e["job"]["progress"]["active"].as_i64().unwrap());
        if e["phase"] == "SUCCEEDED" {
            assert_eq!(e["job"]["progress"]["succeeded"], 4);
            break;
        }
        assert_ne!(e["phase"], "FAILED", "{msg}");
    }
    assert!(
        (1..=2).contains(&max_active),
        "at most parallelism=2 at once: {max_active}"
    );
    let k = cluster.jobs().get(&format!("jobgate-{id}")).await.unwrap();
    let spec = k.spec.as_ref().unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!(
        k.status.as_ref().unwrap().completed_indexes.as_deref(),
        Some("0-3")
    );
    assert_eq!(
        server.job_with(&id, JOB_FIELDS).await["result"],
        "done 3",
        "the highest index's message"
    );
}

#[tokio::test]
async fn a_job_removed_by_its_ttl_keeps_its_history_result_and_logs() {
    let Some(cluster) =
        Cluster::emulated("it scripts its pods through EMULATOR_LOG, EMULATOR_TERMINATION_MESSAGE").await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(
            &[
                ("EMULATOR_LOG", "computing\nanswer ready"),
                ("EMULATOR_TERMINATION_MESSAGE", "{\"answer\": 42}"),
            ],
            // With 0 the pods may be gone before anyone could read their logs, as on a real
            // cluster; seconds are plenty for jobgate to capture them as each pod ends.
            json!({"ttlSecondsAfterFinished": 3}),
        ))
        .await;
    assert_eq!(status_events(&server, &id).await.last().unwrap().0, "SUCCEEDED");
    let name = format!("jobgate-{id}");
    cluster
        .until("the TTL controller deletes the Job", || async {
            cluster.jobs().get_opt(&name).await.unwrap().is_none()
        })
        .await;
    cluster
        .until("and its pods", || async { cluster.pods_of(&id).await.is_empty() })
        .await;
    let j = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(j["phase"], "SUCCEEDED", "a TTL deletion is not a vanishing");
    assert_eq!(j["result"], "{\"answer\": 42}");
    assert!(
        j["logs"].as_str().unwrap().contains("computing\nanswer ready"),
        "{j}"
    );
}

#[tokio::test]
async fn job_logs_follow_the_pods_as_they_write() {
    let Some(cluster) = Cluster::emulated(
        "it drives the emulated kubelet, scripts its pods through EMULATOR_GATE, EMULATOR_LOG",
    )
    .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(
            &[("EMULATOR_LOG", "alpha\nbeta"), ("EMULATOR_GATE", "logs")],
            json!({}),
        ))
        .await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "l",
        "subscription($id: ID!) { jobLogs(id: $id, follow: true) { text source } }",
        json!({"id": id}),
    )
    .await;
    let first = ws.recv().await;
    let line = &first["payload"]["data"]["jobLogs"];
    assert_eq!(line["text"], "alpha", "{first}");
    assert!(
        line["source"]
            .as_str()
            .unwrap()
            .starts_with(&format!("jobgate-{id}-")),
        "the pod that wrote it: {first}"
    );
    let second = ws.recv().await;
    assert_eq!(second["payload"]["data"]["jobLogs"]["text"], "beta");
    cluster.emu().simulation().open_gate("logs");
    let end = ws.recv().await;
    assert_eq!(end["type"], "complete", "the stream ends with the job: {end}");
    assert_eq!(server.job_with(&id, JOB_FIELDS).await["phase"], "SUCCEEDED");
}
