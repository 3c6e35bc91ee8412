//! Part 1, with the requests made meanwhile: cross-replica event → frame latency, jobs paced
//! through replica 0 and frames read on every replica, with delivery checked exactly.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::cluster::{Cluster, CpuMark, Replica, job_input};
use crate::common::postgres::Postgres;
use crate::common::submissions::{self, Submitted};
use crate::common::subscribers::PHASES;
use crate::common::{Table, WAIT, pct};
use crate::hub::{Hub, Sample, Socket, reach, settle, summary_ms};
use crate::report::{push, requests_per_minute};

/// Part 1 (and the requests made meanwhile): jobs paced through replica 0, frames on all.
pub(crate) async fn latency(
    args: &Args,
    cluster: &Cluster,
    postgres: &Postgres,
    replicas: &[Replica],
    hub: &Hub,
    sockets: &[Socket],
    table: &mut Table,
) {
    let what = format!(
        "1. {} subs, {} jobs at {} jobs/s",
        args.subs, args.jobs, args.rate
    );
    println!("\n-- {what} (each runs {} ms)", args.run_ms);
    for socket in sockets {
        socket.samples.lock().unwrap().clear();
    }
    cluster.emu.reset_requests();
    let window = Instant::now();
    let succeeded_before = hub.succeeded.load(Ordering::Relaxed);
    hub.recording.store(true, Ordering::Relaxed);
    let cpu = CpuMark::new(replicas, postgres);
    let submitted: Submitted = submissions::paced(
        &replicas[0].process.http,
        &replicas[0].process.url(),
        submissions::body(&job_input(args.run_ms, None)),
        args.rate,
        args.jobs,
    )
    .await;
    let target = succeeded_before + (submitted.ids.len() * args.subs) as u64;
    let complete = reach(&hub.succeeded, target, WAIT).await;
    settle(hub, Duration::from_millis(500), WAIT).await;
    hub.recording.store(false, Ordering::Relaxed);
    let window = window.elapsed();
    println!("  cpu: {}", cpu.since());
    let mut latencies = submitted.latencies.clone();
    latencies.sort_unstable();
    push(
        table,
        &what,
        "jobs accepted (errors); jobs/s achieved; submitJob p50 ms",
        format!(
            "{} ({}); {:.1}; {:.2}",
            submitted.ids.len(),
            submitted.errors.len(),
            submitted.ids.len() as f64 / submitted.elapsed.as_secs_f64(),
            pct(&latencies, 50.0).as_secs_f64() * 1e3
        ),
    );
    for e in submitted.errors.iter().take(3) {
        println!("  error: {e}");
    }
    if !complete {
        push(
            table,
            &what,
            "SUCCEEDED frames missing 60 s after the last submission",
            (target - hub.succeeded.load(Ordering::Relaxed)).to_string(),
        );
    }

    // Per socket, by replica: socket i is on replica i % replicas.
    let samples: Vec<Vec<Sample>> = sockets
        .iter()
        .map(|s| std::mem::take(&mut *s.samples.lock().unwrap()))
        .collect();
    let mut all: Vec<i64> = samples.iter().flatten().map(|s| s.lat_us).collect();
    push(
        table,
        &what,
        "event at → frame, all frames: p50 / p99 / max ms",
        summary_ms(&mut all),
    );
    for r in 0..replicas.len() {
        let mut lat: Vec<i64> = samples
            .iter()
            .enumerate()
            .filter(|(i, _)| i % replicas.len() == r)
            .flat_map(|(_, s)| s.iter().map(|s| s.lat_us))
            .collect();
        let origin = if r == 0 { " (jobs submitted here)" } else { "" };
        push(
            table,
            &what,
            &format!("  frames from replica {r}{origin}: p50 / p99 / max ms"),
            summary_ms(&mut lat),
        );
    }
    for (p, name) in PHASES.iter().enumerate() {
        let mut lat: Vec<i64> = samples
            .iter()
            .flatten()
            .filter(|s| s.phase as usize == p)
            .map(|s| s.lat_us)
            .collect();
        if !lat.is_empty() {
            push(
                table,
                &what,
                &format!("  {name} frames: p50 / p99 / max ms"),
                summary_ms(&mut lat),
            );
        }
    }

    // Delivery: every subscription gets every event of the window once.
    let events: HashSet<i64> = samples.iter().flatten().map(|s| s.seq).collect();
    let mut per_sub: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    for s in samples.iter().flatten() {
        per_sub.entry(s.sub).or_default().push(s.seq);
    }
    let (mut missing, mut duplicated) = (0usize, 0usize);
    for k in 0..args.subs as u32 {
        let mut seqs = per_sub.remove(&k).unwrap_or_default();
        let received = seqs.len();
        seqs.sort_unstable();
        seqs.dedup();
        duplicated += received - seqs.len();
        missing += events.len() - seqs.len();
    }
    let frames: usize = samples.iter().map(Vec::len).sum();
    let recv: Vec<i64> = samples.iter().flatten().map(|s| s.recv_us).collect();
    let span = (recv.iter().max().unwrap_or(&0) - recv.iter().min().unwrap_or(&0)) as f64 / 1e6;
    push(
        table,
        &what,
        "frames (missing, duplicated); events; frames/s",
        format!(
            "{frames} ({missing}, {duplicated}); {}; {:.0}",
            events.len(),
            frames as f64 / span.max(1e-6)
        ),
    );
    push(
        table,
        &what,
        "API requests/min during the run (all replicas)",
        requests_per_minute(cluster, window),
    );
}
