//! The local executor: runs jobs as processes on this machine, with batch/v1 Job semantics.
//!
//! It owns one runner task per job, the job's process groups, its log files under the data
//! directory (`logs`) and its working directory outside it ([`sandbox`]). Each run is a
//! process group of its own (so a cancel or a deadline stops children too), runs as the
//! unprivileged `--run-as-user` when jobgate is root, in the job's own directory (its HOME,
//! with its TMPDIR inside), and sees an environment built from nothing: PATH, HOME, TMPDIR,
//! LANG, the job's `env`, `JOB_COMPLETION_INDEX`, `JOBGATE_JOB_ID` and `JOBGATE_RESULT_FILE`
//! (a file in its directory, which jobgate reads back after the run). Like the Job
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

pub mod launcher;
mod logs;
pub mod sandbox;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use futures::FutureExt;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use self::logs::{LogWriter, copy_lines, read_log_tail};
use self::sandbox::RunAs;
use super::{Executor, ExecutorError, LogLine, LogSink, Observation, ObservationSender};
use crate::model::{Condition, Job, MAX_RESULT_BYTES, WorkloadStatus, clip};

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
    /// ([`launcher::this_binary`]); with none, the standard library forks jobgate to switch
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
}

/// A run in progress: enough to find and kill its process group after a restart.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct RunRecord {
    index: i32,
    pgid: i32,
    /// The process's start time in clock ticks since boot (/proc/PID/stat field 22), so a
    /// recycled pid is never mistaken for ours.
    proc_start: Option<u64>,
}

/// How long a finished job's report waits for the archive to commit its output.
const ARCHIVE_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct LocalExecutor {
    inner: Arc<Inner>,
}

