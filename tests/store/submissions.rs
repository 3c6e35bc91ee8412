//! Accepting jobs: idempotency keys are per submitter and a duplicate is refused without
//! harm, an accepted job carries its first event's cursor, and jobs accepted together keep
//! their order and keys.

use std::sync::Arc;

use jobgate::model::{Job, JobFilter, Scope, Transition};
use jobgate::store::Store;

use crate::support::{all_events, fingerprint, ids, job, keyed_job, list, now, page_ids, stored, submit_one};

backend_tests!(
    idempotency_keys_are_per_submitter,
    a_duplicate_key_is_refused_and_the_store_stays_usable,
    an_accepted_job_carries_its_first_events_cursor,
    jobs_accepted_together_keep_their_order_and_keys,
);

async fn idempotency_keys_are_per_submitter(store: Arc<dyn Store>) {
    let alice = submit_one(&store, keyed_job("team-a", "x", "token:alice", "k")).await;
    // The same key from another submitter is another job.
    let bob = submit_one(&store, keyed_job("team-a", "y", "token:bob", "k")).await;
    let mut tx = store.begin().await.unwrap();
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "k")
        .await
        .unwrap();
    let found = found.expect("alice's key finds her job");
    assert_eq!(found.id, alice.id);
    assert_eq!(tx.get_job(&found.id).await.unwrap().as_ref(), Some(&alice));
    assert_eq!(found.fingerprint, fingerprint(&alice));
    let found = tx.find_by_idempotency_key(Some("token:bob"), "k").await.unwrap();
    assert_eq!(found.map(|k| k.id), Some(bob.id));
    assert!(
        tx.find_by_idempotency_key(Some("token:carol"), "k")
            .await
            .unwrap()
            .is_none()
    );
    assert!(tx.find_by_idempotency_key(None, "k").await.unwrap().is_none());
    assert!(
        tx.find_by_idempotency_key(Some("token:alice"), "other")
            .await
            .unwrap()
            .is_none()
    );
    tx.commit().await.unwrap();
}

async fn a_duplicate_key_is_refused_and_the_store_stays_usable(store: Arc<dyn Store>) {
    let first = submit_one(&store, keyed_job("team-a", "x", "token:alice", "k")).await;
    let duplicate = keyed_job("team-a", "y", "token:alice", "k");
    let mut tx = store.begin().await.unwrap();
    let refused = tx.insert_job(&duplicate, &fingerprint(&duplicate)).await;
    assert!(
        refused.is_err(),
        "a second job with the same submitter's key was stored"
    );
    drop(tx);
    assert!(stored(&store, &duplicate.id).await.is_none());
    // The next transaction works as ever.
    let later = submit_one(&store, keyed_job("team-a", "z", "token:alice", "k2")).await;
    assert_eq!(stored(&store, &later.id).await.as_ref(), Some(&later));
    let mut tx = store.begin().await.unwrap();
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "k")
        .await
        .unwrap();
    assert_eq!(found.map(|k| k.id), Some(first.id));
    tx.commit().await.unwrap();
}

async fn an_accepted_job_carries_its_first_events_cursor(store: Arc<dyn Store>) {
    let before = submit_one(&store, job("team-a", "before")).await;
    let mut tx = store.begin().await.unwrap();
    let mut accepted = Vec::new();
    for name in ["one", "two"] {
        let mut job = keyed_job("team-a", name, "token:alice", name);
        let transition = Transition {
            previous_phase: None,
            phase: job.phase,
            reason: Some("Submitted".into()),
            message: Some("accepted by jobgate".into()),
        };
        let seq = tx
            .accept_job(&job, &fingerprint(&job), &transition, now())
            .await
            .expect("accepting a job");
        job.last_event_seq = seq;
        accepted.push(job);
    }
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "two")
        .await
        .unwrap()
        .expect("the transaction finds its own key");
    assert_eq!(found.id, accepted[1].id);
    assert_eq!(tx.get_job(&found.id).await.unwrap().as_ref(), Some(&accepted[1]));
    tx.commit().await.unwrap();
    assert!(accepted[0].last_event_seq > before.last_event_seq);
    assert_eq!(accepted[1].last_event_seq, accepted[0].last_event_seq + 1);
    for job in &accepted {
        assert_eq!(
            stored(&store, &job.id).await.as_ref(),
            Some(job),
            "stored with its cursor"
        );
    }
    let events = all_events(&store).await;
    let last_two: Vec<(i64, &Job)> = events[events.len() - 2..]
        .iter()
        .map(|e| (e.seq, e.job.as_ref()))
        .collect();
    assert_eq!(
        last_two,
        [
            (accepted[0].last_event_seq, &accepted[0]),
            (accepted[1].last_event_seq, &accepted[1])
        ],
        "each event's snapshot is the job as stored"
    );
    assert_eq!(events[events.len() - 1].reason.as_deref(), Some("Submitted"));
    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        [
            before.id.as_str(),
            accepted[0].id.as_str(),
            accepted[1].id.as_str()
        ],
        "in the launch outbox"
    );
    let page = list(&store, &JobFilter::default(), &Scope::All).await;
    assert_eq!(page.total_count, 3);
    assert_eq!(page.jobs[0].1, accepted[1]);
}

