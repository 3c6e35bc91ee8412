//! Watches: list-then-watch without gaps, bookmarks, `timeoutSeconds`, an expired
//! resourceVersion (410) and the watcher's relist, dropped watches, streaming-list mode.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

#[tokio::test]
async fn watch_from_a_list_gets_exactly_the_later_changes() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(&PostParams::default(), &widget("a", json!({})))
        .await
        .expect("a");
    let list = api.list(&ListParams::default()).await.expect("list");
    let from = list.metadata.resource_version.clone().expect("list rv");

    api.create(&PostParams::default(), &widget("b", json!({})))
        .await
        .expect("b");
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .expect("patch a");
    api.delete("b", &DeleteParams::default()).await.expect("delete b");
    // Another namespace is not part of this watch.
    widgets(&client, "kube-public")
        .create(&PostParams::default(), &widget("c", json!({})))
        .await
        .expect("c");

    let stream = api
        .watch(&WatchParams::default().timeout(2), &from)
        .await
        .expect("watch");
    let events = collect_until_end(stream).await;
    let seen: Vec<(String, String)> = events.iter().map(name_of).collect();
    assert_eq!(
        seen,
        [
            ("ADDED".into(), "b".into()),
            ("MODIFIED".into(), "a".into()),
            ("DELETED".into(), "b".into())
        ]
    );
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => rv(&o.metadata),
            _ => 0,
        })
        .collect();
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]) && rvs[0] > from.parse::<u64>().expect("rv"),
        "{rvs:?}"
    );

    // Without a resourceVersion the watch starts with the current state.
    let stream = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch from 0");
    let events = collect_until_end(stream).await;
    assert_eq!(
        events.iter().map(name_of).collect::<Vec<_>>(),
        [("ADDED".into(), "a".into())]
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn bookmarks_report_progress_when_nothing_matches() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let from = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = api
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    let other = widgets(&client, "kube-system")
        .create(&PostParams::default(), &widget("elsewhere", json!({})))
        .await
        .expect("create elsewhere");
    let bookmark = match next(&mut stream).await.expect("event") {
        WatchEvent::Bookmark(b) => b,
        other => panic!("only a bookmark expected, got {:?}", name_of(&other)),
    };
    assert_eq!(bookmark.types.kind, "Widget");
    assert_eq!(bookmark.types.api_version, "example.com/v1");
    let at: u64 = bookmark.metadata.resource_version.parse().expect("rv");
    assert!(
        at >= rv(&other.metadata),
        "the bookmark covers the change it skipped"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn timeout_seconds_ends_a_watch_cleanly_with_a_bookmark() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let from = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let stream = api
        .watch(&WatchParams::default().timeout(1), &from)
        .await
        .expect("watch");
    let all: Vec<_> = tokio::time::timeout(WAIT, stream.try_collect::<Vec<_>>())
        .await
        .expect("ends in time")
        .expect("no errors");
    assert!(
        matches!(all.last(), Some(WatchEvent::Bookmark(_))),
        "the last event is a bookmark"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn an_expired_resource_version_is_a_410_event_and_the_watcher_relists() {
    // Long bookmark interval: the watcher's resume point must stay behind the compaction.
    let options = Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let (emulator, client) = start_with(options).await;
    let api = widgets(&client, "default");
    let old = api
        .create(&PostParams::default(), &widget("old", json!({})))
        .await
        .expect("create");

    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut initial = Vec::new();
    loop {
        match next(&mut events).await.expect("watcher event") {
            watcher::Event::InitDone => break,
            watcher::Event::InitApply(o) => initial.push(o.metadata.name.unwrap_or_default()),
            _ => {}
        }
    }
    assert_eq!(initial, ["old"]);

    // Something else moves the store on, then the server forgets its history.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("mover", &[]))
        .await
        .expect("pod");
    emulator.restart_compacted();

    // A raw watch from the old resourceVersion gets HTTP 200 and an ERROR event with 410.
    let mut raw_watch = api
        .watch(&WatchParams::default(), &rv(&old.metadata).to_string())
        .await
        .expect("watch")
        .boxed();
    match next(&mut raw_watch).await.expect("event") {
        WatchEvent::Error(status) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {:?}", name_of(&other)),
    }

    api.create(&PostParams::default(), &widget("new", json!({})))
        .await
        .expect("create after restart");
    let mut relisted = Vec::new();
    let mut saw_init = false;
    loop {
        match next(&mut events).await {
            Ok(watcher::Event::Init) => saw_init = true,
            Ok(watcher::Event::InitApply(o)) if saw_init => {
                relisted.push(o.metadata.name.unwrap_or_default())
            }
            Ok(watcher::Event::InitDone) if saw_init => break,
            // The 410 surfaces as an error item before the relist.
            Ok(_) | Err(_) => {}
        }
    }
    relisted.sort();
    assert_eq!(relisted, ["new", "old"]);
    emulator.shutdown().await;
}

#[tokio::test]
async fn the_watcher_recovers_after_dropped_watches() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    while !matches!(next(&mut events).await.expect("event"), watcher::Event::InitDone) {}
    let lists_before = emulator.requests().of("widgets.example.com", "list");
    let watches_before = emulator.requests().of("widgets.example.com", "watch");

    emulator.drop_watches();
    api.create(&PostParams::default(), &widget("after-drop", json!({})))
        .await
        .expect("create");
    loop {
        if let watcher::Event::Apply(o) = next(&mut events).await.expect("event")
            && o.metadata.name.as_deref() == Some("after-drop")
        {
            break;
        }
    }
    let counts = emulator.requests();
    assert!(
        counts.of("widgets.example.com", "watch") > watches_before,
        "re-watched"
    );
    assert_eq!(
        counts.of("widgets.example.com", "list"),
        lists_before,
        "resumed without a relist"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn the_watcher_in_streaming_list_mode_gets_its_initial_state() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(&PostParams::default(), &widget("first", json!({})))
        .await
        .expect("create");
    let mut events = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match next(&mut events).await.expect("watcher event") {
            watcher::Event::InitApply(o) => initial.push(o.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(initial, ["first"]);
    api.create(&PostParams::default(), &widget("second", json!({})))
        .await
        .expect("create");
    match next(&mut events).await.expect("watcher event") {
        watcher::Event::Apply(o) => assert_eq!(o.metadata.name.as_deref(), Some("second")),
        other => panic!("expected the new widget, got {other:?}"),
    }
    assert_eq!(
        emulator.requests().of("widgets.example.com", "list"),
        0,
        "no list in streaming mode"
    );
    emulator.shutdown().await;
}
