//! GraphQL object, input and enum types: thin views over the domain model.
//!
//! They own the mapping between GraphQL names (see `schema.graphql`) and domain types, and
//! nothing else: no validation rules, no state.

use std::sync::Arc;

use async_graphql::{Context, Enum, ID, InputObject, Json, Object, SimpleObject};
use chrono::{DateTime, Utc};

use crate::graphql::caller::caller;
use crate::graphql::error::OrApiError;
use crate::jobs::catalog::{FieldType, Template, TemplateField};
use crate::jobs::service::JobService;
use crate::model::{self, Job, JobEvent};

/// Where a job is in its life; phases only move forward, except that a job Kueue evicts
/// or preempts goes back from RUNNING to PENDING until it is readmitted.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "JobPhase")]
pub enum JobPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl From<model::JobPhase> for JobPhase {
    fn from(p: model::JobPhase) -> Self {
        match p {
            model::JobPhase::Pending => Self::Pending,
            model::JobPhase::Running => Self::Running,
            model::JobPhase::Succeeded => Self::Succeeded,
            model::JobPhase::Failed => Self::Failed,
            model::JobPhase::Cancelled => Self::Cancelled,
        }
    }
}

impl From<JobPhase> for model::JobPhase {
    fn from(p: JobPhase) -> Self {
        match p {
            JobPhase::Pending => Self::Pending,
            JobPhase::Running => Self::Running,
            JobPhase::Succeeded => Self::Succeeded,
            JobPhase::Failed => Self::Failed,
            JobPhase::Cancelled => Self::Cancelled,
        }
    }
}

/// A queued job's state in Kueue.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// Waiting for quota (or for Kueue to take the job in); `reason` and `message` say why.
    Pending,
    /// Quota is reserved; admission checks may still run.
    QuotaReserved,
    /// Admitted: the job may run.
    Admitted,
    /// Evicted: suspended again and requeued until readmitted.
    Evicted,
    /// Preempted for another workload: suspended again and requeued until readmitted.
    Preempted,
    /// The job's workload finished and released its quota.
    Finished,
}

impl From<model::QueueState> for QueueState {
    fn from(s: model::QueueState) -> Self {
        match s {
            model::QueueState::Pending => Self::Pending,
            model::QueueState::QuotaReserved => Self::QuotaReserved,
            model::QueueState::Admitted => Self::Admitted,
            model::QueueState::Evicted => Self::Evicted,
            model::QueueState::Preempted => Self::Preempted,
            model::QueueState::Finished => Self::Finished,
        }
    }
}

/// Where a job queued in Kueue stands, as Kueue's Workload for it says.
#[derive(SimpleObject, Clone, Debug)]
pub struct JobQueue {
    /// The Kueue LocalQueue.
    pub name: String,
    pub state: QueueState,
    /// The reason of Kueue's condition behind `state` (e.g. `Pending`, `Admitted`,
    /// `Preempted`); null before Kueue has seen the job.
    pub reason: Option<String>,
    /// Kueue's explanation, e.g. why a pending job is not admitted.
    pub message: Option<String>,
    /// The ClusterQueue whose quota it holds, while it holds some.
    pub cluster_queue: Option<String>,
    /// When it entered `state`.
    pub since: Option<DateTime<Utc>>,
}

#[derive(InputObject, Clone, Debug)]
pub struct EnvVarInput {
    pub name: String,
    pub value: String,
}

