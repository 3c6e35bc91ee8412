//! Deletion: propagation policies, finalizers, preconditions and graceful pod deletion.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

#[tokio::test]
async fn deletion_follows_propagation_finalizers_and_preconditions() {
    let (emulator, client) = start().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");

    // batch/v1 Jobs default to Orphan: the Job comes back with the orphan finalizer.
    jobs.create(&PostParams::default(), &job("orphaned"))
        .await
        .expect("create");
    match jobs
        .delete("orphaned", &DeleteParams::default())
        .await
        .expect("delete")
    {
        either::Either::Left(job) => {
            assert!(job.metadata.deletion_timestamp.is_some());
            assert!(
                job.finalizers().iter().any(|f| f == "orphan"),
                "{:?}",
                job.finalizers()
            );
        }
        either::Either::Right(status) => panic!("expected the Job, got {status:?}"),
    }
    // The garbage collector finishes it.
    tokio::time::timeout(WAIT, async {
        while jobs.get_opt("orphaned").await.expect("get").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the orphaned job goes away");

    jobs.create(&PostParams::default(), &job("bg"))
        .await
        .expect("create");
    match jobs
        .delete("bg", &DeleteParams::background())
        .await
        .expect("delete")
    {
        either::Either::Right(status) => {
            assert_eq!(status.details.as_ref().map(|d| d.kind.as_str()), Some("jobs"));
            assert!(status.is_success());
        }
        either::Either::Left(_) => panic!("expected a Status"),
    }

    // Finalizers defer deletion; removing the last one removes the object.
    let api = widgets(&client, "default");
    let mut held = widget("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    let created = api.create(&PostParams::default(), &held).await.expect("create");
    let status = api_error(
        api.delete(
            "held",
            &DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some("other".into()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            },
        )
        .await,
    );
    assert_eq!(status.code, 409, "uid precondition");
    api.delete("held", &DeleteParams::default().dry_run())
        .await
        .expect("dry run");
    assert!(
        api.get("held")
            .await
            .expect("still there")
            .metadata
            .deletion_timestamp
            .is_none(),
        "dry run changes nothing"
    );

    let mut stream = api
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &rv(&created.metadata).to_string(),
        )
        .await
        .expect("watch")
        .boxed();
    match api
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete")
    {
        either::Either::Left(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        either::Either::Right(s) => panic!("deferred deletion answers the object, got {s:?}"),
    }
    assert!(
        api.get("held")
            .await
            .expect("still there")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    assert!(api.get_opt("held").await.expect("get").is_none());
    let kinds: Vec<String> = [
        next(&mut stream).await.expect("e1"),
        next(&mut stream).await.expect("e2"),
    ]
    .iter()
    .map(|e| name_of(e).0)
    .collect();
    assert_eq!(kinds, ["MODIFIED", "DELETED"]);

    // A running pod is deleted gracefully: the kubelet stops it, then it is gone.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("runner", &[("EMULATOR_GATE", "never")]),
    )
    .await
    .expect("pod");
    tokio::time::timeout(WAIT, async {
        loop {
            let p = pods.get("runner").await.expect("get");
            if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the pod runs");
    match pods
        .delete("runner", &DeleteParams::default())
        .await
        .expect("delete pod")
    {
        either::Either::Left(p) => assert!(p.metadata.deletion_timestamp.is_some()),
        either::Either::Right(s) => panic!("a pod delete answers the pod, got {s:?}"),
    }
    tokio::time::timeout(WAIT, async {
        while pods.get_opt("runner").await.expect("get").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the terminated pod goes away");
    emulator.shutdown().await;
}
