//! The `real-cluster` profile (`Options::real_cluster`): watch history bounded by age, the
//! answers to a too-new resourceVersion, flow control's 429s and the bookmark cadence, as a
//! kube-rs client sees them. Durations are shortened through `Options` where a test would
//! otherwise wait a real minute.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// The status line, lower-cased headers and body of a plain HTTP/1.1 GET (what the server
/// wrote, before any client interprets it).
async fn raw_get(emulator: &Emulator, path: &str) -> (String, Vec<(String, String)>, String) {
    let mut stream = tokio::net::TcpStream::connect(emulator.addr())
        .await
        .expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: emulator\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default().to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[test]
fn the_real_cluster_profile_has_upstreams_values() {
    let options = Options::real_cluster();
    assert_eq!(options.bookmark_interval, Duration::from_secs(60));
    assert!(options.bookmark_jitter > Duration::ZERO);
    assert_eq!(options.history_age, Some(Duration::from_secs(75)));
    assert_eq!(options.history, 100 * 1024);
    assert!(options.flow_control_429);
    let sim = options.simulation;
    assert_eq!(sim.job_sync_batch, Duration::from_secs(1));
    assert_eq!(sim.pod_failure_backoff, Duration::from_secs(10));
    assert_eq!(sim.termination, Duration::from_secs(30));
    assert!(Options::profile("fast").is_some() && Options::profile("nope").is_none());
}

#[tokio::test]
async fn a_resource_version_older_than_the_history_age_is_410_expired() {
    let age = Duration::from_millis(300);
    let (emulator, client) = start_with(Options {
        history_age: Some(age),
        ..Options::real_cluster()
    })
    .await;
    let api = widgets(&client, "default");
    let first = api
        .create(&PostParams::default(), &widget("first", json!({})))
        .await
        .expect("create");
    let from = rv(&first.metadata);
    api.create(&PostParams::default(), &widget("second", json!({})))
        .await
        .expect("create");
    // Let both changes age out of the window (nothing is asserted about the wait itself).
    tokio::time::sleep(age * 2).await;
    let mut stream = api
        .watch(&WatchParams::default(), &from.to_string())
        .await
        .expect("watch")
        .boxed();
    match next(&mut stream).await.expect("an event") {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status
                    .message
                    .starts_with(&format!("too old resource version: {from} (")),
                "{}",
                status.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_too_new_resource_version_is_504_too_large_after_the_wait() {
    let (emulator, _) = start_with(Options::real_cluster()).await;
    // No retries: kube's client would retry a 504 itself.
    let client = client(&emulator, false);
    let api = widgets(&client, "default");
    let current = emulator.store().current_rv();
    let future = current + 5;

    let status = api_error(api.list(&ListParams::default().at(&future.to_string())).await);
    assert_eq!((status.code, status.reason.as_str()), (504, "Timeout"));
    assert_eq!(
        status.message,
        format!("Timeout: Too large resource version: {future}, current: {current}")
    );
    let details = status.details.as_ref().expect("details");
    assert_eq!(details.retry_after_seconds, 1);
    assert_eq!(details.causes[0].reason, "ResourceVersionTooLarge");
    assert_eq!(details.causes[0].message, "Too large resource version");

    let (line, headers, _) = raw_get(
        &emulator,
        &format!("/apis/example.com/v1/namespaces/default/widgets?resourceVersion={future}"),
    )
    .await;
    assert!(line.contains(" 504 "), "{line}");
    assert_eq!(header(&headers, "retry-after"), Some("1"));

    // A streaming list (sendInitialEvents) from that version: the same Status as an ERROR event.
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), &future.to_string())
        .await
        .expect("watch")
        .boxed();
    match next(&mut stream).await.expect("an event") {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (504, "Timeout"));
            assert!(
                status
                    .message
                    .starts_with("Timeout: Too large resource version: ")
            );
        }
        other => panic!("expected a 504 ERROR event, got {other:?}"),
    }
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_streaming_list_from_a_version_reached_while_it_waits_starts_normally() {
    let (emulator, client) = start_with(Options::real_cluster()).await;
    let api = widgets(&client, "default");
    let future = emulator.store().current_rv() + 1;
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), &future.to_string())
        .await
        .expect("watch")
        .boxed();
    api.create(&PostParams::default(), &widget("late", json!({})))
        .await
        .expect("create");
    let (kind, name) = name_of(&next(&mut stream).await.expect("an event"));
    assert_eq!((kind.as_str(), name.as_str()), ("ADDED", "late"));
    emulator.shutdown().await;
}

#[tokio::test]
async fn a_throttled_request_is_answered_as_flow_control_writes_it() {
    let (emulator, _) = start_with(Options::real_cluster()).await;
    emulator.throttle("widgets.example.com", "list", 7);
    let (line, headers, body) = raw_get(&emulator, "/apis/example.com/v1/namespaces/default/widgets").await;
    assert!(line.contains(" 429 "), "{line}");
    assert_eq!(header(&headers, "retry-after"), Some("7"));
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));
    assert_eq!(body, "Too many requests, please try again later.\n");

    // kube-rs sees a 429 whose body is not a Status.
    let client = client(&emulator, false);
    let status = api_error(widgets(&client, "default").list(&ListParams::default()).await);
    assert_eq!(status.code, 429);
    assert_ne!(status.reason, "TooManyRequests");
    emulator.unthrottle();
    emulator.fail_next(1, 429);
    let (line, headers, body) = raw_get(&emulator, "/apis/example.com/v1/namespaces/default/widgets").await;
    assert!(line.contains(" 429 "), "{line}");
    assert_eq!(header(&headers, "retry-after"), Some("1"));
    assert_eq!(body, "Too many requests, please try again later.\n");
    emulator.shutdown().await;
}

#[tokio::test]
async fn bookmarks_come_at_the_profiles_interval() {
    let (emulator, client) = start_with(Options {
        bookmark_interval: Duration::from_millis(200),
        bookmark_jitter: Duration::from_millis(50),
        ..Options::real_cluster()
    })
    .await;
    let api = widgets(&client, "default");
    let from = emulator.store().current_rv();
    let mut stream = api
        .watch(&WatchParams::default(), &from.to_string())
        .await
        .expect("watch")
        .boxed();
    // A change of another kind moves the resourceVersion without an event for this watch.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let created = jobs
        .create(&PostParams::default(), &job("elsewhere"))
        .await
        .expect("create");
    let moved = rv(&created.metadata);
    loop {
        match next(&mut stream).await.expect("an event") {
            WatchEvent::Bookmark(b) => {
                let at: u64 = b.metadata.resource_version.parse().expect("a number");
                assert!(at > from, "a bookmark reports progress: {at} after {from}");
                if at >= moved {
                    break;
                }
            }
            other => panic!("only bookmarks on an idle watch, got {other:?}"),
        }
    }
    emulator.shutdown().await;
}
