//! Fan-out through the real server over real WebSockets: identical subscriptions share one
//! rendering of each event (counted by `/metrics`) while every subscriber still gets every
//! event of its own stream exactly once and in order, across sockets, groups appearing and
//! vanishing, and scopes (callers who may see different things never share); and sockets that
//! do not keep up are let go: closed with the cursor to resume after when their queue stays
//! full, dropped by the keepalive when they read nothing at all.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{GqlWs, Polling, Server, scrape, tenants_server, token_entry, wait_for_metric};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const EVENTS: &str = "subscription { jobEvents { cursor phase job { id namespace } } }";

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

fn metric(metrics: &std::collections::HashMap<String, f64>, name: &str) -> f64 {
    metrics.get(name).copied().unwrap_or(0.0)
}

/// One `jobEvents` frame as a subscriber saw it.
#[derive(Clone, Debug, PartialEq)]
struct Frame {
    cursor: i64,
    /// The whole payload, to compare subscribers' frames byte for byte (as JSON).
    payload: Value,
}

fn frame_of(message: &Value) -> Frame {
    let payload = message["payload"].clone();
    let cursor = payload["data"]["jobEvents"]["cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("not an event: {message}"))
        .parse()
        .expect("a numeric cursor");
    Frame { cursor, payload }
}

/// Reads `ws` until every subscription in `ids` has seen a SUCCEEDED event of each job in
/// `jobs`; returns each subscription's frames in arrival order.
async fn frames_until_done(
    ws: &mut GqlWs,
    ids: &[&str],
    jobs: &BTreeSet<String>,
) -> BTreeMap<String, Vec<Frame>> {
    let mut frames: BTreeMap<String, Vec<Frame>> =
        ids.iter().map(|id| (id.to_string(), Vec::new())).collect();
    let mut done: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    while ids
        .iter()
        .any(|id| done.get(*id).map_or(0, BTreeSet::len) < jobs.len())
    {
        let message = ws.recv().await;
        assert_eq!(message["type"], "next", "{message}");
        let id = message["id"].as_str().expect("an id").to_owned();
        let frame = frame_of(&message);
        let event = &frame.payload["data"]["jobEvents"];
        let job = event["job"]["id"].as_str().expect("a job id").to_owned();
        if event["phase"] == "SUCCEEDED" && jobs.contains(&job) {
            done.entry(id.clone()).or_default().insert(job);
        }
        frames.get_mut(&id).expect("one of ours").push(frame);
    }
    frames
}

fn cursors(frames: &[Frame]) -> Vec<i64> {
    frames.iter().map(|f| f.cursor).collect()
}

fn assert_strictly_increasing(name: &str, frames: &[Frame]) {
    let c = cursors(frames);
    assert!(
        c.windows(2).all(|w| w[0] < w[1]),
        "{name}: cursors not strictly increasing (a repeat or a reorder): {c:?}"
    );
}

/// `part` is a run of consecutive frames of `whole`: nothing skipped, nothing repeated.
fn assert_contiguous_in(name: &str, part: &[Frame], whole: &[Frame]) {
    let Some(first) = part.first() else {
        return;
    };
    let start = whole
        .iter()
        .position(|f| f.cursor == first.cursor)
        .unwrap_or_else(|| {
            panic!(
                "{name}: its first cursor {} is not in the full stream",
                first.cursor
            )
        });
    assert_eq!(
        part,
        &whole[start..start + part.len()],
        "{name}: not a gapless run of the full stream"
    );
}

async fn submit_true_jobs(server: &Server, n: usize) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for _ in 0..n {
        ids.insert(server.submit(json!({"command": ["true"]})).await);
    }
    ids
}

