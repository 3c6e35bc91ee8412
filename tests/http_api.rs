//! The GraphQL-over-HTTP surface as a client sees it: media types and status codes, request
//! limits, refused input, error codes, authentication, and health endpoints. Every test
//! starts the real `jobgate` binary and talks to it over real HTTP.

mod common;

use common::{Server, WAIT};
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GQL_RESPONSE: &str = "application/graphql-response+json";
const JSON: &str = "application/json";
const TOTAL_COUNT: &str = "{ jobs { totalCount } }";
const SUBMIT: &str = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { created job { id } } }";

/// One HTTP answer, read whole.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl Reply {
    /// The media type of the body, without parameters, lowercased.
    fn content_type(&self) -> String {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default()
    }

    fn header(&self, name: header::HeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("expected a JSON body ({e}), got {} {:?}", self.status, self.text))
    }

    /// The `errors` of a GraphQL response; panics when there are none.
    fn errors(&self) -> Vec<Value> {
        let body = self.json();
        let errors = body["errors"].as_array().cloned().unwrap_or_default();
        assert!(!errors.is_empty(), "expected errors, got {} {body}", self.status);
        errors
    }

    /// The `data` of a GraphQL response that must have succeeded.
    fn data(&self) -> Value {
        let body = self.json();
        assert!(
            body.get("errors").is_none(),
            "unexpected errors: {} {body}",
            self.status
        );
        assert_eq!(self.status, StatusCode::OK, "{body}");
        body["data"].clone()
    }
}

/// Sends a request with a generous timeout and checks that no error in the answer carries
/// internal detail.
async fn send(server: &Server, request: reqwest::RequestBuilder) -> Reply {
    let response = tokio::time::timeout(WAIT, request.send())
        .await
        .expect("no answer within the wait limit")
        .expect("HTTP request");
    let status = response.status();
    let headers = response.headers().clone();
    let text = tokio::time::timeout(WAIT, response.text())
        .await
        .expect("no body within the wait limit")
        .expect("reading the body");
    let reply = Reply {
        status,
        headers,
        text,
    };
    assert_no_internals(server, &reply);
    reply
}

/// Error text a client sees must never reveal the store, the file system or the code.
fn assert_no_internals(server: &Server, reply: &Reply) {
    let error_text = match serde_json::from_str::<Value>(&reply.text) {
        // Only what errors say: data legitimately echoes user input.
        Ok(body) => {
            let errors = match &body {
                Value::Array(items) => items.iter().map(|b| b["errors"].clone()).collect(),
                other => other["errors"].clone(),
            };
            errors.to_string()
        }
        Err(_) if reply.content_type() == "text/html" => return,
        Err(_) => reply.text.clone(),
    };
    let lower = error_text.to_ascii_lowercase();
    let data_dir = server.data_dir.display().to_string();
    for needle in [
        "sqlx",
        "sqlite",
        "/tmp",
        "/work/",
        "/home/",
        "/root/",
        "/var/",
        ".rs:",
        "src/",
        "os error",
        "panicked",
        "database",
        data_dir.to_ascii_lowercase().as_str(),
    ] {
        assert!(
            !lower.contains(needle),
            "an error leaks internal detail ({needle:?}): {}",
            reply.text
        );
    }
}

fn post_body(
    server: &Server,
    body: impl Into<String>,
    content_type: &str,
    accept: &str,
) -> reqwest::RequestBuilder {
    server
        .http()
        .post(server.url("/graphql"))
        .header(header::CONTENT_TYPE, content_type)
        .header(header::ACCEPT, accept)
        .body(body.into())
}

/// POSTs one GraphQL request as application/json, accepting `accept`.
async fn post_gql(server: &Server, accept: &str, query: &str, variables: Value) -> Reply {
    let body = json!({ "query": query, "variables": variables }).to_string();
    send(server, post_body(server, body, JSON, accept)).await
}

/// POSTs one GraphQL request the way most clients do (reqwest's default `Accept: */*`).
async fn gql(server: &Server, query: &str, variables: Value) -> Reply {
    let request = server
        .http()
        .post(server.url("/graphql"))
        .json(&json!({ "query": query, "variables": variables }));
    send(server, request).await
}

async fn get_graphql(server: &Server, params: &[(&str, &str)], accept: &str) -> Reply {
    let request = server
        .http()
        .get(server.url("/graphql"))
        .query(params)
        .header(header::ACCEPT, accept);
    send(server, request).await
}

async fn total_count(server: &Server) -> i64 {
    gql(server, TOTAL_COUNT, json!({})).await.data()["jobs"]["totalCount"]
        .as_i64()
        .expect("totalCount")
}

/// The first error's `extensions.code`.
fn code_of(error: &Value) -> &str {
    error["extensions"]["code"].as_str().unwrap_or("")
}

/// A request error: status, media type, `errors` present and `data` absent.
fn assert_request_error(reply: &Reply, status: StatusCode, content_type: &str) -> Vec<Value> {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(reply.content_type(), content_type, "{}", reply.text);
    let body = reply.json();
    assert!(
        body.get("data").is_none(),
        "a request that never executed must have no `data` entry: {body}"
    );
    reply.errors()
}

