//! Load benchmark of a real `jobgate` server on this machine, over 127.0.0.1 only.
//!
//! `cargo bench --bench load` builds the `jobgate` binary with the bench profile (optimised,
//! like `--release`) and hands its path to this program as `CARGO_BIN_EXE_jobgate`. The
//! program starts it on 127.0.0.1:0 with a temporary data directory, reads the address from
//! its "listening on http://ADDR" log line, and measures:
//!
//! 1. `submitJob` throughput: `BENCH_SUBMITS` trivial jobs (`command: ["true"]`) from
//!    `BENCH_CLIENTS` concurrent HTTP clients, each run on a fresh server: accepted jobs per
//!    second and the mutation's p50/p99 latency. One run per store in `BENCH_STORES`:
//!    `sqlite` once per durability in `BENCH_DURABILITIES`; `postgres` and `postgres-fsync`
//!    once each, on a throwaway PostgreSQL server started for the run (tests/common/postgres.rs,
//!    on 127.0.0.1), with `fsync`, `synchronous_commit` and `full_page_writes` off
//!    (`postgres`, as the tests run it) or on (`postgres-fsync`, PostgreSQL's defaults).
//! 2. Status event → subscriber frame latency with `BENCH_SUBSCRIPTIONS` open `jobEvents`
//!    subscriptions (`BENCH_SUBS_PER_SOCKET` per WebSocket): jobs are submitted at each rate
//!    of `BENCH_RATES` (jobs/s) for `BENCH_RATE_SECS` seconds, then `BENCH_BURST_JOBS` as fast
//!    as `BENCH_CLIENTS` clients can, then, with all but `BENCH_SMALL_SUBS` subscriptions
//!    closed, at `BENCH_SMALL_EVENTS_PER_SEC` events/s. For every frame received the latency
//!    is (receive time - the event's `at`), both read from this machine's wall clock.
//! 3. The server's resident memory (VmRSS) before and after opening the sockets and the
//!    subscriptions, idle.
//!
//! Knobs (environment variables; defaults in brackets): `BENCH_SUBMITS` [2000],
//! `BENCH_CLIENTS` [32], `BENCH_STORES` [sqlite] (any of `sqlite,postgres,postgres-fsync`),
//! `BENCH_DURABILITIES` [full,normal] (SQLite's; empty: skip part 1),
//! `BENCH_DRAIN_SECS` [60] (how long part 1 waits for its jobs to finish),
//! `BENCH_SUBSCRIPTIONS` [1000] (0: skip parts 2 and 3), `BENCH_SUBS_PER_SOCKET` [1],
//! `BENCH_LAT_DURABILITY` [full], `BENCH_LAT_STORE` [sqlite] (the part 2/3 server's store,
//! one of `BENCH_STORES`' values), `BENCH_RATES` [20,60], `BENCH_RATE_SECS` [10],
//! `BENCH_BURST_JOBS` [300], `BENCH_SMALL_SUBS` [100], `BENCH_SMALL_EVENTS_PER_SEC` [200],
//! `BENCH_STALLED` [0: subscribers that stop reading during part 2],
//! `BENCH_SELECTION` [`cursor phase at job { id }`], `BENCH_JOB_COMMAND` [`["true"]`],
//! `BENCH_PERF` [unset] (a directory: `perf record` the server during the part 2 runs with
//! all subscriptions, and write perf's report and a summary of where the CPU went there;
//! see `common::perf`), `BENCH_PERF_CALL_GRAPH` [fp] (perf's `--call-graph` mode),
//! `BENCH_READER_NICE` [10] (how many nice steps below normal the subscribers' reader thread
//! runs: the readers stand for clients on other machines, so on this one they must not outrank
//! jobgate's request and commit path; 10 is what jobgate's own fan-out runs at, see
//! `--delivery-nice`; the submitters always keep normal priority).
//!
//! Every count is bounded and every wait has a time limit. Without `--bench` (as under
//! `cargo test --benches`) the program does nothing. BENCHMARKS.md has the figures.
#![allow(clippy::print_stdout)] // A benchmark's whole job is to print its figures.

