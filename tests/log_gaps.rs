//! What the kubelet forgets, as a user reads it: on the Kubernetes executor (the API emulator,
//! whose kubelet rotates pods' log files and removes a deleted pod's containers), a follow cut
//! while the log rotates, or before the pod's containers are removed, leaves a marked gap in
//! the job's archived output (`Job.logLines`, `Job.logs`) and `Job.logComplete` false with its
//! reason, across a restart of jobgate; a follow that reads from start to end stays whole
//! across rotations; a local job's output is always whole. jobgate runs in-process.

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use common::{Polling, Server};
use kube_emulator::{Options, SimConfig};
use serde_json::{Value, json};

fn kube_input(env: &[(&str, &str)]) -> Value {
    json!({
        "image": "busybox:1.36",
        "command": ["sh", "-c", "print lines"],
        "env": env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
        "ttlSecondsAfterFinished": 0,
    })
}

/// The job's phase, archive summary and completeness.
async fn log_state(server: &Server, id: &str) -> Value {
    server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { phase logComplete logIncompleteReason \
             logArchive { lines gaps truncated } } }",
            json!({"id": id}),
        )
        .await["job"]
        .clone()
}

/// Every archived line of the job, read with `logLines`.
async fn archived_texts(server: &Server, id: &str) -> Vec<String> {
    let data = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { logLines(first: 1000) { edges { node { text } } \
             pageInfo { hasNextPage } } } }",
            json!({"id": id}),
        )
        .await;
    let page = &data["job"]["logLines"];
    assert_eq!(page["pageInfo"]["hasNextPage"], false);
    page["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["text"].as_str().unwrap().to_owned())
        .collect()
}

/// The name of the job's (first) pod, once it exists.
async fn pod_of(cluster: &Cluster, id: &str) -> String {
    let polling = Polling::start();
    loop {
        if let Some(p) = cluster.pods_of(id).await.first() {
            return p.metadata.name.clone().unwrap();
        }
        polling.pause(|| "the job's pod never appeared".into()).await;
    }
}

async fn wait_pod_succeeded(cluster: &Cluster, pod: &str) {
    cluster
        .until("the pod succeeds", || async {
            cluster
                .pods()
                .get_opt(pod)
                .await
                .unwrap()
                .and_then(|p| p.status?.phase)
                .as_deref()
                == Some("Succeeded")
        })
        .await;
}

/// Waits until the TTL of 0 took the Job and, once jobgate let them go, its pods: their logs
/// are archived as far as they ever will be.
async fn wait_job_and_pods_gone(cluster: &Cluster, id: &str) {
    cluster
        .until("the TTL controller deletes the Job and its pods", || async {
            cluster
                .jobs()
                .get_opt(&format!("jobgate-{id}"))
                .await
                .unwrap()
                .is_none()
                && cluster.pods_of(id).await.is_empty()
        })
        .await;
}

/// Cuts jobgate's log streams and refuses every log read from now on, until jobgate has tried
/// (and been refused) to open the log again: its stream is cut while the container runs.
async fn cut_follow_and_refuse_reads(cluster: &Cluster) {
    let refused = cluster.emu().requests().injected_failures;
    cluster.emu().throttle("pods/log", "log", 1);
    cluster.emu().drop_log_streams();
    cluster
        .until("jobgate opens the log again", || async {
            cluster.emu().requests().injected_failures > refused
        })
        .await;
}

fn numbered(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|i| format!("line {i}")).collect()
}

