//! Listing jobs (`list_jobs`): filters, name fragments matched literally, scopes, newest
//! first, and pages: cursors, every filter combination, and a page that stops at its budget
//! of candidates and says where the next goes on.

use std::sync::Arc;

use jobgate::model::{Job, JobFilter, JobPhase, Scope};
use jobgate::store::{JobPage, SCAN_BUDGET, Store};

use crate::support::{job, list, move_to, page_ids, submit, submit_one, team, varied_jobs};

backend_tests!(
    list_jobs_filters_newest_first,
    list_jobs_matches_a_name_fragment_literally,
    list_jobs_never_shows_jobs_outside_the_scope,
    list_jobs_pages_with_cursors,
    list_jobs_pages_every_filter_combination_newest_first,
    a_page_stops_at_its_budget_and_the_next_goes_on_from_there,
);

async fn list_jobs_filters_newest_first(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "alpha-1"),
            job("team-a", "beta"),
            job("team-b", "alpha-2"),
            job("team-a", "alpha-3"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[1], JobPhase::Cancelled).await;
    move_to(&store, &mut jobs[2], JobPhase::Running).await;
    let [a1, beta, a2, a3] = [&jobs[0].id, &jobs[1].id, &jobs[2].id, &jobs[3].id].map(String::as_str);

    let everything = list(&store, &JobFilter::default(), &Scope::All).await;
    assert_eq!(page_ids(&everything), [a3, a2, beta, a1], "newest first");
    assert_eq!(everything.total_count, 4);
    assert!(!everything.has_next_page);
    assert_eq!(
        everything.jobs[2].1.phase,
        JobPhase::Cancelled,
        "jobs read back as saved"
    );

    let cases: Vec<(JobFilter, Vec<&str>)> = vec![
        (
            JobFilter {
                namespace: Some("team-a".into()),
                ..JobFilter::default()
            },
            vec![a3, beta, a1],
        ),
        (
            JobFilter {
                name_contains: Some("alpha".into()),
                ..JobFilter::default()
            },
            vec![a3, a2, a1],
        ),
        (
            JobFilter {
                phases: Some(vec![JobPhase::Cancelled, JobPhase::Running]),
                ..JobFilter::default()
            },
            vec![a2, beta],
        ),
        (
            JobFilter {
                phases: Some(vec![JobPhase::Pending]),
                namespace: Some("team-a".into()),
                name_contains: Some("alpha".into()),
            },
            vec![a3, a1],
        ),
        (
            JobFilter {
                phases: Some(vec![JobPhase::Succeeded]),
                ..JobFilter::default()
            },
            vec![],
        ),
        (
            JobFilter {
                namespace: Some("team-c".into()),
                ..JobFilter::default()
            },
            vec![],
        ),
    ];
    for (filter, expected) in cases {
        let page = list(&store, &filter, &Scope::All).await;
        assert_eq!(page_ids(&page), expected, "{filter:?}");
        assert_eq!(
            page.total_count,
            expected.len() as i64,
            "total_count of {filter:?}"
        );
        assert!(
            page.jobs.iter().all(|(_, j)| filter.matches(j)),
            "the store and JobFilter::matches disagree on {filter:?}"
        );
    }
}

async fn list_jobs_matches_a_name_fragment_literally(store: Arc<dyn Store>) {
    // Subscriptions filter with JobFilter::matches (a case-sensitive substring); listing
    // must agree, so no wildcards and no case folding.
    submit(&store, vec![job("team-a", "alpha-1"), job("team-a", "beta")]).await;
    for fragment in ["%", "_", "a%1", "alpha_1", "ALPHA", "*", ".*"] {
        let filter = JobFilter {
            name_contains: Some(fragment.into()),
            ..JobFilter::default()
        };
        let page = list(&store, &filter, &Scope::All).await;
        assert!(page.jobs.is_empty(), "{fragment:?} matched {:?}", page_ids(&page));
        assert_eq!(page.total_count, 0, "{fragment:?}");
    }
    let filter = JobFilter {
        name_contains: Some("a-1".into()),
        ..JobFilter::default()
    };
    assert_eq!(list(&store, &filter, &Scope::All).await.total_count, 1);
}

