//! The Kubernetes executor end to end: the real jobgate binary, driven over GraphQL, runs jobs
//! as batch/v1 Jobs on the Kubernetes API emulator (tests/kube-emulator), which kube-rs talks
//! to over real HTTP. Pods are scripted per job through `EMULATOR_*` variables in `env` (see
//! tests/kube-emulator/README.md); the tests inspect the cluster through kube-rs as a user of
//! kubectl would.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::cluster::Cluster;
use common::{GqlWs, Polling, Server};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

/// A job input for the emulated kubelet: `image` is required on Kubernetes.
fn input(env: &[(&str, &str)], extra: Value) -> Value {
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
const JOB_FIELDS: &str = "id name phase message result startedAt finishedAt submitter \
    progress { succeeded failed active ready total } conditions { type status reason message } \
    logs(tailLines: 50)";

/// The job's phase changes, (phase, reason), once it has finished: followed through
/// `jobStatus` until it completes, then read from the recorded history, which holds the
/// phases a subscription that started late would not see (a fast job may be done before
/// the subscription starts).
async fn status_events(server: &Server, id: &str) -> Vec<(String, Option<String>)> {
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

/// The reason of the job's condition `type_`, if that condition holds.
fn reason_of(job: &Value, type_: &str) -> Option<String> {
    common::condition(job, type_)
        .filter(|c| c["status"] == "True")
        .and_then(|c| c["reason"].as_str().map(str::to_owned))
}

/// All events of every job from the beginning, until each of `ids` is terminal.
async fn history_until_all_terminal(server: &Server, ids: &HashSet<String>) -> Vec<(String, String)> {
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
fn assert_forward_only(events: &[(String, String)]) {
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

#[tokio::test]
async fn a_job_runs_as_a_batch_v1_job_with_its_result_and_logs() {
    let cluster = Cluster::start().await;
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
    let cluster = Cluster::start().await;
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
    assert_eq!(cluster.emu.simulation().pods_created(), 3);

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
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(
            &[("EMULATOR_GATE", "never-opened")],
            json!({"activeDeadlineSeconds": 1}),
        ))
        .await;
    let events = status_events(&server, &id).await;
    assert_eq!(
        events.last().unwrap(),
        &("FAILED".to_owned(), Some("DeadlineExceeded".to_owned())),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e.0 == "RUNNING"), "{events:?}");
}

#[tokio::test]
async fn an_indexed_job_runs_every_index_within_its_parallelism() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "e",
        "subscription { jobEvents { phase job { progress { active succeeded } } } }",
        json!({}),
    )
    .await;
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
async fn cancel_records_cancelled_then_deletes_the_job_and_its_pods() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(&[("EMULATOR_GATE", "held")], json!({})))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    // The job's pods, as jobgate's watch sees them, are part of the job.
    let pods_of = || async {
        server
            .gql_ok(
                "query($id: ID!) { job(id: $id) { pods { name phase exitCode createdAt } } }",
                json!({"id": id}),
            )
            .await["job"]["pods"]
            .clone()
    };
    cluster
        .until("the running pod is shown", || async {
            pods_of()
                .await
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["phase"] == "Running")
        })
        .await;
    let listed: Vec<String> = cluster
        .pods_of(&id)
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    let shown: Vec<String> = pods_of()
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shown, listed);
    assert_eq!(server.cancel(&id).await, "CANCELLED");
    let name = format!("jobgate-{id}");
    cluster
        .until("the Job is deleted", || async {
            cluster.jobs().get_opt(&name).await.unwrap().is_none()
        })
        .await;
    cluster
        .until("its pods are deleted", || async {
            cluster.pods_of(&id).await.is_empty()
        })
        .await;
    // The deletion does not turn the cancelled job into a vanished one.
    cluster.emu.simulation().open_gate("held");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(done["phase"], "CANCELLED");
    // Cancelling a finished job is refused and changes nothing.
    let body = server
        .gql(
            "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "FAILED_PRECONDITION");
}

