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

mod common;

use std::str::FromStr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::jobgate::{self, Process};
use common::postgres::Postgres;
use common::procfs::{self, cpu_secs, cpu_split, machine_cpu, thread_cpu};
use common::submissions::{self, Submitted};
use common::subscribers::{self, Faults, PHASES, Receiver, open_socket};
use common::{Table, WAIT, pct, print_table};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// The `jobEvents` selection, unless `BENCH_SELECTION` says otherwise (it must keep
/// `cursor`, `phase` and `at`, which the readers need).
const SELECTION: &str = "cursor phase at job { id }";
const UNFINISHED: &str = "{ jobs(first: 1, filter: { phases: [PENDING, RUNNING] }) { totalCount } }";
const FAILED: &str = "{ jobs(first: 1, filter: { phases: [FAILED, CANCELLED] }) { totalCount } }";

// ---------------------------------------------------------------------------------------------
// Options

struct Opts {
    /// The submitted job's `command`, a JSON array; `["true"]` unless told.
    command: Value,
    submits: usize,
    clients: usize,
    stores: Vec<StoreKind>,
    durabilities: Vec<String>,
    drain_secs: u64,
    subscriptions: usize,
    subs_per_socket: usize,
    lat_durability: String,
    lat_store: StoreKind,
    rates: Vec<f64>,
    rate_secs: f64,
    burst_jobs: usize,
    small_subs: usize,
    small_events_per_sec: f64,
    /// Subscribers that stop reading (on sockets with a 4 KiB receive buffer) during part 2.
    stalled: usize,
    /// Where to write a `perf` profile of the part 2 runs with all subscriptions, if anywhere.
    perf: Option<std::path::PathBuf>,
    perf_call_graph: String,
}

fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

fn env_list<T: FromStr>(name: &str, default: &str) -> Vec<T> {
    let raw = std::env::var(name).unwrap_or_else(|_| default.to_owned());
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name}: {s:?} is not a valid value"))
        })
        .collect()
}

impl Opts {
    fn from_env() -> Self {
        let command = std::env::var("BENCH_JOB_COMMAND").unwrap_or_else(|_| r#"["true"]"#.to_owned());
        let command: Value =
            serde_json::from_str(&command).expect("BENCH_JOB_COMMAND: a JSON array of strings");
        assert!(command.is_array(), "BENCH_JOB_COMMAND: a JSON array of strings");
        Self {
            command,
            submits: env_or("BENCH_SUBMITS", 2000),
            clients: env_or("BENCH_CLIENTS", 32usize).max(1),
            stores: env_list("BENCH_STORES", "sqlite"),
            durabilities: env_list("BENCH_DURABILITIES", "full,normal"),
            drain_secs: env_or("BENCH_DRAIN_SECS", 60),
            subscriptions: env_or("BENCH_SUBSCRIPTIONS", 1000),
            subs_per_socket: env_or("BENCH_SUBS_PER_SOCKET", 1usize).max(1),
            lat_durability: env_or("BENCH_LAT_DURABILITY", "full".to_owned()),
            lat_store: env_or("BENCH_LAT_STORE", StoreKind::Sqlite),
            rates: env_list("BENCH_RATES", "20,60"),
            rate_secs: env_or("BENCH_RATE_SECS", 10.0),
            burst_jobs: env_or("BENCH_BURST_JOBS", 300),
            small_subs: env_or("BENCH_SMALL_SUBS", 100),
            small_events_per_sec: env_or("BENCH_SMALL_EVENTS_PER_SEC", 200.0),
            stalled: env_or("BENCH_STALLED", 0),
            perf: std::env::var_os("BENCH_PERF")
                .filter(|d| !d.is_empty())
                .map(Into::into),
            perf_call_graph: env_or("BENCH_PERF_CALL_GRAPH", "fp".to_owned()),
        }
    }
}

/// Where the server under test keeps its jobs.
#[derive(Clone, Copy, PartialEq)]
enum StoreKind {
    /// SQLite in the data directory, at the run's `--durability`.
    Sqlite,
    /// A throwaway PostgreSQL server, commits not flushed (`fsync=off`), as the tests run it.
    Postgres,
    /// A throwaway PostgreSQL server with PostgreSQL's defaults (`fsync=on`).
    PostgresFsync,
}

impl FromStr for StoreKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sqlite" => Ok(StoreKind::Sqlite),
            "postgres" => Ok(StoreKind::Postgres),
            "postgres-fsync" => Ok(StoreKind::PostgresFsync),
            _ => Err(format!("{s:?}: one of sqlite, postgres, postgres-fsync")),
        }
    }
}

