//! One operation's task: drives the executor's response stream for one `subscribe` to its
//! end, sends each `next` on the data queue (waiting for room: the backpressure on a
//! subscription), bounds a query or mutation by the request time limit, and hands back its
//! terminal frame (`complete`, `error`, or a single result's `next` + `complete`).
//!
//! It must not touch the registry of live operations or decide whether its terminal frame is
//! still wanted (the registry does, see [`OpDone`]), and must not send anything on the control
//! queue.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_graphql::Response;
use futures::{StreamExt, stream::BoxStream};
use tokio::{sync::mpsc::OwnedPermit, time::Instant};
use tracing::{debug, warn};

use super::codec::{complete_frame, error_frame, next_frame};
use super::config::timer_period;
use super::socket_writer::{DataQueue, Out};
use crate::graphql::error::deadline_exceeded;
use crate::graphql::operation::{OperationKind, PreExecFailed};

/// What every operation of a connection shares.
pub(super) struct OpEnv {
    /// The data queue.
    pub(super) out: DataQueue,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    /// The time limit of a query or mutation (zero: none).
    pub(super) timeout: Duration,
}

/// What an operation task returns when it is done.
///
/// The terminal frame travels back to the main task with a slot already reserved in the data
/// queue: the main task first frees the id, then sends the frame on the permit. So the id is
/// free before the client can see the terminal frame (the client may reuse it at once), the
/// frame still comes after the operation's `next`s, and the main task never waits for room.
pub(super) struct OpDone {
    pub(super) id: String,
    /// Which use of `id` this was (see `registry`).
    pub(super) generation: u64,
    /// The terminal frame and the queue slot reserved for it; `None` when the writer is gone.
    pub(super) terminal: Option<(OwnedPermit<Out>, Out)>,
}

/// Runs one operation to its end and returns its terminal frame (see [`OpDone`]).
pub(super) async fn run_operation(
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
        (kind != OperationKind::Subscription && !timeout.is_zero()).then(|| started + timer_period(timeout));
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
                    let response = Response::from_errors(vec![deadline_exceeded(timeout)]);
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
    let terminal = out.reserve().await.map(|permit| (permit, frame));
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::graphql::ws::test_support::{Received, TestServer, notified};

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
    async fn shared_subscription_delivers_every_frame_before_its_error_then_completes() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client
            .subscribe("s", "subscription { shared(to: 3, fail: true) }")
            .await;
        for n in 0..3 {
            client
                .expect(json!({"id": "s", "type": "next", "payload": {"data": {"shared": n}}}))
                .await;
        }
        let Received::Message(failed) = client.recv().await else {
            panic!("closed");
        };
        assert_eq!(failed["type"], "next");
        assert_eq!(failed["payload"]["errors"][0]["message"], "source failed");
        client.expect(json!({"id": "s", "type": "complete"})).await;
        // Without an error the source's end completes the subscription.
        client.subscribe("t", "subscription { shared(to: 2) }").await;
        for n in 0..2 {
            client
                .expect(json!({"id": "t", "type": "next", "payload": {"data": {"shared": n}}}))
                .await;
        }
        client.expect(json!({"id": "t", "type": "complete"})).await;
    }

    #[tokio::test]
    async fn completing_a_shared_subscription_stops_its_delivery() {
        let server = TestServer::default().await;
        let mut client = server.acked().await;
        client
            .subscribe("g", "subscription { shared(to: 100, gated: true) }")
            .await;
        server.gates.events.add_permits(1);
        client
            .expect(json!({"id": "g", "type": "next", "payload": {"data": {"shared": 0}}}))
            .await;
        client.send(json!({"id": "g", "type": "complete"})).await;
        // The delivery runs on a task of its own: it must stop with the operation.
        notified(&server.gates.stream_dropped).await;
        client.expect_alive().await;
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
}
