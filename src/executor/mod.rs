//! Executors run jobs' workloads and report what they observe.
//!
//! An [`Executor`] turns an accepted [`Job`] into running work and reports every change as an [`Observation`]: a batch/v1-shaped
//! [`WorkloadStatus`] from which the job service derives the phase. Executors never write the
//! store and never decide phases themselves; they observe and report.
//!
//! - [`local`]: local processes with batch/v1 Job semantics (the embedded default);
//! - [`kube`]: Kubernetes: batch/v1 Jobs, and the workload kinds of `templates/` (Kubeflow,
//!   Argo, Tekton, Ray, Spark…) through dynamic objects.

pub mod kube;
pub mod local;

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

pub use crate::model::LogLine;
use crate::model::{Job, ShardSet, WorkloadStatus};

/// What an executor saw of one job's workload.
#[derive(Clone, Debug)]
pub struct Observation {
    pub job_id: String,
    pub status: WorkloadStatus,
    /// Only `status.attempts` is news: a run started or ended while the workload's own status
    /// did not change (a pod changed before its Job did). The rest of `status` is empty, and
    /// the job keeps the status last reported.
    pub attempts_only: bool,
}

impl Observation {
    /// The workload's status, with the attempts the executor knows.
    pub fn of_status(job_id: String, status: WorkloadStatus) -> Self {
        Self {
            job_id,
            status,
            attempts_only: false,
        }
    }

    /// The job's attempts alone (see [`Observation::attempts_only`]).
    pub fn of_attempts(job_id: String, attempts: Vec<crate::model::JobAttempt>) -> Self {
        Self {
            job_id,
            status: WorkloadStatus {
                attempts,
                ..WorkloadStatus::default()
            },
            attempts_only: true,
        }
    }
}

/// Where executors send observations; the job service reads the other end.
pub type ObservationSender = mpsc::Sender<Observation>;

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("executor is shutting down")]
    ShuttingDown,
    #[error("reading logs of job {job}: {source}")]
    Logs { job: String, source: std::io::Error },
    #[error("preparing the workload of job {job}: {source}")]
    Prepare { job: String, source: std::io::Error },
    /// The workload cannot be created for now (the cluster is unreachable, overloaded or
    /// refuses for a reason an operator can fix); the launcher retries with back-off and the
    /// job stays PENDING with a condition giving `reason`.
    #[error("{message}")]
    Unavailable { reason: &'static str, message: String },
    /// The cluster answered the create with a server error (a 5xx: an admission webhook that
    /// cannot be called, a failing or overloaded API server). Retried as `Unavailable`, but for
    /// a bounded time (`--launch-retry-limit-secs`): then the job fails with the last message.
    #[error("{message}")]
    ServerError { reason: &'static str, message: String },
    /// The workload can never be created as asked; the job fails with `reason`.
    #[error("{message}")]
    Rejected { reason: &'static str, message: String },
    /// The cluster did not answer a read (logs) as asked.
    #[error("{0}")]
    Cluster(String),
    /// The job's shard is not this replica's (any more): the replica that owns it acts.
    #[error("the job's shard is another replica's now")]
    NotThisReplica,
}

/// The lines `read` returns, as a log stream that then ends (a job's tail, not followed).
pub(crate) fn lines_once(
    read: impl Future<Output = Result<Vec<String>, ExecutorError>> + Send + 'static,
) -> BoxStream<'static, Result<LogLine, ExecutorError>> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::once(read)
        .map_ok(|lines| {
            futures::stream::iter(lines.into_iter().map(|text| Ok(LogLine { source: None, text })))
        })
        .try_flatten()
        .boxed()
}

/// Where executors hand the output they read, to be archived in the store (by the job
/// service's archive: executors never write the store themselves). Appending never waits for
/// the store; lines are batched and written beside the job writer's transactions.
#[async_trait]
pub trait LogSink: Send + Sync + 'static {
    /// Where `source`'s archived output of the job ends (the position its last committed
    /// lines stored), to resume following it without repeating or skipping a line.
    async fn position(&self, job_id: &str, source: &str) -> Result<Option<String>, ExecutorError>;

    /// Queues `lines` of `source` for the job's archive. `position` is `(resumed_from, now)`:
    /// the lines land only if the source's stored position is still `resumed_from`, and
    /// then it becomes `now` (`None`: no position is kept, as for a local job's pipe).
    fn append(
        &self,
        job_id: &str,
        source: &str,
        position: Option<(Option<String>, String)>,
        lines: Vec<LogLine>,
    ) -> SinkState;

    /// Queues, in order with `source`'s lines, a stretch of its output that could not be read
    /// (see [`LogGap`](crate::model::LogGap)): the archive keeps a marker line where it was
    /// and no longer reads as whole. `position` as for [`LogSink::append`].
    fn gap(
        &self,
        job_id: &str,
        source: &str,
        position: Option<(Option<String>, String)>,
        gap: crate::model::LogGap,
    ) -> SinkState;

    /// Resolves once every line queued for the job so far has been committed (or can never
    /// be: the archive closed, the sink stopped).
    async fn synced(&self, job_id: &str);
}

