//! The emulated cluster the kube bench runs against, and the clock that timestamps every Job
//! write as the emulator's store publishes it. It starts no jobgate and prints no figures.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use kube_emulator::{Emulator, Options, SimConfig};
use serde_json::Value;

use crate::JOB_ID_LABEL;

/// An emulator sized for a benchmark: no core/v1 Events from the simulated controllers, a
/// long change history, and a kubeconfig that points at it.
pub(crate) struct Cluster {
    pub(crate) emu: Emulator,
    pub(crate) kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    pub(crate) async fn start(history: usize) -> Cluster {
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
    pub(crate) fn running_job_names(&self) -> Vec<String> {
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
pub(crate) fn job_key(id: &str) -> Option<u128> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32).then(|| u128::from_str_radix(&hex, 16).ok())?
}

fn now_us() -> i64 {
    Utc::now().timestamp_micros()
}

/// When the emulator's store published the writes that matter for one Job (µs since the
/// epoch, this machine's wall clock).
#[derive(Clone, Copy, Default)]
pub(crate) struct JobMarks {
    pub(crate) started_us: Option<i64>,
    pub(crate) complete_us: Option<i64>,
}

/// Timestamps every Job write as the store publishes it, on a thread of its own so that it
/// is never queued behind the runtime's other work.
pub(crate) struct WriteClock {
    pub(crate) marks: Arc<Mutex<HashMap<u128, JobMarks>>>,
    pub(crate) lagged: Arc<AtomicU64>,
    pub(crate) stop: Arc<AtomicBool>,
}

impl WriteClock {
    pub(crate) fn start(cluster: &Cluster) -> WriteClock {
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
