//! Reads of the event log both backends share: a scope's events after a cursor (checked
//! against its retention horizon in the same snapshot), a job's history, `jobStats`, the
//! namespaces in a scope, and the newest cursor.
//!
//! It must not write, and reads a scope only through the jobs' namespaces (never a list of
//! every job id in it, which would grow with the jobs).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::dialect::{Columns as _, Dialect, List, sql, sql_text};
use super::{Backend, snapshot};
use crate::model::{JobEvent, JobPhase, Scope};
use crate::store::unreadable::{ReadPast, RowKind, Unreadable};
use crate::store::{Result, StatsSnapshot, StoreError};

/// The columns [`decode_event`] reads.
const EVENT_COLUMNS: &str = "seq, job_id, phase, previous_phase, at, reason, message, job";

/// An event row, or `None` (reported to `unreadable`) when its job snapshot does not decode.
fn decode_event<D: Dialect>(unreadable: &Unreadable, r: &D::Row) -> Option<JobEvent> {
    let seq: i64 = r.col("seq");
    let job_id: String = r.col("job_id");
    let job = unreadable.decode(
        RowKind::Event,
        &seq.to_string(),
        Some(&job_id),
        &r.col::<String>("job"),
    )?;
    let phase: String = r.col("phase");
    let previous: Option<String> = r.col("previous_phase");
    Some(JobEvent {
        seq,
        job_id,
        phase: JobPhase::parse(&phase).unwrap_or(JobPhase::Pending),
        previous_phase: previous.as_deref().and_then(JobPhase::parse),
        at: r.col("at"),
        reason: r.col("reason"),
        message: r.col("message"),
        job: Arc::new(job),
    })
}

/// The retention horizon of the namespaces in `scope` (every namespace when `None`).
pub(super) async fn horizon_of<D: Dialect>(conn: &mut D::Connection, scope: List) -> Result<i64> {
    let text = sql_text!(
        D,
        "SELECT {} FROM retention_horizons WHERE {} OR {}",
        D::bigint("coalesce(max(seq), 0)"),
        D::list_is_null("$1"),
        D::in_list("namespace", "$1")
    );
    Ok(sql::<D>(text).bind(scope).scalar(conn).await?)
}

/// Up to `limit` events of jobs in `scope` after `after`, oldest first; only `job_id`'s if
/// given. The scope is the namespace of the event's job (which never changes), looked up per
/// event by the jobs table's unique id. The page and the horizon come from one snapshot, so a
/// deletion is either in both or in neither.
pub(super) async fn events_after<B: Backend>(
    store: &B,
    after: i64,
    limit: i64,
    job_id: Option<&str>,
    scope: &Scope,
) -> Result<Vec<JobEvent>> {
    let text = sql_text!(
        B::Db,
        "SELECT {EVENT_COLUMNS} FROM events WHERE seq > $1 AND ({} IS NULL OR job_id = $2) \
         AND ({} OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id AND {})) \
         ORDER BY seq LIMIT $3",
        <B::Db as Dialect>::text("$2"),
        <B::Db as Dialect>::list_is_null("$4"),
        <B::Db as Dialect>::in_list("jobs.namespace", "$4"),
    );
    let scope = List::of_scope(scope);
    let mut tx = snapshot(store.pool()).await?;
    // A row left out as unreadable is made up for by reading on, so that a page shorter
    // than `limit` still means "nothing more yet" to every caller.
    let mut events = ReadPast::new(limit, after);
    loop {
        let rows = sql::<B::Db>(text)
            .bind(events.after())
            .bind(job_id)
            .bind(events.wanted())
            .bind(scope.clone())
            .fetch_all(&mut *tx)
            .await?;
        let (read, last) = (rows.len(), rows.last().map(|r| r.col("seq")));
        let decoded = rows
            .iter()
            .filter_map(|r| decode_event::<B::Db>(store.unreadable_rows(), r));
        if events.take(read, last, decoded) {
            break;
        }
    }
    if job_id.is_none() {
        let horizon = horizon_of::<B::Db>(&mut tx, scope).await?;
        if after < horizon {
            return Err(StoreError::CursorExpired {
                after,
                oldest: horizon,
            });
        }
    }
    tx.commit().await?;
    Ok(events.into_items())
}

pub(super) async fn job_history<B: Backend>(
    store: &B,
    job_id: &str,
    scope: &Scope,
    limit: i64,
) -> Result<Vec<JobEvent>> {
    let text = sql_text!(
        B::Db,
        "SELECT * FROM (SELECT {EVENT_COLUMNS} FROM events WHERE job_id = $1 \
         AND ({} OR EXISTS (SELECT 1 FROM jobs WHERE id = $1 AND {})) \
         ORDER BY seq DESC LIMIT $2) AS newest ORDER BY seq",
        <B::Db as Dialect>::list_is_null("$3"),
        <B::Db as Dialect>::in_list("namespace", "$3"),
    );
    let mut conn = store.pool().acquire().await?;
    let rows = sql::<B::Db>(text)
        .bind(job_id)
        .bind(limit)
        .bind(List::of_scope(scope))
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| decode_event::<B::Db>(store.unreadable_rows(), r))
        .collect())
}

