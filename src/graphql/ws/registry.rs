//! The live operations of one connection, by id: which ids are taken, which use of an id a
//! finished task belongs to, the tasks themselves, the cap on running subscriptions and the
//! gauge that counts them.
//!
//! It must not parse, validate or execute anything (the session and the operation tasks do),
//! nor decide how the connection answers a reused id or a panicked task (the session closes
//! the socket). No task it spawned may outlive [`Registry::shutdown`].

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
};

use async_graphql::ServerError;
use tokio::task::{AbortHandle, JoinError, JoinSet};
use tracing::debug;

use super::operation_task::OpDone;
use crate::graphql::error::Code;
use crate::graphql::operation::OperationKind;

/// An active operation, by id.
struct Op {
    /// Distinguishes this operation from an earlier one that used the same id, so a late
    /// result of the earlier one can never end this one.
    generation: u64,
    kind: OperationKind,
    abort: AbortHandle,
    /// The resume cursor of a subscription that has one (see `fanout::FanoutDelivery`).
    resume: Option<Arc<AtomicI64>>,
}

/// The live operations of one connection.
pub(super) struct Registry {
    ops: HashMap<String, Op>,
    /// Every operation task, including a mutation whose id the client already completed.
    tasks: JoinSet<OpDone>,
    /// The generation of the latest operation started.
    generation: u64,
    metrics: Arc<crate::metrics::Metrics>,
    /// Zero means no cap.
    max_subscriptions: usize,
}

impl Registry {
    pub(super) fn new(metrics: Arc<crate::metrics::Metrics>, max_subscriptions: usize) -> Self {
        Self {
            ops: HashMap::new(),
            tasks: JoinSet::new(),
            generation: 0,
            metrics,
            max_subscriptions,
        }
    }

