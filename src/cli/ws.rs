//! The client side of graphql-transport-ws: open the socket with the subprotocol, log in
//! through `connection_init` (`{"authorization": "Bearer <token>"}`), run one subscription and
//! read what it yields. A close the server sends is turned into the [`CliError`] it means:
//! 4403 a refused login, 1013 a rate limit, the rest a lost connection or a protocol error.
//!
//! It must not reconnect (`follow.rs` decides that) nor interpret the data it reads.

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::client::{CliError, Connection, error_chain};

const SUBPROTOCOL: &str = "graphql-transport-ws";

/// How long opening a connection may take, up to the server's `connection_ack`.
const HANDSHAKE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What one subscription yields.
pub enum Incoming {
    /// A `next` message's `data`.
    Data(Value),
    /// The server completed the subscription.
    Complete,
}

/// One acknowledged graphql-transport-ws connection.
pub struct Socket {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
    url: String,
    /// The id of the subscription this connection runs.
    id: &'static str,
    /// Silence after which the server is pinged, and then taken as gone (see
    /// [`Socket::read`]); only once acknowledged (the handshake has its own limit).
    keepalive: Option<std::time::Duration>,
}

impl Socket {
    /// Opens the socket and completes `connection_init` / `connection_ack`, within
    /// [`HANDSHAKE_LIMIT`] (a peer that accepts and never answers is as good as none).
    pub async fn connect(conn: &Connection) -> Result<Socket, CliError> {
        tokio::time::timeout(HANDSHAKE_LIMIT, Self::handshake(conn))
            .await
            .unwrap_or_else(|_| {
                Err(CliError::Connect {
                    url: conn.server.clone(),
                    cause: format!("no connection_ack within {} s", HANDSHAKE_LIMIT.as_secs()),
                })
            })
    }

