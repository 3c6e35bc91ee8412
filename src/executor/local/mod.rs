//! The local executor: runs jobs as processes on this machine, with batch/v1 Job semantics.
//!
//! It owns one runner task per job (`runner`), the job's process groups, its log files under
//! the data directory's `logs` (`log_file`) and its working directory outside it
//! ([`sandbox`]); runs of another user start through [`user_switch`]. Each run is a
//! process group of its own (so a cancel or a deadline stops children too), runs as the
//! unprivileged `--run-as-user` when jobgate is root, in the job's own directory (its HOME,
//! with its TMPDIR inside), and sees an environment built from nothing: PATH, HOME, TMPDIR,
//! LANG, the job's `env`, `JOB_COMPLETION_INDEX`, `JOBGATE_JOB_ID`, `JOBGATE_RESULT_FILE`
//! (a file in its directory, which jobgate reads back after the run) and its trace context
//! (`TRACEPARENT`, `TRACESTATE`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`). Like the Job
//! controller it honours `completions` (every index must succeed once), `parallelism`,
//! `backoffLimit` (failed runs are retried with exponential back-off until the count of
//! failures exceeds it) and `activeDeadlineSeconds`, and reports conditions
//! `SuccessCriteriaMet`+`Complete` or `FailureTarget`+`Failed`.
//!
//! The runner state that must survive a restart (which indexes completed, which process
//! groups were running) travels in the reported status and so lives in the store: on
//! adoption after a restart, runs that were in progress are killed and counted as failed
//! attempts (`GatewayRestarted`). A job's directory lives as long as the job: retries and
//! restarts find it, and it is removed once the job has finished or been cancelled. It must
//! not write the store or decide phases, nor hand a job any path into the data directory.

mod log_file;
mod retries;
mod run_attempts;
mod runner;
pub mod sandbox;
pub mod user_switch;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use self::log_file::{LogWriter, read_log_tail};
use self::runner::{Runner, kill_leftover};
use self::sandbox::RunAs;
use super::{Executor, ExecutorError, LogLine, LogSink, Observation, ObservationSender};
use crate::model::{Condition, Job};

/// Settings of the local executor.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// jobgate's own directory (the database, logs): made mode 0700; no job gets a path
    /// into it.
    pub data_dir: PathBuf,
    /// Where each job gets its own working directory (`--local-work-dir`); outside the data
    /// directory.
    pub work_root: PathBuf,
    /// The user every run switches to; `None` runs jobs as jobgate's own user, which is
    /// refused when that is root.
    pub run_as: Option<RunAs>,
    /// The program that starts a run as [`LocalConfig::run_as`] without forking jobgate
    /// ([`user_switch::this_binary`]); with none, the standard library forks jobgate to switch
    /// user in the child.
    pub launcher: Option<PathBuf>,
    /// The delay before the first retry of a failed run; doubled per failure, capped at
    /// [`LocalConfig::retry_delay_cap`] (the Job controller uses 10 s and 6 min).
    pub retry_delay: Duration,
    pub retry_delay_cap: Duration,
    /// How long a run may take to exit after SIGTERM before it gets SIGKILL.
    pub kill_grace: Duration,
    /// Output kept per job; older output is dropped once the log has rotated twice.
    pub max_log_bytes: u64,
    /// The PATH jobs see (for jobs of another user, directories they can reach).
    pub path: String,
    /// jobgate's credential files (tokens, HS256 secret, config): jobgate warns at start
    /// about those the jobs' user could read.
    pub credential_files: Vec<PathBuf>,
}

/// What a runner keeps in `WorkloadStatus::executor_state`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunnerState {
    #[serde(default)]
    runs: Vec<RunRecord>,
    /// Failures per index, failed indexes, the back-off's count (see `retries`).
    #[serde(default)]
    retries: retries::RetryBook,
}

/// A run in progress: enough to find and kill its process group after a restart.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct RunRecord {
    index: i32,
    pgid: i32,
    /// The job's run number of this run (`attempts::run_name`).
    #[serde(default)]
    run: i32,
    #[serde(default)]
    started_at: Option<chrono::DateTime<Utc>>,
    /// The process's start time in clock ticks since boot (/proc/PID/stat field 22), so a
    /// recycled pid is never mistaken for ours.
    proc_start: Option<u64>,
}

/// How long a finished job's report waits for the archive to commit its output.
const ARCHIVE_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct LocalExecutor {
    inner: Arc<LocalState>,
}

