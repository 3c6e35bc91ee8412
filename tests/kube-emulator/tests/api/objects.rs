//! Writing objects: defaulting, every patch type, pods' container merge and required fields,
//! resourceVersion preconditions and the status subresource, the store-wide resourceVersion, one
//! Event seen through both Event APIs, dry run and cluster-wide lists.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

#[tokio::test]
async fn jobs_are_defaulted_and_patched_with_each_patch_type() {
    let (emulator, client) = start().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let created = jobs
        .create(&PostParams::default(), &job("pi"))
        .await
        .expect("create");
    let uid = created.metadata.uid.clone().expect("uid");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.creation_timestamp.is_some());
    let spec = created.spec.clone().expect("spec");
    assert_eq!(
        (spec.completions, spec.parallelism, spec.backoff_limit),
        (Some(1), Some(1), Some(6))
    );
    let selector = spec.selector.and_then(|s| s.match_labels).unwrap_or_default();
    assert_eq!(selector.get("batch.kubernetes.io/controller-uid"), Some(&uid));
    let template_labels = spec.template.metadata.and_then(|m| m.labels).unwrap_or_default();
    for key in [
        "batch.kubernetes.io/controller-uid",
        "batch.kubernetes.io/job-name",
        "controller-uid",
        "job-name",
    ] {
        assert!(template_labels.contains_key(key), "template label {key}");
    }
    assert_eq!(
        created.status,
        Some(Default::default()),
        "status is reset to {{}} on create"
    );
    assert_eq!(
        jobs.get("pi").await.expect("get").metadata.uid.as_deref(),
        Some(uid.as_str())
    );

    // Merge patch: labels and a spec field; generation follows spec only.
    let merged = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}, "spec": {"parallelism": 2}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(merged.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(merged.metadata.generation, Some(2));
    let relabelled = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}})),
        )
        .await
        .expect("label only");
    assert_eq!(
        relabelled.metadata.generation,
        Some(2),
        "labels do not bump generation"
    );

    // JSON patch, including a failing test op (422).
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"note": "x"}},
    ]))
    .expect("ops");
    let patched = jobs
        .patch("pi", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .expect("json patch");
    assert_eq!(patched.annotations().get("note").map(String::as_str), Some("x"));
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/spec/parallelism", "value": 9}]))
            .expect("ops");
    let status = api_error(
        jobs.patch("pi", &PatchParams::default(), &Patch::<()>::Json(failing))
            .await,
    );
    assert_eq!(status.code, 422);

    // Strategic merge: maps merge; the template is immutable (422).
    let smp = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"tier": "x"}}})),
        )
        .await
        .expect("strategic");
    assert_eq!(smp.labels().get("team").map(String::as_str), Some("b"));
    assert_eq!(smp.labels().get("tier").map(String::as_str), Some("x"));
    let immutable = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "other"}]}}}}),
            ),
        )
        .await;
    let status = api_error(immutable);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("field is immutable"),
        "{}",
        status.message
    );

    // Server-side apply: merges into the live object, creates when absent (201).
    let applied = jobs
        .patch(
            "pi",
            &PatchParams::apply("tests"),
            &Patch::Apply(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "labels": {"applied": "yes"}}})),
        )
        .await
        .expect("apply");
    assert_eq!(applied.labels().get("applied").map(String::as_str), Some("yes"));
    assert_eq!(applied.labels().get("team").map(String::as_str), Some("b"));
    let mut fresh = serde_json::to_value(job("applied")).expect("json");
    fresh["metadata"]["labels"] = json!({"via": "apply"});
    let created_by_apply = jobs
        .patch("applied", &PatchParams::apply("tests"), &Patch::Apply(fresh))
        .await
        .expect("apply creates");
    assert!(created_by_apply.metadata.uid.is_some());

    // The main endpoint never changes status; /status never changes spec.
    let ignored = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"succeeded": 42}})),
        )
        .await
        .expect("status via main endpoint");
    assert_ne!(ignored.status.and_then(|s| s.succeeded), Some(42));
    let status_write = jobs
        .patch_status(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 7}})),
        )
        .await
        .expect("spec via /status");
    assert_eq!(status_write.spec.and_then(|s| s.parallelism), Some(2));
    emulator.shutdown().await;
}

