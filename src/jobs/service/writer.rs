//! The writer: the one task that changes job state.
//!
//! It takes commands (submit, cancel, launch results, cancellations done) and the executors'
//! observations, applies a batch of them in one store transaction, then updates the cache and
//! publishes the recorded events in cursor order. Nobody is answered before their change is
//! committed. When the store cannot write it answers UNAVAILABLE, keeps observations for
//! later and probes the store until a write succeeds. The checks and acceptance of
//! submissions are in `admission`.
//!
//! It must not call the executor (the launcher and canceller do) nor wait on anything but the
//! store, so that one slow workload never holds up every job's writes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;

use super::{ServiceError, ServiceState, Submitted, WriterCommand};
use crate::executor::Observation;
use crate::model::{Job, JobEvent, JobPhase, Scope, Transition};
use crate::store::{StoreError, StoreTx};

mod admission;

use admission::SubmitContext;

/// How often the writer checks that the store can write (and, after a failure, probes it).
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub(super) struct Writer {
    pub(super) inner: Arc<ServiceState>,
    pub(super) max_batch: usize,
}

/// A change made in the current batch, to publish once it is committed.
struct Recorded {
    event: Arc<JobEvent>,
}

impl Recorded {
    /// The event recorded for `transition` at `at` as `seq`, `job` being as it was right
    /// after it.
    fn of(job: &Job, transition: &Transition, seq: i64, at: chrono::DateTime<Utc>) -> Self {
        Self {
            event: Arc::new(JobEvent {
                seq,
                job_id: job.id.clone(),
                phase: transition.phase,
                previous_phase: transition.previous_phase,
                at,
                reason: transition.reason.clone(),
                message: transition.message.clone(),
                job: Arc::new(job.clone()),
            }),
        }
    }
}

