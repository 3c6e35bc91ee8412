//! The schedule fields of `Query`, `Mutation` and `Subscription`, merged into the root types
//! by `schema`. Like every resolver they translate and hand the schedules service the
//! caller's scope; the service decides.

use async_graphql::{Context, ID, Object, Subscription};
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};

use crate::graphql::caller::caller;
use crate::graphql::error::{OrApiError, bad_input};
use crate::graphql::types::{
    BackfillSchedulePayload, CreateScheduleInput, CreateSchedulePayload, DeleteSchedulePayload,
    ScheduleConnection, ScheduleEdge, ScheduleEventObject, ScheduleObject, UpdateScheduleInput,
    UpdateSchedulePayload,
};
use crate::graphql::types::{JobObject, PageInfo, SubmitJobPayload, parse_after};
use crate::jobs::schedules::{ScheduleCaller, Schedules};
use crate::rate_limits::{Limited, RateLimits};

const DEFAULT_PAGE: i32 = 20;
const MAX_PAGE: i32 = 500;

fn schedule_caller<'c>(ctx: &'c Context<'_>) -> async_graphql::Result<ScheduleCaller<'c>> {
    let identity = caller(ctx)?;
    Ok(ScheduleCaller {
        principal: &identity.principal,
        name: &identity.name,
        scope: &identity.scope,
    })
}

/// Takes one from the caller's bucket for `what`.
fn rate_limit(ctx: &Context<'_>, what: Limited) -> async_graphql::Result<()> {
    let identity = caller(ctx)?;
    match ctx.data_opt::<std::sync::Arc<RateLimits>>() {
        Some(limits) => limits
            .check(what, &identity.principal)
            .map_err(|wait| crate::graphql::error::rate_limited(what.as_str(), wait)),
        None => Ok(()),
    }
}

#[derive(Default)]
pub struct ScheduleQuery;

#[Object]
impl ScheduleQuery {
    /// The schedules in the caller's namespaces, oldest first, as a Relay connection.
    async fn schedules(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "Page size: 1 to 500, default 20.")] first: Option<i32>,
        #[graphql(desc = "The endCursor of the previous page.")] after: Option<String>,
    ) -> async_graphql::Result<ScheduleConnection> {
        let first = first.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&first) {
            return Err(bad_input(
                "first",
                format!("must be between 1 and {MAX_PAGE}, got {first}"),
            ));
        }
        if after.as_ref().is_some_and(|a| a.len() > 64) {
            return Err(bad_input("after", "is not a cursor this server issued"));
        }
        let schedules = ctx.data::<Schedules>()?;
        let page = schedules
            .list(&caller(ctx)?.scope, after.as_deref(), first.into())
            .await
            .api()?;
        let edges: Vec<ScheduleEdge> = page
            .schedules
            .into_iter()
            .map(|s| ScheduleEdge {
                cursor: s.id.clone(),
                node: ScheduleObject(s),
            })
            .collect();
        Ok(ScheduleConnection {
            page_info: PageInfo {
                has_next_page: page.has_next_page,
                has_previous_page: after.is_some(),
                start_cursor: edges.first().map(|e| e.cursor.clone()),
                end_cursor: edges.last().map(|e| e.cursor.clone()),
            },
            edges,
        })
    }

    /// A schedule by id; null when there is none in the caller's namespaces.
    async fn schedule(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Option<ScheduleObject>> {
        let schedules = ctx.data::<Schedules>()?;
        Ok(schedules
            .get(&id, &caller(ctx)?.scope)
            .await
            .api()?
            .map(ScheduleObject))
    }
}

#[derive(Default)]
pub struct ScheduleMutation;

