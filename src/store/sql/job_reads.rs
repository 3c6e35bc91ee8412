//! Reads of jobs both backends share: one job, a page of `list_jobs` (the statements come
//! from the backend, which knows its indexes: [`PageReads`]; running them in one snapshot and
//! merging the arms is shared), the plans of those reads, recovery's unfinished jobs and the
//! pending cancellations.
//!
//! It must not write, nor build a page's statements: each backend's planner-facing SQL is its
//! own.

use chrono::{DateTime, Utc};

use super::dialect::{Bind, Columns as _, Dialect, List, sql, sql_text};
use super::{Backend, event_reads, snapshot};
use crate::model::{Job, JobFilter, Scope, ShardSet};
use crate::store::unreadable::{decode_job, read_job};
use crate::store::{ArmRows, JobPage, ListPlan, PlannedRead, Recoverable, Result, merge_arms};

/// One statement built at run time and its parameters (`$1`, `$2`, … in order).
pub(in crate::store) struct Statement {
    pub(in crate::store) sql: String,
    pub(in crate::store) binds: Vec<Bind>,
}

impl Statement {
    pub(in crate::store) fn new(sql: &str, binds: Vec<Bind>) -> Self {
        Self {
            sql: sql.to_owned(),
            binds,
        }
    }

    fn query<D: Dialect>(self) -> super::dialect::Sql<D> {
        self.binds
            .into_iter()
            .fold(sql::<D>(sqlx::AssertSqlSafe(self.sql)), |query, bind| {
                query.bind(bind)
            })
    }
}

/// The statements one page of `list_jobs` runs: `pages` read `(seq, id, body)` rows newest
/// first, to be merged; `counts` read one number each, summed into `total_count`. Built once
/// per page, so that `query_plans` explains exactly what `list_jobs` runs.
pub(in crate::store) struct PageReads {
    pub(in crate::store) pages: Vec<PageRead>,
    pub(in crate::store) counts: Vec<Statement>,
}

/// One read of a page's rows; with a budget (rows checked one by one), `stop` finds where
/// the read stops: the budget-th candidate, none when there are fewer.
pub(in crate::store) struct PageRead {
    pub(in crate::store) page: Statement,
    pub(in crate::store) stop: Option<Statement>,
}

pub(super) async fn get_job<B: Backend>(store: &B, id: &str) -> Result<Option<Job>> {
    let mut conn = store.pool().acquire().await?;
    let body: Option<String> = sql::<B::Db>("SELECT body FROM jobs WHERE id = $1")
        .bind(id)
        .scalar_optional(&mut *conn)
        .await?;
    body.map(|body| read_job(store.unreadable_rows(), id, &body))
        .transpose()
}

/// Every arm and the count are read in one snapshot.
pub(super) async fn list_jobs<B: Backend>(
    store: &B,
    filter: &JobFilter,
    scope: &Scope,
    first: i64,
    after: Option<i64>,
    budget: i64,
) -> Result<JobPage> {
    let Some(plan) = ListPlan::new(filter, scope) else {
        return Ok(ListPlan::nothing());
    };
    let reads = B::page_reads(&plan, after.unwrap_or(i64::MAX), first, budget);
    let mut tx = snapshot(store.pool()).await?;
    let mut arms = Vec::with_capacity(reads.pages.len());
    for read in reads.pages {
        let rows: Vec<(i64, (String, String))> = read
            .page
            .query::<B::Db>()
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| (r.col(0), (r.col(1), r.col(2))))
            .collect();
        // Fewer rows than asked: the read either ran out of candidates or of budget; the
        // budget-th candidate, if there is one, is where it stopped.
        let stopped_at = match read.stop {
            Some(stop) if (rows.len() as i64) <= first => {
                stop.query::<B::Db>().scalar_optional(&mut *tx).await?
            }
            _ => None,
        };
        arms.push(ArmRows { rows, stopped_at });
    }
    let mut total_count = 0;
    for statement in reads.counts {
        total_count += statement.query::<B::Db>().scalar::<i64>(&mut *tx).await?;
    }
    tx.commit().await?;
    let unreadable = store.unreadable_rows();
    Ok(merge_arms(arms, first, total_count, |(id, body)| {
        decode_job(unreadable, &id, &body)
    }))
}

