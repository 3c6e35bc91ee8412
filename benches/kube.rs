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

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::jobgate::{self, Process};
use common::procfs;
use common::submissions::{self, Submitted};
use common::subscribers::{self, Faults, Receiver, open_socket, string_field};
use common::{Table, WAIT, pct, print_table};
use futures::SinkExt;
use kube_emulator::{Emulator, Options, SimConfig};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

const SUBSCRIBE: &str = "subscription { jobEvents { cursor phase at job { id } } }";
/// The label the Kubernetes executor puts on every object of a job.
const JOB_ID_LABEL: &str = "jobgate.io/job-id";

// ---------------------------------------------------------------------------------------------
// Options

/// Command-line options, `--name value` (after `--` on cargo's command line).
struct Args {
    /// Which parts to run, e.g. `1,2,3,4` (3 and 4 share a server: 4 needs 3).
    parts: Vec<u8>,
    /// Part 1: subscriptions and the sockets that carry them.
    subs: usize,
    sockets: usize,
    /// Part 1: jobs measured, their submission rate (jobs/s) and their run time in the kubelet.
    latency_jobs: usize,
    rate: f64,
    run_ms: u64,
    /// Part 1, the design's point: subscriptions kept and events/s.
    design_subs: usize,
    design_events: f64,
    /// Part 2: jobs held running, the counting window; the polling design's clients and window.
    steady_jobs: usize,
    steady_secs: u64,
    poll_clients: usize,
    poll_secs: u64,
    /// Part 3: the largest number of unfinished jobs, and the time allowed to get there.
    jobs: usize,
    fill_minutes: u64,
    /// Concurrent `submitJob` clients when filling.
    clients: usize,
    /// jobgate's `--durability`.
    durability: String,
    /// The emulator's change history (watches may resume within it).
    history: usize,
    /// Extra environment of the jobgate process, `NAME=value;NAME=value` (e.g. a profiler's
    /// `LD_PRELOAD`); this process keeps its own.
    server_env: Vec<(String, String)>,
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
        let parts: String = get(&mut map, "parts", "1,2,3,4".to_owned());
        let args = Args {
            parts: parts
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.trim().parse().expect("--parts: numbers 1 to 4"))
                .collect(),
            subs: get(&mut map, "subs", 1000usize).max(1),
            sockets: get(&mut map, "sockets", 10usize).max(1),
            latency_jobs: get(&mut map, "latency-jobs", 200usize).max(1),
            rate: get(&mut map, "rate", 10.0f64),
            run_ms: get(&mut map, "run-ms", 500),
            design_subs: get(&mut map, "design-subs", 100),
            design_events: get(&mut map, "design-events", 200.0),
            steady_jobs: get(&mut map, "steady-jobs", 1000usize).max(1),
            steady_secs: get(&mut map, "steady-secs", 60u64).max(1),
            poll_clients: get(&mut map, "poll-clients", 1000usize).max(1),
            poll_secs: get(&mut map, "poll-secs", 10u64).max(1),
            jobs: get(&mut map, "jobs", 100_000usize).max(1),
            fill_minutes: get(&mut map, "fill-minutes", 15),
            clients: get(&mut map, "clients", 32usize).max(1),
            durability: get(&mut map, "durability", "full".to_owned()),
            history: get(&mut map, "history", 200_000usize),
            server_env: get(&mut map, "server-env", String::new())
                .split(';')
                .filter(|s| !s.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("--server-env: NAME=value;NAME=value");
                    (k.to_owned(), v.to_owned())
                })
                .collect(),
        };
        assert!(
            map.is_empty(),
            "unknown options: {:?}",
            map.keys().collect::<Vec<_>>()
        );
        assert!(args.rate > 0.0, "--rate must be positive");
        args
    }
}

// ---------------------------------------------------------------------------------------------
// The emulated cluster

/// An emulator sized for a benchmark: no core/v1 Events from the simulated controllers, a
/// long change history, and a kubeconfig that points at it.
struct Cluster {
    emu: Emulator,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(history: usize) -> Cluster {
        let options = Options {
            history,
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

    /// Names of the Jobs in `default` that have not finished.
    fn running_job_names(&self) -> Vec<String> {
        let (items, _) = self
            .emu
            .store()
            .list("jobs.batch", Some("default"), &|job| !job_complete(job));
        items
            .iter()
            .filter_map(|j| j.pointer("/metadata/name")?.as_str().map(str::to_owned))
            .collect()
    }
}

fn job_complete(job: &Value) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Complete" && c["status"] == "True")
        })
}

