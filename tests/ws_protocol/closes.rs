//! Every close a client can provoke, one table: the close code and reason for a missing
//! subprotocol (4406), a subscribe before the acknowledgement (4401), no `connection_init` in
//! time (4408), a subscribe with an id already active (4409), a second `connection_init`
//! (4429), an oversized message (1009, in one frame or many), malformed messages (4400) and a
//! missing or wrong token (4403); the right token is acknowledged.

use futures::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::client::{Client, Received, TOTAL};
use crate::common::{self, Server};

/// How a close case's connection begins.
#[derive(Clone, Copy, Debug)]
enum Opening {
    /// Without `Sec-WebSocket-Protocol`: the server must select none.
    NoSubprotocol,
    /// With the subprotocol, nothing sent yet.
    Connected,
    /// Initialised and acknowledged.
    Acked,
}

/// What a close case's client does before the server closes.
enum Step {
    /// A text frame of exactly this text.
    Text(String),
    /// A protocol message.
    Send(Value),
    /// A binary frame.
    Binary(Vec<u8>),
    /// A ping/pong round trip, so what was sent before has been taken in.
    Alive,
}

/// What the close's reason must say (besides what every reason must: see the runner).
#[derive(Clone, Copy)]
enum Reason {
    Is(&'static str),
    StartsWith(&'static str),
    /// Not this case's point.
    Any,
}

struct CloseCase {
    name: String,
    /// The server's flags; the cases with the same flags share a server.
    flags: &'static [&'static str],
    opening: Opening,
    steps: Vec<Step>,
    code: u16,
    reason: Reason,
}

impl CloseCase {
    fn new(name: &str, opening: Opening, steps: Vec<Step>, code: u16, reason: Reason) -> Self {
        CloseCase {
            name: name.to_owned(),
            flags: &[],
            opening,
            steps,
            code,
            reason,
        }
    }

    /// The same case on a server started with `flags`.
    fn on(self, flags: &'static [&'static str]) -> Self {
        CloseCase { flags, ..self }
    }
}

/// The token of the server the 4403 cases run on, which no close reason may show.
const TOKEN: &str = "secret";

fn subscribe(id: &str, query: &str) -> Step {
    Step::Send(json!({"id": id, "type": "subscribe", "payload": {"query": query, "variables": {}}}))
}

fn init(payload: Value) -> Step {
    Step::Send(json!({"type": "connection_init", "payload": payload}))
}

fn close_cases() -> Vec<CloseCase> {
    use Opening::{Acked, Connected, NoSubprotocol};
    use Reason::{Any, Is, StartsWith};
    let case = CloseCase::new;
    let events = "subscription { jobEvents { cursor } }";
    let mut cases = vec![
        case(
            "4406 without the subprotocol",
            NoSubprotocol,
            vec![],
            4406,
            Is("Subprotocol not acceptable"),
        ),
        case(
            "4401 for subscribe before ack",
            Connected,
            vec![subscribe("1", TOTAL)],
            4401,
            Is("Unauthorized"),
        ),
        case(
            "4408 without connection_init",
            Connected,
            vec![],
            4408,
            Is("Connection initialisation timeout"),
        )
        .on(&["--ws-init-timeout-ms", "300"]),
        case(
            "4409 for an active id",
            Acked,
            vec![subscribe("dup", events), Step::Alive, subscribe("dup", TOTAL)],
            4409,
            Is("Subscriber for dup already exists"),
        ),
        case(
            "4429 for a second connection_init",
            Acked,
            vec![Step::Send(json!({"type": "connection_init"}))],
            4429,
            Is("Too many initialisation requests"),
        ),
        case(
            "1009 for one oversized frame",
            Acked,
            vec![Step::Text("x".repeat(2000))],
            1009,
            Is("Message too big"),
        )
        .on(&["--ws-max-message-bytes", "4096", "--ws-max-frame-bytes", "1024"]),
    ];
    let malformed = [
        "this is not json",
        "[1,2,3]",
        r#"{"payload":{}}"#,
        r#"{"type":""}"#,
        r#"{"type":42}"#,
        r#"{"type":"what_is_this"}"#,
        // Legacy subscriptions-transport-ws types.
        r#"{"type":"start","id":"1","payload":{"query":"{ jobs { totalCount } }"}}"#,
        r#"{"type":"stop","id":"1"}"#,
        r#"{"type":"connection_terminate"}"#,
        // Server-only types sent by the client.
        r#"{"type":"next","id":"1","payload":{"data":null}}"#,
        r#"{"type":"connection_ack"}"#,
        // Bad subscribe shapes.
        r#"{"type":"subscribe","payload":{"query":"{ jobs { totalCount } }"}}"#,
        r#"{"type":"subscribe","id":"","payload":{"query":"{ jobs { totalCount } }"}}"#,
        r#"{"type":"subscribe","id":7,"payload":{"query":"{ jobs { totalCount } }"}}"#,
        r#"{"type":"subscribe","id":"1"}"#,
        r#"{"type":"subscribe","id":"1","payload":{"query":7}}"#,
        r#"{"type":"subscribe","id":"1","payload":{"query":"{ jobs { totalCount } }","variables":[]}}"#,
        r#"{"type":"subscribe","id":"1","payload":{"query":"{ jobs { totalCount } }","operationName":5}}"#,
        r#"{"type":"complete","id":""}"#,
        r#"{"type":"ping","payload":"not an object"}"#,
    ];
    let invalid = StartsWith("Invalid message received");
    for text in malformed {
        let steps = vec![Step::Text(text.to_owned())];
        cases.push(case(&format!("4400 for {text}"), Acked, steps, 4400, invalid));
    }
    // A connection_init payload that is not an object, before any ack.
    for payload in [json!("token"), json!(3), json!([1])] {
        let name = format!("4400 for the init payload {payload}");
        cases.push(case(&name, Connected, vec![init(payload)], 4400, Any));
    }
    // Messages are JSON text; a binary frame is not one, whatever it holds.
    let frames: [Vec<u8>; 3] = [
        br#"{"type":"connection_init"}"#.to_vec(),
        br#"{"type":"ping"}"#.to_vec(),
        vec![0xc3, 0x28],
    ];
    let binary = Is("Invalid message received: binary frames are not allowed");
    for frame in frames {
        // Before the ack and after it.
        for opening in [Connected, Acked] {
            let name = format!("4400 for the binary frame {frame:?} ({opening:?})");
            cases.push(case(
                &name,
                opening,
                vec![Step::Binary(frame.clone())],
                4400,
                binary,
            ));
        }
    }
    for payload in [Value::Null, json!({}), json!({"authorization": "Bearer wrong"})] {
        let name = format!("4403 for the init payload {payload}");
        let steps = vec![init(payload)];
        cases.push(case(&name, Connected, steps, 4403, StartsWith("Forbidden")).on(&["--api-token", TOKEN]));
    }
    // A close frame over 125 bytes would fail our client's read instead of arriving.
    for (c, n) in [('i', 200), ('é', 100)] {
        let id = c.to_string().repeat(n);
        assert_eq!(id.len(), 200);
        let steps = vec![subscribe(&id, events), subscribe(&id, events)];
        cases.push(case(
            &format!("4409 for an id of {n} {c:?}, 200 bytes"),
            Acked,
            steps,
            4409,
            StartsWith("Subscriber for "),
        ));
    }
    cases
}

