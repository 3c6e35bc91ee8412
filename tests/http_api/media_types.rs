//! GraphQL over HTTP, POST: the media type of the answer follows the client's `Accept`
//! (`application/graphql-response+json` or `application/json`, 406 when neither fits), a body
//! that is not JSON is 415, malformed JSON and JSON that is no GraphQL request are 400, and
//! request errors are 400 without `data` for graphql-response+json but 200 for application/json.

use reqwest::StatusCode;
use reqwest::header;
use serde_json::{Value, json};

use crate::common::Server;
use crate::support::{
    GQL_RESPONSE, JSON, TOTAL_COUNT, assert_request_error, get_graphql, post_body, post_gql, raw_http, send,
    total_count,
};

#[tokio::test]
async fn post_answers_graphql_response_json_when_the_client_accepts_it() {
    let server = Server::start(&[]).await;
    for accept in [
        GQL_RESPONSE,
        "application/graphql-response+json, application/json;q=0.9",
        "application/json;q=0.5, application/graphql-response+json",
    ] {
        let reply = post_gql(&server, accept, TOTAL_COUNT, json!({})).await;
        assert_eq!(reply.content_type(), GQL_RESPONSE, "Accept: {accept}");
        assert_eq!(reply.data()["jobs"]["totalCount"], 0);
    }
}

#[tokio::test]
async fn post_answers_application_json_for_json_or_no_accept() {
    let server = Server::start(&[]).await;
    for accept in [
        JSON,
        "*/*",
        "application/json, application/graphql-response+json;q=0.5",
    ] {
        let reply = post_gql(&server, accept, TOTAL_COUNT, json!({})).await;
        assert_eq!(reply.content_type(), JSON, "Accept: {accept}");
        assert_eq!(reply.data()["jobs"]["totalCount"], 0);
    }

    // No Accept header at all (reqwest always sends one, so this goes over a raw socket).
    let body = json!({ "query": TOTAL_COUNT }).to_string();
    let request = format!(
        "POST /graphql HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        server.addr,
        body.len()
    );
    let (status, content_type, text) = raw_http(&server, request).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(content_type, JSON, "{text}");
    let answer: Value = serde_json::from_str(&text).expect("JSON body");
    assert_eq!(answer["data"]["jobs"]["totalCount"], 0, "{answer}");
}

#[tokio::test]
async fn an_accept_header_that_cannot_be_satisfied_is_406() {
    let server = Server::start(&[]).await;
    for accept in [
        "text/plain",
        "text/html",
        "application/xml, text/plain",
        "application/json;q=0, application/graphql-response+json;q=0",
    ] {
        let reply = post_gql(&server, accept, TOTAL_COUNT, json!({})).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_ACCEPTABLE,
            "Accept: {accept}: {}",
            reply.text
        );
    }
    let reply = get_graphql(&server, &[("query", TOTAL_COUNT)], "text/plain").await;
    assert_eq!(reply.status, StatusCode::NOT_ACCEPTABLE, "{}", reply.text);
}

#[tokio::test]
async fn a_post_body_that_is_not_json_is_415() {
    let server = Server::start(&[]).await;
    let json_body = json!({ "query": TOTAL_COUNT }).to_string();
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/graphql",
        "application/json; charset=latin1",
    ] {
        let reply = send(
            &server,
            post_body(&server, json_body.clone(), content_type, GQL_RESPONSE),
        )
        .await;
        assert_eq!(
            reply.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type: {content_type}: {}",
            reply.text
        );
        reply.errors();
    }
    let form = send(
        &server,
        post_body(
            &server,
            "query=%7Bjobs%7BtotalCount%7D%7D",
            "application/x-www-form-urlencoded",
            JSON,
        ),
    )
    .await;
    assert_eq!(form.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", form.text);
    // No Content-Type at all.
    let bare = server
        .http()
        .post(server.url("/graphql"))
        .header(header::ACCEPT, GQL_RESPONSE)
        .body(json_body);
    let reply = send(&server, bare).await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", reply.text);
    // With a charset that is UTF-8, JSON is JSON.
    let reply = send(
        &server,
        post_body(
            &server,
            json!({ "query": TOTAL_COUNT }).to_string(),
            "application/json; charset=utf-8",
            GQL_RESPONSE,
        ),
    )
    .await;
    assert_eq!(reply.data()["jobs"]["totalCount"], 0);
}

