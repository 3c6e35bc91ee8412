//! The launcher and the canceller: the background tasks that talk to the executor.
//!
//! The launcher hands accepted jobs to the executor after `submitJob` has answered (the
//! store's `launched` flag is the outbox) and sends what became of each launch to the writer.
//! The canceller stops the workloads of cancelled jobs (the store's pending cancellations are
//! its outbox, so a restart in between does not let a cancelled workload run on). Neither
//! changes job state itself: both report to the writer.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};

use super::{ServiceState, WriterCommand};
use crate::executor::ExecutorError;
use crate::model::JobPhase;

/// How many jobs the launcher reads from the outbox at a time.
const LAUNCH_BATCH: i64 = 64;

/// How often the launcher reads a shared outbox without a wake-up: jobs claimed by a replica
/// that died become free when their claim expires, which nothing announces.
const SHARED_OUTBOX_POLL: Duration = Duration::from_secs(5);

/// How many launches run at once (each is one API request on Kubernetes).
const LAUNCH_CONCURRENCY: usize = 16;

/// Retry delays while workloads cannot be created: exponential, capped, with jitter, so that
/// many jobgates waiting for the same API server do not knock in step.
pub(super) fn launch_backoff() -> impl Iterator<Item = Duration> {
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
pub(super) struct LaunchOutcome {
    /// Handed to the executor: marked launched.
    pub(super) launched: Vec<String>,
    /// Not created for now; (id, reason, message). Stay in the outbox.
    pub(super) delayed: Vec<(String, &'static str, String)>,
    /// Refused with a server error; (id, reason, message). Stay in the outbox until the same
    /// reason has lasted the retry limit, then fail.
    pub(super) server_errors: Vec<(String, &'static str, String)>,
    /// Never creatable; (id, reason, message). Failed and marked launched.
    pub(super) rejected: Vec<(String, &'static str, String)>,
}

/// Hands accepted jobs to the executor, oldest first, and records what became of them.
pub(super) async fn launcher(inner: Arc<ServiceState>) {
    let mut backoff = launch_backoff();
    loop {
        // With replicas, only the jobs of this one's shards (none: nothing to read).
        let shards = inner.shards.as_ref().map(|s| *s.borrow());
        let batch = match (&inner.queue, shards.filter(|s| s.is_empty())) {
            // The local queue says which jobs may start; the cache holds every unfinished one.
            (Some(queue), _) => Ok(queue
                .admit(LAUNCH_BATCH as usize)
                .into_iter()
                .filter_map(|id| match inner.active.get(&id) {
                    Some(job) => Some((**job).clone()),
                    None => {
                        queue.forget(&id);
                        None
                    }
                })
                .collect()),
            (None, Some(_)) => Ok(Vec::new()),
            (None, None) => inner.store.unlaunched_jobs(LAUNCH_BATCH, shards).await,
        };
        let batch = match batch {
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
                    let job = match inner.active.get(&stored.id).map(|j| j.clone()) {
                        Some(job) => Some(job),
                        // Not cached: finished, or submitted an instant ago (the writer
                        // commits, then publishes to the cache; the outbox read may come in
                        // between). Only the store can tell which; taking the absence for
                        // "finished" marked a new job launched without creating its
                        // workload, and it stayed PENDING for good.
                        None => match inner.store.get_job(&stored.id).await {
                            Ok(job) => job.map(Arc::new),
                            // Launched from the outbox's copy: a cancel that came meanwhile
                            // is caught below, and launching is idempotent.
                            Err(e) => {
                                tracing::warn!(job = %stored.id, error = %e, "launcher cannot re-read a job missing from the cache; launching it as the outbox read it");
                                Some(Arc::new(stored.clone()))
                            }
                        },
                    };
                    let result = match job.filter(|j| !j.phase.is_terminal()) {
                        Some(job) => inner.executor.launch(job).await,
                        None => Ok(()),
                    };
                    // With replicas, the cache may not know yet of a cancel another one
                    // committed: ask the store.
                    if result.is_ok() && (inner.shared || !inner.active.contains_key(&stored.id)) {
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
                // Its shard moved to another replica meanwhile: that one launches it.
                Err(ExecutorError::NotThisReplica) => {}
                Err(ExecutorError::Rejected { reason, message }) => {
                    tracing::warn!(job = %id, reason, %message, "workload rejected; the job fails");
                    outcome.rejected.push((id, reason, message));
                }
                Err(ExecutorError::Unavailable { reason, message }) => {
                    tracing::warn!(job = %id, reason, %message, "workload not created yet; will retry");
                    inner.metrics.launch_retries.inc();
                    outcome.delayed.push((id, reason, message));
                }
                Err(ExecutorError::ServerError { reason, message }) => {
                    tracing::warn!(job = %id, reason, %message, "workload not created: server error; will retry within the retry limit");
                    inner.metrics.launch_retries.inc();
                    outcome.server_errors.push((id, reason, message));
                }
                Err(e) => {
                    tracing::warn!(job = %id, error = %e, "launch failed; will retry");
                    inner.metrics.launch_retries.inc();
                    outcome.delayed.push((id, "LaunchFailed", e.to_string()));
                }
            }
        }
        let mut retry = !outcome.delayed.is_empty() || !outcome.server_errors.is_empty();
        let delay = if retry {
            backoff.next().unwrap_or(Duration::from_secs(30))
        } else {
            Duration::ZERO
        };
        if let Some(queue) = &inner.queue {
            for id in &outcome.launched {
                queue.launched(id);
            }
            let next = chrono::Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            for (id, _, _) in outcome.delayed.iter().chain(&outcome.server_errors) {
                queue.backing_off(id, next);
            }
            // A rejected job fails: the writer's commit frees its slot.
        }
        if !outcome.launched.is_empty() || !outcome.rejected.is_empty() || retry {
            // Wait for the marks to be committed, so the next read of the outbox cannot
            // hand the same job over twice.
            let (reply, committed) = oneshot::channel();
            if inner
                .commands
                .send(WriterCommand::Launched { outcome, reply })
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
        let delay = if retry && delay > Duration::ZERO {
            delay
        } else {
            backoff.next().unwrap_or(Duration::from_secs(30))
        };
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            _ = inner.launch_wanted.notified(), if !retry => {}
            _ = tokio::time::sleep(delay), if retry => {}
            // With replicas, a claim of one that died expires without a wake-up.
            _ = tokio::time::sleep(SHARED_OUTBOX_POLL), if inner.shared && !retry => {}
        }
    }
}

/// How many pending cancellations the canceller reads at a time.
const CANCEL_BATCH: i64 = 64;

/// Stops the workloads of cancelled jobs, from the store's `pending_cancellations`, and
/// records each one stopped. A cancellation stays pending across restarts until its workload
/// is stopped: the executor retries while its cluster is away; a cancel that fails otherwise
/// is asked again after a back-off.
pub(super) async fn canceller(inner: Arc<ServiceState>) {
    // Jobs whose cancel is running now, so that a wake-up does not start a second one.
    let mut in_flight: std::collections::HashSet<String> = std::collections::HashSet::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, bool)>();
    let mut backoff = launch_backoff();
    let mut retry = false;
    loop {
        let shards = inner.shards.as_ref().map(|s| *s.borrow());
        let pending = match shards.filter(|s| s.is_empty()) {
            Some(_) => Ok(Vec::new()),
            None => inner.store.pending_cancellations(CANCEL_BATCH, shards).await,
        };
        match pending {
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
                                // Another replica's now: it stops the workload.
                                Err(ExecutorError::NotThisReplica) => false,
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
                        .send(WriterCommand::CancellationsDone { ids: stopped, reply })
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