#[tokio::test]
async fn two_hundred_concurrent_submissions_create_exactly_two_hundred_jobs() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let submissions = (0..200).map(|i| {
        let server = &server;
        async move {
            server
                .submit(input(&[], json!({"name": format!("many-{i}")})))
                .await
        }
    });
    let ids: HashSet<String> = futures::future::join_all(submissions).await.into_iter().collect();
    assert_eq!(ids.len(), 200);
    let events = history_until_all_terminal(&server, &ids).await;
    assert_forward_only(&events);
    let managed = cluster.managed_jobs().await;
    assert_eq!(managed.len(), 200, "one Job per job");
    assert!(managed.values().all(|jobs| jobs.len() == 1));
    assert_eq!(managed.keys().cloned().collect::<HashSet<_>>(), ids);
    let counts = cluster.emu.requests();
    assert_eq!(counts.of("jobs.batch", "create"), 200, "{counts:?}");
}

#[tokio::test]
async fn jobs_submitted_while_the_api_server_is_down_wait_then_run_once() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    cluster.emu.go_down().await;
    let mut ids = HashSet::new();
    for i in 0..10 {
        ids.insert(
            server
                .submit(input(&[], json!({"name": format!("down-{i}")})))
                .await,
        );
    }
    // Each stays PENDING with a condition saying why, and /readyz turns red.
    for id in &ids {
        let polling = Polling::start();
        loop {
            let j = server.job_with(id, JOB_FIELDS).await;
            assert_eq!(j["phase"], "PENDING");
            let waiting = common::condition(&j, "WorkloadCreated").filter(|c| c["status"] == "False");
            if let Some(c) = waiting {
                assert_eq!(c["reason"], "ApiServerUnreachable", "{c}");
                break;
            }
            polling.pause(|| format!("no WorkloadCreated=False on {j}")).await;
        }
    }
    server.wait_ready_is(503).await;
    cluster.emu.come_up().await.unwrap();
    let events = history_until_all_terminal(&server, &ids).await;
    assert_forward_only(&events);
    for id in &ids {
        let j = server.job_with(id, JOB_FIELDS).await;
        assert_eq!(j["phase"], "SUCCEEDED", "{j}");
        let created = common::condition(&j, "WorkloadCreated").unwrap();
        assert_eq!(created["status"], "True");
    }
    let managed = cluster.managed_jobs().await;
    assert_eq!(managed.len(), 10);
    assert!(managed.values().all(|jobs| jobs.len() == 1), "no duplicates");
    server.wait_ready_is(200).await;
}

#[tokio::test]
async fn server_errors_and_throttling_delay_launches_without_losing_or_duplicating() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    cluster.emu.fail_next(6, 500);
    let a = server.submit(input(&[], json!({}))).await;
    let b = server.submit(input(&[], json!({}))).await;
    cluster.emu.fail_next(4, 429);
    let c = server.submit(input(&[], json!({}))).await;
    for id in [&a, &b, &c] {
        assert_eq!(status_events(&server, id).await.last().unwrap().0, "SUCCEEDED");
    }
    let managed = cluster.managed_jobs().await;
    assert_eq!(managed.len(), 3);
    assert!(managed.values().all(|jobs| jobs.len() == 1));
}

