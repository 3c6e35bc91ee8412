//! graphql-transport-ws conformance over the real `jobgate` binary: one table of every close
//! a client's messages can provoke (each row its code and reason), and one test per checklist
//! point of `shared/reference/graphql-transport-ws.md` §8 that the real schema can drive. (The points that need resolvers a test can hold, such as a mutation in
//! flight or a hook that fails, are covered by the unit tests in `src/graphql/ws.rs`.)
//!
//! No test asserts a duration; timeouts only keep a broken test from hanging.

mod common;

use common::{Server, WAIT};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const PROTOCOL: &str = "graphql-transport-ws";
const TOTAL: &str = "{ jobs { totalCount } }";

/// What the client saw next: a protocol message, or the end of the socket.
#[derive(Debug, PartialEq)]
enum Received {
    Message(Value),
    /// A close frame: code and reason.
    Closed(u16, String),
    /// The socket ended without a close frame.
    Dropped,
}

struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The `Sec-WebSocket-Protocol` of the 101 answer.
    protocol: Option<String>,
}

impl Client {
    /// Opens a socket offering `protocols` (the header is left out when `None`).
    async fn open(server: &Server, protocols: Option<&str>) -> Client {
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

    async fn connect(server: &Server) -> Client {
        Self::open(server, Some(PROTOCOL)).await
    }

    /// Connected, initialised with `payload` and acknowledged.
    async fn acked_with(server: &Server, payload: Value) -> Client {
        let mut client = Self::connect(server).await;
        client
            .send(json!({"type": "connection_init", "payload": payload}))
            .await;
        client.expect(json!({"type": "connection_ack"})).await;
        client
    }

    async fn acked(server: &Server) -> Client {
        Self::acked_with(server, json!({})).await
    }

    async fn send(&mut self, message: Value) {
        self.send_text(&message.to_string()).await;
    }

    async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text)).await.expect("send");
    }

    async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.send(json!({"id": id, "type": "subscribe",
            "payload": {"query": query, "variables": variables}}))
            .await;
    }

    /// The next text message or the end of the socket; ping and pong frames are skipped
    /// (tungstenite answers ping frames by itself while we read).
    async fn recv(&mut self) -> Received {
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
    async fn message(&mut self) -> Value {
        match self.recv().await {
            Received::Message(message) => message,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    async fn expect(&mut self, message: Value) {
        assert_eq!(self.recv().await, Received::Message(message));
    }

    /// Reads until the close frame, which must carry `code`; returns its reason.
    async fn expect_close(&mut self, code: u16) -> String {
        match self.recv().await {
            Received::Closed(got, reason) if got == code => reason,
            other => panic!("expected close {code}, got {other:?}"),
        }
    }

    /// A `ping`/`pong` round trip: the socket is open, and nothing else was sent before the
    /// `pong` (the server answers in order).
    async fn expect_alive(&mut self) {
        self.send(json!({"type": "ping", "payload": {"probe": 1}})).await;
        self.expect(json!({"type": "pong", "payload": {"probe": 1}}))
            .await;
    }
}

// ---------------------------------------------------------------------------------------
// Handshake and subprotocol (checklist 1, 2)

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

// ---------------------------------------------------------------------------------------
// Close codes: one table of what a client can send (or fail to send) and the close it gets

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
    // Messages are JSON text; a binary frame is not one, whatever it holds (issue 12.7).
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
/// frames too, not only in one frame (issue 12.7: the fragmented one lost its TCP connection
/// instead).
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

// ---------------------------------------------------------------------------------------
// Messages and operations

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

/// Reads the `events` subscription's `jobEvents` frames up to `job`'s SUCCEEDED event.
async fn read_events_until_succeeded(client: &mut Client, job: &str) {
    loop {
        let next = client.message().await;
        assert_eq!(next["id"], "events", "{next}");
        let event = &next["payload"]["data"]["jobEvents"];
        if event["job"]["id"] == job && event["phase"] == "SUCCEEDED" {
            break;
        }
    }
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

// ---------------------------------------------------------------------------------------
// Keepalive (checklist 30)

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

/// Issue 15 / 12.6: a peer that subscribes, then stops reading (and so never sees, let alone
/// answers, our pings) while events keep coming, so that every buffer between us fills, is
/// dropped after the keepalive period, and its socket and subscription are freed.
#[tokio::test]
async fn keepalive_drops_a_peer_that_stops_reading_while_events_flow() {
    peer_that_stops_reading_is_dropped(false).await;
}

/// The same peer sending pong frames unasked (RFC 6455 allows them as a one-way heartbeat):
/// they answer no ping of ours and must not keep the socket open. (Before, each reset the
/// keepalive, and only the control queue filling with one unanswered ping per period, 32 of
/// them, closed the socket: 80 s at this period, past the wait limit.)
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

// ---------------------------------------------------------------------------------------
// Shutdown (checklist 33)

#[tokio::test]
async fn sigterm_closes_every_socket_with_1001() {
    let mut server = Server::spawn(&[]).await;
    let mut active = Client::acked(&server).await;
    active
        .subscribe("events", "subscription { jobEvents { cursor } }", json!({}))
        .await;
    active.expect_alive().await;
    let mut waiting = Client::connect(&server).await;
    waiting.send(json!({"type": "ping"})).await;
    waiting.expect(json!({"type": "pong"})).await;

    let closes = async {
        let a = active.recv().await;
        let w = waiting.recv().await;
        (a, w)
    };
    let (status, (active_close, waiting_close)) = tokio::join!(server.terminate(), closes);
    let shutting_down = Received::Closed(1001, "Server shutting down".into());
    assert_eq!(active_close, shutting_down);
    assert_eq!(waiting_close, shutting_down);
    assert!(status.success(), "jobgate exited with {status}");
}

/// Sessions run on a runtime of their own (`--delivery-threads`) whose threads run below
/// jobgate's others (`--delivery-nice`). With a single such thread a subscriber still gets
/// its events, and SIGTERM still closes its socket with 1001 before jobgate exits 0: the
/// runtime outlives the sessions it runs.
#[tokio::test]
async fn sessions_on_a_one_thread_delivery_runtime_get_events_and_close_at_shutdown() {
    let mut server = Server::spawn(&["--delivery-threads", "1", "--delivery-nice", "7"]).await;
    let mut client = Client::acked(&server).await;
    // From the start of the log, so that no event can slip by before the subscription is live.
    client
        .subscribe(
            "events",
            "subscription { jobEvents(after: \"0\") { phase job { id } } }",
            json!({}),
        )
        .await;
    let job = server.submit(json!({"command": ["true"]})).await;
    read_events_until_succeeded(&mut client, &job).await;

    // The delivery threads, as `top -H` shows them: 7 nice steps below the process.
    let pid = server.pid();
    let process_nice = nice(&format!("/proc/{pid}/stat"));
    let mut delivery = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads") {
        let task = task.expect("a thread").path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if name.trim() == "ws-delivery" {
            delivery.push(nice(&task.join("stat").to_string_lossy()));
        }
    }
    assert!(!delivery.is_empty(), "no ws-delivery thread in jobgate");
    assert!(
        delivery.iter().all(|n| *n == (process_nice + 7).min(19)),
        "delivery threads' nice values {delivery:?}, jobgate's {process_nice}"
    );

    let (status, close) = tokio::join!(server.terminate(), client.recv());
    assert_eq!(close, Received::Closed(1001, "Server shutting down".into()));
    assert!(status.success(), "jobgate exited with {status}");
    let log = server.log_text();
    for trouble in [
        "could not lower",
        "did not close within",
        "did not shut down cleanly",
    ] {
        assert!(!log.contains(trouble), "{trouble:?} in jobgate's log: {log}");
    }
}

/// The nice value in a /proc `stat` file (field 19).
fn nice(stat_path: &str) -> i64 {
    let stat = std::fs::read_to_string(stat_path).expect("a stat file");
    let after_comm = stat.rsplit_once(')').expect("(comm)").1;
    // Field 3 (state) is the first after "(comm)", so field 19 is the 17th.
    after_comm
        .split_whitespace()
        .nth(16)
        .and_then(|n| n.parse().ok())
        .expect("a nice value")
}
