//! The jobgate server under test (started over a data directory, its log read for progress
//! marks and problems, its CPU and memory read from /proc) and the `submitJob` clients that
//! load it. It decides no figures: the parts say what to measure.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::args::Args;
use crate::common::jobgate::{self, Process};
use crate::common::submissions::{self, Submitted};
use crate::common::{Table, pct, procfs};
use crate::push;

pub(crate) struct Gateway {
    pub(crate) process: Process,
    /// Log lines that mark progress (the watchers' first lists), with their arrival time.
    pub(crate) marks: Arc<Mutex<Vec<(Instant, String)>>>,
    /// ERROR lines that tower-http logged for 503 answers (the bench's /readyz probes), which
    /// are no problem.
    not_ready: Arc<AtomicU64>,
    pub(crate) data_dir: PathBuf,
}

impl Gateway {
    /// Starts jobgate over `data_dir`; returns once it listens (or panics after `limit`).
    pub(crate) fn start(data_dir: &Path, kubeconfig: &Path, args: &Args, limit: Duration) -> Gateway {
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
    pub(crate) fn start_blocking(
        data_dir: &Path,
        kubeconfig: &Path,
        args: &Args,
        limit: Duration,
    ) -> Gateway {
        tokio::task::block_in_place(|| Gateway::start(data_dir, kubeconfig, args, limit))
    }

    /// Fields of /proc/PID/status, in KiB: (VmRSS, RssAnon, RssFile).
    pub(crate) fn memory_kib(&self) -> (u64, u64, u64) {
        let pid = self.process.pid().to_string();
        let field = |name: &str| procfs::status_kib(&pid, name);
        (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
    }

    /// How many jobs are in these phases (e.g. `RUNNING` or `FAILED, CANCELLED`).
    pub(crate) async fn count(&self, phases: &str) -> i64 {
        let query = format!("{{ jobs(first: 1, filter: {{ phases: [{phases}] }}) {{ totalCount }} }}");
        self.process.query(&query, json!({})).await["jobs"]["totalCount"]
            .as_i64()
            .expect("totalCount")
    }

    pub(crate) async fn phase(&self, id: &str) -> String {
        let data = self
            .process
            .query("query($id: ID!) { job(id: $id) { phase } }", json!({ "id": id }))
            .await;
        data["job"]["phase"].as_str().unwrap_or("?").to_owned()
    }

    /// Polls /readyz until it answers 200; returns when, or `None` after `limit`.
    pub(crate) async fn ready_within(&self, limit: Duration) -> Option<Instant> {
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
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
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
pub(crate) fn print_files(dir: &Path) {
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
pub(crate) struct CpuMark {
    pub(crate) at: Instant,
    pub(crate) server: f64,
    pub(crate) bench: f64,
    pub(crate) machine: f64,
    pub(crate) pid: String,
}

impl CpuMark {
    pub(crate) fn new(gateway: &Gateway) -> CpuMark {
        let pid = gateway.process.pid().to_string();
        CpuMark {
            at: Instant::now(),
            server: procfs::cpu_secs(&pid).0,
            bench: procfs::cpu_secs("self").0,
            machine: procfs::machine_cpu().0,
            pid,
        }
    }

    pub(crate) fn since(&self) -> String {
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

/// A job for the emulated kubelet: `run_ms` of running, then held by `gate` if one is named.
pub(crate) fn job_input(run_ms: u64, gate: Option<&str>) -> Value {
    let mut env = vec![json!({ "name": "EMULATOR_RUN_MS", "value": run_ms.to_string() })];
    if let Some(gate) = gate {
        env.push(json!({ "name": "EMULATOR_GATE", "value": gate }));
    }
    json!({ "image": "busybox:1.36", "command": ["echo", "hello"], "env": env })
}

/// `n` submissions from `clients` concurrent clients, each waiting for its answer.
pub(crate) async fn submit_many(gateway: &Gateway, n: usize, clients: usize, body: Arc<String>) -> Submitted {
    submissions::many(&gateway.process.http, &gateway.process.url(), body, n, clients).await
}

/// `n` submissions paced at `rate` per second, at most 256 in flight.
pub(crate) async fn submit_paced(gateway: &Gateway, rate: f64, n: usize, body: Arc<String>) -> Submitted {
    submissions::paced(&gateway.process.http, &gateway.process.url(), body, rate, n).await
}

/// "p50 / p99 / max" of µs values, in ms.
pub(crate) fn summary_ms(values: &mut [i64]) -> String {
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

pub(crate) fn report_problems(gateway: &Gateway, table: &mut Table, what: &str) {
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
