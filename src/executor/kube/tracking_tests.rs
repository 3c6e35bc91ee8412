//! The tracking state machine fed plain watcher event sequences, as the API server would
//! send them: no client, no server, no clock.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use dashmap::DashMap;
use k8s_openapi::api::batch::v1::Job as K8sJob;
use kube::api::{DynamicObject, GroupVersionKind};
use kube::runtime::watcher::Event;
use serde_json::json;

use super::{Action, BatchJobs, Follow, KindObjects, Tracked, Tracker};
use crate::executor::kube::kinds::{Decoding, Kind};
use crate::model::{JobPhase, MappedPhase};
use crate::templates::TemplateSet;

/// A batch Job of job `id` at resourceVersion `rv`, in namespace `ns`, with `status`.
fn batch_job(id: &str, ns: &str, rv: u64, status: serde_json::Value) -> K8sJob {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": format!("jobgate-{id}"),
            "namespace": ns,
            "resourceVersion": rv.to_string(),
            "labels": {"app.kubernetes.io/managed-by": "jobgate", "jobgate.io/job-id": id},
        },
        "status": status,
    }))
    .expect("a well-formed Job")
}

fn running(active: i32) -> serde_json::Value {
    json!({"active": active, "ready": active})
}

fn condition(type_: &str) -> serde_json::Value {
    json!({"type": type_, "status": "True"})
}

/// A job of the `container` template known to exist since list epoch `epoch` (`None`: being
/// created).
fn batch_record(ns: &str, epoch: Option<u64>) -> Tracked {
    Tracked::new(ns.to_owned(), 1, epoch, None, None, None)
}

/// What an action says, without the objects it carries.
fn summary<K>(action: &Action<K>) -> String {
    match action {
        Action::Report { job_id, status } => {
            let phase = status
                .mapped
                .as_ref()
                .map(|m| format!(" {:?}", m.phase))
                .unwrap_or_default();
            format!("report {job_id} active={}{phase}", status.active)
        }
        Action::Finish { job_id, status, .. } => {
            let phase = status
                .mapped
                .as_ref()
                .map(|m| format!(" {:?}", m.phase))
                .unwrap_or_default();
            format!("finish {job_id}{phase}")
        }
        Action::Settled { job_id } => format!("settled {job_id}"),
        Action::Vanished { job_id, how } => format!("vanished {job_id} {how:?}"),
        Action::Untracked { .. } => "untracked".to_owned(),
    }
}

/// Feeds `events` to `tracker` in order, and sums up every action, sorted within an event
/// (a list's vanished jobs come in no particular order).
fn run<F: Follow>(
    tracker: &mut Tracker<F>,
    tracked: &DashMap<String, Tracked>,
    events: Vec<Event<F::Object>>,
) -> Vec<String> {
    let mut all = Vec::new();
    for event in events {
        let mut these: Vec<String> = tracker.apply(tracked, event).iter().map(summary).collect();
        these.sort();
        all.extend(these);
    }
    all
}

fn jobs_tracker(scope: Option<&str>) -> (Tracker<BatchJobs>, Arc<AtomicU64>) {
    let epochs = Arc::new(AtomicU64::new(0));
    (
        Tracker::new(BatchJobs, scope.map(str::to_owned), epochs.clone()),
        epochs,
    )
}

#[test]
fn a_relist_reports_the_tracked_jobs_whose_objects_vanished_and_only_those() {
    let tracked = DashMap::new();
    for id in ["listed", "gone-1", "gone-2"] {
        tracked.insert(id.to_owned(), batch_record("ns", Some(0)));
    }
    // Still being created, or created after the list began: the list need not show them.
    tracked.insert("creating".to_owned(), batch_record("ns", None));
    tracked.insert("newer".to_owned(), batch_record("ns", Some(1)));
    // Another namespace's watcher lists it.
    tracked.insert("elsewhere".to_owned(), batch_record("other", Some(0)));
    let (mut tracker, epochs) = jobs_tracker(Some("ns"));

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitApply(batch_job("listed", "ns", 10, running(1))),
            Event::InitDone,
        ],
    );

    assert_eq!(
        actions,
        [
            "report listed active=1",
            "vanished gone-1 Unlisted",
            "vanished gone-2 Unlisted"
        ]
    );
    assert_eq!(epochs.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(tracked.get("gone-1").is_some_and(|t| t.finishing));
    for id in ["listed", "creating", "newer", "elsewhere"] {
        assert!(
            tracked.get(id).is_some_and(|t| !t.finishing),
            "{id} is not finishing"
        );
    }
    // Marked finishing, a vanished job is reported once, whatever follows; the next list
    // must show every job confirmed before it began.
    let again = run(&mut tracker, &tracked, vec![Event::Init, Event::InitDone]);
    assert_eq!(again, ["vanished listed Unlisted", "vanished newer Unlisted"]);
}

