//! The wire format of graphql-transport-ws: the subprotocol token, the client messages and the
//! rules they are checked against, the server frames, and the close codes with their reason
//! limit (docs/WEBSOCKET.md §2 and §3).
//!
//! Pure functions between text and values. It must not hold connection state, decide what a
//! message does to the connection (that is `session`'s), or touch the socket.

use std::fmt;

use async_graphql::{Response, ServerError};
use serde::Serialize;
use serde_json::{Map, Value};
use tracing::error;

/// The subprotocol token. `graphql-ws` is a different, older protocol and is refused.
pub const PROTOCOL: &str = "graphql-transport-ws";

// ---------------------------------------------------------------------------------------------
// Close codes

/// The close codes we send: WebSocket's own (RFC 6455 §7.4.1) and the protocol's 44xx/4500,
/// named as graphql-ws names them. Which of them a graphql-ws client retries after is in
/// reference §5.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(super) enum CloseCode {
    /// 1000: the socket was idle for longer than allowed.
    Normal = 1000,
    /// 1001: the server is shutting down.
    GoingAway = 1001,
    /// 1002: a WebSocket protocol error on read (not ours: tungstenite's).
    ProtocolError = 1002,
    /// 1009: a message or frame over the configured size.
    MessageTooBig = 1009,
    /// 1013: come back later (a rate limit at init, or a client that does not read).
    TryAgainLater = 1013,
    /// 4400: anything that is not a valid message of this protocol.
    BadRequest = 4400,
    /// 4401: `subscribe` before the connection was acknowledged.
    Unauthorized = 4401,
    /// 4403: the init hook refused the client.
    Forbidden = 4403,
    /// 4406: the client did not offer [`PROTOCOL`].
    SubprotocolNotAcceptable = 4406,
    /// 4408: no `connection_init` arrived in time.
    ConnectionInitialisationTimeout = 4408,
    /// 4409: `subscribe` with an id that is still in use.
    SubscriberAlreadyExists = 4409,
    /// 4429: a second `connection_init`.
    TooManyInitialisationRequests = 4429,
    /// 4500: our fault (a failed init hook, a panicking resolver); the cause is only logged.
    InternalServerError = 4500,
}

impl From<CloseCode> for u16 {
    fn from(code: CloseCode) -> u16 {
        code as u16
    }
}

/// The bare number, as the logs always showed it.
impl fmt::Debug for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", u16::from(*self))
    }
}

/// A close frame carries at most 125 bytes: a 2-byte code and the reason (RFC 6455 §5.5).
/// tungstenite does not check this when sending, but the receiving side fails the whole
/// connection on a longer frame, turning a meaningful code into a protocol error.
pub(super) const MAX_CLOSE_REASON: usize = 123;

/// Cuts a close reason to [`MAX_CLOSE_REASON`] bytes at a char boundary.
pub(super) fn clip_reason(reason: &str) -> &str {
    if reason.len() <= MAX_CLOSE_REASON {
        return reason;
    }
    let mut end = MAX_CLOSE_REASON;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// The close reason for a binary frame. The reference server (`ws` adapter) happens to turn
/// any frame into a string, but the protocol's messages are text and the graphql-ws client
/// only sends text, so a binary frame is something else talking to us. 4400 rather than
/// WebSocket's own 1003 (Unsupported Data): every other message we cannot take is 4400, and
/// graphql-ws treats both as fatal, so a client sees one code for "not a message of this
/// protocol".
pub(super) const BINARY_REFUSED: &str = "Invalid message received: binary frames are not allowed";

// ---------------------------------------------------------------------------------------------
// Server messages

#[derive(Serialize)]
struct IdMessage<'a, P> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<P>,
}

/// `connection_ack`, without a payload.
pub(super) const CONNECTION_ACK: &str = r#"{"type":"connection_ack"}"#;

pub(super) fn complete_frame(id: &str) -> String {
    to_frame(&IdMessage::<()> {
        id,
        kind: "complete",
        payload: None,
    })
}