/// What to run. Omitted counts default as in a batch/v1 Job: parallelism 1, completions 1,
/// backoffLimit 6.
#[derive(InputObject, Clone, Debug)]
pub struct SubmitJobInput {
    /// A DNS-1123 label naming the job (not unique).
    pub name: Option<String>,
    /// Defaults to the server's default namespace.
    pub namespace: Option<String>,
    /// The workload template; `container` (the default) runs `command` + `args`.
    pub template: Option<String>,
    /// The container image (used by the Kubernetes executor; the local executor ignores it).
    pub image: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub env: Option<Vec<EnvVarInput>>,
    /// How many runs at once.
    pub parallelism: Option<i32>,
    /// How many successful runs complete the job; each run gets `JOB_COMPLETION_INDEX`.
    pub completions: Option<i32>,
    /// How many failed runs are retried before the job fails.
    pub backoff_limit: Option<i32>,
    /// Seconds from start after which the job fails with `DeadlineExceeded`.
    pub active_deadline_seconds: Option<i32>,
    pub parameters: Option<Json<serde_json::Value>>,
    /// Retrying with the same key and the same input returns the same job.
    pub idempotency_key: Option<String>,
    /// CPU and memory for each run's container (Kubernetes executor).
    pub resources: Option<ResourcesInput>,
    /// The Kubernetes service account the job's pods run as; one of those the server allows.
    pub service_account_name: Option<String>,
    /// Seconds after the job finishes before Kubernetes deletes its Job; jobgate keeps the
    /// history, the result and the log tail it captured as each pod ended (with 0 the pods may
    /// be gone before their logs can be read). The server's default when omitted.
    pub ttl_seconds_after_finished: Option<i32>,
    /// Jobs that must succeed first (at most 100). The job stays PENDING with reason
    /// `WaitingForDependencies` until they all have, and fails with `DependencyFailed` if one
    /// of them fails or is cancelled.
    pub depends_on: Option<Vec<ID>>,
    /// The Kueue LocalQueue the job waits in for admission (servers with Kueue integration;
    /// the server's default queue when omitted). Refused for templates whose kind Kueue
    /// cannot queue. The job stays PENDING, its `queue` saying why, until Kueue admits it.
    pub queue_name: Option<String>,
}

