//! The simulated controllers at a real cluster's pace (`Options::real_cluster`), seen through
//! kube-rs: the Job controller's 1 s status batching, its pod-failure back-off (10 s, doubling
//! per consecutive failure, reset by a success) and the kubelet's 30 s termination grace.
//!
//! The profile's own durations run here, unscaled (the emulator has no virtual clock): the slow
//! scenarios share one test and run side by side, about 30 s in all. Every assertion is about what the
//! emulator did, read from the objects' own timestamps and resourceVersions: a thing did not
//! happen before the profile's delay elapsed, and (for the back-off) it happened before the next
//! step of the delay would have elapsed, which tells 10 s from 20 s whatever this machine's pace.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use either::Either;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube_emulator::{Emulator, Options};
use serde_json::{Value, json};

/// Generous: only reached when the behaviour under test is broken. The back-off tests wait
/// 10 s + 20 s of back-off.
const WAIT: Duration = Duration::from_secs(120);

async fn real_cluster() -> (Emulator, kube::Client) {
    let emulator = Emulator::start_with(Options::real_cluster())
        .await
        .expect("emulator starts");
    let config = kube::Config::new(emulator.url().parse().expect("emulator url"));
    let client = kube::Client::try_from(config).expect("client");
    (emulator, client)
}

fn env(pairs: &[(&str, &str)]) -> Value {
    pairs
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect()
}

/// A Job running one container scripted by `script`; `spec` is merged into the Job's spec.
fn job(name: &str, spec: Value, script: &[(&str, &str)]) -> Job {
    let mut body = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "env": env(script)}],
        }}},
    });
    if let Some(extra) = spec.as_object() {
        for (k, v) in extra {
            body["spec"][k] = v.clone();
        }
    }
    serde_json::from_value(body).expect("a valid Job")
}

/// A bare pod running one container scripted by `script`.
fn pod(name: &str, script: &[(&str, &str)]) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "env": env(script)}],
        },
    }))
    .expect("a valid Pod")
}

fn rv(meta: &kube::api::ObjectMeta) -> String {
    meta.resource_version.clone().expect("a resourceVersion")
}

fn rv_number(meta: &kube::api::ObjectMeta) -> u64 {
    rv(meta).parse().expect("a numeric resourceVersion")
}

fn time(value: &Value, pointer: &str) -> DateTime<Utc> {
    let text = value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} in {value}"));
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{pointer} = {text}: {e}"))
        .with_timezone(&Utc)
}

/// `(creationTimestamp, finishedAt, exit code)` of a finished single-container pod.
fn created_finished_code(pod: &Pod) -> (DateTime<Utc>, DateTime<Utc>, i64) {
    let value = serde_json::to_value(pod).expect("pod as JSON");
    let terminated = "/status/containerStatuses/0/state/terminated";
    (
        time(&value, "/metadata/creationTimestamp"),
        time(&value, &format!("{terminated}/finishedAt")),
        value
            .pointer(&format!("{terminated}/exitCode"))
            .and_then(Value::as_i64)
            .expect("an exit code"),
    )
}

fn seconds(d: chrono::TimeDelta) -> f64 {
    d.as_seconds_f64()
}

/// Follows the Job from `from` (a resourceVersion) until `done`, returning every state seen
/// with the instant it arrived.
async fn follow_job(
    jobs: &Api<Job>,
    name: &str,
    from: &str,
    done: impl Fn(&Job) -> bool,
) -> Vec<(Job, Instant)> {
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = jobs.watch(&params, from).await.expect("watch").boxed();
    let mut states = Vec::new();
    let followed = tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.try_next().await.expect("watch stream") {
            match event {
                WatchEvent::Added(j) | WatchEvent::Modified(j) => {
                    let finished = done(&j);
                    states.push((j, Instant::now()));
                    if finished {
                        return;
                    }
                }
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected watch event: {other:?}"),
            }
        }
        panic!("watch ended");
    })
    .await;
    if followed.is_err() {
        panic!(
            "job {name} never reached the expected state; last status: {:?}",
            states.last().and_then(|(j, _)| j.status.clone())
        );
    }
    states
}

fn complete(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
}

fn ready(job: &Job) -> i32 {
    job.status.as_ref().and_then(|s| s.ready).unwrap_or(0)
}