#[tokio::test]
async fn malformed_json_is_400() {
    let server = Server::start(&[]).await;
    for body in [
        "{",
        "{\"query\": ",
        "not json",
        "",
        "{\"query\": \"{ jobs { totalCount } }\"} trailing",
    ] {
        for accept in [GQL_RESPONSE, JSON] {
            let reply = send(&server, post_body(&server, body, JSON, accept)).await;
            assert_request_error(&reply, StatusCode::BAD_REQUEST, accept);
        }
    }
}

#[tokio::test]
async fn json_that_is_not_a_graphql_request_is_400() {
    let server = Server::start(&[]).await;
    for body in [
        json!({ "foo": 1 }),
        json!({ "query": 1 }),
        json!({ "query": null }),
        json!({ "query": TOTAL_COUNT, "variables": "x" }),
        json!({ "query": TOTAL_COUNT, "variables": [1] }),
        json!({ "query": TOTAL_COUNT, "operationName": 3 }),
        json!({ "query": TOTAL_COUNT, "extensions": "x" }),
        json!("{ jobs { totalCount } }"),
        json!(42),
        json!(null),
    ] {
        for accept in [GQL_RESPONSE, JSON] {
            let reply = send(&server, post_body(&server, body.to_string(), JSON, accept)).await;
            let errors = assert_request_error(&reply, StatusCode::BAD_REQUEST, accept);
            assert!(
                errors[0]["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{body}"
            );
        }
    }
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn request_errors_are_400_without_data_for_graphql_response_json() {
    let server = Server::start(&[]).await;
    for query in [
        "{ jobs { totalCount }",                                           // syntax error
        "{ nope }",                                                        // unknown field
        "{ jobs { totalCount nope } }",                                    // unknown field, nested
        "{ job }",                                                         // missing required argument
        "query Q { jobs { totalCount } } query R { jobs { totalCount } }", // no operation name
    ] {
        let reply = post_gql(&server, GQL_RESPONSE, query, json!({})).await;
        let errors = assert_request_error(&reply, StatusCode::BAD_REQUEST, GQL_RESPONSE);
        assert!(
            errors[0]["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{query}"
        );
    }
    // A mutation refused before execution creates nothing.
    let reply = post_gql(
        &server,
        GQL_RESPONSE,
        "mutation { submitJob(input: { command: [\"true\"] }) { nope } }",
        json!({}),
    )
    .await;
    assert_request_error(&reply, StatusCode::BAD_REQUEST, GQL_RESPONSE);
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn request_errors_are_200_for_application_json() {
    let server = Server::start(&[]).await;
    for query in ["{ jobs { totalCount }", "{ nope }"] {
        let reply = post_gql(&server, JSON, query, json!({})).await;
        assert_eq!(reply.status, StatusCode::OK, "{query}: {}", reply.text);
        assert_eq!(reply.content_type(), JSON);
        let errors = reply.errors();
        assert!(errors[0]["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert!(reply.json().get("data").is_none(), "{query}: {}", reply.text);
    }
    // A syntax error says where it is.
    let reply = post_gql(&server, JSON, "{ jobs { totalCount }", json!({})).await;
    assert!(reply.errors()[0]["locations"].is_array(), "{}", reply.text);
    // A validation error names the field.
    let reply = post_gql(&server, JSON, "{ nope }", json!({})).await;
    assert!(
        reply.errors()[0]["message"].as_str().unwrap().contains("nope"),
        "{}",
        reply.text
    );
}
