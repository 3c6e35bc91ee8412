//! Benchmark of several jobgate replicas sharing one PostgreSQL database: the real `jobgate`
//! binary (`--executor kubernetes --database-url …`), `--replicas` (3) of it, against the
//! Kubernetes API emulator (`tests/kube-emulator`) started in this process and a throwaway
//! PostgreSQL server (tests/common/postgres.rs), everything on 127.0.0.1 only.
//!
//! `cargo bench --bench replicas` builds `jobgate` with the bench profile (optimised, as
//! `--release`) and hands its path to this program as `CARGO_BIN_EXE_jobgate`. It measures:
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
//!
//! The PostgreSQL server runs with `fsync=off` (as the tests run it) unless
//! `--postgres-fsync on`. Options are `--name value` after `--` on cargo's command line, e.g.
//! `cargo bench --bench replicas -- --subs 100`. Every count is bounded and every wait has a
//! time limit. Without `--bench` (as under `cargo test --benches`) the program does nothing.
//! BENCHMARKS.md has the figures.
#![allow(clippy::print_stdout)] // A benchmark's whole job is to print its figures.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::jobgate::{self, Process};
use common::postgres::Postgres;
use common::procfs;
use common::submissions::{self, Submitted};
use common::subscribers::{self, Faults, PHASES, Receiver, open_socket};
use common::{Table, WAIT, pct, print_table};
use futures::SinkExt;
use kube_emulator::{Emulator, Options, SimConfig};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const SUBSCRIBE: &str = "subscription { jobEvents { cursor phase at job { id } } }";

/// Index of SUCCEEDED in [`PHASES`].
const SUCCEEDED: u8 = 2;

// ---------------------------------------------------------------------------------------------
// Options

/// Command-line options, `--name value`.
struct Args {
    replicas: usize,
    subs: usize,
    sockets: usize,
    jobs: usize,
    rate: f64,
    run_ms: u64,
    steady_jobs: usize,
    steady_secs: u64,
    clients: usize,
    /// PostgreSQL's `fsync`, `synchronous_commit` and `full_page_writes`.
    postgres_fsync: bool,
}

impl Args {
    fn parse() -> Args {
        let mut map: HashMap<String, String> = HashMap::new();
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(name) = args.next() {
            let Some(key) = name.strip_prefix("--") else {
                panic!("unexpected argument {name:?}; options are --name value");
            };
            let value = args.next().unwrap_or_else(|| panic!("--{key} needs a value"));
            map.insert(key.to_owned(), value);
        }
        fn get<T: FromStr>(map: &mut HashMap<String, String>, key: &str, default: T) -> T {
            match map.remove(key) {
                Some(v) => v.parse().unwrap_or_else(|_| panic!("--{key} {v:?} is not valid")),
                None => default,
            }
        }
        let fsync: String = get(&mut map, "postgres-fsync", "off".to_owned());
        let args = Args {
            // At most 16: each replica holds up to 17 of the server's 200 connections.
            replicas: get(&mut map, "replicas", 3usize).clamp(1, 16),
            subs: get(&mut map, "subs", 1000usize).clamp(1, 100_000),
            sockets: get(&mut map, "sockets", 30usize).clamp(1, 10_000),
            jobs: get(&mut map, "jobs", 200usize).clamp(1, 100_000),
            rate: get(&mut map, "rate", 10.0f64).clamp(0.1, 1000.0),
            run_ms: get(&mut map, "run-ms", 500),
            steady_jobs: get(&mut map, "steady-jobs", 300usize).min(100_000),
            steady_secs: get(&mut map, "steady-secs", 30u64).clamp(1, 600),
            clients: get(&mut map, "clients", 32usize).clamp(1, 256),
            postgres_fsync: match fsync.as_str() {
                "on" => true,
                "off" => false,
                other => panic!("--postgres-fsync {other:?}: on or off"),
            },
        };
        if let Some(unknown) = map.keys().next() {
            panic!("unknown option --{unknown}; see the module's docs");
        }
        args
    }
}