/// Kubernetes quantities, e.g. cpu `500m` or `2`, memory `256Mi` or `1G`.
#[derive(InputObject, Clone, Debug, Default)]
pub struct ResourceListInput {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

/// What each run requests (for scheduling) and may use at most.
#[derive(InputObject, Clone, Debug, Default)]
pub struct ResourcesInput {
    pub requests: Option<ResourceListInput>,
    pub limits: Option<ResourceListInput>,
}

impl From<ResourceListInput> for model::ResourceList {
    fn from(r: ResourceListInput) -> Self {
        Self {
            cpu: r.cpu,
            memory: r.memory,
        }
    }
}

/// CPU and memory of each run.
#[derive(SimpleObject, Clone, Debug)]
pub struct ResourceList {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

#[derive(SimpleObject, Clone, Debug)]
pub struct Resources {
    pub requests: ResourceList,
    pub limits: ResourceList,
}

impl From<SubmitJobInput> for model::SubmitRequest {
    fn from(i: SubmitJobInput) -> Self {
        Self {
            name: i.name,
            namespace: i.namespace,
            template: i.template,
            image: i.image,
            command: i.command,
            args: i.args,
            env: i.env.map(|env| {
                env.into_iter()
                    .map(|v| model::EnvVar {
                        name: v.name,
                        value: v.value,
                    })
                    .collect()
            }),
            parallelism: i.parallelism,
            completions: i.completions,
            backoff_limit: i.backoff_limit,
            active_deadline_seconds: i.active_deadline_seconds,
            parameters: i.parameters.map(|j| j.0),
            depends_on: i.depends_on.map(|ids| ids.into_iter().map(|id| id.0).collect()),
            idempotency_key: i.idempotency_key,
            resources: i.resources.map(|r| model::ResourceRequirements {
                requests: r.requests.map(Into::into).unwrap_or_default(),
                limits: r.limits.map(Into::into).unwrap_or_default(),
            }),
            service_account_name: i.service_account_name,
            ttl_seconds_after_finished: i.ttl_seconds_after_finished,
            queue_name: i.queue_name,
        }
    }
}

#[derive(InputObject, Clone, Debug, Default)]
#[graphql(name = "JobFilter")]
pub struct JobFilterInput {
    /// Only jobs in one of these phases.
    pub phases: Option<Vec<JobPhase>>,
    pub namespace: Option<String>,
    /// Only jobs whose name contains this text (case-sensitive).
    pub name_contains: Option<String>,
}

impl From<JobFilterInput> for model::JobFilter {
    fn from(f: JobFilterInput) -> Self {
        Self {
            phases: f.phases.map(|p| p.into_iter().map(Into::into).collect()),
            namespace: f.namespace,
            name_contains: f.name_contains,
        }
    }
}

#[derive(SimpleObject, Clone, Debug)]
pub struct JobCondition {
    #[graphql(name = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_transition_time: Option<DateTime<Utc>>,
}

impl From<&model::Condition> for JobCondition {
    fn from(c: &model::Condition) -> Self {
        Self {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_transition_time: c.last_transition_time,
        }
    }
}

#[derive(SimpleObject, Clone, Copy, Debug)]
pub struct JobProgress {
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    /// Active runs that are ready (pods whose Ready condition is true).
    pub ready: i32,
    pub total: Option<i32>,
}

#[derive(SimpleObject, Clone, Debug)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// What was submitted, after defaults were applied.
pub struct JobSpec(Arc<Job>);

#[Object]
impl JobSpec {
    async fn image(&self) -> Option<&str> {
        self.0.spec.image.as_deref()
    }
    async fn command(&self) -> &[String] {
        &self.0.spec.command
    }
    async fn args(&self) -> &[String] {
        &self.0.spec.args
    }
    async fn env(&self) -> Vec<EnvVar> {
        self.0
            .spec
            .env
            .iter()
            .map(|v| EnvVar {
                name: v.name.clone(),
                value: v.value.clone(),
            })
            .collect()
    }
    async fn parallelism(&self) -> i32 {
        self.0.spec.parallelism
    }
    async fn completions(&self) -> i32 {
        self.0.spec.completions
    }
    async fn backoff_limit(&self) -> i32 {
        self.0.spec.backoff_limit
    }
    async fn active_deadline_seconds(&self) -> Option<i32> {
        self.0.spec.active_deadline_seconds
    }
    async fn parameters(&self) -> Option<Json<serde_json::Value>> {
        self.0.spec.parameters.clone().map(Json)
    }
    async fn idempotency_key(&self) -> Option<&str> {
        self.0.idempotency_key.as_deref()
    }
    async fn resources(&self) -> Option<Resources> {
        let list = |l: &model::ResourceList| ResourceList {
            cpu: l.cpu.clone(),
            memory: l.memory.clone(),
        };
        self.0.spec.resources.as_ref().map(|r| Resources {
            requests: list(&r.requests),
            limits: list(&r.limits),
        })
    }
    async fn service_account_name(&self) -> Option<&str> {
        self.0.spec.service_account_name.as_deref()
    }
    async fn ttl_seconds_after_finished(&self) -> Option<i32> {
        self.0.spec.ttl_seconds_after_finished
    }
    /// The Kueue LocalQueue the job was queued in.
    async fn queue_name(&self) -> Option<&str> {
        self.0.spec.queue_name.as_deref()
    }
    async fn depends_on(&self) -> Vec<ID> {
        self.0.spec.depends_on.iter().map(|id| ID(id.clone())).collect()
    }
}

/// A job: what was submitted and where it is.
#[derive(Clone)]
pub struct JobObject(pub Arc<Job>);

/// Most log lines one request may ask for.
const MAX_TAIL_LINES: i32 = 10_000;

#[Object(name = "Job")]
impl JobObject {
    async fn id(&self) -> ID {
        ID(self.0.id.clone())
    }
    /// The cursor of the job's latest event: a `jobEvents` event whose cursor is at or below
    /// it is already reflected in this job.
    async fn last_event_cursor(&self) -> String {
        self.0.last_event_seq.to_string()
    }
    async fn name(&self) -> Option<&str> {
        self.0.spec.name.as_deref()
    }
    async fn namespace(&self) -> &str {
        &self.0.spec.namespace
    }
    async fn template(&self) -> &str {
        &self.0.spec.template
    }
    /// The jobs that must succeed before this one starts.
    async fn depends_on(&self) -> Vec<ID> {
        self.0.spec.depends_on.iter().map(|id| ID(id.clone())).collect()
    }
    /// The jobs this one depends on, as they are now.
    #[graphql(complexity = "10 * child_complexity")]
    async fn dependencies(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<JobObject>> {
        let service = ctx.data::<JobService>()?;
        // The service answers another tenant's dependency as none.
        let scope = &caller(ctx)?.scope;
        let mut jobs = Vec::with_capacity(self.0.spec.depends_on.len());
        for id in &self.0.spec.depends_on {
            if let Some(job) = service.job(id, scope).await.api()? {
                jobs.push(JobObject(job));
            }
        }
        Ok(jobs)
    }
    async fn phase(&self) -> JobPhase {
        self.0.phase.into()
    }
    async fn submitted_at(&self) -> DateTime<Utc> {
        self.0.submitted_at
    }
    async fn started_at(&self) -> Option<DateTime<Utc>> {
        self.0.started_at
    }
    async fn finished_at(&self) -> Option<DateTime<Utc>> {
        self.0.finished_at
    }
    /// Why the job is in its phase: jobgate's conditions (Accepted, Running, Complete,
    /// Failed, Cancelled) and the workload's own (SuccessCriteriaMet, FailureTarget, ...).
    async fn conditions(&self) -> Vec<JobCondition> {
        let ours = self.0.conditions.iter();
        let workload = self
            .0
            .workload
            .conditions
            .iter()
            .filter(|c| !self.0.conditions.iter().any(|o| o.type_ == c.type_));
        let queue = self
            .0
            .workload
            .queue
            .iter()
            .flat_map(|q| &q.conditions)
            .filter(|c| !self.0.conditions.iter().any(|o| o.type_ == c.type_));
        ours.chain(workload)
            .chain(queue)
            .map(JobCondition::from)
            .collect()
    }
    /// Where the job stands in its Kueue queue; null for jobs not queued in Kueue.
    async fn queue(&self) -> Option<JobQueue> {
        let name = self.0.spec.queue_name.as_ref()?;
        Some(match &self.0.workload.queue {
            Some(q) => JobQueue {
                name: q.name.clone(),
                state: q.state.into(),
                reason: q.reason.clone(),
                message: q.message.clone(),
                cluster_queue: q.cluster_queue.clone(),
                since: q.since,
            },
            // Kueue has not made its Workload yet.
            None => JobQueue {
                name: name.clone(),
                state: QueueState::Pending,
                reason: None,
                message: None,
                cluster_queue: None,
                since: None,
            },
        })
    }
    async fn progress(&self) -> Option<JobProgress> {
        let p = self.0.progress;
        Some(JobProgress {
            succeeded: p.succeeded,
            failed: p.failed,
            active: p.active,
            ready: p.ready,
            total: p.total,
        })
    }
    /// The latest explanation: a failure's cause, a retry's reason.
    async fn message(&self) -> Option<&str> {
        self.0.message.as_deref()
    }
    /// What the job wrote to `$JOBGATE_RESULT_FILE` (at most 4 KiB), like a Kubernetes
    /// termination message.
    async fn result(&self) -> Option<&str> {
        self.0.result.as_deref()
    }
    /// The last `tailLines` lines of the job's output (stdout and stderr of every run), at
    /// most 8 MiB of them. For the whole output, page with `logLines`.
    async fn logs(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 100, validator(minimum = 1, maximum = 10000))] tail_lines: i32,
    ) -> async_graphql::Result<String> {
        let service = ctx.data::<JobService>()?;
        let lines = service
            .logs(
                &self.0.id,
                &caller(ctx)?.scope,
                tail_lines.clamp(1, MAX_TAIL_LINES) as usize,
            )
            .await
            .api()?;
        Ok(lines.join("\n"))
    }
    /// The job's output from jobgate's archive, a page at a time, oldest line first: up to
    /// `first` lines after the cursor `after` (a line's `cursor`; from the first line when
    /// omitted), and no more than 1 MiB of text (one line at least). The whole output, also
    /// after the job's pods are gone and across restarts; empty while nothing is archived.
    async fn log_lines(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 100, validator(minimum = 1, maximum = 1000))] first: i32,
        after: Option<String>,
    ) -> async_graphql::Result<LogLineConnection> {
        let service = ctx.data::<JobService>()?;
        let after = after
            .as_deref()
            .map(|c| {
                c.parse::<i64>().ok().filter(|c| *c >= 0).ok_or_else(|| {
                    crate::graphql::error::bad_input(
                        "after",
                        format!("{c:?} is not a cursor this server issued"),
                    )
                })
            })
            .transpose()?;
        let page = service
            .log_page(
                &self.0.id,
                &caller(ctx)?.scope,
                first.clamp(1, 1000) as usize,
                after,
            )
            .await
            .api()?;
        let edges: Vec<LogLineEdge> = page
            .lines
            .into_iter()
            .map(|(at, line)| LogLineEdge {
                cursor: at.to_string(),
                node: LogLine::of(Some(at), line),
            })
            .collect();
        Ok(LogLineConnection {
            page_info: PageInfo {
                has_next_page: page.has_next_page,
                has_previous_page: after.is_some_and(|a| a >= 0),
                start_cursor: edges.first().map(|e| e.cursor.clone()),
                end_cursor: edges.last().map(|e| e.cursor.clone()),
            },
            edges,
        })
    }
    /// What jobgate's archive holds of the job's output (lines, bytes, whether it was
    /// truncated); null while nothing is archived.
    async fn log_archive(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<LogArchiveView>> {
        let service = ctx.data::<JobService>()?;
        Ok(service
            .log_archive(&self.0.id, &caller(ctx)?.scope)
            .await
            .api()?
            .map(LogArchiveView::from))
    }
    /// The job's recorded status events, oldest first: the newest `last` of them (its whole
    /// history when it has fewer). Each phase change and progress update, as `jobEvents`
    /// delivered it.
    async fn events(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 100, validator(minimum = 1, maximum = 1000))] last: i32,
    ) -> async_graphql::Result<Vec<JobStatusEvent>> {
        let service = ctx.data::<JobService>()?;
        let events = service
            .history(&self.0.id, &caller(ctx)?.scope, last.clamp(1, 1000) as usize)
            .await
            .api()?;
        Ok(events
            .into_iter()
            .map(|e| JobStatusEvent { event: Arc::new(e) })
            .collect())
    }
    /// The job's pods as the Kubernetes executor sees them now, oldest first: empty on the
    /// local executor and once the job has finished (its history, result and log tail stay).
    async fn pods(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Pod>> {
        let service = ctx.data::<JobService>()?;
        Ok(service
            .runs(&self.0.id, &caller(ctx)?.scope)
            .await
            .api()?
            .into_iter()
            .map(|r| Pod {
                name: r.name,
                index: r.index,
                phase: r.phase.to_owned(),
                exit_code: r.exit_code,
                reason: r.reason,
                message: r.message,
                created_at: r.created_at,
                finished_at: r.finished_at,
            })
            .collect())
    }
    /// Who submitted the job, as authenticated: `anonymous` or `api-token`.
    async fn submitter(&self) -> Option<&str> {
        self.0.submitter.as_deref()
    }
    /// The submitted specification, with defaults applied.
    async fn spec(&self) -> JobSpec {
        JobSpec(self.0.clone())
    }
}

