//! The Job controller through the store: the condition sequence, back-off limits, Indexed Jobs,
//! restarts in place, deadlines, suspension, `podFailurePolicy`, and many Jobs at once.
//!
//! It must not define fixtures other modules need: those live in `mod.rs`.

use super::*;

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
