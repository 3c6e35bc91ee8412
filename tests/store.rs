//! The store's contract (`jobgate::store::{Store, StoreTx}`), tested once for every backend:
//! what the service relies on and a user sees through it. A committed transaction is visible
//! to every read, a dropped one changed nothing; event cursors grow with commit order, so a
//! subscriber resuming after one misses nothing; idempotency keys are per submitter; the
//! launch outbox, dependencies and pending cancellations survive as written; reads filter,
//! scope and page as asked.
//!
//! Each test is an `async fn(Arc<dyn Store>)`; `backend_tests!` runs every one against a
//! backend's fresh, empty store (`sqlite::<test>`, …). SQLite's own concerns (its file lock,
//! durability settings, a deleted database file) are tested elsewhere, not here.

// The harness: a throwaway PostgreSQL server for that backend (`common::postgres`).
mod common;

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Duration, DurationRound as _, Utc};
use common::postgres::Postgres;
use jobgate::model::LogLine;
use jobgate::model::{
    Job, JobEvent, JobFilter, JobPhase, SHARD_COUNT, Scope, ShardSet, SubmitRequest, Transition,
    ValidationLimits, shard_of,
};
use jobgate::store::{
    Durability, ExpiryRule, JobPage, LogAppend, LogAppended, PlannedRead, PostgresStore, RuleNamespaces,
    SCAN_BUDGET, SqliteStore, Store, StoreError, StoreTx, Webhook, WebhookFailure,
};

/// A fresh store, and what must live as long as it does (its directory, its server).
type Opened = (Arc<dyn Store>, Box<dyn Any + Send>);

/// A SQLite store in a temporary directory.
async fn open_sqlite() -> Option<Opened> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(dir.path(), Durability::Normal)
        .await
        .expect("opening the SQLite store");
    Some((Arc::new(store), Box::new(dir)))
}

/// Every contract test against one backend, as `<backend>::<test>`: `$open` makes a fresh,
/// empty store, or `None` (after saying why) when the backend cannot run here.
macro_rules! backend_tests {
    ($backend:ident, $open:path) => {
        backend_tests!(@each $backend, $open;
            ping_and_probe_write_answer_on_an_empty_store,
            a_committed_job_and_its_event_are_visible,
            a_transaction_dropped_without_commit_changes_nothing,
            a_transaction_reads_its_own_writes,
            event_cursors_grow_with_each_commit,
            a_subscriber_resuming_after_a_cursor_misses_nothing_under_concurrent_writers,
            list_jobs_filters_newest_first,
            list_jobs_matches_a_name_fragment_literally,
            list_jobs_never_shows_jobs_outside_the_scope,
            list_jobs_pages_with_cursors,
            list_jobs_pages_every_filter_combination_newest_first,
            a_page_stops_at_its_budget_and_the_next_goes_on_from_there,
            an_accepted_job_carries_its_first_events_cursor,
            jobs_accepted_together_keep_their_order_and_keys,
            counts_follow_every_insert_and_phase_change,
            events_after_filters_by_job_and_scope,
            job_history_is_the_newest_events_oldest_first,
            namespaces_are_distinct_sorted_scoped_and_limited,
            stats_count_phases_submissions_and_completions,
            idempotency_keys_are_per_submitter,
            a_duplicate_key_is_refused_and_the_store_stays_usable,
            the_launch_outbox_holds_accepted_jobs_until_launched,
            held_jobs_wait_for_release_and_dependents_are_recorded,
            unfinished_jobs_are_the_pending_and_running_ones,
            pending_cancellations_last_until_done,
            outboxes_hand_each_shard_only_its_own_jobs,
            active_in_namespace_counts_the_transactions_own_inserts,
            webhooks_keep_their_filter_scope_secret_and_owner,
            a_webhook_is_delivered_by_one_claimant_until_its_claim_expires,
            a_webhook_outcome_lands_only_under_its_claim_and_revision,
            a_disabled_webhook_is_never_claimed_again_and_keeps_its_first_reason,
            a_webhooks_scope_narrows_only_from_the_scope_read,
            retention_deletes_the_finished_jobs_a_rule_covers_and_raises_their_horizons,
            retention_walks_in_batches_from_where_it_stopped,
            log_lines_are_archived_in_order_and_paged_by_cursor,
            a_log_append_lands_only_from_the_stored_position,
            a_log_archive_is_closed_at_its_cap_with_a_marker,
            a_log_archive_closed_after_lost_lines_takes_nothing_more,
        );
    };
    (@each $backend:ident, $open:path; $($test:ident),* $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    let Some((store, _alive)) = $open().await else { return };
                    super::$test(store).await;
                }
            )*
        }
    };
}

/// A PostgreSQL store on a throwaway server of its own (`None`, after a loud notice, where
/// PostgreSQL is not installed and CI is not set).
async fn open_postgres() -> Option<Opened> {
    let pg = Postgres::start_or_skip()?;
    let store = PostgresStore::connect(&pg.url())
        .await
        .expect("connecting the PostgreSQL store");
    Some((Arc::new(store), Box::new(pg)))
}

backend_tests!(sqlite, open_sqlite);
backend_tests!(postgres, open_postgres);

// ---- Building jobs and writing them as the service does ----

/// Now, to the microsecond: what every backend keeps of a time.
fn now() -> DateTime<Utc> {
    Utc::now()
        .duration_trunc(Duration::microseconds(1))
        .expect("now, truncated")
}

/// A newly accepted job (PENDING) named `name` in `namespace`.
fn job(namespace: &str, name: &str) -> Job {
    let spec = SubmitRequest {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        command: Some(vec!["true".into()]),
        ..SubmitRequest::default()
    }
    .validate(&ValidationLimits::default())
    .expect("a valid request");
    Job::accepted(uuid::Uuid::now_v7().to_string(), spec, None, now())
}

/// `job` with idempotency key `key`, submitted by `principal`.
fn keyed_job(namespace: &str, name: &str, principal: &str, key: &str) -> Job {
    let mut job = job(namespace, name);
    job.idempotency_key = Some(key.into());
    job.submitter = Some(principal.into());
    job.submitter_key = Some(principal.into());
    job
}

fn fingerprint(job: &Job) -> String {
    job.spec.fingerprint()
}

/// Appends the event for `transition` and saves the job with its cursor, as the service's
/// writer does; returns the cursor.
async fn record(tx: &mut dyn StoreTx, job: &mut Job, transition: &Transition) -> i64 {
    let seq = tx
        .append_event(job, transition, now())
        .await
        .expect("appending an event");
    job.last_event_seq = seq;
    tx.save_job(job).await.expect("saving the job");
    seq
}

/// What the writer records on accepting a job: the job, in the outbox, with its first event.
async fn insert(tx: &mut dyn StoreTx, job: &mut Job) -> i64 {
    tx.insert_job(job, &fingerprint(job))
        .await
        .expect("inserting the job");
    let transition = Transition {
        previous_phase: None,
        phase: job.phase,
        reason: Some("Submitted".into()),
        message: Some("accepted by jobgate".into()),
    };
    record(tx, job, &transition).await
}

/// Submits jobs in one committed transaction; returns them as stored (with their cursors).
async fn submit(store: &Arc<dyn Store>, jobs: Vec<Job>) -> Vec<Job> {
    let mut tx = store.begin().await.expect("a write transaction");
    let mut stored = Vec::new();
    for mut job in jobs {
        insert(&mut *tx, &mut job).await;
        stored.push(job);
    }
    tx.commit().await.expect("committing");
    stored
}

async fn submit_one(store: &Arc<dyn Store>, job: Job) -> Job {
    submit(store, vec![job]).await.remove(0)
}

/// Moves a job to `phase` (an event and the saved job), committed.
async fn move_to(store: &Arc<dyn Store>, job: &mut Job, phase: JobPhase) -> i64 {
    let mut tx = store.begin().await.expect("a write transaction");
    let seq = move_in(&mut *tx, job, phase).await;
    tx.commit().await.expect("committing");
    seq
}

async fn move_in(tx: &mut dyn StoreTx, job: &mut Job, phase: JobPhase) -> i64 {
    let transition = match phase {
        JobPhase::Cancelled => job.cancel(now()).expect("an unfinished job cancels"),
        _ => {
            let previous = job.phase;
            job.phase = phase;
            Transition {
                previous_phase: Some(previous),
                phase,
                reason: Some(format!("Moved{phase:?}")),
                message: None,
            }
        }
    };
    record(tx, job, &transition).await
}

async fn stored(store: &Arc<dyn Store>, id: &str) -> Option<Job> {
    store.get_job(id).await.expect("get_job")
}

