//! What refuses a job: Kubernetes inputs validated before anything is created, a namespace
//! the cluster does not have, and a foreign Job already under the job's name.

use serde_json::{Value, json};

use crate::common::cluster::{Cluster, overlay_rbac};
use crate::support::{JOB_FIELDS, input, status_events};

/// The namespace deploy/overlays/multi-namespace grants jobgate besides its own.
const SECOND_NAMESPACE: &str = "batch-jobs";

#[tokio::test]
async fn kubernetes_inputs_are_validated_before_anything_is_created() {
    // Two allowed namespaces, as deploy/overlays/multi-namespace has them: the test's own (in
    // place of `jobgate`) and `batch-jobs`.
    let Some(cluster) = Cluster::emulated_as("it counts the API server's requests", "multi-namespace").await
    else {
        return;
    };
    let allowed = [SECOND_NAMESPACE, cluster.namespace()];
    let joined = allowed.join(",");
    let server = cluster
        .jobgate(&["--allowed-namespaces", &joined, "--service-accounts", "trainer"])
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
    // (`batch-jobs` sorts before `jobgate-test-…`: the order given is the sorted one.)
    assert_eq!(field("namespace")["choices"], json!(allowed));
    assert_eq!(field("serviceAccountName")["choices"], json!(["trainer"]));
    assert_eq!(field("ttlSecondsAfterFinished")["default"], 3600);
    field("resources");
    assert_eq!(templates["namespaces"], json!(allowed));
    // Watched per allowed namespace: one Jobs and one Pods watch in each. The overlay grants
    // no CustomResourceDefinitions (deploy/overlays/workload-kinds does), so that watch is
    // refused once and not asked again.
    server.wait_ready_is(200).await;
    // Ready once every list is answered; each watch opens as its (empty) list ends.
    cluster
        .until("the watches open", || async {
            cluster.emu().requests().open_watches >= 4
        })
        .await;
    assert_eq!(cluster.emu().requests().open_watches, 4);
}

/// deploy/base's rights in every namespace: its Role as a ClusterRole, bound to jobgate's
/// account by a ClusterRoleBinding.
fn base_rights_everywhere() -> Vec<Value> {
    let mut rbac = overlay_rbac("base");
    for object in &mut rbac {
        let cluster_kind = match object["kind"].as_str() {
            Some("Role") => "ClusterRole",
            Some("RoleBinding") => {
                object["roleRef"]["kind"] = json!("ClusterRole");
                "ClusterRoleBinding"
            }
            other => panic!("deploy/base has a {other:?}"),
        };
        object["kind"] = json!(cluster_kind);
        object["metadata"].as_object_mut().unwrap().remove("namespace");
    }
    rbac
}

#[tokio::test]
async fn a_job_for_a_missing_namespace_fails_with_the_clusters_answer() {
    // The API server says a namespace is missing only to a client allowed there (it authorizes
    // before it looks): under deploy/'s Roles, which live only in namespaces that exist, the
    // answer is a 403. So jobgate has base's rights cluster-wide here.
    let cluster = Cluster::start_with_rbac(base_rights_everywhere()).await;
    let missing = format!("{}-missing", cluster.namespace());
    let allowed = format!("{},{missing}", cluster.namespace());
    let server = cluster.jobgate(&["--allowed-namespaces", &allowed]).await;
    let id = server.submit(input(&[], json!({"namespace": missing}))).await;
    let events = status_events(&server, &id).await;
    assert_eq!(
        events.last().unwrap(),
        &("FAILED".to_owned(), Some("NamespaceNotFound".to_owned()))
    );
    let j = server.job_with(&id, JOB_FIELDS).await;
    assert!(j["message"].as_str().unwrap().contains(&missing), "{j}");
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
