//! Benchmark of several jobgate replicas sharing one PostgreSQL database: the real `jobgate`
//! binary (`--executor kubernetes --database-url …`), `--replicas` (3) of it, against the
//! Kubernetes API emulator (`tests/kube-emulator`) started in this process and a throwaway
//! PostgreSQL server (tests/common/postgres.rs), everything on 127.0.0.1 only.
//!
//! `cargo bench --bench replicas` builds `jobgate` with the bench profile (optimised, as
//! `--release`) and hands its path to this program as `CARGO_BIN_EXE_jobgate`. The replicas
//! renew member Leases lasting `--lease-secs` (15, the product's default) and divide the 32
//! shards of the job space; every part starts once they have divided them. It measures:
//!
//! 1. **Cross-replica event → frame latency.** `--subs` (1000) `jobEvents` subscriptions on
//!    `--sockets` (30) WebSockets, the sockets spread round-robin over the replicas and the
//!    subscriptions over the sockets. `--jobs` (200) jobs are submitted through the first
//!    replica only, at `--rate` (10) jobs/s, each running `--run-ms` (500) in the emulated
//!    kubelet. For every frame, latency = the moment its reader got it − the event's `at`
//!    (set by the replica that recorded the event, inside its write transaction; all clocks
//!    are this machine's). Reported over all frames, per replica the frame came from, and per
//!    phase. Delivery is checked exactly: every subscription must get every event once.
//! 2. **Kubernetes API requests per minute**, counted by the emulator over every replica:
//!    during part 1, and in steady state with `--steady-jobs` (300) jobs held running by a
//!    closed gate and the subscribers connected, for `--steady-secs` (30).
//! 3. **Failover time**: kill -9 of a replica to the first event of one of its jobs delivered
//!    by the replicas that took its shards over. `--failover-jobs` (60) jobs held running by a
//!    closed gate; one replica (the victim) is killed and, at once, the gate opened. The
//!    survivors' own jobs finish at once; the victim's are seen to finish only once its shards
//!    are taken over (its Lease unchanged for a lease duration). Timed on a subscription to a
//!    survivor, from the kill: the first and the last SUCCEEDED of a job in the victim's
//!    shards; with the survivors' "shards assigned", "adopted" and "first list done" log lines
//!    (read as they are logged) to say where the time went. Checked: every job SUCCEEDED
//!    exactly once, one Kubernetes Job each. Repeated `--failover-runs` (3) times, a new
//!    replica replacing each victim; the victim changes each run. Run k of n kills when the
//!    victim's last Lease renewal is (k + ½)/n of a renewal interval old, so that the runs
//!    sweep the renewal cycle (the survivors count from that renewal, not from the kill).
//!    Part 1's subscribers are closed first (those on the victim would end).
//!
//! `--jobs 0`, `--steady-jobs 0` and `--failover-jobs 0` leave a part out. The PostgreSQL
//! server runs with `fsync=off` (as the tests run it) unless `--postgres-fsync on`. Options are
//! `--name value` after `--` on cargo's command line, e.g. `cargo bench --bench replicas --
//! --subs 100`. Every count is bounded and every wait has a time limit. Without `--bench` (as
//! under `cargo test --benches`) the program does nothing. BENCHMARKS.md has the figures.
#![allow(clippy::print_stdout)] // A benchmark's whole job is to print its figures.

mod args;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod failover;
mod hub;
mod latency;
mod report;
mod steady;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::postgres::Postgres;
use common::submissions;
use common::{Table, WAIT, print_table};

use crate::args::Args;
use crate::cluster::{Cluster, Replica, job_input, until_shards_divided};
use crate::failover::failover;
use crate::hub::{Hub, open_subscribers, reach, settle};
use crate::latency::latency;
use crate::report::push;
use crate::steady::steady;

const SUBSCRIBE: &str = "subscription { jobEvents { cursor phase at job { id } } }";

/// Index of SUCCEEDED in [`PHASES`].
const SUCCEEDED: u8 = 2;

fn main() {
    common::main("replicas", || run(Args::parse()));
}

