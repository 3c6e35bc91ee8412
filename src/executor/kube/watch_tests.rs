//! The one watch loop fed plain sequences of watcher events and failures.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use futures::stream;
use k8s_openapi::api::batch::v1::Job as K8sJob;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

use super::{Handler, WatcherHealth, follow_events};
use crate::executor::kube::tracking::{Action, BatchJobs, Tracked, Tracker};

/// Records what the loop hands over, and stops at a failure when told to.
#[derive(Default)]
struct Recorder {
    seen: Vec<String>,
    /// Stop at the first failure.
    stop_on_failure: bool,
}

impl Handler<u32> for Recorder {
    async fn event(&mut self, event: Event<u32>) {
        self.seen.push(match event {
            Event::Init => "init".to_owned(),
            Event::InitApply(n) => format!("listed {n}"),
            Event::InitDone => "done".to_owned(),
            Event::Apply(n) => format!("applied {n}"),
            Event::Delete(n) => format!("deleted {n}"),
        });
    }

    fn failed(&mut self, _: &watcher::Error) -> ControlFlow<()> {
        self.seen.push("failed".to_owned());
        if self.stop_on_failure {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

fn health() -> Arc<WatcherHealth> {
    WatcherHealth::new("test".to_owned(), &crate::metrics::Metrics::new())
}

fn listed(health: &WatcherHealth) -> bool {
    health.listed.load(Ordering::Relaxed)
}

fn healthy(health: &WatcherHealth) -> bool {
    health.healthy.load(Ordering::Relaxed)
}

#[tokio::test]
async fn every_event_is_handed_over_in_order_and_health_follows_the_stream() {
    let health = health();
    let mut recorder = Recorder::default();
    let events = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(1)),
        Ok(Event::InitDone),
        Ok(Event::Apply(1)),
        Err(watcher::Error::NoResourceVersion),
    ];

    follow_events(
        stream::iter(events),
        Some(&health),
        &CancellationToken::new(),
        &mut recorder,
    )
    .await;

    assert_eq!(recorder.seen, ["init", "listed 1", "done", "applied 1", "failed"]);
    assert!(listed(&health), "the first list is done");
    assert!(!healthy(&health), "the last item was a failure");
}

#[tokio::test]
async fn a_watch_is_not_listed_before_its_first_init_done_and_recovers_after_a_failure() {
    let health = health();
    let mut recorder = Recorder::default();
    let events = vec![Err(watcher::Error::NoResourceVersion), Ok(Event::Init)];
    follow_events(
        stream::iter(events),
        Some(&health),
        &CancellationToken::new(),
        &mut recorder,
    )
    .await;
    assert!(!listed(&health));
    // An Init alone proves nothing: the list request has not been answered yet.
    assert!(!healthy(&health));

    // The list after the failure is answered.
    let events = vec![Ok(Event::InitApply(2)), Ok(Event::InitDone)];
    follow_events(
        stream::iter(events),
        Some(&health),
        &CancellationToken::new(),
        &mut recorder,
    )
    .await;
    assert!(listed(&health));
    assert!(healthy(&health));
}

#[tokio::test]
async fn a_handler_may_stop_the_loop_and_shutdown_ends_it() {
    let mut recorder = Recorder {
        stop_on_failure: true,
        ..Recorder::default()
    };
    let events = vec![
        Ok(Event::Apply(1)),
        Err(watcher::Error::NoResourceVersion),
        Ok(Event::Apply(2)),
    ];
    follow_events(
        stream::iter(events),
        None,
        &CancellationToken::new(),
        &mut recorder,
    )
    .await;
    assert_eq!(recorder.seen, ["applied 1", "failed"]);

    // Cancelled: nothing more is handed over, though the stream never ends.
    let shutdown = CancellationToken::new();
    shutdown.cancel();
    let mut recorder = Recorder::default();
    follow_events(
        stream::repeat_with(|| Ok(Event::Apply(3))),
        None,
        &shutdown,
        &mut recorder,
    )
    .await;
    assert!(recorder.seen.is_empty(), "{:?}", recorder.seen);
}

/// The tracking behind the loop, as a Job watcher runs it, with the actions kept.
struct Tracking {
    tracked: DashMap<String, Tracked>,
    tracker: Tracker<BatchJobs>,
    actions: Vec<String>,
}

impl Handler<K8sJob> for Tracking {
    async fn event(&mut self, event: Event<K8sJob>) {
        for action in self.tracker.apply(&self.tracked, event) {
            self.actions.push(match action {
                Action::Vanished { job_id, how } => format!("vanished {job_id} {how:?}"),
                Action::Report { job_id, .. } => format!("report {job_id}"),
                other => format!("{other:?}"),
            });
        }
    }
}

#[tokio::test]
async fn a_failed_watch_that_relists_reports_what_vanished_meanwhile() {
    let mut tracking = Tracking {
        tracked: DashMap::new(),
        tracker: Tracker::new(BatchJobs, None, Arc::new(AtomicU64::new(0))),
        actions: Vec::new(),
    };
    tracking.tracked.insert(
        "a".to_owned(),
        Tracked::new("ns".to_owned(), 1, Some(0), None, None, None),
    );
    let job: K8sJob = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "jobgate-a", "namespace": "ns", "resourceVersion": "3",
                     "labels": {"jobgate.io/job-id": "a"}},
        "status": {"active": 1},
    }))
    .expect("a well-formed Job");
    let events = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(job)),
        Ok(Event::InitDone),
        Err(watcher::Error::NoResourceVersion),
        // 410 Gone: the watcher lists again, and the Job is not in it.
        Ok(Event::Init),
        Ok(Event::InitDone),
    ];

    let health = health();
    follow_events(
        stream::iter(events),
        Some(&health),
        &CancellationToken::new(),
        &mut tracking,
    )
    .await;

    assert_eq!(tracking.actions, ["report a", "vanished a Unlisted"]);
    assert!(healthy(&health));
}
