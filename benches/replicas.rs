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

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::jobgate::model::{SHARD_COUNT, shard_of};
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
    /// `--lease-duration-secs` of every replica.
    lease_secs: u64,
    failover_jobs: usize,
    failover_runs: usize,
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
            subs: get(&mut map, "subs", 1000usize).min(100_000),
            sockets: get(&mut map, "sockets", 30usize).clamp(1, 10_000),
            jobs: get(&mut map, "jobs", 200usize).min(100_000),
            rate: get(&mut map, "rate", 10.0f64).clamp(0.1, 1000.0),
            run_ms: get(&mut map, "run-ms", 500),
            steady_jobs: get(&mut map, "steady-jobs", 300usize).min(100_000),
            steady_secs: get(&mut map, "steady-secs", 30u64).clamp(1, 600),
            clients: get(&mut map, "clients", 32usize).clamp(1, 256),
            // jobgate's own bounds.
            lease_secs: get(&mut map, "lease-secs", 15u64).clamp(2, 300),
            failover_jobs: get(&mut map, "failover-jobs", 60usize).min(10_000),
            failover_runs: get(&mut map, "failover-runs", 3usize).clamp(1, 20),
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

/// The log lines of a replica that say when it took shards over, as the bench reads them.
const MILESTONES: [&str; 4] = [
    "shards assigned",
    "adopted the running jobs",
    "first list done",
    "joined;",
];

/// WARN and up; the "listening on" line; and the membership's, the shard keeper's and the
/// watches' info lines, for the [`MILESTONES`].
const LOG: &str = "warn,jobgate::server=info,jobgate::executor::kube::membership=info,\
                   jobgate::jobs::service::shards=info,jobgate::executor::kube::watch=info";

/// Log lines, each with the moment the bench read it.
type Lines = Vec<(DateTime<Utc>, String)>;

/// One replica: a jobgate process with a data directory of its own, on the shared database.
struct Replica {
    process: Process,
    /// Its `--replica-id`; its Lease is `jobgate-member-<id>`.
    id: String,
    /// ERROR lines tower-http logged for the bench's own /readyz probes answered 503.
    not_ready: Arc<AtomicU64>,
    /// Its [`MILESTONES`] lines, each with the moment the bench read it (ANSI colours removed).
    milestones: Arc<Mutex<Lines>>,
    _dir: tempfile::TempDir,
}

impl Replica {
    /// Starts a replica named `id` and returns once `/readyz` answers 200 (or panics after
    /// [`WAIT`]). It acts for shards only a lease duration later.
    async fn start(cluster: &Cluster, database_url: &str, lease_secs: u64, id: String) -> Replica {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut command = jobgate::command("full", dir.path(), LOG);
        command
            .args(["--executor", "kubernetes", "--kubeconfig"])
            .arg(&cluster.kubeconfig)
            .args(["--database-url", database_url])
            .args(["--lease-duration-secs", &lease_secs.to_string()])
            .args(["--replica-id", &id])
            // Each socket carries more subscriptions than the default cap with few sockets.
            .args(["--ws-max-subscriptions", "0"])
            .env_remove("KUBECONFIG");
        let not_ready = Arc::new(AtomicU64::new(0));
        let milestones = Arc::new(Mutex::new(Vec::new()));
        let (sink, lines) = (not_ready.clone(), milestones.clone());
        // Starting blocks on the log; the emulator's tasks run on this runtime meanwhile.
        let process = tokio::task::block_in_place(|| {
            Process::start(&mut command, WAIT, move |line| {
                if MILESTONES.iter().any(|m| line.contains(m)) {
                    lines.lock().unwrap().push((Utc::now(), without_colours(line)));
                }
                let probe = line.contains("tower_http::trace::on_failure") && line.contains("503");
                if probe {
                    sink.fetch_add(1, Ordering::Relaxed);
                }
                probe
            })
        });
        let replica = Replica {
            process,
            id,
            not_ready,
            milestones,
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

    /// Its `/metrics`, as text.
    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.process.addr);
        let response = self.process.http.get(&url).send().await.expect("GET /metrics");
        assert!(
            response.status().is_success(),
            "GET /metrics: {}",
            response.status()
        );
        response.text().await.expect("a /metrics body")
    }