#[tokio::test]
async fn dropped_watches_and_expired_versions_miss_no_transition() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    let lists_before = cluster.emu.requests().verb("list");
    let mut ids = Vec::new();
    for i in 0..8 {
        let gate = format!("g{i}");
        ids.push(server.submit(input(&[("EMULATOR_GATE", &gate)], json!({}))).await);
    }
    for id in &ids {
        server.wait_phase(id, "RUNNING").await;
    }
    // Dropped watches: jobgate re-watches from the last version it saw.
    cluster.emu.drop_watches();
    for i in 0..4 {
        cluster.emu.simulation().open_gate(&format!("g{i}"));
    }
    // An API server that goes away while jobs finish and comes back compacted: the versions
    // jobgate holds have expired (410 Gone), so it must re-list, and reconcile.
    cluster.emu.go_down().await;
    for i in 4..8 {
        cluster.emu.simulation().open_gate(&format!("g{i}"));
    }
    let store = cluster.emu.store().clone();
    cluster
        .until("the last jobs finish in the cluster", || async {
            let (jobs, _) = store.list("jobs.batch", Some("default"), &|j| {
                j.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Complete" && c["status"] == "True"))
            });
            jobs.len() == 8
        })
        .await;
    cluster.emu.restart_compacted();
    cluster.emu.come_up().await.unwrap();
    let ids: HashSet<String> = ids.into_iter().collect();
    let events = history_until_all_terminal(&server, &ids).await;
    assert_forward_only(&events);
    for id in &ids {
        let phases: Vec<&str> = events
            .iter()
            .filter(|e| &e.0 == id)
            .map(|e| e.1.as_str())
            .collect();
        assert_eq!(phases.first(), Some(&"PENDING"));
        assert!(phases.contains(&"RUNNING"), "{phases:?}");
        assert_eq!(phases.last(), Some(&"SUCCEEDED"), "{phases:?}");
    }
    assert!(
        cluster.emu.requests().verb("list") > lists_before,
        "the expired versions forced a re-list"
    );
    server.wait_ready_is(200).await;
}

#[tokio::test]
async fn jobs_that_finish_or_vanish_while_jobgate_is_down_get_their_true_outcome() {
    let cluster = Cluster::start().await;
    let mut server = cluster.spawn_jobgate(&[]).await;
    let ok = server
        .submit(input(
            &[("EMULATOR_GATE", "ok"), ("EMULATOR_TERMINATION_MESSAGE", "fine")],
            json!({}),
        ))
        .await;
    let bad = server
        .submit(input(
            &[("EMULATOR_GATE", "bad"), ("EMULATOR_EXIT_CODE", "1")],
            json!({"backoffLimit": 0}),
        ))
        .await;
    let gone = server
        .submit(input(&[("EMULATOR_GATE", "gone")], json!({})))
        .await;
    let still = server
        .submit(input(&[("EMULATOR_GATE", "still")], json!({})))
        .await;
    for id in [&ok, &bad, &gone, &still] {
        server.wait_phase(id, "RUNNING").await;
    }
    server.kill9();
    // Meanwhile in the cluster: two jobs finish, one Job is deleted by someone, one runs on.
    let sim = cluster.emu.simulation();
    sim.open_gate("ok");
    sim.open_gate("bad");
    cluster
        .jobs()
        .delete(&format!("jobgate-{gone}"), &DeleteParams::background())
        .await
        .unwrap();
    for id in [&ok, &bad] {
        let name = format!("jobgate-{id}");
        cluster
            .until("the Job finishes", || async {
                let k = cluster.jobs().get(&name).await.unwrap();
                k.status.and_then(|s| s.conditions).is_some_and(|c| {
                    c.iter()
                        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                })
            })
            .await;
    }
    let server = server.start_again(&cluster.args(&[])).await;
    // Ready once the API server answers its lists: the lists reconcile the adopted jobs
    // (ready does not wait for them), and the gauge says when they are done.
    server.wait_ready_is(200).await;
    let ids: HashSet<String> = [&ok, &bad, &gone].into_iter().cloned().collect();
    history_until_all_terminal(&server, &ids).await;
    let polling = Polling::start();
    while common::scrape(&server)
        .await
        .get("jobgate_kube_first_lists_pending")
        != Some(&0.0)
    {
        polling
            .pause(|| "the first lists are never done".to_owned())
            .await;
    }
    let j = server.job_with(&ok, JOB_FIELDS).await;
    assert_eq!(
        (j["phase"].as_str(), j["result"].as_str()),
        (Some("SUCCEEDED"), Some("fine"))
    );
    let j = server.job_with(&bad, JOB_FIELDS).await;
    assert_eq!(j["phase"], "FAILED");
    assert_eq!(reason_of(&j, "Failed").as_deref(), Some("BackoffLimitExceeded"));
    let j = server.job_with(&gone, JOB_FIELDS).await;
    assert_eq!(j["phase"], "FAILED");
    assert_eq!(reason_of(&j, "Failed").as_deref(), Some("WorkloadDeleted"), "{j}");
    // The one still running is followed again and finishes normally.
    assert_eq!(server.job_with(&still, JOB_FIELDS).await["phase"], "RUNNING");
    sim.open_gate("still");
    assert_eq!(
        status_events(&server, &still).await.last().unwrap().0,
        "SUCCEEDED"
    );
}