/// One line of a job's output.
#[derive(SimpleObject, Clone, Debug)]
pub struct LogLine {
    pub text: String,
    /// Which run wrote it: the pod's name on Kubernetes; null on the local executor.
    pub source: Option<String>,
    /// Where the line is in the job's archived output (its offset, from 0): `jobLogs(after:)`
    /// and `Job.logLines(after:)` resume right after it. Null only for output of a job
    /// that finished before jobgate archived output, read from its executor.
    pub cursor: Option<String>,
}

impl LogLine {
    pub fn of(cursor: Option<i64>, line: model::LogLine) -> Self {
        Self {
            text: line.text,
            source: line.source,
            cursor: cursor.map(|c| c.to_string()),
        }
    }
}

#[derive(SimpleObject)]
pub struct LogLineEdge {
    pub cursor: String,
    pub node: LogLine,
}

/// A page of a job's archived output, oldest line first.
#[derive(SimpleObject)]
pub struct LogLineConnection {
    pub edges: Vec<LogLineEdge>,
    pub page_info: PageInfo,
}

/// What jobgate's archive holds of a job's output.
#[derive(SimpleObject)]
#[graphql(name = "LogArchive")]
pub struct LogArchiveView {
    /// Lines archived (a truncation marker included): the next line's cursor.
    pub lines: i64,
    /// Bytes of those lines, uncompressed (each line and its newline).
    pub bytes: i64,
    /// The archive stopped before the output ended: at the per-job cap
    /// (`--log-archive-max-bytes`), or after lines were lost while the store could not be
    /// written. Its last line says which.
    pub truncated: bool,
}

