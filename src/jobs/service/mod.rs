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
//!
//! - this file: the handle, its start and shutdown, and the commands (`submit`, `cancel`);
//! - `feed`: reads and the event feeds subscriptions use (`job`, `jobs`, `events`,
//!   `job_status`, `watch_job`, logs, runs, history, stats, namespaces), each within the
//!   caller's `Scope`;
//! - `writer`: the one task that applies commands and observations to the store (its
//!   `admission`: the checks and acceptance of submissions);
//! - `executor_tasks`: the launcher and the canceller, which talk to the executor;
//! - `local_queue`: the local executor's queue (caps, priority, fair share), which the
//!   launcher takes jobs from;
//! - `follower`: with a shared store, publishes what any replica committed;
//! - `shards`: with replicas dividing the work, hands the executor the jobs of the shards
//!   this replica is assigned.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;
use dashmap::DashMap;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::executor::{Executor, Observation};
use crate::jobs::bus::EventBus;
use crate::jobs::catalog::{self, Runtime, Template};
use crate::jobs::log_archive::{LogArchiveSettings, LogArchiver};
use crate::metrics::{Metrics, TemplateAvailability};
use crate::model::JobTrace;
use crate::model::{Job, JobPhase, JobSpec, Scope, SubmitRequest, ValidationError, ValidationLimits};
use crate::store::{Store, StoreError};
use crate::templates::TemplateSet;

mod attempt_logs;
mod executor_tasks;
#[cfg(test)]
mod executor_tasks_tests;
mod feed;
mod follower;
mod local_queue;
mod shards;
#[cfg(test)]
mod tests;
mod writer;

use executor_tasks::{LaunchOutcome, canceller, launcher};
use local_queue::{LocalQueue, Wait, queue_keeper};
use writer::Writer;

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
    /// The namespace holds as many schedules as it may.
    #[error(
        "namespace {namespace:?} already has {limit} schedules, its limit (--max-schedules-per-namespace); delete one first"
    )]
    ScheduleQuotaExceeded { namespace: String, limit: u64 },
    #[error("jobgate is shutting down")]
    ShuttingDown,
    /// The job is stored but its row cannot be decoded (see [`JobService::unreadable_records`]).
    #[error("job {id:?} is stored but cannot be read ({reason}); every other job is served")]
    Unreadable { id: String, reason: String },
    /// Another stored row that cannot be decoded: the store's description of it (its kind,
    /// key and why).
    #[error("{0}")]
    UnreadableRow(String),
    /// Events after `after` were deleted by retention: a replay from there would have gaps.
    /// `oldest` is the oldest cursor a replay can start after.
    #[error(
        "events after cursor {after} were deleted by retention; the oldest cursor to resume after is {oldest}"
    )]
    CursorExpired { after: i64, oldest: i64 },
    #[error("the store is unavailable")]
    Store(StoreError),
}

/// The store's errors as the service's: the facts a client is told (an expired cursor, a row
/// that cannot be read) become errors of their own; every other cause stays the store's.
impl From<StoreError> for ServiceError {
    fn from(cause: StoreError) -> Self {
        match cause {
            StoreError::CursorExpired { after, oldest } => Self::CursorExpired { after, oldest },
            cause @ StoreError::Unreadable { .. } => Self::UnreadableRow(cause.to_string()),
            cause => Self::Store(cause),
        }
    }
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
            Self::QuotaExceeded { .. } | Self::ScheduleQuotaExceeded { .. } => "quota_exceeded",
            Self::ShuttingDown => "shutting_down",
            Self::Unreadable { .. } => "unreadable",
            // Read failures of the store, labelled as its other failures.
            Self::UnreadableRow(_) | Self::CursorExpired { .. } | Self::Store(_) => "store",
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
    /// The archive of jobs' output, which the executor feeds (made by whoever made the
    /// executor); `None`: one of the service's own, which no executor feeds (reads then fall
    /// back to the executor's own view of a job's output).
    pub logs: Option<Arc<LogArchiver>>,
    /// The most candidate rows one page of `jobs` looks at (see
    /// [`crate::store::ListPlan`]).
    pub page_scan_budget: i64,
    /// How long a job's workload create may keep failing with the same server error before
    /// the job fails with its message (`--launch-retry-limit-secs`).
    pub launch_retry_limit: std::time::Duration,
    /// The local queue's policy, where jobgate queues jobs itself (the local executor with
    /// a store of its own); `None`: every accepted job is launched at once.
    pub local_queue: Option<crate::model::QueuePolicy>,
}

