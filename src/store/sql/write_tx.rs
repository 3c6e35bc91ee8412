//! The write transaction both backends share: every [`StoreTx`] statement, written once over
//! a backend's [`WriteTx`] (its connection, how it hands out event cursors, how it commits),
//! and the one time limit on write steps ([`bounded`]).
//!
//! It must not decide what to write (the service does), nor begin or lock anything: the
//! backend's `begin_write` does.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::dialect::{Columns as _, Dialect, List, Sql, sql, sql_text};
use crate::model::{Job, JobPhase, Transition};
use crate::store::unreadable::{Unreadable, read_job};
use crate::store::{Accepted, KeyedJob, Result, StoreError, StoreTx, scoped_key};

/// What a backend's write transaction is made of; [`StoreTx`] is written once over it.
#[async_trait]
pub(in crate::store) trait WriteTx: Send + 'static {
    type Db: Dialect;

    fn conn(&mut self) -> &mut <Self::Db as sqlx::Database>::Connection;

    /// The store's list of rows that cannot be decoded.
    fn unreadable(&self) -> &Unreadable;

    /// Hands out `n` consecutive event cursors (`n` ≥ 1), returning the first: each above
    /// every cursor handed out before, committed or not.
    async fn take_seqs(&mut self, n: i64) -> Result<i64>;

    /// Makes the commit wake the other processes sharing the store
    /// ([`Store::commit_wakeups`](crate::store::Store::commit_wakeups)), for a transaction that
    /// appends to a log other than the job events' (whose cursors, [`WriteTx::take_seqs`],
    /// wake them already). Nothing when no other process shares it.
    fn wake_on_commit(&mut self) {}

    /// Commits. `Ok` means durable; on any error nothing was committed.
    async fn finish(self) -> Result<()>;

    /// Takes a job out of the launch outbox (`$1` its id), with whatever claim the backend
    /// keeps on outbox rows.
    const MARK_LAUNCHED: &'static str;
}

/// Runs one step of a write transaction within the dialect's
/// [`WRITE_STEP_TIMEOUT`](Dialect::WRITE_STEP_TIMEOUT), failing it when the database does not
/// answer in time. The transaction is then dropped, which rolls it back; only a commit cut off
/// this way has an unknown outcome (as with any networked database: a client that retries with
/// its idempotency key finds the job it submitted).
pub(in crate::store) async fn bounded<D: Dialect, T>(step: impl Future<Output = Result<T>>) -> Result<T> {
    let Some(limit) = D::WRITE_STEP_TIMEOUT else {
        return step.await;
    };
    match tokio::time::timeout(limit, step).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Write(format!(
            "the database did not answer within {} s",
            limit.as_secs()
        ))),
    }
}

/// The columns of a new `jobs` row, in the order [`bind_job_row`] binds them.
const JOB_COLUMNS: &str =
    "(id, name, namespace, template, phase, submitted_at, idempotency_key, fingerprint, body)";

/// The columns of a new `events` row, in the order [`bind_event_row`] binds them.
const EVENT_COLUMNS: &str = "(seq, job_id, phase, previous_phase, at, reason, message, job)";

/// Rows of one multi-row INSERT of [`StoreTx::accept_jobs`]: 9 parameters each, well within
/// SQLite's 32,766 and PostgreSQL's 65,535.
const ACCEPT_CHUNK: usize = 500;

/// `INSERT INTO {table} {columns} VALUES` with `rows` rows of `width` placeholders, numbered
/// or anonymous as the dialect binds many fastest ([`Dialect::NUMBERED_PARAMS`]).
fn insert_rows<D: Dialect>(table: &str, columns: &str, width: usize, rows: usize) -> String {
    use std::fmt::Write as _;
    let mut sql = format!("INSERT INTO {table} {columns} VALUES ");
    sql.reserve(rows * width * 7);
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for i in 1..=width {
            let separator = if i == 1 { "" } else { ", " };
            if D::NUMBERED_PARAMS {
                let _ = write!(sql, "{separator}${}", row * width + i);
            } else {
                let _ = write!(sql, "{separator}?");
            }
        }
        sql.push(')');
    }
    sql
}

