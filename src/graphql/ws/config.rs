//! The tunables of one WebSocket connection ([`WsConfig`]), and the cap on the timers they
//! set.
//!
//! Plain data with defaults. It must not read flags, variables or files: the crate's `config`
//! does, and fills a `WsConfig` in.

use std::{sync::Arc, time::Duration};

/// Longest timer period used (about 30 years, as tokio caps `sleep`).
const MAX_TIMER: Duration = Duration::from_secs(86_400 * 365 * 30);

/// A configured period as a timer may use it: capped like tokio's own `sleep`, so an absurd
/// value cannot overflow `Instant` arithmetic (a panic) when a deadline is computed.
pub(super) fn timer_period(configured: Duration) -> Duration {
    configured.min(MAX_TIMER)
}

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
    /// Capacity, in frames, of each of the two outgoing queues (see the `ws` module docs). A
    /// full control queue closes the socket with 1013. Zero is treated as one.
    pub outgoing_queue: usize,
    /// Longest a query or mutation may execute before it is stopped and answered with
    /// `next` carrying a `DEADLINE_EXCEEDED` error, then `complete`. Subscriptions are not
    /// bounded. Zero disables.
    pub request_timeout: Duration,
    /// A socket whose data queue has been full at every look for this long is not keeping up
    /// (or not reading at all): it is closed with 1013 and a reason that says which cursor its
    /// `jobEvents` subscriptions can resume after. Zero disables (the keepalive still drops a
    /// client that reads nothing).
    pub slow_consumer_timeout: Duration,
    /// The server's groups of identical subscriptions, which share their renderings (see
    /// `fanout`). One per server: every connection joins the same groups.
    pub groups: Arc<super::fanout::Groups>,
    /// The runtime each session runs on, with its operations, writer and keepalive; `None`:
    /// the runtime that serves the upgrade. jobgate gives sessions a runtime of their own,
    /// whose threads yield to those serving requests and commits (see `server::delivery_runtime`).
    pub delivery: Option<tokio::runtime::Handle>,
}

impl WsConfig {
    /// The defaults, counting into `metrics`: the process's one registry, so that there is no
    /// way to serve sockets whose metrics nobody scrapes.
    pub fn new(metrics: Arc<crate::metrics::Metrics>) -> Self {
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
            slow_consumer_timeout: Duration::from_secs(10),
            groups: Arc::new(super::fanout::Groups::new(&metrics)),
            delivery: None,
            metrics,
        }
    }
}
