//! `JobService`: the one place job state changes.
//!
//! It owns the write path: every submit, cancel, launch mark and executor observation is a
//! command to a single writer task, which applies a batch of commands in one store
//! transaction, then updates the in-memory cache and publishes the recorded events in
//! cursor order. One writer means no lost update between concurrent observations, a
//! serialised idempotency check, and events that reach the bus in the order they were
//! committed. Nobody is answered before their change is committed.
//!
//! It also owns the launcher, which hands accepted jobs to the executor after `submitJob`
//! has answered (the store's `launched` flag is the outbox), the canceller, which stops the
//! workloads of cancelled jobs (the store's `pending_cancellations` is its outbox, so a
//! restart in between does not let a cancelled workload run on), and recovery at start.
//!
//! When the store cannot write (a full disk, a deleted or truncated database file), the
//! writer answers every submit and cancel with an error and changes nothing, keeps the
//! executors' observations to apply later, marks the store unhealthy (so `/readyz` fails),
//! and probes it every second until a write succeeds again.
//!
//! It must not know about GraphQL or HTTP: callers get domain types and [`ServiceError`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use dashmap::DashMap;
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::executor::{Executor, ExecutorError, LogLine, Observation, RunInfo};
use crate::jobs::bus::EventBus;
use crate::jobs::template::{self, Runtime, Template};
use crate::metrics::Metrics;
use crate::model::{
    Job, JobEvent, JobFilter, JobPhase, JobSpec, Scope, SubmitRequest, Transition, ValidationError,
    ValidationLimits,
};
use crate::store::{JobPage, Store, StoreError, StoreTx};
use crate::templates::TemplateSet;

/// What a client can be told went wrong. Internal causes are logged, never shown.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("idempotencyKey {key:?} was already used for a different job input")]
    IdempotencyConflict { key: String },
    #[error("no job with id {id:?}")]
    NotFound { id: String },
    #[error("{0}")]
    FailedPrecondition(String),
    /// What was asked cannot be done now, for a reason an operator can fix (a workload kind
    /// that is not installed in the cluster).
    #[error("{0}")]
    Unavailable(String),
    /// The caller may not do this (a namespace outside its scope).
    #[error("{0}")]
    Forbidden(String),
    /// The namespace holds as many active jobs as it may.
    #[error(
        "namespace {namespace:?} already has {limit} active jobs (PENDING or RUNNING), its quota; submit again when some have finished"
    )]
    QuotaExceeded { namespace: String, limit: u64 },
    #[error("jobgate is shutting down")]
    ShuttingDown,
    #[error("the store is unavailable")]
    Store(#[from] StoreError),
}

impl ServiceError {
    /// Whether a store error is a write refused while the store cannot write (already
    /// logged by the writer when it began).
    pub fn store_unwritable(cause: &StoreError) -> bool {
        matches!(cause, StoreError::Write(_) | StoreError::Files(_))
    }

    /// A short, fixed name for metrics labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid",
            Self::IdempotencyConflict { .. } => "idempotency_conflict",
            Self::NotFound { .. } => "not_found",
            Self::FailedPrecondition(_) => "failed_precondition",
            Self::Unavailable(_) => "unavailable",
            Self::Forbidden(_) => "forbidden",
            Self::QuotaExceeded { .. } => "quota_exceeded",
            Self::ShuttingDown => "shutting_down",
            Self::Store(_) => "store",
        }
    }
}

/// Settings of the job service.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    pub limits: ValidationLimits,
    /// Capacity of the event broadcast channel; a subscriber further behind is caught up
    /// from the store.
    pub broadcast_capacity: usize,
    /// The most PENDING or RUNNING jobs one namespace may hold; 0 for no limit.
    pub max_active_per_namespace: u64,
    pub metrics: Arc<Metrics>,
    /// The most commands the writer applies in one transaction.
    pub max_batch: usize,
    /// The templates clients may name, as `templates` describes them (availability is the
    /// executor's, asked each time).
    pub templates: Vec<Template>,
    /// The workload templates (all but `container`).
    pub workload_templates: Arc<TemplateSet>,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            limits: ValidationLimits::default(),
            broadcast_capacity: 4096,
            max_active_per_namespace: 0,
            metrics: Metrics::new(),
            max_batch: 256,
            templates: template::builtin(
                &ValidationLimits::default(),
                Runtime::Local,
                &TemplateSet::default(),
            ),
            workload_templates: Arc::new(TemplateSet::default()),
        }
    }
}

/// Counts by phase and recent activity, consistent with `cursor` (see [`JobService::stats`]).
#[derive(Clone, Debug)]
pub struct Stats {
    /// The newest event the snapshot includes; 0 when there is none.
    pub cursor: i64,
    pub counts: HashMap<JobPhase, i64>,
    pub activity: Vec<ActivityBucket>,
}

/// Submissions and completions in one bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActivityBucket {
    /// Unix seconds.
    pub start: i64,
    pub submitted: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
}

/// The result of a submit: the job, and whether this call created it.
/// Who submits a job: the name its `submitter` shows, and the principal that scopes its
/// idempotency keys (two identities may share a name, never a principal).
#[derive(Clone, Debug)]
pub struct Submitter {
    pub name: String,
    pub principal: String,
}

#[derive(Clone, Debug)]
pub struct Submitted {
    pub job: Arc<Job>,
    pub created: bool,
}

enum Command {
    Submit {
        job: Box<Job>,
        fingerprint: String,
        /// The submitter's namespaces: dependencies outside them do not exist for it.
        scope: Scope,
        reply: oneshot::Sender<Result<Submitted, ServiceError>>,
    },
    Cancel {
        id: String,
        scope: Scope,
        reply: oneshot::Sender<Result<Arc<Job>, ServiceError>>,
    },
    Observe(Observation),
    /// Records what became of launch attempts; answered whether it was committed.
    Launched {
        outcome: LaunchOutcome,
        reply: oneshot::Sender<bool>,
    },
    /// The workloads of these cancelled jobs are stopped; answered whether it was committed.
    CancellationsDone {
        ids: Vec<String>,
        reply: oneshot::Sender<bool>,
    },
}

