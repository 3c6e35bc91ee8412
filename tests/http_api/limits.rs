//! Request limits: body size (413), query depth, complexity and aliases, and batched requests
//! (refused by default, answered with an array when allowed).

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{self, Server};
use crate::support::{
    GQL_RESPONSE, JSON, SUBMIT, TOTAL_COUNT, assert_refused_saying, assert_request_error, post_body,
    post_gql, send, total_count,
};

#[tokio::test]
async fn a_body_over_max_body_bytes_is_413() {
    let server = Server::start(&["--max-body-bytes", "2048"]).await;
    // Just under the limit still works.
    let small = json!({ "query": format!("{}{TOTAL_COUNT}", " ".repeat(1500)) }).to_string();
    assert!(small.len() < 2048);
    let reply = send(&server, post_body(&server, small, JSON, GQL_RESPONSE)).await;
    assert_eq!(reply.data()["jobs"]["totalCount"], 0);

    let padded = json!({ "query": format!("{}{TOTAL_COUNT}", " ".repeat(4096)) }).to_string();
    let reply = send(&server, post_body(&server, padded, JSON, GQL_RESPONSE)).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", reply.text);

    // A large mutation is refused whole: nothing is created.
    let big = json!({
        "query": SUBMIT,
        "variables": { "input": { "command": ["echo", "x".repeat(4096)] } },
    })
    .to_string();
    let reply = send(&server, post_body(&server, big, JSON, GQL_RESPONSE)).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", reply.text);
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn a_query_deeper_than_max_query_depth_is_refused() {
    let server = Server::start(&["--max-query-depth", "4"]).await;
    let shallow = post_gql(&server, GQL_RESPONSE, TOTAL_COUNT, json!({})).await;
    assert_eq!(shallow.data()["jobs"]["totalCount"], 0);

    let deep = "{ jobs { edges { node { spec { env { name } } } } } }";
    let reply = post_gql(&server, GQL_RESPONSE, deep, json!({})).await;
    assert_refused_saying(&reply, GQL_RESPONSE, "deep");
    let reply = post_gql(&server, JSON, deep, json!({})).await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.errors();
}

#[tokio::test]
async fn a_query_more_complex_than_max_query_complexity_is_refused() {
    let server = Server::start(&["--max-query-complexity", "5"]).await;
    let simple = post_gql(&server, GQL_RESPONSE, TOTAL_COUNT, json!({})).await;
    assert_eq!(simple.data()["jobs"]["totalCount"], 0);

    let complex = "{ jobs { totalCount pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }";
    let reply = post_gql(&server, GQL_RESPONSE, complex, json!({})).await;
    assert_refused_saying(&reply, GQL_RESPONSE, "complex");
}

#[tokio::test]
async fn more_aliases_than_max_aliases_are_refused() {
    let server = Server::start(&["--max-aliases", "3"]).await;
    let three = "{ a: jobs { totalCount } b: jobs { totalCount } c: jobs { totalCount } }";
    let data = post_gql(&server, GQL_RESPONSE, three, json!({})).await.data();
    assert_eq!(data["c"]["totalCount"], 0);

    for query in [
        "{ a: jobs { totalCount } b: jobs { totalCount } c: jobs { totalCount } d: jobs { totalCount } }",
        // Aliases nested in a selection count too.
        "{ a: jobs { x: totalCount y: totalCount z: totalCount } }",
        // And those in fragments.
        "{ ...F } fragment F on Query { a: jobs { totalCount } b: jobs { totalCount } c: jobs { totalCount } d: jobs { totalCount } }",
    ] {
        let _row = common::TableRow::named(query);
        let reply = post_gql(&server, GQL_RESPONSE, query, json!({})).await;
        assert_refused_saying(&reply, GQL_RESPONSE, "aliases");
    }
    // A mutation refused for its aliases creates nothing.
    let many_submits = "mutation { a: submitJob(input: {command: [\"true\"]}) { created } \
        b: submitJob(input: {command: [\"true\"]}) { created } c: submitJob(input: {command: [\"true\"]}) { created } \
        d: submitJob(input: {command: [\"true\"]}) { created } }";
    let reply = post_gql(&server, GQL_RESPONSE, many_submits, json!({})).await;
    assert_request_error(&reply, StatusCode::BAD_REQUEST, GQL_RESPONSE);
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn batched_requests_are_refused_by_default() {
    let server = Server::start(&[]).await;
    let batch = json!([
        { "query": TOTAL_COUNT },
        { "query": "mutation { submitJob(input: { command: [\"true\"] }) { job { id } } }" },
    ])
    .to_string();
    for accept in [GQL_RESPONSE, JSON] {
        let reply = send(&server, post_body(&server, batch.clone(), JSON, accept)).await;
        assert_refused_saying(&reply, accept, "batch");
    }
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn batched_requests_are_answered_with_an_array_when_allowed() {
    let server = Server::start(&["--allow-batch", "--max-batch", "3"]).await;
    let batch = json!([
        { "query": TOTAL_COUNT },
        { "query": SUBMIT, "variables": { "input": { "command": ["true"] } } },
        { "query": "{ nope }" },
    ])
    .to_string();
    let reply = send(&server, post_body(&server, batch, JSON, GQL_RESPONSE)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.content_type(), GQL_RESPONSE);
    let answers = reply.json();
    let answers = answers.as_array().expect("an array of responses");
    assert_eq!(answers.len(), 3, "{}", reply.text);
    assert_eq!(answers[0]["data"]["jobs"]["totalCount"], 0);
    assert_eq!(answers[1]["data"]["submitJob"]["created"], true);
    assert!(answers[2]["errors"].as_array().is_some_and(|e| !e.is_empty()));
    assert!(answers[2].get("data").is_none(), "{}", reply.text);
    assert_eq!(total_count(&server).await, 1);

    // Empty batches and batches over --max-batch are refused whole.
    for batch in [json!([]), Value::Array(vec![json!({ "query": TOTAL_COUNT }); 4])] {
        let reply = send(&server, post_body(&server, batch.to_string(), JSON, GQL_RESPONSE)).await;
        assert_request_error(&reply, StatusCode::BAD_REQUEST, GQL_RESPONSE);
    }
    // One malformed member refuses the whole batch, so its mutation does not run.
    let batch = json!([
        { "query": SUBMIT, "variables": { "input": { "command": ["true"] } } },
        { "query": 7 },
    ]);
    let reply = send(&server, post_body(&server, batch.to_string(), JSON, GQL_RESPONSE)).await;
    assert_request_error(&reply, StatusCode::BAD_REQUEST, GQL_RESPONSE);
    assert_eq!(total_count(&server).await, 1);
}