struct LocalState {
    config: LocalConfig,
    observations: ObservationSender,
    /// Cancel tokens of running jobs. A std mutex: held for map operations only, never
    /// across an await. A poisoned lock (here and below) is used anyway: each holder makes
    /// one whole map operation, so a panic elsewhere (a runner's is caught) cannot leave a
    /// map half-changed.
    runners: Mutex<HashMap<String, CancellationToken>>,
    /// Jobs cancelled before their runner started, so that a launch racing a cancel does not
    /// start them.
    cancelled_early: Mutex<HashSet<String>>,
    /// The log of each job that runs or is followed; shared by the job's runs so that
    /// followers see every line once.
    logs: Mutex<HashMap<String, Arc<LogWriter>>>,
    /// Where every line is archived too, once set.
    log_sink: std::sync::OnceLock<Arc<dyn LogSink>>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl LocalState {
    fn log_writer(&self, job_id: &str) -> Arc<LogWriter> {
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(job_id.to_owned())
            .or_insert_with(|| {
                let archive = self.log_sink.get().map(|sink| (sink.clone(), job_id.to_owned()));
                LogWriter::new(
                    log_path(&self.config.data_dir, job_id),
                    self.config.max_log_bytes,
                    archive,
                )
            })
            .clone()
    }

    /// The job will write no more output. Its followers end once the job's terminal phase
    /// is recorded, so that a client sees the last line and the outcome together.
    fn close_log(&self, job_id: &str) {
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(job_id);
    }
}

impl LocalExecutor {
    pub fn new(config: LocalConfig, observations: ObservationSender) -> Result<Self, std::io::Error> {
        prepare_dirs(&config)?;
        Ok(Self {
            inner: Arc::new(LocalState {
                config,
                observations,
                runners: Mutex::new(HashMap::new()),
                cancelled_early: Mutex::new(HashSet::new()),
                logs: Mutex::new(HashMap::new()),
                log_sink: std::sync::OnceLock::new(),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        })
    }

    /// From now on, every line of output is archived through `sink` too (set once, before
    /// any job runs; a second call changes nothing).
    pub fn archive_to(&self, sink: Arc<dyn LogSink>) {
        let _ = self.inner.log_sink.set(sink);
    }

    fn start(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        let inner = &self.inner;
        if inner.shutdown.is_cancelled() {
            return Err(ExecutorError::ShuttingDown);
        }
        if inner
            .cancelled_early
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&job.id)
        {
            return Ok(());
        }
        let token = {
            let mut runners = inner.runners.lock().unwrap_or_else(PoisonError::into_inner);
            if runners.contains_key(&job.id) {
                return Ok(());
            }
            let token = inner.shutdown.child_token();
            runners.insert(job.id.clone(), token.clone());
            token
        };
        let work_dir =
            sandbox::prepare_work_dir(&inner.config.work_root, &job.id, inner.config.run_as.as_ref());
        let work_dir = match work_dir {
            Ok(dir) => dir,
            Err(source) => {
                // Nothing was started: forget the runner, or the launcher's retry would find it
                // and report the job launched while nothing runs it.
                inner
                    .runners
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&job.id);
                return Err(ExecutorError::Prepare {
                    job: job.id.clone(),
                    source,
                });
            }
        };
        let fallback = Observation::of_status(job.id.clone(), job.workload.clone());
        let runner = Runner {
            inner: inner.clone(),
            status: job.workload.clone(),
            job,
            work_dir,
            cancel: token,
        };
        let inner_for_panic = inner.clone();
        inner.tasks.spawn(async move {
            // A bug in a runner must not leave its job RUNNING forever: report it failed.
            if std::panic::AssertUnwindSafe(runner.run())
                .catch_unwind()
                .await
                .is_err()
            {
                tracing::error!(job = %fallback.job_id, "local runner panicked; failing the job");
                inner_for_panic
                    .runners
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&fallback.job_id);
                inner_for_panic.close_log(&fallback.job_id);
                let mut status = fallback.status;
                let now = Utc::now();
                for type_ in ["FailureTarget", "Failed"] {
                    let message = Some("jobgate's local executor failed while running this job".to_owned());
                    status
                        .conditions
                        .push(Condition::truthy(type_, "ExecutorFailed", message, now));
                }
                let _ = inner_for_panic
                    .observations
                    .send(Observation::of_status(fallback.job_id, status))
                    .await;
            }
        });
        Ok(())
    }

    fn log_path(&self, job_id: &str) -> PathBuf {
        log_path(&self.inner.config.data_dir, job_id)
    }
}

fn log_path(data_dir: &Path, job_id: &str) -> PathBuf {
    data_dir.join("logs").join(format!("{job_id}.log"))
}

/// The data directory and its `logs` become jobgate's alone (0700), and the work root is
/// made. Jobs never run as root: a configuration that would is refused here too, whatever
/// the caller checked.
fn prepare_dirs(config: &LocalConfig) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if config.run_as.is_none() && nix::unistd::geteuid().is_root() {
        return Err(std::io::Error::other(
            "jobgate runs as root and no --run-as-user was given: refusing to run jobs as root",
        ));
    }
    let private = |dir: &Path| -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        if std::fs::metadata(dir)?.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    };
    private(&config.data_dir)?;
    private(&config.data_dir.join("logs"))?;
    if let Some(user) = &config.run_as {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata(&config.data_dir)?.uid() == user.uid {
            return Err(std::io::Error::other(format!(
                "the data directory {} belongs to {}, the user jobs run as: give it to jobgate's user",
                config.data_dir.display(),
                user.name
            )));
        }
    }
    sandbox::prepare_root(&config.work_root)?;
    if let Some(user) = &config.run_as {
        for file in &config.credential_files {
            if sandbox::readable_by_all(file) {
                tracing::warn!(
                    file = %file.display(),
                    "local jobs (run as {}) can read this credential file, as every user can: make it readable by jobgate's user only (0600)",
                    user.name
                );
            }
        }
    }
    if config.run_as.is_some() && !sandbox::reachable_by_all(&config.work_root) {
        return Err(std::io::Error::other(format!(
            "jobs could not reach their directories in {}: some directory on the way lets others no further (mode o-x); set --local-work-dir elsewhere",
            config.work_root.display()
        )));
    }
    Ok(())
}