/// `next` with the serialised `Response` (an ExecutionResult: `data` always present, `errors`
/// and `extensions` left out when empty).
/// The start of every `next` frame of subscription `id`, up to its payload: a shared
/// rendering (see `fanout`) is spliced after it and the frame closed with `}`. The bytes are
/// those [`next_frame`] writes, so a client cannot tell a shared frame from another.
pub(super) fn next_prefix(id: &str) -> String {
    let mut frame = to_frame(&IdMessage::<()> {
        id,
        kind: "next",
        payload: None,
    });
    // `{"id":…,"type":"next"}` becomes `{"id":…,"type":"next","payload":`.
    frame.pop();
    frame.push_str(r#","payload":"#);
    frame
}

pub(super) fn next_frame(id: &str, response: &Response) -> String {
    to_frame(&IdMessage {
        id,
        kind: "next",
        payload: Some(response),
    })
}

/// `error` with the bare array of errors, never empty (clients close with 4004 on an empty
/// one).
pub(super) fn error_frame(id: &str, errors: &[ServerError]) -> String {
    if errors.is_empty() {
        let fallback = [ServerError::new("Unknown error", None)];
        return error_frame(id, &fallback);
    }
    to_frame(&IdMessage {
        id,
        kind: "error",
        payload: Some(errors),
    })
}

pub(super) fn pong_frame(payload: Option<Map<String, Value>>) -> String {
    match payload {
        // The reference echoes an object payload and leaves out a null or absent one.
        Some(payload) => serde_json::json!({ "type": "pong", "payload": payload }).to_string(),
        None => r#"{"type":"pong"}"#.to_owned(),
    }
}

fn to_frame(message: &impl Serialize) -> String {
    serde_json::to_string(message).unwrap_or_else(|e| {
        // Not reachable with async-graphql's types (string keys, finite numbers); if it ever
        // is, the client still gets a well-formed frame.
        error!(error = %e, "serialising a server message failed");
        r#"{"type":"ping","payload":{"error":"serialisation failed"}}"#.to_owned()
    })
}

// ---------------------------------------------------------------------------------------------
// Client messages

#[derive(Debug, PartialEq)]
pub(super) enum ClientMessage {
    /// `payload` is `Value::Null` when absent or null, otherwise an object.
    ConnectionInit {
        payload: Value,
    },
    Ping {
        payload: Option<Map<String, Value>>,
    },
    Pong,
    Subscribe {
        id: String,
        payload: Map<String, Value>,
    },
    Complete {
        id: String,
    },
}

/// Parses and validates one client message with the reference's `validateMessage` rules
/// (reference §2). The error is a short description for the 4400 close reason.
pub(super) fn parse_client_message(text: &str) -> Result<ClientMessage, &'static str> {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return Err("not JSON");
    };
    let Value::Object(mut message) = value else {
        return Err("not a JSON object");
    };
    let kind = match message.get("type") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.clone(),
        _ => return Err("\"type\" must be a non-empty string"),
    };
    match kind.as_str() {
        "connection_init" => Ok(ClientMessage::ConnectionInit {
            payload: optional_object(&mut message)?.map_or(Value::Null, Value::Object),
        }),
        "ping" => Ok(ClientMessage::Ping {
            payload: optional_object(&mut message)?,
        }),
        "pong" => {
            optional_object(&mut message)?;
            Ok(ClientMessage::Pong)
        }
        "subscribe" => {
            let id = required_id(&mut message)?;
            let Some(Value::Object(payload)) = message.remove("payload") else {
                return Err("\"payload\" must be an object");
            };
            if !matches!(payload.get("query"), Some(Value::String(_))) {
                return Err("\"payload.query\" must be a string");
            }
            if !matches!(
                payload.get("operationName"),
                None | Some(Value::Null | Value::String(_))
            ) {
                return Err("\"payload.operationName\" must be a string or null");
            }
            for (field, why) in [
                ("variables", "\"payload.variables\" must be an object or null"),
                ("extensions", "\"payload.extensions\" must be an object or null"),
            ] {
                if !matches!(payload.get(field), None | Some(Value::Null | Value::Object(_))) {
                    return Err(why);
                }
            }
            Ok(ClientMessage::Subscribe { id, payload })
        }
        "complete" => Ok(ClientMessage::Complete {
            id: required_id(&mut message)?,
        }),
        // Server-to-client types; the reference closes with 4500, [P] supports 4400.
        "connection_ack" | "next" | "error" => Err("message type is for servers only"),
        // Includes the legacy graphql-ws types (start, stop, connection_terminate, ka, …).
        _ => Err("unknown message type"),
    }
}

fn optional_object(message: &mut Map<String, Value>) -> Result<Option<Map<String, Value>>, &'static str> {
    match message.remove("payload") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(payload)) => Ok(Some(payload)),
        Some(_) => Err("\"payload\" must be an object or null"),
    }
}

