//! Webhook endpoints as both backends store them: [`Webhook`] and its delivery state, the
//! row shape they are read in (its filter and scope as JSON text, decoded through the store's
//! [`Unreadable`] list), and the encodings written. It knows no SQL dialect (the statements
//! are in `sql/webhook_store.rs`).

use super::Result;
use super::sql::dialect::Columns;
use super::unreadable::{RowKind, Unreadable};
use crate::model::{JobFilter, Scope};

/// A webhook endpoint and its delivery state, as stored. Times are Unix milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Webhook {
    pub id: String,
    /// The creator's principal.
    pub owner: String,
    pub url: String,
    pub filter: JobFilter,
    /// The creator's scope when it was created (for a JWT owner, narrowed since by narrower
    /// tokens): the most the endpoint may deliver, before its owner's current rights narrow it.
    pub scope: Scope,
    /// `whsec_<base64>`.
    pub secret: String,
    pub created_at: i64,
    /// The last event delivered, or passed over as not matching the filter.
    pub cursor: i64,
    /// Bumped by each replay; a delivery records its outcome only under the revision it
    /// started with.
    pub revision: i64,
    /// Failed attempts since the last success.
    pub attempts: i64,
    /// When the current run of failures began.
    pub failing_since: Option<i64>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<i64>,
    pub next_attempt_at: Option<i64>,
    /// Retries gave up: nothing is delivered until a replay.
    pub parked: bool,
    pub claimed_by: Option<String>,
    /// Why the endpoint was disabled (its owner no longer exists, or its owner or an admin
    /// disabled it): nothing is delivered any more.
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<i64>,
}

/// A failed delivery attempt, as [`Store::webhook_failed`](super::Store::webhook_failed) records it.
#[derive(Clone, Debug)]
pub struct WebhookFailure {
    pub attempts: i64,
    pub failing_since: i64,
    pub error: String,
    pub at: i64,
    /// When to try again; `None` parks the endpoint.
    pub next_attempt_at: Option<i64>,
}

/// The row shape both backends read webhooks in ([`WEBHOOK_COLUMNS`]).
pub(super) struct WebhookRow {
    pub(super) id: String,
    owner: String,
    url: String,
    job_filter: String,
    scope: Option<String>,
    secret: String,
    created_at: i64,
    delivered_seq: i64,
    revision: i64,
    attempts: i64,
    failing_since: Option<i64>,
    last_error: Option<String>,
    last_attempt_at: Option<i64>,
    next_attempt_at: Option<i64>,
    parked: i64,
    claimed_by: Option<String>,
    disabled_reason: Option<String>,
    disabled_at: Option<i64>,
}

impl WebhookRow {
    /// The row's [`WEBHOOK_COLUMNS`].
    pub(super) fn read(r: &impl Columns) -> Self {
        Self {
            id: r.col("id"),
            owner: r.col("owner"),
            url: r.col("url"),
            job_filter: r.col("job_filter"),
            scope: r.col("scope"),
            secret: r.col("secret"),
            created_at: r.col("created_at"),
            delivered_seq: r.col("delivered_seq"),
            revision: r.col("revision"),
            attempts: r.col("attempts"),
            failing_since: r.col("failing_since"),
            last_error: r.col("last_error"),
            last_attempt_at: r.col("last_attempt_at"),
            next_attempt_at: r.col("next_attempt_at"),
            parked: r.col("parked"),
            claimed_by: r.col("claimed_by"),
            disabled_reason: r.col("disabled_reason"),
            disabled_at: r.col("disabled_at"),
        }
    }

    /// The endpoint, or `None` (reported to `unreadable`) when its filter or scope does not
    /// decode.
    pub(super) fn decode(self, unreadable: &Unreadable) -> Option<Webhook> {
        let decoded = (|| -> serde_json::Result<(Scope, JobFilter)> {
            let scope = match &self.scope {
                None => Scope::All,
                Some(list) => Scope::namespaces(serde_json::from_str::<Vec<String>>(list)?),
            };
            Ok((scope, serde_json::from_str(&self.job_filter)?))
        })();
        let (scope, filter) = unreadable.outcome(RowKind::Webhook, &self.id, None, decoded)?;
        Some(Webhook {
            id: self.id,
            owner: self.owner,
            url: self.url,
            filter,
            scope,
            secret: self.secret,
            created_at: self.created_at,
            cursor: self.delivered_seq,
            revision: self.revision,
            attempts: self.attempts,
            failing_since: self.failing_since,
            last_error: self.last_error,
            last_attempt_at: self.last_attempt_at,
            next_attempt_at: self.next_attempt_at,
            parked: self.parked != 0,
            claimed_by: self.claimed_by,
            disabled_reason: self.disabled_reason,
            disabled_at: self.disabled_at,
        })
    }
}

/// The columns [`WebhookRow`] reads.
pub(super) const WEBHOOK_COLUMNS: &str = "id, owner, url, job_filter, scope, secret, created_at, delivered_seq, revision, \
     attempts, failing_since, last_error, last_attempt_at, next_attempt_at, parked, claimed_by, \
     disabled_reason, disabled_at";

/// A webhook's filter and scope as stored: JSON text, and a JSON array or NULL for every
/// namespace.
pub(super) fn webhook_json(webhook: &Webhook) -> Result<(String, Option<String>)> {
    Ok((
        serde_json::to_string(&webhook.filter)?,
        webhook.scope.list().map(serde_json::to_string).transpose()?,
    ))
}

/// A webhook's scope as stored (PostgreSQL's narrowing compares it): a JSON array, or NULL
/// for every namespace.
pub(super) fn scope_json(scope: &Scope) -> Result<Option<String>> {
    Ok(scope.list().map(serde_json::to_string).transpose()?)
}
