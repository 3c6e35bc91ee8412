//! The SQLite store (the embedded default): jobs and their status history in one database
//! file in the data directory, through sqlx.
//!
//! It owns the schema (migrations under `migrations/`), the connections and every SQL
//! statement, behind the [`Store`] and [`StoreTx`] traits. An exclusive lock on the data
//! directory keeps a second jobgate out.
//!
//! A commit that returned `Ok` is durable; nothing else is. Writes use one connection of
//! their own, outside the readers' pool, and a write that fails in any way closes it: after a
//! failed `COMMIT` (a full disk) SQLite may already have rolled the transaction back, and a
//! connection whose idea of its transaction differs from SQLite's would turn the next
//! "commit" into the release of a savepoint inside a transaction that never commits, so the
//! next batch starts on a fresh connection. [`Store::check_storage`] notices a database file
//! that was deleted, replaced or truncated under us, where writes would "succeed" into a
//! file nobody will read again.

use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions as _, Connection as _, Row, SqlitePool};
use tokio::sync::OwnedMutexGuard;

use async_trait::async_trait;

use super::logs::{self, LogAppend, LogAppended};
use super::{
    Accepted, ArmRows, COUNT_CANDIDATES, Durability, ExpiredBatch, ExpiryPosition, ExpiryRule, JobPage,
    KeyedJob, ListPlan, PlannedRead, ReadPast, Recoverable, Result, RowKind, StatsSnapshot, Store,
    StoreError, StoreTx, Unreadable, WEBHOOK_COLUMNS, Webhook, WebhookFailure, WebhookRow, decode_job,
    merge_arms, read_job, scoped_key, unreadable_error, webhook_json,
};
use crate::model::{
    Job, JobEvent, JobFilter, JobPhase, LogArchive, LogLine, SHARD_COUNT, Scope, ShardSet, Transition,
};

/// A job's shard in SQL, as [`crate::model::shard_of`] computes it for the ids jobgate makes
/// (UUIDs: the last two hexadecimal digits, modulo the shard count).
macro_rules! shard_of_id {
    () => {
        "(((instr('0123456789abcdef', lower(substr(id, -2, 1))) - 1) * 16 \
     + instr('0123456789abcdef', lower(substr(id, -1, 1))) - 1) % 32)"
    };
}
const _: () = assert!(SHARD_COUNT == 32, "shard_of_id! divides by 32");

/// The columns of a new `jobs` row, in the order `bind_job_row` binds them.
macro_rules! job_columns {
    () => {
        "(id, name, namespace, template, phase, submitted_at, idempotency_key, fingerprint, body)"
    };
}

/// The placeholders of one row of `job_columns!`.
macro_rules! job_values {
    () => {
        "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
    };
}

/// The columns of a new `events` row, in the order `bind_event_row` binds them.
macro_rules! event_columns {
    () => {
        "(seq, job_id, phase, previous_phase, at, reason, message, job)"
    };
}

/// The placeholders of one row of `event_columns!`.
macro_rules! event_values {
    () => {
        "(?, ?, ?, ?, ?, ?, ?, ?)"
    };
}

/// Binds a [`Statement`]'s parameters to a query made from its SQL.
macro_rules! bind_all {
    ($query:expr, $binds:expr) => {{
        let mut query = $query;
        for bind in $binds {
            query = match bind {
                Bind::Int(v) => query.bind(*v),
                Bind::Text(t) => query.bind(t.clone()),
            };
        }
        query
    }};
}

/// The SQLite store; cloning it is cheap.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// Readers' connections.
    pool: SqlitePool,
    /// The one write connection, `None` after a failed write until the next transaction
    /// opens a fresh one. Whoever holds the lock is the only writer.
    writer: Arc<tokio::sync::Mutex<Option<SqliteConnection>>>,
    options: SqliteConnectOptions,
    /// The database file as opened: its path and (device, inode).
    db_path: PathBuf,
    db_identity: (u64, u64),
    /// An exclusive lock on `jobgate.lock`, held while the store is open: two jobgates on one
    /// data directory would each think they own its jobs. The OS releases it if we die.
    _lock: Arc<std::fs::File>,
    /// Rows found that cannot be decoded.
    unreadable: Arc<Unreadable>,
}

impl SqliteStore {
    /// Starts a write transaction on the write connection (opening a fresh one if the last
    /// write failed). SQLite allows one writer at a time; callers batch.
    async fn begin_write(&self) -> Result<SqliteTx> {
        let mut slot = self.writer.clone().lock_owned().await;
        let mut conn = match slot.take() {
            Some(conn) => conn,
            None => self.options.connect().await?,
        };
        // IMMEDIATE takes the write lock now rather than on the first write, so that a batch
        // never fails half-way with SQLITE_BUSY on lock upgrade. On failure the connection
        // is dropped, which closes it (SQLite rolls back whatever it had open).
        sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await?;
        Ok(SqliteTx::new(conn, slot, self.unreadable.clone()))
    }

    /// Opens (creating if needed) `jobgate.db` in `data_dir` and brings its schema up to date.
    pub async fn open(data_dir: &Path, durability: Durability) -> Result<Self> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::CreateDir {
            path: data_dir.to_owned(),
            source,
        })?;
        let lock_path = data_dir.join("jobgate.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|source| StoreError::Lock {
                path: lock_path.clone(),
                source,
            })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::InUse {
                    path: data_dir.to_owned(),
                });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(StoreError::Lock {
                    path: lock_path,
                    source,
                });
            }
        }
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(StoreError::Open)?
            .filename(data_dir.join("jobgate.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match durability {
                Durability::Full => SqliteSynchronous::Full,
                Durability::Normal => SqliteSynchronous::Normal,
            })
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options.clone())
            .await
            .map_err(StoreError::Open)?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        // Finish any checkpoint a crash interrupted, so that the database file is as long as
        // its header says from now on (`check_storage` relies on it; we are the only process
        // on this data directory, by the lock above).
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&pool)
            .await?;
        let db_path = data_dir.join("jobgate.db");
        let meta = std::fs::metadata(&db_path).map_err(|source| StoreError::Lock {
            path: db_path.clone(),
            source,
        })?;
        Ok(Self {
            pool,
            writer: Arc::new(tokio::sync::Mutex::new(None)),
            // A fresh write connection must never create an empty database where ours was.
            options: options.create_if_missing(false),
            db_identity: (meta.dev(), meta.ino()),
            db_path,
            _lock: Arc::new(lock),
            unreadable: Arc::default(),
        })
    }
}

