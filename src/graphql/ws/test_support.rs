//! The harness for the protocol tests: a toy schema whose resolvers the tests hold and
//! release, an init hook steered by the `connection_init` payload, a server on a random
//! port, and a client that reads frames as the protocol defines them. It exists for the
//! checklist points that the real schema cannot drive on demand (slow queries, mutations in
//! flight, failing subscription setup, hooks that hang or fail).
//!
//! No test asserts a duration: the timeouts only stop a broken test from hanging. Test code
//! only; it must not be used by anything else.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};
use std::time::Duration;

use async_graphql::{Context, Data, Object, Schema, SimpleObject, Subscription};
use axum::{
    Router,
    extract::{State, ws::WebSocketUpgrade},
    response::Response as HttpResponse,
    routing::any,
};
use futures::{FutureExt, SinkExt, Stream, StreamExt, stream::BoxStream};
use serde_json::{Value, json};
use tokio::{
    net::TcpStream,
    sync::{Notify, Semaphore},
};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{self, client::IntoClientRequest, http::HeaderValue},
};
use tokio_util::{
    sync::CancellationToken,
    task::{AbortOnDropHandle, TaskTracker},
};

use super::{InitError, InitHook, PROTOCOL, WsConfig, upgrade};
use crate::graphql::operation::PreExecutionFlag;
use crate::graphql::shared_rendering::{Item, RenderFeed, Tap};

/// How long a test waits for anything before it fails.
pub(super) const WAIT: Duration = Duration::from_secs(20);

/// Semaphores start empty: a resolver waiting on one runs when the test adds a permit.
pub(super) struct Gates {
    pub(super) slow: Semaphore,
    pub(super) init: Semaphore,
    pub(super) events: Semaphore,
    pub(super) stream_dropped: Notify,
    pub(super) mutated: Notify,
    pub(super) mutations: AtomicUsize,
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
pub(super) struct Nested {
    inner: Option<Box<Nested>>,
    leaf: i32,
}

pub(super) struct Query;

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

pub(super) struct Mutation;

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

pub(super) struct Sub;

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
    /// Shared rendering (see `fanout`): yields 0, 1, … `to - 1` through the group, then with
    /// `fail` an error; with `gated`, one per `events` permit and signalling `stream_dropped`
    /// when its source is dropped.
    async fn shared(
        &self,
        ctx: &Context<'_>,
        to: i32,
        #[graphql(default)] fail: bool,
        #[graphql(default)] gated: bool,
    ) -> async_graphql::Result<BoxStream<'static, async_graphql::Result<i32>>> {
        if let Some(feed) = ctx.data_opt::<RenderFeed>() {
            return Ok(feed.events::<i32>().map(|n| Ok(*n)).boxed());
        }
        let gates = ctx.data::<Arc<Gates>>()?.clone();
        let guard = DropSignal(gates.clone());
        let numbers = futures::stream::unfold((0, gates, guard), move |(n, gates, guard)| async move {
            if n == to {
                return None;
            }
            if gated {
                gates.events.acquire().await.ok()?.forget();
            }
            Some((n, (n + 1, gates, guard)))
        });
        let events = numbers
            .map(|n| Ok(((i64::from(n), 0), Arc::new(n) as Item, None)))
            .chain(futures::stream::iter(fail.then(|| Err("source failed".into()))));
        let delivery = ctx.data::<Tap>()?.join("everyone");
        Ok(delivery.run(events.boxed()).map(Err).boxed())
    }
}

pub(super) type TestSchema = Schema<Query, Mutation, Sub>;

pub(super) fn schema(gates: &Arc<Gates>) -> TestSchema {
    Schema::build(Query, Mutation, Sub)
        .extension(PreExecutionFlag)
        .data(gates.clone())
        .limit_depth(4)
        .finish()
}

/// `{"mode": "reject" | "fail" | "slow" | "panic", "tag": "…"}`; anything else is accepted.
pub(super) fn hook(gates: &Arc<Gates>) -> InitHook {
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

pub(super) struct TestServer {
    pub(super) addr: std::net::SocketAddr,
    pub(super) gates: Arc<Gates>,
    pub(super) shutdown: CancellationToken,
    _server: AbortOnDropHandle<()>,
}

impl TestServer {
    pub(super) async fn start(config: WsConfig) -> Self {
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

    pub(super) async fn default() -> Self {
        Self::start(WsConfig::new(crate::metrics::Metrics::new())).await
    }

    pub(super) async fn connect(&self) -> Client {
        self.connect_with(Some(PROTOCOL)).await
    }

    pub(super) async fn connect_with(&self, protocols: Option<&str>) -> Client {
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
    pub(super) async fn acked(&self) -> Client {
        let mut client = self.connect().await;
        client.send(json!({"type": "connection_init"})).await;
        client.expect(json!({"type": "connection_ack"})).await;
        client
    }
}

pub(super) struct Client {
    pub(super) ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The subprotocol the server chose.
    pub(super) protocol: Option<String>,
}

#[derive(Debug, PartialEq)]
pub(super) enum Received {
    Message(Value),
    Closed(Option<(u16, String)>),
}

impl Client {
    pub(super) async fn send(&mut self, message: Value) {
        self.send_text(&message.to_string()).await;
    }

    pub(super) async fn send_text(&mut self, text: &str) {
        self.ws.send(tungstenite::Message::text(text)).await.unwrap();
    }

    pub(super) async fn subscribe(&mut self, id: &str, query: &str) {
        self.send(json!({"type": "subscribe", "id": id, "payload": {"query": query}}))
            .await;
    }

    /// The next text message or the close; ping and pong frames are skipped.
    pub(super) async fn recv(&mut self) -> Received {
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

    pub(super) async fn expect(&mut self, message: Value) {
        assert_eq!(self.recv().await, Received::Message(message));
    }

    pub(super) async fn expect_close(&mut self, code: u16) -> String {
        match self.recv().await {
            Received::Closed(Some((got, reason))) if got == code => reason,
            other => panic!("expected close {code}, got {other:?}"),
        }
    }

    /// A `ping`/`pong` round trip: proves the socket is open and that nothing else was
    /// queued before the `pong`.
    pub(super) async fn expect_alive(&mut self) {
        self.send(json!({"type": "ping", "payload": {"probe": true}}))
            .await;
        self.expect(json!({"type": "pong", "payload": {"probe": true}}))
            .await;
    }
}

pub(super) async fn notified(notify: &Notify) {
    tokio::time::timeout(WAIT, notify.notified())
        .await
        .expect("not notified in time");
}
