//! Scale benchmark of a real `jobgate` server on this machine, over 127.0.0.1 only:
//! bulk submission throughput, reads at a million jobs, retention, and the local queue at
//! 10,000 waiting jobs.
//!
//! `cargo bench --bench scale` builds the `jobgate` binary with the bench profile and runs it
//! (common::jobgate) with a temporary data directory on SQLite (`--durability full`, the
//! default), as these parts:
//!
//! 1. **bulk**: `submitJobs` calls of `BENCH_BULK_SIZE` jobs from `BENCH_BULK_CLIENTS`
//!    concurrent HTTP clients, `BENCH_BULK_CALLS` calls in all, on a fresh server for each of
//!    two kinds of job:
//!    - `run`: plain `["true"]` jobs, accepted while the local executor launches and runs them
//!      as fast as it can on the same two cores (it runs a few hundred a second, so it falls
//!      behind at once: acceptance is measured as the answers, each durable, and execution as
//!      the time until the last job finished, separately).
//!    - `held`: every job depends on one job that sleeps for the whole run, so it is accepted,
//!      durable and answered, but nothing is launched. Each such job costs more than a plain
//!      one (an edge in `job_dependencies`, a second event `WaitingForDependencies`, and it
//!      takes the path of a single submission: a few statements each), so this is the rate
//!      for jobs with dependencies, not a bound of plain acceptance.
//!
//!    Printed: accepted jobs/s (jobs accepted / wall time of all calls), the p50/p99 of one
//!    call's answer time, and for `run` the jobs finished per second until the last one.
//! 2. **million**: a store of `BENCH_JOBS` jobs (1,000,000) written straight into SQLite by
//!    SQL (not through the API; see [`generate`]), then jobgate started on it, and each read the
//!    API and the dashboard make timed `BENCH_REPEAT` times in a row over HTTP (p50/p99/max
//!    per request): the `jobs` page as the dashboard asks it (25 rows with `totalCount`) first
//!    and deep (after a cursor halfway and near the end), with each filter (phase, namespace,
//!    name, combined) and as a caller scoped to two namespaces; `jobStats`; `namespaces`; the
//!    dashboard's three initial queries together. Also the start-up time of jobgate on that
//!    store (which loads its unfinished jobs).
//! 3. **retention** (only when asked: `BENCH_PARTS=retention`; see [`retention`]): a copy of
//!    that store, where 29 in 30 finished jobs are older than `BENCH_RETENTION_DAYS` [1],
//!    with `submitJob` paced at `BENCH_RETENTION_RATE` [50] per second over HTTP, first for
//!    `BENCH_RETENTION_IDLE_SECS` [30] on jobgate with retention off, then on jobgate with
//!    `--retention-days` for as long as its first sweep runs, then as long again on that
//!    server once the sweep is over. Printed: the p50/p99/max of `submitJob` in each phase,
//!    the jobs the sweep deleted, how long it took and the jobs deleted per second.
//! 4. **queue** (only when asked: `BENCH_PARTS=queue`; see [`queue`]): the local queue's
//!    overhead with `BENCH_QUEUE_JOBS` [10000] jobs waiting behind `--max-running 1`, spread
//!    over `BENCH_QUEUE_NAMESPACES` [4] namespaces: acceptance against an uncapped server,
//!    the time from a slot freeing to the next launch (`BENCH_QUEUE_LAUNCHES` [20] samples),
//!    reads of the queue's positions, RSS per waiting job, and a restart on that store.
//!
//! Knobs (environment variables; defaults in brackets): `BENCH_PARTS` [bulk,million],
//! `BENCH_BULK_CALLS` [40], `BENCH_BULK_SIZE` [1000], `BENCH_BULK_CLIENTS` [2],
//! `BENCH_BULK_KINDS` [run,held], `BENCH_JOBS` [1000000], `BENCH_REPEAT` [200],
//! `BENCH_KEEP` [unset: a directory to keep the generated store in, and to reuse it from if
//! it is there; the retention part sweeps a copy of it], `BENCH_RETENTION_DAYS`,
//! `BENCH_RETENTION_RATE`, `BENCH_RETENTION_IDLE_SECS`, `BENCH_RETENTION_BATCH` [unset: jobgate's
//! default `--retention-batch`], `BENCH_QUEUE_JOBS`, `BENCH_QUEUE_NAMESPACES`,
//! `BENCH_QUEUE_LAUNCHES`.
//!
//! Every wait has a time limit. Without `--bench` (as under `cargo test --benches`) the
//! program does nothing. BENCHMARKS.md has the figures.
#![allow(clippy::print_stdout)] // A benchmark's whole job is to print its figures.