// Each method's contract is its doc in the trait; docs here say only what is SQLite's own.
#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    async fn close(&self) {
        if let Some(conn) = self.writer.lock().await.take() {
            let _ = conn.close().await;
        }
        self.pool.close().await;
    }

    /// Whether the database file is still the one we opened, and whole: not deleted (with
    /// its data directory, say), replaced, or truncated. Cheap (a stat and a 100-byte read),
    /// so the writer asks before every commit and on a timer.
    fn check_storage(&self) -> Result<()> {
        let path = &self.db_path;
        let meta = std::fs::metadata(path).map_err(|e| {
            StoreError::Files(format!(
                "the database file {} is gone ({e}); was the data directory deleted? Writes are refused until it is back; restart jobgate after restoring it",
                path.display()
            ))
        })?;
        if (meta.dev(), meta.ino()) != self.db_identity {
            return Err(StoreError::Files(format!(
                "the database file {} was replaced by another file; writes are refused; restart jobgate",
                path.display()
            )));
        }
        let mut header = [0u8; 100];
        let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut header));
        if read.is_err() || !header.starts_with(b"SQLite format 3\0") {
            return Err(StoreError::Files(format!(
                "the database file {} was truncated or overwritten ({} bytes, no SQLite header); writes are refused; restore it and restart jobgate",
                path.display(),
                meta.len()
            )));
        }
        // The header's page count is valid when its change counter matches the
        // version-valid-for number; a checkpoint writes both, page 1 first. The writer runs
        // every checkpoint itself and never asks during one.
        let word =
            |at: usize| u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
        let page_size = match u16::from_be_bytes([header[16], header[17]]) {
            1 => 65536,
            n => u64::from(n),
        };
        let size = u64::from(word(28)) * page_size;
        if word(24) == word(92) && size > meta.len() {
            return Err(StoreError::Files(format!(
                "the database file {} was truncated: {} bytes where its header counts {size}; writes are refused; restore it and restart jobgate",
                path.display(),
                meta.len(),
            )));
        }
        Ok(())
    }

    /// `None`: the data directory's lock makes this process the only writer.
    async fn commit_wakeups(&self) -> Result<Option<futures::stream::BoxStream<'static, ()>>> {
        Ok(None)
    }

    /// Always granted: the data directory's lock already keeps other processes out.
    async fn claim_sole_runner(&self) -> Result<bool> {
        Ok(true)
    }

    async fn begin(&self) -> Result<Box<dyn StoreTx>> {
        Ok(Box::new(self.begin_write().await?))
    }

    /// A write that proves the database takes commits again (after a full disk, say): it
    /// rewrites the one row of `store_probe`, so it needs room like any commit.
    async fn probe_write(&self) -> Result<()> {
        self.check_storage()?;
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO store_probe (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
        )
        .bind(Utc::now().to_rfc3339())
        .execute(&mut tx.conn)
        .await?;
        Box::new(tx).commit().await
    }

    fn unreadable(&self) -> &Unreadable {
        &self.unreadable
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        let row = sqlx::query("SELECT body FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| read_job(&self.unreadable, id, r.get("body")))
            .transpose()
    }

    /// Every arm and the count are read in one read transaction: one WAL snapshot.
    async fn list_jobs(
        &self,
        filter: &JobFilter,
        scope: &Scope,
        first: i64,
        after: Option<i64>,
        budget: i64,
    ) -> Result<JobPage> {
        let Some(plan) = ListPlan::new(filter, scope) else {
            return Ok(ListPlan::nothing());
        };
        let reads = PageReads::new(&plan, after.unwrap_or(i64::MAX), first, budget)?;
        let mut tx = self.pool.begin().await?;
        let mut arms = Vec::with_capacity(reads.pages.len());
        for read in &reads.pages {
            let query =
                sqlx::query_as::<_, (i64, String, String)>(sqlx::AssertSqlSafe(read.page.sql.as_str()));
            let rows: Vec<(i64, (String, String))> = bind_all!(query, &read.page.binds)
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .map(|(seq, id, body)| (seq, (id, body)))
                .collect();
            // Fewer rows than asked: the read either ran out of candidates or of budget; the
            // budget-th candidate, if there is one, is where it stopped.
            let stopped_at = match &read.stop {
                Some(stop) if (rows.len() as i64) <= first => {
                    let query = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(stop.sql.as_str()));
                    bind_all!(query, &stop.binds).fetch_optional(&mut *tx).await?
                }
                _ => None,
            };
            arms.push(ArmRows { rows, stopped_at });
        }
        let mut total_count = 0;
        for statement in &reads.counts {
            let query = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(statement.sql.as_str()));
            total_count += bind_all!(query, &statement.binds).fetch_one(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(merge_arms(arms, first, total_count, |(id, body)| {
            decode_job(&self.unreadable, &id, &body)
        }))
    }

    async fn query_plans(&self, read: PlannedRead<'_>) -> Result<Vec<String>> {
        let statements = match read {
            PlannedRead::ListJobs {
                filter,
                scope,
                first,
                after,
                budget,
            } => match ListPlan::new(filter, scope) {
                None => Vec::new(),
                Some(plan) => {
                    let reads = PageReads::new(&plan, after.unwrap_or(i64::MAX), first, budget)?;
                    reads
                        .pages
                        .into_iter()
                        .flat_map(|read| std::iter::once(read.page).chain(read.stop))
                        .chain(reads.counts)
                        .collect()
                }
            },
            PlannedRead::UnfinishedJobs => vec![Statement::new(UNFINISHED, vec![])],
            PlannedRead::Stats { scope } => {
                // The dashboard's window: the last hour in minutes.
                let scope = Bind::Text(scope_json(scope)?);
                let since = Utc::now().timestamp() - 3600;
                let since_text = Bind::Text(DateTime::from_timestamp(since, 0).map(|t| t.to_rfc3339()));
                vec![
                    Statement::new(STATS_COUNTS, vec![scope.clone()]),
                    Statement::new(
                        STATS_SUBMITTED,
                        vec![Bind::Int(since), Bind::Int(60), since_text.clone(), scope.clone()],
                    ),
                    Statement::new(
                        STATS_FINISHED,
                        vec![Bind::Int(since), Bind::Int(60), since_text, scope],
                    ),
                ]
            }
            PlannedRead::Namespaces { scope } => vec![Statement::new(
                NAMESPACES,
                vec![Bind::Int(1_000), Bind::Text(scope_json(scope)?)],
            )],
        };
        let mut plans = Vec::with_capacity(statements.len());
        for statement in statements {
            let explain = format!("EXPLAIN QUERY PLAN {}", statement.sql);
            let query = sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(explain));
            let rows = bind_all!(query, &statement.binds).fetch_all(&self.pool).await?;
            let steps: Vec<String> = rows.into_iter().map(|r| r.3).collect();
            plans.push(format!("{}\n  {}", statement.sql, steps.join("\n  ")));
        }
        Ok(plans)
    }

    /// Up to `limit` events of jobs in `scope` after the cursor `after`, oldest first; only
    /// `job_id`'s if given. The scope is the namespace of the event's job (which never
    /// changes), looked up per event by the jobs table's unique id.
    async fn events_after(
        &self,
        after: i64,
        limit: i64,
        job_id: Option<&str>,
        scope: &Scope,
    ) -> Result<Vec<JobEvent>> {
        let scope_json = scope_json(scope)?;
        // One read transaction: the page and the horizon come from one snapshot, so a
        // deletion is either in both or in neither.
        let mut tx = self.pool.begin().await?;
        // A row left out as unreadable is made up for by reading on, so that a page shorter
        // than `limit` still means "nothing more yet" to every caller.
        let mut events = ReadPast::new(limit, after);
        loop {
            let rows = sqlx::query(
                "SELECT seq, job_id, phase, previous_phase, at, reason, message, job FROM events \
                 WHERE seq > ?1 AND (?2 IS NULL OR job_id = ?2) \
                 AND (?4 IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id \
                      AND jobs.namespace IN (SELECT value FROM json_each(?4)))) \
                 ORDER BY seq LIMIT ?3",
            )
            .bind(events.after())
            .bind(job_id)
            .bind(events.wanted())
            .bind(&scope_json)
            .fetch_all(&mut *tx)
            .await?;
            let (read, last) = (rows.len(), rows.last().map(|r| r.get("seq")));
            let decoded = rows.into_iter().filter_map(|r| decode_event(&self.unreadable, r));
            if events.take(read, last, decoded) {
                break;
            }
        }
        if job_id.is_none() {
            let horizon = horizon_of(&mut tx, scope_json.as_deref()).await?;
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

    async fn namespaces(&self, limit: i64, scope: &Scope) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(NAMESPACES)
            .bind(limit)
            .bind(scope_json(scope)?)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Counts by phase, and submissions and completions in the last `buckets` buckets of
    /// `bucket_seconds` (aligned to the Unix epoch, the last one holding now), with the newest
    /// event's cursor: all read in one transaction, so they are one snapshot. A job's row and
    /// its events are committed together, so the snapshot holds each job's events up to the
    /// cursor and none after.
    async fn stats(&self, buckets: i64, bucket_seconds: i64, scope: &Scope) -> Result<StatsSnapshot> {
        let scope = scope_json(scope)?;
        let mut tx = self.pool.begin().await?;
        let cursor: i64 = sqlx::query_scalar(NEWEST_CURSOR).fetch_one(&mut *tx).await?;
        // The window ends now, read after the first read fixed the snapshot: anything in the
        // snapshot happened before it, so nothing counted falls past the last bucket.
        let last = Utc::now().timestamp().div_euclid(bucket_seconds) * bucket_seconds;
        let since = last - (buckets - 1) * bucket_seconds;
        let since_text = DateTime::from_timestamp(since, 0)
            .unwrap_or(DateTime::UNIX_EPOCH)
            .to_rfc3339();
        let counts = sqlx::query(STATS_COUNTS)
            .bind(&scope)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .filter_map(|r| Some((JobPhase::parse(r.get("phase"))?, r.get::<i64, _>("n"))))
            .collect();
        let submitted = sqlx::query(STATS_SUBMITTED)
            .bind(since)
            .bind(bucket_seconds)
            .bind(&since_text)
            .bind(&scope)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(|r| (r.get("bucket"), r.get("n")))
            .collect();
        let finished = sqlx::query(STATS_FINISHED)
            .bind(since)
            .bind(bucket_seconds)
            .bind(&since_text)
            .bind(&scope)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .filter_map(|r| Some((r.get("bucket"), JobPhase::parse(r.get("phase"))?, r.get("n"))))
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

    async fn job_history(&self, job_id: &str, scope: &Scope, limit: i64) -> Result<Vec<JobEvent>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT seq, job_id, phase, previous_phase, at, reason, message, job \
             FROM events WHERE job_id = ?1 \
             AND (?3 IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE id = ?1 \
                  AND namespace IN (SELECT value FROM json_each(?3)))) \
             ORDER BY seq DESC LIMIT ?2) ORDER BY seq",
        )
        .bind(job_id)
        .bind(limit)
        .bind(scope_json(scope)?)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| decode_event(&self.unreadable, r))
            .collect())
    }

    async fn last_event_seq(&self) -> Result<i64> {
        Ok(sqlx::query_scalar(NEWEST_CURSOR).fetch_one(&self.pool).await?)
    }

    async fn expire_jobs(
        &self,
        rule: &ExpiryRule,
        from: Option<ExpiryPosition>,
        limit: i64,
    ) -> Result<ExpiredBatch> {
        self.check_storage()?;
        let mut tx = self.begin_write().await?;
        let (from_at, from_seq) = from.map(|p| (p.at.to_rfc3339(), p.seq)).unwrap_or_default();
        let scanned = sqlx::query(EXPIRY_SCAN)
            .bind(rule.before.to_rfc3339())
            .bind(&from_at)
            .bind(from_seq)
            .bind(limit)
            .fetch_all(&mut tx.conn)
            .await?;
        let mut batch = ExpiredBatch {
            scanned: scanned.len(),
            ..ExpiredBatch::default()
        };
        let mut expired = Vec::new();
        for row in &scanned {
            let at: String = row.get("at");
            batch.position = Some(ExpiryPosition {
                at: DateTime::parse_from_rfc3339(&at)
                    .map(|t| t.with_timezone(&Utc))
                    .unwrap_or_default(),
                seq: row.get("seq"),
            });
            if rule.namespaces.covers(row.get("namespace")) {
                expired.push(row.get::<String, _>("job_id"));
            }
        }
        if !expired.is_empty() {
            let ids = serde_json::to_string(&expired)?;
            batch.newest_deleted = sqlx::query_scalar(
                "SELECT coalesce(max(seq), 0) FROM events WHERE job_id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids)
            .fetch_one(&mut tx.conn)
            .await?;
            sqlx::query(
                "INSERT INTO retention_horizons (namespace, seq) \
                 SELECT j.namespace, max(e.seq) FROM events e JOIN jobs j ON j.id = e.job_id \
                 WHERE e.job_id IN (SELECT value FROM json_each(?1)) GROUP BY j.namespace \
                 ON CONFLICT (namespace) DO UPDATE SET seq = max(seq, excluded.seq)",
            )
            .bind(&ids)
            .execute(&mut tx.conn)
            .await?;
            batch.events =
                sqlx::query("DELETE FROM events WHERE job_id IN (SELECT value FROM json_each(?1))")
                    .bind(&ids)
                    .execute(&mut tx.conn)
                    .await?
                    .rows_affected();
            sqlx::query(
                "DELETE FROM job_dependencies WHERE job_id IN (SELECT value FROM json_each(?1)) \
                 OR depends_on IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids)
            .execute(&mut tx.conn)
            .await?;
            sqlx::query(
                "DELETE FROM pending_cancellations WHERE job_id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids)
            .execute(&mut tx.conn)
            .await?;
            // The archived output goes with its job.
            for table in ["log_chunks", "log_sources", "log_archives"] {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DELETE FROM {table} WHERE job_id IN (SELECT value FROM json_each(?1))"
                )))
                .bind(&ids)
                .execute(&mut tx.conn)
                .await?;
            }
            batch.jobs = sqlx::query("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))")
                .bind(&ids)
                .execute(&mut tx.conn)
                .await?
                .rows_affected();
        }
        Box::new(tx).commit().await?;
        batch.ids = expired;
        Ok(batch)
    }

    async fn retention_horizon(&self, scope: &Scope) -> Result<i64> {
        let mut conn = self.pool.acquire().await?;
        horizon_of(&mut conn, scope_json(scope)?.as_deref()).await
    }

    async fn unfinished_jobs(&self) -> Result<Vec<Recoverable>> {
        // Row by row: all the rows' bodies at once would double the memory a restart with
        // many unfinished jobs needs, and the allocator keeps most of that peak afterwards.
        let mut rows = sqlx::query(UNFINISHED).fetch(&self.pool);
        let mut jobs = Vec::new();
        while let Some(r) = futures::TryStreamExt::try_next(&mut rows).await? {
            // A job that cannot be read is left where it is, and reported: every other job
            // is recovered.
            let Some(job) = decode_job(&self.unreadable, r.get("id"), r.get("body")) else {
                continue;
            };
            jobs.push(Recoverable {
                job,
                // -1 is held for its dependencies: never handed to the executor.
                launched: r.get::<i64, _>("launched") == 1,
            });
        }
        Ok(jobs)
    }

    async fn pending_cancellations(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        let rows = sqlx::query(concat!(
            "SELECT j.id, j.body FROM pending_cancellations c JOIN jobs j ON j.id = c.job_id \
             WHERE ((? >> ",
            shard_of_id!(),
            ") & 1) = 1 \
             ORDER BY c.requested_at, c.job_id LIMIT ?"
        ))
        .bind(i64::from(shards.unwrap_or(ShardSet::ALL).mask()))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| decode_job(&self.unreadable, r.get("id"), r.get("body")))
            .collect())
    }

    /// Unreadable rows are read past (they stay in the outbox, reported), so that however
    /// many lead the outbox, the jobs after them are handed over.
    async fn unlaunched_jobs(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        let mut jobs = ReadPast::new(limit, 0);
        loop {
            let rows = sqlx::query(concat!(
                "SELECT seq, id, body FROM jobs WHERE launched = 0 AND seq > ? AND ((? >> ",
                shard_of_id!(),
                ") & 1) = 1 ORDER BY seq LIMIT ?"
            ))
            .bind(jobs.after())
            .bind(i64::from(shards.unwrap_or(ShardSet::ALL).mask()))
            .bind(jobs.wanted())
            .fetch_all(&self.pool)
            .await?;
            let (read, last) = (rows.len(), rows.last().map(|r| r.get("seq")));
            let decoded = rows
                .into_iter()
                .filter_map(|r| decode_job(&self.unreadable, r.get("id"), r.get("body")));
            if jobs.take(read, last, decoded) {
                return Ok(jobs.into_items());
            }
        }
    }

    async fn insert_webhook(&self, webhook: &Webhook) -> Result<()> {
        let (filter, scope) = webhook_json(webhook)?;
        let mut tx = self.webhook_tx().await?;
        sqlx::query(
            "INSERT INTO webhooks (id, owner, url, job_filter, scope, secret, created_at, delivered_seq) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&webhook.id)
        .bind(&webhook.owner)
        .bind(&webhook.url)
        .bind(filter)
        .bind(scope)
        .bind(&webhook.secret)
        .bind(webhook.created_at)
        .bind(webhook.cursor)
        .execute(&mut tx.conn)
        .await?;
        Box::new(tx).commit().await
    }

    async fn webhook(&self, id: &str) -> Result<Option<Webhook>> {
        sqlx::query_as::<_, WebhookRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ?"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .map(|row| {
            let id = row.id.clone();
            row.decode(&self.unreadable)
                .ok_or_else(|| unreadable_error(&self.unreadable, RowKind::Webhook, &id))
        })
        .transpose()
    }

    async fn webhooks(&self, owner: Option<&str>) -> Result<Vec<Webhook>> {
        let rows = sqlx::query_as::<_, WebhookRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE ?1 IS NULL OR owner = ?1 ORDER BY created_at, id"
        )))
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| row.decode(&self.unreadable))
            .collect())
    }

    async fn delete_webhook(&self, id: &str) -> Result<bool> {
        let mut tx = self.webhook_tx().await?;
        let done = sqlx::query("DELETE FROM webhooks WHERE id = ?")
            .bind(id)
            .execute(&mut tx.conn)
            .await?;
        Box::new(tx).commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn disable_webhook(&self, id: &str, reason: &str, at: i64) -> Result<bool> {
        let mut tx = self.webhook_tx().await?;
        let done = sqlx::query(
            "UPDATE webhooks SET disabled_reason = ?2, disabled_at = ?3, claimed_by = NULL, \
             claimed_until = NULL WHERE id = ?1 AND disabled_at IS NULL",
        )
        .bind(id)
        .bind(reason)
        .bind(at)
        .execute(&mut tx.conn)
        .await?;
        Box::new(tx).commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn narrow_webhook_scope(&self, id: &str, from: &Scope, to: &Scope) -> Result<bool> {
        let mut tx = self.webhook_tx().await?;
        let done = sqlx::query("UPDATE webhooks SET scope = ?3 WHERE id = ?1 AND scope IS ?2")
            .bind(id)
            .bind(scope_json(from)?)
            .bind(scope_json(to)?)
            .execute(&mut tx.conn)
            .await?;
        Box::new(tx).commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn replay_webhook(&self, id: &str, cursor: i64) -> Result<bool> {
        let mut tx = self.webhook_tx().await?;
        let done = sqlx::query(
            "UPDATE webhooks SET delivered_seq = ?2, revision = revision + 1, attempts = 0, \
             failing_since = NULL, last_error = NULL, next_attempt_at = NULL, parked = 0 \
             WHERE id = ?1",
        )
        .bind(id)
        .bind(cursor)
        .execute(&mut tx.conn)
        .await?;
        Box::new(tx).commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn claim_webhooks(&self, claimant: &str, now: i64, until: i64) -> Result<Vec<Webhook>> {
        let mut tx = self.webhook_tx().await?;
        sqlx::query(
            "UPDATE webhooks SET claimed_by = ?1, claimed_until = ?3 WHERE parked = 0 AND disabled_at IS NULL \
             AND (claimed_by IS NULL OR claimed_by = ?1 OR claimed_until < ?2)",
        )
        .bind(claimant)
        .bind(now)
        .bind(until)
        .execute(&mut tx.conn)
        .await?;
        let rows = sqlx::query_as::<_, WebhookRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE claimed_by = ? AND parked = 0 \
             AND disabled_at IS NULL ORDER BY id"
        )))
        .bind(claimant)
        .fetch_all(&mut tx.conn)
        .await?;
        Box::new(tx).commit().await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| row.decode(&self.unreadable))
            .collect())
    }

    async fn release_webhooks(&self, claimant: &str) -> Result<()> {
        let mut tx = self.webhook_tx().await?;
        sqlx::query("UPDATE webhooks SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = ?")
            .bind(claimant)
            .execute(&mut tx.conn)
            .await?;
        Box::new(tx).commit().await
    }

    async fn webhook_delivered(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        cursor: i64,
        at: Option<i64>,
    ) -> Result<bool> {
        let mut tx = self.webhook_tx().await?;
        let done = sqlx::query(
            "UPDATE webhooks SET delivered_seq = ?4, last_attempt_at = coalesce(?5, last_attempt_at), attempts = 0, \
             failing_since = NULL, last_error = NULL, next_attempt_at = NULL \
             WHERE id = ?1 AND claimed_by = ?2 AND revision = ?3 AND parked = 0 \
             AND disabled_at IS NULL",
        )
        .bind(id)
        .bind(claimant)
        .bind(revision)
        .bind(cursor)
        .bind(at)
        .execute(&mut tx.conn)
        .await?;
        Box::new(tx).commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn webhook_failed(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        failure: &WebhookFailure,
    ) -> Result<bool> {
        let mut tx = self.webhook_tx().await?;
        let done = sqlx::query(
            "UPDATE webhooks SET attempts = ?4, failing_since = ?5, last_error = ?6, \
             last_attempt_at = ?7, next_attempt_at = ?8, parked = ?9, \
             claimed_by = CASE WHEN ?9 = 1 THEN NULL ELSE claimed_by END, \
             claimed_until = CASE WHEN ?9 = 1 THEN NULL ELSE claimed_until END \
             WHERE id = ?1 AND claimed_by = ?2 AND revision = ?3 AND parked = 0 \
             AND disabled_at IS NULL",
        )
        .bind(id)
        .bind(claimant)
        .bind(revision)
        .bind(failure.attempts)
        .bind(failure.failing_since)
        .bind(&failure.error)
        .bind(failure.at)
        .bind(failure.next_attempt_at)
        .bind(i64::from(failure.next_attempt_at.is_none()))
        .execute(&mut tx.conn)
        .await?;
        Box::new(tx).commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// One transaction on the write connection, beside the job writer's batches.
    async fn append_logs(&self, appends: &[LogAppend], cap_bytes: i64) -> Result<Vec<LogAppended>> {
        let mut tx = self.webhook_tx().await?;
        let mut outcomes = Vec::with_capacity(appends.len());
        for append in appends {
            outcomes.push(append_log(&mut tx.conn, append, cap_bytes).await?);
        }
        Box::new(tx).commit().await?;
        Ok(outcomes)
    }

    async fn log_archive(&self, job_id: &str) -> Result<Option<LogArchive>> {
        let row = sqlx::query("SELECT lines, bytes, truncated FROM log_archives WHERE job_id = ?")
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| LogArchive {
            lines: r.get("lines"),
            bytes: r.get("bytes"),
            truncated: r.get::<i64, _>("truncated") != 0,
        }))
    }

    async fn log_position(&self, job_id: &str, source: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT position FROM log_sources WHERE job_id = ? AND source = ?")
                .bind(job_id)
                .bind(source)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Reads from the chunk holding `from` on, a few chunks at a time, by the primary key.
    async fn log_lines(
        &self,
        job_id: &str,
        from: i64,
        max_lines: usize,
        max_bytes: usize,
    ) -> Result<Vec<(i64, LogLine)>> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut next = from;
        loop {
            let chunks: Vec<(i64, Vec<u8>)> = sqlx::query_as(
                "SELECT first_line, data FROM log_chunks WHERE job_id = ?1 AND first_line >= \
                 (SELECT coalesce(max(first_line), 0) FROM log_chunks WHERE job_id = ?1 AND first_line <= ?2) \
                 ORDER BY first_line LIMIT 4",
            )
            .bind(job_id)
            .bind(next)
            .fetch_all(&self.pool)
            .await?;
            if chunks.is_empty() || logs::select(chunks, next, max_lines, max_bytes, &mut out, &mut bytes)? {
                return Ok(out);
            }
            match out.last() {
                Some((at, _)) if *at >= next => next = at + 1,
                // The chunks read held nothing at or after `next`: there is nothing more.
                _ => return Ok(out),
            }
        }
    }
}

