//! The archive of jobs' output in SQL, for both backends: appends (each in the order
//! [`log_chunks`](crate::store::log_chunks) rules: its source's position checked, the cap
//! applied, one chunk written, each of its sources' ranges extended, the position moved, all
//! in the append's transaction) and the reads of an archive, a source's position and range,
//! and lines from a cursor.
//!
//! It writes only log tables, in transactions of its own beside the job writer's
//! ([`Backend::begin_side`]), never inside one.

use super::Backend;
use super::dialect::{Columns as _, Dialect, sql, sql_text};
use super::write_tx::{WriteTx, bounded};
use crate::model::{LogArchive, LogLine, LogLoss, LogRange};
use crate::store::log_chunks::{self, LogAppend, LogAppended};
use crate::store::{Result, StoreTx as _};

/// The archive's totals in a row of `log_archives`.
/// `loss` holds the first loss and what its source said of it ([`LogLoss::stored`]).
fn archive_of(row: &impl super::dialect::Columns) -> LogArchive {
    let (loss, loss_detail) = row
        .col::<Option<String>>("loss")
        .as_deref()
        .map_or((None, None), LogLoss::from_stored);
    LogArchive {
        lines: row.col("lines"),
        bytes: row.col("bytes"),
        truncated: row.col::<i64>("truncated") != 0,
        gaps: row.col("gaps"),
        loss,
        loss_detail,
    }
}

/// One transaction of its own for every append. With [`Dialect::ROW_LOCKS`] (PostgreSQL,
/// outside the write lock: log tables are not the event log), each append locks its job's
/// archive row, so that appends to one job apply one after another, across replicas too.
pub(super) async fn append_logs<B: Backend>(
    store: &B,
    appends: &[LogAppend],
    cap_bytes: i64,
) -> Result<Vec<LogAppended>> {
    let mut tx = Backend::begin_side(store).await?;
    let mut outcomes = Vec::with_capacity(appends.len());
    for append in appends {
        outcomes.push(bounded::<B::Db, _>(append_log::<B::Db>(tx.conn(), append, cap_bytes)).await?);
    }
    Box::new(tx).commit().await?;
    Ok(outcomes)
}

/// One append of [`append_logs`], inside its transaction (see `log_chunks::plan`). With row
/// locks, the archive's row is created if need be, then locked, before anything is read.
async fn append_log<D: Dialect>(
    conn: &mut D::Connection,
    append: &LogAppend,
    cap_bytes: i64,
) -> Result<LogAppended> {
    let job_id = append.job_id.as_str();
    if D::ROW_LOCKS {
        sql::<D>("INSERT INTO log_archives (job_id) VALUES ($1) ON CONFLICT (job_id) DO NOTHING")
            .bind(job_id)
            .execute(&mut *conn)
            .await?;
    }
    let archive = sql::<D>(sql_text!(
        D,
        "SELECT lines, bytes, truncated, gaps, loss FROM log_archives WHERE job_id = $1{}",
        if D::ROW_LOCKS { " FOR UPDATE" } else { "" }
    ))
    .bind(job_id)
    .fetch_optional(&mut *conn)
    .await?
    .map(|row| archive_of(&row))
    .unwrap_or_default();
    if let Some((expected, _)) = &append.position {
        let stored: Option<String> =
            sql::<D>("SELECT position FROM log_sources WHERE job_id = $1 AND source = $2")
                .bind(job_id)
                .bind(append.source.as_str())
                .scalar_optional(&mut *conn)
                .await?;
        if stored != *expected {
            return Ok(LogAppended::Stale);
        }
    }
    let (lines, outcome, after) = log_chunks::plan(archive.clone(), append, cap_bytes);
    if outcome == LogAppended::Closed {
        return Ok(outcome);
    }
    if !lines.is_empty() {
        sql::<D>("INSERT INTO log_chunks (job_id, first_line, line_count, bytes, data) VALUES ($1, $2, $3, $4, $5)")
            .bind(job_id)
            .bind(archive.lines)
            .bind(lines.len() as i64)
            .bind(after.bytes - archive.bytes)
            .bind(log_chunks::encode(&lines)?)
            .execute(&mut *conn)
            .await?;
        sql::<D>(
            "INSERT INTO log_archives (job_id, lines, bytes, truncated, gaps, loss) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (job_id) DO UPDATE SET lines = excluded.lines, bytes = excluded.bytes, \
             truncated = excluded.truncated, gaps = excluded.gaps, loss = excluded.loss",
        )
        .bind(job_id)
        .bind(after.lines)
        .bind(after.bytes)
        .bind(i64::from(after.truncated))
        .bind(after.gaps)
        .bind(after.loss.map(|l| l.stored(after.loss_detail.as_deref())))
        .execute(&mut *conn)
        .await?;
        // Appends to one job apply one after another, so a range only grows at its end.
        for (source, range) in log_chunks::source_ranges(archive.lines, &lines) {
            sql::<D>(
                "INSERT INTO log_source_ranges (job_id, source, first_line, last_line) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (job_id, source) DO UPDATE SET last_line = excluded.last_line",
            )
            .bind(job_id)
            .bind(source)
            .bind(range.first)
            .bind(range.last)
            .execute(&mut *conn)
            .await?;
        }
    }
    if let Some((_, position)) = &append.position {
        sql::<D>(
            "INSERT INTO log_sources (job_id, source, position) VALUES ($1, $2, $3) \
             ON CONFLICT (job_id, source) DO UPDATE SET position = excluded.position",
        )
        .bind(job_id)
        .bind(append.source.as_str())
        .bind(position.as_str())
        .execute(&mut *conn)
        .await?;
    }
    Ok(outcome)
}

