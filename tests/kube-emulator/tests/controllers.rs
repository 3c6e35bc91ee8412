//! The simulated Job controller, kubelet, TTL controller and garbage collector, seen through
//! kube-rs over HTTP exactly as jobgate sees them: Jobs are created with `Api::<Job>::create`,
//! followed with a watch from the creation's resourceVersion (so no state is missed), and pods
//! and logs are read through the API.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube_emulator::Emulator;
use serde_json::{Value, json};

/// Generous: only reached when the behaviour under test is broken.
const WAIT: Duration = Duration::from_secs(30);

async fn emulator() -> (Emulator, kube::Client) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let config = kube::Config::new(emulator.url().parse().expect("emulator url"));
    let client = kube::Client::try_from(config).expect("client");
    (emulator, client)
}

/// A Job running one busybox container with `env`; `spec` is merged into the Job's spec.
fn job(name: &str, spec: Value, env: &[(&str, &str)]) -> Job {
    let env: Vec<Value> = env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    let mut body = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["echo", "hello", name], "env": env}],
        }}},
    });
    if let Some(extra) = spec.as_object() {
        for (k, v) in extra {
            body["spec"][k] = v.clone();
        }
    }
    serde_json::from_value(body).expect("a valid Job")
}

/// Creates the Job and collects every state it goes through (from the creation on) until `done`.
async fn run_until(api: &Api<Job>, job: Job, done: impl Fn(&Job) -> bool) -> Vec<Job> {
    let created = api
        .create(&PostParams::default(), &job)
        .await
        .expect("create job");
    let name = created.metadata.name.clone().unwrap_or_default();
    let rv = created.metadata.resource_version.clone().unwrap_or_default();
    follow_from(api, &name, &rv, created, done).await
}

async fn follow_from(
    api: &Api<Job>,
    name: &str,
    rv: &str,
    first: Job,
    done: impl Fn(&Job) -> bool,
) -> Vec<Job> {
    let mut states = vec![first];
    if done(&states[0]) {
        return states;
    }
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = api.watch(&params, rv).await.expect("watch").boxed();
    let result = tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.try_next().await.expect("watch stream") {
            match event {
                WatchEvent::Added(j) | WatchEvent::Modified(j) => {
                    let finished = done(&j);
                    states.push(j);
                    if finished {
                        return;
                    }
                }
                WatchEvent::Deleted(j) => panic!("job deleted while followed: {:?}", j.status),
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("watch error: {e:?}"),
            }
        }
        panic!("watch ended");
    })
    .await;
    if result.is_err() {
        panic!(
            "job {name} never reached the expected state; last status: {:?}",
            states.last().and_then(|j| j.status.clone())
        );
    }
    states
}

fn true_conditions(job: &Job) -> Vec<String> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| {
            cs.iter()
                .filter(|c| c.status == "True")
                .map(|c| c.type_.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn has(job: &Job, kind: &str) -> bool {
    true_conditions(job).iter().any(|c| c == kind)
}

fn finished(job: &Job) -> bool {
    has(job, "Complete") || has(job, "Failed")
}

fn final_reason(job: &Job) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" || c.type_ == "Complete")?
        .reason
        .clone()
}

async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .expect("list pods")
        .items
}

/// Polls (cheaply, with a generous bound) until `check` holds.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let ok = tokio::time::timeout(WAIT, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out waiting for {what}");
}

