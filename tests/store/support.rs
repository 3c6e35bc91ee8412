//! Building jobs and writing them as the service does: the contract tests' common steps
//! (accept a job with its first event, move it to a phase, read it back) and what several
//! modules write (a varied set of jobs, log lines), each asserting only that the store
//! answered.

use std::sync::Arc;

use chrono::{DateTime, Duration, DurationRound as _, Utc};
use jobgate::model::LogLine;
use jobgate::model::{
    Job, JobEvent, JobFilter, JobPhase, Scope, SubmitRequest, Transition, ValidationLimits,
};
use jobgate::store::{LogAppend, SCAN_BUDGET, Store, StoreTx};

/// Now, to the microsecond: what every backend keeps of a time.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now()
        .duration_trunc(Duration::microseconds(1))
        .expect("now, truncated")
}

/// A newly accepted job (PENDING) named `name` in `namespace`.
pub(crate) fn job(namespace: &str, name: &str) -> Job {
    let spec = SubmitRequest {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        command: Some(vec!["true".into()]),
        ..SubmitRequest::default()
    }
    .validate(&ValidationLimits::default())
    .expect("a valid request");
    Job::accepted(uuid::Uuid::now_v7().to_string(), spec, None, now())
}

/// `job` with idempotency key `key`, submitted by `principal`.
pub(crate) fn keyed_job(namespace: &str, name: &str, principal: &str, key: &str) -> Job {
    let mut job = job(namespace, name);
    job.idempotency_key = Some(key.into());
    job.submitter = Some(principal.into());
    job.submitter_key = Some(principal.into());
    job
}

pub(crate) fn fingerprint(job: &Job) -> String {
    job.spec.fingerprint()
}

/// Appends the event for `transition` and saves the job with its cursor, as the service's
/// writer does; returns the cursor.
pub(crate) async fn record(tx: &mut dyn StoreTx, job: &mut Job, transition: &Transition) -> i64 {
    let seq = tx
        .append_event(job, transition, now())
        .await
        .expect("appending an event");
    job.last_event_seq = seq;
    tx.save_job(job).await.expect("saving the job");
    seq
}

/// What the writer records on accepting a job: the job, in the outbox, with its first event.
pub(crate) async fn insert(tx: &mut dyn StoreTx, job: &mut Job) -> i64 {
    tx.insert_job(job, &fingerprint(job))
        .await
        .expect("inserting the job");
    let transition = Transition {
        previous_phase: None,
        phase: job.phase,
        reason: Some("Submitted".into()),
        message: Some("accepted by jobgate".into()),
    };
    record(tx, job, &transition).await
}

/// Submits jobs in one committed transaction; returns them as stored (with their cursors).
pub(crate) async fn submit(store: &Arc<dyn Store>, jobs: Vec<Job>) -> Vec<Job> {
    let mut tx = store.begin().await.expect("a write transaction");
    let mut stored = Vec::new();
    for mut job in jobs {
        insert(&mut *tx, &mut job).await;
        stored.push(job);
    }
    tx.commit().await.expect("committing");
    stored
}

pub(crate) async fn submit_one(store: &Arc<dyn Store>, job: Job) -> Job {
    submit(store, vec![job]).await.remove(0)
}

/// Moves a job to `phase` (an event and the saved job), committed.
pub(crate) async fn move_to(store: &Arc<dyn Store>, job: &mut Job, phase: JobPhase) -> i64 {
    let mut tx = store.begin().await.expect("a write transaction");
    let seq = move_in(&mut *tx, job, phase).await;
    tx.commit().await.expect("committing");
    seq
}

pub(crate) async fn move_in(tx: &mut dyn StoreTx, job: &mut Job, phase: JobPhase) -> i64 {
    let transition = match phase {
        JobPhase::Cancelled => job.cancel(now()).expect("an unfinished job cancels"),
        _ => {
            let previous = job.phase;
            job.phase = phase;
            Transition {
                previous_phase: Some(previous),
                phase,
                reason: Some(format!("Moved{phase:?}")),
                message: None,
            }
        }
    };
    record(tx, job, &transition).await
}

pub(crate) async fn stored(store: &Arc<dyn Store>, id: &str) -> Option<Job> {
    store.get_job(id).await.expect("get_job")
}

pub(crate) async fn all_events(store: &Arc<dyn Store>) -> Vec<JobEvent> {
    store
        .events_after(0, 10_000, None, &Scope::All)
        .await
        .expect("events_after")
}

pub(crate) fn ids(jobs: &[Job]) -> Vec<&str> {
    jobs.iter().map(|j| j.id.as_str()).collect()
}

pub(crate) fn page_ids(page: &jobgate::store::JobPage) -> Vec<&str> {
    page.jobs.iter().map(|(_, j)| j.id.as_str()).collect()
}

pub(crate) fn team(namespace: &str) -> Scope {
    Scope::namespaces([namespace])
}

pub(crate) async fn list(
    store: &Arc<dyn Store>,
    filter: &JobFilter,
    scope: &Scope,
) -> jobgate::store::JobPage {
    store
        .list_jobs(filter, scope, 100, None, SCAN_BUDGET)
        .await
        .expect("list_jobs")
}

/// Jobs in three namespaces, with names long and short, in every phase: what
/// [`list_jobs_pages_every_filter_combination_newest_first`] pages through.
pub(crate) async fn varied_jobs(store: &Arc<dyn Store>) -> Vec<Job> {
    let names = ["alpha-1", "alpha-2", "beta", "al", "gamma-alpha", "delta"];
    let mut jobs = Vec::new();
    for round in 0..3 {
        let batch = ["team-a", "team-b", "team-c"]
            .iter()
            .flat_map(|ns| names.iter().map(move |name| job(ns, &format!("{name}-{round}"))))
            .collect();
        jobs.extend(submit(store, batch).await);
    }
    let phases = [
        JobPhase::Pending,
        JobPhase::Running,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::Cancelled,
    ];
    for (i, job) in jobs.iter_mut().enumerate() {
        match phases[(i * 7) % phases.len()] {
            JobPhase::Pending => {}
            JobPhase::Running => {
                move_to(store, job, JobPhase::Running).await;
            }
            terminal => {
                if terminal != JobPhase::Cancelled {
                    move_to(store, job, JobPhase::Running).await;
                }
                move_to(store, job, terminal).await;
            }
        }
    }
    jobs
}

pub(crate) fn log_line(source: Option<&str>, text: String) -> LogLine {
    LogLine {
        source: source.map(str::to_owned),
        text,
    }
}

/// An append of `lines` from `source` with no position kept.
pub(crate) fn plain_append(job: &str, lines: Vec<LogLine>) -> LogAppend {
    LogAppend {
        job_id: job.to_owned(),
        source: String::new(),
        position: None,
        lines,
        lost: false,
        gap: None,
    }
}

pub(crate) const CAP: i64 = 64 << 20;
