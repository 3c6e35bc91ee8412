//! The accept loop: HTTP/1.1 connections, and their WebSocket upgrades, served by hyper with
//! the limits `axum::serve` does not have.
//!
//! - **A cap on open connections** (`--max-connections`; by default the open-file limit less
//!   a reserve): one more is answered a canned 503 and closed at once, never queued, and
//!   counted (`jobgate_http_connections_refused_total`), so a flood of connections cannot take
//!   the file descriptors the store and the jobs need.
//! - **Timeouts on the connection itself**, kept by `Watched`, a wrapper of the socket that
//!   sees every read and write, and told by the service when a request starts and ends:
//!   - *header*: a new connection must deliver its first complete request head within
//!     `--http-header-timeout-ms` of being accepted (so a connection that never sends a byte
//!     is closed too); a later request, within that time of its first byte;
//!   - *idle*: between requests, a kept-alive connection may wait `--http-idle-timeout-ms`
//!     for the next one. A request counts as ended when its handler returns its response;
//!     writing the response body counts as activity, so a client that stops reading a
//!     response for that long is cut off too (jobgate streams no response bodies over HTTP:
//!     subscriptions go over WebSocket);
//!   - while a request's handler runs, neither applies; the body has its own timeout,
//!     `--http-body-timeout-ms`, around reading it (`server.rs`, answered 408);
//!   - an upgraded connection (a WebSocket: the response was 101) is never timed here; its
//!     keepalive and idle rules are the WebSocket layer's.
//!
//!   hyper's own `header_read_timeout` is not used: in hyper 1.x it starts whenever hyper
//!   begins to read a head (at accept and right after each response), so it would bound the
//!   keep-alive wait by the header time, and it knows nothing of the idle wait.
//! - **Graceful shutdown** in today's order: on `shutdown`, stop accepting; every connection
//!   is told to finish (hyper closes idle keep-alive connections at once and lets in-flight
//!   requests complete); WebSockets, which `shutdown` also reaches, close with 1001 on their
//!   own; [`serve`] returns when every HTTP connection has ended, or after `grace`.
//! - `TCP_NODELAY` on every socket, so a small frame (a status event) is not held back.
//!
//! HTTP/2 is not served (browsers speak it only over TLS, which jobgate leaves to a proxy).
//! This module knows nothing of routes, credentials or Host names.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::metrics::Metrics;

/// The limits of each connection.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnectionLimits {
    /// Time to deliver a complete request head; `None`: no limit.
    pub header_timeout: Option<Duration>,
    /// Time a kept-alive connection may wait for its next request; `None`: no limit.
    pub idle_timeout: Option<Duration>,
    /// Time to deliver a request's body (applied by the handlers that read one).
    pub body_timeout: Option<Duration>,
    /// Most connections open at once; 0: the open-file limit less [`RESERVED_FILES`].
    pub max_connections: usize,
}

/// File descriptors kept out of the automatic connection cap, for the store, logs, the
/// local jobs' pipes and the Kubernetes client.
pub const RESERVED_FILES: u64 = 256;

/// The answer to a connection over the cap, written without waiting (it fits any socket
/// buffer) just before the connection is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 21\r\nretry-after: 1\r\nconnection: close\r\n\r\ntoo many connections\n";

/// The connection cap: the configured one, or the open-file limit less a reserve.
pub fn effective_max_connections(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024);
    usize::try_from(soft.saturating_sub(RESERVED_FILES).max(16)).unwrap_or(usize::MAX)
}

/// What the service tells the socket wrapper about its connection. Written by the service
/// future and read by the wrapper, both polled by the connection's one task.
#[derive(Debug, Default)]
struct Activity {
    /// Requests whose handler is running.
    in_flight: AtomicUsize,
    /// Moved at each request's start and end, so the wrapper restarts its clocks.
    epoch: AtomicU64,
    /// Set when a response switched protocols (a WebSocket): no more HTTP timeouts.
    upgraded: AtomicBool,
}

/// A request's handler at work: the connection is not waiting while it lives.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity.epoch.fetch_add(1, Ordering::Relaxed);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.epoch.fetch_add(1, Ordering::Relaxed);
    }
}

/// One open connection, counted until its socket is dropped (for a WebSocket, when the
/// socket ends, long after hyper's part).
struct Open {
    count: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
}

impl Open {
    fn new(count: Arc<AtomicUsize>, metrics: Arc<Metrics>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        metrics.http_connections.inc();
        Self { count, metrics }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.metrics.http_connections.dec();
    }
}

/// The socket, timed: reads and writes pass through; while the connection waits for a
/// request (none in flight, not upgraded), a read or write that cannot progress past the
/// current deadline fails with `TimedOut`, which makes hyper drop the connection.
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    /// The last `Activity::epoch` seen.
    seen_epoch: u64,
    /// Whether any request has started here (the first one's head is timed from accept).
    served: bool,
    /// When the current wait began: accept, the end of the last request, or the last write
    /// of its response.
    since: Instant,
    /// The first byte of the next request, read while waiting.
    first_byte: Option<Instant>,
    timer: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    timed_out: bool,
    _open: Open,
}