async fn all_events(store: &Arc<dyn Store>) -> Vec<JobEvent> {
    store
        .events_after(0, 10_000, None, &Scope::All)
        .await
        .expect("events_after")
}

fn ids(jobs: &[Job]) -> Vec<&str> {
    jobs.iter().map(|j| j.id.as_str()).collect()
}

fn page_ids(page: &jobgate::store::JobPage) -> Vec<&str> {
    page.jobs.iter().map(|(_, j)| j.id.as_str()).collect()
}

fn team(namespace: &str) -> Scope {
    Scope::namespaces([namespace])
}

async fn list(store: &Arc<dyn Store>, filter: &JobFilter, scope: &Scope) -> jobgate::store::JobPage {
    store
        .list_jobs(filter, scope, 100, None, SCAN_BUDGET)
        .await
        .expect("list_jobs")
}

// ---- The contract ----

async fn ping_and_probe_write_answer_on_an_empty_store(store: Arc<dyn Store>) {
    assert!(store.ping().await, "a fresh store does not answer ping");
    store.check_storage().expect("a fresh store's storage checks out");
    store.probe_write().await.expect("a probe write");
    store.probe_write().await.expect("a second probe write");
    assert_eq!(store.last_event_seq().await.unwrap(), 0, "no events yet");
    assert!(all_events(&store).await.is_empty());
    assert!(stored(&store, "no-such-job").await.is_none());
    assert!(store.unlaunched_jobs(10, None).await.unwrap().is_empty());
    assert!(store.unfinished_jobs().await.unwrap().is_empty());
    assert!(store.pending_cancellations(10, None).await.unwrap().is_empty());
    // A probe is no job and no event.
    assert_eq!(store.last_event_seq().await.unwrap(), 0);
    assert_eq!(
        list(&store, &JobFilter::default(), &Scope::All).await.total_count,
        0
    );
}

async fn a_committed_job_and_its_event_are_visible(store: Arc<dyn Store>) {
    let submitted = now();
    let mut tx = store.begin().await.unwrap();
    let mut job = job("team-a", "alpha");
    tx.insert_job(&job, &fingerprint(&job)).await.unwrap();
    let transition = Transition {
        previous_phase: None,
        phase: JobPhase::Pending,
        reason: Some("Submitted".into()),
        message: Some("accepted by jobgate".into()),
    };
    let seq = tx.append_event(&job, &transition, submitted).await.unwrap();
    job.last_event_seq = seq;
    tx.save_job(&job).await.unwrap();
    tx.commit().await.unwrap();

    assert!(seq > 0, "a cursor is positive: 0 means no event");
    assert_eq!(
        stored(&store, &job.id).await.as_ref(),
        Some(&job),
        "the job reads back as saved"
    );
    assert_eq!(store.last_event_seq().await.unwrap(), seq);
    let events = all_events(&store).await;
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert_eq!(event.seq, seq);
    assert_eq!(event.job_id, job.id);
    assert_eq!(event.phase, JobPhase::Pending);
    assert_eq!(event.previous_phase, None);
    assert_eq!(event.at, submitted);
    assert_eq!(event.reason.as_deref(), Some("Submitted"));
    assert_eq!(event.message.as_deref(), Some("accepted by jobgate"));
    assert_eq!(
        *event.job, job,
        "the event's snapshot is the job with its own cursor"
    );
    let history = store.job_history(&job.id, &Scope::All, 10).await.unwrap();
    assert_eq!(history, events);

    // A later change is visible the same way, snapshot and all.
    let mut changed = job.clone();
    let cancelled = move_to(&store, &mut changed, JobPhase::Cancelled).await;
    assert!(cancelled > seq);
    let read = stored(&store, &job.id).await.unwrap();
    assert_eq!(read.phase, JobPhase::Cancelled);
    assert_eq!(read.last_event_seq, cancelled);
    assert_eq!(read, changed);
    let history = store.job_history(&job.id, &Scope::All, 10).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].previous_phase, Some(JobPhase::Pending));
    assert_eq!(history[1].phase, JobPhase::Cancelled);
    assert_eq!(*history[0].job, job, "an earlier snapshot does not change");
    assert_eq!(*history[1].job, changed);
}

async fn a_transaction_dropped_without_commit_changes_nothing(store: Arc<dyn Store>) {
    let committed = submit_one(&store, job("team-a", "kept")).await;
    let cursor = store.last_event_seq().await.unwrap();

    let mut tx = store.begin().await.unwrap();
    let mut dropped = job("team-a", "dropped");
    insert(&mut *tx, &mut dropped).await;
    tx.hold(&dropped.id, std::slice::from_ref(&committed.id))
        .await
        .unwrap();
    let mut changed = committed.clone();
    move_in(&mut *tx, &mut changed, JobPhase::Cancelled).await;
    tx.request_cancellation(&committed.id, now()).await.unwrap();
    tx.mark_launched(&committed.id).await.unwrap();
    drop(tx);
    // PostgreSQL rolls a dropped transaction back as its connection goes back to the pool,
    // a moment later: until then its row locks make the outbox (FOR UPDATE SKIP LOCKED) skip
    // the job it marked. The next write transaction waits for the write lock the dropped one
    // held, so once it has begun the rollback is done.
    store.begin().await.unwrap().commit().await.unwrap();

    assert!(
        stored(&store, &dropped.id).await.is_none(),
        "an uncommitted job is visible"
    );
    assert_eq!(stored(&store, &committed.id).await.as_ref(), Some(&committed));
    assert_eq!(store.last_event_seq().await.unwrap(), cursor);
    assert_eq!(all_events(&store).await.len(), 1);
    assert!(store.pending_cancellations(10, None).await.unwrap().is_empty());
    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        [committed.id.as_str()]
    );
    assert_eq!(
        list(&store, &JobFilter::default(), &Scope::All).await.total_count,
        1
    );

    // The next transaction starts clean and sees none of it either.
    let mut tx = store.begin().await.unwrap();
    assert!(tx.get_job(&dropped.id).await.unwrap().is_none());
    assert!(tx.dependents(&committed.id).await.unwrap().is_empty());
    assert_eq!(tx.active_in_namespace("team-a").await.unwrap(), 1);
    tx.commit().await.unwrap();
}

async fn a_transaction_reads_its_own_writes(store: Arc<dyn Store>) {
    let mut tx = store.begin().await.unwrap();
    let mut job = keyed_job("team-a", "alpha", "token:alice", "k1");
    insert(&mut *tx, &mut job).await;
    assert_eq!(tx.get_job(&job.id).await.unwrap().as_ref(), Some(&job));
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "k1")
        .await
        .unwrap()
        .expect("the transaction's own keyed job");
    assert_eq!(found.id, job.id);
    assert_eq!(found.fingerprint, fingerprint(&job));
    move_in(&mut *tx, &mut job, JobPhase::Running).await;
    assert_eq!(
        tx.get_job(&job.id).await.unwrap().map(|j| j.phase),
        Some(JobPhase::Running)
    );
    tx.commit().await.unwrap();
    assert_eq!(
        stored(&store, &job.id).await.map(|j| j.phase),
        Some(JobPhase::Running)
    );
}

async fn event_cursors_grow_with_each_commit(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, vec![job("team-a", "one"), job("team-a", "two")]).await;
    let first = all_events(&store).await;
    assert_eq!(first.len(), 2);
    assert!(first[0].seq < first[1].seq, "cursors grow within a transaction");
    assert_eq!(first[1].seq, store.last_event_seq().await.unwrap());

    // A dropped transaction's cursors were never seen: the next commit's are still above
    // every committed one, and a subscriber resuming there finds exactly them.
    let mut tx = store.begin().await.unwrap();
    move_in(&mut *tx, &mut jobs[0].clone(), JobPhase::Running).await;
    drop(tx);
    let resume_at = store.last_event_seq().await.unwrap();
    assert_eq!(resume_at, first[1].seq, "a dropped transaction moved the cursor");
    let mut seqs = Vec::new();
    for job in &mut jobs {
        seqs.push(move_to(&store, job, JobPhase::Running).await);
    }
    assert!(
        seqs[0] > resume_at && seqs[1] > seqs[0],
        "cursors {seqs:?} after {resume_at}"
    );
    let resumed = store
        .events_after(resume_at, 100, None, &Scope::All)
        .await
        .unwrap();
    assert_eq!(resumed.iter().map(|e| e.seq).collect::<Vec<_>>(), seqs);
    let every: Vec<i64> = all_events(&store).await.iter().map(|e| e.seq).collect();
    let distinct: BTreeSet<i64> = every.iter().copied().collect();
    assert_eq!(distinct.len(), every.len(), "a cursor was used twice: {every:?}");
}