/// Binds one new `jobs` row ([`JOB_COLUMNS`]): `body` is the JSON stored for `job`, which may
/// differ from `job` itself by its first event's cursor. Every insert of a job binds through
/// here, so the columns derived from the job (the scoped idempotency key) come out the same
/// whichever way it was accepted.
fn bind_job_row<D: Dialect>(query: Sql<D>, job: &Job, fingerprint: &str, body: &str) -> Sql<D> {
    query
        .bind(job.id.as_str())
        .bind(job.spec.name.as_deref())
        .bind(job.spec.namespace.as_str())
        .bind(job.spec.template.as_str())
        .bind(job.phase.as_str())
        .bind(job.submitted_at)
        .bind(
            job.idempotency_key
                .as_deref()
                .map(|k| scoped_key(job.key_scope(), k)),
        )
        .bind(fingerprint)
        .bind(body)
}

/// Binds one new `events` row ([`EVENT_COLUMNS`]): `snapshot` is the job's JSON with `seq` as
/// its `last_event_seq`.
fn bind_event_row<D: Dialect>(
    query: Sql<D>,
    seq: i64,
    job_id: &str,
    transition: &Transition,
    at: DateTime<Utc>,
    snapshot: &str,
) -> Sql<D> {
    query
        .bind(seq)
        .bind(job_id)
        .bind(transition.phase.as_str())
        .bind(transition.previous_phase.map(JobPhase::as_str))
        .bind(at)
        .bind(transition.reason.as_deref())
        .bind(transition.message.as_deref())
        .bind(snapshot)
}

/// The job's JSON with `seq` as its `last_event_seq`: what its row and its event carry.
fn snapshot(job: &Job, seq: i64) -> Result<String> {
    let mut snapshot = job.clone();
    snapshot.last_event_seq = seq;
    Ok(serde_json::to_string(&snapshot)?)
}

// Each method's contract is its doc in the trait.
#[async_trait]
impl<T: WriteTx> StoreTx for T {
    async fn active_in_namespace(&mut self, namespace: &str) -> Result<i64> {
        let text = sql_text!(
            T::Db,
            "SELECT {} FROM job_counts WHERE namespace = $1 AND phase IN ('PENDING', 'RUNNING')",
            T::Db::bigint("coalesce(sum(n), 0)")
        );
        bounded::<T::Db, _>(async move { Ok(sql::<T::Db>(text).bind(namespace).scalar(self.conn()).await?) })
            .await
    }

    async fn get_job(&mut self, id: &str) -> Result<Option<Job>> {
        bounded::<T::Db, _>(async move {
            let body: Option<String> = sql::<T::Db>("SELECT body FROM jobs WHERE id = $1")
                .bind(id)
                .scalar_optional(self.conn())
                .await?;
            body.map(|body| read_job(self.unreadable(), id, &body))
                .transpose()
        })
        .await
    }

    async fn find_by_idempotency_key(
        &mut self,
        submitter: Option<&str>,
        key: &str,
    ) -> Result<Option<KeyedJob>> {
        bounded::<T::Db, _>(async move {
            let row = sql::<T::Db>("SELECT id, fingerprint FROM jobs WHERE idempotency_key = $1")
                .bind(scoped_key(submitter, key))
                .fetch_optional(self.conn())
                .await?;
            Ok(row.map(|r| KeyedJob {
                id: r.col("id"),
                fingerprint: r.col("fingerprint"),
            }))
        })
        .await
    }

    /// One statement for every key: each statement is a round trip, which costs more than
    /// the lookup.
    async fn find_by_idempotency_keys(
        &mut self,
        keys: &[(Option<&str>, &str)],
    ) -> Result<std::collections::HashMap<String, KeyedJob>> {
        let scoped: Vec<String> = keys.iter().map(|(s, k)| scoped_key(*s, k)).collect();
        let text = sql_text!(
            T::Db,
            "SELECT idempotency_key, id, fingerprint FROM jobs WHERE {}",
            T::Db::in_list("idempotency_key", "$1")
        );
        bounded::<T::Db, _>(async move {
            let rows = sql::<T::Db>(text)
                .bind(List(Some(scoped)))
                .fetch_all(self.conn())
                .await?;
            Ok(rows
                .into_iter()
                .map(|r| {
                    let found = KeyedJob {
                        id: r.col("id"),
                        fingerprint: r.col("fingerprint"),
                    };
                    (r.col("idempotency_key"), found)
                })
                .collect())
        })
        .await
    }

