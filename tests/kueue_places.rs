//! Kueue's view of a waiting job: the emulator's pending-workloads visibility API
//! (`visibility.kueue.x-k8s.io`) read with kube-rs, in Kueue's order (priority from a
//! WorkloadPriorityClass or a PriorityClass, then time), paged, with its 404s and RBAC; and
//! jobgate's `Job.queue { position localQueuePosition }` over GraphQL, read from one shared
//! refresher, moving as workloads are admitted, with jobgate's priorities mapped to classes.

mod common;

use axum::http::Request;
use common::cluster::{Cluster, overlay_rbac};
use common::{Polling, Server};
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::Kubeconfig;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const VISIBILITY: &str = "/apis/visibility.kueue.x-k8s.io/v1beta2";
const PENDING: &str = "localqueues.visibility.kueue.x-k8s.io/pendingworkloads";

/// A cluster with Kueue, LocalQueues `team-a` and `team-b` sharing ClusterQueue
/// `cluster-queue` (one pod at once), jobgate under `rbac`; `None` on a real cluster.
async fn two_queues(rbac: Vec<Value>) -> Option<Cluster> {
    let cluster = Cluster::emulated_with_rbac("it installs the emulator's Kueue", rbac).await?;
    let emu = cluster.emu();
    emu.register_kueue().unwrap();
    for queue in ["team-a", "team-b"] {
        emu.create_kueue_queue(cluster.namespace(), queue, "cluster-queue", 1)
            .unwrap();
    }
    Some(cluster)
}

/// Creates a cluster-scoped object as the admin.
async fn create_cluster_object(
    cluster: &Cluster,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    object: Value,
) {
    let resource =
        ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &resource);
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// A suspended batch Job queued in `queue`, its pod running until gate `name` opens.
fn queued_job(name: &str, queue: &str, labels: Value, pod_class: Option<&str>) -> Value {
    let mut labels = labels;
    labels["kueue.x-k8s.io/queue-name"] = json!(queue);
    let mut pod = json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
        "env": [{"name": "EMULATOR_GATE", "value": name}]}]});
    if let Some(class) = pod_class {
        pod["priorityClassName"] = json!(class);
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
        "spec": {"suspend": true, "template": {"spec": pod}}})
}

