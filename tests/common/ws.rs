//! WebSocket clients of jobgate's `/graphql` for the tests: [`GqlWs`], a graphql-transport-ws
//! client that completes the handshake and reads protocol messages, and the raw socket
//! ([`ws_raw`], [`close_of`], [`close_after_init`]) for tests that break the protocol or wait
//! for the server to close. They speak the protocol; they assert only that it is spoken.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{Server, WAIT};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens a WebSocket to jobgate offering `protocols` (none when empty).
pub async fn ws_raw(server: &Server, protocols: &[&str]) -> Ws {
    let mut request = server.ws_url().into_client_request().unwrap();
    if !protocols.is_empty() {
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", protocols.join(", ").parse().unwrap());
    }
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connect");
    ws
}

/// A graphql-transport-ws client over tokio-tungstenite.
pub struct GqlWs {
    pub ws: Ws,
}

impl GqlWs {
    /// Connects and completes connection_init / connection_ack.
    pub async fn connect(server: &Server) -> GqlWs {
        Self::connect_with(server, json!({})).await
    }

    pub async fn connect_with(server: &Server, payload: Value) -> GqlWs {
        let ws = ws_raw(server, &["graphql-transport-ws"]).await;
        let mut client = GqlWs { ws };
        client
            .send(json!({"type": "connection_init", "payload": payload}))
            .await;
        let ack = client.recv().await;
        assert_eq!(ack["type"], "connection_ack", "expected an ack, got {ack}");
        client
    }

    pub async fn send(&mut self, msg: Value) {
        self.ws.send(Message::text(msg.to_string())).await.expect("send");
    }

    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.send(
            json!({"id": id, "type": "subscribe", "payload": {"query": query, "variables": variables}}),
        )
        .await;
    }

    /// The next protocol message (control frames are skipped); panics on close.
    pub async fn recv(&mut self) -> Value {
        self.recv_within(WAIT)
            .await
            .expect("no message within the wait limit")
    }

    /// The next protocol message within `limit`, or `None`; panics on close.
    pub async fn recv_within(&mut self, limit: Duration) -> Option<Value> {
        // One deadline for the message, however many keepalive pings arrive meanwhile.
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()?
                .expect("socket ended")
                .expect("socket error");
            match frame {
                Message::Text(t) => return Some(serde_json::from_str(t.as_str()).expect("JSON message")),
                Message::Close(c) => panic!("socket closed: {c:?}"),
                _ => continue,
            }
        }
    }

    /// Reads until the socket closes; returns the close code and reason.
    pub async fn closed(&mut self) -> (u16, String) {
        close_of(&mut self.ws).await
    }
}

/// Reads frames until a close frame; returns its code and reason.
pub async fn close_of(ws: &mut Ws) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let frame = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("no close within the wait limit");
        match frame {
            Some(Ok(Message::Close(Some(c)))) => return (c.code.into(), c.reason.to_string()),
            Some(Ok(Message::Close(None))) => return (1005, String::new()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("socket error before close: {e}"),
            None => panic!("socket ended without a close frame"),
        }
    }
}
/// Opens a graphql-transport-ws socket, sends `connection_init` (with `payload`, or none at
/// all for `None`) and returns the close code and reason the server answers with.
pub async fn close_after_init(server: &Server, payload: Option<Value>) -> (u16, String) {
    let mut ws = ws_raw(server, &["graphql-transport-ws"]).await;
    let init = match payload {
        Some(payload) => json!({"type": "connection_init", "payload": payload}),
        None => json!({"type": "connection_init"}),
    };
    ws.send(Message::text(init.to_string()))
        .await
        .expect("send connection_init");
    close_of(&mut ws).await
}
