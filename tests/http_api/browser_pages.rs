//! What browsers get: GraphiQL at `/graphql` (its introspection query within the default
//! limits, everything it loads served by jobgate itself) and the dashboard, also served by
//! jobgate itself.

use reqwest::StatusCode;
use reqwest::header;
use serde_json::json;

use crate::common::Server;
use crate::support::{TOTAL_COUNT, get_graphql, send};

#[tokio::test]
async fn browsers_get_graphiql() {
    let server = Server::start(&[]).await;
    let browser_accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    for request in [
        server
            .http()
            .get(server.url("/graphql"))
            .header(header::ACCEPT, browser_accept),
        server.http().get(server.url("/graphiql")),
        server
            .http()
            .get(server.url("/graphiql"))
            .header(header::ACCEPT, browser_accept),
    ] {
        let reply = send(&server, request).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.content_type(), "text/html");
        let page = reply.text.to_ascii_lowercase();
        assert!(
            page.contains("<html") && page.contains("graphiql"),
            "{}",
            reply.text
        );
        assert!(page.contains("/graphql"), "the page must point at the endpoint");
    }
    // A browser that sends a query still gets a GraphQL answer.
    let reply = get_graphql(&server, &[("query", TOTAL_COUNT)], browser_accept).await;
    assert_eq!(reply.data()["jobs"]["totalCount"], 0);
}

#[tokio::test]
async fn graphiqls_introspection_query_fits_the_default_limits() {
    // The query GraphiQL sends on load (graphql-js getIntrospectionQuery), which nests
    // ofType deeply: the default depth and complexity limits must admit it.
    let server = Server::start(&[]).await;
    let query = include_str!("../fixtures/introspection.graphql");
    let body = server.gql(query, json!({})).await;
    assert!(body.get("errors").is_none(), "{body}");
    let types = body["data"]["__schema"]["types"].as_array().unwrap();
    assert!(types.iter().any(|t| t["name"] == "JobStatusEvent"));
}

#[tokio::test]
async fn graphiql_loads_everything_from_jobgate_itself() {
    let server = Server::start(&[]).await;
    let page = server
        .http()
        .get(server.url("/graphiql"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // No CDN: every script and stylesheet is served by jobgate.
    assert!(
        !page.contains("https://") && !page.contains("http://"),
        "external URL in:\n{page}"
    );
    let assets: Vec<&str> = page
        .split(['"', '\''])
        .filter(|s| s.starts_with("/assets/"))
        .collect();
    assert!(assets.len() >= 4, "assets: {assets:?}");
    for asset in assets {
        let response = server.http().get(server.url(asset)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
        let content_type = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = response.bytes().await.unwrap();
        assert!(body.len() > 10_000, "{asset} is suspiciously small");
        let expected = if asset.ends_with(".css") {
            "text/css"
        } else {
            "text/javascript"
        };
        assert!(content_type.starts_with(expected), "{asset}: {content_type}");
    }
    // The GraphiQL bundle speaks graphql-transport-ws for subscriptions.
    let bundle = server
        .http()
        .get(server.url("/assets/graphiql.min.js"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(bundle.contains("graphql-transport-ws"));
    let missing = server
        .http()
        .get(server.url("/assets/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_dashboard_is_served_by_jobgate_itself() {
    let server = Server::start(&[]).await;
    let response = server.http().get(server.url("/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    // Revalidated on every visit, so a new binary's page is never mixed with old scripts.
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let page = response.text().await.unwrap();
    assert!(page.contains("<title>jobgate</title>"), "{page}");
    assert!(
        !page.contains("https://") && !page.contains("http://"),
        "external URL in:\n{page}"
    );
    let assets: Vec<&str> = page
        .split(['"', '\''])
        .filter(|s| s.starts_with("/assets/dashboard."))
        .collect();
    assert_eq!(assets.len(), 2, "{page}");
    for asset in assets {
        // Versioned by content, so the same URL always means the same bytes.
        assert!(asset.contains("?v="), "{asset}");
        let response = server.http().get(server.url(asset)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{asset}");
        let body = response.text().await.unwrap();
        assert!(body.len() > 1_000, "{asset} is suspiciously small");
        // No script or style is fetched from anywhere else at run time.
        assert!(!body.contains("//cdn") && !body.contains("googleapis"), "{asset}");
        if asset.contains(".js") {
            // It uses the public API: the GraphQL endpoint and its subscriptions.
            assert!(body.contains("/graphql") && body.contains("jobEvents"), "{asset}");
        }
    }
}