#[tokio::test]
async fn one_completion_job_succeeds_with_the_real_condition_sequence() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let states = run_until(&jobs, job("pi", json!({}), &[]), finished).await;
    let met = states
        .iter()
        .position(|j| has(j, "SuccessCriteriaMet"))
        .expect("SuccessCriteriaMet seen");
    let complete = states
        .iter()
        .position(|j| has(j, "Complete"))
        .expect("Complete seen");
    assert!(
        met < complete,
        "SuccessCriteriaMet must come in an earlier write than Complete"
    );
    assert!(
        states
            .iter()
            .any(|j| j.status.as_ref().and_then(|s| s.active) == Some(1)),
        "the pod was active at some point"
    );

    let last = states.last().expect("final state");
    assert_eq!(true_conditions(last), ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(final_reason(last).as_deref(), Some("CompletionsReached"));
    let status = last.status.clone().expect("status");
    assert_eq!(status.succeeded, Some(1));
    assert_eq!(status.active, None);
    assert_eq!(status.failed, None);
    assert_eq!(status.ready, Some(0));
    assert_eq!(status.terminating, Some(0));
    assert!(status.start_time.is_some() && status.completion_time.is_some());

    let pods = pods_of(&Api::namespaced(client, "default"), "pi").await;
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    assert!(
        pod.metadata.finalizers.as_ref().is_none_or(Vec::is_empty),
        "the tracking finalizer is removed once counted"
    );
    assert_eq!(emulator.simulation().pods_created(), 1);
    emulator.shutdown().await;
}

#[tokio::test]
async fn indexed_job_keeps_parallelism_and_completes_every_index() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let spec = json!({"completions": 4, "parallelism": 2, "completionMode": "Indexed"});
    let states = run_until(&jobs, job("idx", spec, &[("EMULATOR_RUN_MS", "40")]), finished).await;
    for state in &states {
        let active = state.status.as_ref().and_then(|s| s.active).unwrap_or(0);
        assert!(
            active <= 2,
            "never more than parallelism active pods, saw {active}"
        );
    }
    let last = states.last().expect("final state");
    assert!(has(last, "Complete"));
    let status = last.status.clone().expect("status");
    assert_eq!(status.completed_indexes.as_deref(), Some("0-3"));
    assert_eq!(status.succeeded, Some(4));

    let pods = pods_of(&Api::namespaced(client, "default"), "idx").await;
    let mut indexes: Vec<String> = pods
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get("batch.kubernetes.io/job-completion-index")
                .cloned()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2", "3"]);
    emulator.shutdown().await;
}

#[tokio::test]
async fn failing_job_stops_at_the_backoff_limit() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let states = run_until(
        &jobs,
        job("fail", json!({"backoffLimit": 2}), &[("EMULATOR_EXIT_CODE", "1")]),
        finished,
    )
    .await;
    let last = states.last().expect("final state");
    assert_eq!(true_conditions(last), ["FailureTarget", "Failed"]);
    assert_eq!(final_reason(last).as_deref(), Some("BackoffLimitExceeded"));
    let status = last.status.clone().expect("status");
    assert_eq!(status.failed, Some(3));
    assert!(status.completion_time.is_none());
    let pods = pods_of(&Api::namespaced(client, "default"), "fail").await;
    assert_eq!(pods.len(), 3);
    assert!(
        pods.iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
    );
    assert_eq!(emulator.simulation().pods_created(), 3);
    emulator.shutdown().await;
}

#[tokio::test]
async fn fail_attempts_are_retried_then_the_job_succeeds() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client, "default");
    let states = run_until(
        &jobs,
        job(
            "flaky",
            json!({"backoffLimit": 3}),
            &[("EMULATOR_FAIL_ATTEMPTS", "2")],
        ),
        finished,
    )
    .await;
    let last = states.last().expect("final state");
    assert!(has(last, "Complete"), "{:?}", true_conditions(last));
    let status = last.status.clone().expect("status");
    assert_eq!((status.failed, status.succeeded), (Some(2), Some(1)));
    assert_eq!(emulator.simulation().pods_created(), 3);
    emulator.shutdown().await;
}