/// A request error (see [`assert_request_error`]) whose first error names what was wrong
/// with the request: `word`.
fn assert_refused_saying(reply: &Reply, accept: &str, word: &str) {
    let errors = assert_request_error(reply, StatusCode::BAD_REQUEST, accept);
    let message = errors[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains(word), "{word:?} not in {}", reply.text);
}

/// A raw HTTP/1.1 exchange, for what reqwest will not send (a request without Accept).
async fn raw_http(server: &Server, request: String) -> (u16, String, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(server.addr)
            .await
            .expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).await.expect("read");
        bytes
    };
    let bytes = tokio::time::timeout(WAIT, exchange)
        .await
        .expect("no answer within the wait limit");
    let text = String::from_utf8(bytes).expect("UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.trim().to_ascii_lowercase())
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

// ---------------------------------------------------------------------------------------
// 1. GraphQL over HTTP
// ---------------------------------------------------------------------------------------

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
    let query = include_str!("fixtures/introspection.graphql");
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

// ---------------------------------------------------------------------------------------
// 2. Limits
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// 3. Bad input changes nothing
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_submissions_are_refused_with_the_field_and_create_nothing() {
    let server = Server::start(&["--max-parallelism", "4"]).await;
    let env = |name: &str| json!({ "command": ["true"], "env": [{ "name": name, "value": "x" }] });
    let cases: Vec<(Value, &str)> = vec![
        (json!({ "command": [] }), "input.command"),
        (json!({ "command": [""] }), "input.command"),
        (json!({ "command": ["  "] }), "input.command"),
        (json!({}), "input.command"),
        (json!({ "args": ["x"] }), "input.command"),
        (
            json!({ "command": ["true"], "parallelism": 0 }),
            "input.parallelism",
        ),
        (
            json!({ "command": ["true"], "parallelism": 5 }),
            "input.parallelism",
        ),
        (
            json!({ "command": ["true"], "completions": 0 }),
            "input.completions",
        ),
        (
            json!({ "command": ["true"], "completions": -1 }),
            "input.completions",
        ),
        (
            json!({ "command": ["true"], "backoffLimit": -1 }),
            "input.backoffLimit",
        ),
        (
            json!({ "command": ["true"], "activeDeadlineSeconds": 0 }),
            "input.activeDeadlineSeconds",
        ),
        (
            json!({ "command": ["true"], "template": "spark" }),
            "input.template",
        ),
        (env("1BAD"), "input.env[0].name"),
        (env("A-B"), "input.env[0].name"),
        (env(""), "input.env[0].name"),
        (env("JOB_COMPLETION_INDEX"), "input.env[0].name"),
        (
            json!({ "command": ["true"], "env": [{ "name": "OK", "value": "1" }, { "name": "OK", "value": "2" }] }),
            "input.env[1].name",
        ),
        (
            json!({ "command": ["true"], "name": "Not_A_Label" }),
            "input.name",
        ),
        (json!({ "command": ["true"], "name": "-leading" }), "input.name"),
        (json!({ "command": ["true"], "name": "" }), "input.name"),
        (
            json!({ "command": ["true"], "namespace": "UPPER" }),
            "input.namespace",
        ),
        (
            json!({ "command": ["true"], "idempotencyKey": "" }),
            "input.idempotencyKey",
        ),
    ];
    for (input, field) in cases {
        for accept in [GQL_RESPONSE, JSON] {
            let reply = post_gql(&server, accept, SUBMIT, json!({ "input": input })).await;
            // Well-formed and valid GraphQL: the field's resolver refused it.
            assert_eq!(reply.status, StatusCode::OK, "{input}: {}", reply.text);
            let errors = reply.errors();
            assert_eq!(errors.len(), 1, "{input}: {}", reply.text);
            assert_eq!(code_of(&errors[0]), "BAD_USER_INPUT", "{input}: {}", reply.text);
            assert_eq!(errors[0]["extensions"]["field"], field, "{input}: {}", reply.text);
            assert_eq!(errors[0]["path"], json!(["submitJob"]), "{input}: {}", reply.text);
            assert!(reply.json()["data"].is_null(), "{input}: {}", reply.text);
        }
    }
    assert_eq!(total_count(&server).await, 0);
    // The server still takes valid work afterwards.
    server
        .submit(json!({ "command": ["true"], "parallelism": 4 }))
        .await;
    assert_eq!(total_count(&server).await, 1);
}

// ---------------------------------------------------------------------------------------
// 4. Error codes
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// 5. Authentication
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// 6. No internal detail in errors
// ---------------------------------------------------------------------------------------

/// `send` checks every answer in this file; this test drives the odd corners on purpose.
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

// ---------------------------------------------------------------------------------------
// 7. Health
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn health_and_readiness() {
    let server = Server::start(&[]).await;
    let reply = send(&server, server.http().get(server.url("/healthz"))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);

    let reply = send(&server, server.http().get(server.url("/readyz"))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.content_type(), JSON);
    assert_eq!(reply.json()["status"], "ready", "{}", reply.text);
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