/// Up to `$1` namespaces that have jobs, in the scope `$2`, sorted (from the counts kept by
/// namespace and phase).
pub(super) fn namespaces_sql<D: Dialect>() -> &'static str {
    sql_text!(
        D,
        "SELECT DISTINCT namespace FROM job_counts WHERE n > 0 AND {} ORDER BY namespace LIMIT $1",
        D::in_scope("namespace", "$2")
    )
}

pub(super) async fn namespaces<B: Backend>(store: &B, limit: i64, scope: &Scope) -> Result<Vec<String>> {
    let mut conn = store.pool().acquire().await?;
    Ok(sql::<B::Db>(namespaces_sql::<B::Db>())
        .bind(limit)
        .bind(List::of_scope(scope))
        .scalars(&mut *conn)
        .await?)
}

/// `jobStats`' statements: the counts by phase in the scope `$1` (the counts kept by
/// namespace and phase, one row per pair, however many jobs); the submissions per bucket
/// since `$3` (`$1` its Unix seconds, `$2` the bucket width) in the scope `$4`; the
/// completions per bucket and phase, alike: the event that entered a terminal phase (the
/// WHERE repeats the partial index's), its scope checked per event by its job's key.
pub(super) fn stats_sql<D: Dialect>() -> [&'static str; 3] {
    [
        sql_text!(
            D,
            "SELECT phase, {} AS n FROM job_counts WHERE {} GROUP BY phase",
            D::bigint("sum(n)"),
            D::in_scope("namespace", "$1")
        ),
        sql_text!(
            D,
            "SELECT ({} - $1) / $2 AS bucket, count(*) AS n FROM jobs \
             WHERE submitted_at >= $3 AND {} GROUP BY bucket",
            D::epoch("submitted_at"),
            D::in_scope("namespace", "$4")
        ),
        sql_text!(
            D,
            "SELECT ({} - $1) / $2 AS bucket, phase, count(*) AS n FROM events \
             WHERE phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND at >= $3 \
             AND (previous_phase IS NULL OR previous_phase <> phase) \
             AND ({} OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id AND {})) \
             GROUP BY bucket, phase",
            D::epoch("at"),
            D::list_is_null("$4"),
            D::in_list("jobs.namespace", "$4")
        ),
    ]
}

/// Counts by phase, and submissions and completions in the last `buckets` buckets, with the
/// newest event's cursor: all read in one snapshot. A job's row and its events are committed
/// together, so the snapshot holds each job's events up to the cursor and none after.
pub(super) async fn stats<B: Backend>(
    store: &B,
    buckets: i64,
    bucket_seconds: i64,
    scope: &Scope,
) -> Result<StatsSnapshot> {
    let scope = List::of_scope(scope);
    let [counts_sql, submitted_sql, finished_sql] = stats_sql::<B::Db>();
    let mut tx = snapshot(store.pool()).await?;
    let cursor: i64 = sql::<B::Db>(B::NEWEST_CURSOR).scalar(&mut *tx).await?;
    // The window ends now, read after the first read fixed the snapshot: anything in the
    // snapshot happened before it, so nothing counted falls past the last bucket.
    let last = Utc::now().timestamp().div_euclid(bucket_seconds) * bucket_seconds;
    let since = last - (buckets - 1) * bucket_seconds;
    let since_at = DateTime::from_timestamp(since, 0).unwrap_or(DateTime::UNIX_EPOCH);
    let counts = sql::<B::Db>(counts_sql)
        .bind(scope.clone())
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .filter_map(|r| Some((JobPhase::parse(&r.col::<String>("phase"))?, r.col::<i64>("n"))))
        .collect();
    let submitted = sql::<B::Db>(submitted_sql)
        .bind(since)
        .bind(bucket_seconds)
        .bind(since_at)
        .bind(scope.clone())
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| (r.col("bucket"), r.col("n")))
        .collect();
    let finished = sql::<B::Db>(finished_sql)
        .bind(since)
        .bind(bucket_seconds)
        .bind(since_at)
        .bind(scope)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .filter_map(|r| {
            Some((
                r.col("bucket"),
                JobPhase::parse(&r.col::<String>("phase"))?,
                r.col("n"),
            ))
        })
        .collect();
    tx.commit().await?;
    Ok(StatsSnapshot {
        since,
        cursor,
        counts,
        submitted,
        finished,
    })
}
