//! The PostgreSQL store: jobs and their status history in a database that several jobgate
//! replicas share (`--database-url postgres://…`).
//!
//! It owns the schema (migrations under `migrations/postgres/`), the connection pool, the
//! listener that wakes replicas when events are committed, and every SQL statement, behind
//! the [`Store`] and [`StoreTx`] traits. It must not decide what to write: the service does.
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
//! - **The outbox is claimed.** [`Store::unlaunched_jobs`] claims the jobs it returns for
//!   [`LAUNCH_CLAIM`] with `FOR UPDATE SKIP LOCKED`: two replicas never hand the same job over
//!   at once, and a replica that died holding a claim leaves its jobs to another when it
//!   expires.
//! - **A stopped replica cannot write late.** Sessions set `idle_in_transaction_session_timeout`,
//!   so a replica paused in the middle of a transaction (SIGSTOP, a long GC-like stall) has it
//!   aborted by the server, which frees the lock; its commit fails when it resumes.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream::BoxStream;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};

use super::logs::{self, LogAppend, LogAppended};
use super::{
    Arm, ArmRows, COUNT_CANDIDATES, ExpiredBatch, ExpiryPosition, ExpiryRule, JobPage, KeyedJob, ListPlan,
    PlannedRead, ReadPast, Recoverable, Result, RowKind, StatsSnapshot, Store, StoreError, StoreTx,
    Unreadable, WEBHOOK_COLUMNS, Webhook, WebhookFailure, WebhookRow, decode_job, merge_arms, read_job,
    scope_json, scoped_key, unreadable_error, webhook_json,
};
use crate::model::{
    Job, JobEvent, JobFilter, JobPhase, LogArchive, LogLine, SHARD_COUNT, Scope, ShardSet, Transition,
};

/// The advisory lock every write transaction holds: one writer at a time across replicas.
const WRITE_LOCK: i64 = 0x6a6f_6267_6174_6501;

/// The advisory lock a process running jobs itself (the local executor) holds for as long as
/// it runs: a second such process on the same database is refused.
const SOLE_RUNNER_LOCK: i64 = 0x6a6f_6267_6174_6502;

/// A job's shard in SQL, as [`crate::model::shard_of`] computes it for the ids jobgate makes
/// (UUIDs: the last two hexadecimal digits, modulo the shard count).
macro_rules! shard_of_id {
    () => {
        "((('x' || right(id, 2))::bit(8)::int) % 32)"
    };
}
const _: () = assert!(SHARD_COUNT == 32, "shard_of_id! divides by 32");

/// Binds a [`Statement`]'s parameters to a query made from its SQL.
macro_rules! bind_all {
    ($query:expr, $binds:expr) => {{
        let mut query = $query;
        for bind in $binds {
            query = match bind {
                Bind::Int(v) => query.bind(*v),
                Bind::Text(t) => query.bind(t.clone()),
                Bind::Texts(t) => query.bind(t.clone()),
                Bind::Time(t) => query.bind(*t),
            };
        }
        query
    }};
}

/// The channel a commit that appended events notifies.
const EVENTS_CHANNEL: &str = "jobgate_events";

/// How long a replica's claim on an unlaunched job lasts: it retries its launch alone for
/// that long; another replica takes the job over once it expires.
pub const LAUNCH_CLAIM: Duration = Duration::from_secs(15);

/// How long one statement of a write transaction (its commit included) may take.
const WRITE_STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a readiness check waits for the database.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a write waits for another replica's write to finish before failing (within
/// [`WRITE_STEP_TIMEOUT`], so that the server answers first).
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
        match self.claim_sole_runner().await {
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

    async fn begin_write(&self) -> Result<PostgresTx> {
        let mut tx = bounded(async { Ok(self.pool.begin().await?) }).await?;
        // Waits for another replica's write: `lock_timeout` bounds it on the server side,
        // `bounded` in case the server itself hangs.
        bounded(async {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(WRITE_LOCK)
                .execute(&mut *tx)
                .await?;
            Ok(())
        })
        .await?;
        Ok(PostgresTx {
            tx,
            notify: false,
            unreadable: self.unreadable.clone(),
        })
    }
}

// Each method's contract is its doc in the trait; docs here say only what is PostgreSQL's own.
#[async_trait]
impl Store for PostgresStore {
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

    async fn begin(&self) -> Result<Box<dyn StoreTx>> {
        Ok(Box::new(self.begin_write().await?))
    }

