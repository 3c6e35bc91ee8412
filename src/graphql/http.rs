//! GraphQL over HTTP, following the GraphQL-over-HTTP specification.
//!
//! It owns media-type negotiation and status codes: POST with `application/json` (anything
//! else is 415), `application/graphql-response+json` answers when the client accepts them
//! (request errors are then 400) and `application/json` otherwise (always 200 for a
//! well-formed request), 406 for an Accept header we cannot satisfy, 400 for malformed
//! bodies, 405 for a mutation over GET, and batching only when enabled, and the time limit
//! of each request (`DEADLINE_EXCEEDED`). Executing is the schema's business; this module
//! never interprets a query beyond its operation type.

use std::sync::Arc;

use async_graphql::{Executor, Request, Response, ServerError};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use serde_json::Value;

use crate::graphql::bounds;
use crate::graphql::error::{deadline_exceeded, fill_codes};
use crate::graphql::operation::{OperationKind, PreExecFailed, operation_kind};

pub const GRAPHQL_RESPONSE_JSON: &str = "application/graphql-response+json";
const APPLICATION_JSON: &str = "application/json";

/// Which media type the response uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseType {
    /// `application/graphql-response+json`: status codes say whether the request failed.
    GraphqlResponse,
    /// `application/json`: 200 for every well-formed request (legacy clients).
    Json,
}

impl ResponseType {
    fn content_type(self) -> &'static str {
        match self {
            ResponseType::GraphqlResponse => GRAPHQL_RESPONSE_JSON,
            ResponseType::Json => APPLICATION_JSON,
        }
    }
}

/// Per-server HTTP options.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub allow_batch: bool,
    pub max_batch: usize,
    /// Longest one request of a batch may execute (zero: no limit); see `execute`.
    pub request_timeout: std::time::Duration,
}

/// Picks the response type from the Accept header; `None` means 406.
pub fn negotiate(headers: &HeaderMap) -> Option<ResponseType> {
    let values: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if values.is_empty() {
        // The spec's advice for clients from before the watershed: treat as application/json.
        return Some(ResponseType::Json);
    }
    let mut best: Option<(ResponseType, f32)> = None;
    for item in values.iter().flat_map(|v| v.split(',')) {
        let mut parts = item.split(';').map(str::trim);
        let essence = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .filter_map(|q| q.parse::<f32>().ok())
            .next()
            .unwrap_or(1.0);
        if q <= 0.0 {
            continue;
        }
        let candidate = match essence.as_str() {
            GRAPHQL_RESPONSE_JSON => ResponseType::GraphqlResponse,
            APPLICATION_JSON | "application/*" | "*/*" => ResponseType::Json,
            _ => continue,
        };
        // Higher q wins; on a tie the graphql-response type wins.
        let better = match best {
            None => true,
            Some((kind, bq)) => {
                q > bq || (q == bq && candidate == ResponseType::GraphqlResponse && kind != candidate)
            }
        };
        if better {
            best = Some((candidate, q));
        }
    }
    best.map(|(kind, _)| kind)
}

/// Whether the client asked for an HTML page (a browser), rather than a GraphQL response.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.split(',').any(|t| t.trim().starts_with("text/html")))
}

/// A response carrying GraphQL errors only (the request never executed).
pub fn request_error(status: StatusCode, kind: ResponseType, mut errors: Vec<ServerError>) -> HttpResponse {
    fill_codes(&mut errors);
    // With application/json, a well-formed request is answered 200 even when it failed;
    // a malformed one keeps its 4xx.
    let body = serde_json::json!({ "errors": errors });
    json_response(status, kind, body.to_string())
}

fn json_response(status: StatusCode, kind: ResponseType, body: String) -> HttpResponse {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(kind.content_type()),
    );
    response
}

fn message_error(status: StatusCode, kind: ResponseType, message: &str) -> HttpResponse {
    request_error(status, kind, vec![ServerError::new(message, None)])
}

/// Checks the shape of one request object as the spec defines it, then builds it.
fn parse_request(value: Value) -> Result<Request, String> {
    let Value::Object(map) = &value else {
        return Err("the request body must be a JSON object".into());
    };
    match map.get("query") {
        Some(Value::String(_)) => {}
        Some(_) => return Err("`query` must be a string".into()),
        None => return Err("`query` is required".into()),
    }
    for key in ["variables", "extensions"] {
        if !matches!(map.get(key), None | Some(Value::Null) | Some(Value::Object(_))) {
            return Err(format!("`{key}` must be an object or null"));
        }
    }
    if !matches!(
        map.get("operationName"),
        None | Some(Value::Null) | Some(Value::String(_))
    ) {
        return Err("`operationName` must be a string or null".into());
    }
    // Bounded before async-graphql converts them into its own values, recursively.
    bounds::check_variables(
        ["variables", "extensions"].map(|key| (key, map.get(key).unwrap_or(&Value::Null))),
    )
    .map_err(|e| e.message)?;
    serde_json::from_value(value).map_err(|e| format!("the request is not a GraphQL request: {e}"))
}