#[tokio::test]
async fn identical_subscribers_share_one_rendering_per_event_and_each_get_every_frame_once_in_order() {
    let server = Server::start(&[]).await;
    // 4 sockets with 3 subscriptions each, all the same operation.
    let ids = ["a", "b", "c"];
    let mut sockets = Vec::new();
    for _ in 0..4 {
        let mut ws = GqlWs::connect(&server).await;
        for id in ids {
            ws.subscribe(id, EVENTS, json!({})).await;
        }
        sockets.push(ws);
    }
    wait_for_metric(&server, "jobgate_active_subscriptions", 12.0).await;
    // Joined: each has its place in the event stream, so the events to come reach it.
    wait_for_metric(&server, "jobgate_subscription_group_members", 12.0).await;
    wait_for_metric(&server, "jobgate_subscription_groups", 1.0).await;
    let renders_before = metric(&scrape(&server).await, "jobgate_subscription_renders_total");

    let jobs = submit_true_jobs(&server, 10).await;
    let mut all = Vec::new();
    for ws in &mut sockets {
        all.extend(frames_until_done(ws, &ids, &jobs).await.into_values());
    }
    let reference = all[0].clone();
    assert_strictly_increasing("subscriber 0", &reference);
    // At least PENDING, RUNNING and SUCCEEDED of each job.
    assert!(reference.len() >= 30, "{} frames", reference.len());
    for (i, frames) in all.iter().enumerate() {
        assert_eq!(
            frames, &reference,
            "subscriber {i} saw another stream than subscriber 0"
        );
    }
    // Each event was rendered once for the group, not once per subscriber (12 times). The
    // count is read after the last frame, and a render precedes its frames.
    let renders = metric(&scrape(&server).await, "jobgate_subscription_renders_total") - renders_before;
    assert_eq!(
        renders,
        reference.len() as f64,
        "renders for {} events",
        reference.len()
    );

    drop(sockets);
    wait_for_metric(&server, "jobgate_subscription_groups", 0.0).await;
}

#[tokio::test]
async fn callers_with_different_scopes_never_share_a_group_and_each_sees_only_its_own() {
    const ALICE: &str = "alice-token-0123456789";
    const AMY: &str = "amy-token-0123456789";
    const BOB: &str = "bob-token-0123456789";
    const ADMIN: &str = "admin-token-0123456789";
    let (server, _tokens) = tenants_server(&[
        token_entry("alice", ALICE, "namespaces = [\"team-a\"]"),
        token_entry("amy", AMY, "namespaces = [\"team-a\"]"),
        token_entry("bob", BOB, "namespaces = [\"team-b\"]"),
        token_entry("admin", ADMIN, "admin = true"),
    ])
    .await;
    let mut sockets = Vec::new();
    for token in [ALICE, AMY, BOB, ADMIN] {
        let mut ws =
            GqlWs::connect_with(&server, json!({ "authorization": format!("Bearer {token}") })).await;
        ws.subscribe("e", EVENTS, json!({})).await;
        sockets.push(ws);
    }
    wait_for_metric(&server, "jobgate_active_subscriptions", 4.0).await;
    // Joined: each has its place in the event stream, so the events to come reach it.
    wait_for_metric(&server, "jobgate_subscription_group_members", 4.0).await;
    // alice and amy see the same namespaces: one group; bob and the admin one each.
    wait_for_metric(&server, "jobgate_subscription_groups", 3.0).await;
    let renders_before = metric(&scrape(&server).await, "jobgate_subscription_renders_total");

    let submit = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }";
    let mut by_namespace: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for namespace in ["team-a", "team-b", "team-a", "team-b", "team-a"] {
        let (_, body) = server
            .gql_as(
                Some(ADMIN),
                submit,
                json!({"input": {"namespace": namespace, "command": ["true"]}}),
            )
            .await;
        let id = body["data"]["submitJob"]["job"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"))
            .to_owned();
        by_namespace.entry(namespace).or_default().insert(id);
    }
    let all_jobs: BTreeSet<String> = by_namespace.values().flatten().cloned().collect();
    let wanted = [
        by_namespace["team-a"].clone(),
        by_namespace["team-a"].clone(),
        by_namespace["team-b"].clone(),
        all_jobs,
    ];
    let mut seen = Vec::new();
    for (ws, jobs) in sockets.iter_mut().zip(&wanted) {
        let frames = frames_until_done(ws, &["e"], jobs).await.remove("e").unwrap();
        assert_strictly_increasing("subscriber", &frames);
        seen.push(frames);
    }
    for (frames, (who, namespace)) in seen.iter().zip([
        ("alice", Some("team-a")),
        ("amy", Some("team-a")),
        ("bob", Some("team-b")),
        ("admin", None),
    ]) {
        for frame in frames {
            let ns = frame.payload["data"]["jobEvents"]["job"]["namespace"]
                .as_str()
                .unwrap();
            if let Some(namespace) = namespace {
                assert_eq!(ns, namespace, "{who} got an event of another tenant: {frame:?}");
            }
        }
    }
    assert_eq!(
        seen[0], seen[1],
        "alice and amy, same scope, saw different streams"
    );
    // The admin's events are the union of the two teams', in one cursor order.
    let mut union: Vec<i64> = cursors(&seen[0]).into_iter().chain(cursors(&seen[2])).collect();
    union.sort_unstable();
    assert_eq!(cursors(&seen[3]), union);
    // One rendering per event per group: team-a's, team-b's, and all of them for the admin.
    let renders = metric(&scrape(&server).await, "jobgate_subscription_renders_total") - renders_before;
    assert_eq!(renders, (seen[0].len() + seen[2].len() + seen[3].len()) as f64);
}