async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .expect("list pods")
        .items
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn pod_changes_within_the_batch_period_reach_the_job_status_in_one_update() {
    let (emulator, client) = real_cluster().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let before = Instant::now();
    let created = jobs
        .create(
            &PostParams::default(),
            &job(
                "batched",
                json!({"parallelism": 3, "completions": 3}),
                &[("EMULATOR_GATE", "hold"), ("EMULATOR_RUN_MS", "0")],
            ),
        )
        .await
        .expect("create job");
    let from = rv(&created.metadata);
    let states = follow_job(&jobs, "batched", &from, |j| ready(j) == 3).await;
    let (all_ready, seen_at) = states.last().expect("the update with every pod ready");

    // The three pods became ready in writes of their own, after the Job's first status write
    // (active 3, its pods just created) and before the update that counts them.
    let first_status = states
        .iter()
        .find(|(j, _)| j.status.as_ref().and_then(|s| s.active) == Some(3))
        .map(|(j, _)| rv_number(&j.metadata))
        .expect("a status write with the three pods active");
    let counted = rv_number(&all_ready.metadata);
    let mut pod_events = pods
        .watch(
            &WatchParams::default().labels("batch.kubernetes.io/job-name=batched"),
            &from,
        )
        .await
        .expect("watch pods")
        .boxed();
    let mut became_ready = Vec::new();
    while became_ready.len() < 3 {
        let event = tokio::time::timeout(WAIT, pod_events.try_next())
            .await
            .expect("pod events in time")
            .expect("pod watch")
            .expect("pod watch open");
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) = event
            && pod_ready(&p)
            && !became_ready.iter().any(|(name, _)| *name == p.metadata.name)
        {
            became_ready.push((p.metadata.name.clone(), rv_number(&p.metadata)));
        }
    }
    for (name, at) in &became_ready {
        assert!(
            first_status < *at && *at < counted,
            "pod {name:?} became ready at resourceVersion {at}, between the Job's writes {first_status} and {counted}"
        );
    }
    let mut versions: Vec<u64> = became_ready.iter().map(|(_, at)| *at).collect();
    versions.dedup();
    assert_eq!(versions.len(), 3, "three separate pod writes: {became_ready:?}");

    // One update carries all three: no Job update in between, no partial count ever.
    let between: Vec<_> = states
        .iter()
        .map(|(j, _)| (rv_number(&j.metadata), ready(j)))
        .filter(|(at, _)| first_status < *at && *at < counted)
        .collect();
    assert!(between.is_empty(), "Job updates inside the batch: {between:?}");
    let partial: Vec<i32> = states
        .iter()
        .map(|(j, _)| ready(j))
        .filter(|r| (1..3).contains(r))
        .collect();
    assert!(
        partial.is_empty(),
        "partial ready counts were written: {partial:?}"
    );

    // And it was not written before the batch period (1 s) had passed since the first change.
    let waited = seen_at.duration_since(before);
    assert!(
        waited >= Duration::from_secs(1),
        "the pods' changes reached the Job's status after {waited:?}, before the 1 s batch period"
    );
    emulator.shutdown().await;
}

/// Two failures, then a success: the replacements wait 10 s, then 20 s.
async fn replacement_pods_wait_10s_then_20s_after_consecutive_failures(client: kube::Client) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let created = jobs
        .create(
            &PostParams::default(),
            &job(
                "doubling",
                json!({"backoffLimit": 6}),
                &[("EMULATOR_FAIL_ATTEMPTS", "2"), ("EMULATOR_FAIL_EXIT_CODE", "3")],
            ),
        )
        .await
        .expect("create job");
    follow_job(&jobs, "doubling", &rv(&created.metadata), complete).await;

    let mut runs: Vec<_> = pods_of(&pods, "doubling")
        .await
        .iter()
        .map(created_finished_code)
        .collect();
    runs.sort_by_key(|(created, _, _)| *created);
    let codes: Vec<i64> = runs.iter().map(|(_, _, code)| *code).collect();
    assert_eq!(codes, [3, 3, 0], "two failures, then a success: {runs:?}");
    let first_wait = seconds(runs[1].0 - runs[0].1);
    let second_wait = seconds(runs[2].0 - runs[1].1);
    assert!(
        (10.0..20.0).contains(&first_wait),
        "after one failure the replacement came {first_wait} s after it, not 10 s: {runs:?}"
    );
    assert!(
        (20.0..40.0).contains(&second_wait),
        "after two consecutive failures the replacement came {second_wait} s after the last, not 20 s: {runs:?}"
    );
}

/// Fail, succeed, fail, succeed: the failure after the success waits 10 s again, not 20 s.
async fn a_success_resets_the_pod_failure_back_off(client: kube::Client) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    // One pod at a time; each index fails once, then succeeds: fail, success, fail, success.
    let created = jobs
        .create(
            &PostParams::default(),
            &job(
                "resets",
                json!({"completionMode": "Indexed", "completions": 2, "parallelism": 1, "backoffLimit": 6}),
                &[("EMULATOR_FAIL_ATTEMPTS", "1"), ("EMULATOR_FAIL_EXIT_CODE", "3")],
            ),
        )
        .await
        .expect("create job");
    follow_job(&jobs, "resets", &rv(&created.metadata), complete).await;

    let all = pods_of(&pods, "resets").await;
    let run = |index: &str, code: i64| {
        let found: Vec<_> = all
            .iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("batch.kubernetes.io/job-completion-index"))
                    .map(String::as_str)
                    == Some(index)
            })
            .map(created_finished_code)
            .filter(|(_, _, c)| *c == code)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one run of index {index} exiting {code}: {found:?}"
        );
        found[0]
    };
    let (first_fail, first_ok, second_fail, second_ok) = (run("0", 3), run("0", 0), run("1", 3), run("1", 0));
    let after_first_failure = seconds(first_ok.0 - first_fail.1);
    assert!(
        (10.0..20.0).contains(&after_first_failure),
        "the first failure's replacement came {after_first_failure} s after it, not 10 s"
    );
    let after_success = seconds(second_fail.0 - first_ok.1);
    assert!(
        after_success < 10.0,
        "after a success the next pod waited {after_success} s: the success must reset the back-off"
    );
    let after_second_failure = seconds(second_ok.0 - second_fail.1);
    assert!(
        (10.0..20.0).contains(&after_second_failure),
        "a failure after a success is the first of its run: its replacement came {after_second_failure} s after it, not 10 s"
    );
}

