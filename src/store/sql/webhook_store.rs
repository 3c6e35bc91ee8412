//! Webhook endpoints' statements, for both backends: each write is a small transaction of
//! its own beside the job writer's ([`Backend::begin_side`]), conditional where a delivery's
//! outcome must land only on the claim and revision it started under.
//!
//! It must not decide who delivers what (the webhooks service does).

use super::Backend;
use super::dialect::{Dialect, sql, sql_text};
use super::write_tx::{WriteTx, bounded};
use crate::model::Scope;
use crate::store::unreadable::{RowKind, unreadable_error};
use crate::store::webhooks::{WEBHOOK_COLUMNS, WebhookRow, scope_json, webhook_json};
use crate::store::{Result, StoreTx as _, Webhook, WebhookFailure};

/// Runs `text` with `binds` in a transaction of its own; how many rows it changed.
macro_rules! side_write {
    ($store:expr, $text:expr $(, $bind:expr)* $(,)?) => {{
        let mut tx = Backend::begin_side($store).await?;
        let query = sql::<B::Db>($text)$(.bind($bind))*;
        let changed = bounded::<B::Db, _>(async { Ok(query.execute(tx.conn()).await?) }).await?;
        Box::new(tx).commit().await?;
        changed
    }};
}

pub(super) async fn insert_webhook<B: Backend>(store: &B, webhook: &Webhook) -> Result<()> {
    let (filter, scope) = webhook_json(webhook)?;
    side_write!(
        store,
        "INSERT INTO webhooks (id, owner, url, job_filter, scope, secret, created_at, delivered_seq) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        webhook.id.as_str(),
        webhook.owner.as_str(),
        webhook.url.as_str(),
        filter,
        scope,
        webhook.secret.as_str(),
        webhook.created_at,
        webhook.cursor,
    );
    Ok(())
}

pub(super) async fn webhook<B: Backend>(store: &B, id: &str) -> Result<Option<Webhook>> {
    let text = sql_text!(B::Db, "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1");
    let mut conn = store.pool().acquire().await?;
    let unreadable = store.unreadable_rows();
    sql::<B::Db>(text)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .map(|row| {
            WebhookRow::read(&row)
                .decode(unreadable)
                .ok_or_else(|| unreadable_error(unreadable, RowKind::Webhook, id))
        })
        .transpose()
}

pub(super) async fn webhooks<B: Backend>(store: &B, owner: Option<&str>) -> Result<Vec<Webhook>> {
    let text = sql_text!(
        B::Db,
        "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE {} IS NULL OR owner = $1 ORDER BY created_at, id",
        <B::Db as Dialect>::text("$1")
    );
    let mut conn = store.pool().acquire().await?;
    let rows = sql::<B::Db>(text).bind(owner).fetch_all(&mut *conn).await?;
    Ok(rows
        .iter()
        .filter_map(|row| WebhookRow::read(row).decode(store.unreadable_rows()))
        .collect())
}

pub(super) async fn delete_webhook<B: Backend>(store: &B, id: &str) -> Result<bool> {
    Ok(side_write!(store, "DELETE FROM webhooks WHERE id = $1", id) > 0)
}

pub(super) async fn disable_webhook<B: Backend>(store: &B, id: &str, reason: &str, at: i64) -> Result<bool> {
    let changed = side_write!(
        store,
        "UPDATE webhooks SET disabled_reason = $2, disabled_at = $3, claimed_by = NULL, \
         claimed_until = NULL WHERE id = $1 AND disabled_at IS NULL",
        id,
        reason,
        at,
    );
    Ok(changed > 0)
}

pub(super) async fn narrow_webhook_scope<B: Backend>(
    store: &B,
    id: &str,
    from: &Scope,
    to: &Scope,
) -> Result<bool> {
    let changed = side_write!(
        store,
        "UPDATE webhooks SET scope = $3 WHERE id = $1 AND scope IS NOT DISTINCT FROM $2",
        id,
        scope_json(from)?,
        scope_json(to)?,
    );
    Ok(changed > 0)
}