#[tokio::test]
async fn subscribers_joining_and_leaving_a_group_each_get_a_gapless_run_in_order() {
    let server = Server::start(&[]).await;
    // The first subscriber stays for everything: the full stream.
    let mut first = GqlWs::connect(&server).await;
    first.subscribe("all", EVENTS, json!({})).await;
    wait_for_metric(&server, "jobgate_active_subscriptions", 1.0).await;
    // Joined: each has its place in the event stream, so the events to come reach it.
    wait_for_metric(&server, "jobgate_subscription_group_members", 1.0).await;

    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let waiting = sh(&format!("while [ ! -e {} ]; do sleep 0.02; done", go.display()));
    let mut jobs = BTreeSet::new();
    // Jobs come in three waves; subscribers join before the second and third and one of
    // them leaves in between. Joins and leaves race with events being delivered.
    let mut second = GqlWs::connect(&server).await;
    let mut third = GqlWs::connect(&server).await;
    for wave in 0..3 {
        if wave == 1 {
            second.subscribe("s", EVENTS, json!({})).await;
            third.subscribe("t", EVENTS, json!({})).await;
        }
        if wave == 2 {
            third.send(json!({"type": "complete", "id": "t"})).await;
        }
        for _ in 0..4 {
            jobs.insert(server.submit(json!({"command": waiting})).await);
        }
        jobs.extend(submit_true_jobs(&server, 4).await);
    }
    std::fs::write(&go, "").unwrap();
    let full = frames_until_done(&mut first, &["all"], &jobs)
        .await
        .remove("all")
        .unwrap();
    assert_strictly_increasing("first", &full);
    // It joined after some jobs had finished: it reads up to the full stream's last frame.
    let end = full.last().expect("events").cursor;
    let mut later = Vec::new();
    while later.last().is_none_or(|f: &Frame| f.cursor < end) {
        later.push(frame_of(&second.recv().await));
    }
    assert_strictly_increasing("second", &later);
    assert_contiguous_in("second", &later, &full);
    assert_eq!(later.last(), full.last(), "the second subscriber's last frame");
    // The third left: what it got before is a gapless run, and nothing came after its
    // `complete` but what was already on the way (still no gap, no repeat).
    // Its membership ends when its delivery is dropped (the member gauge: the first and the
    // second remain), after which nothing more of it is queued on its socket; a `jobStatus`
    // subscribed then answers at once, behind whatever of "t" was queued before.
    wait_for_metric(&server, "jobgate_subscription_group_members", 2.0).await;
    let probed = jobs.iter().next().expect("jobs").clone();
    third
        .subscribe(
            "probe",
            "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
            json!({"id": probed}),
        )
        .await;
    let mut left = Vec::new();
    loop {
        let message = third.recv().await;
        if message["id"] == "probe" {
            break;
        }
        left.push(frame_of(&message));
    }
    assert_strictly_increasing("third", &left);
    assert_contiguous_in("third", &left, &full);

    // A subscriber resuming after a cursor has a group of its own (other variables) and
    // replays from the store what the group had already delivered: exactly the rest.
    let middle = full[full.len() / 2].cursor;
    let mut resumed = GqlWs::connect(&server).await;
    resumed
        .subscribe(
            "r",
            "subscription($after: String) { jobEvents(after: $after) { cursor phase job { id namespace } } }",
            json!({"after": middle.to_string()}),
        )
        .await;
    let mut replayed = Vec::new();
    while replayed.len() < full.len() / 2 + full.len() % 2 - 1 {
        replayed.push(frame_of(&resumed.recv().await));
    }
    assert_eq!(
        cursors(&replayed),
        cursors(&full[full.len() / 2 + 1..]),
        "the replay after {middle}"
    );

    drop((first, second, third, resumed));
    wait_for_metric(&server, "jobgate_subscription_groups", 0.0).await;
    // A new subscriber after every group is gone starts a new one and gets new events.
    let mut again = GqlWs::connect(&server).await;
    again.subscribe("n", EVENTS, json!({})).await;
    wait_for_metric(&server, "jobgate_subscription_group_members", 1.0).await;
    let fresh = submit_true_jobs(&server, 1).await;
    let frames = frames_until_done(&mut again, &["n"], &fresh)
        .await
        .remove("n")
        .unwrap();
    assert!(frames.iter().all(|f| f.cursor > full.last().unwrap().cursor));
}

