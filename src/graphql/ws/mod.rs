//! Our server side of the `graphql-transport-ws` WebSocket subprotocol.
//!
//! This module owns one WebSocket from the upgrade to the last frame: subprotocol check, the
//! `connection_init`/`connection_ack` handshake and its timeout, message validation, the
//! per-operation lifecycle (ids, `next`/`error`/`complete`), keepalive ping frames, the bounded
//! outgoing queue and the close codes. It follows docs/WEBSOCKET.md ("reference §N" below is a
//! section of it: §7 for the shape, §8 for the checks) and drives any [`async_graphql::Executor`]
//! (in practice our `Schema`) through `execute_stream`.
//!
//! It must not: know the schema or any business rule (the executor and the init hook carry
//! them); authenticate by itself (the [`InitHook`] decides, this module maps its answer to
//! 4403/4500); use async-graphql's own WebSocket types, which break the protocol in many
//! places (reference §6); let any task outlive its socket; block its main loop on a slow
//! client; or panic on anything a client sends.
//!
//! # Where things are
//!
//! - `codec`: the wire format: client messages and their validation, server frames, close
//!   codes and the close-reason limit;
//! - `session`: one connection's state machine (the *main task* below), the init hook, and
//!   how a socket is let go;
//! - `registry`: the connection's live operations by id, their tasks, the subscription cap;
//! - `operation_task`: one operation's task, from the executor's stream to its last frame;
//! - `keepalive`: ping frames and the verdict on a peer that stopped answering;
//! - `socket_writer`: the task that owns the socket's sink;
//! - `config`: [`WsConfig`].
//!
//! # Shape
//!
//! One task per socket (the *main task*) owns all state and `select!`s over client frames, the
//! init timer, the init hook, finished operations, the keepalive tick and server shutdown.
//! A *writer task* owns the sink. Each operation runs in a per-connection
//! [`JoinSet`](tokio::task::JoinSet), which is shut down (every task aborted and awaited) when
//! the socket closes.
//!
//! Frames reach the writer through two bounded queues:
//! - the *data* queue, where operation tasks `send().await` their `next` frames (so a slow
//!   client throttles the operations, never the main task) and where terminal frames go
//!   through a permit the operation reserved (see `OpDone`);
//! - the *control* queue, which only the main task fills with `try_send` (`connection_ack`,
//!   `pong`, early `error`s, ping frames). The writer drains it first. It is separate from the
//!   data queue because a busy subscription keeps the data queue full as a matter of course;
//!   that is backpressure, not a dead client, and must not get a healthy client closed when
//!   it sends a `ping`. While the control queue is full the main task reads no client
//!   message (each may need a frame of its own: a burst of refused `subscribe`s or `ping`s
//!   waits for room, every message answered, the socket kept); a ping frame of the keepalive
//!   that finds it still full means the client is not reading, and the socket is closed with
//!   1013.
//!
//! A close goes through a `oneshot` that the writer polls before anything else.

mod codec;
mod config;
mod fanout;
mod keepalive;
mod operation_task;
mod registry;
mod session;
mod socket_writer;
#[cfg(test)]
mod test_support;

use async_graphql::Executor;
use axum::{extract::ws::WebSocketUpgrade, response::Response as HttpResponse};
use tokio_util::{
    sync::CancellationToken,
    task::{AbortOnDropHandle, TaskTracker},
};
use tracing::{Instrument, debug, info_span};

pub use codec::PROTOCOL;
pub use config::WsConfig;
pub use fanout::{FanoutDelivery, GroupTap, Groups};
pub use session::{InitError, InitHook};

/// Upgrade handler body: call from an axum handler that extracted `WebSocketUpgrade`.
///
/// The upgrade always succeeds when the request is a valid WebSocket upgrade; a client that
/// did not offer [`PROTOCOL`] gets no `Sec-WebSocket-Protocol` header and then close 4406, as
/// the reference server does. When `shutdown` is cancelled every socket closes with 1001;
/// the caller must keep the runtime alive for a moment after that (or track the connection
/// tasks) so the close frames get written. With `config.delivery` set, the session runs on
/// that runtime, which must run until the tracked connection tasks have ended.
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
            let delivery = config.delivery.clone();
            let session = session::run(socket, executor, config, on_init, shutdown).instrument(span);
            connections.track_future(async move {
                let Some(runtime) = delivery else {
                    return session.await;
                };
                // The tracked future waits for the session on the other runtime; if it is
                // dropped first, the session goes too, so no socket outlives its tracking.
                // A session dropped with its runtime at shutdown simply ended.
                if let Err(e) = AbortOnDropHandle::new(runtime.spawn(session)).await
                    && e.is_panic()
                {
                    std::panic::resume_unwind(e.into_panic());
                }
            })
        })
}
