//! What jobgate does when the API server refuses it (403, RBAC): each path run end to end
//! against the emulator enforcing deploy/'s RBAC with one right taken away, seen through
//! GraphQL as a user sees it. A forbidden create fails the job with the API server's message
//! and is not retried; a forbidden CustomResourceDefinition watch leaves
//! workload kinds as found at start (said once in the log), and a kind jobgate may not watch
//! is reported unavailable.

use serde_json::{Value, json};

use crate::common::cluster::{Cluster, overlay_rbac};
use crate::common::{Polling, Server};
use crate::support::{JOB_FIELDS, input};

/// The RBAC of deploy/`overlay` without `verb` on `resource` (`jobs`, `pods/log`, …): the
/// verb is dropped from every rule naming the resource, and a rule left with no verb or no
/// resource goes.
fn overlay_without(overlay: &str, resource: &str, verb: Option<&str>) -> Vec<Value> {
    without(overlay_rbac(overlay), resource, verb)
}

/// `rbac` without `verb` on `resource`, as [`overlay_without`] takes it away.
fn without(mut rbac: Vec<Value>, resource: &str, verb: Option<&str>) -> Vec<Value> {
    for object in &mut rbac {
        if let Some(rules) = object["rules"].as_array_mut() {
            for rule in rules.iter_mut() {
                let names = rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == resource);
                if !names {
                    continue;
                }
                match verb {
                    Some(verb) => rule["verbs"].as_array_mut().unwrap().retain(|v| v != verb),
                    None => rule["resources"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|r| r != resource),
                }
            }
            rules.retain(|r| {
                !r["verbs"].as_array().unwrap().is_empty() && !r["resources"].as_array().unwrap().is_empty()
            });
        }
    }
    rbac
}

const USER: &str = "system:serviceaccount:jobgate:jobgate";

#[tokio::test]
async fn a_forbidden_create_fails_the_job_with_the_api_servers_message_once() {
    let Some(cluster) = Cluster::emulated_with_rbac(
        "RBAC with a right taken away",
        overlay_without("base", "jobs", Some("create")),
    )
    .await
    else {
        return;
    };
    let server = cluster.jobgate(&[]).await;
    let id = server.submit(input(&[], json!({}))).await;
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("FAILED")
    );
    let job = server.job_with(&id, JOB_FIELDS).await;
    let expected = format!(
        "jobs.batch is forbidden: User \"{USER}\" cannot create resource \"jobs\" in API group \"batch\" in the namespace \"{}\"",
        cluster.namespace()
    );
    assert!(job["message"].as_str().unwrap().contains(&expected), "{job}");
    let events = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { events(last: 100) { phase reason message } } }",
            json!({"id": id}),
        )
        .await;
    let failed = events["job"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["phase"] == "FAILED")
        .cloned()
        .unwrap_or_else(|| panic!("no FAILED event: {events}"));
    assert_eq!(failed["reason"], "Forbidden", "{failed}");
    assert!(
        failed["message"].as_str().unwrap().contains(&expected),
        "{failed}"
    );
    // Refused once, and not asked again.
    assert_eq!(cluster.emu().requests().of("jobs.batch", "create"), 1);
    assert!(cluster.managed_jobs().await.is_empty());
}

/// A workload job's input for the emulated operator of its template.
fn workload_input(template: &str) -> Value {
    json!({
        "template": template,
        "image": "example/work:1",
        "command": ["python3", "main.py"],
        "env": [{"name": "EMULATOR_RUN_MS", "value": "100"}],
    })
}

async fn template(server: &Server, name: &str) -> Value {
    let data = server
        .gql_ok("{ templates { name available unavailableReason } }", json!({}))
        .await;
    data["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no template {name}: {data}"))
}

const CRD_WARNING: &str = "cannot watch CustomResourceDefinitions";

#[tokio::test]
async fn without_rights_on_crds_and_a_kind_jobgate_finds_kinds_at_start_and_says_so_once() {
    // deploy/overlays/workload-kinds without its right on CustomResourceDefinitions, and
    // without RayJobs.
    let Some(cluster) = Cluster::emulated_with_rbac(
        "RBAC with a right taken away",
        without(
            overlay_without("workload-kinds", "customresourcedefinitions", None),
            "rayjobs",
            None,
        ),
    )
    .await
    else {
        return;
    };
    cluster
        .emu()
        .register_workload_crds(&["PyTorchJob", "RayJob"])
        .unwrap();
    let server = cluster.jobgate(&[]).await;
    let polling = Polling::start();
    while server.log_text().matches(CRD_WARNING).count() == 0 {
        polling
            .pause(|| format!("never said: {CRD_WARNING}; log:\n{}", server.log_text()))
            .await;
    }
    // A kind installed after start is not found until the next start.
    cluster.emu().register_workload_crds(&["TFJob"]).unwrap();
    let ray = loop {
        let ray = template(&server, "rayjob").await;
        if ray["available"] == false {
            break ray;
        }
        polling.pause(|| format!("rayjob stays available: {ray}")).await;
    };
    let reason = ray["unavailableReason"].as_str().unwrap();
    assert!(reason.contains("rayjobs"), "{ray}");
    assert!(
        reason.contains(&format!(
            "User \"{USER}\" cannot list resource \"rayjobs\" in API group \"ray.io\""
        )),
        "{ray}"
    );
    // A kind it may use still runs.
    let id = server.submit(workload_input("pytorchjob")).await;
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("SUCCEEDED")
    );
    let tf = template(&server, "tfjob").await;
    assert_eq!(tf["available"], false, "{tf}");
    // Refused once, said once, not asked again.
    assert_eq!(
        server.log_text().matches(CRD_WARNING).count(),
        1,
        "{}",
        server.log_text()
    );
    let counts = cluster.emu().requests();
    assert_eq!(
        counts.of("customresourcedefinitions.apiextensions.k8s.io", "list"),
        1,
        "{counts:?}"
    );
    assert_eq!(
        counts.of("customresourcedefinitions.apiextensions.k8s.io", "watch"),
        0,
        "{counts:?}"
    );
}
