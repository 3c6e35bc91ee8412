//! Parts 1 and 2 on one emulator and one server: watch event → subscriber frame latency (and
//! at the design point), then the steady-state requests; what a stuck job's state was, when
//! one never arrives. It prints the figures of part 1; `steady` measures part 2.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use crate::args::Args;
use crate::cluster::{Cluster, WriteClock, job_key};
use crate::common::submissions;
use crate::common::{Table, WAIT};
use crate::gateway::{CpuMark, Gateway, job_input, report_problems, submit_many, submit_paced, summary_ms};
use crate::hub::{Hub, SUCCEEDED, Socket, latency, open_subscribers, reach, take_samples};
use crate::steady::steady_requests;
use crate::{fresh_cluster_and_gateway, push};

/// Parts 1 and 2, on one emulator and one server.
pub(crate) async fn latency_and_requests(args: &Args, table: &mut Table) {
    let (cluster, _data, mut gateway) = fresh_cluster_and_gateway(args).await;
    let clock = WriteClock::start(&cluster);
    let hub = Arc::new(Hub::default());
    let per_socket = args.subs.div_ceil(args.sockets);
    let subs = per_socket * args.sockets;
    let rss_before = gateway.memory_kib().0;
    let mut sockets = open_subscribers(&gateway, &hub, args.sockets, per_socket).await;
    println!(
        "\n== 1. watch event → frame: {subs} jobEvents subscriptions on {} sockets; jobgate VmRSS {rss_before} KiB before",
        args.sockets
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Warm-up: every subscription must see these jobs finish.
    let body = submissions::body(&job_input(args.run_ms.min(100), None));
    submit_many(&gateway, 5, 5, body)
        .await
        .assert_all_accepted("warm-up");
    let target = 5 * subs as u64;
    assert!(
        reach(&hub.succeeded, target, WAIT).await,
        "warm-up: {} of {target} SUCCEEDED frames",
        hub.succeeded.load(Ordering::Relaxed)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!("  warm-up: 5 jobs reached all {subs} subscriptions");

    let what = format!(
        "1. {subs} subs, {} jobs at {} jobs/s",
        args.latency_jobs, args.rate
    );
    let events_per_job = measure_latency(
        &cluster,
        &gateway,
        &hub,
        &sockets,
        &clock,
        subs,
        (args.latency_jobs, args.rate, args.run_ms),
        &what,
        table,
    )
    .await;
    println!("  jobgate VmRSS: {} KiB", gateway.memory_kib().0);

    if args.parts.contains(&2) {
        steady_requests(args, &cluster, &gateway, &hub, subs, table).await;
    }

    // The design's point: fewer subscribers, a higher event rate.
    if args.parts.contains(&1) && args.design_subs > 0 && args.design_events > 0.0 {
        let keep = args.design_subs.div_ceil(per_socket).clamp(1, sockets.len());
        sockets.truncate(keep);
        let small = keep * per_socket;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rate = args.design_events / events_per_job.max(1.0);
        let n = ((rate * 10.0).round() as usize).max(args.latency_jobs);
        let what = format!("1. {small} subs, {} ev/s ({rate:.1} jobs/s)", args.design_events);
        measure_latency(
            &cluster,
            &gateway,
            &hub,
            &sockets,
            &clock,
            small,
            (n, rate, args.run_ms),
            &what,
            table,
        )
        .await;
    }

    let bad = hub.faults.count.load(Ordering::Relaxed);
    for example in hub.faults.examples.lock().unwrap().iter() {
        println!("    unexpected: {example}");
    }
    let what = "1-2. all runs";
    push(table, what, "unexpected frames or socket ends", bad.to_string());
    push(
        table,
        what,
        "write-clock changes lost (lagged)",
        clock.lagged.load(Ordering::Relaxed).to_string(),
    );
    report_problems(&gateway, table, what);
    drop(sockets);
    println!("  jobgate stopped: {}", gateway.process.stop().await);
    drop(clock);
    cluster.emu.shutdown().await;
}

#[allow(clippy::too_many_arguments)]
async fn measure_latency(
    cluster: &Cluster,
    gateway: &Gateway,
    hub: &Hub,
    sockets: &[Socket],
    clock: &WriteClock,
    subs: usize,
    (jobs, rate, run_ms): (usize, f64, u64),
    what: &str,
    table: &mut Table,
) -> f64 {
    println!("\n-- {what} (each runs {run_ms} ms)");
    take_samples(sockets);
    cluster.emu.reset_requests();
    let watches = cluster.emu.requests().open_watches;
    let succeeded_before = hub.succeeded.load(Ordering::Relaxed);
    hub.recording.store(1, Ordering::Relaxed);
    let cpu = CpuMark::new(gateway);
    let submitted = submit_paced(gateway, rate, jobs, submissions::body(&job_input(run_ms, None))).await;
    let achieved = submitted.ids.len() as f64 / submitted.elapsed.as_secs_f64();
    let target = succeeded_before + (submitted.ids.len() * subs) as u64;
    let complete = reach(&hub.succeeded, target, WAIT).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    hub.recording.store(0, Ordering::Relaxed);
    let cpu = cpu.since();
    let requests = cluster.emu.requests();
    println!(
        "  submitted {} jobs at {achieved:.1} jobs/s ({} errors){}; cpu: {cpu}",
        submitted.ids.len(),
        submitted.errors.len(),
        if complete {
            ""
        } else {
            "; NOT every SUCCEEDED frame arrived within 60 s"
        }
    );
    for e in submitted.errors.iter().take(3) {
        println!("  error: {e}");
    }
    if !complete {
        stuck_jobs(cluster, gateway, hub_missing(&submitted.ids, sockets)).await;
    }
    let ids: HashSet<u128> = submitted.ids.iter().filter_map(|id| job_key(id)).collect();
    let samples = take_samples(sockets);
    let marks = clock.marks.lock().unwrap().clone();
    let mut l = latency(&samples, &ids, &marks, subs);
    push(
        table,
        what,
        "Complete write → SUCCEEDED frame p50 / p99 / max",
        summary_ms(&mut l.succeeded),
    );
    push(
        table,
        what,
        "start write → first RUNNING frame p50 / p99 / max",
        summary_ms(&mut l.running),
    );
    push(
        table,
        what,
        "  of which: Job write → event recorded (at)",
        summary_ms(&mut l.write_to_at),
    );
    push(
        table,
        what,
        "  of which: event at → frame (all frames)",
        summary_ms(&mut l.at_to_frame),
    );
    push(
        table,
        what,
        "frames; SUCCEEDED frames missing; events per job",
        format!("{}; {}; {:.2}", l.frames, l.missing_succeeded, l.events_per_job),
    );
    push(
        table,
        what,
        "frames/s while delivering",
        format!("{:.0}", l.frames_per_sec),
    );
    if l.unmatched > 0 {
        push(
            table,
            what,
            "jobs with a write not seen by the clock",
            l.unmatched.to_string(),
        );
    }
    let n = submitted.ids.len().max(1) as f64;
    let verbs: Vec<String> = requests
        .by_verb
        .iter()
        .map(|(verb, count)| format!("{verb} {count}"))
        .collect();
    push(
        table,
        what,
        "API requests per job (by verb, total)",
        format!("{:.2} ({})", requests.total as f64 / n, verbs.join(", ")),
    );
    push(
        table,
        what,
        "open API watches before / after",
        format!("{watches} / {}", requests.open_watches),
    );
    l.events_per_job
}

/// The submitted jobs of which some subscription has seen no SUCCEEDED frame yet.
fn hub_missing(ids: &[String], sockets: &[Socket]) -> Vec<String> {
    let done: HashSet<u128> = sockets
        .iter()
        .flat_map(|s| {
            let samples = s.samples.lock().unwrap();
            samples
                .iter()
                .filter(|x| x.phase == SUCCEEDED)
                .map(|x| x.job)
                .collect::<Vec<_>>()
        })
        .collect();
    ids.iter()
        .filter(|id| job_key(id).is_some_and(|k| !done.contains(&k)))
        .cloned()
        .collect()
}

/// Says where jobs that never finished are stuck: their phase and conditions in jobgate, and
/// whether their Kubernetes Job exists.
async fn stuck_jobs(cluster: &Cluster, gateway: &Gateway, ids: Vec<String>) {
    for id in ids.iter().take(5) {
        let job = gateway
            .process
            .query(
                "query($id: ID!) { job(id: $id) { phase submittedAt conditions { type status reason } } }",
                json!({ "id": id }),
            )
            .await;
        let exists = cluster
            .emu
            .store()
            .get("jobs.batch", Some("default"), &format!("jobgate-{id}"))
            .is_some();
        println!(
            "  unfinished job {id}: {}; its Kubernetes Job exists: {exists}; marked launched in the \
             store: {}",
            job["job"],
            launched_flag(&gateway.data_dir, id).await
        );
    }
}

/// The job's `launched` column (the launch outbox), read from jobgate's store read-only.
async fn launched_flag(data_dir: &Path, id: &str) -> String {
    let url = format!("sqlite://{}?mode=ro", data_dir.join("jobgate.db").display());
    let result = async {
        let pool = sqlx::SqlitePool::connect(&url).await?;
        let flag: i64 = sqlx::query_scalar("SELECT launched FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&pool)
            .await?;
        pool.close().await;
        Ok::<_, sqlx::Error>(flag)
    }
    .await;
    match result {
        Ok(flag) => flag.to_string(),
        Err(e) => format!("unreadable ({e})"),
    }
}