#[path = "../common/mod.rs"]
mod common;
mod hub;
mod opts;
mod server;
mod submit;
mod subscriptions;

use std::sync::Arc;

use common::subscribers::open_socket;
use common::{Table, print_table};

use crate::hub::{Hub, Socket};
use crate::opts::{Opts, StoreKind, env_or};
use crate::submit::submit_throughput;
use crate::subscriptions::subscriptions;

/// The `jobEvents` selection, unless `BENCH_SELECTION` says otherwise (it must keep
/// `cursor`, `phase` and `at`, which the readers need).
const SELECTION: &str = "cursor phase at job { id }";
const UNFINISHED: &str = "{ jobs(first: 1, filter: { phases: [PENDING, RUNNING] }) { totalCount } }";
const FAILED: &str = "{ jobs(first: 1, filter: { phases: [FAILED, CANCELLED] }) { totalCount } }";

fn main() {
    common::main("load", || run(Opts::from_env()));
}

/// The runtime the submissions run on, with its own threads (see [`on_submit_runtime`]).
static SUBMITTERS: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-submitter")
        .enable_all()
        .build()
        .expect("a runtime for the submitters")
});

/// Where the subscribers' sockets live and their readers run: one thread of its own, at
/// `BENCH_READER_NICE`. One thread, because a reader that wakes on the thread that polled
/// its socket costs no cross-thread wake-up: the readers stand for clients on other
/// machines, and the less of this machine they take, the less they disturb what is
/// measured. (Made on first use, from a thread of normal priority: only its own thread is
/// lowered, never a thread that starts the server.)
static READERS: std::sync::LazyLock<tokio::runtime::Handle> = std::sync::LazyLock::new(|| {
    let nice: i32 = env_or("BENCH_READER_NICE", 10);
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("bench-readers".into())
        .spawn(move || {
            if nice > 0 {
                let ours = rustix::process::getpriority_process(None).unwrap_or(0);
                if let Err(e) = rustix::process::setpriority_process(None, (ours + nice).min(19)) {
                    eprintln!("could not lower the readers' priority: {e}");
                }
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the readers' runtime");
            handle_tx
                .send(runtime.handle().clone())
                .expect("the bench waits for it");
            runtime.block_on(std::future::pending::<()>());
        })
        .expect("the readers' thread");
    handle_rx.recv().expect("the readers' runtime")
});

/// A subscriber socket, opened and read on [`READERS`].
async fn open_reader(url: String, hub: Arc<Hub>) -> Result<Socket, String> {
    READERS
        .spawn(open_socket(url, hub))
        .await
        .expect("the readers' runtime runs")
}

async fn run(opts: Opts) {
    println!(
        "jobgate load bench; readers on one thread at nice {}; server binary: {}{}",
        env_or("BENCH_READER_NICE", 10),
        std::env::var("BENCH_JOBGATE").unwrap_or_else(|_| env!("CARGO_BIN_EXE_jobgate").to_owned()),
        std::env::var("BENCH_SERVER_ARGS")
            .map(|args| format!(", extra flags: {args}"))
            .unwrap_or_default()
    );
    let mut table: Table = Vec::new();
    for &store in &opts.stores {
        if store == StoreKind::Sqlite {
            for durability in &opts.durabilities {
                submit_throughput(&opts, store, durability, &mut table).await;
            }
        } else if !opts.durabilities.is_empty() {
            // SQLite's durability means nothing to PostgreSQL: one run.
            submit_throughput(&opts, store, "full", &mut table).await;
        }
    }
    if opts.subscriptions > 0 {
        subscriptions(&opts, &mut table).await;
    }
    print_table(&table, ["measurement", "figure", "value"], [44, 34, 14]);
}