impl SqliteStore {
    /// A transaction of its own on the write connection: webhooks' state is written beside
    /// the job writer's batches, one small transaction at a time (dropped on an error, which
    /// rolls it back).
    async fn webhook_tx(&self) -> Result<SqliteTx> {
        self.check_storage()?;
        self.begin_write().await
    }
}

/// One write transaction. Dropping it without a successful [`StoreTx::commit`] rolls
/// everything back and closes the write connection, so the next one starts clean.
pub struct SqliteTx {
    conn: SqliteConnection,
    /// Where the connection goes back after a successful commit.
    slot: OwnedMutexGuard<Option<SqliteConnection>>,
    /// The cursor the next event gets, once this transaction has read it: it holds the
    /// database's only write lock, so no one else appends meanwhile.
    next_seq: Option<i64>,
    /// The store's list of rows that cannot be decoded.
    unreadable: Arc<Unreadable>,
}

impl SqliteTx {
    fn new(
        conn: SqliteConnection,
        slot: OwnedMutexGuard<Option<SqliteConnection>>,
        unreadable: Arc<Unreadable>,
    ) -> Self {
        Self {
            conn,
            slot,
            next_seq: None,
            unreadable,
        }
    }

    /// The cursor of the event about to be appended. SQLite would assign an AUTOINCREMENT
    /// key as max(seq)+1, or past the highest ever used (`sqlite_sequence`), so that a cursor
    /// is never reused even after rows are deleted; inserting an explicit key above it moves
    /// `sqlite_sequence` on, so later ones follow from it.
    async fn take_seq(&mut self) -> Result<i64> {
        let seq = match self.next_seq {
            Some(seq) => seq,
            None => {
                let max: i64 = sqlx::query_scalar("SELECT coalesce(max(seq), 0) + 1 FROM events")
                    .fetch_one(&mut self.conn)
                    .await?;
                let used: Option<i64> =
                    sqlx::query_scalar("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
                        .fetch_optional(&mut self.conn)
                        .await?;
                max.max(used.unwrap_or(0) + 1)
            }
        };
        self.next_seq = Some(seq + 1);
        Ok(seq)
    }

    /// Inserts an event whose snapshot of the job is `snapshot` (JSON, with `seq` as its
    /// `last_event_seq`).
    async fn insert_event(
        &mut self,
        seq: i64,
        job_id: &str,
        transition: &Transition,
        at: DateTime<Utc>,
        snapshot: &str,
    ) -> Result<()> {
        let query = sqlx::query(concat!(
            "INSERT INTO events ",
            event_columns!(),
            " VALUES ",
            event_values!()
        ));
        bind_event_row(query, seq, job_id, transition, at, snapshot)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }

    async fn insert_row(&mut self, job: &Job, fingerprint: &str, body: &str) -> Result<()> {
        let query = sqlx::query(concat!(
            "INSERT INTO jobs ",
            job_columns!(),
            " VALUES ",
            job_values!()
        ));
        bind_job_row(query, job, fingerprint, body)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }
}

// Each method's contract is its doc in the trait; docs here say only what is SQLite's own.
#[async_trait]
impl StoreTx for SqliteTx {
    async fn active_in_namespace(&mut self, namespace: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT coalesce(sum(n), 0) FROM job_counts WHERE namespace = ? AND phase IN ('PENDING', 'RUNNING')",
        )
        .bind(namespace)
        .fetch_one(&mut self.conn)
        .await?)
    }

    async fn get_job(&mut self, id: &str) -> Result<Option<Job>> {
        let row = sqlx::query("SELECT body FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_optional(&mut self.conn)
            .await?;
        row.map(|r| read_job(&self.unreadable, id, r.get("body")))
            .transpose()
    }

    async fn find_by_idempotency_key(
        &mut self,
        submitter: Option<&str>,
        key: &str,
    ) -> Result<Option<KeyedJob>> {
        let row = sqlx::query("SELECT id, fingerprint FROM jobs WHERE idempotency_key = ?")
            .bind(scoped_key(submitter, key))
            .fetch_optional(&mut self.conn)
            .await?;
        Ok(row.map(|r| KeyedJob {
            id: r.get("id"),
            fingerprint: r.get("fingerprint"),
        }))
    }

    async fn insert_job(&mut self, job: &Job, fingerprint: &str) -> Result<()> {
        self.insert_row(job, fingerprint, &serde_json::to_string(job)?)
            .await
    }

    /// One statement for every key: each statement is a round trip to the connection's
    /// thread, which costs more than the lookup.
    async fn find_by_idempotency_keys(
        &mut self,
        keys: &[(Option<&str>, &str)],
    ) -> Result<std::collections::HashMap<String, KeyedJob>> {
        let scoped: Vec<String> = keys.iter().map(|(s, k)| scoped_key(*s, k)).collect();
        let rows = sqlx::query(
            "SELECT idempotency_key, id, fingerprint FROM jobs \
             WHERE idempotency_key IN (SELECT value FROM json_each(?))",
        )
        .bind(serde_json::to_string(&scoped)?)
        .fetch_all(&mut self.conn)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                (
                    r.get("idempotency_key"),
                    KeyedJob {
                        id: r.get("id"),
                        fingerprint: r.get("fingerprint"),
                    },
                )
            })
            .collect())
    }

    /// Multi-row INSERTs of up to `ACCEPT_CHUNK` jobs, then as many events: a bulk costs a
    /// few statements, not two a job.
    async fn accept_jobs(&mut self, accepted: &[Accepted<'_>]) -> Result<Vec<i64>> {
        let mut seqs = Vec::with_capacity(accepted.len());
        let mut bodies = Vec::with_capacity(accepted.len());
        for a in accepted {
            let seq = self.take_seq().await?;
            let mut snapshot = a.job.clone();
            snapshot.last_event_seq = seq;
            bodies.push(serde_json::to_string(&snapshot)?);
            seqs.push(seq);
        }
        for (chunk, chunk_bodies) in accepted.chunks(ACCEPT_CHUNK).zip(bodies.chunks(ACCEPT_CHUNK)) {
            let rows = vec![job_values!(); chunk.len()].join(", ");
            let sql = format!(concat!("INSERT INTO jobs ", job_columns!(), " VALUES {}"), rows);
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (a, body) in chunk.iter().zip(chunk_bodies) {
                query = bind_job_row(query, a.job, a.fingerprint, body);
            }
            query.execute(&mut self.conn).await?;
        }
        let chunks = accepted
            .chunks(ACCEPT_CHUNK)
            .zip(bodies.chunks(ACCEPT_CHUNK))
            .zip(seqs.chunks(ACCEPT_CHUNK));
        for ((chunk, chunk_bodies), chunk_seqs) in chunks {
            let rows = vec![event_values!(); chunk.len()].join(", ");
            let sql = format!(
                concat!("INSERT INTO events ", event_columns!(), " VALUES {}"),
                rows
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for ((a, body), seq) in chunk.iter().zip(chunk_bodies).zip(chunk_seqs) {
                query = bind_event_row(query, *seq, &a.job.id, a.transition, a.at, body);
            }
            query.execute(&mut self.conn).await?;
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
        let seq = self.take_seq().await?;
        let mut snapshot = job.clone();
        snapshot.last_event_seq = seq;
        let body = serde_json::to_string(&snapshot)?;
        self.insert_row(job, fingerprint, &body).await?;
        self.insert_event(seq, &job.id, transition, at, &body).await?;
        Ok(seq)
    }

    async fn append_event(&mut self, job: &Job, transition: &Transition, at: DateTime<Utc>) -> Result<i64> {
        let seq = self.take_seq().await?;
        let mut snapshot = job.clone();
        snapshot.last_event_seq = seq;
        self.insert_event(seq, &job.id, transition, at, &serde_json::to_string(&snapshot)?)
            .await?;
        Ok(seq)
    }

    async fn save_job(&mut self, job: &Job) -> Result<()> {
        sqlx::query("UPDATE jobs SET phase = ?, body = ? WHERE id = ?")
            .bind(job.phase.as_str())
            .bind(serde_json::to_string(job)?)
            .bind(&job.id)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }

    async fn hold(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        sqlx::query("UPDATE jobs SET launched = -1 WHERE id = ?")
            .bind(id)
            .execute(&mut self.conn)
            .await?;
        self.add_dependencies(id, depends_on).await
    }

    async fn add_dependencies(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        for dependency in depends_on {
            sqlx::query("INSERT OR IGNORE INTO job_dependencies (job_id, depends_on) VALUES (?, ?)")
                .bind(id)
                .bind(dependency)
                .execute(&mut self.conn)
                .await?;
        }
        Ok(())
    }

    async fn release(&mut self, id: &str) -> Result<()> {
        sqlx::query("UPDATE jobs SET launched = 0 WHERE id = ? AND launched = -1")
            .bind(id)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }

    async fn dependents(&mut self, id: &str) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT job_id FROM job_dependencies WHERE depends_on = ? ORDER BY job_id")
                .bind(id)
                .fetch_all(&mut self.conn)
                .await?,
        )
    }

    async fn request_cancellation(&mut self, id: &str, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT OR IGNORE INTO pending_cancellations (job_id, requested_at) VALUES (?, ?)")
            .bind(id)
            .bind(at.to_rfc3339())
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }

    async fn cancellation_done(&mut self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM pending_cancellations WHERE job_id = ?")
            .bind(id)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }

    async fn mark_launched(&mut self, id: &str) -> Result<()> {
        sqlx::query("UPDATE jobs SET launched = 1 WHERE id = ?")
            .bind(id)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }

    /// Commits. `Ok` means durable; on any error nothing was committed and the connection
    /// is closed rather than reused.
    async fn commit(self: Box<Self>) -> Result<()> {
        let SqliteTx {
            mut conn, mut slot, ..
        } = *self;
        sqlx::query("COMMIT").execute(&mut conn).await?;
        *slot = Some(conn);
        Ok(())
    }
}