async fn a_subscriber_resuming_after_a_cursor_misses_nothing_under_concurrent_writers(store: Arc<dyn Store>) {
    const WRITERS: usize = 4;
    const COMMITS: usize = 10;
    let done = Arc::new(AtomicBool::new(false));
    // A subscriber reads on from the newest cursor it saw while writers commit; an event
    // that became visible below a cursor already passed would be missed for good.
    let subscriber = tokio::spawn({
        let store = store.clone();
        let done = done.clone();
        async move {
            let mut cursor = 0;
            let mut seen = Vec::new();
            loop {
                // Read before the page: once it says done, this page holds every commit.
                let finished = done.load(Ordering::SeqCst);
                let page = store.events_after(cursor, 1000, None, &Scope::All).await.unwrap();
                if let Some(last) = page.last() {
                    cursor = last.seq;
                }
                let empty = page.is_empty();
                seen.extend(page.into_iter().map(|e| e.seq));
                if finished && empty {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        }
    });
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for c in 0..COMMITS {
                    submit_one(&store, job("team-a", &format!("w{w}-c{c}"))).await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let seen = subscriber.await.unwrap();
    let every: Vec<i64> = all_events(&store).await.iter().map(|e| e.seq).collect();
    assert_eq!(every.len(), WRITERS * COMMITS);
    assert_eq!(
        seen, every,
        "the subscriber, resuming after each cursor it saw, did not see every event in order"
    );
}

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

async fn events_after_filters_by_job_and_scope(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, vec![job("team-a", "a"), job("team-b", "b")]).await;
    let (mut a, mut b) = (jobs.remove(0), jobs.remove(0));
    move_to(&store, &mut b, JobPhase::Running).await;
    move_to(&store, &mut a, JobPhase::Running).await;
    move_to(&store, &mut b, JobPhase::Cancelled).await;
    move_to(&store, &mut a, JobPhase::Cancelled).await;
    let every = all_events(&store).await;
    assert_eq!(every.len(), 6);
    assert!(every.windows(2).all(|w| w[0].seq < w[1].seq), "oldest first");
    let of = |id: &str| -> Vec<i64> { every.iter().filter(|e| e.job_id == id).map(|e| e.seq).collect() };
    let seqs = |events: Vec<JobEvent>| -> Vec<i64> { events.iter().map(|e| e.seq).collect() };

    let a_only = store
        .events_after(0, 100, Some(&a.id), &Scope::All)
        .await
        .unwrap();
    assert_eq!(seqs(a_only), of(&a.id));
    let team_a = store.events_after(0, 100, None, &team("team-a")).await.unwrap();
    assert_eq!(seqs(team_a), of(&a.id));
    // A page is full unless nothing more of the scope follows: team-b's events in between
    // take no room in team-a's page.
    let page = store.events_after(0, 2, None, &team("team-a")).await.unwrap();
    assert_eq!(seqs(page), of(&a.id)[..2]);
    let after = of(&a.id)[0];
    let rest = store
        .events_after(after, 100, None, &team("team-a"))
        .await
        .unwrap();
    assert_eq!(seqs(rest), of(&a.id)[1..]);
    let limited = store.events_after(0, 4, None, &Scope::All).await.unwrap();
    assert_eq!(
        seqs(limited),
        every.iter().take(4).map(|e| e.seq).collect::<Vec<_>>()
    );
    // Another namespace's job is nothing, even asked for by id.
    let hidden = store
        .events_after(0, 100, Some(&b.id), &team("team-a"))
        .await
        .unwrap();
    assert!(hidden.is_empty());
    let last = every.last().unwrap().seq;
    assert!(
        store
            .events_after(last, 100, None, &Scope::All)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn job_history_is_the_newest_events_oldest_first(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, vec![job("team-a", "a"), job("team-b", "b")]).await;
    let mut expected = vec![jobs[0].last_event_seq];
    for phase in [JobPhase::Running, JobPhase::Running, JobPhase::Cancelled] {
        expected.push(move_to(&store, &mut jobs[0], phase).await);
        move_to(&store, &mut jobs[1], JobPhase::Running).await;
    }
    let seqs = |events: Vec<JobEvent>| -> Vec<i64> { events.iter().map(|e| e.seq).collect() };
    let a = &jobs[0].id;
    assert_eq!(
        seqs(store.job_history(a, &Scope::All, 10).await.unwrap()),
        expected
    );
    assert_eq!(
        seqs(store.job_history(a, &Scope::All, 2).await.unwrap()),
        expected[2..]
    );
    assert_eq!(
        seqs(store.job_history(a, &team("team-a"), 10).await.unwrap()),
        expected
    );
    assert!(
        store
            .job_history(a, &team("team-b"), 10)
            .await
            .unwrap()
            .is_empty(),
        "a job outside the scope has no history"
    );
    assert!(
        store
            .job_history("no-such-job", &Scope::All, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn namespaces_are_distinct_sorted_scoped_and_limited(store: Arc<dyn Store>) {
    submit(
        &store,
        vec![
            job("team-c", "x"),
            job("team-a", "x"),
            job("team-b", "x"),
            job("team-a", "y"),
        ],
    )
    .await;
    assert_eq!(
        store.namespaces(10, &Scope::All).await.unwrap(),
        ["team-a", "team-b", "team-c"]
    );
    assert_eq!(
        store.namespaces(2, &Scope::All).await.unwrap(),
        ["team-a", "team-b"]
    );
    let scope = Scope::namespaces(["team-c", "team-a", "team-z"]);
    assert_eq!(store.namespaces(10, &scope).await.unwrap(), ["team-a", "team-c"]);
}

async fn stats_count_phases_submissions_and_completions(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "p1"),
            job("team-a", "p2"),
            job("team-a", "c"),
            job("team-b", "r"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[2], JobPhase::Cancelled).await;
    move_to(&store, &mut jobs[3], JobPhase::Running).await;
    // Buckets of an hour: whatever the clock, everything above falls in the last two.
    let (buckets, width) = (3, 3600);
    let all = store.stats(buckets, width, &Scope::All).await.unwrap();
    assert_eq!(all.cursor, store.last_event_seq().await.unwrap());
    assert_eq!(all.since % width, 0, "buckets are aligned to the epoch");
    assert!(all.since <= Utc::now().timestamp() - (buckets - 1) * width);
    let count = |s: &jobgate::store::StatsSnapshot, p| s.counts.get(&p).copied().unwrap_or(0);
    assert_eq!(count(&all, JobPhase::Pending), 2);
    assert_eq!(count(&all, JobPhase::Cancelled), 1);
    assert_eq!(count(&all, JobPhase::Running), 1);
    assert_eq!(count(&all, JobPhase::Succeeded), 0);
    assert!(all.submitted.iter().all(|(b, _)| (0..buckets).contains(b)));
    assert_eq!(all.submitted.iter().map(|(_, n)| n).sum::<i64>(), 4);
    let finished: Vec<(JobPhase, i64)> = all.finished.iter().map(|(_, p, n)| (*p, *n)).collect();
    assert_eq!(finished, [(JobPhase::Cancelled, 1)]);
    assert!(all.finished.iter().all(|(b, _, _)| (0..buckets).contains(b)));

    let b = store.stats(buckets, width, &team("team-b")).await.unwrap();
    assert_eq!(b.counts.values().sum::<i64>(), 1);
    assert_eq!(count(&b, JobPhase::Running), 1);
    assert_eq!(b.submitted.iter().map(|(_, n)| n).sum::<i64>(), 1);
    assert!(b.finished.is_empty(), "team-a's cancellation counted for team-b");
}

async fn idempotency_keys_are_per_submitter(store: Arc<dyn Store>) {
    let alice = submit_one(&store, keyed_job("team-a", "x", "token:alice", "k")).await;
    // The same key from another submitter is another job.
    let bob = submit_one(&store, keyed_job("team-a", "y", "token:bob", "k")).await;
    let mut tx = store.begin().await.unwrap();
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "k")
        .await
        .unwrap();
    let found = found.expect("alice's key finds her job");
    assert_eq!(found.id, alice.id);
    assert_eq!(tx.get_job(&found.id).await.unwrap().as_ref(), Some(&alice));
    assert_eq!(found.fingerprint, fingerprint(&alice));
    let found = tx.find_by_idempotency_key(Some("token:bob"), "k").await.unwrap();
    assert_eq!(found.map(|k| k.id), Some(bob.id));
    assert!(
        tx.find_by_idempotency_key(Some("token:carol"), "k")
            .await
            .unwrap()
            .is_none()
    );
    assert!(tx.find_by_idempotency_key(None, "k").await.unwrap().is_none());
    assert!(
        tx.find_by_idempotency_key(Some("token:alice"), "other")
            .await
            .unwrap()
            .is_none()
    );
    tx.commit().await.unwrap();
}

async fn a_duplicate_key_is_refused_and_the_store_stays_usable(store: Arc<dyn Store>) {
    let first = submit_one(&store, keyed_job("team-a", "x", "token:alice", "k")).await;
    let duplicate = keyed_job("team-a", "y", "token:alice", "k");
    let mut tx = store.begin().await.unwrap();
    let refused = tx.insert_job(&duplicate, &fingerprint(&duplicate)).await;
    assert!(
        refused.is_err(),
        "a second job with the same submitter's key was stored"
    );
    drop(tx);
    assert!(stored(&store, &duplicate.id).await.is_none());
    // The next transaction works as ever.
    let later = submit_one(&store, keyed_job("team-a", "z", "token:alice", "k2")).await;
    assert_eq!(stored(&store, &later.id).await.as_ref(), Some(&later));
    let mut tx = store.begin().await.unwrap();
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "k")
        .await
        .unwrap();
    assert_eq!(found.map(|k| k.id), Some(first.id));
    tx.commit().await.unwrap();
}

async fn the_launch_outbox_holds_accepted_jobs_until_launched(store: Arc<dyn Store>) {
    let jobs = submit(
        &store,
        vec![job("team-a", "one"), job("team-a", "two"), job("team-b", "three")],
    )
    .await;
    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        ids(&jobs),
        "oldest first"
    );
    assert_eq!(
        ids(&store.unlaunched_jobs(2, None).await.unwrap()),
        ids(&jobs[..2])
    );

    let mut tx = store.begin().await.unwrap();
    tx.mark_launched(&jobs[1].id).await.unwrap();
    tx.commit().await.unwrap();
    let left = store.unlaunched_jobs(10, None).await.unwrap();
    assert_eq!(ids(&left), [jobs[0].id.as_str(), jobs[2].id.as_str()]);
    // Releasing a job that was never held does not put a launched one back (it would run
    // twice).
    let mut tx = store.begin().await.unwrap();
    tx.release(&jobs[1].id).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(ids(&store.unlaunched_jobs(10, None).await.unwrap()), ids(&left));
}

async fn held_jobs_wait_for_release_and_dependents_are_recorded(store: Arc<dyn Store>) {
    let deps = submit(&store, vec![job("team-a", "dep-1"), job("team-a", "dep-2")]).await;
    let mut tx = store.begin().await.unwrap();
    let mut waiting = job("team-a", "waiting");
    insert(&mut *tx, &mut waiting).await;
    tx.hold(&waiting.id, std::slice::from_ref(&deps[0].id))
        .await
        .unwrap();
    tx.add_dependencies(&waiting.id, std::slice::from_ref(&deps[1].id))
        .await
        .unwrap();
    // Recording an edge twice is harmless.
    tx.add_dependencies(&waiting.id, std::slice::from_ref(&deps[1].id))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        ids(&deps),
        "a held job is out of the outbox"
    );
    let unfinished = store.unfinished_jobs().await.unwrap();
    let held = unfinished
        .iter()
        .find(|r| r.job.id == waiting.id)
        .expect("a held job is unfinished");
    assert!(!held.launched, "a held job was never handed to the executor");
    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.dependents(&deps[0].id).await.unwrap(), [waiting.id.clone()]);
    assert_eq!(tx.dependents(&deps[1].id).await.unwrap(), [waiting.id.clone()]);
    assert!(tx.dependents(&waiting.id).await.unwrap().is_empty());
    tx.release(&waiting.id).await.unwrap();
    tx.commit().await.unwrap();
    let outbox = store.unlaunched_jobs(10, None).await.unwrap();
    assert_eq!(
        ids(&outbox),
        [deps[0].id.as_str(), deps[1].id.as_str(), waiting.id.as_str()]
    );

    // Several dependents of one job, by id.
    let mut more = submit(&store, vec![job("team-a", "m1"), job("team-a", "m2")]).await;
    let mut tx = store.begin().await.unwrap();
    for m in &more {
        tx.add_dependencies(&m.id, std::slice::from_ref(&deps[0].id))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    more.push(waiting);
    let mut expected: Vec<String> = more.iter().map(|j| j.id.clone()).collect();
    expected.sort();
    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.dependents(&deps[0].id).await.unwrap(), expected);
    tx.commit().await.unwrap();
}