    async fn insert_job(&mut self, job: &Job, fingerprint: &str) -> Result<()> {
        let text = sql_text!(T::Db, "{}", insert_rows::<T::Db>("jobs", JOB_COLUMNS, 9, 1));
        bounded::<T::Db, _>(async move {
            let body = serde_json::to_string(job)?;
            bind_job_row(sql::<T::Db>(text), job, fingerprint, &body)
                .execute(self.conn())
                .await?;
            Ok(())
        })
        .await
    }

    /// Multi-row INSERTs of up to `ACCEPT_CHUNK` jobs, then as many events: a bulk costs a
    /// few statements, not two a job.
    async fn accept_jobs(&mut self, accepted: &[Accepted<'_>]) -> Result<Vec<i64>> {
        if accepted.is_empty() {
            return Ok(Vec::new());
        }
        let first = bounded::<T::Db, _>(self.take_seqs(accepted.len() as i64)).await?;
        let seqs: Vec<i64> = (first..).take(accepted.len()).collect();
        let bodies = accepted
            .iter()
            .zip(&seqs)
            .map(|(a, seq)| snapshot(a.job, *seq))
            .collect::<Result<Vec<_>>>()?;
        for (chunk, chunk_bodies) in accepted.chunks(ACCEPT_CHUNK).zip(bodies.chunks(ACCEPT_CHUNK)) {
            let text = insert_rows::<T::Db>("jobs", JOB_COLUMNS, 9, chunk.len());
            let mut query = sql::<T::Db>(sqlx::AssertSqlSafe(text));
            for (a, body) in chunk.iter().zip(chunk_bodies) {
                query = bind_job_row(query, a.job, a.fingerprint, body);
            }
            bounded::<T::Db, _>(async { Ok(query.execute(self.conn()).await?) }).await?;
        }
        let chunks = accepted
            .chunks(ACCEPT_CHUNK)
            .zip(bodies.chunks(ACCEPT_CHUNK))
            .zip(seqs.chunks(ACCEPT_CHUNK));
        for ((chunk, chunk_bodies), chunk_seqs) in chunks {
            let text = insert_rows::<T::Db>("events", EVENT_COLUMNS, 8, chunk.len());
            let mut query = sql::<T::Db>(sqlx::AssertSqlSafe(text));
            for ((a, body), seq) in chunk.iter().zip(chunk_bodies).zip(chunk_seqs) {
                query = bind_event_row(query, *seq, &a.job.id, a.transition, a.at, body);
            }
            bounded::<T::Db, _>(async { Ok(query.execute(self.conn()).await?) }).await?;
        }
        Ok(seqs)
    }

    /// The row and the event carry the same JSON: the job with its first event's cursor.
    async fn accept_job(
        &mut self,
        job: &Job,
        fingerprint: &str,
        transition: &Transition,
        at: DateTime<Utc>,
    ) -> Result<i64> {
        let insert_job = sql_text!(T::Db, "{}", insert_rows::<T::Db>("jobs", JOB_COLUMNS, 9, 1));
        let insert_event = sql_text!(T::Db, "{}", insert_rows::<T::Db>("events", EVENT_COLUMNS, 8, 1));
        bounded::<T::Db, _>(async move {
            let seq = self.take_seqs(1).await?;
            let body = snapshot(job, seq)?;
            bind_job_row(sql::<T::Db>(insert_job), job, fingerprint, &body)
                .execute(self.conn())
                .await?;
            bind_event_row(sql::<T::Db>(insert_event), seq, &job.id, transition, at, &body)
                .execute(self.conn())
                .await?;
            Ok(seq)
        })
        .await
    }

    async fn append_event(&mut self, job: &Job, transition: &Transition, at: DateTime<Utc>) -> Result<i64> {
        let insert_event = sql_text!(T::Db, "{}", insert_rows::<T::Db>("events", EVENT_COLUMNS, 8, 1));
        bounded::<T::Db, _>(async move {
            let seq = self.take_seqs(1).await?;
            let body = snapshot(job, seq)?;
            bind_event_row(sql::<T::Db>(insert_event), seq, &job.id, transition, at, &body)
                .execute(self.conn())
                .await?;
            Ok(seq)
        })
        .await
    }

    async fn save_job(&mut self, job: &Job) -> Result<()> {
        bounded::<T::Db, _>(async move {
            sql::<T::Db>("UPDATE jobs SET phase = $1, body = $2 WHERE id = $3")
                .bind(job.phase.as_str())
                .bind(serde_json::to_string(job)?)
                .bind(job.id.as_str())
                .execute(self.conn())
                .await?;
            Ok(())
        })
        .await
    }

    async fn hold(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        bounded::<T::Db, _>(async {
            sql::<T::Db>("UPDATE jobs SET launched = -1 WHERE id = $1")
                .bind(id)
                .execute(self.conn())
                .await?;
            Ok(())
        })
        .await?;
        // Bounded on its own: not inside the statement above's limit.
        self.add_dependencies(id, depends_on).await
    }

    async fn add_dependencies(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        bounded::<T::Db, _>(async move {
            for dependency in depends_on {
                sql::<T::Db>(
                    "INSERT INTO job_dependencies (job_id, depends_on) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                )
                .bind(id)
                .bind(dependency)
                .execute(self.conn())
                .await?;
            }
            Ok(())
        })
        .await
    }

    async fn release(&mut self, id: &str) -> Result<()> {
        run_by_id(
            self,
            "UPDATE jobs SET launched = 0 WHERE id = $1 AND launched = -1",
            id,
        )
        .await
    }

    async fn dependents(&mut self, id: &str) -> Result<Vec<String>> {
        bounded::<T::Db, _>(async move {
            Ok(
                sql::<T::Db>("SELECT job_id FROM job_dependencies WHERE depends_on = $1 ORDER BY job_id")
                    .bind(id)
                    .scalars(self.conn())
                    .await?,
            )
        })
        .await
    }

    async fn request_cancellation(&mut self, id: &str, at: DateTime<Utc>) -> Result<()> {
        bounded::<T::Db, _>(async move {
            sql::<T::Db>(
                "INSERT INTO pending_cancellations (job_id, requested_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(at)
            .execute(self.conn())
            .await?;
            Ok(())
        })
        .await
    }

    async fn cancellation_done(&mut self, id: &str) -> Result<()> {
        run_by_id(self, "DELETE FROM pending_cancellations WHERE job_id = $1", id).await
    }

    /// A claim on the job (PostgreSQL's replicas claim outbox rows) goes with it.
    async fn mark_launched(&mut self, id: &str) -> Result<()> {
        run_by_id(self, T::MARK_LAUNCHED, id).await
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        bounded::<T::Db, _>((*self).finish()).await
    }
}

/// A statement of one job id (`$1`), run as one bounded step.
async fn run_by_id<T: WriteTx>(tx: &mut T, text: &'static str, id: &str) -> Result<()> {
    bounded::<T::Db, _>(async move {
        sql::<T::Db>(text).bind(id).execute(tx.conn()).await?;
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use sqlx::{Postgres, Sqlite};

    #[test]
    fn multi_row_inserts_number_every_placeholder_in_order_where_the_dialect_must() {
        assert_eq!(
            super::insert_rows::<Postgres>("t", "(a, b)", 2, 2),
            "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4)"
        );
        assert_eq!(
            super::insert_rows::<Postgres>("t", "(a)", 1, 1),
            "INSERT INTO t (a) VALUES ($1)"
        );
        assert_eq!(
            super::insert_rows::<Sqlite>("t", "(a, b)", 2, 2),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?)"
        );
    }
}
