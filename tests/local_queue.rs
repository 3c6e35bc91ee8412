//! jobgate's own queue on the local executor, through the real server: caps on running jobs
//! (`--max-running`, `--tenant-max-running`), fair share between namespaces (measured over
//! the order jobs start, with equal weights and with 2:1), priorities within a namespace and
//! their per-tenant maximum, the reasons a waiting job gives (pushed as events), its position
//! read over GraphQL, and a restart (kill -9) that keeps the waiting jobs, their order and
//! their reasons; and the flags refused where the local queue cannot hold them.
//!
//! Jobs run `sleep 600`; the test frees a slot by cancelling a running job, and waits on the
//! events jobgate pushes or on what it answers, never on time.

mod common;

use std::collections::VecDeque;

use common::{GqlWs, Polling, Server};
use serde_json::{Value, json};

const EVENTS: &str = "subscription { jobEvents { phase previousPhase reason message job { id namespace } } }";

const QUEUE: &str = "id phase queue { name state reason message since position localQueuePosition estimatedStartAt estimate } \
    events { phase reason message }";

fn sleeper(namespace: &str, priority: i32) -> Value {
    json!({"command": ["sleep", "600"], "namespace": namespace, "priority": priority, "backoffLimit": 0})
}

/// Follows every job's events; a start is a job's first RUNNING.
struct Starts {
    ws: GqlWs,
}

impl Starts {
    async fn follow(server: &Server) -> Starts {
        let mut ws = GqlWs::connect(server).await;
        ws.subscribe("events", EVENTS, json!({})).await;
        server.wait_subscriptions_live(1).await;
        Starts { ws }
    }

    /// The next job that starts: (id, namespace).
    async fn next(&mut self) -> (String, String) {
        loop {
            let message = self.ws.recv().await;
            let event = &message["payload"]["data"]["jobEvents"];
            assert!(event.is_object(), "not an event: {message}");
            if event["phase"] == "RUNNING" && event["previousPhase"] == "PENDING" {
                return (
                    event["job"]["id"].as_str().unwrap().to_owned(),
                    event["job"]["namespace"].as_str().unwrap().to_owned(),
                );
            }
        }
    }

    /// The next event of job `id` whose reason is `reason`.
    async fn reason_of(&mut self, id: &str, reason: &str) -> Value {
        loop {
            let message = self.ws.recv().await;
            let event = message["payload"]["data"]["jobEvents"].clone();
            if event["job"]["id"] == id && event["reason"] == reason {
                return event;
            }
        }
    }
}

/// Runs `blockers` jobs in namespace `z` to take every slot, queues `per_tenant` jobs in `a`
/// then as many in `b`, frees the blockers, then records the namespaces of the first `n`
/// starts, cancelling the oldest running job after each.
async fn start_order(flags: &[&str], blockers: usize, per_tenant: usize, n: usize) -> Vec<String> {
    let server = Server::start(flags).await;
    let mut starts = Starts::follow(&server).await;
    let mut running: VecDeque<String> = VecDeque::new();
    for _ in 0..blockers {
        server.submit(sleeper("z", 0)).await;
        running.push_back(starts.next().await.0);
    }
    for namespace in ["a", "b"] {
        for _ in 0..per_tenant {
            server.submit(sleeper(namespace, 0)).await;
        }
    }
    let mut order = Vec::new();
    while order.len() < n {
        let oldest = running.pop_front().expect("a running job to cancel");
        server.cancel(&oldest).await;
        let (id, namespace) = starts.next().await;
        order.push(namespace);
        running.push_back(id);
    }
    order
}

fn share(order: &[String], namespace: &str) -> usize {
    order.iter().filter(|n| *n == namespace).count()
}

#[tokio::test]
async fn two_namespaces_with_backlogs_share_the_slots_equally() {
    // a's 12 jobs are all older than b's: first come, first served would start a's only.
    let order = start_order(&["--max-running", "2"], 2, 12, 10).await;
    let (a, b) = (share(&order, "a"), share(&order, "b"));
    assert_eq!((a, b), (5, 5), "starts in order: {order:?}");
}

#[tokio::test]
async fn weights_two_to_one_give_two_thirds_of_the_starts() {
    let order = start_order(&["--max-running", "3", "--tenant-weight", "a=2"], 3, 15, 12).await;
    let (a, b) = (share(&order, "a"), share(&order, "b"));
    assert_eq!((a, b), (8, 4), "starts in order: {order:?}");
}