impl From<model::LogArchive> for LogArchiveView {
    fn from(a: model::LogArchive) -> Self {
        Self {
            lines: a.lines,
            bytes: a.bytes,
            truncated: a.truncated,
        }
    }
}

/// One recorded status change of a job.
pub struct JobStatusEvent {
    pub event: Arc<JobEvent>,
}

#[Object]
impl JobStatusEvent {
    /// Pass it as `after` to resume from this event.
    async fn cursor(&self) -> String {
        self.event.seq.to_string()
    }
    async fn phase(&self) -> JobPhase {
        self.event.phase.into()
    }
    /// The phase before this event; equal to `phase` for a progress update, null for the
    /// job's first event.
    async fn previous_phase(&self) -> Option<JobPhase> {
        self.event.previous_phase.map(Into::into)
    }
    async fn at(&self) -> DateTime<Utc> {
        self.event.at
    }
    async fn reason(&self) -> Option<&str> {
        self.event.reason.as_deref()
    }
    async fn message(&self) -> Option<&str> {
        self.event.message.as_deref()
    }
    /// The job as it was right after this event.
    async fn job(&self) -> JobObject {
        JobObject(self.event.job.clone())
    }
}

#[derive(SimpleObject)]
pub struct JobEdge {
    pub cursor: String,
    pub node: JobObject,
}