// ---------------------------------------------------------------------------------------------
// The emulated cluster, the database and the replicas

/// An emulator without core/v1 Events from its simulated controllers, and a kubeconfig that
/// points at it.
struct Cluster {
    emu: Emulator,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let options = Options {
            simulation: SimConfig {
                events: false,
                ..SimConfig::default()
            },
            ..Options::default()
        };
        let emu = Emulator::start_with(options)
            .await
            .expect("starting the emulator");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        emu.write_kubeconfig(&kubeconfig, "default")
            .expect("writing the kubeconfig");
        Cluster {
            emu,
            kubeconfig,
            _dir: dir,
        }
    }
}

/// One replica: a jobgate process with a data directory of its own, on the shared database.
struct Replica {
    process: Process,
    /// ERROR lines tower-http logged for the bench's own /readyz probes answered 503.
    not_ready: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl Replica {
    /// Starts a replica and returns once `/readyz` answers 200 (or panics after [`WAIT`]).
    async fn start(cluster: &Cluster, database_url: &str) -> Replica {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // WARN and up, plus the "listening on" line.
        let mut command = jobgate::command("full", dir.path(), "warn,jobgate::server=info");
        command
            .args(["--executor", "kubernetes", "--kubeconfig"])
            .arg(&cluster.kubeconfig)
            .args(["--database-url", database_url])
            // Each socket carries more subscriptions than the default cap with few sockets.
            .args(["--ws-max-subscriptions", "0"])
            .env_remove("KUBECONFIG");
        let not_ready = Arc::new(AtomicU64::new(0));
        let sink = not_ready.clone();
        // Starting blocks on the log; the emulator's tasks run on this runtime meanwhile.
        let process = tokio::task::block_in_place(|| {
            Process::start(&mut command, WAIT, move |line| {
                let probe = line.contains("tower_http::trace::on_failure") && line.contains("503");
                if probe {
                    sink.fetch_add(1, Ordering::Relaxed);
                }
                probe
            })
        });
        let replica = Replica {
            process,
            not_ready,
            _dir: dir,
        };
        let url = format!("http://{}/readyz", replica.process.addr);
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(r) = replica.process.http.get(&url).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return replica;
            }
            assert!(Instant::now() < deadline, "replica not ready within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many jobs are in these phases (e.g. `RUNNING`), as this replica reads them.
    async fn count(&self, phases: &str) -> i64 {
        let query = format!("{{ jobs(first: 1, filter: {{ phases: [{phases}] }}) {{ totalCount }} }}");
        self.process.query(&query, json!({})).await["jobs"]["totalCount"]
            .as_i64()
            .expect("totalCount")
    }
}

/// CPU use between two points, as % of one core: the replicas, the PostgreSQL server, this
/// process (the bench's clients and the emulator), and every other process.
struct CpuMark {
    at: Instant,
    replicas: Vec<(String, f64)>,
    /// The PostgreSQL server's pid and its CPU seconds so far, backends included.
    postgres: Option<(String, f64)>,
    bench: f64,
    machine: f64,
}

impl CpuMark {
    fn new(replicas: &[Replica], postgres: &Postgres) -> CpuMark {
        CpuMark {
            at: Instant::now(),
            replicas: replicas
                .iter()
                .map(|r| {
                    let pid = r.process.pid().to_string();
                    let secs = procfs::cpu_secs(&pid).0;
                    (pid, secs)
                })
                .collect(),
            postgres: procfs::postmaster_pid(postgres.port).map(|pid| {
                let secs = procfs::tree_cpu_secs(&pid);
                (pid, secs)
            }),
            bench: procfs::cpu_secs("self").0,
            machine: procfs::machine_cpu().0,
        }
    }

    fn since(&self) -> String {
        let wall = self.at.elapsed().as_secs_f64().max(1e-9);
        let used: Vec<f64> = self
            .replicas
            .iter()
            .map(|(pid, before)| procfs::cpu_secs(pid).0 - before)
            .collect();
        let bench = procfs::cpu_secs("self").0 - self.bench;
        let pg = self
            .postgres
            .as_ref()
            .map_or(0.0, |(pid, before)| procfs::tree_cpu_secs(pid) - before);
        let others =
            (procfs::machine_cpu().0 - self.machine - used.iter().sum::<f64>() - bench - pg).max(0.0);
        let replicas: Vec<String> = used.iter().map(|s| format!("{:.0}%", 100.0 * s / wall)).collect();
        format!(
            "replicas {}, PostgreSQL {:.0}%, bench+emulator {:.0}%, other processes {:.0}% \
             (of one core, over {wall:.1} s)",
            replicas.join(" / "),
            100.0 * pg / wall,
            100.0 * bench / wall,
            100.0 * others / wall
        )
    }
}

/// A job for the emulated kubelet: `run_ms` of running, then held by `gate` if one is named.
fn job_input(run_ms: u64, gate: Option<&str>) -> Value {
    let mut env = vec![json!({ "name": "EMULATOR_RUN_MS", "value": run_ms.to_string() })];
    if let Some(gate) = gate {
        env.push(json!({ "name": "EMULATOR_GATE", "value": gate }));
    }
    json!({ "image": "busybox:1.36", "command": ["echo", "hello"], "env": env })
}

// ---------------------------------------------------------------------------------------------
// Subscribers

/// One received `next` frame.
struct Sample {
    /// Receive time − the event's `at`, µs.
    lat_us: i64,
    recv_us: i64,
    seq: i64,
    /// The subscription's number (`s<n>`), unique over all sockets.
    sub: u32,
    phase: u8,
}

/// Shared by every reader task.
#[derive(Default)]
struct Hub {
    frames: AtomicU64,
    succeeded: AtomicU64,
    faults: Faults,
    /// Samples are kept only while set (the measured run).
    recording: AtomicBool,
}

impl Receiver for Hub {
    type Sample = Sample;

    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Sample>>) {
        let event = match subscribers::event(text) {
            Ok(Some(event)) => event,
            Ok(None) => return self.fault(format!("no at, cursor or phase in: {text}")),
            Err(unexpected) => return self.fault(unexpected),
        };
        // The subscription's id comes first in the frame; a job id (a UUID) never has an `s`.
        let sub = text
            .split(r#""id":"s"#)
            .nth(1)
            .and_then(|rest| rest[..rest.find('"')?].parse().ok());
        let Some(sub) = sub else {
            return self.fault(format!("no subscription id in: {text}"));
        };
        self.frames.fetch_add(1, Ordering::Relaxed);
        if event.phase == SUCCEEDED {
            self.succeeded.fetch_add(1, Ordering::Relaxed);
        }
        if self.recording.load(Ordering::Relaxed) {
            let lat_us = (now - event.at.with_timezone(&Utc))
                .num_microseconds()
                .unwrap_or(i64::MAX);
            samples.lock().unwrap().push(Sample {
                lat_us,
                recv_us: now.timestamp_micros(),
                seq: event.seq,
                sub,
                phase: event.phase,
            });
        }
    }

    fn fault(&self, what: String) {
        self.faults.record(what);
    }
}

type Socket = subscribers::Socket<Hub>;

/// Opens `n_sockets` sockets, socket `i` on replica `i % replicas.len()`, and subscribes
/// `subs` times, subscription `s<k>` on socket `k % n_sockets`.
async fn open_subscribers(
    replicas: &[Replica],
    hub: &Arc<Hub>,
    n_sockets: usize,
    subs: usize,
) -> Vec<Socket> {
    let mut sockets = Vec::with_capacity(n_sockets);
    for i in 0..n_sockets {
        let replica = &replicas[i % replicas.len()];
        let socket = open_socket(replica.process.ws_url(), hub.clone())
            .await
            .expect("opening a subscriber socket");
        sockets.push(socket);
    }
    for k in 0..subs {
        let message =
            json!({ "id": format!("s{k}"), "type": "subscribe", "payload": { "query": SUBSCRIBE } });
        sockets[k % n_sockets]
            .sink
            .send(Message::text(message.to_string()))
            .await
            .expect("send subscribe");
    }
    sockets
}

/// Waits until `counter` reaches `target`; false after `limit`.
async fn reach(counter: &AtomicU64, target: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while counter.load(Ordering::Relaxed) < target {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// Waits until no frame arrived for `quiet` (at most `limit`).
async fn settle(hub: &Hub, quiet: Duration, limit: Duration) {
    let started = Instant::now();
    let mut last = hub.frames.load(Ordering::Relaxed);
    let mut last_change = Instant::now();
    while started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = hub.frames.load(Ordering::Relaxed);
        if now != last {
            last = now;
            last_change = Instant::now();
        } else if last_change.elapsed() > quiet {
            return;
        }
    }
}

/// "p50 / p99 / max" of µs values, in ms.
fn summary_ms(values: &mut [i64]) -> String {
    if values.is_empty() {
        return "no samples".into();
    }
    values.sort_unstable();
    let ms = |v: i64| v as f64 / 1e3;
    format!(
        "{:.2} / {:.2} / {:.2}",
        ms(pct(values, 50.0)),
        ms(pct(values, 99.0)),
        ms(*values.last().unwrap())
    )
}

fn push(table: &mut Table, what: &str, figure: &str, value: String) {
    println!("  {figure}: {value}");
    table.push((what.to_owned(), figure.to_owned(), value));
}

/// API requests counted by the emulator since its last reset, per minute over `window`.
fn requests_per_minute(cluster: &Cluster, window: Duration) -> String {
    let counted = cluster.emu.requests();
    let verbs: Vec<String> = counted
        .by_verb
        .iter()
        .map(|(verb, count)| format!("{verb} {count}"))
        .collect();
    format!(
        "{:.1} ({} in {:.1} s: {}; {} open watches)",
        counted.total as f64 * 60.0 / window.as_secs_f64().max(1e-9),
        counted.total,
        window.as_secs_f64(),
        if verbs.is_empty() {
            "none".into()
        } else {
            verbs.join(", ")
        },
        counted.open_watches
    )
}

// ---------------------------------------------------------------------------------------------
// Main

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
    let mut replicas = Vec::with_capacity(args.replicas);
    for _ in 0..args.replicas {
        replicas.push(Replica::start(&cluster, &postgres.url()).await);
    }
    let hub = Arc::new(Hub::default());
    let sockets = open_subscribers(&replicas, &hub, args.sockets, args.subs).await;
    println!(
        "\n== {} replicas (--executor kubernetes) on one PostgreSQL (fsync={}); {} jobEvents \
         subscriptions on {} sockets spread over them; jobs submitted through replica 0",
        args.replicas,
        if args.postgres_fsync { "on" } else { "off" },
        args.subs,
        args.sockets
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

    latency(&args, &cluster, &postgres, &replicas, &hub, &sockets, &mut table).await;
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
        "unexpected frames or socket ends",
        bad.to_string(),
    );
    drop(sockets);
    for (i, replica) in replicas.iter_mut().enumerate() {
        let problems = replica.process.problems();
        for line in problems.iter().take(5) {
            println!("  replica {i} logged: {line}");
        }
        push(
            &mut table,
            what,
            &format!("replica {i}: WARN/ERROR lines (+ /readyz 503 lines); stop"),
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

/// Part 1 (and the requests made meanwhile): jobs paced through replica 0, frames on all.
async fn latency(
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

/// Part 2: API requests per minute with jobs held running and the subscribers connected.
async fn steady(
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
