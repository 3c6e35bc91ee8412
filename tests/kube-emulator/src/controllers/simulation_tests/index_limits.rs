//! Indexed Jobs with `backoffLimitPerIndex`: an index that fails past its limit while the others
//! succeed, `maxFailedIndexes` failing the Job early, the `FailIndex` action, the failure-count
//! annotations and the `failedIndexes`/`completedIndexes` strings.
//!
//! It must not define fixtures other modules need: those live in `mod.rs`.

use super::*;

/// An Indexed Job with `backoffLimitPerIndex` and no `backoffLimit` (the API then defaults it to
/// the int32 maximum).
fn per_index_job(name: &str, extra: Value, env: &[(&str, &str)]) -> Value {
    let mut spec = json!({"completionMode": "Indexed", "backoffLimit": null});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let mut j = job(name, spec, env);
    j["spec"]["backoffLimit"] = json!(i32::MAX);
    j
}

fn index_of(pod: &Value) -> String {
    pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// `(completion index, failure count, ignored failure count)` of every pod the Job created, in
/// creation order (pods that are gone included).
fn failure_counts(store: &Store, job: &str) -> Vec<(String, String, String)> {
    let (history, _) = store.watch(Some(0)).expect("history");
    history
        .iter()
        .filter(|c| {
            c.resource == "pods"
                && c.kind == ChangeKind::Added
                && c.object["metadata"]["labels"]["job-name"] == job
        })
        .map(|c| {
            let a = &c.object["metadata"]["annotations"];
            let s = |k: &str| a[k].as_str().unwrap_or("-").to_owned();
            (
                index_of(&c.object),
                s("batch.kubernetes.io/job-index-failure-count"),
                s("batch.kubernetes.io/job-index-ignored-failure-count"),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_index_fails_past_its_limit_while_the_others_succeed() {
    let store = Store::new();
    let _sim = sim(&store);
    let spec = json!({"completions": 3, "parallelism": 3, "backoffLimitPerIndex": 1});
    store
        .create(
            "jobs.batch",
            Some("default"),
            per_index_job("limited", spec, &[("EMULATOR_FAIL_INDEXES", "1")]),
        )
        .expect("create");
    let history = follow_job(&store, "limited", finished).await;
    let last = history.last().expect("states");
    assert_eq!(condition_types(last), ["FailureTarget", "Failed"]);
    for c in last["status"]["conditions"].as_array().expect("conditions") {
        assert_eq!(
            (&c["reason"], &c["message"]),
            (&json!("FailedIndexes"), &json!("Job has failed indexes"))
        );
    }
    let status = &last["status"];
    assert_eq!(status["failedIndexes"], "1");
    assert_eq!(status["completedIndexes"], "0,2");
    assert_eq!(status["succeeded"], 2);
    assert_eq!(status["failed"], 2, "index 1 ran twice: {status}");
    // Until an index failed, the field was there and empty.
    assert!(
        history
            .iter()
            .any(|j| j["status"]["failedIndexes"] == "" && j["status"]["active"].as_i64() > Some(0)),
        "failedIndexes is \"\" while no index failed"
    );
    let mut counts = failure_counts(&store, "limited");
    counts.sort();
    let expect = |ix: &str, n: &str| (ix.to_owned(), n.to_owned(), "-".to_owned());
    assert_eq!(
        counts,
        [
            expect("0", "0"),
            expect("1", "0"),
            expect("1", "1"),
            expect("2", "0")
        ]
    );
    let events = events_for(&store, "limited");
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "FailedIndexes" && m == "Job has failed indexes"),
        "{events:?}"
    );
}

#[tokio::test]
async fn max_failed_indexes_fails_the_job_early() {
    let store = Store::new();
    let sim = sim(&store);
    let spec = json!({"completions": 4, "parallelism": 4, "backoffLimitPerIndex": 0, "maxFailedIndexes": 1});
    // Every index waits at its own gate; only indexes 0 and 1 (which fail) are let through.
    let env = [
        ("EMULATOR_FAIL_INDEXES", "0,1"),
        ("EMULATOR_GATE", "capped-{index}"),
    ];
    store
        .create("jobs.batch", Some("default"), per_index_job("capped", spec, &env))
        .expect("create");
    until(&store, "four running pods", |s| {
        pods_of(s, "capped")
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count()
            == 4
    })
    .await;
    sim.open_gate("capped-0");
    sim.open_gate("capped-1");
    let last = follow_job(&store, "capped", finished)
        .await
        .pop()
        .expect("states");
    assert_eq!(condition_types(&last), ["FailureTarget", "Failed"]);
    let failed = &last["status"]["conditions"][1];
    assert_eq!(failed["reason"], "MaxFailedIndexesExceeded");
    assert_eq!(
        failed["message"],
        "Job has exceeded the specified maximal number of failed indexes"
    );
    let status = &last["status"];
    assert_eq!(status["failedIndexes"], "0,1");
    assert!(status.get("completedIndexes").is_none(), "{status}");
    assert_eq!(
        status["failed"], 4,
        "the running indexes were stopped and counted: {status}"
    );
    assert!(status.get("active").is_none(), "{status}");
    // No index was retried.
    assert_eq!(failure_counts(&store, "capped").len(), 4);
}

#[tokio::test]
async fn a_fail_index_rule_fails_the_index_at_once_and_ignored_failures_are_annotated() {
    let store = Store::new();
    let _sim = sim(&store);
    let spec = json!({"completions": 3, "parallelism": 3, "backoffLimitPerIndex": 2,
        "podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
            {"action": "FailIndex", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}]}});
    // Every index's first run exits 7 (ignored), its second succeeds.
    let env = [("EMULATOR_FAIL_ATTEMPTS", "1"), ("EMULATOR_FAIL_EXIT_CODE", "7")];
    store
        .create(
            "jobs.batch",
            Some("default"),
            per_index_job("fail-index", spec, &env),
        )
        .expect("create");
    let last = follow_job(&store, "fail-index", finished)
        .await
        .pop()
        .expect("states");
    let status = &last["status"];
    assert_eq!(
        condition_types(&last),
        ["SuccessCriteriaMet", "Complete"],
        "{status}"
    );
    assert_eq!(status["completedIndexes"], "0-2");
    assert_eq!(status["failedIndexes"], "");
    assert!(
        status.get("failed").is_none(),
        "ignored failures are not counted: {status}"
    );
    let mut counts = failure_counts(&store, "fail-index");
    counts.sort();
    let first = |ix: &str| (ix.to_owned(), "0".to_owned(), "-".to_owned());
    let second = |ix: &str| (ix.to_owned(), "0".to_owned(), "1".to_owned());
    assert_eq!(
        counts,
        [
            first("0"),
            second("0"),
            first("1"),
            second("1"),
            first("2"),
            second("2")
        ]
    );

    // FailIndex: index 1 exits 42 and fails at its first failure, though its limit is 2.
    let spec = json!({"completions": 3, "parallelism": 3, "backoffLimitPerIndex": 2,
        "podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
            {"action": "FailIndex", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]}});
    let env = [("EMULATOR_FAIL_INDEXES", "1"), ("EMULATOR_FAIL_EXIT_CODE", "42")];
    store
        .create(
            "jobs.batch",
            Some("default"),
            per_index_job("fail-now", spec, &env),
        )
        .expect("create");
    let last = follow_job(&store, "fail-now", finished)
        .await
        .pop()
        .expect("states");
    let status = &last["status"];
    assert_eq!(condition_types(&last), ["FailureTarget", "Failed"], "{status}");
    assert_eq!(status["conditions"][1]["reason"], "FailedIndexes");
    assert_eq!(status["failedIndexes"], "1");
    assert_eq!(status["completedIndexes"], "0,2");
    assert_eq!(status["failed"], 1);
    assert_eq!(
        failure_counts(&store, "fail-now").len(),
        3,
        "index 1 was not retried"
    );
}

#[tokio::test]
async fn without_failures_a_per_index_job_completes_with_empty_failed_indexes() {
    let store = Store::new();
    let _sim = sim(&store);
    let spec = json!({"completions": 5, "parallelism": 2, "backoffLimitPerIndex": 1, "maxFailedIndexes": 2});
    store
        .create("jobs.batch", Some("default"), per_index_job("clean", spec, &[]))
        .expect("create");
    let last = follow_job(&store, "clean", finished).await.pop().expect("states");
    assert_eq!(condition_types(&last), ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(last["status"]["completedIndexes"], "0-4");
    assert_eq!(last["status"]["failedIndexes"], "");
    // A Job without the per-index limit has no failedIndexes at all.
    store
        .create(
            "jobs.batch",
            Some("default"),
            job(
                "plain",
                json!({"completions": 2, "completionMode": "Indexed"}),
                &[],
            ),
        )
        .expect("create");
    let last = follow_job(&store, "plain", finished).await.pop().expect("states");
    assert!(
        last["status"].get("failedIndexes").is_none(),
        "{}",
        last["status"]
    );
}
