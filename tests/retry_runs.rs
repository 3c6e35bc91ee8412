//! Retry rules over time, restarts and templates, over the real server: the local executor's
//! back-off kept per index with `backoffLimitPerIndex` (as the Job controller keeps it), a
//! kill -9 of jobgate between the failures of an indexed job on both executors (the local
//! executor resumes each index's count and back-off; on Kubernetes the Job goes on without
//! jobgate), and a batch/v1 Job template with `takesRetryPolicy` whose Job the emulated Job
//! controller fails by its `podFailurePolicy`.
//!
//! Times are compared with each other and with the back-off configured, never with the test's
//! own clock: each back-off is a lower bound the executor guarantees between a run's end and
//! the next run of the index it holds back.

mod common;

use chrono::{DateTime, Utc};
use common::Server;
use common::cluster::Cluster;
use serde_json::{Value, json};

/// The fields read of a finished job.
const FIELDS: &str = "phase progress { succeeded failed } conditions { type status reason message } \
    attempts { index number state startedAt finishedAt cause reason }";

fn time(attempt: &Value, field: &str) -> DateTime<Utc> {
    let text = attempt[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {attempt}"));
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{field} {text:?}: {e}"))
        .with_timezone(&Utc)
}

/// The attempts of `index`, by number.
fn attempts_of(job: &Value, index: i64) -> Vec<Value> {
    let mut runs: Vec<Value> = job["attempts"]
        .as_array()
        .unwrap_or_else(|| panic!("no attempts: {job}"))
        .iter()
        .filter(|a| a["index"] == index)
        .cloned()
        .collect();
    runs.sort_by_key(|a| a["number"].as_i64());
    runs
}

/// The indexes none of whose attempts succeeded: the failed indexes of a finished job.
fn failed_indexes(job: &Value, completions: i64) -> Vec<i64> {
    (0..completions)
        .filter(|i| !attempts_of(job, *i).iter().any(|a| a["state"] == "SUCCEEDED"))
        .collect()
}

/// At least `millis` passed from `earlier`'s end to `later`'s start.
fn waited(earlier: &Value, later: &Value, millis: i64, what: &str) {
    let gap = time(later, "startedAt") - time(earlier, "finishedAt");
    assert!(
        gap >= chrono::Duration::milliseconds(millis),
        "{what}: {gap} between {earlier} and {later}"
    );
}

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

#[tokio::test]
async fn with_backoff_limit_per_index_each_index_backs_off_on_its_own_failures() {
    let server = Server::start(&[]).await;
    // Index 0 fails twice, then succeeds. Index 1 fails once, after index 0's second failure,
    // then succeeds. (It waits a second more so that, were the back-off the job's, its failure
    // would surely be the job's third; the assertions below do not depend on it.)
    let script = r#"i=$JOB_COMPLETION_INDEX; n=$(( $(cat "runs-$i" 2>/dev/null || echo 0) + 1 )); echo $n > "runs-$i"
case "$i.$n" in
  0.1|0.2) touch "failed-0-$n"; exit 1;;
  1.1) while [ ! -e failed-0-2 ]; do sleep 0.05; done; sleep 1; exit 1;;
esac
exit 0"#;
    let id = server
        .submit(json!({
            "command": sh(script),
            "completions": 2,
            "parallelism": 2,
            "retryPolicy": {
                "backoffLimitPerIndex": 5,
                "backoff": {"initialSeconds": 1.5, "factor": 10, "maxSeconds": 15},
            },
        }))
        .await;
    server.wait_terminal(&id).await;
    let job = server.job_with(&id, FIELDS).await;
    assert_eq!(job["phase"], "SUCCEEDED", "{job}");
    assert_eq!(job["progress"]["failed"], 3, "{job}");
    let (first, second) = (attempts_of(&job, 0), attempts_of(&job, 1));
    assert_eq!((first.len(), second.len()), (3, 2), "{job}");
    // Each index waits for its own back-off: 1.5 s after its first failure, 15 s after its
    // second (1.5 × 10).
    waited(&first[0], &first[1], 1500, "index 0's first back-off");
    waited(&first[1], &first[2], 15_000, "index 0's second back-off");
    waited(&second[0], &second[1], 1500, "index 1's first back-off");
    // Index 1's failure is its first: its retry waits 1.5 s, not the 15 s the job's third
    // failure would, so it starts while index 0 still backs off (at least 15 s from its second
    // failure, which index 1's first run waited for before it failed).
    assert!(
        time(&second[1], "startedAt") < time(&first[2], "startedAt"),
        "index 1's retry waited for index 0's back-off: {job}"
    );
}