#[derive(SimpleObject)]
pub struct PageInfo {
    pub has_next_page: bool,
    pub has_previous_page: bool,
    pub start_cursor: Option<String>,
    pub end_cursor: Option<String>,
}

#[derive(SimpleObject)]
pub struct JobConnection {
    pub edges: Vec<JobEdge>,
    pub page_info: PageInfo,
    /// How many jobs match the filter, across all pages. Exact without `nameContains` (read
    /// from counts jobgate keeps per namespace and phase, so asking costs nothing however many
    /// jobs there are). With `nameContains` it is a lower bound: matches are counted among at
    /// most the 5,000 newest candidates, so it is exact below that and may be lower above
    /// it. The pages themselves (`edges`, `hasNextPage`) are always exact.
    pub total_count: i32,
    /// True when this page stopped at its budget of candidates (see `Query.jobs`) before
    /// finding `first` jobs: it may hold fewer, or none, yet `hasNextPage` is true and the
    /// next page, after `pageInfo.endCursor`, goes on where this one stopped.
    pub partial: bool,
}

#[derive(SimpleObject)]
pub struct SubmitJobPayload {
    pub job: JobObject,
    /// False when an earlier submission with the same idempotencyKey was returned.
    pub created: bool,
}

/// The answer to `submitJobs`: one entry per input, in input order, in `jobs` and `created`;
/// the refused inputs in `errors`, by index.
#[derive(SimpleObject)]
pub struct SubmitJobsPayload {
    /// The job accepted for each input (or the earlier job its idempotencyKey returned), in
    /// input order; null where the input was refused (its reason is in `errors`).
    pub jobs: Vec<Option<JobObject>>,
    /// For each input, in input order: true when this call created its job, false when an
    /// earlier submission with the same idempotencyKey was returned, null when refused.
    pub created: Vec<Option<bool>>,
    /// The inputs that were refused, in input order.
    pub errors: Vec<SubmitJobsError>,
}

