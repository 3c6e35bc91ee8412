//! The SQL store, written once for both databases: a backend ([`Backend`]: `SqliteStore`,
//! `PostgresStore`) supplies its connections, its write transaction, the statements that name
//! its own indexes and what it alone does; [`Store`] and [`StoreTx`](crate::store::StoreTx)
//! are implemented here, over it, with every statement the backends share. What the databases
//! spell differently is the [`dialect`].
//!
//! Modules by concept: `job_reads` (a job, pages of jobs and their plans, recovery,
//! cancellations), `schedule_store` (schedules and their event log), `event_reads` (the event log, `jobStats`, namespaces), `expiry`
//! (retention), `webhook_store`, `log_tables` (the archive of output), `write_tx` (the write
//! transaction and the time limit on its steps).
//!
//! It must not decide what to write (the service does), nor know what only one backend does:
//! SQLite's files and cursor allocation, PostgreSQL's notifications, claims and locks.

pub(crate) mod dialect;
mod event_reads;
mod expiry;
pub(super) mod job_reads;
mod log_tables;
mod schedule_store;
mod webhook_store;
pub(super) mod write_tx;

use async_trait::async_trait;
use futures::stream::BoxStream;

use self::dialect::{Dialect, sql};
use self::job_reads::PageReads;
use self::write_tx::WriteTx;
use super::{
    ExpiredBatch, ExpiryPosition, ExpiryRule, JobPage, ListPlan, LogAppend, LogAppended, PlannedRead,
    Recoverable, Result, StatsSnapshot, Store, StoreTx, Unreadable, Webhook, WebhookFailure,
};
use crate::model::{Job, JobEvent, JobFilter, LogArchive, LogLine, LogRange, Scope, ShardSet};

/// What a backend is made of; [`Store`] is written once over it. The methods named as
/// [`Store`]'s are that method, for this backend (their contract is there).
#[async_trait]
pub(super) trait Backend: Send + Sync + std::fmt::Debug + 'static {
    type Db: Dialect;
    type Tx: WriteTx<Db = Self::Db>;

    /// The newest cursor handed out: never the newest event's alone, which retention may
    /// have deleted (a cursor never goes back).
    const NEWEST_CURSOR: &'static str;

    /// Every unfinished job (`id`, `body`, `launched`), oldest first, from the partial index
    /// of unfinished jobs.
    const UNFINISHED: &'static str;

    /// The next finished jobs after a position, in (finish time, cursor) order: `$1` the
    /// rule's time, `$2` and `$3` the position's time and cursor, `$4` the limit; reads
    /// `seq`, `at`, `job_id`, `namespace`, walking the index of finishing events in order.
    const EXPIRY_SCAN: &'static str;

    /// The readers' connections.
    fn pool(&self) -> &sqlx::Pool<Self::Db>;

    fn unreadable_rows(&self) -> &Unreadable;

    async fn ping(&self) -> bool;
    async fn close(&self);
    fn check_storage(&self) -> Result<()>;
    async fn commit_wakeups(&self) -> Result<Option<BoxStream<'static, ()>>>;
    async fn claim_sole_runner(&self) -> Result<bool>;
    async fn unlaunched_jobs(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>>;

    /// The job writer's transaction: one writer at a time, across processes too.
    async fn begin_write(&self) -> Result<Self::Tx>;

    /// A small transaction beside the job writer's (webhooks' state, the archive of output).
    async fn begin_side(&self) -> Result<Self::Tx>;

    /// The statements of one page of `list_jobs` (see [`ListPlan`]), read from the indexes
    /// this backend keeps.
    fn page_reads(plan: &ListPlan, before: i64, first: i64, budget: i64) -> PageReads;
}

/// A read transaction in which every read sees one snapshot.
async fn snapshot<D: Dialect>(pool: &sqlx::Pool<D>) -> Result<sqlx::Transaction<'static, D>> {
    let mut tx = pool.begin().await?;
    if let Some(set) = D::SNAPSHOT {
        sql::<D>(set).execute(&mut tx).await?;
    }
    Ok(tx)
}

// Each method's contract is its doc in the trait.
#[async_trait]
impl<B: Backend> Store for B {
    async fn ping(&self) -> bool {
        Backend::ping(self).await
    }

    async fn close(&self) {
        Backend::close(self).await
    }

    fn unreadable(&self) -> &Unreadable {
        self.unreadable_rows()
    }

    fn check_storage(&self) -> Result<()> {
        Backend::check_storage(self)
    }