/// The `SubmitJobInput` of the restart tests: three indexes, index 1 always failing, one
/// failure allowed per index and one failed index per job.
fn per_index_job(extra: Value) -> Value {
    let mut input = json!({
        "completions": 3,
        "parallelism": 3,
        "retryPolicy": {"backoffLimitPerIndex": 1, "maxFailedIndexes": 1},
    });
    let object = input.as_object_mut().unwrap();
    for (k, v) in extra.as_object().unwrap() {
        if k == "retryPolicy" {
            object["retryPolicy"]
                .as_object_mut()
                .unwrap()
                .extend(v.as_object().unwrap().clone());
        } else {
            object.insert(k.clone(), v.clone());
        }
    }
    input
}

/// Checks the outcome both executors give the restart tests' job.
fn check_failed_indexes(job: &Value, failed: i64) {
    assert_eq!(job["phase"], "FAILED", "{job}");
    let c = common::condition(job, "Failed").unwrap_or_else(|| panic!("no Failed: {job}"));
    assert_eq!(c["reason"], "FailedIndexes", "{job}");
    assert_eq!(c["message"], "Job has failed indexes", "{job}");
    assert_eq!(job["progress"]["succeeded"], 2, "{job}");
    assert_eq!(job["progress"]["failed"], failed, "{job}");
    assert_eq!(failed_indexes(job, 3), [1], "{job}");
    let index_1 = attempts_of(job, 1);
    assert_eq!(index_1.len(), 2, "index 1 failed on its second failure: {job}");
    assert!(index_1.iter().all(|a| a["state"] == "FAILED"), "{job}");
}

#[tokio::test]
async fn a_kill_9_between_failures_resumes_each_indexs_count_and_back_off() {
    let mut server = Server::spawn(&[]).await;
    // Index 1 always fails; indexes 0 and 2 run until the file `go` exists.
    let script = r#"if [ "$JOB_COMPLETION_INDEX" = 1 ]; then exit 3; fi
while [ ! -e go ]; do sleep 0.05; done"#;
    let id = server
        .submit(per_index_job(json!({
            "command": sh(script),
            "retryPolicy": {"backoff": {"initialSeconds": 5, "factor": 1}},
        })))
        .await;
    // Index 1 has failed once and backs off for 5 s; indexes 0 and 2 run (on record).
    server
        .job_until(&id, FIELDS, "index 1 failed once, 0 and 2 running", |j| {
            j["progress"]["failed"] == 1
                && [0, 2].iter().all(|i| {
                    attempts_of(j, *i)
                        .first()
                        .is_some_and(|a| a["state"] == "RUNNING")
                })
        })
        .await;
    server.kill9();
    let server = server.start_again(&[]).await;
    std::fs::write(server.work_dir(&id).join("go"), "").unwrap();
    server.wait_terminal(&id).await;
    let job = server.job_with(&id, FIELDS).await;
    // Index 1's failure before the restart still counts: its next one fails it. The runs of
    // indexes 0 and 2 lost in the restart count as failures of their indexes, one each (as
    // many as the limit allows), and their next runs succeed.
    check_failed_indexes(&job, 4);
    for index in [0, 2] {
        let runs = attempts_of(&job, index);
        assert_eq!(runs.len(), 2, "{job}");
        assert_eq!(
            (&runs[0]["cause"], &runs[0]["reason"]),
            (&json!("GATEWAY_RESTARTED"), &json!("GatewayRestarted")),
            "{job}"
        );
        assert_eq!(runs[1]["state"], "SUCCEEDED", "{job}");
    }
    // The back-off index 1 was in when jobgate was killed held after the restart.
    let index_1 = attempts_of(&job, 1);
    waited(
        &index_1[0],
        &index_1[1],
        5000,
        "index 1's back-off across the restart",
    );
}