async fn jobs_accepted_together_keep_their_order_and_keys(store: Arc<dyn Store>) {
    let before = submit_one(&store, keyed_job("team-a", "before", "token:alice", "old")).await;
    let mut jobs = [
        keyed_job("team-a", "one", "token:alice", "one"),
        job("team-b", "two"),
        keyed_job("team-a", "three", "token:bob", "old"),
    ];
    let transitions: Vec<Transition> = jobs
        .iter()
        .map(|j| Transition {
            previous_phase: None,
            phase: j.phase,
            reason: Some("Submitted".into()),
            message: Some("accepted by jobgate".into()),
        })
        .collect();
    let fingerprints: Vec<String> = jobs.iter().map(fingerprint).collect();
    let at = now();
    let mut tx = store.begin().await.unwrap();
    let accepted: Vec<jobgate::store::Accepted<'_>> = jobs
        .iter()
        .zip(&transitions)
        .zip(&fingerprints)
        .map(|((job, transition), fingerprint)| jobgate::store::Accepted {
            job,
            fingerprint,
            transition,
            at,
        })
        .collect();
    let seqs = tx.accept_jobs(&accepted).await.expect("accepting jobs together");
    drop(accepted);
    assert_eq!(seqs.len(), 3);
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive cursors: {seqs:?}"
    );
    assert!(seqs[0] > before.last_event_seq);
    let found = tx
        .find_by_idempotency_keys(&[
            (Some("token:alice"), "one"),
            (Some("token:alice"), "old"),
            (Some("token:bob"), "old"),
            (Some("token:carol"), "old"),
        ])
        .await
        .unwrap();
    let mut found_ids: Vec<(String, String)> = found.into_iter().map(|(key, k)| (key, k.id)).collect();
    found_ids.sort();
    let mut expected = vec![
        (
            jobgate::store::scoped_key(Some("token:alice"), "one"),
            jobs[0].id.clone(),
        ),
        (
            jobgate::store::scoped_key(Some("token:alice"), "old"),
            before.id.clone(),
        ),
        (
            jobgate::store::scoped_key(Some("token:bob"), "old"),
            jobs[2].id.clone(),
        ),
    ];
    expected.sort();
    assert_eq!(found_ids, expected, "each key finds its submitter's job only");
    tx.commit().await.unwrap();
    for (job, seq) in jobs.iter_mut().zip(&seqs) {
        job.last_event_seq = *seq;
        assert_eq!(stored(&store, &job.id).await.as_ref(), Some(&*job));
    }
    let events = all_events(&store).await;
    let last: Vec<(i64, &str)> = events[events.len() - 3..]
        .iter()
        .map(|e| (e.seq, e.job_id.as_str()))
        .collect();
    assert_eq!(
        last,
        jobs.iter()
            .map(|j| (j.last_event_seq, j.id.as_str()))
            .collect::<Vec<_>>()
    );
    let page = list(&store, &JobFilter::default(), &Scope::All).await;
    assert_eq!(page.total_count, 4);
    assert_eq!(
        page_ids(&page)[..3],
        [jobs[2].id.as_str(), jobs[1].id.as_str(), jobs[0].id.as_str()]
    );
}
