//! Which operations each way of asking runs: GET runs queries, a mutation over GET is 405 and
//! creates nothing, and a subscription over HTTP is refused, pointing to WebSocket.

use reqwest::StatusCode;
use reqwest::header;
use serde_json::json;

use crate::common::Server;
use crate::support::{
    GQL_RESPONSE, JSON, TOTAL_COUNT, assert_refused_saying, get_graphql, post_gql, send, total_count,
};

#[tokio::test]
async fn get_runs_queries() {
    let server = Server::start(&[]).await;
    let reply = get_graphql(&server, &[("query", "{jobs{totalCount}}")], JSON).await;
    assert_eq!(reply.content_type(), JSON);
    assert_eq!(reply.data()["jobs"]["totalCount"], 0);

    let reply = get_graphql(&server, &[("query", "{jobs{totalCount}}")], GQL_RESPONSE).await;
    assert_eq!(reply.content_type(), GQL_RESPONSE);
    assert_eq!(reply.data()["jobs"]["totalCount"], 0);

    // Variables and the operation name are JSON-encoded parameters.
    let id = server.submit(json!({ "command": ["true"] })).await;
    let variables = json!({ "id": id }).to_string();
    let reply = get_graphql(
        &server,
        &[
            (
                "query",
                "query Other { jobs { totalCount } } query One($id: ID!) { job(id: $id) { id } }",
            ),
            ("operationName", "One"),
            ("variables", variables.as_str()),
        ],
        GQL_RESPONSE,
    )
    .await;
    assert_eq!(reply.data()["job"]["id"], id.as_str());

    // A GET without a query (and not from a browser) is a bad request.
    let reply = send(
        &server,
        server
            .http()
            .get(server.url("/graphql"))
            .header(header::ACCEPT, JSON),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    // Variables that are not JSON are a bad request.
    let reply = get_graphql(&server, &[("query", TOTAL_COUNT), ("variables", "{oops")], JSON).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
}

#[tokio::test]
async fn a_mutation_over_get_is_405_and_creates_nothing() {
    let server = Server::start(&[]).await;
    for (query, name) in [
        (
            "mutation { submitJob(input: { command: [\"true\"] }) { job { id } } }",
            None,
        ),
        (
            "query Q { jobs { totalCount } } mutation M { submitJob(input: { command: [\"true\"] }) { job { id } } }",
            Some("M"),
        ),
    ] {
        for accept in [GQL_RESPONSE, JSON] {
            let mut params = vec![("query", query)];
            if let Some(name) = name {
                params.push(("operationName", name));
            }
            let reply = get_graphql(&server, &params, accept).await;
            assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{}", reply.text);
            assert_eq!(reply.header(header::ALLOW), Some("POST"));
            reply.errors();
        }
    }
    assert_eq!(total_count(&server).await, 0);
}

#[tokio::test]
async fn a_subscription_over_http_points_to_websocket() {
    let server = Server::start(&[]).await;
    let id = server.submit(json!({ "command": ["true"] })).await;
    let query = "subscription($id: ID!) { jobStatus(id: $id) { phase } }";
    let variables = json!({ "id": id });
    let reply = post_gql(&server, GQL_RESPONSE, query, variables.clone()).await;
    assert_refused_saying(&reply, GQL_RESPONSE, "WebSocket");
    let reply = post_gql(&server, JSON, query, variables.clone()).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply.errors()[0]["message"]
            .as_str()
            .unwrap()
            .contains("WebSocket")
    );
    let variables = variables.to_string();
    let reply = get_graphql(
        &server,
        &[("query", query), ("variables", variables.as_str())],
        GQL_RESPONSE,
    )
    .await;
    assert!(
        reply.errors()[0]["message"]
            .as_str()
            .unwrap()
            .contains("WebSocket")
    );
}
