//! One attempt's output: the lines of the job's archive whose `source` is the attempt's
//! name, a page at a time, with cursors of the job's log (so a reader can also open the
//! job's whole log at any of them).
//!
//! It reads the archive from the attempt's lower bound on (`JobAttempt::log_from`), at most
//! [`MAX_ATTEMPT_SCAN_LINES`] lines per page, skipping the lines of the job's other runs; it
//! must not decide who may read a job (the feed's `job` does).

use super::feed::{MAX_LOG_PAGE_BYTES, MAX_LOG_PAGE_LINES};
use super::{JobService, ServiceError};
use crate::model::{LogLine, Scope};

/// Most archived lines one page reads looking for an attempt's own, so that a run that wrote
/// little among busy ones costs a bounded read; its `resume_after` goes on from there.
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
        let archived = self.inner.store.log_archive(id).await?.map_or(0, |a| a.lines);
        let mut next = after
            .map_or(0, |a| a.saturating_add(1))
            .max(attempt.log_from.unwrap_or(0))
            .max(0);
        let first = first.clamp(1, MAX_LOG_PAGE_LINES);
        let mut lines = Vec::new();
        let mut scanned = 0;
        let mut more = false;
        'read: while next < archived && scanned < MAX_ATTEMPT_SCAN_LINES {
            let chunk = self
                .inner
                .store
                .log_lines(id, next, MAX_LOG_PAGE_LINES, MAX_LOG_PAGE_BYTES)
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
        let resume_after = (next > 0).then_some(next - 1);
        Ok(AttemptLogPage {
            has_next_page: more || (next < archived && scanned >= MAX_ATTEMPT_SCAN_LINES),
            lines,
            resume_after,
        })
    }
}
