//! GraphQL over HTTP for the client: one POST to `<server>/graphql` per query or mutation,
//! the bearer token in `Authorization`, and every way it can fail as a [`CliError`].
//!
//! It must not interpret what it fetches beyond GraphQL's envelope (`data`, `errors`): the
//! commands do.

use std::time::Duration;

use reqwest::Url;
use serde_json::{Value, json};

/// Why a client command failed; its `Display` is the line printed after `error: `.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The server answered with a GraphQL error (or a refusal the client names with the
    /// server's codes: a missing job is `NOT_FOUND`, a refused WebSocket login
    /// `UNAUTHENTICATED`).
    #[error("{code}: {message}")]
    Server { code: String, message: String },
    /// No connection to the server (refused, unresolvable, reset before an answer).
    #[error("cannot reach jobgate at {url}: {cause}")]
    Connect { url: String, cause: String },
    /// An established WebSocket ended before the operation did.
    #[error("the connection to {url} was lost: {cause}")]
    Disconnected { url: String, cause: String },
    /// Something that is not jobgate's API answered, or answered what a client cannot read.
    #[error("{0}")]
    Protocol(String),
    /// A bad `--server`, or another mistake in what was asked.
    #[error("{0}")]
    Usage(String),
    /// Standard output could not be written.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// Whether trying again later may work: the server was unreachable, the connection
    /// dropped, or the server asked to be retried (`UNAVAILABLE`, `RATE_LIMITED`).
    pub fn retriable(&self) -> bool {
        match self {
            CliError::Connect { .. } | CliError::Disconnected { .. } => true,
            CliError::Server { code, .. } => matches!(code.as_str(), "UNAVAILABLE" | "RATE_LIMITED"),
            _ => false,
        }
    }

    pub fn server(code: &str, message: impl Into<String>) -> CliError {
        CliError::Server {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// The first of a GraphQL `errors` array, with its `extensions.code`.
    pub fn from_graphql_errors(errors: &Value) -> CliError {
        let first = errors.get(0).unwrap_or(errors);
        let code = first["extensions"]["code"].as_str().unwrap_or("UNKNOWN");
        let message = first["message"].as_str().unwrap_or("(no message)");
        CliError::server(code, message)
    }
}

/// One jobgate the client talks to.
pub struct Connection {
    /// The base URL as given, without a trailing slash (for messages).
    pub server: String,
    /// `<server>/graphql`.
    http_url: Url,
    /// The same over ws:// or wss://.
    pub ws_url: Url,
    /// The `Authorization` value, when a token was given.
    pub authorization: Option<String>,
    /// How long a streaming connection may be silent before it is asked for a pong (and,
    /// unanswered for as long again, taken as dead).
    pub keepalive: Duration,
    http: reqwest::Client,
}

impl Connection {
    pub fn new(server: &str, token: Option<&str>, keepalive: Duration) -> Result<Connection, CliError> {
        let server = server.trim_end_matches('/').to_owned();
        let bad = |why: &str| CliError::Usage(format!("--server {server:?}: {why}"));
        let base = Url::parse(&server).map_err(|e| bad(&e.to_string()))?;
        let ws_scheme = match base.scheme() {
            "http" => "ws",
            // TLS with the system's root certificates (rustls), as behind an ingress.
            "https" => "wss",
            _ => return Err(bad("expected an http:// or https:// URL")),
        };
        if base.query().is_some() || base.fragment().is_some() {
            return Err(bad("expected a base URL without a query or fragment"));
        }
        // `<base>/graphql`, keeping any path prefix the server is mounted under.
        let http_url = Url::parse(&format!("{server}/graphql")).map_err(|e| bad(&e.to_string()))?;
        let mut ws_url = http_url.clone();
        ws_url
            .set_scheme(ws_scheme)
            .map_err(|()| bad("cannot make a WebSocket URL of it"))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // The server bounds queries and mutations itself (--request-timeout-ms); this only
            // keeps a dead peer from hanging the command forever.
            .timeout(Duration::from_secs(120))
            .user_agent(concat!("jobgate-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::Protocol(format!("cannot build an HTTP client: {e}")))?;
        Ok(Connection {
            server,
            http_url,
            ws_url,
            authorization: token
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| format!("Bearer {t}")),
            keepalive,
            http,
        })
    }

    /// Runs a query or mutation; its `data`, or the first error with its code.
    pub async fn query(&self, query: &str, variables: Value) -> Result<Value, CliError> {
        let mut request = self
            .http
            .post(self.http_url.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/graphql-response+json, application/json",
            )
            .json(&json!({ "query": query, "variables": variables }));
        if let Some(authorization) = &self.authorization {
            request = request.header(reqwest::header::AUTHORIZATION, authorization);
        }
        let response = request.send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.transport_error(e))?;
        let Ok(body) = serde_json::from_slice::<Value>(&body) else {
            let text = String::from_utf8_lossy(&body);
            let text = text.trim();
            return Err(CliError::Protocol(format!(
                "{} answered HTTP {status} with no GraphQL response{}",
                self.http_url,
                if text.is_empty() {
                    String::new()
                } else {
                    format!(": {}", text.chars().take(200).collect::<String>())
                }
            )));
        };
        if let Some(errors) = body.get("errors").filter(|e| !e.is_null()) {
            return Err(CliError::from_graphql_errors(errors));
        }
        match body.get("data") {
            Some(data) if !data.is_null() => Ok(data.clone()),
            _ => Err(CliError::Protocol(format!(
                "{} answered HTTP {status} with neither data nor errors",
                self.http_url
            ))),
        }
    }

    fn transport_error(&self, e: reqwest::Error) -> CliError {
        CliError::Connect {
            url: self.server.clone(),
            cause: error_chain(&e),
        }
    }
}

/// An error and its causes, innermost last: reqwest's own message alone ("error sending
/// request") does not say that the connection was refused.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
