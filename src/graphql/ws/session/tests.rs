//! The connection's life against the toy schema of `test_support`: the subprotocol, the
//! handshake and its timer, message validation, close codes, and how a socket is let go.

use std::{sync::Arc, time::Duration};

use futures::SinkExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite;

use super::*;
use crate::graphql::ws::codec::{BINARY_REFUSED, MAX_CLOSE_REASON};
use crate::graphql::ws::test_support::{Gates, TestServer, hook, notified, schema};

#[tokio::test]
async fn subprotocol_is_negotiated_alone_or_among_others() {
    let server = TestServer::default().await;
    let client = server.connect().await;
    assert_eq!(client.protocol.as_deref(), Some(PROTOCOL));
    let client = server
        .connect_with(Some("graphql-ws, graphql-transport-ws"))
        .await;
    assert_eq!(client.protocol.as_deref(), Some(PROTOCOL));
}

#[tokio::test]
async fn missing_subprotocol_gets_4406() {
    let server = TestServer::default().await;
    let mut client = server.connect_with(None).await;
    assert_eq!(client.protocol, None);
    assert_eq!(client.expect_close(4406).await, "Subprotocol not acceptable");
}

#[tokio::test]
async fn init_payload_absent_null_or_object_is_acknowledged() {
    let server = TestServer::default().await;
    for init in [
        json!({"type": "connection_init"}),
        json!({"type": "connection_init", "payload": null}),
        json!({"type": "connection_init", "payload": {}}),
    ] {
        let mut client = server.connect().await;
        client.send(init).await;
        client.expect(json!({"type": "connection_ack"})).await;
    }
}

#[tokio::test]
async fn binary_frames_get_4400_even_when_they_hold_json() {
    let server = TestServer::default().await;
    for frame in [br#"{"type":"connection_init"}"#.to_vec(), vec![0xff, 0xfe]] {
        let mut client = server.connect().await;
        client.ws.send(tungstenite::Message::binary(frame)).await.unwrap();
        assert_eq!(client.expect_close(4400).await, BINARY_REFUSED);
    }
}

#[tokio::test]
async fn oversized_message_gets_1009() {
    let server = TestServer::start(WsConfig {
        max_message_bytes: 1024,
        ..WsConfig::new(crate::metrics::Metrics::new())
    })
    .await;
    let mut client = server.acked().await;
    let query = format!("{{ hello {} }}", " ".repeat(2048));
    client.subscribe("big", &query).await;
    assert_eq!(client.expect_close(1009).await, "Message too big");
}

#[tokio::test]
async fn init_timeout_gets_4408() {
    let server = TestServer::start(WsConfig {
        init_timeout: Duration::from_millis(50),
        ..WsConfig::new(crate::metrics::Metrics::new())
    })
    .await;
    let mut client = server.connect().await;
    assert_eq!(
        client.expect_close(4408).await,
        "Connection initialisation timeout"
    );
}

#[tokio::test]
async fn slow_init_hook_is_not_a_timeout() {
    let server = TestServer::start(WsConfig {
        init_timeout: Duration::from_millis(50),
        ..WsConfig::new(crate::metrics::Metrics::new())
    })
    .await;
    let mut client = server.connect().await;
    client
        .send(json!({"type": "connection_init", "payload": {"mode": "slow"}}))
        .await;
    // Let the timer's deadline pass while the hook runs; a ping still gets its pong.
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.expect_alive().await;
    server.gates.init.add_permits(1);
    client.expect(json!({"type": "connection_ack"})).await;
}

#[tokio::test]
async fn ping_before_init_gets_pong_and_pong_gets_nothing() {
    let server = TestServer::default().await;
    let mut client = server.connect().await;
    client.send(json!({"type": "ping"})).await;
    client.expect(json!({"type": "pong"})).await;
    client.send(json!({"type": "ping", "payload": null})).await;
    client.expect(json!({"type": "pong"})).await;
    client.send(json!({"type": "pong", "payload": {"x": 1}})).await;
    client.expect_alive().await;
}

#[tokio::test]
async fn subscribe_before_ack_gets_4401() {
    let server = TestServer::default().await;
    let mut client = server.connect().await;
    client.subscribe("1", "{ hello }").await;
    assert_eq!(client.expect_close(4401).await, "Unauthorized");
}

#[tokio::test]
async fn subscribe_while_init_hook_runs_gets_4401() {
    let server = TestServer::default().await;
    let mut client = server.connect().await;
    client
        .send(json!({"type": "connection_init", "payload": {"mode": "slow"}}))
        .await;
    client.subscribe("1", "{ hello }").await;
    client.expect_close(4401).await;
}

