//! The schedules service ([`Schedules`]): create, change, pause, resume, delete, trigger and
//! backfill schedules for callers within their scope, the feed of schedule events, and the
//! ticker (`ticker`); `schedule_feed` is the feed that fires them.
//!
//! Every job a schedule starts goes through [`JobService`]'s ordinary submission path
//! (validation, quotas, tenancy, idempotency), submitted as the schedule's own principal
//! ([`schedule_principal`]) with a key per tick ([`tick_key`]): a tick fired twice, by a
//! restart or a second replica, finds the job its first firing made. That is the
//! exactly-once guarantee; the store's `last_tick` only saves work.
//!
//! It must not know GraphQL or credentials: what an owner may do now is asked of
//! [`OwnerRights`], which the server wires to `auth`.

mod schedule_feed;
mod ticker;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::jobs::service::{JobService, ServiceError, Submitted, Submitter};
use crate::model::{
    ConcurrencyPolicy, CronRule, MAX_BACKFILL_TICKS, Schedule, ScheduleEvent, ScheduleEventKind,
    ScheduleLimits, Scope, ShardSet, SubmitRequest, ValidationError, check_schedule, schedule_principal,
    tick_key,
};
use crate::store::owner_scopes::{OwnedScopes, ScopesSeen, narrow_owned};
use crate::store::{NotInserted, Store};

/// What a schedule's owner (a principal) may do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerStanding {
    /// These namespaces.
    Scope(Scope),
    /// No current credential names it: its schedules stop firing, saying this.
    Gone(String),
    /// Not knowable without its credential (a JWT subject): the schedule keeps firing while
    /// its namespace is in the owner scope it stores (the creating token's, narrowed by every
    /// narrower token the owner has called with since: [`Schedules::saw_jwt_caller`]).
    Unknown,
}

/// Who tells the schedules service what an owner may do now.
pub trait OwnerRights: Send + Sync {
    fn standing(&self, principal: &str) -> OwnerStanding;
}

/// Rights for tests and embedders without credentials: every owner may use every namespace.
pub struct EveryoneEverywhere;

impl OwnerRights for EveryoneEverywhere {
    fn standing(&self, _: &str) -> OwnerStanding {
        OwnerStanding::Scope(Scope::All)
    }
}

/// The caller of a schedule operation.
#[derive(Clone, Debug)]
pub struct ScheduleCaller<'a> {
    pub principal: &'a str,
    pub name: &'a str,
    pub scope: &'a Scope,
}

/// A new schedule, as the caller gave it.
#[derive(Clone, Debug)]
pub struct NewSchedule {
    pub name: String,
    pub cron: String,
    pub time_zone: String,
    pub concurrency_policy: ConcurrencyPolicy,
    pub starting_deadline_seconds: Option<i64>,
    pub suspended: bool,
    pub job: SubmitRequest,
}

/// Changes to a schedule; `None` leaves a field as it is.
#[derive(Clone, Debug, Default)]
pub struct ScheduleChanges {
    pub name: Option<String>,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// `Some(None)` removes the deadline.
    pub starting_deadline_seconds: Option<Option<i64>>,
    pub suspended: Option<bool>,
    pub job: Option<SubmitRequest>,
}

/// A page of schedules.
#[derive(Clone, Debug)]
pub struct SchedulePage {
    pub schedules: Vec<Schedule>,
    pub has_next_page: bool,
}

/// Settings of the schedules service.
#[derive(Clone, Debug, Default)]
pub struct ScheduleSettings {
    pub limits: ScheduleLimits,
}

/// A cheap, cloneable handle to the schedules service.
#[derive(Clone)]
pub struct Schedules {
    inner: Arc<State>,
}

struct State {
    store: Arc<dyn Store>,
    jobs: JobService,
    owners: Arc<dyn OwnerRights>,
    limits: ScheduleLimits,
    /// With replicas: the shards this one acts for (it fires only their schedules).
    shards: Option<watch::Receiver<ShardSet>>,
    /// Wakes the ticker: a schedule changed here.
    changed: Notify,
    /// Bumped after every event this process stored, and at every commit of events another
    /// process sharing the store announces: wakes the feeds.
    appended: watch::Sender<u64>,
    /// JWT owners' scopes already applied to their schedules here.
    narrowed: ScopesSeen,
    /// Whether other processes write the store too: feeds then also look now and then, for a
    /// wake-up lost while the store's listener reconnected.
    shared: bool,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

fn bad(field: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::Invalid(ValidationError {
        field: field.to_owned(),
        message: message.into(),
    })
}

fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { id: id.to_owned() }
}