#[tokio::test]
async fn on_kubernetes_a_kill_9_between_failures_leaves_the_job_to_its_controller() {
    let Some(cluster) =
        Cluster::emulated("it scripts pods through EMULATOR_FAIL_INDEXES and EMULATOR_GATE").await
    else {
        return;
    };
    let mut server = cluster.spawn_jobgate(&[]).await;
    let simulation = cluster.emu().simulation();
    // Index 1's pods fail at once; those of indexes 0 and 2 run until their gate opens.
    simulation.open_gate("job-1");
    let id = server
        .submit(per_index_job(json!({
            "image": "busybox:1.36",
            "command": ["run"],
            "env": [
                {"name": "EMULATOR_FAIL_INDEXES", "value": "1"},
                {"name": "EMULATOR_FAIL_EXIT_CODE", "value": "3"},
                {"name": "EMULATOR_GATE", "value": "job-{index}"},
            ],
        })))
        .await;
    server
        .job_until(&id, FIELDS, "index 1 failed", |j| {
            j["progress"]["failed"].as_i64() >= Some(1)
        })
        .await;
    server.kill9();
    // The Job controller goes on: index 1 fails again, and fails.
    let name = format!("jobgate-{id}");
    cluster
        .until("the Job's index 1 failed", || async {
            let job = cluster.jobs().get(&name).await.unwrap();
            job.status.and_then(|s| s.failed_indexes).as_deref() == Some("1")
        })
        .await;
    let server = server.start_again(&cluster.args(&[])).await;
    simulation.open_gate("job-0");
    simulation.open_gate("job-2");
    server.wait_terminal(&id).await;
    let job = server.job_with(&id, FIELDS).await;
    check_failed_indexes(&job, 2);
    let status = cluster.jobs().get(&name).await.unwrap().status.unwrap();
    assert_eq!(status.failed_indexes.as_deref(), Some("1"));
    assert_eq!(status.completed_indexes.as_deref(), Some("0,2"));
}

/// A batch/v1 Job template that takes retry rules.
const RETRYING_TEMPLATE: &str = r#"
name: retrying-job
description: One container as a batch/v1 Job, with the job's retry rules.
apiVersion: batch/v1
kind: Job
fields: [image, command, env, backoffLimit]
required: [image, command]
manifest:
  spec:
    backoffLimit: ${job.backoffLimit}
    template:
      metadata:
        labels: ${labels}
      spec:
        restartPolicy: Never
        containers:
          - name: job
            image: ${job.image}
            command: ${job.command}
            env: ${job.env}
status:
  phase:
    - phase: SUCCEEDED
      when: {condition: Complete}
    - phase: FAILED
      when: {condition: Failed}
    - phase: RUNNING
      when: {sum: status.active}
    - phase: PENDING
  progress:
    succeeded: {sum: status.succeeded}
    active: {sum: status.active}
takesRetryPolicy: true
"#;

#[tokio::test]
async fn a_job_template_that_takes_retry_rules_gets_a_pod_failure_policy_the_controller_enforces() {
    let Some(cluster) = Cluster::emulated("it scripts pods through EMULATOR_FAIL_ATTEMPTS").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("retrying-job.yaml"), RETRYING_TEMPLATE).unwrap();
    let server = cluster
        .jobgate(&["--template-dir", dir.path().to_str().unwrap()])
        .await;
    let before = cluster.emu().simulation().pods_created();
    let id = server
        .submit(json!({
            "template": "retrying-job",
            "image": "busybox:1.36",
            "command": ["run"],
            "backoffLimit": 5,
            "env": [
                {"name": "EMULATOR_FAIL_ATTEMPTS", "value": "1000"},
                {"name": "EMULATOR_FAIL_EXIT_CODE", "value": "3"},
            ],
            "retryPolicy": {"rules": [
                {"action": "IGNORE", "causes": ["EVICTED"]},
                {"action": "FAIL_JOB", "exitCodes": {"operator": "IN", "values": [4, 3]}},
            ]},
        }))
        .await;
    server.wait_terminal(&id).await;
    let job = server.job_with(&id, FIELDS).await;
    assert_eq!(job["phase"], "FAILED", "{job}");
    let failed = common::condition(&job, "Failed").unwrap_or_else(|| panic!("no Failed: {job}"));
    assert_eq!(failed["reason"], "PodFailurePolicy", "{job}");
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains("failed with exit code 3 matching FailJob rule at index 1")),
        "{job}"
    );
    assert_eq!(
        cluster.emu().simulation().pods_created() - before,
        1,
        "the first failure ended the job, backoffLimit 5 notwithstanding"
    );
    let k8s = cluster.jobs().get(&format!("jobgate-{id}")).await.unwrap();
    let spec = serde_json::to_value(k8s.spec.unwrap()).unwrap();
    assert_eq!(
        spec["podFailurePolicy"],
        json!({"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3, 4]}},
        ]}),
        "{spec}"
    );
    assert_eq!(spec["backoffLimit"], 5, "{spec}");
}
