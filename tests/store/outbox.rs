//! What the executor reads back: the launch outbox (accepted jobs until launched, each shard
//! only its own), held jobs and their dependents, the unfinished jobs recovery restarts, and
//! pending cancellations until done.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::Duration;
use jobgate::model::{JobPhase, SHARD_COUNT, ShardSet, shard_of};
use jobgate::store::Store;

use crate::support::{ids, insert, job, move_in, move_to, now, submit};

backend_tests!(
    the_launch_outbox_holds_accepted_jobs_until_launched,
    held_jobs_wait_for_release_and_dependents_are_recorded,
    unfinished_jobs_are_the_pending_and_running_ones,
    outboxes_hand_each_shard_only_its_own_jobs,
    pending_cancellations_last_until_done,
);

async fn the_launch_outbox_holds_accepted_jobs_until_launched(store: Arc<dyn Store>) {
    let jobs = submit(
        &store,
        vec![job("team-a", "one"), job("team-a", "two"), job("team-b", "three")],
    )
    .await;
    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        ids(&jobs),
        "oldest first"
    );
    assert_eq!(
        ids(&store.unlaunched_jobs(2, None).await.unwrap()),
        ids(&jobs[..2])
    );

    let mut tx = store.begin().await.unwrap();
    tx.mark_launched(&jobs[1].id).await.unwrap();
    tx.commit().await.unwrap();
    let left = store.unlaunched_jobs(10, None).await.unwrap();
    assert_eq!(ids(&left), [jobs[0].id.as_str(), jobs[2].id.as_str()]);
    // Releasing a job that was never held does not put a launched one back (it would run
    // twice).
    let mut tx = store.begin().await.unwrap();
    tx.release(&jobs[1].id).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(ids(&store.unlaunched_jobs(10, None).await.unwrap()), ids(&left));
}

async fn held_jobs_wait_for_release_and_dependents_are_recorded(store: Arc<dyn Store>) {
    let deps = submit(&store, vec![job("team-a", "dep-1"), job("team-a", "dep-2")]).await;
    let mut tx = store.begin().await.unwrap();
    let mut waiting = job("team-a", "waiting");
    insert(&mut *tx, &mut waiting).await;
    tx.hold(&waiting.id, std::slice::from_ref(&deps[0].id))
        .await
        .unwrap();
    tx.add_dependencies(&waiting.id, std::slice::from_ref(&deps[1].id))
        .await
        .unwrap();
    // Recording an edge twice is harmless.
    tx.add_dependencies(&waiting.id, std::slice::from_ref(&deps[1].id))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        ids(&deps),
        "a held job is out of the outbox"
    );
    let unfinished = store.unfinished_jobs().await.unwrap();
    let held = unfinished
        .iter()
        .find(|r| r.job.id == waiting.id)
        .expect("a held job is unfinished");
    assert!(!held.launched, "a held job was never handed to the executor");
    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.dependents(&deps[0].id).await.unwrap(), [waiting.id.clone()]);
    assert_eq!(tx.dependents(&deps[1].id).await.unwrap(), [waiting.id.clone()]);
    assert!(tx.dependents(&waiting.id).await.unwrap().is_empty());
    tx.release(&waiting.id).await.unwrap();
    tx.commit().await.unwrap();
    let outbox = store.unlaunched_jobs(10, None).await.unwrap();
    assert_eq!(
        ids(&outbox),
        [deps[0].id.as_str(), deps[1].id.as_str(), waiting.id.as_str()]
    );

    // Several dependents of one job, by id.
    let mut more = submit(&store, vec![job("team-a", "m1"), job("team-a", "m2")]).await;
    let mut tx = store.begin().await.unwrap();
    for m in &more {
        tx.add_dependencies(&m.id, std::slice::from_ref(&deps[0].id))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    more.push(waiting);
    let mut expected: Vec<String> = more.iter().map(|j| j.id.clone()).collect();
    expected.sort();
    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.dependents(&deps[0].id).await.unwrap(), expected);
    tx.commit().await.unwrap();
}