/// A rule that expires every job of `namespaces` finished so far.
fn expire_now(namespaces: RuleNamespaces) -> ExpiryRule {
    ExpiryRule {
        before: now() + Duration::seconds(5),
        namespaces,
    }
}

async fn retention_deletes_the_finished_jobs_a_rule_covers_and_raises_their_horizons(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "a-done"),
            job("team-a", "a-failed"),
            job("team-b", "b-done"),
            job("team-a", "a-running"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[0], JobPhase::Succeeded).await;
    move_to(&store, &mut jobs[1], JobPhase::Failed).await;
    move_to(&store, &mut jobs[2], JobPhase::Succeeded).await;
    move_to(&store, &mut jobs[3], JobPhase::Running).await;
    // A dependency edge to a finished job: it goes with that job, its dependent stays.
    let mut tx = store.begin().await.unwrap();
    tx.add_dependencies(&jobs[3].id, std::slice::from_ref(&jobs[0].id))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Archived output of a job that goes, and of one that stays.
    for job in [&jobs[0], &jobs[2]] {
        store
            .append_logs(&[plain_append(&job.id, vec![log_line(None, "out".into())])], CAP)
            .await
            .unwrap();
    }
    let expired_events: Vec<i64> = all_events(&store)
        .await
        .iter()
        .filter(|e| e.job_id == jobs[0].id || e.job_id == jobs[1].id)
        .map(|e| e.seq)
        .collect();
    let newest_expired = *expired_events.iter().max().unwrap();

    let batch = store
        .expire_jobs(
            &expire_now(RuleNamespaces::AllBut(vec!["team-b".into()])),
            None,
            100,
        )
        .await
        .expect("a retention batch");
    assert_eq!(batch.scanned, 3, "every finished job is looked at: {batch:?}");
    assert_eq!(
        (batch.jobs, batch.events),
        (2, 4),
        "team-a's two finished jobs, two events each"
    );
    assert_eq!(batch.newest_deleted, newest_expired);
    assert!(stored(&store, &jobs[0].id).await.is_none());
    assert!(stored(&store, &jobs[1].id).await.is_none());
    assert!(
        stored(&store, &jobs[2].id).await.is_some(),
        "team-b is not this rule's"
    );
    assert_eq!(
        store.log_archive(&jobs[0].id).await.unwrap(),
        None,
        "its output went with it"
    );
    assert_eq!(
        store.log_archive(&jobs[2].id).await.unwrap().map(|a| a.lines),
        Some(1)
    );
    let running = stored(&store, &jobs[3].id)
        .await
        .expect("an unfinished job is never deleted");
    assert_eq!(running.phase, JobPhase::Running);
    let mut tx = store.begin().await.unwrap();
    assert!(
        tx.dependents(&jobs[0].id).await.unwrap().is_empty(),
        "the edge went with its job"
    );
    tx.commit().await.unwrap();

    // A replay from before what was deleted has gaps: refused, saying where to resume.
    assert_eq!(
        store.retention_horizon(&Scope::All).await.unwrap(),
        newest_expired
    );
    assert_eq!(
        store.retention_horizon(&team("team-a")).await.unwrap(),
        newest_expired
    );
    assert_eq!(store.retention_horizon(&team("team-b")).await.unwrap(), 0);
    match store.events_after(0, 100, None, &Scope::All).await {
        Err(StoreError::CursorExpired { after: 0, oldest }) => assert_eq!(oldest, newest_expired),
        other => panic!("expected CursorExpired, got {other:?}"),
    }
    assert!(matches!(
        store
            .events_after(newest_expired - 1, 100, None, &team("team-a"))
            .await,
        Err(StoreError::CursorExpired { .. })
    ));
    // From the horizon on, nothing is missing; nothing of team-b was deleted, so its own
    // replay from the start is whole; one job's replay needs no horizon (its events go with it).
    let after = store
        .events_after(newest_expired, 100, None, &Scope::All)
        .await
        .expect("a replay from the horizon");
    assert!(after.iter().all(|e| e.seq > newest_expired));
    assert!(after.iter().any(|e| e.job_id == jobs[3].id));
    let team_b = store
        .events_after(0, 100, None, &team("team-b"))
        .await
        .expect("team-b lost nothing");
    assert_eq!(team_b.len(), 2);
    let own = store
        .events_after(0, 100, Some(&jobs[3].id), &Scope::All)
        .await
        .expect("a job's own replay");
    assert_eq!(own.len(), 2);

    // A walk from where the last one stopped finds nothing more; team-b's own rule takes its job.
    let again = store
        .expire_jobs(
            &expire_now(RuleNamespaces::AllBut(vec!["team-b".into()])),
            batch.position,
            100,
        )
        .await
        .unwrap();
    assert_eq!((again.scanned, again.jobs), (0, 0), "{again:?}");
    let b = store
        .expire_jobs(&expire_now(RuleNamespaces::Only("team-b".into())), None, 100)
        .await
        .unwrap();
    assert_eq!(b.jobs, 1);
    assert!(stored(&store, &jobs[2].id).await.is_none());
    assert!(store.retention_horizon(&team("team-b")).await.unwrap() > 0);
    // Jobs that finish after a rule's time are not its.
    let old = ExpiryRule {
        before: now() - Duration::hours(1),
        namespaces: RuleNamespaces::AllBut(Vec::new()),
    };
    let none = store.expire_jobs(&old, None, 100).await.unwrap();
    assert_eq!((none.scanned, none.jobs), (0, 0));
}

