//! The launcher against a race of the writer: a submission is committed to the store before it
//! reaches the cache of active jobs, so the launcher can read a job from the outbox that the
//! cache does not hold yet. Such a job must be launched, not taken for finished (it stayed
//! PENDING for good, under load, until the launcher asked the store).
//!
//! The test builds that moment without timing: it commits a job to the store directly, as the
//! writer's transaction does, leaves the cache without it, and wakes the launcher.

use std::time::Duration;

use chrono::Utc;

use super::tests::Fixture;
use crate::model::{Job, JobPhase, Scope, SubmitRequest, ValidationLimits};

/// A hang guard for a slow machine, never an assertion.
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_job_in_the_outbox_but_not_yet_in_the_cache_is_launched() {
    let fixture = Fixture::start().await;
    let inner = &fixture.service.inner;
    let spec = SubmitRequest {
        namespace: Some("team-a".into()),
        command: Some(vec!["true".into()]),
        ..SubmitRequest::default()
    }
    .validate(&ValidationLimits::default())
    .expect("the request is valid");
    let fingerprint = spec.fingerprint();
    let job = Job::accepted(uuid::Uuid::now_v7().to_string(), spec, None, Utc::now());
    // What the writer's transaction commits for a submission, before it updates the cache.
    let mut tx = inner.store.begin().await.expect("a write transaction");
    tx.insert_job(&job, &fingerprint)
        .await
        .expect("the job is stored");
    tx.commit().await.expect("the job is committed");
    assert!(
        inner.active.get(&job.id).is_none(),
        "the cache does not hold the job yet"
    );

    inner.launch_wanted.notify_one();

    // Launched, the job runs `true` and succeeds; taken for finished, it stays PENDING.
    let deadline = tokio::time::Instant::now() + WAIT;
    let phase = loop {
        let phase = inner
            .store
            .get_job(&job.id)
            .await
            .expect("the store answers")
            .expect("the job is stored")
            .phase;
        if phase.is_terminal() || tokio::time::Instant::now() > deadline {
            break phase;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        phase,
        JobPhase::Succeeded,
        "a job read from the outbox before it reached the cache was never launched"
    );
    let seen = fixture
        .service
        .job(&job.id, &Scope::All)
        .await
        .expect("the service answers");
    assert_eq!(seen.map(|j| j.phase), Some(JobPhase::Succeeded));
    fixture.stop().await;
}