struct Inner {
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

impl Inner {
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
            inner: Arc::new(Inner {
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
        let fallback = Observation {
            job_id: job.id.clone(),
            status: job.workload.clone(),
        };
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
                    .send(Observation {
                        job_id: fallback.job_id,
                        status,
                    })
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

/// How one run ended.
enum RunOutcome {
    Succeeded { result: Option<String> },
    Failed { why: String },
}

struct Runner {
    inner: Arc<Inner>,
    job: Arc<Job>,
    status: WorkloadStatus,
    work_dir: PathBuf,
    cancel: CancellationToken,
}

/// Why a runner stopped before the job finished.
enum Stop {
    Cancelled,
    Shutdown,
}

impl Runner {
    async fn run(mut self) {
        let id = self.job.id.clone();
        let stopped = self.drive().await;
        match stopped {
            // Finished: `finish` removed the directory, unless the job had ended before.
            Ok(()) => sandbox::remove_work_dir(self.work_dir.clone()).await,
            Err(Stop::Cancelled) => {
                tracing::info!(job = %id, "local job cancelled; its processes are stopped");
                sandbox::remove_work_dir(self.work_dir.clone()).await;
            }
            // The job goes on after a restart, in the same directory.
            Err(Stop::Shutdown) => {}
        }
        self.inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        self.inner.close_log(&id);
    }

    fn state(&self) -> RunnerState {
        serde_json::from_value(self.status.executor_state.clone()).unwrap_or_default()
    }

    fn set_state(&mut self, state: &RunnerState) {
        self.status.executor_state = serde_json::to_value(state).unwrap_or_default();
    }

    async fn report(&self) {
        let observation = Observation {
            job_id: self.job.id.clone(),
            status: self.status.clone(),
        };
        if self.inner.observations.send(observation).await.is_err() {
            tracing::warn!(job = %self.job.id, "job service is gone; observation dropped");
        }
    }

    /// Records the job's outcome and reports it, once its working directory is gone (so
    /// that whoever learns the job finished finds nothing of it left for other jobs).
    async fn finish(&mut self, success: bool, reason: &str, message: &str) {
        let now = Utc::now();
        let (first, second) = if success {
            ("SuccessCriteriaMet", "Complete")
        } else {
            ("FailureTarget", "Failed")
        };
        for type_ in [first, second] {
            self.status
                .conditions
                .push(Condition::truthy(type_, reason, Some(message.to_owned()), now));
        }
        if success {
            self.status.completion_time = Some(now);
        }
        self.status.active = 0;
        self.set_state(&RunnerState::default());
        sandbox::remove_work_dir(self.work_dir.clone()).await;
        // Whoever learns the job finished finds its whole output archived: its runs have
        // ended and their output was copied; wait (a little, the store may be away) for the
        // archive to commit it.
        if let Some(sink) = self.inner.log_sink.get() {
            let _ = tokio::time::timeout(ARCHIVE_GRACE, sink.synced(&self.job.id)).await;
        }
        self.report().await;
    }

    /// Runs the job to its end; `Err` when it was stopped from outside.
    async fn drive(&mut self) -> Result<(), Stop> {
        let spec = self.job.spec.clone();
        if self.status.derive_phase().phase.is_terminal() {
            return Ok(());
        }
        // Runs that were in progress when jobgate stopped: their outcome is unknown, so like
        // a pod lost with its node they count as failed attempts.
        let leftovers = self.state().runs;
        let interrupted = self.status.active.max(leftovers.len() as i32);
        if interrupted > 0 {
            for run in &leftovers {
                kill_leftover(run);
            }
            self.status.failed += interrupted;
            self.status.active = 0;
            self.set_state(&RunnerState::default());
            self.status.message = Some(format!(
                "{interrupted} run(s) were in progress when jobgate stopped and count as failed (GatewayRestarted)"
            ));
            if self.status.failed > spec.backoff_limit {
                let message =
                    "runs in progress were lost when jobgate restarted and the backoff limit is reached";
                self.finish(false, "GatewayRestarted", message).await;
                return Ok(());
            }
            self.report().await;
        }

        let mut pending: VecDeque<i32> = (0..spec.completions)
            .filter(|i| !self.status.completed_indexes.contains(i))
            .collect();
        let deadline = spec.active_deadline_seconds.map(|secs| {
            let started = self.status.start_time.unwrap_or_else(Utc::now);
            let left = (started + chrono::Duration::seconds(secs.into()) - Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            Instant::now() + left
        });
        let mut runs: JoinSet<(i32, RunOutcome)> = JoinSet::new();
        let mut groups: HashMap<i32, RunRecord> = HashMap::new();
        let mut retry_at: Option<Instant> = None;

        loop {
            // Start runs up to `parallelism`, unless a retry is backing off.
            let may_start = retry_at.is_none_or(|t| t <= Instant::now());
            if may_start {
                retry_at = None;
            }
            let mut changed = false;
            while may_start && (runs.len() as i32) < spec.parallelism {
                let Some(index) = pending.pop_front() else { break };
                match self.spawn_run(index, &mut runs).await {
                    Ok(record) => {
                        groups.insert(index, record);
                        changed = true;
                    }
                    Err(why) => {
                        // A program that cannot start is a failed run, as a container that
                        // fails to start is.
                        self.status.failed += 1;
                        self.status.message = Some(why);
                        changed = true;
                        if self.status.failed > spec.backoff_limit {
                            return self
                                .fail_all(
                                    &mut runs,
                                    &groups,
                                    "BackoffLimitExceeded",
                                    "Job has reached the specified backoff limit",
                                )
                                .await;
                        }
                        pending.push_back(index);
                        retry_at = Some(Instant::now() + self.retry_delay());
                        break;
                    }
                }
            }
            if changed {
                if self.status.start_time.is_none() {
                    self.status.start_time = Some(Utc::now());
                }
                self.status.active = runs.len() as i32;
                let state = RunnerState {
                    runs: groups.values().cloned().collect(),
                };
                self.set_state(&state);
                self.report().await;
            }
            if runs.is_empty() && pending.is_empty() {
                let message = "Reached expected number of succeeded pods";
                self.finish(true, "CompletionsReached", message).await;
                return Ok(());
            }

            tokio::select! {
                _ = self.cancel.cancelled() => {
                    let stop = if self.inner.shutdown.is_cancelled() { Stop::Shutdown } else { Stop::Cancelled };
                    self.stop_all(&mut runs, &groups).await;
                    return Err(stop);
                }
                _ = sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                    return self.fail_all(&mut runs, &groups, "DeadlineExceeded", "Job was active longer than specified deadline").await;
                }
                _ = sleep_until(retry_at.unwrap_or_else(far_future)), if retry_at.is_some() => {}
                Some(joined) = runs.join_next() => {
                    let Ok((index, outcome)) = joined else { continue };
                    if let Some(record) = groups.remove(&index) {
                        // As when a container's main process exits: whatever it left
                        // behind in its group goes too.
                        let _ = killpg(Pid::from_raw(record.pgid), Signal::SIGKILL);
                    }
                    self.status.active = runs.len() as i32;
                    self.set_state(&RunnerState { runs: groups.values().cloned().collect() });
                    match outcome {
                        RunOutcome::Succeeded { result } => {
                            self.status.succeeded += 1;
                            self.status.completed_indexes.insert(index);
                            if result.is_some() {
                                self.status.result = result;
                            }
                        }
                        RunOutcome::Failed { why } => {
                            self.status.failed += 1;
                            self.status.message = Some(why);
                            if self.status.failed > spec.backoff_limit {
                                return self.fail_all(&mut runs, &groups, "BackoffLimitExceeded", "Job has reached the specified backoff limit").await;
                            }
                            pending.push_back(index);
                            retry_at = Some(Instant::now() + self.retry_delay());
                        }
                    }
                    self.report().await;
                }
            }
        }
    }

    fn retry_delay(&self) -> Duration {
        let config = &self.inner.config;
        let doublings = (self.status.failed.max(1) - 1).min(16) as u32;
        config
            .retry_delay
            .saturating_mul(2u32.saturating_pow(doublings))
            .min(config.retry_delay_cap)
    }

    async fn fail_all(
        &mut self,
        runs: &mut JoinSet<(i32, RunOutcome)>,
        groups: &HashMap<i32, RunRecord>,
        reason: &str,
        message: &str,
    ) -> Result<(), Stop> {
        self.stop_all(runs, groups).await;
        self.finish(false, reason, message).await;
        Ok(())
    }

    /// SIGTERM to every run's process group, SIGKILL after the grace period.
    async fn stop_all(&self, runs: &mut JoinSet<(i32, RunOutcome)>, groups: &HashMap<i32, RunRecord>) {
        for record in groups.values() {
            let _ = killpg(Pid::from_raw(record.pgid), Signal::SIGTERM);
        }
        let grace = tokio::time::sleep(self.inner.config.kill_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                _ = &mut grace => break,
                next = runs.join_next() => if next.is_none() { break },
            }
        }
        // Children that ignored SIGTERM, or outlived their group leader.
        for record in groups.values() {
            let _ = killpg(Pid::from_raw(record.pgid), Signal::SIGKILL);
        }
        runs.shutdown().await;
    }

    async fn spawn_run(
        &self,
        index: i32,
        runs: &mut JoinSet<(i32, RunOutcome)>,
    ) -> Result<RunRecord, String> {
        let spec = &self.job.spec;
        let attempt = self.status.failed + self.status.succeeded + 1;
        let result_file = self.work_dir.join(format!("result-{index}-{attempt}"));
        let _ = std::fs::remove_file(&result_file);
        // One pipe for stdout and stderr, as `2>&1` does, so that the log keeps the order in
        // which the program wrote its lines; two pipes read concurrently would not.
        let (output, output_writer) =
            std::io::pipe().map_err(|e| format!("run {attempt} (index {index}): creating a pipe: {e}"))?;
        let error_writer = output_writer
            .try_clone()
            .map_err(|e| format!("run {attempt} (index {index}): duplicating a pipe: {e}"))?;
        let program = resolve_program(&spec.command[0], &self.inner.config.path);
        let could_not_start = |e: &dyn std::fmt::Display| {
            format!(
                "run {attempt} (index {index}) could not start {:?}: {e}",
                spec.command[0]
            )
        };
        let config = &self.inner.config;
        let (mut command, launch) = match (&config.run_as, &config.launcher) {
            (Some(user), Some(launcher)) => {
                let (command, launch) =
                    launcher::command(launcher, user, &program).map_err(|e| could_not_start(&e))?;
                (command, Some(launch))
            }
            (run_as, _) => {
                let mut command = Command::new(&program);
                command.stdin(Stdio::null());
                if let Some(user) = run_as {
                    // With a uid set, the standard library also drops every supplementary
                    // group (setgroups(0)) before setuid; it forks jobgate to do so (see
                    // `launcher`).
                    command.uid(user.uid).gid(user.gid);
                }
                (command, None)
            }
        };
        command
            .args(&spec.command[1..])
            .args(&spec.args)
            .current_dir(&self.work_dir)
            // The job sees only what it was given plus a minimal base, never jobgate's own
            // environment (which may hold credentials) nor a path into the data directory.
            .env_clear()
            .env("PATH", &config.path)
            .env("HOME", &self.work_dir)
            .env("TMPDIR", self.work_dir.join("tmp"))
            .env("LANG", "C.UTF-8")
            .envs(spec.env.iter().map(|v| (&v.name, &v.value)))
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("JOBGATE_JOB_ID", &self.job.id)
            .env("JOBGATE_RESULT_FILE", &result_file)
            .stdout(output_writer)
            .stderr(error_writer)
            .process_group(0)
            .kill_on_drop(false);
        let spawned = command.spawn();
        // Our copies of the write ends must close, or the pipes never reach end of file.
        drop(command);
        let child = spawned.map_err(|e| could_not_start(&e))?;
        if let Some(launch) = launch {
            // The launcher exits once it has said why; tokio reaps it.
            launch.started().await.map_err(|why| could_not_start(&why))?;
        }
        let output = tokio::net::unix::pipe::Receiver::from_owned_fd(output.into())
            .map_err(|e| format!("run {attempt} (index {index}): reading its output: {e}"));
        let pid = child.id().ok_or("process exited before it could be tracked")? as i32;
        let record = RunRecord {
            index,
            pgid: pid,
            proc_start: proc_start_time(pid),
        };
        let log = self.inner.log_writer(&self.job.id);
        runs.spawn(watch_run(
            output
                .map_err(|e| tracing::warn!(job = %self.job.id, error = %e, "output not captured"))
                .ok(),
            child,
            index,
            attempt,
            result_file,
            self.inner.config.run_as.as_ref().map(|user| user.uid),
            log,
        ));
        Ok(record)
    }
}

/// The program's path, looked up in the jobs' PATH when it names no directory. Handing the
/// standard library an absolute path lets it use posix_spawn instead of fork+exec, which
/// grows costlier as jobgate's memory does (see BENCHMARKS.md).
fn resolve_program(program: &str, path: &str) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|m| {
                m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
        .unwrap_or_else(|| PathBuf::from(program))
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

/// Waits for one run: copies its output into the job's log and reads its result file.
async fn watch_run(
    output: Option<tokio::net::unix::pipe::Receiver>,
    mut child: Child,
    index: i32,
    attempt: i32,
    result_file: PathBuf,
    result_owner: Option<u32>,
    log: Arc<LogWriter>,
) -> (i32, RunOutcome) {
    let copy = output.map(|s| tokio::spawn(copy_lines(s, log.clone())));
    let status = child.wait().await;
    // Output written by children still holding the pipe ends when the group is killed.
    if let Some(copy) = copy {
        let _ = tokio::time::timeout(Duration::from_secs(2), copy).await;
    }
    let result = sandbox::read_result(&result_file, result_owner).await;
    let outcome = match status {
        Ok(s) if s.success() => RunOutcome::Succeeded { result },
        Ok(s) => {
            let how = match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                _ => "ended".to_owned(),
            };
            // As terminationMessagePolicy FallbackToLogsOnError: the result file, else the
            // last lines of output.
            let detail = match result {
                Some(r) => r,
                None => log.last_lines(5).await.join("\n"),
            };
            let mut why = format!("run {attempt} (index {index}) {how}");
            if !detail.is_empty() {
                why.push_str(": ");
                why.push_str(&detail);
            }
            RunOutcome::Failed {
                why: clip(why, MAX_RESULT_BYTES),
            }
        }
        Err(e) => RunOutcome::Failed {
            why: format!("run {attempt} (index {index}) could not be awaited: {e}"),
        },
    };
    (index, outcome)
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot.
fn proc_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields resume after the
    // last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Kills a process group left by a previous jobgate, if it is still the same one.
fn kill_leftover(run: &RunRecord) {
    let alive_and_ours = match (run.proc_start, proc_start_time(run.pgid)) {
        (Some(recorded), Some(now)) => recorded == now,
        (None, Some(_)) => false, // cannot prove it is ours: leave it
        // The leader is gone: its pgid could now name someone else's group, so leave it.
        (_, None) => false,
    };
    if alive_and_ours {
        let _ = killpg(Pid::from_raw(run.pgid), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_resolved_in_the_jobs_path() {
        assert_eq!(
            resolve_program("sh", "/nonexistent:/bin:/usr/bin"),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(resolve_program("./x", "/bin"), PathBuf::from("./x"));
        assert_eq!(
            resolve_program("no-such-program", "/bin"),
            PathBuf::from("no-such-program")
        );
    }

    #[test]
    fn clip_respects_char_boundaries() {
        let s = "é".repeat(3000);
        let clipped = clip(s, MAX_RESULT_BYTES);
        assert!(clipped.len() <= MAX_RESULT_BYTES);
        assert_eq!(clipped.len() % 2, 0);
    }

    #[test]
    fn proc_start_time_reads_our_own_process() {
        let me = std::process::id() as i32;
        assert!(proc_start_time(me).is_some());
        assert_eq!(proc_start_time(me), proc_start_time(me));
    }
}