/// What came in over HTTP, before execution.
pub struct IncomingHttp {
    pub method: Method,
    pub requests: Vec<Request>,
    pub batched: bool,
    pub response_type: ResponseType,
}

/// Reads a POST body: checks the media type and the JSON shape.
/// A refusal, answered as it is. Boxed because a response is large and refusals are rare.
pub type HttpRefusal = Box<HttpResponse>;

pub fn read_post(
    headers: &HeaderMap,
    body: &Bytes,
    options: &HttpOptions,
) -> Result<IncomingHttp, HttpRefusal> {
    let response_type = negotiate(headers).ok_or_else(not_acceptable)?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let is_json = content_type
        .and_then(|c| c.parse::<mime::Mime>().ok())
        .is_some_and(|m| {
            m.essence_str() == APPLICATION_JSON
                && m.get_param(mime::CHARSET).is_none_or(|cs| cs == mime::UTF_8)
        });
    if !is_json {
        return Err(Box::new(message_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            response_type,
            "POST bodies must be application/json",
        )));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        message_error(
            StatusCode::BAD_REQUEST,
            response_type,
            &format!("the body is not valid JSON: {e}"),
        )
    })?;
    let (values, batched) = match value {
        Value::Array(items) => {
            if !options.allow_batch {
                return Err(Box::new(message_error(
                    StatusCode::BAD_REQUEST,
                    response_type,
                    "batched requests are not enabled on this server; send one request per POST",
                )));
            }
            if items.is_empty() || items.len() > options.max_batch {
                return Err(Box::new(message_error(
                    StatusCode::BAD_REQUEST,
                    response_type,
                    &format!("a batch must hold 1 to {} requests", options.max_batch),
                )));
            }
            (items, true)
        }
        other => (vec![other], false),
    };
    let requests = values
        .into_iter()
        .map(parse_request)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| message_error(StatusCode::BAD_REQUEST, response_type, &e))?;
    Ok(IncomingHttp {
        method: Method::POST,
        requests,
        batched,
        response_type,
    })
}

/// Reads a GET request's query string.
pub fn read_get(headers: &HeaderMap, query: &str) -> Result<IncomingHttp, HttpRefusal> {
    let response_type = negotiate(headers).ok_or_else(not_acceptable)?;
    let bad = |m: &str| message_error(StatusCode::BAD_REQUEST, response_type, m);
    let params =
        serde_urlencoded_pairs(query).map_err(|_| bad("the query string is not valid URL encoding"))?;
    let get = |k: &str| params.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let Some(q) = get("query") else {
        return Err(Box::new(bad("`query` is required")));
    };
    let mut object = serde_json::Map::new();
    object.insert("query".into(), Value::String(q.to_owned()));
    if let Some(name) = get("operationName") {
        object.insert("operationName".into(), Value::String(name.to_owned()));
    }
    for key in ["variables", "extensions"] {
        if let Some(raw) = get(key) {
            let v: Value =
                serde_json::from_str(raw).map_err(|_| bad(&format!("`{key}` must be JSON-encoded")))?;
            object.insert(key.into(), v);
        }
    }
    let request = parse_request(Value::Object(object)).map_err(|e| bad(&e))?;
    Ok(IncomingHttp {
        method: Method::GET,
        requests: vec![request],
        batched: false,
        response_type,
    })
}

fn serde_urlencoded_pairs(query: &str) -> Result<Vec<(String, String)>, serde_urlencoded::de::Error> {
    serde_urlencoded::from_str(query)
}

fn not_acceptable() -> HttpResponse {
    json_response(
        StatusCode::NOT_ACCEPTABLE,
        ResponseType::Json,
        serde_json::json!({"errors": [{"message": format!("this endpoint answers {GRAPHQL_RESPONSE_JSON} or {APPLICATION_JSON}")}]})
            .to_string(),
    )
}