async fn run(args: Args) {
    println!(
        "jobgate replicas bench; server binary: {}",
        env!("CARGO_BIN_EXE_jobgate")
    );
    let mut table: Table = Vec::new();
    let start = if args.postgres_fsync {
        Postgres::start_durable
    } else {
        Postgres::start
    };
    let postgres =
        tokio::task::block_in_place(start).expect("this bench needs PostgreSQL, which is not installed here");
    let cluster = Cluster::start().await;
    let mut names = ReplicaNames::default();
    let mut replicas = Vec::with_capacity(args.replicas);
    for _ in 0..args.replicas {
        replicas.push(Replica::start(&cluster, &postgres.url(), args.lease_secs, names.next()).await);
    }
    // A replica acts for its shards a lease duration after it joined.
    let lease = Duration::from_secs(args.lease_secs);
    let owned = until_shards_divided(&replicas, WAIT + 2 * lease)
        .await
        .expect("the replicas never divided the shards");
    println!("  shards owned: {owned:?} (lease {} s)", args.lease_secs);
    let hub = Arc::new(Hub::default());
    let n_sockets = args.sockets.min(args.subs);
    let sockets = open_subscribers(&replicas, &hub, n_sockets, args.subs).await;
    println!(
        "\n== {} replicas (--executor kubernetes) on one PostgreSQL (fsync={}); {} jobEvents \
         subscriptions on {} sockets spread over them; jobs submitted through replica 0",
        args.replicas,
        if args.postgres_fsync { "on" } else { "off" },
        args.subs,
        n_sockets
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Warm-up: every subscription must see these jobs finish (they are all live then).
    let warm_up = 5;
    submissions::many(
        &replicas[0].process.http,
        &replicas[0].process.url(),
        submissions::body(&job_input(args.run_ms.min(100), None)),
        warm_up,
        warm_up,
    )
    .await
    .assert_all_accepted("warm-up");
    let target = (warm_up * args.subs) as u64;
    assert!(
        reach(&hub.succeeded, target, WAIT).await,
        "warm-up: {} of {target} SUCCEEDED frames",
        hub.succeeded.load(Ordering::Relaxed)
    );
    settle(&hub, Duration::from_secs(1), WAIT).await;
    println!(
        "  warm-up: {warm_up} jobs reached all {} subscriptions",
        args.subs
    );

    if args.jobs > 0 {
        latency(&args, &cluster, &postgres, &replicas, &hub, &sockets, &mut table).await;
    }
    if args.steady_jobs > 0 {
        steady(&args, &cluster, &postgres, &replicas, &hub, &mut table).await;
    }

    let what = "all";
    let bad = hub.faults.count.load(Ordering::Relaxed);
    for example in hub.faults.examples.lock().unwrap().iter() {
        println!("    unexpected: {example}");
    }
    push(
        &mut table,
        what,
        "unexpected frames or socket ends (parts 1, 2)",
        bad.to_string(),
    );
    // Closed before a replica is killed: those on it would end.
    drop(sockets);
    let mut dead = Vec::new();
    if args.failover_jobs > 0 && replicas.len() > 1 {
        failover(
            &args,
            &cluster,
            &postgres,
            &mut replicas,
            &mut dead,
            &mut names,
            &mut table,
        )
        .await;
    }
    for replica in replicas.iter_mut().chain(dead.iter_mut()) {
        let problems = replica.process.problems();
        for line in problems.iter().take(5) {
            println!("  replica {} logged: {line}", replica.id);
        }
        push(
            &mut table,
            what,
            &format!("{}: WARN/ERROR lines (+ /readyz 503 lines); stop", replica.id),
            format!(
                "{} (+ {}); {}",
                problems.len(),
                replica.not_ready.load(Ordering::Relaxed),
                replica.process.stop().await
            ),
        );
    }
    cluster.emu.shutdown().await;
    drop(postgres);
    print_table(&table, ["part", "figure", "value"], [34, 56, 30]);
}

/// The replicas' names: `r<n>-<this process's id>`, so that a run's shards divide differently
/// from the last run's (rendezvous hashing of the names decides who owns what).
#[derive(Default)]
struct ReplicaNames(usize);

impl ReplicaNames {
    fn next(&mut self) -> String {
        self.0 += 1;
        format!("r{}-{}", self.0 - 1, std::process::id())
    }
}
