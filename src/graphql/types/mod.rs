//! GraphQL object, input and enum types: thin views over the domain model.
//!
//! They own the mapping between GraphQL names (see `schema.graphql`) and domain types, and
//! nothing else: no validation rules, no state.
//!
//! - this file: the job and its parts (`Job`, its spec, phase, queue, conditions, pods) and
//!   its status events;
//! - `attempt_views`: a job's attempts, each with its own output, and `FailureCause`;
//! - `inputs`: what mutations and filters take;
//! - `connections`: pages of jobs and of log lines (edges, page info) and the one reading of
//!   a page's cursor;
//! - `payloads`: what mutations answer;
//! - `schedule_views`: schedules, their events, inputs and payloads, and `Job.schedule`;
//! - `retry_policy`: retry rules, as submitted and as shown;
//! - `stats`: counts by phase and recent activity;
//! - `template_views`: the templates jobs are submitted with, described for clients;
//! - `timeline_views`: where a job's time went (`Job.timeline`).

mod attempt_views;
mod connections;
mod inputs;
mod local_queue_view;
mod payloads;
mod retry_policy;
mod schedule_views;
mod stats;
mod template_views;
mod timeline_views;

use std::sync::Arc;

use async_graphql::{Context, Enum, ID, Json, Object, SimpleObject};
use chrono::{DateTime, Utc};

use crate::graphql::caller::caller;
use crate::graphql::error::OrApiError;
use crate::jobs::service::JobService;
use crate::model::{self, Job, JobEvent};

pub use attempt_views::{AttemptStateView, FailureCauseView, JobAttemptObject};
pub use connections::{
    JobConnection, JobEdge, LogArchiveView, LogLineConnection, LogLineEdge, LogLineView, PageInfo,
};
pub(crate) use connections::{parse_after, parse_cursor};
pub use inputs::{EnvVarInput, JobFilterInput, ResourceListInput, ResourcesInput, SubmitJobInput};
pub use payloads::{CancelJobPayload, SubmitJobPayload, SubmitJobsError, SubmitJobsPayload};
pub use retry_policy::{
    ExitCodeOperatorView, ExitCodesInput, ExitCodesView, RetryActionView, RetryBackoffInput,
    RetryBackoffView, RetryPolicyInput, RetryPolicyView, RetryRuleInput, RetryRuleView,
};
pub use schedule_views::{
    BackfillSchedulePayload, CreateScheduleInput, CreateSchedulePayload, DeleteSchedulePayload,
    ScheduleConnection, ScheduleEdge, ScheduleEventObject, ScheduleObject, UpdateScheduleInput,
    UpdateSchedulePayload,
};
pub use stats::{ActivityBucketView, JobStats, PhaseCounts};
pub use template_views::{TemplateFieldObject, TemplateFieldType, TemplateObject};
pub use timeline_views::{TimelineSegmentKindView, TimelineSegmentObject};

