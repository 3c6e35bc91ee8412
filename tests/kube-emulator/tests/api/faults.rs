//! The emulator's controls: going down and coming back up, and the request counters.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

#[tokio::test]
async fn go_down_cuts_clients_and_come_up_restores_them() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    while !matches!(next(&mut events).await.expect("event"), watcher::Event::InitDone) {}

    emulator.go_down().await;
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => panic!("expected a connection failure, got an API answer {s:?}"),
        Err(_) => {}
        Ok(_) => panic!("the server is down"),
    }
    assert_eq!(
        emulator.requests().open_watches,
        0,
        "live watch connections are cut"
    );
    emulator.come_up().await.expect("come up");
    api.create(&PostParams::default(), &widget("back", json!({})))
        .await
        .expect("create after coming up");
    loop {
        if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = next(&mut events).await
            && o.metadata.name.as_deref() == Some("back")
        {
            break;
        }
    }
    emulator.shutdown().await;
}

#[tokio::test]
async fn requests_are_counted_by_verb_and_resource() {
    let (emulator, client) = start().await;
    emulator.reset_requests();
    let api = widgets(&client, "default");
    api.list(&ListParams::default()).await.expect("list");
    api.list(&ListParams::default()).await.expect("list");
    let stream = api.watch(&WatchParams::default(), "0").await.expect("watch");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let _ = jobs.get_opt("none").await.expect("get");
    client.apiserver_version().await.expect("version");
    let counts = emulator.requests();
    assert_eq!(counts.of("widgets.example.com", "list"), 2);
    assert_eq!(counts.of("widgets.example.com", "watch"), 1);
    assert_eq!(counts.of("jobs.batch", "get"), 1);
    assert_eq!((counts.verb("list"), counts.discovery), (2, 1));
    assert_eq!(counts.open_watches, 1);
    drop(stream);
    tokio::time::timeout(WAIT, async {
        while emulator.requests().open_watches > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the watch closes when the client goes");
    emulator.shutdown().await;
}
