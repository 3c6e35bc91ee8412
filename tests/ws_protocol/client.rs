//! The graphql-transport-ws client of these tests: opens a socket offering the subprotocol,
//! sends protocol messages, and reads what comes next (a message, a close frame with its code
//! and reason, or the end of the socket), skipping WebSocket ping and pong frames.

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::common::{Server, WAIT};

pub(crate) const PROTOCOL: &str = "graphql-transport-ws";
pub(crate) const TOTAL: &str = "{ jobs { totalCount } }";

/// What the client saw next: a protocol message, or the end of the socket.
#[derive(Debug, PartialEq)]
pub(crate) enum Received {
    Message(Value),
    /// A close frame: code and reason.
    Closed(u16, String),
    /// The socket ended without a close frame.
    Dropped,
}

pub(crate) struct Client {
    pub(crate) ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The `Sec-WebSocket-Protocol` of the 101 answer.
    pub(crate) protocol: Option<String>,
}

impl Client {
    /// Opens a socket offering `protocols` (the header is left out when `None`).
    pub(crate) async fn open(server: &Server, protocols: Option<&str>) -> Client {
        let mut request = server.ws_url().into_client_request().unwrap();
        if let Some(protocols) = protocols {
            request
                .headers_mut()
                .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
        }
        // TCP_NODELAY on our side, so our small frames are never held back by Nagle.
        let (ws, response) = tokio::time::timeout(
            WAIT,
            tokio_tungstenite::connect_async_with_config(request, None, true),
        )
        .await
        .expect("connect timed out")
        .expect("websocket connect");
        let protocol = response
            .headers()
            .get("Sec-WebSocket-Protocol")
            .map(|v| v.to_str().unwrap().to_owned());
        Client { ws, protocol }
    }

    pub(crate) async fn connect(server: &Server) -> Client {
        Self::open(server, Some(PROTOCOL)).await
    }

    /// Connected, initialised with `payload` and acknowledged.
    pub(crate) async fn acked_with(server: &Server, payload: Value) -> Client {
        let mut client = Self::connect(server).await;
        client
            .send(json!({"type": "connection_init", "payload": payload}))
            .await;
        client.expect(json!({"type": "connection_ack"})).await;
        client
    }

    pub(crate) async fn acked(server: &Server) -> Client {
        Self::acked_with(server, json!({})).await
    }

    pub(crate) async fn send(&mut self, message: Value) {
        self.send_text(&message.to_string()).await;
    }

    pub(crate) async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text)).await.expect("send");
    }

    pub(crate) async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.send(json!({"id": id, "type": "subscribe",
            "payload": {"query": query, "variables": variables}}))
            .await;
    }

    /// The next text message or the end of the socket; ping and pong frames are skipped
    /// (tungstenite answers ping frames by itself while we read).
    pub(crate) async fn recv(&mut self) -> Received {
        // One deadline for the whole wait: keepalive pings must not extend it.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .expect("nothing received within the wait limit");
            match frame {
                Some(Ok(Message::Text(text))) => {
                    return Received::Message(serde_json::from_str(&text).expect("JSON message"));
                }
                Some(Ok(Message::Close(Some(frame)))) => {
                    return Received::Closed(frame.code.into(), frame.reason.to_string());
                }
                Some(Ok(Message::Close(None))) => return Received::Closed(1005, String::new()),
                Some(Ok(Message::Binary(_))) => panic!("the server sent a binary frame"),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Received::Dropped,
            }
        }
    }

    /// The next message, which must not be the end of the socket.
    pub(crate) async fn message(&mut self) -> Value {
        match self.recv().await {
            Received::Message(message) => message,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    pub(crate) async fn expect(&mut self, message: Value) {
        assert_eq!(self.recv().await, Received::Message(message));
    }

    /// Reads until the close frame, which must carry `code`; returns its reason.
    pub(crate) async fn expect_close(&mut self, code: u16) -> String {
        match self.recv().await {
            Received::Closed(got, reason) if got == code => reason,
            other => panic!("expected close {code}, got {other:?}"),
        }
    }

    /// A `ping`/`pong` round trip: the socket is open, and nothing else was sent before the
    /// `pong` (the server answers in order).
    pub(crate) async fn expect_alive(&mut self) {
        self.send(json!({"type": "ping", "payload": {"probe": 1}})).await;
        self.expect(json!({"type": "pong", "payload": {"probe": 1}}))
            .await;
    }
}

/// Reads the `events` subscription's `jobEvents` frames up to `job`'s SUCCEEDED event.
pub(crate) async fn read_events_until_succeeded(client: &mut Client, job: &str) {
    loop {
        let next = client.message().await;
        assert_eq!(next["id"], "events", "{next}");
        let event = &next["payload"]["data"]["jobEvents"];
        if event["job"]["id"] == job && event["phase"] == "SUCCEEDED" {
            break;
        }
    }
}
