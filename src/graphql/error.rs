//! The one place where errors become GraphQL errors with an `extensions.code`.
//!
//! Every error a client can see is mapped here to exactly one code. Internal causes (SQL,
//! I/O, paths) are logged with their detail and answered with a generic message.

use std::sync::Arc;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextRequest, NextSubscribe};
use async_graphql::{ErrorExtensions, Response, ServerError};
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::jobs::service::ServiceError;
use crate::webhooks::WebhookError;

/// The codes a client may see in `extensions.code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    BadUserInput,
    NotFound,
    FailedPrecondition,
    Unauthenticated,
    Forbidden,
    Unavailable,
    /// Too many requests of one kind from one identity in a short time (mutations,
    /// subscriptions); `extensions.retryAfterSeconds` says when to try again.
    RateLimited,
    /// A namespace's cap on active jobs.
    QuotaExceeded,
    /// A per-connection cap (subscriptions on one WebSocket), or a per-caller one (webhook
    /// endpoints).
    LimitExceeded,
    /// The request ran longer than `--request-timeout-ms` and was stopped. A mutation may
    /// still have taken effect (a submission the store already accepted stays); retry it with
    /// the same `idempotencyKey`.
    DeadlineExceeded,
    /// A resume cursor older than retention: what came after it was deleted.
    /// `extensions.oldestCursor` is the oldest cursor to resume after, and
    /// `extensions.recovery` says how to get back in step.
    CursorExpired,
    /// What was asked for is stored but cannot be read (a damaged or hand-edited row); the
    /// rest is served, and administrators see the row in `unreadableRecords`.
    DataLoss,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::BadUserInput => "BAD_USER_INPUT",
            Code::NotFound => "NOT_FOUND",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::Forbidden => "FORBIDDEN",
            Code::Unavailable => "UNAVAILABLE",
            Code::RateLimited => "RATE_LIMITED",
            Code::QuotaExceeded => "QUOTA_EXCEEDED",
            Code::LimitExceeded => "LIMIT_EXCEEDED",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::CursorExpired => "CURSOR_EXPIRED",
            Code::DataLoss => "DATA_LOSS",
        }
    }
}

/// A GraphQL error with a code and, for bad input, the offending field.
pub fn error(code: Code, message: impl Into<String>) -> async_graphql::Error {
    async_graphql::Error::new(message).extend_with(|_, e| e.set("code", code.as_str()))
}

/// The `DEADLINE_EXCEEDED` error a transport answers when a query or mutation ran longer
/// than its time limit and was stopped.
pub fn deadline_exceeded(limit: std::time::Duration) -> ServerError {
    let mut error = ServerError::new(
        format!(
            "the request ran longer than {} ms and was stopped",
            limit.as_millis()
        ),
        None,
    );
    error
        .extensions
        .get_or_insert_with(Default::default)
        .set("code", Code::DeadlineExceeded.as_str());
    error
}

/// A `RATE_LIMITED` error saying when to try again.
pub fn rate_limited(what: &str, retry_after: std::time::Duration) -> async_graphql::Error {
    let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
    async_graphql::Error::new(format!("too many {what}: retry in {seconds} s")).extend_with(move |_, e| {
        e.set("code", Code::RateLimited.as_str());
        e.set("retryAfterSeconds", seconds);
    })
}

/// What a client whose cursor expired does to get back in step without missing anything.
pub const CURSOR_RECOVERY: &str = "read a snapshot (jobStats, or the jobs you follow) and resume with after: \
     the snapshot's cursor (jobStats.cursor; a job's lastEventCursor)";

/// A `CURSOR_EXPIRED` error: events after `after` were deleted by retention.
pub fn cursor_expired(after: i64, oldest: i64) -> async_graphql::Error {
    async_graphql::Error::new(format!(
        "events after cursor {after} were deleted by retention (--retention-days); the oldest cursor to \
         resume after is {oldest}"
    ))
    .extend_with(move |_, e| {
        e.set("code", Code::CursorExpired.as_str());
        e.set("oldestCursor", oldest.to_string());
        e.set("recovery", CURSOR_RECOVERY);
    })
}

