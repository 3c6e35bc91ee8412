//! What a list or watch selects and how it is returned: label and field selectors (with the
//! watch's transitions into and out of a selector), pagination over one snapshot, metadata-only
//! lists and watches, the legacy `/watch/` path.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

#[tokio::test]
async fn selectors_filter_lists_and_watches_with_transitions() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(
        &PostParams::default(),
        &widget("dev", json!({"env": "dev", "n": "3"})),
    )
    .await
    .expect("dev");
    api.create(&PostParams::default(), &widget("prod", json!({"env": "prod"})))
        .await
        .expect("prod");
    api.create(&PostParams::default(), &widget("none", json!({})))
        .await
        .expect("none");
    let names = |list: kube::api::ObjectList<DynamicObject>| -> Vec<String> {
        list.items.into_iter().filter_map(|o| o.metadata.name).collect()
    };
    for (selector, expected) in [
        ("env=dev", vec!["dev"]),
        ("env==dev", vec!["dev"]),
        ("env!=dev", vec!["none", "prod"]),
        ("env in (dev,prod)", vec!["dev", "prod"]),
        ("env notin (dev)", vec!["none", "prod"]),
        ("env", vec!["dev", "prod"]),
        ("!env", vec!["none"]),
        ("n>2", vec!["dev"]),
    ] {
        let list = api
            .list(&ListParams::default().labels(selector))
            .await
            .expect(selector);
        assert_eq!(names(list), expected, "{selector}");
    }
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=prod"))
        .await
        .expect("field selector");
    assert_eq!(names(by_name), ["prod"]);
    let status = api_error(api.list(&ListParams::default().labels("env in dev")).await);
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    let status = api_error(api.list(&ListParams::default().fields("spec.size=1")).await);
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("field label not supported"),
        "{}",
        status.message
    );

    // Moving into and out of a selector is ADDED and DELETED.
    let from = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = api
        .watch(
            &WatchParams::default().labels("env=dev").disable_bookmarks(),
            &from,
        )
        .await
        .expect("watch")
        .boxed();
    api.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"env": "dev"}}})),
    )
    .await
    .expect("into");
    api.patch(
        "dev",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"env": "prod"}}})),
    )
    .await
    .expect("out of");
    api.patch(
        "none",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .expect("unrelated");
    api.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 5}})),
    )
    .await
    .expect("within");
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(name_of(&next(&mut stream).await.expect("event")));
    }
    assert_eq!(
        seen,
        [
            ("ADDED".into(), "prod".into()),
            ("DELETED".into(), "dev".into()),
            ("MODIFIED".into(), "prod".into())
        ]
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn pagination_keeps_one_snapshot_and_tokens_expire_on_restart() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &widget(&format!("w{i}"), json!({})))
            .await
            .expect("create");
    }
    let first = api.list(&ListParams::default().limit(2)).await.expect("page 1");
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let snapshot_rv = first.metadata.resource_version.clone();
    api.create(&PostParams::default(), &widget("w9", json!({})))
        .await
        .expect("created mid-list");
    let mut names: Vec<String> = first.items.into_iter().filter_map(|o| o.metadata.name).collect();
    let mut token = first.metadata.continue_.clone();
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&t))
            .await
            .expect("next page");
        assert_eq!(
            page.metadata.resource_version, snapshot_rv,
            "every page has the first page's rv"
        );
        names.extend(page.items.into_iter().filter_map(|o| o.metadata.name));
        token = page.metadata.continue_;
    }
    assert_eq!(names, ["w0", "w1", "w2", "w3", "w4"], "a consistent snapshot");

    let first = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1 again");
    emulator.restart_compacted();
    let token = first.metadata.continue_.expect("a token");
    let status = api_error(
        api.list(&ListParams::default().limit(2).continue_token(&token))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(
        status
            .metadata
            .and_then(|m| m.continue_)
            .is_some_and(|c| !c.is_empty()),
        "a fresh token"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn metadata_only_lists_and_watches_and_the_legacy_watch_path() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(&PostParams::default(), &widget("meta", json!({"a": "b"})))
        .await
        .expect("create");
    let list = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list_metadata");
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("a"))
            .map(String::as_str),
        Some("b")
    );
    let stream = api
        .watch_metadata(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch_metadata");
    let events = collect_until_end(stream).await;
    assert!(
        matches!(&events[..], [WatchEvent::Added(o)] if o.metadata.name.as_deref() == Some("meta")),
        "one ADDED with the object's metadata"
    );

    let request =
        http::Request::get("/apis/example.com/v1/watch/namespaces/default/widgets?timeoutSeconds=1")
            .body(Vec::new())
            .expect("request");
    let legacy = client
        .request_events::<DynamicObject>(request)
        .await
        .expect("legacy watch");
    let events = collect_until_end(legacy).await;
    assert_eq!(
        events.iter().map(name_of).collect::<Vec<_>>(),
        [("ADDED".into(), "meta".into())]
    );
    emulator.shutdown().await;
}