fn required_id(message: &mut Map<String, Value>) -> Result<String, &'static str> {
    match message.remove("id") {
        Some(Value::String(id)) if !id.is_empty() => Ok(id),
        _ => Err("\"id\" must be a non-empty string"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn clip_reason_cuts_at_a_char_boundary() {
        assert_eq!(clip_reason("short"), "short");
        let ascii = "a".repeat(200);
        assert_eq!(clip_reason(&ascii).len(), MAX_CLOSE_REASON);
        // 'é' is two bytes, so byte 123 falls inside one: the cut moves back to 122.
        let accents = "é".repeat(100);
        let clipped = clip_reason(&accents);
        assert_eq!(clipped.len(), 122);
        assert!(clipped.chars().all(|c| c == 'é'));
    }

    #[test]
    fn valid_client_messages_parse() {
        assert_eq!(
            parse_client_message(r#"{"type":"connection_init"}"#),
            Ok(ClientMessage::ConnectionInit { payload: Value::Null })
        );
        assert_eq!(
            parse_client_message(r#"{"type":"connection_init","payload":null}"#),
            Ok(ClientMessage::ConnectionInit { payload: Value::Null })
        );
        assert_eq!(
            parse_client_message(r#"{"type":"connection_init","payload":{"a":1}}"#),
            Ok(ClientMessage::ConnectionInit {
                payload: json!({"a": 1})
            })
        );
        assert_eq!(
            parse_client_message(r#"{"type":"ping","payload":{"x":[1]},"extra":true}"#),
            Ok(ClientMessage::Ping {
                payload: json!({"x": [1]}).as_object().cloned()
            })
        );
        assert_eq!(
            parse_client_message(r#"{"type":"pong"}"#),
            Ok(ClientMessage::Pong)
        );
        assert_eq!(
            parse_client_message(r#"{"type":"complete","id":"1"}"#),
            Ok(ClientMessage::Complete { id: "1".into() })
        );
        let subscribe = r#"{"type":"subscribe","id":"1","payload":{"query":"{a}",
            "operationName":null,"variables":null,"extensions":{}}}"#;
        assert!(matches!(
            parse_client_message(subscribe),
            Ok(ClientMessage::Subscribe { id, .. }) if id == "1"
        ));
    }

    #[test]
    fn invalid_client_messages_are_refused() {
        for text in [
            "",
            "not json",
            "[]",
            "\"connection_init\"",
            "{}",
            r#"{"type":""}"#,
            r#"{"type":1}"#,
            r#"{"type":"start","id":"1","payload":{"query":"{a}"}}"#,
            r#"{"type":"stop","id":"1"}"#,
            r#"{"type":"connection_terminate"}"#,
            r#"{"type":"connection_error"}"#,
            r#"{"type":"ka"}"#,
            r#"{"type":"connection_ack"}"#,
            r#"{"type":"next","id":"1","payload":{}}"#,
            r#"{"type":"error","id":"1","payload":[]}"#,
            r#"{"type":"connection_init","payload":"token"}"#,
            r#"{"type":"connection_init","payload":1}"#,
            r#"{"type":"connection_init","payload":[]}"#,
            r#"{"type":"ping","payload":"x"}"#,
            r#"{"type":"pong","payload":[1]}"#,
            r#"{"type":"subscribe","payload":{"query":"{a}"}}"#,
            r#"{"type":"subscribe","id":"","payload":{"query":"{a}"}}"#,
            r#"{"type":"subscribe","id":1,"payload":{"query":"{a}"}}"#,
            r#"{"type":"subscribe","id":"1"}"#,
            r#"{"type":"subscribe","id":"1","payload":null}"#,
            r#"{"type":"subscribe","id":"1","payload":{}}"#,
            r#"{"type":"subscribe","id":"1","payload":{"query":1}}"#,
            r#"{"type":"subscribe","id":"1","payload":{"query":"{a}","variables":[]}}"#,
            r#"{"type":"subscribe","id":"1","payload":{"query":"{a}","variables":"x"}}"#,
            r#"{"type":"subscribe","id":"1","payload":{"query":"{a}","extensions":1}}"#,
            r#"{"type":"subscribe","id":"1","payload":{"query":"{a}","operationName":1}}"#,
            r#"{"type":"complete"}"#,
            r#"{"type":"complete","id":""}"#,
            r#"{"type":"complete","id":null}"#,
        ] {
            assert!(parse_client_message(text).is_err(), "accepted: {text}");
        }
    }

    #[test]
    fn server_frames_have_the_protocol_shape() {
        let response = Response::new(async_graphql::Value::Null);
        let next: Value = serde_json::from_str(&next_frame("7", &response)).unwrap();
        assert_eq!(
            next,
            json!({"id": "7", "type": "next", "payload": {"data": null}})
        );
        let complete: Value = serde_json::from_str(&complete_frame("7")).unwrap();
        assert_eq!(complete, json!({"id": "7", "type": "complete"}));
        let error: Value = serde_json::from_str(&error_frame("7", &[])).unwrap();
        assert_eq!(error["payload"][0]["message"], "Unknown error");
        let pong: Value = serde_json::from_str(&pong_frame(None)).unwrap();
        assert_eq!(pong, json!({"type": "pong"}));
    }
}