/// A cheap, cloneable handle to the job service.
#[derive(Clone)]
pub struct JobService {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    bus: Arc<EventBus>,
    executor: Arc<dyn Executor>,
    limits: ValidationLimits,
    max_active_per_namespace: u64,
    metrics: Arc<Metrics>,
    templates: Vec<Template>,
    workload_templates: Arc<TemplateSet>,
    commands: mpsc::Sender<Command>,
    /// Jobs not yet finished, as last committed. Written by the writer task only; read by
    /// anyone. Finished jobs are read from the store.
    active: DashMap<String, Arc<Job>>,
    launch_wanted: Notify,
    /// Wakes the canceller: a cancellation was committed.
    cancel_wanted: Notify,
    /// Cancelled when shutdown begins: no new commands, no more launches.
    shutdown: CancellationToken,
    /// Cancelled once the executor has stopped: the writer drains its queue and ends.
    writer_stop: CancellationToken,
    tasks: TaskTracker,
}

impl JobService {
    /// Starts the service: loads unfinished jobs, starts the writer and the launcher, and
    /// hands jobs launched before a restart back to the executor.
    pub async fn start(
        store: Store,
        executor: Arc<dyn Executor>,
        observations: mpsc::Receiver<Observation>,
        config: ServiceConfig,
    ) -> Result<Self, ServiceError> {
        let head = store.last_event_seq().await?;
        let bus = Arc::new(EventBus::new(store.clone(), config.broadcast_capacity, head));
        let (commands, commands_rx) = mpsc::channel(config.max_batch * 4);
        let unfinished = store.unfinished_jobs().await?;
        let active = DashMap::new();
        for r in &unfinished {
            active.insert(r.job.id.clone(), Arc::new(r.job.clone()));
        }
        let inner = Arc::new(Inner {
            store,
            bus,
            executor,
            limits: config.limits,
            max_active_per_namespace: config.max_active_per_namespace,
            metrics: config.metrics,
            templates: config.templates,
            workload_templates: config.workload_templates,
            commands,
            active,
            launch_wanted: Notify::new(),
            cancel_wanted: Notify::new(),
            shutdown: CancellationToken::new(),
            writer_stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        let writer = Writer {
            inner: inner.clone(),
            max_batch: config.max_batch,
        };
        inner.tasks.spawn(writer.run(commands_rx, observations));
        // Jobs launched before a restart go back to the executor, which reconciles them;
        // jobs never launched are the launcher's.
        for r in unfinished.into_iter().filter(|r| r.launched) {
            let id = r.job.id.clone();
            if let Err(e) = inner.executor.adopt(Arc::new(r.job)).await {
                tracing::error!(job = %id, error = %e, "could not adopt job after restart");
            }
        }
        inner.executor.start().await;
        inner.tasks.spawn(launcher(inner.clone()));
        inner.tasks.spawn(canceller(inner.clone()));
        Ok(Self { inner })
    }

    /// Validates and durably accepts a job; answers once it is committed, PENDING. Its
    /// idempotency key is scoped by `submitter.principal`.
    #[tracing::instrument(skip_all, fields(job))]
    pub async fn submit(
        &self,
        request: SubmitRequest,
        submitter: Option<Submitter>,
        scope: &Scope,
    ) -> Result<Submitted, ServiceError> {
        let metrics = &self.inner.metrics;
        metrics.jobs_submitted.inc();
        let result = self.try_submit(request, submitter, scope).await;
        match &result {
            Ok(s) if s.created => {
                metrics.jobs_accepted.inc();
            }
            Ok(_) => {}
            Err(e) => metrics.rejected(e.reason()),
        }
        result
    }

    async fn try_submit(
        &self,
        request: SubmitRequest,
        submitter: Option<Submitter>,
        scope: &Scope,
    ) -> Result<Submitted, ServiceError> {
        let spec: JobSpec = request.validate(&self.inner.limits)?;
        if !scope.allows(&spec.namespace) {
            return Err(ServiceError::Forbidden(format!(
                "you may not use namespace {:?}",
                spec.namespace
            )));
        }
        if let Some(t) = self.inner.workload_templates.get(&spec.template) {
            t.validate_parameters(spec.parameters.as_ref())?;
        }
        // Refused now rather than accepted to wait: nothing would ever run it.
        self.inner
            .executor
            .template_available(&spec.template)
            .map_err(|why| {
                ServiceError::Unavailable(format!("template {} is not available: {why}", spec.template))
            })?;
        let fingerprint = spec.fingerprint();
        let id = uuid::Uuid::now_v7().to_string();
        tracing::Span::current().record("job", id.as_str());
        let mut job = Job::accepted(id, spec, request.idempotency_key, Utc::now());
        if let Some(submitter) = submitter {
            job.submitter = Some(submitter.name);
            job.submitter_key = Some(submitter.principal);
        }
        let (reply, answer) = oneshot::channel();
        self.command(Command::Submit {
            job: Box::new(job),
            fingerprint,
            scope: scope.clone(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| ServiceError::ShuttingDown)?
    }

    /// Cancels a PENDING or RUNNING job: records CANCELLED, then stops its workload.
    #[tracing::instrument(skip_all, fields(job = %id))]
    pub async fn cancel(&self, id: &str, scope: &Scope) -> Result<Arc<Job>, ServiceError> {
        // Another tenant's job does not exist for this caller, whatever state it is in.
        if self.job(id, scope).await?.is_none() {
            return Err(ServiceError::NotFound { id: id.to_owned() });
        }
        // A workload that finished before the cancel keeps its true outcome, which the
        // executor is about to report.
        if self.inner.executor.has_finished(id) {
            return Err(ServiceError::FailedPrecondition(format!(
                "job {id} has already finished; its outcome is being recorded"
            )));
        }
        let (reply, answer) = oneshot::channel();
        self.command(Command::Cancel {
            id: id.to_owned(),
            scope: scope.clone(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| ServiceError::ShuttingDown)?
    }

    async fn command(&self, command: Command) -> Result<(), ServiceError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(ServiceError::ShuttingDown);
        }
        self.inner
            .commands
            .send(command)
            .await
            .map_err(|_| ServiceError::ShuttingDown)
    }

    /// The job, if it exists and `scope` may see it: another tenant's job answers `None`,
    /// exactly as a job that never existed.
    pub async fn job(&self, id: &str, scope: &Scope) -> Result<Option<Arc<Job>>, ServiceError> {
        let job = match self.inner.active.get(id) {
            Some(job) => Some(job.clone()),
            None => {
                let started = std::time::Instant::now();
                let job = self.inner.store.get_job(id).await?.map(Arc::new);
                self.inner.metrics.store_op("read", started.elapsed());
                job
            }
        };
        Ok(job.filter(|j| scope.sees(j)))
    }

    pub async fn jobs(
        &self,
        filter: &JobFilter,
        first: i64,
        after: Option<i64>,
    ) -> Result<JobPage, ServiceError> {
        let started = std::time::Instant::now();
        let page = self.inner.store.list_jobs(filter, first, after).await?;
        self.inner.metrics.store_op("list", started.elapsed());
        Ok(page)
    }

    /// The job's runs as its executor sees them now (its pods, on Kubernetes).
    pub fn runs(&self, id: &str) -> Vec<RunInfo> {
        self.inner.executor.runs(id)
    }

    /// The templates jobs may name, with whether each can run now.
    pub fn templates(&self) -> Vec<Template> {
        let mut templates = self.inner.templates.clone();
        for t in &mut templates {
            match self.inner.executor.template_available(&t.name) {
                Ok(()) => t.available = true,
                Err(why) => {
                    t.available = false;
                    t.unavailable_reason = Some(why);
                }
            }
        }
        templates
    }

    /// Namespaces a job may be submitted to when the server limits them; otherwise those in
    /// use (at most `limit`) with the default one, sorted.
    pub async fn namespaces(&self, limit: i64, scope: &Scope) -> Result<Vec<String>, ServiceError> {
        let limits = &self.inner.limits;
        if !limits.allowed_namespaces.is_empty() {
            let mut allowed = limits.allowed_namespaces.clone();
            allowed.retain(|ns| scope.allows(ns));
            allowed.sort();
            return Ok(allowed);
        }
        if let Some(namespaces) = scope.list() {
            return Ok(namespaces.iter().cloned().collect());
        }
        let mut used = self.inner.store.namespaces(limit, scope).await?;
        if !used.contains(&limits.default_namespace) {
            used.push(limits.default_namespace.clone());
            used.sort();
        }
        Ok(used)
    }

    /// Counts by phase, submissions and completions per bucket of `bucket_seconds` over the
    /// last `buckets` buckets (the last is the current one, buckets aligned to the Unix
    /// epoch), and the cursor of the newest event included: one consistent snapshot.
    pub async fn stats(
        &self,
        buckets: i64,
        bucket_seconds: i64,
        scope: &Scope,
    ) -> Result<Stats, ServiceError> {
        let snapshot = self.inner.store.stats(buckets, bucket_seconds, scope).await?;
        let first = snapshot.since;
        let mut activity: Vec<ActivityBucket> = (0..buckets)
            .map(|i| ActivityBucket {
                start: first + i * bucket_seconds,
                ..ActivityBucket::default()
            })
            .collect();
        for (bucket, count) in snapshot.submitted {
            if let Some(b) = usize::try_from(bucket).ok().and_then(|i| activity.get_mut(i)) {
                b.submitted += count;
            }
        }
        for (bucket, phase, count) in snapshot.finished {
            if let Some(b) = usize::try_from(bucket).ok().and_then(|i| activity.get_mut(i)) {
                match phase {
                    JobPhase::Succeeded => b.succeeded += count,
                    JobPhase::Failed => b.failed += count,
                    JobPhase::Cancelled => b.cancelled += count,
                    JobPhase::Pending | JobPhase::Running => {}
                }
            }
        }
        Ok(Stats {
            cursor: snapshot.cursor,
            counts: snapshot.counts,
            activity,
        })
    }

    /// The job's newest `last` status events, oldest first: its recorded history.
    pub async fn history(&self, id: &str, last: usize) -> Result<Vec<JobEvent>, ServiceError> {
        Ok(self.inner.store.job_history(id, last as i64).await?)
    }

    pub async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ServiceError> {
        self.inner.executor.logs(job, tail_lines).await.map_err(|e| {
            tracing::error!(job = %job.id, error = %e, "reading logs failed");
            ServiceError::FailedPrecondition("logs are not available right now".into())
        })
    }

    /// The job's output: the last `tail_lines` lines, then with `follow` every new line until
    /// the job has finished. `None` for an unknown job.
    pub async fn log_stream(
        &self,
        id: &str,
        scope: &Scope,
        tail_lines: usize,
        follow: bool,
    ) -> Result<Option<impl Stream<Item = Result<LogLine, ServiceError>> + Send + 'static>, ServiceError>
    {
        let Some((job, events)) = self.watch_job(id, scope).await? else {
            return Ok(None);
        };
        let until = (follow && !job.phase.is_terminal()).then(|| {
            async move {
                let mut events = std::pin::pin!(events);
                // Ends at the terminal event, or when the service stops.
                while let Some(Ok(event)) = events.next().await {
                    if event.phase.is_terminal() {
                        break;
                    }
                }
            }
            .boxed()
        });
        let id = job.id.clone();
        let lines = self
            .inner
            .executor
            .log_stream(job, tail_lines, until)
            .map(move |r| {
                r.map_err(|e| {
                    tracing::warn!(job = %id, error = %e, "streaming logs failed");
                    ServiceError::FailedPrecondition("logs are not available right now".into())
                })
            });
        Ok(Some(lines))
    }

    /// Every event after `after` (the present when `None`), then live ones.
    pub fn events(
        &self,
        after: Option<i64>,
        job_id: Option<String>,
    ) -> impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static {
        self.inner
            .bus
            .events(after, job_id)
            .map(|r| r.map_err(ServiceError::from))
    }

    /// The job as it is now and a stream of its later events, taken so that no event
    /// falls between the two. `None` for an unknown job.
    pub async fn watch_job(
        &self,
        id: &str,
        scope: &Scope,
    ) -> Result<
        Option<(
            Arc<Job>,
            impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static,
        )>,
        ServiceError,
    > {
        let subscription = self.inner.bus.subscribe();
        let Some(job) = self.job(id, scope).await? else {
            return Ok(None);
        };
        let events = self
            .inner
            .bus
            .events_from(subscription, job.last_event_seq, Some(id.to_owned()))
            .map(|r| r.map_err(ServiceError::from));
        Ok(Some((job, events)))
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// Whether the store takes writes now (see `Store::health`).
    pub fn store_writable(&self) -> bool {
        self.inner.store.health().is_none()
    }

    pub fn bus(&self) -> &Arc<EventBus> {
        &self.inner.bus
    }

    /// Whether the store answers and the executor takes work.
    pub async fn is_ready(&self) -> bool {
        !self.inner.shutdown.is_cancelled() && self.inner.executor.is_ready() && self.inner.store.ping().await
    }

    pub fn executor_kind(&self) -> &'static str {
        self.inner.executor.kind()
    }

    /// Stops taking commands, stops the executor's work, drains every write and closes the
    /// store. Jobs left RUNNING are reconciled at the next start.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.shutdown.cancel();
        // Stop the work first, so that every observation it made is queued before the
        // writer drains the queue and ends.
        inner.executor.shutdown().await;
        inner.writer_stop.cancel();
        inner.tasks.close();
        inner.tasks.wait().await;
        inner.store.close().await;
    }
}

/// How often the writer checks that the store can write (and, after a failure, probes it).
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How many jobs the launcher reads from the outbox at a time.
const LAUNCH_BATCH: i64 = 64;

/// How many launches run at once (each is one API request on Kubernetes).
const LAUNCH_CONCURRENCY: usize = 16;

/// Retry delays while workloads cannot be created: exponential, capped, with jitter, so that
/// many jobgates waiting for the same API server do not knock in step.
fn launch_backoff() -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(30))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

/// What became of one launch attempt.
#[derive(Debug, Default)]
struct LaunchOutcome {
    /// Handed to the executor: marked launched.
    launched: Vec<String>,
    /// Not created for now; (id, reason, message). Stay in the outbox.
    delayed: Vec<(String, &'static str, String)>,
    /// Never creatable; (id, reason, message). Failed and marked launched.
    rejected: Vec<(String, &'static str, String)>,
}

/// Hands accepted jobs to the executor, oldest first, and records what became of them.
async fn launcher(inner: Arc<Inner>) {
    let mut backoff = launch_backoff();
    loop {
        let batch = match inner.store.unlaunched_jobs(LAUNCH_BATCH).await {
            Ok(batch) => batch,
            Err(e) => {
                tracing::error!(error = %e, "launcher cannot read the outbox");
                Vec::new()
            }
        };
        let full = batch.len() == LAUNCH_BATCH as usize;
        let attempts = futures::stream::iter(batch)
            .map(|stored| {
                let inner = inner.clone();
                // Everything logged while launching (the executor's calls included) names the job.
                let span = tracing::info_span!("launch", job = %stored.id);
                tracing::Instrument::instrument(async move {
                    // The cache holds the job as last committed (it may have been cancelled
                    // since the outbox was read); a finished job is only marked.
                    let job = inner.active.get(&stored.id).map(|j| j.clone());
                    let result = match job.filter(|j| !j.phase.is_terminal()) {
                        Some(job) => inner.executor.launch(job).await,
                        None => Ok(()),
                    };
                    if result.is_ok() && !inner.active.contains_key(&stored.id) {
                        // Cancelled while it was being launched: the cancel may have run
                        // before the workload existed, so stop it again now that it does.
                        if let Ok(Some(job)) = inner.store.get_job(&stored.id).await
                            && job.phase == JobPhase::Cancelled
                            && let Err(e) = inner.executor.cancel(&job).await
                        {
                            tracing::error!(job = %stored.id, error = %e, "stopping a job cancelled during its launch failed");
                        }
                    }
                    (stored.id, result)
                }, span)
            })
            .buffer_unordered(LAUNCH_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let mut outcome = LaunchOutcome::default();
        for (id, result) in attempts {
            match result {
                Ok(()) => outcome.launched.push(id),
                Err(ExecutorError::ShuttingDown) => return,
                Err(ExecutorError::Rejected { reason, message }) => {
                    tracing::warn!(job = %id, reason, %message, "workload rejected; the job fails");
                    outcome.rejected.push((id, reason, message));
                }
                Err(ExecutorError::Unavailable { reason, message }) => {
                    tracing::warn!(job = %id, reason, %message, "workload not created yet; will retry");
                    inner.metrics.launch_retries.inc();
                    outcome.delayed.push((id, reason, message));
                }
                Err(e) => {
                    tracing::warn!(job = %id, error = %e, "launch failed; will retry");
                    inner.metrics.launch_retries.inc();
                    outcome.delayed.push((id, "LaunchFailed", e.to_string()));
                }
            }
        }
        let mut retry = !outcome.delayed.is_empty();
        if !outcome.launched.is_empty() || !outcome.rejected.is_empty() || retry {
            // Wait for the marks to be committed, so the next read of the outbox cannot
            // hand the same job over twice.
            let (reply, committed) = oneshot::channel();
            if inner
                .commands
                .send(Command::Launched { outcome, reply })
                .await
                .is_err()
            {
                return;
            }
            match committed.await {
                Ok(true) => {}
                // Not recorded (the store cannot write): the jobs are still in the outbox and
                // are handed over again (launching is idempotent) after a back-off.
                Ok(false) => retry = true,
                Err(_) => return,
            }
        }
        if !retry {
            backoff = launch_backoff();
            if full {
                continue; // more may be waiting
            }
        }
        let delay = backoff.next().unwrap_or(Duration::from_secs(30));
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            _ = inner.launch_wanted.notified(), if !retry => {}
            _ = tokio::time::sleep(delay), if retry => {}
        }
    }
}

/// How many pending cancellations the canceller reads at a time.
const CANCEL_BATCH: i64 = 64;

/// Stops the workloads of cancelled jobs, from the store's `pending_cancellations`, and
/// records each one stopped. A cancellation stays pending across restarts until its workload
/// is stopped: the executor retries while its cluster is away; a cancel that fails otherwise
/// is asked again after a back-off.
async fn canceller(inner: Arc<Inner>) {
    // Jobs whose cancel is running now, so that a wake-up does not start a second one.
    let mut in_flight: std::collections::HashSet<String> = std::collections::HashSet::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, bool)>();
    let mut backoff = launch_backoff();
    let mut retry = false;
    loop {
        match inner.store.pending_cancellations(CANCEL_BATCH).await {
            Ok(jobs) => {
                for job in jobs {
                    if !in_flight.insert(job.id.clone()) {
                        continue;
                    }
                    let executor = inner.executor.clone();
                    let done = done_tx.clone();
                    let span = tracing::info_span!("cancel", job = %job.id);
                    inner.tasks.spawn(tracing::Instrument::instrument(
                        async move {
                            let stopped = match executor.cancel(&job).await {
                                Ok(()) => true,
                                Err(ExecutorError::ShuttingDown) => return,
                                Err(e) => {
                                    tracing::error!(error = %e, "stopping a cancelled job's workload failed; will retry");
                                    false
                                }
                            };
                            let _ = done.send((job.id.clone(), stopped));
                        },
                        span,
                    ));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "canceller cannot read the pending cancellations");
                retry = true;
            }
        }
        let delay = if retry {
            backoff.next().unwrap_or(Duration::from_secs(30))
        } else {
            backoff = launch_backoff();
            Duration::ZERO
        };
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            _ = inner.cancel_wanted.notified() => {}
            _ = tokio::time::sleep(delay), if retry => {}
            Some(first) = done_rx.recv() => {
                let mut finished = vec![first];
                while let Ok(more) = done_rx.try_recv() {
                    finished.push(more);
                }
                let stopped: Vec<String> =
                    finished.iter().filter(|(_, ok)| *ok).map(|(id, _)| id.clone()).collect();
                retry = finished.iter().any(|(_, ok)| !ok);
                let mut recorded = stopped.is_empty();
                if !stopped.is_empty() {
                    let (reply, committed) = oneshot::channel();
                    if inner
                        .commands
                        .send(Command::CancellationsDone { ids: stopped, reply })
                        .await
                        .is_err()
                    {
                        return;
                    }
                    recorded = committed.await.unwrap_or(false);
                }
                // Forgotten only once recorded (or failed), so the next read may start them again.
                for (id, _) in &finished {
                    in_flight.remove(id);
                }
                retry |= !recorded;
            }
        }
    }
}

struct Writer {
    inner: Arc<Inner>,
    max_batch: usize,
}

/// A change made in the current batch, to publish once it is committed.
struct Recorded {
    event: Arc<JobEvent>,
}

impl Writer {
    async fn run(self, mut commands: mpsc::Receiver<Command>, mut observations: mpsc::Receiver<Observation>) {
        let mut batch = Vec::with_capacity(self.max_batch);
        // Observations a failed write could not record, the newest per job, oldest first:
        // they lead the next batch, so nothing an executor saw is lost to a full disk.
        let mut deferred: Vec<Observation> = Vec::new();
        let mut health = tokio::time::interval(HEALTH_CHECK_INTERVAL);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Wait for the first command; stop once shutdown is requested and nothing is left.
            let first = tokio::select! {
                biased;
                c = commands.recv() => c,
                o = observations.recv() => o.map(Command::Observe),
                _ = self.inner.writer_stop.cancelled() => None,
                _ = health.tick() => {
                    if self.check_health().await && !deferred.is_empty() {
                        let retried = std::mem::take(&mut deferred).into_iter().map(Command::Observe).collect();
                        self.apply(retried, &mut deferred).await;
                    }
                    continue;
                }
            };
            batch.extend(std::mem::take(&mut deferred).into_iter().map(Command::Observe));
            let Some(first) = first else {
                // Finish what was already queued before stopping.
                commands.close();
                observations.close();
                while let Ok(c) = commands.try_recv() {
                    batch.push(c);
                }
                while let Ok(o) = observations.try_recv() {
                    batch.push(Command::Observe(o));
                }
                if !batch.is_empty() {
                    self.apply(std::mem::take(&mut batch), &mut deferred).await;
                }
                for o in &deferred {
                    tracing::error!(job = %o.job_id, "observation not recorded: the store could not write before jobgate stopped; the executor reconciles the job at the next start");
                }
                return;
            };
            batch.push(first);
            while batch.len() < self.max_batch {
                match commands.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            while batch.len() < self.max_batch {
                match observations.try_recv() {
                    Ok(o) => batch.push(Command::Observe(o)),
                    Err(_) => break,
                }
            }
            self.apply(std::mem::take(&mut batch), &mut deferred).await;
        }
    }

    /// Checks that the store can write, on a timer: the database file must still be whole,
    /// and after a failure a probe write must succeed. Returns whether it can.
    async fn check_health(&self) -> bool {
        let store = &self.inner.store;
        let problem = match store.check_files() {
            Err(e) => Some(e.to_string()),
            Ok(()) if store.health().is_none() => None,
            Ok(()) => store.probe_write().await.err().map(|e| e.to_string()),
        };
        self.set_health(problem)
    }

    /// Records whether the store can write, logging each change once; returns whether it can.
    fn set_health(&self, problem: Option<String>) -> bool {
        let writable = problem.is_none();
        if self.inner.store.set_health(problem.clone()) {
            match problem {
                Some(why) => tracing::error!(
                    error = %why,
                    "the store cannot write: jobgate is not ready, and refuses submissions and cancels (changing nothing) until a write succeeds again"
                ),
                None => tracing::info!("the store writes again: jobgate is ready"),
            }
        }
        writable
    }

    /// Applies a batch in one transaction, then publishes and answers. A failed write is
    /// tried once more on a fresh connection (the first may have been left in a bad state),
    /// then every caller is answered with an error, nothing having changed, and the batch's
    /// observations go to `deferred`.
    async fn apply(&self, batch: Vec<Command>, deferred: &mut Vec<Observation>) {
        let store = &self.inner.store;
        let mut failure = None;
        for attempt in 1..=2 {
            let started = std::time::Instant::now();
            // Never write into a database file that is gone or cut short: the commit would
            // succeed, and be lost.
            let applied = match store.check_files() {
                Ok(()) => self.try_apply(&batch).await,
                Err(e) => Err(e),
            };
            self.inner.metrics.store_op("write", started.elapsed());
            match applied {
                Ok(outcome) => {
                    self.set_health(None);
                    return self.publish(batch, outcome);
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempt, commands = batch.len(), "store write failed; nothing of it was committed");
                    let files = matches!(e, StoreError::Files(_));
                    failure = Some(e.to_string());
                    if files {
                        break;
                    }
                }
            }
        }
        let why = failure.unwrap_or_default();
        self.set_health(Some(why.clone()));
        for command in batch {
            match command {
                Command::Submit { reply, .. } => {
                    let _ = reply.send(Err(ServiceError::Store(StoreError::Write(why.clone()))));
                }
                Command::Cancel { reply, .. } => {
                    let _ = reply.send(Err(ServiceError::Store(StoreError::Write(why.clone()))));
                }
                Command::Observe(o) => {
                    deferred.retain(|d| d.job_id != o.job_id);
                    deferred.push(o);
                }
                Command::Launched { reply, .. } | Command::CancellationsDone { reply, .. } => {
                    let _ = reply.send(false);
                }
            }
        }
    }

    async fn current(
        &self,
        tx: &mut StoreTx,
        touched: &HashMap<String, Job>,
        id: &str,
    ) -> Result<Option<Job>, StoreError> {
        if let Some(job) = touched.get(id) {
            return Ok(Some(job.clone()));
        }
        if let Some(job) = self.inner.active.get(id) {
            return Ok(Some((**job).clone()));
        }
        tx.get_job(id).await
    }

    async fn record(
        tx: &mut StoreTx,
        job: &mut Job,
        transition: &Transition,
        recorded: &mut Vec<Recorded>,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let seq = tx.append_event(job, transition, now).await?;
        job.last_event_seq = seq;
        tx.save_job(job).await?;
        recorded.push(Recorded {
            event: Arc::new(JobEvent {
                seq,
                job_id: job.id.clone(),
                phase: transition.phase,
                previous_phase: transition.previous_phase,
                at: now,
                reason: transition.reason.clone(),
                message: transition.message.clone(),
                job: Arc::new(job.clone()),
            }),
        });
        Ok(())
    }

    /// A just-accepted job with dependencies: fails at once if one has already failed or been
    /// cancelled, waits (out of the launch outbox) if some have not finished, and otherwise
    /// launches as any job.
    async fn await_dependencies(
        tx: &mut StoreTx,
        job: &mut Job,
        dependencies: &[(String, JobPhase)],
        recorded: &mut Vec<Recorded>,
    ) -> Result<(), StoreError> {
        tx.add_dependencies(&job.id, &job.spec.depends_on).await?;
        let now = Utc::now();
        let failed = dependencies
            .iter()
            .find(|(_, phase)| phase.is_terminal() && *phase != JobPhase::Succeeded);
        if let Some((id, phase)) = failed {
            if let Some(transition) = job.dependency_failed(id, *phase, now) {
                Self::record(tx, job, &transition, recorded).await?;
                tx.mark_launched(&job.id).await?; // out of the outbox: it never runs
            }
            return Ok(());
        }
        let waiting: Vec<String> = dependencies
            .iter()
            .filter(|(_, phase)| !phase.is_terminal())
            .map(|(id, _)| id.clone())
            .collect();
        if !waiting.is_empty() {
            tx.hold(&job.id, &job.spec.depends_on).await?;
            let transition = job.wait_for_dependencies(&waiting, now);
            Self::record(tx, job, &transition, recorded).await?;
        }
        Ok(())
    }

    /// For every job that reached a terminal phase in this batch (including those this very
    /// step fails, so that failures cascade), the jobs waiting for it: released into the
    /// launch outbox once all their dependencies succeeded, failed `DependencyFailed` as soon
    /// as one did not. Returns whether any job was released.
    async fn settle_dependents(
        &self,
        tx: &mut StoreTx,
        touched: &mut HashMap<String, Job>,
        recorded: &mut Vec<Recorded>,
    ) -> Result<bool, StoreError> {
        let mut released = false;
        let mut next = 0;
        while next < recorded.len() {
            let event = recorded[next].event.clone();
            next += 1;
            let finished = event.phase.is_terminal() && event.previous_phase.is_none_or(|p| !p.is_terminal());
            if !finished {
                continue;
            }
            for id in tx.dependents(&event.job_id).await? {
                let Some(mut dependent) = self.current(tx, touched, &id).await? else {
                    continue;
                };
                if !dependent.is_waiting_for_dependencies() {
                    continue;
                }
                let now = Utc::now();
                if event.phase != JobPhase::Succeeded {
                    if let Some(transition) = dependent.dependency_failed(&event.job_id, event.phase, now) {
                        Self::record(tx, &mut dependent, &transition, recorded).await?;
                        tx.mark_launched(&id).await?;
                        touched.insert(id, dependent);
                    }
                    continue;
                }
                let mut all_succeeded = true;
                for dependency in dependent.spec.depends_on.clone() {
                    let phase = self.current(tx, touched, &dependency).await?.map(|j| j.phase);
                    if phase != Some(JobPhase::Succeeded) {
                        all_succeeded = false;
                        break;
                    }
                }
                if all_succeeded && let Some(transition) = dependent.dependencies_succeeded(now) {
                    Self::record(tx, &mut dependent, &transition, recorded).await?;
                    tx.release(&id).await?;
                    touched.insert(id, dependent);
                    released = true;
                }
            }
        }
        Ok(released)
    }

    /// Everything a committed batch must still do.
    async fn try_apply(&self, batch: &[Command]) -> Result<Outcome, StoreError> {
        let mut tx = self.inner.store.begin().await?;
        let mut touched: HashMap<String, Job> = HashMap::new();
        let mut recorded = Vec::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
        // Keys accepted earlier in this batch: key → (fingerprint, job id).
        let mut keys: HashMap<String, (String, String)> = HashMap::new();
        let mut launch = false;
        let mut cancelled = false;
        for command in batch {
            match command {
                Command::Submit {
                    job,
                    fingerprint,
                    scope,
                    ..
                } => {
                    let scoped_key = job
                        .idempotency_key
                        .as_deref()
                        .map(|k| crate::store::scoped_key(job.key_scope(), k));
                    if let (Some(key), Some(scoped)) = (&job.idempotency_key, &scoped_key) {
                        let existing = match keys.get(scoped) {
                            Some((fp, id)) => Some((fp.clone(), id.clone())),
                            None => tx
                                .find_by_idempotency_key(job.key_scope(), key)
                                .await?
                                .map(|k| (k.fingerprint, k.job.id)),
                        };
                        if let Some((fp, id)) = existing {
                            if fp == *fingerprint {
                                let job = self.current(&mut tx, &touched, &id).await?;
                                answers.push(match job {
                                    Some(job) => Answer::Existing(Arc::new(job)),
                                    None => Answer::Error(ServiceError::NotFound { id }),
                                });
                            } else {
                                answers.push(Answer::Error(ServiceError::IdempotencyConflict {
                                    key: key.clone(),
                                }));
                            }
                            continue;
                        }
                    }
                    // Every dependency must exist (committed, or accepted earlier in this batch).
                    let mut dependencies = Vec::with_capacity(job.spec.depends_on.len());
                    let mut unknown = None;
                    for (i, id) in job.spec.depends_on.iter().enumerate() {
                        match self.current(&mut tx, &touched, id).await? {
                            // Another tenant's job is as unknown as a job that never was.
                            Some(d) if scope.sees(&d) => dependencies.push((id.clone(), d.phase)),
                            _ => {
                                unknown = Some(ValidationError {
                                    field: format!("input.dependsOn[{i}]"),
                                    message: format!("no job with id {id:?}"),
                                });
                                break;
                            }
                        }
                    }
                    if let Some(e) = unknown {
                        answers.push(Answer::Error(ServiceError::Invalid(e)));
                        continue;
                    }
                    // The quota counts in this transaction, so jobs accepted earlier in the
                    // same batch count too.
                    let limit = self.inner.max_active_per_namespace;
                    if limit > 0
                        && Store::active_in_namespace(&mut tx, &job.spec.namespace).await? >= limit as i64
                    {
                        answers.push(Answer::Error(ServiceError::QuotaExceeded {
                            namespace: job.spec.namespace.clone(),
                            limit,
                        }));
                        continue;
                    }
                    if let Some(scoped) = scoped_key {
                        keys.insert(scoped, (fingerprint.clone(), job.id.clone()));
                    }
                    let mut job = (**job).clone();
                    tx.insert_job(&job, fingerprint).await?;
                    let transition = Transition {
                        previous_phase: None,
                        phase: job.phase,
                        reason: Some("Submitted".into()),
                        message: Some("accepted by jobgate".into()),
                    };
                    Self::record(&mut tx, &mut job, &transition, &mut recorded).await?;
                    if !dependencies.is_empty() {
                        Self::await_dependencies(&mut tx, &mut job, &dependencies, &mut recorded).await?;
                    }
                    answers.push(Answer::Created(Arc::new(job.clone())));
                    touched.insert(job.id.clone(), job);
                    launch = true;
                }
                Command::Cancel { id, scope, .. } => {
                    let Some(mut job) = self
                        .current(&mut tx, &touched, id)
                        .await?
                        .filter(|j| scope.sees(j))
                    else {
                        answers.push(Answer::Error(ServiceError::NotFound { id: id.clone() }));
                        continue;
                    };
                    let now = Utc::now();
                    match job.cancel(now) {
                        Some(transition) => {
                            Self::record(&mut tx, &mut job, &transition, &mut recorded).await?;
                            // Committed with the cancellation, so it outlives a restart.
                            tx.request_cancellation(&job.id, now).await?;
                            cancelled = true;
                            answers.push(Answer::Existing(Arc::new(job.clone())));
                            touched.insert(job.id.clone(), job);
                        }
                        None => answers.push(Answer::Error(ServiceError::FailedPrecondition(format!(
                            "job {id} has already finished ({})",
                            job.phase
                        )))),
                    }
                }
                Command::Observe(observation) => {
                    answers.push(Answer::None);
                    let Some(mut job) = self.current(&mut tx, &touched, &observation.job_id).await? else {
                        tracing::warn!(job = %observation.job_id, "observation for an unknown job ignored");
                        continue;
                    };
                    if let Some(transition) = job.observe(observation.status.clone(), Utc::now()) {
                        Self::record(&mut tx, &mut job, &transition, &mut recorded).await?;
                        touched.insert(job.id.clone(), job);
                    } else if !job.phase.is_terminal() && job.workload != observation.status {
                        // Nothing a client sees changed, but the executor's private state
                        // (e.g. process groups) must survive a restart.
                        job.workload = observation.status.clone();
                        tx.save_job(&job).await?;
                        touched.insert(job.id.clone(), job);
                    }
                }
                Command::CancellationsDone { ids, .. } => {
                    answers.push(Answer::None);
                    for id in ids {
                        tx.cancellation_done(id).await?;
                    }
                }
                Command::Launched { outcome, .. } => {
                    answers.push(Answer::None);
                    let now = Utc::now();
                    for id in &outcome.launched {
                        tx.mark_launched(id).await?;
                        if let Some(mut job) = self.current(&mut tx, &touched, id).await?
                            && let Some(transition) = job.launch_succeeded(now)
                        {
                            Self::record(&mut tx, &mut job, &transition, &mut recorded).await?;
                            touched.insert(job.id.clone(), job);
                        }
                    }
                    for (id, reason, message) in &outcome.rejected {
                        tx.mark_launched(id).await?;
                        if let Some(mut job) = self.current(&mut tx, &touched, id).await?
                            && let Some(transition) = job.launch_failed(reason, message, now)
                        {
                            Self::record(&mut tx, &mut job, &transition, &mut recorded).await?;
                            touched.insert(job.id.clone(), job);
                        }
                    }
                    for (id, reason, message) in &outcome.delayed {
                        if let Some(mut job) = self.current(&mut tx, &touched, id).await?
                            && let Some(transition) = job.launch_delayed(reason, message, now)
                        {
                            Self::record(&mut tx, &mut job, &transition, &mut recorded).await?;
                            touched.insert(job.id.clone(), job);
                        }
                    }
                }
            }
        }
        // Jobs that finished in this batch release or fail the jobs waiting for them, in the
        // same transaction: no moment where a dependency has finished and a dependent is
        // neither released nor failed, whatever crashes when.
        launch |= self
            .settle_dependents(&mut tx, &mut touched, &mut recorded)
            .await?;
        tx.commit().await?;
        Ok(Outcome {
            touched,
            recorded,
            answers,
            launch,
            cancelled,
        })
    }

    fn publish(&self, batch: Vec<Command>, outcome: Outcome) {
        let Outcome {
            touched,
            recorded,
            answers,
            launch,
            cancelled,
        } = outcome;
        let inner = &self.inner;
        // Cache first, then events: a reader that sees an event finds the cache as new.
        for (id, job) in &touched {
            if job.phase.is_terminal() {
                inner.active.remove(id);
            } else {
                inner.active.insert(id.clone(), Arc::new(job.clone()));
            }
        }
        for r in recorded {
            let event = &r.event;
            if event.previous_phase != Some(event.phase) {
                inner
                    .metrics
                    .transition(event.previous_phase.map(|p| p.as_str()), event.phase.as_str());
            }
            inner.bus.publish(r.event);
        }
        for (command, answer) in batch.into_iter().zip(answers) {
            match (command, answer) {
                (Command::Submit { reply, .. }, Answer::Created(job)) => {
                    let _ = reply.send(Ok(Submitted { job, created: true }));
                }
                (Command::Submit { reply, .. }, Answer::Existing(job)) => {
                    let _ = reply.send(Ok(Submitted { job, created: false }));
                }
                (Command::Submit { reply, .. }, Answer::Error(e)) => {
                    let _ = reply.send(Err(e));
                }
                (Command::Cancel { reply, .. }, Answer::Created(job) | Answer::Existing(job)) => {
                    let _ = reply.send(Ok(job));
                }
                (Command::Cancel { reply, .. }, Answer::Error(e)) => {
                    let _ = reply.send(Err(e));
                }
                (Command::Launched { reply, .. } | Command::CancellationsDone { reply, .. }, _) => {
                    let _ = reply.send(true);
                }
                _ => {}
            }
        }
        if cancelled {
            inner.cancel_wanted.notify_one();
        }
        if launch {
            inner.launch_wanted.notify_one();
        }
    }
}

enum Answer {
    None,
    Created(Arc<Job>),
    Existing(Arc<Job>),
    Error(ServiceError),
}

struct Outcome {
    touched: HashMap<String, Job>,
    recorded: Vec<Recorded>,
    answers: Vec<Answer>,
    launch: bool,
    /// Whether the batch cancelled a job (the canceller has work).
    cancelled: bool,
}