#[tokio::test]
async fn a_job_deleted_while_running_fails_with_workload_deleted() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(&[("EMULATOR_GATE", "held")], json!({})))
        .await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe(
        "s",
        "subscription($id: ID!) { jobStatus(id: $id) { phase reason } }",
        json!({"id": id}),
    )
    .await;
    while ws.recv().await["payload"]["data"]["jobStatus"]["phase"] != "RUNNING" {}
    cluster
        .jobs()
        .delete(&format!("jobgate-{id}"), &DeleteParams::background())
        .await
        .unwrap();
    let msg = ws.recv().await;
    let e = &msg["payload"]["data"]["jobStatus"];
    assert_eq!(
        (e["phase"].as_str(), e["reason"].as_str()),
        (Some("FAILED"), Some("WorkloadDeleted")),
        "{msg}"
    );
}

#[tokio::test]
async fn a_kill_between_accepting_and_creating_leaves_exactly_one_job() {
    let cluster = Cluster::start().await;
    let mut server = cluster.spawn_jobgate(&[]).await;
    // Accepted while the cluster is away: nothing created yet when jobgate dies.
    cluster.emu.go_down().await;
    let mut ids = HashSet::new();
    for _ in 0..5 {
        ids.insert(server.submit(input(&[], json!({}))).await);
    }
    server.kill9();
    cluster.emu.come_up().await.unwrap();
    let mut server = server.start_again(&cluster.args(&[])).await;
    // And killed right after answering, creates in flight or done but not yet recorded.
    let burst = (0..20).map(|_| {
        let server = &server;
        async move { server.submit(input(&[], json!({}))).await }
    });
    ids.extend(futures::future::join_all(burst).await);
    server.kill9();
    let server = server.start_again(&cluster.args(&[])).await;
    history_until_all_terminal(&server, &ids).await;
    for id in &ids {
        assert_eq!(server.job_with(id, JOB_FIELDS).await["phase"], "SUCCEEDED");
    }
    let managed = cluster.managed_jobs().await;
    assert_eq!(managed.len(), ids.len());
    assert!(
        managed.values().all(|jobs| jobs.len() == 1),
        "exactly one Job each"
    );
}

#[tokio::test]
async fn a_job_removed_by_its_ttl_keeps_its_history_result_and_logs() {
    let cluster = Cluster::start().await;
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
    let cluster = Cluster::start().await;
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
    cluster.emu.simulation().open_gate("logs");
    let end = ws.recv().await;
    assert_eq!(end["type"], "complete", "the stream ends with the job: {end}");
    assert_eq!(server.job_with(&id, JOB_FIELDS).await["phase"], "SUCCEEDED");
}