impl Watched {
    fn new(
        tcp: TcpStream,
        activity: Arc<Activity>,
        limits: ConnectionLimits,
        metrics: Arc<Metrics>,
        open: Open,
    ) -> Self {
        let now = Instant::now();
        Self {
            tcp,
            activity,
            limits,
            metrics,
            seen_epoch: 0,
            served: false,
            since: now,
            first_byte: None,
            timer: Box::pin(tokio::time::sleep_until(now)),
            armed: None,
            timed_out: false,
            _open: open,
        }
    }

    /// Catches up with requests started or ended since the last look.
    fn sync(&mut self) {
        let epoch = self.activity.epoch.load(Ordering::Relaxed);
        if epoch != self.seen_epoch {
            self.seen_epoch = epoch;
            self.served = true;
            self.since = Instant::now();
            self.first_byte = None;
        }
    }

    fn waiting(&self) -> bool {
        self.activity.in_flight.load(Ordering::Relaxed) == 0
            && !self.activity.upgraded.load(Ordering::Relaxed)
    }

    /// When the connection must have moved on, and which timeout that is.
    fn deadline(&self) -> Option<(Instant, &'static str)> {
        if !self.waiting() {
            return None;
        }
        let header = |from: Instant| self.limits.header_timeout.map(|t| (from + t, "header"));
        match (self.served, self.first_byte) {
            (false, _) => header(self.since),
            (true, Some(first)) => header(first),
            (true, None) => self.limits.idle_timeout.map(|t| (self.since + t, "idle")),
        }
    }

    /// Arms the timer for the current deadline (so the task is woken then, whatever it is
    /// waiting for) and says whether it has passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.sync();
        let (deadline, which) = self.deadline()?;
        if self.armed != Some(deadline) {
            self.timer.as_mut().reset(deadline);
            self.armed = Some(deadline);
        }
        self.timer.as_mut().poll(cx).is_ready().then(|| {
            if !self.timed_out {
                self.timed_out = true;
                self.metrics.http_timeout(which);
                tracing::debug!(timeout = which, "closing an HTTP connection");
            }
            io::Error::new(io::ErrorKind::TimedOut, format!("{which} timeout"))
        })
    }

    fn wrote(&mut self) {
        self.sync();
        if self.waiting() {
            self.since = Instant::now();
        }
    }

    /// The outcome of an I/O call: a call that could not progress fails once the deadline
    /// has passed; one that did still arms the timer for the next deadline.
    fn outcome<T>(&mut self, cx: &mut Context<'_>, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        let expired = self.expired(cx);
        match (result, expired) {
            (Poll::Pending, Some(e)) => Poll::Ready(Err(e)),
            (result, _) => result,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.sync();
            if this.waiting() && this.first_byte.is_none() {
                this.first_byte = Some(Instant::now());
            }
        }
        this.outcome(cx, result)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.tcp).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            this.wrote();
        }
        this.outcome(cx, result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            this.wrote();
        }
        this.outcome(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.tcp).poll_flush(cx);
        this.outcome(cx, result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// Errors of `accept` that concern one connection only (it was gone before we took it).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Serves `router` on `listener` until `shutdown`, then waits (at most `grace`) for the
/// HTTP connections to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let max = effective_max_connections(limits.max_connections);
    tracing::info!(
        max_connections = max,
        header_timeout = ?limits.header_timeout,
        idle_timeout = ?limits.idle_timeout,
        body_timeout = ?limits.body_timeout,
        "connection limits"
    );
    let open = Arc::new(AtomicUsize::new(0));
    let tasks = TaskTracker::new();
    let mut http1 = hyper::server::conn::http1::Builder::new();
    // Ours (`Watched`) instead: see the module's docs.
    http1.header_read_timeout(None);
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Most likely out of file descriptors: wait for some to be released rather
                // than spin.
                tracing::error!(error = %e, "accepting a connection failed");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        if open.load(Ordering::Relaxed) >= max {
            metrics.http_connections_refused.inc();
            let _ = tcp.try_write(BUSY);
            continue;
        }
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let activity = Arc::new(Activity::default());
        let io = Watched::new(
            tcp,
            activity.clone(),
            limits,
            metrics.clone(),
            Open::new(open.clone(), metrics.clone()),
        );
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let in_flight = InFlight::begin(activity.clone());
            let router = router.clone();
            async move {
                let response = router.oneshot(request).await;
                if let Ok(response) = &response
                    && response.status() == StatusCode::SWITCHING_PROTOCOLS
                {
                    in_flight.0.upgraded.store(true, Ordering::Relaxed);
                }
                drop(in_flight);
                response
            }
        });
        let connection = http1.serve_connection(TokioIo::new(io), service).with_upgrades();
        let shutdown = shutdown.clone();
        tasks.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.as_mut().await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    tasks.close();
    if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
        tracing::warn!("some HTTP connections did not finish within {grace:?}");
    }
}
