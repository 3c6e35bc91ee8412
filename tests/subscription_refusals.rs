//! Subscriptions refused through the real server over WebSocket, each with its own error and
//! nothing else lost: a burst of subscriptions over the per-socket limit gets one error each
//! while the socket and its live subscriptions stay, and `jobEvents` after a cursor no event
//! has reached is refused rather than left waiting forever.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor.

mod common;

use std::collections::BTreeSet;

use common::{GqlWs, Polling, Server, scrape};
use futures::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const EVENTS: &str = "subscription($after: String) { jobEvents(after: $after) { cursor phase job { id } } }";

/// The newest event's cursor, as `jobStats` reads it.
async fn newest_cursor(server: &Server) -> i64 {
    server.gql_ok("{ jobStats { cursor } }", json!({})).await["jobStats"]["cursor"]
        .as_str()
        .expect("a cursor")
        .parse()
        .expect("a numeric cursor")
}

#[tokio::test]
async fn a_burst_of_subscriptions_over_the_limit_gets_an_error_each_and_keeps_the_socket() {
    const LIVE: usize = 100;
    const OVER: usize = 40;
    let server = Server::start(&["--ws-max-subscriptions", &LIVE.to_string()]).await;
    let mut ws = GqlWs::connect(&server).await;
    for i in 0..LIVE {
        ws.subscribe(&format!("live-{i}"), EVENTS, json!({})).await;
    }
    // All in one write: the server reads them faster than it can write 40 answers.
    for i in 0..OVER {
        let subscribe = json!({"id": format!("over-{i}"), "type": "subscribe", "payload": {"query": EVENTS}});
        ws.ws.feed(Message::text(subscribe.to_string())).await.unwrap();
    }
    ws.ws.flush().await.unwrap();

    let mut refused = BTreeSet::new();
    while refused.len() < OVER {
        let message = ws.recv().await;
        assert_eq!(message["type"], "error", "{message}");
        assert_eq!(
            message["payload"][0]["extensions"]["code"], "LIMIT_EXCEEDED",
            "{message}"
        );
        let id = message["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("over-") && refused.insert(id.clone()), "{message}");
    }

    // The socket lives, and so does each of its subscriptions: once all have joined, a job's
    // first event reaches every one of them.
    let polling = Polling::start();
    loop {
        let members = scrape(&server).await["jobgate_subscription_group_members"];
        if members == LIVE as f64 {
            break;
        }
        polling
            .pause(|| format!("{members} subscriptions live, not {LIVE}"))
            .await;
    }
    let id = server.submit(json!({"command": ["true"]})).await;
    let mut reached = BTreeSet::new();
    while reached.len() < LIVE {
        let message = ws.recv().await;
        assert_eq!(message["type"], "next", "{message}");
        let subscription = message["id"].as_str().unwrap().to_owned();
        assert!(subscription.starts_with("live-"), "{message}");
        if message["payload"]["data"]["jobEvents"]["job"]["id"] == json!(id) {
            reached.insert(subscription);
        }
    }
}

#[tokio::test]
async fn job_events_after_a_cursor_past_the_newest_is_refused() {
    let server = Server::start(&[]).await;
    let id = server.submit(json!({"command": ["true"]})).await;
    server.wait_terminal(&id).await;
    let newest = newest_cursor(&server).await;

    let mut ws = GqlWs::connect(&server).await;
    let past = (newest + 1000).to_string();
    ws.subscribe("past", EVENTS, json!({ "after": past })).await;
    let message = ws.recv().await;
    assert_eq!(message["type"], "next", "expected BAD_USER_INPUT, got {message}");
    let error = &message["payload"]["errors"][0];
    assert_eq!(error["extensions"]["code"], "BAD_USER_INPUT", "{message}");
    assert_eq!(error["extensions"]["field"], "after", "{message}");
    let text = error["message"].as_str().unwrap();
    assert!(
        text.contains("past the newest event") && text.contains(&newest.to_string()),
        "{message}"
    );
    assert_eq!(ws.recv().await["type"], "complete", "the subscription ends there");

    // The newest cursor itself is where a live subscription resumes: the next event comes.
    ws.subscribe("newest", EVENTS, json!({ "after": newest.to_string() }))
        .await;
    let next_job = server.submit(json!({"command": ["true"]})).await;
    let event: Value = ws.recv().await;
    assert_eq!(event["id"], "newest", "{event}");
    assert_eq!(
        event["payload"]["data"]["jobEvents"]["job"]["id"],
        json!(next_job),
        "{event}"
    );
    assert_eq!(
        event["payload"]["data"]["jobEvents"]["cursor"],
        json!((newest + 1).to_string()),
        "{event}"
    );
}