#[tokio::test]
async fn a_shared_job_status_gives_a_late_subscriber_the_current_state_first() {
    let server = Server::start(&[]).await;
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    let id = server
        .submit(json!({"command": sh(&format!("while [ ! -e {} ]; do sleep 0.02; done", go.display()))}))
        .await;
    let status = "subscription($id: ID!) { jobStatus(id: $id) { phase previousPhase job { id } } }";
    let mut early = GqlWs::connect(&server).await;
    early.subscribe("s", status, json!({"id": id})).await;
    // Its first frame is the state at subscription time; wait until it is RUNNING.
    loop {
        let message = early.recv().await;
        if message["payload"]["data"]["jobStatus"]["phase"] == "RUNNING" {
            break;
        }
    }
    let mut late = GqlWs::connect(&server).await;
    late.subscribe("s", status, json!({"id": id})).await;
    let current = late.recv().await;
    assert_eq!(
        current["payload"]["data"]["jobStatus"]["phase"], "RUNNING",
        "{current}"
    );
    wait_for_metric(&server, "jobgate_subscription_groups", 1.0).await;
    std::fs::write(&go, "").unwrap();
    for ws in [&mut early, &mut late] {
        let last = ws.recv().await;
        assert_eq!(
            last["payload"]["data"]["jobStatus"]["phase"], "SUCCEEDED",
            "{last}"
        );
        assert_eq!(
            last["payload"]["data"]["jobStatus"]["previousPhase"], "RUNNING",
            "{last}"
        );
        assert_eq!(ws.recv().await, json!({"id": "s", "type": "complete"}));
    }
}

/// A WebSocket over a TCP socket with a small receive buffer, so that a client that stops
/// reading fills the server's queue after a few hundred KiB rather than many MiB.
async fn small_window_socket(server: &Server) -> common::Ws {
    let addr: std::net::SocketAddr = server
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("the server's address");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(addr).await.unwrap();
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(server.ws_url())
            .unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse().unwrap());
    let (ws, _) = tokio_tungstenite::client_async(request, tokio_tungstenite::MaybeTlsStream::Plain(tcp))
        .await
        .expect("websocket handshake");
    ws
}

async fn init(ws: &mut common::Ws) {
    ws.send(Message::text(json!({"type": "connection_init"}).to_string()))
        .await
        .unwrap();
    loop {
        if let Some(Ok(Message::Text(t))) = ws.next().await {
            assert!(t.as_str().contains("connection_ack"), "{t}");
            return;
        }
    }
}

/// Jobs whose events are large: each frame of `BIG` carries the 8 KiB argument.
async fn submit_big_jobs(server: &Server, n: usize) {
    let big = "x".repeat(8 << 10);
    for _ in 0..n {
        server.submit(json!({"command": ["true", big]})).await;
    }
}

const BIG: &str = "subscription { jobEvents { cursor phase job { id spec { command } } } }";

