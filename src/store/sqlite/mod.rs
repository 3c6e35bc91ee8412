//! The SQLite store (the embedded default): jobs and their status history in one database
//! file in the data directory, through sqlx.
//!
//! It owns the schema (migrations under `migrations/sqlite/`), the connections and its own
//! statements; the [`Store`](crate::store::Store) and [`StoreTx`](crate::store::StoreTx)
//! traits are implemented over it in `sql/`. An exclusive lock on the data directory keeps a
//! second jobgate out.
//!
//! A commit that returned `Ok` is durable; nothing else is. Writes use one connection of
//! their own, outside the readers' pool, and a write that fails in any way closes it: after a
//! failed `COMMIT` (a full disk) SQLite may already have rolled the transaction back, and a
//! connection whose idea of its transaction differs from SQLite's would turn the next
//! "commit" into the release of a savepoint inside a transaction that never commits, so the
//! next batch starts on a fresh connection.
//! [`Store::check_storage`](crate::store::Store::check_storage) notices a database file that
//! was deleted, replaced or truncated under us, where writes would "succeed" into a file
//! nobody will read again.
//!
//! Everything it shares with PostgreSQL is written once in `sql/` (through its `Backend`); what
//! is here is SQLite's own: the files, the data directory's lock, the write connection,
//! cursor allocation, the outbox read, and the statements that name its indexes (`sqlite_pages.rs`:
//! pages of jobs and the FTS5 name search).

mod sqlite_pages;

use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions as _, Connection as _, Sqlite, SqlitePool};
use tokio::sync::OwnedMutexGuard;

use super::sql::Backend;
use super::sql::dialect::{Columns as _, Dialect, sql};
use super::sql::job_reads::PageReads;
use super::sql::write_tx::WriteTx;
use super::unreadable::{ReadPast, decode_job};
use super::{Durability, ListPlan, Result, StoreError, Unreadable};
use crate::model::{Job, ShardSet};

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
    /// The longest the database file has been seen (see `check_storage`).
    longest: Arc<AtomicU64>,
    /// An exclusive lock on `jobgate.lock`, held while the store is open: two jobgates on one
    /// data directory would each think they own its jobs. The OS releases it if we die.
    _lock: Arc<std::fs::File>,
    /// Rows found that cannot be decoded.
    unreadable: Arc<Unreadable>,
}

impl SqliteStore {
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
        // Finish any checkpoint a crash interrupted, so that the database file holds every
        // committed page and its length is the floor `check_storage` measures against (we are
        // the only process on this data directory, by the lock above).
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
            longest: Arc::new(AtomicU64::new(meta.len())),
            db_path,
            _lock: Arc::new(lock),
            unreadable: Arc::default(),
        })
    }
}

// Each method's contract is its doc in `Store`; docs here say only what is SQLite's own.
#[async_trait]
impl Backend for SqliteStore {
    type Db = Sqlite;
    type Tx = SqliteTx;

    /// `sqlite_sequence` keeps the highest key ever used.
    const NEWEST_CURSOR: &'static str = "SELECT max(coalesce((SELECT max(seq) FROM events), 0), \
         coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))";

    /// INDEXED BY: the partial index of unfinished jobs is in `seq` order, so nothing is
    /// sorted (the planner preferred `jobs_by_phase` and a temporary b-tree of every
    /// unfinished row: 114 MiB at 100,000 of them).
    const UNFINISHED: &'static str = "SELECT id, body, launched FROM jobs INDEXED BY jobs_unfinished \
         WHERE phase IN ('PENDING', 'RUNNING') ORDER BY seq";

