//! Our server side of the `graphql-transport-ws` WebSocket subprotocol.
//!
//! This module owns one WebSocket from the upgrade to the last frame: subprotocol check, the
//! `connection_init`/`connection_ack` handshake and its timeout, message validation, the
//! per-operation lifecycle (ids, `next`/`error`/`complete`), keepalive ping frames, the bounded
//! outgoing queue and the close codes. It follows `shared/reference/graphql-transport-ws.md`
//! (§7 for the shape, §8 for the checklist) and drives any [`async_graphql::Executor`]
//! (in practice our `Schema`) through `execute_stream`.
//!
//! It must not: know the schema or any business rule (the executor and the init hook carry
//! them); authenticate by itself (the [`InitHook`] decides, this module maps its answer to
//! 4403/4500); use async-graphql's own WebSocket types, which break the protocol in many
//! places (reference §6); let any task outlive its socket; block its main loop on a slow
//! client; or panic on anything a client sends.
//!
//! # Shape
//!
//! One task per socket (the *main task*) owns all state and `select!`s over client frames, the
//! init timer, the init hook, finished operations, the keepalive tick and server shutdown.
//! A *writer task* owns the sink. Each operation runs in a per-connection [`JoinSet`], which
//! is shut down (every task aborted and awaited) when the socket closes.
//!
//! Frames reach the writer through two bounded queues:
//! - the *data* queue, where operation tasks `send().await` their `next` frames (so a slow
//!   client throttles the operations, never the main task) and where terminal frames go
//!   through a permit the operation reserved (see `OpDone`);
//! - the *control* queue, which only the main task fills with `try_send` (`connection_ack`,
//!   `pong`, early `error`s, ping frames). The writer drains it first. It is separate from the
//!   data queue because a busy subscription keeps the data queue full as a matter of course;
//!   that is backpressure, not a dead client, and must not get a healthy client closed when
//!   it sends a `ping`. When even the control queue is full, the writer has not written
//!   anything for `outgoing_queue` control frames: the client is not reading, and the socket
//!   is closed with 1013.
//!
//! A close goes through a `oneshot` that the writer polls before anything else.

use std::{
    borrow::Cow,
    collections::HashMap,
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_graphql::{Data, Executor, Request, Response, ServerError};
use axum::{
    extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    response::Response as HttpResponse,
};
use futures::{
    FutureExt, SinkExt, StreamExt,
    future::BoxFuture,
    stream::{BoxStream, SplitSink, SplitStream},
};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::{
    sync::{
        mpsc::{self, OwnedPermit, error::TrySendError},
        oneshot,
    },
    task::{AbortHandle, JoinError, JoinSet},
    time::{Instant, Interval, MissedTickBehavior},
};
use tokio_util::{
    sync::CancellationToken,
    task::{AbortOnDropHandle, TaskTracker},
};
use tracing::{Instrument, debug, debug_span, error, info_span, warn};

use super::operation::{OperationKind, PreExecFailed, operation_kind};

/// The subprotocol token. `graphql-ws` is a different, older protocol and is refused.
pub const PROTOCOL: &str = "graphql-transport-ws";

/// A close frame carries at most 125 bytes: a 2-byte code and the reason (RFC 6455 §5.5).
/// tungstenite does not check this when sending, but the receiving side fails the whole
/// connection on a longer frame, turning a meaningful code into a protocol error.
const MAX_CLOSE_REASON: usize = 123;

/// How long a closing socket waits for the close frame to be written and for the client's
/// close reply. Reading until the reply means we do not drop the TCP connection with unread
/// input, which would make the kernel answer with RST and could destroy our close frame in
/// the client's receive buffer before it read it.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The close reason for a binary frame. The reference server (`ws` adapter) happens to turn
/// any frame into a string, but the protocol's messages are text and the graphql-ws client
/// only sends text, so a binary frame is something else talking to us. 4400 rather than
/// WebSocket's own 1003 (Unsupported Data): every other message we cannot take is 4400, and
/// graphql-ws treats both as fatal, so a client sees one code for "not a message of this
/// protocol".
const BINARY_REFUSED: &str = "Invalid message received: binary frames are not allowed";

/// Longest timer period used (about 30 years, as tokio caps `sleep`).
const MAX_TIMER: Duration = Duration::from_secs(86_400 * 365 * 30);

/// Frames the writer feeds before one flush, so a burst of `next`s costs one syscall.
const WRITE_BATCH: usize = 64;

/// Tunables of one WebSocket connection.
#[derive(Clone, Debug)]
pub struct WsConfig {
    /// Time allowed between the upgrade and the arrival of `connection_init` (4408 after it).
    /// Only the arrival counts: a slow init hook does not trigger it. Zero disables the check.
    pub init_timeout: Duration,
    /// Period of the keepalive ping frames. A socket that sent no pong frame echoing the last
    /// ping between two ticks is dropped without a close frame (the client sees 1006 and
    /// reconnects); unasked pong frames do not count. Zero disables.
    pub keepalive_interval: Duration,
    /// Largest message accepted from the client; tungstenite fails the read of a larger one
    /// and the socket is closed with 1009.
    pub max_message_bytes: usize,
    /// Largest single frame accepted from the client (1009 too); a message may span frames.
    pub max_frame_bytes: usize,
    /// Initial size of each socket's read buffer: most of what an idle socket costs.
    pub read_buffer_bytes: usize,
    /// Most subscriptions running at once on one socket; another gets an `error` with
    /// `LIMIT_EXCEEDED`. Zero means no cap.
    pub max_subscriptions: usize,
    /// A socket with no operation running and nothing received for this long is closed with
    /// 1000. Zero disables.
    pub idle_timeout: Duration,
    /// Open sockets, running subscriptions and query/mutation durations are counted here.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Capacity, in frames, of each of the two outgoing queues (see the module docs). A full
    /// control queue closes the socket with 1013. Zero is treated as one.
    pub outgoing_queue: usize,
    /// Longest a query or mutation may execute before it is stopped and answered with
    /// `next` carrying a `DEADLINE_EXCEEDED` error, then `complete`. Subscriptions are not
    /// bounded. Zero disables.
    pub request_timeout: Duration,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(3),
            keepalive_interval: Duration::from_secs(12),
            max_message_bytes: 64 << 10,
            max_frame_bytes: 16 << 10,
            read_buffer_bytes: 4 << 10,
            max_subscriptions: 100,
            idle_timeout: Duration::ZERO,
            outgoing_queue: 32,
            request_timeout: Duration::ZERO,
            metrics: crate::metrics::Metrics::new(),
        }
    }
}

/// Why the init hook refused a connection.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The client is not allowed in: close 4403. The text goes to the client in the close
    /// reason, so it must say nothing the client should not know.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The client may try again later (a rate limit): close 1013 with this text.
    #[error("try again later: {0}")]
    TryLater(String),
    /// The hook failed: close 4500 with a generic reason; the text is only logged.
    #[error("internal: {0}")]
    Internal(String),
}

