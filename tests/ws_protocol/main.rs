//! graphql-transport-ws conformance over a real jobgate on the local executor: one table of every close
//! a client's messages can provoke, each row its code and reason (`closes`), and one test per
//! behaviour the protocol asks of a server that the real schema can drive: the subprotocol
//! handshake and each message's answer (`messages`), keepalive (`keepalive`) and shutdown
//! (`shutdown`). `client` is the test's WebSocket client. (The behaviours that need resolvers
//! a test can hold, such as a mutation in flight or an init hook that fails, are covered by
//! the unit tests under `src/graphql/ws/`.)
//!
//! No test asserts a duration; timeouts only keep a broken test from hanging.
//!
//! jobgate runs in the test's process (`Server::start`), except for `shutdown`, whose tests
//! send the spawned binary SIGTERM (`Server::spawn`).

#[path = "../common/mod.rs"]
mod common;

mod client;
mod closes;
mod keepalive;
mod messages;
mod shutdown;