#[tokio::test]
async fn watch_and_list_requests_stay_constant_as_subscribers_grow() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    let run_one = |tag: &'static str| {
        let server = &server;
        async move {
            let id = server.submit(input(&[], json!({"name": tag}))).await;
            assert_eq!(status_events(server, &id).await.last().unwrap().0, "SUCCEEDED");
        }
    };
    run_one("warm-up").await;
    let before = cluster.emu.requests();
    // 1,000 subscriptions: 10 sockets × 100 jobEvents subscriptions.
    let mut sockets = Vec::new();
    for _ in 0..10 {
        let mut ws = GqlWs::connect(&server).await;
        for s in 0..100 {
            ws.subscribe(
                &format!("s{s}"),
                "subscription { jobEvents { phase job { name } } }",
                json!({}),
            )
            .await;
        }
        sockets.push(ws);
    }
    // Every subscription has its place in the event stream before the job starts.
    let poll = common::Polling::start();
    while common::scrape(&server)
        .await
        .get("jobgate_subscription_group_members")
        .copied()
        != Some(1000.0)
    {
        poll.pause(|| "the 1,000 subscriptions never all became live".to_owned())
            .await;
    }
    run_one("watched").await;
    // Every subscriber sees the job through to its end.
    for ws in &mut sockets {
        let mut done = HashSet::new();
        while done.len() < 100 {
            let msg = ws.recv().await;
            let e = &msg["payload"]["data"]["jobEvents"];
            if e["job"]["name"] == "watched" && e["phase"] == "SUCCEEDED" {
                done.insert(msg["id"].as_str().unwrap().to_owned());
            }
        }
    }
    let after = cluster.emu.requests();
    eprintln!(
        "API requests with 1 subscriber: list {} watch {} (open watches {}); with 1,000: list {} watch {} (open watches {})",
        before.verb("list"),
        before.verb("watch"),
        before.open_watches,
        after.verb("list"),
        after.verb("watch"),
        after.open_watches
    );
    assert_eq!(after.verb("list"), before.verb("list"), "no list per subscriber");
    assert_eq!(
        after.verb("watch"),
        before.verb("watch"),
        "no watch per subscriber"
    );
    assert_eq!(
        after.open_watches, 3,
        "one watch of Jobs, one of Pods, one of CustomResourceDefinitions (for workload kinds installed later)"
    );
}

#[tokio::test]
async fn kubernetes_inputs_are_validated_before_anything_is_created() {
    let cluster = Cluster::start().await;
    let server = cluster
        .jobgate(&[
            "--allowed-namespaces",
            "default,ml",
            "--service-accounts",
            "trainer",
        ])
        .await;
    for (bad, field) in [
        (json!({"command": ["true"]}), "input.image"),
        (input(&[], json!({"namespace": "prod"})), "input.namespace"),
        (
            input(&[], json!({"serviceAccountName": "admin"})),
            "input.serviceAccountName",
        ),
        (
            input(
                &[],
                json!({"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}),
            ),
            "input.resources.requests.memory",
        ),
    ] {
        let body = server.submit_answer(bad).await;
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{body}"
        );
        assert_eq!(body["errors"][0]["extensions"]["field"], field, "{body}");
    }
    assert!(cluster.managed_jobs().await.is_empty(), "nothing was created");
    assert_eq!(cluster.emu.requests().of("jobs.batch", "create"), 0);
    // The form a client builds from `templates` says the same: the image is required, the
    // namespaces and service accounts are the allowed ones, the TTL defaults to the server's.
    let templates = server
        .gql_ok(
            "{ templates { name kind fields { name required choices default } } namespaces }",
            json!({}),
        )
        .await;
    let container = &templates["templates"][0];
    assert_eq!(container["name"], "container");
    assert_eq!(container["kind"], "batch/v1 Job");
    let field = |name: &str| {
        container["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no field {name} in {container}"))
            .clone()
    };
    assert_eq!(field("image")["required"], true);
    assert_eq!(field("namespace")["choices"], json!(["default", "ml"]));
    assert_eq!(field("serviceAccountName")["choices"], json!(["trainer"]));
    assert_eq!(field("ttlSecondsAfterFinished")["default"], 3600);
    field("resources");
    assert_eq!(templates["namespaces"], json!(["default", "ml"]));
    // Watched per allowed namespace: one Jobs and one Pods watch in each, and one watch of
    // CustomResourceDefinitions (no workload kind is installed here).
    server.wait_ready_is(200).await;
    // Ready once every list is answered; each watch opens as its (empty) list ends.
    cluster
        .until("the watches open", || async {
            cluster.emu.requests().open_watches >= 5
        })
        .await;
    assert_eq!(cluster.emu.requests().open_watches, 5);
}