    async fn handshake(conn: &Connection) -> Result<Socket, CliError> {
        let url = conn.ws_url.to_string();
        let mut request = conn
            .ws_url
            .as_str()
            .into_client_request()
            .map_err(|e| CliError::Usage(format!("{url}: {e}")))?;
        request
            .headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
        // tungstenite zero-fills its whole read buffer before every read; its 128 KiB default
        // makes each small frame of a busy `watch` cost a 128 KiB memset.
        let config = WebSocketConfig::default().read_buffer_size(8 * 1024);
        let (stream, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), false)
            .await
            .map_err(|e| handshake_error(conn, e))?;
        let mut socket = Socket {
            stream,
            url,
            id: "1",
            keepalive: None,
        };
        let init = match &conn.authorization {
            Some(authorization) => {
                json!({"type": "connection_init", "payload": {"authorization": authorization}})
            }
            None => json!({"type": "connection_init"}),
        };
        socket.send(init).await?;
        loop {
            let message = socket.read().await?;
            match message["type"].as_str() {
                Some("connection_ack") => {
                    socket.keepalive = Some(conn.keepalive);
                    return Ok(socket);
                }
                Some("ping") => socket.send(json!({"type": "pong"})).await?,
                Some("pong") => {}
                _ => {
                    return Err(CliError::Protocol(format!(
                        "{} answered connection_init with {message}",
                        socket.url
                    )));
                }
            }
        }
    }

    /// Starts the subscription (one per connection).
    pub async fn subscribe(&mut self, query: &str, variables: Value) -> Result<(), CliError> {
        let id = self.id;
        self.send(json!({
            "id": id,
            "type": "subscribe",
            "payload": {"query": query, "variables": variables},
        }))
        .await
    }

    /// The subscription's next result: its data, its completion, or its error (a GraphQL
    /// error with the server's code).
    pub async fn next(&mut self) -> Result<Incoming, CliError> {
        loop {
            let message = self.read().await?;
            let ours = message["id"].as_str() == Some(self.id);
            match message["type"].as_str() {
                Some("next") if ours => {
                    let payload = &message["payload"];
                    if let Some(errors) = payload.get("errors").filter(|e| !e.is_null()) {
                        return Err(CliError::from_graphql_errors(errors));
                    }
                    return Ok(Incoming::Data(payload["data"].clone()));
                }
                Some("error") if ours => return Err(CliError::from_graphql_errors(&message["payload"])),
                Some("complete") if ours => return Ok(Incoming::Complete),
                Some("ping") => self.send(json!({"type": "pong"})).await?,
                Some("pong") => {}
                _ => {
                    return Err(CliError::Protocol(format!(
                        "unexpected message from {}: {message}",
                        self.url
                    )));
                }
            }
        }
    }

    /// Ends the connection politely (1000), after the subscription's end or the client's.
    pub async fn close(mut self) {
        let _ = self.stream.close(None).await;
    }

    async fn send(&mut self, message: Value) -> Result<(), CliError> {
        self.stream
            .send(Message::text(message.to_string()))
            .await
            .map_err(|e| self.lost(&e))
    }

    /// The next protocol message (a JSON object); ping and pong frames are answered and
    /// skipped, a close becomes the error it means. A connection silent for the keepalive
    /// gets a protocol `ping`; silent for as long again, it is lost: a route can die without
    /// a close or a reset reaching us, and TCP alone would take many minutes to tell.
    async fn read(&mut self) -> Result<Value, CliError> {
        let mut pinged = false;
        loop {
            let next = match self.keepalive {
                None => self.stream.next().await,
                Some(limit) => match tokio::time::timeout(limit, self.stream.next()).await {
                    Ok(next) => next,
                    Err(_) if !pinged => {
                        pinged = true;
                        self.send(json!({"type": "ping"})).await?;
                        continue;
                    }
                    Err(_) => {
                        return Err(self.lost(format!(
                            "nothing from the server for {} s, not even a pong",
                            2 * limit.as_secs()
                        )));
                    }
                },
            };
            // Anything at all (a pong, the server's own ping frame) shows the route is alive.
            pinged = false;
            let frame = match next {
                None => return Err(self.lost("the server closed the connection")),
                Some(Err(e)) => return Err(self.lost(&e)),
                Some(Ok(frame)) => frame,
            };
            let text = match frame {
                Message::Text(text) => text.to_string(),
                Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Message::Close(close) => return Err(self.closed(close)),
                // tungstenite answers pings itself.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
            };
            return serde_json::from_str::<Value>(&text)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| {
                    CliError::Protocol(format!("{} sent something that is not JSON: {text}", self.url))
                });
        }
    }

    fn lost(&self, cause: impl std::fmt::Display) -> CliError {
        CliError::Disconnected {
            url: self.url.clone(),
            cause: cause.to_string(),
        }
    }

    /// What a close frame from the server means for the client.
    fn closed(&self, close: Option<CloseFrame>) -> CliError {
        let Some(close) = close else {
            return self.lost("the server closed the connection");
        };
        let code = u16::from(close.code);
        let reason = close.reason.to_string();
        match code {
            // The server refuses a connection_init whose credentials it does not accept.
            4403 => CliError::server(
                "UNAUTHENTICATED",
                format!("the server refused the login ({code} {reason})"),
            ),
            // Too many connections from this identity: the reason says when to retry.
            1013 => CliError::server("RATE_LIMITED", format!("{reason} ({code})")),
            // Protocol violations and internal errors: trying again would not help.
            4400..=4500 => CliError::Protocol(format!("{} closed the connection: {code} {reason}", self.url)),
            // Going away, restarts, keepalive failures, normal closes mid-operation.
            _ => self.lost(format!("closed with {code} {reason}").trim_end()),
        }
    }
}

/// Why the WebSocket handshake failed: the server could not be reached, or it answered the
/// upgrade with an HTTP error.
fn handshake_error(conn: &Connection, e: tungstenite::Error) -> CliError {
    match e {
        tungstenite::Error::Http(response) => {
            let status = response.status();
            let body = response
                .body()
                .as_deref()
                .map(|b| {
                    String::from_utf8_lossy(b)
                        .trim()
                        .chars()
                        .take(200)
                        .collect::<String>()
                })
                .unwrap_or_default();
            match status.as_u16() {
                // The server restarts, sheds connections, or sits behind a proxy that lost it.
                502..=504 => CliError::Connect {
                    url: conn.server.clone(),
                    cause: format!("WebSocket upgrade answered HTTP {status}"),
                },
                _ => CliError::Protocol(format!(
                    "{} refused the WebSocket upgrade: HTTP {status}{}",
                    conn.ws_url,
                    if body.is_empty() {
                        String::new()
                    } else {
                        format!(": {body}")
                    }
                )),
            }
        }
        e => CliError::Connect {
            url: conn.server.clone(),
            cause: error_chain(&e),
        },
    }
}
