//! Retention as both backends carry it out: [`expire_jobs`] deletes one batch of finished
//! jobs with everything of theirs and raises their namespaces' retention horizons, in one
//! write transaction; [`retention_horizon`] reads a scope's horizon.
//!
//! The scan that picks the batch is each backend's own (it names the index it walks:
//! [`Backend::EXPIRY_SCAN`]). It must never delete an unfinished job.

use super::dialect::{Columns as _, Dialect, List, sql, sql_text};
use super::write_tx::{WriteTx, bounded};
use super::{Backend, event_reads};
use crate::model::Scope;
use crate::store::{ExpiredBatch, ExpiryPosition, ExpiryRule, Result, StoreTx as _};

/// Under the write lock like every write: writers (replicas sweeping at once included) take
/// turns.
pub(super) async fn expire_jobs<B: Backend>(
    store: &B,
    rule: &ExpiryRule,
    from: Option<ExpiryPosition>,
    limit: i64,
) -> Result<ExpiredBatch> {
    Backend::check_storage(store)?;
    let mut tx = Backend::begin_write(store).await?;
    // Before any job (PostgreSQL's timestamps do not reach chrono's minimum).
    let (from_at, from_seq) = from.map_or((chrono::DateTime::UNIX_EPOCH, 0), |p| (p.at, p.seq));
    let scanned = bounded::<B::Db, _>(async {
        Ok(sql::<B::Db>(B::EXPIRY_SCAN)
            .bind(rule.before)
            .bind(from_at)
            .bind(from_seq)
            .bind(limit)
            .fetch_all(tx.conn())
            .await?)
    })
    .await?;
    let mut batch = ExpiredBatch {
        scanned: scanned.len(),
        ..ExpiredBatch::default()
    };
    let mut expired: Vec<String> = Vec::new();
    for row in &scanned {
        batch.position = Some(ExpiryPosition {
            at: row.col("at"),
            seq: row.col("seq"),
        });
        if rule.namespaces.covers(&row.col::<String>("namespace")) {
            expired.push(row.col("job_id"));
        }
    }
    if !expired.is_empty() {
        let ids = List(Some(expired.clone()));
        bounded::<B::Db, _>(delete_jobs::<B::Db>(tx.conn(), ids, &mut batch)).await?;
    }
    Box::new(tx).commit().await?;
    batch.ids = expired;
    Ok(batch)
}

/// Deletes the jobs `ids` with their events, archived output, dependency edges and pending
/// cancellations, raising their namespaces' retention horizons first.
async fn delete_jobs<D: Dialect>(
    conn: &mut D::Connection,
    ids: List,
    batch: &mut ExpiredBatch,
) -> Result<()> {
    let of_jobs = |column: &str| D::in_list(column, "$1");
    batch.newest_deleted = sql::<D>(sql_text!(
        D,
        "SELECT {} FROM events WHERE {}",
        D::bigint("coalesce(max(seq), 0)"),
        of_jobs("job_id")
    ))
    .bind(ids.clone())
    .scalar(&mut *conn)
    .await?;
    sql::<D>(sql_text!(
        D,
        "INSERT INTO retention_horizons (namespace, seq) \
         SELECT j.namespace, max(e.seq) FROM events e JOIN jobs j ON j.id = e.job_id \
         WHERE {} GROUP BY j.namespace \
         ON CONFLICT (namespace) DO UPDATE SET seq = {}(retention_horizons.seq, excluded.seq)",
        of_jobs("e.job_id"),
        D::GREATEST
    ))
    .bind(ids.clone())
    .execute(&mut *conn)
    .await?;
    batch.events = sql::<D>(sql_text!(D, "DELETE FROM events WHERE {}", of_jobs("job_id")))
        .bind(ids.clone())
        .execute(&mut *conn)
        .await?;
    sql::<D>(sql_text!(
        D,
        "DELETE FROM job_dependencies WHERE {} OR {}",
        of_jobs("job_id"),
        of_jobs("depends_on")
    ))
    .bind(ids.clone())
    .execute(&mut *conn)
    .await?;
    // The archived output goes with its job.
    let tables = [
        sql_text!(D, "DELETE FROM pending_cancellations WHERE {}", of_jobs("job_id")),
        sql_text!(D, "DELETE FROM log_chunks WHERE {}", of_jobs("job_id")),
        sql_text!(D, "DELETE FROM log_sources WHERE {}", of_jobs("job_id")),
        sql_text!(D, "DELETE FROM log_source_ranges WHERE {}", of_jobs("job_id")),
        sql_text!(D, "DELETE FROM log_archives WHERE {}", of_jobs("job_id")),
    ];
    for text in tables {
        sql::<D>(text).bind(ids.clone()).execute(&mut *conn).await?;
    }
    batch.jobs = sql::<D>(sql_text!(D, "DELETE FROM jobs WHERE {}", of_jobs("id")))
        .bind(ids)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(super) async fn retention_horizon<B: Backend>(store: &B, scope: &Scope) -> Result<i64> {
    let mut conn = store.pool().acquire().await?;
    event_reads::horizon_of::<B::Db>(&mut conn, List::of_scope(scope)).await
}