/// GET `path` with `client`: the body, or the API's refusal.
async fn get(client: &kube::Client, path: &str) -> Result<Value, kube::core::Status> {
    let request = Request::get(path).body(Vec::new()).unwrap();
    match client.request::<Value>(request).await {
        Ok(v) => Ok(v),
        Err(kube::Error::Api(s)) => Err(*s),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

/// The workloads' owners (the Jobs' names) and positions of a summary.
fn places(summary: &Value) -> Vec<(String, i64, i64, i64)> {
    summary["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["metadata"]["ownerReferences"][0]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                i["priority"].as_i64().unwrap(),
                i["positionInClusterQueue"].as_i64().unwrap(),
                i["positionInLocalQueue"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_visibility_api_answers_positions_in_kueue_order_paged_with_404s_and_rbac() {
    let Some(cluster) = two_queues(overlay_rbac("kueue")).await else {
        return;
    };
    let ns = cluster.namespace().to_owned();
    create_cluster_object(&cluster, "kueue.x-k8s.io", "v1beta1", "WorkloadPriorityClass", "workloadpriorityclasses",
        json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 100})).await;
    create_cluster_object(&cluster, "scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses",
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "mid"}, "value": 50})).await;
    let jobs = cluster.jobs();
    // One runs (the quota is one pod); then, in this order: plain in team-a, plain in team-b,
    // WorkloadPriorityClass high in team-a, PriorityClass mid in team-b.
    let submitted = [
        queued_job("running", "team-a", json!({}), None),
        queued_job("plain-a", "team-a", json!({}), None),
        queued_job("plain-b", "team-b", json!({}), None),
        queued_job(
            "high-a",
            "team-a",
            json!({"kueue.x-k8s.io/priority-class": "high"}),
            None,
        ),
        queued_job("mid-b", "team-b", json!({}), Some("mid")),
    ];
    for job in submitted {
        let job = serde_json::from_value(job).unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
        if job.metadata.name.as_deref() == Some("running") {
            cluster
                .until("the first job admitted", || async {
                    let j = cluster.jobs().get("running").await.unwrap();
                    j.spec.unwrap().suspend == Some(false)
                })
                .await;
        }
    }
    let cq = format!("{VISIBILITY}/clusterqueues/cluster-queue/pendingworkloads");
    let polling = Polling::start();
    let summary = loop {
        let summary = get(&cluster.client, &cq).await.unwrap();
        if summary["items"].as_array().unwrap().len() == 4 {
            break summary;
        }
        polling
            .pause(|| format!("four pending workloads never listed: {summary}"))
            .await;
    };
    assert_eq!(summary["kind"], "PendingWorkloadsSummary", "{summary}");
    assert_eq!(summary["apiVersion"], "visibility.kueue.x-k8s.io/v1beta2");
    let expected = vec![
        ("high-a".to_owned(), 100, 0, 0),
        ("mid-b".to_owned(), 50, 1, 0),
        ("plain-a".to_owned(), 0, 2, 1),
        ("plain-b".to_owned(), 0, 3, 1),
    ];
    assert_eq!(places(&summary), expected, "priority first, then time: {summary}");
    let item = &summary["items"][0];
    assert_eq!(item["metadata"]["namespace"], ns.as_str());
    assert_eq!(item["localQueueName"], "team-a");
    assert!(
        item["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("job-high-a-"),
        "{item}"
    );

    // Paging: offset and limit, positions still the queue's.
    let page = get(&cluster.client, &format!("{cq}?offset=1&limit=2"))
        .await
        .unwrap();
    assert_eq!(places(&page), expected[1..3].to_vec(), "{page}");
    let local = format!("{VISIBILITY}/namespaces/{ns}/localqueues/team-a/pendingworkloads");
    let page = get(&cluster.client, &format!("{local}?offset=1")).await.unwrap();
    assert_eq!(places(&page), vec![("plain-a".to_owned(), 0, 2, 1)], "{page}");
    let older = get(&cluster.client, &local.replace("v1beta2", "v1beta1"))
        .await
        .unwrap();
    assert_eq!(older["apiVersion"], "visibility.kueue.x-k8s.io/v1beta1");
    assert_eq!(older["items"].as_array().unwrap().len(), 2, "{older}");

    // Unknown queues: Kueue's 404s.
    let missing = get(
        &cluster.client,
        &format!("{VISIBILITY}/clusterqueues/nope/pendingworkloads"),
    )
    .await
    .unwrap_err();
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        missing.message,
        "clusterqueue.visibility.kueue.x-k8s.io \"nope\" not found"
    );
    let missing = get(
        &cluster.client,
        &format!("{VISIBILITY}/namespaces/{ns}/localqueues/nope/pendingworkloads"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        missing.message,
        "localqueue.visibility.kueue.x-k8s.io \"nope\" not found"
    );

    // Discovery lists the group and its subresources.
    let resources = cluster
        .client
        .list_api_group_resources("visibility.kueue.x-k8s.io/v1beta2")
        .await
        .unwrap();
    let names: Vec<&str> = resources.resources.iter().map(|r| r.name.as_str()).collect();
    assert!(names.contains(&"clusterqueues/pendingworkloads"), "{names:?}");
    assert!(names.contains(&"localqueues/pendingworkloads"), "{names:?}");

    // RBAC: jobgate's identity may read its LocalQueues (the kueue overlay grants it), not
    // the ClusterQueue (cluster scope).
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&cluster.emu().kubeconfig_yaml(&ns)).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let jobgate = kube::Client::try_from(config).unwrap();
    assert!(get(&jobgate, &local).await.is_ok());
    let refused = get(&jobgate, &cq).await.unwrap_err();
    assert_eq!(refused.code, 403, "{refused:?}");
    assert!(
        refused.message.contains("cannot get resource \"clusterqueues/pendingworkloads\" in API group \"visibility.kueue.x-k8s.io\""),
        "{refused:?}"
    );
}

