//! The durable store: what the service needs of it ([`Store`] and its write transaction
//! [`StoreTx`]), and its implementations: SQLite, the embedded default
//! ([`sqlite::SqliteStore`]), and PostgreSQL, for replicas sharing one database
//! ([`postgres::PostgresStore`]). Both are one SQL implementation (`sql/`) over what each
//! database spells differently; each backend keeps only what is its own.
//!
//! A store owns its schema, its connections and every query; callers see only the model's
//! types and the shapes below. Writes go through one [`StoreTx`] for a batch of changes, so
//! that a job and its event land together or not at all. A store knows nothing of GraphQL,
//! executors or broadcasting: the service decides what to write and when to tell anyone.
//!
//! The contract every implementation keeps (the service relies on it):
//! - a [`StoreTx::commit`] that returned `Ok` is durable; nothing else is, and a transaction
//!   dropped without a successful commit changed nothing;
//! - event cursors (`seq`) grow with commit order and are never reused, so a subscriber that
//!   resumes after a cursor misses nothing;
//! - a reader that has read events up to a cursor never later finds an event below it, even
//!   with several processes writing (cursor order is commit order);
//! - reads never block on the writer for long, and a failed write leaves the store usable by
//!   the next transaction once the fault clears;
//! - retention ([`Store::expire_jobs`]) deletes finished jobs with everything of theirs and
//!   raises their namespaces' *retention horizons* (the newest cursor it deleted there) in
//!   the same transaction; a replay of a scope after a cursor below the scope's horizon
//!   answers [`StoreError::CursorExpired`] instead of silently skipping what was deleted.
//!
//! The service holds an `Arc<dyn Store>` and does not know which backend it has; what differs
//! for replicas (other processes commit too) it learns from [`Store::commit_wakeups`].
//!
//! No read a page, a count or a restart makes may grow with the number of jobs stored: pages
//! are keyset pages over indexes in `seq` order ([`ListPlan`]) that look at a bounded number
//! of candidate rows whatever the filter (a page may then be short, and says where the next
//! goes on: [`JobPage::resume_after`]), counts are kept per namespace and phase as jobs
//! change, and [`Store::query_plans`] shows each read's plan, which the store's tests check.

pub mod log_chunks;
pub mod owner_scopes;
pub mod postgres;
mod schedule_rows;
mod sql;
pub mod sqlite;
pub mod unreadable;
mod webhooks;

use std::path::PathBuf;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::model::{
    Job, JobEvent, JobFilter, JobPhase, LogArchive, LogLine, LogRange, Scope, ShardSet, Transition,
};

pub use log_chunks::{LogAppend, LogAppended};

pub use postgres::PostgresStore;
pub use schedule_rows::{NotInserted, ScheduleStore};
pub use sqlite::SqliteStore;
pub use unreadable::{RowKind, Unreadable, UnreadableRow};
pub use webhooks::{Webhook, WebhookFailure};

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
    /// A value could not be encoded as JSON to be stored.
    #[error("encoding a value to store: {0}")]
    Encode(#[from] serde_json::Error),
    /// One stored row cannot be decoded (listed in [`Store::unreadable`]); every other row
    /// is served.
    #[error("stored {} {key} cannot be read: {reason}", kind.as_str())]
    Unreadable {
        kind: RowKind,
        key: String,
        reason: String,
    },
    /// A write failed (its cause, as text, for every caller of the batch).
    #[error("writing to the store failed: {0}")]
    Write(String),
    /// The database file is not the one we opened, or not whole: writing would be lost.
    #[error("{0}")]
    Files(String),
    /// Events after `after` were deleted by retention: a replay from there would have gaps.
    /// `oldest` is the oldest cursor a replay can start after.
    #[error(
        "events after cursor {after} were deleted by retention; the oldest cursor to resume after is {oldest}"
    )]
    CursorExpired { after: i64, oldest: i64 },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How hard a commit waits for the disk. `Full` survives power loss; `Normal` (in WAL mode)
/// survives a crash of jobgate, kill -9 included, but may lose the last commits on power loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    Full,
    Normal,
}