pub(super) async fn replay_webhook<B: Backend>(store: &B, id: &str, cursor: i64) -> Result<bool> {
    let changed = side_write!(
        store,
        "UPDATE webhooks SET delivered_seq = $2, revision = revision + 1, attempts = 0, \
         failing_since = NULL, last_error = NULL, next_attempt_at = NULL, parked = 0 \
         WHERE id = $1",
        id,
        cursor,
    );
    Ok(changed > 0)
}

/// One statement: concurrent replicas' claims serialise on the rows they update. The
/// endpoints come back in id order.
pub(super) async fn claim_webhooks<B: Backend>(
    store: &B,
    claimant: &str,
    now: i64,
    until: i64,
) -> Result<Vec<Webhook>> {
    let text = sql_text!(
        B::Db,
        "UPDATE webhooks SET claimed_by = $1, claimed_until = $3 WHERE parked = 0 AND disabled_at IS NULL \
         AND (claimed_by IS NULL OR claimed_by = $1 OR claimed_until < $2) \
         RETURNING {WEBHOOK_COLUMNS}"
    );
    let mut tx = Backend::begin_side(store).await?;
    let query = sql::<B::Db>(text).bind(claimant).bind(now).bind(until);
    let rows = bounded::<B::Db, _>(async { Ok(query.fetch_all(tx.conn()).await?) }).await?;
    Box::new(tx).commit().await?;
    let mut claimed: Vec<Webhook> = rows
        .iter()
        .filter_map(|row| WebhookRow::read(row).decode(store.unreadable_rows()))
        .collect();
    // RETURNING follows no order.
    claimed.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(claimed)
}

pub(super) async fn release_webhooks<B: Backend>(store: &B, claimant: &str) -> Result<()> {
    side_write!(
        store,
        "UPDATE webhooks SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = $1",
        claimant
    );
    Ok(())
}

pub(super) async fn webhook_delivered<B: Backend>(
    store: &B,
    id: &str,
    claimant: &str,
    revision: i64,
    cursor: i64,
    at: Option<i64>,
) -> Result<bool> {
    let changed = side_write!(
        store,
        "UPDATE webhooks SET delivered_seq = $4, last_attempt_at = coalesce($5, last_attempt_at), attempts = 0, \
         failing_since = NULL, last_error = NULL, next_attempt_at = NULL \
         WHERE id = $1 AND claimed_by = $2 AND revision = $3 AND parked = 0 \
         AND disabled_at IS NULL",
        id,
        claimant,
        revision,
        cursor,
        at,
    );
    Ok(changed > 0)
}

pub(super) async fn webhook_failed<B: Backend>(
    store: &B,
    id: &str,
    claimant: &str,
    revision: i64,
    failure: &WebhookFailure,
) -> Result<bool> {
    let text = sql_text!(
        B::Db,
        "UPDATE webhooks SET attempts = $4, failing_since = $5, last_error = $6, \
         last_attempt_at = $7, next_attempt_at = $8, parked = {parked}, \
         claimed_by = CASE WHEN {parked} = 1 THEN NULL ELSE claimed_by END, \
         claimed_until = CASE WHEN {parked} = 1 THEN NULL ELSE claimed_until END \
         WHERE id = $1 AND claimed_by = $2 AND revision = $3 AND parked = 0 \
         AND disabled_at IS NULL",
        parked = <B::Db as Dialect>::bigint("$9")
    );
    let changed = side_write!(
        store,
        text,
        id,
        claimant,
        revision,
        failure.attempts,
        failure.failing_since,
        failure.error.as_str(),
        failure.at,
        failure.next_attempt_at,
        i64::from(failure.next_attempt_at.is_none()),
    );
    Ok(changed > 0)
}