const PLACE: &str = "id phase queue { state position localQueuePosition estimate }";

/// A job input whose pod runs until gate `gate` opens.
fn gated(gate: &str, queue: &str, priority: i32) -> Value {
    json!({"image": "busybox", "command": ["true"], "queueName": queue, "priority": priority,
        "env": [{"name": "EMULATOR_GATE", "value": gate}]})
}

/// Waits until each job's (position, localQueuePosition) is as expected (`None`: null).
async fn wait_places(server: &Server, expected: &[(&str, Option<(i64, i64)>)], what: &str) {
    let polling = Polling::start();
    loop {
        let mut seen = Vec::new();
        for (id, _) in expected {
            let job = server.job_with(id, PLACE).await;
            let place = job["queue"]["position"]
                .as_i64()
                .zip(job["queue"]["localQueuePosition"].as_i64());
            seen.push((job, place));
        }
        if seen.iter().zip(expected).all(|((_, p), (_, e))| p == e) {
            return;
        }
        polling
            .pause(|| {
                let jobs: Vec<&Value> = seen.iter().map(|(j, _)| j).collect();
                format!("{what}: never {expected:?}; jobs: {jobs:#?}")
            })
            .await;
    }
}

/// The batch Job of jobgate job `id`, once created (jobgate launches after it answers).
async fn created(cluster: &Cluster, id: &str) -> k8s_openapi::api::batch::v1::Job {
    let name = format!("jobgate-{id}");
    let polling = Polling::start();
    loop {
        if let Some(job) = cluster.jobs().get_opt(&name).await.unwrap() {
            return job;
        }
        polling.pause(|| format!("{name} never created")).await;
    }
}

#[tokio::test]
async fn positions_move_as_workloads_are_admitted_and_priorities_map_to_classes() {
    let Some(cluster) = two_queues(overlay_rbac("kueue")).await else {
        return;
    };
    create_cluster_object(&cluster, "kueue.x-k8s.io", "v1beta1", "WorkloadPriorityClass", "workloadpriorityclasses",
        json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"}, "value": 1000})).await;
    let server = cluster
        .jobgate(&[
            "--kueue",
            "--kueue-positions-interval-ms",
            "200",
            "--kueue-priority-class",
            "10=urgent",
            "--pod-priority-class",
            "10=pods-urgent,-5=pods-low",
            "--tenant-max-priority",
            &format!("{}=10", cluster.namespace()),
        ])
        .await;
    // The namespace's maximum priority bounds the classes its jobs may reach.
    let refused = server.submit_answer(gated("too-high", "team-a", 11)).await;
    let error = &refused["errors"][0];
    assert_eq!(error["extensions"]["code"], "BAD_USER_INPUT", "{refused}");
    assert_eq!(error["extensions"]["field"], "input.priority", "{refused}");
    let running = server.submit(gated("running", "team-a", 0)).await;
    server.wait_phase(&running, "RUNNING").await;
    let a1 = server.submit(gated("a1", "team-a", 0)).await;
    let b1 = server.submit(gated("b1", "team-b", 0)).await;
    let a2 = server.submit(gated("a2", "team-a", 0)).await;
    wait_places(
        &server,
        &[(&a1, Some((1, 1))), (&b1, Some((2, 1))), (&a2, Some((3, 2)))],
        "three waiting in two LocalQueues",
    )
    .await;
    let job = server.job_with(&a1, PLACE).await;
    assert!(
        job["queue"]["estimate"]
            .as_str()
            .unwrap()
            .contains("places in line"),
        "{job}"
    );

    // A job of priority 10 takes the WorkloadPriorityClass `urgent` (and its pods the
    // PriorityClass `pods-urgent`): it goes ahead of every waiting one.
    let urgent = server.submit(gated("urgent", "team-b", 10)).await;
    let k8s = created(&cluster, &urgent).await;
    assert_eq!(
        k8s.metadata.labels.as_ref().unwrap()["kueue.x-k8s.io/priority-class"],
        "urgent"
    );
    let pod_spec = k8s.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.priority_class_name.as_deref(), Some("pods-urgent"));
    let plain = created(&cluster, &a1).await;
    assert!(
        !plain
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .contains_key("kueue.x-k8s.io/priority-class")
    );
    assert_eq!(
        plain
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .priority_class_name
            .as_deref(),
        Some("pods-low")
    );
    wait_places(
        &server,
        &[
            (&urgent, Some((1, 1))),
            (&a1, Some((2, 1))),
            (&b1, Some((3, 2))),
            (&a2, Some((4, 2))),
        ],
        "the urgent job first",
    )
    .await;

    // The running job ends: the urgent one is admitted, everyone moves up.
    cluster.emu().simulation().open_gate("running");
    wait_places(
        &server,
        &[
            (&urgent, None),
            (&a1, Some((1, 1))),
            (&b1, Some((2, 1))),
            (&a2, Some((3, 2))),
        ],
        "after an admission",
    )
    .await;
    server.wait_phase(&urgent, "RUNNING").await;
}