/// A job that writes `line 0` … `line 4` as it starts, then runs until the gate `more` opens.
fn gated_job() -> Value {
    kube_input(&[
        ("EMULATOR_LOG", "line 0"),
        ("EMULATOR_LOG_LINES", "4"),
        ("EMULATOR_GATE", "more"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_cut_while_the_kubelet_rotates_the_log_leaves_a_marked_gap() {
    let Some(cluster) = Cluster::emulated_with(
        "the kubelet's log rotation and container removal, cut log streams",
        Options {
            simulation: SimConfig {
                log_max_bytes: Some(64),
                ..SimConfig::default()
            },
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let args = cluster.args(&[]);
    let mut server = Server::start(&args).await;
    let id = server.submit(gated_job()).await;
    let pod = pod_of(&cluster, &id).await;
    server.wait_archive_reaches(&id, 5).await;
    // The follow is cut, and every log read is refused while the pod writes on: the kubelet
    // rotates its log several times before jobgate can read it again.
    cut_follow_and_refuse_reads(&cluster).await;
    for line in numbered(5, 59) {
        cluster.emu().store().append_log(cluster.namespace(), &pod, &line);
    }
    cluster.emu().simulation().open_gate("more");
    wait_pod_succeeded(&cluster, &pod).await;
    let current: Vec<String> = cluster
        .emu()
        .store()
        .log_view(cluster.namespace(), &pod)
        .unwrap()
        .current()
        .iter()
        .map(|(_, l)| l.clone())
        .collect();
    assert!(
        current.len() < 50 && current.last().map(String::as_str) == Some("line 59"),
        "the log was rotated: {current:?}"
    );
    cluster.emu().unthrottle();
    wait_job_and_pods_gone(&cluster, &id).await;

    let marker =
        format!("[jobgate: lines lost: the kubelet rotated the log of pod {pod} before jobgate read them]");
    let mut expected = numbered(0, 4);
    expected.push(marker.clone());
    expected.extend(current);
    assert_eq!(
        archived_texts(&server, &id).await,
        expected,
        "the gap stands where the lines were"
    );
    let tail = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { logs(tailLines: 1000) } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(tail["job"]["logs"], expected.join("\n"));
    let state = log_state(&server, &id).await;
    assert_eq!(state["logComplete"], false, "{state}");
    assert!(
        state["logIncompleteReason"].as_str().unwrap().contains("rotated"),
        "{state}"
    );
    assert_eq!(state["logArchive"]["gaps"], 1);
    assert_eq!(state["logArchive"]["truncated"], false);

    // The gap is kept across a restart.
    server.stop().await;
    let server = server.start_again(&args).await;
    assert_eq!(archived_texts(&server, &id).await, expected);
    assert_eq!(log_state(&server, &id).await["logComplete"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_cut_before_the_kubelet_removes_a_deleted_pods_containers_leaves_a_marked_gap() {
    let Some(cluster) = Cluster::emulated_with(
        "the kubelet's log rotation and container removal, cut log streams",
        Options {
            simulation: SimConfig {
                kubelet_gc: Some(Duration::ZERO),
                ..SimConfig::default()
            },
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server.submit(gated_job()).await;
    let pod = pod_of(&cluster, &id).await;
    server.wait_archive_reaches(&id, 5).await;
    // The follow is cut and reads are refused while the pod writes on, ends, and is deleted
    // (the Job's TTL of 0): jobgate's finalizer keeps the pod object, not its containers.
    cut_follow_and_refuse_reads(&cluster).await;
    for line in numbered(5, 9) {
        cluster.emu().store().append_log(cluster.namespace(), &pod, &line);
    }
    cluster.emu().simulation().open_gate("more");
    cluster
        .until("the kubelet removes the deleted pod's containers", || async {
            cluster.emu().store().log_collected(cluster.namespace(), &pod)
        })
        .await;
    cluster.emu().unthrottle();
    wait_job_and_pods_gone(&cluster, &id).await;

    let mut expected = numbered(0, 4);
    expected.push(format!(
        "[jobgate: lines lost: the kubelet removed the containers of pod {pod}, and their log, before jobgate read all of it]"
    ));
    assert_eq!(archived_texts(&server, &id).await, expected);
    server.wait_terminal(&id).await;
    let state = log_state(&server, &id).await;
    assert_eq!(state["phase"], "SUCCEEDED", "{state}");
    assert_eq!(state["logComplete"], false, "{state}");
    assert!(
        state["logIncompleteReason"].as_str().unwrap().contains("removed"),
        "{state}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_from_start_to_end_stays_whole_across_rotations() {
    let Some(cluster) = Cluster::emulated_with(
        "the kubelet's log rotation and container removal, cut log streams",
        Options {
            simulation: SimConfig {
                log_max_bytes: Some(64),
                kubelet_gc: Some(Duration::ZERO),
                ..SimConfig::default()
            },
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server.submit(gated_job()).await;
    let pod = pod_of(&cluster, &id).await;
    server.wait_archive_reaches(&id, 5).await;
    // The follow is open: it reads on across every rotation.
    for line in numbered(5, 59) {
        cluster.emu().store().append_log(cluster.namespace(), &pod, &line);
    }
    cluster.emu().simulation().open_gate("more");
    wait_job_and_pods_gone(&cluster, &id).await;
    assert_eq!(archived_texts(&server, &id).await, numbered(0, 59));
    let state = log_state(&server, &id).await;
    assert_eq!(state["logComplete"], true, "{state}");
    assert_eq!(state["logIncompleteReason"], Value::Null);
    assert_eq!(state["logArchive"]["gaps"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_jobs_output_is_whole() {
    let server = Server::start(&[]).await;
    let id = server
        .submit(json!({"command": ["sh", "-c", "echo one; echo two"]}))
        .await;
    server.wait_terminal(&id).await;
    server.wait_archive_reaches(&id, 2).await;
    assert_eq!(archived_texts(&server, &id).await, ["one", "two"]);
    let state = log_state(&server, &id).await;
    assert_eq!(state["logComplete"], true, "{state}");
    assert_eq!(state["logIncompleteReason"], Value::Null);
}