    async fn commit_wakeups(&self) -> Result<Option<BoxStream<'static, ()>>> {
        Backend::commit_wakeups(self).await
    }

    async fn claim_sole_runner(&self) -> Result<bool> {
        Backend::claim_sole_runner(self).await
    }

    async fn begin(&self) -> Result<Box<dyn StoreTx>> {
        Ok(Box::new(Backend::begin_write(self).await?))
    }

    /// Rewrites the one row of `store_probe`, so it needs room like any commit.
    async fn probe_write(&self) -> Result<()> {
        Backend::check_storage(self)?;
        let mut tx = Backend::begin_write(self).await?;
        let probe = sql::<B::Db>(
            "INSERT INTO store_probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
        )
        .bind(chrono::Utc::now());
        write_tx::bounded::<B::Db, _>(async { Ok(probe.execute(tx.conn()).await?) }).await?;
        Box::new(tx).commit().await
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>> {
        job_reads::get_job(self, id).await
    }

    async fn list_jobs(
        &self,
        filter: &JobFilter,
        scope: &Scope,
        first: i64,
        after: Option<i64>,
        budget: i64,
    ) -> Result<JobPage> {
        job_reads::list_jobs(self, filter, scope, first, after, budget).await
    }

    async fn query_plans(&self, read: PlannedRead<'_>) -> Result<Vec<String>> {
        job_reads::query_plans(self, read).await
    }

    async fn events_after(
        &self,
        after: i64,
        limit: i64,
        job_id: Option<&str>,
        scope: &Scope,
    ) -> Result<Vec<JobEvent>> {
        event_reads::events_after(self, after, limit, job_id, scope).await
    }

    async fn namespaces(&self, limit: i64, scope: &Scope) -> Result<Vec<String>> {
        event_reads::namespaces(self, limit, scope).await
    }

    async fn stats(&self, buckets: i64, bucket_seconds: i64, scope: &Scope) -> Result<StatsSnapshot> {
        event_reads::stats(self, buckets, bucket_seconds, scope).await
    }

    async fn job_history(&self, job_id: &str, scope: &Scope, limit: i64) -> Result<Vec<JobEvent>> {
        event_reads::job_history(self, job_id, scope, limit).await
    }

    async fn last_event_seq(&self) -> Result<i64> {
        let mut conn = self.pool().acquire().await?;
        Ok(sql::<B::Db>(B::NEWEST_CURSOR).scalar(&mut *conn).await?)
    }

    async fn expire_jobs(
        &self,
        rule: &ExpiryRule,
        from: Option<ExpiryPosition>,
        limit: i64,
    ) -> Result<ExpiredBatch> {
        expiry::expire_jobs(self, rule, from, limit).await
    }

    async fn retention_horizon(&self, scope: &Scope) -> Result<i64> {
        expiry::retention_horizon(self, scope).await
    }

    async fn unfinished_jobs(&self) -> Result<Vec<Recoverable>> {
        job_reads::unfinished_jobs(self).await
    }

    async fn pending_cancellations(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        job_reads::pending_cancellations(self, limit, shards).await
    }

    async fn unlaunched_jobs(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>> {
        Backend::unlaunched_jobs(self, limit, shards).await
    }

    async fn insert_webhook(&self, webhook: &Webhook) -> Result<()> {
        webhook_store::insert_webhook(self, webhook).await
    }

    async fn webhook(&self, id: &str) -> Result<Option<Webhook>> {
        webhook_store::webhook(self, id).await
    }

    async fn webhooks(&self, owner: Option<&str>) -> Result<Vec<Webhook>> {
        webhook_store::webhooks(self, owner).await
    }

    async fn delete_webhook(&self, id: &str) -> Result<bool> {
        webhook_store::delete_webhook(self, id).await
    }

    async fn disable_webhook(&self, id: &str, reason: &str, at: i64) -> Result<bool> {
        webhook_store::disable_webhook(self, id, reason, at).await
    }

    async fn narrow_webhook_scope(&self, id: &str, from: &Scope, to: &Scope) -> Result<bool> {
        webhook_store::narrow_webhook_scope(self, id, from, to).await
    }

    async fn replay_webhook(&self, id: &str, cursor: i64) -> Result<bool> {
        webhook_store::replay_webhook(self, id, cursor).await
    }

    async fn claim_webhooks(&self, claimant: &str, now: i64, until: i64) -> Result<Vec<Webhook>> {
        webhook_store::claim_webhooks(self, claimant, now, until).await
    }

    async fn release_webhooks(&self, claimant: &str) -> Result<()> {
        webhook_store::release_webhooks(self, claimant).await
    }

    async fn webhook_delivered(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        cursor: i64,
        at: Option<i64>,
    ) -> Result<bool> {
        webhook_store::webhook_delivered(self, id, claimant, revision, cursor, at).await
    }

    async fn webhook_failed(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        failure: &WebhookFailure,
    ) -> Result<bool> {
        webhook_store::webhook_failed(self, id, claimant, revision, failure).await
    }

    async fn append_logs(&self, appends: &[LogAppend], cap_bytes: i64) -> Result<Vec<LogAppended>> {
        log_tables::append_logs(self, appends, cap_bytes).await
    }

    async fn log_archive(&self, job_id: &str) -> Result<Option<LogArchive>> {
        log_tables::log_archive(self, job_id).await
    }

    async fn log_position(&self, job_id: &str, source: &str) -> Result<Option<String>> {
        log_tables::log_position(self, job_id, source).await
    }

    async fn log_range(&self, job_id: &str, source: &str) -> Result<Option<LogRange>> {
        log_tables::log_range(self, job_id, source).await
    }

    async fn log_lines(
        &self,
        job_id: &str,
        from: i64,
        max_lines: usize,
        max_bytes: usize,
    ) -> Result<Vec<(i64, LogLine)>> {
        log_tables::log_lines(self, job_id, from, max_lines, max_bytes).await
    }
}