async fn retention_walks_in_batches_from_where_it_stopped(store: Arc<dyn Store>) {
    let mut jobs = submit(&store, (0..5).map(|i| job("team-c", &format!("c-{i}"))).collect()).await;
    for job in &mut jobs {
        move_to(&store, job, JobPhase::Succeeded).await;
    }
    let rule = expire_now(RuleNamespaces::AllBut(Vec::new()));
    let first = store.expire_jobs(&rule, None, 2).await.unwrap();
    assert_eq!((first.scanned, first.jobs), (2, 2));
    let second = store.expire_jobs(&rule, first.position, 2).await.unwrap();
    assert_eq!((second.scanned, second.jobs), (2, 2));
    let third = store.expire_jobs(&rule, second.position, 2).await.unwrap();
    assert_eq!((third.scanned, third.jobs), (1, 1));
    // Oldest finished first: the jobs went in the order they finished.
    assert!(first.newest_deleted < second.newest_deleted && second.newest_deleted < third.newest_deleted);
    for job in &jobs {
        assert!(stored(&store, &job.id).await.is_none());
    }
}

async fn unfinished_jobs_are_the_pending_and_running_ones(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "pending"),
            job("team-a", "running"),
            job("team-b", "cancelled"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[1], JobPhase::Running).await;
    move_to(&store, &mut jobs[2], JobPhase::Cancelled).await;
    let mut tx = store.begin().await.unwrap();
    tx.mark_launched(&jobs[1].id).await.unwrap();
    tx.commit().await.unwrap();

    let unfinished = store.unfinished_jobs().await.unwrap();
    let seen: Vec<(&str, JobPhase, bool)> = unfinished
        .iter()
        .map(|r| (r.job.id.as_str(), r.job.phase, r.launched))
        .collect();
    assert_eq!(
        seen,
        [
            (jobs[0].id.as_str(), JobPhase::Pending, false),
            (jobs[1].id.as_str(), JobPhase::Running, true),
        ],
        "oldest first, terminal jobs left out"
    );
    assert_eq!(unfinished[1].job, jobs[1], "the job as last saved");
}

/// The store's SQL puts every job in the shard `shard_of` computes: a replica reading its
/// shards' outboxes gets exactly its jobs, and the shards together get them all, once.
async fn outboxes_hand_each_shard_only_its_own_jobs(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        (0..200).map(|i| job("team-a", &format!("j{i}"))).collect(),
    )
    .await;
    // Upper-case hex digits (an id written by hand) map as their lower-case selves.
    let mut upper = job("team-a", "upper");
    upper.id = upper.id.to_uppercase();
    jobs.extend(submit(&store, vec![upper]).await);
    let mut tx = store.begin().await.unwrap();
    for j in &mut jobs {
        move_in(&mut *tx, j, JobPhase::Cancelled).await;
        tx.request_cancellation(&j.id, now()).await.unwrap();
    }
    tx.commit().await.unwrap();
    let everything: BTreeSet<String> = jobs.iter().map(|j| j.id.clone()).collect();
    let mut launched_union = BTreeSet::new();
    let mut cancelled_union = BTreeSet::new();
    // Four replicas' worth of shards: 0, 4, 8… for the first, 1, 5, 9… for the next.
    for first in 0..4 {
        let shards: ShardSet = (first..SHARD_COUNT).step_by(4).collect();
        let unlaunched = store.unlaunched_jobs(1000, Some(shards)).await.unwrap();
        let cancelled = store.pending_cancellations(1000, Some(shards)).await.unwrap();
        for j in unlaunched.iter().chain(&cancelled) {
            assert!(
                shards.holds(&j.id),
                "{} (shard {}) is not in {}",
                j.id,
                shard_of(&j.id),
                shards.to_list()
            );
        }
        assert!(
            !unlaunched.is_empty(),
            "200 random ids leave no quarter of the shards empty"
        );
        for j in unlaunched {
            assert!(launched_union.insert(j.id), "a job in two sets of shards");
        }
        cancelled_union.extend(cancelled.into_iter().map(|j| j.id));
    }
    assert_eq!(launched_union, everything);
    assert_eq!(cancelled_union, everything);
    assert!(
        store
            .unlaunched_jobs(1000, Some(ShardSet::NONE))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.unlaunched_jobs(1000, None).await.unwrap().len(),
        everything.len()
    );
}

async fn pending_cancellations_last_until_done(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![job("team-a", "one"), job("team-a", "two"), job("team-a", "three")],
    )
    .await;
    let earlier = now() - Duration::seconds(10);
    let mut tx = store.begin().await.unwrap();
    move_in(&mut *tx, &mut jobs[0], JobPhase::Cancelled).await;
    tx.request_cancellation(&jobs[0].id, now()).await.unwrap();
    move_in(&mut *tx, &mut jobs[1], JobPhase::Cancelled).await;
    tx.request_cancellation(&jobs[1].id, earlier).await.unwrap();
    // Asked twice (a retried batch, say): still one pending cancellation.
    tx.request_cancellation(&jobs[1].id, earlier).await.unwrap();
    // Not visible until committed.
    assert!(store.pending_cancellations(10, None).await.unwrap().is_empty());
    tx.commit().await.unwrap();

    let pending = store.pending_cancellations(10, None).await.unwrap();
    assert_eq!(
        ids(&pending),
        [jobs[1].id.as_str(), jobs[0].id.as_str()],
        "oldest request first"
    );
    assert_eq!(pending[0], jobs[1], "the job as saved, cancelled");
    assert_eq!(
        ids(&store.pending_cancellations(1, None).await.unwrap()),
        [jobs[1].id.as_str()]
    );

    let mut tx = store.begin().await.unwrap();
    tx.cancellation_done(&jobs[1].id).await.unwrap();
    // Done for a job with nothing pending is harmless.
    tx.cancellation_done(&jobs[2].id).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        ids(&store.pending_cancellations(10, None).await.unwrap()),
        [jobs[0].id.as_str()]
    );
}

async fn active_in_namespace_counts_the_transactions_own_inserts(store: Arc<dyn Store>) {
    let mut jobs = submit(
        &store,
        vec![
            job("team-a", "pending"),
            job("team-a", "cancelled"),
            job("team-b", "running"),
        ],
    )
    .await;
    move_to(&store, &mut jobs[1], JobPhase::Cancelled).await;
    move_to(&store, &mut jobs[2], JobPhase::Running).await;

    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.active_in_namespace("team-a").await.unwrap(), 1);
    assert_eq!(tx.active_in_namespace("team-b").await.unwrap(), 1);
    assert_eq!(tx.active_in_namespace("team-c").await.unwrap(), 0);
    insert(&mut *tx, &mut job("team-a", "new-1")).await;
    insert(&mut *tx, &mut job("team-a", "new-2")).await;
    assert_eq!(
        tx.active_in_namespace("team-a").await.unwrap(),
        3,
        "the transaction's own count"
    );
    assert_eq!(tx.active_in_namespace("team-b").await.unwrap(), 1);
    // A job this transaction finishes no longer counts.
    move_in(&mut *tx, &mut jobs[0], JobPhase::Cancelled).await;
    assert_eq!(tx.active_in_namespace("team-a").await.unwrap(), 2);
    drop(tx);

    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        tx.active_in_namespace("team-a").await.unwrap(),
        1,
        "a dropped transaction's jobs count"
    );
    tx.commit().await.unwrap();
}