impl Writer {
    pub(super) async fn run(
        self,
        mut commands: mpsc::Receiver<WriterCommand>,
        mut observations: mpsc::Receiver<Observation>,
    ) {
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
                o = observations.recv() => o.map(WriterCommand::Observe),
                _ = self.inner.writer_stop.cancelled() => None,
                _ = health.tick() => {
                    if self.check_health().await && !deferred.is_empty() {
                        let retried = std::mem::take(&mut deferred).into_iter().map(WriterCommand::Observe).collect();
                        self.apply(retried, &mut deferred).await;
                    }
                    continue;
                }
            };
            batch.extend(
                std::mem::take(&mut deferred)
                    .into_iter()
                    .map(WriterCommand::Observe),
            );
            let Some(first) = first else {
                // Finish what was already queued before stopping.
                commands.close();
                observations.close();
                while let Ok(c) = commands.try_recv() {
                    batch.push(c);
                }
                while let Ok(o) = observations.try_recv() {
                    batch.push(WriterCommand::Observe(o));
                }
                if !batch.is_empty() {
                    self.apply(std::mem::take(&mut batch), &mut deferred).await;
                }
                for o in &deferred {
                    tracing::error!(job = %o.job_id, "observation not recorded: the store could not write before jobgate stopped; the executor reconciles the job at the next start");
                }
                return;
            };
            // A bulk submission weighs as many commands as it holds jobs, so a batch stays
            // within `max_batch` jobs plus at most one bulk's.
            let mut weight = first.weight();
            batch.push(first);
            while weight < self.max_batch {
                match commands.try_recv() {
                    Ok(c) => {
                        weight += c.weight();
                        batch.push(c);
                    }
                    Err(_) => break,
                }
            }
            while weight < self.max_batch {
                match observations.try_recv() {
                    Ok(o) => {
                        weight += 1;
                        batch.push(WriterCommand::Observe(o));
                    }
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
        self.inner
            .metrics
            .store_unreadable_rows
            .set(store.unreadable().count() as i64);
        let problem = match store.check_storage() {
            Err(e) => Some(e.to_string()),
            Ok(()) if self.inner.store_problem().is_none() => None,
            Ok(()) => store.probe_write().await.err().map(|e| e.to_string()),
        };
        self.set_health(problem)
    }

    /// Records whether the store can write, logging each change once; returns whether it can.
    fn set_health(&self, problem: Option<String>) -> bool {
        let writable = problem.is_none();
        if self.inner.set_store_problem(problem.clone()) {
            self.inner.metrics.store_writable.set(i64::from(writable));
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
    async fn apply(&self, batch: Vec<WriterCommand>, deferred: &mut Vec<Observation>) {
        let store = &self.inner.store;
        let mut failure = None;
        for attempt in 1..=2 {
            let started = std::time::Instant::now();
            // Never write into a database file that is gone or cut short: the commit would
            // succeed, and be lost.
            let applied = match store.check_storage() {
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
                WriterCommand::Submit { reply, .. } => {
                    let _ = reply.send(Err(ServiceError::Store(StoreError::Write(why.clone()))));
                }
                WriterCommand::Cancel { reply, .. } => {
                    let _ = reply.send(Err(ServiceError::Store(StoreError::Write(why.clone()))));
                }
                WriterCommand::SubmitMany { reply, .. } => {
                    let _ = reply.send(Err(ServiceError::Store(StoreError::Write(why.clone()))));
                }
                WriterCommand::Observe(mut o) => {
                    if let Some(at) = deferred.iter().position(|d| d.job_id == o.job_id) {
                        let earlier = deferred.remove(at);
                        // Newer attempts alone keep the earlier status they go with.
                        if o.attempts_only && !earlier.attempts_only {
                            let attempts = std::mem::take(&mut o.status.attempts);
                            o = earlier;
                            o.status.attempts = attempts;
                        }
                    }
                    deferred.push(o);
                }
                WriterCommand::Launched { reply, .. }
                | WriterCommand::CancellationsDone { reply, .. }
                | WriterCommand::QueueReasons { reply, .. } => {
                    let _ = reply.send(false);
                }
            }
        }
    }

    async fn current(
        &self,
        tx: &mut dyn StoreTx,
        touched: &HashMap<String, Job>,
        id: &str,
    ) -> Result<Option<Job>, StoreError> {
        if let Some(job) = touched.get(id) {
            return Ok(Some(job.clone()));
        }
        // Another replica may have changed the job since the cache learnt of it.
        if !self.inner.shared
            && let Some(job) = self.inner.active.get(id)
        {
            return Ok(Some((**job).clone()));
        }
        tx.get_job(id).await
    }

    /// [`Self::current`] for a caller's command: a job whose stored row cannot be read is
    /// that command's answer (`Err`), not a failure of the whole batch. Its namespace cannot
    /// be read either, so only a caller who sees every namespace learns that it exists.
    async fn current_for_caller(
        &self,
        tx: &mut dyn StoreTx,
        touched: &HashMap<String, Job>,
        id: &str,
        scope: &Scope,
    ) -> Result<Result<Option<Job>, ServiceError>, StoreError> {
        match self.current(tx, touched, id).await {
            Err(StoreError::Unreadable { key, reason, .. }) if scope.list().is_none() => {
                Ok(Err(ServiceError::Unreadable { id: key, reason }))
            }
            Err(StoreError::Unreadable { .. }) => Ok(Ok(None)),
            other => other.map(Ok),
        }
    }

    /// [`Self::current`] for the executor's reports and dependents: a job whose stored row
    /// cannot be read (the store has reported it) is passed over, and the batch goes on.
    async fn current_readable(
        &self,
        tx: &mut dyn StoreTx,
        touched: &HashMap<String, Job>,
        id: &str,
    ) -> Result<Option<Job>, StoreError> {
        match self.current(tx, touched, id).await {
            Err(StoreError::Unreadable { .. }) => Ok(None),
            other => other,
        }
    }

    async fn record(
        tx: &mut dyn StoreTx,
        job: &mut Job,
        transition: &Transition,
        recorded: &mut Vec<Recorded>,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let seq = tx.append_event(job, transition, now).await?;
        job.last_event_seq = seq;
        tx.save_job(job).await?;
        recorded.push(Recorded::of(job, transition, seq, now));
        Ok(())
    }

    /// A just-accepted job with dependencies: fails at once if one has already failed or been
    /// cancelled, waits (out of the launch outbox) if some have not finished, and otherwise
    /// launches as any job.
    async fn await_dependencies(
        tx: &mut dyn StoreTx,
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
            // The edges are recorded above.
            tx.hold(&job.id, &[]).await?;
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
        tx: &mut dyn StoreTx,
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
                let Some(mut dependent) = self.current_readable(tx, touched, &id).await? else {
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
                    let phase = self
                        .current_readable(tx, touched, &dependency)
                        .await?
                        .map(|j| j.phase);
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
    async fn try_apply(&self, batch: &[WriterCommand]) -> Result<Outcome, StoreError> {
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
                WriterCommand::Submit {
                    job,
                    fingerprint,
                    scope,
                    ..
                } => {
                    let answer = self
                        .submit_in(
                            &mut *tx,
                            &mut touched,
                            &mut keys,
                            &mut recorded,
                            &mut SubmitContext::default(),
                            job,
                            fingerprint,
                            scope,
                        )
                        .await?;
                    launch |= matches!(answer, Answer::Created(_));
                    answers.push(answer);
                }
                WriterCommand::SubmitMany { jobs, scope, .. } => {
                    let each = self
                        .submit_many_in(&mut *tx, &mut touched, &mut keys, &mut recorded, jobs, scope)
                        .await?;
                    launch |= each.iter().any(|a| matches!(a, Answer::Created(_)));
                    answers.push(Answer::Many(each));
                }
                WriterCommand::Cancel { id, scope, .. } => {
                    let found = match self.current_for_caller(&mut *tx, &touched, id, scope).await? {
                        Ok(found) => found,
                        Err(unreadable) => {
                            answers.push(Answer::Error(unreadable));
                            continue;
                        }
                    };
                    let Some(mut job) = found.filter(|j| scope.sees(j)) else {
                        answers.push(Answer::Error(ServiceError::NotFound { id: id.clone() }));
                        continue;
                    };
                    let now = Utc::now();
                    match job.cancel(now) {
                        Some(transition) => {
                            Self::record(&mut *tx, &mut job, &transition, &mut recorded).await?;
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
                WriterCommand::Observe(observation) => {
                    answers.push(Answer::None);
                    let Some(mut job) = self
                        .current_readable(&mut *tx, &touched, &observation.job_id)
                        .await?
                    else {
                        tracing::warn!(job = %observation.job_id, "observation for an unknown or unreadable job ignored");
                        continue;
                    };
                    let mut status = observation.status.clone();
                    // Each attempt that ended is an event of its own, before the job's.
                    let (ended, attempts_changed) = job.record_attempts(std::mem::take(&mut status.attempts));
                    for transition in &ended {
                        Self::record(&mut *tx, &mut job, transition, &mut recorded).await?;
                    }
                    if observation.attempts_only {
                        // The workload's status is the one last recorded: only attempts moved.
                        if attempts_changed {
                            tx.save_job(&job).await?;
                        }
                        if attempts_changed || !ended.is_empty() {
                            touched.insert(job.id.clone(), job);
                        }
                        continue;
                    }
                    if let Some(transition) = job.observe(status.clone(), Utc::now()) {
                        Self::record(&mut *tx, &mut job, &transition, &mut recorded).await?;
                        touched.insert(job.id.clone(), job);
                    } else if !job.phase.is_terminal() && (job.workload != status || attempts_changed) {
                        // Nothing a client sees changed, but the executor's private state
                        // (e.g. process groups) and the attempts must survive a restart.
                        job.workload = status;
                        tx.save_job(&job).await?;
                        touched.insert(job.id.clone(), job);
                    } else if !ended.is_empty() {
                        touched.insert(job.id.clone(), job);
                    }
                }
                WriterCommand::QueueReasons { changes, .. } => {
                    answers.push(Answer::None);
                    let now = Utc::now();
                    for (id, wait) in changes {
                        // Admitted meanwhile: it no longer waits.
                        let waiting = self.inner.queue.as_ref().is_some_and(|q| q.is_waiting(id));
                        if waiting
                            && let Some(mut job) = self.current_readable(&mut *tx, &touched, id).await?
                            && let Some(transition) = job.queue_wait(wait.reason, &wait.message, now)
                        {
                            Self::record(&mut *tx, &mut job, &transition, &mut recorded).await?;
                            touched.insert(job.id.clone(), job);
                        }
                    }
                }
                WriterCommand::CancellationsDone { ids, .. } => {
                    answers.push(Answer::None);
                    for id in ids {
                        tx.cancellation_done(id).await?;
                    }
                }
                WriterCommand::Launched { outcome, .. } => {
                    answers.push(Answer::None);
                    let now = Utc::now();
                    for id in &outcome.launched {
                        tx.mark_launched(id).await?;
                        if let Some(mut job) = self.current_readable(&mut *tx, &touched, id).await? {
                            // Out of the local queue: its reason there no longer holds. Its
                            // launch is kept with the job, without an event of its own: where
                            // its queued time ends (`Job::timeline`).
                            let admitted = job.admitted_from_queue(now);
                            let launched = job.record_launch(now);
                            if let Some(transition) = job.launch_succeeded(now) {
                                Self::record(&mut *tx, &mut job, &transition, &mut recorded).await?;
                            } else if admitted || launched {
                                tx.save_job(&job).await?;
                            }
                            touched.insert(job.id.clone(), job);
                        }
                    }
                    for (id, reason, message) in &outcome.rejected {
                        tx.mark_launched(id).await?;
                        if let Some(mut job) = self.current_readable(&mut *tx, &touched, id).await?
                            && let Some(transition) = job.launch_failed(reason, message, now)
                        {
                            Self::record(&mut *tx, &mut job, &transition, &mut recorded).await?;
                            touched.insert(job.id.clone(), job);
                        }
                    }
                    for (id, reason, message) in &outcome.delayed {
                        if let Some(mut job) = self.current_readable(&mut *tx, &touched, id).await?
                            && let Some(transition) = job.launch_delayed(reason, message, now)
                        {
                            Self::record(&mut *tx, &mut job, &transition, &mut recorded).await?;
                            touched.insert(job.id.clone(), job);
                        }
                    }
                    // A server error is retried until the same reason has lasted the limit
                    // (since the condition recording it, which survives restarts): then the
                    // job fails with the last message rather than waiting forever.
                    let limit = self.inner.launch_retry_limit;
                    for (id, reason, message) in &outcome.server_errors {
                        let Some(mut job) = self.current_readable(&mut *tx, &touched, id).await? else {
                            continue;
                        };
                        let expired = job
                            .launch_delayed_since(reason)
                            .is_some_and(|since| (now - since).to_std().unwrap_or_default() >= limit);
                        let transition = if expired {
                            tx.mark_launched(id).await?;
                            let message =
                                format!("{message}; gave up after retrying for {}s", limit.as_secs());
                            job.launch_failed(reason, &message, now)
                        } else {
                            job.launch_delayed(reason, message, now)
                        };
                        if let Some(transition) = transition {
                            Self::record(&mut *tx, &mut job, &transition, &mut recorded).await?;
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
            .settle_dependents(&mut *tx, &mut touched, &mut recorded)
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

    fn publish(&self, batch: Vec<WriterCommand>, outcome: Outcome) {
        let Outcome {
            touched,
            recorded,
            answers,
            launch,
            cancelled,
        } = outcome;
        let inner = &self.inner;
        // Shared with other replicas: the follower publishes what was committed, theirs and
        // ours, in cursor order.
        let touched = if inner.shared {
            inner.committed.notify_one();
            HashMap::new()
        } else {
            touched
        };
        // Cache first, then events: a reader that sees an event finds the cache as new.
        for (id, job) in &touched {
            if job.phase.is_terminal() {
                inner.active.remove(id);
            } else {
                inner.active.insert(id.clone(), Arc::new(job.clone()));
            }
        }
        // The local queue follows what was committed: new waiting jobs, slots freed.
        let mut launch = launch;
        if let Some(queue) = &inner.queue {
            launch |= queue.observe(touched.values());
        }
        for r in recorded {
            let event = &r.event;
            if event.previous_phase != Some(event.phase) {
                inner
                    .metrics
                    .transition(event.previous_phase.map(|p| p.as_str()), event.phase.as_str());
            }
            if !inner.shared {
                inner.bus.publish(r.event);
            }
        }
        for (command, answer) in batch.into_iter().zip(answers) {
            match (command, answer) {
                (WriterCommand::Submit { reply, .. }, Answer::Created(job)) => {
                    let _ = reply.send(Ok(Submitted { job, created: true }));
                }
                (WriterCommand::Submit { reply, .. }, Answer::Existing(job)) => {
                    let _ = reply.send(Ok(Submitted { job, created: false }));
                }
                (WriterCommand::Submit { reply, .. }, Answer::Error(e)) => {
                    let _ = reply.send(Err(e));
                }
                (WriterCommand::SubmitMany { reply, .. }, Answer::Many(each)) => {
                    let _ = reply.send(Ok(each
                        .into_iter()
                        .map(|answer| match answer {
                            Answer::Created(job) => Ok(Submitted { job, created: true }),
                            Answer::Existing(job) => Ok(Submitted { job, created: false }),
                            Answer::Error(e) => Err(e),
                            Answer::None | Answer::Many(_) => Err(ServiceError::ShuttingDown),
                        })
                        .collect()));
                }
                (WriterCommand::Cancel { reply, .. }, Answer::Created(job) | Answer::Existing(job)) => {
                    let _ = reply.send(Ok(job));
                }
                (WriterCommand::Cancel { reply, .. }, Answer::Error(e)) => {
                    let _ = reply.send(Err(e));
                }
                (
                    WriterCommand::Launched { reply, .. }
                    | WriterCommand::CancellationsDone { reply, .. }
                    | WriterCommand::QueueReasons { reply, .. },
                    _,
                ) => {
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
    /// A bulk submission's answers, one per job.
    Many(Vec<Answer>),
}

impl WriterCommand {
    /// How many commands this one counts for in a batch: a bulk submission, its jobs.
    fn weight(&self) -> usize {
        match self {
            WriterCommand::SubmitMany { jobs, .. } => jobs.len().max(1),
            _ => 1,
        }
    }
}

struct Outcome {
    touched: HashMap<String, Job>,
    recorded: Vec<Recorded>,
    answers: Vec<Answer>,
    launch: bool,
    /// Whether the batch cancelled a job (the canceller has work).
    cancelled: bool,
}
