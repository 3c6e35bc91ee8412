//! What the store counts: namespaces, the phase and submission statistics, the kept counts
//! following every insert and phase change, and a transaction's count of active jobs in a
//! namespace, its own inserts included.

use std::sync::Arc;

use chrono::Utc;
use jobgate::model::{Job, JobFilter, JobPhase, Scope};
use jobgate::store::{SCAN_BUDGET, Store};

use crate::support::{insert, job, move_in, move_to, submit, submit_one, team, varied_jobs};

backend_tests!(
    namespaces_are_distinct_sorted_scoped_and_limited,
    stats_count_phases_submissions_and_completions,
    counts_follow_every_insert_and_phase_change,
    active_in_namespace_counts_the_transactions_own_inserts,
);

async fn namespaces_are_distinct_sorted_scoped_and_limited(store: Arc<dyn Store>) {
    submit(
        &store,
        vec![
            job("team-c", "x"),
            job("team-a", "x"),
            job("team-b", "x"),
            job("team-a", "y"),
        ],
    )
    .await;
    assert_eq!(
        store.namespaces(10, &Scope::All).await.unwrap(),
        ["team-a", "team-b", "team-c"]
    );
    assert_eq!(
        store.namespaces(2, &Scope::All).await.unwrap(),
        ["team-a", "team-b"]
    );
    let scope = Scope::namespaces(["team-c", "team-a", "team-z"]);
    assert_eq!(store.namespaces(10, &scope).await.unwrap(), ["team-a", "team-c"]);
}

async fn stats_count_phases_submissions_and_completions(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "p1"),
            job("team-a", "p2"),
            job("team-a", "c"),
            job("team-b", "r"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[2], JobPhase::Cancelled).await;
    move_to(&store, &mut jobs[3], JobPhase::Running).await;
    // Buckets of an hour: whatever the clock, everything above falls in the last two.
    let (buckets, width) = (3, 3600);
    let all = store.stats(buckets, width, &Scope::All).await.unwrap();
    assert_eq!(all.cursor, store.last_event_seq().await.unwrap());
    assert_eq!(all.since % width, 0, "buckets are aligned to the epoch");
    assert!(all.since <= Utc::now().timestamp() - (buckets - 1) * width);
    let count = |s: &jobgate::store::StatsSnapshot, p| s.counts.get(&p).copied().unwrap_or(0);
    assert_eq!(count(&all, JobPhase::Pending), 2);
    assert_eq!(count(&all, JobPhase::Cancelled), 1);
    assert_eq!(count(&all, JobPhase::Running), 1);
    assert_eq!(count(&all, JobPhase::Succeeded), 0);
    assert!(all.submitted.iter().all(|(b, _)| (0..buckets).contains(b)));
    assert_eq!(all.submitted.iter().map(|(_, n)| n).sum::<i64>(), 4);
    let finished: Vec<(JobPhase, i64)> = all.finished.iter().map(|(_, p, n)| (*p, *n)).collect();
    assert_eq!(finished, [(JobPhase::Cancelled, 1)]);
    assert!(all.finished.iter().all(|(b, _, _)| (0..buckets).contains(b)));

    let b = store.stats(buckets, width, &team("team-b")).await.unwrap();
    assert_eq!(b.counts.values().sum::<i64>(), 1);
    assert_eq!(count(&b, JobPhase::Running), 1);
    assert_eq!(b.submitted.iter().map(|(_, n)| n).sum::<i64>(), 1);
    assert!(b.finished.is_empty(), "team-a's cancellation counted for team-b");
}

async fn counts_follow_every_insert_and_phase_change(store: Arc<dyn Store>) {
    let mut jobs = varied_jobs(&store).await;
    let check = |jobs: Vec<Job>, store: Arc<dyn Store>| async move {
        for scope in [
            Scope::All,
            team("team-b"),
            Scope::namespaces(["team-a", "team-c"]),
        ] {
            let stats = store.stats(1, 60, &scope).await.unwrap();
            for phase in JobPhase::ALL {
                let expected = jobs.iter().filter(|j| j.phase == phase && scope.sees(j)).count() as i64;
                assert_eq!(
                    stats.counts.get(&phase).copied().unwrap_or(0),
                    expected,
                    "{phase:?} in {scope:?}"
                );
                let page = store
                    .list_jobs(
                        &JobFilter {
                            phases: Some(vec![phase]),
                            ..JobFilter::default()
                        },
                        &scope,
                        1,
                        None,
                        SCAN_BUDGET,
                    )
                    .await
                    .unwrap();
                assert_eq!(
                    page.total_count, expected,
                    "total_count of {phase:?} in {scope:?}"
                );
            }
        }
        let mut tx = store.begin().await.unwrap();
        for ns in ["team-a", "team-b", "team-c"] {
            let active = jobs
                .iter()
                .filter(|j| j.spec.namespace == ns && !j.phase.is_terminal())
                .count() as i64;
            assert_eq!(tx.active_in_namespace(ns).await.unwrap(), active, "{ns}");
        }
    };
    check(jobs.clone(), store.clone()).await;
    // A dropped transaction's changes are not counted.
    let mut tx = store.begin().await.unwrap();
    insert(&mut *tx, &mut job("team-a", "dropped")).await;
    let mut moved = jobs[0].clone();
    move_in(&mut *tx, &mut moved, JobPhase::Cancelled).await;
    drop(tx);
    check(jobs.clone(), store.clone()).await;
    // Committed ones are.
    move_to(&store, &mut jobs[0], JobPhase::Cancelled).await;
    jobs.push(submit_one(&store, job("team-d", "new")).await);
    check(jobs.clone(), store.clone()).await;
    assert_eq!(
        store.namespaces(10, &Scope::All).await.unwrap(),
        ["team-a", "team-b", "team-c", "team-d"]
    );
}

async fn active_in_namespace_counts_the_transactions_own_inserts(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "pending"),
            job("team-a", "cancelled"),
            job("team-b", "running"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[1], JobPhase::Cancelled).await;
    move_to(&store, &mut jobs[2], JobPhase::Running).await;

    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.active_in_namespace("team-a").await.unwrap(), 1);
    assert_eq!(tx.active_in_namespace("team-b").await.unwrap(), 1);
    assert_eq!(tx.active_in_namespace("team-c").await.unwrap(), 0);
    insert(&mut *tx, &mut job("team-a", "new-1")).await;
    insert(&mut *tx, &mut job("team-a", "new-2")).await;
    assert_eq!(
        tx.active_in_namespace("team-a").await.unwrap(),
        3,
        "the transaction's own count"
    );
    assert_eq!(tx.active_in_namespace("team-b").await.unwrap(), 1);
    // A job this transaction finishes no longer counts.
    move_in(&mut *tx, &mut jobs[0], JobPhase::Cancelled).await;
    assert_eq!(tx.active_in_namespace("team-a").await.unwrap(), 2);
    drop(tx);

    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        tx.active_in_namespace("team-a").await.unwrap(),
        1,
        "a dropped transaction's jobs count"
    );
    tx.commit().await.unwrap();
}
