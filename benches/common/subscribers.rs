//! `jobEvents` subscribers as a benchmark runs them: graphql-transport-ws sockets, each read
//! by a task of its own that stamps every frame with the moment it arrived and hands it to
//! the benchmark's [`Receiver`], which keeps what it measures. Reading must keep up with the
//! server, so frames are looked into, not parsed whole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, FixedOffset, Utc};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::WAIT;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The phases an event may carry, in the order a sample's phase index refers to.
pub const PHASES: [&str; 5] = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];

/// What a benchmark does with what its subscribers receive; shared by every reader task.
pub trait Receiver: Send + Sync + 'static {
    /// What one socket keeps of its frames.
    type Sample: Send + 'static;

    /// A text frame, received at `now`.
    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Self::Sample>>);

    /// Something no frame should be: the socket ended, failed, or carried the unexpected.
    fn fault(&self, what: String);
}

/// Frames or socket ends that should not have happened: how many, and the first few.
#[derive(Default)]
pub struct Faults {
    pub count: AtomicU64,
    pub examples: Mutex<Vec<String>>,
}

impl Faults {
    pub fn record(&self, what: String) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut examples = self.examples.lock().unwrap();
        if examples.len() < 5 {
            examples.push(what);
        }
    }
}

/// The fields every benchmark reads of a `jobEvents` frame.
pub struct Event<'a> {
    pub at: DateTime<FixedOffset>,
    /// The event's cursor (its sequence number in the server's event log).
    pub seq: i64,
    /// The event's phase, as an index of [`PHASES`].
    pub phase: u8,
    /// The frame, for what else a benchmark looks for in it.
    pub text: &'a str,
}

/// The frame's event, or why it is not one: a `next` with a `jobEvents` selection holding
/// `at`, `cursor` and `phase` (`Ok(None)` when one of them is missing).
pub fn event(text: &str) -> Result<Option<Event<'_>>, String> {
    if !text.contains(r#""type":"next""#) || text.contains(r#""errors""#) {
        return Err(format!("unexpected frame: {text}"));
    }
    Ok((|| {
        let at = DateTime::parse_from_rfc3339(string_field(text, "at")?).ok()?;
        let seq = string_field(text, "cursor")?.parse().ok()?;
        let phase = PHASES
            .iter()
            .position(|p| Some(*p) == string_field(text, "phase"))?;
        Some(Event {
            at,
            seq,
            phase: phase as u8,
            text,
        })
    })())
}

/// A string field of the frame, found without parsing the whole frame (the reader must keep
/// up): the first `"name":"` and the value up to the next quote. Good enough for the fields
/// selected here, whose values hold no escaped quote. Allocates nothing: it runs three times
/// a frame on the readers' thread.
pub fn string_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let mut from = 0;
    loop {
        let at = from + text[from..].find(name)?;
        let (before, after) = (&text[..at], &text[at + name.len()..]);
        if before.ends_with('"')
            && let Some(rest) = after.strip_prefix("\":\"")
        {
            return Some(&rest[..rest.find('"')?]);
        }
        from = at + name.len();
    }
}

/// A subscriber socket: where to send, and what its reader keeps.
pub struct Socket<R: Receiver> {
    pub sink: SplitSink<Ws, Message>,
    pub samples: Arc<Mutex<Vec<R::Sample>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl<R: Receiver> Drop for Socket<R> {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Opens a graphql-transport-ws socket, waits for the ack, and starts its reader.
pub async fn open_socket<R: Receiver>(url: String, receiver: Arc<R>) -> Result<Socket<R>, String> {
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-transport-ws".parse().expect("a valid header value"),
    );
    // tungstenite zero-fills `read_buffer_size` bytes of its buffer before every read: at its
    // 128 KiB default that memset was a third of the readers' CPU at 80,000 frames/s, taken
    // from the two cores the server runs on. The server reads with 4 KiB for the same reason.
    let config = WebSocketConfig::default().read_buffer_size(4096);
    let connect = tokio_tungstenite::connect_async_with_config(request, Some(config), false);
    let (mut ws, _) = tokio::time::timeout(WAIT, connect)
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| format!("connect: {e}"))?;
    ws.send(Message::text(r#"{"type":"connection_init","payload":{}}"#))
        .await
        .map_err(|e| format!("send init: {e}"))?;
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .map_err(|_| "no connection_ack in time".to_owned())?;
        match frame {
            Some(Ok(Message::Text(t))) if t.as_str().contains("connection_ack") => break,
            Some(Ok(Message::Text(t))) => return Err(format!("expected connection_ack, got {t}")),
            Some(Ok(Message::Close(c))) => return Err(format!("closed before ack: {c:?}")),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(format!("before ack: {e}")),
            None => return Err("socket ended before ack".into()),
        }
    }
    let (sink, stream) = ws.split();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let reader = tokio::spawn(read_loop(stream, receiver, samples.clone()));
    Ok(Socket {
        sink,
        samples,
        reader,
    })
}

async fn read_loop<R: Receiver>(
    mut stream: SplitStream<Ws>,
    receiver: Arc<R>,
    samples: Arc<Mutex<Vec<R::Sample>>>,
) {
    // Reading also answers the server's keepalive pings (tungstenite queues the pong).
    while let Some(frame) = stream.next().await {
        let now = Utc::now();
        match frame {
            Ok(Message::Text(t)) => receiver.frame(t.as_str(), now, &samples),
            Ok(Message::Close(c)) => return receiver.fault(format!("socket closed by the server: {c:?}")),
            Ok(_) => {}
            Err(e) => return receiver.fault(format!("socket error: {e}")),
        }
    }
    receiver.fault("socket ended".into());
}
