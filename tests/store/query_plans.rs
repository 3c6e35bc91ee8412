//! Query plans: no read a page, a count or a restart makes grows with the jobs stored. Each
//! backend's plans of every read, over a database filled with many jobs, use an index in order
//! and never sort.

use std::sync::Arc;

use jobgate::model::{JobFilter, JobPhase, Scope};
use jobgate::store::{Durability, PlannedRead, PostgresStore, SCAN_BUDGET, SqliteStore, Store};

use crate::common::postgres::Postgres;

/// Every combination of the filters the API offers (phases, namespace, name, scope) that
/// reads jobs, with the first page and a deep one.
fn planned_filters() -> Vec<(JobFilter, Scope)> {
    let mut cases = Vec::new();
    for phases in [
        None,
        Some(vec![JobPhase::Succeeded]),
        Some(vec![JobPhase::Pending, JobPhase::Running]),
    ] {
        for namespace in [None, Some("ns-3".to_owned())] {
            for name in [None, Some("ab".to_owned()), Some("etl-0004".to_owned())] {
                for scope in [Scope::All, Scope::namespaces(["ns-1", "ns-3"])] {
                    cases.push((
                        JobFilter {
                            phases: phases.clone(),
                            namespace: namespace.clone(),
                            name_contains: name.clone(),
                        },
                        scope,
                    ));
                }
            }
        }
    }
    cases
}

/// Every statement the reads of a page (first and deep), recovery, `jobStats` and
/// `namespaces` run, each with its plan.
async fn every_plan(store: &Arc<dyn Store>) -> Vec<(String, String)> {
    let mut plans = Vec::new();
    for (filter, scope) in planned_filters() {
        for after in [None, Some(20_000)] {
            let read = PlannedRead::ListJobs {
                filter: &filter,
                scope: &scope,
                first: 25,
                after,
                budget: SCAN_BUDGET,
            };
            for plan in store.query_plans(read).await.unwrap() {
                plans.push((format!("page of {filter:?} in {scope:?} after {after:?}"), plan));
            }
        }
    }
    let reads = [
        ("recovery", PlannedRead::UnfinishedJobs),
        ("jobStats", PlannedRead::Stats { scope: &Scope::All }),
        (
            "jobStats of two namespaces",
            PlannedRead::Stats {
                scope: &Scope::namespaces(["ns-1", "ns-3"]),
            },
        ),
        ("namespaces", PlannedRead::Namespaces { scope: &Scope::All }),
    ];
    for (what, read) in reads {
        for plan in store.query_plans(read).await.unwrap() {
            plans.push((what.to_owned(), plan));
        }
    }
    plans
}

/// Every plan of `plans`, one after another: where the plan tests look for the indexes used.
fn all_plans(plans: &[(String, String)]) -> String {
    plans
        .iter()
        .map(|(_, p)| p.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each of `indexes` (as the backend's plans name it) is read by some plan of `all`
/// ([`all_plans`]).
fn assert_plans_use(all: &str, indexes: &[&str]) {
    for index in indexes {
        assert!(all.contains(index), "no plan uses {index}:\n{all}");
    }
}

/// How many jobs the plan tests write straight into the database (with one event each), as
/// the benchmark makes its million: names `etl-NNNNNN`, mostly finished, one every 50 s until
/// now, with bodies of a real job's size (the planners weigh reading rows against sorting them
/// by their width), in the namespaces `ns-0`, `ns-2`, … `ns-8` but for a rare `ns-3` (one in
/// 500: where reading the whole order and skipping would cost most) and no `ns-1`.
const FILL_ROWS: i64 = 50_000;

#[tokio::test]
async fn sqlite_reads_use_an_index_in_order_and_never_sort() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path(), Durability::Normal).await.unwrap());
    {
        use sqlx::Connection as _;
        let mut db =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}", dir.path().join("jobgate.db").display()))
                .await
                .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {FILL_ROWS}) \
             INSERT INTO jobs (id, name, namespace, template, phase, submitted_at, fingerprint, launched, body) \
             SELECT 'job-' || i, printf('etl-%06d', i), \
                    CASE WHEN i % 500 = 7 THEN 'ns-3' ELSE 'ns-' || ((i % 5) * 2) END, 'container', \
                    CASE WHEN i % 5 = 1 THEN 'RUNNING' WHEN i % 51 = 0 THEN 'PENDING' \
                         WHEN i % 7 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END, \
                    strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || (({FILL_ROWS} - i) * 50) || ' seconds'), \
                    'f', 1, hex(zeroblob(400)) FROM n"
        )))
        .execute(&mut db)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO events (seq, job_id, phase, at, job) \
             SELECT seq, id, phase, submitted_at, body FROM jobs",
        )
        .execute(&mut db)
        .await
        .unwrap();
        sqlx::query("ANALYZE").execute(&mut db).await.unwrap();
    }
    let plans = every_plan(&store).await;
    assert!(plans.len() > 100, "{} plans", plans.len());
    for (what, plan) in &plans {
        let steps: Vec<&str> = plan.lines().skip(1).map(str::trim).collect();
        // jobStats groups the rows of its window (read from an index range) and the counts;
        // nothing else sorts anything.
        let grouping = what.starts_with("jobStats");
        assert!(
            !steps
                .iter()
                .any(|s| s.contains("TEMP B-TREE") && !(grouping && s.contains("GROUP BY"))),
            "{what} sorts:\n{plan}"
        );
        // Scanning the table of counts (a row per namespace and phase), a JSON list or the
        // name index is fine; scanning jobs or events is not, but for the partial index of
        // unfinished jobs, which holds only them.
        for step in &steps {
            let scans_jobs = step.starts_with("SCAN jobs")
                || step.starts_with("SCAN j ")
                || step.starts_with("SCAN events");
            assert!(
                !scans_jobs || *step == "SCAN jobs USING INDEX jobs_unfinished",
                "{what} scans: {step}\n{plan}"
            );
        }
        if what.starts_with("page of") && plan.starts_with("SELECT seq, body")
            || plan.starts_with("SELECT j.seq")
        {
            assert!(
                steps
                    .iter()
                    .any(|s| s.starts_with("SEARCH jobs USING")
                        || s.starts_with("SCAN job_names VIRTUAL TABLE")),
                "{what} reads no index:\n{plan}"
            );
        }
    }
    // Every arm's index is used somewhere, and the name index for long text.
    let all = all_plans(&plans);
    assert_plans_use(
        &all,
        &[
            "USING INTEGER PRIMARY KEY (rowid<?)",
            "USING INDEX jobs_by_namespace (namespace=? AND seq<?)",
            "USING INDEX jobs_by_phase (phase=? AND seq<?)",
            "USING INDEX jobs_by_namespace_phase (namespace=? AND phase=? AND rowid<?)",
            "SCAN job_names VIRTUAL TABLE",
            // A budgeted page's lowest candidate, read once before the page.
            "SCALAR SUBQUERY",
            "SCAN jobs USING INDEX jobs_unfinished",
            "jobs_by_submitted_at",
            "events_finished_at",
        ],
    );
}

