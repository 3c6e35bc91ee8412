//! The durable store: jobs and their status history in SQLite, through sqlx.
//!
//! It owns the schema (migrations under `migrations/`), the connection pool and every SQL
//! statement. Writes go through [`StoreTx`], one transaction for a batch of changes, so that
//! a job and its event land together or not at all. It knows nothing of GraphQL, executors
//! or broadcasting: callers decide what to write and when to tell anyone.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::jobs::model::{Job, JobEvent, JobFilter, JobPhase, Scope, Transition};

/// Why a store operation failed. Never shown to clients: the caller logs it and answers a
/// generic error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("creating the data directory {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("opening the database: {0}")]
    Open(#[source] sqlx::Error),
    #[error("the data directory {path} is in use by another jobgate; stop it or choose another --data-dir")]
    InUse { path: PathBuf },
    #[error("locking the data directory {path}: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
    #[error("migrating the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("stored job is unreadable: {0}")]
    Corrupt(#[from] serde_json::Error),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How hard a commit waits for the disk. `Full` survives power loss; `Normal` (in WAL mode)
/// survives a crash of jobgate, kill -9 included, but may lose the last commits on power loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    Full,
    Normal,
}

/// A handle to the store; cloning it is cheap (it is a pool).
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    /// An exclusive lock on `jobgate.lock`, held while the store is open: two jobgates on one
    /// data directory would each think they own its jobs. The OS releases it if we die.
    _lock: Arc<std::fs::File>,
}

/// A page of jobs, newest first.
#[derive(Debug)]
pub struct JobPage {
    /// Each job with its cursor (its row's sequence number).
    pub jobs: Vec<(i64, Job)>,
    pub has_next_page: bool,
    pub total_count: i64,
}

/// What [`Store::stats`] read, in one transaction. Buckets are indexes from `since`.
#[derive(Debug)]
pub struct StatsSnapshot {
    /// The first bucket's start, Unix seconds.
    pub since: i64,
    pub cursor: i64,
    pub counts: std::collections::HashMap<JobPhase, i64>,
    /// (bucket, jobs submitted in it)
    pub submitted: Vec<(i64, i64)>,
    /// (bucket, terminal phase, jobs that entered it in the bucket)
    pub finished: Vec<(i64, JobPhase, i64)>,
}

/// A job waiting to be handed to the executor, or already handed over.
#[derive(Debug)]
pub struct Recoverable {
    pub job: Job,
    pub launched: bool,
}