    /// Whether no id is taken. A mutation the client completed may still be running.
    pub(super) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Whether `id` is taken by an operation that has not ended.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.ops.contains_key(id)
    }

    pub(super) fn subscriptions(&self) -> usize {
        self.ops
            .values()
            .filter(|op| op.kind == OperationKind::Subscription)
            .count()
    }

    /// Whether one more operation of `kind` may start: a subscription beyond the cap gets the
    /// `LIMIT_EXCEEDED` error to send back; queries and mutations are not capped here.
    pub(super) fn admit(&self, kind: OperationKind) -> Result<(), ServerError> {
        if kind != OperationKind::Subscription
            || self.max_subscriptions == 0
            || self.subscriptions() < self.max_subscriptions
        {
            return Ok(());
        }
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
            .set("code", Code::LimitExceeded.as_str());
        Err(error)
    }

    /// Takes `id`, which the caller has checked is free, and spawns the operation's task,
    /// built by `task` from the operation's generation.
    pub(super) fn start<F>(
        &mut self,
        id: String,
        kind: OperationKind,
        resume: Option<Arc<AtomicI64>>,
        task: impl FnOnce(u64) -> F,
    ) where
        F: Future<Output = OpDone> + Send + 'static,
    {
        debug_assert!(!self.ops.contains_key(&id), "operation id {id} reused while live");
        self.generation += 1;
        let generation = self.generation;
        let abort = self.tasks.spawn(task(generation));
        if kind == OperationKind::Subscription {
            self.metrics.active_subscriptions.inc();
        }
        self.ops.insert(
            id,
            Op {
                generation,
                kind,
                abort,
                resume,
            },
        );
    }

    /// The cursor after which every live subscription with a resume cursor can be resumed
    /// without a gap: the lowest of theirs. `None` when none has one.
    pub(super) fn resume_cursor(&self) -> Option<i64> {
        self.ops
            .values()
            .filter_map(|op| op.resume.as_ref())
            .map(|r| r.load(Ordering::Relaxed))
            .filter(|c| *c != super::fanout::NO_CURSOR)
            .min()
    }

    /// The client stopped listening to `id`. Nothing is sent back, whatever the operation's
    /// state.
    pub(super) fn complete(&mut self, id: &str) {
        // An unknown or finished id is ignored (the protocol allows it for everything but
        // `subscribe`); removing the id lets the client reuse it at once.
        let Some(op) = self.remove(id) else {
            return;
        };
        match op.kind {
            // Do not abort a half-applied mutation: it runs to the end and its result comes
            // back with a generation no longer in `ops`, so it is dropped.
            OperationKind::Mutation => debug!(id, "client completed a running mutation"),
            OperationKind::Query | OperationKind::Subscription => op.abort.abort(),
        }
    }

    /// The next task to end; pending while none runs. Cancel-safe, for a `select!` branch.
    pub(super) async fn next_finished(&mut self) -> Result<OpDone, JoinError> {
        match self.tasks.join_next().await {
            Some(joined) => joined,
            None => std::future::pending().await,
        }
    }

    /// A task ended: frees its id and queues its terminal frame on the slot it reserved. When
    /// the client completed the id already (it may even have reused it), the frame and the
    /// slot are dropped instead.
    pub(super) fn finish(&mut self, done: OpDone) {
        let current = self
            .ops
            .get(&done.id)
            .is_some_and(|op| op.generation == done.generation);
        if current {
            self.remove(&done.id);
            if let Some((permit, frame)) = done.terminal {
                permit.send(frame);
            }
        }
    }

    /// Aborts every task and waits until their futures (and resolver streams) are dropped;
    /// the gauge stops counting this connection's subscriptions.
    pub(super) async fn shutdown(&mut self) {
        self.tasks.shutdown().await;
        let subscriptions = self.subscriptions();
        self.metrics.active_subscriptions.dec_by(subscriptions as i64);
        self.ops.clear();
    }

    /// Frees an id, keeping the running-subscriptions gauge true.
    fn remove(&mut self, id: &str) -> Option<Op> {
        let op = self.ops.remove(id)?;
        if op.kind == OperationKind::Subscription {
            self.metrics.active_subscriptions.dec();
        }
        Some(op)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use serde_json::json;
    use tokio::sync::{mpsc, oneshot};

    use super::*;
    use crate::graphql::ws::socket_writer::Out;
    use crate::graphql::ws::test_support::{TestServer, notified};

    /// An operation task that never ends by itself.
    fn parked(_generation: u64) -> std::future::Pending<OpDone> {
        std::future::pending()
    }

    #[tokio::test]
    async fn subscriptions_are_capped_and_counted() {
        let metrics = crate::metrics::Metrics::new();
        let mut registry = Registry::new(metrics.clone(), 2);
        registry.start("a".into(), OperationKind::Subscription, None, parked);
        registry.start("b".into(), OperationKind::Subscription, None, parked);
        registry.start("q".into(), OperationKind::Query, None, parked);
        assert_eq!(metrics.active_subscriptions.get(), 2);
        let refused = registry.admit(OperationKind::Subscription).unwrap_err();
        assert_eq!(
            refused.extensions.unwrap().get("code"),
            Some(&async_graphql::Value::from("LIMIT_EXCEEDED"))
        );
        // Queries and mutations are not counted against the cap.
        assert!(registry.admit(OperationKind::Query).is_ok());
        assert!(registry.admit(OperationKind::Mutation).is_ok());

        registry.complete("a");
        assert!(!registry.contains("a"));
        assert_eq!(metrics.active_subscriptions.get(), 1);
        assert!(registry.admit(OperationKind::Subscription).is_ok());

        registry.shutdown().await;
        assert_eq!(metrics.active_subscriptions.get(), 0);
        assert!(registry.is_empty());
    }

    #[tokio::test]
    async fn a_late_result_of_an_earlier_use_of_an_id_is_dropped() {
        let mut registry = Registry::new(crate::metrics::Metrics::new(), 0);
        let (out, mut queued) = mpsc::channel(4);
        let (release, released) = oneshot::channel::<()>();
        registry.start(
            "m".into(),
            OperationKind::Mutation,
            None,
            move |generation| async move {
                let _ = released.await;
                let permit = out.reserve_owned().await.expect("the test holds the receiver");
                OpDone {
                    id: "m".into(),
                    generation,
                    terminal: Some((permit, Out::Text("late".into()))),
                }
            },
        );
        // A completed mutation keeps running, but its id is free at once.
        registry.complete("m");
        assert!(!registry.contains("m"));
        registry.start("m".into(), OperationKind::Query, None, parked);
        release.send(()).expect("the mutation waits for it");
        let done = registry
            .next_finished()
            .await
            .expect("the mutation ends normally");
        registry.finish(done);
        assert!(
            registry.contains("m"),
            "the late result ended the new use of the id"
        );
        assert!(queued.try_recv().is_err(), "the late result was sent");
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
}
