//! Schedules and their event log: a schedule reads back as written, pages within a scope,
//! changes only under the revision it was read at, records ticks forward only, and its event
//! log replays after a cursor within a scope, with one entry per job started.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use jobgate::model::{ConcurrencyPolicy, Schedule, ScheduleEvent, ScheduleEventKind, Scope, SubmitRequest};
use jobgate::store::{NotInserted, Store};

backend_tests!(
    a_schedule_reads_back_as_written_and_pages_within_a_scope,
    a_schedule_changes_only_under_its_revision_and_ticks_move_forward_only,
    schedule_events_replay_after_a_cursor_with_one_entry_per_job,
);

fn schedule(id: &str, namespace: &str, name: &str) -> Schedule {
    let at = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    Schedule {
        id: id.to_owned(),
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        cron: "30 2 * * *".into(),
        time_zone: "Europe/Berlin".into(),
        concurrency_policy: ConcurrencyPolicy::Forbid,
        starting_deadline_seconds: Some(300),
        suspended: false,
        job: SubmitRequest {
            command: Some(vec!["echo".into(), "hi".into()]),
            namespace: Some(namespace.to_owned()),
            ..SubmitRequest::default()
        },
        owner: "token:alice".into(),
        owner_name: "alice".into(),
        owner_scope: Scope::namespaces([namespace]),
        created_at: at,
        updated_at: at,
        revision: 1,
        last_tick: None,
        last_fired: None,
        blocked_reason: None,
    }
}

fn event(s: &Schedule, kind: ScheduleEventKind) -> ScheduleEvent {
    let mut e = ScheduleEvent::of(s, kind, Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 1).unwrap());
    e.schedule = Some(Box::new(s.clone()));
    e
}

async fn a_schedule_reads_back_as_written_and_pages_within_a_scope(store: Arc<dyn Store>) {
    let a = schedule("s-1", "team-a", "nightly");
    let b = schedule("s-2", "team-b", "nightly");
    store
        .insert_schedule(&a, &event(&a, ScheduleEventKind::Created), 0)
        .await
        .unwrap()
        .unwrap();
    store
        .insert_schedule(&b, &event(&b, ScheduleEventKind::Created), 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.schedule("s-1").await.unwrap(), Some(a.clone()));
    // The name is taken in team-a; team-a is full at one.
    let twin = schedule("s-3", "team-a", "nightly");
    assert_eq!(
        store
            .insert_schedule(&twin, &event(&twin, ScheduleEventKind::Created), 0)
            .await
            .unwrap(),
        Err(NotInserted::NameTaken)
    );
    let other = schedule("s-4", "team-a", "hourly");
    assert_eq!(
        store
            .insert_schedule(&other, &event(&other, ScheduleEventKind::Created), 1)
            .await
            .unwrap(),
        Err(NotInserted::Full)
    );
    let team_a = store
        .schedules(&Scope::namespaces(["team-a"]), None, 10)
        .await
        .unwrap();
    assert_eq!(team_a, vec![a.clone()]);
    let all = store.schedules(&Scope::All, None, 1).await.unwrap();
    assert_eq!(all.len(), 2, "a page reads one more than asked");
    let after = store.schedules(&Scope::All, Some("s-1"), 10).await.unwrap();
    assert_eq!(after, vec![b]);
    assert_eq!(store.all_schedules().await.unwrap().len(), 2);
}

async fn a_schedule_changes_only_under_its_revision_and_ticks_move_forward_only(store: Arc<dyn Store>) {
    let a = schedule("s-1", "team-a", "nightly");
    store
        .insert_schedule(&a, &event(&a, ScheduleEventKind::Created), 0)
        .await
        .unwrap()
        .unwrap();
    let mut paused = a.clone();
    paused.suspended = true;
    paused.revision = 2;
    let e = event(&paused, ScheduleEventKind::Paused);
    assert!(
        store.update_schedule(&paused, 7, &e).await.unwrap().is_none(),
        "a stale revision"
    );
    assert!(store.update_schedule(&paused, 1, &e).await.unwrap().is_some());
    assert!(store.schedule("s-1").await.unwrap().unwrap().suspended);

    let tick = Utc.with_ymd_and_hms(2026, 3, 2, 1, 30, 0).unwrap();
    assert!(
        store
            .schedule_ticked("s-1", tick, true, None, None)
            .await
            .unwrap()
    );
    assert!(
        !store
            .schedule_ticked("s-1", tick, true, None, None)
            .await
            .unwrap(),
        "a tick is handled once"
    );
    let earlier = tick - chrono::Duration::days(1);
    assert!(
        !store
            .schedule_ticked("s-1", earlier, false, None, None)
            .await
            .unwrap(),
        "never back"
    );
    let later = tick + chrono::Duration::days(1);
    assert!(
        store
            .schedule_ticked("s-1", later, false, Some("its owner is gone"), None)
            .await
            .unwrap()
    );
    let read = store.schedule("s-1").await.unwrap().unwrap();
    assert_eq!(read.last_tick, Some(later));
    assert_eq!(read.last_fired, Some(tick));
    assert_eq!(read.blocked_reason.as_deref(), Some("its owner is gone"));

    let gone = event(&read, ScheduleEventKind::Deleted);
    assert!(store.delete_schedule("s-1", &gone).await.unwrap().is_some());
    assert!(store.delete_schedule("s-1", &gone).await.unwrap().is_none());
    assert!(store.schedule("s-1").await.unwrap().is_none());
}

async fn schedule_events_replay_after_a_cursor_with_one_entry_per_job(store: Arc<dyn Store>) {
    let a = schedule("s-1", "team-a", "nightly");
    let b = schedule("s-2", "team-b", "nightly");
    store
        .insert_schedule(&a, &event(&a, ScheduleEventKind::Created), 0)
        .await
        .unwrap()
        .unwrap();
    store
        .insert_schedule(&b, &event(&b, ScheduleEventKind::Created), 0)
        .await
        .unwrap()
        .unwrap();
    let mut fired = ScheduleEvent::of(&a, ScheduleEventKind::Fired, Utc::now());
    fired.tick = Some(Utc.with_ymd_and_hms(2026, 3, 2, 1, 30, 0).unwrap());
    fired.job_id = Some("job-1".into());
    let seq = store.record_schedule_event(&fired).await.unwrap();
    assert!(seq.is_some());
    // The same job again (a tick fired again after a crash): recorded once.
    assert!(store.record_schedule_event(&fired).await.unwrap().is_none());
    let head = store.last_schedule_event_seq().await.unwrap();
    assert_eq!(Some(head), seq);

    let team_a = store
        .schedule_events(&Scope::namespaces(["team-a"]), 0, 100)
        .await
        .unwrap();
    let kinds: Vec<_> = team_a.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![ScheduleEventKind::Created, ScheduleEventKind::Fired]);
    assert_eq!(team_a[0].schedule.as_deref(), Some(&a));
    assert_eq!(team_a[1].job_id.as_deref(), Some("job-1"));
    assert_eq!(team_a[1].tick, fired.tick);
    let after_first = store
        .schedule_events(&Scope::All, team_a[0].seq, 100)
        .await
        .unwrap();
    assert_eq!(after_first.len(), 2, "b's creation and a's run: {after_first:?}");
    let runs = store.schedule_runs("s-1", 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].job_id.as_deref(), Some("job-1"));
}
