//! One attempt's output: where its lines are in the job's archive (the cursors of its first
//! and last line, which the store keeps with every append) and those lines, a page at a
//! time, with cursors of the job's log (so a reader can also open the job's whole log at any
//! of them).
//!
//! A page reads the archive only within the attempt's range (the whole archive for an
//! attempt the archive holds no range for), at most
//! [`MAX_ATTEMPT_SCAN_LINES`] lines of it, skipping the lines other runs wrote in between
//! (parallel indexes); it must not decide who may read a job (the feed's `job` does).

use super::feed::{MAX_LOG_PAGE_BYTES, MAX_LOG_PAGE_LINES};
use super::{JobService, ServiceError};
use crate::model::{Job, JobAttempt, LogLine, LogRange, Scope};

/// Most archived lines one page reads looking for an attempt's own, so that a run that wrote
/// little among busy parallel ones costs a bounded read; its `resume_after` goes on from there.
pub const MAX_ATTEMPT_SCAN_LINES: usize = 20_000;

/// A page of one attempt's output.
#[derive(Debug)]
pub struct AttemptLogPage {
    /// `(cursor in the job's log, line)`, oldest first.
    pub lines: Vec<(i64, LogLine)>,
    /// More of the job's archive may hold lines of the attempt.
    pub has_next_page: bool,
    /// The cursor to read on after (the last line read, the attempt's or not).
    pub resume_after: Option<i64>,
}

impl JobService {
    /// Where the lines of `attempt` of `job` are in the job's archive; `None` while it has
    /// written none. `job` is one the caller read with its scope (`JobService::job`).
    pub async fn attempt_log_range(
        &self,
        job: &Job,
        attempt: &JobAttempt,
    ) -> Result<Option<LogRange>, ServiceError> {
        Ok(self.inner.store.log_range(&job.id, &attempt.name).await?)
    }

    /// Up to `first` lines of the attempt named `attempt` of job `id` after the cursor
    /// `after`; `NotFound` for a job `scope` may not see, or an attempt it does not have.
    pub async fn attempt_log_page(
        &self,
        id: &str,
        scope: &Scope,
        attempt: &str,
        first: usize,
        after: Option<i64>,
    ) -> Result<AttemptLogPage, ServiceError> {
        let Some(job) = self.job(id, scope).await? else {
            return Err(ServiceError::NotFound { id: id.to_owned() });
        };
        let Some(attempt) = job.attempts.iter().find(|a| a.name == attempt) else {
            return Err(ServiceError::NotFound {
                id: format!("{id} attempt {attempt}"),
            });
        };
        // No range: the attempt wrote nothing, or its lines are in an archive that holds no
        // ranges. Its lines, if any, are found by their source across the whole archive,
        // within the bound every page has.
        let range = self.attempt_log_range(&job, attempt).await?.unwrap_or(LogRange {
            first: 0,
            last: i64::MAX - 1,
        });
        let mut next = after.map_or(0, |a| a.saturating_add(1)).max(range.first).max(0);
        let end = range.last.saturating_add(1);
        let first = first.clamp(1, MAX_LOG_PAGE_LINES);
        let mut lines = Vec::new();
        let mut scanned = 0;
        let mut more = false;
        'read: while next < end && scanned < MAX_ATTEMPT_SCAN_LINES {
            let want = (end - next).min(MAX_LOG_PAGE_LINES as i64) as usize;
            let chunk = self
                .inner
                .store
                .log_lines(id, next, want, MAX_LOG_PAGE_BYTES)
                .await?;
            if chunk.is_empty() {
                break;
            }
            for (at, line) in chunk {
                if line.source.as_deref() == Some(attempt.name.as_str()) {
                    if lines.len() == first {
                        // One more of its lines exists: stop before it.
                        more = true;
                        break 'read;
                    }
                    lines.push((at, line));
                }
                next = at + 1;
                scanned += 1;
            }
        }
        let resume_after = (next > 0).then_some(next - 1).max(after);
        Ok(AttemptLogPage {
            has_next_page: more || (next < end && scanned >= MAX_ATTEMPT_SCAN_LINES),
            lines,
            resume_after,
        })
    }
}
