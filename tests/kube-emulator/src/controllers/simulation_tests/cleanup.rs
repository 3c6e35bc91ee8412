//! What removes objects: the TTL-after-finished controller and the garbage collector (dependents
//! of a removed Job, the `orphan` and `foregroundDeletion` finalizers).
//!
//! It must not define fixtures other modules need: those live in `mod.rs`.

use super::*;

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