impl StoreKind {
    /// How a run on this store is named, `durability` being SQLite's.
    fn describe(self, durability: &str) -> String {
        match self {
            StoreKind::Sqlite => format!("SQLite --durability {durability}"),
            StoreKind::Postgres => "PostgreSQL fsync=off".into(),
            StoreKind::PostgresFsync => "PostgreSQL fsync=on".into(),
        }
    }

    /// A fresh PostgreSQL server for a run on this store; `None` for SQLite. It panics when
    /// PostgreSQL is not installed: a run that asked for it must not quietly measure nothing.
    fn start_postgres(self) -> Option<Postgres> {
        let start = match self {
            StoreKind::Sqlite => return None,
            StoreKind::Postgres => Postgres::start,
            StoreKind::PostgresFsync => Postgres::start_durable,
        };
        // initdb and the server's start block for a second or two.
        let pg = tokio::task::block_in_place(start);
        Some(pg.expect("BENCH_STORES asks for PostgreSQL, which is not installed here"))
    }
}

// ---------------------------------------------------------------------------------------------
// The server under test

struct Server {
    process: Process,
    /// The `submitJob` request body, serialised once.
    submit_body: Arc<String>,
    _dir: tempfile::TempDir,
    /// The PostgreSQL server the store is on, if any; dropped (killed) after jobgate.
    postgres: Option<Postgres>,
}

impl Server {
    fn start(store: StoreKind, durability: &str, job_command: &Value) -> Server {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let postgres = store.start_postgres();
        // WARN and up, plus the "listening on" line.
        let mut command = jobgate::command(durability, dir.path(), "warn,jobgate::server=info");
        // Many subscriptions share a socket in the multiplexed runs.
        command.args(["--ws-max-subscriptions", "0"]);
        if let Some(pg) = &postgres {
            command.args(["--database-url", &pg.url()]);
        }
        Server {
            process: Process::start(&mut command, WAIT, |_| false),
            submit_body: submissions::body(&json!({ "command": job_command })),
            _dir: dir,
            postgres,
        }
    }

    /// The server's resident set, in KiB.
    fn rss_kib(&self) -> u64 {
        let kib = procfs::status_kib(&self.process.pid().to_string(), "VmRSS:");
        assert!(kib > 0, "no VmRSS for jobgate");
        kib
    }

    async fn count(&self, query: &str) -> i64 {
        self.process.query(query, json!({})).await["jobs"]["totalCount"]
            .as_i64()
            .expect("totalCount")
    }
}

/// CPU use between two points, as % of one core: server, its jobs, the PostgreSQL server
/// its store is on (if any), this bench, and every other process on the machine (other
/// people's builds make figures unreliable).
struct CpuMark {
    at: Instant,
    machine: (f64, f64),
    server: [f64; 4],
    threads: std::collections::BTreeMap<String, f64>,
    bench: f64,
    pid: String,
    /// The PostgreSQL server's pid and its CPU seconds so far, backends included.
    postgres: Option<(String, f64)>,
}

impl CpuMark {
    fn new(server: &Server) -> Self {
        let pid = server.process.pid().to_string();
        Self {
            at: Instant::now(),
            machine: machine_cpu(),
            server: cpu_split(&pid),
            threads: thread_cpu(&pid),
            bench: cpu_secs("self").0,
            pid,
            postgres: server
                .postgres
                .as_ref()
                .and_then(|pg| procfs::postmaster_pid(pg.port))
                .map(|pid| {
                    let secs = procfs::tree_cpu_secs(&pid);
                    (pid, secs)
                }),
        }
    }