/// Why one input of `submitJobs` was refused: the code and message `submitJob` would have
/// answered for it alone.
#[derive(SimpleObject)]
pub struct SubmitJobsError {
    /// Its position in `inputs`, from 0.
    pub index: i32,
    /// `BAD_USER_INPUT`, `FORBIDDEN`, `QUOTA_EXCEEDED`, `UNAVAILABLE`, ... as for `submitJob`.
    pub code: String,
    pub message: String,
    /// For `BAD_USER_INPUT`, the input field at fault, e.g. `inputs[3].command`.
    pub field: Option<String>,
}

#[derive(SimpleObject)]
pub struct CancelJobPayload {
    pub job: JobObject,
}

/// Counts by phase and recent activity, as one consistent snapshot.
#[derive(SimpleObject)]
pub struct JobStats {
    /// The cursor of the newest event the snapshot includes ("0" when there is none):
    /// subscribe to `jobEvents(after: cursor)` to keep the figures current with no gap and
    /// no double count.
    pub cursor: String,
    pub counts: PhaseCounts,
    /// Submissions and completions per bucket, oldest first, covering the window up to now.
    /// Buckets are aligned to multiples of `bucketSeconds` since the Unix epoch, so a client
    /// places a live event in its bucket with floor(epochSeconds / bucketSeconds) *
    /// bucketSeconds; the last bucket is the current one.
    pub activity: Vec<ActivityBucket>,
}

/// How many jobs are in each phase.
#[derive(SimpleObject)]
pub struct PhaseCounts {
    pub pending: i64,
    pub running: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub total: i64,
}

#[derive(SimpleObject)]
pub struct ActivityBucket {
    pub start: DateTime<Utc>,
    /// Jobs whose `submittedAt` falls in the bucket.
    pub submitted: i64,
    /// Jobs that entered the phase in the bucket (the `at` of that event).
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
}

impl From<crate::jobs::service::Stats> for JobStats {
    fn from(stats: crate::jobs::service::Stats) -> Self {
        let count = |p| stats.counts.get(&p).copied().unwrap_or(0);
        Self {
            cursor: stats.cursor.to_string(),
            counts: PhaseCounts {
                pending: count(model::JobPhase::Pending),
                running: count(model::JobPhase::Running),
                succeeded: count(model::JobPhase::Succeeded),
                failed: count(model::JobPhase::Failed),
                cancelled: count(model::JobPhase::Cancelled),
                total: stats.counts.values().sum(),
            },
            activity: stats
                .activity
                .into_iter()
                .map(|b| ActivityBucket {
                    start: DateTime::from_timestamp(b.start, 0).unwrap_or(DateTime::UNIX_EPOCH),
                    submitted: b.submitted,
                    succeeded: b.succeeded,
                    failed: b.failed,
                    cancelled: b.cancelled,
                })
                .collect(),
        }
    }
}

