//! The root types (`Query`, `Mutation`, `Subscription`) and the schema builder.
//!
//! Resolvers translate between GraphQL and the job service and do nothing else: no rules,
//! no storage, no tenancy. Each hands the service the caller's `Scope` (from `caller`), and
//! the service decides what that caller may see; nothing here filters, builds events or
//! counts metrics. Limits on query shape (depth, complexity, aliases, expanded size) are set here
//! and checked by `limits`.

use std::sync::Arc;

use async_graphql::{Context, ID, MergedObject, MergedSubscription, Object, Schema, Subscription};
use futures::{Stream, StreamExt};

use crate::graphql::caller::{caller, submitter};
use crate::graphql::error::{Code, ErrorCodes, OrApiError, bad_input, error, for_item, rate_limited};
use crate::graphql::limits::{ShapeLimit, ShapeLimits};
use crate::graphql::operation::PreExecutionFlag;
use crate::graphql::schedule_schema::{ScheduleMutation, ScheduleQuery, ScheduleSubscription};
use crate::graphql::shared_rendering::{Item, RenderFeed, RenderKey, SharedDelivery, Tap};
use crate::graphql::types::{
    CancelJobPayload, JobConnection, JobEdge, JobFilterInput, JobObject, JobStats, JobStatusEvent,
    LogLineView, PageInfo, SubmitJobInput, SubmitJobPayload, SubmitJobsError, SubmitJobsPayload,
    TemplateObject, parse_cursor,
};
use crate::graphql::unreadable_records::UnreadableRecordObject;
use crate::graphql::webhook_types::{
    CreateWebhookInput, CreateWebhookPayload, DeleteWebhookPayload, DisableWebhookPayload,
    ReplayWebhookPayload, WebhookObject,
};
use crate::jobs::schedules::Schedules;
use crate::jobs::service::{JobService, MAX_SUBMIT_BATCH, ServiceError};
use crate::model;
use crate::model::TraceParent;
use crate::rate_limits::{Limited, RateLimits, Refused};
use crate::traces::{SubmitTimes, Traces};
use crate::webhooks::{self as hooks, EndpointStatus, Webhooks};

pub type JobgateSchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// `Query`: the jobs' and webhooks' fields here, the schedules' in `schedule_schema`.
#[derive(MergedObject, Default)]
#[graphql(name = "Query")]
pub struct QueryRoot(Query, ScheduleQuery);

/// `Mutation`: the jobs' and webhooks' fields here, the schedules' in `schedule_schema`.
#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(Mutation, ScheduleMutation);

/// `Subscription`: the jobs' fields here, the schedules' in `schedule_schema`.
#[derive(MergedSubscription, Default)]
#[graphql(name = "Subscription")]
pub struct SubscriptionRoot(JobSubscription, ScheduleSubscription);

/// Limits on what one GraphQL request may ask for.
#[derive(Clone, Debug)]
pub struct QueryLimits {
    pub max_depth: usize,
    pub max_complexity: usize,
    pub max_aliases: usize,
    /// Selections (fields and fragments) once fragment spreads are expanded, checked
    /// before anything else.
    pub max_selections: usize,
    pub introspection: bool,
    /// "Did you mean …?" in validation errors, which spell out parts of the schema.
    pub suggestions: bool,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            max_depth: 16,
            max_complexity: 2_000,
            max_aliases: 30,
            max_selections: 2_000,
            introspection: true,
            suggestions: true,
        }
    }
}

/// Builds the schema over the job, schedules and webhooks services.
pub fn build(
    service: JobService,
    schedules: Schedules,
    webhooks: Webhooks,
    limits: &QueryLimits,
    rates: Arc<RateLimits>,
) -> JobgateSchema {
    let mut builder = Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        SubscriptionRoot::default(),
    )
    .data(service)
    .data(schedules)
    .data(webhooks)
    .data(rates)
    .extension(PreExecutionFlag)
    .extension(ErrorCodes)
    // Depth and complexity are checked there too, with messages that name the limit;
    // async-graphql's own `limit_depth`/`limit_complexity` say "too complex" for both.
    .extension(ShapeLimit::new(ShapeLimits {
        max_aliases: limits.max_aliases,
        max_selections: limits.max_selections,
        max_depth: limits.max_depth,
        max_complexity: limits.max_complexity,
    }))
    .limit_recursive_depth(64)
    .limit_directives(16);
    if !limits.introspection {
        builder = builder.disable_introspection();
    }
    if !limits.suggestions {
        builder = builder.disable_suggestions();
    }
    builder.finish()
}

