//! What jobgate does when the API server refuses it (403, RBAC): each path run end to end
//! against the emulator enforcing deploy/'s RBAC with one right taken away, seen through
//! GraphQL (and `/readyz`, `/metrics`, jobgate's log) as a user and an operator see it. A
//! forbidden create fails the job with the API server's message and is not retried; a
//! forbidden CustomResourceDefinition watch leaves workload kinds as found at start (said once
//! in the log), and a kind jobgate may not watch is reported unavailable; a pod whose log
//! jobgate may not read leaves the job's log marked incomplete with the API server's message,
//! across a restart, and the pod let go; a replica refused its Lease is not ready, says why
//! once, and becomes ready by itself once the right is granted.

use serde_json::{Value, json};

use crate::common::cluster::{Cluster, overlay_rbac};
use crate::common::postgres::Postgres;
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

/// What the tests read of a job's archived log.
const LOG_FIELDS: &str = "phase logComplete logIncompleteReason logs(tailLines: 10) \
    logLines(first: 10) { edges { node { text source } } } logArchive { lines gaps truncated }";

const LOG_REFUSED: &str = "the API server refuses jobgate pods' logs";

#[tokio::test]
async fn a_pods_log_jobgate_may_not_read_is_marked_missing_with_the_api_servers_message() {
    let Some(cluster) = Cluster::emulated_with_rbac(
        "RBAC with a right taken away",
        overlay_without("base", "pods/log", None),
    )
    .await
    else {
        return;
    };
    let mut server = cluster.jobgate(&[]).await;
    let id = server
        .submit(input(
            &[
                ("EMULATOR_LOG", "a line jobgate may not read"),
                ("EMULATOR_GATE", "refused"),
            ],
            json!({}),
        ))
        .await;
    // Refused while the pod runs: said in jobgate's log, then tried again with back-off.
    let polling = Polling::start();
    while !server.log_text().contains(LOG_REFUSED) {
        polling
            .pause(|| format!("never said: {LOG_REFUSED}; log:\n{}", server.log_text()))
            .await;
    }
    cluster.emu().simulation().open_gate("refused");
    // The job itself completes with its own outcome.
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("SUCCEEDED")
    );
    let pods = cluster.pods_of(&id).await;
    let pod = pods[0].metadata.name.clone().unwrap();
    let refusal = format!(
        "pods \"{pod}\" is forbidden: User \"{USER}\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"{}\"",
        cluster.namespace()
    );
    let check = |job: &Value| {
        assert_eq!(job["phase"], "SUCCEEDED", "{job}");
        assert_eq!(job["logComplete"], false, "{job}");
        let reason = job["logIncompleteReason"].as_str().unwrap();
        assert!(reason.contains(&refusal), "{job}");
        // Where the pod's lines would stand, a marker quoting the API server: not an empty
        // log that reads as whole, nor the line jobgate was refused.
        let marker = format!("the API server refused jobgate the log of pod {pod}: {refusal}");
        let logs = job["logs"].as_str().unwrap();
        assert!(
            logs.starts_with("[jobgate: lines lost: ") && logs.contains(&marker),
            "{job}"
        );
        assert!(!logs.contains("a line jobgate may not read"), "{job}");
        let edges = job["logLines"]["edges"].as_array().unwrap();
        assert_eq!(edges.len(), 1, "{job}");
        assert_eq!(edges[0]["node"]["source"], pod.as_str(), "{job}");
        assert!(
            edges[0]["node"]["text"].as_str().unwrap().contains(&marker),
            "{job}"
        );
        assert_eq!(job["logArchive"]["gaps"], 1, "{job}");
        assert_eq!(job["logArchive"]["truncated"], false, "{job}");
    };
    let job = server
        .job_until(&id, LOG_FIELDS, "the log marked incomplete", |job| {
            job["logComplete"] == false
        })
        .await;
    check(&job);
    // The pod is let go (its log-archive finalizer removed): nothing waits for a right that
    // may never come.
    cluster
        .until("the pod let go of its log-archive finalizer", || async {
            let pods = cluster.pods_of(&id).await;
            pods.iter().all(|p| {
                p.metadata
                    .finalizers
                    .as_ref()
                    .is_none_or(|f| !f.iter().any(|f| f == "jobgate.io/log-archive"))
            })
        })
        .await;
    // Said once; asked again with back-off, not in a loop: a pod that ran for a moment is
    // asked for its log a handful of times (a loop without back-off asks hundreds).
    assert_eq!(
        server.log_text().matches(LOG_REFUSED).count(),
        1,
        "{}",
        server.log_text()
    );
    let asked = cluster.emu().requests().of("pods/log", "log");
    assert!((2..=15).contains(&asked), "asked {asked} times for the pod's log");

    // Across a restart, the job's log says the same.
    server.stop().await;
    let server = server.start_again(&cluster.args(&[])).await;
    check(&server.job_with(&id, LOG_FIELDS).await);
}

/// The RBAC of deploy/overlays/ha (replicas sharing PostgreSQL, coordinated by Leases).
const HA: &str = "ha";

#[tokio::test]
async fn a_replica_refused_its_lease_is_unready_says_why_once_and_recovers_once_granted() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let Some(cluster) = Cluster::emulated_with_rbac(
        "it grants a right while jobgate runs",
        overlay_without(HA, "leases", None),
    )
    .await
    else {
        return;
    };
    let url = pg.url();
    let server = cluster
        .jobgate(&["--database-url", &url, "--lease-duration-secs", "4"])
        .await;
    let refusal = format!(
        "leases.coordination.k8s.io is forbidden: User \"{USER}\" cannot create resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"{}\"",
        cluster.namespace()
    );
    // Not ready, and /readyz says why in the API server's words.
    let polling = Polling::start();
    let body = loop {
        let reply = server.http().get(server.url("/readyz")).send().await.unwrap();
        let status = reply.status().as_u16();
        let body: Value = reply.json().await.unwrap();
        if body["reason"].as_str().is_some_and(|r| r.contains(&refusal)) {
            assert_eq!(status, 503, "{body}");
            break body;
        }
        polling.pause(|| format!("/readyz never said why: {body}")).await;
    };
    assert_eq!(body["status"], "not ready", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("cannot renew its Lease"),
        "{body}"
    );
    // Tried again, counted each time, logged once.
    while common_metric(&server, "jobgate_lease_renew_failures_total").await < 3.0 {
        polling
            .pause(|| format!("no retries counted; log:\n{}", server.log_text()))
            .await;
    }
    const RENEW_WARNING: &str = "cannot renew this replica's Lease";
    assert_eq!(
        server.log_text().matches(RENEW_WARNING).count(),
        1,
        "{}",
        server.log_text()
    );
    assert!(server.log_text().contains(&refusal), "{}", server.log_text());
    assert_eq!(server.readyz().await, 503);

    // The right is granted: it becomes ready by itself, and acts as a replica.
    cluster.apply_rbac(overlay_rbac(HA));
    server.wait_ready_is(200).await;
    let reply = server.http().get(server.url("/readyz")).send().await.unwrap();
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["status"], "ready", "{body}");
    assert!(body.get("reason").is_none(), "{body}");
    assert!(
        server
            .log_text()
            .contains("this replica's Lease is renewed again"),
        "{}",
        server.log_text()
    );
    let id = server.submit(input(&[], json!({}))).await;
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("SUCCEEDED")
    );
}

/// One value of the server's `/metrics`.
async fn common_metric(server: &Server, name: &str) -> f64 {
    crate::common::scrape(server)
        .await
        .get(name)
        .copied()
        .unwrap_or_default()
}