#[test]
fn events_older_than_the_newest_applied_are_ignored() {
    let tracked = DashMap::new();
    tracked.insert("a".to_owned(), batch_record("ns", Some(0)));
    let (mut tracker, _) = jobs_tracker(None);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Apply(batch_job("a", "ns", 5, running(2))),
            // Older, though different: never move backward.
            Event::Apply(batch_job("a", "ns", 4, running(1))),
            // The same version again (a re-list, a resent event).
            Event::Apply(batch_job("a", "ns", 5, running(3))),
            // Older, and decided: still ignored.
            Event::Apply(batch_job(
                "a",
                "ns",
                3,
                json!({"conditions": [condition("Complete")]}),
            )),
            Event::Apply(batch_job("a", "ns", 7, running(1))),
        ],
    );

    assert_eq!(actions, ["report a active=2", "report a active=1"]);
    assert_eq!(tracked.get("a").map(|t| t.last_rv), Some(7));
}

#[test]
fn an_unchanged_status_is_reported_once() {
    let tracked = DashMap::new();
    tracked.insert("a".to_owned(), batch_record("ns", Some(0)));
    let (mut tracker, _) = jobs_tracker(None);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Apply(batch_job("a", "ns", 5, running(1))),
            Event::Apply(batch_job("a", "ns", 6, running(1))),
        ],
    );

    assert_eq!(actions, ["report a active=1"]);
}

#[test]
fn a_deleted_unfinished_job_vanishes_once_and_a_deleted_decided_one_finishes() {
    let tracked = DashMap::new();
    tracked.insert("unfinished".to_owned(), batch_record("ns", Some(0)));
    tracked.insert("decided".to_owned(), batch_record("ns", Some(0)));
    let (mut tracker, _) = jobs_tracker(None);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Apply(batch_job("unfinished", "ns", 5, running(1))),
            Event::Delete(batch_job("unfinished", "ns", 6, running(1))),
            // Its deletion seen again (after a restart of the watch): reported once.
            Event::Delete(batch_job("unfinished", "ns", 6, running(1))),
            Event::Delete(batch_job(
                "decided",
                "ns",
                9,
                json!({"conditions": [condition("Failed")]}),
            )),
            // Not ours to track (finished, or cancelled): nothing to say.
            Event::Delete(batch_job("untracked", "ns", 9, running(1))),
        ],
    );

    assert_eq!(
        actions,
        [
            "report unfinished active=1",
            "vanished unfinished Deleted",
            "finish decided"
        ]
    );
    assert!(tracked.get("decided").is_some_and(|t| t.settled.is_some()));
}

#[test]
fn a_410_restart_relists_and_a_job_confirmed_after_the_first_list_must_be_in_the_second() {
    let tracked = DashMap::new();
    tracked.insert("a".to_owned(), batch_record("ns", Some(0)));
    let (mut tracker, epochs) = jobs_tracker(None);

    let first = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitApply(batch_job("a", "ns", 10, running(1))),
            Event::InitDone,
        ],
    );
    assert_eq!(first, ["report a active=1"]);

    // Launched while the watch ran: the launcher confirms it at the current epoch.
    let confirmed = epochs.load(std::sync::atomic::Ordering::SeqCst);
    tracked.insert("b".to_owned(), batch_record("ns", Some(confirmed)));
    let watched = run(
        &mut tracker,
        &tracked,
        vec![Event::Apply(batch_job("b", "ns", 11, running(1)))],
    );
    assert_eq!(watched, ["report b active=1"]);

    // 410 Gone: kube-rs' watcher lists again from scratch. Both were deleted meanwhile;
    // `a` changed before it went, at a version this watcher never saw.
    let relisted = run(&mut tracker, &tracked, vec![Event::Init, Event::InitDone]);
    assert_eq!(relisted, ["vanished a Unlisted", "vanished b Unlisted"]);
}

