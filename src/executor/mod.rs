//! Executors run jobs' workloads and report what they observe.
//!
//! An [`Executor`] turns an accepted [`Job`] into running work (local processes, or later a
//! Kubernetes object) and reports every change as an [`Observation`]: a batch/v1-shaped
//! [`WorkloadStatus`] from which the job service derives the phase. Executors never write the
//! store and never decide phases themselves; they observe and report.

pub mod local;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::jobs::model::{Job, WorkloadStatus};

/// What an executor saw of one job's workload.
#[derive(Clone, Debug)]
pub struct Observation {
    pub job_id: String,
    pub status: WorkloadStatus,
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

    /// Stops the job's workload. The job service has already recorded the cancellation; a
    /// cancel of an unknown or finished job does nothing.
    async fn cancel(&self, job_id: &str) -> Result<(), ExecutorError>;

    /// The last `tail_lines` lines of the job's output.
    async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ExecutorError>;

    /// Whether the executor can take work now.
    fn is_ready(&self) -> bool;

    /// Stops every workload this process runs and waits for them; no observation follows.
    async fn shutdown(&self);
}
