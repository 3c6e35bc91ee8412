//! The event log: cursors grow with commit order and are never reused, a subscriber resuming
//! after a cursor misses nothing while writers commit concurrently, and event reads filter by
//! job and scope; a job's attempts, and the events of their ends, read back as written.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use jobgate::model::{AttemptState, FailureCause, JobAttempt, JobEvent, JobPhase, MAX_ATTEMPTS, Scope};
use jobgate::store::Store;

use crate::support::{all_events, job, move_in, move_to, now, record, submit, submit_one, team};

backend_tests!(
    event_cursors_grow_with_each_commit,
    a_subscriber_resuming_after_a_cursor_misses_nothing_under_concurrent_writers,
    events_after_filters_by_job_and_scope,
    job_history_is_the_newest_events_oldest_first,
    attempts_and_the_events_of_their_ends_read_back_as_written,
);

async fn event_cursors_grow_with_each_commit(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, vec![job("team-a", "one"), job("team-a", "two")]).await;
    let first = all_events(&store).await;
    assert_eq!(first.len(), 2);
    assert!(first[0].seq < first[1].seq, "cursors grow within a transaction");
    assert_eq!(first[1].seq, store.last_event_seq().await.unwrap());

    // A dropped transaction's cursors were never seen: the next commit's are still above
    // every committed one, and a subscriber resuming there finds exactly them.
    let mut tx = store.begin().await.unwrap();
    move_in(&mut *tx, &mut jobs[0].clone(), JobPhase::Running).await;
    drop(tx);
    let resume_at = store.last_event_seq().await.unwrap();
    assert_eq!(resume_at, first[1].seq, "a dropped transaction moved the cursor");
    let mut seqs = Vec::new();
    for job in &mut jobs {
        seqs.push(move_to(&store, job, JobPhase::Running).await);
    }
    assert!(
        seqs[0] > resume_at && seqs[1] > seqs[0],
        "cursors {seqs:?} after {resume_at}"
    );
    let resumed = store
        .events_after(resume_at, 100, None, &Scope::All)
        .await
        .unwrap();
    assert_eq!(resumed.iter().map(|e| e.seq).collect::<Vec<_>>(), seqs);
    let every: Vec<i64> = all_events(&store).await.iter().map(|e| e.seq).collect();
    let distinct: BTreeSet<i64> = every.iter().copied().collect();
    assert_eq!(distinct.len(), every.len(), "a cursor was used twice: {every:?}");
}

