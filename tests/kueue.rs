//! Kueue end to end: jobgate, in the test's process (`Server::start`), with `--kueue` (or `--default-queue`) on the
//! Kubernetes API emulator, whose simulated Kueue admits queued Jobs by a ClusterQueue's pod
//! quota and evicts them on demand. What a user sees over GraphQL: a queued job waits PENDING
//! with Kueue's reason, pushed over `jobEvents`; it is admitted (pushed) when quota frees; an
//! eviction sends it back to PENDING, saying so, until it is readmitted.

mod common;

use common::cluster::Cluster;
use common::{GqlWs, Polling, Server};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const JOB_FIELDS: &str = "id phase message queue { name state reason message clusterQueue since } \
    conditions { type status reason message } spec { queueName }";

/// A job input for the emulated kubelet whose pod runs until gate `gate` opens.
fn gated(gate: &str, extra: Value) -> Value {
    let mut input = json!({
        "image": "busybox:1.36",
        "command": ["echo", "hello"],
        "env": [{"name": "EMULATOR_GATE", "value": gate}],
    });
    if let Value::Object(extra) = extra {
        input.as_object_mut().unwrap().extend(extra);
    }
    input
}

/// A cluster with Kueue installed and a LocalQueue `team-a` (ClusterQueue `cluster-queue`)
/// admitting `pods` pods at once; `None` (skipped) on a real cluster.
async fn kueue_cluster(pods: u32) -> Option<Cluster> {
    let cluster = Cluster::emulated_as("it installs the emulator's Kueue", "kueue").await?;
    cluster.emu().register_kueue().unwrap();
    cluster
        .emu()
        .create_kueue_queue(cluster.namespace(), "team-a", "cluster-queue", pods)
        .unwrap();
    Some(cluster)
}

/// The Kubernetes Job of jobgate job `id`.
fn job_name(id: &str) -> String {
    format!("jobgate-{id}")
}

/// Reads `jobEvents` events of the subscription `sub` until one satisfies `found`; returns it.
async fn pushed_until(ws: &mut GqlWs, sub: &str, what: &str, found: impl Fn(&Value) -> bool) -> Value {
    let mut seen = Vec::new();
    loop {
        let Some(message) = ws.recv_within(common::WAIT).await else {
            panic!("nothing pushed before {what}; saw {seen:#?}");
        };
        assert_eq!(message["id"], sub, "{message}");
        assert_eq!(
            message["type"], "next",
            "the subscription ended before {what}; saw {seen:#?}: {message}"
        );
        let event = message["payload"]["data"]["jobEvents"].clone();
        if found(&event) {
            return event;
        }
        seen.push(event);
    }
}

/// Reads `jobEvents` events until each of `found` has matched one (in any order: Kueue's
/// admission and the Job's start are seen by two watchers); returns the matches.
async fn pushed_all<const N: usize>(
    ws: &mut GqlWs,
    sub: &str,
    what: &str,
    found: [&dyn Fn(&Value) -> bool; N],
) -> [Value; N] {
    let mut matched: [Option<Value>; N] = std::array::from_fn(|_| None);
    while matched.iter().any(Option::is_none) {
        let event = pushed_until(ws, sub, what, |e| {
            found.iter().zip(&matched).any(|(f, m)| m.is_none() && f(e))
        })
        .await;
        for (f, m) in found.iter().zip(matched.iter_mut()) {
            if m.is_none() && f(&event) {
                *m = Some(event.clone());
            }
        }
    }
    matched.map(Option::unwrap)
}

/// Every event of the jobs named like `$name`, from the first (no gap, whenever it starts).
const EVENTS: &str = "subscription($name: String!) { jobEvents(after: \"0\", filter: {nameContains: $name}) { \
    phase previousPhase reason message job { queue { state reason message } } } }";

