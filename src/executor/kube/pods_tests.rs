//! The pods state machine fed plain sequences of pod events, as the pod watcher would see
//! them: no client, no server, no clock.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{JobPods, PodAction, PodBook, PodEvent};
use crate::executor::kube::status::{self, PodInfo, PodPhase};

/// A pod `name` of job `j1` in namespace `ns`, in `phase`, its `job` container in `state`
/// (and `last` state); `index` is its completion index.
fn pod_with(name: &str, index: Option<i32>, phase: &str, state: Value, last: Value) -> PodInfo {
    let mut labels = json!({"app.kubernetes.io/managed-by": "jobgate", "jobgate.io/job-id": "j1"});
    if let Some(i) = index {
        labels["batch.kubernetes.io/job-completion-index"] = json!(i.to_string());
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": labels,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": phase, "containerStatuses": [{
            "name": "job", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": 0, "state": state, "lastState": last,
        }]},
    }))
    .expect("a well-formed Pod");
    status::pod_info(&pod).expect("a named pod")
}

fn pod(name: &str, phase: &str, state: Value) -> PodInfo {
    pod_with(name, None, phase, state, json!({}))
}

fn waiting(reason: &str) -> Value {
    json!({"waiting": {"reason": reason}})
}

fn running() -> Value {
    json!({"running": {"startedAt": "2026-01-01T00:00:01Z"}})
}

fn terminated(exit_code: i32, reason: &str, message: &str) -> Value {
    json!({"terminated": {"exitCode": exit_code, "reason": reason, "message": message,
                          "finishedAt": "2026-01-01T00:00:09Z"}})
}

/// What an action says, briefly.
fn summary(action: &PodAction) -> String {
    match action {
        PodAction::Changed => "changed".to_owned(),
        PodAction::ConsiderFollow(info) => {
            format!("follow {} {:?} started={}", info.name, info.phase, info.started)
        }
        PodAction::CaptureLog {
            namespace,
            pod,
            container,
        } => format!(
            "capture {namespace}/{pod} {}",
            container.as_deref().unwrap_or("-")
        ),
        PodAction::ForgetFollow { namespace, pod } => format!("forget-follow {namespace}/{pod}"),
        PodAction::Forget => "forget".to_owned(),
    }
}

fn apply(job: &mut JobPods, event: PodEvent, tracked: bool) -> Vec<String> {
    job.apply(event, tracked).iter().map(summary).collect()
}

fn phases(job: &JobPods) -> Vec<(String, PodPhase)> {
    job.infos().into_iter().map(|p| (p.name, p.phase)).collect()
}

#[test]
fn a_pod_going_pending_running_succeeded_is_announced_each_time_and_its_log_captured_once() {
    let mut job = JobPods::default();
    let pending = pod("p1", "Pending", waiting("ContainerCreating"));
    assert_eq!(
        apply(&mut job, PodEvent::Applied(pending), true),
        ["changed", "follow p1 Pending started=false"]
    );
    assert!(!job.settled(None), "a pending pod is not over");

    assert_eq!(
        apply(&mut job, PodEvent::Applied(pod("p1", "Running", running())), true),
        ["changed", "follow p1 Running started=true"]
    );

    let done = pod("p1", "Succeeded", terminated(0, "Completed", "42"));
    assert_eq!(done.message.as_deref(), Some("42"));
    assert_eq!(
        apply(&mut job, PodEvent::Applied(done.clone()), true),
        ["changed", "follow p1 Succeeded started=true", "capture ns/p1 job"]
    );
    assert!(!job.settled(None), "its log tail is being captured");

    // The same state again (a re-list, a resync): nothing happens, nothing is captured again.
    assert!(apply(&mut job, PodEvent::Applied(done), true).is_empty());

    job.captured("p1".to_owned(), Some(vec!["hello".to_owned()]));
    assert!(job.settled(None));
    assert!(job.settled(Some(1)));
    assert!(!job.settled(Some(2)), "fewer pods ended than the Job counts");
    assert_eq!(
        job.logs.get("p1").map(Vec::as_slice),
        Some(&["hello".to_owned()][..])
    );
    assert_eq!(phases(&job), [("p1".to_owned(), PodPhase::Succeeded)]);
}

#[test]
fn a_pod_that_cannot_pull_its_image_never_started_and_has_nothing_to_capture() {
    let mut job = JobPods::default();
    let stuck = pod("p1", "Pending", waiting("ImagePullBackOff"));
    assert!(!stuck.started);
    assert_eq!(stuck.reason, None, "a waiting reason is not the run's");
    assert_eq!(
        apply(&mut job, PodEvent::Applied(stuck.clone()), true),
        ["changed", "follow p1 Pending started=false"]
    );
    // It fails without its container ever starting: no log to capture.
    let failed = pod("p1", "Failed", waiting("ImagePullBackOff"));
    assert_eq!(
        apply(&mut job, PodEvent::Applied(failed), true),
        ["changed", "follow p1 Failed started=false"]
    );
    assert!(job.settled(Some(1)));
    assert!(job.logs.is_empty());
}