/// Where a job is in its life; phases only move forward, except that a job Kueue evicts
/// or preempts goes back from RUNNING to PENDING until it is readmitted.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "JobPhase")]
pub enum JobPhaseView {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl From<model::JobPhase> for JobPhaseView {
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

impl From<JobPhaseView> for model::JobPhase {
    fn from(p: JobPhaseView) -> Self {
        match p {
            JobPhaseView::Pending => Self::Pending,
            JobPhaseView::Running => Self::Running,
            JobPhaseView::Succeeded => Self::Succeeded,
            JobPhaseView::Failed => Self::Failed,
            JobPhaseView::Cancelled => Self::Cancelled,
        }
    }
}

/// A queued job's state in Kueue.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "QueueState")]
pub enum QueueStateView {
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

impl From<model::QueueState> for QueueStateView {
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
    pub state: QueueStateView,
    /// The reason of Kueue's condition behind `state` (e.g. `Pending`, `Admitted`,
    /// `Preempted`); null before Kueue has seen the job.
    pub reason: Option<String>,
    /// Kueue's explanation, e.g. why a pending job is not admitted.
    pub message: Option<String>,
    /// The ClusterQueue whose quota it holds, while it holds some.
    pub cluster_queue: Option<String>,
    /// When it entered `state`.
    pub since: Option<DateTime<Utc>>,
    /// 1-based place among the jobs waiting in the same queue (jobgate's local queue, or
    /// the Kueue ClusterQueue); null when not waiting or not known. Read when asked:
    /// a change of position alone is not an event.
    pub position: Option<i32>,
    /// 1-based place among the same tenant's waiting jobs (local queue) or in the Kueue
    /// LocalQueue; null when not waiting or not known.
    pub local_queue_position: Option<i32>,
    /// When the job may start, where an honest estimate can be made; see `estimate`.
    pub estimated_start_at: Option<DateTime<Utc>>,
    /// How `estimatedStartAt` was made, or why no estimate can be made.
    pub estimate: Option<String>,
}

impl JobQueue {
    /// Fills in where the job stands now.
    fn placed(mut self, place: Option<model::QueuePlace>) -> Self {
        if let Some(place) = place {
            let clamp = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
            self.position = place.position.map(clamp);
            self.local_queue_position = place.local_queue_position.map(clamp);
            self.estimated_start_at = place.estimated_start_at;
            self.estimate = place.estimate;
        }
        self
    }
}

/// CPU and memory of each run.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(name = "ResourceList")]
pub struct ResourceListView {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

#[derive(SimpleObject, Clone, Debug)]
pub struct Resources {
    pub requests: ResourceListView,
    pub limits: ResourceListView,
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
#[graphql(name = "EnvVar")]
pub struct EnvVarView {
    pub name: String,
    pub value: String,
}

/// What was submitted, after defaults were applied.
pub struct JobSpecView(Arc<Job>);

#[Object(name = "JobSpec")]
impl JobSpecView {
    async fn image(&self) -> Option<&str> {
        self.0.spec.image.as_deref()
    }
    async fn command(&self) -> &[String] {
        &self.0.spec.command
    }
    async fn args(&self) -> &[String] {
        &self.0.spec.args
    }
    async fn env(&self) -> Vec<EnvVarView> {
        self.0
            .spec
            .env
            .iter()
            .map(|v| EnvVarView {
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
        let list = |l: &model::ResourceList| ResourceListView {
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
    /// Where the job goes in its queue: higher first.
    async fn priority(&self) -> i32 {
        self.0.spec.priority
    }
    /// The Kueue LocalQueue the job was queued in.
    async fn queue_name(&self) -> Option<&str> {
        self.0.spec.queue_name.as_deref()
    }
    async fn depends_on(&self) -> Vec<ID> {
        self.0.spec.depends_on.iter().map(|id| ID(id.clone())).collect()
    }
    /// How failed runs are retried, as validated (back-off defaults applied).
    async fn retry_policy(&self) -> Option<RetryPolicyView> {
        self.0.spec.retry_policy.as_ref().map(Into::into)
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
    async fn phase(&self) -> JobPhaseView {
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
    /// Where the job stands in its queue: its Kueue queue, or jobgate's local queue (named
    /// after its namespace) while it waits there; null for jobs in neither.
    async fn queue(&self, ctx: &Context<'_>) -> Option<JobQueue> {
        let Some(name) = self.0.spec.queue_name.as_ref() else {
            return local_queue_view::local_queue(ctx.data::<JobService>().ok()?, &self.0);
        };
        let place = ctx.data::<JobService>().ok().and_then(|s| s.queue_place(&self.0));
        let queue = match &self.0.workload.queue {
            Some(q) => JobQueue {
                name: q.name.clone(),
                state: q.state.into(),
                reason: q.reason.clone(),
                message: q.message.clone(),
                cluster_queue: q.cluster_queue.clone(),
                since: q.since,
                position: None,
                local_queue_position: None,
                estimated_start_at: None,
                estimate: None,
            },
            // Kueue has not made its Workload yet.
            None => JobQueue {
                name: name.clone(),
                state: QueueStateView::Pending,
                reason: None,
                message: None,
                cluster_queue: None,
                since: None,
                position: None,
                local_queue_position: None,
                estimated_start_at: None,
                estimate: None,
            },
        };
        Some(queue.placed(place))
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
        let after = parse_after(after.as_deref())?;
        let page = service
            .log_page(
                &self.0.id,
                &caller(ctx)?.scope,
                first.clamp(1, 1000) as usize,
                after,
            )
            .await
            .api()?;
        let edges = LogLineEdge::all(page.lines);
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
    /// Whether jobgate's archive holds every line the job wrote, as far as jobgate can know.
    /// False when lines are missing: the kubelet rotated a pod's log, or removed a deleted
    /// pod's containers, before jobgate read all of it, or the API server refused jobgate a
    /// pod's log until the pod had ended (RBAC without `get` on `pods/log`) (a marker line such
    /// as `[jobgate: lines lost: …]` stands in `logs`, `logLines` and `jobLogs` where lines are
    /// missing, in order, quoting the API server's refusal), or the archive was truncated
    /// (`logArchive.truncated`). True while nothing is archived. `logIncompleteReason` says why
    /// when false.
    async fn log_complete(&self, ctx: &Context<'_>) -> async_graphql::Result<bool> {
        let service = ctx.data::<JobService>()?;
        let archive = service.log_archive(&self.0.id, &caller(ctx)?.scope).await.api()?;
        Ok(archive.is_none_or(|a| a.complete()))
    }
    /// Why `logComplete` is false (the first reason lines went missing, with the API
    /// server's words when it refused jobgate a pod's log), in words; null when it is true.
    async fn log_incomplete_reason(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<String>> {
        let service = ctx.data::<JobService>()?;
        let archive = service.log_archive(&self.0.id, &caller(ctx)?.scope).await.api()?;
        Ok(archive.and_then(|a| a.incomplete_reason()))
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
    /// Each run of the job, oldest first (at most the newest 32: `attemptsOmitted` counts
    /// the older ones): its completion index and number, start and end, exit code or signal,
    /// why it failed, its pod or process, and its own output (`logLines`). An attempt's end
    /// is also a status event of its own (reason `AttemptSucceeded` or `AttemptFailed`),
    /// recorded before the job's event when it ended the job.
    async fn attempts(&self) -> Vec<JobAttemptObject> {
        attempt_views::attempts_of(&self.0)
    }
    /// The W3C trace id (32 hex digits) of the job's trace: the caller's when its request
    /// carried a `traceparent`, a new one otherwise. Its spans are exported when jobgate runs
    /// with `--otlp-endpoint` (see docs/TRACING.md).
    async fn trace_id(&self) -> String {
        self.0.trace_id()
    }
    /// Where the job's time went: queued, launching, each attempt, finishing, in the order
    /// they began; the last is open (no `endedAt`) while it lasts.
    async fn timeline(&self) -> Vec<TimelineSegmentObject> {
        timeline_views::timeline_of(&self.0)
    }
    /// How many older attempts the job no longer lists in `attempts`.
    async fn attempts_omitted(&self) -> i32 {
        self.0.attempts_omitted
    }
    /// Who submitted the job, as authenticated: `anonymous` or `api-token`.
    async fn submitter(&self) -> Option<&str> {
        self.0.submitter.as_deref()
    }
    /// The schedule that started this job; null for a job submitted otherwise, or when the
    /// schedule is deleted.
    async fn schedule(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<ScheduleObject>> {
        schedule_views::schedule_of_job(ctx, &self.0).await
    }
    /// The submitted specification, with defaults applied.
    async fn spec(&self) -> JobSpecView {
        JobSpecView(self.0.clone())
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
    async fn phase(&self) -> JobPhaseView {
        self.event.phase.into()
    }
    /// The phase before this event; equal to `phase` for a progress update, null for the
    /// job's first event.
    async fn previous_phase(&self) -> Option<JobPhaseView> {
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