    /// A metric without labels, as this replica reports it.
    async fn gauge(&self, name: &str) -> i64 {
        let text = self.metrics().await;
        let prefix = format!("{name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics")) as i64
    }

    /// The shards it acts for now (`jobgate_shard_acted_for{shard="N"} 1`).
    async fn acted_for(&self) -> BTreeSet<u32> {
        let text = self.metrics().await;
        text.lines()
            .filter_map(|l| l.strip_prefix("jobgate_shard_acted_for{shard=\""))
            .filter_map(|rest| {
                let (shard, value) = rest.split_once("\"} ")?;
                (value.trim().parse::<f64>().ok()? == 1.0).then(|| shard.parse().ok())?
            })
            .collect()
    }

    /// Its milestone lines containing `what`, logged after `since`.
    fn milestones_since(&self, since: DateTime<Utc>, what: &str) -> Lines {
        self.milestones
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, line)| *at >= since && line.contains(what))
            .cloned()
            .collect()
    }
}

/// `line` without ANSI colour codes (ESC `[` … `m`), so that its fields can be read.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value of `name=` in a log line (up to the next space), if any.
fn log_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=");
    let rest = &line[line.find(&key)? + key.len()..];
    Some(rest.split(' ').next().unwrap_or(rest))
}

/// Waits until `replicas` divide the 32 shards between them, each acting for some; the
/// shards each owns, or `None` after `limit`.
async fn until_shards_divided(replicas: &[Replica], limit: Duration) -> Option<Vec<i64>> {
    let deadline = Instant::now() + limit;
    loop {
        let owned: Vec<i64> =
            futures::future::join_all(replicas.iter().map(|r| r.gauge("jobgate_shards_owned"))).await;
        if owned.iter().sum::<i64>() == i64::from(SHARD_COUNT) && owned.iter().all(|n| *n > 0) {
            return Some(owned);
        }
        if Instant::now() > deadline {
            println!("  the replicas own {owned:?} shards, not all 32 between them");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
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
    println!("  requests by resource: {}", by_resource(&counted));
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

/// "resource verb count, …" of the requests counted.
fn by_resource(counted: &kube_emulator::RequestCounts) -> String {
    let parts: Vec<String> = counted
        .by_resource
        .iter()
        .flat_map(|(resource, verbs)| {
            verbs
                .iter()
                .map(move |(verb, count)| format!("{resource} {verb} {count}"))
        })
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
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

// ---------------------------------------------------------------------------------------------
// Part 3: failover

/// One frame of the failover subscription.
struct Seen {
    /// When the bench read it.
    recv: DateTime<Utc>,
    /// When the replica that recorded the event recorded it.
    at: DateTime<Utc>,
    job: String,
    phase: u8,
}

/// The failover subscription's reader: keeps every frame.
#[derive(Default)]
struct Takeover {
    faults: Faults,
}

impl Receiver for Takeover {
    type Sample = Seen;

    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Seen>>) {
        let event = match subscribers::event(text) {
            Ok(Some(event)) => event,
            Ok(None) => return self.fault(format!("no at, cursor or phase in: {text}")),
            Err(unexpected) => return self.fault(unexpected),
        };
        let job = text
            .split(r#""job":{"id":""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        let Some(job) = job else {
            return self.fault(format!("no job id in: {text}"));
        };
        samples.lock().unwrap().push(Seen {
            recv: now,
            at: event.at.with_timezone(&Utc),
            job: job.to_owned(),
            phase: event.phase,
        });
    }

    fn fault(&self, what: String) {
        self.faults.record(what);
    }
}

/// Waits until every job of `ids` has an event in `phase` among `frames`; false after
/// `limit`.
async fn until_all_in(frames: &Mutex<Vec<Seen>>, ids: &HashSet<String>, phase: u8, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let reached: HashSet<String> = frames
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.phase == phase)
            .map(|s| s.job.clone())
            .collect();
        if ids.is_subset(&reached) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Seconds from `t0` to `t`, as "+12.345 s".
fn after(t0: DateTime<Utc>, t: DateTime<Utc>) -> String {
    format!("{:+.3} s", (t - t0).num_microseconds().unwrap_or(0) as f64 / 1e6)
}

fn secs(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(0) as f64 / 1e6
}

/// When the replica with this Lease last renewed it, by its own clock (this machine's), as
/// the emulator holds it.
fn last_renewal(cluster: &Cluster, lease_name: &str) -> Option<DateTime<Utc>> {
    let lease = cluster
        .emu
        .store()
        .get("leases.coordination.k8s.io", Some("default"), lease_name)?;
    let renewed = lease.pointer("/spec/renewTime")?.as_str()?;
    Some(DateTime::parse_from_rfc3339(renewed).ok()?.with_timezone(&Utc))
}

/// Part 3: kill -9 of a replica holding running jobs, until a survivor delivers their end.
async fn failover(
    args: &Args,
    cluster: &Cluster,
    postgres: &Postgres,
    replicas: &mut Vec<Replica>,
    dead: &mut Vec<Replica>,
    names: &mut ReplicaNames,
    table: &mut Table,
) {
    let lease = Duration::from_secs(args.lease_secs);
    let mut failover_times = Vec::new();
    let mut last_times = Vec::new();
    for run in 0..args.failover_runs {
        let what = format!("3. failover (lease {} s), run {}", args.lease_secs, run + 1);
        println!("\n-- {what}");
        let Some(owned) = until_shards_divided(replicas, WAIT + 2 * lease).await else {
            push(
                table,
                &what,
                "shards divided before the run",
                "NO: run left out".into(),
            );
            break;
        };
        let n = replicas.len();
        let (v, s) = (run % n, (run + 1) % n);
        println!(
            "  shards owned: {owned:?}; victim {}, subscriber and submissions on {}",
            replicas[v].id, replicas[s].id
        );

        // The survivor's subscription replays these jobs' events from the start of the log,
        // then goes live: nothing is missed, whenever it is registered.
        let name = format!("bench-failover-{run}-job");
        let hub = Arc::new(Takeover::default());
        let mut socket = open_socket(replicas[s].process.ws_url(), hub.clone())
            .await
            .expect("opening the failover subscription");
        let subscribe = json!({
            "id": "f",
            "type": "subscribe",
            "payload": {
                "query": "subscription($name: String) { jobEvents(after: \"0\", filter: { nameContains: $name }) { cursor phase at job { id } } }",
                "variables": { "name": name },
            },
        });
        socket
            .sink
            .send(Message::text(subscribe.to_string()))
            .await
            .expect("send subscribe");
        let gate = format!("bench-failover-{run}");
        let mut input = job_input(0, Some(&gate));
        input["name"] = json!(name);
        let submitted = submissions::many(
            &replicas[s].process.http,
            &replicas[s].process.url(),
            submissions::body(&input),
            args.failover_jobs,
            args.clients,
        )
        .await;
        submitted.assert_all_accepted("failover jobs");
        let ids: HashSet<String> = submitted.ids.iter().cloned().collect();
        let running = 1; // Index of RUNNING in PHASES.
        assert!(
            until_all_in(&socket.samples, &ids, running, WAIT + lease).await,
            "the failover jobs never all ran"
        );

        // Whose jobs are whose: the shards each replica acts for now.
        let shards: Vec<BTreeSet<u32>> =
            futures::future::join_all(replicas.iter().map(Replica::acted_for)).await;
        let union: BTreeSet<u32> = shards.iter().flatten().copied().collect();
        let total: usize = shards.iter().map(BTreeSet::len).sum();
        assert!(
            union.len() == SHARD_COUNT as usize && total == SHARD_COUNT as usize,
            "the replicas do not act for the 32 shards once each: {shards:?}"
        );
        let victim_jobs: HashSet<String> = ids
            .iter()
            .filter(|id| shards[v].contains(&shard_of(id)))
            .cloned()
            .collect();
        let owned_before: Vec<i64> = shards.iter().map(|s| s.len() as i64).collect();
        // The kill falls at a chosen point of the victim's renewal cycle (jobgate renews every
        // fifth of the lease): run k of n waits until the victim's last renewal is
        // (k + 0.5)/n of that interval old, so that the runs sweep the cycle evenly. Otherwise
        // the bench's own rhythm decides: the replicas start acting for their shards (and so
        // each run starts) right after a renewal, and every kill would come ~0.3 s after one.
        let lease_name = format!("jobgate-member-{}", replicas[v].id);
        let renew_every = (lease / 5).as_secs_f64();
        let target = renew_every * (run as f64 + 0.5) / args.failover_runs as f64;
        if let Some(renewed) = last_renewal(cluster, &lease_name) {
            let age = secs(Utc::now() - renewed);
            let wait = (target - age).rem_euclid(renew_every);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        let renewed = last_renewal(cluster, &lease_name);

        // Kill first, then open the gate: no completion can be seen by the victim, so every
        // SUCCEEDED of its jobs is recorded by a replica that took its shards over.
        cluster.emu.reset_requests();
        let t0 = Utc::now();
        replicas[v].process.kill9();
        let killed = Utc::now();
        cluster.emu.simulation().open_gate(&gate);
        let victim = replicas.remove(v);
        let limit = WAIT + 4 * lease;
        let complete = until_all_in(&socket.samples, &ids, SUCCEEDED, limit).await;
        let window = secs(Utc::now() - t0);
        // Stragglers (a second SUCCEEDED would be one) have a moment to arrive.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let frames = std::mem::take(&mut *socket.samples.lock().unwrap());
        drop(socket);

        push(
            table,
            &what,
            "victim: shards; its jobs (of all)",
            format!(
                "{} of 32; {} of {}",
                shards[v].len(),
                victim_jobs.len(),
                ids.len()
            ),
        );
        if let Some(renewed) = renewed {
            push(
                table,
                &what,
                "victim's last Lease renewal, before the kill",
                format!("{:.3} s before", secs(t0 - renewed)),
            );
        }
        push(
            table,
            &what,
            "kill -9 (signal + reap)",
            format!("{:.1} ms", secs(killed - t0) * 1e3),
        );

        // Where the time went, on each survivor: its logged milestones after the kill.
        let mut detected: Option<DateTime<Utc>> = None;
        for (i, replica) in replicas.iter().enumerate() {
            let assigned = replica.milestones_since(t0, "shards assigned");
            if let Some((at, _)) = assigned.first() {
                detected = Some(detected.map_or(*at, |d| d.min(*at)));
            }
            let adopted = replica.milestones_since(t0, "adopted the running jobs");
            let listed = replica.milestones_since(t0, "first list done");
            let first = |lines: &[(DateTime<Utc>, String)]| {
                lines.first().map_or("-".to_owned(), |(at, _)| after(t0, *at))
            };
            let adopted_jobs = adopted
                .first()
                .and_then(|(_, l)| log_field(l, "jobs"))
                .unwrap_or("?")
                .to_owned();
            let before = owned_before[if i >= v { i + 1 } else { i }];
            let now = replica.gauge("jobgate_shards_owned").await;
            let live = replica.gauge("jobgate_replicas_live").await;
            for (at, line) in assigned.iter().chain(&adopted).chain(&listed) {
                println!("    {} {} {line}", replica.id, after(t0, *at));
            }
            push(
                table,
                &what,
                &format!(
                    "{}: shards {before}→{now}, {live} live; assigned / adopted ({adopted_jobs} jobs) / listed",
                    replica.id
                ),
                format!("{} / {} / {}", first(&assigned), first(&adopted), first(&listed)),
            );
        }

        // The survivors count the victim dead once its Lease has not changed for a lease
        // duration: this is how long after that moment the first of them acted on it.
        if let (Some(renewed), Some(detected)) = (renewed, detected) {
            let expired = renewed + chrono::TimeDelta::seconds(args.lease_secs as i64);
            push(
                table,
                &what,
                "victim's Lease expired → first survivor's shards assigned",
                format!("{:.3} s", secs(detected - expired)),
            );
        }

        // The figures: SUCCEEDED frames of the victim's jobs and of the others'.
        let succeeded: Vec<&Seen> = frames.iter().filter(|f| f.phase == SUCCEEDED).collect();
        let of_victim: Vec<&&Seen> = succeeded
            .iter()
            .filter(|f| victim_jobs.contains(&f.job))
            .collect();
        let of_survivors: Vec<&&Seen> = succeeded
            .iter()
            .filter(|f| !victim_jobs.contains(&f.job))
            .collect();
        let first_victim = of_victim.iter().map(|f| f.recv).min();
        let last_victim = of_victim.iter().map(|f| f.recv).max();
        if let (Some(first), Some(last)) = (first_victim, last_victim) {
            let (first, last) = (secs(first - t0), secs(last - t0));
            failover_times.push(first);
            last_times.push(last);
            push(
                table,
                &what,
                "FAILOVER: kill → first victim job's SUCCEEDED frame",
                format!("{first:.3} s"),
            );
            push(
                table,
                &what,
                "kill → last victim job's SUCCEEDED frame",
                format!("{last:.3} s"),
            );
        }
        let recorded_early = of_victim.iter().filter(|f| f.at < t0).count();
        if let Some(last) = of_survivors.iter().map(|f| f.recv).max() {
            push(
                table,
                &what,
                "kill → last survivor job's SUCCEEDED frame",
                format!("{:.3} s", secs(last - t0)),
            );
        }
        let mut once: HashMap<&str, usize> = HashMap::new();
        for f in &succeeded {
            *once.entry(f.job.as_str()).or_default() += 1;
        }
        let missing = ids.iter().filter(|id| !once.contains_key(id.as_str())).count();
        let duplicated: usize = once.values().map(|n| n.saturating_sub(1)).sum();
        let other_terminal = frames.iter().filter(|f| f.phase > SUCCEEDED).count();
        // One Kubernetes Job per job: none lost, none launched twice.
        let (jobs, _) = cluster.emu.store().list("jobs.batch", None, &|job| {
            job.pointer("/metadata/labels/jobgate.io~1job-id")
                .and_then(Value::as_str)
                .is_some_and(|id| ids.contains(id))
        });
        let mut per_job: HashMap<String, usize> = HashMap::new();
        for job in &jobs {
            let id = job["metadata"]["labels"]["jobgate.io/job-id"]
                .as_str()
                .unwrap_or("");
            *per_job.entry(id.to_owned()).or_default() += 1;
        }
        let not_one = ids.iter().filter(|id| per_job.get(*id) != Some(&1)).count();
        push(
            table,
            &what,
            "SUCCEEDED once (missing, twice; failed; before kill)",
            format!(
                "{} ({missing}, {duplicated}; {other_terminal}; {recorded_early}){}",
                once.len(),
                if complete { "" } else { " NOT ALL in time" }
            ),
        );
        push(
            table,
            &what,
            "Kubernetes Jobs (jobs without exactly one)",
            format!("{} ({not_one})", jobs.len()),
        );
        let counted = cluster.emu.requests();
        println!("  requests by resource: {}", by_resource(&counted));
        push(
            table,
            &what,
            "API requests, kill → last SUCCEEDED",
            format!(
                "{} in {window:.1} s: {}",
                counted.total,
                counted
                    .by_verb
                    .iter()
                    .map(|(verb, count)| format!("{verb} {count}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        let faults = hub.faults.count.load(Ordering::Relaxed);
        if faults > 0 {
            for example in hub.faults.examples.lock().unwrap().iter() {
                println!("    unexpected: {example}");
            }
            push(
                table,
                &what,
                "unexpected frames on the subscription",
                faults.to_string(),
            );
        }
        dead.push(victim);
        // A new replica takes the victim's place for the next run.
        if run + 1 < args.failover_runs {
            let replica = Replica::start(cluster, &postgres.url(), args.lease_secs, names.next()).await;
            replicas.insert(v, replica);
        }
    }
    if !failover_times.is_empty() {
        let what = format!("3. failover (lease {} s), all runs", args.lease_secs);
        let list = |v: &[f64]| v.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>().join(", ");
        push(table, &what, "FAILOVER, s", list(&failover_times));
        push(
            table,
            &what,
            "kill → last victim job's SUCCEEDED, s",
            list(&last_times),
        );
    }
}