/// Every case on a connection of its own: the close it gets, with the code and the reason the
/// case expects; every reason fits a close frame (123 bytes of UTF-8) and never shows the
/// server's token. A failing case is named in the failure.
#[tokio::test]
async fn every_protocol_violation_closes_with_its_code_and_reason() {
    let mut servers: Vec<(&[&str], Server)> = Vec::new();
    for case in close_cases() {
        let _row = common::TableRow::named(&case.name);
        let name = &case.name;
        let server = match servers.iter().position(|(flags, _)| *flags == case.flags) {
            Some(i) => &servers[i].1,
            None => {
                servers.push((case.flags, Server::start(case.flags).await));
                &servers[servers.len() - 1].1
            }
        };
        let mut client = match case.opening {
            Opening::NoSubprotocol => {
                let client = Client::open(server, None).await;
                assert_eq!(client.protocol, None, "{name}");
                client
            }
            Opening::Connected => Client::connect(server).await,
            Opening::Acked => Client::acked(server).await,
        };
        for step in case.steps {
            match step {
                Step::Text(text) => client.send_text(&text).await,
                Step::Send(message) => client.send(message).await,
                Step::Binary(bytes) => client.ws.send(Message::binary(bytes)).await.unwrap(),
                Step::Alive => client.expect_alive().await,
            }
        }
        let reason = match client.recv().await {
            Received::Closed(code, reason) if code == case.code => reason,
            other => panic!("{name}: expected close {}, got {other:?}", case.code),
        };
        match case.reason {
            Reason::Is(expected) => assert_eq!(reason, expected, "{name}"),
            Reason::StartsWith(prefix) => assert!(reason.starts_with(prefix), "{name}: {reason}"),
            Reason::Any => {}
        }
        assert!(reason.len() <= 123, "{name}: {} bytes", reason.len());
        assert!(!reason.contains(TOKEN), "{name}: {reason}");
    }
}

/// A message over --ws-max-message-bytes gets 1009 when it comes in many small continuation
/// frames too, not only in one frame: each frame is within --ws-max-frame-bytes, only their
/// sum is over, and the client gets the close frame, not a dropped TCP connection.
#[tokio::test]
async fn close_1009_for_an_oversized_message_in_many_frames() {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    let server = Server::start(&["--ws-max-message-bytes", "4096", "--ws-max-frame-bytes", "1024"]).await;
    // A text message of 64 frames of 512 bytes, each within the frame limit.
    for frames in [64, 1000] {
        let mut client = Client::acked(&server).await;
        let chunk = vec![b' '; 512];
        for i in 0..frames {
            let opcode = if i == 0 {
                OpCode::Data(Data::Text)
            } else {
                OpCode::Data(Data::Continue)
            };
            let frame = Frame::message(chunk.clone(), opcode, i == frames - 1);
            // The server may close (and stop reading) before the last frames go out.
            if client.ws.feed(Message::Frame(frame)).await.is_err() {
                break;
            }
        }
        let _ = client.ws.flush().await;
        assert_eq!(
            client.expect_close(1009).await,
            "Message too big",
            "{frames} frames"
        );
    }
}

/// The token that 4403 refuses when it is missing or wrong (see the close table) is
/// acknowledged when right, and the connection works.
#[tokio::test]
async fn the_right_token_is_acknowledged_and_the_connection_works() {
    let server = Server::start(&["--api-token", TOKEN]).await;
    let mut client = Client::acked_with(&server, json!({"authorization": format!("Bearer {TOKEN}")})).await;
    client.subscribe("q", "{ jobs { totalCount } }", json!({})).await;
    assert_eq!(client.message().await["type"], "next");
}
