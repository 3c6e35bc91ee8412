//! A batch/v1 Job's attempts as jobgate shows them: each pod that ran is an attempt with its
//! completion index, number, times, exit code, cause and pod, its own log lines (the pod's
//! archived output), and each end an event of the job's history; a pod OOM-killed, evicted
//! (by the kubelet or the Eviction API) or preempted is an attempt failed for that cause; and
//! a pod's end is pushed as it happens, while its Job's status stands still (the emulated
//! Job controller paused).

use serde_json::{Value, json};

use std::collections::{BTreeMap, BTreeSet};

use crate::common::cluster::Cluster;
use crate::common::{GqlWs, Server};
use crate::support::{input, job_past_its_deadline, status_events};

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
    let (id, events) = job_past_its_deadline(&server).await;
    assert_eq!(events.last().unwrap().0, "FAILED");
    let job = server
        .job_until(&id, ATTEMPTS, "the pod's end is an attempt's", |job| {
            job["attempts"][0]["state"] == "FAILED"
        })
        .await;
    let attempt = &job["attempts"][0];
    assert_eq!(attempt["cause"], "DEADLINE_EXCEEDED", "{job}");
    assert!(attempt["pod"].is_string());
}

/// What `jobEvents` pushes: (job id, phase, reason, message, the job's attempts).
type Pushed = (String, String, String, String, Value);

/// A live `jobEvents` subscription of every job, reading what it pushes.
struct Pushes {
    ws: GqlWs,
}

impl Pushes {
    /// Subscribes, and waits until the subscription is live: it sees every later event.
    async fn live(server: &Server) -> Pushes {
        let mut ws = GqlWs::connect(server).await;
        ws.subscribe(
            "events",
            "subscription { jobEvents { phase reason message job { id \
             attempts { name state exitCode cause reason pod } } } }",
            json!({}),
        )
        .await;
        server.wait_subscriptions_live(1).await;
        Pushes { ws }
    }

    /// The next event pushed.
    async fn next(&mut self) -> Pushed {
        let msg = self.ws.recv().await;
        let e = &msg["payload"]["data"]["jobEvents"];
        assert!(e.is_object(), "not an event: {msg}");
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        (
            text(&e["job"]["id"]),
            text(&e["phase"]),
            text(&e["reason"]),
            text(&e["message"]),
            e["job"]["attempts"].clone(),
        )
    }

    /// Every event pushed until each of `ids` is terminal, by job.
    async fn until_terminal(&mut self, ids: &BTreeSet<String>) -> BTreeMap<String, Vec<Pushed>> {
        let mut seen: BTreeMap<String, Vec<Pushed>> = BTreeMap::new();
        let mut done = BTreeSet::new();
        while done.len() < ids.len() {
            let event = self.next().await;
            if !ids.contains(&event.0) {
                continue;
            }
            if matches!(event.1.as_str(), "SUCCEEDED" | "FAILED" | "CANCELLED") {
                done.insert(event.0.clone());
            }
            seen.entry(event.0.clone()).or_default().push(event);
        }
        seen
    }
}

