//! The `jobEvents` subscribers: the frames every reader task records, and the watch event →
//! frame latency computed from them. It starts no server and submits no jobs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::SUBSCRIBE;
use crate::cluster::{JobMarks, job_key};
use crate::common::subscribers::{self, Faults, Receiver, open_socket, string_field};
use crate::gateway::Gateway;

/// Indexes of [`subscribers::PHASES`].
pub(crate) const RUNNING: u8 = 1;
pub(crate) const SUCCEEDED: u8 = 2;

/// One received `next` frame.
pub(crate) struct Sample {
    /// Receive time and the event's `at`, µs since the epoch.
    recv_us: i64,
    at_us: i64,
    pub(crate) job: u128,
    seq: i64,
    /// The subscription's number on its socket.
    sub: u32,
    pub(crate) phase: u8,
}

/// Shared by every reader task.
#[derive(Default)]
pub(crate) struct Hub {
    pub(crate) frames: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) faults: Faults,
    /// Record samples only while set (the measured windows).
    pub(crate) recording: AtomicU8,
}

impl Receiver for Hub {
    type Sample = Sample;

    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Sample>>) {
        let recv_us = now.timestamp_micros();
        let event = match subscribers::event(text) {
            Ok(event) => event,
            Err(unexpected) => return self.fault(unexpected),
        };
        let parsed = (|| {
            let event = event?;
            let job = job_key(string_field(text.split(r#""job":"#).nth(1)?, "id")?)?;
            let sub = text.split(r#""id":"s"#).nth(1)?;
            let sub = sub[..sub.find('"')?].parse().ok()?;
            Some((event.at.timestamp_micros(), event.seq, event.phase, job, sub))
        })();
        let Some((at_us, seq, phase, job, sub)) = parsed else {
            return self.fault(format!("no at, cursor, phase, job id or subscription in: {text}"));
        };
        self.frames.fetch_add(1, Ordering::Relaxed);
        if phase == SUCCEEDED {
            self.succeeded.fetch_add(1, Ordering::Relaxed);
        }
        if self.recording.load(Ordering::Relaxed) == 1 {
            samples.lock().unwrap().push(Sample {
                recv_us,
                at_us,
                job,
                seq,
                sub,
                phase,
            });
        }
    }

    fn fault(&self, what: String) {
        self.faults.record(what);
    }
}

pub(crate) type Socket = subscribers::Socket<Hub>;

/// Opens `n_sockets` sockets carrying `per_socket` subscriptions each, named `s0`, `s1`, ….
pub(crate) async fn open_subscribers(
    gateway: &Gateway,
    hub: &Arc<Hub>,
    n_sockets: usize,
    per_socket: usize,
) -> Vec<Socket> {
    let mut sockets = Vec::with_capacity(n_sockets);
    for _ in 0..n_sockets {
        let mut socket = open_socket(gateway.process.ws_url(), hub.clone())
            .await
            .expect("opening a subscriber socket");
        for i in 0..per_socket {
            let message =
                json!({ "id": format!("s{i}"), "type": "subscribe", "payload": { "query": SUBSCRIBE } });
            socket
                .sink
                .send(Message::text(message.to_string()))
                .await
                .expect("send subscribe");
        }
        sockets.push(socket);
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

/// Waits until no frame arrived for `quiet` (at most `limit`); returns how long until the last
/// frame.
pub(crate) async fn settle(hub: &Hub, quiet: Duration, limit: Duration) -> Duration {
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
            break;
        }
    }
    last_change - started
}

/// Takes every socket's samples.
pub(crate) fn take_samples(sockets: &[Socket]) -> Vec<Vec<Sample>> {
    sockets
        .iter()
        .map(|s| std::mem::take(&mut *s.samples.lock().unwrap()))
        .collect()
}

/// Latency figures of one measured run.
pub(crate) struct Latency {
    /// Frames of the measured jobs, and SUCCEEDED frames missing (jobs × subscriptions - seen).
    pub(crate) frames: usize,
    pub(crate) missing_succeeded: usize,
    /// Events per job (frames per subscription and job, averaged).
    pub(crate) events_per_job: f64,
    /// Job Complete write → SUCCEEDED frame, µs, one per subscription and job.
    pub(crate) succeeded: Vec<i64>,
    /// First write with a start → first RUNNING frame, µs, one per subscription and job.
    pub(crate) running: Vec<i64>,
    /// Per event (once, not per subscriber): the Job write → the event's `at` (jobgate's
    /// record time), for SUCCEEDED and RUNNING.
    pub(crate) write_to_at: Vec<i64>,
    /// Per frame: the event's `at` → frame received.
    pub(crate) at_to_frame: Vec<i64>,
    /// Jobs without a Complete or a start write seen by the write clock.
    pub(crate) unmatched: usize,
    pub(crate) frames_per_sec: f64,
}

pub(crate) fn latency(
    samples: &[Vec<Sample>],
    jobs: &HashSet<u128>,
    marks: &HashMap<u128, JobMarks>,
    subs: usize,
) -> Latency {
    let mut out = Latency {
        frames: 0,
        missing_succeeded: 0,
        events_per_job: 0.0,
        succeeded: Vec::new(),
        running: Vec::new(),
        write_to_at: Vec::new(),
        at_to_frame: Vec::new(),
        unmatched: 0,
        frames_per_sec: 0.0,
    };
    let mut per_event: BTreeMap<i64, (u128, u8, i64)> = BTreeMap::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let mut seen_succeeded = 0;
    for socket in samples {
        let mut first_running: HashMap<(u32, u128), i64> = HashMap::new();
        for s in socket.iter().filter(|s| jobs.contains(&s.job)) {
            out.frames += 1;
            first = first.min(s.recv_us);
            last = last.max(s.recv_us);
            out.at_to_frame.push(s.recv_us - s.at_us);
            per_event.entry(s.seq).or_insert((s.job, s.phase, s.at_us));
            let mark = marks.get(&s.job).copied().unwrap_or_default();
            match s.phase {
                SUCCEEDED => {
                    seen_succeeded += 1;
                    if let Some(w) = mark.complete_us {
                        out.succeeded.push(s.recv_us - w);
                    }
                }
                RUNNING => {
                    let entry = first_running.entry((s.sub, s.job)).or_insert(s.recv_us);
                    *entry = (*entry).min(s.recv_us);
                }
                _ => {}
            }
        }
        for ((_, job), recv) in first_running {
            if let Some(w) = marks.get(&job).and_then(|m| m.started_us) {
                out.running.push(recv - w);
            }
        }
    }
    // Per event: the first RUNNING event of each job and its SUCCEEDED event.
    let mut running_done = HashSet::new();
    for (job, phase, at_us) in per_event.values() {
        let mark = marks.get(job).copied().unwrap_or_default();
        match *phase {
            SUCCEEDED => {
                if let Some(w) = mark.complete_us {
                    out.write_to_at.push(at_us - w);
                }
            }
            RUNNING if running_done.insert(*job) => {
                if let Some(w) = mark.started_us {
                    out.write_to_at.push(at_us - w);
                }
            }
            _ => {}
        }
    }
    out.unmatched = jobs
        .iter()
        .filter(|j| {
            marks
                .get(j)
                .is_none_or(|m| m.complete_us.is_none() || m.started_us.is_none())
        })
        .count();
    out.missing_succeeded = (jobs.len() * subs).saturating_sub(seen_succeeded);
    out.events_per_job = out.frames as f64 / (jobs.len() * subs).max(1) as f64;
    out.frames_per_sec = out.frames as f64 / ((last - first) as f64 / 1e6).max(1e-6);
    out
}
