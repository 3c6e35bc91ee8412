//! GraphQL views of a job's attempts (`JobAttempt`, `AttemptState`) and of why a run failed
//! (`FailureCause`, the one enum of causes every part of the API speaks), with where one
//! attempt's output is in the job's log (`JobAttempt.logStart`, `logEnd`) and that output
//! (`JobAttempt.logLines`).

use std::sync::Arc;

use async_graphql::{Context, Enum, Object};
use chrono::{DateTime, Utc};

use super::{LogLineConnection, LogLineEdge, PageInfo, parse_after};
use crate::graphql::caller::caller;
use crate::graphql::error::OrApiError;
use crate::jobs::service::JobService;
use crate::model::{Job, JobAttempt, LogRange};

/// Why a run of a job failed, whatever the executor.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "FailureCause", remote = "crate::model::FailureCause")]
pub enum FailureCauseView {
    /// The program failed: a non-zero exit code, or a signal it did not get from jobgate or
    /// the cluster.
    Error,
    /// The kernel's OOM killer ended it (Kubernetes: the container terminated `OOMKilled`).
    /// Retry rules match it as exit code 137 (SIGKILL), which is all a Kubernetes
    /// `podFailurePolicy` can see of it.
    OomKilled,
    /// It was evicted (node pressure, a drain, the Eviction API; Kubernetes: the
    /// `DisruptionTarget` pod condition).
    Evicted,
    /// A workload of higher priority took its place (Kubernetes: `DisruptionTarget`).
    Preempted,
    /// The job's `activeDeadlineSeconds` passed while it ran.
    DeadlineExceeded,
    /// jobgate restarted while it ran and could not follow it to its end (local executor).
    GatewayRestarted,
    /// The job was cancelled (or failed for another run) while it ran.
    Cancelled,
}

/// Where an attempt is.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[graphql(name = "AttemptState", remote = "crate::model::AttemptState")]
pub enum AttemptStateView {
    Running,
    Succeeded,
    Failed,
}

/// One run of one completion index of a job: a pod on Kubernetes, a process group on the
/// local executor.
pub struct JobAttemptObject {
    pub job: Arc<Job>,
    pub attempt: JobAttempt,
    /// Where its lines are in the job's archive, read once for `logStart` and `logEnd`.
    log_range: tokio::sync::OnceCell<Option<LogRange>>,
}

impl JobAttemptObject {
    pub fn new(job: Arc<Job>, attempt: JobAttempt) -> Self {
        Self {
            job,
            attempt,
            log_range: tokio::sync::OnceCell::new(),
        }
    }