/// Rows of one multi-row INSERT of [`StoreTx::accept_jobs`]: 9 parameters each, well within
/// SQLite's 32,766.
const ACCEPT_CHUNK: usize = 500;

/// A query whose parameters are still being bound.
type SqliteQuery<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

/// Binds one new `jobs` row (the `job_columns!`): `body` is the JSON stored for `job`,
/// which may differ from `job` itself by its first event's cursor. Every insert of a job
/// binds through here, so the columns derived from the job (the scoped idempotency key)
/// come out the same whichever way it was accepted.
fn bind_job_row<'q>(query: SqliteQuery<'q>, job: &Job, fingerprint: &str, body: &str) -> SqliteQuery<'q> {
    query
        .bind(&job.id)
        .bind(&job.spec.name)
        .bind(&job.spec.namespace)
        .bind(&job.spec.template)
        .bind(job.phase.as_str())
        .bind(job.submitted_at.to_rfc3339())
        .bind(
            job.idempotency_key
                .as_deref()
                .map(|k| scoped_key(job.key_scope(), k)),
        )
        .bind(fingerprint)
        .bind(body)
}

/// Binds one new `events` row (the `event_columns!`): `snapshot` is the job's JSON with
/// `seq` as its `last_event_seq`.
fn bind_event_row<'q>(
    query: SqliteQuery<'q>,
    seq: i64,
    job_id: &str,
    transition: &Transition,
    at: DateTime<Utc>,
    snapshot: &str,
) -> SqliteQuery<'q> {
    query
        .bind(seq)
        .bind(job_id)
        .bind(transition.phase.as_str())
        .bind(transition.previous_phase.map(JobPhase::as_str))
        .bind(at.to_rfc3339())
        .bind(&transition.reason)
        .bind(&transition.message)
        .bind(snapshot)
}