#[tokio::test]
async fn a_later_job_of_higher_priority_starts_first_and_the_tenant_maximum_holds() {
    let server = Server::start(&["--max-running", "1", "--tenant-max-priority", "a=10"]).await;
    let mut starts = Starts::follow(&server).await;
    let blocker = server.submit(sleeper("z", 0)).await;
    assert_eq!(starts.next().await.0, blocker);
    let low1 = server.submit(sleeper("a", 0)).await;
    let low2 = server.submit(sleeper("a", 0)).await;
    let high = server.submit(sleeper("a", 10)).await;

    // Above a's maximum: refused, naming the field, storing nothing.
    let before = server
        .gql_ok("{ jobs(first: 100) { totalCount } }", json!({}))
        .await;
    let refused = server.submit_answer(sleeper("a", 11)).await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "{refused}"
    );
    assert_eq!(
        refused["errors"][0]["extensions"]["field"], "input.priority",
        "{refused}"
    );
    let absurd = server.submit_answer(sleeper("b", 2_000_000_000)).await;
    assert_eq!(
        absurd["errors"][0]["extensions"]["field"], "input.priority",
        "{absurd}"
    );
    let after = server
        .gql_ok("{ jobs(first: 100) { totalCount } }", json!({}))
        .await;
    assert_eq!(before, after, "a refused job is not stored");

    server.cancel(&blocker).await;
    assert_eq!(starts.next().await.0, high, "the higher priority goes first");
    server.cancel(&high).await;
    assert_eq!(starts.next().await.0, low1, "then the older of equal priority");
    server.cancel(&low1).await;
    assert_eq!(starts.next().await.0, low2);
}

#[tokio::test]
async fn why_a_job_waits_is_pushed_and_shown() {
    let server = Server::start(&["--max-running", "2", "--tenant-max-running", "a=1"]).await;
    let mut starts = Starts::follow(&server).await;
    let a1 = server.submit(sleeper("a", 0)).await;
    assert_eq!(starts.next().await.0, a1);
    let a2 = server.submit(sleeper("a", 0)).await;
    let event = starts.reason_of(&a2, "TenantLimit").await;
    assert_eq!(event["phase"], "PENDING");
    assert!(
        event["message"].as_str().unwrap().contains("namespace a"),
        "{event}"
    );
    let b1 = server.submit(sleeper("b", 0)).await;
    assert_eq!(starts.next().await.0, b1);
    let b2 = server.submit(sleeper("b", 0)).await;
    starts.reason_of(&b2, "WaitingForCapacity").await;
    let dependent = server
        .submit(json!({"command": ["true"], "namespace": "b", "dependsOn": [a1]}))
        .await;
    starts.reason_of(&dependent, "WaitingForDependencies").await;

    let shown = server
        .job_until(&b2, QUEUE, "b2's place is known", |j| {
            !j["queue"]["position"].is_null()
        })
        .await;
    let queue = &shown["queue"];
    assert_eq!(queue["name"], "b", "{shown}");
    assert_eq!(queue["state"], "PENDING", "{shown}");
    assert_eq!(queue["reason"], "WaitingForCapacity", "{shown}");
    assert!(!queue["since"].is_null(), "{shown}");
    assert!(
        queue["estimate"].as_str().is_some_and(|e| !e.is_empty()),
        "{shown}"
    );
    let held = server.job_with(&dependent, QUEUE).await;
    assert_eq!(held["queue"]["reason"], "WaitingForDependencies", "{held}");
    assert!(held["queue"]["message"].as_str().unwrap().contains(&a1), "{held}");
    let capped = server.job_with(&a2, QUEUE).await;
    assert_eq!(capped["queue"]["reason"], "TenantLimit", "{capped}");

    // b1 ends: b2 takes its slot (a2 stays held by a's cap).
    server.cancel(&b1).await;
    assert_eq!(starts.next().await.0, b2);
    let started = server.job_with(&b2, QUEUE).await;
    assert!(
        started["queue"].is_null(),
        "a running job waits in no queue: {started}"
    );
    let capped = server.job_with(&a2, QUEUE).await;
    assert_eq!(capped["phase"], "PENDING", "{capped}");
}

#[tokio::test]
async fn positions_move_up_as_the_jobs_ahead_start() {
    let server = Server::start(&["--max-running", "1"]).await;
    let mut starts = Starts::follow(&server).await;
    let blocker = server.submit(sleeper("z", 0)).await;
    assert_eq!(starts.next().await.0, blocker);
    let mut waiting = Vec::new();
    for _ in 0..4 {
        waiting.push(server.submit(sleeper("a", 0)).await);
    }
    let expect = |n: usize| -> Vec<(Value, Value)> { (1..=n).map(|i| (json!(i), json!(i))).collect() };
    wait_positions(&server, &waiting, expect(4)).await;
    common::wait_for_metric(&server, "jobgate_local_queue_waiting", 4.0).await;
    common::wait_for_metric(&server, "jobgate_local_queue_running", 1.0).await;
    server.cancel(&blocker).await;
    assert_eq!(starts.next().await.0, waiting[0]);
    wait_positions(&server, &waiting[1..], expect(3)).await;
    common::wait_for_metric(&server, "jobgate_local_queue_waiting", 3.0).await;
    common::wait_for_metric(&server, "jobgate_local_queue_running", 1.0).await;
}

async fn wait_positions(server: &Server, ids: &[String], expected: Vec<(Value, Value)>) {
    let polling = Polling::start();
    loop {
        let mut seen = Vec::new();
        for id in ids {
            let job = server.job_with(id, QUEUE).await;
            seen.push((
                job["queue"]["position"].clone(),
                job["queue"]["localQueuePosition"].clone(),
            ));
        }
        if seen == expected {
            return;
        }
        polling
            .pause(|| format!("positions {seen:?}, never {expected:?}"))
            .await;
    }
}

