//! The emulated cluster, the shared PostgreSQL database and the jobgate replicas on them: each
//! replica's process, its log lines read as they are logged, and its CPU read from /proc. It
//! decides no figures: the parts say what to measure.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::jobgate::model::SHARD_COUNT;
use chrono::{DateTime, Utc};
use kube_emulator::{Emulator, Options, SimConfig};
use serde_json::{Value, json};

use crate::common::jobgate::{self, Process};
use crate::common::postgres::Postgres;
use crate::common::{WAIT, procfs};

/// An emulator without core/v1 Events from its simulated controllers, and a kubeconfig that
/// points at it.
pub(crate) struct Cluster {
    pub(crate) emu: Emulator,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    pub(crate) async fn start() -> Cluster {
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
pub(crate) type Lines = Vec<(DateTime<Utc>, String)>;

/// One replica: a jobgate process with a data directory of its own, on the shared database.
pub(crate) struct Replica {
    pub(crate) process: Process,
    /// Its `--replica-id`; its Lease is `jobgate-member-<id>`.
    pub(crate) id: String,
    /// ERROR lines tower-http logged for the bench's own /readyz probes answered 503.
    pub(crate) not_ready: Arc<AtomicU64>,
    /// Its [`MILESTONES`] lines, each with the moment the bench read it (ANSI colours removed).
    pub(crate) milestones: Arc<Mutex<Lines>>,
    _dir: tempfile::TempDir,
}

impl Replica {
    /// Starts a replica named `id` and returns once `/readyz` answers 200 (or panics after
    /// [`WAIT`]). It acts for shards only a lease duration later.
    pub(crate) async fn start(cluster: &Cluster, database_url: &str, lease_secs: u64, id: String) -> Replica {
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
    pub(crate) async fn count(&self, phases: &str) -> i64 {
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
    pub(crate) async fn gauge(&self, name: &str) -> i64 {
        let text = self.metrics().await;
        let prefix = format!("{name} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics")) as i64
    }

    /// The shards it acts for now (`jobgate_shard_acted_for{shard="N"} 1`).
    pub(crate) async fn acted_for(&self) -> BTreeSet<u32> {
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
    pub(crate) fn milestones_since(&self, since: DateTime<Utc>, what: &str) -> Lines {
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
pub(crate) fn log_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=");
    let rest = &line[line.find(&key)? + key.len()..];
    Some(rest.split(' ').next().unwrap_or(rest))
}

/// Waits until `replicas` divide the 32 shards between them, each acting for some; the
/// shards each owns, or `None` after `limit`.
pub(crate) async fn until_shards_divided(replicas: &[Replica], limit: Duration) -> Option<Vec<i64>> {
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
pub(crate) struct CpuMark {
    pub(crate) at: Instant,
    pub(crate) replicas: Vec<(String, f64)>,
    /// The PostgreSQL server's pid and its CPU seconds so far, backends included.
    pub(crate) postgres: Option<(String, f64)>,
    pub(crate) bench: f64,
    pub(crate) machine: f64,
}

impl CpuMark {
    pub(crate) fn new(replicas: &[Replica], postgres: &Postgres) -> CpuMark {
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

    pub(crate) fn since(&self) -> String {
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
pub(crate) fn job_input(run_ms: u64, gate: Option<&str>) -> Value {
    let mut env = vec![json!({ "name": "EMULATOR_RUN_MS", "value": run_ms.to_string() })];
    if let Some(gate) = gate {
        env.push(json!({ "name": "EMULATOR_GATE", "value": gate }));
    }
    json!({ "image": "busybox:1.36", "command": ["echo", "hello"], "env": env })
}