async fn a_subscriber_resuming_after_a_cursor_misses_nothing_under_concurrent_writers(store: Arc<dyn Store>) {
    const WRITERS: usize = 4;
    const COMMITS: usize = 10;
    let done = Arc::new(AtomicBool::new(false));
    // A subscriber reads on from the newest cursor it saw while writers commit; an event
    // that became visible below a cursor already passed would be missed for good.
    let subscriber = tokio::spawn({
        let store = store.clone();
        let done = done.clone();
        async move {
            let mut cursor = 0;
            let mut seen = Vec::new();
            loop {
                // Read before the page: once it says done, this page holds every commit.
                let finished = done.load(Ordering::SeqCst);
                let page = store.events_after(cursor, 1000, None, &Scope::All).await.unwrap();
                if let Some(last) = page.last() {
                    cursor = last.seq;
                }
                let empty = page.is_empty();
                seen.extend(page.into_iter().map(|e| e.seq));
                if finished && empty {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        }
    });
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for c in 0..COMMITS {
                    submit_one(&store, job("team-a", &format!("w{w}-c{c}"))).await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let seen = subscriber.await.unwrap();
    let every: Vec<i64> = all_events(&store).await.iter().map(|e| e.seq).collect();
    assert_eq!(every.len(), WRITERS * COMMITS);
    assert_eq!(
        seen, every,
        "the subscriber, resuming after each cursor it saw, did not see every event in order"
    );
}

async fn events_after_filters_by_job_and_scope(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, vec![job("team-a", "a"), job("team-b", "b")]).await;
    let (mut a, mut b) = (jobs.remove(0), jobs.remove(0));
    move_to(&store, &mut b, JobPhase::Running).await;
    move_to(&store, &mut a, JobPhase::Running).await;
    move_to(&store, &mut b, JobPhase::Cancelled).await;
    move_to(&store, &mut a, JobPhase::Cancelled).await;
    let every = all_events(&store).await;
    assert_eq!(every.len(), 6);
    assert!(every.windows(2).all(|w| w[0].seq < w[1].seq), "oldest first");
    let of = |id: &str| -> Vec<i64> { every.iter().filter(|e| e.job_id == id).map(|e| e.seq).collect() };
    let seqs = |events: Vec<JobEvent>| -> Vec<i64> { events.iter().map(|e| e.seq).collect() };

    let a_only = store
        .events_after(0, 100, Some(&a.id), &Scope::All)
        .await
        .unwrap();
    assert_eq!(seqs(a_only), of(&a.id));
    let team_a = store.events_after(0, 100, None, &team("team-a")).await.unwrap();
    assert_eq!(seqs(team_a), of(&a.id));
    // A page is full unless nothing more of the scope follows: team-b's events in between
    // take no room in team-a's page.
    let page = store.events_after(0, 2, None, &team("team-a")).await.unwrap();
    assert_eq!(seqs(page), of(&a.id)[..2]);
    let after = of(&a.id)[0];
    let rest = store
        .events_after(after, 100, None, &team("team-a"))
        .await
        .unwrap();
    assert_eq!(seqs(rest), of(&a.id)[1..]);
    let limited = store.events_after(0, 4, None, &Scope::All).await.unwrap();
    assert_eq!(
        seqs(limited),
        every.iter().take(4).map(|e| e.seq).collect::<Vec<_>>()
    );
    // Another namespace's job is nothing, even asked for by id.
    let hidden = store
        .events_after(0, 100, Some(&b.id), &team("team-a"))
        .await
        .unwrap();
    assert!(hidden.is_empty());
    let last = every.last().unwrap().seq;
    assert!(
        store
            .events_after(last, 100, None, &Scope::All)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn job_history_is_the_newest_events_oldest_first(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, vec![job("team-a", "a"), job("team-b", "b")]).await;
    let mut expected = vec![jobs[0].last_event_seq];
    for phase in [JobPhase::Running, JobPhase::Running, JobPhase::Cancelled] {
        expected.push(move_to(&store, &mut jobs[0], phase).await);
        move_to(&store, &mut jobs[1], JobPhase::Running).await;
    }
    let seqs = |events: Vec<JobEvent>| -> Vec<i64> { events.iter().map(|e| e.seq).collect() };
    let a = &jobs[0].id;
    assert_eq!(
        seqs(store.job_history(a, &Scope::All, 10).await.unwrap()),
        expected
    );
    assert_eq!(
        seqs(store.job_history(a, &Scope::All, 2).await.unwrap()),
        expected[2..]
    );
    assert_eq!(
        seqs(store.job_history(a, &team("team-a"), 10).await.unwrap()),
        expected
    );
    assert!(
        store
            .job_history(a, &team("team-b"), 10)
            .await
            .unwrap()
            .is_empty(),
        "a job outside the scope has no history"
    );
    assert!(
        store
            .job_history("no-such-job", &Scope::All, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// An attempt of index 0 named `name` that ended with `exit_code`.
fn failed_attempt(name: &str, exit_code: i32) -> JobAttempt {
    let mut attempt = JobAttempt::running(name.into(), 0, Some(now()));
    attempt.state = AttemptState::Failed;
    attempt.finished_at = Some(now());
    attempt.exit_code = Some(exit_code);
    attempt.cause = Some(FailureCause::Error);
    attempt.reason = Some("Error".into());
    attempt.message = Some(format!("{name} exited with code {exit_code}"));
    attempt.process_id = Some(4242);
    attempt
}

async fn attempts_and_the_events_of_their_ends_read_back_as_written(store: Arc<dyn Store>) {
    let mut job = submit_one(&store, job("team-a", "retried")).await;
    move_to(&store, &mut job, JobPhase::Running).await;
    // More attempts than a job keeps: the oldest go, counted; each end is an event of its
    // own, written in the same transaction as the job.
    let reported: Vec<JobAttempt> = (1..=MAX_ATTEMPTS as i32 + 3)
        .map(|n| failed_attempt(&format!("index-0-run-{n}"), n))
        .chain([JobAttempt::running("index-0-run-99".into(), 0, Some(now()))])
        .collect();
    let (ends, changed) = job.record_attempts(reported.clone());
    assert!(changed);
    assert_eq!(ends.len(), MAX_ATTEMPTS + 3);
    let mut tx = store.begin().await.expect("a write transaction");
    let mut seqs = Vec::new();
    for end in &ends {
        seqs.push(record(&mut *tx, &mut job, end).await);
    }
    tx.commit().await.expect("committing");
    assert_eq!(job.attempts.len(), MAX_ATTEMPTS);
    assert_eq!(job.attempts_omitted, 4);
    assert_eq!(job.attempts.last().map(|a| a.state), Some(AttemptState::Running));

    let stored = store.get_job(&job.id).await.unwrap().expect("the job");
    assert_eq!(stored.attempts, job.attempts);
    assert_eq!(stored.attempts_omitted, 4);
    let history = store.job_history(&job.id, &Scope::All, 100).await.unwrap();
    let ended: Vec<&JobEvent> = history
        .iter()
        .filter(|e| e.reason.as_deref() == Some("AttemptFailed"))
        .collect();
    assert_eq!(ended.len(), MAX_ATTEMPTS + 3);
    assert_eq!(ended.iter().map(|e| e.seq).collect::<Vec<_>>(), seqs);
    assert!(
        ended[0].message.as_deref().is_some_and(
            |m| m.starts_with("attempt 1 of index 0 (index-0-run-1) failed: exit code 1 (ERROR)")
        ),
        "{:?}",
        ended[0].message
    );
    assert_eq!(ended.last().unwrap().job.attempts, job.attempts);

    // A report of an attempt the job let go of is not taken back; a later one is numbered on.
    let (again, _) = job.record_attempts(vec![reported[0].clone()]);
    assert!(again.is_empty());
    assert!(job.attempts.iter().all(|a| a.name != "index-0-run-1"));
}
