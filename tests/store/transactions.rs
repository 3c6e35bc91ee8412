//! Transactions and their visibility: an empty store answers, a committed job and its event
//! are visible to every read, a transaction dropped without commit changed nothing, and a
//! transaction reads its own writes.

use std::sync::Arc;

use jobgate::model::{JobFilter, JobPhase, Scope, Transition};
use jobgate::store::Store;

use crate::support::{
    all_events, fingerprint, ids, insert, job, keyed_job, list, move_in, move_to, now, stored, submit_one,
};

backend_tests!(
    ping_and_probe_write_answer_on_an_empty_store,
    a_committed_job_and_its_event_are_visible,
    a_transaction_dropped_without_commit_changes_nothing,
    a_transaction_reads_its_own_writes,
);

async fn ping_and_probe_write_answer_on_an_empty_store(store: Arc<dyn Store>) {
    assert!(store.ping().await, "a fresh store does not answer ping");
    store.check_storage().expect("a fresh store's storage checks out");
    store.probe_write().await.expect("a probe write");
    store.probe_write().await.expect("a second probe write");
    assert_eq!(store.last_event_seq().await.unwrap(), 0, "no events yet");
    assert!(all_events(&store).await.is_empty());
    assert!(stored(&store, "no-such-job").await.is_none());
    assert!(store.unlaunched_jobs(10, None).await.unwrap().is_empty());
    assert!(store.unfinished_jobs().await.unwrap().is_empty());
    assert!(store.pending_cancellations(10, None).await.unwrap().is_empty());
    // A probe is no job and no event.
    assert_eq!(store.last_event_seq().await.unwrap(), 0);
    assert_eq!(
        list(&store, &JobFilter::default(), &Scope::All).await.total_count,
        0
    );
}

async fn a_committed_job_and_its_event_are_visible(store: Arc<dyn Store>) {
    let submitted = now();
    let mut tx = store.begin().await.unwrap();
    let mut job = job("team-a", "alpha");
    tx.insert_job(&job, &fingerprint(&job)).await.unwrap();
    let transition = Transition {
        previous_phase: None,
        phase: JobPhase::Pending,
        reason: Some("Submitted".into()),
        message: Some("accepted by jobgate".into()),
    };
    let seq = tx.append_event(&job, &transition, submitted).await.unwrap();
    job.last_event_seq = seq;
    tx.save_job(&job).await.unwrap();
    tx.commit().await.unwrap();

    assert!(seq > 0, "a cursor is positive: 0 means no event");
    assert_eq!(
        stored(&store, &job.id).await.as_ref(),
        Some(&job),
        "the job reads back as saved"
    );
    assert_eq!(store.last_event_seq().await.unwrap(), seq);
    let events = all_events(&store).await;
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert_eq!(event.seq, seq);
    assert_eq!(event.job_id, job.id);
    assert_eq!(event.phase, JobPhase::Pending);
    assert_eq!(event.previous_phase, None);
    assert_eq!(event.at, submitted);
    assert_eq!(event.reason.as_deref(), Some("Submitted"));
    assert_eq!(event.message.as_deref(), Some("accepted by jobgate"));
    assert_eq!(
        *event.job, job,
        "the event's snapshot is the job with its own cursor"
    );
    let history = store.job_history(&job.id, &Scope::All, 10).await.unwrap();
    assert_eq!(history, events);

    // A later change is visible the same way, snapshot and all.
    let mut changed = job.clone();
    let cancelled = move_to(&store, &mut changed, JobPhase::Cancelled).await;
    assert!(cancelled > seq);
    let read = stored(&store, &job.id).await.unwrap();
    assert_eq!(read.phase, JobPhase::Cancelled);
    assert_eq!(read.last_event_seq, cancelled);
    assert_eq!(read, changed);
    let history = store.job_history(&job.id, &Scope::All, 10).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].previous_phase, Some(JobPhase::Pending));
    assert_eq!(history[1].phase, JobPhase::Cancelled);
    assert_eq!(*history[0].job, job, "an earlier snapshot does not change");
    assert_eq!(*history[1].job, changed);
}

async fn a_transaction_dropped_without_commit_changes_nothing(store: Arc<dyn Store>) {
    let committed = submit_one(&store, job("team-a", "kept")).await;
    let cursor = store.last_event_seq().await.unwrap();

    let mut tx = store.begin().await.unwrap();
    let mut dropped = job("team-a", "dropped");
    insert(&mut *tx, &mut dropped).await;
    tx.hold(&dropped.id, std::slice::from_ref(&committed.id))
        .await
        .unwrap();
    let mut changed = committed.clone();
    move_in(&mut *tx, &mut changed, JobPhase::Cancelled).await;
    tx.request_cancellation(&committed.id, now()).await.unwrap();
    tx.mark_launched(&committed.id).await.unwrap();
    drop(tx);
    // PostgreSQL rolls a dropped transaction back as its connection goes back to the pool,
    // a moment later: until then its row locks make the outbox (FOR UPDATE SKIP LOCKED) skip
    // the job it marked. The next write transaction waits for the write lock the dropped one
    // held, so once it has begun the rollback is done.
    store.begin().await.unwrap().commit().await.unwrap();

    assert!(
        stored(&store, &dropped.id).await.is_none(),
        "an uncommitted job is visible"
    );
    assert_eq!(stored(&store, &committed.id).await.as_ref(), Some(&committed));
    assert_eq!(store.last_event_seq().await.unwrap(), cursor);
    assert_eq!(all_events(&store).await.len(), 1);
    assert!(store.pending_cancellations(10, None).await.unwrap().is_empty());
    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        [committed.id.as_str()]
    );
    assert_eq!(
        list(&store, &JobFilter::default(), &Scope::All).await.total_count,
        1
    );

    // The next transaction starts clean and sees none of it either.
    let mut tx = store.begin().await.unwrap();
    assert!(tx.get_job(&dropped.id).await.unwrap().is_none());
    assert!(tx.dependents(&committed.id).await.unwrap().is_empty());
    assert_eq!(tx.active_in_namespace("team-a").await.unwrap(), 1);
    tx.commit().await.unwrap();
}

async fn a_transaction_reads_its_own_writes(store: Arc<dyn Store>) {
    let mut tx = store.begin().await.unwrap();
    let mut job = keyed_job("team-a", "alpha", "token:alice", "k1");
    insert(&mut *tx, &mut job).await;
    assert_eq!(tx.get_job(&job.id).await.unwrap().as_ref(), Some(&job));
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "k1")
        .await
        .unwrap()
        .expect("the transaction's own keyed job");
    assert_eq!(found.id, job.id);
    assert_eq!(found.fingerprint, fingerprint(&job));
    move_in(&mut *tx, &mut job, JobPhase::Running).await;
    assert_eq!(
        tx.get_job(&job.id).await.unwrap().map(|j| j.phase),
        Some(JobPhase::Running)
    );
    tx.commit().await.unwrap();
    assert_eq!(
        stored(&store, &job.id).await.map(|j| j.phase),
        Some(JobPhase::Running)
    );
}
