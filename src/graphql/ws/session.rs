//! One connection's state machine, from the upgraded socket to the last frame: the
//! subprotocol check, the `connection_init`/`connection_ack` handshake with its timer and the
//! init hook, what each client message does in each phase, the idle timeout, server shutdown,
//! and how the socket is let go (close frame, close reply, grace period).
//!
//! This is the *main task* of the `ws` module docs: it owns all the connection's state and
//! never waits for the client. It must not write to the socket (the writer task does), run an
//! operation itself (operation tasks do, kept in the registry), or authenticate by itself
//! (the [`InitHook`] decides; this module maps its answer to a close code).

use std::{borrow::Cow, panic::AssertUnwindSafe, sync::Arc, time::Duration};

use async_graphql::{Data, Executor, Request};
use axum::extract::ws::{Message, WebSocket};
use futures::{FutureExt, StreamExt, future::BoxFuture, stream::SplitStream};
use serde_json::{Map, Value};
use tokio::{
    sync::{
        mpsc::{self, error::TrySendError},
        oneshot,
    },
    task::JoinError,
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};
use tracing::{Instrument, debug, debug_span, error, warn};

use super::codec::next_prefix;
use super::codec::{
    BINARY_REFUSED, CONNECTION_ACK, ClientMessage, CloseCode, PROTOCOL, error_frame, parse_client_message,
    pong_frame,
};
use super::config::{WsConfig, timer_period};
use super::fanout::{Execute, GroupTap, NO_CURSOR};
use super::keepalive::{Beat, Keepalive};
use super::operation_task::{OpDone, OpEnv, run_operation};
use super::registry::Registry;
use super::socket_writer::{CLOSE_GRACE, DataQueue, Out, write_loop};
use crate::graphql::bounds;
use crate::graphql::error::fill_codes;
use crate::graphql::operation::{OperationKind, PreExecFailed, operation_kind, selection_variables};
use crate::model::TraceParent;

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