    fn since(&self) -> String {
        self.until(Instant::now())
    }

    /// The server's own CPU seconds (user + system, not its jobs') since the mark.
    fn server_secs(&self) -> f64 {
        let now = cpu_split(&self.pid);
        (now[0] - self.server[0]) + (now[1] - self.server[1])
    }

    /// CPU use from the mark to now, spread over the time from the mark to `end` (earlier
    /// than now when an idle tail is not to count).
    fn until(&self, end: Instant) -> String {
        let wall = end.duration_since(self.at).as_secs_f64().max(1e-9);
        let now = cpu_split(&self.pid);
        let delta: Vec<f64> = now.iter().zip(self.server).map(|(n, b)| n - b).collect();
        let (user, sys, c) = (delta[0], delta[1], delta[2] + delta[3]);
        let s = user + sys;
        let b = cpu_secs("self").0;
        let mut threads: Vec<(String, f64)> = thread_cpu(&self.pid)
            .into_iter()
            .map(|(name, secs)| {
                let delta = secs - self.threads.get(&name).copied().unwrap_or(0.0);
                (name, 100.0 * delta / wall)
            })
            .filter(|(_, p)| *p >= 0.5)
            .collect();
        threads.sort_by(|a, b| b.1.total_cmp(&a.1));
        let threads: Vec<String> = threads.iter().map(|(n, p)| format!("{n} {p:.0}%")).collect();
        let (busy, all) = machine_cpu();
        let cores = ((all - self.machine.1) / wall).round().max(1.0);
        let pg = self
            .postgres
            .as_ref()
            .map(|(pid, before)| procfs::tree_cpu_secs(pid) - before);
        let ours = s + c + (b - self.bench) + pg.unwrap_or(0.0);
        let others = ((busy - self.machine.0) - ours).max(0.0);
        format!(
            "server {:.0}% (user {:.0}%, sys {:.0}%) [{}], its jobs {:.0}%, {}bench client {:.0}%, \
             other processes (incl. running jobs) {:.0}% (% of one core of {cores}, over {:.1} s)",
            100.0 * s / wall,
            100.0 * user / wall,
            100.0 * sys / wall,
            threads.join(", "),
            100.0 * c / wall,
            pg.map(|secs| format!("PostgreSQL {:.0}%, ", 100.0 * secs / wall))
                .unwrap_or_default(),
            100.0 * (b - self.bench) / wall,
            100.0 * others / wall,
            wall
        )
    }
}

// ---------------------------------------------------------------------------------------------
// submitJob

/// `n` submissions from `clients` concurrent clients, each waiting for its answer.
async fn submit_many(server: &Server, n: usize, clients: usize) -> Submitted {
    let (url, body) = (server.process.url(), server.submit_body.clone());
    on_submit_runtime(move |http| async move { submissions::many(&http, &url, body, n, clients).await }).await
}

/// Submissions paced at `rate` per second for `secs` seconds, at most 256 in flight.
async fn submit_paced(server: &Server, rate: f64, secs: f64) -> Submitted {
    let n = (rate * secs).round().max(1.0) as usize;
    let (url, body) = (server.process.url(), server.submit_body.clone());
    on_submit_runtime(move |http| async move { submissions::paced(&http, &url, body, rate, n).await }).await
}

/// Runs a batch of submissions on a runtime of its own, with its own HTTP client. The
/// subscribers' reader tasks keep this program's main runtime busy (100,000+ frames/s), and
/// an answer must not wait behind them in its queue: that delay would be the bench's, yet
/// counted as the server's `submitJob` latency.
async fn on_submit_runtime<F, Fut>(batch: F) -> Submitted
where
    F: FnOnce(reqwest::Client) -> Fut + Send + 'static,
    Fut: Future<Output = Submitted> + Send + 'static,
{
    SUBMITTERS
        .spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(WAIT)
                .build()
                .expect("an HTTP client");
            batch(http).await
        })
        .await
        .expect("the submitters' task")
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------------------------
// Subscribers