impl Store {
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
            .connect_with(options)
            .await
            .map_err(StoreError::Open)?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Self {
            pool,
            _lock: Arc::new(lock),
        })
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Starts a write transaction. SQLite allows one writer at a time; callers batch.
    pub async fn begin(&self) -> Result<StoreTx> {
        let mut tx = self.pool.begin().await?;
        // Take the write lock now rather than on the first write, so that a batch never
        // fails half-way with SQLITE_BUSY on lock upgrade.
        sqlx::query("UPDATE jobs SET seq = seq WHERE 0")
            .execute(&mut *tx)
            .await?;
        Ok(StoreTx { tx })
    }

    pub async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        let row = sqlx::query("SELECT body FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| decode_job(r.get("body"))).transpose()
    }

    /// Jobs matching `filter`, newest first, after the cursor `after` (a job's sequence).
    pub async fn list_jobs(&self, filter: &JobFilter, first: i64, after: Option<i64>) -> Result<JobPage> {
        let phases = filter
            .phases
            .as_ref()
            .map(|p| serde_json::to_string(&p.iter().map(|p| p.as_str()).collect::<Vec<_>>()))
            .transpose()?;
        let scope = scope_json(&filter.scope)?;
        const WHERE: &str = "(?1 IS NULL OR namespace = ?1) \
             AND (?2 IS NULL OR instr(name, ?2) > 0) \
             AND (?3 IS NULL OR phase IN (SELECT value FROM json_each(?3))) \
             AND (?4 IS NULL OR namespace IN (SELECT value FROM json_each(?4)))";
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT seq, body FROM jobs WHERE {WHERE} AND seq < ?5 ORDER BY seq DESC LIMIT ?6"
        )))
        .bind(&filter.namespace)
        .bind(&filter.name_contains)
        .bind(&phases)
        .bind(&scope)
        .bind(after.unwrap_or(i64::MAX))
        .bind(first + 1)
        .fetch_all(&self.pool)
        .await?;
        let total_count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM jobs WHERE {WHERE}"
        )))
        .bind(&filter.namespace)
        .bind(&filter.name_contains)
        .bind(&phases)
        .bind(&scope)
        .fetch_one(&self.pool)
        .await?;
        let has_next_page = rows.len() as i64 > first;
        let jobs = rows
            .into_iter()
            .take(first as usize)
            .map(|r| Ok((r.get::<i64, _>("seq"), decode_job(r.get("body"))?)))
            .collect::<Result<_>>()?;
        Ok(JobPage {
            jobs,
            has_next_page,
            total_count,
        })
    }

    /// Up to `limit` events after the cursor `after`, oldest first; only `job_id`'s if given.
    pub async fn events_after(&self, after: i64, limit: i64, job_id: Option<&str>) -> Result<Vec<JobEvent>> {
        let rows = sqlx::query(
            "SELECT seq, job_id, phase, previous_phase, at, reason, message, job FROM events \
             WHERE seq > ?1 AND (?2 IS NULL OR job_id = ?2) ORDER BY seq LIMIT ?3",
        )
        .bind(after)
        .bind(job_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(decode_event).collect()
    }

    /// Distinct namespaces of jobs, sorted, at most `limit`.
    pub async fn namespaces(&self, limit: i64, scope: &Scope) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT namespace FROM jobs \
             WHERE (?2 IS NULL OR namespace IN (SELECT value FROM json_each(?2))) \
             ORDER BY namespace LIMIT ?1",
        )
        .bind(limit)
        .bind(scope_json(scope)?)
        .fetch_all(&self.pool)
        .await?)
    }

    /// How many jobs of `namespace` are PENDING or RUNNING (inside a transaction, so that
    /// submissions committed together are counted).
    pub async fn active_in_namespace(tx: &mut StoreTx, namespace: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE namespace = ? AND phase IN ('PENDING', 'RUNNING')",
        )
        .bind(namespace)
        .fetch_one(&mut *tx.tx)
        .await?)
    }

    /// Counts by phase, and submissions and completions in the last `buckets` buckets of
    /// `bucket_seconds` (aligned to the Unix epoch, the last one holding now), with the newest
    /// event's cursor: all read in one transaction, so they are one snapshot. A job's row and
    /// its events are committed together, so the snapshot holds each job's events up to the
    /// cursor and none after.
    pub async fn stats(&self, buckets: i64, bucket_seconds: i64, scope: &Scope) -> Result<StatsSnapshot> {
        let scope = scope_json(scope)?;
        let mut tx = self.pool.begin().await?;
        let cursor: i64 = sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM events")
            .fetch_one(&mut *tx)
            .await?;
        // The window ends now, read after the first read fixed the snapshot: anything in the
        // snapshot happened before it, so nothing counted falls past the last bucket.
        let last = Utc::now().timestamp().div_euclid(bucket_seconds) * bucket_seconds;
        let since = last - (buckets - 1) * bucket_seconds;
        let since_text = DateTime::from_timestamp(since, 0)
            .unwrap_or(DateTime::UNIX_EPOCH)
            .to_rfc3339();
        let counts = sqlx::query(
            "SELECT phase, count(*) AS n FROM jobs \
             WHERE (?1 IS NULL OR namespace IN (SELECT value FROM json_each(?1))) GROUP BY phase",
        )
        .bind(&scope)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .filter_map(|r| Some((JobPhase::parse(r.get("phase"))?, r.get::<i64, _>("n"))))
        .collect();
        // unixepoch() reads the stored RFC 3339 text (fraction and offset included).
        let submitted = sqlx::query(
            "SELECT (unixepoch(submitted_at) - ?1) / ?2 AS bucket, count(*) AS n FROM jobs \
             WHERE submitted_at >= ?3 \
             AND (?4 IS NULL OR namespace IN (SELECT value FROM json_each(?4))) GROUP BY bucket",
        )
        .bind(since)
        .bind(bucket_seconds)
        .bind(&since_text)
        .bind(&scope)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|r| (r.get("bucket"), r.get("n")))
        .collect();
        // The event that entered a terminal phase; the WHERE repeats the partial index's.
        let finished = sqlx::query(
            "SELECT (unixepoch(at) - ?1) / ?2 AS bucket, phase, count(*) AS n FROM events \
             WHERE phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND at >= ?3 \
             AND (previous_phase IS NULL OR previous_phase <> phase) \
             AND (?4 IS NULL OR job_id IN (SELECT id FROM jobs \
                  WHERE namespace IN (SELECT value FROM json_each(?4)))) \
             GROUP BY bucket, phase",
        )
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

    /// The newest `limit` events of one job, oldest first.
    pub async fn job_history(&self, job_id: &str, limit: i64) -> Result<Vec<JobEvent>> {
        let rows = sqlx::query(
            "SELECT * FROM (SELECT seq, job_id, phase, previous_phase, at, reason, message, job \
             FROM events WHERE job_id = ?1 ORDER BY seq DESC LIMIT ?2) ORDER BY seq",
        )
        .bind(job_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(decode_event).collect()
    }

    /// The newest event's cursor, 0 when there is none.
    pub async fn last_event_seq(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM events")
            .fetch_one(&self.pool)
            .await?)
    }

    /// Every job that has not reached a terminal phase, oldest first.
    pub async fn unfinished_jobs(&self) -> Result<Vec<Recoverable>> {
        let rows =
            sqlx::query("SELECT body, launched FROM jobs WHERE phase IN ('PENDING', 'RUNNING') ORDER BY seq")
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|r| {
                Ok(Recoverable {
                    job: decode_job(r.get("body"))?,
                    // -1 is held for its dependencies: never handed to the executor.
                    launched: r.get::<i64, _>("launched") == 1,
                })
            })
            .collect()
    }

    /// Jobs accepted but not yet handed to the executor, oldest first.
    pub async fn unlaunched_jobs(&self, limit: i64) -> Result<Vec<Job>> {
        let rows = sqlx::query("SELECT body FROM jobs WHERE launched = 0 ORDER BY seq LIMIT ?")
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(|r| decode_job(r.get("body"))).collect()
    }
}