    async fn log_range(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<LogRange>> {
        let range = self
            .log_range
            .get_or_try_init(|| async {
                let service = ctx.data::<JobService>()?;
                service.attempt_log_range(&self.job, &self.attempt).await.api()
            })
            .await?;
        Ok(*range)
    }
}

#[Object(name = "JobAttempt")]
impl JobAttemptObject {
    /// The run's name, unique in its job: the pod's name on Kubernetes, `index-<i>-run-<n>`
    /// on the local executor. Its output's lines carry it as their `source`.
    async fn name(&self) -> &str {
        &self.attempt.name
    }
    /// The completion index it ran.
    async fn index(&self) -> i32 {
        self.attempt.index
    }
    /// Its number among the attempts of its index, from 1.
    async fn number(&self) -> i32 {
        self.attempt.number
    }
    async fn state(&self) -> AttemptStateView {
        self.attempt.state.into()
    }
    async fn started_at(&self) -> Option<DateTime<Utc>> {
        self.attempt.started_at
    }
    async fn finished_at(&self) -> Option<DateTime<Utc>> {
        self.attempt.finished_at
    }
    /// Its container's (or process's) exit code, once it ended with one.
    async fn exit_code(&self) -> Option<i32> {
        self.attempt.exit_code
    }
    /// The signal that ended its process, when one did (local executor; on Kubernetes a
    /// signal shows as exit code 128 + its number).
    async fn signal(&self) -> Option<i32> {
        self.attempt.signal
    }
    /// Why it failed; null while it runs and when it succeeded.
    async fn cause(&self) -> Option<FailureCauseView> {
        self.attempt.cause.map(Into::into)
    }
    /// The executor's reason: a container's `terminated.reason` or the pod's reason on
    /// Kubernetes (`Error`, `OOMKilled`, `DeadlineExceeded`, `Evicted`…), jobgate's own on
    /// the local executor (`Error`, `StartError`, `DeadlineExceeded`, `GatewayRestarted`,
    /// `CancelledByUser`…).
    async fn reason(&self) -> Option<&str> {
        self.attempt.reason.as_deref()
    }
    /// How it ended, in the executor's words (at most 512 bytes).
    async fn message(&self) -> Option<&str> {
        self.attempt.message.as_deref()
    }
    /// The pod that ran it (Kubernetes).
    async fn pod(&self) -> Option<&str> {
        self.attempt.pod.as_deref()
    }
    /// The process (and process group) that ran it (local executor).
    async fn process_id(&self) -> Option<i32> {
        self.attempt.process_id
    }
    /// The cursor in the job's log (`Job.logLines`) of this attempt's first line; null while
    /// it has written none. `Job.logLines(after:)` reads from its next line, so pass the
    /// cursor before it (this minus 1) to read the job's log from here, or `after` null when
    /// it is `"0"`.
    async fn log_start(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<String>> {
        Ok(self.log_range(ctx).await?.map(|r| r.first.to_string()))
    }
    /// The cursor in the job's log of this attempt's last line so far; null while it has
    /// written none. Lines of other runs may lie between `logStart` and `logEnd` (parallel
    /// indexes); its own carry its `name` as their `source`.
    async fn log_end(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<String>> {
        Ok(self.log_range(ctx).await?.map(|r| r.last.to_string()))
    }
    /// This attempt's own output from the job's archive, oldest line first: up to `first`
    /// of its lines after the cursor `after` (a cursor of the job's log, as its lines carry;
    /// from its first line when omitted). A page reads the job's log only between the
    /// attempt's `logStart` and `logEnd`, at most 20,000 lines of it, skipping other runs'
    /// lines there; so among busy parallel runs a page may come back short, or empty, with
    /// `hasNextPage`: go on after its `endCursor`.
    async fn log_lines(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 100, validator(minimum = 1, maximum = 1000))] first: i32,
        after: Option<String>,
    ) -> async_graphql::Result<LogLineConnection> {
        let service = ctx.data::<JobService>()?;
        let after = parse_after(after.as_deref())?;
        let page = service
            .attempt_log_page(
                &self.job.id,
                &caller(ctx)?.scope,
                &self.attempt.name,
                first.clamp(1, 1000) as usize,
                after,
            )
            .await
            .api()?;
        let edges = LogLineEdge::all(page.lines);
        Ok(LogLineConnection {
            page_info: PageInfo {
                has_next_page: page.has_next_page,
                has_previous_page: after.is_some(),
                start_cursor: edges.first().map(|e| e.cursor.clone()),
                end_cursor: page.resume_after.map(|c| c.to_string()),
            },
            edges,
        })
    }
}

/// The job's attempts as views.
pub(super) fn attempts_of(job: &Arc<Job>) -> Vec<JobAttemptObject> {
    job.attempts
        .iter()
        .map(|attempt| JobAttemptObject::new(job.clone(), attempt.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::FailureCauseView;
    use crate::model::FailureCause;

    #[test]
    fn every_cause_has_its_graphql_name() {
        for cause in FailureCause::ALL {
            let view: FailureCauseView = cause.into();
            let name = async_graphql::resolver_utils::enum_value(view);
            assert_eq!(name.to_string(), cause.as_str());
        }
    }
}