#[tokio::test]
async fn a_subscriber_that_stops_reading_is_closed_with_the_cursor_to_resume_after() {
    // Keepalive off: this is the queue's verdict, not the keepalive's.
    let server = Server::start(&["--ws-keepalive-ms", "0", "--ws-slow-consumer-ms", "400"]).await;
    let mut reader = GqlWs::connect(&server).await;
    reader.subscribe("r", BIG, json!({})).await;
    let mut stalled = small_window_socket(&server).await;
    init(&mut stalled).await;
    stalled
        .send(Message::text(
            json!({"id": "x", "type": "subscribe", "payload": {"query": BIG}}).to_string(),
        ))
        .await
        .unwrap();
    wait_for_metric(&server, "jobgate_active_subscriptions", 2.0).await;
    // Joined: each has its place in the event stream, so the events to come reach it.
    wait_for_metric(&server, "jobgate_subscription_group_members", 2.0).await;

    // Events until the stalled socket's queue has stayed full long enough, in bounded steps;
    // the healthy reader reads all the while.
    let mut full: Vec<Frame> = Vec::new();
    let mut closed = false;
    for _ in 0..100 {
        submit_big_jobs(&server, 10).await;
        while let Some(message) = reader.recv_within(Duration::from_millis(50)).await {
            full.push(frame_of(&message));
        }
        let m = scrape(&server).await;
        if metric(&m, "jobgate_websocket_slow_consumers_closed_total") == 1.0 {
            closed = true;
            break;
        }
    }
    assert!(closed, "the stalled socket was never closed");
    wait_for_metric(&server, "jobgate_active_subscriptions", 1.0).await;

    // The stalled client now reads what reached it, then the close.
    let mut got = Vec::new();
    let (code, reason) = loop {
        match tokio::time::timeout(common::WAIT, stalled.next())
            .await
            .expect("the close comes")
        {
            Some(Ok(Message::Text(t))) => got.push(frame_of(&serde_json::from_str(t.as_str()).unwrap())),
            Some(Ok(Message::Close(Some(c)))) => break (u16::from(c.code), c.reason.to_string()),
            Some(Ok(_)) => {}
            other => panic!("no close frame: {other:?}"),
        }
    };
    assert_eq!(code, 1013, "{reason}");
    let resume_after: i64 = reason
        .strip_prefix("Slow consumer: resume jobEvents after ")
        .unwrap_or_else(|| panic!("reason: {reason}"))
        .parse()
        .expect("a cursor");
    // Keep reading the healthy subscriber until it has the whole stream so far: every event
    // published by now (which includes every one the stalled client got) reaches it.
    let published = metric(&scrape(&server).await, "jobgate_events_published_cursor") as i64;
    while full.last().is_none_or(|f| f.cursor < published) {
        full.push(frame_of(&reader.recv().await));
    }
    assert_strictly_increasing("reader", &full);
    assert_strictly_increasing("stalled", &got);
    assert_contiguous_in("stalled", &got, &full);
    // Everything up to the resume cursor reached the stalled client before the close.
    let up_to: Vec<i64> = cursors(&full)
        .into_iter()
        .filter(|c| *c <= resume_after)
        .collect();
    assert!(!up_to.is_empty());
    assert_eq!(
        cursors(&got)[..up_to.len()],
        up_to[..],
        "frames before the resume cursor are missing"
    );
    // Resuming after it gives the rest, starting right after it.
    let mut resumed = GqlWs::connect(&server).await;
    resumed
        .subscribe(
            "again",
            "subscription($after: String) { jobEvents(after: $after) { cursor phase job { id spec { command } } } }",
            json!({"after": resume_after.to_string()}),
        )
        .await;
    let next = frame_of(&resumed.recv().await);
    assert_eq!(
        Some(next.cursor),
        full.iter().map(|f| f.cursor).find(|c| *c > resume_after)
    );
    // The healthy reader was never closed.
    reader.subscribe("ping", "{ __typename }", json!({})).await;
    let answer = loop {
        let message = reader.recv().await;
        if message["id"] == "ping" {
            break message;
        }
    };
    assert_eq!(answer["payload"]["data"]["__typename"], "Query");
}

#[tokio::test]
async fn the_keepalive_drops_a_subscriber_that_reads_nothing_while_events_stream() {
    let server = Server::start(&["--ws-keepalive-ms", "300", "--ws-slow-consumer-ms", "0"]).await;
    let mut reader = GqlWs::connect(&server).await;
    reader.subscribe("r", BIG, json!({})).await;
    let mut silent = GqlWs::connect(&server).await;
    silent.subscribe("x", BIG, json!({})).await;
    wait_for_metric(&server, "jobgate_active_subscriptions", 2.0).await;
    // Joined: each has its place in the event stream, so the events to come reach it.
    wait_for_metric(&server, "jobgate_subscription_group_members", 2.0).await;
    // The reader reads all the time (so answers every ping); `silent` is never read again:
    // it never sees a ping, so never answers one.
    let reading = tokio::spawn(async move {
        let mut frames = 0usize;
        while let Some(Ok(frame)) = reader.ws.next().await {
            frames += usize::from(matches!(frame, Message::Text(_)));
        }
        frames
    });
    let poll = Polling::start();
    loop {
        submit_big_jobs(&server, 2).await;
        let metrics = scrape(&server).await;
        if metric(&metrics, "jobgate_websocket_connections") == 1.0 {
            break;
        }
        poll.pause(|| "the silent subscriber was never dropped".to_owned())
            .await;
    }
    let metrics = scrape(&server).await;
    assert_eq!(metric(&metrics, "jobgate_active_subscriptions"), 1.0);
    assert_eq!(
        metric(&metrics, "jobgate_websocket_slow_consumers_closed_total"),
        0.0
    );
    assert!(!reading.is_finished(), "the reading subscriber was dropped too");
    reading.abort();
    drop(silent);
}