/// A page of jobs, newest first.
#[derive(Debug)]
pub struct JobPage {
    /// Each job with its cursor (its row's sequence number).
    pub jobs: Vec<(i64, Job)>,
    pub has_next_page: bool,
    /// Where the next page starts (its `after`) when the page stopped at its scan budget
    /// before finding `first` jobs: every job at or above it was looked at. `None`: the next
    /// page starts after the page's last job. Such a page may hold fewer jobs than asked, or
    /// none, and `has_next_page` is then true.
    pub resume_after: Option<i64>,
    /// How many jobs match: exact without a name filter (read from the counts the store
    /// keeps by namespace and phase, never by counting rows); with one, a lower bound (see
    /// [`COUNT_CANDIDATES`]).
    pub total_count: i64,
}

impl JobPage {
    /// A page of at most `first` jobs from `rows`, which a backend read with one row more
    /// than asked (`LIMIT first + 1`): that extra row only says there is a next page.
    pub fn of(mut rows: Vec<(i64, Job)>, first: i64, total_count: i64) -> Self {
        let has_next_page = rows.len() as i64 > first;
        rows.truncate(first.max(0) as usize);
        Self {
            jobs: rows,
            has_next_page,
            resume_after: None,
            total_count,
        }
    }

    /// The cursor the next page starts after: where the scan stopped, or the last job's.
    pub fn end_cursor(&self) -> Option<i64> {
        self.resume_after
            .or_else(|| self.jobs.last().map(|(seq, _)| *seq))
    }

    fn empty() -> Self {
        Self::of(Vec::new(), 0, 0)
    }
}

/// With a name filter, `total_count` counts matches among at most this many candidate jobs
/// (the newest ones): exact below it, a lower bound above it. Counting every match of a
/// substring would read every job that has it, which a page must not do.
pub const COUNT_CANDIDATES: i64 = 5_000;

/// The most candidate rows one page of [`Store::list_jobs`] looks at by default (see
/// [`ListPlan`]): a filter that few of the rows read match (a name with a namespace none of
/// its jobs are in, say) stops there with a short page, or an empty one, that says where to go
/// on, instead of reading every row the other filters select.
pub const SCAN_BUDGET: i64 = 5_000;

/// Text this long or longer is searched for through the stores' trigram indexes; shorter
/// text has no trigram and is matched while reading the jobs the other filters select.
pub const INDEXED_NAME_CHARS: usize = 3;

/// The most index ranges one page merges (see [`ListPlan`]): beyond it, the namespaces of a
/// wide scope are checked per row instead of each getting ranges of their own.
const MAX_ARMS: usize = 64;

/// One index range a page of jobs is read from, newest first: jobs with this namespace
/// and/or phase (each `None`: any), by `seq` (the order of every index the stores keep for
/// it), so that reading a page stops after `first + 1` rows of each range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arm {
    pub namespace: Option<String>,
    pub phase: Option<JobPhase>,
}

/// How a backend reads one page of `list_jobs` without reading anything in proportion to
/// the number of jobs stored: keyset pagination (`seq < after`) over indexes ordered by `seq`,
/// and a budget of candidate rows per page.
///
/// The filter and the scope become equalities on namespace and phase; each combination of
/// them is one [`Arm`], read with `ORDER BY seq DESC LIMIT first + 1` from the index whose
/// leading columns are those equalities, and the arms' rows are merged newest first
/// ([`merge_arms`]). What no index of an arm serves is checked per row: a name, the
/// namespaces of a scope too wide for arms of their own. A backend with a name index may read
/// a name of [`INDEXED_NAME_CHARS`] or more from it instead ([`ListPlan::search`]), which also
/// returns jobs newest first; namespace and phase are then checked per match.
///
/// **The budget.** Where rows are checked, a read looks at no more than its share of the
/// page's budget of candidates (the newest below the cursor), however few of them match:
/// otherwise a filter that matches nothing would read every candidate (every job with the
/// name, say). A read that ran out of budget before finding `first + 1` rows says where it
/// stopped, and the page ends there ([`JobPage::resume_after`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPlan {
    pub arms: Vec<Arm>,
    /// Namespaces checked per row (a scope too wide for arms of its own); `None`: any.
    pub namespaces: Option<Vec<String>>,
    /// Text the name must contain, checked per row of the arms.
    pub name_contains: Option<String>,
    /// A name to read from a name index instead of the arms, for a backend that has one.
    pub search: Option<Search>,
}

