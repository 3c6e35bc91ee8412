//! The ticker: fires the schedules this process acts for when their ticks come.
//!
//! One loop reads every schedule (with replicas: those of the shards this replica acts for,
//! `shard_of(schedule id)`), decides what is due ([`due_tick`]), fires or skips it, and
//! sleeps until the next tick, a change, or a change of shards. A tick is recorded as handled
//! (`last_tick`) only after its job is committed, so a crash in between fires it again on
//! the next start, or on the replica that takes the shard over; the tick's idempotency key
//! then finds the job the first firing made. Ticks are never lost while some replica runs,
//! and never fire twice.
//!
//! It must not decide what a tick means (the model's [`due_tick`] does) nor bypass the job
//! service's submission path.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{OwnerStanding, Schedules, State};
use crate::jobs::service::ServiceError;
use crate::model::{
    ConcurrencyPolicy, CronRule, Due, Schedule, ScheduleEvent, ScheduleEventKind, Scope, due_tick, tick_key,
};

/// The longest the ticker sleeps without looking at the store (other replicas' changes, a
/// clock stepped forward).
const IDLE: Duration = Duration::from_secs(10);

/// After a failure (the store cannot write, shutting down): how soon to try again.
const RETRY: Duration = Duration::from_secs(1);

/// How many recent runs are looked at for an active one (FORBID, REPLACE).
const ACTIVE_RUNS_LOOKED_AT: i64 = 20;

