//! The handshake and each message's answer. The server selects `graphql-transport-ws` when
//! the client offers it, alone or among others. A `ping` message gets a `pong` with the same
//! payload, a `pong` gets nothing, and a WebSocket ping frame gets a pong frame. A query or
//! mutation gets one `next`, then `complete`; a request that fails before it runs (syntax,
//! validation, an unknown operation) gets one `error` and no `complete`, the socket staying
//! open; a subscription whose setup fails gets `next` with errors, then `complete`. An id is
//! free again after `complete` or `error`, and a client's `complete` stops its subscription
//! without an echo.

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Client, PROTOCOL, read_events_until_succeeded};
use crate::common::{Server, WAIT};

#[tokio::test]
async fn subprotocol_is_selected_alone_or_among_others() {
    let server = Server::start(&[]).await;
    let client = Client::open(&server, Some(PROTOCOL)).await;
    assert_eq!(client.protocol.as_deref(), Some(PROTOCOL));
    let client = Client::open(&server, Some("graphql-ws, graphql-transport-ws")).await;
    assert_eq!(client.protocol.as_deref(), Some(PROTOCOL));
    let mut client = client;
    client.send(json!({"type": "connection_init"})).await;
    client.expect(json!({"type": "connection_ack"})).await;
}

#[tokio::test]
async fn ping_gets_pong_with_the_same_payload_and_pong_gets_nothing() {
    let server = Server::start(&[]).await;
    let mut client = Client::connect(&server).await;
    // Before init.
    client
        .send(json!({"type": "ping", "payload": {"n": 1, "nested": {"a": [true]}}}))
        .await;
    client
        .expect(json!({"type": "pong", "payload": {"n": 1, "nested": {"a": [true]}}}))
        .await;
    client.send(json!({"type": "ping"})).await;
    client.expect(json!({"type": "pong"})).await;
    client.send(json!({"type": "connection_init"})).await;
    client.expect(json!({"type": "connection_ack"})).await;
    // After the ack; an unsolicited pong gets no answer.
    client
        .send(json!({"type": "pong", "payload": {"ignored": true}}))
        .await;
    client.expect_alive().await;
}

#[tokio::test]
async fn ping_frame_gets_pong_frame() {
    let server = Server::start(&[]).await;
    let mut client = Client::acked(&server).await;
    client
        .ws
        .send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    loop {
        let frame = tokio::time::timeout(WAIT, client.ws.next())
            .await
            .expect("no pong frame within the wait limit")
            .expect("socket ended")
            .expect("socket error");
        if let Message::Pong(payload) = frame {
            assert_eq!(&payload[..], b"are you there");
            break;
        }
    }
}

#[tokio::test]
async fn query_gets_one_next_then_complete() {
    let server = Server::start(&[]).await;
    let mut client = Client::acked(&server).await;
    client
        .subscribe("q", "{ jobs(first: 1) { totalCount } }", json!({}))
        .await;
    let next = client.message().await;
    assert_eq!(next["id"], "q");
    assert_eq!(next["type"], "next");
    assert_eq!(next["payload"]["data"]["jobs"]["totalCount"], 0);
    assert!(next["payload"].get("errors").is_none(), "{next}");
    client.expect(json!({"id": "q", "type": "complete"})).await;
    client.expect_alive().await;
}

#[tokio::test]
async fn mutation_gets_one_next_then_complete() {
    let server = Server::start(&[]).await;
    let mut client = Client::acked(&server).await;
    client
        .subscribe(
            "m",
            "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id phase } } }",
            json!({"input": {"command": ["true"]}}),
        )
        .await;
    let next = client.message().await;
    assert_eq!(next["id"], "m");
    assert_eq!(next["type"], "next");
    assert_eq!(next["payload"]["data"]["submitJob"]["job"]["phase"], "PENDING");
    client.expect(json!({"id": "m", "type": "complete"})).await;
}