#[tokio::test]
async fn postgres_reads_use_an_index_in_order_and_never_sort() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&pg.url()).await.unwrap());
    {
        use sqlx::Connection as _;
        let mut db = sqlx::PgConnection::connect(&pg.url()).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO jobs (id, name, namespace, template, phase, submitted_at, fingerprint, launched, body) \
             SELECT 'job-' || i, 'etl-' || lpad(i::text, 6, '0'), \
                    CASE WHEN i % 500 = 7 THEN 'ns-3' ELSE 'ns-' || ((i % 5) * 2) END, 'container', \
                    CASE WHEN i % 5 = 1 THEN 'RUNNING' WHEN i % 51 = 0 THEN 'PENDING' \
                         WHEN i % 7 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END, \
                    now() - (({FILL_ROWS} - i) * interval '50 seconds'), 'f', 1, repeat('x', 800) \
             FROM generate_series(1, {FILL_ROWS}) AS i"
        )))
        .execute(&mut db)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO events (seq, job_id, phase, at, job) SELECT seq, id, phase, submitted_at, body FROM jobs",
        )
        .execute(&mut db)
        .await
        .unwrap();
        sqlx::query("ANALYZE").execute(&mut db).await.unwrap();
    }
    let plans = every_plan(&store).await;
    for (what, plan) in &plans {
        let steps: Vec<&str> = plan.lines().skip(1).map(str::trim).collect();
        for (i, step) in steps.iter().enumerate() {
            // A count of name matches among at most 5,000 candidates takes them in any order:
            // read straight from the table, it stops at its limit.
            let bounded = plan.starts_with("SELECT count(*)") && i > 0 && steps[i - 1].contains("Limit");
            assert!(
                !(step.contains("Seq Scan on jobs") || step.contains("Seq Scan on events")) || bounded,
                "{what} scans: {step}\n{plan}"
            );
            // PostgreSQL's planner sorts rows only where it expects few of them: a small
            // namespace's jobs. Anything it sorts is so bounded, never by the jobs stored. jobStats groups the
            // rows of its window, read from an index range.
            let sorted: i64 = step
                .split("rows=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|r| r.parse().ok())
                .unwrap_or(i64::MAX);
            let node = step.trim_start_matches("->").trim_start();
            let sorts =
                (node.starts_with("Sort") || node.starts_with("Incremental Sort")) && node.contains("(cost=");
            assert!(
                !sorts || sorted <= 1_000 || what.starts_with("jobStats"),
                "{what} sorts {sorted} rows: {step}\n{plan}"
            );
        }
    }
    // The indexes it chose here (unfinished phases come from the partial index of unfinished
    // jobs, also in `seq` order; a common phase from the whole order, filtered).
    let all = all_plans(&plans);
    assert_plans_use(
        &all,
        &[
            "Index Scan Backward using jobs_pkey",
            "using jobs_by_namespace on jobs",
            "using jobs_by_namespace_phase_seq on jobs",
            // A budgeted page's lowest candidate, read once before the page.
            "InitPlan",
            "jobs_unfinished",
            "jobs_by_submitted_at",
            "events_finished_at",
        ],
    );
    // The trigram index answers in no order: a page reading it would read every match.
    assert!(
        !all.contains("jobs_by_name_trgm"),
        "a page reads the trigram index:\n{all}"
    );
}
