//! `jobEvents(jobId:)`: one job's events after a cursor, then live, completing after its
//! terminal event, as a client that follows one job and resumes after a dropped connection
//! sees them over the real server's WebSocket.

mod common;

use common::{GqlWs, Server, tenants_server, token_entry, wait_for_metric};
use serde_json::{Value, json};

const ONE_JOB: &str = "subscription($id: ID, $after: String) { \
    jobEvents(jobId: $id, after: $after) { cursor phase previousPhase job { id } } }";

/// The messages of subscription `sub` until its `complete` (every one must be a `next`).
async fn until_complete(ws: &mut GqlWs, sub: &str) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let msg = ws.recv().await;
        assert_eq!(msg["id"], sub, "another operation's message: {msg}");
        match msg["type"].as_str() {
            Some("next") => {
                assert!(msg["payload"]["errors"].is_null(), "an error: {msg}");
                events.push(msg["payload"]["data"]["jobEvents"].clone());
            }
            Some("complete") => return events,
            _ => panic!("unexpected message: {msg}"),
        }
    }
}

/// The job's recorded history, as (cursor, phase) pairs, oldest first.
async fn recorded(server: &Server, id: &str) -> Vec<(String, String)> {
    let job = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { events { cursor phase } } }",
            json!({"id": id}),
        )
        .await;
    pairs(job["job"]["events"].as_array().unwrap())
}

fn pairs(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["cursor"].as_str().unwrap().to_owned(),
                e["phase"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn one_jobs_events_are_replayed_after_a_cursor_then_live_and_the_feed_completes_at_its_end() {
    let server = Server::start(&[]).await;
    // Another job's events interleave with the followed one's and must not reach the feed.
    let other = server
        .submit(json!({"name": "other", "command": ["sh", "-c", "sleep 0.3"]}))
        .await;
    let id = server
        .submit(json!({"name": "followed", "command": ["sh", "-c", "sleep 0.5"], "completions": 2}))
        .await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("all", ONE_JOB, json!({"id": id, "after": "0"}))
        .await;
    let seen = until_complete(&mut ws, "all").await;
    assert!(seen.iter().all(|e| e["job"]["id"] == id.as_str()), "{seen:?}");
    assert_eq!(seen.last().unwrap()["phase"], "SUCCEEDED");
    let history = recorded(&server, &id).await;
    assert_eq!(
        pairs(&seen),
        history,
        "the feed is the job's recorded history, in order"
    );
    assert!(
        history.len() >= 4,
        "pending, running, progress and the end: {history:?}"
    );

    // Resumed after its second event: the rest, once each.
    ws.subscribe("resumed", ONE_JOB, json!({"id": id, "after": history[1].0}))
        .await;
    assert_eq!(pairs(&until_complete(&mut ws, "resumed").await), history[2..]);
    // After its terminal event, or with no cursor once it has ended: nothing, and complete.
    ws.subscribe(
        "ended",
        ONE_JOB,
        json!({"id": id, "after": history.last().unwrap().0}),
    )
    .await;
    assert!(until_complete(&mut ws, "ended").await.is_empty());
    ws.subscribe("now", ONE_JOB, json!({"id": id})).await;
    assert!(until_complete(&mut ws, "now").await.is_empty());
    assert_ne!(other, id);
}

#[tokio::test]
async fn without_a_cursor_the_feed_starts_after_the_jobs_latest_event() {
    let server = Server::start(&[]).await;
    let gate = tempfile::tempdir().unwrap();
    let release = gate.path().join("go");
    let script = format!("while [ ! -e {0} ]; do sleep 0.05; done", release.display());
    let id = server.submit(json!({"command": ["sh", "-c", script]})).await;
    server.wait_phase(&id, "RUNNING").await;
    let before = recorded(&server, &id).await;
    let mut ws = GqlWs::connect(&server).await;
    ws.subscribe("now", ONE_JOB, json!({"id": id})).await;
    // In place (its cursor taken) before the job is let go.
    wait_for_metric(&server, "jobgate_subscription_group_members", 1.0).await;
    std::fs::write(&release, b"").unwrap();
    let seen = until_complete(&mut ws, "now").await;
    let after = recorded(&server, &id).await;
    assert_eq!(
        pairs(&seen),
        after[before.len()..],
        "only the events after the subscription started"
    );
    assert_eq!(seen.last().unwrap()["phase"], "SUCCEEDED");
}

#[tokio::test]
async fn a_job_the_caller_cannot_see_is_not_found_as_one_that_does_not_exist() {
    let (server, _dir) = tenants_server(&[
        token_entry("a", "token-a", r#"namespaces = ["team-a"]"#),
        token_entry("b", "token-b", r#"namespaces = ["team-b"]"#),
    ])
    .await;
    let (_, answer) = server
        .gql_as(
            Some("token-b"),
            "mutation { submitJob(input: {namespace: \"team-b\", command: [\"true\"]}) { job { id } } }",
            json!({}),
        )
        .await;
    let theirs = answer["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for id in [theirs.as_str(), "no-such-job"] {
        let mut ws = GqlWs::connect_with(&server, json!({"authorization": "Bearer token-a"})).await;
        ws.subscribe("s", ONE_JOB, json!({"id": id, "after": "0"})).await;
        let msg = ws.recv().await;
        assert_eq!(msg["type"], "next", "{msg}");
        assert_eq!(
            msg["payload"]["errors"][0]["extensions"]["code"], "NOT_FOUND",
            "{msg}"
        );
        assert_eq!(
            msg["payload"]["errors"][0]["message"],
            format!("no job with id {id:?}"),
            "the same answer for another tenant's job as for none"
        );
        assert_eq!(ws.recv().await["type"], "complete");
    }
}