/// Deletes the running pod `name` with the default grace and returns it as the deletion left
/// it, after checking the grace period it was given.
async fn delete_running(pods: &Api<Pod>, name: &str) -> Pod {
    tokio::time::timeout(
        WAIT,
        await_condition(pods.clone(), name, conditions::is_pod_running()),
    )
    .await
    .expect("the pod runs in time")
    .expect("wait for the pod");
    let deleting = match pods.delete(name, &DeleteParams::default()).await.expect("delete") {
        Either::Left(pod) => pod,
        Either::Right(status) => panic!("a running pod is not removed at once: {status:?}"),
    };
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(30));
    assert!(deleting.metadata.deletion_timestamp.is_some());
    deleting
}

/// Follows the deleted pod until its container has terminated; returns that state as JSON.
async fn terminated_state(pods: &Api<Pod>, deleting: &Pod) -> Value {
    let name = deleting.metadata.name.clone().expect("a name");
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = pods
        .watch(&params, &rv(&deleting.metadata))
        .await
        .expect("watch")
        .boxed();
    tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.try_next().await.expect("watch stream") {
            if let WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) = event {
                let value = serde_json::to_value(&p).expect("pod as JSON");
                if value
                    .pointer("/status/containerStatuses/0/state/terminated")
                    .is_some()
                {
                    return value;
                }
            }
        }
        panic!("watch ended before the container terminated");
    })
    .await
    .expect("the container terminates in time")
}

/// A container that does not exit on SIGTERM is killed (137) when the 30 s grace ends.
async fn a_deleted_running_pod_is_killed_with_137_when_its_30s_grace_ends(client: kube::Client) {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    // The gate never opens: the container would run for ever.
    pods.create(
        &PostParams::default(),
        &pod(
            "stubborn",
            &[("EMULATOR_GATE", "never"), ("EMULATOR_RUN_MS", "0")],
        ),
    )
    .await
    .expect("create pod");
    let deleting = delete_running(&pods, "stubborn").await;
    let pod = terminated_state(&pods, &deleting).await;
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 137, "{terminated}");
    assert_eq!(terminated["reason"], "Error", "{terminated}");
    assert_eq!(pod["status"]["phase"], "Failed");
    // deletionTimestamp is the deletion's time plus the 30 s grace.
    let grace_ends = time(&pod, "/metadata/deletionTimestamp");
    let finished = time(&pod, "/status/containerStatuses/0/state/terminated/finishedAt");
    assert!(
        finished >= grace_ends,
        "killed at {finished}, before its grace period ended at {grace_ends}"
    );
}

#[tokio::test]
async fn a_deleted_pod_whose_container_exits_during_its_grace_stops_then_with_its_own_code() {
    let (emulator, client) = real_cluster().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(
        &PostParams::default(),
        &pod(
            "finishing",
            &[("EMULATOR_GATE", "finish"), ("EMULATOR_RUN_MS", "0")],
        ),
    )
    .await
    .expect("create pod");
    let deleting = delete_running(&pods, "finishing").await;
    // Its program ends on its own, well inside the grace period.
    emulator.simulation().open_gate("finish");
    let pod = terminated_state(&pods, &deleting).await;
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 0, "{terminated}");
    assert_eq!(terminated["reason"], "Completed", "{terminated}");
    assert_eq!(pod["status"]["phase"], "Succeeded");
    let grace_ends = time(&pod, "/metadata/deletionTimestamp");
    let finished = time(&pod, "/status/containerStatuses/0/state/terminated/finishedAt");
    assert!(
        finished < grace_ends,
        "finished at {finished}, not before the grace ended at {grace_ends}"
    );
    emulator.shutdown().await;
}

/// The three slow scenarios (about 30 s, 22 s and 30 s of the profile's own delays) run side by
/// side in one test, on one emulator, so that they hold one of the test runner's slots for
/// about 30 s rather than three slots for as long. Each names what broke when it panics.
#[tokio::test]
async fn back_off_and_termination_grace_take_the_real_durations() {
    let (emulator, client) = real_cluster().await;
    tokio::join!(
        replacement_pods_wait_10s_then_20s_after_consecutive_failures(client.clone()),
        a_success_resets_the_pod_failure_back_off(client.clone()),
        a_deleted_running_pod_is_killed_with_137_when_its_30s_grace_ends(client),
    );
    emulator.shutdown().await;
}
