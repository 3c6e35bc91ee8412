//! GraphQL views of schedules (`Schedule` with its next fire times and recent runs,
//! `ScheduleEvent`), the schedule mutations' inputs and payloads, and the link from a job to
//! the schedule that started it (`Job.schedule`).
//!
//! They translate only: the schedules service decides who may see or change a schedule.

use std::sync::Arc;

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};

use crate::graphql::caller::caller;
use crate::graphql::error::{OrApiError, bad_input};
use crate::graphql::types::{JobObject, PageInfo, SubmitJobInput};
use crate::jobs::schedules::{NewSchedule, ScheduleChanges, Schedules};
use crate::jobs::service::JobService;
use crate::model::{self, CronRule, Job, Schedule, ScheduleEvent, ScheduleEventKind};

/// What a tick does while an earlier run of the schedule is still PENDING or RUNNING.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "ConcurrencyPolicy")]
pub enum ConcurrencyPolicyView {
    /// Start the new run beside it.
    Allow,
    /// Skip the tick, recording why.
    Forbid,
    /// Cancel the running one, then start the new one.
    Replace,
}

impl From<model::ConcurrencyPolicy> for ConcurrencyPolicyView {
    fn from(p: model::ConcurrencyPolicy) -> Self {
        match p {
            model::ConcurrencyPolicy::Allow => Self::Allow,
            model::ConcurrencyPolicy::Forbid => Self::Forbid,
            model::ConcurrencyPolicy::Replace => Self::Replace,
        }
    }
}

impl From<ConcurrencyPolicyView> for model::ConcurrencyPolicy {
    fn from(p: ConcurrencyPolicyView) -> Self {
        match p {
            ConcurrencyPolicyView::Allow => Self::Allow,
            ConcurrencyPolicyView::Forbid => Self::Forbid,
            ConcurrencyPolicyView::Replace => Self::Replace,
        }
    }
}

/// What happened to a schedule.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "ScheduleEventKind")]
pub enum ScheduleEventKindView {
    Created,
    Updated,
    Paused,
    Resumed,
    Deleted,
    /// A tick, a trigger or a backfill started a job.
    Fired,
    /// A tick started nothing; `message` says why.
    Skipped,
}

impl From<ScheduleEventKind> for ScheduleEventKindView {
    fn from(k: ScheduleEventKind) -> Self {
        match k {
            ScheduleEventKind::Created => Self::Created,
            ScheduleEventKind::Updated => Self::Updated,
            ScheduleEventKind::Paused => Self::Paused,
            ScheduleEventKind::Resumed => Self::Resumed,
            ScheduleEventKind::Deleted => Self::Deleted,
            ScheduleEventKind::Fired => Self::Fired,
            ScheduleEventKind::Skipped => Self::Skipped,
        }
    }
}

/// A job submitted on a cron rule in a time zone.
pub struct ScheduleObject(pub Schedule);

/// The most next fire times or recent runs one field answers.
const MAX_LISTED: i32 = 100;