/// A value bound to a statement.
#[derive(Clone, Debug)]
enum Bind {
    Int(i64),
    Text(Option<String>),
}

/// One statement and its parameters (`?1`, `?2`, … in order).
struct Statement {
    sql: String,
    binds: Vec<Bind>,
}

impl Statement {
    fn new(sql: &str, binds: Vec<Bind>) -> Self {
        Self {
            sql: sql.to_owned(),
            binds,
        }
    }
}

/// The statements one page of `list_jobs` runs: `pages` read `(seq, id, body)` rows newest
/// first, to be merged; `counts` read one number each, summed into `total_count`. Built once,
/// so that `query_plans` explains exactly what `list_jobs` runs.
struct PageReads {
    pages: Vec<PageRead>,
    counts: Vec<Statement>,
}

/// One read of a page's rows; with a budget (rows checked one by one), `stop` finds where
/// the read stops: the budget-th candidate, none when there are fewer.
struct PageRead {
    page: Statement,
    stop: Option<Statement>,
}

impl PageReads {
    fn new(plan: &ListPlan, before: i64, first: i64, budget: i64) -> Result<Self> {
        let json = |list: Option<&Vec<String>>| -> Result<Bind> {
            Ok(Bind::Text(list.map(serde_json::to_string).transpose()?))
        };
        if let Some(search) = &plan.search {
            let phrase = Bind::Text(Some(fts_phrase(&search.text)));
            let namespaces = json(search.namespaces.as_ref())?;
            let phases = Bind::Text(
                search
                    .phases
                    .as_ref()
                    .map(|p| serde_json::to_string(&p.iter().map(|p| p.as_str()).collect::<Vec<_>>()))
                    .transpose()?,
            );
            let mut binds = vec![
                phrase.clone(),
                Bind::Int(before),
                Bind::Int(first + 1),
                namespaces.clone(),
                phases.clone(),
            ];
            // Only matches that are checked need a budget: otherwise each one read is a row.
            let stop = search.checks().then(|| {
                let skip = budget.max(1) - 1;
                binds.push(Bind::Int(skip));
                Statement::new(
                    SEARCH_STOP,
                    vec![phrase.clone(), Bind::Int(before), Bind::Int(skip)],
                )
            });
            return Ok(Self {
                pages: vec![PageRead {
                    page: Statement {
                        sql: search_page(stop.is_some()),
                        binds,
                    },
                    stop,
                }],
                counts: vec![Statement::new(
                    SEARCH_COUNT,
                    vec![phrase, Bind::Int(COUNT_CANDIDATES), namespaces, phases],
                )],
            });
        }
        let namespaces = json(plan.namespaces.as_ref())?;
        let name = Bind::Text(plan.name_contains.clone());
        // With a name checked per row, counted among each arm's newest candidates.
        let per_arm = (COUNT_CANDIDATES / plan.arms.len().max(1) as i64).max(1);
        let skip = plan.arm_budget(budget) - 1;
        let mut pages = Vec::with_capacity(plan.arms.len());
        let mut counts = Vec::new();
        for arm in &plan.arms {
            let shape = (arm.namespace.is_some(), arm.phase.is_some());
            let binds = |before: i64, limit: i64| {
                vec![
                    Bind::Int(before),
                    Bind::Int(limit),
                    Bind::Text(arm.namespace.clone()),
                    Bind::Text(arm.phase.map(|p| p.as_str().to_owned())),
                    namespaces.clone(),
                    name.clone(),
                ]
            };
            let budgeted = |mut binds: Vec<Bind>| {
                binds.push(Bind::Int(skip));
                binds
            };
            pages.push(if plan.checks() {
                PageRead {
                    page: Statement {
                        sql: arm_sql(shape, ArmRead::BudgetedPage),
                        binds: budgeted(binds(before, first + 1)),
                    },
                    stop: Some(Statement {
                        sql: arm_sql(shape, ArmRead::Stop),
                        binds: budgeted(binds(before, 1)),
                    }),
                }
            } else {
                PageRead {
                    page: Statement {
                        sql: arm_sql(shape, ArmRead::Page),
                        binds: binds(before, first + 1),
                    },
                    stop: None,
                }
            });
            if plan.name_contains.is_some() {
                counts.push(Statement {
                    sql: arm_sql(shape, ArmRead::Count),
                    binds: binds(i64::MAX, per_arm),
                });
            }
        }
        if plan.name_contains.is_none() {
            // Otherwise from the counts kept by namespace and phase.
            let (counted_namespaces, counted_phases) = plan.counted();
            counts.push(Statement::new(
                COUNTED,
                vec![
                    json(counted_namespaces.as_ref())?,
                    Bind::Text(
                        counted_phases
                            .map(|p| serde_json::to_string(&p.iter().map(|p| p.as_str()).collect::<Vec<_>>()))
                            .transpose()?,
                    ),
                ],
            ));
        }
        Ok(Self { pages, counts })
    }
}