pub(super) async fn log_archive<B: Backend>(store: &B, job_id: &str) -> Result<Option<LogArchive>> {
    let mut conn = store.pool().acquire().await?;
    let row = sql::<B::Db>("SELECT lines, bytes, truncated, gaps, loss FROM log_archives WHERE job_id = $1")
        .bind(job_id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.map(|r| archive_of(&r)))
}

pub(super) async fn log_position<B: Backend>(
    store: &B,
    job_id: &str,
    source: &str,
) -> Result<Option<String>> {
    let mut conn = store.pool().acquire().await?;
    Ok(
        sql::<B::Db>("SELECT position FROM log_sources WHERE job_id = $1 AND source = $2")
            .bind(job_id)
            .bind(source)
            .scalar_optional(&mut *conn)
            .await?,
    )
}

/// One indexed read, by the primary key.
pub(super) async fn log_range<B: Backend>(store: &B, job_id: &str, source: &str) -> Result<Option<LogRange>> {
    let mut conn = store.pool().acquire().await?;
    let row =
        sql::<B::Db>("SELECT first_line, last_line FROM log_source_ranges WHERE job_id = $1 AND source = $2")
            .bind(job_id)
            .bind(source)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(row.map(|r| LogRange {
        first: r.col("first_line"),
        last: r.col("last_line"),
    }))
}

/// Reads from the chunk holding `from` on, a few chunks at a time, by the primary key.
pub(super) async fn log_lines<B: Backend>(
    store: &B,
    job_id: &str,
    from: i64,
    max_lines: usize,
    max_bytes: usize,
) -> Result<Vec<(i64, LogLine)>> {
    let mut conn = store.pool().acquire().await?;
    let mut out = Vec::new();
    let mut bytes = 0;
    let mut next = from;
    loop {
        let chunks: Vec<(i64, Vec<u8>)> = sql::<B::Db>(
            "SELECT first_line, data FROM log_chunks WHERE job_id = $1 AND first_line >= \
             (SELECT coalesce(max(first_line), 0) FROM log_chunks WHERE job_id = $1 AND first_line <= $2) \
             ORDER BY first_line LIMIT 4",
        )
        .bind(job_id)
        .bind(next)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| (r.col(0), r.col(1)))
        .collect();
        if chunks.is_empty() || log_chunks::select(chunks, next, max_lines, max_bytes, &mut out, &mut bytes)?
        {
            return Ok(out);
        }
        match out.last() {
            Some((at, _)) if *at >= next => next = at + 1,
            // The chunks read held nothing at or after `next`: there is nothing more.
            _ => return Ok(out),
        }
    }
}