mod bulk;
#[path = "../common/mod.rs"]
mod common;
mod million;
mod queue;
mod retention;

use std::path::PathBuf;
use std::time::Duration;

use common::{Table, print_table};

use crate::bulk::bulk;
use crate::million::million;
use crate::queue::queue;
use crate::retention::retention;

struct Opts {
    parts: Vec<String>,
    bulk_calls: usize,
    bulk_size: usize,
    bulk_clients: usize,
    bulk_kinds: Vec<String>,
    jobs: i64,
    repeat: usize,
    keep: Option<PathBuf>,
    retention_days: f64,
    retention_rate: f64,
    retention_idle: Duration,
    retention_batch: Option<String>,
    queue_jobs: usize,
    queue_namespaces: usize,
    queue_launches: usize,
}

impl Opts {
    fn from_env() -> Opts {
        let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
        let list = |name: &str, default: &str| -> Vec<String> {
            var(name, default)
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let number = |name: &str, default: &str| -> i64 {
            var(name, default)
                .parse()
                .unwrap_or_else(|_| panic!("{name} must be a number"))
        };
        Opts {
            parts: list("BENCH_PARTS", "bulk,million"),
            bulk_calls: number("BENCH_BULK_CALLS", "40") as usize,
            bulk_size: number("BENCH_BULK_SIZE", "1000") as usize,
            bulk_clients: number("BENCH_BULK_CLIENTS", "2") as usize,
            bulk_kinds: list("BENCH_BULK_KINDS", "run,held"),
            jobs: number("BENCH_JOBS", "1000000"),
            repeat: number("BENCH_REPEAT", "200") as usize,
            keep: std::env::var_os("BENCH_KEEP").map(PathBuf::from),
            retention_days: var("BENCH_RETENTION_DAYS", "1")
                .parse()
                .expect("BENCH_RETENTION_DAYS must be a number"),
            retention_rate: number("BENCH_RETENTION_RATE", "50") as f64,
            retention_idle: Duration::from_secs(number("BENCH_RETENTION_IDLE_SECS", "30") as u64),
            retention_batch: std::env::var("BENCH_RETENTION_BATCH").ok(),
            queue_jobs: number("BENCH_QUEUE_JOBS", "10000").max(1) as usize,
            queue_namespaces: number("BENCH_QUEUE_NAMESPACES", "4").max(1) as usize,
            queue_launches: number("BENCH_QUEUE_LAUNCHES", "20").max(1) as usize,
        }
    }
}

fn main() {
    common::main("scale", || run(Opts::from_env()));
}

async fn run(opts: Opts) {
    let mut table = Table::new();
    if opts.parts.iter().any(|p| p == "bulk") {
        for kind in &opts.bulk_kinds {
            bulk(&opts, kind, &mut table).await;
        }
    }
    if opts.parts.iter().any(|p| p == "million") {
        million(&opts, &mut table).await;
    }
    if opts.parts.iter().any(|p| p == "retention") {
        retention(&opts, &mut table).await;
    }
    if opts.parts.iter().any(|p| p == "queue") {
        queue(&opts, &mut table).await;
    }
    print_table(&table, ["measured", "figure", "value"], [58, 22, 14]);
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