/// The SDL of the schema, as committed in `schema.graphql`.
pub fn sdl() -> String {
    let schema = Schema::build(
        QueryRoot::default(),
        MutationRoot::default(),
        SubscriptionRoot::default(),
    )
    .finish();
    schema.sdl()
}

/// Takes one from the caller's bucket for `what`.
fn rate_limit(ctx: &Context<'_>, what: Limited) -> async_graphql::Result<()> {
    let identity = caller(ctx)?;
    match ctx.data_opt::<Arc<RateLimits>>() {
        Some(limits) => limits.check(what, &identity.principal).map_err(|wait| {
            if let Ok(service) = ctx.data::<JobService>() {
                service.count_rate_limited(what.as_str());
            }
            rate_limited(what.as_str(), wait)
        }),
        None => Ok(()),
    }
}

const DEFAULT_PAGE: i32 = 20;
const MAX_PAGE: i32 = 500;

#[derive(Default)]
pub struct Query;

#[Object(name = "JobQuery")]
impl Query {
    /// A job by id; null when there is none.
    async fn job(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Option<JobObject>> {
        let service = ctx.data::<JobService>()?;
        let scope = &caller(ctx)?.scope;
        Ok(service.job(&id, scope).await.api()?.map(JobObject))
    }

    /// Jobs, newest first, as a Relay connection.
    ///
    /// A page does a bounded amount of work whatever the filter: where jobs are checked one
    /// by one (`nameContains`, alone or with a namespace or phases), it looks at a few
    /// thousand candidates at most. When that budget runs out before `first` jobs match, the
    /// page holds those found so far, possibly none, with `partial` true,
    /// `pageInfo.hasNextPage` true and `pageInfo.endCursor` where the search stopped (which
    /// may be no edge's cursor): the next page goes on from there, skipping and repeating
    /// nothing. Clients page on until `hasNextPage` is false or they have enough, and should
    /// not treat a short or empty page as the end.
    async fn jobs(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "Page size: 1 to 500, default 20.")] first: Option<i32>,
        #[graphql(desc = "The endCursor of the previous page.")] after: Option<String>,
        filter: Option<JobFilterInput>,
    ) -> async_graphql::Result<JobConnection> {
        let first = first.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&first) {
            return Err(bad_input(
                "first",
                format!("must be between 1 and {MAX_PAGE}, got {first}"),
            ));
        }
        let after = after.as_deref().map(|c| parse_cursor("after", c)).transpose()?;
        let service = ctx.data::<JobService>()?;
        let filter: model::JobFilter = filter.unwrap_or_default().into();
        let page = service
            .jobs(&filter, &caller(ctx)?.scope, first.into(), after)
            .await
            .api()?;
        let end_cursor = page.end_cursor().map(|c| c.to_string());
        let edges: Vec<JobEdge> = page
            .jobs
            .into_iter()
            .map(|(seq, job)| JobEdge {
                cursor: seq.to_string(),
                node: JobObject(Arc::new(job)),
            })
            .collect();
        Ok(JobConnection {
            page_info: PageInfo {
                has_next_page: page.has_next_page,
                has_previous_page: after.is_some(),
                start_cursor: edges.first().map(|e| e.cursor.clone()),
                end_cursor,
            },
            edges,
            partial: page.resume_after.is_some(),
            total_count: page.total_count.try_into().unwrap_or(i32::MAX),
        })
    }

    /// Counts by phase and recent activity, as one consistent snapshot.
    async fn job_stats(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 60, desc = "How far back the activity goes: 1 to 1440 minutes.")] window_minutes: i32,
        #[graphql(default = 60, desc = "The width of one activity bucket: 10 to 3600 seconds.")]
        bucket_seconds: i32,
    ) -> async_graphql::Result<JobStats> {
        if !(1..=1440).contains(&window_minutes) {
            return Err(bad_input(
                "windowMinutes",
                format!("must be between 1 and 1440, got {window_minutes}"),
            ));
        }
        if !(10..=3600).contains(&bucket_seconds) {
            return Err(bad_input(
                "bucketSeconds",
                format!("must be between 10 and 3600, got {bucket_seconds}"),
            ));
        }
        let buckets = (window_minutes * 60 + bucket_seconds - 1) / bucket_seconds;
        if buckets > MAX_BUCKETS {
            return Err(bad_input(
                "bucketSeconds",
                format!("makes {buckets} buckets; at most {MAX_BUCKETS} are allowed, so use wider buckets"),
            ));
        }
        let service = ctx.data::<JobService>()?;
        Ok(service
            .stats(buckets.into(), bucket_seconds.into(), &caller(ctx)?.scope)
            .await
            .api()?
            .into())
    }

    /// The workload templates jobs may name, with the fields each takes.
    async fn templates(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<TemplateObject>> {
        let service = ctx.data::<JobService>()?;
        Ok(service.templates().into_iter().map(TemplateObject).collect())
    }

    /// Namespaces a job may be submitted to when the server limits them; otherwise those
    /// jobs use, with the default namespace, sorted (at most 1,000).
    async fn namespaces(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<String>> {
        let service = ctx.data::<JobService>()?;
        service.namespaces(1_000, &caller(ctx)?.scope).await.api()
    }

    /// Stored rows this server found it cannot decode, oldest first (at most 1,000; the
    /// metric `jobgate_store_unreadable_rows` counts them all). Administrators only (callers
    /// who may read every namespace): FORBIDDEN otherwise.
    async fn unreadable_records(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Vec<UnreadableRecordObject>> {
        let service = ctx.data::<JobService>()?;
        let records = service.unreadable_records(&caller(ctx)?.scope).api()?;
        Ok(records.into_iter().map(Into::into).collect())
    }

    /// The webhook endpoints the caller created, oldest first, with their delivery state;
    /// with `allOwners`, every owner's (admins only: callers of every namespace; FORBIDDEN
    /// otherwise).
    async fn webhooks(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = false)] all_owners: bool,
    ) -> async_graphql::Result<Vec<WebhookObject>> {
        let webhooks = ctx.data::<Webhooks>()?;
        let endpoints = webhooks.list(hook_caller(ctx)?, all_owners).await.api()?;
        Ok(endpoints.into_iter().map(WebhookObject).collect())
    }
}