/// Jobs in `?1` namespaces and `?2` phases (JSON arrays, or NULL for any), from the counts
/// kept by namespace and phase.
const COUNTED: &str = "SELECT coalesce(sum(n), 0) FROM job_counts \
     WHERE (?1 IS NULL OR namespace IN (SELECT value FROM json_each(?1))) \
     AND (?2 IS NULL OR phase IN (SELECT value FROM json_each(?2)))";

/// What [`arm_sql`] reads: a page of rows (with or without a budget of candidates), where a
/// budgeted page stops, or the count of the name's matches among the arm's newest candidates.
#[derive(Clone, Copy)]
enum ArmRead {
    Page,
    BudgetedPage,
    Stop,
    Count,
}

/// One arm of a page (see [`ListPlan`]), its shape being which equalities it has
/// (namespace, phase): `?1` the cursor, `?2` the limit, `?3` the namespace, `?4` the phase,
/// `?5` namespaces checked per row (JSON, or NULL), `?6` text the name must contain (or
/// NULL), `?7` the candidates a budgeted read may skip past (its budget less one). Each shape
/// names the index it reads, ordered by `seq` after its equalities, so that the plan never
/// falls back to sorting or scanning whatever the planner estimates (tests/store.rs checks
/// every shape's plan); the whole order (no equality) is the table.
///
/// A budgeted page reads no lower than the budget-th candidate below the cursor (a scalar
/// subquery, run once, that walks the same index range reading `seq` only), so it stops
/// there however few rows pass the checks; `Stop` is that candidate.
fn arm_sql(shape: (bool, bool), read: ArmRead) -> String {
    let (index, equalities) = match shape {
        (false, false) => ("NOT INDEXED", ""),
        (true, false) => ("INDEXED BY jobs_by_namespace", " AND namespace = ?3"),
        (false, true) => ("INDEXED BY jobs_by_phase", " AND phase = ?4"),
        (true, true) => (
            "INDEXED BY jobs_by_namespace_phase",
            " AND namespace = ?3 AND phase = ?4",
        ),
    };
    let stop = format!(
        "SELECT seq FROM jobs {index} WHERE seq < ?1{equalities} ORDER BY seq DESC LIMIT 1 OFFSET ?7"
    );
    let range = format!(
        "FROM jobs {index} WHERE seq < ?1{equalities} \
         AND (?5 IS NULL OR namespace IN (SELECT value FROM json_each(?5))) "
    );
    match read {
        ArmRead::Page => format!(
            "SELECT seq, id, body {range}AND (?6 IS NULL OR instr(name, ?6) > 0) ORDER BY seq DESC LIMIT ?2"
        ),
        ArmRead::BudgetedPage => format!(
            "SELECT seq, id, body {range}AND seq >= coalesce(({stop}), 0) \
             AND (?6 IS NULL OR instr(name, ?6) > 0) ORDER BY seq DESC LIMIT ?2"
        ),
        ArmRead::Stop => stop,
        ArmRead::Count => format!(
            "SELECT count(*) FROM (SELECT name {range}ORDER BY seq DESC LIMIT ?2) WHERE instr(name, ?6) > 0"
        ),
    }
}