/// A page of a name search (see [`ListPlan::search`]): the name index's matches of `text`,
/// newest first, each checked for the namespaces and phases allowed (`None`: any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Search {
    pub text: String,
    pub namespaces: Option<Vec<String>>,
    pub phases: Option<Vec<JobPhase>>,
}

impl Search {
    /// Whether matches are checked per row, so that the read needs a budget.
    pub fn checks(&self) -> bool {
        self.namespaces.is_some() || self.phases.is_some()
    }
}

impl ListPlan {
    /// The plan for `filter` in `scope`, or `None` when nothing can match (a namespace
    /// outside the scope, an empty scope or phase list).
    pub fn new(filter: &JobFilter, scope: &Scope) -> Option<Self> {
        let namespaces: Option<Vec<String>> = match (&filter.namespace, scope.list()) {
            (Some(ns), _) if !scope.allows(ns) => return None,
            (Some(ns), _) => Some(vec![ns.clone()]),
            (None, Some(set)) => Some(set.iter().cloned().collect()),
            (None, None) => None,
        };
        let phases: Option<Vec<JobPhase>> = filter.phases.as_ref().map(|p| {
            JobPhase::ALL
                .into_iter()
                .filter(|phase| p.contains(phase))
                .collect()
        });
        if namespaces.as_ref().is_some_and(Vec::is_empty) || phases.as_ref().is_some_and(Vec::is_empty) {
            return None;
        }
        let name = filter.name_contains.clone();
        let search = name
            .as_ref()
            .filter(|t| t.chars().count() >= INDEXED_NAME_CHARS)
            .map(|text| Search {
                text: text.clone(),
                namespaces: namespaces.clone(),
                phases: phases.clone(),
            });
        let ns_arms: Vec<Option<String>> = match &namespaces {
            Some(list) => list.iter().cloned().map(Some).collect(),
            None => vec![None],
        };
        let phase_arms: Vec<Option<JobPhase>> = match &phases {
            Some(list) => list.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        let (ns_arms, checked) = if ns_arms.len() * phase_arms.len() > MAX_ARMS {
            // A scope of many namespaces: one range per phase (or the whole order), each
            // row's namespace checked.
            (vec![None], namespaces)
        } else {
            (ns_arms, None)
        };
        let arms = ns_arms
            .iter()
            .flat_map(|namespace| {
                phase_arms.iter().map(move |phase| Arm {
                    namespace: namespace.clone(),
                    phase: *phase,
                })
            })
            .collect();
        Some(Self {
            arms,
            namespaces: checked,
            name_contains: name,
            search,
        })
    }

    /// Whether the arms' rows are checked (a name, the namespaces of a wide scope), so that
    /// each arm's read needs a budget.
    pub fn checks(&self) -> bool {
        self.namespaces.is_some() || self.name_contains.is_some()
    }

    /// Each arm's share of a page's `budget` of candidates (at least one).
    pub fn arm_budget(&self, budget: i64) -> i64 {
        (budget / self.arms.len().max(1) as i64).max(1)
    }

    /// The page when the plan is `None`.
    pub fn nothing() -> JobPage {
        JobPage::empty()
    }

    /// The namespaces and phases (each `None`: any) whose kept counts add up to the jobs
    /// matching, when no name is checked.
    pub fn counted(&self) -> (Option<Vec<String>>, Option<Vec<JobPhase>>) {
        let phases = self.arms.iter().map(|a| a.phase).collect::<Option<Vec<_>>>();
        let namespaces = match &self.namespaces {
            Some(list) => Some(list.clone()),
            None => self
                .arms
                .iter()
                .map(|a| a.namespace.clone())
                .collect::<Option<std::collections::BTreeSet<_>>>()
                .map(|set| set.into_iter().collect()),
        };
        let phases = phases.map(|all| {
            let mut unique = Vec::with_capacity(all.len());
            for phase in all {
                if !unique.contains(&phase) {
                    unique.push(phase);
                }
            }
            unique
        });
        (namespaces, phases)
    }
}

/// A read whose statements [`Store::query_plans`] explains.
#[derive(Clone, Copy, Debug)]
pub enum PlannedRead<'a> {
    /// One page of [`Store::list_jobs`].
    ListJobs {
        filter: &'a JobFilter,
        scope: &'a Scope,
        first: i64,
        after: Option<i64>,
        budget: i64,
    },
    /// [`Store::unfinished_jobs`], at start.
    UnfinishedJobs,
    /// [`Store::stats`].
    Stats { scope: &'a Scope },
    /// [`Store::namespaces`].
    Namespaces { scope: &'a Scope },
}

/// What one arm of a page read (see [`ListPlan`]): up to `first + 1` rows newest first,
/// and, when it ran out of budget before finding them, the lowest cursor it looked at (every
/// candidate at or above it was looked at, none below).
#[derive(Debug)]
pub struct ArmRows<T> {
    pub rows: Vec<(i64, T)>,
    pub stopped_at: Option<i64>,
}

/// A page of `first` from several arms' reads (see [`ArmRows`]): the newest rows, and where
/// the next page starts when a read stopped at its budget.
///
/// Each arm has seen everything down to a cursor: its last row when it found `first + 1`,
/// where it stopped when its budget ran out, everything when it read all it had. Only rows at
/// or above the highest of those are certain to be the newest, so the page holds those; if
/// they are fewer than `first + 1`, an arm stopped at that cursor, and the next page starts
/// after it: nothing is skipped and nothing repeated. Arms are disjoint (different namespace
/// or phase), but a job whose phase changed between two reads could be read twice; backends
/// read every arm in one snapshot, and a duplicate `seq` is dropped anyway.
pub fn merge_arms<T>(
    arms: Vec<ArmRows<T>>,
    first: i64,
    total_count: i64,
    decode: impl Fn(T) -> Option<Job>,
) -> JobPage {
    let want = (first + 1).max(0) as usize;
    let seen_down_to = arms
        .iter()
        .filter_map(|arm| {
            if arm.rows.len() >= want {
                arm.rows.get(want.saturating_sub(1)).map(|r| r.0)
            } else {
                arm.stopped_at
            }
        })
        .max();
    let mut rows: Vec<(i64, T)> = arms.into_iter().flat_map(|arm| arm.rows).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    rows.dedup_by_key(|r| r.0);
    if let Some(floor) = seen_down_to {
        rows.retain(|r| r.0 >= floor);
    }
    rows.truncate(want);
    let full = rows.len() >= want;
    let has_next_page = rows.len() as i64 > first;
    rows.truncate(first.max(0) as usize);
    let last_read = rows.last().map(|r| r.0);
    // A row that cannot be decoded is left out (and reported by `decode`); the page goes
    // on after it all the same.
    let jobs: Vec<(i64, Job)> = rows
        .into_iter()
        .filter_map(|(seq, row)| Some((seq, decode(row)?)))
        .collect();
    let mut page = JobPage {
        resume_after: None,
        has_next_page,
        jobs,
        total_count,
    };
    if page.jobs.last().map(|j| j.0) != last_read {
        page.resume_after = last_read;
    }
    if !full && let Some(floor) = seen_down_to {
        page.has_next_page = true;
        page.resume_after = Some(floor);
    }
    page
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

/// An accepted job found by its idempotency key: its id and its spec's fingerprint.
#[derive(Debug)]
pub struct KeyedJob {
    pub id: String,
    pub fingerprint: String,
}

/// The stored form of an idempotency key: its submitter, a unit separator, the key (see
/// migrations/sqlite/0004_idempotency_per_submitter.sql).
pub fn scoped_key(submitter: Option<&str>, key: &str) -> String {
    format!("{}\u{1f}{key}", submitter.unwrap_or_default())
}

/// Which finished jobs one retention rule expires: those that finished before `before`, in
/// the namespaces it covers.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpiryRule {
    pub before: DateTime<Utc>,
    pub namespaces: RuleNamespaces,
}

/// The namespaces an [`ExpiryRule`] covers.
#[derive(Clone, Debug, PartialEq)]
pub enum RuleNamespaces {
    /// One namespace (a per-namespace override).
    Only(String),
    /// Every namespace but these (the default rule; the overrides have their own).
    AllBut(Vec<String>),
}

impl RuleNamespaces {
    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Self::Only(only) => only == namespace,
            Self::AllBut(others) => !others.iter().any(|o| o == namespace),
        }
    }
}

