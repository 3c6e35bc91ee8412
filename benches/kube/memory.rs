//! Parts 3 and 4 on a fresh emulator and server: memory and data directory per tracked job,
//! then recovery after kill -9 with those jobs tracked (until it listens, is ready, runs a new
//! job, and has reconciled every adopted job).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::cluster::Cluster;
use crate::common::submissions;
use crate::common::{Table, WAIT, procfs};
use crate::gateway::{CpuMark, Gateway, dir_bytes, job_input, print_files, report_problems, submit_many};
use crate::{fresh_cluster_and_gateway, push};

/// Parts 3 and 4 on a fresh emulator and server.
pub(crate) async fn memory_and_recovery(args: &Args, table: &mut Table) {
    let (cluster, data, mut gateway) = fresh_cluster_and_gateway(args).await;
    println!(
        "\n== 3. memory per tracked job (data directory {})",
        data.path().display()
    );

    // Warm-up: a few jobs through the whole path.
    submit_many(&gateway, 20, 8, submissions::body(&job_input(50, None)))
        .await
        .assert_all_accepted("warm-up");
    let deadline = Instant::now() + WAIT;
    while gateway.count("PENDING, RUNNING").await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss0, anon0, file0) = gateway.memory_kib();
    let disk0 = dir_bytes(data.path());
    let what = "3. memory per tracked job";
    push(
        table,
        what,
        "0 unfinished: VmRSS (RssAnon, RssFile); store on disk",
        format!(
            "{rss0} KiB ({anon0}, {file0}); {:.1} MiB",
            disk0 as f64 / 1048576.0
        ),
    );

    let mut steps = vec![args.jobs.min(10_000)];
    if args.jobs > 10_000 {
        steps.push(args.jobs);
    }
    let gate = "bench-hold";
    let body = submissions::body(&job_input(0, Some(gate)));
    let fill_deadline = Instant::now() + Duration::from_secs(args.fill_minutes * 60);
    let fill_started = Instant::now();
    let mut tracked = 0usize;
    let mut submitted_total = 0usize;
    for step in steps {
        // Submit in slices, so that the fill can stop at its deadline.
        while submitted_total < step && Instant::now() < fill_deadline {
            let n = (step - submitted_total).min(5_000);
            let cpu = CpuMark::new(&gateway);
            let s = submit_many(&gateway, n, args.clients, body.clone()).await;
            submitted_total += s.ids.len();
            let running = gateway.count("RUNNING").await;
            println!(
                "  +{} jobs in {:.1} s ({:.0}/s, {} errors); {submitted_total} submitted, {running} RUNNING, \
                 VmRSS {} KiB, {:.0} s since the fill began; cpu: {}",
                s.ids.len(),
                s.elapsed.as_secs_f64(),
                s.ids.len() as f64 / s.elapsed.as_secs_f64(),
                s.errors.len(),
                gateway.memory_kib().0,
                fill_started.elapsed().as_secs_f64(),
                cpu.since()
            );
            if let Some(e) = s.errors.first() {
                println!("  error: {e}");
            }
        }
        // Every submitted job observed running (bounded by the fill deadline, at least 60 s).
        let deadline = fill_deadline.max(Instant::now() + WAIT);
        let mut running = gateway.count("RUNNING").await;
        while (running as usize) < submitted_total && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
            running = gateway.count("RUNNING").await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        running = gateway.count("RUNNING").await;
        tracked = running as usize;
        let (rss, anon, file) = gateway.memory_kib();
        let disk = dir_bytes(data.path());
        let label = if tracked < step {
            format!("{tracked} unfinished (of {step} wanted; fill time limit)")
        } else {
            format!("{tracked} unfinished")
        };
        println!(
            "  {label} after {:.0} s: pending {}, failed {}",
            fill_started.elapsed().as_secs_f64(),
            gateway.count("PENDING").await,
            gateway.count("FAILED, CANCELLED").await
        );
        push(
            table,
            what,
            &format!("{label}: VmRSS (RssAnon, RssFile); store"),
            format!("{rss} KiB ({anon}, {file}); {:.1} MiB", disk as f64 / 1048576.0),
        );
        let per = |a: u64, b: u64| (b as f64 - a as f64) / tracked.max(1) as f64;
        push(
            table,
            what,
            &format!("{tracked}: (RSS(N) - RSS(0)) / N; RssAnon; store"),
            format!(
                "{:.2}; {:.2}; {:.2} KiB",
                per(rss0, rss),
                per(anon0, anon),
                per(disk0, disk) / 1024.0
            ),
        );
        print_files(data.path());
        let requests = cluster.emu.requests();
        println!(
            "  emulator: {} API requests so far ({:?}); {} open watches; {} pods created",
            requests.total,
            requests.by_verb,
            requests.open_watches,
            cluster.emu.simulation().pods_created()
        );
        if tracked < step {
            break;
        }
    }
    report_problems(&gateway, table, what);

    if args.parts.contains(&4) {
        recovery(
            args,
            &cluster,
            &mut gateway,
            data.path(),
            tracked,
            (rss0, anon0),
            table,
        )
        .await;
    }
    println!("  jobgate stopped: {}", gateway.process.stop().await);
    cluster.emu.shutdown().await;
}