/// A page of a name search: `?1` the FTS5 phrase, `?2` the cursor, `?3` the limit, `?4`
/// namespaces and `?5` phases (JSON, or NULL for any), `?6` the matches a budgeted read may
/// skip past. The name index is read newest first (FTS5 returns rowids, which are `seq`, in
/// order; CROSS JOIN keeps it the outer loop) and each match's job is looked up by its key.
/// With `budget`, it reads no lower than the budget-th match below the cursor
/// ([`SEARCH_STOP`], run once as a scalar subquery), however few pass the checks.
fn search_page(budget: bool) -> String {
    let floor = if budget {
        "AND job_names.rowid >= coalesce((SELECT rowid FROM job_names WHERE job_names MATCH ?1 \
         AND rowid < ?2 ORDER BY rowid DESC LIMIT 1 OFFSET ?6), 0) "
    } else {
        ""
    };
    format!(
        "SELECT j.seq, j.id, j.body FROM job_names CROSS JOIN jobs j ON j.seq = job_names.rowid \
         WHERE job_names MATCH ?1 AND job_names.rowid < ?2 {floor}\
         AND (?4 IS NULL OR j.namespace IN (SELECT value FROM json_each(?4))) \
         AND (?5 IS NULL OR j.phase IN (SELECT value FROM json_each(?5))) \
         ORDER BY job_names.rowid DESC LIMIT ?3"
    )
}

/// Where a budgeted search page stops: the match `?3` places below the cursor `?2` (the
/// budget-th), if there is one.
const SEARCH_STOP: &str = "SELECT rowid FROM job_names WHERE job_names MATCH ?1 AND rowid < ?2 \
     ORDER BY rowid DESC LIMIT 1 OFFSET ?3";

/// How many of the newest `?2` name matches of the phrase `?1` pass the other filters
/// (`?3` namespaces, `?4` phases).
const SEARCH_COUNT: &str = "SELECT count(*) FROM \
     (SELECT rowid FROM job_names WHERE job_names MATCH ?1 ORDER BY rowid DESC LIMIT ?2) AS c \
     CROSS JOIN jobs j ON j.seq = c.rowid \
     WHERE (?3 IS NULL OR j.namespace IN (SELECT value FROM json_each(?3))) \
     AND (?4 IS NULL OR j.phase IN (SELECT value FROM json_each(?4)))";