/// What a [`LogSink`] knows of a source after an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkState {
    /// Keep following.
    Open,
    /// The job's archive takes no more lines (its cap, or lines were lost): stop following.
    Closed,
    /// Someone else moved this source's position on (another replica, an older follower):
    /// read it again with [`LogSink::position`] and resume from there.
    Stale,
}

/// One run of a job as its executor sees it: a pod, on Kubernetes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    pub name: String,
    /// The completion index, for Indexed jobs.
    pub index: Option<i32>,
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    pub phase: &'static str,
    pub exit_code: Option<i32>,
    /// Why it ended, e.g. `Error`, `OOMKilled`, `DeadlineExceeded`.
    pub reason: Option<String>,
    /// Its termination message: the result it wrote, or its last lines when it failed.
    pub message: Option<String>,
    pub created_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[async_trait]
pub trait Executor: Send + Sync + 'static {
    /// A short name for logs and `/readyz`, e.g. `local`.
    fn kind(&self) -> &'static str;

    /// Starts the job's workload. Idempotent: launching a job whose workload exists does
    /// nothing. Returns once the executor has taken responsibility for the job.
    async fn launch(&self, job: Arc<Job>) -> Result<(), ExecutorError>;

    /// Resumes tracking a job launched before jobgate restarted; the executor reconciles what
    /// happened meanwhile and reports it.
    async fn adopt(&self, job: Arc<Job>) -> Result<(), ExecutorError>;

    /// Stops the job's workload, whether or not this process tracks it (the cancel may come
    /// from before a restart), retrying until it is stopped or the executor shuts down. The
    /// job service has already recorded the cancellation, and asks again after a restart
    /// until this returns `Ok`, so it must be idempotent: a workload already gone is stopped.
    async fn cancel(&self, job: &Job) -> Result<(), ExecutorError>;

    /// The last `tail_lines` lines of the job's output.
    async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ExecutorError>;

    /// The job's output as a stream of lines: the last `tail_lines` lines, then, when
    /// following, every new line until `follow_until` resolves (the job has finished) and
    /// the output written until then is drained.
    fn log_stream(
        &self,
        job: Arc<Job>,
        tail_lines: usize,
        follow_until: Option<BoxFuture<'static, ()>>,
    ) -> BoxStream<'static, Result<LogLine, ExecutorError>>;

    /// Lets go of what the executor keeps of finished jobs that retention has deleted (the
    /// local executor's log files). Best effort: what is left behind is only disk space.
    async fn forget(&self, _job_ids: &[String]) {}

    /// Starts observing, once every job launched before a restart has been adopted.
    async fn start(&self) {}

    /// The shards this process acts for, as they change, when it shares its store with other
    /// replicas and divides the work with them; `None` when it acts for every job.
    fn shards(&self) -> Option<tokio::sync::watch::Receiver<ShardSet>> {
        None
    }

    /// From now on follows exactly the jobs of `shards`: called with each new set of
    /// [`Executor::shards`], once the unfinished jobs of the shards gained have been adopted.
    async fn follow_shards(&self, _shards: ShardSet) {}

    /// Whether output of the job may still reach the archive: a run still writing, or a pod
    /// whose log is still being read (on Kubernetes, seen by every replica: the pod keeps
    /// jobgate's finalizer until its log is archived). A log stream ends once the job has
    /// finished and this is false.
    fn output_pending(&self, _job_id: &str) -> bool {
        false
    }

    /// Whether the job's workload has already finished by the executor's own observation,
    /// even if the job service has not recorded it yet (a cancel must not override it).
    fn has_finished(&self, _job_id: &str) -> bool {
        false
    }

    /// The job's runs as the executor sees them now (its pods, on Kubernetes), oldest first.
    /// Empty when the executor does not track runs one by one, or no longer tracks the job.
    fn runs(&self, _job_id: &str) -> Vec<RunInfo> {
        Vec::new()
    }

    /// Where a job waiting in the executor's queue (Kueue's, on Kubernetes) stands now;
    /// `None` when the executor keeps no queue or does not know the job's place.
    fn queue_place(&self, _job: &Job) -> Option<crate::model::QueuePlace> {
        None
    }

    /// Whether jobs of `template` can run now; `Err` says why not (e.g. its kind's CRD is
    /// not installed). Only `container` runs everywhere; workload templates create
    /// Kubernetes objects.
    fn template_available(&self, template: &str) -> Result<(), String> {
        if template == crate::templates::CONTAINER {
            Ok(())
        } else {
            Err(format!(
                "template {template} creates Kubernetes objects; this server runs jobs with the {} executor",
                self.kind()
            ))
        }
    }

    /// Whether the executor can take work now.
    fn is_ready(&self) -> bool;

    /// Why the executor cannot take work now, in words for `/readyz`; `None` when it can.
    fn unready_reason(&self) -> Option<String> {
        (!self.is_ready()).then(|| format!("the {} executor does not take work now", self.kind()))
    }

    /// Stops every workload this process runs and waits for them; no observation follows.
    async fn shutdown(&self);
}