/// Part 4: kill -9 with `tracked` unfinished jobs, start again, time the recovery.
async fn recovery(
    args: &Args,
    cluster: &Cluster,
    gateway: &mut Gateway,
    data_dir: &Path,
    tracked: usize,
    (rss0, anon0): (u64, u64),
    table: &mut Table,
) {
    let what = format!("4. restart with {tracked} unfinished");
    println!("\n== {what}");
    gateway.process.kill9();
    cluster.emu.reset_requests();
    let limit = Duration::from_secs(600);
    let (bench_cpu, machine_cpu) = (procfs::cpu_secs("self").0, procfs::machine_cpu().0);
    let restarted = Gateway::start_blocking(data_dir, &cluster.kubeconfig, args, limit);
    let spawned = restarted.process.spawned;
    let pid = restarted.process.pid().to_string();
    push(
        table,
        &what,
        "spawn → listening (store opened, jobs adopted)",
        format!("{:.2} s", restarted.process.listening_after.as_secs_f64()),
    );
    // A job submitted at once: it can only finish once the launcher and watchers run.
    let id = submissions::submit(
        &restarted.process.http,
        &restarted.process.url(),
        &submissions::body(&job_input(50, None)),
    )
    .await
    .expect("submitting after the restart");
    let ready = restarted.ready_within(limit).await;
    push(
        table,
        &what,
        "spawn → /readyz 200 (every watcher's list answered)",
        ready.map_or("not within 600 s".into(), |t| {
            format!("{:.2} s", (t - spawned).as_secs_f64())
        }),
    );
    // Where the time went until ready: jobgate's threads, this process (the emulator), others.
    let wall = spawned.elapsed().as_secs_f64();
    let server = procfs::cpu_secs(&pid).0;
    let bench = procfs::cpu_secs("self").0 - bench_cpu;
    let others = (procfs::machine_cpu().0 - machine_cpu - server - bench).max(0.0);
    let threads: Vec<String> = procfs::thread_cpu(&pid)
        .into_iter()
        .filter(|(_, secs)| *secs >= 0.05)
        .map(|(name, secs)| format!("{name} {secs:.1}"))
        .collect();
    println!(
        "  until ready: {wall:.1} s; CPU seconds: jobgate {server:.1} [{}], bench+emulator {bench:.1}, \
         other processes {others:.1}; jobgate wrote {:.1} MiB to disk",
        threads.join(", "),
        procfs::io_write_bytes(&pid) as f64 / 1048576.0
    );
    let deadline = Instant::now() + limit;
    let mut phase = restarted.phase(&id).await;
    while phase != "SUCCEEDED" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        phase = restarted.phase(&id).await;
    }
    push(
        table,
        &what,
        "spawn → new job SUCCEEDED",
        if phase == "SUCCEEDED" {
            format!("{:.2} s", spawned.elapsed().as_secs_f64())
        } else {
            format!("{phase} after 600 s")
        },
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let marks = restarted.marks.lock().unwrap().clone();
    for (at, line) in &marks {
        let watcher = line.split("watcher=").nth(1).unwrap_or(line);
        println!(
            "  {:.2} s: first list done: {watcher}",
            (*at - spawned).as_secs_f64()
        );
    }
    // Ready does not wait for the lists: the last one done is when every adopted job has
    // been reconciled with the cluster.
    push(
        table,
        &what,
        "spawn → every first list done (adopted jobs reconciled)",
        marks
            .iter()
            .map(|(at, _)| *at)
            .max()
            .map_or("not seen".into(), |t| {
                format!("{:.2} s", (t - spawned).as_secs_f64())
            }),
    );
    let running = restarted.count("RUNNING").await;
    let failed = restarted.count("FAILED, CANCELLED").await;
    push(
        table,
        &what,
        "after: RUNNING; FAILED or CANCELLED",
        format!("{running}; {failed}"),
    );
    let requests = cluster.emu.requests();
    let verbs: Vec<String> = requests
        .by_verb
        .iter()
        .map(|(verb, count)| format!("{verb} {count}"))
        .collect();
    push(
        table,
        &what,
        "API requests during recovery",
        format!("{} ({})", requests.total, verbs.join(", ")),
    );
    let (rss, anon, _) = restarted.memory_kib();
    let per = |a: u64, b: u64| (b as f64 - a as f64) / tracked.max(1) as f64;
    push(
        table,
        &what,
        "after: VmRSS (RssAnon); (RSS - RSS(0)) / N; RssAnon",
        format!(
            "{rss} KiB ({anon}); {:.2}; {:.2} KiB",
            per(rss0, rss),
            per(anon0, anon)
        ),
    );
    report_problems(&restarted, table, &what);
    *gateway = restarted;
}