/// Where a retention scan stands: the finishing event last looked at (its time and cursor).
/// Scans go in (time, cursor) order, so each finished job is looked at once per position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpiryPosition {
    pub at: DateTime<Utc>,
    pub seq: i64,
}

/// What one [`Store::expire_jobs`] batch did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExpiredBatch {
    /// Finished jobs looked at (those of namespaces the rule does not cover included).
    pub scanned: usize,
    /// Jobs deleted, with their events.
    pub jobs: u64,
    /// The deleted jobs' ids.
    pub ids: Vec<String>,
    pub events: u64,
    /// Where the next batch starts; `None` when nothing was scanned.
    pub position: Option<ExpiryPosition>,
    /// The newest cursor the batch deleted (0 when it deleted nothing).
    pub newest_deleted: i64,
}

/// The durable store, as the service uses it. Shared as `Arc<dyn Store>`.
#[async_trait]
pub trait Store: ScheduleStore + Send + Sync + std::fmt::Debug + 'static {
    /// Whether the database answers a read now.
    async fn ping(&self) -> bool;

    /// Closes every connection; used once, at shutdown, after the last write.
    async fn close(&self);

    /// The rows this store has found it cannot decode (see [`unreadable`]): reads of many
    /// rows leave them out, reads of one answer [`StoreError::Unreadable`].
    fn unreadable(&self) -> &Unreadable;

    /// A cheap check (no query) that writes would land where they will be read again; the
    /// writer asks before every commit and on a timer. SQLite checks that its database file
    /// was not deleted, replaced or truncated; a server database has nothing to check here.
    fn check_storage(&self) -> Result<()>;

    /// Wake-ups for events (job or schedule events) other processes commit to this store
    /// (replicas sharing one database), or `None` when this process is its only writer. With `Some`, the service
    /// reads job state inside its write transactions rather than from its cache, and learns
    /// every change, its own included, by reading the event log after each wake-up. A
    /// wake-up may be lost (a reconnection): callers also read on a timer.
    async fn commit_wakeups(&self) -> Result<Option<futures::stream::BoxStream<'static, ()>>>;

    /// Claims, for as long as the store is open, the right to run jobs in this process (the
    /// local executor's runs live in one process, which alone can stop or adopt them);
    /// `false` when another process holds it.
    async fn claim_sole_runner(&self) -> Result<bool>;

    /// Starts the write transaction. One writer at a time (across processes too); callers
    /// batch.
    async fn begin(&self) -> Result<Box<dyn StoreTx>>;

    /// A write that proves the store takes commits again (after a full disk, say); it needs
    /// room like any commit.
    async fn probe_write(&self) -> Result<()>;

    /// The job, whatever its namespace: the service answers callers only after checking
    /// their scope against it (one job needs no SQL filter to be checked).
    async fn get_job(&self, id: &str) -> Result<Option<Job>>;

    /// Jobs in `scope` matching `filter`, newest first, after the cursor `after` (a job's
    /// sequence); `total_count` counts only those too (see [`JobPage::total_count`]). A page
    /// reads in proportion to its size, not to the jobs stored ([`ListPlan`]), all in one
    /// snapshot, and looks at no more than about `budget` candidate rows: it may then hold
    /// fewer than `first` jobs, or none, and say where the next one starts
    /// ([`JobPage::resume_after`]).
    async fn list_jobs(
        &self,
        filter: &JobFilter,
        scope: &Scope,
        first: i64,
        after: Option<i64>,
        budget: i64,
    ) -> Result<JobPage>;

    /// The database's plan for each statement `read` runs, as text, each after its SQL:
    /// what tests check (an index read in the order asked; no scan of every job, no sort), and
    /// what an operator may look at. Runs nothing but `EXPLAIN`.
    async fn query_plans(&self, read: PlannedRead<'_>) -> Result<Vec<String>>;

    /// Up to `limit` events of jobs in `scope` after the cursor `after`, oldest first; only
    /// `job_id`'s if given. Events of other namespaces are never read, so a page is full
    /// unless nothing more of `scope` follows. Without `job_id`, [`StoreError::CursorExpired`]
    /// when retention deleted events of `scope` after `after` (checked in the snapshot the
    /// page is read from). One job's events go with the job, so a job's own replay needs no
    /// such check.
    async fn events_after(
        &self,
        after: i64,
        limit: i64,
        job_id: Option<&str>,
        scope: &Scope,
    ) -> Result<Vec<JobEvent>>;

    /// Distinct namespaces of jobs in `scope`, sorted, at most `limit` (read from the counts
    /// by namespace and phase, not from the jobs).
    async fn namespaces(&self, limit: i64, scope: &Scope) -> Result<Vec<String>>;

    /// Counts by phase, and submissions and completions in the last `buckets` buckets of
    /// `bucket_seconds` (aligned to the Unix epoch, the last one holding now), with the newest
    /// event's cursor, as one snapshot: it holds each job's events up to the cursor and none
    /// after. The counts come from the counts kept by namespace and phase; the activity reads
    /// the jobs submitted and finished in the window only.
    async fn stats(&self, buckets: i64, bucket_seconds: i64, scope: &Scope) -> Result<StatsSnapshot>;

    /// The newest `limit` events of one job, oldest first; none when the job is outside
    /// `scope`.
    async fn job_history(&self, job_id: &str, scope: &Scope, limit: i64) -> Result<Vec<JobEvent>>;

    /// The newest event's cursor, 0 when there is none.
    async fn last_event_seq(&self) -> Result<i64>;

    /// Deletes, in one write transaction, up to `limit` finished jobs that `rule` expires
    /// among the next `limit` finished jobs after `from` in (finish time, cursor) order,
    /// with their events, archived output, dependency edges and pending cancellations, and
    /// raises each of
    /// their namespaces' retention horizon to the newest cursor deleted there. Unfinished
    /// jobs are never deleted.
    async fn expire_jobs(
        &self,
        rule: &ExpiryRule,
        from: Option<ExpiryPosition>,
        limit: i64,
    ) -> Result<ExpiredBatch>;

    /// The retention horizon of `scope`: the newest event cursor retention deleted in its
    /// namespaces (0 when none). A replay of `scope` after a cursor below it would have gaps.
    async fn retention_horizon(&self, scope: &Scope) -> Result<i64>;

    /// Every job that has not reached a terminal phase, oldest first.
    async fn unfinished_jobs(&self) -> Result<Vec<Recoverable>>;

    /// Cancelled jobs whose workload is still to be stopped, oldest request first; only those
    /// of `shards` when given (replicas stop the workloads of their own shards).
    async fn pending_cancellations(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>>;

    /// Jobs accepted but not yet handed to the executor (the launch outbox), oldest first.
    /// A store shared by replicas claims the jobs it returns for a while, so that another
    /// replica's launcher skips them until the claim expires. Only jobs of `shards` when
    /// given (replicas launch the jobs of their own shards).
    async fn unlaunched_jobs(&self, limit: i64, shards: Option<ShardSet>) -> Result<Vec<Job>>;

    /// Stores a new webhook endpoint (unclaimed).
    async fn insert_webhook(&self, webhook: &Webhook) -> Result<()>;

    /// One endpoint, whoever owns it.
    async fn webhook(&self, id: &str) -> Result<Option<Webhook>>;

    /// The endpoints `owner` created (every one when `None`), oldest first.
    async fn webhooks(&self, owner: Option<&str>) -> Result<Vec<Webhook>>;

    /// Deletes an endpoint; `false` when there was none.
    async fn delete_webhook(&self, id: &str) -> Result<bool>;

    /// Disables an endpoint for `reason` at `at` and gives up its claim: it is never claimed
    /// again, and no delivery outcome lands on it any more. `false` when there is none or it
    /// was already disabled (the first reason stays).
    async fn disable_webhook(&self, id: &str, reason: &str, at: i64) -> Result<bool>;

    /// Sets an endpoint's scope to `to` if it is still `from` (so that two narrowings at once
    /// cannot undo one another); `false` otherwise.
    async fn narrow_webhook_scope(&self, id: &str, from: &Scope, to: &Scope) -> Result<bool>;

    /// Sets an endpoint's cursor to `cursor`, clears its failures and unparks it, under a new
    /// revision (a delivery in flight then records nothing); `false` when there is none.
    async fn replay_webhook(&self, id: &str, cursor: i64) -> Result<bool>;

    /// Claims for `claimant` until `until` every unparked, enabled endpoint that is unclaimed, already
    /// its own, or whose claim expired before `now`, and returns the endpoints it now holds.
    /// One process at a time delivers an endpoint, across replicas sharing the database.
    async fn claim_webhooks(&self, claimant: &str, now: i64, until: i64) -> Result<Vec<Webhook>>;

    /// Gives up `claimant`'s claims (at shutdown), so that another process takes them at once.
    async fn release_webhooks(&self, claimant: &str) -> Result<()>;

    /// Records a delivery up to `cursor` (clearing failures; an attempt at `at`, or none when
    /// only events not matching the filter were passed over), if `claimant` still holds the
    /// endpoint at `revision`; `false` otherwise (deleted, replayed, taken over).
    async fn webhook_delivered(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        cursor: i64,
        at: Option<i64>,
    ) -> Result<bool>;

    /// Records a failed attempt (parking the endpoint and giving up the claim when
    /// `failure.next_attempt_at` is `None`), under the same condition as
    /// [`Store::webhook_delivered`].
    async fn webhook_failed(
        &self,
        id: &str,
        claimant: &str,
        revision: i64,
        failure: &WebhookFailure,
    ) -> Result<bool>;

    /// Appends each of `appends` at the end of its job's archive of output, in one
    /// transaction of its own (beside the job writer's, never inside one): each gets the next
    /// line cursors of its job, its source's position moves with it, and an archive that
    /// reaches `cap_bytes` (uncompressed) is closed with a marker line (see [`log_chunks`]). One
    /// outcome per append, in order. Writes only log tables.
    async fn append_logs(&self, appends: &[LogAppend], cap_bytes: i64) -> Result<Vec<LogAppended>>;

    /// What the archive holds of the job's output; `None` when nothing was ever archived.
    /// Callers check the job's scope first.
    async fn log_archive(&self, job_id: &str) -> Result<Option<LogArchive>>;

    /// Where `source`'s archived lines of the job end: the position its last append stored.
    async fn log_position(&self, job_id: &str, source: &str) -> Result<Option<String>>;

    /// Where `source`'s lines are in the job's archive (the cursors of its first and last
    /// line, kept with every append); `None` when it wrote none. Callers check the job's
    /// scope first.
    async fn log_range(&self, job_id: &str, source: &str) -> Result<Option<LogRange>>;

    /// The job's archived lines from the cursor `from` (a line's offset, from 0) on, oldest
    /// first: at most `max_lines`, and no more than `max_bytes` of text unless the first
    /// line alone is longer. Callers check the job's scope first.
    async fn log_lines(
        &self,
        job_id: &str,
        from: i64,
        max_lines: usize,
        max_bytes: usize,
    ) -> Result<Vec<(i64, LogLine)>>;
}

/// A newly accepted job for [`StoreTx::accept_jobs`], with its first event.
pub struct Accepted<'a> {
    pub job: &'a Job,
    pub fingerprint: &'a str,
    pub transition: &'a Transition,
    pub at: DateTime<Utc>,
}