#[tokio::test]
async fn a_job_for_a_missing_namespace_fails_with_the_clusters_answer() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let id = server.submit(input(&[], json!({"namespace": "nowhere"}))).await;
    let events = status_events(&server, &id).await;
    assert_eq!(
        events.last().unwrap(),
        &("FAILED".to_owned(), Some("NamespaceNotFound".to_owned()))
    );
    let j = server.job_with(&id, JOB_FIELDS).await;
    assert!(j["message"].as_str().unwrap().contains("nowhere"), "{j}");
}

#[tokio::test]
async fn a_foreign_job_under_our_name_fails_the_job_loudly() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    cluster.emu.go_down().await;
    let id = server.submit(input(&[], json!({}))).await;
    // While jobgate cannot reach the cluster, someone else takes the Job's name.
    cluster
        .emu
        .store()
        .create(
            "jobs.batch",
            Some("default"),
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": format!("jobgate-{id}"), "labels": {"team": "other"}},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "env": [{"name": "EMULATOR_GATE", "value": "x"}]}]}}},
            }),
        )
        .unwrap();
    cluster.emu.come_up().await.unwrap();
    let events = status_events(&server, &id).await;
    assert_eq!(
        events.last().unwrap(),
        &("FAILED".to_owned(), Some("WorkloadConflict".to_owned())),
        "{events:?}"
    );
    let j = server.job_with(&id, JOB_FIELDS).await;
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("does not belong to this job"),
        "{j}"
    );
    // The other Job is left alone.
    let other = cluster.jobs().get(&format!("jobgate-{id}")).await.unwrap();
    assert_eq!(other.metadata.labels.unwrap()["team"], "other");
}

#[tokio::test]
async fn a_cancel_made_while_the_api_server_is_away_stops_the_workload_after_a_restart() {
    let cluster = Cluster::start().await;
    let mut server = cluster.spawn_jobgate(&[]).await;
    let id = server
        .submit(input(&[("EMULATOR_GATE", "held")], json!({})))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    let name = format!("jobgate-{id}");
    cluster.emu.go_down().await;
    assert_eq!(server.cancel(&id).await, "CANCELLED");
    // jobgate dies before the API server is back: only what it stored can stop the Job now.
    server.kill9();
    cluster.emu.come_up().await.unwrap();
    assert!(
        cluster.jobs().get_opt(&name).await.unwrap().is_some(),
        "the Job outlived the first jobgate"
    );
    let server = server.start_again(&cluster.args(&[])).await;
    cluster
        .until(
            "the cancelled job's Job is deleted by the restarted jobgate",
            || async { cluster.jobs().get_opt(&name).await.unwrap().is_none() },
        )
        .await;
    // Its pods never get to finish the work.
    cluster.emu.simulation().open_gate("held");
    assert_eq!(server.job_with(&id, JOB_FIELDS).await["phase"], "CANCELLED");
    cluster
        .until("its pods are deleted", || async {
            cluster.pods_of(&id).await.is_empty()
        })
        .await;
}

#[tokio::test]
async fn a_cancel_is_recorded_as_a_kubernetes_event_on_the_job() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(&[("EMULATOR_GATE", "held")], json!({})))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    server.cancel(&id).await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cluster.client.clone(), "default");
    let name = format!("jobgate-{id}");
    cluster
        .until("jobgate records why it deleted the Job", || async {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.involved_object.name.as_deref() == Some(name.as_str())
                        && e.reason.as_deref() == Some("Cancelled")
                        && e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("jobgate")
                })
        })
        .await;
}