/// How the main loop ended, and so how the socket is let go.
#[derive(Debug)]
pub(super) enum Exit {
    /// Send this close frame, then wait for the client's reply.
    Close(CloseCode, Cow<'static, str>),
    /// Send this close frame after a read error (an over-size message, a protocol error):
    /// tungstenite reads nothing more after one, so the client's reply cannot be awaited.
    /// The socket is held for [`CLOSE_GRACE`] after the frame is written instead of dropped
    /// at once: the client may still be sending (the rest of a fragmented message), and
    /// closing a socket with unread input makes the kernel send RST, which can destroy the
    /// close frame before the client reads it (it does on some systems), leaving the client
    /// with a reset instead of 1009.
    CloseUnread(CloseCode, Cow<'static, str>),
    /// Drop the socket without a close frame (keepalive failure: the peer is presumed dead,
    /// and a close frame would only sit in a full buffer).
    Terminate,
    /// The socket is already closed or broken; flush what tungstenite queued (such as the
    /// reply to the client's close) and let go.
    Quiet,
}

impl Exit {
    fn close(code: CloseCode, reason: impl Into<Cow<'static, str>>) -> Self {
        Self::Close(code, reason.into())
    }
}

enum Phase {
    /// Waiting for `connection_init`; the 4408 timer runs.
    AwaitingInit,
    /// The init hook runs; `ping` still works, `subscribe` gets 4401, `connection_init` 4429.
    Initialising(BoxFuture<'static, Result<Data, InitError>>),
    /// Acknowledged, with the session data every operation sees.
    Acked(Arc<Data>),
}

/// Serves one upgraded socket until it is let go; every task it started has ended when it
/// returns.
pub(super) async fn run<E: Executor>(
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

    let execute: Execute = {
        let executor = executor.clone();
        Arc::new(move |request, session| executor.execute_stream(request, Some(session)))
    };
    let mut conn = Connection {
        executor,
        execute,
        groups: config.groups.clone(),
        on_init,
        control: control_tx,
        data: DataQueue::new(data_tx),
        phase: Phase::AwaitingInit,
        ops: Registry::new(metrics.clone(), config.max_subscriptions),
        metrics: metrics.clone(),
        request_timeout: config.request_timeout,
    };
    let exit = if protocol_ok {
        conn.serve(&mut stream, &config, &shutdown).await
    } else {
        debug!("client did not offer {PROTOCOL}");
        Exit::close(CloseCode::SubprotocolNotAcceptable, "Subprotocol not acceptable")
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
    conn.ops.shutdown().await;
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
    /// The executor, type-erased, for the renderers of shared subscriptions.
    execute: Execute,
    groups: Arc<super::fanout::Groups>,
    on_init: InitHook,
    /// The control queue (see the `ws` module docs); only this task fills it.
    control: mpsc::Sender<Out>,
    /// The data queue, handed to every operation task.
    data: DataQueue,
    phase: Phase,
    ops: Registry,
    metrics: Arc<crate::metrics::Metrics>,
    request_timeout: Duration,
}

impl<E: Executor> Connection<E> {
    /// The main loop. Returns how the socket must be let go.
    async fn serve(
        &mut self,
        stream: &mut SplitStream<WebSocket>,
        config: &WsConfig,
        shutdown: &CancellationToken,
    ) -> Exit {
        let init_timeout = config.init_timeout;
        let mut init_timer = std::pin::pin!(tokio::time::sleep(init_timeout));
        let mut keepalive = Keepalive::new(config.keepalive_interval);
        let idle_timeout = timer_period(config.idle_timeout);
        let mut idle_since = Instant::now();
        let slow_timeout = timer_period(config.slow_consumer_timeout);
        // Once a sender has found the data queue full, it is looked at four times per timeout
        // until it is not: it must be full at every look.
        let slow_period = (slow_timeout / 4).max(Duration::from_millis(10));
        let mut slow_check: Option<tokio::time::Interval> = None;
        let mut full_since: Option<Instant> = None;

        loop {
            let awaiting_init = matches!(self.phase, Phase::AwaitingInit);
            let idle =
                !idle_timeout.is_zero() && matches!(self.phase, Phase::Acked(_)) && self.ops.is_empty();
            let exit = tokio::select! {
                () = shutdown.cancelled() => Some(Exit::close(CloseCode::GoingAway, "Server shutting down")),
                () = tokio::time::sleep_until(idle_since + idle_timeout), if idle => {
                    debug!("idle: no operation and no message");
                    Some(Exit::close(CloseCode::Normal, "Idle timeout"))
                }
                () = &mut init_timer, if awaiting_init && !init_timeout.is_zero() => {
                    debug!("no connection_init in time");
                    Some(Exit::close(CloseCode::ConnectionInitialisationTimeout, "Connection initialisation timeout"))
                }
                result = init_hook(&mut self.phase) => self.on_init_done(result),
                joined = self.ops.next_finished() => {
                    idle_since = Instant::now();
                    self.on_op_done(joined)
                }
                () = self.data.congested(), if !slow_timeout.is_zero() && slow_check.is_none() => {
                    let mut check = tokio::time::interval_at(Instant::now() + slow_period, slow_period);
                    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    slow_check = Some(check);
                    None
                }
                now = tick(&mut slow_check) => {
                    if self.data.is_full() {
                        let since = *full_since.get_or_insert(now);
                        (now.duration_since(since) >= slow_timeout).then(|| self.slow_consumer_exit())
                    } else {
                        // It drained: no more looks until a sender finds it full again.
                        full_since = None;
                        slow_check = None;
                        None
                    }
                }
                beat = keepalive.tick() => match beat {
                    Beat::Ping(payload) => self.send_control(Out::Ping(payload)),
                    Beat::Unanswered => {
                        debug!("no pong frame for the last keepalive ping; dropping the socket");
                        Some(Exit::Terminate)
                    }
                },
                // The writer stopped (the socket failed while writing): nothing more can be sent.
                () = self.control.closed() => Some(Exit::Quiet),
                // The control queue is full (a burst of messages each answered by a frame of
                // its own: refused subscriptions, pongs): the client's next message waits until
                // the writer has made room for its answer, so every message gets one and none
                // closes the socket (TCP holds back the client meanwhile).
                closed = self.control.reserve().map(|room| room.is_err()), if self.control.capacity() == 0 => {
                    closed.then_some(Exit::Quiet)
                }
                frame = stream.next(), if self.control.capacity() > 0 => match frame {
                    None => Some(Exit::Quiet),
                    Some(Err(e)) => Some(read_error_exit(&e)),
                    // tungstenite has queued the close reply; the writer flushes it.
                    Some(Ok(Message::Close(_))) => Some(Exit::Quiet),
                    Some(Ok(Message::Pong(payload))) => {
                        keepalive.on_pong(&payload);
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
                        Some(Exit::close(CloseCode::BadRequest, BINARY_REFUSED))
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
                return Some(Exit::close(
                    CloseCode::BadRequest,
                    format!("Invalid message received: {why}"),
                ));
            }
        };
        match message {
            ClientMessage::ConnectionInit { payload } => {
                if !matches!(self.phase, Phase::AwaitingInit) {
                    return Some(Exit::close(
                        CloseCode::TooManyInitialisationRequests,
                        "Too many initialisation requests",
                    ));
                }
                self.phase = Phase::Initialising(call_init_hook(&self.on_init, payload));
                None
            }
            ClientMessage::Ping { payload } => self.send_control(Out::Text(pong_frame(payload))),
            ClientMessage::Pong => None,
            ClientMessage::Subscribe { id, payload } => self.subscribe(id, payload),
            ClientMessage::Complete { id } => {
                self.ops.complete(&id);
                None
            }
        }
    }

    fn on_init_done(&mut self, result: Result<Data, InitError>) -> Option<Exit> {
        match result {
            Ok(data) => {
                self.phase = Phase::Acked(Arc::new(data));
                debug!("connection acknowledged");
                self.send_control(Out::Text(CONNECTION_ACK.to_owned()))
            }
            Err(InitError::Forbidden(why)) => {
                debug!(why, "connection_init rejected");
                Some(Exit::close(
                    CloseCode::Forbidden,
                    if why.is_empty() {
                        "Forbidden".to_owned()
                    } else {
                        format!("Forbidden: {why}")
                    },
                ))
            }
            Err(InitError::TryLater(why)) => {
                debug!(why, "connection_init refused for now");
                Some(Exit::close(CloseCode::TryAgainLater, why))
            }
            Err(InitError::Internal(why)) => {
                // The cause stays in the logs; the client only learns that it was our fault.
                error!(error = why, "connection_init hook failed");
                Some(Exit::close(
                    CloseCode::InternalServerError,
                    "Internal server error",
                ))
            }
        }
    }

    fn subscribe(&mut self, id: String, payload: Map<String, Value>) -> Option<Exit> {
        // The order of checks is the reference's: shape (done by the parser), 4401, 4409.
        let Phase::Acked(session) = &self.phase else {
            return Some(Exit::close(CloseCode::Unauthorized, "Unauthorized"));
        };
        if self.ops.contains(&id) {
            return Some(Exit::close(
                CloseCode::SubscriberAlreadyExists,
                format!("Subscriber for {id} already exists"),
            ));
        }
        // Variables out of bounds are refused before async-graphql converts them (recursively).
        if let Err(e) = bounds::check_variables(
            ["variables", "extensions"].map(|key| (key, payload.get(key).unwrap_or(&Value::Null))),
        ) {
            debug!(id, error = %e.message, "operation refused before execution");
            let mut errors = [e];
            fill_codes(&mut errors);
            return self.send_control(Out::Text(error_frame(&id, &errors)));
        }
        // The shape was checked, so this cannot fail in practice; if it does, it is still the
        // client's message that is wrong.
        let trace_parent = extensions_traceparent(&payload);
        let mut request: Request = match serde_json::from_value(Value::Object(payload)) {
            Ok(request) => request,
            Err(e) => {
                return Some(Exit::close(
                    CloseCode::BadRequest,
                    format!("Invalid message received: {e}"),
                ));
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
                fill_codes(&mut errors);
                return self.send_control(Out::Text(error_frame(&id, &errors)));
            }
        };
        if let Err(refused) = self.ops.admit(kind) {
            return self.send_control(Out::Text(error_frame(&id, &[refused])));
        }
        let flag = Arc::new(PreExecFailed::default());
        let mut request = request.data(flag.clone());
        // The operation's own `traceparent` outranks the connection's (`connection_init`).
        if let Some(parent) = trace_parent {
            request = request.data(parent);
        }
        let mut resume = None;
        if kind == OperationKind::Subscription {
            // Every subscription may share its renderings (see `fanout`); its resolver decides.
            let key_variables = render_variables(&mut request);
            let cursor = Arc::new(std::sync::atomic::AtomicI64::new(NO_CURSOR));
            resume = Some(cursor.clone());
            let tap = GroupTap {
                groups: self.groups.clone(),
                execute: self.execute.clone(),
                session: session.clone(),
                query: request.query.as_str().into(),
                operation: request.operation_name.as_deref().map(Into::into),
                variables: request.variables.clone(),
                key_variables,
                out: self.data.clone(),
                prefix: next_prefix(&id).into(),
                resume: cursor,
            };
            request = request.data(tap.into_tap());
        }
        // Lazy: validation and execution happen when the operation task polls the stream.
        let stream = self.executor.execute_stream(request, Some(session.clone()));
        let span = debug_span!("operation", id, ?kind);
        let env = OpEnv {
            out: self.data.clone(),
            metrics: self.metrics.clone(),
            timeout: self.request_timeout,
        };
        let task_id = id.clone();
        self.ops.start(id, kind, resume, move |generation| {
            run_operation(task_id, generation, kind, stream, flag, env).instrument(span)
        });
        None
    }

    fn on_op_done(&mut self, joined: Result<OpDone, JoinError>) -> Option<Exit> {
        match joined {
            Ok(done) => {
                self.ops.finish(done);
                None
            }
            // Aborted by a client `complete`.
            Err(e) if e.is_cancelled() => None,
            Err(e) => {
                // A resolver panicked. Which id it was is unknown here, and the reference
                // closes with 4500 when execution throws.
                error!(error = %e, "operation task panicked");
                Some(Exit::close(
                    CloseCode::InternalServerError,
                    "Internal server error",
                ))
            }
        }
    }

    /// The close of a socket whose data queue stayed full: 1013, and where its `jobEvents`
    /// subscriptions can resume (every frame handed to the socket before the close frame is
    /// at or before that cursor, so resuming after it misses nothing).
    fn slow_consumer_exit(&self) -> Exit {
        self.metrics.ws_slow_consumers_closed.inc();
        let reason = match self.ops.resume_cursor() {
            Some(cursor) => format!("Slow consumer: resume jobEvents after {cursor}"),
            None => "Slow consumer: not reading fast enough".to_owned(),
        };
        warn!(reason, "closing a socket whose outgoing queue stayed full");
        Exit::close(CloseCode::TryAgainLater, reason)
    }

    /// Queues a frame from the main task, which never waits for the writer.
    fn send_control(&self, out: Out) -> Option<Exit> {
        match self.control.try_send(out) {
            Ok(()) => None,
            Err(TrySendError::Full(_)) => {
                warn!("outgoing queue full; closing a client that does not read");
                Some(Exit::close(CloseCode::TryAgainLater, "Outgoing queue full"))
            }
            Err(TrySendError::Closed(_)) => Some(Exit::Quiet),
        }
    }
}

/// Calls the hook, turning a panic (at the call or while polled) into an internal error, so a
/// buggy hook costs one connection a 4500 instead of a silently dropped socket.
/// The caller's span a `subscribe` payload names in `extensions.traceparent` (and
/// `extensions.tracestate`); a malformed one is ignored.
fn extensions_traceparent(payload: &Map<String, Value>) -> Option<TraceParent> {
    let extensions = payload.get("extensions")?;
    let traceparent = extensions.get("traceparent")?.as_str()?;
    TraceParent::parse(traceparent, extensions.get("tracestate").and_then(Value::as_str))
}

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

/// The variables that can change how the operation renders an event, as JSON (part of its
/// group's key): those its selection uses below the root fields. Every variable when the
/// document cannot be walked.
fn render_variables(request: &mut Request) -> Arc<str> {
    let mut variables = request.variables.clone();
    if let Some(used) = selection_variables(request) {
        variables.retain(|name, _| used.contains(name.as_str()));
    }
    serde_json::to_string(&variables).unwrap_or_default().into()
}

/// The next look of the slow-consumer check; pending forever when it is disabled.
async fn tick(check: &mut Option<tokio::time::Interval>) -> Instant {
    match check {
        Some(check) => check.tick().await,
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
        Exit::CloseUnread(CloseCode::MessageTooBig, "Message too big".into())
    } else {
        Exit::CloseUnread(CloseCode::ProtocolError, "WebSocket protocol error".into())
    }
}

#[cfg(test)]
mod tests;