#[tokio::test]
async fn many_readers_share_one_refresher() {
    let Some(cluster) = two_queues(overlay_rbac("kueue")).await else {
        return;
    };
    // An hour between timed refreshes: only Workload changes start one here.
    let server = cluster
        .jobgate(&["--kueue", "--kueue-positions-interval-ms", "3600000"])
        .await;
    let running = server.submit(gated("running", "team-a", 0)).await;
    server.wait_phase(&running, "RUNNING").await;
    let a1 = server.submit(gated("a1", "team-a", 0)).await;
    let b1 = server.submit(gated("b1", "team-b", 0)).await;
    wait_places(
        &server,
        &[(&a1, Some((1, 1))), (&b1, Some((2, 1)))],
        "two waiting",
    )
    .await;
    let before = cluster.emu().requests().of(PENDING, "get");
    assert!(before >= 2, "one request per LocalQueue: {before}");
    for _ in 0..3 {
        let readers = (0..50).map(|i| {
            let id = if i % 2 == 0 { &a1 } else { &b1 };
            server.job_with(id, PLACE)
        });
        for job in futures::future::join_all(readers).await {
            assert!(job["queue"]["position"].is_i64(), "{job}");
        }
    }
    let after = cluster.emu().requests().of(PENDING, "get");
    // 150 reads; at most one refresh (one request per LocalQueue) a late Workload change
    // may have started meanwhile.
    assert!(after - before <= 2, "readers made requests: {before} → {after}");
    assert_eq!(
        cluster
            .emu()
            .requests()
            .of("clusterqueues.visibility.kueue.x-k8s.io/pendingworkloads", "get"),
        0
    );
}

#[tokio::test]
async fn without_the_right_to_read_positions_are_null_and_say_why() {
    // The kueue overlay's RBAC without its visibility rule.
    let mut rbac = overlay_rbac("kueue");
    for object in &mut rbac {
        if object["kind"] == "Role" && object["metadata"]["name"] == "jobgate-kueue" {
            let rules = object["rules"].as_array_mut().unwrap();
            rules.retain(|r| r["apiGroups"][0] != "visibility.kueue.x-k8s.io");
        }
    }
    let Some(cluster) = two_queues(rbac).await else {
        return;
    };
    let server = cluster
        .jobgate(&["--kueue", "--kueue-positions-interval-ms", "200"])
        .await;
    let running = server.submit(gated("running", "team-a", 0)).await;
    server.wait_phase(&running, "RUNNING").await;
    let waiting = server.submit(gated("waiting", "team-a", 0)).await;
    let job = server
        .job_until(&waiting, PLACE, "the reason positions are missing", |j| {
            j["queue"]["estimate"]
                .as_str()
                .is_some_and(|e| e.contains("may not read"))
        })
        .await;
    assert_eq!(job["queue"]["position"], Value::Null, "{job}");
    assert_eq!(job["queue"]["localQueuePosition"], Value::Null, "{job}");
    assert!(
        job["queue"]["estimate"].as_str().unwrap().contains("403"),
        "{job}"
    );
    assert_eq!(server.readyz().await, 200, "jobgate stays ready");
}
