//! The PostgreSQL store: jobs and their status history in a database that several jobgate
//! replicas share (`--database-url postgres://…`).
//!
//! It owns the schema (migrations under `migrations/postgres/`), the connection pool, the
//! listener that wakes replicas when events are committed, and its own statements; the
//! [`Store`](crate::store::Store) and [`StoreTx`](crate::store::StoreTx) traits are
//! implemented over it in `sql/`. It must not decide what to write: the service does.
//!
//! How replicas stay correct on one database:
//! - **One writer at a time.** Every write transaction first takes a transaction-scoped
//!   advisory lock, so batches from different replicas apply one after another, each reading
//!   the state the previous one committed.
//! - **Cursor order is commit order.** Event cursors come from the one-row `event_cursor`
//!   table, under that lock, so a cursor is handed out only after every smaller one has
//!   committed or rolled back: a reader that has read up to cursor N never later finds an
//!   event below N. (A sequence or identity column would not do: its values are taken at
//!   insert and may commit out of order.) Cursors never go back, even if events are deleted.
//! - **Wake-ups, not truth.** A transaction that appended events sends `NOTIFY` on commit;
//!   replicas read the events table after each wake-up (and on a timer, for notifications a
//!   reconnecting listener missed), so a lost notification delays an event, never loses it.
//! - **The outbox is claimed.** [`Store::unlaunched_jobs`](crate::store::Store::unlaunched_jobs)
//!   claims the jobs it returns for [`LAUNCH_CLAIM`] with `FOR UPDATE SKIP LOCKED`: two replicas never hand the same job over
//!   at once, and a replica that died holding a claim leaves its jobs to another when it
//!   expires.
//! - **A stopped replica cannot write late.** Sessions set `idle_in_transaction_session_timeout`,
//!   so a replica paused in the middle of a transaction (SIGSTOP, a long GC-like stall) has it
//!   aborted by the server, which frees the lock; its commit fails when it resumes.
//!
//! Everything it shares with SQLite is written once in `sql/` (through its `Backend`); what is
//! here is PostgreSQL's own: the connection and its session settings, the write lock and
//! `event_cursor`, `NOTIFY` and the listener, outbox claims, the sole-runner lock, and the
//! statements that name its indexes (`postgres_pages.rs`).

mod postgres_pages;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};

use super::sql::Backend;
use super::sql::dialect::{Columns as _, Dialect, sql, sql_text};
use super::sql::job_reads::PageReads;
use super::sql::write_tx::{WriteTx, bounded};
use super::unreadable::{ReadPast, decode_job};
use super::{ListPlan, Result, StoreError, Unreadable};
use crate::model::{Job, ShardSet};

/// The advisory lock every write transaction holds: one writer at a time across replicas.
const WRITE_LOCK: i64 = 0x6a6f_6267_6174_6501;

/// The advisory lock a process running jobs itself (the local executor) holds for as long as
/// it runs: a second such process on the same database is refused.
const SOLE_RUNNER_LOCK: i64 = 0x6a6f_6267_6174_6502;

/// The channel a commit that appended events notifies.
const EVENTS_CHANNEL: &str = "jobgate_events";

/// How long a replica's claim on an unlaunched job lasts: it retries its launch alone for
/// that long; another replica takes the job over once it expires.
pub const LAUNCH_CLAIM: Duration = Duration::from_secs(15);

/// How long a readiness check waits for the database.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a write waits for another replica's write to finish before failing (within the
/// dialect's `WRITE_STEP_TIMEOUT`, so that the server answers first).
const LOCK_TIMEOUT: &str = "8s";

/// How long a session may sit idle inside a transaction before the server aborts it (and
/// releases its locks): longer than any pause between two statements of a healthy writer.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "15s";

/// The PostgreSQL store; cloning it is cheap.
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    /// This process, as recorded in the claims it makes.
    replica: String,
    /// The connection that holds [`SOLE_RUNNER_LOCK`], once claimed.
    sole_runner: std::sync::Arc<tokio::sync::Mutex<Option<sqlx::PgConnection>>>,
    /// Whether this process claimed it (and so must keep holding it).
    wants_sole_runner: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Rows found that cannot be decoded.
    unreadable: std::sync::Arc<Unreadable>,
}

impl PostgresStore {
    /// Connects to the database at `url` (postgres://user:password@host:port/database?…),
    /// and brings its schema up to date.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)
            .map_err(StoreError::Open)?
            .options([
                ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_TIMEOUT),
                ("lock_timeout", LOCK_TIMEOUT),
                // NOTICEs (an idempotent migration's "already exists, skipping") are noise in
                // jobgate's log; warnings and errors still come through.
                ("client_min_messages", "warning"),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(16)
            // A database that does not answer makes reads fail soon (and readiness false),
            // rather than hang every caller.
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await
            .map_err(StoreError::Open)?;
        // Replicas starting together migrate one at a time (sqlx takes an advisory lock).
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(Self {
            pool,
            replica: uuid::Uuid::now_v7().to_string(),
            sole_runner: Default::default(),
            wants_sole_runner: Default::default(),
            unreadable: Default::default(),
        })
    }