#[async_trait]
impl Executor for LocalExecutor {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn launch(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        self.start(job)
    }

    async fn adopt(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        // The runner reconciles leftover runs from the stored status before starting more.
        self.start(job)
    }

    async fn cancel(&self, job: &Job) -> Result<(), ExecutorError> {
        let job_id = &job.id;
        let token = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(job_id)
            .cloned();
        match token {
            Some(token) => token.cancel(),
            None => {
                self.inner
                    .cancelled_early
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(job_id.to_owned());
                self.inner.close_log(job_id);
                // Runs left by a jobgate that stopped between recording the cancel and
                // stopping them: their process groups are in the job's last status.
                let state: RunnerState =
                    serde_json::from_value(job.workload.executor_state.clone()).unwrap_or_default();
                for run in &state.runs {
                    kill_leftover(run);
                }
                sandbox::remove_work_dir(self.inner.config.work_root.join(job_id)).await;
            }
        }
        Ok(())
    }

    /// Removes the deleted jobs' log files (and their rotated halves).
    async fn forget(&self, job_ids: &[String]) {
        for id in job_ids {
            let log = self.log_path(id);
            for path in [log.with_extension("log.1"), log] {
                match tokio::fs::remove_file(&path).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(job = %id, path = %path.display(), error = %e, "could not remove a deleted job's log")
                    }
                }
            }
        }
    }

    async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ExecutorError> {
        read_log_tail(
            &self.log_path(&job.id),
            tail_lines,
            self.inner.config.max_log_bytes,
        )
        .await
        .map_err(|source| ExecutorError::Logs {
            job: job.id.clone(),
            source,
        })
    }

    fn log_stream(
        &self,
        job: Arc<Job>,
        tail_lines: usize,
        follow_until: Option<BoxFuture<'static, ()>>,
    ) -> BoxStream<'static, Result<LogLine, ExecutorError>> {
        let line = |text: String| LogLine { source: None, text };
        let Some(until) = follow_until else {
            let this = self.clone();
            return super::lines_once(async move { this.logs(&job, tail_lines).await });
        };
        let writer = self.inner.log_writer(&job.id);
        let shutdown = self.inner.shutdown.clone();
        futures::stream::once(async move {
            let (past, live) = match writer.follow(tail_lines).await {
                Ok(followed) => followed,
                Err(source) => {
                    let e = ExecutorError::Logs { job: job.id.clone(), source };
                    return futures::stream::once(async { Err(e) }).boxed();
                }
            };
            // The stream ends, once drained, when the job's terminal phase is recorded.
            let closed = CancellationToken::new();
            let finished = closed.clone();
            tokio::spawn(async move {
                until.await;
                finished.cancel();
            });
            // The follower holds the writer, so the channel stays open until the job's end is
            // recorded, even after the runner has let go of it.
            let state = (live, closed, shutdown, writer);
            let live = futures::stream::unfold(state, |(mut rx, closed, shutdown, writer)| async move {
                use tokio::sync::broadcast::error::{RecvError, TryRecvError};
                let text = tokio::select! {
                    biased;
                    received = rx.recv() => match received {
                        Ok(text) => text.to_string(),
                        Err(RecvError::Lagged(n)) => format!("[jobgate: {n} lines skipped: this reader fell behind]"),
                        Err(RecvError::Closed) => return None,
                    },
                    _ = closed.cancelled() => match rx.try_recv() {
                        Ok(text) => text.to_string(),
                        Err(TryRecvError::Lagged(n)) => format!("[jobgate: {n} lines skipped: this reader fell behind]"),
                        Err(_) => return None,
                    },
                    _ = shutdown.cancelled() => return None,
                };
                Some((Ok(LogLine { source: None, text }), (rx, closed, shutdown, writer)))
            });
            futures::stream::iter(past.into_iter().map(line).map(Ok)).chain(live).boxed()
        })
        .flatten()
        .boxed()
    }

    /// A runner is still at work on the job (its output is copied before it lets go).
    fn output_pending(&self, job_id: &str) -> bool {
        self.inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(job_id)
    }

    fn is_ready(&self) -> bool {
        !self.inner.shutdown.is_cancelled()
    }

    async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}