    async fn probe_write(&self) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO store_probe (id, at) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
        )
        .execute(&mut *tx.tx)
        .await?;
        Box::new(tx).commit().await
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

    fn unreadable(&self) -> &Unreadable {
        &self.unreadable
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        let row = sqlx::query("SELECT body FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| read_job(&self.unreadable, id, r.get("body")))
            .transpose()
    }

    /// Every arm and the count are read in one REPEATABLE READ transaction: one snapshot.
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
        let reads = PageReads::new(&plan, after.unwrap_or(i64::MAX), first, budget);
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let mut arms = Vec::with_capacity(reads.pages.len());
        for (page, stop) in &reads.pages {
            let query = sqlx::query_as::<_, (i64, String, String)>(sqlx::AssertSqlSafe(page.sql.as_str()));
            let rows: Vec<(i64, (String, String))> = bind_all!(query, &page.binds)
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .map(|(seq, id, body)| (seq, (id, body)))
                .collect();
            // Fewer rows than asked: the read either ran out of candidates or of budget; the
            // budget-th candidate, if there is one, is where it stopped.
            let stopped_at = match stop {
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
                    let reads = PageReads::new(&plan, after.unwrap_or(i64::MAX), first, budget);
                    reads
                        .pages
                        .into_iter()
                        .flat_map(|(page, stop)| std::iter::once(page).chain(stop))
                        .chain(reads.counts)
                        .collect()
                }
            },
            PlannedRead::UnfinishedJobs => vec![Statement::new(UNFINISHED, vec![])],
            PlannedRead::Stats { scope } => {
                // The dashboard's window: the last hour in minutes.
                let scope = Bind::Texts(scope_list(scope));
                let since = Utc::now().timestamp() - 3600;
                let since_at = Bind::Time(DateTime::from_timestamp(since, 0).unwrap_or(DateTime::UNIX_EPOCH));
                vec![
                    Statement::new(STATS_COUNTS, vec![scope.clone()]),
                    Statement::new(
                        STATS_SUBMITTED,
                        vec![Bind::Int(since), Bind::Int(60), since_at.clone(), scope.clone()],
                    ),
                    Statement::new(
                        STATS_FINISHED,
                        vec![Bind::Int(since), Bind::Int(60), since_at, scope],
                    ),
                ]
            }
            PlannedRead::Namespaces { scope } => vec![Statement::new(
                NAMESPACES,
                vec![Bind::Int(1_000), Bind::Texts(scope_list(scope))],
            )],
        };
        let mut plans = Vec::with_capacity(statements.len());
        for statement in statements {
            let explain = format!("EXPLAIN {}", statement.sql);
            let query = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(explain));
            let steps = bind_all!(query, &statement.binds).fetch_all(&self.pool).await?;
            plans.push(format!("{}\n  {}", statement.sql, steps.join("\n  ")));
        }
        Ok(plans)
    }

    async fn events_after(
        &self,
        after: i64,
        limit: i64,
        job_id: Option<&str>,
        scope: &Scope,
    ) -> Result<Vec<JobEvent>> {
        let scope = scope_list(scope);
        // One snapshot for the page and the horizon, so a deletion is in both or in neither.
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        // A row left out as unreadable is made up for by reading on, so that a page shorter
        // than `limit` still means "nothing more yet" to every caller.
        let mut events = ReadPast::new(limit, after);
        loop {
            let rows = sqlx::query(
                "SELECT seq, job_id, phase, previous_phase, at, reason, message, job FROM events \
                 WHERE seq > $1 AND ($2::text IS NULL OR job_id = $2) \
                 AND ($4::text[] IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id \
                      AND jobs.namespace = ANY($4))) \
                 ORDER BY seq LIMIT $3",
            )
            .bind(events.after())
            .bind(job_id)
            .bind(events.wanted())
            .bind(&scope)
            .fetch_all(&mut *tx)
            .await?;
            let (read, last) = (rows.len(), rows.last().map(|r| r.get("seq")));
            let decoded = rows.into_iter().filter_map(|r| decode_event(&self.unreadable, r));
            if events.take(read, last, decoded) {
                break;
            }
        }
        if job_id.is_none() {
            let horizon = horizon_of(&mut tx, scope.as_deref()).await?;
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
            .bind(scope_list(scope))
            .fetch_all(&self.pool)
            .await?)
    }

    /// Read in one REPEATABLE READ transaction, so the figures are one snapshot.
    async fn stats(&self, buckets: i64, bucket_seconds: i64, scope: &Scope) -> Result<StatsSnapshot> {
        let scope = scope_list(scope);
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let cursor: i64 = sqlx::query_scalar(NEWEST_CURSOR).fetch_one(&mut *tx).await?;
        // The window ends now, read after the first read fixed the snapshot: anything in the
        // snapshot happened before it, so nothing counted falls past the last bucket.
        let last = Utc::now().timestamp().div_euclid(bucket_seconds) * bucket_seconds;
        let since = last - (buckets - 1) * bucket_seconds;
        let since_at = DateTime::from_timestamp(since, 0).unwrap_or(DateTime::UNIX_EPOCH);
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
            .bind(since_at)
            .bind(&scope)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(|r| (r.get("bucket"), r.get("n")))
            .collect();
        let finished = sqlx::query(STATS_FINISHED)
            .bind(since)
            .bind(bucket_seconds)
            .bind(since_at)
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
             FROM events WHERE job_id = $1 \
             AND ($3::text[] IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE id = $1 \
                  AND namespace = ANY($3))) \
             ORDER BY seq DESC LIMIT $2) AS newest ORDER BY seq",
        )
        .bind(job_id)
        .bind(limit)
        .bind(scope_list(scope))
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
        // Under the write lock like every write: replicas sweeping at once take turns.
        let mut tx = self.begin_write().await?;
        let (from_at, from_seq) = match from {
            Some(p) => (p.at, p.seq),
            // Before any job: PostgreSQL's timestamps do not reach chrono's minimum.
            None => (DateTime::<Utc>::UNIX_EPOCH, 0),
        };
        // Walks `events_finished_at_seq` (at, seq): no sort, each finished job read once.
        let scanned = sqlx::query(
            "SELECT e.seq, e.at, e.job_id, j.namespace FROM events e JOIN jobs j ON j.id = e.job_id \
             WHERE e.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND e.at < $1 \
             AND (e.at, e.seq) > ($2, $3) AND j.phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') \
             ORDER BY e.at, e.seq LIMIT $4",
        )
        .bind(rule.before)
        .bind(from_at)
        .bind(from_seq)
        .bind(limit)
        .fetch_all(&mut *tx.tx)
        .await?;
        let mut batch = ExpiredBatch {
            scanned: scanned.len(),
            ..ExpiredBatch::default()
        };
        let mut expired: Vec<String> = Vec::new();
        for row in &scanned {
            batch.position = Some(ExpiryPosition {
                at: row.get("at"),
                seq: row.get("seq"),
            });
            if rule.namespaces.covers(row.get("namespace")) {
                expired.push(row.get("job_id"));
            }
        }
        if !expired.is_empty() {
            batch.newest_deleted =
                sqlx::query_scalar("SELECT coalesce(max(seq), 0)::bigint FROM events WHERE job_id = ANY($1)")
                    .bind(&expired)
                    .fetch_one(&mut *tx.tx)
                    .await?;
            sqlx::query(
                "INSERT INTO retention_horizons (namespace, seq) \
                 SELECT j.namespace, max(e.seq) FROM events e JOIN jobs j ON j.id = e.job_id \
                 WHERE e.job_id = ANY($1) GROUP BY j.namespace \
                 ON CONFLICT (namespace) DO UPDATE \
                 SET seq = greatest(retention_horizons.seq, excluded.seq)",
            )
            .bind(&expired)
            .execute(&mut *tx.tx)
            .await?;
            batch.events = sqlx::query("DELETE FROM events WHERE job_id = ANY($1)")
                .bind(&expired)
                .execute(&mut *tx.tx)
                .await?
                .rows_affected();
            sqlx::query("DELETE FROM job_dependencies WHERE job_id = ANY($1) OR depends_on = ANY($1)")
                .bind(&expired)
                .execute(&mut *tx.tx)
                .await?;
            sqlx::query("DELETE FROM pending_cancellations WHERE job_id = ANY($1)")
                .bind(&expired)
                .execute(&mut *tx.tx)
                .await?;
            // The archived output goes with its job.
            for table in ["log_chunks", "log_sources", "log_archives"] {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DELETE FROM {table} WHERE job_id = ANY($1)"
                )))
                .bind(&expired)
                .execute(&mut *tx.tx)
                .await?;
            }
            batch.jobs = sqlx::query("DELETE FROM jobs WHERE id = ANY($1)")
                .bind(&expired)
                .execute(&mut *tx.tx)
                .await?
                .rows_affected();
        }
        Box::new(tx).commit().await?;
        batch.ids = expired;
        Ok(batch)
    }

    async fn retention_horizon(&self, scope: &Scope) -> Result<i64> {
        let mut conn = self.pool.acquire().await?;
        horizon_of(&mut conn, scope_list(scope).as_deref()).await
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
                launched: r.get::<i16, _>("launched") == 1,
            });
        }
        Ok(jobs)
    }

    async fn pending_cancellations(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        let rows = sqlx::query(concat!(
            "SELECT j.id, j.body FROM pending_cancellations c JOIN jobs j ON j.id = c.job_id \
             WHERE (($2::bigint >> ",
            shard_of_id!(),
            ") & 1) = 1 \
             ORDER BY c.requested_at, c.job_id LIMIT $1"
        ))
        .bind(limit)
        .bind(i64::from(shards.unwrap_or(ShardSet::ALL).mask()))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| decode_job(&self.unreadable, r.get("id"), r.get("body")))
            .collect())
    }

    /// Claims the jobs it returns for [`LAUNCH_CLAIM`]: other replicas skip them (rows being
    /// claimed right now are skipped too, not waited for) until the claim expires; this
    /// replica's own claims are returned again, so that it retries its own launches.
    async fn unlaunched_jobs(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        // Unreadable rows are claimed and read past (they stay in the outbox, reported), so
        // that however many lead the outbox, the jobs after them are handed over.
        let mut jobs = ReadPast::new(limit, 0);
        loop {
            let rows = sqlx::query(concat!(
                "UPDATE jobs SET claimed_by = $1, claimed_until = now() + make_interval(secs => $3) \
                 WHERE seq IN (SELECT seq FROM jobs WHERE launched = 0 AND seq > $5 \
                     AND (claimed_by IS NULL OR claimed_by = $1 OR claimed_until < now()) \
                     AND (($4::bigint >> ",
                shard_of_id!(),
                ") & 1) = 1 \
                     ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 RETURNING seq, id, body"
            ))
            .bind(&self.replica)
            .bind(jobs.wanted())
            .bind(LAUNCH_CLAIM.as_secs_f64())
            .bind(i64::from(shards.unwrap_or(ShardSet::ALL).mask()))
            .bind(jobs.after())
            .fetch_all(&self.pool)
            .await?;
            // RETURNING follows no ORDER BY.
            let (read, last) = (rows.len(), rows.iter().map(|r| r.get::<i64, _>("seq")).max());
            let decoded = rows.into_iter().filter_map(|r| {
                let job = decode_job(&self.unreadable, r.get("id"), r.get("body"))?;
                Some((r.get::<i64, _>("seq"), job))
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

    async fn insert_webhook(&self, webhook: &Webhook) -> Result<()> {
        let (filter, scope) = webhook_json(webhook)?;
        sqlx::query(
            "INSERT INTO webhooks (id, owner, url, job_filter, scope, secret, created_at, delivered_seq) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&webhook.id)
        .bind(&webhook.owner)
        .bind(&webhook.url)
        .bind(filter)
        .bind(scope)
        .bind(&webhook.secret)
        .bind(webhook.created_at)
        .bind(webhook.cursor)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn webhook(&self, id: &str) -> Result<Option<Webhook>> {
        sqlx::query_as::<_, WebhookRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1"
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
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE $1::text IS NULL OR owner = $1 ORDER BY created_at, id"
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
        let done = sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn disable_webhook(&self, id: &str, reason: &str, at: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE webhooks SET disabled_reason = $2, disabled_at = $3, claimed_by = NULL, \
             claimed_until = NULL WHERE id = $1 AND disabled_at IS NULL",
        )
        .bind(id)
        .bind(reason)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn narrow_webhook_scope(&self, id: &str, from: &Scope, to: &Scope) -> Result<bool> {
        let done =
            sqlx::query("UPDATE webhooks SET scope = $3 WHERE id = $1 AND scope IS NOT DISTINCT FROM $2")
                .bind(id)
                .bind(scope_json(from)?)
                .bind(scope_json(to)?)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn replay_webhook(&self, id: &str, cursor: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE webhooks SET delivered_seq = $2, revision = revision + 1, attempts = 0, \
             failing_since = NULL, last_error = NULL, next_attempt_at = NULL, parked = 0 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(cursor)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// One statement: concurrent replicas' claims serialise on the rows they update.
    async fn claim_webhooks(&self, claimant: &str, now: i64, until: i64) -> Result<Vec<Webhook>> {
        let rows = sqlx::query_as::<_, WebhookRow>(sqlx::AssertSqlSafe(format!(
            "UPDATE webhooks SET claimed_by = $1, claimed_until = $3 WHERE parked = 0 AND disabled_at IS NULL \
             AND (claimed_by IS NULL OR claimed_by = $1 OR claimed_until < $2) \
             RETURNING {WEBHOOK_COLUMNS}"
        )))
        .bind(claimant)
        .bind(now)
        .bind(until)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| row.decode(&self.unreadable))
            .collect())
    }

    async fn release_webhooks(&self, claimant: &str) -> Result<()> {
        sqlx::query("UPDATE webhooks SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = $1")
            .bind(claimant)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn webhook_delivered(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        cursor: i64,
        at: Option<i64>,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE webhooks SET delivered_seq = $4, last_attempt_at = coalesce($5, last_attempt_at), attempts = 0, \
             failing_since = NULL, last_error = NULL, next_attempt_at = NULL \
             WHERE id = $1 AND claimed_by = $2 AND revision = $3 AND parked = 0 \
             AND disabled_at IS NULL",
        )
        .bind(id)
        .bind(claimant)
        .bind(revision)
        .bind(cursor)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn webhook_failed(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        failure: &WebhookFailure,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE webhooks SET attempts = $4, failing_since = $5, last_error = $6, \
             last_attempt_at = $7, next_attempt_at = $8, parked = $9::bigint, \
             claimed_by = CASE WHEN $9::bigint = 1 THEN NULL ELSE claimed_by END, \
             claimed_until = CASE WHEN $9::bigint = 1 THEN NULL ELSE claimed_until END \
             WHERE id = $1 AND claimed_by = $2 AND revision = $3 AND parked = 0 \
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
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// One transaction of its own, outside the write lock (log tables are not the event
    /// log): each append locks its job's archive row, so appends to one job apply one after
    /// another, across replicas too.
    async fn append_logs(&self, appends: &[LogAppend], cap_bytes: i64) -> Result<Vec<LogAppended>> {
        let mut tx = bounded(async { Ok(self.pool.begin().await?) }).await?;
        let mut outcomes = Vec::with_capacity(appends.len());
        for append in appends {
            outcomes.push(bounded(append_log(&mut tx, append, cap_bytes)).await?);
        }
        bounded(async { Ok(tx.commit().await?) }).await?;
        Ok(outcomes)
    }

    async fn log_archive(&self, job_id: &str) -> Result<Option<LogArchive>> {
        let row = sqlx::query("SELECT lines, bytes, truncated FROM log_archives WHERE job_id = $1")
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
            sqlx::query_scalar("SELECT position FROM log_sources WHERE job_id = $1 AND source = $2")
                .bind(job_id)
                .bind(source)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

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
                "SELECT first_line, data FROM log_chunks WHERE job_id = $1 AND first_line >= \
                 (SELECT coalesce(max(first_line), 0) FROM log_chunks WHERE job_id = $1 AND first_line <= $2) \
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
                _ => return Ok(out),
            }
        }
    }
}

/// One write transaction, holding the write lock until it ends. Dropping it without a
/// successful [`StoreTx::commit`] rolls everything back.
pub struct PostgresTx {
    tx: Transaction<'static, Postgres>,
    /// Whether it appended events, so its commit must wake the replicas.
    notify: bool,
    /// The store's list of rows that cannot be decoded.
    unreadable: std::sync::Arc<Unreadable>,
}

// Each method's contract is its doc in the trait; docs here say only what is PostgreSQL's own.
#[async_trait]
impl StoreTx for PostgresTx {
    async fn active_in_namespace(&mut self, namespace: &str) -> Result<i64> {
        bounded(async move {
            Ok(sqlx::query_scalar(
                "SELECT coalesce(sum(n), 0)::bigint FROM job_counts \
                 WHERE namespace = $1 AND phase IN ('PENDING', 'RUNNING')",
            )
            .bind(namespace)
            .fetch_one(&mut *self.tx)
            .await?)
        })
        .await
    }

    async fn get_job(&mut self, id: &str) -> Result<Option<Job>> {
        bounded(async move {
            let row = sqlx::query("SELECT body FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await?;
            row.map(|r| read_job(&self.unreadable, id, r.get("body")))
                .transpose()
        })
        .await
    }

    async fn find_by_idempotency_key(
        &mut self,
        submitter: Option<&str>,
        key: &str,
    ) -> Result<Option<KeyedJob>> {
        bounded(async move {
            let row = sqlx::query("SELECT id, fingerprint FROM jobs WHERE idempotency_key = $1")
                .bind(scoped_key(submitter, key))
                .fetch_optional(&mut *self.tx)
                .await?;
            Ok(row.map(|r| KeyedJob {
                id: r.get("id"),
                fingerprint: r.get("fingerprint"),
            }))
        })
        .await
    }

    async fn insert_job(&mut self, job: &Job, fingerprint: &str) -> Result<()> {
        bounded(async move {
            bind_job_row(
                sqlx::query(INSERT_JOB),
                job,
                fingerprint,
                &serde_json::to_string(job)?,
            )
            .execute(&mut *self.tx)
            .await?;
            Ok(())
        })
        .await
    }

    /// The cursor comes from `event_cursor`, as for [`StoreTx::append_event`]; the row and
    /// the event carry the same JSON.
    async fn accept_job(
        &mut self,
        job: &Job,
        fingerprint: &str,
        transition: &Transition,
        at: DateTime<Utc>,
    ) -> Result<i64> {
        bounded(async move {
            let seq: i64 =
                sqlx::query_scalar("UPDATE event_cursor SET last = last + 1 WHERE id = 1 RETURNING last")
                    .fetch_one(&mut *self.tx)
                    .await?;
            let mut snapshot = job.clone();
            snapshot.last_event_seq = seq;
            let body = serde_json::to_string(&snapshot)?;
            bind_job_row(sqlx::query(INSERT_JOB), job, fingerprint, &body)
                .execute(&mut *self.tx)
                .await?;
            bind_event_row(sqlx::query(INSERT_EVENT), seq, &job.id, transition, at, &body)
                .execute(&mut *self.tx)
                .await?;
            self.notify = true;
            Ok(seq)
        })
        .await
    }

    /// The cursor comes from `event_cursor`, whose row this transaction then holds (on top
    /// of the write lock) until it ends: see the module docs.
    async fn append_event(&mut self, job: &Job, transition: &Transition, at: DateTime<Utc>) -> Result<i64> {
        bounded(async move {
            let seq: i64 =
                sqlx::query_scalar("UPDATE event_cursor SET last = last + 1 WHERE id = 1 RETURNING last")
                    .fetch_one(&mut *self.tx)
                    .await?;
            let mut snapshot = job.clone();
            snapshot.last_event_seq = seq;
            let snapshot = serde_json::to_string(&snapshot)?;
            bind_event_row(sqlx::query(INSERT_EVENT), seq, &job.id, transition, at, &snapshot)
                .execute(&mut *self.tx)
                .await?;
            self.notify = true;
            Ok(seq)
        })
        .await
    }

    async fn save_job(&mut self, job: &Job) -> Result<()> {
        bounded(async move {
            sqlx::query("UPDATE jobs SET phase = $1, body = $2 WHERE id = $3")
                .bind(job.phase.as_str())
                .bind(serde_json::to_string(job)?)
                .bind(&job.id)
                .execute(&mut *self.tx)
                .await?;
            Ok(())
        })
        .await
    }

    async fn hold(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        let tx = &mut self.tx;
        bounded(async move {
            sqlx::query("UPDATE jobs SET launched = -1 WHERE id = $1")
                .bind(id)
                .execute(&mut **tx)
                .await?;
            Ok(())
        })
        .await?;
        // Bounded on its own: not inside the statement above's limit.
        self.add_dependencies(id, depends_on).await
    }

    async fn add_dependencies(&mut self, id: &str, depends_on: &[String]) -> Result<()> {
        bounded(async move {
            for dependency in depends_on {
                sqlx::query(
                    "INSERT INTO job_dependencies (job_id, depends_on) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                )
                .bind(id)
                .bind(dependency)
                .execute(&mut *self.tx)
                .await?;
            }
            Ok(())
        })
        .await
    }

    async fn release(&mut self, id: &str) -> Result<()> {
        bounded(async move {
            sqlx::query("UPDATE jobs SET launched = 0 WHERE id = $1 AND launched = -1")
                .bind(id)
                .execute(&mut *self.tx)
                .await?;
            Ok(())
        })
        .await
    }

    async fn dependents(&mut self, id: &str) -> Result<Vec<String>> {
        bounded(async move {
            Ok(sqlx::query_scalar(
                "SELECT job_id FROM job_dependencies WHERE depends_on = $1 ORDER BY job_id",
            )
            .bind(id)
            .fetch_all(&mut *self.tx)
            .await?)
        })
        .await
    }

    async fn request_cancellation(&mut self, id: &str, at: DateTime<Utc>) -> Result<()> {
        bounded(async move {
            sqlx::query(
                "INSERT INTO pending_cancellations (job_id, requested_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(at)
            .execute(&mut *self.tx)
            .await?;
            Ok(())
        })
        .await
    }

    async fn cancellation_done(&mut self, id: &str) -> Result<()> {
        bounded(async move {
            sqlx::query("DELETE FROM pending_cancellations WHERE job_id = $1")
                .bind(id)
                .execute(&mut *self.tx)
                .await?;
            Ok(())
        })
        .await
    }

    async fn mark_launched(&mut self, id: &str) -> Result<()> {
        bounded(async move {
            sqlx::query(
                "UPDATE jobs SET launched = 1, claimed_by = NULL, claimed_until = NULL WHERE id = $1",
            )
            .bind(id)
            .execute(&mut *self.tx)
            .await?;
            Ok(())
        })
        .await
    }

    /// Commits, notifying the replicas (PostgreSQL delivers the notification only if the
    /// commit succeeds). A commit the database does not answer in time is reported failed
    /// although it may have happened: as with any networked database, the outcome is unknown
    /// (a client that retries with its idempotency key finds the job it submitted).
    async fn commit(self: Box<Self>) -> Result<()> {
        bounded(async move {
            let PostgresTx { mut tx, notify, .. } = *self;
            if notify {
                sqlx::query("SELECT pg_notify($1, '')")
                    .bind(EVENTS_CHANNEL)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }
}

/// Runs one step of a write transaction, failing it if the database does not answer within
/// [`WRITE_STEP_TIMEOUT`]: a server that hangs (frozen, or cut off without a reset) must not
/// hold the writer, and every caller waiting on it, forever. The transaction is then dropped,
/// which rolls it back; only a commit cut off this way has an unknown outcome (see
/// [`StoreTx::commit`] below).
async fn bounded<T>(step: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(WRITE_STEP_TIMEOUT, step).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Write(format!(
            "the database did not answer within {} s",
            WRITE_STEP_TIMEOUT.as_secs()
        ))),
    }
}

/// A query whose parameters are still being bound.
type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// Inserts one new `jobs` row, bound by [`bind_job_row`].
const INSERT_JOB: &str = "INSERT INTO jobs \
     (id, name, namespace, template, phase, submitted_at, idempotency_key, fingerprint, body) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// Inserts one new `events` row, bound by [`bind_event_row`].
const INSERT_EVENT: &str = "INSERT INTO events (seq, job_id, phase, previous_phase, at, reason, message, job) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Binds one new `jobs` row ([`INSERT_JOB`]): `body` is the JSON stored for `job`, which may
/// differ from `job` itself by its first event's cursor. Every insert of a job binds through
/// here, so the columns derived from the job (the scoped idempotency key) come out the same
/// whichever way it was accepted.
fn bind_job_row<'q>(query: PgQuery<'q>, job: &Job, fingerprint: &str, body: &str) -> PgQuery<'q> {
    query
        .bind(&job.id)
        .bind(&job.spec.name)
        .bind(&job.spec.namespace)
        .bind(&job.spec.template)
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

/// Binds one new `events` row ([`INSERT_EVENT`]): `snapshot` is the job's JSON with `seq` as
/// its `last_event_seq`.
fn bind_event_row<'q>(
    query: PgQuery<'q>,
    seq: i64,
    job_id: &str,
    transition: &Transition,
    at: DateTime<Utc>,
    snapshot: &str,
) -> PgQuery<'q> {
    query
        .bind(seq)
        .bind(job_id)
        .bind(transition.phase.as_str())
        .bind(transition.previous_phase.map(JobPhase::as_str))
        .bind(at)
        .bind(&transition.reason)
        .bind(&transition.message)
        .bind(snapshot)
}

/// The newest cursor handed out (`event_cursor`): not the newest event's, which retention
/// may have deleted; a cursor never goes back.
const NEWEST_CURSOR: &str = "SELECT last FROM event_cursor WHERE id = 1";

/// The retention horizon of the namespaces in `scope` (every namespace when `None`).
async fn horizon_of(conn: &mut sqlx::PgConnection, scope: Option<&[String]>) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(max(seq), 0)::bigint FROM retention_horizons \
         WHERE $1::text[] IS NULL OR namespace = ANY($1)",
    )
    .bind(scope)
    .fetch_one(conn)
    .await?)
}

/// A value bound to a statement.
#[derive(Clone, Debug)]
enum Bind {
    Int(i64),
    Text(Option<String>),
    Texts(Option<Vec<String>>),
    Time(DateTime<Utc>),
}

/// One statement and its parameters (`$1`, `$2`, … in order).
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

/// The statements one page of `list_jobs` runs, as in SQLite: `pages` read `(seq, id, body)`
/// rows newest first, to be merged, each with the statement that finds where it stops when
/// it has a budget; `counts` one number each, summed into `total_count`.
///
/// A name is checked per row of the arms, never searched through the trigram index: the
/// index returns matches in no order, so the newest of them are found only by reading every
/// one (a common name's hundreds of thousands), which no page may do. Within its budget, an
/// arm reads its index range newest first instead.
struct PageReads {
    pages: Vec<(Statement, Option<Statement>)>,
    counts: Vec<Statement>,
}

impl PageReads {
    fn new(plan: &ListPlan, before: i64, first: i64, budget: i64) -> Self {
        let phase_names = |phases: &Option<Vec<JobPhase>>| {
            phases
                .as_ref()
                .map(|p| p.iter().map(|p| p.as_str().to_owned()).collect())
        };
        // With a name checked per row, counted among each arm's newest candidates.
        let per_arm = (COUNT_CANDIDATES / plan.arms.len().max(1) as i64).max(1);
        let skip = plan.arm_budget(budget) - 1;
        let mut pages = Vec::with_capacity(plan.arms.len());
        let mut counts = Vec::new();
        for arm in &plan.arms {
            pages.push(if plan.checks() {
                (
                    arm_statement(arm, plan, ArmRead::BudgetedPage(skip), before, first + 1),
                    Some(arm_statement(arm, plan, ArmRead::Stop(skip), before, 1)),
                )
            } else {
                (arm_statement(arm, plan, ArmRead::Page, before, first + 1), None)
            });
            if plan.name_contains.is_some() {
                counts.push(arm_statement(arm, plan, ArmRead::Count, i64::MAX, per_arm));
            }
        }
        if plan.name_contains.is_none() {
            // Otherwise from the counts kept by namespace and phase.
            let (namespaces, phases) = plan.counted();
            counts.push(Statement::new(
                "SELECT coalesce(sum(n), 0)::bigint FROM job_counts \
                 WHERE ($1::text[] IS NULL OR namespace = ANY($1)) \
                 AND ($2::text[] IS NULL OR phase = ANY($2))",
                vec![Bind::Texts(namespaces), Bind::Texts(phase_names(&phases))],
            ));
        }
        Self { pages, counts }
    }
}

/// What [`arm_statement`] reads: a page of rows, a page that reads no lower than the
/// candidate it may skip so many past (its budget less one), that candidate (where such a
/// page stops), or the count of the name's matches among the arm's newest candidates.
#[derive(Clone, Copy)]
enum ArmRead {
    Page,
    BudgetedPage(i64),
    Stop(i64),
    Count,
}

/// One arm of a page (see [`ListPlan`]): `seq < before`, the arm's equalities (served by the
/// index whose leading columns they are, then `seq`: `jobs_by_namespace`, `jobs_by_phase`,
/// `jobs_by_namespace_phase_seq`, or the primary key), the per-row checks the plan has, newest
/// first, at most `limit`; a page reads `(seq, id, body)`, a count one number. Only the
/// parameters the statement uses are bound (PostgreSQL must know every parameter's type, and
/// a `$n IS NULL OR …` folded away for one call's values would not survive a generic plan).
fn arm_statement(arm: &Arm, plan: &ListPlan, read: ArmRead, before: i64, limit: i64) -> Statement {
    let mut binds = vec![Bind::Int(before), Bind::Int(limit)];
    let mut range = String::from("seq < $1");
    let mut param = |bind: Bind| {
        binds.push(bind);
        format!("${}", binds.len())
    };
    if let Some(namespace) = &arm.namespace {
        range += &format!(" AND namespace = {}", param(Bind::Text(Some(namespace.clone()))));
    }
    if let Some(phase) = arm.phase {
        range += &format!(
            " AND phase = {}",
            param(Bind::Text(Some(phase.as_str().to_owned())))
        );
    }
    // The budget-th candidate of the range, read from the same index (seq only).
    let stop = |skip: String, limit: &str| {
        format!("SELECT seq FROM jobs WHERE {range} ORDER BY seq DESC OFFSET {skip} LIMIT {limit}")
    };
    if let ArmRead::Stop(skip) = read {
        // `limit` is 1 here, bound as `$2` as in every other read.
        let skip = param(Bind::Int(skip));
        return Statement {
            sql: stop(skip, "$2"),
            binds,
        };
    }
    let mut conditions = range.clone();
    if let ArmRead::BudgetedPage(skip) = read {
        let skip = param(Bind::Int(skip));
        conditions += &format!(" AND seq >= coalesce(({}), 0)", stop(skip, "1"));
    }
    if let Some(namespaces) = &plan.namespaces {
        conditions += &format!(
            " AND namespace = ANY({})",
            param(Bind::Texts(Some(namespaces.clone())))
        );
    }
    let name = plan
        .name_contains
        .as_ref()
        .map(|text| format!("strpos(name, {}) > 0", param(Bind::Text(Some(text.clone())))));
    let sql = match (read, name) {
        // Any `limit` of the arm's jobs are candidates, not necessarily the newest: with no
        // order asked, PostgreSQL stops after `limit` rows however it reads them (asked for
        // the newest, it may sort every row of the arm when they are few).
        (ArmRead::Count, name) => format!(
            "SELECT count(*) FROM (SELECT name FROM jobs WHERE {conditions} LIMIT $2) AS candidates \
             WHERE {}",
            name.unwrap_or_else(|| "true".into())
        ),
        (_, None) => {
            format!("SELECT seq, id, body FROM jobs WHERE {conditions} ORDER BY seq DESC LIMIT $2")
        }
        (_, Some(name)) => {
            format!("SELECT seq, id, body FROM jobs WHERE {conditions} AND {name} ORDER BY seq DESC LIMIT $2")
        }
    };
    Statement { sql, binds }
}

/// The unfinished jobs, oldest first (from the partial index `jobs_unfinished`).
const UNFINISHED: &str =
    "SELECT id, body, launched FROM jobs WHERE phase IN ('PENDING', 'RUNNING') ORDER BY seq";

/// `jobStats`' counts by phase in the scope `$1` (or NULL): the counts kept by namespace
/// and phase, one row per pair, however many jobs.
const STATS_COUNTS: &str = "SELECT phase, sum(n)::bigint AS n FROM job_counts \
     WHERE ($1::text[] IS NULL OR namespace = ANY($1)) GROUP BY phase";

/// Submissions per bucket since `$3` (`$1` its Unix seconds, `$2` the bucket width) in the
/// scope `$4`.
const STATS_SUBMITTED: &str = "SELECT ((floor(extract(epoch FROM submitted_at))::bigint - $1) / $2) AS bucket, \
     count(*) AS n FROM jobs \
     WHERE submitted_at >= $3 AND ($4::text[] IS NULL OR namespace = ANY($4)) \
     GROUP BY bucket";

/// Completions per bucket and phase, as [`STATS_SUBMITTED`]: the event that entered a
/// terminal phase; the WHERE repeats the partial index's. The scope is checked per event, by
/// its job's key.
const STATS_FINISHED: &str = "SELECT ((floor(extract(epoch FROM at))::bigint - $1) / $2) AS bucket, phase, \
     count(*) AS n FROM events \
     WHERE phase IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND at >= $3 \
     AND (previous_phase IS NULL OR previous_phase <> phase) \
     AND ($4::text[] IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE jobs.id = events.job_id \
          AND jobs.namespace = ANY($4))) \
     GROUP BY bucket, phase";

/// Up to `$1` namespaces that have jobs, in the scope `$2`, sorted.
const NAMESPACES: &str = "SELECT DISTINCT namespace FROM job_counts WHERE n > 0 \
     AND ($2::text[] IS NULL OR namespace = ANY($2)) \
     ORDER BY namespace LIMIT $1";

/// A scope as a list of namespaces for `= ANY(…)`, or NULL for every namespace.
fn scope_list(scope: &Scope) -> Option<Vec<String>> {
    scope.list().map(|set| set.iter().cloned().collect())
}

/// An event row, or `None` (reported to `unreadable`) when its job snapshot does not decode.
fn decode_event(unreadable: &Unreadable, r: PgRow) -> Option<JobEvent> {
    let phase: String = r.get("phase");
    let previous: Option<String> = r.get("previous_phase");
    let seq: i64 = r.get("seq");
    let job_id: String = r.get("job_id");
    let job = unreadable.decode(RowKind::Event, &seq.to_string(), Some(&job_id), r.get("job"))?;
    Some(JobEvent {
        seq,
        job_id,
        phase: JobPhase::parse(&phase).unwrap_or(JobPhase::Pending),
        previous_phase: previous.as_deref().and_then(JobPhase::parse),
        at: r.get("at"),
        reason: r.get("reason"),
        message: r.get("message"),
        job: std::sync::Arc::new(job),
    })
}

/// One append of [`Store::append_logs`], inside its transaction (see `logs::plan`). The
/// archive's row is created if need be, then locked, before anything is read.
async fn append_log(
    tx: &mut Transaction<'static, Postgres>,
    append: &LogAppend,
    cap_bytes: i64,
) -> Result<LogAppended> {
    sqlx::query("INSERT INTO log_archives (job_id) VALUES ($1) ON CONFLICT (job_id) DO NOTHING")
        .bind(&append.job_id)
        .execute(&mut **tx)
        .await?;
    let row = sqlx::query("SELECT lines, bytes, truncated FROM log_archives WHERE job_id = $1 FOR UPDATE")
        .bind(&append.job_id)
        .fetch_one(&mut **tx)
        .await?;
    let archive = LogArchive {
        lines: row.get("lines"),
        bytes: row.get("bytes"),
        truncated: row.get::<i64, _>("truncated") != 0,
    };
    if let Some((expected, _)) = &append.position {
        let stored: Option<String> =
            sqlx::query_scalar("SELECT position FROM log_sources WHERE job_id = $1 AND source = $2")
                .bind(&append.job_id)
                .bind(&append.source)
                .fetch_optional(&mut **tx)
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
            "INSERT INTO log_chunks (job_id, first_line, line_count, bytes, data) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&append.job_id)
        .bind(archive.lines)
        .bind(lines.len() as i64)
        .bind(bytes)
        .bind(logs::encode(&lines)?)
        .execute(&mut **tx)
        .await?;
        sqlx::query("UPDATE log_archives SET lines = $2, bytes = $3, truncated = $4 WHERE job_id = $1")
            .bind(&append.job_id)
            .bind(archive.lines + lines.len() as i64)
            .bind(archive.bytes + bytes)
            .bind(i64::from(outcome == LogAppended::Truncated))
            .execute(&mut **tx)
            .await?;
    }
    if let Some((_, position)) = &append.position {
        sqlx::query(
            "INSERT INTO log_sources (job_id, source, position) VALUES ($1, $2, $3) \
             ON CONFLICT (job_id, source) DO UPDATE SET position = excluded.position",
        )
        .bind(&append.job_id)
        .bind(&append.source)
        .bind(position)
        .execute(&mut **tx)
        .await?;
    }
    Ok(outcome)
}
