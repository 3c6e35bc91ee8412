//! The writer task: the only owner of a socket's sink. It writes the frames queued on the
//! control and data queues (control first, in batches with one flush), and the close frame
//! when the session decides to close.
//!
//! It must not decide anything about the protocol (what to send, when to close: `session`
//! does), and must not let a client that does not read hold it forever: every wait on the
//! socket after the close decision is bounded by [`CLOSE_GRACE`].

use std::{
    borrow::Cow,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::{SinkExt, stream::SplitSink};
use tokio::sync::{
    Notify,
    mpsc::{self, OwnedPermit, error::TrySendError},
    oneshot,
};
use tracing::debug;

use super::codec::{CloseCode, clip_reason};

/// How long a closing socket waits for the close frame to be written and for the client's
/// close reply. Reading until the reply means we do not drop the TCP connection with unread
/// input, which would make the kernel answer with RST and could destroy our close frame in
/// the client's receive buffer before it read it.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Frames the writer feeds before one flush, so a burst of `next`s costs one syscall.
const WRITE_BATCH: usize = 64;

/// A frame for the writer.
#[derive(Debug)]
pub(super) enum Out {
    Text(String),
    /// A single-result operation's `next` and `complete`, in one queue slot so that the one
    /// permit its task reserved covers both.
    Pair(String, String),
    /// A WebSocket ping frame (keepalive) with this payload, which the pong must echo.
    Ping([u8; 8]),
    /// A `next` frame of a shared rendering: the subscription's frame start (see
    /// `codec::next_prefix`), the group's payload, and `}`. With `cursor`, the subscription's
    /// resume cursor moves to it once the frame is handed to the socket.
    Shared {
        prefix: Arc<str>,
        payload: Payload,
        cursor: Option<(Arc<AtomicI64>, i64)>,
    },
}

/// The sending side of the data queue (see the `ws` module docs), which also tells the
/// session when a sender found it full: only then does the session start looking for a slow
/// consumer, so a healthy socket costs no periodic timer.
#[derive(Clone)]
pub(super) struct DataQueue {
    tx: mpsc::Sender<Out>,
    congested: Arc<Notify>,
}

impl DataQueue {
    pub(super) fn new(tx: mpsc::Sender<Out>) -> Self {
        Self {
            tx,
            congested: Arc::new(Notify::new()),
        }
    }

    /// Queues `out`, waiting for room (the backpressure on its operation); says so first when
    /// there is none. `Err` when the writer is gone.
    pub(super) async fn send(&self, out: Out) -> Result<(), ()> {
        match self.tx.try_send(out) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(out)) => {
                self.congested.notify_one();
                self.tx.send(out).await.map_err(|_| ())
            }
            Err(TrySendError::Closed(_)) => Err(()),
        }
    }

    /// A slot for a terminal frame (see `operation_task::OpDone`).
    pub(super) async fn reserve(&self) -> Option<OwnedPermit<Out>> {
        self.tx.clone().reserve_owned().await.ok()
    }

    pub(super) fn is_full(&self) -> bool {
        self.tx.capacity() == 0
    }

    /// Resolves once a sender has found the queue full since the last call.
    pub(super) async fn congested(&self) {
        self.congested.notified().await;
    }
}

/// A rendered `ExecutionResult` (`{"data":…}`) that the subscribers of a group share (see
/// `fanout`): reference-counted bytes, copied once per frame into the socket's buffer.
pub(super) type Payload = axum::extract::ws::Utf8Bytes;

/// The close frame the session decided on; the writer sends it before anything still queued.
pub(super) type Close = (CloseCode, Cow<'static, str>);

/// Owns the sink: writes queued frames (control first) until told to close or until both
/// queues and the close channel are gone.
pub(super) async fn write_loop(
    mut sink: SplitSink<WebSocket, Message>,
    mut control: mpsc::Receiver<Out>,
    mut data: mpsc::Receiver<Out>,
    mut close: oneshot::Receiver<Close>,
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
                    code: code.into(),
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
        Out::Shared {
            prefix,
            payload,
            cursor,
        } => {
            // The splice: one copy of the shared bytes, no serialisation.
            let mut frame = String::with_capacity(prefix.len() + payload.len() + 1);
            frame.push_str(&prefix);
            frame.push_str(&payload);
            frame.push('}');
            sink.feed(Message::text(frame)).await?;
            if let Some((resume, cursor)) = cursor {
                resume.store(cursor, Ordering::Relaxed);
            }
            Ok(())
        }
    }
}