#[tokio::test]
async fn active_deadline_fails_the_job_with_deadline_exceeded() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let spec = json!({"activeDeadlineSeconds": 1});
    let states = run_until(
        &jobs,
        job("late", spec, &[("EMULATOR_RUN_MS", "600000")]),
        finished,
    )
    .await;
    let last = states.last().expect("final state");
    assert_eq!(true_conditions(last), ["FailureTarget", "Failed"]);
    assert_eq!(final_reason(last).as_deref(), Some("DeadlineExceeded"));
    let pods: Api<Pod> = Api::namespaced(client, "default");
    eventually("the running pod to be stopped and removed", || async {
        pods_of(&pods, "late").await.is_empty()
    })
    .await;
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_gate_holds_the_pod_running_until_opened() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let states = run_until(
        &jobs,
        job(
            "held",
            json!({}),
            &[("EMULATOR_GATE", "release"), ("EMULATOR_RUN_MS", "0")],
        ),
        |j| j.status.as_ref().and_then(|s| s.ready) == Some(1),
    )
    .await;
    // Well past its run time, the pod is still running and the Job unfinished.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pod = pods_of(&pods, "held").await.pop().expect("a pod");
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    let current = jobs.get("held").await.expect("job");
    assert!(!finished(&current));

    emulator.simulation().open_gate("release");
    let rv = current.metadata.resource_version.clone().unwrap_or_default();
    let last = follow_from(&jobs, "held", &rv, current, finished)
        .await
        .pop()
        .expect("final state");
    assert!(has(&last, "Complete"));
    drop(states);
    emulator.shutdown().await;
}

#[tokio::test]
async fn termination_messages_and_the_log_fallback() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");

    let env = [("EMULATOR_TERMINATION_MESSAGE", "result for {pod}")];
    run_until(&jobs, job("msg", json!({}), &env), finished).await;
    let pod = pods_of(&pods, "msg").await.pop().expect("pod");
    let name = pod.metadata.name.clone().unwrap_or_default();
    let terminated = pod
        .status
        .and_then(|s| s.container_statuses?.pop()?.state?.terminated)
        .expect("terminated");
    assert_eq!(
        terminated.message.as_deref(),
        Some(format!("result for {name}").as_str())
    );
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (0, Some("Completed"))
    );

    let mut failing = job(
        "tail",
        json!({"backoffLimit": 0}),
        &[("EMULATOR_EXIT_CODE", "2"), ("EMULATOR_LOG", "first\nlast words")],
    );
    if let Some(spec) = failing.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.containers[0].termination_message_policy = Some("FallbackToLogsOnError".to_owned());
    }
    let last = run_until(&jobs, failing, finished)
        .await
        .pop()
        .expect("final state");
    assert!(has(&last, "Failed"));
    let pod = pods_of(&pods, "tail").await.pop().expect("pod");
    let terminated = pod
        .status
        .and_then(|s| s.container_statuses?.pop()?.state?.terminated)
        .expect("terminated");
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (2, Some("Error"))
    );
    assert_eq!(terminated.message.as_deref(), Some("first\nlast words\n"));
    emulator.shutdown().await;
}

#[tokio::test]
async fn pod_logs_are_readable_through_kube_rs() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    run_until(&jobs, job("say", json!({}), &[]), finished).await;
    let pod = pods_of(&pods, "say").await.pop().expect("pod");
    let name = pod.metadata.name.clone().unwrap_or_default();
    let echoed = pods.logs(&name, &LogParams::default()).await.expect("logs");
    assert_eq!(
        echoed.lines().collect::<Vec<_>>(),
        ["hello say"],
        "the default log is what echo prints"
    );

    run_until(
        &jobs,
        job("lines", json!({}), &[("EMULATOR_LOG", "one\ntwo\nthree")]),
        finished,
    )
    .await;
    let pod = pods_of(&pods, "lines").await.pop().expect("pod");
    let name = pod.metadata.name.clone().unwrap_or_default();
    let all = pods.logs(&name, &LogParams::default()).await.expect("logs");
    assert_eq!(all.lines().collect::<Vec<_>>(), ["one", "two", "three"]);
    let tail = pods
        .logs(
            &name,
            &LogParams {
                tail_lines: Some(1),
                ..LogParams::default()
            },
        )
        .await
        .expect("tail");
    assert_eq!(tail.lines().collect::<Vec<_>>(), ["three"]);
    emulator.shutdown().await;
}