#[test]
fn a_relist_that_shows_a_job_keeps_it_and_applies_its_newer_status() {
    let tracked = DashMap::new();
    tracked.insert("a".to_owned(), batch_record("ns", Some(0)));
    let (mut tracker, _) = jobs_tracker(None);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitApply(batch_job("a", "ns", 10, running(1))),
            Event::InitDone,
            Event::Init,
            Event::InitApply(batch_job("a", "ns", 10, running(1))),
            Event::InitDone,
            Event::Init,
            Event::InitApply(batch_job("a", "ns", 20, running(2))),
            Event::InitDone,
        ],
    );

    assert_eq!(actions, ["report a active=1", "report a active=2"]);
}

#[test]
fn a_finishing_batch_job_settles_on_its_final_condition() {
    let tracked = DashMap::new();
    tracked.insert("a".to_owned(), batch_record("ns", Some(0)));
    let (mut tracker, _) = jobs_tracker(None);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Apply(batch_job(
                "a",
                "ns",
                5,
                json!({"conditions": [condition("SuccessCriteriaMet")]}),
            )),
            // Not decided: nothing for a finishing job.
            Event::Apply(batch_job("a", "ns", 6, running(0))),
            Event::Apply(batch_job(
                "a",
                "ns",
                7,
                json!({"succeeded": 1, "conditions": [condition("SuccessCriteriaMet"), condition("Complete")]}),
            )),
            // Its deletion by a TTL while the result is captured: still finishing.
            Event::Delete(batch_job(
                "a",
                "ns",
                8,
                json!({"conditions": [condition("Complete")]}),
            )),
        ],
    );

    assert_eq!(actions, ["finish a", "settled a"]);
    let settled = tracked.get("a").and_then(|t| t.settled.clone());
    assert_eq!(settled.map(|s| s.succeeded), Some(1));
}

/// The pytorchjob template's kind, and a record of a job of it.
fn pytorch() -> (Arc<Kind>, impl Fn(Option<u64>) -> Tracked) {
    let templates = TemplateSet::load(None).expect("the built-in templates load");
    let template = templates.get("pytorchjob").expect("a built-in").clone();
    let kind = Kind::new(GroupVersionKind::gvk("kubeflow.org", "v1", "PyTorchJob"));
    let of_kind = kind.clone();
    let record = move |epoch| {
        let decoding = Decoding {
            template: template.clone(),
            kind: of_kind.clone(),
            mapped: MappedPhase::default(),
        };
        Tracked::new("ns".to_owned(), 1, epoch, Some(decoding), None, None)
    };
    (kind, record)
}

/// A PyTorchJob of job `id` at `rv` whose condition `condition` is true.
fn pytorch_job(id: &str, rv: u64, condition: Option<&str>) -> DynamicObject {
    let conditions: Vec<_> = condition.into_iter().map(self::condition).collect();
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": format!("jobgate-{id}"),
            "namespace": "ns",
            "resourceVersion": rv.to_string(),
            "labels": {"app.kubernetes.io/managed-by": "jobgate", "jobgate.io/job-id": id},
        },
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
        "status": {"conditions": conditions},
    }))
    .expect("a well-formed object")
}

#[test]
fn workload_objects_go_through_the_same_machine() {
    let (kind, record) = pytorch();
    let tracked = DashMap::new();
    tracked.insert("w".to_owned(), record(Some(0)));
    tracked.insert("gone".to_owned(), record(Some(0)));
    tracked.insert("deleted".to_owned(), record(Some(0)));
    // A batch Job's job: not this watcher's, listed or not.
    tracked.insert("batch".to_owned(), batch_record("ns", Some(0)));
    let epochs = Arc::new(AtomicU64::new(0));
    let mut tracker = Tracker::new(KindObjects(kind), None, epochs);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitApply(pytorch_job("w", 10, Some("Running"))),
            Event::InitApply(pytorch_job("deleted", 10, None)),
            // Finished and untracked: only retention may apply.
            Event::InitApply(pytorch_job("finished-earlier", 3, Some("Succeeded"))),
            Event::InitDone,
            Event::Apply(pytorch_job("w", 9, Some("Failed"))),
            Event::Apply(pytorch_job("w", 11, Some("Succeeded"))),
            Event::Apply(pytorch_job("w", 12, Some("Failed"))),
            Event::Delete(pytorch_job("deleted", 13, Some("Running"))),
        ],
    );

    assert_eq!(
        actions,
        [
            "report w active=0 Running",
            "report deleted active=0 Pending",
            "untracked",
            "vanished gone Unlisted",
            "finish w Succeeded",
            "vanished deleted Deleted",
        ]
    );
    let mapped = tracked
        .get("w")
        .and_then(|t| t.decoding.as_ref().map(|d| d.mapped.phase));
    assert_eq!(mapped, Some(JobPhase::Succeeded));
    assert!(tracked.get("batch").is_some_and(|t| !t.finishing));
}