const MAX_BUCKETS: i32 = 1440;

/// The caller, as the webhooks service knows callers.
fn hook_caller<'c>(ctx: &'c Context<'_>) -> async_graphql::Result<hooks::Caller<'c>> {
    let identity = caller(ctx)?;
    Ok(hooks::Caller {
        principal: &identity.principal,
        scope: &identity.scope,
    })
}

#[derive(Default)]
pub struct Mutation;

#[Object(name = "JobMutation")]
impl Mutation {
    /// Accepts a job durably and answers at once, PENDING; the job runs afterwards.
    async fn submit_job(
        &self,
        ctx: &Context<'_>,
        input: SubmitJobInput,
    ) -> async_graphql::Result<SubmitJobPayload> {
        let service = ctx.data::<JobService>()?;
        if let Err(e) = rate_limit(ctx, Limited::Mutations) {
            service.count_submission_rate_limited();
            return Err(e);
        }
        let identity = caller(ctx)?;
        let received = chrono::Utc::now();
        let mut request: model::SubmitRequest = input.into();
        let caller_span = ctx.data_opt::<TraceParent>();
        let traces = ctx.data_opt::<Arc<Traces>>();
        // With traces exported, the job's root span is a child of a span standing for this
        // request, itself a child of the caller's.
        request.trace_parent = match traces {
            Some(_) => Some(Traces::request_parent(caller_span)),
            None => caller_span.cloned(),
        };
        let submitted = service
            .submit(request, Some(submitter(identity)), &identity.scope)
            .await
            .api()?;
        if let Some(traces) = traces
            && submitted.created
        {
            let times = SubmitTimes {
                received,
                answered: chrono::Utc::now(),
            };
            traces.submitted(&submitted.job, caller_span, &times);
        }
        Ok(SubmitJobPayload {
            job: JobObject(submitted.job),
            created: submitted.created,
        })
    }

