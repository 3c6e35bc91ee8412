//! The kubelet through the store: gates that hold a container running, termination messages
//! and the log fallback, and pods that cannot start (image pull errors, bad variables).
//!
//! It must not define fixtures other modules need: those live in `mod.rs`.

use super::*;

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
