//! The `jobEvents` subscribers' frames: what every reader task records, and the status event
//! → frame latency and fan-out computed from them. It starts no server and submits no jobs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::common::subscribers::{self, Faults, PHASES, Receiver};
use crate::common::{WAIT, pct};

/// One received `next` frame.
pub(crate) struct Sample {
    /// Which measurement was running when it arrived.
    pub(crate) tag: u8,
    /// Receive time, µs since the Unix epoch.
    recv_us: i64,
    /// Receive time - the event's `at`, in µs.
    lat_us: i64,
    /// The event's cursor (its sequence number in the server's event log).
    seq: i64,
    /// The event's phase, as an index of [`PHASES`].
    pub(crate) phase: u8,
}

/// Shared by every reader task.
#[derive(Default)]
pub(crate) struct Hub {
    pub(crate) tag: AtomicU8,
    pub(crate) frames: AtomicU64,
    pub(crate) faults: Faults,
}

impl Receiver for Hub {
    type Sample = Sample;

    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Sample>>) {
        let event = match subscribers::event(text) {
            Ok(Some(event)) => event,
            Ok(None) => return self.fault(format!("no at, cursor or phase in: {text}")),
            Err(unexpected) => return self.fault(unexpected),
        };
        let lat_us = (now - event.at.with_timezone(&Utc))
            .num_microseconds()
            .unwrap_or(i64::MAX);
        samples.lock().unwrap().push(Sample {
            tag: self.tag.load(Ordering::Relaxed),
            recv_us: now.timestamp_micros(),
            lat_us,
            seq: event.seq,
            phase: event.phase,
        });
        self.frames.fetch_add(1, Ordering::Relaxed);
    }

    fn fault(&self, what: String) {
        self.faults.record(what);
    }
}

pub(crate) type Socket = subscribers::Socket<Hub>;

/// Waits until no frame arrived for `quiet` (bounded by [`WAIT`]); returns the frame count and
/// when it last changed.
/// How many frames a job produces varies (a fast job's RUNNING and progress observations may
/// be recorded as one event or two), so the count to expect is only known afterwards.
pub(crate) async fn settle(hub: &Hub, quiet: Duration) -> (u64, Instant) {
    let started = Instant::now();
    let mut last = hub.frames.load(Ordering::Relaxed);
    let mut last_change = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = hub.frames.load(Ordering::Relaxed);
        if started.elapsed() > WAIT {
            return (now, Instant::now());
        }
        if now != last {
            last = now;
            last_change = Instant::now();
        } else if last_change.elapsed() > quiet {
            return (now, last_change);
        }
    }
}

/// Takes the samples of one measurement out of every socket, socket by socket.
pub(crate) fn take_samples(sockets: &[Socket], tag: u8) -> Vec<Vec<Sample>> {
    let mut out = Vec::with_capacity(sockets.len());
    for socket in sockets {
        let mut samples = socket.samples.lock().unwrap();
        let (mine, rest): (Vec<Sample>, Vec<Sample>) = samples.drain(..).partition(|s| s.tag == tag);
        *samples = rest;
        out.push(mine);
    }
    out
}

/// Latency and delivery figures of one measurement.
pub(crate) struct FanOut {
    pub(crate) frames: usize,
    /// Distinct events seen by any subscription.
    pub(crate) events: usize,
    /// Frames a subscription should have had (every event, once) but did not.
    pub(crate) missing: usize,
    /// Frames beyond one per event and subscription.
    pub(crate) duplicates: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) negative: usize,
    pub(crate) frames_per_sec: f64,
    /// By event phase: (phase, frames, p50 ms, p99 ms).
    pub(crate) by_phase: Vec<(&'static str, usize, f64, f64)>,
    /// Each event's first frame (event `at` → the earliest subscriber's frame, ms): the part
    /// of the latency before the fan-out (commit, publish, render); p50 and p99 over events.
    pub(crate) first_frame_ms: (f64, f64),
    /// Each event's spread (its last frame's receive time − its first's, ms): the fan-out
    /// itself; p50 and p99 over events.
    pub(crate) spread_ms: (f64, f64),
}

/// `per_socket` subscriptions share each socket, so each event should reach each socket
/// `per_socket` times.
pub(crate) fn fan_out(per_socket_samples: &[Vec<Sample>], per_socket: usize) -> Option<FanOut> {
    let all: Vec<&Sample> = per_socket_samples.iter().flatten().collect();
    if all.is_empty() {
        return None;
    }
    let mut events: Vec<i64> = all.iter().map(|s| s.seq).collect();
    events.sort_unstable();
    events.dedup();
    let (mut missing, mut duplicates) = (0, 0);
    for samples in per_socket_samples {
        let mut seqs: Vec<i64> = samples.iter().map(|s| s.seq).collect();
        seqs.sort_unstable();
        let mut i = 0;
        for seq in &events {
            let start = i;
            while i < seqs.len() && seqs[i] == *seq {
                i += 1;
            }
            let n = i - start;
            missing += per_socket.saturating_sub(n);
            duplicates += n.saturating_sub(per_socket);
        }
    }
    let latencies = |filter: &dyn Fn(&Sample) -> bool| {
        let mut lat: Vec<i64> = all.iter().filter(|s| filter(s)).map(|s| s.lat_us).collect();
        lat.sort_unstable();
        lat
    };
    let lat = latencies(&|_| true);
    let by_phase = PHASES
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let lat = latencies(&|s| s.phase as usize == i);
            (!lat.is_empty()).then(|| {
                let p = |q| pct(&lat, q) as f64 / 1e3;
                (*name, lat.len(), p(50.0), p(99.0))
            })
        })
        .collect();
    let mut per_event: std::collections::HashMap<i64, (i64, i64, i64)> = Default::default();
    for s in &all {
        let (first_lat, first_recv, last_recv) =
            per_event.entry(s.seq).or_insert((i64::MAX, i64::MAX, i64::MIN));
        *first_lat = (*first_lat).min(s.lat_us);
        *first_recv = (*first_recv).min(s.recv_us);
        *last_recv = (*last_recv).max(s.recv_us);
    }
    let over_events = |f: &dyn Fn(&(i64, i64, i64)) -> i64| {
        let mut v: Vec<i64> = per_event.values().map(f).collect();
        v.sort_unstable();
        (pct(&v, 50.0) as f64 / 1e3, pct(&v, 99.0) as f64 / 1e3)
    };
    let first_frame_ms = over_events(&|e| e.0);
    let spread_ms = over_events(&|e| e.2 - e.1);
    let first = all.iter().map(|s| s.recv_us).min().unwrap();
    let last = all.iter().map(|s| s.recv_us).max().unwrap();
    let span = ((last - first) as f64 / 1e6).max(1e-6);
    Some(FanOut {
        frames: all.len(),
        events: events.len(),
        missing,
        duplicates,
        p50_ms: pct(&lat, 50.0) as f64 / 1e3,
        p99_ms: pct(&lat, 99.0) as f64 / 1e3,
        max_ms: *lat.last().unwrap() as f64 / 1e3,
        negative: lat.iter().filter(|l| **l < 0).count(),
        frames_per_sec: all.len() as f64 / span,
        by_phase,
        first_frame_ms,
        spread_ms,
    })
}