    /// Whether this process still holds the sole-runner lock it claimed (true if it never
    /// claimed one). The lock lives as long as its session: after the database restarted or
    /// the connection broke, it is claimed again, and if another process took it meanwhile
    /// this one is not ready (two processes would each think they own the local jobs).
    async fn still_sole_runner(&self) -> bool {
        if !self.wants_sole_runner.load(std::sync::atomic::Ordering::Relaxed) {
            return true;
        }
        let mut slot = self.sole_runner.lock().await;
        if let Some(conn) = slot.as_mut() {
            let alive = sqlx::query("SELECT 1").execute(&mut *conn);
            if matches!(tokio::time::timeout(PING_TIMEOUT, alive).await, Ok(Ok(_))) {
                return true;
            }
            tracing::warn!(
                "the session holding the local executor's claim on the database was lost; claiming it again"
            );
            slot.take();
        }
        drop(slot);
        match Backend::claim_sole_runner(self).await {
            Ok(true) => {
                tracing::info!("the local executor's claim on the database is held again");
                true
            }
            Ok(false) => {
                tracing::error!(
                    "another jobgate claimed this database's local jobs while this one was cut off from it: not ready; stop one of them"
                );
                false
            }
            Err(_) => false,
        }
    }
}

// Each method's contract is its doc in `Store`; docs here say only what is PostgreSQL's own.
#[async_trait]
impl Backend for PostgresStore {
    type Db = Postgres;
    type Tx = PostgresTx;

    /// `event_cursor`: not the newest event's, which retention may have deleted.
    const NEWEST_CURSOR: &'static str = "SELECT last FROM event_cursor WHERE id = 1";

    /// From the partial index `jobs_unfinished`.
    const UNFINISHED: &'static str =
        "SELECT id, body, launched FROM jobs WHERE phase IN ('PENDING', 'RUNNING') ORDER BY seq";

