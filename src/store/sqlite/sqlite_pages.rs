//! SQLite's statements for one page of `list_jobs` (see [`ListPlan`]): each arm's index
//! range named in the statement (`INDEXED BY`), so that the plan never falls back to sorting
//! or scanning whatever the planner estimates, and names of three characters or more read
//! from the trigram index `job_names` (FTS5), newest first.
//!
//! It must not run anything: `sql/job_reads.rs` runs and explains what it builds.

use crate::store::sql::dialect::{Bind, List};
use crate::store::sql::job_reads::{PageRead, PageReads, Statement};
use crate::store::{COUNT_CANDIDATES, ListPlan};

/// The statements of one page: see [`Backend::page_reads`](crate::store::sql::Backend::page_reads).
pub(super) fn page_reads(plan: &ListPlan, before: i64, first: i64, budget: i64) -> PageReads {
    let list = |list: Option<&Vec<String>>| Bind::List(List(list.cloned()));
    let phase_list = |phases: Option<&Vec<crate::model::JobPhase>>| {
        Bind::List(List(
            phases.map(|p| p.iter().map(|p| p.as_str().to_owned()).collect()),
        ))
    };
    if let Some(search) = &plan.search {
        let phrase = Bind::Text(Some(fts_phrase(&search.text)));
        let namespaces = list(search.namespaces.as_ref());
        let phases = phase_list(search.phases.as_ref());
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
        return PageReads {
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
        };
    }
    let namespaces = list(plan.namespaces.as_ref());
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
                list(counted_namespaces.as_ref()),
                phase_list(counted_phases.as_ref()),
            ],
        ));
    }
    PageReads { pages, counts }
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
/// falls back to sorting or scanning whatever the planner estimates (tests/store/query_plans.rs checks
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