    /// Accepts up to 1,000 jobs in one call, each on its own as `submitJob` would (its
    /// validation, idempotencyKey, dependencies, the namespace's quota), and answers once every
    /// accepted one is committed, all in one transaction: one entry per input, in input order,
    /// and the refused inputs in `errors`. More than 1,000 inputs is BAD_USER_INPUT on
    /// `inputs`, nothing submitted. If the call fails as a whole (UNAVAILABLE: the store cannot
    /// write), no job of it was accepted; retrying with the same idempotency keys is safe
    /// either way. Each input counts as one mutation against the caller's rate limit. Over a
    /// WebSocket a call must fit in one message (`--ws-max-message-bytes`); large batches go
    /// over HTTP (`--max-body-bytes`).
    async fn submit_jobs(
        &self,
        ctx: &Context<'_>,
        inputs: Vec<SubmitJobInput>,
    ) -> async_graphql::Result<SubmitJobsPayload> {
        let service = ctx.data::<JobService>()?;
        if inputs.len() > MAX_SUBMIT_BATCH {
            return Err(bad_input(
                "inputs",
                format!(
                    "at most {MAX_SUBMIT_BATCH} jobs per call, got {}; split them into several calls",
                    inputs.len()
                ),
            ));
        }
        let identity = caller(ctx)?;
        if let Some(limits) = ctx.data_opt::<Arc<RateLimits>>() {
            let n = u32::try_from(inputs.len()).unwrap_or(u32::MAX);
            if let Err(refused) = limits.check_n(Limited::Mutations, &identity.principal, n) {
                service.count_rate_limited(Limited::Mutations.as_str());
                for _ in 0..inputs.len() {
                    service.count_submission_rate_limited();
                }
                return Err(match refused {
                    Refused::Wait(wait) => rate_limited(Limited::Mutations.as_str(), wait),
                    Refused::TooMany { most } => bad_input(
                        "inputs",
                        format!(
                            "{n} jobs are more than this server's rate limit lets one caller submit at once ({most} a minute); send at most {most} per call"
                        ),
                    ),
                });
            }
        }
        let results = service
            .submit_many(
                inputs
                    .into_iter()
                    .map(|input| model::SubmitRequest {
                        // Each job of the call joins the caller's trace, when it named one.
                        trace_parent: ctx.data_opt::<TraceParent>().cloned(),
                        ..input.into()
                    })
                    .collect(),
                Some(submitter(identity)),
                &identity.scope,
            )
            .await
            .api()?;
        let mut payload = SubmitJobsPayload {
            jobs: Vec::with_capacity(results.len()),
            created: Vec::with_capacity(results.len()),
            errors: Vec::new(),
        };
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(submitted) => {
                    payload.jobs.push(Some(JobObject(submitted.job)));
                    payload.created.push(Some(submitted.created));
                }
                Err(e) => {
                    let (code, message, field) = for_item(e, index);
                    payload.jobs.push(None);
                    payload.created.push(None);
                    payload.errors.push(SubmitJobsError {
                        index: i32::try_from(index).unwrap_or(i32::MAX),
                        code,
                        message,
                        field,
                    });
                }
            }
        }
        Ok(payload)
    }

    /// Cancels a PENDING or RUNNING job and stops its work.
    async fn cancel_job(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<CancelJobPayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let service = ctx.data::<JobService>()?;
        let job = service.cancel(&id, &caller(ctx)?.scope).await.api()?;
        Ok(CancelJobPayload { job: JobObject(job) })
    }

    /// Creates a webhook endpoint owned by the caller: from now on, every status event of
    /// the jobs matching `filter` in the namespaces the caller may read (at the time of each
    /// delivery) is POSTed to `url`, signed with the returned secret (Standard Webhooks), at
    /// least once and in order. A filter naming a namespace the caller may not read is
    /// FORBIDDEN.
    async fn create_webhook(
        &self,
        ctx: &Context<'_>,
        input: CreateWebhookInput,
    ) -> async_graphql::Result<CreateWebhookPayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let webhooks = ctx.data::<Webhooks>()?;
        let filter: model::JobFilter = input.filter.unwrap_or_default().into();
        let webhook = webhooks
            .create(hook_caller(ctx)?, &input.url, filter)
            .await
            .api()?;
        let secret = webhook.secret.clone();
        Ok(CreateWebhookPayload {
            webhook: WebhookObject(EndpointStatus {
                webhook,
                state: crate::webhooks::DeliveryState::Active,
                lag: 0,
            }),
            secret,
        })
    }

    /// Deletes one of the caller's webhook endpoints (an admin: anyone's); deliveries to it
    /// stop.
    async fn delete_webhook(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<DeleteWebhookPayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let webhooks = ctx.data::<Webhooks>()?;
        webhooks.delete(hook_caller(ctx)?, &id).await.api()?;
        Ok(DeleteWebhookPayload { id })
    }

    /// Disables one of the caller's webhook endpoints (an admin: anyone's): nothing more is
    /// delivered, and it stays listed, DISABLED, with `disabledReason` (who disabled it, and
    /// `reason` when given), until deleted. An endpoint already disabled keeps its reason.
    async fn disable_webhook(
        &self,
        ctx: &Context<'_>,
        id: ID,
        reason: Option<String>,
    ) -> async_graphql::Result<DisableWebhookPayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let webhooks = ctx.data::<Webhooks>()?;
        let status = webhooks
            .disable(hook_caller(ctx)?, &id, reason.as_deref())
            .await
            .api()?;
        Ok(DisableWebhookPayload {
            webhook: WebhookObject(status),
        })
    }

    /// Delivers again every event after the cursor `after` (an event's cursor, or a
    /// webhook's), and resumes a PARKED endpoint. CURSOR_EXPIRED when retention deleted
    /// events after `after` (`extensions.oldestCursor` is the oldest one it takes).
    async fn replay_webhook(
        &self,
        ctx: &Context<'_>,
        id: ID,
        after: String,
    ) -> async_graphql::Result<ReplayWebhookPayload> {
        rate_limit(ctx, Limited::Mutations)?;
        let after = parse_cursor("after", &after)?;
        let webhooks = ctx.data::<Webhooks>()?;
        let status = webhooks.replay(hook_caller(ctx)?, &id, after).await.api()?;
        Ok(ReplayWebhookPayload {
            webhook: WebhookObject(status),
        })
    }
}

