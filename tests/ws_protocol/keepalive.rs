//! Keepalive: the server sends WebSocket ping frames every `--ws-keepalive-ms`; a client
//! answering them with pong frames is kept, and a peer that answers none (one that never
//! does, or one that stops reading while events flow) is dropped: its connection ends, with no
//! close frame, and its socket and subscriptions are freed.

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::MaybeTlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::client::{Client, PROTOCOL};
use crate::common::{self, Server, WAIT};

#[tokio::test]
async fn keepalive_pings_a_live_client_and_keeps_it() {
    let server = Server::start(&["--ws-keepalive-ms", "200"]).await;
    let mut client = Client::acked(&server).await;
    // Reading lets tungstenite answer each ping frame.
    let mut pings = 0;
    while pings < 2 {
        let frame = tokio::time::timeout(WAIT, client.ws.next())
            .await
            .expect("no ping frame within the wait limit")
            .expect("socket ended")
            .expect("socket error");
        if matches!(frame, Message::Ping(_)) {
            pings += 1;
        }
    }
    client.expect_alive().await;
}

#[tokio::test]
async fn keepalive_drops_a_peer_that_never_answers() {
    let server = Server::start(&["--ws-keepalive-ms", "200"]).await;
    // A bare TCP client: it reads everything but never sends a pong frame.
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let handshake = format!(
        "GET /graphql HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n",
        server.addr
    );
    tcp.write_all(handshake.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let body_start = tokio::time::timeout(WAIT, async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed during the handshake");
            received.extend_from_slice(&chunk[..n]);
            if let Some(i) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        }
    })
    .await
    .expect("no handshake answer");
    assert!(
        received.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&received)
    );
    let mut frames = received.split_off(body_start);
    // connection_init, so the init timeout plays no part.
    tcp.write_all(&masked_text_frame(br#"{"type":"connection_init"}"#))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, async {
        loop {
            let mut chunk = [0u8; 4096];
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => frames.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("the server kept a peer that never answered its pings");
    let opcodes = opcodes(&frames);
    assert!(opcodes.contains(&0x1), "no connection_ack: {opcodes:?}");
    assert!(opcodes.contains(&0x9), "no ping frame: {opcodes:?}");
    // Dropped like `terminate()`: no close frame.
    assert!(!opcodes.contains(&0x8), "a close frame was sent: {opcodes:?}");
}

/// A peer that subscribes, then stops reading (and so never sees, let alone
/// answers, our pings) while events keep coming, so that every buffer between us fills, is
/// dropped after the keepalive period, and its socket and subscription are freed.
#[tokio::test]
async fn keepalive_drops_a_peer_that_stops_reading_while_events_flow() {
    peer_that_stops_reading_is_dropped(false).await;
}

/// The same peer sending pong frames unasked (RFC 6455 allows them as a one-way heartbeat):
/// they answer no ping of ours and must not keep the socket open. The keepalive period is
/// longer here (2.5 s): a server that took them as answers would close the socket only once its
/// control queue filled with 32 unanswered pings, 80 s, past the wait limit.
#[tokio::test]
async fn keepalive_ignores_unasked_pong_frames_from_a_peer_that_stops_reading() {
    peer_that_stops_reading_is_dropped(true).await;
}

async fn peer_that_stops_reading_is_dropped(heartbeat: bool) {
    let keepalive_ms = if heartbeat { "2500" } else { "200" };
    let server = Server::start(&["--ws-keepalive-ms", keepalive_ms]).await;
    // A small receive buffer, so that the server's writes block soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(server.addr).await.unwrap();
    let mut request = server.ws_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", PROTOCOL.parse().unwrap());
    let (ws, _) = tokio::time::timeout(
        WAIT,
        tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(tcp)),
    )
    .await
    .expect("connect timed out")
    .expect("websocket connect");
    let mut client = Client {
        ws,
        protocol: Some(PROTOCOL.to_owned()),
    };
    client.send(json!({"type": "connection_init"})).await;
    client.expect(json!({"type": "connection_ack"})).await;
    client
        .subscribe(
            "events",
            "subscription { jobEvents { cursor job { id spec { args } } } }",
            json!({}),
        )
        .await;
    client.expect_alive().await;
    let gauges = |m: &std::collections::HashMap<String, f64>| {
        (
            m.get("jobgate_websocket_connections").copied(),
            m.get("jobgate_active_subscriptions").copied(),
        )
    };
    assert_eq!(gauges(&common::scrape(&server).await), (Some(1.0), Some(1.0)));
    // From here on the client reads nothing: no message, no ping frame, so no pong frame
    // answers a ping. With `heartbeat`, it sends pong frames of its own, often.
    let (mut sink, mut stream) = client.ws.split();
    let beating = tokio::spawn(async move {
        if heartbeat {
            while sink.send(Message::Pong(b"beat".to_vec().into())).await.is_ok() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    });
    // Each job's events carry 32 KiB of args; submit until the server lets the socket go.
    let big = "x".repeat(32 << 10);
    let freed = tokio::time::timeout(WAIT, async {
        loop {
            for _ in 0..5 {
                server.submit(json!({"command": ["true"], "args": [big]})).await;
            }
            if gauges(&common::scrape(&server).await) == (Some(0.0), Some(0.0)) {
                break;
            }
        }
    })
    .await;
    assert!(
        freed.is_ok(),
        "the server kept a peer that stopped reading: {:?}",
        gauges(&common::scrape(&server).await)
    );
    // Reading again drains what the kernel held, then meets the end of the connection.
    let ended = tokio::time::timeout(WAIT, async { while let Some(Ok(_)) = stream.next().await {} }).await;
    assert!(ended.is_ok(), "the TCP connection is still open");
    beating.abort();
}

/// A client text frame (clients must mask) with a payload under 126 bytes.
fn masked_text_frame(payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mask = [0x12u8, 0x34, 0x56, 0x78];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// The opcodes of a run of unmasked server frames.
fn opcodes(mut bytes: &[u8]) -> Vec<u8> {
    let mut opcodes = Vec::new();
    while bytes.len() >= 2 {
        opcodes.push(bytes[0] & 0x0f);
        let (header, length) = match bytes[1] & 0x7f {
            126 if bytes.len() >= 4 => (4, u16::from_be_bytes([bytes[2], bytes[3]]) as usize),
            127 if bytes.len() >= 10 => {
                let mut n = [0u8; 8];
                n.copy_from_slice(&bytes[2..10]);
                (10, u64::from_be_bytes(n) as usize)
            }
            126 | 127 => break,
            n => (2, n as usize),
        };
        bytes = &bytes[(header + length).min(bytes.len())..];
    }
    opcodes
}