    /// Walks `events_finished_at_seq` (at, seq): no sort, each finished job read once.
    const EXPIRY_SCAN: &'static str = "SELECT e.seq, e.at, e.job_id, j.namespace \
         FROM events e JOIN jobs j ON j.id = e.job_id \
         WHERE e.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND e.at < $1 \
         AND (e.at, e.seq) > ($2, $3) AND j.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') \
         ORDER BY e.at, e.seq LIMIT $4";

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn unreadable_rows(&self) -> &Unreadable {
        &self.unreadable
    }

    /// A database that does not answer within 2 s (`PING_TIMEOUT`) counts as down (a paused or
    /// unreachable server would otherwise hang readiness checks).
    async fn ping(&self) -> bool {
        let ping = sqlx::query("SELECT 1").execute(&self.pool);
        matches!(tokio::time::timeout(PING_TIMEOUT, ping).await, Ok(Ok(_))) && self.still_sole_runner().await
    }

    async fn close(&self) {
        self.sole_runner.lock().await.take();
        self.pool.close().await;
    }

    fn check_storage(&self) -> Result<()> {
        Ok(())
    }

    /// Wakes on every commit that appended events, by any replica: the listener has a
    /// connection of its own and reconnects by itself; after a reconnection it wakes once, since
    /// notifications sent meanwhile are lost.
    async fn commit_wakeups(&self) -> Result<Option<BoxStream<'static, ()>>> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(EVENTS_CHANNEL).await?;
        let wakeups = futures::stream::unfold(listener, |mut listener| async move {
            loop {
                match listener.try_recv().await {
                    // `None`: the connection was lost and is being re-established.
                    Ok(_) => return Some(((), listener)),
                    Err(e) => {
                        tracing::warn!(error = %e, "listening for commits failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Some(wakeups.boxed()))
    }

    async fn claim_sole_runner(&self) -> Result<bool> {
        let mut slot = self.sole_runner.lock().await;
        if slot.is_some() {
            return Ok(true);
        }
        self.wants_sole_runner
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // Held by this connection's session: it leaves the pool, so that nobody else uses
        // (or returns) the session that holds the lock.
        let mut conn = self.pool.acquire().await?.detach();
        let claimed: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(SOLE_RUNNER_LOCK)
            .fetch_one(&mut conn)
            .await?;
        if claimed {
            *slot = Some(conn);
        }
        Ok(claimed)
    }

    /// Claims the jobs it returns for [`LAUNCH_CLAIM`]: other replicas skip them (rows being
    /// claimed right now are skipped too, not waited for) until the claim expires; this
    /// replica's own claims are returned again, so that it retries its own launches.
    async fn unlaunched_jobs(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        // Unreadable rows are claimed and read past (they stay in the outbox, reported), so
        // that however many lead the outbox, the jobs after them are handed over.
        let text = sql_text!(
            Postgres,
            "UPDATE jobs SET claimed_by = $1, claimed_until = now() + make_interval(secs => $3) \
             WHERE seq IN (SELECT seq FROM jobs WHERE launched = 0 AND seq > $5 \
                 AND (claimed_by IS NULL OR claimed_by = $1 OR claimed_until < now()) \
                 AND (($4::bigint >> {}) & 1) = 1 \
                 ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED) \
             RETURNING seq, id, body",
            Postgres::SHARD_OF_ID
        );
        let mut conn = self.pool.acquire().await?;
        let mut jobs = ReadPast::new(limit, 0);
        loop {
            let rows = sql::<Postgres>(text)
                .bind(self.replica.as_str())
                .bind(jobs.wanted())
                .bind(LAUNCH_CLAIM.as_secs_f64())
                .bind(i64::from(shards.unwrap_or(ShardSet::ALL).mask()))
                .bind(jobs.after())
                .fetch_all(&mut conn)
                .await?;
            // RETURNING follows no ORDER BY.
            let (read, last) = (rows.len(), rows.iter().map(|r| r.col::<i64>("seq")).max());
            let decoded = rows.iter().filter_map(|r| {
                let job = decode_job(&self.unreadable, &r.col::<String>("id"), &r.col::<String>("body"))?;
                Some((r.col::<i64>("seq"), job))
            });
            if jobs.take(read, last, decoded) {
                break;
            }
        }
        let mut jobs = jobs.into_items();
        // Oldest first again.
        jobs.sort_by_key(|(seq, _)| *seq);
        Ok(jobs.into_iter().map(|(_, job)| job).collect())
    }

    async fn begin_write(&self) -> Result<PostgresTx> {
        let mut tx = self.begin_side().await?;
        // Waits for another replica's write: `lock_timeout` bounds it on the server side,
        // `bounded` in case the server itself hangs.
        bounded::<Postgres, _>(async {
            sql::<Postgres>("SELECT pg_advisory_xact_lock($1)")
                .bind(WRITE_LOCK)
                .execute(&mut tx.tx)
                .await?;
            Ok(())
        })
        .await?;
        Ok(tx)
    }

    /// Outside the write lock: webhooks' rows and the archive's are not the event log (each
    /// append locks its archive's row).
    async fn begin_side(&self) -> Result<PostgresTx> {
        let tx = bounded::<Postgres, _>(async { Ok(self.pool.begin().await?) }).await?;
        Ok(PostgresTx {
            tx,
            notify: false,
            unreadable: self.unreadable.clone(),
        })
    }

    fn page_reads(plan: &ListPlan, before: i64, first: i64, budget: i64) -> PageReads {
        postgres_pages::page_reads(plan, before, first, budget)
    }
}

/// One write transaction, holding the write lock until it ends (a side transaction holds
/// none). Dropping it without a successful commit rolls everything back.
pub struct PostgresTx {
    tx: Transaction<'static, Postgres>,
    /// Whether it appended events (job or schedule events), so its commit must wake the
    /// replicas.
    notify: bool,
    /// The store's list of rows that cannot be decoded.
    unreadable: std::sync::Arc<Unreadable>,
}

#[async_trait]
impl WriteTx for PostgresTx {
    type Db = Postgres;

    /// Its claim goes with it.
    const MARK_LAUNCHED: &'static str =
        "UPDATE jobs SET launched = 1, claimed_by = NULL, claimed_until = NULL WHERE id = $1";

    fn conn(&mut self) -> &mut sqlx::PgConnection {
        &mut self.tx
    }

    fn unreadable(&self) -> &Unreadable {
        &self.unreadable
    }

    /// The cursors come from `event_cursor`, whose row this transaction then holds (on top
    /// of the write lock) until it ends: see the module docs.
    async fn take_seqs(&mut self, n: i64) -> Result<i64> {
        let last: i64 =
            sql::<Postgres>("UPDATE event_cursor SET last = last + $1 WHERE id = 1 RETURNING last")
                .bind(n)
                .scalar(&mut self.tx)
                .await?;
        self.notify = true;
        Ok(last - n + 1)
    }

    fn wake_on_commit(&mut self) {
        self.notify = true;
    }

    /// Commits, notifying the replicas (PostgreSQL delivers the notification only if the
    /// commit succeeds).
    async fn finish(self) -> Result<()> {
        let PostgresTx { mut tx, notify, .. } = self;
        if notify {
            sql::<Postgres>("SELECT pg_notify($1, '')")
                .bind(EVENTS_CHANNEL)
                .execute(&mut tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