fn job_started(job: &Value) -> bool {
    job.pointer("/status/startTime").is_some_and(|v| !v.is_null())
        || job.pointer("/status/active").and_then(Value::as_i64).unwrap_or(0) > 0
}

/// A jobgate job id (a UUID) as a number, cheap to key by.
fn job_key(id: &str) -> Option<u128> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32).then(|| u128::from_str_radix(&hex, 16).ok())?
}

fn now_us() -> i64 {
    Utc::now().timestamp_micros()
}

/// When the emulator's store published the writes that matter for one Job (µs since the
/// epoch, this machine's wall clock).
#[derive(Clone, Copy, Default)]
struct JobMarks {
    started_us: Option<i64>,
    complete_us: Option<i64>,
}

/// Timestamps every Job write as the store publishes it, on a thread of its own so that it
/// is never queued behind the runtime's other work.
struct WriteClock {
    marks: Arc<Mutex<HashMap<u128, JobMarks>>>,
    lagged: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl WriteClock {
    fn start(cluster: &Cluster) -> WriteClock {
        let (_, mut changes) = cluster.emu.store().watch(None).expect("watching the store");
        let marks: Arc<Mutex<HashMap<u128, JobMarks>>> = Arc::default();
        let lagged = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, l, s) = (marks.clone(), lagged.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let change = match changes.blocking_recv() {
                    Ok(change) => change,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        l.fetch_add(n, Ordering::Relaxed);
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let at = now_us();
                if change.resource != "jobs.batch" {
                    continue;
                }
                let object = &change.object;
                let Some(key) = object
                    .pointer("/metadata/labels")
                    .and_then(|l| l.get(JOB_ID_LABEL))
                    .and_then(Value::as_str)
                    .and_then(job_key)
                else {
                    continue;
                };
                let mut marks = m.lock().unwrap();
                let entry = marks.entry(key).or_default();
                if entry.started_us.is_none() && job_started(object) {
                    entry.started_us = Some(at);
                }
                if entry.complete_us.is_none() && job_complete(object) {
                    entry.complete_us = Some(at);
                }
            }
        });
        WriteClock { marks, lagged, stop }
    }
}