#[tokio::test]
async fn second_init_gets_4429_pending_or_acked() {
    let server = TestServer::default().await;
    let mut client = server.connect().await;
    client
        .send(json!({"type": "connection_init", "payload": {"mode": "slow"}}))
        .await;
    client.send(json!({"type": "connection_init"})).await;
    assert_eq!(
        client.expect_close(4429).await,
        "Too many initialisation requests"
    );

    let mut client = server.acked().await;
    client.send(json!({"type": "connection_init"})).await;
    client.expect_close(4429).await;
}

#[tokio::test]
async fn rejected_init_gets_4403_and_failed_init_4500() {
    let server = TestServer::default().await;
    let mut client = server.connect().await;
    client
        .send(json!({"type": "connection_init", "payload": {"mode": "reject"}}))
        .await;
    assert_eq!(client.expect_close(4403).await, "Forbidden: bad token");

    for mode in ["fail", "panic"] {
        let mut client = server.connect().await;
        client
            .send(json!({"type": "connection_init", "payload": {"mode": mode}}))
            .await;
        // The cause is not leaked to the client.
        assert_eq!(client.expect_close(4500).await, "Internal server error");
    }
}

#[tokio::test]
async fn malformed_messages_get_4400() {
    let server = TestServer::default().await;
    for text in [
        "nope",
        r#"{"type":"start","id":"1","payload":{"query":"{ hello }"}}"#,
        r#"{"type":"next","id":"1","payload":{}}"#,
        r#"{"type":"subscribe","id":"","payload":{"query":"{ hello }"}}"#,
        r#"{"type":"subscribe","id":"1","payload":{"query":"{ hello }","variables":[]}}"#,
    ] {
        let mut client = server.acked().await;
        client.send_text(text).await;
        let reason = client.expect_close(4400).await;
        assert!(reason.starts_with("Invalid message received"), "{reason}");
    }
    // Before init as well.
    let mut client = server.connect().await;
    client
        .send(json!({"type": "connection_init", "payload": "token"}))
        .await;
    client.expect_close(4400).await;
}

#[tokio::test]
async fn close_reason_is_clipped_for_long_ids() {
    let server = TestServer::default().await;
    for id in ["x".repeat(200), "é".repeat(100)] {
        let mut client = server.acked().await;
        client.subscribe(&id, "subscription { gated }").await;
        client.subscribe(&id, "subscription { gated }").await;
        // The client would fail the connection on an over-long close frame, so receiving
        // the frame at all proves the clipping.
        let reason = client.expect_close(4409).await;
        assert!(reason.len() <= MAX_CLOSE_REASON);
        assert!(reason.starts_with("Subscriber for "));
    }
}

#[tokio::test]
async fn closing_the_socket_drops_every_operation() {
    let server = TestServer::default().await;
    let mut client = server.acked().await;
    client.subscribe("a", "subscription { gated }").await;
    client.expect_alive().await;
    client.ws.close(None).await.unwrap();
    notified(&server.gates.stream_dropped).await;
}

#[tokio::test]
async fn shutdown_closes_with_1001_and_drops_operations() {
    let server = TestServer::default().await;
    let mut client = server.acked().await;
    let mut idle = server.connect().await;
    client.subscribe("a", "subscription { gated }").await;
    client.expect_alive().await;
    server.shutdown.cancel();
    assert_eq!(client.expect_close(1001).await, "Server shutting down");
    assert_eq!(idle.expect_close(1001).await, "Server shutting down");
    notified(&server.gates.stream_dropped).await;
}

#[tokio::test]
async fn full_control_queue_means_1013() {
    let gates = Arc::new(Gates::default());
    let (control, _control_rx) = mpsc::channel(1);
    let (data, _data_rx) = mpsc::channel(1);
    let executor = schema(&gates);
    let metrics = crate::metrics::Metrics::new();
    let conn = Connection {
        execute: {
            let executor = executor.clone();
            Arc::new(move |request, session| {
                async_graphql::Executor::execute_stream(&executor, request, Some(session))
            })
        },
        groups: Arc::new(crate::graphql::ws::fanout::Groups::new(&metrics)),
        executor,
        on_init: hook(&gates),
        control,
        data: crate::graphql::ws::socket_writer::DataQueue::new(data),
        phase: Phase::AwaitingInit,
        ops: Registry::new(crate::metrics::Metrics::new(), 0),
        metrics: crate::metrics::Metrics::new(),
        request_timeout: Duration::ZERO,
    };
    assert!(conn.send_control(Out::Ping([0; 8])).is_none());
    assert!(matches!(
        conn.send_control(Out::Ping([0; 8])),
        Some(Exit::Close(code, _)) if u16::from(code) == 1013
    ));
}