/// Jobs in three namespaces, with names long and short, in every phase: what
/// [`list_jobs_pages_every_filter_combination_newest_first`] pages through.
async fn varied_jobs(store: &Arc<dyn Store>) -> Vec<Job> {
    let names = ["alpha-1", "alpha-2", "beta", "al", "gamma-alpha", "delta"];
    let mut jobs = Vec::new();
    for round in 0..3 {
        let batch = ["team-a", "team-b", "team-c"]
            .iter()
            .flat_map(|ns| names.iter().map(move |name| job(ns, &format!("{name}-{round}"))))
            .collect();
        jobs.extend(submit(store, batch).await);
    }
    let phases = [
        JobPhase::Pending,
        JobPhase::Running,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::Cancelled,
    ];
    for (i, job) in jobs.iter_mut().enumerate() {
        match phases[(i * 7) % phases.len()] {
            JobPhase::Pending => {}
            JobPhase::Running => {
                move_to(store, job, JobPhase::Running).await;
            }
            terminal => {
                if terminal != JobPhase::Cancelled {
                    move_to(store, job, JobPhase::Running).await;
                }
                move_to(store, job, terminal).await;
            }
        }
    }
    jobs
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

async fn an_accepted_job_carries_its_first_events_cursor(store: Arc<dyn Store>) {
    let before = submit_one(&store, job("team-a", "before")).await;
    let mut tx = store.begin().await.unwrap();
    let mut accepted = Vec::new();
    for name in ["one", "two"] {
        let mut job = keyed_job("team-a", name, "token:alice", name);
        let transition = Transition {
            previous_phase: None,
            phase: job.phase,
            reason: Some("Submitted".into()),
            message: Some("accepted by jobgate".into()),
        };
        let seq = tx
            .accept_job(&job, &fingerprint(&job), &transition, now())
            .await
            .expect("accepting a job");
        job.last_event_seq = seq;
        accepted.push(job);
    }
    let found = tx
        .find_by_idempotency_key(Some("token:alice"), "two")
        .await
        .unwrap()
        .expect("the transaction finds its own key");
    assert_eq!(found.id, accepted[1].id);
    assert_eq!(tx.get_job(&found.id).await.unwrap().as_ref(), Some(&accepted[1]));
    tx.commit().await.unwrap();
    assert!(accepted[0].last_event_seq > before.last_event_seq);
    assert_eq!(accepted[1].last_event_seq, accepted[0].last_event_seq + 1);
    for job in &accepted {
        assert_eq!(
            stored(&store, &job.id).await.as_ref(),
            Some(job),
            "stored with its cursor"
        );
    }
    let events = all_events(&store).await;
    let last_two: Vec<(i64, &Job)> = events[events.len() - 2..]
        .iter()
        .map(|e| (e.seq, e.job.as_ref()))
        .collect();
    assert_eq!(
        last_two,
        [
            (accepted[0].last_event_seq, &accepted[0]),
            (accepted[1].last_event_seq, &accepted[1])
        ],
        "each event's snapshot is the job as stored"
    );
    assert_eq!(events[events.len() - 1].reason.as_deref(), Some("Submitted"));
    assert_eq!(
        ids(&store.unlaunched_jobs(10, None).await.unwrap()),
        [
            before.id.as_str(),
            accepted[0].id.as_str(),
            accepted[1].id.as_str()
        ],
        "in the launch outbox"
    );
    let page = list(&store, &JobFilter::default(), &Scope::All).await;
    assert_eq!(page.total_count, 3);
    assert_eq!(page.jobs[0].1, accepted[1]);
}

async fn jobs_accepted_together_keep_their_order_and_keys(store: Arc<dyn Store>) {
    let before = submit_one(&store, keyed_job("team-a", "before", "token:alice", "old")).await;
    let mut jobs = [
        keyed_job("team-a", "one", "token:alice", "one"),
        job("team-b", "two"),
        keyed_job("team-a", "three", "token:bob", "old"),
    ];
    let transitions: Vec<Transition> = jobs
        .iter()
        .map(|j| Transition {
            previous_phase: None,
            phase: j.phase,
            reason: Some("Submitted".into()),
            message: Some("accepted by jobgate".into()),
        })
        .collect();
    let fingerprints: Vec<String> = jobs.iter().map(fingerprint).collect();
    let at = now();
    let mut tx = store.begin().await.unwrap();
    let accepted: Vec<jobgate::store::Accepted<'_>> = jobs
        .iter()
        .zip(&transitions)
        .zip(&fingerprints)
        .map(|((job, transition), fingerprint)| jobgate::store::Accepted {
            job,
            fingerprint,
            transition,
            at,
        })
        .collect();
    let seqs = tx.accept_jobs(&accepted).await.expect("accepting jobs together");
    drop(accepted);
    assert_eq!(seqs.len(), 3);
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive cursors: {seqs:?}"
    );
    assert!(seqs[0] > before.last_event_seq);
    let found = tx
        .find_by_idempotency_keys(&[
            (Some("token:alice"), "one"),
            (Some("token:alice"), "old"),
            (Some("token:bob"), "old"),
            (Some("token:carol"), "old"),
        ])
        .await
        .unwrap();
    let mut found_ids: Vec<(String, String)> = found.into_iter().map(|(key, k)| (key, k.id)).collect();
    found_ids.sort();
    let mut expected = vec![
        (
            jobgate::store::scoped_key(Some("token:alice"), "one"),
            jobs[0].id.clone(),
        ),
        (
            jobgate::store::scoped_key(Some("token:alice"), "old"),
            before.id.clone(),
        ),
        (
            jobgate::store::scoped_key(Some("token:bob"), "old"),
            jobs[2].id.clone(),
        ),
    ];
    expected.sort();
    assert_eq!(found_ids, expected, "each key finds its submitter's job only");
    tx.commit().await.unwrap();
    for (job, seq) in jobs.iter_mut().zip(&seqs) {
        job.last_event_seq = *seq;
        assert_eq!(stored(&store, &job.id).await.as_ref(), Some(&*job));
    }
    let events = all_events(&store).await;
    let last: Vec<(i64, &str)> = events[events.len() - 3..]
        .iter()
        .map(|e| (e.seq, e.job_id.as_str()))
        .collect();
    assert_eq!(
        last,
        jobs.iter()
            .map(|j| (j.last_event_seq, j.id.as_str()))
            .collect::<Vec<_>>()
    );
    let page = list(&store, &JobFilter::default(), &Scope::All).await;
    assert_eq!(page.total_count, 4);
    assert_eq!(
        page_ids(&page)[..3],
        [jobs[2].id.as_str(), jobs[1].id.as_str(), jobs[0].id.as_str()]
    );
}

async fn counts_follow_every_insert_and_phase_change(store: Arc<dyn Store>) {
    let mut jobs = varied_jobs(&store).await;
    let check = |jobs: Vec<Job>, store: Arc<dyn Store>| async move {
        for scope in [
            Scope::All,
            team("team-b"),
            Scope::namespaces(["team-a", "team-c"]),
        ] {
            let stats = store.stats(1, 60, &scope).await.unwrap();
            for phase in JobPhase::ALL {
                let expected = jobs.iter().filter(|j| j.phase == phase && scope.sees(j)).count() as i64;
                assert_eq!(
                    stats.counts.get(&phase).copied().unwrap_or(0),
                    expected,
                    "{phase:?} in {scope:?}"
                );
                let page = store
                    .list_jobs(
                        &JobFilter {
                            phases: Some(vec![phase]),
                            ..JobFilter::default()
                        },
                        &scope,
                        1,
                        None,
                        SCAN_BUDGET,
                    )
                    .await
                    .unwrap();
                assert_eq!(
                    page.total_count, expected,
                    "total_count of {phase:?} in {scope:?}"
                );
            }
        }
        let mut tx = store.begin().await.unwrap();
        for ns in ["team-a", "team-b", "team-c"] {
            let active = jobs
                .iter()
                .filter(|j| j.spec.namespace == ns && !j.phase.is_terminal())
                .count() as i64;
            assert_eq!(tx.active_in_namespace(ns).await.unwrap(), active, "{ns}");
        }
    };
    check(jobs.clone(), store.clone()).await;
    // A dropped transaction's changes are not counted.
    let mut tx = store.begin().await.unwrap();
    insert(&mut *tx, &mut job("team-a", "dropped")).await;
    let mut moved = jobs[0].clone();
    move_in(&mut *tx, &mut moved, JobPhase::Cancelled).await;
    drop(tx);
    check(jobs.clone(), store.clone()).await;
    // Committed ones are.
    move_to(&store, &mut jobs[0], JobPhase::Cancelled).await;
    jobs.push(submit_one(&store, job("team-d", "new")).await);
    check(jobs.clone(), store.clone()).await;
    assert_eq!(
        store.namespaces(10, &Scope::All).await.unwrap(),
        ["team-a", "team-b", "team-c", "team-d"]
    );
}