async fn list_jobs_never_shows_jobs_outside_the_scope(store: Arc<dyn Store>) {
    let jobs = submit(
        &store,
        vec![
            job("team-a", "alpha-1"),
            job("team-b", "alpha-2"),
            job("team-c", "alpha-3"),
        ],
    )
    .await;
    let a_and_c = Scope::namespaces(["team-a", "team-c"]);
    let page = list(&store, &JobFilter::default(), &a_and_c).await;
    assert_eq!(page_ids(&page), [jobs[2].id.as_str(), jobs[0].id.as_str()]);
    assert_eq!(page.total_count, 2);
    // A filter never widens the scope: asking for team-b's jobs in team-a's scope finds none.
    let filter = JobFilter {
        namespace: Some("team-b".into()),
        ..JobFilter::default()
    };
    let page = list(&store, &filter, &team("team-a")).await;
    assert!(page.jobs.is_empty());
    assert_eq!(page.total_count, 0);
    let page = list(
        &store,
        &JobFilter::default(),
        &Scope::namespaces(Vec::<String>::new()),
    )
    .await;
    assert!(page.jobs.is_empty(), "an empty scope sees nothing");
    assert_eq!(page.total_count, 0);
}

async fn list_jobs_pages_with_cursors(store: Arc<dyn Store>) {
    let jobs = submit(
        &store,
        (0..5).map(|i| job("team-a", &format!("job-{i}"))).collect(),
    )
    .await;
    submit_one(&store, job("team-b", "other")).await;
    let scope = team("team-a");
    let filter = JobFilter::default();
    let pages = page_through(&store, &filter, &scope, 2, SCAN_BUDGET).await;
    assert_eq!(pages.len(), 3);
    for page in &pages {
        assert_eq!(
            page.total_count, 5,
            "total_count counts every match, not the page"
        );
    }
    let seen: Vec<&str> = pages.iter().flat_map(page_ids).collect();
    let newest_first: Vec<&str> = jobs.iter().rev().map(|j| j.id.as_str()).collect();
    assert_eq!(seen, newest_first);
    // A job submitted meanwhile is on the first page, never repeated on a later one.
    let cursor_before = store
        .list_jobs(&filter, &scope, 2, None, SCAN_BUDGET)
        .await
        .unwrap()
        .jobs[1]
        .0;
    let newer = submit_one(&store, job("team-a", "newer")).await;
    let next = store
        .list_jobs(&filter, &scope, 2, Some(cursor_before), SCAN_BUDGET)
        .await
        .unwrap();
    assert_eq!(page_ids(&next), [jobs[2].id.as_str(), jobs[1].id.as_str()]);
    assert_eq!(next.total_count, 6);
    let first = store
        .list_jobs(&filter, &scope, 1, None, SCAN_BUDGET)
        .await
        .unwrap();
    assert_eq!(page_ids(&first), [newer.id.as_str()]);
    assert!(first.has_next_page);
}

async fn list_jobs_pages_every_filter_combination_newest_first(store: Arc<dyn Store>) {
    let jobs = varied_jobs(&store).await;
    let phase_sets: Vec<Option<Vec<JobPhase>>> = vec![
        None,
        Some(vec![JobPhase::Pending]),
        Some(vec![JobPhase::Running, JobPhase::Pending]),
        Some(vec![JobPhase::Succeeded, JobPhase::Failed, JobPhase::Cancelled]),
        Some(vec![]),
    ];
    let namespaces = [None, Some("team-a"), Some("team-c"), Some("team-z")];
    // Short text (no trigram), long text, text in the middle of a name, text matching none.
    let names = [
        None,
        Some("al"),
        Some("alpha"),
        Some("pha-2"),
        Some("zzz"),
        Some("a"),
    ];
    let scopes = [
        Scope::All,
        team("team-a"),
        Scope::namespaces(["team-a", "team-b"]),
        Scope::namespaces(Vec::<String>::new()),
    ];
    let mut combinations = 0;
    for phases in &phase_sets {
        for namespace in namespaces {
            for name in names {
                for scope in &scopes {
                    let filter = JobFilter {
                        phases: phases.clone(),
                        namespace: namespace.map(str::to_owned),
                        name_contains: name.map(str::to_owned),
                    };
                    let expected: Vec<&str> = jobs
                        .iter()
                        .rev()
                        .filter(|j| filter.matches(j) && scope.sees(j))
                        .map(|j| j.id.as_str())
                        .collect();
                    // A budget no page reaches, and one that cuts pages short of their size.
                    for budget in [SCAN_BUDGET, 3] {
                        let pages = page_through(&store, &filter, scope, 4, budget).await;
                        let mut seen = Vec::new();
                        let mut cursors = Vec::new();
                        for page in &pages {
                            assert_eq!(
                                page.total_count,
                                expected.len() as i64,
                                "total_count of {filter:?} in {scope:?}"
                            );
                            for (seq, job) in &page.jobs {
                                cursors.push(*seq);
                                assert_eq!(
                                    Some(job),
                                    jobs.iter().find(|j| j.id == job.id),
                                    "read back as saved"
                                );
                            }
                            seen.extend(page.jobs.iter().map(|(_, j)| j.id.as_str()));
                        }
                        assert_eq!(seen, expected, "{filter:?} in {scope:?}, budget {budget}");
                        assert!(
                            cursors.windows(2).all(|w| w[0] > w[1]),
                            "cursors fall page after page: {cursors:?}"
                        );
                        if budget == SCAN_BUDGET {
                            assert!(
                                pages.iter().all(|p| p.resume_after.is_none()),
                                "{filter:?} in {scope:?}: no page reaches the budget"
                            );
                        }
                    }
                    combinations += 1;
                }
            }
        }
    }
    assert_eq!(combinations, 5 * 4 * 6 * 4);
}

