//! Following a subscription across dropped connections: connect, subscribe, hand each result
//! to a [`Follower`]; when the connection drops (or the server is unreachable, restarting,
//! or asks to be retried), wait with exponential back-off and subscribe again with what the
//! follower asks for then, e.g. `jobEvents(after: <the last cursor it saw>)`, so that
//! nothing is repeated or skipped.
//!
//! It must not decide what to resubscribe to (the follower does) nor print events; it only
//! tells the user on standard error that it is reconnecting.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use serde_json::Value;

use super::client::{CliError, Connection};
use super::ws::{Incoming, Socket};

/// Whether to keep reading after a result.
pub enum Flow {
    Continue,
    Stop,
}

/// What a followed subscription is and what to do with its results.
pub trait Follower {
    /// The subscription to (re)start now: its query and variables.
    fn subscription(&self) -> (String, Value);
    /// One result's `data`.
    fn on_data(&mut self, data: Value) -> Result<Flow, CliError>;
    /// Whether the server completing the subscription is its end (a log stream's), rather
    /// than the server letting go of it early (one shutting down), which is followed by a
    /// new subscription as a dropped connection is.
    fn complete_ends(&self) -> bool {
        true
    }
}

/// Runs the follower's subscription until it stops it, the server completes it, or a failure
/// that reconnecting cannot mend. A dropped connection is followed by a new one, without
/// end, once a first connection has been acknowledged (a server that cannot be reached at
/// all is reported at once).
pub async fn follow(conn: &Connection, follower: &mut impl Follower) -> Result<(), CliError> {
    let mut backoff: Option<Box<dyn Iterator<Item = Duration> + Send>> = None;
    let mut ever_acked = false;
    loop {
        let mut acked = false;
        let outcome = session(conn, follower, &mut acked).await;
        if acked {
            // A connection that worked starts the back-off afresh for the next drop.
            ever_acked = true;
            backoff = None;
        }
        match outcome {
            Ok(()) => return Ok(()),
            Err(e) if ever_acked && e.retriable() => {
                let delays = backoff.get_or_insert_with(|| {
                    Box::new(
                        ExponentialBuilder::default()
                            .with_min_delay(Duration::from_millis(100))
                            .with_max_delay(Duration::from_secs(5))
                            .with_jitter()
                            .without_max_times()
                            .build(),
                    )
                });
                let delay = delays.next().unwrap_or(Duration::from_secs(5));
                eprintln!("jobgate: {e}; reconnecting in {:.1} s", delay.as_secs_f64());
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// One connection: subscribe and read until the follower stops, the server completes the
/// subscription, or the connection fails. `acked` says whether it got as far as the ack.
async fn session(conn: &Connection, follower: &mut impl Follower, acked: &mut bool) -> Result<(), CliError> {
    let mut socket = Socket::connect(conn).await?;
    *acked = true;
    let (query, variables) = follower.subscription();
    socket.subscribe(&query, variables).await?;
    loop {
        match socket.next().await? {
            Incoming::Data(data) => {
                if let Flow::Stop = follower.on_data(data)? {
                    socket.close().await;
                    return Ok(());
                }
            }
            Incoming::Complete => {
                socket.close().await;
                if follower.complete_ends() {
                    return Ok(());
                }
                return Err(CliError::Disconnected {
                    url: conn.ws_url.to_string(),
                    cause: "the server ended the subscription early".to_owned(),
                });
            }
        }
    }
}