/// Executes what [`read_post`] or [`read_get`] accepted and answers with the right status.
///
/// Each request may execute for at most `timeout` (zero: no limit); one that runs longer is
/// dropped where it waits and answered `DEADLINE_EXCEEDED`. Execution runs inside this future
/// (async-graphql spawns nothing), so when the client goes away and hyper drops the handler,
/// the work stops with it.
pub async fn execute<E: Executor>(
    executor: &E,
    incoming: IncomingHttp,
    timeout: std::time::Duration,
    metrics: &crate::metrics::Metrics,
    session: impl Fn(Request) -> Request,
) -> HttpResponse {
    let IncomingHttp {
        method,
        requests,
        batched,
        response_type,
    } = incoming;
    // Each response with whether it is a request error (it never executed).
    let mut responses: Vec<(Response, bool)> = Vec::with_capacity(requests.len());
    let mut any_request_error = false;
    for mut request in requests {
        let kind = operation_kind(&mut request);
        match kind {
            Ok(OperationKind::Mutation) if method == Method::GET => {
                let mut response = message_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    response_type,
                    "mutations are not allowed over GET; use POST",
                );
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                return response;
            }
            Ok(OperationKind::Subscription) => {
                let error = ServerError::new(
                    "subscriptions are served over WebSocket at this same URL with the graphql-transport-ws subprotocol",
                    None,
                );
                responses.push((Response::from_errors(vec![error]), true));
                any_request_error = true;
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                responses.push((Response::from_errors(vec![e]), true));
                any_request_error = true;
                continue;
            }
        }
        let flag = Arc::new(PreExecFailed::default());
        let request = session(request.data(flag.clone()));
        let started = std::time::Instant::now();
        let response = if timeout.is_zero() {
            executor.execute(request).await
        } else {
            match tokio::time::timeout(timeout, executor.execute(request)).await {
                Ok(response) => response,
                Err(_) => {
                    tracing::warn!(
                        timeout_ms = timeout.as_millis() as u64,
                        "request stopped at its time limit"
                    );
                    Response::from_errors(vec![deadline_exceeded(timeout)])
                }
            }
        };
        if let Ok(kind) = kind {
            metrics.graphql_request(kind.as_str(), started.elapsed());
        }
        // A request error (it never executed) leaves `data` absent: the flag says so, and
        // when an earlier hook failed before parsing, the shape does.
        let request_error = if flag.observed() {
            flag.is_set()
        } else {
            response.data == async_graphql::Value::Null && response.errors.iter().all(|e| e.path.is_empty())
        };
        any_request_error |= request_error;
        responses.push((response, request_error));
    }
    let status = if response_type == ResponseType::GraphqlResponse && any_request_error && !batched {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    // Nothing but rate limits stood in the way: 429, with when to come back.
    let retry_after = match responses.as_slice() {
        [(response, false)] if !batched && response.data == async_graphql::Value::Null => {
            rate_limited_for(&response.errors)
        }
        _ => None,
    };
    for (response, _) in &mut responses {
        fill_codes(&mut response.errors);
    }
    let body = responses
        .iter()
        .map(|(response, request_error)| response_json(response, *request_error))
        .collect::<Result<Vec<_>, _>>()
        .map(|parts| {
            if batched {
                format!("[{}]", parts.join(","))
            } else {
                parts.concat()
            }
        });
    match body {
        Ok(body) => match retry_after {
            Some(seconds) => {
                let mut response = json_response(StatusCode::TOO_MANY_REQUESTS, response_type, body);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                response
            }
            None => json_response(status, response_type, body),
        },
        Err(e) => {
            tracing::error!(error = %e, "serialising a GraphQL response failed");
            message_error(StatusCode::INTERNAL_SERVER_ERROR, response_type, "internal error")
        }
    }
}

/// The longest `retryAfterSeconds` when every error is `RATE_LIMITED`.
fn rate_limited_for(errors: &[ServerError]) -> Option<u64> {
    let mut longest = None;
    for e in errors {
        let extensions = e.extensions.as_ref()?;
        if extensions.get("code") != Some(&async_graphql::Value::from("RATE_LIMITED")) {
            return None;
        }
        let seconds = match extensions.get("retryAfterSeconds") {
            Some(async_graphql::Value::Number(n)) => n.as_u64().unwrap_or(1),
            _ => 1,
        };
        longest = Some(longest.map_or(seconds, |l: u64| l.max(seconds)));
    }
    longest
}

/// One response as JSON. A request error (parse, validation, or refused before execution)
/// has no `data` entry at all, as the GraphQL spec and GraphQL-over-HTTP require;
/// async-graphql would otherwise write `"data": null`, which means "execution failed".
/// Executed responses are written directly, so `data` keeps the order of the selection.
fn response_json(response: &Response, request_error: bool) -> serde_json::Result<String> {
    if !request_error {
        return serde_json::to_string(response);
    }
    let mut value = serde_json::to_value(response)?;
    if let Value::Object(map) = &mut value {
        map.remove("data");
    }
    serde_json::to_string(&value)
}