/// A `BAD_USER_INPUT` error naming the input field at fault.
pub fn bad_input(field: &str, message: impl std::fmt::Display) -> async_graphql::Error {
    let field = field.to_owned();
    async_graphql::Error::new(format!("{field}: {message}")).extend_with(move |_, e| {
        e.set("code", Code::BadUserInput.as_str());
        e.set("field", field.as_str());
    })
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError(match e {
            ServiceError::Invalid(v) => bad_input(&v.field, &v.message),
            ServiceError::IdempotencyConflict { .. } => bad_input("input.idempotencyKey", &e),
            ServiceError::NotFound { .. } => error(Code::NotFound, e.to_string()),
            ServiceError::FailedPrecondition(m) => error(Code::FailedPrecondition, m),
            ServiceError::Forbidden(m) => error(Code::Forbidden, m),
            ServiceError::QuotaExceeded { .. } | ServiceError::ScheduleQuotaExceeded { .. } => {
                error(Code::QuotaExceeded, e.to_string())
            }
            ServiceError::ShuttingDown => error(Code::Unavailable, "jobgate is shutting down; retry shortly"),
            ServiceError::Unavailable(m) => error(Code::Unavailable, m),
            ServiceError::Unreadable { .. } => error(Code::DataLoss, e.to_string()),
            ServiceError::CursorExpired { after, oldest } => cursor_expired(after, oldest),
            ServiceError::UnreadableRow(row) => error(Code::DataLoss, row),
            ServiceError::Store(cause) => {
                // The writer logged why the store cannot write, once, when it began: one line
                // per refused request would flood a log that may share the full disk.
                if ServiceError::store_unwritable(&cause) {
                    tracing::debug!(error = %cause, "write refused while the store cannot write");
                } else {
                    tracing::error!(error = %cause, "store failure answered as UNAVAILABLE");
                }
                error(
                    Code::Unavailable,
                    "jobgate could not use its store and changed nothing; retry shortly",
                )
            }
        })
    }
}

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        ApiError(match e {
            WebhookError::Target(t) => bad_input("input.url", t),
            WebhookError::BadCursor(m) => bad_input("after", m),
            WebhookError::NotFound { .. } => error(Code::NotFound, e.to_string()),
            WebhookError::TooMany => error(Code::LimitExceeded, e.to_string()),
            WebhookError::Forbidden(m) => error(Code::Forbidden, m),
            WebhookError::ReasonTooLong => bad_input("reason", &e),
            WebhookError::Disabled { .. } => error(Code::FailedPrecondition, e.to_string()),
            WebhookError::CursorExpired { after, oldest } => cursor_expired(after, oldest),
            WebhookError::UnreadableRow(row) => error(Code::DataLoss, row),
            WebhookError::Store(cause) => {
                tracing::error!(error = %cause, "store failure answered as UNAVAILABLE");
                error(
                    Code::Unavailable,
                    "jobgate could not use its store and changed nothing; retry shortly",
                )
            }
        })
    }
}

/// The code, message and (for bad input) field that `e` would carry as the error of a
/// `submitJob` call, for the input at `index` of a bulk call: fields and messages name
/// `inputs[index]` where the single call names `input`.
pub fn for_item(e: ServiceError, index: usize) -> (String, String, Option<String>) {
    let error = ApiError::from(e).0;
    let value = |key: &str| match error.extensions.as_ref().and_then(|x| x.get(key)) {
        Some(async_graphql::Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let code = value("code").unwrap_or_else(|| Code::BadUserInput.as_str().to_owned());
    let item = format!("inputs[{index}]");
    let rename = |text: &str| match text.strip_prefix("input") {
        Some(rest) if rest.is_empty() || rest.starts_with('.') => format!("{item}{rest}"),
        _ => text.to_owned(),
    };
    let field = value("field").map(|f| rename(&f));
    (code, rename(&error.message), field)
}

/// Wrapper so resolvers can use `?` on service results.
pub struct ApiError(pub async_graphql::Error);

impl From<ApiError> for async_graphql::Error {
    fn from(e: ApiError) -> Self {
        e.0
    }
}

/// Converts a service result for a resolver.
pub trait OrApiError<T> {
    fn api(self) -> async_graphql::Result<T>;
}

impl<T> OrApiError<T> for Result<T, ServiceError> {
    fn api(self) -> async_graphql::Result<T> {
        self.map_err(|e| ApiError::from(e).into())
    }
}

impl<T> OrApiError<T> for Result<T, WebhookError> {
    fn api(self) -> async_graphql::Result<T> {
        self.map_err(|e| ApiError::from(e).into())
    }
}

/// A schema extension that gives every error without a code `BAD_USER_INPUT`.
///
/// Our resolvers code every error they raise (above), so an uncoded error is async-graphql
/// refusing the request itself: its syntax, its validation (unknown fields, wrong argument
/// types), a limit (depth, complexity, aliases) or an argument validator (`tailLines: 0`).
/// Those are the client's input; without this they would reach the client with no code.
pub struct ErrorCodes;

impl ExtensionFactory for ErrorCodes {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ErrorCodesExtension)
    }
}

struct ErrorCodesExtension;

/// Gives each error without a code `BAD_USER_INPUT` (see [`ErrorCodes`]); the transports call
/// it too for the refusals they make before a request reaches the schema.
pub fn fill_codes(errors: &mut [ServerError]) {
    for error in errors {
        let extensions = error.extensions.get_or_insert_with(Default::default);
        if extensions.get("code").is_none() {
            extensions.set("code", Code::BadUserInput.as_str());
        }
    }
}

#[async_trait::async_trait]
impl Extension for ErrorCodesExtension {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let mut response = next.run(ctx).await;
        fill_codes(&mut response.errors);
        response
    }

    fn subscribe<'s>(
        &self,
        ctx: &ExtensionContext<'_>,
        stream: BoxStream<'s, Response>,
        next: NextSubscribe<'_>,
    ) -> BoxStream<'s, Response> {
        next.run(ctx, stream)
            .map(|mut response| {
                fill_codes(&mut response.errors);
                response
            })
            .boxed()
    }
}