/// `text` as an FTS5 phrase (a string in double quotes, each inner quote doubled): with the
/// trigram tokenizer, the phrase of its trigrams matches exactly the names containing it.
fn fts_phrase(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// The unfinished jobs, oldest first. INDEXED BY: the partial index of unfinished jobs is in
/// `seq` order, so nothing is sorted (the planner preferred `jobs_by_phase` and a temporary
/// b-tree of every unfinished row: 114 MiB at 100,000 of them).
const UNFINISHED: &str = "SELECT id, body, launched FROM jobs INDEXED BY jobs_unfinished \
     WHERE phase IN ('PENDING', 'RUNNING') ORDER BY seq";

/// `jobStats`' counts by phase in the scope `?1` (JSON, or NULL): the counts kept by
/// namespace and phase, one row per pair, however many jobs.
const STATS_COUNTS: &str = "SELECT phase, sum(n) AS n FROM job_counts \
     WHERE (?1 IS NULL OR namespace IN (SELECT value FROM json_each(?1))) GROUP BY phase";

/// Submissions per bucket since `?3` (RFC 3339; `?1` its Unix seconds, `?2` the bucket
/// width) in the scope `?4`. unixepoch() reads the stored RFC 3339 text (fraction and offset
/// included).
const STATS_SUBMITTED: &str = "SELECT (unixepoch(submitted_at) - ?1) / ?2 AS bucket, count(*) AS n FROM jobs \
     WHERE submitted_at >= ?3 \
     AND (?4 IS NULL OR namespace IN (SELECT value FROM json_each(?4))) GROUP BY bucket";

/// Completions per bucket and phase, as [`STATS_SUBMITTED`]: the event that entered a
/// terminal phase; the WHERE repeats the partial index's. The scope is checked per event, by
/// its job's key (a list of every job id in the scope would grow with the jobs).
const STATS_FINISHED: &str = "SELECT (unixepoch(at) - ?1) / ?2 AS bucket, phase, count(*) AS n FROM events \
     WHERE phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND at >= ?3 \
     AND (previous_phase IS NULL OR previous_phase <> phase) \
     AND (?4 IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id \
          AND jobs.namespace IN (SELECT value FROM json_each(?4)))) \
     GROUP BY bucket, phase";

/// Up to `?1` namespaces that have jobs, in the scope `?2`, sorted.
const NAMESPACES: &str = "SELECT DISTINCT namespace FROM job_counts WHERE n > 0 \
     AND (?2 IS NULL OR namespace IN (SELECT value FROM json_each(?2))) \
     ORDER BY namespace LIMIT ?1";

/// A scope as a JSON array of namespaces for `json_each`, or NULL for every namespace.
/// The newest cursor handed out. Not only the newest event's: retention may have deleted the
/// newest events, and a cursor must never go back (a snapshot's cursor below the retention
/// horizon would be refused as expired). `sqlite_sequence` keeps the highest key ever used.
const NEWEST_CURSOR: &str = "SELECT max(coalesce((SELECT max(seq) FROM events), 0), \
     coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))";

/// The next finished jobs after a position, in (finish time, cursor) order. The range on
/// `at` walks `events_finished_at`, whose entries hold the cursor (the rowid) after `at`: no
/// sort, and each finished job is read once. `INDEXED BY` and `CROSS JOIN` (which SQLite
/// takes as "this order") pin that plan: without statistics, the planner otherwise starts
/// from `jobs_by_phase`, reads every finished job and sorts them all (the test below).
const EXPIRY_SCAN: &str = "SELECT e.seq, e.at, e.job_id, j.namespace \
     FROM events e INDEXED BY events_finished_at CROSS JOIN jobs j ON j.id = e.job_id \
     WHERE e.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND e.at < ?1 AND e.at >= ?2 \
     AND (e.at > ?2 OR e.seq > ?3) AND j.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') \
     ORDER BY e.at, e.seq LIMIT ?4";

/// The retention horizon of the namespaces in `scope_json` (every namespace when `None`).
async fn horizon_of(conn: &mut SqliteConnection, scope_json: Option<&str>) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(max(seq), 0) FROM retention_horizons \
         WHERE ?1 IS NULL OR namespace IN (SELECT value FROM json_each(?1))",
    )
    .bind(scope_json)
    .fetch_one(conn)
    .await?)
}

fn scope_json(scope: &Scope) -> Result<Option<String>> {
    Ok(scope.list().map(serde_json::to_string).transpose()?)
}

/// An event row, or `None` (reported to `unreadable`) when its job snapshot does not decode.
fn decode_event(unreadable: &Unreadable, r: sqlx::sqlite::SqliteRow) -> Option<JobEvent> {
    let seq: i64 = r.get("seq");
    let job_id: String = r.get("job_id");
    let job = unreadable.decode(RowKind::Event, &seq.to_string(), Some(&job_id), r.get("job"))?;
    let phase: String = r.get("phase");
    let previous: Option<String> = r.get("previous_phase");
    let at: String = r.get("at");
    Some(JobEvent {
        seq,
        job_id,
        phase: JobPhase::parse(&phase).unwrap_or(JobPhase::Pending),
        previous_phase: previous.as_deref().and_then(JobPhase::parse),
        at: DateTime::parse_from_rfc3339(&at)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default(),
        reason: r.get("reason"),
        message: r.get("message"),
        job: Arc::new(job),
    })
}

/// One append of [`Store::append_logs`], inside its transaction (see `logs::plan`).
async fn append_log(conn: &mut SqliteConnection, append: &LogAppend, cap_bytes: i64) -> Result<LogAppended> {
    let row = sqlx::query("SELECT lines, bytes, truncated FROM log_archives WHERE job_id = ?")
        .bind(&append.job_id)
        .fetch_optional(&mut *conn)
        .await?;
    let archive = row
        .map(|r| LogArchive {
            lines: r.get("lines"),
            bytes: r.get("bytes"),
            truncated: r.get::<i64, _>("truncated") != 0,
        })
        .unwrap_or_default();
    if let Some((expected, _)) = &append.position {
        let stored: Option<String> =
            sqlx::query_scalar("SELECT position FROM log_sources WHERE job_id = ? AND source = ?")
                .bind(&append.job_id)
                .bind(&append.source)
                .fetch_optional(&mut *conn)
                .await?;
        if stored != *expected {
            return Ok(LogAppended::Stale);
        }
    }
    let (lines, outcome) = logs::plan(archive, append, cap_bytes);
    if outcome == LogAppended::Closed {
        return Ok(outcome);
    }
    if !lines.is_empty() {
        let bytes: i64 = lines.iter().map(logs::line_bytes).sum();
        sqlx::query(
            "INSERT INTO log_chunks (job_id, first_line, line_count, bytes, data) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&append.job_id)
        .bind(archive.lines)
        .bind(lines.len() as i64)
        .bind(bytes)
        .bind(logs::encode(&lines)?)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "INSERT INTO log_archives (job_id, lines, bytes, truncated) VALUES (?, ?, ?, ?) \
             ON CONFLICT (job_id) DO UPDATE SET lines = excluded.lines, bytes = excluded.bytes, \
             truncated = excluded.truncated",
        )
        .bind(&append.job_id)
        .bind(archive.lines + lines.len() as i64)
        .bind(archive.bytes + bytes)
        .bind(i64::from(outcome == LogAppended::Truncated))
        .execute(&mut *conn)
        .await?;
    }
    if let Some((_, position)) = &append.position {
        sqlx::query(
            "INSERT INTO log_sources (job_id, source, position) VALUES (?, ?, ?) \
             ON CONFLICT (job_id, source) DO UPDATE SET position = excluded.position",
        )
        .bind(&append.job_id)
        .bind(&append.source)
        .bind(position)
        .execute(&mut *conn)
        .await?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The retention scan reads the finished-jobs index in its order and looks each job up by
    /// id: no table scan, no sort, however many jobs there are.
    #[tokio::test]
    async fn the_retention_scan_walks_the_finished_index_without_sorting() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStore::open(dir.path(), Durability::Normal)
            .await
            .expect("the store opens");
        let plan: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {EXPIRY_SCAN}")))
            .bind("2026-01-02T00:00:00+00:00")
            .bind("2026-01-01T00:00:00+00:00")
            .bind(0_i64)
            .bind(100_i64)
            .fetch_all(&store.pool)
            .await
            .expect("the plan")
            .iter()
            .map(|row| row.get::<String, _>("detail"))
            .collect();
        assert_eq!(
            plan,
            [
                "SEARCH e USING INDEX events_finished_at (at>? AND at<?)",
                "SEARCH j USING INDEX sqlite_autoindex_jobs_1 (id=?)",
            ],
            "{plan:#?}"
        );
    }
}