// ---- Query plans: no read a page, a count or a restart makes grows with the jobs stored ----

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

/// A PostgreSQL that takes TLS only (as managed services do): jobgate connects over TLS,
/// verifying the server's certificate against the CA its URL names, and refuses a server it
/// cannot verify.
fn webhook(id: &str, owner: &str, scope: Scope) -> Webhook {
    Webhook {
        id: id.to_owned(),
        owner: owner.to_owned(),
        url: format!("https://hooks.example.com/{id}"),
        filter: JobFilter {
            phases: Some(vec![JobPhase::Succeeded, JobPhase::Failed]),
            namespace: Some("team-a".into()),
            name_contains: Some("nightly".into()),
        },
        scope,
        secret: format!("whsec_{id}"),
        created_at: 1_700_000_000_000,
        cursor: 7,
        revision: 0,
        attempts: 0,
        failing_since: None,
        last_error: None,
        last_attempt_at: None,
        next_attempt_at: None,
        parked: false,
        claimed_by: None,
        disabled_reason: None,
        disabled_at: None,
    }
}

async fn webhooks_keep_their_filter_scope_secret_and_owner(store: Arc<dyn Store>) {
    let alices = webhook("w1", "token:alice", team("team-a"));
    let admins = webhook("w2", "token:admin", Scope::All);
    store.insert_webhook(&alices).await.unwrap();
    store.insert_webhook(&admins).await.unwrap();
    assert_eq!(store.webhook("w1").await.unwrap(), Some(alices.clone()));
    assert_eq!(store.webhook("w2").await.unwrap(), Some(admins.clone()));
    assert_eq!(
        store.webhooks(Some("token:alice")).await.unwrap(),
        vec![alices.clone()]
    );
    assert_eq!(store.webhooks(None).await.unwrap().len(), 2);
    assert!(store.delete_webhook("w1").await.unwrap());
    assert!(!store.delete_webhook("w1").await.unwrap());
    assert_eq!(store.webhook("w1").await.unwrap(), None);
}