/// One write transaction. Dropping it without [`StoreTx::commit`] rolls everything back.
pub struct StoreTx {
    tx: sqlx::Transaction<'static, sqlx::Sqlite>,
}

/// An accepted job found by its idempotency key.
#[derive(Debug)]
pub struct KeyedJob {
    pub job: Job,
    pub fingerprint: String,
}

impl StoreTx {
    pub async fn get_job(&mut self, id: &str) -> Result<Option<Job>> {
        let row = sqlx::query("SELECT body FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await?;
        row.map(|r| decode_job(r.get("body"))).transpose()
    }

    /// The job `submitter` submitted with idempotency key `key`: keys are per submitter, so
    /// one caller's key never finds (or reveals) another's job.
    pub async fn find_by_idempotency_key(
        &mut self,
        submitter: Option<&str>,
        key: &str,
    ) -> Result<Option<KeyedJob>> {
        let row = sqlx::query("SELECT body, fingerprint FROM jobs WHERE idempotency_key = ?")
            .bind(scoped_key(submitter, key))
            .fetch_optional(&mut *self.tx)
            .await?;
        row.map(|r| {
            Ok(KeyedJob {
                job: decode_job(r.get("body"))?,
                fingerprint: r.get("fingerprint"),
            })
        })
        .transpose()
    }

    pub async fn insert_job(&mut self, job: &Job, fingerprint: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO jobs (id, name, namespace, template, phase, submitted_at, idempotency_key, fingerprint, body) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
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
        .bind(serde_json::to_string(job)?)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Appends the event for `transition` and returns its cursor. The job's
    /// `last_event_seq` must then be set and the job saved with [`StoreTx::save_job`].
    pub async fn append_event(
        &mut self,
        job: &Job,
        transition: &Transition,
        at: DateTime<Utc>,
    ) -> Result<i64> {
        // The snapshot is written with the seq it is about to get; SQLite assigns
        // AUTOINCREMENT keys as max(seq)+1 within this exclusive transaction.
        let seq: i64 = sqlx::query_scalar("SELECT coalesce(max(seq), 0) + 1 FROM events")
            .fetch_one(&mut *self.tx)
            .await?;
        let seq = seq.max(self.sequence_floor().await?);
        let mut snapshot = job.clone();
        snapshot.last_event_seq = seq;
        sqlx::query(
            "INSERT INTO events (seq, job_id, phase, previous_phase, at, reason, message, job) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(seq)
        .bind(&job.id)
        .bind(transition.phase.as_str())
        .bind(transition.previous_phase.map(JobPhase::as_str))
        .bind(at.to_rfc3339())
        .bind(&transition.reason)
        .bind(&transition.message)
        .bind(serde_json::to_string(&snapshot)?)
        .execute(&mut *self.tx)
        .await?;
        Ok(seq)
    }

    /// The smallest sequence number an AUTOINCREMENT table may still hand out, so that a
    /// cursor is never reused even after rows are deleted.
    async fn sequence_floor(&mut self) -> Result<i64> {
        let used: Option<i64> = sqlx::query_scalar("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
            .fetch_optional(&mut *self.tx)
            .await?;
        Ok(used.unwrap_or(0) + 1)
    }

    pub async fn save_job(&mut self, job: &Job) -> Result<()> {
        sqlx::query("UPDATE jobs SET phase = ?, body = ? WHERE id = ?")
            .bind(job.phase.as_str())
            .bind(serde_json::to_string(job)?)
            .bind(&job.id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Holds a job out of the launch outbox until [`StoreTx::release`] (it waits for its
    /// dependencies), and records what it depends on.
    pub async fn hold(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        sqlx::query("UPDATE jobs SET launched = -1 WHERE id = ?")
            .bind(id)
            .execute(&mut *self.tx)
            .await?;
        self.add_dependencies(id, depends_on).await
    }

    /// Records the jobs `id` depends on.
    pub async fn add_dependencies(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        for dependency in depends_on {
            sqlx::query("INSERT OR IGNORE INTO job_dependencies (job_id, depends_on) VALUES (?, ?)")
                .bind(id)
                .bind(dependency)
                .execute(&mut *self.tx)
                .await?;
        }
        Ok(())
    }

    /// Puts a held job into the launch outbox.
    pub async fn release(&mut self, id: &str) -> Result<()> {
        sqlx::query("UPDATE jobs SET launched = 0 WHERE id = ? AND launched = -1")
            .bind(id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// The jobs that depend on `id`.
    pub async fn dependents(&mut self, id: &str) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT job_id FROM job_dependencies WHERE depends_on = ? ORDER BY job_id")
                .bind(id)
                .fetch_all(&mut *self.tx)
                .await?,
        )
    }

    pub async fn mark_launched(&mut self, id: &str) -> Result<()> {
        sqlx::query("UPDATE jobs SET launched = 1 WHERE id = ?")
            .bind(id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

/// The stored form of an idempotency key: its submitter, a unit separator, the key (see
/// migrations/0004_idempotency_per_submitter.sql).
pub fn scoped_key(submitter: Option<&str>, key: &str) -> String {
    format!("{}\u{1f}{key}", submitter.unwrap_or_default())
}

/// A scope as a JSON array of namespaces for `json_each`, or NULL for every namespace.
fn scope_json(scope: &Scope) -> Result<Option<String>> {
    Ok(scope.list().map(serde_json::to_string).transpose()?)
}

fn decode_job(body: String) -> Result<Job> {
    Ok(serde_json::from_str(&body)?)
}

fn decode_event(r: sqlx::sqlite::SqliteRow) -> Result<JobEvent> {
    let phase: String = r.get("phase");
    let previous: Option<String> = r.get("previous_phase");
    let at: String = r.get("at");
    Ok(JobEvent {
        seq: r.get("seq"),
        job_id: r.get("job_id"),
        phase: JobPhase::parse(&phase).unwrap_or(JobPhase::Pending),
        previous_phase: previous.as_deref().and_then(JobPhase::parse),
        at: DateTime::parse_from_rfc3339(&at)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default(),
        reason: r.get("reason"),
        message: r.get("message"),
        job: Arc::new(decode_job(r.get("job"))?),
    })
}