#[tokio::test]
async fn syntax_error_gets_error_without_complete_and_the_socket_stays_open() {
    let server = Server::start(&[]).await;
    let mut client = Client::acked(&server).await;
    client
        .subscribe("bad", "{ jobs(first: 1) { totalCount }", json!({}))
        .await;
    let error = client.message().await;
    assert_eq!(error["id"], "bad");
    assert_eq!(error["type"], "error");
    let errors = error["payload"].as_array().expect("a bare array of errors");
    assert!(!errors.is_empty());
    assert!(errors.iter().all(|e| e["message"].is_string()), "{error}");
    // No complete follows: the next frame is the pong.
    client.expect_alive().await;
}

#[tokio::test]
async fn validation_errors_and_unknown_operations_get_error() {
    let server = Server::start(&[]).await;
    let mut client = Client::acked(&server).await;
    let cases = [
        json!({"query": "{ noSuchField }"}),
        json!({"query": "query A { jobs { totalCount } } query B { jobs { totalCount } }"}),
        json!({"query": "query A { jobs { totalCount } }", "operationName": "Nope"}),
    ];
    for payload in cases {
        client
            .send(json!({"id": "v", "type": "subscribe", "payload": payload}))
            .await;
        let error = client.message().await;
        assert_eq!(error["type"], "error", "{payload}: {error}");
        assert!(!error["payload"].as_array().unwrap().is_empty());
        client.expect_alive().await;
    }
}

#[tokio::test]
async fn failed_subscription_setup_gets_next_with_errors_then_complete() {
    let server = Server::start(&[]).await;
    let mut client = Client::acked(&server).await;
    client
        .subscribe(
            "s",
            "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
            json!({"id": "no-such-job"}),
        )
        .await;
    let next = client.message().await;
    assert_eq!(next["type"], "next", "{next}");
    assert!(!next["payload"]["errors"].as_array().unwrap().is_empty());
    client.expect(json!({"id": "s", "type": "complete"})).await;
}

#[tokio::test]
async fn id_can_be_reused_after_complete_or_error() {
    let server = Server::start(&[]).await;
    let mut client = Client::acked(&server).await;
    for _ in 0..2 {
        client
            .subscribe("same", "{ jobs { totalCount } }", json!({}))
            .await;
        assert_eq!(client.message().await["type"], "next");
        client.expect(json!({"id": "same", "type": "complete"})).await;
    }
    client.subscribe("same", "{ broken", json!({})).await;
    assert_eq!(client.message().await["type"], "error");
    client
        .subscribe("same", "{ jobs { totalCount } }", json!({}))
        .await;
    assert_eq!(client.message().await["type"], "next");
    client.expect(json!({"id": "same", "type": "complete"})).await;
}

#[tokio::test]
async fn client_complete_stops_a_subscription_without_echo() {
    let server = Server::start(&[]).await;
    let first = server.submit(json!({"command": ["true"]})).await;
    server.wait_terminal(&first).await;

    let mut client = Client::acked(&server).await;
    // Replay from the start: read up to the first job's terminal event, after which nothing
    // is in flight for this subscription.
    client
        .subscribe(
            "events",
            "subscription { jobEvents(after: \"0\") { phase job { id } } }",
            json!({}),
        )
        .await;
    read_events_until_succeeded(&mut client, &first).await;
    client.send(json!({"type": "complete", "id": "events"})).await;

    // New events while the socket stays open: a second job, followed to its end on the same
    // socket. A live `events` subscription would have received them too.
    let second = server.submit(json!({"command": ["true"]})).await;
    client
        .subscribe(
            "probe",
            "subscription($id: ID!) { jobStatus(id: $id) { phase } }",
            json!({"id": second}),
        )
        .await;
    loop {
        let message = client.message().await;
        assert_eq!(message["id"], "probe", "after complete: {message}");
        if message["type"] == "complete" {
            break;
        }
    }
    // Completing again, or an unknown id, is ignored; no echo, no close.
    client.send(json!({"type": "complete", "id": "events"})).await;
    client.send(json!({"type": "complete", "id": "never-used"})).await;
    client.expect_alive().await;
    // And the id is free.
    client
        .subscribe("events", "{ jobs { totalCount } }", json!({}))
        .await;
    assert_eq!(client.message().await["type"], "next");
    client.expect(json!({"id": "events", "type": "complete"})).await;
}
