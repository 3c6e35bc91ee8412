//! What refuses a job: Kubernetes inputs validated before anything is created, a namespace
//! the cluster does not have, and a foreign Job already under the job's name.

use serde_json::json;

use crate::common::cluster::Cluster;
use crate::support::{JOB_FIELDS, input, status_events};

#[tokio::test]
async fn kubernetes_inputs_are_validated_before_anything_is_created() {
    let Some(cluster) = Cluster::emulated("it counts the API server's requests").await else {
        return;
    };
    let server = cluster
        .jobgate(&[
            "--namespace",
            "default",
            "--allowed-namespaces",
            "default,ml",
            "--service-accounts",
            "trainer",
        ])
        .await;
    for (bad, field) in [
        (json!({"command": ["true"]}), "input.image"),
        (input(&[], json!({"namespace": "prod"})), "input.namespace"),
        (
            input(&[], json!({"serviceAccountName": "admin"})),
            "input.serviceAccountName",
        ),
        (
            input(
                &[],
                json!({"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}),
            ),
            "input.resources.requests.memory",
        ),
    ] {
        let body = server.submit_answer(bad).await;
        assert_eq!(
            body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{body}"
        );
        assert_eq!(body["errors"][0]["extensions"]["field"], field, "{body}");
    }
    assert!(cluster.managed_jobs().await.is_empty(), "nothing was created");
    assert_eq!(cluster.emu().requests().of("jobs.batch", "create"), 0);
    // The form a client builds from `templates` says the same: the image is required, the
    // namespaces and service accounts are the allowed ones, the TTL defaults to the server's.
    let templates = server
        .gql_ok(
            "{ templates { name kind fields { name required choices default } } namespaces }",
            json!({}),
        )
        .await;
    let container = &templates["templates"][0];
    assert_eq!(container["name"], "container");
    assert_eq!(container["kind"], "batch/v1 Job");
    let field = |name: &str| {
        container["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no field {name} in {container}"))
            .clone()
    };
    assert_eq!(field("image")["required"], true);
    assert_eq!(field("namespace")["choices"], json!(["default", "ml"]));
    assert_eq!(field("serviceAccountName")["choices"], json!(["trainer"]));
    assert_eq!(field("ttlSecondsAfterFinished")["default"], 3600);
    field("resources");
    assert_eq!(templates["namespaces"], json!(["default", "ml"]));
    // Watched per allowed namespace: one Jobs and one Pods watch in each, and one watch of
    // CustomResourceDefinitions (no workload kind is installed here).
    server.wait_ready_is(200).await;
    // Ready once every list is answered; each watch opens as its (empty) list ends.
    cluster
        .until("the watches open", || async {
            cluster.emu().requests().open_watches >= 5
        })
        .await;
    assert_eq!(cluster.emu().requests().open_watches, 5);
}

#[tokio::test]
async fn a_job_for_a_missing_namespace_fails_with_the_clusters_answer() {
    let cluster = Cluster::start().await;
    let server = cluster.jobgate(&[]).await;
    let id = server.submit(input(&[], json!({"namespace": "nowhere"}))).await;
    let events = status_events(&server, &id).await;
    assert_eq!(
        events.last().unwrap(),
        &("FAILED".to_owned(), Some("NamespaceNotFound".to_owned()))
    );
    let j = server.job_with(&id, JOB_FIELDS).await;
    assert!(j["message"].as_str().unwrap().contains("nowhere"), "{j}");
}

#[tokio::test]
async fn a_foreign_job_under_our_name_fails_the_job_loudly() {
    let Some(cluster) = Cluster::emulated("it takes the API server down, writes to the emulator's store directly, scripts its pods through EMULATOR_GATE").await else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    server.wait_ready_is(200).await;
    cluster.emu().go_down().await;
    let id = server.submit(input(&[], json!({}))).await;
    // While jobgate cannot reach the cluster, someone else takes the Job's name.
    cluster
        .emu()
        .store()
        .create(
            "jobs.batch",
            Some(cluster.namespace()),
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": format!("jobgate-{id}"), "labels": {"team": "other"}},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "env": [{"name": "EMULATOR_GATE", "value": "x"}]}]}}},
            }),
        )
        .unwrap();
    cluster.emu().come_up().await.unwrap();
    let events = status_events(&server, &id).await;
    assert_eq!(
        events.last().unwrap(),
        &("FAILED".to_owned(), Some("WorkloadConflict".to_owned())),
        "{events:?}"
    );
    let j = server.job_with(&id, JOB_FIELDS).await;
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("does not belong to this job"),
        "{j}"
    );
    // The other Job is left alone.
    let other = cluster.jobs().get(&format!("jobgate-{id}")).await.unwrap();
    assert_eq!(other.metadata.labels.unwrap()["team"], "other");
}