pub(super) async fn run(inner: Arc<State>) {
    let service = Schedules { inner: inner.clone() };
    let mut shards = inner.shards.clone();
    loop {
        let wait = match pass(&service).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(error = %e, "schedules: a pass failed; trying again");
                RETRY
            }
        };
        let shards_changed = async {
            match shards.as_mut() {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = inner.shutdown.cancelled() => return,
            () = inner.changed.notified() => {}
            () = shards_changed => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Whether this process fires `schedule`.
fn ours(inner: &State, schedule: &Schedule) -> bool {
    match &inner.shards {
        None => true,
        Some(rx) => rx.borrow().holds(&schedule.id),
    }
}

/// One look at every schedule; answers how long until the next tick.
async fn pass(service: &Schedules) -> Result<Duration, ServiceError> {
    let inner = &service.inner;
    let mut next: Option<DateTime<Utc>> = None;
    let mut retry = false;
    for schedule in inner.store.all_schedules().await? {
        if schedule.suspended || !ours(inner, &schedule) {
            continue;
        }
        let rule = match CronRule::parse(&schedule.cron, &schedule.time_zone) {
            Ok(rule) => rule,
            Err(e) => {
                tracing::error!(schedule = %schedule.id, error = %e.message, "schedules: a stored rule does not parse; skipped");
                continue;
            }
        };
        let now = Utc::now();
        let since = schedule.last_tick.unwrap_or(schedule.created_at);
        let due = due_tick(&rule, since, now, schedule.starting_deadline_seconds);
        let handled = match due {
            Due::Wait { next: at } => {
                next = match (next, at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                continue;
            }
            Due::TooLate { tick, missed } => {
                let late = (now - tick).num_seconds();
                let message = format!(
                    "tick {} not started: {late}s late, past startingDeadlineSeconds ({}s){}",
                    tick.to_rfc3339(),
                    schedule.starting_deadline_seconds.unwrap_or_default(),
                    missed_text(missed)
                );
                skip(service, &schedule, tick, message, None).await
            }
            Due::Fire { tick, missed } => fire(service, &schedule, tick, missed).await,
        };
        match handled {
            Ok(()) => {
                // Its next tick is found on the next pass, at once.
                next = Some(now);
            }
            Err(e) => {
                tracing::warn!(schedule = %schedule.id, error = %e, "schedules: a tick could not be handled; trying again");
                retry = true;
            }
        }
    }
    let now = Utc::now();
    let mut wait = next.map_or(IDLE, |at| (at - now).to_std().unwrap_or_default().min(IDLE));
    if retry {
        wait = wait.min(RETRY);
    }
    Ok(wait)
}

fn missed_text(missed: usize) -> String {
    match missed {
        0 => String::new(),
        n if n >= crate::model::MAX_TICKS_COUNTED => format!("; {n} or more earlier ticks were missed"),
        n => format!("; {n} earlier tick(s) were missed"),
    }
}

/// Records `tick` as handled without a run, saying why.
async fn skip(
    service: &Schedules,
    schedule: &Schedule,
    tick: DateTime<Utc>,
    message: String,
    blocked: Option<&str>,
) -> Result<(), ServiceError> {
    let mut event = ScheduleEvent::of(schedule, ScheduleEventKind::Skipped, Utc::now());
    event.tick = Some(tick);
    event.message = Some(message);
    tracing::info!(schedule = %schedule.id, tick = %tick, why = event.message.as_deref().unwrap_or_default(), "schedules: tick skipped");
    service
        .inner
        .store
        .schedule_ticked(&schedule.id, tick, false, blocked, Some(&event))
        .await?;
    service.appended();
    Ok(())
}

/// The runs of `schedule` still PENDING or RUNNING, with their idempotency keys.
async fn active_runs(
    service: &Schedules,
    schedule: &Schedule,
) -> Result<Vec<(String, Option<String>)>, ServiceError> {
    let mut active = Vec::new();
    for run in service.runs(&schedule.id, ACTIVE_RUNS_LOOKED_AT).await? {
        let Some(job_id) = run.job_id else { continue };
        if let Some(job) = service.inner.jobs.job(&job_id, &Scope::All).await?
            && !job.phase.is_terminal()
        {
            active.push((job.id.clone(), job.idempotency_key.clone()));
        }
    }
    Ok(active)
}

/// Why the owner's rights now keep `schedule` from firing, if they do: the owner is gone, may
/// no longer use the namespace, or (a JWT subject) its stored scope leaves the namespace out.
fn owner_refusal(standing: OwnerStanding, schedule: &Schedule) -> Option<String> {
    let ns = &schedule.namespace;
    match standing {
        OwnerStanding::Gone(why) => Some(format!("its owner can no longer submit jobs: {why}")),
        OwnerStanding::Scope(scope) if !scope.allows(ns) => {
            Some(format!("its owner may no longer use namespace {ns:?}"))
        }
        OwnerStanding::Unknown if !schedule.owner_scope.allows(ns) => {
            let shown = schedule
                .owner_scope
                .list()
                .map(|l| l.iter().map(String::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            Some(format!(
                "its owner's tokens allow only namespaces [{shown}], not {ns:?}: a JWT subject's schedules keep the narrowest scope its tokens have shown"
            ))
        }
        OwnerStanding::Scope(_) | OwnerStanding::Unknown => None,
    }
}

/// Starts the run of `tick` as the owner's rights and the concurrency policy allow.
async fn fire(
    service: &Schedules,
    schedule: &Schedule,
    tick: DateTime<Utc>,
    missed: usize,
) -> Result<(), ServiceError> {
    let inner = &service.inner;
    let ns = &schedule.namespace;
    if let Some(reason) = owner_refusal(inner.owners.standing(&schedule.owner), schedule) {
        return skip(
            service,
            schedule,
            tick,
            format!("tick not started: {reason}"),
            Some(&reason),
        )
        .await;
    }
    let key = tick_key(tick);
    let active = active_runs(service, schedule).await?;
    // The tick's own run, started before a crash: it is this tick's, whatever the policy.
    let own = active.iter().any(|(_, k)| k.as_deref() == Some(key.as_str()));
    if !own && !active.is_empty() {
        match schedule.concurrency_policy {
            ConcurrencyPolicy::Allow => {}
            ConcurrencyPolicy::Forbid => {
                let message = format!(
                    "tick not started: job {} is still active and concurrencyPolicy is FORBID{}",
                    active[0].0,
                    missed_text(missed)
                );
                return skip(service, schedule, tick, message, None).await;
            }
            ConcurrencyPolicy::Replace => {
                for (job_id, _) in &active {
                    match inner.jobs.cancel(job_id, &Scope::All).await {
                        // Finished meanwhile: nothing to replace.
                        Ok(_) | Err(ServiceError::FailedPrecondition(_) | ServiceError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    let scope = Scope::namespaces([ns.clone()]);
    match service.submit(schedule, key, &scope).await {
        Ok(submitted) => {
            let mut event = ScheduleEvent::of(schedule, ScheduleEventKind::Fired, Utc::now());
            event.tick = Some(tick);
            event.job_id = Some(submitted.job.id.clone());
            let mut message = missed_text(missed);
            if schedule.concurrency_policy == ConcurrencyPolicy::Replace && !own && !active.is_empty() {
                let ids: Vec<&str> = active.iter().map(|(id, _)| id.as_str()).collect();
                message = format!("; replaced {}{message}", ids.join(", "));
            }
            event.message = (!message.is_empty()).then(|| message.trim_start_matches("; ").to_owned());
            tracing::info!(schedule = %schedule.id, tick = %tick, job = %submitted.job.id, created = submitted.created, "schedules: tick fired");
            if !inner
                .store
                .schedule_ticked(&schedule.id, tick, true, None, Some(&event))
                .await?
            {
                // Another replica recorded the tick first: its event names the same job.
                inner.store.record_schedule_event(&event).await?;
            }
            service.appended();
            Ok(())
        }
        // The tick's key holds a job of an earlier definition (another replica fired it
        // before an update reached this one): the tick has its run.
        Err(ServiceError::IdempotencyConflict { .. }) => {
            inner
                .store
                .schedule_ticked(&schedule.id, tick, true, None, None)
                .await?;
            Ok(())
        }
        // Passing: the tick is retried.
        Err(e @ (ServiceError::ShuttingDown | ServiceError::Store(_))) => Err(e),
        // Refused as a submission (quota, template unavailable, invalid by now): recorded.
        Err(e) => skip(service, schedule, tick, format!("tick not started: {e}"), None).await,
    }
}
