//! Part 2: the API requests per minute jobgate makes in steady state, with jobs held running
//! and the subscribers connected, against a polling design counted by the same emulator.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::args::Args;
use crate::cluster::Cluster;
use crate::common::submissions;
use crate::common::{Table, WAIT};
use crate::gateway::{CpuMark, Gateway, job_input, submit_many};
use crate::hub::{Hub, reach, settle};
use crate::push;

/// Part 2: jobgate's API requests in steady state, against a polling design.
pub(crate) async fn steady_requests(
    args: &Args,
    cluster: &Cluster,
    gateway: &Gateway,
    hub: &Hub,
    subs: usize,
    table: &mut Table,
) {
    let what = format!("2. {} jobs running, {subs} subs", args.steady_jobs);
    println!("\n== {what}");
    let gate = "bench-steady";
    let running_before = gateway.count("RUNNING").await;
    let submitted = submit_many(
        gateway,
        args.steady_jobs,
        args.clients,
        submissions::body(&job_input(0, Some(gate))),
    )
    .await;
    assert!(
        submitted.errors.is_empty(),
        "steady jobs: {:?}",
        &submitted.errors[..1]
    );
    let target = running_before + submitted.ids.len() as i64;
    let deadline = Instant::now() + WAIT;
    while gateway.count("RUNNING").await < target && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let running = gateway.count("RUNNING").await;
    // The subscribers are still being sent the backlog of those jobs' events: steady state
    // begins once no frame came for 3 s.
    let settled = settle(hub, Duration::from_secs(3), Duration::from_secs(300)).await;
    println!(
        "  {running} jobs RUNNING in jobgate ({:.1} s after the first submission); the subscribers' \
         backlog drained {:.1} s later",
        submitted.elapsed.as_secs_f64(),
        settled.as_secs_f64()
    );

    // jobgate alone.
    let frames_before = hub.frames.load(Ordering::Relaxed);
    cluster.emu.reset_requests();
    let watches_before = cluster.emu.requests().open_watches;
    let cpu = CpuMark::new(gateway);
    tokio::time::sleep(Duration::from_secs(args.steady_secs)).await;
    let counted = cluster.emu.requests();
    println!("  cpu: {}", cpu.since());
    let per_minute = counted.total as f64 * 60.0 / args.steady_secs as f64;
    push(
        table,
        &what,
        &format!("jobgate: API requests/min (counted over {} s)", args.steady_secs),
        format!("{per_minute:.1} ({} requests)", counted.total),
    );
    push(
        table,
        &what,
        "jobgate: open API watches (start / end of window)",
        format!("{watches_before} / {}", counted.open_watches),
    );
    push(
        table,
        &what,
        "frames sent to subscribers in the window",
        (hub.frames.load(Ordering::Relaxed) - frames_before).to_string(),
    );

    // The polling design: each client GETs one running Job once a second.
    let names = cluster.running_job_names();
    assert!(!names.is_empty(), "no running Job to poll");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.poll_clients)
        .timeout(WAIT)
        .build()
        .expect("an HTTP client");
    let base = format!("{}/apis/batch/v1/namespaces/default/jobs", cluster.emu.url());
    cluster.emu.reset_requests();
    let window = Duration::from_secs(args.poll_secs);
    let started = tokio::time::Instant::now();
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = JoinSet::new();
    for i in 0..args.poll_clients {
        let url = format!("{base}/{}", names[i % names.len()]);
        let (http, ok, failed) = (http.clone(), ok.clone(), failed.clone());
        // Spread over the second, as independent clients would be.
        let first = started + Duration::from_secs_f64(i as f64 / args.poll_clients as f64);
        tasks.spawn(async move {
            let mut ticks = tokio::time::interval_at(first, Duration::from_secs(1));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if started.elapsed() >= window {
                    return;
                }
                match http.get(&url).send().await {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let polled = cluster.emu.requests();
    let per_minute = polled.total as f64 * 60.0 / args.poll_secs as f64;
    push(
        table,
        &what,
        &format!(
            "polling: {} clients × 1 Hz, API requests/min (over {} s)",
            args.poll_clients, args.poll_secs
        ),
        format!("{per_minute:.0} ({} requests)", polled.total),
    );
    push(
        table,
        &what,
        "polling: GETs answered 2xx / failed",
        format!(
            "{} / {}",
            ok.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed)
        ),
    );

    // Let them finish; every subscriber must see it.
    let succeeded_before = hub.succeeded.load(Ordering::Relaxed);
    cluster.emu.simulation().open_gate(gate);
    let target = succeeded_before + (submitted.ids.len() * subs) as u64;
    let done = reach(&hub.succeeded, target, WAIT * 2).await;
    println!(
        "  gate opened: {} of {} SUCCEEDED frames arrived",
        hub.succeeded.load(Ordering::Relaxed) - succeeded_before,
        target - succeeded_before
    );
    if !done {
        push(table, &what, "SUCCEEDED frames missing after the gate opened", {
            (target - hub.succeeded.load(Ordering::Relaxed)).to_string()
        });
    }
}