/// How a case's first pod fails.
enum Failure {
    /// Scripted through the job's environment (`EMULATOR_*_ATTEMPTS` = 1): the kubelet ends
    /// it at once.
    Scripted(&'static str),
    /// `kubectl drain`'s Eviction API, called on its running pod.
    EvictionApi,
    /// The scheduler preempts its running pod.
    Preemption,
}

/// One cause of a pod's failure, as its attempt must show it.
struct CauseCase {
    failure: Failure,
    cause: &'static str,
    reason: &'static str,
    /// The container's exit code: a stop by SIGTERM is 143, or 137 when the grace period
    /// ends first (the real-cluster profile's containers ignore SIGTERM).
    exit_codes: &'static [i64],
}

const CAUSES: [CauseCase; 4] = [
    CauseCase {
        failure: Failure::Scripted("EMULATOR_OOM_ATTEMPTS"),
        cause: "OOM_KILLED",
        reason: "OOMKilled",
        exit_codes: &[137],
    },
    CauseCase {
        failure: Failure::Scripted("EMULATOR_EVICT_ATTEMPTS"),
        cause: "EVICTED",
        reason: "TerminationByKubelet",
        exit_codes: &[137],
    },
    CauseCase {
        failure: Failure::EvictionApi,
        cause: "EVICTED",
        reason: "EvictionByEvictionAPI",
        exit_codes: &[143, 137],
    },
    CauseCase {
        failure: Failure::Preemption,
        cause: "PREEMPTED",
        reason: "PreemptionByScheduler",
        exit_codes: &[143, 137],
    },
];

#[tokio::test]
async fn a_pod_oom_killed_evicted_or_preempted_is_an_attempt_failed_for_that_cause() {
    let Some(cluster) = Cluster::emulated(
        "it scripts its pods through EMULATOR_OOM_ATTEMPTS, EMULATOR_EVICT_ATTEMPTS, EMULATOR_GATE, and evicts and preempts pods",
    )
    .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let mut pushes = Pushes::live(&server).await;
    for (n, case) in CAUSES.iter().enumerate() {
        // A pod stopped by a graceful delete is held at a gate, and its replacement after it
        // until the stopped pod's end is seen: the job must not end before it.
        let gate = format!("after-{n}");
        let env = match case.failure {
            Failure::Scripted(var) => vec![(var, "1")],
            Failure::EvictionApi | Failure::Preemption => vec![("EMULATOR_GATE", gate.as_str())],
        };
        let id = server.submit(input(&env, json!({"backoffLimit": 1}))).await;
        if let Failure::EvictionApi | Failure::Preemption = case.failure {
            let running = |p: &k8s_openapi::api::core::v1::Pod| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            };
            cluster
                .until("its pod runs", || async {
                    cluster.pods_of(&id).await.iter().any(running)
                })
                .await;
            let pod = cluster.pods_of(&id).await.into_iter().find(running).unwrap();
            let name = pod.metadata.name.unwrap();
            match case.failure {
                Failure::Preemption => cluster.emu().preempt_pod(cluster.namespace(), &name),
                _ => cluster.emu().evict_pod(cluster.namespace(), &name),
            }
            .unwrap();
        }
        // Its end is pushed, naming the pod, its exit code and its cause, before the job's.
        let (message, pushed) = loop {
            let (job, phase, reason, message, attempts) = pushes.next().await;
            if job == id && reason == "AttemptFailed" {
                assert_eq!(phase, "RUNNING", "{message}");
                break (message, attempts);
            }
        };
        cluster.emu().simulation().open_gate(&gate);
        let rest = pushes
            .until_terminal(&BTreeSet::from([id.clone()]))
            .await
            .remove(&id)
            .unwrap();
        assert_eq!(
            rest.last().unwrap().1,
            "SUCCEEDED",
            "the retry succeeds: {rest:?}"
        );

        let job = server.job_with(&id, ATTEMPTS).await;
        let attempts = job["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{job}");
        let attempt = &attempts[0];
        let pod = attempt["pod"].as_str().expect("its pod");
        assert!(pod.starts_with(&format!("jobgate-{id}-")), "{attempt}");
        assert_eq!(attempt["name"], pod);
        assert_eq!(attempt["state"], "FAILED", "{attempt}");
        assert_eq!(attempt["cause"], case.cause, "{attempt}");
        assert_eq!(attempt["reason"], case.reason, "{attempt}");
        let code = attempt["exitCode"].as_i64().expect("an exit code");
        assert!(case.exit_codes.contains(&code), "{attempt}");
        assert!(attempt["finishedAt"].is_string(), "{attempt}");
        assert_eq!(attempts[1]["state"], "SUCCEEDED", "{job}");
        assert!(message.contains(pod), "{message}");
        assert!(
            message.contains(&format!("failed: exit code {code} ({})", case.cause)),
            "{message}"
        );
        assert_eq!(pushed[0]["cause"], case.cause, "{pushed}");
        assert_eq!(pushed[0]["exitCode"], code, "{pushed}");
    }
}

