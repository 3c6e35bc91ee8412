//! No internal detail in errors: odd input of every kind is answered, and neither its errors
//! nor a failed job's status show the store, the file system or the code.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::Server;
use crate::support::{GQL_RESPONSE, JSON, SUBMIT, gql, post_gql, total_count};

/// `send` checks every answer of these tests; this test drives the odd corners on purpose.
#[tokio::test]
async fn errors_never_reveal_internals() {
    let server = Server::start(&[]).await;
    let probes: Vec<(&str, Value)> = vec![
        (
            "query($id: ID!) { job(id: $id) { id } }",
            json!({ "id": "x".repeat(10_000) }),
        ),
        (
            "query($id: ID!) { job(id: $id) { id } }",
            json!({ "id": "a\u{0}b" }),
        ),
        (
            "mutation($id: ID!) { cancelJob(id: $id) { job { id } } }",
            json!({ "id": "../../etc/passwd" }),
        ),
        (
            "mutation($id: ID!) { cancelJob(id: $id) { job { id } } }",
            json!({ "id": "\u{0}" }),
        ),
        (
            "{ jobs(after: \"99999999999999999999999\") { totalCount } }",
            json!({}),
        ),
        (
            "{ jobs(filter: { namespace: \"\\u0000\" }) { totalCount } }",
            json!({}),
        ),
        (SUBMIT, json!({ "input": { "command": ["a\u{0}b"] } })),
        (
            SUBMIT,
            json!({ "input": { "command": ["true"], "env": [{ "name": "A", "value": "\u{0}" }] } }),
        ),
        (
            SUBMIT,
            json!({ "input": { "command": ["true"], "parameters": [1, 2] } }),
        ),
        (
            SUBMIT,
            json!({ "input": { "command": ["true"], "idempotencyKey": "k".repeat(300) } }),
        ),
        (
            SUBMIT,
            json!({ "input": { "command": ["true"], "parallelism": 1e40 } }),
        ),
    ];
    for (query, variables) in probes {
        for accept in [GQL_RESPONSE, JSON] {
            // `send` asserts the answer is clean; the request must also be answered.
            let reply = post_gql(&server, accept, query, variables.clone()).await;
            assert!(
                reply.status == StatusCode::OK || reply.status == StatusCode::BAD_REQUEST,
                "{query} {variables}: {} {}",
                reply.text,
                reply.status
            );
            reply.json();
        }
    }
    assert_eq!(total_count(&server).await, 0);

    // A job that cannot start explains why without showing jobgate's own files.
    let id = server
        .submit(json!({ "command": ["/definitely/not/a/program"], "backoffLimit": 0 }))
        .await;
    assert_eq!(server.terminal_phase(&id).await, "FAILED");
    let job = gql(
        &server,
        "query($id: ID!) { job(id: $id) { message logs conditions { message } } }",
        json!({ "id": id }),
    )
    .await
    .data();
    let data_dir = server.data_dir.display().to_string();
    let shown = job.to_string();
    assert!(
        !shown.contains(&data_dir),
        "a job's status reveals the data directory: {shown}"
    );
    assert!(!shown.to_ascii_lowercase().contains("sqlx"), "{shown}");
}
