//! Faults along the way, none losing or duplicating a job: the API server down, failing or
//! throttling; dropped watches and expired resource versions; Jobs that finish or vanish while
//! jobgate is down; a Job deleted while running; jobgate killed between accepting a job and
//! creating its Job.

use std::collections::HashSet;

use kube::api::DeleteParams;
use serde_json::{Value, json};

use crate::common::cluster::Cluster;
use crate::common::{self, GqlWs, Polling};
use crate::support::{
    JOB_FIELDS, assert_forward_only, history_until_all_terminal, input, reason_of, status_events,
};

#[tokio::test]
async fn jobs_submitted_while_the_api_server_is_down_wait_then_run_once() {
    let Some(cluster) = Cluster::emulated("it takes the API server down").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    cluster.emu().go_down().await;
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
    cluster.emu().come_up().await.unwrap();
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
    let Some(cluster) = Cluster::emulated("it makes the API server fail requests").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    cluster.emu().fail_next(6, 500);
    let a = server.submit(input(&[], json!({}))).await;
    let b = server.submit(input(&[], json!({}))).await;
    cluster.emu().fail_next(4, 429);
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
    let Some(cluster) = Cluster::emulated("it takes the API server down, drops watches and compacts their history, counts the API server's requests, drives the emulated kubelet, writes to the emulator's store directly, scripts its pods through EMULATOR_GATE").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    let lists_before = cluster.emu().requests().verb("list");
    let mut ids = Vec::new();
    for i in 0..8 {
        let gate = format!("g{i}");
        ids.push(server.submit(input(&[("EMULATOR_GATE", &gate)], json!({}))).await);
    }
    for id in &ids {
        server.wait_phase(id, "RUNNING").await;
    }
    // Dropped watches: jobgate re-watches from the last version it saw.
    cluster.emu().drop_watches();
    for i in 0..4 {
        cluster.emu().simulation().open_gate(&format!("g{i}"));
    }
    // An API server that goes away while jobs finish and comes back compacted: the versions
    // jobgate holds have expired (410 Gone), so it must re-list, and reconcile.
    cluster.emu().go_down().await;
    for i in 4..8 {
        cluster.emu().simulation().open_gate(&format!("g{i}"));
    }
    let store = cluster.emu().store().clone();
    cluster
        .until("the last jobs finish in the cluster", || async {
            let (jobs, _) = store.list("jobs.batch", Some(cluster.namespace()), &|j| {
                j.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Complete" && c["status"] == "True"))
            });
            jobs.len() == 8
        })
        .await;
    cluster.emu().restart_compacted();
    cluster.emu().come_up().await.unwrap();
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
        cluster.emu().requests().verb("list") > lists_before,
        "the expired versions forced a re-list"
    );
    server.wait_ready_is(200).await;
}

#[tokio::test]
async fn jobs_that_finish_or_vanish_while_jobgate_is_down_get_their_true_outcome() {
    let Some(cluster) = Cluster::emulated("it drives the emulated kubelet, scripts its pods through EMULATOR_EXIT_CODE, EMULATOR_GATE, EMULATOR_TERMINATION_MESSAGE").await else {
        return;
    };
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
    let sim = cluster.emu().simulation();
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
    let Some(cluster) = Cluster::emulated("it scripts its pods through EMULATOR_GATE").await else {
        return;
    };
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
    let Some(cluster) = Cluster::emulated("it takes the API server down").await else {
        return;
    };
    let mut server = cluster.spawn_jobgate(&[]).await;
    // Accepted while the cluster is away: nothing created yet when jobgate dies.
    cluster.emu().go_down().await;
    let mut ids = HashSet::new();
    for _ in 0..5 {
        ids.insert(server.submit(input(&[], json!({}))).await);
    }
    server.kill9();
    cluster.emu().come_up().await.unwrap();
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