impl Schedules {
    /// Starts the service and its ticker.
    pub async fn start(
        store: Arc<dyn Store>,
        jobs: JobService,
        owners: Arc<dyn OwnerRights>,
        settings: ScheduleSettings,
        shards: Option<watch::Receiver<ShardSet>>,
    ) -> Self {
        let wakeups = match store.commit_wakeups().await {
            Ok(wakeups) => wakeups,
            Err(e) => {
                tracing::warn!(error = %e, "schedules: listening for other replicas' commits failed; their schedule events reach the feeds at the safety poll");
                None
            }
        };
        let shared = wakeups.is_some();
        let inner = Arc::new(State {
            store,
            jobs,
            owners,
            limits: settings.limits,
            shards,
            changed: Notify::new(),
            appended: watch::channel(0).0,
            narrowed: ScopesSeen::default(),
            shared,
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        inner.tasks.spawn(ticker::run(inner.clone()));
        if let Some(wakeups) = wakeups {
            inner
                .tasks
                .spawn(schedule_feed::wake_on_commits(inner.clone(), wakeups));
        }
        Self { inner }
    }

    /// Stops the ticker.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// Creates a schedule in the caller's scope; its job is checked as a submission.
    pub async fn create(
        &self,
        caller: ScheduleCaller<'_>,
        new: NewSchedule,
    ) -> Result<Schedule, ServiceError> {
        let now = Utc::now();
        check_schedule(
            &new.name,
            &new.cron,
            &new.time_zone,
            new.starting_deadline_seconds,
            &new.job,
            &self.inner.limits,
            now,
        )?;
        let namespace = self.check_job(&new.job, caller.scope)?;
        let schedule = Schedule {
            id: uuid::Uuid::now_v7().to_string(),
            name: new.name,
            namespace,
            cron: new.cron,
            time_zone: new.time_zone,
            concurrency_policy: new.concurrency_policy,
            starting_deadline_seconds: new.starting_deadline_seconds,
            suspended: new.suspended,
            job: new.job,
            owner: caller.principal.to_owned(),
            owner_name: caller.name.to_owned(),
            owner_scope: caller.scope.clone(),
            created_at: now,
            updated_at: now,
            revision: 1,
            last_tick: None,
            last_fired: None,
            blocked_reason: None,
        };
        let mut event = ScheduleEvent::of(&schedule, ScheduleEventKind::Created, now);
        event.schedule = Some(Box::new(schedule.clone()));
        match self
            .inner
            .store
            .insert_schedule(&schedule, &event, self.inner.limits.max_per_namespace)
            .await?
        {
            Ok(_) => {}
            Err(NotInserted::NameTaken) => {
                return Err(bad(
                    "input.name",
                    format!(
                        "namespace {:?} already has a schedule named {:?}",
                        schedule.namespace, schedule.name
                    ),
                ));
            }
            Err(NotInserted::Full) => {
                return Err(ServiceError::ScheduleQuotaExceeded {
                    namespace: schedule.namespace,
                    limit: self.inner.limits.max_per_namespace,
                });
            }
        }
        self.changed();
        Ok(schedule)
    }

    /// A JWT holder called with `scope`: its schedules' owner scopes are narrowed to it for
    /// good, at the first request of each scope seen by this process (in the background: the
    /// request does not wait). Static tokens' and anonymous callers' rights are read at every
    /// tick instead.
    pub fn saw_jwt_caller(&self, principal: &str, scope: &Scope) {
        if !self.inner.narrowed.first_sight(principal, scope) {
            return;
        }
        let (inner, principal, scope) = (self.inner.clone(), principal.to_owned(), scope.clone());
        self.inner.tasks.spawn(async move {
            match narrow_owned(&OwnedSchedules(inner.store.as_ref()), &principal, &scope).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(owner = %principal, schedules = n, "schedules narrowed to their owner's token");
                    inner.changed.notify_one();
                }
                Err(e) => {
                    inner.narrowed.forget(&principal);
                    tracing::warn!(owner = %principal, error = %e, "narrowing schedules failed; the owner's next request tries again");
                }
            }
        });
    }

    /// The namespace a schedule's job runs in, once checked as a submission by the caller.
    fn check_job(&self, job: &SubmitRequest, scope: &Scope) -> Result<String, ServiceError> {
        self.inner
            .jobs
            .check_submission(job.clone(), scope)
            .map_err(|e| match e {
                // Field paths of the embedded input.
                ServiceError::Invalid(v) => ServiceError::Invalid(ValidationError {
                    field: v.field.replacen("input.", "input.job.", 1),
                    message: v.message,
                }),
                e => e,
            })
    }

