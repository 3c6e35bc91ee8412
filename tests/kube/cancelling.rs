//! Cancelling a job on Kubernetes: CANCELLED is recorded, then its Job and pods are deleted;
//! the cancel is recorded as a Kubernetes Event on the Job; and a cancel made while the API
//! server is away still stops the workload after jobgate restarts.

use kube::api::{Api, ListParams};
use serde_json::json;

use crate::common::cluster::Cluster;
use crate::support::{JOB_FIELDS, input};

#[tokio::test]
async fn cancel_records_cancelled_then_deletes_the_job_and_its_pods() {
    let Some(cluster) =
        Cluster::emulated("it drives the emulated kubelet, scripts its pods through EMULATOR_GATE").await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(&[("EMULATOR_GATE", "held")], json!({})))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    // The job's pods, as jobgate's watch sees them, are part of the job.
    let pods_of = || async {
        server
            .gql_ok(
                "query($id: ID!) { job(id: $id) { pods { name phase exitCode createdAt } } }",
                json!({"id": id}),
            )
            .await["job"]["pods"]
            .clone()
    };
    cluster
        .until("the running pod is shown", || async {
            pods_of()
                .await
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["phase"] == "Running")
        })
        .await;
    let listed: Vec<String> = cluster
        .pods_of(&id)
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    let shown: Vec<String> = pods_of()
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shown, listed);
    assert_eq!(server.cancel(&id).await, "CANCELLED");
    let name = format!("jobgate-{id}");
    cluster
        .until("the Job is deleted", || async {
            cluster.jobs().get_opt(&name).await.unwrap().is_none()
        })
        .await;
    cluster
        .until("its pods are deleted", || async {
            cluster.pods_of(&id).await.is_empty()
        })
        .await;
    // The deletion does not turn the cancelled job into a vanished one.
    cluster.emu().simulation().open_gate("held");
    // jobgate has seen those deletions once it has seen what its watches sent after them: a
    // job started now, its pod shown running (its pods' watch), then ended (its Job's status).
    let later = server
        .submit(input(&[("EMULATOR_GATE", "later")], json!({})))
        .await;
    server
        .job_until(
            &later,
            "pods { phase }",
            "the later job's pod is shown running",
            |job| {
                job["pods"]
                    .as_array()
                    .is_some_and(|pods| pods.iter().any(|p| p["phase"] == "Running"))
            },
        )
        .await;
    cluster.emu().simulation().open_gate("later");
    assert_eq!(server.terminal_phase(&later).await, "SUCCEEDED");
    let done = server.job_with(&id, JOB_FIELDS).await;
    assert_eq!(done["phase"], "CANCELLED");
    // Cancelling a finished job is refused and changes nothing.
    let body = server
        .gql(
            "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "FAILED_PRECONDITION");
}

#[tokio::test]
async fn a_cancel_is_recorded_as_a_kubernetes_event_on_the_job() {
    let Some(cluster) = Cluster::emulated("it scripts its pods through EMULATOR_GATE").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(&[("EMULATOR_GATE", "held")], json!({})))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    server.cancel(&id).await;
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(cluster.client.clone(), cluster.namespace());
    let name = format!("jobgate-{id}");
    cluster
        .until("jobgate records why it deleted the Job", || async {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.involved_object.name.as_deref() == Some(name.as_str())
                        && e.reason.as_deref() == Some("Cancelled")
                        && e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("jobgate")
                })
        })
        .await;
}

#[tokio::test]
async fn a_cancel_made_while_the_api_server_is_away_stops_the_workload_after_a_restart() {
    let Some(cluster) = Cluster::emulated(
        "it takes the API server down, drives the emulated kubelet, scripts its pods through EMULATOR_GATE",
    )
    .await
    else {
        return;
    };
    let mut server = cluster.spawn_jobgate(&[]).await;
    let id = server
        .submit(input(&[("EMULATOR_GATE", "held")], json!({})))
        .await;
    server.wait_phase(&id, "RUNNING").await;
    let name = format!("jobgate-{id}");
    cluster.emu().go_down().await;
    assert_eq!(server.cancel(&id).await, "CANCELLED");
    // jobgate dies before the API server is back: only what it stored can stop the Job now.
    server.kill9();
    cluster.emu().come_up().await.unwrap();
    assert!(
        cluster.jobs().get_opt(&name).await.unwrap().is_some(),
        "the Job outlived the first jobgate"
    );
    let server = server.start_again(&cluster.args(&[])).await;
    cluster
        .until(
            "the cancelled job's Job is deleted by the restarted jobgate",
            || async { cluster.jobs().get_opt(&name).await.unwrap().is_none() },
        )
        .await;
    // Its pods never get to finish the work.
    cluster.emu().simulation().open_gate("held");
    assert_eq!(server.job_with(&id, JOB_FIELDS).await["phase"], "CANCELLED");
    cluster
        .until("its pods are deleted", || async {
            cluster.pods_of(&id).await.is_empty()
        })
        .await;
}