#[test]
fn a_crash_looping_pod_is_captured_once_it_ends() {
    let mut job = JobPods::default();
    let looping = pod_with(
        "p1",
        None,
        "Running",
        waiting("CrashLoopBackOff"),
        terminated(1, "Error", "boom"),
    );
    // Between restarts the container waits: not started, nothing to read now.
    assert!(!looping.started);
    assert_eq!(
        apply(&mut job, PodEvent::Applied(looping), true),
        ["changed", "follow p1 Running started=false"]
    );
    let failed = pod("p1", "Failed", terminated(1, "Error", "boom"));
    assert_eq!(
        (failed.exit_code, failed.reason.as_deref()),
        (Some(1), Some("Error"))
    );
    assert_eq!(
        apply(&mut job, PodEvent::Applied(failed), true),
        ["changed", "follow p1 Failed started=true", "capture ns/p1 job"]
    );
}

#[test]
fn a_pod_first_seen_ended_is_captured_but_only_for_a_tracked_job() {
    let ended = pod("p1", "Failed", terminated(2, "Error", ""));
    let mut tracked = JobPods::default();
    assert_eq!(
        apply(&mut tracked, PodEvent::Applied(ended.clone()), true),
        ["changed", "follow p1 Failed started=true", "capture ns/p1 job"]
    );
    // Another replica's job (or one finished already): its runs are shown, nothing captured.
    let mut untracked = JobPods::default();
    assert_eq!(
        apply(&mut untracked, PodEvent::Applied(ended), false),
        ["changed", "follow p1 Failed started=true"]
    );
    assert!(untracked.settled(None));
}

#[test]
fn a_deleted_pod_is_kept_when_it_ended_for_a_tracked_job_and_dropped_otherwise() {
    let mut job = JobPods::default();
    let done = pod("p1", "Succeeded", terminated(0, "Completed", ""));
    apply(&mut job, PodEvent::Applied(done.clone()), true);
    job.captured("p1".to_owned(), None);
    // Its last state may prove the job's outcome: kept.
    assert_eq!(
        apply(&mut job, PodEvent::Deleted(done), true),
        ["forget-follow ns/p1"]
    );
    assert_eq!(phases(&job), [("p1".to_owned(), PodPhase::Succeeded)]);

    // A pod deleted before it ended will never end: nothing waits for it.
    let running = pod("p2", "Running", running());
    apply(&mut job, PodEvent::Applied(running.clone()), true);
    assert!(!job.settled(None));
    assert_eq!(
        apply(&mut job, PodEvent::Deleted(running), true),
        ["forget-follow ns/p2", "changed"]
    );
    assert_eq!(phases(&job), [("p1".to_owned(), PodPhase::Succeeded)]);
    assert!(job.settled(None));
}

#[test]
fn an_untracked_jobs_record_goes_with_its_last_pod() {
    let book = PodBook::default();
    let a = pod("p1", "Succeeded", terminated(0, "Completed", ""));
    let b = pod("p2", "Running", running());
    book.apply("j1", PodEvent::Applied(a.clone()), false);
    book.apply("j1", PodEvent::Applied(b.clone()), false);
    assert_eq!(book.runs("j1").len(), 2);

    let actions: Vec<String> = book
        .apply("j1", PodEvent::Deleted(a), false)
        .iter()
        .map(summary)
        .collect();
    assert_eq!(
        actions,
        ["forget-follow ns/p1", "changed"],
        "ended or not, it goes"
    );
    assert!(book.knows("j1"));
    let actions: Vec<String> = book
        .apply("j1", PodEvent::Deleted(b), false)
        .iter()
        .map(summary)
        .collect();
    assert_eq!(actions, ["forget-follow ns/p2", "forget", "changed"]);
    assert!(!book.knows("j1"), "nothing of it is left");
    assert!(book.runs("j1").is_empty());
}

#[test]
fn several_pods_of_one_job_settle_together_and_keep_the_latest_log_tails() {
    let mut job = JobPods::default();
    for i in 0..2 {
        let name = format!("p{i}");
        apply(
            &mut job,
            PodEvent::Applied(pod_with(&name, Some(i), "Running", running(), json!({}))),
            true,
        );
    }
    let ended = |name: &str, index: i32| {
        pod_with(
            name,
            Some(index),
            "Succeeded",
            terminated(0, "Completed", ""),
            json!({}),
        )
    };
    assert_eq!(
        apply(&mut job, PodEvent::Applied(ended("p1", 1)), true),
        ["changed", "follow p1 Succeeded started=true", "capture ns/p1 job"]
    );
    job.captured("p1".to_owned(), Some(vec!["one".to_owned()]));
    assert!(!job.settled(Some(2)), "p0 still runs");
    apply(&mut job, PodEvent::Applied(ended("p0", 0)), true);
    job.captured("p0".to_owned(), Some(vec!["zero".to_owned()]));
    assert!(job.settled(Some(2)));

    // Only the most recent runs' tails are kept: the lowest index goes first.
    for i in 2..7 {
        let name = format!("p{i}");
        apply(&mut job, PodEvent::Applied(ended(&name, i)), true);
        job.captured(name, Some(vec![format!("line {i}")]));
    }
    let kept: Vec<&str> = job.logs.keys().map(String::as_str).collect();
    assert_eq!(kept, ["p2", "p3", "p4", "p5", "p6"]);
}