async fn unfinished_jobs_are_the_pending_and_running_ones(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "pending"),
            job("team-a", "running"),
            job("team-b", "cancelled"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[1], JobPhase::Running).await;
    move_to(&store, &mut jobs[2], JobPhase::Cancelled).await;
    let mut tx = store.begin().await.unwrap();
    tx.mark_launched(&jobs[1].id).await.unwrap();
    tx.commit().await.unwrap();

    let unfinished = store.unfinished_jobs().await.unwrap();
    let seen: Vec<(&str, JobPhase, bool)> = unfinished
        .iter()
        .map(|r| (r.job.id.as_str(), r.job.phase, r.launched))
        .collect();
    assert_eq!(
        seen,
        [
            (jobs[0].id.as_str(), JobPhase::Pending, false),
            (jobs[1].id.as_str(), JobPhase::Running, true),
        ],
        "oldest first, terminal jobs left out"
    );
    assert_eq!(unfinished[1].job, jobs[1], "the job as last saved");
}

/// The store's SQL puts every job in the shard `shard_of` computes: a replica reading its
/// shards' outboxes gets exactly its jobs, and the shards together get them all, once.
async fn outboxes_hand_each_shard_only_its_own_jobs(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        (0..200).map(|i| job("team-a", &format!("j{i}"))).collect(),
    )
    .await;
    // Upper-case hex digits (an id written by hand) map as their lower-case selves.
    let mut upper = job("team-a", "upper");
    upper.id = upper.id.to_uppercase();
    jobs.extend(submit(&store, vec![upper]).await);
    let mut tx = store.begin().await.unwrap();
    for j in &mut jobs {
        move_in(&mut *tx, j, JobPhase::Cancelled).await;
        tx.request_cancellation(&j.id, now()).await.unwrap();
    }
    tx.commit().await.unwrap();
    let everything: BTreeSet<String> = jobs.iter().map(|j| j.id.clone()).collect();
    let mut launched_union = BTreeSet::new();
    let mut cancelled_union = BTreeSet::new();
    // Four replicas' worth of shards: 0, 4, 8… for the first, 1, 5, 9… for the next.
    for first in 0..4 {
        let shards: ShardSet = (first..SHARD_COUNT).step_by(4).collect();
        let unlaunched = store.unlaunched_jobs(1000, Some(shards)).await.unwrap();
        let cancelled = store.pending_cancellations(1000, Some(shards)).await.unwrap();
        for j in unlaunched.iter().chain(&cancelled) {
            assert!(
                shards.holds(&j.id),
                "{} (shard {}) is not in {}",
                j.id,
                shard_of(&j.id),
                shards.to_list()
            );
        }
        assert!(
            !unlaunched.is_empty(),
            "200 random ids leave no quarter of the shards empty"
        );
        for j in unlaunched {
            assert!(launched_union.insert(j.id), "a job in two sets of shards");
        }
        cancelled_union.extend(cancelled.into_iter().map(|j| j.id));
    }
    assert_eq!(launched_union, everything);
    assert_eq!(cancelled_union, everything);
    assert!(
        store
            .unlaunched_jobs(1000, Some(ShardSet::NONE))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.unlaunched_jobs(1000, None).await.unwrap().len(),
        everything.len()
    );
}

async fn pending_cancellations_last_until_done(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![job("team-a", "one"), job("team-a", "two"), job("team-a", "three")],
    )
    .await;
    let earlier = now() - Duration::seconds(10);
    let mut tx = store.begin().await.unwrap();
    move_in(&mut *tx, &mut jobs[0], JobPhase::Cancelled).await;
    tx.request_cancellation(&jobs[0].id, now()).await.unwrap();
    move_in(&mut *tx, &mut jobs[1], JobPhase::Cancelled).await;
    tx.request_cancellation(&jobs[1].id, earlier).await.unwrap();
    // Asked twice (a retried batch, say): still one pending cancellation.
    tx.request_cancellation(&jobs[1].id, earlier).await.unwrap();
    // Not visible until committed.
    assert!(store.pending_cancellations(10, None).await.unwrap().is_empty());
    tx.commit().await.unwrap();

    let pending = store.pending_cancellations(10, None).await.unwrap();
    assert_eq!(
        ids(&pending),
        [jobs[1].id.as_str(), jobs[0].id.as_str()],
        "oldest request first"
    );
    assert_eq!(pending[0], jobs[1], "the job as saved, cancelled");
    assert_eq!(
        ids(&store.pending_cancellations(1, None).await.unwrap()),
        [jobs[1].id.as_str()]
    );

    let mut tx = store.begin().await.unwrap();
    tx.cancellation_done(&jobs[1].id).await.unwrap();
    // Done for a job with nothing pending is harmless.
    tx.cancellation_done(&jobs[2].id).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        ids(&store.pending_cancellations(10, None).await.unwrap()),
        [jobs[0].id.as_str()]
    );
}
