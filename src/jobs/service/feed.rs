//! The read side of [`JobService`]: jobs, pages, statistics and history from the cache and
//! the store, and the event feeds that subscriptions read (`events`, `watch_job`, logs).
//!
//! It changes nothing: every change goes through the writer (see `writer`). Each method
//! takes the caller's `Scope`, and a job outside it answers as if it did not exist.

use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};

use super::{ActivityBucket, JobService, ServiceError, Stats};
use crate::executor::{LogLine, RunInfo};
use crate::jobs::catalog::Template;
use crate::model::{Job, JobEvent, JobFilter, JobPhase, Scope};
use crate::store::JobPage;

impl JobService {
    /// The job, if it exists and `scope` may see it: another tenant's job answers `None`,
    /// exactly as a job that never existed.
    pub async fn job(&self, id: &str, scope: &Scope) -> Result<Option<Arc<Job>>, ServiceError> {
        let job = match self.inner.active.get(id) {
            Some(job) => Some(job.clone()),
            None => {
                let started = std::time::Instant::now();
                let job = self.inner.store.get_job(id).await?.map(Arc::new);
                self.inner.metrics.store_op("read", started.elapsed());
                job
            }
        };
        Ok(job.filter(|j| scope.sees(j)))
    }

    pub async fn jobs(
        &self,
        filter: &JobFilter,
        first: i64,
        after: Option<i64>,
    ) -> Result<JobPage, ServiceError> {
        let started = std::time::Instant::now();
        let page = self.inner.store.list_jobs(filter, first, after).await?;
        self.inner.metrics.store_op("list", started.elapsed());
        Ok(page)
    }

    /// The job's runs as its executor sees them now (its pods, on Kubernetes).
    pub fn runs(&self, id: &str) -> Vec<RunInfo> {
        self.inner.executor.runs(id)
    }

    /// The templates jobs may name, with whether each can run now.
    pub fn templates(&self) -> Vec<Template> {
        let mut templates = self.inner.templates.clone();
        for t in &mut templates {
            match self.inner.executor.template_available(&t.name) {
                Ok(()) => t.available = true,
                Err(why) => {
                    t.available = false;
                    t.unavailable_reason = Some(why);
                }
            }
        }
        templates
    }

    /// Namespaces a job may be submitted to when the server limits them; otherwise those in
    /// use (at most `limit`) with the default one, sorted.
    pub async fn namespaces(&self, limit: i64, scope: &Scope) -> Result<Vec<String>, ServiceError> {
        let limits = &self.inner.limits;
        if !limits.allowed_namespaces.is_empty() {
            let mut allowed = limits.allowed_namespaces.clone();
            allowed.retain(|ns| scope.allows(ns));
            allowed.sort();
            return Ok(allowed);
        }
        if let Some(namespaces) = scope.list() {
            return Ok(namespaces.iter().cloned().collect());
        }
        let mut used = self.inner.store.namespaces(limit, scope).await?;
        if !used.contains(&limits.default_namespace) {
            used.push(limits.default_namespace.clone());
            used.sort();
        }
        Ok(used)
    }

    /// Counts by phase, submissions and completions per bucket of `bucket_seconds` over the
    /// last `buckets` buckets (the last is the current one, buckets aligned to the Unix
    /// epoch), and the cursor of the newest event included: one consistent snapshot.
    pub async fn stats(
        &self,
        buckets: i64,
        bucket_seconds: i64,
        scope: &Scope,
    ) -> Result<Stats, ServiceError> {
        let snapshot = self.inner.store.stats(buckets, bucket_seconds, scope).await?;
        let first = snapshot.since;
        let mut activity: Vec<ActivityBucket> = (0..buckets)
            .map(|i| ActivityBucket {
                start: first + i * bucket_seconds,
                ..ActivityBucket::default()
            })
            .collect();
        for (bucket, count) in snapshot.submitted {
            if let Some(b) = usize::try_from(bucket).ok().and_then(|i| activity.get_mut(i)) {
                b.submitted += count;
            }
        }
        for (bucket, phase, count) in snapshot.finished {
            if let Some(b) = usize::try_from(bucket).ok().and_then(|i| activity.get_mut(i)) {
                match phase {
                    JobPhase::Succeeded => b.succeeded += count,
                    JobPhase::Failed => b.failed += count,
                    JobPhase::Cancelled => b.cancelled += count,
                    JobPhase::Pending | JobPhase::Running => {}
                }
            }
        }
        Ok(Stats {
            cursor: snapshot.cursor,
            counts: snapshot.counts,
            activity,
        })
    }

    /// The job's newest `last` status events, oldest first: its recorded history.
    pub async fn history(&self, id: &str, last: usize) -> Result<Vec<JobEvent>, ServiceError> {
        Ok(self.inner.store.job_history(id, last as i64).await?)
    }

    pub async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ServiceError> {
        self.inner.executor.logs(job, tail_lines).await.map_err(|e| {
            tracing::error!(job = %job.id, error = %e, "reading logs failed");
            ServiceError::FailedPrecondition("logs are not available right now".into())
        })
    }

    /// The job's output: the last `tail_lines` lines, then with `follow` every new line until
    /// the job has finished. `None` for an unknown job.
    pub async fn log_stream(
        &self,
        id: &str,
        scope: &Scope,
        tail_lines: usize,
        follow: bool,
    ) -> Result<Option<impl Stream<Item = Result<LogLine, ServiceError>> + Send + 'static>, ServiceError>
    {
        let Some((job, events)) = self.watch_job(id, scope).await? else {
            return Ok(None);
        };
        let until = (follow && !job.phase.is_terminal()).then(|| {
            async move {
                let mut events = std::pin::pin!(events);
                // Ends at the terminal event, or when the service stops.
                while let Some(Ok(event)) = events.next().await {
                    if event.phase.is_terminal() {
                        break;
                    }
                }
            }
            .boxed()
        });
        let id = job.id.clone();
        let lines = self
            .inner
            .executor
            .log_stream(job, tail_lines, until)
            .map(move |r| {
                r.map_err(|e| {
                    tracing::warn!(job = %id, error = %e, "streaming logs failed");
                    ServiceError::FailedPrecondition("logs are not available right now".into())
                })
            });
        Ok(Some(lines))
    }

    /// Every event after `after` (the present when `None`), then live ones.
    pub fn events(
        &self,
        after: Option<i64>,
        job_id: Option<String>,
    ) -> impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static {
        self.inner
            .bus
            .events(after, job_id)
            .map(|r| r.map_err(ServiceError::from))
    }

    /// The job as it is now and a stream of its later events, taken so that no event
    /// falls between the two. `None` for an unknown job.
    pub async fn watch_job(
        &self,
        id: &str,
        scope: &Scope,
    ) -> Result<
        Option<(
            Arc<Job>,
            impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static,
        )>,
        ServiceError,
    > {
        let subscription = self.inner.bus.subscribe();
        let Some(job) = self.job(id, scope).await? else {
            return Ok(None);
        };
        let events = self
            .inner
            .bus
            .events_from(subscription, job.last_event_seq, Some(id.to_owned()))
            .map(|r| r.map_err(ServiceError::from));
        Ok(Some((job, events)))
    }
}