    /// The range on `at` walks `events_finished_at`, whose entries hold the cursor (the
    /// rowid) after `at`: no sort, and each finished job is read once. `INDEXED BY` and
    /// `CROSS JOIN` (which SQLite takes as "this order") pin that plan: without statistics,
    /// the planner otherwise starts from `jobs_by_phase`, reads every finished job and sorts
    /// them all (the test below).
    const EXPIRY_SCAN: &'static str = "SELECT e.seq, e.at, e.job_id, j.namespace \
         FROM events e INDEXED BY events_finished_at CROSS JOIN jobs j ON j.id = e.job_id \
         WHERE e.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND e.at < $1 AND e.at >= $2 \
         AND (e.at > $2 OR e.seq > $3) AND j.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') \
         ORDER BY e.at, e.seq LIMIT $4";

    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn unreadable_rows(&self) -> &Unreadable {
        &self.unreadable
    }

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
        // Cut short with its header left: shorter than it has ever been seen. The file never
        // shrinks by itself (nothing vacuums it), so that is someone else's doing. Its header's
        // page count is no measure: in WAL mode the file holds only what checkpoints have
        // copied, page 1 first, and the rest of a checkpoint that has not finished waits in
        // the WAL, where SQLite reads it from: a header ahead of the file is a healthy
        // database, and refusing to write would also refuse the checkpoint that brings the
        // two together.
        let longest = self.longest.fetch_max(meta.len(), Ordering::Relaxed);
        if meta.len() < longest {
            return Err(StoreError::Files(format!(
                "the database file {} was truncated: {} bytes where it had {longest}; writes are refused; restore it and restart jobgate",
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

    /// Unreadable rows are read past (they stay in the outbox, reported), so that however
    /// many lead the outbox, the jobs after them are handed over.
    async fn unlaunched_jobs(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        let text = crate::store::sql::dialect::sql_text!(
            Sqlite,
            "SELECT seq, id, body FROM jobs WHERE launched = 0 AND seq > $1 AND (($2 >> {}) & 1) = 1 \
             ORDER BY seq LIMIT $3",
            Sqlite::SHARD_OF_ID
        );
        let mut conn = self.pool.acquire().await?;
        let mut jobs = ReadPast::new(limit, 0);
        loop {
            let rows = sql::<Sqlite>(text)
                .bind(jobs.after())
                .bind(i64::from(shards.unwrap_or(ShardSet::ALL).mask()))
                .bind(jobs.wanted())
                .fetch_all(&mut conn)
                .await?;
            let (read, last) = (rows.len(), rows.last().map(|r| r.col("seq")));
            let decoded = rows.iter().filter_map(|r| {
                decode_job(&self.unreadable, &r.col::<String>("id"), &r.col::<String>("body"))
            });
            if jobs.take(read, last, decoded) {
                return Ok(jobs.into_items());
            }
        }
    }

    /// On the write connection (opening a fresh one if the last write failed).
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
        Ok(SqliteTx {
            conn,
            slot,
            next_seq: None,
            unreadable: self.unreadable.clone(),
        })
    }

    /// A transaction of its own on the write connection: webhooks' state and the archive of
    /// output are written beside the job writer's batches, one small transaction at a time
    /// (dropped on an error, which rolls it back).
    async fn begin_side(&self) -> Result<SqliteTx> {
        Backend::check_storage(self)?;
        self.begin_write().await
    }

    fn page_reads(plan: &ListPlan, before: i64, first: i64, budget: i64) -> PageReads {
        sqlite_pages::page_reads(plan, before, first, budget)
    }
}

/// One write transaction. Dropping it without a successful commit rolls everything back and
/// closes the write connection, so the next one starts clean.
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

#[async_trait]
impl WriteTx for SqliteTx {
    type Db = Sqlite;

    const MARK_LAUNCHED: &'static str = "UPDATE jobs SET launched = 1 WHERE id = $1";

    fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.conn
    }

    fn unreadable(&self) -> &Unreadable {
        &self.unreadable
    }

    /// SQLite would assign an AUTOINCREMENT key as max(seq)+1, or past the highest ever used
    /// (`sqlite_sequence`), so that a cursor is never reused even after rows are deleted;
    /// inserting an explicit key above it moves `sqlite_sequence` on, so later ones follow
    /// from it.
    async fn take_seqs(&mut self, n: i64) -> Result<i64> {
        let seq = match self.next_seq {
            Some(seq) => seq,
            None => {
                let max: i64 = sql::<Sqlite>("SELECT coalesce(max(seq), 0) + 1 FROM events")
                    .scalar(&mut self.conn)
                    .await?;
                let used: Option<i64> =
                    sql::<Sqlite>("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
                        .scalar_optional(&mut self.conn)
                        .await?;
                max.max(used.unwrap_or(0) + 1)
            }
        };
        self.next_seq = Some(seq + n);
        Ok(seq)
    }

    /// On any error nothing was committed and the connection is closed rather than reused.
    async fn finish(self) -> Result<()> {
        let SqliteTx {
            mut conn, mut slot, ..
        } = self;
        sqlx::query("COMMIT").execute(&mut conn).await?;
        *slot = Some(conn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Row as _;

    /// The retention scan reads the finished-jobs index in its order and looks each job up by
    /// id: no table scan, no sort, however many jobs there are.
    #[tokio::test]
    async fn the_retention_scan_walks_the_finished_index_without_sorting() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStore::open(dir.path(), Durability::Normal)
            .await
            .expect("the store opens");
        let plan: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {}",
            SqliteStore::EXPIRY_SCAN
        )))
        .bind("2026-01-02T00:00:00+00:00")
        .bind("1970-01-01T00:00:00+00:00")
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