#[Object(name = "Schedule")]
impl ScheduleObject {
    async fn id(&self) -> ID {
        ID(self.0.id.clone())
    }
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn namespace(&self) -> &str {
        &self.0.namespace
    }
    /// Five fields (minute hour day month weekday), or six with seconds first.
    async fn cron(&self) -> &str {
        &self.0.cron
    }
    /// The IANA time zone the rule is read in.
    async fn time_zone(&self) -> &str {
        &self.0.time_zone
    }
    async fn concurrency_policy(&self) -> ConcurrencyPolicyView {
        self.0.concurrency_policy.into()
    }
    /// How late a tick may still start; null: however late.
    async fn starting_deadline_seconds(&self) -> Option<i64> {
        self.0.starting_deadline_seconds
    }
    /// Paused: no tick fires until it is resumed.
    async fn suspended(&self) -> bool {
        self.0.suspended
    }
    /// Who created it (its jobs show this submitter).
    async fn owner(&self) -> &str {
        &self.0.owner_name
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.0.updated_at
    }
    /// The last tick that started a job.
    async fn last_fire_time(&self) -> Option<DateTime<Utc>> {
        self.0.last_fired
    }
    /// The last tick handled, fired or skipped.
    async fn last_tick_time(&self) -> Option<DateTime<Utc>> {
        self.0.last_tick
    }
    /// Why ticks do not start jobs although the schedule is not suspended (its owner lost
    /// the right to its namespace), as of the last tick; null when they do.
    async fn blocked_reason(&self) -> Option<&str> {
        self.0.blocked_reason.as_deref()
    }
    /// The next `count` times the rule fires (1 to 100) after `after` (default: now),
    /// whether or not it is suspended.
    async fn next_fire_times(
        &self,
        #[graphql(default = 5)] count: i32,
        after: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<Vec<DateTime<Utc>>> {
        if !(1..=MAX_LISTED).contains(&count) {
            return Err(bad_input(
                "count",
                format!("must be between 1 and {MAX_LISTED}, got {count}"),
            ));
        }
        let rule =
            CronRule::parse(&self.0.cron, &self.0.time_zone).map_err(|e| bad_input(&e.field, e.message))?;
        Ok(rule.next_ticks(after.unwrap_or_else(Utc::now), count as usize))
    }
    /// The jobs it started (ticks, triggers, backfills), newest first (at most `last`, 1 to
    /// 100), each as it is now.
    #[graphql(complexity = "10 * child_complexity")]
    async fn recent_runs(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 10)] last: i32,
    ) -> async_graphql::Result<Vec<ScheduleRun>> {
        if !(1..=MAX_LISTED).contains(&last) {
            return Err(bad_input(
                "last",
                format!("must be between 1 and {MAX_LISTED}, got {last}"),
            ));
        }
        let schedules = ctx.data::<Schedules>()?;
        let service = ctx.data::<JobService>()?;
        let scope = &caller(ctx)?.scope;
        let mut runs = Vec::new();
        for event in schedules.runs(&self.0.id, last.into()).await.api()? {
            let Some(job_id) = &event.job_id else { continue };
            // A job deleted by retention is no longer listed.
            if let Some(job) = service.job(job_id, scope).await.api()? {
                runs.push(ScheduleRun {
                    tick: event.tick,
                    started_at: event.at,
                    job: JobObject(job),
                });
            }
        }
        Ok(runs)
    }
    /// The submission each tick makes, as given (its idempotencyKey is each tick's own).
    async fn job(&self) -> async_graphql::Json<model::SubmitRequest> {
        async_graphql::Json(self.0.job.clone())
    }
}

/// A job a schedule started.
#[derive(SimpleObject)]
pub struct ScheduleRun {
    /// The tick it is the run of; null for a trigger.
    pub tick: Option<DateTime<Utc>>,
    pub started_at: DateTime<Utc>,
    pub job: JobObject,
}

/// One entry of the schedules' event log.
pub struct ScheduleEventObject(pub ScheduleEvent);

