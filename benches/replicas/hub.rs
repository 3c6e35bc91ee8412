//! The `jobEvents` subscribers spread over the replicas: the frames every reader task records
//! and the waits on them. It starts no replica and submits no jobs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::cluster::Replica;
use crate::common::pct;
use crate::common::subscribers::{self, Faults, Receiver, open_socket};
use crate::{SUBSCRIBE, SUCCEEDED};

/// One received `next` frame.
pub(crate) struct Sample {
    /// Receive time − the event's `at`, µs.
    pub(crate) lat_us: i64,
    pub(crate) recv_us: i64,
    pub(crate) seq: i64,
    /// The subscription's number (`s<n>`), unique over all sockets.
    pub(crate) sub: u32,
    pub(crate) phase: u8,
}

/// Shared by every reader task.
#[derive(Default)]
pub(crate) struct Hub {
    pub(crate) frames: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) faults: Faults,
    /// Samples are kept only while set (the measured run).
    pub(crate) recording: AtomicBool,
}

impl Receiver for Hub {
    type Sample = Sample;

    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Sample>>) {
        let event = match subscribers::event(text) {
            Ok(Some(event)) => event,
            Ok(None) => return self.fault(format!("no at, cursor or phase in: {text}")),
            Err(unexpected) => return self.fault(unexpected),
        };
        // The subscription's id comes first in the frame; a job id (a UUID) never has an `s`.
        let sub = text
            .split(r#""id":"s"#)
            .nth(1)
            .and_then(|rest| rest[..rest.find('"')?].parse().ok());
        let Some(sub) = sub else {
            return self.fault(format!("no subscription id in: {text}"));
        };
        self.frames.fetch_add(1, Ordering::Relaxed);
        if event.phase == SUCCEEDED {
            self.succeeded.fetch_add(1, Ordering::Relaxed);
        }
        if self.recording.load(Ordering::Relaxed) {
            let lat_us = (now - event.at.with_timezone(&Utc))
                .num_microseconds()
                .unwrap_or(i64::MAX);
            samples.lock().unwrap().push(Sample {
                lat_us,
                recv_us: now.timestamp_micros(),
                seq: event.seq,
                sub,
                phase: event.phase,
            });
        }
    }

    fn fault(&self, what: String) {
        self.faults.record(what);
    }
}

pub(crate) type Socket = subscribers::Socket<Hub>;

/// Opens `n_sockets` sockets, socket `i` on replica `i % replicas.len()`, and subscribes
/// `subs` times, subscription `s<k>` on socket `k % n_sockets`.
pub(crate) async fn open_subscribers(
    replicas: &[Replica],
    hub: &Arc<Hub>,
    n_sockets: usize,
    subs: usize,
) -> Vec<Socket> {
    let mut sockets = Vec::with_capacity(n_sockets);
    for i in 0..n_sockets {
        let replica = &replicas[i % replicas.len()];
        let socket = open_socket(replica.process.ws_url(), hub.clone())
            .await
            .expect("opening a subscriber socket");
        sockets.push(socket);
    }
    for k in 0..subs {
        let message =
            json!({ "id": format!("s{k}"), "type": "subscribe", "payload": { "query": SUBSCRIBE } });
        sockets[k % n_sockets]
            .sink
            .send(Message::text(message.to_string()))
            .await
            .expect("send subscribe");
    }
    sockets
}

/// Waits until `counter` reaches `target`; false after `limit`.
pub(crate) async fn reach(counter: &AtomicU64, target: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while counter.load(Ordering::Relaxed) < target {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// Waits until no frame arrived for `quiet` (at most `limit`).
pub(crate) async fn settle(hub: &Hub, quiet: Duration, limit: Duration) {
    let started = Instant::now();
    let mut last = hub.frames.load(Ordering::Relaxed);
    let mut last_change = Instant::now();
    while started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = hub.frames.load(Ordering::Relaxed);
        if now != last {
            last = now;
            last_change = Instant::now();
        } else if last_change.elapsed() > quiet {
            return;
        }
    }
}

/// "p50 / p99 / max" of µs values, in ms.
pub(crate) fn summary_ms(values: &mut [i64]) -> String {
    if values.is_empty() {
        return "no samples".into();
    }
    values.sort_unstable();
    let ms = |v: i64| v as f64 / 1e3;
    format!(
        "{:.2} / {:.2} / {:.2}",
        ms(pct(values, 50.0)),
        ms(pct(values, 99.0)),
        ms(*values.last().unwrap())
    )
}