#[tokio::test]
async fn queued_jobs_wait_for_quota_are_admitted_evicted_and_readmitted() {
    let Some(cluster) = kueue_cluster(1).await else {
        return;
    };
    let server = cluster.jobgate(&["--kueue"]).await;

    let first = server
        .submit(gated("first", json!({"queueName": "team-a"})))
        .await;
    server.wait_phase(&first, "RUNNING").await;
    // Kueue's admission and the Job's start are seen by two watchers, in either order.
    let job = server
        .job_until(&first, JOB_FIELDS, "the first job admitted", |j| {
            j["queue"]["state"] == "ADMITTED"
        })
        .await;
    assert_eq!(job["queue"]["clusterQueue"], "cluster-queue", "{job}");
    assert_eq!(job["spec"]["queueName"], "team-a");
    let admitted = common::condition(&job, "Admitted").expect("Kueue's conditions are the job's");
    assert_eq!(admitted["status"], "True", "{job}");

    // The Job was created suspended and labelled for Kueue, which made its Workload.
    let k8s_job = cluster.jobs().get(&job_name(&first)).await.unwrap();
    assert_eq!(
        k8s_job.metadata.labels.as_ref().unwrap()["kueue.x-k8s.io/queue-name"],
        "team-a"
    );
    let workloads: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        cluster.namespace(),
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta1", "Workload"),
            "workloads",
        ),
    );
    let listed = workloads.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "{listed:?}");

    // The second one waits for quota, and says why: in `job`, and pushed.
    let second = server
        .submit(gated(
            "second",
            json!({"queueName": "team-a", "name": "kueue-second"}),
        ))
        .await;
    let polling = Polling::start();
    loop {
        let listed = workloads.list(&ListParams::default()).await.unwrap();
        let pending = listed.items.iter().any(|w| {
            w.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["reason"] == "Pending"))
        });
        if pending {
            break;
        }
        polling
            .pause(|| format!("the second workload never pending: {:#?}", listed.items))
            .await;
    }
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("s", EVENTS, json!({"name": "kueue-second"})).await;
    let pending = pushed_until(&mut ws, "s", "the pending reason", |e| {
        e["job"]["queue"]["state"] == "PENDING" && e["job"]["queue"]["reason"] == "Pending"
    })
    .await;
    assert_eq!(pending["phase"], "PENDING");
    let waiting = server.job_with(&second, JOB_FIELDS).await;
    let why = waiting["queue"]["message"].as_str().unwrap().to_owned();
    assert!(
        why.contains("insufficient unused quota for pods in flavor default-flavor, 1 more needed"),
        "{waiting}"
    );
    assert_eq!(waiting["phase"], "PENDING");
    assert!(
        waiting["message"].as_str().unwrap().contains(&why),
        "the job's message says why it waits: {waiting}"
    );
    let events = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { events { reason message } } }",
            json!({"id": second}),
        )
        .await;
    assert!(
        events["job"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "QueuedPending" && e["message"].as_str().unwrap().contains(&why)),
        "the pending reason is an event of the job: {events}"
    );

    // The first ends: its quota goes to the second, which is admitted (pushed) and runs.
    cluster.emu().simulation().open_gate("first");
    assert_eq!(server.terminal_phase(&first).await, "SUCCEEDED");
    let polling = Polling::start();
    loop {
        let listed = workloads.list(&ListParams::default()).await.unwrap();
        let admitted = listed.items.iter().filter(|w| {
            w.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Admitted" && c["status"] == "True")
            })
        });
        if admitted.count() == 2 {
            break;
        }
        let job = server.job_with(&second, JOB_FIELDS).await;
        polling
            .pause(|| {
                format!(
                    "the second workload never admitted: {:#?}\njob: {job}",
                    listed.items
                )
            })
            .await;
    }
    let [admitted, _] = pushed_all(
        &mut ws,
        "s",
        "the admission and the start",
        [&|e: &Value| e["reason"] == "Admitted", &|e: &Value| {
            e["phase"] == "RUNNING"
        }],
    )
    .await;
    assert!(
        admitted["message"].as_str().unwrap().contains("admitted"),
        "{admitted}"
    );

    // Kueue preempts it: the job says so, goes back to PENDING, and is readmitted (the quota
    // is free again once its pod is gone).
    let evicted = cluster
        .emu()
        .evict_workload(cluster.namespace(), &job_name(&second), true);
    assert!(evicted.is_some(), "the second job's workload holds quota");
    // The watchers of the Workload and of the Job see Kueue's steps in either order: the
    // preemption's event and the move back may come one before the other.
    let [preempted, back, _] = pushed_all(
        &mut ws,
        "s",
        "the preemption, PENDING again, RUNNING again",
        [
            &|e: &Value| e["reason"] == "Preempted",
            &|e: &Value| e["phase"] == "PENDING" && e["previousPhase"] == "RUNNING",
            &|e: &Value| e["phase"] == "RUNNING" && e["previousPhase"] == "PENDING",
        ],
    )
    .await;
    assert!(
        preempted["message"]
            .as_str()
            .unwrap()
            .contains("Preempted to accommodate"),
        "{preempted}"
    );
    assert!(
        back["message"].as_str().unwrap().contains("Kueue queue team-a"),
        "the move back says why: {back}"
    );
    let readmitted = server
        .job_until(&second, JOB_FIELDS, "the second job readmitted", |j| {
            j["queue"]["state"] == "ADMITTED"
        })
        .await;
    let evicted = common::condition(&readmitted, "Evicted").expect("Kueue's Evicted condition");
    assert_eq!(
        evicted["status"], "False",
        "history once readmitted: {readmitted}"
    );
    assert!(
        evicted["message"]
            .as_str()
            .unwrap()
            .starts_with("Previously: Preempted"),
        "{readmitted}"
    );
    cluster.emu().simulation().open_gate("second");
    pushed_until(&mut ws, "s", "SUCCEEDED", |e| e["phase"] == "SUCCEEDED").await;
    let done = server.job_with(&second, JOB_FIELDS).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
}

