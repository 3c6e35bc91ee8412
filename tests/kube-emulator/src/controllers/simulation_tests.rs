//! The simulation driven through the store alone (no HTTP): each test writes objects the way the
//! API layer stores them and watches what the controllers make of them.

use std::time::Duration;

use serde_json::{Value, json};

use super::{SimConfig, Simulation, start};
use crate::store::{ChangeKind, Store};

const WAIT: Duration = Duration::from_secs(20);

/// A Job as the API server stores it after defaulting (§6.2): selector, the four template labels,
/// `status: {}`. `extra` is merged into `spec`, `env` goes into the container.
fn job(name: &str, extra: Value, env: &[(&str, &str)]) -> Value {
    let uid = uuid::Uuid::new_v4().to_string();
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
        "controller-uid": uid, "job-name": name,
    });
    let env: Vec<Value> = env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    let mut spec = json!({
        "parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
        "suspend": false, "podReplacementPolicy": "TerminatingOrFailed", "manualSelector": false,
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
        "template": {"metadata": {"labels": labels}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["echo", "hello", name],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "env": env}],
        }},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if v.is_null() {
                spec.remove(k);
            } else {
                spec.insert(k.clone(), v.clone());
            }
        }
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "uid": uid, "labels": labels}, "spec": spec, "status": {}})
}

fn sim(store: &Store) -> std::sync::Arc<Simulation> {
    start(store.clone(), SimConfig::default())
}

/// Waits until `done` holds for the Job (checked after every change), returning every state the
/// Job went through, in order.
async fn follow_job(store: &Store, name: &str, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let (_, mut rx) = store.watch(None).expect("watch");
    let mut seen = Vec::new();
    let check = |seen: &mut Vec<Value>| -> bool {
        match store.get("jobs.batch", Some("default"), name) {
            Some(j) => {
                let finished = done(&j);
                if seen.last() != Some(&j) {
                    seen.push(j);
                }
                finished
            }
            None => false,
        }
    };
    if check(&mut seen) {
        return seen;
    }
    let result = tokio::time::timeout(WAIT, async {
        loop {
            match rx.recv().await {
                Ok(change) => {
                    if change.resource == "jobs.batch" && change.object["metadata"]["name"] == name {
                        if seen.last() != Some(&*change.object) {
                            seen.push((*change.object).clone());
                        }
                        if change.kind != ChangeKind::Deleted && done(&change.object) {
                            return;
                        }
                    }
                }
                Err(e) => panic!("change stream: {e}"),
            }
        }
    })
    .await;
    if result.is_err() {
        panic!(
            "job {name} never reached the expected state; last: {:#}",
            seen.last().cloned().unwrap_or_default()
        );
    }
    seen
}