/// How a case's first pod ends while the Job controller is paused.
enum Ending {
    /// Its gate opens and it exits with `EMULATOR_FAIL_EXIT_CODE` 9.
    Exits,
    /// The scheduler preempts it: `DisruptionTarget`, then a graceful delete.
    Preempted,
}

#[tokio::test]
async fn a_pods_end_is_pushed_while_its_jobs_status_stands_still() {
    let Some(cluster) = Cluster::emulated(
        "it pauses the emulated Job controller, preempts a pod, and scripts its pods through EMULATOR_GATE, EMULATOR_FAIL_ATTEMPTS, EMULATOR_FAIL_EXIT_CODE",
    )
    .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let mut pushes = Pushes::live(&server).await;
    for (n, (ending, cause, exit_codes)) in [
        (Ending::Exits, "ERROR", &[9][..]),
        (Ending::Preempted, "PREEMPTED", &[143, 137][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let gate = format!("end-{n}");
        let mut env = vec![("EMULATOR_GATE", gate.as_str())];
        if let Ending::Exits = ending {
            env.extend([("EMULATOR_FAIL_ATTEMPTS", "1"), ("EMULATOR_FAIL_EXIT_CODE", "9")]);
        }
        let id = server.submit(input(&env, json!({"backoffLimit": 1}))).await;
        let running = server
            .job_until(
                &id,
                "phase attempts { state pod }",
                "its first attempt runs",
                |job| job["phase"] == "RUNNING" && job["attempts"][0]["state"] == "RUNNING",
            )
            .await;
        let pod = running["attempts"][0]["pod"].as_str().unwrap().to_owned();
        let sim = cluster.emu().simulation();
        sim.pause_job_controller();
        match ending {
            Ending::Exits => sim.open_gate(&gate),
            Ending::Preempted => {
                cluster.emu().preempt_pod(cluster.namespace(), &pod).unwrap();
            }
        }
        // The pod's end alone: pushed while the job runs on.
        let (phase, message, attempts) = loop {
            let (job, phase, reason, message, attempts) = pushes.next().await;
            if job == id && reason == "AttemptFailed" {
                break (phase, message, attempts);
            }
        };
        assert_eq!(phase, "RUNNING", "{message}");
        assert!(message.contains(&pod), "{message}");
        let attempt = &attempts[0];
        assert_eq!(attempt["pod"], pod.as_str(), "{attempts}");
        assert_eq!(attempt["state"], "FAILED", "{attempts}");
        assert_eq!(attempt["cause"], cause, "{attempts}");
        let code = attempt["exitCode"].as_i64().expect("its exit code");
        assert!(exit_codes.contains(&code), "{attempts}");
        assert!(
            message.contains(&format!("failed: exit code {code} ({cause})")),
            "{message}"
        );
        // Nothing of it came from the Job: its controller has not counted the failure.
        let k = cluster.jobs().get(&format!("jobgate-{id}")).await.unwrap();
        let status = k.status.unwrap_or_default();
        assert_eq!(status.failed.unwrap_or(0), 0, "{status:?}");

        sim.resume_job_controller();
        sim.open_gate(&gate);
        let ids = BTreeSet::from([id.clone()]);
        let rest = pushes.until_terminal(&ids).await.remove(&id).unwrap();
        assert_eq!(rest.last().unwrap().1, "SUCCEEDED", "{rest:?}");
        assert!(
            rest.iter().any(|e| e.2 == "AttemptSucceeded"),
            "the retry's end: {rest:?}"
        );
        assert!(
            !rest.iter().any(|e| e.2 == "AttemptFailed"),
            "the first attempt ended once: {rest:?}"
        );
    }
}
