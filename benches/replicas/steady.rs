//! Part 2 in steady state: the Kubernetes API requests per minute of every replica, with jobs
//! held running and the subscribers connected.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::cluster::{Cluster, CpuMark, Replica, job_input};
use crate::common::postgres::Postgres;
use crate::common::submissions;
use crate::common::{Table, WAIT};
use crate::hub::{Hub, reach, settle};
use crate::report::{push, requests_per_minute};

/// Part 2: API requests per minute with jobs held running and the subscribers connected.
pub(crate) async fn steady(
    args: &Args,
    cluster: &Cluster,
    postgres: &Postgres,
    replicas: &[Replica],
    hub: &Hub,
    table: &mut Table,
) {
    let what = format!(
        "2. {} jobs running, {} subs, {} replicas",
        args.steady_jobs,
        args.subs,
        replicas.len()
    );
    println!("\n-- {what}");
    let gate = "bench-steady";
    let running_before = replicas[0].count("RUNNING").await;
    let submitted = submissions::many(
        &replicas[0].process.http,
        &replicas[0].process.url(),
        submissions::body(&job_input(0, Some(gate))),
        args.steady_jobs,
        args.clients,
    )
    .await;
    submitted.assert_all_accepted("steady jobs");
    let target = running_before + submitted.ids.len() as i64;
    let deadline = Instant::now() + WAIT;
    // Every replica must see them RUNNING: they all follow the one database.
    for replica in replicas {
        while replica.count("RUNNING").await < target && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let running: Vec<String> = futures::future::join_all(replicas.iter().map(|r| r.count("RUNNING")))
        .await
        .iter()
        .map(i64::to_string)
        .collect();
    settle(hub, Duration::from_secs(3), Duration::from_secs(120)).await;
    println!("  RUNNING as each replica reads it: {}", running.join(" / "));

    let frames_before = hub.frames.load(Ordering::Relaxed);
    cluster.emu.reset_requests();
    let cpu = CpuMark::new(replicas, postgres);
    let window = Duration::from_secs(args.steady_secs);
    tokio::time::sleep(window).await;
    push(
        table,
        &what,
        &format!("API requests/min (counted over {} s)", args.steady_secs),
        requests_per_minute(cluster, window),
    );
    println!("  cpu: {}", cpu.since());
    push(
        table,
        &what,
        "frames sent to subscribers in the window",
        (hub.frames.load(Ordering::Relaxed) - frames_before).to_string(),
    );

    // Let them finish; every subscriber must see it.
    let succeeded_before = hub.succeeded.load(Ordering::Relaxed);
    cluster.emu.simulation().open_gate(gate);
    let target = succeeded_before + (submitted.ids.len() * args.subs) as u64;
    let done = reach(&hub.succeeded, target, WAIT * 2).await;
    push(
        table,
        &what,
        "SUCCEEDED frames after the gate opened (expected)",
        format!(
            "{} ({}){}",
            hub.succeeded.load(Ordering::Relaxed) - succeeded_before,
            target - succeeded_before,
            if done { "" } else { " NOT ALL within 120 s" }
        ),
    );
}