/// Waits until `done` holds for the store.
async fn until(store: &Store, what: &str, done: impl Fn(&Store) -> bool) {
    let (_, mut rx) = store.watch(None).expect("watch");
    if done(store) {
        return;
    }
    let ok = tokio::time::timeout(WAIT, async {
        loop {
            let _ = rx.recv().await;
            if done(store) {
                return;
            }
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out waiting for {what}");
}

fn condition_types(job: &Value) -> Vec<String> {
    job["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| c["status"] == "True")
                .map(|c| c["type"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn has_condition(job: &Value, kind: &str) -> bool {
    condition_types(job).iter().any(|c| c == kind)
}

fn finished(job: &Value) -> bool {
    has_condition(job, "Complete") || has_condition(job, "Failed")
}

fn pods_of(store: &Store, job: &str) -> Vec<Value> {
    store
        .list("pods", Some("default"), &|p| {
            p["metadata"]["labels"]["job-name"] == job
        })
        .0
}

fn events_for(store: &Store, name: &str) -> Vec<(String, String)> {
    let (events, _) = store.list("events", Some("default"), &|e| {
        e["involvedObject"]["name"] == name
    });
    events
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_owned(),
                e["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_one_pod_job_succeeds_through_the_real_condition_sequence() {
    let store = Store::new();
    let sim = sim(&store);
    store
        .create("jobs.batch", Some("default"), job("one", json!({}), &[]))
        .expect("create");
    let history = follow_job(&store, "one", finished).await;
    let last = history.last().expect("states");

    // SuccessCriteriaMet is written before Complete, in an earlier status write.
    let first_met = history
        .iter()
        .position(|j| has_condition(j, "SuccessCriteriaMet"))
        .expect("met");
    let first_complete = history
        .iter()
        .position(|j| has_condition(j, "Complete"))
        .expect("complete");
    assert!(
        first_met < first_complete,
        "SuccessCriteriaMet must precede Complete"
    );
    assert!(!has_condition(&history[first_met], "Complete"));
    assert_eq!(condition_types(last), ["SuccessCriteriaMet", "Complete"]);
    for c in last["status"]["conditions"].as_array().expect("conditions") {
        assert_eq!(c["reason"], "CompletionsReached");
        assert_eq!(c["message"], "Reached expected number of succeeded pods");
    }
    // The pod was counted through uncountedTerminatedPods at some point.
    assert!(
        history
            .iter()
            .any(|j| j["status"]["uncountedTerminatedPods"]["succeeded"].is_array())
    );
    // Some state showed the pod active and ready before it finished.
    assert!(
        history
            .iter()
            .any(|j| j["status"]["active"] == 1 && j["status"]["ready"] == 1)
    );
    let status = &last["status"];
    assert_eq!(status["succeeded"], 1);
    assert!(
        status.get("active").is_none(),
        "active is omitted when 0: {status}"
    );
    assert!(status.get("failed").is_none());
    assert_eq!(status["ready"], 0);
    assert_eq!(status["terminating"], 0);
    assert_eq!(status["uncountedTerminatedPods"], json!({}));
    assert!(status["startTime"].is_string() && status["completionTime"].is_string());

    let pods = pods_of(&store, "one");
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    assert_eq!(pod["status"]["phase"], "Succeeded");
    assert!(
        pod["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("one-") && n.len() == 9)
    );
    assert!(
        pod["metadata"]
            .get("finalizers")
            .is_none_or(|f| f.as_array().is_some_and(Vec::is_empty))
    );
    let owner = &pod["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("Job"), Some(true))
    );
    assert_eq!(owner["uid"], last["metadata"]["uid"]);
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (terminated["exitCode"].as_i64(), terminated["reason"].as_str()),
        (Some(0), Some("Completed"))
    );
    assert_eq!(
        store.logs("default", pod["metadata"]["name"].as_str().unwrap_or("")),
        Some(vec!["hello one".to_owned()])
    );
    let events = events_for(&store, "one");
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "SuccessfulCreate" && m.starts_with("Created pod: one-")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Completed" && m == "Job completed"),
        "{events:?}"
    );
    assert_eq!(sim.pods_created(), 1);
}

#[tokio::test]
async fn backoff_limit_fails_the_job_after_limit_plus_one_failed_pods() {
    let store = Store::new();
    let sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("bad", json!({"backoffLimit": 2}), &[("EMULATOR_EXIT_CODE", "3")]),
        )
        .expect("create");
    let history = follow_job(&store, "bad", finished).await;
    let last = history.last().expect("states");
    assert_eq!(condition_types(last), ["FailureTarget", "Failed"]);
    assert_eq!(last["status"]["conditions"][1]["reason"], "BackoffLimitExceeded");
    assert_eq!(
        last["status"]["conditions"][1]["message"],
        "Job has reached the specified backoff limit"
    );
    assert_eq!(last["status"]["failed"], 3);
    assert!(last["status"].get("completionTime").is_none());
    assert_eq!(sim.pods_created(), 3);
    let pods = pods_of(&store, "bad");
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        assert_eq!(pod["status"]["phase"], "Failed");
        assert_eq!(
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
        assert_eq!(
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Error"
        );
    }
    let events = events_for(&store, "bad");
    assert!(
        events.iter().any(|(r, _)| r == "BackoffLimitExceeded"),
        "{events:?}"
    );
}

#[tokio::test]
async fn indexed_job_respects_parallelism_and_completes_every_index() {
    let store = Store::new();
    let _sim = sim(&store);
    let spec = json!({"completions": 4, "parallelism": 2, "completionMode": "Indexed"});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("idx", spec, &[("EMULATOR_RUN_MS", "30")]),
        )
        .expect("create");
    let history = follow_job(&store, "idx", finished).await;
    for state in &history {
        assert!(
            state["status"]["active"].as_i64().unwrap_or(0) <= 2,
            "too many active: {}",
            state["status"]
        );
    }
    let last = history.last().expect("states");
    assert_eq!(condition_types(last), ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(last["status"]["completedIndexes"], "0-3");
    assert_eq!(last["status"]["succeeded"], 4);
    let pods = pods_of(&store, "idx");
    assert_eq!(pods.len(), 4);
    let mut indexes: Vec<String> = pods
        .iter()
        .map(|p| {
            let ix = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            assert_eq!(
                p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
                ix.as_str()
            );
            assert!(
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("idx-{ix}-")))
            );
            assert_eq!(p["spec"]["hostname"], format!("idx-{ix}"));
            let env = p["spec"]["containers"][0]["env"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(env.iter().any(|e| e["name"] == "JOB_COMPLETION_INDEX"
                && e["valueFrom"]["fieldRef"]["fieldPath"]
                    == "metadata.labels['batch.kubernetes.io/job-completion-index']"));
            ix
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2", "3"]);
}

#[tokio::test]
async fn failing_index_retries_until_the_backoff_limit() {
    let store = Store::new();
    let _sim = sim(&store);
    let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed", "backoffLimit": 1});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("fi", spec, &[("EMULATOR_FAIL_INDEXES", "1")]),
        )
        .expect("create");
    let last = follow_job(&store, "fi", finished).await.pop().expect("states");
    assert_eq!(last["status"]["conditions"][1]["reason"], "BackoffLimitExceeded");
    assert_eq!(last["status"]["failed"], 2);
    assert_eq!(last["status"]["completedIndexes"], "0,2");
}

#[tokio::test]
async fn fail_attempts_retries_then_succeeds() {
    let store = Store::new();
    let sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job(
                "flaky",
                json!({"backoffLimit": 4}),
                &[("EMULATOR_FAIL_ATTEMPTS", "2")],
            ),
        )
        .expect("create");
    let last = follow_job(&store, "flaky", finished).await.pop().expect("states");
    assert_eq!(condition_types(&last), ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(last["status"]["failed"], 2);
    assert_eq!(last["status"]["succeeded"], 1);
    assert_eq!(sim.pods_created(), 3);
}

#[tokio::test]
async fn on_failure_restarts_in_place_and_counts_restarts() {
    let store = Store::new();
    let sim = sim(&store);
    let mut spec = job(
        "onf",
        json!({"backoffLimit": 4}),
        &[("EMULATOR_FAIL_ATTEMPTS", "2")],
    );
    spec["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
    store.create("jobs.batch", Some("default"), spec).expect("create");
    let last = follow_job(&store, "onf", finished).await.pop().expect("states");
    assert_eq!(condition_types(&last), ["SuccessCriteriaMet", "Complete"]);
    assert!(
        last["status"].get("failed").is_none(),
        "restarts are not failed pods"
    );
    assert_eq!(sim.pods_created(), 1);
    let pod = pods_of(&store, "onf").pop().expect("pod");
    let cs = &pod["status"]["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 2);
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(cs["state"]["terminated"]["exitCode"], 0);

    // With a lower limit the restarts fail the Job.
    let mut spec = job("onf2", json!({"backoffLimit": 1}), &[("EMULATOR_EXIT_CODE", "2")]);
    spec["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
    store.create("jobs.batch", Some("default"), spec).expect("create");
    let last = follow_job(&store, "onf2", finished).await.pop().expect("states");
    assert_eq!(last["status"]["conditions"][1]["reason"], "BackoffLimitExceeded");
    // The pod that was still running when the Job failed was deleted and counted as failed.
    assert_eq!(last["status"]["failed"], 1);
}

#[tokio::test]
async fn active_deadline_fails_the_job_and_stops_its_pod() {
    let store = Store::new();
    let _sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job(
                "slow",
                json!({"activeDeadlineSeconds": 1}),
                &[("EMULATOR_RUN_MS", "600000")],
            ),
        )
        .expect("create");
    let history = follow_job(&store, "slow", finished).await;
    let last = history.last().expect("states");
    assert_eq!(condition_types(last), ["FailureTarget", "Failed"]);
    assert_eq!(last["status"]["conditions"][0]["reason"], "DeadlineExceeded");
    assert_eq!(
        last["status"]["conditions"][1]["message"],
        "Job was active longer than specified deadline"
    );
    assert_eq!(last["status"]["failed"], 1);
    // Between the interim and the final condition the pod was terminating.
    let target = history
        .iter()
        .position(|j| has_condition(j, "FailureTarget"))
        .expect("target");
    let done = history
        .iter()
        .position(|j| has_condition(j, "Failed"))
        .expect("failed");
    assert!(target < done);
    until(&store, "the pod to go", |s| pods_of(s, "slow").is_empty()).await;
}

#[tokio::test]
async fn a_gate_holds_the_pod_running_until_opened() {
    let store = Store::new();
    let sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job(
                "gated",
                json!({}),
                &[("EMULATOR_GATE", "go"), ("EMULATOR_RUN_MS", "0")],
            ),
        )
        .expect("create");
    follow_job(&store, "gated", |j| j["status"]["ready"] == 1).await;
    // Running and ready; give it ample time to (wrongly) finish, then check it did not.
    let (_, mut rx) = store.watch(None).expect("watch");
    let _ = tokio::time::timeout(Duration::from_millis(300), async {
        while rx.recv().await.is_ok() {}
    })
    .await;
    let pod = pods_of(&store, "gated").pop().expect("pod");
    assert_eq!(pod["status"]["phase"], "Running");
    assert!(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
    sim.open_gate("go");
    let last = follow_job(&store, "gated", finished).await.pop().expect("states");
    assert!(has_condition(&last, "Complete"));

    // A gate opened before the pod runs lets it pass.
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("pre", json!({}), &[("EMULATOR_GATE", "go")]),
        )
        .expect("create");
    assert!(has_condition(
        &follow_job(&store, "pre", finished).await.pop().expect("states"),
        "Complete"
    ));
}

#[tokio::test]
async fn termination_messages_and_log_fallback() {
    let store = Store::new();
    let _sim = sim(&store);
    let spec = json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 0});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job(
                "msg",
                spec,
                &[("EMULATOR_TERMINATION_MESSAGE", "done {index} in {pod}")],
            ),
        )
        .expect("create");
    follow_job(&store, "msg", finished).await;
    for pod in pods_of(&store, "msg") {
        let ix = pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
        assert_eq!(
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"],
            format!("done {ix} in {name}")
        );
    }

    let mut fallback = job(
        "fb",
        json!({"backoffLimit": 0}),
        &[("EMULATOR_EXIT_CODE", "1"), ("EMULATOR_LOG", "one\ntwo")],
    );
    fallback["spec"]["template"]["spec"]["containers"][0]["terminationMessagePolicy"] =
        json!("FallbackToLogsOnError");
    store
        .create("jobs.batch", Some("default"), fallback)
        .expect("create");
    follow_job(&store, "fb", finished).await;
    let pod = pods_of(&store, "fb").pop().expect("pod");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"],
        "one\ntwo\n"
    );

    // Without the fallback policy, a failing container's log is not a termination message.
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("nofb", json!({"backoffLimit": 0}), &[("EMULATOR_EXIT_CODE", "1")]),
        )
        .expect("create");
    follow_job(&store, "nofb", finished).await;
    let pod = pods_of(&store, "nofb").pop().expect("pod");
    assert!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]
            .get("message")
            .is_none()
    );
}