#[derive(Default)]
pub struct JobSubscription;

/// A shared rendering's execution (see `shared_rendering`): the events it is fed, as the stream
/// async-graphql resolves the selection on.
fn rendered(feed: &RenderFeed) -> EventStream {
    feed.events::<model::JobEvent>()
        .map(|event| Ok(JobStatusEvent { event }))
        .boxed()
}

/// A subscriber's own events, handed to its group for rendering and queued as frames by
/// `delivery` (see [`SharedDelivery::run`]); the stream async-graphql sees
/// yields only an error that ends them (as its own `next`), and ends when the events do, so
/// the subscription completes after its last frame. With `resumable`, each frame moves the
/// subscription's resume cursor.
fn delivered(
    delivery: Box<dyn SharedDelivery>,
    events: impl Stream<Item = Result<(RenderKey, Arc<model::JobEvent>), ServiceError>> + Send + 'static,
    resumable: bool,
) -> EventStream {
    let events = events.map(move |r| {
        r.map(|(key, event)| {
            let cursor = resumable.then_some(event.seq);
            (key, event as Item, cursor)
        })
        .api()
    });
    delivery.run(events.boxed()).map(Err).boxed()
}

type EventStream = std::pin::Pin<Box<dyn Stream<Item = async_graphql::Result<JobStatusEvent>> + Send>>;