#[tokio::test]
async fn ttl_deletes_the_finished_job_and_the_collector_its_pods() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let states = run_until(
        &jobs,
        job("short", json!({"ttlSecondsAfterFinished": 1}), &[]),
        finished,
    )
    .await;
    let uid = states[0].metadata.uid.clone().unwrap_or_default();
    let gone = tokio::time::timeout(
        WAIT,
        await_condition(jobs.clone(), "short", conditions::is_deleted(&uid)),
    )
    .await;
    assert!(
        matches!(gone, Ok(Ok(_))),
        "the TTL controller deletes the finished Job"
    );
    eventually("its pods to be collected", || async {
        pods_of(&pods, "short").await.is_empty()
    })
    .await;
    emulator.shutdown().await;
}

#[tokio::test]
async fn deleting_a_running_job_in_background_removes_its_pods() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let spec = json!({"parallelism": 2, "completions": 2});
    run_until(&jobs, job("long", spec, &[("EMULATOR_RUN_MS", "600000")]), |j| {
        j.status.as_ref().and_then(|s| s.ready) == Some(2)
    })
    .await;
    assert_eq!(pods_of(&pods, "long").await.len(), 2);
    jobs.delete("long", &DeleteParams::background())
        .await
        .expect("delete");
    eventually("the job to go", || async {
        jobs.get_opt("long").await.ok().flatten().is_none()
    })
    .await;
    eventually("its pods to go", || async {
        pods_of(&pods, "long").await.is_empty()
    })
    .await;
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_paused_job_controller_syncs_nothing_until_resumed() {
    let (emulator, client) = emulator().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let running = |j: &Job| j.status.as_ref().and_then(|s| s.ready) == Some(1);
    run_until(
        &jobs,
        job("first", json!({}), &[("EMULATOR_GATE", "end")]),
        running,
    )
    .await;
    emulator.simulation().pause_job_controller();
    // The kubelet goes on: the running pod ends, and a pod of no Job runs to its end.
    emulator.simulation().open_gate("end");
    let second = jobs
        .create(&PostParams::default(), &job("second", json!({}), &[]))
        .await
        .expect("create job");
    let witness: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "witness"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }))
    .expect("a valid Pod");
    pods.create(&PostParams::default(), &witness)
        .await
        .expect("create pod");
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    let pods_ref = &pods;
    eventually("the kubelet ends both pods", || async move {
        let witness = pods_ref.get("witness").await.expect("the witness");
        let ended = pods_of(pods_ref, "first").await;
        phase(&witness).as_deref() == Some("Succeeded")
            && ended.iter().all(|p| phase(p).as_deref() == Some("Succeeded"))
    })
    .await;
    // Meanwhile the Job controller counted nothing and created nothing.
    let held = jobs.get("first").await.expect("the first job");
    let status = held.status.clone().unwrap_or_default();
    assert_eq!(
        status.succeeded.unwrap_or(0),
        0,
        "its pod's end is not counted: {status:?}"
    );
    let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    assert!(uncounted.succeeded.unwrap_or_default().is_empty(), "{status:?}");
    assert_eq!(status.active, Some(1), "{status:?}");
    assert!(!finished(&held));
    assert!(
        pods_of(&pods, "second").await.is_empty(),
        "no pod for the new Job"
    );
    let unsynced = jobs.get("second").await.expect("the second job");
    assert!(
        unsynced.status.as_ref().is_none_or(|s| s.start_time.is_none()),
        "{:?}",
        unsynced.status
    );

    emulator.simulation().resume_job_controller();
    let rv = held.metadata.resource_version.clone().unwrap_or_default();
    let last = follow_from(&jobs, "first", &rv, held, finished)
        .await
        .pop()
        .expect("its end");
    assert!(has(&last, "Complete"), "{:?}", last.status);
    let rv = second.metadata.resource_version.clone().unwrap_or_default();
    let last = follow_from(&jobs, "second", &rv, second, finished)
        .await
        .pop()
        .expect("its end");
    assert!(has(&last, "Complete"), "{:?}", last.status);
    emulator.shutdown().await;
}
