//! Authentication: with `--api-token`, a request without the right bearer token is refused
//! and creates nothing.

use reqwest::StatusCode;
use reqwest::header;
use serde_json::json;

use crate::common::Server;
use crate::support::{GQL_RESPONSE, JSON, SUBMIT, TOTAL_COUNT, code_of, get_graphql, post_body, send};

#[tokio::test]
async fn a_token_is_required_when_configured() {
    let server = Server::start(&["--api-token", "s3cret"]).await;
    let body = json!({ "query": TOTAL_COUNT }).to_string();

    for (authorization, accept) in [
        (None, GQL_RESPONSE),
        (None, JSON),
        (Some("Bearer wrong"), GQL_RESPONSE),
        (Some("Bearer wrong"), JSON),
        (Some("s3cret"), GQL_RESPONSE),
        (Some("Basic czNjcmV0Og=="), GQL_RESPONSE),
        (Some("Bearer "), GQL_RESPONSE),
    ] {
        let mut request = post_body(&server, body.clone(), JSON, accept);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let reply = send(&server, request).await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{authorization:?}: {}",
            reply.text
        );
        assert_eq!(reply.content_type(), accept);
        assert!(
            reply
                .header(header::WWW_AUTHENTICATE)
                .is_some_and(|v| v.starts_with("Bearer")),
            "{authorization:?}: {:?}",
            reply.headers
        );
        let errors = reply.errors();
        assert_eq!(code_of(&errors[0]), "UNAUTHENTICATED", "{}", reply.text);
        assert!(!errors[0]["message"].as_str().unwrap().contains("s3cret"));
    }

    // GET needs it too, and a mutation without it creates nothing.
    let reply = get_graphql(&server, &[("query", TOTAL_COUNT)], GQL_RESPONSE).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text);
    let submit = json!({ "query": SUBMIT, "variables": { "input": { "command": ["true"] } } }).to_string();
    let reply = send(&server, post_body(&server, submit, JSON, GQL_RESPONSE)).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text);

    let authorised =
        |request: reqwest::RequestBuilder| request.header(header::AUTHORIZATION, "Bearer s3cret");
    let reply = send(&server, authorised(post_body(&server, body, JSON, GQL_RESPONSE))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.data()["jobs"]["totalCount"],
        0,
        "nothing was created without the token"
    );
    let reply = send(
        &server,
        authorised(
            server
                .http()
                .get(server.url("/graphql"))
                .query(&[("query", TOTAL_COUNT)])
                .header(header::ACCEPT, JSON),
        ),
    )
    .await;
    assert_eq!(reply.data()["jobs"]["totalCount"], 0);

    // Health probes stay open.
    let reply = send(&server, server.http().get(server.url("/healthz"))).await;
    assert_eq!(reply.status, StatusCode::OK);
}