#[tokio::test]
async fn pods_merge_containers_by_name_and_need_name_and_image() {
    let (emulator, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", &[("EMULATOR_GATE", "never")]))
        .await
        .expect("create");
    let patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}})),
        )
        .await
        .expect("image update");
    let container = &patched.spec.expect("spec").containers[0];
    assert_eq!(container.image.as_deref(), Some("busybox:1.37"));
    assert_eq!(
        container.command,
        Some(vec!["sleep".to_owned(), "1".to_owned()]),
        "other fields kept"
    );

    let mut bad = serde_json::to_value(pod("bad", &[])).expect("json");
    bad["spec"]["containers"] = json!([{"name": "main"}]);
    let bad: Pod = serde_json::from_value(bad).expect("pod");
    let status = api_error(pods.create(&PostParams::default(), &bad).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let causes = status.details.expect("details").causes;
    assert!(
        causes
            .iter()
            .any(|c| c.field == "spec.containers[0].image" && c.reason == "FieldValueRequired")
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn updates_check_resource_version_and_respect_the_status_subresource() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let created = api
        .create(&PostParams::default(), &widget("w", json!({})))
        .await
        .expect("create");

    let mut next = created.clone();
    next.data["spec"]["size"] = json!(2);
    next.data["status"] = json!({"ready": true});
    let updated = api
        .replace("w", &PostParams::default(), &next)
        .await
        .expect("replace with the current rv");
    assert!(rv(&updated.metadata) > rv(&created.metadata));
    assert_eq!(updated.metadata.generation, Some(2));
    assert!(
        updated
            .data
            .get("status")
            .is_none_or(|s| s.get("ready").is_none()),
        "main endpoint ignores status"
    );

    let status = api_error(api.replace("w", &PostParams::default(), &next).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );

    let mut no_rv = updated.clone();
    no_rv.metadata.resource_version = None;
    let status = api_error(api.replace("w", &PostParams::default(), &no_rv).await);
    assert_eq!(status.code, 422, "custom kinds need a resourceVersion on update");

    let mut with_status = updated.clone();
    with_status.data["status"] = json!({"ready": true});
    with_status.data["spec"]["size"] = json!(99);
    let after = api
        .replace_status("w", &PostParams::default(), &with_status)
        .await
        .expect("replace status");
    assert_eq!(after.data["status"]["ready"], true);
    assert_eq!(after.data["spec"]["size"], 2, "/status ignores spec");
    assert_eq!(
        after.metadata.generation,
        Some(2),
        "status writes do not bump generation"
    );

    // A write that changes nothing keeps the resourceVersion.
    let same = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .expect("no-op patch");
    assert_eq!(same.metadata.resource_version, after.metadata.resource_version);
    // Strategic merge is for built-in kinds only.
    let status = api_error(
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 3}})),
        )
        .await,
    );
    assert_eq!(status.code, 415);
    emulator.shutdown().await;
}

#[tokio::test]
async fn resource_versions_increase_across_all_kinds() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut last = 0;
    for i in 0..3 {
        let w = api
            .create(&PostParams::default(), &widget(&format!("w{i}"), json!({})))
            .await
            .expect("widget");
        assert!(rv(&w.metadata) > last);
        last = rv(&w.metadata);
        let p = pods
            .create(&PostParams::default(), &pod(&format!("p{i}"), &[]))
            .await
            .expect("pod");
        assert!(rv(&p.metadata) > last);
        last = rv(&p.metadata);
    }
    let list = api.list(&ListParams::default()).await.expect("list");
    let list_rv: u64 = list
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("list rv");
    assert!(
        list_rv >= last,
        "a list carries the store's current resourceVersion"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn events_are_one_store_seen_through_both_apis() {
    let (emulator, client) = start().await;
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "pi.1"},
        "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "namespace": "default"},
        "reason": "Tested", "message": "hello", "type": "Normal", "source": {"component": "tests"},
    }))
    .expect("event");
    core.create(&PostParams::default(), &event)
        .await
        .expect("core event");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let seen = events.get("pi.1").await.expect("events.k8s.io view");
    assert_eq!(seen.note.as_deref(), Some("hello"));
    assert_eq!(seen.regarding.and_then(|r| r.name).as_deref(), Some("pi"));

    let bad: k8s_openapi::api::events::v1::Event =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "reason": "R"})).expect("event");
    let status = api_error(events.create(&PostParams::default(), &bad).await);
    assert_eq!(
        status.code, 422,
        "events.k8s.io/v1 needs eventTime, action, reporting fields"
    );
    let by_object = core
        .list(&ListParams::default().fields("involvedObject.name=pi,involvedObject.kind=Job"))
        .await
        .expect("field selector on events");
    assert_eq!(by_object.items.len(), 1);
    emulator.shutdown().await;
}

#[tokio::test]
async fn dry_run_and_cluster_wide_lists() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let dry = api
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &widget("ghost", json!({})),
        )
        .await;
    assert!(dry.expect("dry run").metadata.uid.is_some());
    assert!(
        api.get_opt("ghost").await.expect("get").is_none(),
        "nothing stored"
    );

    api.create(&PostParams::default(), &widget("here", json!({})))
        .await
        .expect("default ns");
    widgets(&client, "kube-public")
        .create(&PostParams::default(), &widget("there", json!({})))
        .await
        .expect("other ns");
    let everywhere: Api<DynamicObject> = Api::all_with(client.clone(), &widget_resource());
    let list = everywhere
        .list(&ListParams::default())
        .await
        .expect("all namespaces");
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, ["here", "there"], "sorted by namespace, then name");
    emulator.shutdown().await;
}