#[tokio::test]
async fn the_default_queue_applies_to_jobs_that_name_none() {
    let Some(cluster) = kueue_cluster(4).await else {
        return;
    };
    let server = cluster.jobgate(&["--default-queue", "team-a"]).await;
    let id = server.submit(gated("open", json!({}))).await;
    cluster.emu().simulation().open_gate("open");
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    let job = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(job["spec"]["queueName"], "team-a", "{job}");
    assert_eq!(job["queue"]["name"], "team-a", "{job}");
    let k8s_job = cluster.jobs().get(&job_name(&id)).await.unwrap();
    assert_eq!(
        k8s_job.metadata.labels.as_ref().unwrap()["kueue.x-k8s.io/queue-name"],
        "team-a"
    );
}

/// The error code and message of a refused submission.
async fn refused(server: &Server, input: Value) -> (String, String) {
    let answer = server
        .gql(
            "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }",
            json!({"input": input}),
        )
        .await;
    let error = &answer["errors"][0];
    (
        error["extensions"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        error["message"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn kinds_kueue_cannot_queue_refuse_a_queue_name() {
    let Some(cluster) = kueue_cluster(1).await else {
        return;
    };
    cluster.emu().register_workload_crds(&["Workflow"]).unwrap();
    let server = cluster.jobgate(&["--kueue"]).await;
    let (code, message) = refused(
        &server,
        json!({"template": "argo-workflow", "image": "busybox", "command": ["true"], "queueName": "team-a"}),
    )
    .await;
    assert_eq!(code, "BAD_USER_INPUT", "{message}");
    assert!(message.contains("cannot be queued in Kueue"), "{message}");
    assert!(message.contains("Argo"), "it says why: {message}");
    let (code, message) = refused(&server, gated("x", json!({"queueName": "Not A Queue"}))).await;
    assert_eq!(code, "BAD_USER_INPUT", "{message}");
}

#[tokio::test]
async fn without_kueue_no_workload_is_watched_and_queue_names_are_refused() {
    let Some(cluster) = kueue_cluster(1).await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(json!({"image": "busybox", "command": ["echo", "hi"]}))
        .await;
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    let job = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(job["queue"], Value::Null, "{job}");
    // Every watcher starts before the server is ready; none is of Workloads.
    let counts = cluster.emu().requests();
    for verb in ["list", "watch", "get"] {
        assert_eq!(
            counts.of("workloads.kueue.x-k8s.io", verb),
            0,
            "{verb} of Workloads without Kueue: {counts:?}"
        );
    }
    let (code, message) = refused(&server, gated("x", json!({"queueName": "team-a"}))).await;
    assert_eq!(code, "BAD_USER_INPUT", "{message}");
    assert!(message.contains("--kueue"), "{message}");

    // With Kueue, the one watcher of Workloads is there.
    let with = cluster.jobgate(&["--kueue"]).await;
    let polling = Polling::start();
    while cluster.emu().requests().of("workloads.kueue.x-k8s.io", "watch") == 0 {
        polling
            .pause(|| "no watch of Workloads with --kueue".to_owned())
            .await;
    }
    drop(with);
}