/// Called with the connection_init payload (serde_json::Value::Null when absent); returns the
/// per-connection session Data.
pub type InitHook = Arc<
    dyn Fn(serde_json::Value) -> BoxFuture<'static, Result<async_graphql::Data, InitError>> + Send + Sync,
>;

/// Upgrade handler body: call from an axum handler that extracted `WebSocketUpgrade`.
///
/// The upgrade always succeeds when the request is a valid WebSocket upgrade; a client that
/// did not offer [`PROTOCOL`] gets no `Sec-WebSocket-Protocol` header and then close 4406, as
/// the reference server does. When `shutdown` is cancelled every socket closes with 1001;
/// the caller must keep the runtime alive for a moment after that (or track the connection
/// tasks) so the close frames get written.
pub fn upgrade<E: Executor>(
    ws: WebSocketUpgrade,
    executor: E,
    config: WsConfig,
    on_init: InitHook,
    shutdown: CancellationToken,
    connections: TaskTracker,
) -> HttpResponse {
    // Created here, inside the HTTP request's span, so connection logs nest under it.
    let span = info_span!("graphql_ws");
    ws.protocols([PROTOCOL])
        .max_message_size(config.max_message_bytes)
        .max_frame_size(config.max_frame_bytes.min(config.max_message_bytes))
        .read_buffer_size(config.read_buffer_bytes)
        .on_failed_upgrade(|e| debug!(error = %e, "websocket upgrade failed"))
        // Tracked, so that shutdown can wait until every socket has sent its 1001 close.
        .on_upgrade(move |socket| {
            connections.track_future(run(socket, executor, config, on_init, shutdown).instrument(span))
        })
}

// ---------------------------------------------------------------------------------------------
// Connection