async fn a_webhook_is_delivered_by_one_claimant_until_its_claim_expires(store: Arc<dyn Store>) {
    store
        .insert_webhook(&webhook("w1", "o", Scope::All))
        .await
        .unwrap();
    let held = store.claim_webhooks("a", 1_000, 31_000).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].claimed_by.as_deref(), Some("a"));
    // Another process gets nothing while the claim lasts; the holder renews it.
    assert!(store.claim_webhooks("b", 2_000, 32_000).await.unwrap().is_empty());
    assert_eq!(store.claim_webhooks("a", 20_000, 50_000).await.unwrap().len(), 1);
    assert!(
        store
            .claim_webhooks("b", 40_000, 70_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Not renewed in time: taken over.
    assert_eq!(store.claim_webhooks("b", 50_001, 80_000).await.unwrap().len(), 1);
    assert!(
        !store
            .webhook_delivered("w1", "a", 0, 9, Some(50_002))
            .await
            .unwrap()
    );
    // Released at shutdown: free at once.
    store.release_webhooks("b").await.unwrap();
    assert_eq!(store.claim_webhooks("a", 50_003, 80_003).await.unwrap().len(), 1);
}

async fn a_disabled_webhook_is_never_claimed_again_and_keeps_its_first_reason(store: Arc<dyn Store>) {
    store
        .insert_webhook(&webhook("w1", "token:alice", team("team-a")))
        .await
        .unwrap();
    assert_eq!(store.claim_webhooks("a", 1_000, 31_000).await.unwrap().len(), 1);
    assert!(
        store
            .disable_webhook("w1", "the API token \"alice\" no longer exists", 2_000)
            .await
            .unwrap()
    );
    let disabled = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!(
        disabled.disabled_reason.as_deref(),
        Some("the API token \"alice\" no longer exists")
    );
    assert_eq!(
        (disabled.disabled_at, disabled.claimed_by.as_deref()),
        (Some(2_000), None)
    );
    // Still listed, as its owner's, with the reason.
    assert_eq!(
        store.webhooks(Some("token:alice")).await.unwrap(),
        vec![disabled.clone()]
    );
    // No outcome lands on it, and no claim (renewal or takeover) takes it.
    assert!(
        !store
            .webhook_delivered("w1", "a", 0, 9, Some(3_000))
            .await
            .unwrap()
    );
    assert!(store.claim_webhooks("a", 3_000, 33_000).await.unwrap().is_empty());
    assert!(
        store
            .claim_webhooks("b", 40_000, 70_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Nor does a replay enable it again.
    assert!(store.replay_webhook("w1", 0).await.unwrap());
    assert!(
        store
            .claim_webhooks("a", 41_000, 71_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Disabled twice: the first reason stays.
    assert!(
        !store
            .disable_webhook("w1", "disabled by token:admin", 4_000)
            .await
            .unwrap()
    );
    let again = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!(again.disabled_reason, disabled.disabled_reason);
    assert_eq!(again.disabled_at, Some(2_000));
    assert!(!store.disable_webhook("missing", "r", 4_000).await.unwrap());
}

async fn a_webhooks_scope_narrows_only_from_the_scope_read(store: Arc<dyn Store>) {
    let both = Scope::namespaces(["team-a", "team-b"]);
    for (id, scope) in [("w1", both.clone()), ("w2", Scope::All)] {
        store
            .insert_webhook(&webhook(id, "jwt:[null,\"carol\"]", scope))
            .await
            .unwrap();
    }
    assert!(
        store
            .narrow_webhook_scope("w1", &both, &team("team-b"))
            .await
            .unwrap()
    );
    assert_eq!(store.webhook("w1").await.unwrap().unwrap().scope, team("team-b"));
    // A narrowing computed from a scope that has changed since misses.
    assert!(
        !store
            .narrow_webhook_scope("w1", &both, &team("team-a"))
            .await
            .unwrap()
    );
    assert_eq!(store.webhook("w1").await.unwrap().unwrap().scope, team("team-b"));
    // Every namespace (stored as NULL) narrows too.
    assert!(
        store
            .narrow_webhook_scope("w2", &Scope::All, &team("team-a"))
            .await
            .unwrap()
    );
    assert_eq!(store.webhook("w2").await.unwrap().unwrap().scope, team("team-a"));
    assert!(
        !store
            .narrow_webhook_scope("w2", &Scope::All, &team("team-b"))
            .await
            .unwrap()
    );
}

async fn a_webhook_outcome_lands_only_under_its_claim_and_revision(store: Arc<dyn Store>) {
    store
        .insert_webhook(&webhook("w1", "o", Scope::All))
        .await
        .unwrap();
    store.claim_webhooks("a", 1_000, 31_000).await.unwrap();
    let failure = WebhookFailure {
        attempts: 1,
        failing_since: 2_000,
        error: "the endpoint answered HTTP 500".into(),
        at: 2_000,
        next_attempt_at: Some(3_000),
    };
    assert!(store.webhook_failed("w1", "a", 0, &failure).await.unwrap());
    let failing = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!((failing.attempts, failing.next_attempt_at), (1, Some(3_000)));
    assert_eq!(
        failing.last_error.as_deref(),
        Some("the endpoint answered HTTP 500")
    );
    assert!(
        store
            .webhook_delivered("w1", "a", 0, 9, Some(3_000))
            .await
            .unwrap()
    );
    let delivered = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!(
        (delivered.cursor, delivered.attempts, delivered.last_error),
        (9, 0, None)
    );
    assert_eq!(delivered.last_attempt_at, Some(3_000));
    // Passing over events that do not match is no attempt.
    assert!(store.webhook_delivered("w1", "a", 0, 12, None).await.unwrap());
    assert_eq!(
        store.webhook("w1").await.unwrap().unwrap().last_attempt_at,
        Some(3_000)
    );
    // A replay moves the cursor back under a new revision: a delivery started before it
    // records nothing.
    assert!(store.replay_webhook("w1", 3).await.unwrap());
    assert!(
        !store
            .webhook_delivered("w1", "a", 0, 13, Some(4_000))
            .await
            .unwrap()
    );
    let replayed = store.webhook("w1").await.unwrap().unwrap();
    assert_eq!((replayed.cursor, replayed.revision), (3, 1));
    // Parking gives up the claim; a parked endpoint is claimed by nobody until replayed.
    let parks = WebhookFailure {
        next_attempt_at: None,
        ..failure
    };
    assert!(store.webhook_failed("w1", "a", 1, &parks).await.unwrap());
    let parked = store.webhook("w1").await.unwrap().unwrap();
    assert!(parked.parked);
    assert_eq!(parked.claimed_by, None);
    assert!(store.claim_webhooks("a", 5_000, 35_000).await.unwrap().is_empty());
    assert!(store.replay_webhook("w1", 3).await.unwrap());
    assert_eq!(store.claim_webhooks("a", 5_000, 35_000).await.unwrap().len(), 1);
    assert!(!store.replay_webhook("nope", 3).await.unwrap());
}

#[tokio::test]
async fn postgres_over_tls_verifies_the_server_and_refuses_one_it_cannot_verify() {
    let Some(pg) = Postgres::start_tls() else {
        return;
    };
    let with = |query: String| format!("{}?{query}", pg.url());
    let verified = with(format!(
        "sslmode=verify-full&sslrootcert={}",
        pg.ca_cert().display()
    ));
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::connect(&verified)
            .await
            .expect("connecting over TLS to a server the CA vouches for"),
    );
    let job = submit_one(&store, job("team-a", "over-tls")).await;
    assert_eq!(stored(&store, &job.id).await.as_ref(), Some(&job));

    let plain = PostgresStore::connect(&with("sslmode=disable".into())).await;
    let error = format!("{:#}", plain.expect_err("the server lets no one in without TLS"));
    assert!(error.contains("pg_hba.conf"), "{error}");

    let untrusted = with(format!(
        "sslmode=verify-full&sslrootcert={}",
        pg.untrusted_ca_cert().display()
    ));
    let refused = PostgresStore::connect(&untrusted).await;
    let error = format!(
        "{:#}",
        refused.expect_err("a server no trusted CA signed is refused")
    );
    assert!(error.to_lowercase().contains("certificate"), "{error}");
}

// ---- The archive of jobs' output ----

fn log_line(source: Option<&str>, text: String) -> LogLine {
    LogLine {
        source: source.map(str::to_owned),
        text,
    }
}

/// An append of `lines` from `source` with no position kept.
fn plain_append(job: &str, lines: Vec<LogLine>) -> LogAppend {
    LogAppend {
        job_id: job.to_owned(),
        source: String::new(),
        position: None,
        lines,
        lost: false,
    }
}

const CAP: i64 = 64 << 20;

async fn log_lines_are_archived_in_order_and_paged_by_cursor(store: Arc<dyn Store>) {
    assert_eq!(
        store.log_archive("j1").await.unwrap(),
        None,
        "nothing archived yet"
    );
    assert!(store.log_lines("j1", 0, 10, 1 << 20).await.unwrap().is_empty());
    // Several appends (chunks), of two jobs, in one transaction and in several.
    let mut expected = Vec::new();
    for batch in 0..5 {
        let lines: Vec<LogLine> = (0..700)
            .map(|i| log_line(Some("pod-a"), format!("line {}", batch * 700 + i)))
            .collect();
        expected.extend(lines.clone());
        let other = plain_append("j2", vec![log_line(None, format!("other {batch}"))]);
        let outcomes = store
            .append_logs(&[plain_append("j1", lines), other], CAP)
            .await
            .unwrap();
        assert_eq!(outcomes, [LogAppended::Appended, LogAppended::Appended]);
    }
    let archive = store.log_archive("j1").await.unwrap().expect("an archive");
    assert_eq!(archive.lines, 3500);
    assert!(!archive.truncated);
    let bytes: i64 = expected.iter().map(|l| l.text.len() as i64 + 1).sum();
    assert_eq!(archive.bytes, bytes);
    // Paged by cursor, across chunk boundaries: every line once, in order.
    let mut read = Vec::new();
    let mut from = 0;
    loop {
        let page = store.log_lines("j1", from, 333, 1 << 20).await.unwrap();
        let Some((last, _)) = page.last() else { break };
        from = last + 1;
        for (at, line) in page {
            assert_eq!(at, read.len() as i64, "cursors are line offsets");
            read.push(line);
        }
    }
    assert_eq!(read, expected);
    // A page stops at its byte bound, one line at least.
    let small = store.log_lines("j1", 10, 100, 20).await.unwrap();
    assert_eq!(small.len(), 2, "line 10 and line 11: 8 bytes each");
    assert_eq!(store.log_lines("j1", 10, 100, 1).await.unwrap().len(), 1);
    assert!(store.log_lines("j1", 3500, 10, 1 << 20).await.unwrap().is_empty());
    let other = store.log_lines("j2", 0, 100, 1 << 20).await.unwrap();
    let texts: Vec<&str> = other.iter().map(|(_, l)| l.text.as_str()).collect();
    assert_eq!(texts, ["other 0", "other 1", "other 2", "other 3", "other 4"]);
    assert_eq!(other[0].1.source, None);
}

async fn a_log_append_lands_only_from_the_stored_position(store: Arc<dyn Store>) {
    let append = |expected: Option<&str>, now: &str, text: &str| LogAppend {
        job_id: "j".into(),
        source: "pod-a".into(),
        position: Some((expected.map(str::to_owned), now.to_owned())),
        lines: vec![log_line(Some("pod-a"), text.to_owned())],
        lost: false,
    };
    let first = store
        .append_logs(&[append(None, "p1", "one")], CAP)
        .await
        .unwrap();
    assert_eq!(first, [LogAppended::Appended]);
    assert_eq!(
        store.log_position("j", "pod-a").await.unwrap().as_deref(),
        Some("p1")
    );
    // A second follower that read no position (or an older one) writes nothing.
    let stale = store
        .append_logs(
            &[append(None, "p1", "one again"), append(Some("p0"), "p2", "x")],
            CAP,
        )
        .await
        .unwrap();
    assert_eq!(stale, [LogAppended::Stale, LogAppended::Stale]);
    let next = store
        .append_logs(&[append(Some("p1"), "p2", "two")], CAP)
        .await
        .unwrap();
    assert_eq!(next, [LogAppended::Appended]);
    let texts: Vec<String> = store
        .log_lines("j", 0, 10, 1 << 20)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, l)| l.text)
        .collect();
    assert_eq!(texts, ["one", "two"], "nothing twice, nothing out of order");
    assert_eq!(
        store.log_position("j", "pod-a").await.unwrap().as_deref(),
        Some("p2")
    );
    assert_eq!(store.log_position("j", "pod-b").await.unwrap(), None);
}

async fn a_log_archive_is_closed_at_its_cap_with_a_marker(store: Arc<dyn Store>) {
    let lines = |n: usize| {
        (0..n)
            .map(|i| log_line(None, format!("{i:09}")))
            .collect::<Vec<_>>()
    };
    // 10 bytes a line: 25 fit in 250.
    let outcomes = store
        .append_logs(&[plain_append("j", lines(20)), plain_append("j", lines(20))], 250)
        .await
        .unwrap();
    assert_eq!(outcomes, [LogAppended::Appended, LogAppended::Truncated]);
    let later = store
        .append_logs(&[plain_append("j", lines(1))], 250)
        .await
        .unwrap();
    assert_eq!(
        later,
        [LogAppended::Closed],
        "a closed archive takes nothing more"
    );
    let archive = store.log_archive("j").await.unwrap().unwrap();
    assert!(archive.truncated);
    assert_eq!(archive.lines, 26, "the 25 lines that fit, then the marker");
    let all = store.log_lines("j", 0, 100, 1 << 20).await.unwrap();
    assert_eq!(all.len(), 26);
    assert!(all[24].1.text.starts_with("000000004"));
    assert!(all[25].1.text.contains("output truncated"), "{:?}", all[25]);
}

async fn a_log_archive_closed_after_lost_lines_takes_nothing_more(store: Arc<dyn Store>) {
    let lost = LogAppend {
        lost: true,
        ..plain_append("j", vec![log_line(None, "last kept".into())])
    };
    assert_eq!(
        store.append_logs(&[lost], CAP).await.unwrap(),
        [LogAppended::Truncated]
    );
    let texts: Vec<String> = store
        .log_lines("j", 0, 10, 1 << 20)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, l)| l.text)
        .collect();
    assert_eq!(texts.len(), 2);
    assert_eq!(texts[0], "last kept");
    assert!(texts[1].contains("lines were lost"), "{texts:?}");
    assert!(store.log_archive("j").await.unwrap().unwrap().truncated);
    let later = store
        .append_logs(&[plain_append("j", vec![log_line(None, "more".into())])], CAP)
        .await
        .unwrap();
    assert_eq!(later, [LogAppended::Closed]);
}