#[Object(name = "ScheduleEvent")]
impl ScheduleEventObject {
    /// Pass it as `after` to resume from this event.
    async fn cursor(&self) -> String {
        self.0.seq.to_string()
    }
    async fn kind(&self) -> ScheduleEventKindView {
        self.0.kind.into()
    }
    async fn schedule_id(&self) -> ID {
        ID(self.0.schedule_id.clone())
    }
    async fn namespace(&self) -> &str {
        &self.0.namespace
    }
    async fn at(&self) -> DateTime<Utc> {
        self.0.at
    }
    /// The tick it is about (ticks and backfills).
    async fn tick(&self) -> Option<DateTime<Utc>> {
        self.0.tick
    }
    /// The job started (FIRED).
    async fn job_id(&self) -> Option<ID> {
        self.0.job_id.clone().map(ID)
    }
    /// Why a tick was skipped, or what else a run did (ticks missed, jobs replaced).
    async fn message(&self) -> Option<&str> {
        self.0.message.as_deref()
    }
    /// The schedule as it was after a change (CREATED, UPDATED, PAUSED, RESUMED, DELETED).
    async fn schedule(&self) -> Option<ScheduleObject> {
        self.0.schedule.as_deref().cloned().map(ScheduleObject)
    }
    /// The job started (FIRED), as it is now.
    async fn job(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<JobObject>> {
        let Some(id) = &self.0.job_id else { return Ok(None) };
        let service = ctx.data::<JobService>()?;
        Ok(service.job(id, &caller(ctx)?.scope).await.api()?.map(JobObject))
    }
}

#[derive(SimpleObject)]
pub struct ScheduleEdge {
    pub cursor: String,
    pub node: ScheduleObject,
}

/// A page of schedules, oldest first.
#[derive(SimpleObject)]
pub struct ScheduleConnection {
    pub edges: Vec<ScheduleEdge>,
    pub page_info: PageInfo,
}

/// A new schedule.
#[derive(InputObject, Clone, Debug)]
pub struct CreateScheduleInput {
    /// Unique in its namespace; 1 to 128 bytes.
    pub name: String,
    /// Five fields (minute hour day month weekday), or six with seconds first; at most 256
    /// bytes.
    pub cron: String,
    /// An IANA time zone (`Europe/Berlin`); default `UTC`.
    pub time_zone: Option<String>,
    /// Default ALLOW.
    pub concurrency_policy: Option<ConcurrencyPolicyView>,
    /// How late (1 to 604800 s) a tick may still start, after downtime; default: however
    /// late. Of several missed ticks only the latest ever starts.
    pub starting_deadline_seconds: Option<i64>,
    /// Created paused. Default false.
    pub suspended: Option<bool>,
    /// What each tick submits, checked as `submitJob` checks it (no idempotencyKey: each
    /// tick has its own).
    pub job: SubmitJobInput,
}

impl From<CreateScheduleInput> for NewSchedule {
    fn from(i: CreateScheduleInput) -> Self {
        Self {
            name: i.name,
            cron: i.cron,
            time_zone: i.time_zone.unwrap_or_else(|| "UTC".to_owned()),
            concurrency_policy: i.concurrency_policy.map(Into::into).unwrap_or_default(),
            starting_deadline_seconds: i.starting_deadline_seconds,
            suspended: i.suspended.unwrap_or(false),
            job: i.job.into(),
        }
    }
}

/// Changes to a schedule: the fields given replace the schedule's.
#[derive(InputObject, Clone, Debug, Default)]
pub struct UpdateScheduleInput {
    pub name: Option<String>,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub concurrency_policy: Option<ConcurrencyPolicyView>,
    pub starting_deadline_seconds: Option<i64>,
    /// Removes the starting deadline.
    pub clear_starting_deadline: Option<bool>,
    pub suspended: Option<bool>,
    /// Replaces the whole submission (in the same namespace).
    pub job: Option<SubmitJobInput>,
}

impl From<UpdateScheduleInput> for ScheduleChanges {
    fn from(i: UpdateScheduleInput) -> Self {
        let deadline = if i.clear_starting_deadline == Some(true) {
            Some(None)
        } else {
            i.starting_deadline_seconds.map(Some)
        };
        Self {
            name: i.name,
            cron: i.cron,
            time_zone: i.time_zone,
            concurrency_policy: i.concurrency_policy.map(Into::into),
            starting_deadline_seconds: deadline,
            suspended: i.suspended,
            job: i.job.map(Into::into),
        }
    }
}

#[derive(SimpleObject)]
pub struct CreateSchedulePayload {
    pub schedule: ScheduleObject,
}

#[derive(SimpleObject)]
pub struct UpdateSchedulePayload {
    pub schedule: ScheduleObject,
}

#[derive(SimpleObject)]
pub struct DeleteSchedulePayload {
    /// The schedule as it was; the jobs it started stay.
    pub schedule: ScheduleObject,
}

/// The runs a backfill started or found.
#[derive(SimpleObject)]
pub struct BackfillSchedulePayload {
    /// The ticks in the range, oldest first.
    pub ticks: Vec<DateTime<Utc>>,
    /// Each tick's job, in `ticks` order.
    pub jobs: Vec<JobObject>,
    /// For each tick: true when this call started its job, false when the tick had one.
    pub created: Vec<bool>,
}

/// `Job.schedule`: the schedule that started `job`, when the caller may see it.
pub(crate) async fn schedule_of_job(
    ctx: &Context<'_>,
    job: &Arc<Job>,
) -> async_graphql::Result<Option<ScheduleObject>> {
    let Some(id) = model::schedule_of(job.submitter_key.as_deref()) else {
        return Ok(None);
    };
    let schedules = ctx.data::<Schedules>()?;
    Ok(schedules
        .get(id, &caller(ctx)?.scope)
        .await
        .api()?
        .map(ScheduleObject))
}
