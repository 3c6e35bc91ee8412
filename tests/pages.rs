//! `jobs(first, after, filter)` through the real server over HTTP: every filter the API
//! offers, alone and combined, pages newest first through cursors with nothing skipped or
//! repeated, `totalCount` agrees with the pages, and `jobStats` and `namespaces` agree with
//! them too (all read from indexes and kept counts, see tests/store.rs for the plans).

mod common;

use common::Server;
use serde_json::{Value, json};

const PAGE: &str = "query($first: Int!, $after: String, $filter: JobFilter) {
  jobs(first: $first, after: $after, filter: $filter) {
    totalCount
    pageInfo { hasNextPage endCursor }
    edges { cursor node { id } }
  }
}";

/// Every job matching `filter`, page after page of `first`, and each page's `totalCount`.
async fn page_through(server: &Server, filter: &Value, first: i64) -> (Vec<String>, Vec<i64>) {
    let mut ids = Vec::new();
    let mut totals = Vec::new();
    let mut after = Value::Null;
    loop {
        let data = server
            .gql_ok(PAGE, json!({"first": first, "after": after, "filter": filter}))
            .await;
        let jobs = &data["jobs"];
        totals.push(jobs["totalCount"].as_i64().unwrap());
        let edges = jobs["edges"].as_array().unwrap();
        assert!(edges.len() as i64 <= first);
        ids.extend(edges.iter().map(|e| e["node"]["id"].as_str().unwrap().to_owned()));
        if !jobs["pageInfo"]["hasNextPage"].as_bool().unwrap() {
            return (ids, totals);
        }
        assert_eq!(
            jobs["pageInfo"]["endCursor"],
            edges.last().unwrap()["cursor"],
            "the end cursor is the last edge's"
        );
        after = jobs["pageInfo"]["endCursor"].clone();
    }
}

/// Which of the submitted jobs a filter must find.
type Matches = Box<dyn Fn(&Submitted) -> bool>;

struct Submitted {
    id: String,
    name: String,
    namespace: String,
    phase: &'static str,
}

#[tokio::test]
async fn every_filter_pages_newest_first_and_counts_what_it_pages() {
    let server = Server::start(&[]).await;
    let gate = server
        .submit(json!({"name": "gate", "namespace": "ops", "command": ["sleep", "300"]}))
        .await;
    let mut jobs = vec![Submitted {
        id: gate.clone(),
        name: "gate".into(),
        namespace: "ops".into(),
        phase: "RUNNING",
    }];
    // Held behind the gate: PENDING until cancelled, never run.
    let inputs: Vec<Value> = (0..45)
        .map(|i| {
            let (name, namespace) = match i % 3 {
                0 => (format!("etl-{i}"), "team-a"),
                1 => (format!("ml-train-{i}"), "team-a"),
                _ => (format!("etl-{i}"), "team-b"),
            };
            json!({"name": name, "namespace": namespace, "command": ["true"], "dependsOn": [gate]})
        })
        .collect();
    let data = server
        .gql_ok(
            "mutation($inputs: [SubmitJobInput!]!) { submitJobs(inputs: $inputs) { jobs { id name namespace } } }",
            json!({ "inputs": inputs }),
        )
        .await;
    for job in data["submitJobs"]["jobs"].as_array().unwrap() {
        jobs.push(Submitted {
            id: job["id"].as_str().unwrap().to_owned(),
            name: job["name"].as_str().unwrap().to_owned(),
            namespace: job["namespace"].as_str().unwrap().to_owned(),
            phase: "PENDING",
        });
    }
    for job in jobs.iter_mut().skip(1).step_by(4) {
        assert_eq!(server.cancel(&job.id).await, "CANCELLED");
        job.phase = "CANCELLED";
    }
    server.wait_phase(&gate, "RUNNING").await;

    let cases: Vec<(Value, Matches)> = vec![
        (json!({}), Box::new(|_| true)),
        (
            json!({"phases": ["CANCELLED"]}),
            Box::new(|j| j.phase == "CANCELLED"),
        ),
        (
            json!({"phases": ["PENDING", "RUNNING"]}),
            Box::new(|j| j.phase != "CANCELLED"),
        ),
        (
            json!({"namespace": "team-b"}),
            Box::new(|j| j.namespace == "team-b"),
        ),
        (json!({"namespace": "nowhere"}), Box::new(|_| false)),
        (
            json!({"nameContains": "etl"}),
            Box::new(|j| j.name.contains("etl")),
        ),
        (json!({"nameContains": "1"}), Box::new(|j| j.name.contains('1'))),
        (
            json!({"nameContains": "-train-2"}),
            Box::new(|j| j.name.contains("-train-2")),
        ),
        (
            json!({"phases": ["PENDING"], "namespace": "team-a"}),
            Box::new(|j| j.phase == "PENDING" && j.namespace == "team-a"),
        ),
        (
            json!({"phases": ["PENDING", "CANCELLED"], "namespace": "team-a", "nameContains": "etl-"}),
            Box::new(|j| j.phase != "RUNNING" && j.namespace == "team-a" && j.name.contains("etl-")),
        ),
    ];
    for (filter, matches) in &cases {
        let expected: Vec<String> = jobs
            .iter()
            .rev()
            .filter(|j| matches(j))
            .map(|j| j.id.clone())
            .collect();
        let (ids, totals) = page_through(&server, filter, 7).await;
        assert_eq!(ids, expected, "{filter}");
        assert!(
            totals.iter().all(|t| *t == expected.len() as i64),
            "totalCount of {filter}: {totals:?}, {} match",
            expected.len()
        );
    }

    let stats = server
        .gql_ok(
            "{ jobStats { counts { pending running cancelled total } } }",
            json!({}),
        )
        .await;
    let count = |phase: &str| jobs.iter().filter(|j| j.phase == phase).count() as i64;
    assert_eq!(
        stats["jobStats"]["counts"],
        json!({
            "pending": count("PENDING"),
            "running": count("RUNNING"),
            "cancelled": count("CANCELLED"),
            "total": jobs.len(),
        })
    );
    let namespaces = server.gql_ok("{ namespaces }", json!({})).await;
    assert_eq!(
        namespaces["namespaces"],
        json!(["default", "ops", "team-a", "team-b"])
    );
}
