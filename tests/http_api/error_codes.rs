//! Error codes: an unknown job is null without error, cancelling an unknown job is NOT_FOUND and
//! a finished one FAILED_PRECONDITION, bad paging arguments are BAD_USER_INPUT, and every
//! refusal of a request carries a code.

use serde_json::json;

use crate::common::Server;
use crate::support::{GQL_RESPONSE, code_of, gql, post_gql, total_count};

#[tokio::test]
async fn an_unknown_job_is_null_without_error() {
    let server = Server::start(&[]).await;
    for id in [
        "nope",
        "",
        "'; DROP TABLE jobs; --",
        "00000000-0000-0000-0000-000000000000",
    ] {
        let reply = post_gql(
            &server,
            GQL_RESPONSE,
            "query($id: ID!) { job(id: $id) { id } }",
            json!({ "id": id }),
        )
        .await;
        assert_eq!(reply.data(), json!({ "job": null }), "{id:?}");
    }
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn cancelling_an_unknown_job_is_not_found() {
    let server = Server::start(&[]).await;
    let reply = gql(
        &server,
        "mutation { cancelJob(id: \"nope\") { job { id phase } } }",
        json!({}),
    )
    .await;
    let errors = reply.errors();
    assert_eq!(code_of(&errors[0]), "NOT_FOUND", "{}", reply.text);
    assert_eq!(errors[0]["path"], json!(["cancelJob"]));
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn cancelling_a_finished_job_is_failed_precondition() {
    let server = Server::start(&[]).await;
    let id = server.submit(json!({ "command": ["true"] })).await;
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    let reply = gql(
        &server,
        "mutation($id: ID!) { cancelJob(id: $id) { job { id phase } } }",
        json!({ "id": id }),
    )
    .await;
    let errors = reply.errors();
    assert_eq!(code_of(&errors[0]), "FAILED_PRECONDITION", "{}", reply.text);
    // And the job is still SUCCEEDED.
    assert_eq!(server.job(&id).await["phase"], "SUCCEEDED");
}

#[tokio::test]
async fn bad_paging_arguments_are_bad_user_input() {
    let server = Server::start(&[]).await;
    for (query, field) in [
        ("{ jobs(first: 0) { totalCount } }", "first"),
        ("{ jobs(first: -5) { totalCount } }", "first"),
        ("{ jobs(first: 501) { totalCount } }", "first"),
        ("{ jobs(after: \"garbage\") { totalCount } }", "after"),
        ("{ jobs(after: \"-1\") { totalCount } }", "after"),
    ] {
        let reply = gql(&server, query, json!({})).await;
        let errors = reply.errors();
        assert_eq!(code_of(&errors[0]), "BAD_USER_INPUT", "{query}: {}", reply.text);
        assert_eq!(errors[0]["extensions"]["field"], field, "{query}: {}", reply.text);
    }
    // The limits themselves are fine.
    for query in [
        "{ jobs(first: 1) { totalCount } }",
        "{ jobs(first: 500) { totalCount } }",
    ] {
        assert_eq!(
            gql(&server, query, json!({})).await.data()["jobs"]["totalCount"],
            0
        );
    }
}

#[tokio::test]
async fn every_refusal_of_a_request_carries_a_code() {
    // Syntax, validation, limits and argument validators are async-graphql's own refusals;
    // they reach the client as BAD_USER_INPUT like ours, never without a code.
    let server = Server::start(&[]).await;
    let id = server.submit(json!({ "command": ["true"] })).await;
    let validator = format!("{{ job(id: \"{id}\") {{ logs(tailLines: 0) }} }}");
    for query in [
        "{ jobs(first: \"x\") { totalCount } }",
        "{ jobs { nope } }",
        "{ jobs(first: 1 { totalCount } }",
        validator.as_str(),
    ] {
        let body = server.gql(query, json!({})).await;
        let errors = body["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("{query}: {body}"));
        assert!(!errors.is_empty(), "{query}: {body}");
        for e in errors {
            assert_eq!(e["extensions"]["code"], "BAD_USER_INPUT", "{query}: {body}");
        }
    }
}
