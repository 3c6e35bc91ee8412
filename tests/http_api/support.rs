//! The HTTP client side of these tests: requests (as GraphQL clients, browsers and raw
//! sockets send them), the answer read whole (`Reply`), and what every answer must hold: no
//! error in it reveals the store, the file system or the code.

use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{Server, WAIT};

pub(crate) const GQL_RESPONSE: &str = "application/graphql-response+json";
pub(crate) const JSON: &str = "application/json";
pub(crate) const TOTAL_COUNT: &str = "{ jobs { totalCount } }";
pub(crate) const SUBMIT: &str =
    "mutation($input: SubmitJobInput!) { submitJob(input: $input) { created job { id } } }";

/// One HTTP answer, read whole.
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
}

impl Reply {
    /// The media type of the body, without parameters, lowercased.
    pub(crate) fn content_type(&self) -> String {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default()
    }

    pub(crate) fn header(&self, name: header::HeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("expected a JSON body ({e}), got {} {:?}", self.status, self.text))
    }

    /// The `errors` of a GraphQL response; panics when there are none.
    pub(crate) fn errors(&self) -> Vec<Value> {
        let body = self.json();
        let errors = body["errors"].as_array().cloned().unwrap_or_default();
        assert!(!errors.is_empty(), "expected errors, got {} {body}", self.status);
        errors
    }

    /// The `data` of a GraphQL response that must have succeeded.
    pub(crate) fn data(&self) -> Value {
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
pub(crate) async fn send(server: &Server, request: reqwest::RequestBuilder) -> Reply {
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
pub(crate) fn assert_no_internals(server: &Server, reply: &Reply) {
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

pub(crate) fn post_body(
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
pub(crate) async fn post_gql(server: &Server, accept: &str, query: &str, variables: Value) -> Reply {
    let body = json!({ "query": query, "variables": variables }).to_string();
    send(server, post_body(server, body, JSON, accept)).await
}

/// POSTs one GraphQL request the way most clients do (reqwest's default `Accept: */*`).
pub(crate) async fn gql(server: &Server, query: &str, variables: Value) -> Reply {
    let request = server
        .http()
        .post(server.url("/graphql"))
        .json(&json!({ "query": query, "variables": variables }));
    send(server, request).await
}

pub(crate) async fn get_graphql(server: &Server, params: &[(&str, &str)], accept: &str) -> Reply {
    let request = server
        .http()
        .get(server.url("/graphql"))
        .query(params)
        .header(header::ACCEPT, accept);
    send(server, request).await
}

pub(crate) async fn total_count(server: &Server) -> i64 {
    gql(server, TOTAL_COUNT, json!({})).await.data()["jobs"]["totalCount"]
        .as_i64()
        .expect("totalCount")
}

/// The first error's `extensions.code`.
pub(crate) fn code_of(error: &Value) -> &str {
    error["extensions"]["code"].as_str().unwrap_or("")
}

/// A request error: status, media type, `errors` present and `data` absent.
pub(crate) fn assert_request_error(reply: &Reply, status: StatusCode, content_type: &str) -> Vec<Value> {
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
pub(crate) fn assert_refused_saying(reply: &Reply, accept: &str, word: &str) {
    let errors = assert_request_error(reply, StatusCode::BAD_REQUEST, accept);
    let message = errors[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains(word), "{word:?} not in {}", reply.text);
}

/// A raw HTTP/1.1 exchange, for what reqwest will not send (a request without Accept).
pub(crate) async fn raw_http(server: &Server, request: String) -> (u16, String, String) {
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
