//! The jobgate server under test (on SQLite or a throwaway PostgreSQL server), its CPU read
//! from /proc, and the `submitJob` clients that load it. It decides no figures: the parts say
//! what to measure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::SUBMITTERS;
use crate::common::jobgate::{self, Process};
use crate::common::postgres::Postgres;
use crate::common::procfs::{self, cpu_secs, cpu_split, machine_cpu, thread_cpu};
use crate::common::submissions::{self, Submitted};
use crate::common::{Table, WAIT};
use crate::opts::StoreKind;

pub(crate) struct Server {
    pub(crate) process: Process,
    /// The `submitJob` request body, serialised once.
    submit_body: Arc<String>,
    _dir: tempfile::TempDir,
    /// The PostgreSQL server the store is on, if any; dropped (killed) after jobgate.
    pub(crate) postgres: Option<Postgres>,
}

impl Server {
    pub(crate) fn start(store: StoreKind, durability: &str, job_command: &Value) -> Server {
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
    pub(crate) fn rss_kib(&self) -> u64 {
        let kib = procfs::status_kib(&self.process.pid().to_string(), "VmRSS:");
        assert!(kib > 0, "no VmRSS for jobgate");
        kib
    }

    pub(crate) async fn count(&self, query: &str) -> i64 {
        self.process.query(query, json!({})).await["jobs"]["totalCount"]
            .as_i64()
            .expect("totalCount")
    }
}

/// CPU use between two points, as % of one core: server, its jobs, the PostgreSQL server
/// its store is on (if any), this bench, and every other process on the machine (other
/// people's builds make figures unreliable).
pub(crate) struct CpuMark {
    pub(crate) at: Instant,
    pub(crate) machine: (f64, f64),
    pub(crate) server: [f64; 4],
    pub(crate) threads: std::collections::BTreeMap<String, f64>,
    pub(crate) bench: f64,
    pub(crate) pid: String,
    /// The PostgreSQL server's pid and its CPU seconds so far, backends included.
    pub(crate) postgres: Option<(String, f64)>,
}

impl CpuMark {
    pub(crate) fn new(server: &Server) -> Self {
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

    pub(crate) fn since(&self) -> String {
        self.until(Instant::now())
    }

    /// The server's own CPU seconds (user + system, not its jobs') since the mark.
    pub(crate) fn server_secs(&self) -> f64 {
        let now = cpu_split(&self.pid);
        (now[0] - self.server[0]) + (now[1] - self.server[1])
    }

    /// CPU use from the mark to now, spread over the time from the mark to `end` (earlier
    /// than now when an idle tail is not to count).
    pub(crate) fn until(&self, end: Instant) -> String {
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

/// `n` submissions from `clients` concurrent clients, each waiting for its answer.
pub(crate) async fn submit_many(server: &Server, n: usize, clients: usize) -> Submitted {
    let (url, body) = (server.process.url(), server.submit_body.clone());
    on_submit_runtime(move |http| async move { submissions::many(&http, &url, body, n, clients).await }).await
}

/// Submissions paced at `rate` per second for `secs` seconds, at most 256 in flight.
pub(crate) async fn submit_paced(server: &Server, rate: f64, secs: f64) -> Submitted {
    let n = (rate * secs).round().max(1.0) as usize;
    let (url, body) = (server.process.url(), server.submit_body.clone());
    on_submit_runtime(move |http| async move { submissions::paced(&http, &url, body, rate, n).await }).await
}

/// Runs a batch of submissions on a runtime of its own, with its own HTTP client. The
/// subscribers' reader tasks keep this program's main runtime busy (100,000+ frames/s), and
/// an answer must not wait behind them in its queue: that delay would be the bench's, yet
/// counted as the server's `submitJob` latency.
pub(crate) async fn on_submit_runtime<F, Fut>(batch: F) -> Submitted
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

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

pub(crate) fn report_problems(server: &Server, table: &mut Table, what: &str) {
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