#[test]
fn a_kind_watcher_leaves_the_jobs_of_other_kinds_alone() {
    let (kind, record) = pytorch();
    let other = Kind::new(GroupVersionKind::gvk("kubeflow.org", "v1", "TFJob"));
    let tracked = DashMap::new();
    tracked.insert("w".to_owned(), record(Some(0)));
    let mut tracker = Tracker::new(KindObjects(other), None, Arc::new(AtomicU64::new(0)));

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitDone,
            Event::Apply(pytorch_job("w", 11, Some("Succeeded"))),
        ],
    );

    assert!(actions.is_empty(), "{actions:?}");
    assert!(tracked.get("w").is_some_and(|t| !t.finishing));
    // Its own kind's watcher still does.
    let mut own = Tracker::new(KindObjects(kind), None, Arc::new(AtomicU64::new(0)));
    let actions = run(&mut own, &tracked, vec![Event::Init, Event::InitDone]);
    assert_eq!(actions, ["vanished w Unlisted"]);
}

#[test]
fn a_batch_job_watcher_leaves_workload_jobs_alone() {
    let (_, record) = pytorch();
    let tracked = DashMap::new();
    tracked.insert("w".to_owned(), record(Some(0)));
    let (mut tracker, _) = jobs_tracker(None);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitDone,
            // A batch Job a workload template created as a child, labelled with its job.
            Event::Apply(batch_job(
                "w",
                "ns",
                5,
                json!({"conditions": [condition("Failed")]}),
            )),
            Event::Delete(batch_job("w", "ns", 6, running(0))),
        ],
    );

    assert!(actions.is_empty(), "{actions:?}");
}

#[test]
fn a_list_restarted_midway_forgets_what_the_interrupted_one_showed() {
    let tracked = DashMap::new();
    tracked.insert("a".to_owned(), batch_record("ns", Some(0)));
    let (mut tracker, _) = jobs_tracker(None);

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitApply(batch_job("a", "ns", 10, running(1))),
            // The list failed before its end; kube-rs lists again from scratch, and `a` is
            // gone by then.
            Event::Init,
            Event::InitDone,
        ],
    );

    assert_eq!(actions, ["report a active=1", "vanished a Unlisted"]);
}

#[test]
fn a_job_adopted_with_its_recorded_status_is_reported_again_only_when_the_list_shows_a_change() {
    // After a restart: the store holds each job's last reported status, and the first list
    // shows one job as it was, the other with one more pod running.
    let recorded = crate::executor::kube::status::workload_status(&batch_job("same", "ns", 5, running(1)));
    let digest = Some(super::digest(&recorded));
    let tracked = DashMap::new();
    for id in ["same", "changed"] {
        tracked.insert(
            id.to_owned(),
            Tracked::new("ns".to_owned(), 1, Some(0), None, None, digest),
        );
    }
    let (mut tracker, _) = jobs_tracker(Some("ns"));

    let actions = run(
        &mut tracker,
        &tracked,
        vec![
            Event::Init,
            Event::InitApply(batch_job("same", "ns", 10, running(1))),
            Event::InitApply(batch_job("changed", "ns", 11, running(2))),
            Event::InitDone,
            // And from then on, a change is reported once.
            Event::Apply(batch_job("same", "ns", 12, running(2))),
            Event::Apply(batch_job("same", "ns", 13, running(2))),
        ],
    );

    assert_eq!(actions, ["report changed active=2", "report same active=2"]);
}