/// One write transaction. Dropping it without a successful [`StoreTx::commit`] rolls
/// everything back.
#[async_trait]
pub trait StoreTx: Send {
    async fn get_job(&mut self, id: &str) -> Result<Option<Job>>;

    /// The job `submitter` submitted with idempotency key `key`: keys are per submitter, so
    /// one caller's key never finds (or reveals) another's job.
    async fn find_by_idempotency_key(
        &mut self,
        submitter: Option<&str>,
        key: &str,
    ) -> Result<Option<KeyedJob>>;

    /// Stores a newly accepted job, in the launch outbox.
    async fn insert_job(&mut self, job: &Job, fingerprint: &str) -> Result<()>;

    /// The stored jobs of several idempotency keys (each with its submitter), by stored key
    /// ([`scoped_key`]): [`StoreTx::find_by_idempotency_key`] for many keys at once.
    async fn find_by_idempotency_keys(
        &mut self,
        keys: &[(Option<&str>, &str)],
    ) -> Result<std::collections::HashMap<String, KeyedJob>> {
        let mut found = std::collections::HashMap::new();
        for (submitter, key) in keys {
            if let Some(job) = self.find_by_idempotency_key(*submitter, key).await? {
                found.insert(scoped_key(*submitter, key), job);
            }
        }
        Ok(found)
    }

