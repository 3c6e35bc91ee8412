//! Retention: a rule deletes the finished jobs it covers and raises their namespaces'
//! retention horizons (a replay from below one is refused, saying where to resume), in batches
//! that go on from where the last stopped.

use std::sync::Arc;

use chrono::Duration;
use jobgate::model::{JobPhase, Scope};
use jobgate::store::{ExpiryRule, RuleNamespaces, Store, StoreError};

use crate::support::{CAP, all_events, job, log_line, move_to, now, plain_append, stored, submit, team};

backend_tests!(
    retention_deletes_the_finished_jobs_a_rule_covers_and_raises_their_horizons,
    retention_walks_in_batches_from_where_it_stopped,
);

/// A rule that expires every job of `namespaces` finished so far.
fn expire_now(namespaces: RuleNamespaces) -> ExpiryRule {
    ExpiryRule {
        before: now() + Duration::seconds(5),
        namespaces,
    }
}

async fn retention_deletes_the_finished_jobs_a_rule_covers_and_raises_their_horizons(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "a-done"),
            job("team-a", "a-failed"),
            job("team-b", "b-done"),
            job("team-a", "a-running"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[0], JobPhase::Succeeded).await;
    move_to(&store, &mut jobs[1], JobPhase::Failed).await;
    move_to(&store, &mut jobs[2], JobPhase::Succeeded).await;
    move_to(&store, &mut jobs[3], JobPhase::Running).await;
    // A dependency edge to a finished job: it goes with that job, its dependent stays.
    let mut tx = store.begin().await.unwrap();
    tx.add_dependencies(&jobs[3].id, std::slice::from_ref(&jobs[0].id))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Archived output of a job that goes, and of one that stays.
    for job in [&jobs[0], &jobs[2]] {
        store
            .append_logs(&[plain_append(&job.id, vec![log_line(None, "out".into())])], CAP)
            .await
            .unwrap();
    }
    let expired_events: Vec<i64> = all_events(&store)
        .await
        .iter()
        .filter(|e| e.job_id == jobs[0].id || e.job_id == jobs[1].id)
        .map(|e| e.seq)
        .collect();
    let newest_expired = *expired_events.iter().max().unwrap();

    let batch = store
        .expire_jobs(
            &expire_now(RuleNamespaces::AllBut(vec!["team-b".into()])),
            None,
            100,
        )
        .await
        .expect("a retention batch");
    assert_eq!(batch.scanned, 3, "every finished job is looked at: {batch:?}");
    assert_eq!(
        (batch.jobs, batch.events),
        (2, 4),
        "team-a's two finished jobs, two events each"
    );
    assert_eq!(batch.newest_deleted, newest_expired);
    assert!(stored(&store, &jobs[0].id).await.is_none());
    assert!(stored(&store, &jobs[1].id).await.is_none());
    assert!(
        stored(&store, &jobs[2].id).await.is_some(),
        "team-b is not this rule's"
    );
    assert_eq!(
        store.log_archive(&jobs[0].id).await.unwrap(),
        None,
        "its output went with it"
    );
    assert_eq!(
        store.log_archive(&jobs[2].id).await.unwrap().map(|a| a.lines),
        Some(1)
    );
    let running = stored(&store, &jobs[3].id)
        .await
        .expect("an unfinished job is never deleted");
    assert_eq!(running.phase, JobPhase::Running);
    let mut tx = store.begin().await.unwrap();
    assert!(
        tx.dependents(&jobs[0].id).await.unwrap().is_empty(),
        "the edge went with its job"
    );
    tx.commit().await.unwrap();

    // A replay from before what was deleted has gaps: refused, saying where to resume.
    assert_eq!(
        store.retention_horizon(&Scope::All).await.unwrap(),
        newest_expired
    );
    assert_eq!(
        store.retention_horizon(&team("team-a")).await.unwrap(),
        newest_expired
    );
    assert_eq!(store.retention_horizon(&team("team-b")).await.unwrap(), 0);
    match store.events_after(0, 100, None, &Scope::All).await {
        Err(StoreError::CursorExpired { after: 0, oldest }) => assert_eq!(oldest, newest_expired),
        other => panic!("expected CursorExpired, got {other:?}"),
    }
    assert!(matches!(
        store
            .events_after(newest_expired - 1, 100, None, &team("team-a"))
            .await,
        Err(StoreError::CursorExpired { .. })
    ));
    // From the horizon on, nothing is missing; nothing of team-b was deleted, so its own
    // replay from the start is whole; one job's replay needs no horizon (its events go with it).
    let after = store
        .events_after(newest_expired, 100, None, &Scope::All)
        .await
        .expect("a replay from the horizon");
    assert!(after.iter().all(|e| e.seq > newest_expired));
    assert!(after.iter().any(|e| e.job_id == jobs[3].id));
    let team_b = store
        .events_after(0, 100, None, &team("team-b"))
        .await
        .expect("team-b lost nothing");
    assert_eq!(team_b.len(), 2);
    let own = store
        .events_after(0, 100, Some(&jobs[3].id), &Scope::All)
        .await
        .expect("a job's own replay");
    assert_eq!(own.len(), 2);

    // A walk from where the last one stopped finds nothing more; team-b's own rule takes its job.
    let again = store
        .expire_jobs(
            &expire_now(RuleNamespaces::AllBut(vec!["team-b".into()])),
            batch.position,
            100,
        )
        .await
        .unwrap();
    assert_eq!((again.scanned, again.jobs), (0, 0), "{again:?}");
    let b = store
        .expire_jobs(&expire_now(RuleNamespaces::Only("team-b".into())), None, 100)
        .await
        .unwrap();
    assert_eq!(b.jobs, 1);
    assert!(stored(&store, &jobs[2].id).await.is_none());
    assert!(store.retention_horizon(&team("team-b")).await.unwrap() > 0);
    // Jobs that finish after a rule's time are not its.
    let old = ExpiryRule {
        before: now() - Duration::hours(1),
        namespaces: RuleNamespaces::AllBut(Vec::new()),
    };
    let none = store.expire_jobs(&old, None, 100).await.unwrap();
    assert_eq!((none.scanned, none.jobs), (0, 0));
}

async fn retention_walks_in_batches_from_where_it_stopped(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, (0..5).map(|i| job("team-c", &format!("c-{i}"))).collect()).await;
    for job in &mut jobs {
        move_to(&store, job, JobPhase::Succeeded).await;
    }
    let rule = expire_now(RuleNamespaces::AllBut(Vec::new()));
    let first = store.expire_jobs(&rule, None, 2).await.unwrap();
    assert_eq!((first.scanned, first.jobs), (2, 2));
    let second = store.expire_jobs(&rule, first.position, 2).await.unwrap();
    assert_eq!((second.scanned, second.jobs), (2, 2));
    let third = store.expire_jobs(&rule, second.position, 2).await.unwrap();
    assert_eq!((third.scanned, third.jobs), (1, 1));
    // Oldest finished first: the jobs went in the order they finished.
    assert!(first.newest_deleted < second.newest_deleted && second.newest_deleted < third.newest_deleted);
    for job in &jobs {
        assert!(stored(&store, &job.id).await.is_none());
    }
}