/// How the main loop ended, and so how the socket is let go.
#[derive(Debug)]
enum Exit {
    /// Send this close frame, then wait for the client's reply.
    Close(u16, Cow<'static, str>),
    /// Send this close frame after a read error (an over-size message, a protocol error):
    /// tungstenite reads nothing more after one, so the client's reply cannot be awaited.
    /// The socket is held for [`CLOSE_GRACE`] after the frame is written instead of dropped
    /// at once: the client may still be sending (the rest of a fragmented message), and
    /// closing a socket with unread input makes the kernel send RST, which can destroy the
    /// close frame before the client reads it (it does on some systems), leaving the client
    /// with a reset instead of 1009.
    CloseUnread(u16, Cow<'static, str>),
    /// Drop the socket without a close frame (keepalive failure: the peer is presumed dead,
    /// and a close frame would only sit in a full buffer).
    Terminate,
    /// The socket is already closed or broken; flush what tungstenite queued (such as the
    /// reply to the client's close) and let go.
    Quiet,
}

impl Exit {
    fn close(code: u16, reason: impl Into<Cow<'static, str>>) -> Self {
        Self::Close(code, reason.into())
    }
}

/// A frame for the writer.
#[derive(Debug)]
enum Out {
    Text(String),
    /// A single-result operation's `next` and `complete`, in one queue slot so that the one
    /// permit its task reserved covers both.
    Pair(String, String),
    /// A WebSocket ping frame (keepalive) with this payload, which the pong must echo.
    Ping([u8; 8]),
}

enum Phase {
    /// Waiting for `connection_init`; the 4408 timer runs.
    AwaitingInit,
    /// The init hook runs; `ping` still works, `subscribe` gets 4401, `connection_init` 4429.
    Initialising(BoxFuture<'static, Result<Data, InitError>>),
    /// Acknowledged, with the session data every operation sees.
    Acked(Arc<Data>),
}

/// An active operation, by id.
struct Op {
    /// Distinguishes this operation from an earlier one that used the same id, so a late
    /// result of the earlier one can never end this one.
    generation: u64,
    kind: OperationKind,
    abort: AbortHandle,
}

/// What an operation task returns when it is done.
///
/// The terminal frame travels back to the main task with a slot already reserved in the data
/// queue: the main task first frees the id, then sends the frame on the permit. So the id is
/// free before the client can see the terminal frame (the client may reuse it at once), the
/// frame still comes after the operation's `next`s, and the main task never waits for room.
struct OpDone {
    id: String,
    generation: u64,
    /// The terminal frame and the queue slot reserved for it; `None` when the writer is gone.
    terminal: Option<(OwnedPermit<Out>, Out)>,
}

async fn run<E: Executor>(
    socket: WebSocket,
    executor: E,
    config: WsConfig,
    on_init: InitHook,
    shutdown: CancellationToken,
) {
    let metrics = config.metrics.clone();
    metrics.ws_connections.inc();
    let protocol_ok = socket
        .protocol()
        .is_some_and(|p| p.as_bytes() == PROTOCOL.as_bytes());
    let (sink, mut stream) = socket.split();
    let capacity = config.outgoing_queue.max(1);
    let (control_tx, control_rx) = mpsc::channel(capacity);
    let (data_tx, data_rx) = mpsc::channel(capacity);
    let (close_tx, close_rx) = oneshot::channel();
    // Aborted if this task is dropped (e.g. the runtime shuts down), so it never outlives us.
    let writer = AbortOnDropHandle::new(tokio::spawn(
        write_loop(sink, control_rx, data_rx, close_rx).in_current_span(),
    ));

    let mut conn = Connection {
        executor,
        on_init,
        control: control_tx,
        data: data_tx,
        phase: Phase::AwaitingInit,
        ops: HashMap::new(),
        tasks: JoinSet::new(),
        generation: 0,
        metrics: metrics.clone(),
        max_subscriptions: config.max_subscriptions,
        request_timeout: config.request_timeout,
    };
    let exit = if protocol_ok {
        conn.serve(&mut stream, &config, &shutdown).await
    } else {
        debug!("client did not offer {PROTOCOL}");
        Exit::close(4406, "Subprotocol not acceptable")
    };
    debug!(?exit, "connection ending");

    let mut hold = false;
    let wait_for_reply = match exit {
        Exit::Close(code, reason) => {
            let _ = close_tx.send((code, reason));
            true
        }
        Exit::CloseUnread(code, reason) => {
            let _ = close_tx.send((code, reason));
            hold = true;
            false
        }
        Exit::Terminate => {
            writer.abort();
            false
        }
        // Dropping the sender tells the writer to flush and stop.
        Exit::Quiet => {
            drop(close_tx);
            false
        }
    };
    // Abort every operation and wait until their futures (and resolver streams) are dropped.
    conn.tasks.shutdown().await;
    let subscriptions = conn.subscriptions();
    metrics.active_subscriptions.dec_by(subscriptions as i64);
    metrics.ws_connections.dec();
    drop(conn);
    if wait_for_reply {
        // Read until the client's close reply (or the grace period ends); see CLOSE_GRACE.
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            while let Some(Ok(frame)) = stream.next().await {
                if matches!(frame, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }
    let _ = writer.await;
    if hold {
        // See Exit::CloseUnread. Bounded, and the gauges already count the socket as gone.
        tokio::time::sleep(CLOSE_GRACE).await;
    }
    drop(stream);
}

struct Connection<E> {
    executor: E,
    on_init: InitHook,
    control: mpsc::Sender<Out>,
    data: mpsc::Sender<Out>,
    phase: Phase,
    ops: HashMap<String, Op>,
    tasks: JoinSet<OpDone>,
    generation: u64,
    metrics: Arc<crate::metrics::Metrics>,
    max_subscriptions: usize,
    request_timeout: Duration,
}

impl<E: Executor> Connection<E> {
    fn subscriptions(&self) -> usize {
        self.ops
            .values()
            .filter(|op| op.kind == OperationKind::Subscription)
            .count()
    }

    /// Frees an id, keeping the running-subscriptions gauge true.
    fn remove_op(&mut self, id: &str) -> Option<Op> {
        let op = self.ops.remove(id)?;
        if op.kind == OperationKind::Subscription {
            self.metrics.active_subscriptions.dec();
        }
        Some(op)
    }

    /// The main loop. Returns how the socket must be let go.
    async fn serve(
        &mut self,
        stream: &mut SplitStream<WebSocket>,
        config: &WsConfig,
        shutdown: &CancellationToken,
    ) -> Exit {
        let init_timeout = config.init_timeout;
        let mut init_timer = std::pin::pin!(tokio::time::sleep(init_timeout));
        // Capped like tokio's own `sleep`, so an absurd configured period cannot overflow
        // `Instant` arithmetic (a panic) when the ticks are computed.
        let period = config.keepalive_interval.min(MAX_TIMER);
        let mut keepalive = (!period.is_zero()).then(|| {
            let mut interval = tokio::time::interval_at(Instant::now() + period, period);
            // After a stall, tick once rather than in a burst: a burst would look like missed
            // pongs and drop a healthy client.
            interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
            interval
        });
        // The payload of the ping frame not yet answered. Only a pong frame carrying it counts:
        // RFC 6455 lets a peer send pong frames unasked (a one-way heartbeat), and a peer that
        // stopped reading could otherwise keep its socket, and every buffer behind it, forever
        // with them. A peer that reads nothing never sees our ping (it sits behind the data
        // the peer did not read), so it cannot answer it, and is dropped at the next tick.
        let mut awaiting_pong: Option<[u8; 8]> = None;
        let mut pings: u64 = 0;
        let idle_timeout = config.idle_timeout.min(MAX_TIMER);
        let mut idle_since = Instant::now();

        loop {
            let awaiting_init = matches!(self.phase, Phase::AwaitingInit);
            let idle =
                !idle_timeout.is_zero() && matches!(self.phase, Phase::Acked(_)) && self.ops.is_empty();
            let exit = tokio::select! {
                () = shutdown.cancelled() => Some(Exit::close(1001, "Server shutting down")),
                () = tokio::time::sleep_until(idle_since + idle_timeout), if idle => {
                    debug!("idle: no operation and no message");
                    Some(Exit::close(1000, "Idle timeout"))
                }
                () = &mut init_timer, if awaiting_init && !init_timeout.is_zero() => {
                    debug!("no connection_init in time");
                    Some(Exit::close(4408, "Connection initialisation timeout"))
                }
                result = init_hook(&mut self.phase) => self.on_init_done(result),
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    idle_since = Instant::now();
                    self.on_op_done(joined)
                }
                () = tick(&mut keepalive) => {
                    if awaiting_pong.is_some() {
                        debug!("no pong frame for the last keepalive ping; dropping the socket");
                        Some(Exit::Terminate)
                    } else {
                        pings += 1;
                        let payload = pings.to_be_bytes();
                        awaiting_pong = Some(payload);
                        self.send_control(Out::Ping(payload))
                    }
                }
                // The writer stopped (the socket failed while writing): nothing more can be sent.
                () = self.control.closed() => Some(Exit::Quiet),
                frame = stream.next() => match frame {
                    None => Some(Exit::Quiet),
                    Some(Err(e)) => Some(read_error_exit(&e)),
                    // tungstenite has queued the close reply; the writer flushes it.
                    Some(Ok(Message::Close(_))) => Some(Exit::Quiet),
                    Some(Ok(Message::Pong(payload))) => {
                        if awaiting_pong.is_some_and(|p| payload[..] == p[..]) {
                            awaiting_pong = None;
                        }
                        None
                    }
                    // tungstenite answers ping frames by itself on the next read or write.
                    Some(Ok(Message::Ping(_))) => None,
                    // Only messages count against idleness: keepalive pongs come from the
                    // client's WebSocket library, not from someone using the connection.
                    Some(Ok(Message::Text(text))) => {
                        idle_since = Instant::now();
                        self.on_text(text.as_str())
                    }
                    // graphql-transport-ws messages are JSON text; a binary frame is not a
                    // message of the protocol, so it gets the protocol's 4400 like any other
                    // invalid message (see `BINARY_REFUSED`).
                    Some(Ok(Message::Binary(_))) => {
                        debug!("binary frame");
                        Some(Exit::close(4400, BINARY_REFUSED))
                    }
                },
            };
            if let Some(exit) = exit {
                return exit;
            }
        }
    }

    fn on_text(&mut self, text: &str) -> Option<Exit> {
        let message = match parse_client_message(text) {
            Ok(message) => message,
            Err(why) => {
                debug!(why, "invalid message");
                return Some(Exit::close(4400, format!("Invalid message received: {why}")));
            }
        };
        match message {
            ClientMessage::ConnectionInit { payload } => {
                if !matches!(self.phase, Phase::AwaitingInit) {
                    return Some(Exit::close(4429, "Too many initialisation requests"));
                }
                self.phase = Phase::Initialising(call_init_hook(&self.on_init, payload));
                None
            }
            ClientMessage::Ping { payload } => self.send_control(Out::Text(pong_frame(payload))),
            ClientMessage::Pong => None,
            ClientMessage::Subscribe { id, payload } => self.subscribe(id, payload),
            ClientMessage::Complete { id } => {
                self.complete(&id);
                None
            }
        }
    }

    fn on_init_done(&mut self, result: Result<Data, InitError>) -> Option<Exit> {
        match result {
            Ok(data) => {
                self.phase = Phase::Acked(Arc::new(data));
                debug!("connection acknowledged");
                self.send_control(Out::Text(r#"{"type":"connection_ack"}"#.to_owned()))
            }
            Err(InitError::Forbidden(why)) => {
                debug!(why, "connection_init rejected");
                Some(Exit::close(
                    4403,
                    if why.is_empty() {
                        "Forbidden".to_owned()
                    } else {
                        format!("Forbidden: {why}")
                    },
                ))
            }
            Err(InitError::TryLater(why)) => {
                debug!(why, "connection_init refused for now");
                Some(Exit::close(1013, why))
            }
            Err(InitError::Internal(why)) => {
                // The cause stays in the logs; the client only learns that it was our fault.
                error!(error = why, "connection_init hook failed");
                Some(Exit::close(4500, "Internal server error"))
            }
        }
    }

    fn subscribe(&mut self, id: String, payload: Map<String, Value>) -> Option<Exit> {
        // The order of checks is the reference's: shape (done by the parser), 4401, 4409.
        let Phase::Acked(session) = &self.phase else {
            return Some(Exit::close(4401, "Unauthorized"));
        };
        if self.ops.contains_key(&id) {
            return Some(Exit::close(4409, format!("Subscriber for {id} already exists")));
        }
        // The shape was checked, so this cannot fail in practice; if it does, it is still the
        // client's message that is wrong.
        let mut request: Request = match serde_json::from_value(Value::Object(payload)) {
            Ok(request) => request,
            Err(e) => {
                return Some(Exit::close(4400, format!("Invalid message received: {e}")));
            }
        };
        // Parse and pick the operation here: a syntax error or an unknown operation name is a
        // pre-execution error (`error`, the id is never reserved), and the kind decides how the
        // result is sent and what a client `complete` does.
        let kind = match operation_kind(&mut request) {
            Ok(kind) => kind,
            Err(e) => {
                debug!(id, error = %e.message, "operation refused before execution");
                let mut errors = [e];
                super::error::fill_codes(&mut errors);
                return self.send_control(Out::Text(error_frame(&id, &errors)));
            }
        };
        if kind == OperationKind::Subscription
            && self.max_subscriptions > 0
            && self.subscriptions() >= self.max_subscriptions
        {
            let mut error = ServerError::new(
                format!(
                    "this connection already runs {} subscriptions, the most it may; complete one or open another connection",
                    self.max_subscriptions
                ),
                None,
            );
            error
                .extensions
                .get_or_insert_with(Default::default)
                .set("code", super::error::Code::LimitExceeded.as_str());
            return self.send_control(Out::Text(error_frame(&id, &[error])));
        }
        let flag = Arc::new(PreExecFailed::default());
        let request = request.data(flag.clone());
        // Lazy: validation and execution happen when the operation task polls the stream.
        let stream = self.executor.execute_stream(request, Some(session.clone()));
        self.generation += 1;
        let generation = self.generation;
        let span = debug_span!("operation", id, ?kind);
        let abort = self.tasks.spawn(
            run_operation(
                id.clone(),
                generation,
                kind,
                stream,
                flag,
                OpEnv {
                    out: self.data.clone(),
                    metrics: self.metrics.clone(),
                    timeout: self.request_timeout,
                },
            )
            .instrument(span),
        );
        if kind == OperationKind::Subscription {
            self.metrics.active_subscriptions.inc();
        }
        self.ops.insert(
            id,
            Op {
                generation,
                kind,
                abort,
            },
        );
        None
    }

    /// The client stopped listening. Nothing is sent back, whatever the operation's state.
    fn complete(&mut self, id: &str) {
        // An unknown or finished id is ignored (the protocol allows it for everything but
        // `subscribe`); removing the id lets the client reuse it at once.
        let Some(op) = self.remove_op(id) else {
            return;
        };
        match op.kind {
            // Do not abort a half-applied mutation: it runs to the end and its result comes
            // back with a generation no longer in `ops`, so it is dropped.
            OperationKind::Mutation => debug!(id, "client completed a running mutation"),
            OperationKind::Query | OperationKind::Subscription => op.abort.abort(),
        }
    }

    fn on_op_done(&mut self, joined: Result<OpDone, JoinError>) -> Option<Exit> {
        match joined {
            Ok(done) => {
                let current = self
                    .ops
                    .get(&done.id)
                    .is_some_and(|op| op.generation == done.generation);
                if current {
                    self.remove_op(&done.id);
                    if let Some((permit, frame)) = done.terminal {
                        permit.send(frame);
                    }
                }
                // Otherwise the client completed it already: drop the frame and the permit.
                None
            }
            // Aborted by a client `complete`.
            Err(e) if e.is_cancelled() => None,
            Err(e) => {
                // A resolver panicked. Which id it was is unknown here, and the reference
                // closes with 4500 when execution throws.
                error!(error = %e, "operation task panicked");
                Some(Exit::close(4500, "Internal server error"))
            }
        }
    }

    /// Queues a frame from the main task, which never waits for the writer.
    fn send_control(&self, out: Out) -> Option<Exit> {
        match self.control.try_send(out) {
            Ok(()) => None,
            Err(TrySendError::Full(_)) => {
                warn!("outgoing queue full; closing a client that does not read");
                Some(Exit::close(1013, "Outgoing queue full"))
            }
            Err(TrySendError::Closed(_)) => Some(Exit::Quiet),
        }
    }
}

/// Calls the hook, turning a panic (at the call or while polled) into an internal error, so a
/// buggy hook costs one connection a 4500 instead of a silently dropped socket.
fn call_init_hook(hook: &InitHook, payload: Value) -> BoxFuture<'static, Result<Data, InitError>> {
    fn panicked(_: Box<dyn std::any::Any + Send>) -> Result<Data, InitError> {
        Err(InitError::Internal("init hook panicked".to_owned()))
    }
    match std::panic::catch_unwind(AssertUnwindSafe(|| hook(payload))) {
        Ok(fut) => AssertUnwindSafe(fut)
            .catch_unwind()
            .map(|r| r.unwrap_or_else(panicked))
            .boxed(),
        Err(p) => futures::future::ready(panicked(p)).boxed(),
    }
}

/// Resolves with the init hook's result while one runs; pending otherwise.
async fn init_hook(phase: &mut Phase) -> Result<Data, InitError> {
    match phase {
        Phase::Initialising(fut) => fut.await,
        _ => std::future::pending().await,
    }
}

/// The next keepalive tick; pending forever when keepalive is disabled.
async fn tick(keepalive: &mut Option<Interval>) {
    match keepalive {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Maps a read error to how the socket is let go.
fn read_error_exit(e: &axum::Error) -> Exit {
    // An I/O error means the connection is gone: nothing can be sent.
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<std::io::Error>() {
            debug!(error = %e, "socket read failed");
            return Exit::Quiet;
        }
        source = err.source();
    }
    debug!(error = %e, "websocket protocol error");
    // tungstenite's error type is not ours to name; its message for an oversized message is
    // "Space limit exceeded: Message too long: …".
    if e.to_string().contains("Space limit exceeded") {
        Exit::CloseUnread(1009, "Message too big".into())
    } else {
        Exit::CloseUnread(1002, "WebSocket protocol error".into())
    }
}

// ---------------------------------------------------------------------------------------------
// Operations

/// What every operation of a connection shares.
struct OpEnv {
    /// The data queue.
    out: mpsc::Sender<Out>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The time limit of a query or mutation (zero: none).
    timeout: Duration,
}

/// Runs one operation to its end and returns its terminal frame (see [`OpDone`]).
async fn run_operation(
    id: String,
    generation: u64,
    kind: OperationKind,
    mut stream: BoxStream<'static, Response>,
    flag: Arc<PreExecFailed>,
    env: OpEnv,
) -> OpDone {
    let OpEnv {
        out,
        metrics,
        timeout,
    } = env;
    let started = Instant::now();
    // A query or mutation yields once; its whole execution is bounded. (A client `complete`
    // aborts a query at once; a mutation is left to finish, within this bound too.)
    let deadline =
        (kind != OperationKind::Subscription && !timeout.is_zero()).then(|| started + timeout.min(MAX_TIMER));
    let mut first = true;
    let frame = loop {
        let item = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(item) => item,
                Err(_) => {
                    warn!(
                        timeout_ms = timeout.as_millis() as u64,
                        "operation stopped at its time limit"
                    );
                    metrics.graphql_request(kind.as_str(), started.elapsed());
                    let response = Response::from_errors(vec![super::error::deadline_exceeded(timeout)]);
                    break Out::Pair(next_frame(&id, &response), complete_frame(&id));
                }
            },
            None => stream.next().await,
        };
        let Some(response) = item else {
            // The source ended: a subscription is complete. (A query always yields once.)
            break Out::Text(complete_frame(&id));
        };
        if first && failed_before_execution(&response, &flag) {
            debug!(errors = response.errors.len(), "pre-execution error");
            break Out::Text(error_frame(&id, &response.errors));
        }
        first = false;
        let next = next_frame(&id, &response);
        if kind != OperationKind::Subscription {
            metrics.graphql_request(kind.as_str(), started.elapsed());
            break Out::Pair(next, complete_frame(&id));
        }
        // Waiting for room here is the backpressure on a subscription.
        if out.send(Out::Text(next)).await.is_err() {
            // The writer is gone; the main task is about to shut us down.
            return OpDone {
                id,
                generation,
                terminal: None,
            };
        }
    };
    // Release the resolver stream before waiting for room for the last frame.
    drop(stream);
    let terminal = out.reserve_owned().await.ok().map(|permit| (permit, frame));
    OpDone {
        id,
        generation,
        terminal,
    }
}

/// Whether the first response reports a failure before execution (parse, validation, limits),
/// which the protocol answers with `error` rather than `next`.
fn failed_before_execution(response: &Response, flag: &PreExecFailed) -> bool {
    if response.errors.is_empty() {
        return false;
    }
    if flag.observed() {
        return flag.is_set();
    }
    // The PreExecutionFlag extension did not see this request: either it is not registered on
    // the schema, or another extension's `prepare_request` failed before parsing. Fall back
    // to the shape: no data and no error stamped with a path (resolver errors always are).
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        warn!(
            "PreExecutionFlag did not run for a WebSocket operation; is it registered on the \
             schema? Falling back to a heuristic to detect pre-execution errors"
        );
    }
    response.data == async_graphql::Value::Null && response.errors.iter().all(|e| e.path.is_empty())
}

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

fn complete_frame(id: &str) -> String {
    to_frame(&IdMessage::<()> {
        id,
        kind: "complete",
        payload: None,
    })
}

/// `next` with the serialised `Response` (an ExecutionResult: `data` always present, `errors`
/// and `extensions` left out when empty).
fn next_frame(id: &str, response: &Response) -> String {
    to_frame(&IdMessage {
        id,
        kind: "next",
        payload: Some(response),
    })
}

/// `error` with the bare array of errors, never empty (clients close with 4004 on an empty
/// one).
fn error_frame(id: &str, errors: &[ServerError]) -> String {
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

fn pong_frame(payload: Option<Map<String, Value>>) -> String {
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
enum ClientMessage {
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
fn parse_client_message(text: &str) -> Result<ClientMessage, &'static str> {
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

// ---------------------------------------------------------------------------------------------
// Writer

/// Owns the sink: writes queued frames (control first) until told to close or until both
/// queues and the close channel are gone.
async fn write_loop(
    mut sink: SplitSink<WebSocket, Message>,
    mut control: mpsc::Receiver<Out>,
    mut data: mpsc::Receiver<Out>,
    mut close: oneshot::Receiver<(u16, Cow<'static, str>)>,
) {
    loop {
        // `biased`: a close preempts everything, including a write blocked on a slow client.
        let close_frame = tokio::select! {
            biased;
            close = &mut close => close.ok(),
            written = write_batch(&mut sink, &mut control, &mut data) => match written {
                Ok(true) => continue,
                // Both queues are closed: the main task is done; wait for its decision.
                Ok(false) => (&mut close).await.ok(),
                Err(e) => {
                    debug!(error = %e, "socket write failed");
                    return;
                }
            },
        };
        match close_frame {
            Some((code, reason)) => {
                let frame = CloseFrame {
                    code,
                    reason: clip_reason(&reason).into(),
                };
                // Bounded: a client that does not read must not keep this task alive.
                let _ = tokio::time::timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await;
            }
            None => {
                // Flushes whatever tungstenite queued by itself, such as the reply to the
                // client's close frame.
                let _ = tokio::time::timeout(CLOSE_GRACE, sink.close()).await;
            }
        }
        return;
    }
}

/// Waits for one frame, feeds it and whatever else is ready (up to [`WRITE_BATCH`]), then
/// flushes once. `Ok(false)` when both queues are closed and empty.
async fn write_batch(
    sink: &mut SplitSink<WebSocket, Message>,
    control: &mut mpsc::Receiver<Out>,
    data: &mut mpsc::Receiver<Out>,
) -> Result<bool, axum::Error> {
    let first = tokio::select! {
        biased;
        Some(out) = control.recv() => out,
        Some(out) = data.recv() => out,
        else => return Ok(false),
    };
    feed(sink, first).await?;
    for _ in 1..WRITE_BATCH {
        let out = match control.try_recv() {
            Ok(out) => out,
            Err(_) => match data.try_recv() {
                Ok(out) => out,
                Err(_) => break,
            },
        };
        feed(sink, out).await?;
    }
    sink.flush().await?;
    Ok(true)
}

async fn feed(sink: &mut SplitSink<WebSocket, Message>, out: Out) -> Result<(), axum::Error> {
    match out {
        Out::Text(text) => sink.feed(Message::text(text)).await,
        Out::Pair(first, second) => {
            sink.feed(Message::text(first)).await?;
            sink.feed(Message::text(second)).await
        }
        Out::Ping(payload) => sink.feed(Message::Ping(payload.to_vec().into())).await,
    }
}

/// Cuts a close reason to [`MAX_CLOSE_REASON`] bytes at a char boundary.
fn clip_reason(reason: &str) -> &str {
    if reason.len() <= MAX_CLOSE_REASON {
        return reason;
    }
    let mut end = MAX_CLOSE_REASON;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

#[cfg(test)]
mod tests {
    //! The protocol against a toy schema whose resolvers the tests hold and release, for the
    //! checklist points that the real schema cannot drive on demand (slow queries, mutations
    //! in flight, failing subscription setup, hooks that hang or fail). No test asserts a
    //! duration: the timeouts only stop a broken test from hanging.

    use std::sync::atomic::AtomicUsize;

    use async_graphql::{Context, Object, Schema, SimpleObject, Subscription};
    use axum::{Router, extract::State, routing::any};
    use futures::Stream;
    use serde_json::json;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
        sync::{Notify, Semaphore},
    };
    use tokio_tungstenite::{
        MaybeTlsStream, WebSocketStream,
        tungstenite::{self, client::IntoClientRequest, http::HeaderValue},
    };

    use super::*;
    use crate::graphql::operation::PreExecutionFlag;

    const WAIT: Duration = Duration::from_secs(20);

    // --- pure parts ----------------------------------------------------------------------

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

    // --- toy schema --------------------------------------------------------------------

    /// Semaphores start empty: a resolver waiting on one runs when the test adds a permit.
    struct Gates {
        slow: Semaphore,
        init: Semaphore,
        events: Semaphore,
        stream_dropped: Notify,
        mutated: Notify,
        mutations: AtomicUsize,
    }

    impl Default for Gates {
        fn default() -> Self {
            Self {
                slow: Semaphore::new(0),
                init: Semaphore::new(0),
                events: Semaphore::new(0),
                stream_dropped: Notify::new(),
                mutated: Notify::new(),
                mutations: AtomicUsize::new(0),
            }
        }
    }

    struct DropSignal(Arc<Gates>);

    impl Drop for DropSignal {
        fn drop(&mut self) {
            self.0.stream_dropped.notify_one();
        }
    }

    struct SessionTag(String);

    #[derive(SimpleObject)]
    struct Nested {
        inner: Option<Box<Nested>>,
        leaf: i32,
    }

    struct Query;

    #[Object]
    impl Query {
        async fn hello(&self) -> &'static str {
            "world"
        }
        async fn fails(&self) -> async_graphql::Result<i32> {
            Err("boom".into())
        }
        async fn slow(&self, ctx: &Context<'_>) -> async_graphql::Result<i32> {
            ctx.data::<Arc<Gates>>()?.slow.acquire().await?.forget();
            Ok(1)
        }
        async fn session(&self, ctx: &Context<'_>) -> Option<String> {
            ctx.data_opt::<SessionTag>().map(|tag| tag.0.clone())
        }
        async fn nested(&self) -> Nested {
            Nested { inner: None, leaf: 0 }
        }
    }

    struct Mutation;

    #[Object]
    impl Mutation {
        async fn slow_write(&self, ctx: &Context<'_>) -> async_graphql::Result<usize> {
            let gates = ctx.data::<Arc<Gates>>()?;
            gates.slow.acquire().await?.forget();
            let n = gates.mutations.fetch_add(1, Ordering::SeqCst) + 1;
            gates.mutated.notify_one();
            Ok(n)
        }
    }

    struct Sub;

    #[Subscription]
    impl Sub {
        async fn count(&self, to: i32) -> impl Stream<Item = i32> {
            futures::stream::iter(0..to)
        }
        /// Yields 0, 1, … one per `events` permit; signals `stream_dropped` when dropped.
        async fn gated(&self, ctx: &Context<'_>) -> async_graphql::Result<impl Stream<Item = i32> + use<>> {
            let gates = ctx.data::<Arc<Gates>>()?.clone();
            let guard = DropSignal(gates.clone());
            Ok(futures::stream::unfold(
                (0, gates, guard),
                |(n, gates, guard)| async move {
                    gates.events.acquire().await.ok()?.forget();
                    Some((n, (n + 1, gates, guard)))
                },
            ))
        }
        async fn flaky(&self) -> impl Stream<Item = async_graphql::Result<i32>> {
            futures::stream::iter([Ok(1), Err("bad event".into()), Ok(3)])
        }
        async fn broken(&self) -> async_graphql::Result<futures::stream::Empty<i32>> {
            Err("setup failed".into())
        }
    }

    type TestSchema = Schema<Query, Mutation, Sub>;

    fn schema(gates: &Arc<Gates>) -> TestSchema {
        Schema::build(Query, Mutation, Sub)
            .extension(PreExecutionFlag)
            .data(gates.clone())
            .limit_depth(4)
            .finish()
    }

    /// `{"mode": "reject" | "fail" | "slow" | "panic", "tag": "…"}`; anything else is accepted.
    fn hook(gates: &Arc<Gates>) -> InitHook {
        let gates = gates.clone();
        Arc::new(move |payload: Value| {
            let gates = gates.clone();
            async move {
                match payload.get("mode").and_then(Value::as_str) {
                    Some("reject") => return Err(InitError::Forbidden("bad token".into())),
                    Some("fail") => return Err(InitError::Internal("db down".into())),
                    Some("panic") => panic!("hook bug"),
                    Some("slow") => gates
                        .init
                        .acquire()
                        .await
                        .map_err(|e| InitError::Internal(e.to_string()))?
                        .forget(),
                    _ => {}
                }
                let mut data = Data::default();
                if let Some(tag) = payload.get("tag").and_then(Value::as_str) {
                    data.insert(SessionTag(tag.to_owned()));
                }
                Ok(data)
            }
            .boxed()
        })
    }

    #[derive(Clone)]
    struct App {
        schema: TestSchema,
        config: WsConfig,
        hook: InitHook,
        shutdown: CancellationToken,
    }

    async fn ws_handler(State(app): State<App>, ws: WebSocketUpgrade) -> HttpResponse {
        upgrade(
            ws,
            app.schema,
            app.config,
            app.hook,
            app.shutdown,
            TaskTracker::new(),
        )
    }

    struct TestServer {
        addr: std::net::SocketAddr,
        gates: Arc<Gates>,
        shutdown: CancellationToken,
        _server: AbortOnDropHandle<()>,
    }

    impl TestServer {
        async fn start(config: WsConfig) -> Self {
            let gates = Arc::new(Gates::default());
            let shutdown = CancellationToken::new();
            let app = App {
                schema: schema(&gates),
                config,
                hook: hook(&gates),
                shutdown: shutdown.clone(),
            };
            let router = Router::new().route("/ws", any(ws_handler)).with_state(app);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            // Without TCP_NODELAY, Nagle's algorithm holds a small frame back until the
            // previous one is acknowledged, which delayed ACKs stretch to ~40 ms: longer than
            // the keepalive periods used here.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let server = tokio::spawn(async move {
                let _ = axum::serve(listener, router).await;
            });
            Self {
                addr,
                gates,
                shutdown,
                _server: AbortOnDropHandle::new(server),
            }
        }

        async fn default() -> Self {
            Self::start(WsConfig::default()).await
        }

        async fn connect(&self) -> Client {
            self.connect_with(Some(PROTOCOL)).await
        }

        async fn connect_with(&self, protocols: Option<&str>) -> Client {
            let mut request = format!("ws://{}/ws", self.addr).into_client_request().unwrap();
            if let Some(protocols) = protocols {
                request.headers_mut().insert(
                    "Sec-WebSocket-Protocol",
                    HeaderValue::from_str(protocols).unwrap(),
                );
            }
            let (ws, response) = tokio::time::timeout(
                WAIT,
                tokio_tungstenite::connect_async_with_config(request, None, true),
            )
            .await
            .expect("connect timed out")
            .expect("connect failed");
            let protocol = response
                .headers()
                .get("Sec-WebSocket-Protocol")
                .map(|v| v.to_str().unwrap().to_owned());
            Client { ws, protocol }
        }

        /// Connected, initialised and acknowledged.
        async fn acked(&self) -> Client {
            let mut client = self.connect().await;
            client.send(json!({"type": "connection_init"})).await;
            client.expect(json!({"type": "connection_ack"})).await;
            client
        }
    }

    struct Client {
        ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
        protocol: Option<String>,
    }

    #[derive(Debug, PartialEq)]
    enum Received {
        Message(Value),
        Closed(Option<(u16, String)>),
    }

    impl Client {
        async fn send(&mut self, message: Value) {
            self.send_text(&message.to_string()).await;
        }

        async fn send_text(&mut self, text: &str) {
            self.ws.send(tungstenite::Message::text(text)).await.unwrap();
        }

        async fn subscribe(&mut self, id: &str, query: &str) {
            self.send(json!({"type": "subscribe", "id": id, "payload": {"query": query}}))
                .await;
        }

        /// The next text message or the close; ping and pong frames are skipped.
        async fn recv(&mut self) -> Received {
            loop {
                let frame = tokio::time::timeout(WAIT, self.ws.next())
                    .await
                    .expect("nothing received in time");
                match frame {
                    Some(Ok(tungstenite::Message::Text(text))) => {
                        return Received::Message(serde_json::from_str(&text).unwrap());
                    }
                    Some(Ok(tungstenite::Message::Close(frame))) => {
                        return Received::Closed(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                    }
                    Some(Ok(tungstenite::Message::Binary(_))) => panic!("binary frame"),
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => return Received::Closed(None),
                }
            }
        }

        async fn expect(&mut self, message: Value) {
            assert_eq!(self.recv().await, Received::Message(message));
        }

        async fn expect_close(&mut self, code: u16) -> String {
            match self.recv().await {
                Received::Closed(Some((got, reason))) if got == code => reason,
                other => panic!("expected close {code}, got {other:?}"),
            }
        }

        /// A `ping`/`pong` round trip: proves the socket is open and that nothing else was
        /// queued before the `pong`.
        async fn expect_alive(&mut self) {
            self.send(json!({"type": "ping", "payload": {"probe": true}}))
                .await;
            self.expect(json!({"type": "pong", "payload": {"probe": true}}))
                .await;
        }
    }

    async fn notified(notify: &Notify) {
        tokio::time::timeout(WAIT, notify.notified())
            .await
            .expect("not notified in time");
    }

    // --- handshake -----------------------------------------------------------------------

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
            ..WsConfig::default()
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
            ..WsConfig::default()
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
            ..WsConfig::default()
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

    // --- operations ----------------------------------------------------------------------

    #[tokio::test]
    async fn query_gets_next_then_complete_with_session_data() {
        let server = TestServer::default().await;
        let mut client = server.connect().await;
        client
            .send(json!({"type": "connection_init", "payload": {"tag": "alice"}}))
            .await;
        client.expect(json!({"type": "connection_ack"})).await;
        client.subscribe("q", "{ hello session }").await;
        client
            .expect(json!({"id": "q", "type": "next",
                "payload": {"data": {"hello": "world", "session": "alice"}}}))
            .await;
        client.expect(json!({"id": "q", "type": "complete"})).await;
        // The id is free again.
        client.subscribe("q", "{ hello }").await;
        client
            .expect(json!({"id": "q", "type": "next", "payload": {"data": {"hello": "world"}}}))
            .await;
        client.expect(json!({"id": "q", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn variables_and_operation_name_are_used() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client
            .send(json!({"type": "subscribe", "id": "s", "payload": {
                "query": "query A { hello } subscription B($n: Int!) { count(to: $n) }",
                "operationName": "B", "variables": {"n": 1}, "extensions": null}}))
            .await;
        client
            .expect(json!({"id": "s", "type": "next", "payload": {"data": {"count": 0}}}))
            .await;
        client.expect(json!({"id": "s", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn pre_execution_errors_get_error_and_free_the_id() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        for query in [
            "{ hello",                                           // syntax
            "{ nope }",                                          // validation
            "{ nested { inner { inner { inner { leaf } } } } }", // depth limit
            "query A { hello } query B { hello }",               // no operation name
        ] {
            client.subscribe("e", query).await;
            let Received::Message(message) = client.recv().await else {
                panic!("closed on {query}");
            };
            assert_eq!(message["type"], "error", "{query}");
            assert_eq!(message["id"], "e");
            let errors = message["payload"].as_array().expect("bare array");
            assert!(!errors.is_empty());
            assert!(errors.iter().all(|e| e["message"].is_string()));
            // No `complete` follows, and the socket stays open.
            client.expect_alive().await;
        }
        client
            .send(json!({"type": "subscribe", "id": "e", "payload": {
                "query": "query A { hello }", "operationName": "Z"}}))
            .await;
        let Received::Message(message) = client.recv().await else {
            panic!("closed");
        };
        assert_eq!(
            message["payload"],
            json!([{"message": "Unknown operation named \"Z\"", "extensions": {"code": "BAD_USER_INPUT"}}])
        );
    }

    #[tokio::test]
    async fn resolver_error_in_a_query_is_next_then_complete() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client.subscribe("r", "{ fails }").await;
        let Received::Message(next) = client.recv().await else {
            panic!("closed");
        };
        assert_eq!(next["type"], "next");
        assert_eq!(next["payload"]["data"], Value::Null);
        assert_eq!(next["payload"]["errors"][0]["message"], "boom");
        assert_eq!(next["payload"]["errors"][0]["path"], json!(["fails"]));
        client.expect(json!({"id": "r", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn subscription_streams_events_and_errors_then_completes() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client.subscribe("c", "subscription { count(to: 3) }").await;
        for n in 0..3 {
            client
                .expect(json!({"id": "c", "type": "next", "payload": {"data": {"count": n}}}))
                .await;
        }
        client.expect(json!({"id": "c", "type": "complete"})).await;

        client.subscribe("f", "subscription { flaky }").await;
        client
            .expect(json!({"id": "f", "type": "next", "payload": {"data": {"flaky": 1}}}))
            .await;
        let Received::Message(failed) = client.recv().await else {
            panic!("closed");
        };
        assert_eq!(failed["type"], "next");
        assert_eq!(failed["payload"]["errors"][0]["message"], "bad event");
        client
            .expect(json!({"id": "f", "type": "next", "payload": {"data": {"flaky": 3}}}))
            .await;
        client.expect(json!({"id": "f", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn failed_subscription_setup_is_next_then_complete() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client.subscribe("b", "subscription { broken }").await;
        let Received::Message(next) = client.recv().await else {
            panic!("closed");
        };
        assert_eq!(next["type"], "next");
        assert_eq!(next["payload"]["errors"][0]["message"], "setup failed");
        client.expect(json!({"id": "b", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn client_complete_stops_a_subscription_without_echo() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client.subscribe("g", "subscription { gated }").await;
        server.gates.events.add_permits(1);
        client
            .expect(json!({"id": "g", "type": "next", "payload": {"data": {"gated": 0}}}))
            .await;
        client.send(json!({"type": "complete", "id": "g"})).await;
        notified(&server.gates.stream_dropped).await;
        // Events released now go nowhere; no `complete` echo either.
        server.gates.events.add_permits(5);
        client.expect_alive().await;
        // Completing again, or an unknown id, is ignored.
        client.send(json!({"type": "complete", "id": "g"})).await;
        client.send(json!({"type": "complete", "id": "zzz"})).await;
        client.expect_alive().await;
        // And the id can be used again.
        client.subscribe("g", "{ hello }").await;
        client
            .expect(json!({"id": "g", "type": "next", "payload": {"data": {"hello": "world"}}}))
            .await;
        client.expect(json!({"id": "g", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn client_complete_lets_a_mutation_finish_silently() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client.subscribe("m", "mutation { slowWrite }").await;
        client.send(json!({"type": "complete", "id": "m"})).await;
        // The id is free while the mutation still runs.
        client.subscribe("m", "{ hello }").await;
        client
            .expect(json!({"id": "m", "type": "next", "payload": {"data": {"hello": "world"}}}))
            .await;
        client.expect(json!({"id": "m", "type": "complete"})).await;
        server.gates.slow.add_permits(1);
        notified(&server.gates.mutated).await;
        assert_eq!(server.gates.mutations.load(Ordering::SeqCst), 1);
        // Its result is dropped: the next frame is the pong.
        client.expect_alive().await;
    }

    #[tokio::test]
    async fn mutation_gets_next_then_complete() {
        let server = TestServer::default().await;
        server.gates.slow.add_permits(1);
        let mut client = server.acked().await;
        client.subscribe("m", "mutation { slowWrite }").await;
        client
            .expect(json!({"id": "m", "type": "next", "payload": {"data": {"slowWrite": 1}}}))
            .await;
        client.expect(json!({"id": "m", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn active_id_reuse_gets_4409_for_subscriptions_and_running_queries() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client.subscribe("s", "subscription { gated }").await;
        client.subscribe("s", "{ hello }").await;
        assert_eq!(client.expect_close(4409).await, "Subscriber for s already exists");

        let mut client = server.acked().await;
        client.subscribe("q", "{ slow }").await;
        client.subscribe("q", "{ hello }").await;
        client.expect_close(4409).await;
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
    async fn operations_interleave_and_end_independently() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client.subscribe("a", "subscription { gated }").await;
        client.subscribe("b", "{ slow }").await;
        client.subscribe("c", "{ hello }").await;
        client
            .expect(json!({"id": "c", "type": "next", "payload": {"data": {"hello": "world"}}}))
            .await;
        client.expect(json!({"id": "c", "type": "complete"})).await;
        server.gates.events.add_permits(1);
        client
            .expect(json!({"id": "a", "type": "next", "payload": {"data": {"gated": 0}}}))
            .await;
        server.gates.slow.add_permits(1);
        client
            .expect(json!({"id": "b", "type": "next", "payload": {"data": {"slow": 1}}}))
            .await;
        client.expect(json!({"id": "b", "type": "complete"})).await;
        server.gates.events.add_permits(1);
        client
            .expect(json!({"id": "a", "type": "next", "payload": {"data": {"gated": 1}}}))
            .await;
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
        let conn = Connection {
            executor: schema(&gates),
            on_init: hook(&gates),
            control,
            data,
            phase: Phase::AwaitingInit,
            ops: HashMap::new(),
            tasks: JoinSet::new(),
            generation: 0,
            metrics: crate::metrics::Metrics::new(),
            max_subscriptions: 0,
            request_timeout: Duration::ZERO,
        };
        assert!(conn.send_control(Out::Ping([0; 8])).is_none());
        assert!(matches!(
            conn.send_control(Out::Ping([0; 8])),
            Some(Exit::Close(1013, _))
        ));
    }

    // --- keepalive -------------------------------------------------------------------------

    #[tokio::test]
    async fn client_ping_frame_gets_pong_frame() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client
            .ws
            .send(tungstenite::Message::Ping(b"hi".to_vec().into()))
            .await
            .unwrap();
        loop {
            let frame = tokio::time::timeout(WAIT, client.ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if let tungstenite::Message::Pong(payload) = frame {
                assert_eq!(&payload[..], b"hi");
                break;
            }
        }
    }

    #[tokio::test]
    async fn keepalive_pings_a_live_client_and_keeps_it() {
        // Long enough for a loaded machine to answer each ping before the next tick.
        let server = TestServer::start(WsConfig {
            keepalive_interval: Duration::from_millis(250),
            ..WsConfig::default()
        })
        .await;
        let mut client = server.acked().await;
        // tungstenite answers each ping frame while we read.
        let mut pings = 0;
        while pings < 2 {
            let frame = tokio::time::timeout(WAIT, client.ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if matches!(frame, tungstenite::Message::Ping(_)) {
                pings += 1;
            }
        }
        client.expect_alive().await;
    }

    #[tokio::test]
    async fn keepalive_drops_a_client_that_never_answers() {
        let server = TestServer::start(WsConfig {
            keepalive_interval: Duration::from_millis(20),
            ..WsConfig::default()
        })
        .await;
        let opcodes = raw_silent_client(server.addr).await;
        assert!(opcodes.contains(&0x9), "no ping frame: {opcodes:?}");
        // Dropped without a close frame.
        assert!(!opcodes.contains(&0x8), "close frame sent: {opcodes:?}");
    }

    /// A client on a bare TCP socket that does the handshake, sends `connection_init`, then
    /// only reads (so no pong frame is ever sent). Returns the opcodes of the frames received
    /// until the server dropped the connection.
    async fn raw_silent_client(addr: std::net::SocketAddr) -> Vec<u8> {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let handshake = format!(
            "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n"
        );
        tcp.write_all(handshake.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let header_end = loop {
            let mut chunk = [0u8; 1024];
            let n = tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed during the handshake");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        assert!(buf.starts_with(b"HTTP/1.1 101"));
        let mut rest = buf.split_off(header_end);
        // A masked text frame (clients must mask).
        let text = br#"{"type":"connection_init"}"#;
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | text.len() as u8];
        frame.extend_from_slice(&mask);
        frame.extend(text.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        tcp.write_all(&frame).await.unwrap();
        tokio::time::timeout(WAIT, async {
            loop {
                let mut chunk = [0u8; 1024];
                match tcp.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => rest.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .expect("the server kept the silent client");
        // Server frames are unmasked and short here: opcode, 7-bit length, payload.
        let mut opcodes = Vec::new();
        let mut i = 0;
        while i + 2 <= rest.len() {
            opcodes.push(rest[i] & 0x0f);
            i += 2 + (rest[i + 1] & 0x7f) as usize;
        }
        opcodes
    }
}