    /// A schedule by id, when it is in `scope`.
    pub async fn get(&self, id: &str, scope: &Scope) -> Result<Option<Schedule>, ServiceError> {
        Ok(self
            .inner
            .store
            .schedule(id)
            .await?
            .filter(|s| scope.allows(&s.namespace)))
    }

    /// The schedules in `scope`, oldest first, `first` at most, after the schedule `after`.
    pub async fn list(
        &self,
        scope: &Scope,
        after: Option<&str>,
        first: i64,
    ) -> Result<SchedulePage, ServiceError> {
        let mut schedules = self.inner.store.schedules(scope, after, first).await?;
        let has_next_page = schedules.len() as i64 > first;
        schedules.truncate(first.max(0) as usize);
        Ok(SchedulePage {
            schedules,
            has_next_page,
        })
    }

    /// Applies `changes` (checked as at creation) and records `kind`.
    async fn change(
        &self,
        id: &str,
        scope: &Scope,
        kind: ScheduleEventKind,
        apply: impl Fn(&mut Schedule),
    ) -> Result<Schedule, ServiceError> {
        // A concurrent change makes the conditional write miss: read again and retry.
        for _ in 0..5 {
            let Some(current) = self.get(id, scope).await? else {
                return Err(not_found(id));
            };
            let mut changed = current.clone();
            apply(&mut changed);
            let now = Utc::now();
            if kind == ScheduleEventKind::Updated {
                check_schedule(
                    &changed.name,
                    &changed.cron,
                    &changed.time_zone,
                    changed.starting_deadline_seconds,
                    &changed.job,
                    &self.inner.limits,
                    now,
                )?;
                let namespace = self.check_job(&changed.job, scope)?;
                if namespace != current.namespace {
                    return Err(bad(
                        "input.job.namespace",
                        format!(
                            "a schedule stays in its namespace {:?}; create another in {namespace:?}",
                            current.namespace
                        ),
                    ));
                }
            }
            changed.revision = current.revision + 1;
            changed.updated_at = now;
            let mut event = ScheduleEvent::of(&changed, kind, now);
            event.schedule = Some(Box::new(changed.clone()));
            if self
                .inner
                .store
                .update_schedule(&changed, current.revision, &event)
                .await?
                .is_some()
            {
                self.changed();
                return Ok(changed);
            }
        }
        Err(ServiceError::FailedPrecondition(format!(
            "schedule {id} keeps changing; try again"
        )))
    }

    /// Changes a schedule's definition.
    pub async fn update(
        &self,
        id: &str,
        scope: &Scope,
        changes: ScheduleChanges,
    ) -> Result<Schedule, ServiceError> {
        if let Some(name) = &changes.name
            && name.is_empty()
        {
            return Err(bad("input.name", "must not be empty"));
        }
        self.change(id, scope, ScheduleEventKind::Updated, |s| {
            let c = changes.clone();
            if let Some(v) = c.name {
                s.name = v;
            }
            if let Some(v) = c.cron {
                s.cron = v;
            }
            if let Some(v) = c.time_zone {
                s.time_zone = v;
            }
            if let Some(v) = c.concurrency_policy {
                s.concurrency_policy = v;
            }
            if let Some(v) = c.starting_deadline_seconds {
                s.starting_deadline_seconds = v;
            }
            if let Some(v) = c.suspended {
                s.suspended = v;
            }
            if let Some(v) = c.job {
                s.job = v;
            }
        })
        .await
    }

    /// Stops a schedule's ticks until it is resumed.
    pub async fn pause(&self, id: &str, scope: &Scope) -> Result<Schedule, ServiceError> {
        self.change(id, scope, ScheduleEventKind::Paused, |s| s.suspended = true)
            .await
    }

    /// Lets a paused schedule fire again (a tick missed while paused may start once, within
    /// its starting deadline, as after downtime).
    pub async fn resume(&self, id: &str, scope: &Scope) -> Result<Schedule, ServiceError> {
        self.change(id, scope, ScheduleEventKind::Resumed, |s| s.suspended = false)
            .await
    }

    /// Deletes a schedule (the jobs it started stay).
    pub async fn delete(&self, id: &str, scope: &Scope) -> Result<Schedule, ServiceError> {
        let Some(schedule) = self.get(id, scope).await? else {
            return Err(not_found(id));
        };
        let mut event = ScheduleEvent::of(&schedule, ScheduleEventKind::Deleted, Utc::now());
        event.schedule = Some(Box::new(schedule.clone()));
        self.inner
            .store
            .delete_schedule(id, &event)
            .await?
            .ok_or_else(|| not_found(id))?;
        self.changed();
        Ok(schedule)
    }

