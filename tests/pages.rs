//! `jobs(first, after, filter)` through the real server over HTTP: every filter the API
//! offers, alone and combined, pages newest first through cursors with nothing skipped or
//! repeated, `totalCount` agrees with the pages, and `jobStats` and `namespaces` agree with
//! them too (all read from indexes and kept counts, see tests/store/query_plans.rs for the plans). A page
//! looks at a bounded number of candidates: one that runs out of them first is short, or
//! empty, says so (`partial`) and where to go on, and paging through still finds exactly the
//! jobs that match.
//!
//! jobgate runs in the test's process (`Server::start`) on the local executor.

mod common;

use common::Server;
use serde_json::{Value, json};

const PAGE: &str = "query($first: Int!, $after: String, $filter: JobFilter) {
  jobs(first: $first, after: $after, filter: $filter) {
    totalCount
    partial
    pageInfo { hasNextPage endCursor }
    edges { cursor node { id } }
  }
}";

/// Every job matching `filter`, page after page of `first`, each page's `totalCount`, and
/// how many pages stopped at their budget (`partial`).
async fn page_through(server: &Server, filter: &Value, first: i64) -> (Vec<String>, Vec<i64>, usize) {
    let mut ids = Vec::new();
    let mut totals = Vec::new();
    let mut partial = 0;
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
        let more = jobs["pageInfo"]["hasNextPage"].as_bool().unwrap();
        if jobs["partial"].as_bool().unwrap() {
            // Stopped at its budget: perhaps short or empty, but not the last, and going on
            // from below its last job.
            partial += 1;
            assert!(more, "a partial page has a next page");
            let end: i64 = jobs["pageInfo"]["endCursor"].as_str().unwrap().parse().unwrap();
            if let Some(last) = edges.last() {
                assert!(end <= last["cursor"].as_str().unwrap().parse::<i64>().unwrap());
            }
            if let Some(after) = after.as_str() {
                assert!(end < after.parse::<i64>().unwrap(), "each page gets further");
            }
        } else if more {
            assert_eq!(edges.len() as i64, first, "a page before another is full");
            assert_eq!(
                jobs["pageInfo"]["endCursor"],
                edges.last().unwrap()["cursor"],
                "the end cursor is the last edge's"
            );
        }
        if !more {
            return (ids, totals, partial);
        }
        assert!(totals.len() < 1_000, "paging {filter} never ends");
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
        let (ids, totals, partial) = page_through(&server, filter, 7).await;
        assert_eq!(ids, expected, "{filter}");
        assert_eq!(
            partial, 0,
            "{filter}: no page of so few jobs reaches the default budget"
        );
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

/// Many jobs have the name, none of them (or a few, scattered) in the namespace asked: with a
/// budget of 10 candidates a page, pages come back short or empty, marked `partial`, and
/// paging through finds exactly the jobs that match, each once, and ends.
#[tokio::test]
async fn pages_stop_at_their_budget_and_go_on_where_they_stopped() {
    let server = Server::start(&["--page-scan-budget", "10"]).await;
    let gate = server
        .submit(json!({"name": "gate", "namespace": "ops", "command": ["sleep", "300"]}))
        .await;
    let sparse = [5, 40, 41, 77];
    let inputs: Vec<Value> = (0..80)
        .map(|i| {
            let namespace = if sparse.contains(&i) { "team-b" } else { "team-a" };
            json!({"name": format!("nightly-{i}"), "namespace": namespace, "command": ["true"], "dependsOn": [gate]})
        })
        .collect();
    let data = server
        .gql_ok(
            "mutation($inputs: [SubmitJobInput!]!) { submitJobs(inputs: $inputs) { jobs { id namespace } } }",
            json!({ "inputs": inputs }),
        )
        .await;
    let submitted: Vec<(String, String)> = data["submitJobs"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_owned(),
                j["namespace"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let newest_first = |namespace: &str| -> Vec<String> {
        submitted
            .iter()
            .rev()
            .filter(|(_, ns)| ns == namespace)
            .map(|(id, _)| id.clone())
            .collect()
    };
    let cases = [
        // None of the 80 jobs named so is in `ops` (the gate is not named so).
        (json!({"nameContains": "nightly", "namespace": "ops"}), Vec::new()),
        (
            json!({"nameContains": "nightly", "namespace": "nowhere-yet"}),
            Vec::new(),
        ),
        (
            json!({"nameContains": "nightly", "namespace": "team-b"}),
            newest_first("team-b"),
        ),
        (
            json!({"nameContains": "nightly", "phases": ["PENDING"], "namespace": "team-b"}),
            newest_first("team-b"),
        ),
        (
            json!({"nameContains": "ni", "namespace": "team-a"}),
            newest_first("team-a"),
        ),
        (json!({"nameContains": "zzz", "namespace": "team-a"}), Vec::new()),
    ];
    let mut partial_pages = 0;
    for (filter, expected) in &cases {
        let (ids, _, partial) = page_through(&server, filter, 3).await;
        assert_eq!(&ids, expected, "{filter}");
        partial_pages += partial;
    }
    assert!(partial_pages >= 8, "{partial_pages} partial pages");

    // The first page of a search that finds nothing within its budget: empty, yet not the end.
    let data = server
        .gql_ok(
            PAGE,
            json!({"first": 3, "after": null, "filter": {"nameContains": "nightly", "namespace": "ops"}}),
        )
        .await;
    let jobs = &data["jobs"];
    assert_eq!(jobs["edges"], json!([]));
    assert_eq!(jobs["partial"], json!(true));
    assert_eq!(jobs["pageInfo"]["hasNextPage"], json!(true));
    assert!(jobs["pageInfo"]["endCursor"].is_string());
}
