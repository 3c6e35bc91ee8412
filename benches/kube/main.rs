//! Benchmark of the Kubernetes executor: the real `jobgate` binary (`--executor kubernetes`)
//! against the Kubernetes API emulator (`tests/kube-emulator`) started in this process, both
//! on 127.0.0.1 only.
//!
//! `cargo bench --bench kube` builds `jobgate` with the bench profile (optimised, as
//! `--release`) and hands its path to this program as `CARGO_BIN_EXE_jobgate`. It measures:
//!
//! 1. **Watch event → subscriber frame latency.** `--subs` (1000) `jobEvents` subscriptions on
//!    `--sockets` (10) WebSockets; `--latency-jobs` (200) jobs submitted at `--rate` (10)
//!    jobs/s, each running `--run-ms` (500) in the emulated kubelet. Every Job write is
//!    timestamped in this process as the emulator's store publishes it (`store().watch`, read
//!    by a dedicated thread), every frame as a subscriber reads it: the SUCCEEDED frame is
//!    matched with the Job's `Complete` write, the first RUNNING frame with the first write
//!    that gave the Job a `startTime` or an active pod. Then the design's point:
//!    `--design-subs` (100) subscriptions at `--design-events` (200) events/s.
//! 2. **API requests per minute in steady state**: with `--steady-jobs` (1000) jobs held
//!    running by a closed gate and the subscribers connected, the emulator counts jobgate's
//!    requests for `--steady-secs` (60). Against it, a polling design: `--poll-clients`
//!    (1000) clients each GET one of those Jobs once a second for `--poll-secs` (10), counted
//!    by the same emulator. Both are scaled to requests per minute.
//! 3. **Memory per tracked job**: on a fresh emulator and server, jobgate's VmRSS and the size
//!    of its data directory with 0, 10,000 and `--jobs` (100,000) unfinished jobs (held
//!    running by a gate never opened): (RSS(N) - RSS(0)) / N.
//! 4. **Recovery**: kill -9 with those jobs tracked, start again over the same data directory,
//!    and time until it listens, until `/readyz` answers 200 (every watcher's list answered),
//!    until a job submitted after the restart has SUCCEEDED, and until every watcher's first
//!    list is done (every adopted job reconciled).
//!
//! Options (`cargo bench --bench kube -- --jobs 10000 --parts 1,2`): see [`Args`]. Every wait
//! is bounded; part 3 stops adding jobs once `--fill-minutes` (15) have passed and reports the
//! count it reached. Without `--bench` (as under `cargo test --benches`) the program does
//! nothing. BENCHMARKS.md has the figures.
#![allow(clippy::print_stdout)] // A benchmark's whole job is to print its figures.

mod args;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod gateway;
mod hub;
mod latency;
mod memory;
mod steady;

use common::{Table, WAIT, print_table};

use crate::args::Args;
use crate::cluster::Cluster;
use crate::gateway::Gateway;
use crate::latency::latency_and_requests;
use crate::memory::memory_and_recovery;

const SUBSCRIBE: &str = "subscription { jobEvents { cursor phase at job { id } } }";
/// The label the Kubernetes executor puts on every object of a job.
const JOB_ID_LABEL: &str = "jobgate.io/job-id";

fn main() {
    common::main("kube", || run(Args::parse()));
}

async fn run(args: Args) {
    println!(
        "jobgate Kubernetes bench; server binary: {}",
        env!("CARGO_BIN_EXE_jobgate")
    );
    let mut table: Table = Vec::new();
    if args.parts.iter().any(|p| *p == 1 || *p == 2) {
        latency_and_requests(&args, &mut table).await;
    }
    if args.parts.iter().any(|p| *p == 3 || *p == 4) {
        memory_and_recovery(&args, &mut table).await;
    }
    print_table(&table, ["part", "figure", "value"], [40, 52, 24]);
}

fn push(table: &mut Table, what: &str, figure: &str, value: String) {
    println!("  {figure}: {value}");
    table.push((what.to_owned(), figure.to_owned(), value));
}

/// A fresh emulator, and a jobgate on it over a fresh data directory, ready.
async fn fresh_cluster_and_gateway(args: &Args) -> (Cluster, tempfile::TempDir, Gateway) {
    let cluster = Cluster::start(args.history).await;
    let data = tempfile::tempdir().expect("a temporary directory");
    let gateway = Gateway::start_blocking(data.path(), &cluster.kubeconfig, args, WAIT);
    gateway
        .ready_within(WAIT)
        .await
        .expect("jobgate ready within 60 s");
    (cluster, data, gateway)
}