/// One received `next` frame.
struct Sample {
    /// Which measurement was running when it arrived.
    tag: u8,
    /// Receive time, µs since the Unix epoch.
    recv_us: i64,
    /// Receive time - the event's `at`, in µs.
    lat_us: i64,
    /// The event's cursor (its sequence number in the server's event log).
    seq: i64,
    /// The event's phase, as an index of [`PHASES`].
    phase: u8,
}

/// Shared by every reader task.
#[derive(Default)]
struct Hub {
    tag: AtomicU8,
    frames: AtomicU64,
    faults: Faults,
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

type Socket = subscribers::Socket<Hub>;

/// Waits until no frame arrived for `quiet` (bounded by [`WAIT`]); returns the frame count and
/// when it last changed.
/// How many frames a job produces varies (a fast job's RUNNING and progress observations may
/// be recorded as one event or two), so the count to expect is only known afterwards.
async fn settle(hub: &Hub, quiet: Duration) -> (u64, Instant) {
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
fn take_samples(sockets: &[Socket], tag: u8) -> Vec<Vec<Sample>> {
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
struct FanOut {
    frames: usize,
    /// Distinct events seen by any subscription.
    events: usize,
    /// Frames a subscription should have had (every event, once) but did not.
    missing: usize,
    /// Frames beyond one per event and subscription.
    duplicates: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    negative: usize,
    frames_per_sec: f64,
    /// By event phase: (phase, frames, p50 ms, p99 ms).
    by_phase: Vec<(&'static str, usize, f64, f64)>,
    /// Each event's first frame (event `at` → the earliest subscriber's frame, ms): the part
    /// of the latency before the fan-out (commit, publish, render); p50 and p99 over events.
    first_frame_ms: (f64, f64),
    /// Each event's spread (its last frame's receive time − its first's, ms): the fan-out
    /// itself; p50 and p99 over events.
    spread_ms: (f64, f64),
}

/// `per_socket` subscriptions share each socket, so each event should reach each socket
/// `per_socket` times.
fn fan_out(per_socket_samples: &[Vec<Sample>], per_socket: usize) -> Option<FanOut> {
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

// ---------------------------------------------------------------------------------------------
// Main

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

fn report_problems(server: &Server, table: &mut Table, what: &str) {
    let problems = server.process.problems();
    table.push((
        what.into(),
        "server WARN/ERROR log lines".into(),
        problems.len().to_string(),
    ));
    for line in problems.iter().take(5) {
        println!("  server logged: {line}");
    }
}

async fn submit_throughput(opts: &Opts, store: StoreKind, durability: &str, table: &mut Table) {
    let what = format!("1. submitJob, {}", store.describe(durability));
    println!("\n== {what}: {} jobs from {} clients", opts.submits, opts.clients);
    let mut server = Server::start(store, durability, &opts.command);
    // Warm-up: connections, statement cache, the first commit.
    submit_many(&server, 2 * opts.clients, opts.clients)
        .await
        .assert_all_accepted("warm-up submissions");

    let cpu = CpuMark::new(&server);
    let started = Instant::now();
    let mut result = submit_many(&server, opts.submits, opts.clients).await;
    println!("  cpu while submitting: {}", cpu.since());
    result.latencies.sort_unstable();
    let rate = result.ids.len() as f64 / result.elapsed.as_secs_f64();
    println!(
        "  accepted {} in {:.2} s: {rate:.0} jobs/s; latency p50 {} ms, p99 {} ms, max {} ms; {} errors",
        result.ids.len(),
        result.elapsed.as_secs_f64(),
        ms(pct(&result.latencies, 50.0)),
        ms(pct(&result.latencies, 99.0)),
        ms(*result.latencies.last().unwrap()),
        result.errors.len()
    );
    for e in result.errors.iter().take(5) {
        println!("  error: {e}");
    }
    table.push((what.clone(), "accepted jobs/s".into(), format!("{rate:.0}")));
    table.push((
        what.clone(),
        "submitJob p50 / p99 (ms)".into(),
        format!(
            "{} / {}",
            ms(pct(&result.latencies, 50.0)),
            ms(pct(&result.latencies, 99.0))
        ),
    ));
    table.push((what.clone(), "errors".into(), result.errors.len().to_string()));

    // How long until every accepted job has run (bounded): the executor's pace.
    let mut unfinished = server.count(UNFINISHED).await;
    let drain_limit = Duration::from_secs(opts.drain_secs);
    while unfinished > 0 && started.elapsed() < drain_limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
        unfinished = server.count(UNFINISHED).await;
    }
    let failed = server.count(FAILED).await;
    let done = started.elapsed().as_secs_f64();
    println!(
        "  all jobs finished {done:.2} s after the first submission ({unfinished} still unfinished, \
         {failed} failed or cancelled); cpu: {}",
        cpu.since()
    );
    table.push((
        what.clone(),
        "submit → all finished (s)".into(),
        if unfinished == 0 {
            format!("{done:.1}")
        } else {
            format!(">{done:.0} ({unfinished} left)")
        },
    ));
    report_problems(&server, table, &what);
    println!("  server stopped: {}", server.process.stop().await);
}

/// Most sockets this process may open, keeping room for everything else. jobgate, started
/// with the same limit, accepts at most that limit less 256 connections (its default
/// `--max-connections`), so the budget stays 64 below that, for the HTTP clients.
fn socket_budget() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1024);
    soft.saturating_sub(256 + 64).max(1)
}

async fn subscriptions(opts: &Opts, table: &mut Table) {
    let mut per_socket = opts.subs_per_socket;
    let budget = socket_budget();
    if opts.subscriptions.div_ceil(per_socket) > budget {
        per_socket = opts.subscriptions.div_ceil(budget);
        println!(
            "RLIMIT_NOFILE allows about {budget} sockets: carrying {per_socket} subscriptions per socket \
             (raise `ulimit -n` for one socket each)"
        );
    }
    let n_sockets = opts.subscriptions.div_ceil(per_socket);
    let total_subs = n_sockets * per_socket;
    let what_mem = format!("3. memory, {total_subs} subs on {n_sockets} sockets");
    println!(
        "\n== 2/3. {total_subs} jobEvents subscriptions on {n_sockets} WebSockets ({per_socket} each), \
         {}",
        opts.lat_store.describe(&opts.lat_durability)
    );
    let mut server = Server::start(opts.lat_store, &opts.lat_durability, &opts.command);
    let hub = Arc::new(Hub::default());

    // Warm-up: one subscriber sees a few jobs; then it goes away.
    {
        let mut socket = open_reader(server.process.ws_url(), hub.clone())
            .await
            .expect("warm-up socket");
        subscribe(&mut socket, "w").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        submit_many(&server, 10, 4)
            .await
            .assert_all_accepted("warm-up submissions");
        settle(&hub, Duration::from_millis(700)).await;
    }
    hub.frames.store(0, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0 = server.rss_kib();

    // Sockets, acknowledged, no subscription yet.
    let t0 = Instant::now();
    let opened: Vec<Result<Socket, String>> = futures::stream::iter(0..n_sockets)
        .map(|_| open_reader(server.process.ws_url(), hub.clone()))
        .buffer_unordered(64)
        .collect()
        .await;
    let mut sockets = Vec::with_capacity(n_sockets);
    let mut failures = Vec::new();
    for socket in opened {
        match socket {
            Ok(s) => sockets.push(s),
            Err(e) => failures.push(e),
        }
    }
    println!(
        "  opened {} sockets in {:.2} s ({} failed{})",
        sockets.len(),
        t0.elapsed().as_secs_f64(),
        failures.len(),
        failures
            .first()
            .map(|e| format!(", first: {e}"))
            .unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = server.rss_kib();

    // Subscriptions, idle.
    let t0 = Instant::now();
    for socket in &mut sockets {
        for i in 0..per_socket {
            subscribe(socket, &format!("s{i}")).await;
        }
    }
    let live_subs = (sockets.len() * per_socket) as u64;
    println!(
        "  sent {live_subs} subscribe messages in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss2 = server.rss_kib();

    // A probe job: every subscription must see it; gives the events per job.
    hub.tag.store(0, Ordering::Relaxed);
    submit_many(&server, 1, 1)
        .await
        .assert_all_accepted("probe submission");
    let (seen, _) = settle(&hub, Duration::from_secs(2)).await;
    let events_per_job = seen as f64 / live_subs as f64;
    println!(
        "  probe job: {seen} frames over {live_subs} subscriptions = {events_per_job:.2} events per job"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss3 = server.rss_kib();
    take_samples(&sockets, 0);

    let kib = |a: u64, b: u64, n: u64| (b as f64 - a as f64) / n.max(1) as f64;
    println!(
        "  server VmRSS: {rss0} KiB idle, {rss1} with {} sockets, {rss2} with {live_subs} idle \
         subscriptions, {rss3} after one event delivered to each",
        sockets.len()
    );
    table.push((
        what_mem.clone(),
        "server VmRSS before (KiB)".into(),
        rss0.to_string(),
    ));
    table.push((
        what_mem.clone(),
        "per socket, acked (KiB)".into(),
        format!("{:.1}", kib(rss0, rss1, sockets.len() as u64)),
    ));
    table.push((
        what_mem.clone(),
        "per subscription, idle (KiB)".into(),
        format!("{:.1}", kib(rss1, rss2, live_subs)),
    ));
    table.push((
        what_mem.clone(),
        "per socket+subscription, idle (KiB)".into(),
        format!("{:.1}", kib(rss0, rss2, live_subs)),
    ));
    table.push((
        what_mem.clone(),
        "per sub, after 1 delivery (KiB)".into(),
        format!("{:.1}", kib(rss0, rss3, live_subs)),
    ));

    // Subscribers that never read again: the server must close them (slow consumer) without
    // the others noticing. Held, unread, until part 2 ends.
    let stalled = open_stalled(&server, opts.stalled).await;
    // Where the server's CPU goes while it fans out to every subscription (opt-in).
    let recording = opts.perf.as_deref().map(|dir| {
        println!("  perf record of the server into {}", dir.display());
        common::perf::record(
            server.process.pid(),
            dir,
            &format!("part2-{live_subs}subs"),
            &opts.perf_call_graph,
        )
    });

    // Steady rates.
    let mut tag = 1u8;
    for &rate in &opts.rates {
        let what = format!(
            "2. {live_subs} subs, {rate} jobs/s (~{:.0} ev/s)",
            rate * events_per_job
        );
        measure(&server, &hub, &sockets, tag, &what, per_socket, table, async {
            submit_paced(&server, rate, opts.rate_secs).await
        })
        .await;
        tag += 1;
    }

    // A burst: the fan-out capacity.
    if opts.burst_jobs > 0 {
        let what = format!("2. {live_subs} subs, burst of {} jobs", opts.burst_jobs);
        measure(&server, &hub, &sockets, tag, &what, per_socket, table, async {
            submit_many(&server, opts.burst_jobs, opts.clients).await
        })
        .await;
        tag += 1;
    }

    if let Some(recording) = recording {
        let summary = tokio::task::block_in_place(|| recording.finish());
        println!("\n-- perf profile of the runs with {live_subs} subscriptions\n\n{summary}");
    }

    // The design's latency point: 200 events/s to 100 subscribers.
    if opts.small_subs > 0 && opts.small_events_per_sec > 0.0 {
        let keep = opts.small_subs.div_ceil(per_socket).min(sockets.len());
        sockets.truncate(keep);
        let small_subs = (keep * per_socket) as u64;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rate = opts.small_events_per_sec / events_per_job.max(1.0);
        let what = format!(
            "2. {small_subs} subs, {} ev/s ({rate:.1} jobs/s)",
            opts.small_events_per_sec
        );
        measure(&server, &hub, &sockets, tag, &what, per_socket, table, async {
            submit_paced(&server, rate, opts.rate_secs).await
        })
        .await;
    }

    let bad = hub.faults.count.load(Ordering::Relaxed);
    println!("  unexpected frames or socket ends: {bad}");
    for example in hub.faults.examples.lock().unwrap().iter() {
        println!("    {example}");
    }
    table.push((
        "2. all subscription runs".into(),
        "unexpected frames/closes".into(),
        bad.to_string(),
    ));
    if !stalled.is_empty() {
        let metrics = server
            .process
            .http
            .get(server.process.url().replace("/graphql", "/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap_or_default();
        let closed = metrics
            .lines()
            .find(|l| l.starts_with("jobgate_websocket_slow_consumers_closed_total "))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("?")
            .to_owned();
        println!(
            "  stalled subscribers closed as slow consumers: {closed} of {} (each also logs a WARN line)",
            stalled.len()
        );
        table.push((
            "2. all subscription runs".into(),
            "stalled subscribers closed (slow consumer)".into(),
            format!("{closed} of {}", stalled.len()),
        ));
    }
    report_problems(&server, table, "2. all subscription runs");
    drop(stalled);
    drop(sockets);
    println!("  server stopped: {}", server.process.stop().await);
}

/// `n` sockets with a 4 KiB receive buffer (so the server's queue fills after little data),
/// each with the part's subscription, which are then never read.
async fn open_stalled(
    server: &Server,
    n: usize,
) -> Vec<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>> {
    if n == 0 {
        return Vec::new();
    }
    let url = server.process.ws_url();
    let addr: std::net::SocketAddr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("the server's address");
    let selection = std::env::var("BENCH_SELECTION").unwrap_or_else(|_| SELECTION.to_owned());
    let subscribe = json!({"id": "stalled", "type": "subscribe",
        "payload": {"query": format!("subscription {{ jobEvents {{ {selection} }} }}")}});
    let mut stalled = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        let tcp = socket.connect(addr).await.expect("connect");
        let mut request = url.as_str().into_client_request().expect("a request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "graphql-transport-ws".parse().expect("a valid header value"),
        );
        let (mut ws, _) = tokio_tungstenite::client_async(request, tcp)
            .await
            .expect("handshake");
        ws.send(Message::text(r#"{"type":"connection_init","payload":{}}"#))
            .await
            .expect("init");
        while let Some(Ok(frame)) = ws.next().await {
            if matches!(&frame, Message::Text(t) if t.as_str().contains("connection_ack")) {
                break;
            }
        }
        ws.send(Message::text(subscribe.to_string()))
            .await
            .expect("subscribe");
        stalled.push(ws);
    }
    println!("  {n} stalled subscribers (4 KiB receive buffer, never read) opened");
    stalled
}

async fn subscribe(socket: &mut Socket, id: &str) {
    static QUERY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let query = QUERY.get_or_init(|| {
        let selection = std::env::var("BENCH_SELECTION").unwrap_or_else(|_| SELECTION.to_owned());
        format!("subscription {{ jobEvents {{ {selection} }} }}")
    });
    let message = json!({ "id": id, "type": "subscribe", "payload": { "query": query } });
    socket
        .sink
        .send(Message::text(message.to_string()))
        .await
        .expect("send subscribe");
}

/// Runs one submission pattern while every subscriber records what it receives.
#[allow(clippy::too_many_arguments)]
async fn measure(
    server: &Server,
    hub: &Hub,
    sockets: &[Socket],
    tag: u8,
    what: &str,
    per_socket: usize,
    table: &mut Table,
    submissions: impl Future<Output = Submitted>,
) {
    println!("\n-- {what}");
    hub.tag.store(tag, Ordering::Relaxed);
    let cpu = CpuMark::new(server);
    let mut submitted = submissions.await;
    let submit_secs = submitted.elapsed.as_secs_f64();
    let submissions_done = Instant::now();
    let (_, last_frame) = settle(hub, Duration::from_secs(2)).await;
    // Read now: the 2 s of quiet `settle` waited for cost the server next to nothing.
    let server_secs = cpu.server_secs();
    println!(
        "  frames stopped {:.2} s after the last submission's answer; cpu until then: {}",
        last_frame
            .saturating_duration_since(submissions_done)
            .as_secs_f64(),
        cpu.until(last_frame.max(submissions_done))
    );
    submitted.latencies.sort_unstable();
    let achieved = submitted.ids.len() as f64 / submit_secs;
    println!(
        "  submitted {} jobs in {submit_secs:.2} s ({achieved:.1} jobs/s, submitJob p50 {} ms, p99 {} ms, \
         {} errors)",
        submitted.ids.len(),
        ms(pct(&submitted.latencies, 50.0)),
        ms(pct(&submitted.latencies, 99.0)),
        submitted.errors.len()
    );
    for e in submitted.errors.iter().take(5) {
        println!("  error: {e}");
    }
    table.push((
        what.into(),
        "jobs/s; submitJob p50 / p99 (ms)".into(),
        format!(
            "{achieved:.1}; {} / {}",
            ms(pct(&submitted.latencies, 50.0)),
            ms(pct(&submitted.latencies, 99.0))
        ),
    ));
    let samples = take_samples(sockets, tag);
    let Some(f) = fan_out(&samples, per_socket) else {
        println!("  no frames");
        table.push((what.into(), "frames".into(), "0".into()));
        return;
    };
    println!(
        "  {} frames for {} events ({:.2} per job) to {} subscriptions: {} missing, {} duplicated",
        f.frames,
        f.events,
        f.events as f64 / submitted.ids.len().max(1) as f64,
        sockets.len() * per_socket,
        f.missing,
        f.duplicates
    );
    println!(
        "  event at → frame received: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} negative); \
         {:.0} frames/s while frames arrived",
        f.p50_ms, f.p99_ms, f.max_ms, f.negative, f.frames_per_sec
    );
    println!(
        "  per event: at → first frame p50 {:.2} ms, p99 {:.2} ms (commit, publish, render); \
         first → last frame p50 {:.2} ms, p99 {:.2} ms (the fan-out)",
        f.first_frame_ms.0, f.first_frame_ms.1, f.spread_ms.0, f.spread_ms.1
    );
    // Everything the server did in the part counts (accepting and launching the jobs too), so
    // this is an upper bound on the cost of delivering a frame.
    let us_per_frame = 1e6 * server_secs / f.frames.max(1) as f64;
    println!(
        "  server CPU per delivered frame: {us_per_frame:.2} µs ({server_secs:.2} s for {} frames)",
        f.frames
    );
    table.push((
        what.into(),
        "server CPU per frame (µs)".into(),
        format!("{us_per_frame:.2}"),
    ));
    for (phase, n, p50, p99) in &f.by_phase {
        println!("    {phase:<9} events: {n:>8} frames, p50 {p50:.2} ms, p99 {p99:.2} ms");
    }
    table.push((
        what.into(),
        "frames (missing, duplicated)".into(),
        format!("{} ({}, {})", f.frames, f.missing, f.duplicates),
    ));
    table.push((
        what.into(),
        "latency p50 / p99 (ms)".into(),
        format!("{:.2} / {:.2}", f.p50_ms, f.p99_ms),
    ));
    table.push((what.into(), "latency max (ms)".into(), format!("{:.1}", f.max_ms)));
    table.push((
        what.into(),
        "frames/s delivered".into(),
        format!("{:.0}", f.frames_per_sec),
    ));
}