#[tokio::test]
async fn subscribers_differing_only_in_root_arguments_share_a_group_and_each_get_their_own_events() {
    let server = Server::start(&[]).await;
    // The root field's arguments (cursor, filter) choose each subscriber's events; `$n` is used
    // below the root, so it changes the rendering and splits the group.
    let document = "subscription($after: String, $filter: JobFilter, $n: Int!) { \
        jobEvents(after: $after, filter: $filter) { cursor phase job { id events(last: $n) { phase } } } }";
    let before = server.submit(json!({"command": ["true"]})).await;
    let mut probe = GqlWs::connect(&server).await;
    probe
        .subscribe("p", document, json!({"after": "0", "n": 1}))
        .await;
    // The earlier job has finished before the others subscribe.
    let first = frame_of(&probe.recv().await);
    while probe.recv().await["payload"]["data"]["jobEvents"]["phase"] != "SUCCEEDED" {}
    drop(probe);
    wait_for_metric(&server, "jobgate_subscription_groups", 0.0).await;

    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("all", document, json!({"n": 1})).await;
    ws.subscribe(
        "done",
        document,
        json!({"after": "0", "filter": {"phases": ["SUCCEEDED"]}, "n": 1}),
    )
    .await;
    ws.subscribe("two", document, json!({"n": 2})).await;
    wait_for_metric(&server, "jobgate_active_subscriptions", 3.0).await;
    // Joined: each has its place in the event stream, so the events to come reach it.
    wait_for_metric(&server, "jobgate_subscription_group_members", 3.0).await;
    wait_for_metric(&server, "jobgate_subscription_groups", 2.0).await;
    let jobs = submit_true_jobs(&server, 3).await;
    let mut until = jobs.clone();
    until.insert(before.clone());
    let mut frames: BTreeMap<String, Vec<Frame>> = BTreeMap::new();
    let mut succeeded: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    while ["all", "two"]
        .iter()
        .any(|id| succeeded.get(*id).map_or(0, BTreeSet::len) < jobs.len())
        || succeeded.get("done").map_or(0, BTreeSet::len) < until.len()
    {
        let message = ws.recv().await;
        let id = message["id"].as_str().expect("an id").to_owned();
        let frame = frame_of(&message);
        let event = &frame.payload["data"]["jobEvents"];
        if event["phase"] == "SUCCEEDED" {
            succeeded
                .entry(id.clone())
                .or_default()
                .insert(event["job"]["id"].as_str().unwrap().to_owned());
        }
        frames.entry(id).or_default().push(frame);
    }
    for (id, frames) in &frames {
        assert_strictly_increasing(id, frames);
    }
    // "done" replayed from cursor 0 and kept only SUCCEEDED events: the earlier job's too.
    let done = &frames["done"];
    assert!(
        done.iter()
            .all(|f| f.payload["data"]["jobEvents"]["phase"] == "SUCCEEDED")
    );
    assert!(done.first().unwrap().cursor > first.cursor);
    assert_eq!(done.len(), until.len(), "{done:?}");
    // Its frames of the new jobs are the very frames "all" got (one shared rendering).
    let all_succeeded: Vec<&Frame> = frames["all"]
        .iter()
        .filter(|f| f.payload["data"]["jobEvents"]["phase"] == "SUCCEEDED")
        .collect();
    assert_eq!(done[1..].iter().collect::<Vec<_>>(), all_succeeded);
    // "two" renders its own way: two events of history where "all" has one.
    let last_two = frames["two"].last().unwrap();
    let last_all = frames["all"].last().unwrap();
    assert_eq!(last_two.cursor, last_all.cursor);
    let history = |f: &Frame| {
        f.payload["data"]["jobEvents"]["job"]["events"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!((history(last_all), history(last_two)), (1, 2));
}