/// What kind of value a template field takes.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum TemplateFieldType {
    String,
    /// A list of strings, e.g. `command`.
    StringList,
    Int,
    /// A list of `{name, value}`.
    Env,
    /// `{requests, limits}` of cpu and memory.
    Resources,
}

/// A named recipe a job may use (`SubmitJobInput.template`).
pub struct TemplateObject(pub Template);

#[Object(name = "Template")]
impl TemplateObject {
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn description(&self) -> &str {
        &self.0.description
    }
    /// What a job of this template becomes: `batch/v1 Job` on Kubernetes, `local process` on
    /// the local executor, or the kind a workload template creates, e.g.
    /// `argoproj.io/v1alpha1 Workflow`.
    async fn kind(&self) -> &str {
        &self.0.kind
    }
    /// Whether jobs can use it now.
    async fn available(&self) -> bool {
        self.0.available
    }
    /// Why jobs cannot use it now (e.g. its kind's CRD is not installed); null when available.
    async fn unavailable_reason(&self) -> Option<&str> {
        self.0.unavailable_reason.as_deref()
    }
    /// The `SubmitJobInput` fields this template uses, in the order a form shows them.
    async fn fields(&self) -> Vec<TemplateFieldObject> {
        self.0.fields.iter().cloned().map(TemplateFieldObject).collect()
    }
    /// JSON Schema (draft 2020-12) of `parameters`; null when the template takes none.
    async fn parameter_schema(&self) -> Option<Json<serde_json::Value>> {
        self.0.parameter_schema.clone().map(Json)
    }
}

/// One `SubmitJobInput` field of a template, described for a form.
pub struct TemplateFieldObject(pub TemplateField);

#[Object(name = "TemplateField")]
impl TemplateFieldObject {
    /// The `SubmitJobInput` field it fills, e.g. `image`, `command`, `resources`.
    async fn name(&self) -> &str {
        self.0.name
    }
    async fn label(&self) -> &str {
        &self.0.label
    }
    async fn description(&self) -> &str {
        &self.0.description
    }
    #[graphql(name = "type")]
    async fn field_type(&self) -> TemplateFieldType {
        match self.0.field_type {
            FieldType::String => TemplateFieldType::String,
            FieldType::StringList => TemplateFieldType::StringList,
            FieldType::Int => TemplateFieldType::Int,
            FieldType::Env => TemplateFieldType::Env,
            FieldType::Resources => TemplateFieldType::Resources,
        }
    }
    async fn required(&self) -> bool {
        self.0.required
    }
    /// The value the server uses when the field is omitted, as JSON; null when none.
    async fn default(&self) -> Option<Json<serde_json::Value>> {
        self.0.default.clone().map(Json)
    }
    /// The only values the server accepts, when it limits them (namespaces, service
    /// accounts).
    async fn choices(&self) -> Option<&[String]> {
        self.0.choices.as_deref()
    }
    async fn minimum(&self) -> Option<i64> {
        self.0.minimum
    }
    async fn maximum(&self) -> Option<i64> {
        self.0.maximum
    }
    /// An example value for a form's placeholder.
    async fn placeholder(&self) -> Option<&str> {
        self.0.placeholder
    }
}

/// One pod of a job on Kubernetes.
#[derive(SimpleObject)]
pub struct Pod {
    pub name: String,
    /// The completion index, for jobs with several completions.
    pub index: Option<i32>,
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    pub phase: String,
    /// The exit code of the job's container, once it has ended.
    pub exit_code: Option<i32>,
    /// Why it ended, e.g. `Error`, `OOMKilled`, `DeadlineExceeded`.
    pub reason: Option<String>,
    /// Its termination message: the result it wrote, or its last lines when it failed.
    pub message: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}