    /// [`StoreTx::accept_job`] for several jobs, in order; returns their cursors. A backend
    /// writes them in as few statements as it can.
    async fn accept_jobs(&mut self, accepted: &[Accepted<'_>]) -> Result<Vec<i64>> {
        let mut seqs = Vec::with_capacity(accepted.len());
        for a in accepted {
            seqs.push(self.accept_job(a.job, a.fingerprint, a.transition, a.at).await?);
        }
        Ok(seqs)
    }

    /// Stores a newly accepted job, in the launch outbox, with its first event (`transition`,
    /// at `at`), and returns that event's cursor, which the stored job and its snapshot carry
    /// as `last_event_seq`: what [`StoreTx::insert_job`], [`StoreTx::append_event`] and
    /// [`StoreTx::save_job`] do together, in fewer statements (every submission takes it).
    async fn accept_job(
        &mut self,
        job: &Job,
        fingerprint: &str,
        transition: &Transition,
        at: DateTime<Utc>,
    ) -> Result<i64>;

    /// Appends the event for `transition` and returns its cursor. The job's
    /// `last_event_seq` must then be set and the job saved with [`StoreTx::save_job`].
    async fn append_event(&mut self, job: &Job, transition: &Transition, at: DateTime<Utc>) -> Result<i64>;

    async fn save_job(&mut self, job: &Job) -> Result<()>;

    /// How many jobs of `namespace` are PENDING or RUNNING, this transaction's own included.
    async fn active_in_namespace(&mut self, namespace: &str) -> Result<i64>;

    /// Holds a job out of the launch outbox until [`StoreTx::release`] (it waits for its
    /// dependencies), and records what it depends on.
    async fn hold(&mut self, id: &str, depends_on: &[String]) -> Result<()>;

    /// Records the jobs `id` depends on.
    async fn add_dependencies(&mut self, id: &str, depends_on: &[String]) -> Result<()>;

    /// Puts a held job into the launch outbox.
    async fn release(&mut self, id: &str) -> Result<()>;

    /// The jobs that depend on `id`.
    async fn dependents(&mut self, id: &str) -> Result<Vec<String>>;

    /// Records that the cancelled job's workload must be stopped, in the transaction that
    /// records the cancellation: it survives a restart until [`StoreTx::cancellation_done`].
    async fn request_cancellation(&mut self, id: &str, at: DateTime<Utc>) -> Result<()>;

    /// The cancelled job's workload is stopped.
    async fn cancellation_done(&mut self, id: &str) -> Result<()>;

    /// Takes the job out of the launch outbox: it was handed to the executor.
    async fn mark_launched(&mut self, id: &str) -> Result<()>;

    /// Commits. `Ok` means durable; on any error nothing was committed.
    async fn commit(self: Box<Self>) -> Result<()>;
}
