//! Idempotency keys over HTTP: the same key and input return the same job, the same key with
//! different input is BAD_USER_INPUT, and concurrent submissions with one key create one job.

use serde_json::json;

use crate::common::Server;
use crate::support::{SUBMIT, code_of, gql, total_count};

#[tokio::test]
async fn an_idempotency_key_returns_the_same_job_for_the_same_input() {
    let server = Server::start(&[]).await;
    let input = json!({ "command": ["sleep", "30"], "idempotencyKey": "key-1" });
    let first = gql(&server, SUBMIT, json!({ "input": input })).await.data();
    assert_eq!(first["submitJob"]["created"], true);
    let id = first["submitJob"]["job"]["id"].as_str().unwrap().to_owned();

    let again = gql(&server, SUBMIT, json!({ "input": input })).await.data();
    assert_eq!(again["submitJob"]["created"], false);
    assert_eq!(again["submitJob"]["job"]["id"], id.as_str());
    assert_eq!(total_count(&server).await, 1);

    let reply = gql(
        &server,
        "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }",
        json!({ "id": id }),
    )
    .await;
    assert_eq!(reply.data()["cancelJob"]["job"]["phase"], "CANCELLED");
}

#[tokio::test]
async fn an_idempotency_key_reused_for_different_input_is_bad_user_input() {
    let server = Server::start(&[]).await;
    let input = json!({ "command": ["true"], "idempotencyKey": "key-2" });
    gql(&server, SUBMIT, json!({ "input": input })).await.data();

    let different = json!({ "command": ["false"], "idempotencyKey": "key-2" });
    let reply = gql(&server, SUBMIT, json!({ "input": different })).await;
    let errors = reply.errors();
    assert_eq!(code_of(&errors[0]), "BAD_USER_INPUT", "{}", reply.text);
    assert_eq!(errors[0]["extensions"]["field"], "input.idempotencyKey");
    assert!(
        errors[0]["message"].as_str().unwrap().contains("idempotencyKey"),
        "{}",
        reply.text
    );
    assert_eq!(total_count(&server).await, 1);
}

#[tokio::test]
async fn concurrent_submissions_with_one_idempotency_key_create_one_job() {
    let server = Server::start(&[]).await;
    let input = json!({ "command": ["sleep", "30"], "idempotencyKey": "key-3" });
    let replies =
        futures::future::join_all((0..20).map(|_| gql(&server, SUBMIT, json!({ "input": input })))).await;
    let mut ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for reply in &replies {
        let data = reply.data();
        ids.insert(data["submitJob"]["job"]["id"].as_str().unwrap().to_owned());
        if data["submitJob"]["created"] == true {
            created += 1;
        }
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(created, 1, "exactly one submission creates the job");
    assert_eq!(total_count(&server).await, 1);

    let id = ids.into_iter().next().unwrap();
    let reply = gql(
        &server,
        "mutation($id: ID!) { cancelJob(id: $id) { job { phase } } }",
        json!({ "id": id }),
    )
    .await;
    assert_eq!(reply.data()["cancelJob"]["job"]["phase"], "CANCELLED");
}