/// Each statement `read` runs, as text, each followed by the database's plan of it.
pub(super) async fn query_plans<B: Backend>(store: &B, read: PlannedRead<'_>) -> Result<Vec<String>> {
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
                let reads = B::page_reads(&plan, after.unwrap_or(i64::MAX), first, budget);
                reads
                    .pages
                    .into_iter()
                    .flat_map(|read| std::iter::once(read.page).chain(read.stop))
                    .chain(reads.counts)
                    .collect()
            }
        },
        PlannedRead::UnfinishedJobs => vec![Statement::new(B::UNFINISHED, vec![])],
        PlannedRead::Stats { scope } => {
            // The dashboard's window: the last hour in minutes.
            let scope = Bind::List(List::of_scope(scope));
            let since = Utc::now().timestamp() - 3600;
            let since_at = Bind::Time(DateTime::from_timestamp(since, 0).unwrap_or(DateTime::UNIX_EPOCH));
            let [counts, submitted, finished] = event_reads::stats_sql::<B::Db>();
            vec![
                Statement::new(counts, vec![scope.clone()]),
                Statement::new(
                    submitted,
                    vec![Bind::Int(since), Bind::Int(60), since_at.clone(), scope.clone()],
                ),
                Statement::new(finished, vec![Bind::Int(since), Bind::Int(60), since_at, scope]),
            ]
        }
        PlannedRead::Namespaces { scope } => vec![Statement::new(
            event_reads::namespaces_sql::<B::Db>(),
            vec![Bind::Int(1_000), Bind::List(List::of_scope(scope))],
        )],
    };
    let mut conn = store.pool().acquire().await?;
    let mut plans = Vec::with_capacity(statements.len());
    for statement in statements {
        let text = statement.sql.clone();
        let explain = Statement {
            sql: format!("{} {}", <B::Db as Dialect>::EXPLAIN, statement.sql),
            binds: statement.binds,
        };
        let rows = explain.query::<B::Db>().fetch_all(&mut *conn).await?;
        let steps: Vec<String> = rows
            .iter()
            .map(|r| r.col(<B::Db as Dialect>::EXPLAIN_STEP))
            .collect();
        plans.push(format!("{text}\n  {}", steps.join("\n  ")));
    }
    Ok(plans)
}

pub(super) async fn unfinished_jobs<B: Backend>(store: &B) -> Result<Vec<Recoverable>> {
    let mut conn = store.pool().acquire().await?;
    // Row by row: all the rows' bodies at once would double the memory a restart with
    // many unfinished jobs needs, and the allocator keeps most of that peak afterwards.
    let mut rows = sql::<B::Db>(B::UNFINISHED).fetch(&mut *conn);
    let mut jobs = Vec::new();
    while let Some(r) = futures::TryStreamExt::try_next(&mut rows).await? {
        // A job that cannot be read is left where it is, and reported: every other job
        // is recovered.
        let (id, body): (String, String) = (r.col("id"), r.col("body"));
        let Some(job) = decode_job(store.unreadable_rows(), &id, &body) else {
            continue;
        };
        jobs.push(Recoverable {
            job,
            // -1 is held for its dependencies: never handed to the executor.
            launched: r.col::<i16>("launched") == 1,
        });
    }
    Ok(jobs)
}

pub(super) async fn pending_cancellations<B: Backend>(
    store: &B,
    limit: i64,
    shards: Option<ShardSet>,
) -> Result<Vec<Job>> {
    let text = sql_text!(
        B::Db,
        "SELECT j.id, j.body FROM pending_cancellations c JOIN jobs j ON j.id = c.job_id \
         WHERE (({} >> {}) & 1) = 1 ORDER BY c.requested_at, c.job_id LIMIT $1",
        <B::Db as Dialect>::bigint("$2"),
        <B::Db as Dialect>::SHARD_OF_ID,
    );
    let mut conn = store.pool().acquire().await?;
    let rows = sql::<B::Db>(text)
        .bind(limit)
        .bind(i64::from(shards.unwrap_or(ShardSet::ALL).mask()))
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            decode_job(
                store.unreadable_rows(),
                &r.col::<String>("id"),
                &r.col::<String>("body"),
            )
        })
        .collect())
}