/// Every page of `filter` in `scope`, `first` at a time, each looking at no more than
/// `budget` candidates, from the newest until one says there is no next page. Checks what
/// holds of every page: at most `first` jobs, and fewer only when the page stopped at its
/// budget (then it says where to go on, below its last job) or was the last.
async fn page_through(
    store: &Arc<dyn Store>,
    filter: &JobFilter,
    scope: &Scope,
    first: i64,
    budget: i64,
) -> Vec<JobPage> {
    let mut pages: Vec<JobPage> = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_jobs(filter, scope, first, after, budget)
            .await
            .unwrap();
        assert!(page.jobs.len() as i64 <= first);
        if let Some(resume) = page.resume_after {
            assert!(page.has_next_page, "a page that stopped early has a next page");
            assert!(page.jobs.len() as i64 <= first);
            assert!(
                page.jobs.last().is_none_or(|(seq, _)| *seq >= resume),
                "it goes on below its last job"
            );
            assert!(after.is_none_or(|a| resume < a), "each page gets further");
        } else if page.has_next_page {
            assert_eq!(
                page.jobs.len() as i64,
                first,
                "a page before another is full unless it stopped early"
            );
        }
        assert!(pages.len() < 10_000, "paging {filter:?} never ends");
        let (more, next) = (page.has_next_page, page.end_cursor());
        pages.push(page);
        if !more {
            return pages;
        }
        after = Some(next.expect("a page before another says where it ends"));
    }
}

/// Many jobs have the name, none of them in the namespace asked (or many are in the
/// namespace, none with the name: what a backend without a name index reads): each page looks
/// at its budget of candidates, returns what it found, possibly nothing, and says where to go
/// on; paging through finds exactly the jobs that match, scattered among the others or none,
/// and reads nothing twice.
async fn a_page_stops_at_its_budget_and_the_next_goes_on_from_there(store: Arc<dyn Store>) {
    let mut batch: Vec<Job> = (0..60).map(|i| job("team-a", &format!("nightly-{i}"))).collect();
    for at in [3, 31, 32, 58] {
        batch[at] = job("team-b", &format!("nightly-{at}"));
    }
    batch.push(job("team-c", "other"));
    let jobs = submit(&store, batch).await;
    let mut stopped_early = 0;
    for (namespace, phases, name) in [
        ("team-c", None, "nightly"),
        ("team-b", None, "nightly"),
        ("team-a", Some(vec![JobPhase::Running]), "nightly"),
        ("team-b", Some(vec![JobPhase::Pending]), "nightly"),
        ("team-a", None, "other"),
        ("team-a", None, "ni"),
    ] {
        let filter = JobFilter {
            phases: phases.clone(),
            namespace: Some(namespace.into()),
            name_contains: Some(name.into()),
        };
        let expected: Vec<&str> = jobs
            .iter()
            .rev()
            .filter(|j| filter.matches(j))
            .map(|j| j.id.as_str())
            .collect();
        let pages = page_through(&store, &filter, &Scope::All, 3, 10).await;
        let found: Vec<&str> = pages.iter().flat_map(page_ids).collect();
        assert_eq!(found, expected, "{filter:?}");
        stopped_early += pages.iter().filter(|p| p.resume_after.is_some()).count();
        // Without a budget to speak of, the same jobs in full pages.
        let whole = page_through(&store, &filter, &Scope::All, 3, SCAN_BUDGET).await;
        let found: Vec<&str> = whole.iter().flat_map(page_ids).collect();
        assert_eq!(found, expected, "{filter:?}");
        assert!(whole.iter().all(|p| p.resume_after.is_none()));
    }
    // However a backend reads these, some of them look at far more than 10 candidates.
    assert!(
        stopped_early >= 5,
        "{stopped_early} pages stopped at their budget"
    );
}