impl Drop for WriteClock {
    fn drop(&mut self) {
        // The thread ends at the store's next change, or when the store goes away.
        self.stop.store(true, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------------
// The server under test

struct Gateway {
    process: Process,
    /// Log lines that mark progress (the watchers' first lists), with their arrival time.
    marks: Arc<Mutex<Vec<(Instant, String)>>>,
    /// ERROR lines that tower-http logged for 503 answers (the bench's /readyz probes), which
    /// are no problem.
    not_ready: Arc<AtomicU64>,
    data_dir: PathBuf,
}

impl Gateway {
    /// Starts jobgate over `data_dir`; returns once it listens (or panics after `limit`).
    fn start(data_dir: &Path, kubeconfig: &Path, args: &Args, limit: Duration) -> Gateway {
        // WARN and up, plus the "listening on" and "first list done" lines.
        let log = "warn,jobgate::server=info,jobgate::executor::kube=info";
        let mut command = jobgate::command(&args.durability, data_dir, log);
        command
            .args(["--executor", "kubernetes", "--kubeconfig"])
            .arg(kubeconfig)
            // Only the flags above configure it, whatever this shell exports.
            .env_remove("KUBECONFIG")
            .envs(args.server_env.iter().map(|(k, v)| (k, v)));
        let marks = Arc::new(Mutex::new(Vec::new()));
        let not_ready = Arc::new(AtomicU64::new(0));
        let (mark_sink, not_ready_sink) = (marks.clone(), not_ready.clone());
        let process = Process::start(&mut command, limit, move |line| {
            if line.contains("first list done") {
                mark_sink.lock().unwrap().push((Instant::now(), line.to_owned()));
                true
            } else if line.contains("tower_http::trace::on_failure") && line.contains("503") {
                // The bench's own /readyz probes while the watchers list: counted apart.
                not_ready_sink.fetch_add(1, Ordering::Relaxed);
                true
            } else {
                false
            }
        });
        Gateway {
            process,
            marks,
            not_ready,
            data_dir: data_dir.to_owned(),
        }
    }

    /// [`Gateway::start`] without holding up the runtime's other tasks (the emulator's).
    fn start_blocking(data_dir: &Path, kubeconfig: &Path, args: &Args, limit: Duration) -> Gateway {
        tokio::task::block_in_place(|| Gateway::start(data_dir, kubeconfig, args, limit))
    }

    /// Fields of /proc/PID/status, in KiB: (VmRSS, RssAnon, RssFile).
    fn memory_kib(&self) -> (u64, u64, u64) {
        let pid = self.process.pid().to_string();
        let field = |name: &str| procfs::status_kib(&pid, name);
        (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
    }

    /// How many jobs are in these phases (e.g. `RUNNING` or `FAILED, CANCELLED`).
    async fn count(&self, phases: &str) -> i64 {
        let query = format!("{{ jobs(first: 1, filter: {{ phases: [{phases}] }}) {{ totalCount }} }}");
        self.process.query(&query, json!({})).await["jobs"]["totalCount"]
            .as_i64()
            .expect("totalCount")
    }

    async fn phase(&self, id: &str) -> String {
        let data = self
            .process
            .query("query($id: ID!) { job(id: $id) { phase } }", json!({ "id": id }))
            .await;
        data["job"]["phase"].as_str().unwrap_or("?").to_owned()
    }

    /// Polls /readyz until it answers 200; returns when, or `None` after `limit`.
    async fn ready_within(&self, limit: Duration) -> Option<Instant> {
        let url = format!("http://{}/readyz", self.process.addr);
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(r) = self.process.http.get(&url).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }
}

/// Bytes of the files in a directory (the store: database, WAL, shared memory).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Prints the size of every file in the data directory.
fn print_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let files: Vec<String> = entries
        .flatten()
        .filter_map(|e| Some((e.file_name(), e.metadata().ok()?.len())))
        .map(|(name, len)| format!("{} {:.1} MiB", name.to_string_lossy(), len as f64 / 1048576.0))
        .collect();
    println!("  data directory: {}", files.join(", "));
}

/// CPU use between two points, as % of one core: jobgate, this process (bench clients and
/// the emulator), and every other process on the (shared) machine.
struct CpuMark {
    at: Instant,
    server: f64,
    bench: f64,
    machine: f64,
    pid: String,
}

impl CpuMark {
    fn new(gateway: &Gateway) -> CpuMark {
        let pid = gateway.process.pid().to_string();
        CpuMark {
            at: Instant::now(),
            server: procfs::cpu_secs(&pid).0,
            bench: procfs::cpu_secs("self").0,
            machine: procfs::machine_cpu().0,
            pid,
        }
    }

    fn since(&self) -> String {
        let wall = self.at.elapsed().as_secs_f64().max(1e-9);
        let server = procfs::cpu_secs(&self.pid).0 - self.server;
        let bench = procfs::cpu_secs("self").0 - self.bench;
        let others = (procfs::machine_cpu().0 - self.machine - server - bench).max(0.0);
        format!(
            "jobgate {:.0}%, bench+emulator {:.0}%, other processes {:.0}% (of one core, over {wall:.1} s)",
            100.0 * server / wall,
            100.0 * bench / wall,
            100.0 * others / wall
        )
    }
}

// ---------------------------------------------------------------------------------------------
// submitJob

/// A job for the emulated kubelet: `run_ms` of running, then held by `gate` if one is named.
fn job_input(run_ms: u64, gate: Option<&str>) -> Value {
    let mut env = vec![json!({ "name": "EMULATOR_RUN_MS", "value": run_ms.to_string() })];
    if let Some(gate) = gate {
        env.push(json!({ "name": "EMULATOR_GATE", "value": gate }));
    }
    json!({ "image": "busybox:1.36", "command": ["echo", "hello"], "env": env })
}

/// `n` submissions from `clients` concurrent clients, each waiting for its answer.
async fn submit_many(gateway: &Gateway, n: usize, clients: usize, body: Arc<String>) -> Submitted {
    submissions::many(&gateway.process.http, &gateway.process.url(), body, n, clients).await
}

/// `n` submissions paced at `rate` per second, at most 256 in flight.
async fn submit_paced(gateway: &Gateway, rate: f64, n: usize, body: Arc<String>) -> Submitted {
    submissions::paced(&gateway.process.http, &gateway.process.url(), body, rate, n).await
}

/// "p50 / p99 / max" of µs values, in ms.
fn summary_ms(values: &mut [i64]) -> String {
    if values.is_empty() {
        return "no samples".into();
    }
    values.sort_unstable();
    let ms = |v: i64| v as f64 / 1e3;
    format!(
        "{:.2} / {:.2} / {:.2} ms",
        ms(pct(values, 50.0)),
        ms(pct(values, 99.0)),
        ms(*values.last().unwrap())
    )
}

// ---------------------------------------------------------------------------------------------
// Subscribers

/// Indexes of [`subscribers::PHASES`].
const RUNNING: u8 = 1;
const SUCCEEDED: u8 = 2;

/// One received `next` frame.
struct Sample {
    /// Receive time and the event's `at`, µs since the epoch.
    recv_us: i64,
    at_us: i64,
    job: u128,
    seq: i64,
    /// The subscription's number on its socket.
    sub: u32,
    phase: u8,
}

/// Shared by every reader task.
#[derive(Default)]
struct Hub {
    frames: AtomicU64,
    succeeded: AtomicU64,
    faults: Faults,
    /// Record samples only while set (the measured windows).
    recording: AtomicU8,
}

impl Receiver for Hub {
    type Sample = Sample;

    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Sample>>) {
        let recv_us = now.timestamp_micros();
        let event = match subscribers::event(text) {
            Ok(event) => event,
            Err(unexpected) => return self.fault(unexpected),
        };
        let parsed = (|| {
            let event = event?;
            let job = job_key(string_field(text.split(r#""job":"#).nth(1)?, "id")?)?;
            let sub = text.split(r#""id":"s"#).nth(1)?;
            let sub = sub[..sub.find('"')?].parse().ok()?;
            Some((event.at.timestamp_micros(), event.seq, event.phase, job, sub))
        })();
        let Some((at_us, seq, phase, job, sub)) = parsed else {
            return self.fault(format!("no at, cursor, phase, job id or subscription in: {text}"));
        };
        self.frames.fetch_add(1, Ordering::Relaxed);
        if phase == SUCCEEDED {
            self.succeeded.fetch_add(1, Ordering::Relaxed);
        }
        if self.recording.load(Ordering::Relaxed) == 1 {
            samples.lock().unwrap().push(Sample {
                recv_us,
                at_us,
                job,
                seq,
                sub,
                phase,
            });
        }
    }

    fn fault(&self, what: String) {
        self.faults.record(what);
    }
}

type Socket = subscribers::Socket<Hub>;

/// Opens `n_sockets` sockets carrying `per_socket` subscriptions each, named `s0`, `s1`, ….
async fn open_subscribers(
    gateway: &Gateway,
    hub: &Arc<Hub>,
    n_sockets: usize,
    per_socket: usize,
) -> Vec<Socket> {
    let mut sockets = Vec::with_capacity(n_sockets);
    for _ in 0..n_sockets {
        let mut socket = open_socket(gateway.process.ws_url(), hub.clone())
            .await
            .expect("opening a subscriber socket");
        for i in 0..per_socket {
            let message =
                json!({ "id": format!("s{i}"), "type": "subscribe", "payload": { "query": SUBSCRIBE } });
            socket
                .sink
                .send(Message::text(message.to_string()))
                .await
                .expect("send subscribe");
        }
        sockets.push(socket);
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

/// Waits until no frame arrived for `quiet` (at most `limit`); returns how long until the last
/// frame.
async fn settle(hub: &Hub, quiet: Duration, limit: Duration) -> Duration {
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
            break;
        }
    }
    last_change - started
}

/// Takes every socket's samples.
fn take_samples(sockets: &[Socket]) -> Vec<Vec<Sample>> {
    sockets
        .iter()
        .map(|s| std::mem::take(&mut *s.samples.lock().unwrap()))
        .collect()
}

/// Latency figures of one measured run.
struct Latency {
    /// Frames of the measured jobs, and SUCCEEDED frames missing (jobs × subscriptions - seen).
    frames: usize,
    missing_succeeded: usize,
    /// Events per job (frames per subscription and job, averaged).
    events_per_job: f64,
    /// Job Complete write → SUCCEEDED frame, µs, one per subscription and job.
    succeeded: Vec<i64>,
    /// First write with a start → first RUNNING frame, µs, one per subscription and job.
    running: Vec<i64>,
    /// Per event (once, not per subscriber): the Job write → the event's `at` (jobgate's
    /// record time), for SUCCEEDED and RUNNING.
    write_to_at: Vec<i64>,
    /// Per frame: the event's `at` → frame received.
    at_to_frame: Vec<i64>,
    /// Jobs without a Complete or a start write seen by the write clock.
    unmatched: usize,
    frames_per_sec: f64,
}

fn latency(
    samples: &[Vec<Sample>],
    jobs: &HashSet<u128>,
    marks: &HashMap<u128, JobMarks>,
    subs: usize,
) -> Latency {
    let mut out = Latency {
        frames: 0,
        missing_succeeded: 0,
        events_per_job: 0.0,
        succeeded: Vec::new(),
        running: Vec::new(),
        write_to_at: Vec::new(),
        at_to_frame: Vec::new(),
        unmatched: 0,
        frames_per_sec: 0.0,
    };
    let mut per_event: BTreeMap<i64, (u128, u8, i64)> = BTreeMap::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let mut seen_succeeded = 0;
    for socket in samples {
        let mut first_running: HashMap<(u32, u128), i64> = HashMap::new();
        for s in socket.iter().filter(|s| jobs.contains(&s.job)) {
            out.frames += 1;
            first = first.min(s.recv_us);
            last = last.max(s.recv_us);
            out.at_to_frame.push(s.recv_us - s.at_us);
            per_event.entry(s.seq).or_insert((s.job, s.phase, s.at_us));
            let mark = marks.get(&s.job).copied().unwrap_or_default();
            match s.phase {
                SUCCEEDED => {
                    seen_succeeded += 1;
                    if let Some(w) = mark.complete_us {
                        out.succeeded.push(s.recv_us - w);
                    }
                }
                RUNNING => {
                    let entry = first_running.entry((s.sub, s.job)).or_insert(s.recv_us);
                    *entry = (*entry).min(s.recv_us);
                }
                _ => {}
            }
        }
        for ((_, job), recv) in first_running {
            if let Some(w) = marks.get(&job).and_then(|m| m.started_us) {
                out.running.push(recv - w);
            }
        }
    }
    // Per event: the first RUNNING event of each job and its SUCCEEDED event.
    let mut running_done = HashSet::new();
    for (job, phase, at_us) in per_event.values() {
        let mark = marks.get(job).copied().unwrap_or_default();
        match *phase {
            SUCCEEDED => {
                if let Some(w) = mark.complete_us {
                    out.write_to_at.push(at_us - w);
                }
            }
            RUNNING if running_done.insert(*job) => {
                if let Some(w) = mark.started_us {
                    out.write_to_at.push(at_us - w);
                }
            }
            _ => {}
        }
    }
    out.unmatched = jobs
        .iter()
        .filter(|j| {
            marks
                .get(j)
                .is_none_or(|m| m.complete_us.is_none() || m.started_us.is_none())
        })
        .count();
    out.missing_succeeded = (jobs.len() * subs).saturating_sub(seen_succeeded);
    out.events_per_job = out.frames as f64 / (jobs.len() * subs).max(1) as f64;
    out.frames_per_sec = out.frames as f64 / ((last - first) as f64 / 1e6).max(1e-6);
    out
}

// ---------------------------------------------------------------------------------------------
// Main

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

/// Parts 1 and 2, on one emulator and one server.
async fn latency_and_requests(args: &Args, table: &mut Table) {
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

/// Part 2: jobgate's API requests in steady state, against a polling design.
async fn steady_requests(
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

fn report_problems(gateway: &Gateway, table: &mut Table, what: &str) {
    let problems = gateway.process.problems();
    for line in problems.iter().take(5) {
        println!("  jobgate logged: {line}");
    }
    push(
        table,
        what,
        "jobgate WARN/ERROR log lines (+ ERROR lines for /readyz 503)",
        format!(
            "{} (+ {})",
            problems.len(),
            gateway.not_ready.load(Ordering::Relaxed)
        ),
    );
}

/// Parts 3 and 4 on a fresh emulator and server.
async fn memory_and_recovery(args: &Args, table: &mut Table) {
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