#[tokio::test]
async fn a_restart_keeps_the_waiting_jobs_their_order_and_reasons() {
    let flags = ["--max-running", "1"];
    let mut server = Server::spawn(&flags).await;
    // Retried if the restart ends its run: it holds its slot through its retries.
    let blocker = server
        .submit(json!({"command": ["sleep", "600"], "namespace": "z", "backoffLimit": 6}))
        .await;
    server.wait_phase(&blocker, "RUNNING").await;
    let low = server.submit(sleeper("a", 0)).await;
    let other = server.submit(sleeper("b", 0)).await;
    let high = server.submit(sleeper("a", 5)).await;
    for id in [&low, &other, &high] {
        server
            .job_until(id, QUEUE, "its reason is recorded", |j| {
                j["queue"]["reason"] == "WaitingForCapacity"
            })
            .await;
    }
    let before: Vec<Value> = {
        let mut v = Vec::new();
        for id in [&high, &other, &low] {
            let job = server
                .job_until(id, QUEUE, "placed", |j| !j["queue"]["position"].is_null())
                .await;
            v.push(job["queue"]["position"].clone());
        }
        v
    };
    server.kill9();
    let server = server.start_again(&flags).await;
    let mut after = Vec::new();
    for id in [&high, &other, &low] {
        let job = server
            .job_until(id, QUEUE, "placed after the restart", |j| {
                !j["queue"]["position"].is_null()
            })
            .await;
        assert_eq!(job["phase"], "PENDING", "{job}");
        assert_eq!(job["queue"]["reason"], "WaitingForCapacity", "{job}");
        let reasons: Vec<&Value> = job["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["reason"])
            .filter(|r| *r == "WaitingForCapacity")
            .collect();
        assert_eq!(
            reasons.len(),
            1,
            "the reason is recorded once, not again at the restart: {job}"
        );
        after.push(job["queue"]["position"].clone());
    }
    assert_eq!(before, after);
    assert_eq!(
        after,
        vec![json!(1), json!(2), json!(3)],
        "a's high, then b's (fair share), then a's low"
    );
    let mut starts = Starts::follow(&server).await;
    server.cancel(&blocker).await;
    assert_eq!(starts.next().await.0, high);
}

/// Runs the jobgate binary with `args` and `env`, which must refuse to start; its standard
/// error.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let (code, stderr) = common::run_to_exit(args, env);
    assert!(
        code.is_some(),
        "jobgate {args:?} started instead of refusing: {stderr}"
    );
    assert_ne!(code, Some(0), "{stderr}");
    stderr
}

#[test]
fn the_queue_flags_are_refused_where_the_local_queue_cannot_hold_them() {
    let kube = refused(
        &["--executor", "kubernetes", "--max-priority", "10"],
        &[("JOBGATE_MAX_RUNNING", "2")],
    );
    assert!(kube.contains("--max-running") && kube.contains("Kueue"), "{kube}");
    assert!(
        !kube.contains("--max-priority"),
        "priority limits hold on every executor: {kube}"
    );
    let shared = refused(
        &[
            "--database-url",
            "postgres://jobgate@127.0.0.1:1/jobgate",
            "--tenant-weight",
            "a=2",
        ],
        &[],
    );
    assert!(
        shared.contains("--tenant-weight") && shared.contains("PostgreSQL"),
        "{shared}"
    );
}

#[tokio::test]
async fn a_job_whose_launch_fails_backs_off_in_the_queue_then_starts() {
    // A work directory of its own, made unusable after the start: preparing the job's
    // directory fails, so its launch is retried with back-off.
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let work = parent.path().join("work");
    let server = Server::start(&["--max-running", "1", "--local-work-dir", work.to_str().unwrap()]).await;
    let mut starts = Starts::follow(&server).await;
    std::fs::remove_dir_all(&work).unwrap();
    std::fs::write(&work, "not a directory").unwrap();
    let id = server
        .submit(json!({"command": ["true"], "namespace": "a"}))
        .await;
    let shown = server
        .job_until(&id, QUEUE, "the job backs off", |j| {
            j["queue"]["reason"] == "BackingOff"
        })
        .await;
    assert_eq!(shown["phase"], "PENDING", "{shown}");
    assert_eq!(shown["queue"]["name"], "a", "{shown}");
    assert!(
        shown["queue"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("preparing the workload")),
        "the message says why the launch failed: {shown}"
    );
    assert!(
        shown["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["phase"] == "PENDING" && e["reason"] == "LaunchFailed"),
        "the failed launch is an event: {shown}"
    );
    std::fs::remove_file(&work).unwrap();
    assert_eq!(starts.next().await.0, id);
    let started = server.job_with(&id, QUEUE).await;
    assert!(
        started["queue"].is_null(),
        "a started job waits in no queue: {started}"
    );
}
