//! PostgreSQL's statements for one page of `list_jobs` (see [`ListPlan`]): each arm's index
//! range by its equalities, binding only the parameters the statement uses, and a name checked
//! per row within the page's budget (never searched through the trigram index, which returns
//! matches in no order).
//!
//! It must not run anything: `sql/job_reads.rs` runs and explains what it builds.

use crate::model::JobPhase;
use crate::store::sql::dialect::{Bind, List};
use crate::store::sql::job_reads::{PageRead, PageReads, Statement};
use crate::store::{Arm, COUNT_CANDIDATES, ListPlan};

/// The statements one page of `list_jobs` runs (see
/// [`Backend::page_reads`](crate::store::sql::Backend::page_reads)).
///
/// A name is checked per row of the arms, never searched through the trigram index: the
/// index returns matches in no order, so the newest of them are found only by reading every
/// one (a common name's hundreds of thousands), which no page may do. Within its budget, an
/// arm reads its index range newest first instead.
pub(super) fn page_reads(plan: &ListPlan, before: i64, first: i64, budget: i64) -> PageReads {
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
            PageRead {
                page: arm_statement(arm, plan, ArmRead::BudgetedPage(skip), before, first + 1),
                stop: Some(arm_statement(arm, plan, ArmRead::Stop(skip), before, 1)),
            }
        } else {
            PageRead {
                page: arm_statement(arm, plan, ArmRead::Page, before, first + 1),
                stop: None,
            }
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
            vec![
                Bind::List(List(namespaces)),
                Bind::List(List(phase_names(&phases))),
            ],
        ));
    }
    PageReads { pages, counts }
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
            param(Bind::List(List(Some(namespaces.clone()))))
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
