//! Kueue's Workloads read and fed to the queue state machine as plain event sequences: no
//! client, no server, no clock.

use serde_json::json;

use super::*;

fn workload(conditions: Value) -> Value {
    json!({
        "metadata": {"name": "job-jobgate-x-1a2b3", "namespace": "default",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "jobgate-0190-abc",
                "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 1}]},
        "status": {"conditions": conditions, "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": []}}
    })
}

fn c(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1})
}

#[test]
fn links_a_workload_to_its_owner_job() {
    assert_eq!(owner_job_id(&workload(json!([]))).as_deref(), Some("0190-abc"));
    let mut foreign = workload(json!([]));
    foreign["metadata"]["ownerReferences"][0]["name"] = json!("someone-elses");
    assert_eq!(owner_job_id(&foreign), None);
    let mut not_controller = workload(json!([]));
    not_controller["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    assert_eq!(owner_job_id(&not_controller), None);
}

#[test]
fn reads_each_state_from_the_conditions() {
    let pending = queue_status(
        &workload(json!([c(
            "QuotaReserved",
            "False",
            "Pending",
            "couldn't assign flavors to pod set main: insufficient unused quota for pods in flavor default-flavor, 1 more needed"
        )])),
        "team-a",
    );
    assert_eq!(pending.state, QueueState::Pending);
    assert_eq!(pending.reason.as_deref(), Some("Pending"));
    assert!(pending.message.unwrap().contains("insufficient unused quota"));
    assert_eq!(pending.cluster_queue, None, "no quota held");

    let admitted = queue_status(
        &workload(json!([
            c(
                "QuotaReserved",
                "True",
                "QuotaReserved",
                "Quota reserved in ClusterQueue cluster-queue"
            ),
            c("Admitted", "True", "Admitted", "The workload is admitted")
        ])),
        "team-a",
    );
    assert_eq!(admitted.state, QueueState::Admitted);
    assert_eq!(admitted.cluster_queue.as_deref(), Some("cluster-queue"));
    assert_eq!(admitted.conditions.len(), 2);

    let preempted = queue_status(
        &workload(json!([
            c(
                "QuotaReserved",
                "False",
                "Preempted",
                "Preempted to accommodate a higher priority Workload"
            ),
            c(
                "Admitted",
                "False",
                "NoReservation",
                "The workload has no reservation"
            ),
            c(
                "Evicted",
                "True",
                "Preempted",
                "Preempted to accommodate a higher priority Workload"
            ),
            c(
                "Preempted",
                "True",
                "InClusterQueue",
                "Preempted to accommodate a higher priority Workload"
            )
        ])),
        "team-a",
    );
    assert_eq!(preempted.state, QueueState::Preempted);
    assert_eq!(preempted.reason.as_deref(), Some("Preempted"));

    let readmitted = queue_status(
        &workload(json!([
            c(
                "QuotaReserved",
                "True",
                "QuotaReserved",
                "Quota reserved in ClusterQueue cluster-queue"
            ),
            c("Admitted", "True", "Admitted", "The workload is admitted"),
            c("Evicted", "False", "QuotaReserved", "Previously: Preempted")
        ])),
        "team-a",
    );
    assert_eq!(
        readmitted.state,
        QueueState::Admitted,
        "a False Evicted is history"
    );

    let finished = queue_status(
        &workload(json!([
            c("Admitted", "True", "Admitted", "The workload is admitted"),
            c("Finished", "True", "Succeeded", "Job finished successfully")
        ])),
        "team-a",
    );
    assert_eq!(finished.state, QueueState::Finished);
}

/// The Workload of job `0190-abc` at resourceVersion `rv`, in namespace `ns`, with
/// `conditions`.
fn workload_at(rv: u64, ns: &str, conditions: Value) -> Value {
    let mut w = workload(conditions);
    w["metadata"]["resourceVersion"] = json!(rv.to_string());
    w["metadata"]["namespace"] = json!(ns);
    w
}

fn applied(rv: u64, conditions: Value) -> WorkloadEvent {
    WorkloadEvent::Applied(workload_at(rv, "default", conditions))
}

/// A tracked job queued in Kueue, in namespace `default`, whose store holds `recorded`.
fn queued_record(recorded: &WorkloadStatus) -> Tracked {
    let last_sent = (*recorded != WorkloadStatus::default()).then(|| tracking::digest(recorded));
    Tracked::new("default".to_owned(), 1, Some(0), None, None, last_sent)
        .queued(Some(tracking::QueueTrack::new(recorded)))
}

/// What a report says of the queue, briefly: its state, reason and ClusterQueue.
fn queue_of(report: Option<WorkloadStatus>) -> Option<String> {
    let queue = report?.queue.expect("a queued job's report carries its queue");
    Some(format!(
        "{:?} {} {}",
        queue.state,
        queue.reason.as_deref().unwrap_or("-"),
        queue.cluster_queue.as_deref().unwrap_or("-")
    ))
}

fn quota_reserved() -> Value {
    c(
        "QuotaReserved",
        "True",
        "QuotaReserved",
        "Quota reserved in ClusterQueue cluster-queue",
    )
}

fn admitted() -> Value {
    c("Admitted", "True", "Admitted", "The workload is admitted")
}

fn preempted() -> Value {
    json!([
        c(
            "QuotaReserved",
            "False",
            "Preempted",
            "Preempted to accommodate a higher priority Workload"
        ),
        c(
            "Admitted",
            "False",
            "NoReservation",
            "The workload has no reservation"
        ),
        c(
            "Evicted",
            "True",
            "Preempted",
            "Preempted to accommodate a higher priority Workload"
        ),
        c(
            "Preempted",
            "True",
            "InClusterQueue",
            "Preempted to accommodate a higher priority Workload"
        ),
    ])
}

#[test]
fn a_workload_through_admission_eviction_and_readmission_is_reported_at_each_change() {
    let mut t = queued_record(&WorkloadStatus::default());
    let mut step = |event: WorkloadEvent| queue_of(workload_event(&mut t, &event));

    assert_eq!(step(applied(1, json!([]))).as_deref(), Some("Pending - -"));
    assert_eq!(
        step(applied(
            2,
            json!([c(
                "QuotaReserved",
                "False",
                "Pending",
                "insufficient unused quota"
            )])
        ))
        .as_deref(),
        Some("Pending Pending -")
    );
    assert_eq!(
        step(applied(3, json!([quota_reserved()]))).as_deref(),
        Some("QuotaReserved QuotaReserved cluster-queue")
    );
    assert_eq!(
        step(applied(4, json!([quota_reserved(), admitted()]))).as_deref(),
        Some("Admitted Admitted cluster-queue")
    );
    assert_eq!(
        step(applied(5, preempted())).as_deref(),
        Some("Preempted Preempted -"),
        "no quota is held once preempted"
    );
    assert_eq!(
        step(applied(
            6,
            json!([
                quota_reserved(),
                admitted(),
                c("Evicted", "False", "QuotaReserved", "Previously: Preempted")
            ])
        ))
        .as_deref(),
        Some("Admitted Admitted cluster-queue"),
        "admitted again"
    );
    let evicted = json!([
        c("QuotaReserved", "False", "Pending", "evicted"),
        c(
            "Evicted",
            "True",
            "PodsReadyTimeout",
            "Exceeded the PodsReady timeout"
        ),
    ]);
    assert_eq!(
        step(applied(7, evicted)).as_deref(),
        Some("Evicted PodsReadyTimeout -")
    );
}

#[test]
fn stale_repeated_and_deleted_workloads_report_nothing() {
    let mut t = queued_record(&WorkloadStatus::default());
    let admitted_at = |rv| applied(rv, json!([quota_reserved(), admitted()]));
    assert!(workload_event(&mut t, &admitted_at(4)).is_some());
    // A re-list shows it again unchanged, or an older event arrives late: nothing.
    assert!(workload_event(&mut t, &admitted_at(4)).is_none());
    assert!(workload_event(&mut t, &applied(3, json!([quota_reserved()]))).is_none());
    // A newer version that says the same: nothing either.
    assert!(workload_event(&mut t, &admitted_at(5)).is_none());
    // Kueue deletes a Workload with its object, whose own watcher reports that.
    let deleted = WorkloadEvent::Deleted(workload_at(6, "default", preempted()));
    assert!(workload_event(&mut t, &deleted).is_none());
    assert_eq!(
        t.queue.as_ref().and_then(|q| q.status.as_ref()).map(|s| s.state),
        Some(QueueState::Admitted),
        "a deletion changes nothing of what is kept"
    );
}

#[test]
fn workloads_of_finishing_unqueued_or_elsewhere_jobs_report_nothing() {
    let mut finishing = queued_record(&WorkloadStatus::default());
    finishing.finishing = true;
    assert!(workload_event(&mut finishing, &applied(1, json!([admitted()]))).is_none());

    let mut unqueued = Tracked::new("default".to_owned(), 1, Some(0), None, None, None);
    assert!(workload_event(&mut unqueued, &applied(1, json!([admitted()]))).is_none());

    let mut t = queued_record(&WorkloadStatus::default());
    let elsewhere = WorkloadEvent::Applied(workload_at(1, "other", json!([admitted()])));
    assert!(
        workload_event(&mut t, &elsewhere).is_none(),
        "not the job's namespace"
    );
    assert!(workload_event(&mut t, &applied(2, json!([admitted()]))).is_some());
}

#[test]
fn after_a_restart_a_relist_of_the_recorded_state_reports_nothing() {
    let admitted_workload = workload_at(9, "default", json!([quota_reserved(), admitted()]));
    let recorded = WorkloadStatus {
        active: 1,
        queue: Some(Box::new(queue_status(&admitted_workload, "team-a"))),
        ..WorkloadStatus::default()
    };
    let mut t = queued_record(&recorded);
    assert!(workload_event(&mut t, &WorkloadEvent::Applied(admitted_workload)).is_none());
    // Then preempted: reported with what the job's object last showed.
    let report = workload_event(&mut t, &applied(10, preempted())).expect("a change");
    assert_eq!(report.active, 1);
    assert_eq!(report.queue.map(|q| q.state), Some(QueueState::Preempted));
}

#[test]
fn the_queue_and_the_jobs_object_are_merged_into_one_report() {
    use dashmap::DashMap;
    use k8s_openapi::api::batch::v1::Job as K8sJob;

    use crate::executor::kube::tracking::{Action, BatchJobs};

    let tracked = DashMap::new();
    tracked.insert("0190-abc".to_owned(), queued_record(&WorkloadStatus::default()));
    let admitted_report = workload_event(
        &mut tracked.get_mut("0190-abc").expect("tracked"),
        &applied(2, json!([quota_reserved(), admitted()])),
    )
    .expect("admitted");
    assert_eq!(admitted_report.active, 0);

    // Then the Job starts: its report carries what Kueue said.
    let job: K8sJob = serde_json::from_value(json!({
        "metadata": {"name": "jobgate-0190-abc", "namespace": "default", "resourceVersion": "3",
                     "labels": {"jobgate.io/job-id": "0190-abc"}},
        "status": {"active": 1},
    }))
    .expect("a well-formed Job");
    let actions = tracking::applied(&BatchJobs, &tracked, job);
    let [Action::Report { status, .. }] = actions.as_slice() else {
        panic!("one report, not {actions:?}");
    };
    assert_eq!(status.active, 1);
    assert_eq!(status.queue.as_ref().map(|q| q.state), Some(QueueState::Admitted));

    // Then Kueue preempts it: the report keeps what the Job showed.
    let preempted_report = workload_event(
        &mut tracked.get_mut("0190-abc").expect("tracked"),
        &applied(4, preempted()),
    )
    .expect("preempted");
    assert_eq!(preempted_report.active, 1);
    assert_eq!(
        preempted_report.queue.map(|q| q.state),
        Some(QueueState::Preempted)
    );
}