#[test]
fn the_book_reads_runs_started_pods_and_ended_pods() {
    let book = PodBook::default();
    book.apply(
        "j1",
        PodEvent::Applied(pod_with("b", Some(1), "Running", running(), json!({}))),
        true,
    );
    book.apply(
        "j1",
        PodEvent::Applied(pod_with(
            "a",
            Some(0),
            "Succeeded",
            terminated(0, "Completed", "r"),
            json!({}),
        )),
        true,
    );
    book.apply(
        "j1",
        PodEvent::Applied(pod("c", "Pending", waiting("ErrImagePull"))),
        true,
    );
    let started: Vec<String> = book.started_pods("j1").into_iter().map(|p| p.name).collect();
    assert_eq!(started, ["a", "b"], "by index; the pending pod never started");
    let runs: Vec<(String, &str)> = book.runs("j1").into_iter().map(|r| (r.name, r.phase)).collect();
    assert_eq!(
        runs,
        [
            ("a".to_owned(), "Succeeded"),
            ("b".to_owned(), "Running"),
            ("c".to_owned(), "Pending")
        ]
    );
    assert!(book.pod_ended("j1", "a"));
    assert!(!book.pod_ended("j1", "b"));
    assert!(!book.any_archiving("j1"));
    book.captured("j1", "a".to_owned(), Some(vec!["r".to_owned()]));
    assert_eq!(book.captured_log("j1", "a"), Some(vec!["r".to_owned()]));
}

/// The attempts a report of job `j1` would carry, with the deadline `deadline` says.
fn reported(book: &PodBook, deadline: Option<chrono::DateTime<chrono::Utc>>) -> Vec<(String, String)> {
    book.with_attempts("j1", deadline, |attempts| {
        attempts
            .iter()
            .map(|a| {
                (
                    a.name.clone(),
                    format!("{:?} {:?} {:?}", a.state, a.exit_code, a.cause),
                )
            })
            .collect()
    })
}

#[test]
fn a_tracked_jobs_attempts_change_with_its_pods_alone() {
    let book = PodBook::default();
    let applied = |info: PodInfo| {
        book.apply("j1", PodEvent::Applied(info), true);
        book.refresh_attempts("j1", true)
    };
    assert!(
        !applied(pod("p1", "Pending", waiting("ContainerCreating"))),
        "a pod waiting to start is no attempt"
    );
    assert!(applied(pod("p1", "Running", running())), "it started");
    assert!(!applied(pod("p1", "Running", running())), "nothing new");
    assert_eq!(
        reported(&book, None),
        [("p1".to_owned(), "Running None None".to_owned())]
    );
    assert!(
        applied(pod("p1", "Failed", terminated(137, "OOMKilled", ""))),
        "it ended"
    );
    assert_eq!(
        reported(&book, None),
        [("p1".to_owned(), "Failed Some(137) Some(OomKilled)".to_owned())]
    );
    // The deadline a report's status gives stays for the next reports.
    let at = "2026-01-01T00:00:05Z".parse().unwrap();
    book.apply(
        "j1",
        PodEvent::Applied(pod("p2", "Failed", terminated(143, "Error", ""))),
        true,
    );
    assert!(book.refresh_attempts("j1", true));
    assert_eq!(
        reported(&book, Some(at))[1].1,
        "Failed Some(143) Some(DeadlineExceeded)"
    );
    assert_eq!(
        reported(&book, None)[1].1,
        "Failed Some(143) Some(DeadlineExceeded)"
    );
    // A job tracked elsewhere keeps none.
    assert!(!book.refresh_attempts("j1", false));
    assert!(!book.refresh_attempts("unknown", true));
}

#[test]
fn a_jobs_attempts_are_bounded_as_the_job_keeps_them() {
    let book = PodBook::default();
    let total = crate::model::MAX_ATTEMPTS + 3;
    for n in 0..total {
        let name = format!("p{n:03}");
        book.apply(
            "j1",
            PodEvent::Applied(pod(&name, "Failed", terminated(1, "Error", ""))),
            true,
        );
    }
    book.apply("j1", PodEvent::Applied(pod("p999", "Running", running())), true);
    book.refresh_attempts("j1", true);
    let names: Vec<String> = reported(&book, None).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), crate::model::MAX_ATTEMPTS);
    assert_eq!(
        names.first().map(String::as_str),
        Some("p004"),
        "the oldest ended ones go"
    );
    assert_eq!(
        names.last().map(String::as_str),
        Some("p999"),
        "a running one stays"
    );
}