impl ServiceConfig {
    /// The defaults, counting into `metrics`: the process's one registry, so that there is no
    /// way to start a service whose metrics nobody scrapes.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            limits: ValidationLimits::default(),
            broadcast_capacity: 4096,
            max_active_per_namespace: 0,
            metrics,
            max_batch: 256,
            templates: catalog::builtin(
                &ValidationLimits::default(),
                Runtime::Local,
                &TemplateSet::default(),
            ),
            workload_templates: Arc::new(TemplateSet::default()),
            logs: None,
            page_scan_budget: crate::store::SCAN_BUDGET,
            launch_retry_limit: std::time::Duration::from_secs(600),
            local_queue: None,
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

/// Who submits a job: the name its `submitter` shows, and the principal that scopes its
/// idempotency keys (two identities may share a name, never a principal).
#[derive(Clone, Debug)]
pub struct Submitter {
    pub name: String,
    pub principal: String,
}

/// The result of a submit: the job, and whether this call created it.
#[derive(Clone, Debug)]
pub struct Submitted {
    pub job: Arc<Job>,
    pub created: bool,
}

/// The most jobs one [`JobService::submit_many`] call may hold.
pub const MAX_SUBMIT_BATCH: usize = 1_000;

/// Each submission's own answer, in the order they were given.
pub type SubmittedEach = Vec<Result<Submitted, ServiceError>>;

enum WriterCommand {
    Submit {
        job: Box<Job>,
        fingerprint: String,
        /// The submitter's namespaces: dependencies outside them do not exist for it.
        scope: Scope,
        reply: oneshot::Sender<Result<Submitted, ServiceError>>,
    },
    /// Several submissions of one caller, applied in the same transaction (one command, so
    /// one batch): each is answered on its own, and all that are accepted commit together.
    SubmitMany {
        jobs: Vec<(Job, String)>,
        scope: Scope,
        reply: oneshot::Sender<Result<SubmittedEach, ServiceError>>,
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
    /// Why these waiting jobs wait, from the local queue; answered whether it was committed.
    QueueReasons {
        changes: Vec<(String, Wait)>,
        reply: oneshot::Sender<bool>,
    },
    /// The workloads of these cancelled jobs are stopped; answered whether it was committed.
    CancellationsDone {
        ids: Vec<String>,
        reply: oneshot::Sender<bool>,
    },
}

/// A stored row that cannot be decoded, as administrators see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadableRecord {
    /// `job`, `event` (an event's job snapshot) or `webhook`.
    pub kind: &'static str,
    /// A job's or webhook's id, an event's cursor.
    pub key: String,
    /// The job the row belongs to, when known.
    pub job_id: Option<String>,
    /// Why it could not be decoded.
    pub error: String,
    pub first_seen: chrono::DateTime<chrono::Utc>,
}

/// A cheap, cloneable handle to the job service.
#[derive(Clone)]
pub struct JobService {
    inner: Arc<ServiceState>,
}

struct ServiceState {
    store: Arc<dyn Store>,
    /// The archive of jobs' output: `logs`, `log_lines` and `log_stream` read it.
    logs: Arc<LogArchiver>,
    /// Why the store cannot take writes now, `None` while it can. Set by the writer (after
    /// a failed write or a failed storage check, cleared by a successful write or probe), read
    /// by readiness and metrics.
    store_problem: std::sync::Mutex<Option<String>>,
    bus: Arc<EventBus>,
    executor: Arc<dyn Executor>,
    limits: ValidationLimits,
    max_active_per_namespace: u64,
    page_scan_budget: i64,
    /// See [`ServiceConfig::launch_retry_limit`].
    launch_retry_limit: std::time::Duration,
    metrics: Arc<Metrics>,
    templates: Vec<Template>,
    workload_templates: Arc<TemplateSet>,
    commands: mpsc::Sender<WriterCommand>,
    /// Jobs not yet finished, as last committed. Written by the writer task only (by the
    /// follower instead, when the store is shared); read by anyone. Finished jobs are read
    /// from the store.
    active: DashMap<String, Arc<Job>>,
    /// Whether other processes write the store too (replicas on one database): the writer
    /// then reads job state in its transaction, not from `active`, and the follower, not the
    /// writer, publishes what was committed.
    shared: bool,
    /// With replicas dividing the work: the shards this one acts for (its launcher and
    /// canceller take only their jobs). `None`: every job is this process's.
    shards: Option<tokio::sync::watch::Receiver<crate::model::ShardSet>>,
    /// Wakes the follower: this replica's writer committed.
    committed: Notify,
    launch_wanted: Notify,
    /// The local queue the launcher takes jobs from; `None`: it launches the outbox as read.
    queue: Option<Arc<LocalQueue>>,
    /// Wakes the canceller: a cancellation was committed.
    cancel_wanted: Notify,
    /// Cancelled when shutdown begins: no new commands, no more launches.
    shutdown: CancellationToken,
    /// Cancelled once the executor has stopped: the writer drains its queue and ends.
    writer_stop: CancellationToken,
    tasks: TaskTracker,
}

impl ServiceState {
    /// Why the store cannot take writes now, or `None` when it can.
    fn store_problem(&self) -> Option<String> {
        // A poisoned lock still holds the last value written; it is a plain value.
        self.store_problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records whether the store can write; returns whether that changed.
    fn set_store_problem(&self, problem: Option<String>) -> bool {
        let mut current = self.store_problem.lock().unwrap_or_else(|p| p.into_inner());
        let changed = *current != problem;
        *current = problem;
        changed
    }
}

impl JobService {
    /// Starts the service: loads unfinished jobs, starts the writer and the launcher, and
    /// hands jobs launched before a restart back to the executor.
    pub async fn start(
        store: Arc<dyn Store>,
        executor: Arc<dyn Executor>,
        observations: mpsc::Receiver<Observation>,
        config: ServiceConfig,
    ) -> Result<Self, ServiceError> {
        let wakeups = store.commit_wakeups().await?;
        let head = store.last_event_seq().await?;
        let bus = Arc::new(EventBus::new(
            store.clone(),
            config.broadcast_capacity,
            head,
            config.metrics.broadcast_lag_recoveries.clone(),
            config.metrics.events_published_cursor.clone(),
        ));
        let (commands, commands_rx) = mpsc::channel(config.max_batch * 4);
        let unfinished = store.unfinished_jobs().await?;
        let executor_shards = executor.shards();
        let active = DashMap::with_capacity(unfinished.len());
        // Jobs launched before a restart go back to the executor, which reconciles them;
        // jobs never launched are the launcher's. With replicas, those of each shard go to
        // the executor as this replica is assigned the shard. The cache and the executor
        // share each job: one copy, not one each.
        let mut to_adopt = Vec::new();
        // Replicas sharing a store would each keep caps of their own: the queue is for a
        // store of this process's own (configuration refuses the caps otherwise).
        let queue = config
            .local_queue
            .filter(|_| wakeups.is_none())
            .map(|policy| Arc::new(LocalQueue::new(policy)));
        for r in unfinished {
            let job = Arc::new(r.job);
            if let Some(queue) = &queue {
                if r.launched {
                    queue.hold(&job);
                } else if !job.is_waiting_for_dependencies() {
                    queue.enqueue(&job);
                }
            }
            if r.launched && executor_shards.is_none() {
                to_adopt.push(job.clone());
            }
            active.insert(job.id.clone(), job);
        }
        let logs = config.logs.unwrap_or_else(|| {
            LogArchiver::start(
                store.clone(),
                LogArchiveSettings::default(),
                config.metrics.clone(),
            )
        });
        let inner = Arc::new(ServiceState {
            logs,
            store,
            store_problem: std::sync::Mutex::new(None),
            bus,
            executor,
            limits: config.limits,
            max_active_per_namespace: config.max_active_per_namespace,
            page_scan_budget: config.page_scan_budget.max(1),
            launch_retry_limit: config.launch_retry_limit,
            metrics: config.metrics,
            templates: config.templates,
            workload_templates: config.workload_templates,
            commands,
            active,
            shared: wakeups.is_some(),
            shards: executor_shards,
            committed: Notify::new(),
            launch_wanted: Notify::new(),
            queue,
            cancel_wanted: Notify::new(),
            shutdown: CancellationToken::new(),
            writer_stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        inner.metrics.store_writable.set(1);
        // Availability changes without an event (a CRD installed, a watch failing): read it
        // when scraped. The reader holds the service weakly, so it does not keep it alive.
        let weak = Arc::downgrade(&inner);
        inner.metrics.read_template_availability_with(move || {
            weak.upgrade()
                .map(|inner| {
                    JobService { inner }
                        .templates()
                        .into_iter()
                        .map(|t| TemplateAvailability {
                            template: t.name,
                            kind: t.kind,
                            available: t.available,
                        })
                        .collect()
                })
                .unwrap_or_default()
        });
        let writer = Writer {
            inner: inner.clone(),
            max_batch: config.max_batch,
        };
        inner.tasks.spawn(writer.run(commands_rx, observations));
        if let Some(wakeups) = wakeups {
            inner
                .tasks
                .spawn(follower::follower(inner.clone(), wakeups, head));
        }
        for job in to_adopt {
            if let Err(e) = inner.executor.adopt(job.clone()).await {
                tracing::error!(job = %job.id, error = %e, "could not adopt job after restart");
            }
        }
        inner.executor.start().await;
        if let Some(shards) = inner.shards.clone() {
            inner.tasks.spawn(shards::shard_keeper(inner.clone(), shards));
        }
        if let Some(queue) = inner.queue.clone() {
            queue.touch();
            inner.tasks.spawn(queue_keeper(inner.clone(), queue));
        }
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

    /// Validates and durably accepts up to [`MAX_SUBMIT_BATCH`] jobs of one caller, each on
    /// its own (its validation, idempotency key, dependencies and the namespace's quota), and
    /// commits every one accepted in one transaction before answering. The answers are in the
    /// order of `requests`. An error for the whole call (the store cannot write, shutting
    /// down) means that none was accepted.
    #[tracing::instrument(skip_all, fields(jobs = requests.len()))]
    pub async fn submit_many(
        &self,
        requests: Vec<SubmitRequest>,
        submitter: Option<Submitter>,
        scope: &Scope,
    ) -> Result<SubmittedEach, ServiceError> {
        let metrics = &self.inner.metrics;
        metrics.jobs_submitted.inc_by(requests.len() as u64);
        if requests.len() > MAX_SUBMIT_BATCH {
            let e = ServiceError::Invalid(ValidationError {
                field: "inputs".into(),
                message: format!(
                    "at most {MAX_SUBMIT_BATCH} jobs per call, got {}; split them into several calls",
                    requests.len()
                ),
            });
            for _ in 0..requests.len() {
                metrics.rejected(e.reason());
            }
            return Err(e);
        }
        let mut answers: Vec<Option<Result<Submitted, ServiceError>>> = Vec::with_capacity(requests.len());
        let mut valid = Vec::new();
        let mut places = Vec::new();
        for (i, request) in requests.into_iter().enumerate() {
            match self.prepare(request, submitter.clone(), scope) {
                Ok(prepared) => {
                    answers.push(None);
                    valid.push(prepared);
                    places.push(i);
                }
                Err(e) => answers.push(Some(Err(e))),
            }
        }
        if !valid.is_empty() {
            let accepted = valid.len();
            let (reply, answer) = oneshot::channel();
            let committed = match self
                .command(WriterCommand::SubmitMany {
                    jobs: valid,
                    scope: scope.clone(),
                    reply,
                })
                .await
            {
                Ok(()) => answer.await.unwrap_or(Err(ServiceError::ShuttingDown)),
                Err(e) => Err(e),
            };
            match committed {
                Ok(each) => {
                    for (place, result) in places.into_iter().zip(each) {
                        answers[place] = Some(result);
                    }
                }
                Err(e) => {
                    for _ in 0..answers.len() {
                        metrics.rejected(e.reason());
                    }
                    tracing::debug!(jobs = accepted, error = %e, "a bulk submission changed nothing");
                    return Err(e);
                }
            }
        }
        let answers: SubmittedEach = answers
            .into_iter()
            .map(|a| a.unwrap_or(Err(ServiceError::ShuttingDown)))
            .collect();
        for answer in &answers {
            match answer {
                Ok(s) if s.created => {
                    metrics.jobs_accepted.inc();
                }
                Ok(_) => {}
                Err(e) => metrics.rejected(e.reason()),
            }
        }
        Ok(answers)
    }

    async fn try_submit(
        &self,
        request: SubmitRequest,
        submitter: Option<Submitter>,
        scope: &Scope,
    ) -> Result<Submitted, ServiceError> {
        let (job, fingerprint) = self.prepare(request, submitter, scope)?;
        tracing::Span::current().record("job", job.id.as_str());
        let (reply, answer) = oneshot::channel();
        self.command(WriterCommand::Submit {
            job: Box::new(job),
            fingerprint,
            scope: scope.clone(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| ServiceError::ShuttingDown)?
    }

    /// Checks a submission as [`JobService::submit`] would before accepting it (input,
    /// scope, template), without submitting it; answers the namespace it would run in. A
    /// schedule's job is checked so when the schedule is created or changed.
    pub fn check_submission(&self, request: SubmitRequest, scope: &Scope) -> Result<String, ServiceError> {
        let (job, _) = self.prepare(request, None, scope)?;
        Ok(job.spec.namespace)
    }

    /// Everything a submission is checked for before the writer: the input, the caller's
    /// scope, the template's parameters and availability. Returns the job to accept, with a
    /// new id, and its spec's fingerprint.
    fn prepare(
        &self,
        request: SubmitRequest,
        submitter: Option<Submitter>,
        scope: &Scope,
    ) -> Result<(Job, String), ServiceError> {
        let trace_parent = request.trace_parent.clone();
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
        let mut job = Job::accepted(id, spec, request.idempotency_key, Utc::now());
        job.trace = Some(JobTrace::new(trace_parent, random_trace_bytes()));
        if let Some(submitter) = submitter {
            job.submitter = Some(submitter.name);
            job.submitter_key = Some(submitter.principal);
        }
        Ok((job, fingerprint))
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
        self.command(WriterCommand::Cancel {
            id: id.to_owned(),
            scope: scope.clone(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| ServiceError::ShuttingDown)?
    }

    async fn command(&self, command: WriterCommand) -> Result<(), ServiceError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(ServiceError::ShuttingDown);
        }
        self.inner
            .commands
            .send(command)
            .await
            .map_err(|_| ServiceError::ShuttingDown)
    }

    /// Counts a request that a rate limit (`what`) refused before it reached the service.
    pub fn count_rate_limited(&self, what: &'static str) {
        self.inner.metrics.rate_limited(what);
    }

    /// Counts a submission that a rate limit refused before it reached [`JobService::submit`]:
    /// submitted, and rejected as `rate_limited`, as `submit` counts its own refusals.
    pub fn count_submission_rate_limited(&self) {
        self.inner.metrics.jobs_submitted.inc();
        self.inner.metrics.rejected("rate_limited");
    }

    /// Whether the store takes writes now: the writer's last check (`Store::check_storage`,
    /// then `Store::probe_write` after a failure) or commit succeeded.
    pub fn store_writable(&self) -> bool {
        self.inner.store_problem().is_none()
    }

    pub fn bus(&self) -> &Arc<EventBus> {
        &self.inner.bus
    }

    /// Whether the store answers and the executor takes work.
    pub async fn is_ready(&self) -> bool {
        self.unready_reason().await.is_none()
    }

    /// Why this replica is not ready, in words for `/readyz` (the first reason found);
    /// `None` when the store answers and the executor takes work.
    pub async fn unready_reason(&self) -> Option<String> {
        if self.inner.shutdown.is_cancelled() {
            return Some("shutting down".to_owned());
        }
        if let Some(reason) = self.inner.executor.unready_reason() {
            return Some(reason);
        }
        // Its error (paths, database details) stays in jobgate's log: /readyz asks for no
        // credentials.
        if self.inner.store_problem().is_some() {
            return Some("the store takes no writes (jobgate's log says why)".to_owned());
        }
        if !self.inner.store.ping().await {
            return Some("the store does not answer".to_owned());
        }
        None
    }

    /// Where a waiting job stands in its queue now (see [`crate::model::QueuePlace`]);
    /// `None` for a job that waits in no queue.
    pub fn queue_place(&self, job: &Job) -> Option<crate::model::QueuePlace> {
        if job.phase != crate::model::JobPhase::Pending {
            return None;
        }
        match &self.inner.queue {
            Some(queue) => queue.place(&job.id),
            None => self.inner.executor.queue_place(job),
        }
    }

    /// Why a job of the local queue waits (its dependencies, a launch retry with when it is
    /// tried next, or the queue's own reason), with the queue's name (its tenant); `None`
    /// without a local queue or once the job left it.
    pub fn local_queue_wait(&self, job: &Job) -> Option<(String, crate::model::QueueWait)> {
        let queue = self.inner.queue.as_ref()?;
        let mut wait = job.local_queue_wait()?;
        if wait.reason == crate::model::BACKING_OFF
            && let Some(next) = queue.next_try(&job.id)
        {
            let said = wait.message.take().unwrap_or_default();
            wait.message = Some(format!("{said}; tried again at {}", next.to_rfc3339()));
        }
        Some((job.spec.namespace.clone(), wait))
    }

    /// Whether jobgate queues jobs itself (the local queue).
    pub fn has_local_queue(&self) -> bool {
        self.inner.queue.is_some()
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
        // The output the executor handed over is written before the store closes.
        inner.logs.shutdown().await;
        inner.writer_stop.cancel();
        inner.tasks.close();
        inner.tasks.wait().await;
        inner.store.close().await;
    }
}

/// Random bytes for a job's trace and root span ids (the system's CSPRNG; a failure, which
/// never happens on Linux, still gives distinct ids from a v7 UUID's random bits).
fn random_trace_bytes() -> [u8; 24] {
    let mut bytes = [0u8; 24];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
        bytes[..16].copy_from_slice(uuid::Uuid::now_v7().as_bytes());
        bytes[16..].copy_from_slice(&uuid::Uuid::now_v7().as_bytes()[8..]);
    }
    bytes
}
