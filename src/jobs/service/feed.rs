//! The read side of [`JobService`]: jobs, pages, statistics and history from the cache and
//! the store, and the event feeds that subscriptions read (`events`, `watch_job`, logs).
//!
//! It changes nothing: every change goes through the writer (see `writer`). Tenancy is
//! enforced here, not by callers: every method that reads jobs, events, runs or logs takes
//! the caller's `Scope` (there is no default one), the store filters by it in SQL, the bus
//! drops live events outside it, and a job outside it answers exactly as one that does not
//! exist. Callers (GraphQL resolvers, any other transport) only translate.
//!
//! What each subscriber gets first (the current state of `job_status`) is built here too,
//! so every transport sends the same.

use std::sync::Arc;

use chrono::Utc;
use futures::{Stream, StreamExt, stream};

use super::{ActivityBucket, JobService, ServiceError, Stats, UnreadableRecord};
use crate::executor::{LogLine, RunInfo};
use crate::jobs::catalog::Template;
use crate::model::LogArchive;
use crate::model::{Job, JobEvent, JobFilter, JobPhase, Scope, ValidationError};
use crate::store::{JobPage, StoreError};

impl JobService {
    /// The job, if it exists and `scope` may see it: another tenant's job answers `None`,
    /// exactly as a job that never existed.
    pub async fn job(&self, id: &str, scope: &Scope) -> Result<Option<Arc<Job>>, ServiceError> {
        let job = match self.inner.active.get(id) {
            Some(job) => Some(job.clone()),
            None => {
                let started = std::time::Instant::now();
                let read = self.inner.store.get_job(id).await;
                self.inner.metrics.store_op("read", started.elapsed());
                match read {
                    Ok(job) => job.map(Arc::new),
                    // Its namespace cannot be read either: only a caller who sees every
                    // namespace learns that it exists.
                    Err(StoreError::Unreadable { .. }) if scope.list().is_some() => None,
                    Err(StoreError::Unreadable { key, reason, .. }) => {
                        return Err(ServiceError::Unreadable { id: key, reason });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(job.filter(|j| scope.sees(j)))
    }

    /// The stored rows this process found it cannot decode (left out of every answer while
    /// everything else is served), oldest report first; for callers who see every namespace
    /// only, since a row that cannot be read cannot be placed in one.
    pub fn unreadable_records(&self, scope: &Scope) -> Result<Vec<UnreadableRecord>, ServiceError> {
        if scope.list().is_some() {
            return Err(ServiceError::Forbidden(
                "only a caller who may read every namespace (an administrator) may list unreadable rows"
                    .into(),
            ));
        }
        Ok(self
            .inner
            .store
            .unreadable()
            .list()
            .into_iter()
            .map(|row| UnreadableRecord {
                kind: row.kind.as_str(),
                key: row.key,
                job_id: row.job_id,
                error: row.error,
                first_seen: row.first_seen,
            })
            .collect())
    }

    /// A page of the jobs in `scope` that match `filter`, newest first; its `total_count`
    /// counts only those. It looks at no more than the configured budget of candidates
    /// ([`ServiceConfig::page_scan_budget`](super::ServiceConfig::page_scan_budget)), so it may
    /// hold fewer than `first` jobs and still have a next page.
    pub async fn jobs(
        &self,
        filter: &JobFilter,
        scope: &Scope,
        first: i64,
        after: Option<i64>,
    ) -> Result<JobPage, ServiceError> {
        let started = std::time::Instant::now();
        let page = self
            .inner
            .store
            .list_jobs(filter, scope, first, after, self.inner.page_scan_budget)
            .await?;
        self.inner.metrics.store_op("list", started.elapsed());
        Ok(page)
    }

    /// The job's runs as its executor sees them now (its pods, on Kubernetes); none for a job
    /// `scope` may not see.
    pub async fn runs(&self, id: &str, scope: &Scope) -> Result<Vec<RunInfo>, ServiceError> {
        let runs = self.inner.executor.runs(id);
        // Most jobs have no runs to hide (finished ones, local ones): only read the job when
        // there is something to show. A finished job shows none, even where its pods are
        // still known (a replica that did not follow it keeps them until they are deleted).
        if runs.is_empty() {
            return Ok(runs);
        }
        match self.job(id, scope).await? {
            Some(job) if !job.phase.is_terminal() => Ok(runs),
            _ => Ok(Vec::new()),
        }
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

    /// The job's newest `last` status events, oldest first: its recorded history. None for a
    /// job `scope` may not see, as for one that does not exist.
    pub async fn history(&self, id: &str, scope: &Scope, last: usize) -> Result<Vec<JobEvent>, ServiceError> {
        Ok(self.inner.store.job_history(id, scope, last as i64).await?)
    }

    /// The last `tail_lines` lines of the job's output (at most `MAX_TAIL_BYTES` of them,
    /// the newest kept); `NotFound` for a job `scope` may not see, as for one that does not
    /// exist. From the archive; a job with none (run before jobgate archived output, or
    /// whose first lines are not written yet) is read from its executor.
    pub async fn logs(
        &self,
        id: &str,
        scope: &Scope,
        tail_lines: usize,
    ) -> Result<Vec<String>, ServiceError> {
        let Some(job) = self.job(id, scope).await? else {
            return Err(ServiceError::NotFound { id: id.to_owned() });
        };
        if let Some(archive) = self.inner.store.log_archive(id).await? {
            let mut next = (archive.lines - tail_lines as i64).max(0);
            let mut lines: std::collections::VecDeque<String> = Default::default();
            let mut bytes = 0;
            loop {
                let page = self
                    .inner
                    .store
                    .log_lines(id, next, MAX_LOG_PAGE_LINES, MAX_LOG_PAGE_BYTES)
                    .await?;
                let Some((last, _)) = page.last() else { break };
                next = last + 1;
                for (_, line) in page {
                    bytes += line.text.len() + 1;
                    lines.push_back(line.text);
                }
                while bytes > MAX_TAIL_BYTES {
                    let Some(first) = lines.pop_front() else { break };
                    bytes -= first.len() + 1;
                }
            }
            return Ok(lines.into());
        }
        self.inner.executor.logs(&job, tail_lines).await.map_err(|e| {
            tracing::error!(job = %job.id, error = %e, "reading logs failed");
            ServiceError::FailedPrecondition("logs are not available right now".into())
        })
    }

    /// What the archive holds of the job's output (`None`: nothing archived); `NotFound` for
    /// a job `scope` may not see, as for one that does not exist.
    pub async fn log_archive(&self, id: &str, scope: &Scope) -> Result<Option<LogArchive>, ServiceError> {
        if self.job(id, scope).await?.is_none() {
            return Err(ServiceError::NotFound { id: id.to_owned() });
        }
        Ok(self.inner.store.log_archive(id).await?)
    }

    /// Up to `first` archived lines of the job after the cursor `after` (from the first line
    /// when `None`), and no more than `MAX_LOG_PAGE_BYTES` of them (one line at least);
    /// `NotFound` for a job `scope` may not see, as for one that does not exist.
    pub async fn log_page(
        &self,
        id: &str,
        scope: &Scope,
        first: usize,
        after: Option<i64>,
    ) -> Result<LogPage, ServiceError> {
        if self.job(id, scope).await?.is_none() {
            return Err(ServiceError::NotFound { id: id.to_owned() });
        }
        let archive = self.inner.store.log_archive(id).await?;
        let from = after.map_or(0, |a| a.saturating_add(1)).max(0);
        let lines = match &archive {
            Some(a) if from < a.lines && first > 0 => {
                self.inner
                    .store
                    .log_lines(id, from, first.min(MAX_LOG_PAGE_LINES), MAX_LOG_PAGE_BYTES)
                    .await?
            }
            _ => Vec::new(),
        };
        let end = lines.last().map_or(from, |(at, _)| at + 1);
        Ok(LogPage {
            has_next_page: archive.as_ref().is_some_and(|a| end < a.lines),
            lines,
            archive,
        })
    }

    /// The job's output as `(cursor, line)`: the lines after the cursor `after`, or the last
    /// `tail_lines` when `None`, then with `follow` every line archived later, until the job
    /// has finished and its output is all archived; ends after an error. `None` for a job
    /// `scope` may not see, as for one that does not exist. A job with no archive that has
    /// finished (run before jobgate archived output) is read from its executor, without
    /// cursors.
    pub async fn log_stream(
        &self,
        id: &str,
        scope: &Scope,
        tail_lines: usize,
        follow: bool,
        after: Option<i64>,
    ) -> Result<
        Option<impl Stream<Item = Result<(Option<i64>, LogLine), ServiceError>> + Send + 'static>,
        ServiceError,
    > {
        // Before anything is read, so that no commit falls between a read and the wait.
        let grown = self.inner.logs.grown();
        let Some((job, events)) = self.watch_job(id, scope).await? else {
            return Ok(None);
        };
        let archive = self.inner.store.log_archive(id).await?;
        if archive.is_none() && job.phase.is_terminal() {
            let id = job.id.clone();
            let lines = self
                .inner
                .executor
                .log_stream(job, tail_lines, None)
                .map(move |r| {
                    r.map(|line| (None, line)).map_err(|e| {
                        tracing::warn!(job = %id, error = %e, "reading logs failed");
                        ServiceError::FailedPrecondition("logs are not available right now".into())
                    })
                });
            return Ok(Some(until_inclusive(lines.boxed(), |r| r.is_err()).boxed()));
        }
        let next = match after {
            Some(after) => after.saturating_add(1).max(0),
            None => (archive.map_or(0, |a| a.lines) - tail_lines as i64).max(0),
        };
        let follower = LogFollower {
            service: self.clone(),
            id: job.id.clone(),
            next,
            follow,
            finished: job.phase.is_terminal(),
            events: events.boxed(),
            grown,
            buffered: std::collections::VecDeque::new(),
        };
        let lines = stream::unfold(follower, |mut f| async move {
            let item = f.next().await?;
            Some((item, f))
        });
        Ok(Some(until_inclusive(lines.boxed(), |r| r.is_err()).boxed()))
    }

    /// Whether a replay of `scope`'s events after `after` would be whole: `CursorExpired`
    /// when retention deleted some of them, and `Invalid` for a cursor past
    /// the newest event (no event ever reached it: nothing would ever be delivered). The
    /// newest is the store's, which with replicas may be ahead of this process's bus.
    pub async fn check_resumable(&self, scope: &Scope, after: i64) -> Result<(), ServiceError> {
        let head = self.inner.store.last_event_seq().await?;
        if after > head {
            return Err(ServiceError::Invalid(ValidationError {
                field: "after".into(),
                message: format!(
                    "{after} is past the newest event ({head}): resume after a cursor an event carried, or omit `after` to start from now"
                ),
            }));
        }
        let oldest = self.inner.store.retention_horizon(scope).await?;
        if after < oldest {
            return Err(ServiceError::CursorExpired { after, oldest });
        }
        Ok(())
    }

    /// Every event of the jobs in `scope` that match `filter` (as each job was right after
    /// its event) after `after` (the present when `None`), then live ones, in cursor order
    /// with no gap and no duplicate; ends after an error.
    pub fn events(
        &self,
        filter: JobFilter,
        scope: &Scope,
        after: Option<i64>,
    ) -> impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static {
        let events = self
            .inner
            .bus
            .events(after, None, scope.clone())
            .filter(matching(filter))
            .map(|r| r.map_err(ServiceError::from));
        until_inclusive(events.boxed(), |r| r.is_err())
    }

    /// One job's events after `after` (after its last event so far when `None`), then live
    /// ones, in cursor order with no gap and no duplicate, as [`JobService::events`] would
    /// give them for that job alone; the stream ends right after the job's terminal event (at
    /// once when that is at or before the starting cursor) or an error. `None` for a job
    /// `scope` may not see, as for one that does not exist. The cursor it starts after comes
    /// with it, so a caller can say where the subscription resumes before anything arrives.
    pub async fn job_events(
        &self,
        id: &str,
        filter: JobFilter,
        scope: &Scope,
        after: Option<i64>,
    ) -> Result<
        Option<(
            i64,
            impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static,
        )>,
        ServiceError,
    > {
        let Some((job, start, events)) = self.job_and_events(id, scope, after).await? else {
            return Ok(None);
        };
        let ended = job.phase.is_terminal() && job.last_event_seq <= start;
        let events = if ended { None } else { Some(events) };
        let events = until_inclusive(stream::iter(events).flatten().boxed(), |r| {
            r.as_ref().map(|e| e.phase.is_terminal()).unwrap_or(true)
        })
        .filter(matching(filter));
        Ok(Some((start, events)))
    }

    /// The job's status as it is now, then each change of its phase (not progress updates),
    /// ending right after a terminal phase or an error. `None` for a job `scope` may not see,
    /// as for one that does not exist.
    pub async fn job_status(
        &self,
        id: &str,
        scope: &Scope,
    ) -> Result<Option<impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static>, ServiceError>
    {
        let Some((job, events)) = self.watch_job(id, scope).await? else {
            return Ok(None);
        };
        let finished = job.phase.is_terminal();
        let current = stream::iter([Ok(Arc::new(current_state(job)))]);
        let changes = events.filter(|r| {
            let keep = match r {
                Ok(e) => e.previous_phase != Some(e.phase),
                Err(_) => true,
            };
            async move { keep }
        });
        // A finished job has nothing more to say; the stream ends after its state.
        let changes = if finished { None } else { Some(changes) };
        let all = current.chain(stream::iter(changes).flatten());
        Ok(Some(until_inclusive(all.boxed(), |r| {
            r.as_ref().map(|e| e.phase.is_terminal()).unwrap_or(true)
        })))
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
        let found = self.job_and_events(id, scope, None).await?;
        Ok(found.map(|(job, _, events)| (job, events)))
    }

    /// The job as it is now and a stream of its events after `after` (after its latest one
    /// when `None`), with the cursor the stream starts after; the receiver is taken before the
    /// job is read, so no event falls between the two. `None` for an unknown job.
    async fn job_and_events(
        &self,
        id: &str,
        scope: &Scope,
        after: Option<i64>,
    ) -> Result<
        Option<(
            Arc<Job>,
            i64,
            impl Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Send + 'static,
        )>,
        ServiceError,
    > {
        let subscription = self.inner.bus.subscribe();
        let Some(job) = self.job(id, scope).await? else {
            return Ok(None);
        };
        let start = after.unwrap_or(job.last_event_seq);
        let events = self
            .inner
            .bus
            .events_from(subscription, start, Some(id.to_owned()), scope.clone())
            .map(|r| r.map_err(ServiceError::from));
        Ok(Some((job, start, events)))
    }
}

/// Keeps the events whose job matches `filter` (as the job was right after the event), and
/// every error.
fn matching<E>(filter: JobFilter) -> impl FnMut(&Result<Arc<JobEvent>, E>) -> std::future::Ready<bool> {
    move |r| std::future::ready(r.as_ref().map_or(true, |e| filter.matches(&e.job)))
}

/// The job as it is now, as the event a status subscriber gets first: its cursor is the job's
/// last event, its time that of its latest condition.
fn current_state(job: Arc<Job>) -> JobEvent {
    JobEvent {
        seq: job.last_event_seq,
        job_id: job.id.clone(),
        phase: job.phase,
        previous_phase: None,
        at: job
            .conditions
            .iter()
            .filter_map(|c| c.last_transition_time)
            .max()
            .unwrap_or_else(Utc::now),
        reason: job.conditions.last().and_then(|c| c.reason.clone()),
        message: job.message.clone(),
        job,
    }
}

/// Yields items up to and including the first for which `last` holds, then ends at once
/// (without waiting for another item).
fn until_inclusive<S, F>(inner: S, last: F) -> impl Stream<Item = S::Item> + Send
where
    S: Stream + Send + Unpin,
    S::Item: Send,
    F: Fn(&S::Item) -> bool + Send,
{
    stream::unfold((inner, last, false), |(mut inner, last, done)| async move {
        if done {
            return None;
        }
        let item = inner.next().await?;
        let done = last(&item);
        Some((item, (inner, last, done)))
    })
}

/// Most lines one read of the archive returns (a `logLines` page, a step of a stream).
pub const MAX_LOG_PAGE_LINES: usize = 1000;
/// Most bytes of text one read of the archive returns (one line at least, however long).
pub const MAX_LOG_PAGE_BYTES: usize = 1 << 20;
/// Most bytes of text `logs(tailLines)` returns: the newest lines that fit.
pub const MAX_TAIL_BYTES: usize = 8 << 20;

/// A page of a job's archived output.
#[derive(Debug)]
pub struct LogPage {
    /// `(cursor, line)`, oldest first.
    pub lines: Vec<(i64, LogLine)>,
    pub has_next_page: bool,
    /// What the archive holds; `None` when nothing was archived.
    pub archive: Option<LogArchive>,
}

/// One `log_stream` reader: pages of the archive after its cursor, then waits for it to grow
/// until the job has finished and nothing more can come.
struct LogFollower {
    service: JobService,
    id: String,
    /// The cursor of the next line to read.
    next: i64,
    follow: bool,
    /// The job's terminal event was seen.
    finished: bool,
    events: futures::stream::BoxStream<'static, Result<Arc<JobEvent>, ServiceError>>,
    grown: tokio::sync::broadcast::Receiver<Arc<str>>,
    buffered: std::collections::VecDeque<(i64, LogLine)>,
}

impl LogFollower {
    async fn next(&mut self) -> Option<Result<(Option<i64>, LogLine), ServiceError>> {
        loop {
            if let Some((at, line)) = self.buffered.pop_front() {
                return Some(Ok((Some(at), line)));
            }
            // Asked before reading: when nothing can come any more, the read below has
            // everything there is.
            let inner = &self.service.inner;
            let settled =
                self.finished && !inner.executor.output_pending(&self.id) && !inner.logs.pending(&self.id);
            let page = inner
                .store
                .log_lines(&self.id, self.next, MAX_LOG_PAGE_LINES, MAX_LOG_PAGE_BYTES)
                .await;
            match page {
                Ok(page) if !page.is_empty() => {
                    self.next = page.last().map_or(self.next, |(at, _)| at + 1);
                    self.buffered.extend(page);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(job = %self.id, error = %e, "reading the log archive failed");
                    return Some(Err(ServiceError::FailedPrecondition(
                        "logs are not available right now".into(),
                    )));
                }
            }
            if !self.follow || settled {
                return None;
            }
            // Another replica may archive this job's output: its commits are not announced
            // here, so look again each second. Once the job has finished, its last output
            // is awaited the same way.
            let look_again = if inner.shared || self.finished {
                std::time::Duration::from_millis(if self.finished { 250 } else { 1000 })
            } else {
                std::time::Duration::from_secs(3600)
            };
            tokio::select! {
                grown = self.grown.recv() => match grown {
                    Ok(id) if *id != *self.id => {}
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
                event = self.events.next(), if !self.finished => match event {
                    Some(Ok(event)) => self.finished = event.phase.is_terminal(),
                    Some(Err(e)) => return Some(Err(e)),
                    None => return None,
                },
                _ = tokio::time::sleep(look_again) => {}
            }
        }
    }
}