#[tokio::test]
async fn suspend_stops_pods_and_resume_restarts_them() {
    let store = Store::new();
    let _sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("sus", json!({"suspend": true}), &[("EMULATOR_RUN_MS", "100")]),
        )
        .expect("create");
    let suspended = follow_job(&store, "sus", |j| has_condition(j, "Suspended"))
        .await
        .pop()
        .expect("states");
    assert!(
        suspended["status"].get("startTime").is_none(),
        "a suspended job never started"
    );
    assert!(pods_of(&store, "sus").is_empty());
    store
        .modify("jobs.batch", Some("default"), "sus", &mut |j| {
            j["spec"]["suspend"] = json!(false);
            Ok(())
        })
        .expect("resume");
    let last = follow_job(&store, "sus", finished).await.pop().expect("states");
    let suspended = last["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Suspended"))
        .cloned();
    assert_eq!(suspended.map(|c| c["reason"].clone()), Some(json!("JobResumed")));
    assert!(has_condition(&last, "Complete"));
    let events = events_for(&store, "sus");
    assert!(events.iter().any(|(r, _)| r == "Suspended") && events.iter().any(|(r, _)| r == "Resumed"));
}

#[tokio::test]
async fn pod_failure_policy_fails_the_job_or_ignores_the_failure() {
    let store = Store::new();
    let _sim = sim(&store);
    let policy = json!({"backoffLimit": 6, "podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]}});
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("pfp", policy, &[("EMULATOR_EXIT_CODE", "42")]),
        )
        .expect("create");
    let last = follow_job(&store, "pfp", finished).await.pop().expect("states");
    let failed = &last["status"]["conditions"][1];
    assert_eq!(failed["reason"], "PodFailurePolicy");
    let pod = pods_of(&store, "pfp").pop().expect("pod");
    assert_eq!(
        failed["message"],
        format!(
            "Container main for pod default/{} failed with exit code 42 matching FailJob rule at index 0",
            pod["metadata"]["name"].as_str().unwrap_or("")
        )
    );

    // An ignored failure is neither counted nor fatal: the pod is replaced.
    let ignore = json!({"backoffLimit": 0, "podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}});
    let env = [("EMULATOR_FAIL_EXIT_CODE", "7"), ("EMULATOR_FAIL_ATTEMPTS", "1")];
    store
        .create("jobs.batch", Some("default"), job("ign", ignore, &env))
        .expect("create");
    let last = follow_job(&store, "ign", finished).await.pop().expect("states");
    assert_eq!(condition_types(&last), ["SuccessCriteriaMet", "Complete"]);
    assert!(
        last["status"].get("failed").is_none(),
        "ignored failures are not counted: {}",
        last["status"]
    );
    assert_eq!(pods_of(&store, "ign").len(), 2);
}

#[tokio::test]
async fn ttl_deletes_the_finished_job_and_the_collector_its_pods() {
    let store = Store::new();
    let _sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("ttl", json!({"ttlSecondsAfterFinished": 0}), &[]),
        )
        .expect("create");
    until(&store, "the job and its pods to go", |s| {
        s.get("jobs.batch", Some("default"), "ttl").is_none() && pods_of(s, "ttl").is_empty()
    })
    .await;
}

#[tokio::test]
async fn removing_a_running_job_removes_its_pods() {
    let store = Store::new();
    let _sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job(
                "bg",
                json!({"parallelism": 2, "completions": 2}),
                &[("EMULATOR_RUN_MS", "600000")],
            ),
        )
        .expect("create");
    follow_job(&store, "bg", |j| j["status"]["ready"] == 2).await;
    // A DELETE with propagationPolicy=Background removes the Job at once.
    store
        .delete("jobs.batch", Some("default"), "bg", None)
        .expect("delete");
    until(&store, "the pods to go", |s| pods_of(s, "bg").is_empty()).await;
}

#[tokio::test]
async fn orphan_and_foreground_finalizers_are_finished() {
    let store = Store::new();
    let _sim = sim(&store);
    for name in ["orph", "fg"] {
        store
            .create(
                "jobs.batch",
                Some("default"),
                job(name, json!({}), &[("EMULATOR_RUN_MS", "600000")]),
            )
            .expect("create");
        follow_job(&store, name, |j| j["status"]["ready"] == 1).await;
    }
    let mark = |name: &str, finalizer: &str| {
        store
            .modify("jobs.batch", Some("default"), name, &mut |j| {
                j["metadata"]["finalizers"] = json!([finalizer]);
                j["metadata"]["deletionTimestamp"] = json!(crate::store::now_timestamp());
                j["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                Ok(())
            })
            .expect("mark deleting");
    };
    mark("orph", "orphan");
    mark("fg", "foregroundDeletion");
    until(&store, "both jobs to go", |s| {
        s.get("jobs.batch", Some("default"), "orph").is_none()
            && s.get("jobs.batch", Some("default"), "fg").is_none()
    })
    .await;
    // Orphaned: the pod keeps running without an owner and without the tracking finalizer.
    until(&store, "the orphan to be released", |s| {
        pods_of(s, "orph").first().is_some_and(|p| {
            p["metadata"].get("ownerReferences").is_none()
                && p["metadata"].get("finalizers").is_none_or(|f| f == &json!([]))
        })
    })
    .await;
    assert_eq!(pods_of(&store, "orph")[0]["status"]["phase"], "Running");
    assert!(
        pods_of(&store, "fg").is_empty(),
        "foreground deletion removes the dependents first"
    );
}

#[tokio::test]
async fn image_pull_errors_and_bad_variables_keep_the_pod_pending() {
    let store = Store::new();
    let _sim = sim(&store);
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("pull", json!({}), &[("EMULATOR_IMAGE_PULL_ERROR", "1")]),
        )
        .expect("create");
    store
        .create(
            "jobs.batch",
            Some("default"),
            job("bad", json!({}), &[("EMULATOR_RUN_MS", "soon")]),
        )
        .expect("create");
    let waiting = |name: &'static str, reason: &'static str| {
        move |s: &Store| {
            pods_of(s, name)
                .first()
                .is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == reason)
        }
    };
    until(&store, "ErrImagePull", waiting("pull", "ErrImagePull")).await;
    until(
        &store,
        "CreateContainerConfigError",
        waiting("bad", "CreateContainerConfigError"),
    )
    .await;
    let pod = pods_of(&store, "bad").pop().expect("pod");
    assert_eq!(pod["status"]["phase"], "Pending");
    assert!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("EMULATOR_RUN_MS"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_jobs_at_once_all_finish_with_the_right_outcome() {
    let store = Store::new();
    let sim = sim(&store);
    let n = 150;
    for i in 0..n {
        let env: &[(&str, &str)] = if i % 3 == 0 {
            &[("EMULATOR_EXIT_CODE", "1")]
        } else {
            &[]
        };
        let spec = json!({"backoffLimit": 0, "parallelism": 2, "completions": 2});
        store
            .create(
                "jobs.batch",
                Some("default"),
                job(&format!("many-{i}"), spec, env),
            )
            .expect("create");
    }
    let all_finished = |s: &Store| {
        s.list("jobs.batch", Some("default"), &|j| !finished(j))
            .0
            .is_empty()
    };
    until(&store, "every job to finish", all_finished).await;
    let (jobs, _) = store.list("jobs.batch", Some("default"), &|_| true);
    for j in &jobs {
        let i: usize = j["metadata"]["name"]
            .as_str()
            .and_then(|n| n.strip_prefix("many-"))
            .and_then(|n| n.parse().ok())
            .expect("index");
        let expected = if i.is_multiple_of(3) {
            ["FailureTarget", "Failed"]
        } else {
            ["SuccessCriteriaMet", "Complete"]
        };
        assert_eq!(condition_types(j), expected, "{}", j["metadata"]["name"]);
        if !i.is_multiple_of(3) {
            assert_eq!(j["status"]["succeeded"], 2);
        }
    }
    // Never more pods than needed: 2 per successful job; a failing job stops at its first failure
    // (its sibling, if already created, is stopped and counted too).
    let created = sim.pods_created();
    assert!(created <= 2 * n as u64, "{created} pods for {n} jobs");
    // Every pod was released by the Job controller.
    let (held, _) = store.list("pods", Some("default"), &|p: &Value| {
        p["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    });
    assert!(
        held.is_empty(),
        "{} pods still carry the tracking finalizer",
        held.len()
    );
}