#[Subscription]
impl JobSubscription {
    /// Emits the job's current state at once, then every phase change; completes after a
    /// terminal phase.
    async fn job_status(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<EventStream> {
        if let Some(feed) = ctx.data_opt::<RenderFeed>() {
            return Ok(rendered(feed));
        }
        rate_limit(ctx, Limited::Subscriptions)?;
        let service = ctx.data::<JobService>()?;
        let scope = &caller(ctx)?.scope;
        let Some(events) = service.job_status(&id, scope).await.api()? else {
            return Err(error(Code::NotFound, format!("no job with id {:?}", id.as_str())));
        };
        let Some(tap) = ctx.data_opt::<Tap>() else {
            return Ok(events
                .map(|r| r.map(|event| JobStatusEvent { event }).api())
                .boxed());
        };
        // The first event is the job's state as it is now, made up from the job with the
        // cursor of its last event: a rendering of its own (variant 1), not that event's.
        let keyed = events
            .enumerate()
            .map(|(i, r)| r.map(|event| ((event.seq, u8::from(i == 0)), event)));
        Ok(delivered(tap.join(&scope.key()), keyed, false))
    }

    /// Every status event of every job matching `filter`, in cursor order: phase changes,
    /// and progress updates (where `previousPhase` equals `phase`). With `after`, first
    /// replays what came after that cursor, then goes live, with no gap and no duplicate.
    async fn job_events(
        &self,
        ctx: &Context<'_>,
        filter: Option<JobFilterInput>,
        #[graphql(
            desc = "A cursor from an earlier event; omit to start from now. One older than what retention (--retention-days) deleted answers CURSOR_EXPIRED, whose extensions give the oldest cursor and how to recover: read a jobStats snapshot and resume after its cursor. One past the newest event answers BAD_USER_INPUT."
        )]
        after: Option<String>,
        #[graphql(
            desc = "Only this job's events (NOT_FOUND for a job the caller cannot see); without `after`, from the job's latest event on. The subscription completes right after the job's terminal event, at once when `after` is at or past it."
        )]
        job_id: Option<ID>,
    ) -> async_graphql::Result<EventStream> {
        if let Some(feed) = ctx.data_opt::<RenderFeed>() {
            return Ok(rendered(feed));
        }
        rate_limit(ctx, Limited::Subscriptions)?;
        let service = ctx.data::<JobService>()?;
        let after = after.as_deref().map(|c| parse_cursor("after", c)).transpose()?;
        let filter: model::JobFilter = filter.unwrap_or_default().into();
        let scope = &caller(ctx)?.scope;
        // Refused at once, as an `error` message, rather than as the stream's first item.
        if let Some(after) = after {
            service.check_resumable(scope, after).await.api()?;
        }
        if let Some(id) = job_id {
            let Some((start, events)) = service.job_events(&id, filter, scope, after).await.api()? else {
                return Err(error(Code::NotFound, format!("no job with id {:?}", id.as_str())));
            };
            let Some(tap) = ctx.data_opt::<Tap>() else {
                return Ok(events
                    .map(|r| r.map(|event| JobStatusEvent { event }).api())
                    .boxed());
            };
            let delivery = tap.join(&scope.key());
            delivery.resumable_after(start);
            let keyed = events.map(|r| r.map(|event| ((event.seq, 0), event)));
            return Ok(delivered(delivery, keyed, true));
        }
        let Some(tap) = ctx.data_opt::<Tap>() else {
            return Ok(service
                .events(filter, scope, after)
                .map(|r| r.map(|event| JobStatusEvent { event }).api())
                .boxed());
        };
        // Pinned to a cursor now, so the subscription's resume cursor is exact from the start.
        let after = after.unwrap_or_else(|| service.bus().head());
        let keyed = service
            .events(filter, scope, Some(after))
            .map(|r| r.map(|event| ((event.seq, 0), event)));
        // Joined once its place is taken (the bus receiver exists from `events` on).
        let delivery = tap.join(&scope.key());
        delivery.resumable_after(after);
        Ok(delivered(delivery, keyed, true))
    }

    /// The job's output, a line at a time: its last `tailLines` lines (or, with `after`, every
    /// line after that cursor), then with `follow` every new line as it is archived, until
    /// the job has finished and its output is all archived; then the subscription completes.
    /// Each line carries its cursor: after a dropped connection, subscribe again with
    /// `after` the last one received to get every later line, none twice.
    async fn job_logs(
        &self,
        ctx: &Context<'_>,
        id: ID,
        #[graphql(default = true)] follow: bool,
        #[graphql(default = 100, validator(minimum = 0, maximum = 10000))] tail_lines: i32,
        after: Option<String>,
    ) -> async_graphql::Result<std::pin::Pin<Box<dyn Stream<Item = async_graphql::Result<LogLineView>> + Send>>>
    {
        rate_limit(ctx, Limited::Subscriptions)?;
        let service = ctx.data::<JobService>()?;
        let after = after.as_deref().map(|c| parse_cursor("after", c)).transpose()?;
        let Some(lines) = service
            .log_stream(
                &id,
                &caller(ctx)?.scope,
                tail_lines.max(0) as usize,
                follow,
                after,
            )
            .await
            .api()?
        else {
            return Err(error(Code::NotFound, format!("no job with id {:?}", id.as_str())));
        };
        Ok(lines
            .map(|r| r.map(|(cursor, line)| LogLineView::of(cursor, line)).api())
            .boxed())
    }
}