#[Object]
impl ScheduleMutation {
    /// Creates a schedule: `input.job` is submitted at every tick of `cron` in `timeZone`, as
    /// `submitJob` would submit it (validation, quotas, namespaces), once per tick whatever
    /// restarts or replicas. QUOTA_EXCEEDED past `--max-schedules-per-namespace`;
    /// BAD_USER_INPUT for a rule firing more often than `--schedule-min-interval-secs`.
    async fn create_schedule(
        &self,
        ctx: &Context<'_>,
        input: CreateScheduleInput,
    ) -> async_graphql::Result<CreateSchedulePayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let schedules = ctx.data::<Schedules>()?;
        let schedule = schedules
            .create(schedule_caller(ctx)?, input.into())
            .await
            .api()?;
        Ok(CreateSchedulePayload {
            schedule: ScheduleObject(schedule),
        })
    }

    /// Changes a schedule: the fields given replace its own, checked as at creation.
    async fn update_schedule(
        &self,
        ctx: &Context<'_>,
        id: ID,
        input: UpdateScheduleInput,
    ) -> async_graphql::Result<UpdateSchedulePayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let schedules = ctx.data::<Schedules>()?;
        let schedule = schedules
            .update(&id, &caller(ctx)?.scope, input.into())
            .await
            .api()?;
        Ok(UpdateSchedulePayload {
            schedule: ScheduleObject(schedule),
        })
    }

    /// Deletes a schedule; the jobs it started stay.
    async fn delete_schedule(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> async_graphql::Result<DeleteSchedulePayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let schedules = ctx.data::<Schedules>()?;
        let schedule = schedules.delete(&id, &caller(ctx)?.scope).await.api()?;
        Ok(DeleteSchedulePayload {
            schedule: ScheduleObject(schedule),
        })
    }

    /// Pauses a schedule: no tick fires until it is resumed.
    async fn pause_schedule(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<ScheduleObject> {
        rate_limit(ctx, Limited::Mutations)?;
        let schedules = ctx.data::<Schedules>()?;
        Ok(ScheduleObject(
            schedules.pause(&id, &caller(ctx)?.scope).await.api()?,
        ))
    }

    /// Resumes a paused schedule. As after downtime, the latest tick missed while paused
    /// starts once if it is within `startingDeadlineSeconds`.
    async fn resume_schedule(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<ScheduleObject> {
        rate_limit(ctx, Limited::Mutations)?;
        let schedules = ctx.data::<Schedules>()?;
        Ok(ScheduleObject(
            schedules.resume(&id, &caller(ctx)?.scope).await.api()?,
        ))
    }

    /// Runs the schedule's job now, outside its ticks (the concurrency policy does not apply).
    async fn trigger_schedule(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<SubmitJobPayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let schedules = ctx.data::<Schedules>()?;
        let submitted = schedules.trigger(&id, schedule_caller(ctx)?).await.api()?;
        Ok(SubmitJobPayload {
            job: JobObject(submitted.job),
            created: submitted.created,
        })
    }

    /// Starts the run of every tick of the rule in [`from`, `to`] (both past) that has none:
    /// a tick never runs twice, however often a range is backfilled. At most 100 ticks per
    /// call: a wider range is BAD_USER_INPUT, nothing started.
    async fn backfill_schedule(
        &self,
        ctx: &Context<'_>,
        id: ID,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> async_graphql::Result<BackfillSchedulePayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let schedules = ctx.data::<Schedules>()?;
        let started = schedules
            .backfill(&id, schedule_caller(ctx)?, from, to)
            .await
            .api()?;
        let mut payload = BackfillSchedulePayload {
            ticks: Vec::with_capacity(started.len()),
            jobs: Vec::with_capacity(started.len()),
            created: Vec::with_capacity(started.len()),
        };
        for (tick, submitted) in started {
            payload.ticks.push(tick);
            payload.created.push(submitted.created);
            payload.jobs.push(JobObject(submitted.job));
        }
        Ok(payload)
    }
}

type ScheduleEventStream =
    std::pin::Pin<Box<dyn Stream<Item = async_graphql::Result<ScheduleEventObject>> + Send>>;

#[derive(Default)]
pub struct ScheduleSubscription;

#[Subscription]
impl ScheduleSubscription {
    /// Every change of a schedule in the caller's namespaces (created, updated, paused,
    /// resumed, deleted) and every tick (fired with its job, or skipped with why), in cursor
    /// order. With `after` (an event's cursor), first replays what came after it, then goes
    /// live, with no gap and no duplicate.
    async fn schedule_events(
        &self,
        ctx: &Context<'_>,
        after: Option<String>,
    ) -> async_graphql::Result<ScheduleEventStream> {
        rate_limit(ctx, Limited::Subscriptions)?;
        let after = parse_after(after.as_deref())?;
        let schedules = ctx.data::<Schedules>()?;
        let scope = caller(ctx)?.scope.clone();
        let events = schedules.events(scope, after).await.api()?;
        Ok(events.map(|r| r.map(ScheduleEventObject).api()).boxed())
    }
}