    /// Starts a run now, outside the rule's ticks (its own idempotency key, never a tick's);
    /// the concurrency policy does not apply.
    pub async fn trigger(&self, id: &str, caller: ScheduleCaller<'_>) -> Result<Submitted, ServiceError> {
        let Some(schedule) = self.get(id, caller.scope).await? else {
            return Err(not_found(id));
        };
        let key = format!("trigger:{}", uuid::Uuid::now_v7());
        let submitted = self.submit(&schedule, key, caller.scope).await?;
        let mut event = ScheduleEvent::of(&schedule, ScheduleEventKind::Fired, Utc::now());
        event.job_id = Some(submitted.job.id.clone());
        event.message = Some(format!("triggered by {}", caller.name));
        self.record(&event).await?;
        Ok(submitted)
    }

    /// Starts the run of every tick of the rule in [`from`, `to`] (both in the past) that has
    /// none yet, with the tick's own key: a tick that already ran is not run again. At most
    /// [`MAX_BACKFILL_TICKS`] ticks; more is refused, nothing started.
    pub async fn backfill(
        &self,
        id: &str,
        caller: ScheduleCaller<'_>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<(DateTime<Utc>, Submitted)>, ServiceError> {
        let Some(schedule) = self.get(id, caller.scope).await? else {
            return Err(not_found(id));
        };
        if from >= to {
            return Err(bad("from", "must be before `to`"));
        }
        if to > Utc::now() {
            return Err(bad(
                "to",
                "must not be in the future: the rule itself fires what is to come",
            ));
        }
        let rule = CronRule::parse(&schedule.cron, &schedule.time_zone)?;
        // `from` itself may be a tick.
        let start = from - chrono::Duration::milliseconds(1);
        let ticks: Vec<_> = rule
            .next_ticks(start, MAX_BACKFILL_TICKS + 1)
            .into_iter()
            .filter(|t| *t <= to)
            .collect();
        if ticks.len() > MAX_BACKFILL_TICKS {
            return Err(bad(
                "to",
                format!("the range holds more than {MAX_BACKFILL_TICKS} ticks; backfill it in several calls"),
            ));
        }
        let mut started = Vec::with_capacity(ticks.len());
        for tick in ticks {
            let submitted = self.submit(&schedule, tick_key(tick), caller.scope).await?;
            let mut event = ScheduleEvent::of(&schedule, ScheduleEventKind::Fired, Utc::now());
            event.tick = Some(tick);
            event.job_id = Some(submitted.job.id.clone());
            event.message = Some(format!("backfilled by {}", caller.name));
            self.record(&event).await?;
            started.push((tick, submitted));
        }
        Ok(started)
    }

    /// The schedule's runs (the events that started jobs), newest first.
    pub async fn runs(&self, id: &str, limit: i64) -> Result<Vec<ScheduleEvent>, ServiceError> {
        Ok(self.inner.store.schedule_runs(id, limit).await?)
    }

    /// Submits the schedule's job with `key`, as the schedule, within `scope`.
    async fn submit(
        &self,
        schedule: &Schedule,
        key: String,
        scope: &Scope,
    ) -> Result<Submitted, ServiceError> {
        let mut request = schedule.job.clone();
        request.idempotency_key = Some(key);
        // The job's namespace is the schedule's, even if a default changed since.
        request.namespace = Some(schedule.namespace.clone());
        let submitter = Submitter {
            name: schedule.owner_name.clone(),
            principal: schedule_principal(&schedule.id),
        };
        self.inner.jobs.submit(request, Some(submitter), scope).await
    }

    async fn record(&self, event: &ScheduleEvent) -> Result<(), ServiceError> {
        self.inner.store.record_schedule_event(event).await?;
        self.appended();
        Ok(())
    }

    fn changed(&self) {
        self.inner.changed.notify_one();
        self.appended();
    }

    fn appended(&self) {
        self.inner.appended.send_modify(|n| *n += 1);
    }
}

/// Schedules as records their owner's tokens narrow ([`narrow_owned`]).
struct OwnedSchedules<'a>(&'a dyn Store);

#[async_trait::async_trait]
impl OwnedScopes for OwnedSchedules<'_> {
    async fn owned(&self, owner: &str) -> crate::store::Result<Vec<(String, Scope)>> {
        Ok(self
            .0
            .owner_schedules(owner)
            .await?
            .into_iter()
            .map(|s| (s.id, s.owner_scope))
            .collect())
    }

    async fn scope_of(&self, id: &str) -> crate::store::Result<Option<Scope>> {
        Ok(self.0.schedule(id).await?.map(|s| s.owner_scope))
    }

    async fn replace_scope(&self, id: &str, from: &Scope, to: &Scope) -> crate::store::Result<bool> {
        self.0.narrow_schedule_scope(id, from, to).await
    }
}
