//! Tenancy, at the service itself: every entry point of [`JobService`] shows a caller in
//! team-a nothing of team-b, and answers about team-b's job exactly as about a job that never
//! existed. Each test drives a real service (SQLite in a temporary directory, the local
//! executor running real processes) with two tenants, and checks that the owner or an admin
//! does see what the other tenant may not, so that no test passes by showing nothing at all.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

use super::{JobService, ServiceConfig, ServiceError};
use crate::executor::local::sandbox::{RunAs, reachable_path};
use crate::executor::local::{LocalConfig, LocalExecutor};
use crate::executor::{Executor, ExecutorError, LogLine, RunInfo};
use crate::model::{Job, JobEvent, JobFilter, JobPhase, Scope, SubmitRequest, ValidationLimits};
use crate::store::{Durability, SqliteStore};

/// A job id no job has: what another tenant's job must look like.
const UNKNOWN: &str = "01900000-0000-7000-8000-000000000000";

/// A hang guard for a slow machine, never an assertion.
const WAIT: Duration = Duration::from_secs(60);

fn team_a() -> Scope {
    Scope::namespaces(["team-a"])
}

fn team_b() -> Scope {
    Scope::namespaces(["team-b"])
}

/// The local executor, but reporting one run for every job it is asked about (it reports
/// none of its own), so that `runs` has something another tenant must not see.
struct WithRuns(LocalExecutor);

#[async_trait]
impl Executor for WithRuns {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    async fn launch(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        self.0.launch(job).await
    }
    async fn adopt(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        self.0.adopt(job).await
    }
    async fn cancel(&self, job: &Job) -> Result<(), ExecutorError> {
        self.0.cancel(job).await
    }
    async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ExecutorError> {
        self.0.logs(job, tail_lines).await
    }
    fn log_stream(
        &self,
        job: Arc<Job>,
        tail_lines: usize,
        follow_until: Option<BoxFuture<'static, ()>>,
    ) -> BoxStream<'static, Result<LogLine, ExecutorError>> {
        self.0.log_stream(job, tail_lines, follow_until)
    }
    async fn start(&self) {
        self.0.start().await;
    }
    fn output_pending(&self, job_id: &str) -> bool {
        self.0.output_pending(job_id)
    }
    fn has_finished(&self, job_id: &str) -> bool {
        self.0.has_finished(job_id)
    }
    fn runs(&self, job_id: &str) -> Vec<RunInfo> {
        vec![RunInfo {
            name: format!("{job_id}-run-0"),
            index: None,
            phase: "Running",
            exit_code: None,
            reason: None,
            message: None,
            created_at: None,
            finished_at: None,
        }]
    }
    fn template_available(&self, template: &str) -> Result<(), String> {
        self.0.template_available(template)
    }
    fn is_ready(&self) -> bool {
        self.0.is_ready()
    }
    async fn shutdown(&self) {
        self.0.shutdown().await;
    }
}

/// A running service over its own temporary directory.
pub(super) struct Fixture {
    pub(super) service: JobService,
    _dir: tempfile::TempDir,
}

impl Fixture {
    pub(super) async fn start() -> Self {
        Self::start_with(ValidationLimits::default()).await
    }

    async fn start_with(limits: ValidationLimits) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Jobs run as `nobody` when the tests run as root: it must reach its work directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("the temporary directory is ours");
        let run_as = nix::unistd::geteuid()
            .is_root()
            .then(|| RunAs::resolve("nobody").expect("the user nobody exists"));
        let path = reachable_path("/usr/local/bin:/usr/bin:/bin");
        let config = LocalConfig {
            data_dir: dir.path().join("data"),
            work_root: dir.path().join("work"),
            run_as,
            launcher: None,
            retry_delay: Duration::from_millis(10),
            retry_delay_cap: Duration::from_millis(100),
            kill_grace: Duration::from_millis(500),
            max_log_bytes: 1 << 20,
            path,
            credential_files: Vec::new(),
        };
        let store = SqliteStore::open(&config.data_dir, Durability::Normal)
            .await
            .expect("the store opens");
        let (observations_tx, observations_rx) = mpsc::channel(1024);
        let executor = LocalExecutor::new(config, observations_tx).expect("the local executor starts");
        let store: Arc<dyn crate::store::Store> = Arc::new(store);
        let metrics = crate::metrics::Metrics::new();
        let logs =
            crate::jobs::log_archive::LogArchiver::start(store.clone(), Default::default(), metrics.clone());
        executor.archive_to(logs.clone());
        let service = JobService::start(
            store,
            Arc::new(WithRuns(executor)),
            observations_rx,
            ServiceConfig {
                limits,
                logs: Some(logs),
                ..ServiceConfig::new(metrics)
            },
        )
        .await
        .expect("the service starts");
        Self { service, _dir: dir }
    }

    /// Submits a job that runs until cancelled, printing a line first.
    async fn submit(&self, scope: &Scope, namespace: &str) -> Arc<Job> {
        self.try_submit(scope, namespace, Vec::new())
            .await
            .expect("the job is accepted")
    }

    async fn try_submit(
        &self,
        scope: &Scope,
        namespace: &str,
        depends_on: Vec<String>,
    ) -> Result<Arc<Job>, ServiceError> {
        let request = SubmitRequest {
            namespace: Some(namespace.to_owned()),
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                format!("echo secret of {namespace}; sleep 60"),
            ]),
            depends_on: (!depends_on.is_empty()).then_some(depends_on),
            ..SubmitRequest::default()
        };
        Ok(self.service.submit(request, None, scope).await?.job)
    }

    pub(super) async fn stop(self) {
        self.service.shutdown().await;
    }
}

/// The answer about `id`, as text, with `id` itself replaced: equal for two ids when the
/// answers differ in nothing else.
fn about<T: std::fmt::Debug, E: std::fmt::Display>(id: &str, answer: &Result<T, E>) -> String {
    match answer {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({e})"),
    }
    .replace(id, "ID")
}

async fn next_event<S>(events: &mut S) -> Arc<JobEvent>
where
    S: Stream<Item = Result<Arc<JobEvent>, ServiceError>> + Unpin,
{
    tokio::time::timeout(WAIT, events.next())
        .await
        .expect("an event comes")
        .expect("the stream goes on")
        .expect("no error")
}

#[tokio::test]
async fn job_answers_another_tenants_job_as_one_that_does_not_exist() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let s = &f.service;
    assert!(s.job(&b.id, &team_a()).await.unwrap().is_none());
    assert!(s.job(UNKNOWN, &team_a()).await.unwrap().is_none());
    assert!(s.job(&b.id, &team_b()).await.unwrap().is_some());
    assert!(s.job(&b.id, &Scope::All).await.unwrap().is_some());
    f.stop().await;
}

#[tokio::test]
async fn jobs_pages_and_counts_hold_only_the_callers_jobs() {
    let f = Fixture::start().await;
    let mut ours = Vec::new();
    for _ in 0..2 {
        f.submit(&team_b(), "team-b").await;
        ours.push(f.submit(&team_a(), "team-a").await.id.clone());
        f.submit(&team_b(), "team-b").await;
    }
    let s = &f.service;
    let all = JobFilter::default();
    let first = s.jobs(&all, &team_a(), 1, None).await.unwrap();
    assert_eq!(first.total_count, 2);
    assert!(first.has_next_page);
    let (cursor, newest) = &first.jobs[0];
    let second = s.jobs(&all, &team_a(), 1, Some(*cursor)).await.unwrap();
    assert_eq!(second.total_count, 2);
    assert!(!second.has_next_page);
    let seen = [newest.id.clone(), second.jobs[0].1.id.clone()];
    assert_eq!(seen, [ours[1].clone(), ours[0].clone()]);

    // Naming the other tenant's namespace, or asking for its phase, finds nothing.
    let theirs = JobFilter {
        namespace: Some("team-b".into()),
        ..JobFilter::default()
    };
    let page = s.jobs(&theirs, &team_a(), 10, None).await.unwrap();
    assert_eq!((page.total_count, page.jobs.len()), (0, 0));
    let pending = JobFilter {
        phases: Some(vec![JobPhase::Pending, JobPhase::Running]),
        ..JobFilter::default()
    };
    let page = s.jobs(&pending, &team_a(), 10, None).await.unwrap();
    assert!(page.jobs.iter().all(|(_, j)| j.spec.namespace == "team-a"));
    assert_eq!(page.total_count, 2);

    assert_eq!(s.jobs(&all, &team_b(), 10, None).await.unwrap().total_count, 4);
    assert_eq!(s.jobs(&all, &Scope::All, 10, None).await.unwrap().total_count, 6);
    f.stop().await;
}

#[tokio::test]
async fn stats_count_only_the_callers_jobs() {
    let f = Fixture::start().await;
    f.submit(&team_a(), "team-a").await;
    for _ in 0..3 {
        f.submit(&team_b(), "team-b").await;
    }
    let total = |stats: &super::Stats| stats.counts.values().sum::<i64>();
    let submitted = |stats: &super::Stats| stats.activity.iter().map(|b| b.submitted).sum::<i64>();
    let a = f.service.stats(60, 60, &team_a()).await.unwrap();
    assert_eq!((total(&a), submitted(&a)), (1, 1), "{a:?}");
    let b = f.service.stats(60, 60, &team_b()).await.unwrap();
    assert_eq!((total(&b), submitted(&b)), (3, 3), "{b:?}");
    let admin = f.service.stats(60, 60, &Scope::All).await.unwrap();
    assert_eq!((total(&admin), submitted(&admin)), (4, 4), "{admin:?}");
    f.stop().await;
}

#[tokio::test]
async fn namespaces_name_only_the_callers() {
    // Namespaces in use: the caller's own.
    let f = Fixture::start().await;
    f.submit(&team_a(), "team-a").await;
    f.submit(&team_b(), "team-b").await;
    let s = &f.service;
    assert_eq!(s.namespaces(100, &team_a()).await.unwrap(), ["team-a"]);
    assert_eq!(
        s.namespaces(100, &Scope::All).await.unwrap(),
        ["default", "team-a", "team-b"]
    );
    f.stop().await;

    // Namespaces the server allows: those of them the caller may use.
    let f = Fixture::start_with(ValidationLimits {
        allowed_namespaces: vec!["team-b".into(), "team-a".into(), "team-c".into()],
        ..ValidationLimits::default()
    })
    .await;
    assert_eq!(f.service.namespaces(100, &team_a()).await.unwrap(), ["team-a"]);
    let both = Scope::namespaces(["team-a", "team-b"]);
    assert_eq!(
        f.service.namespaces(100, &both).await.unwrap(),
        ["team-a", "team-b"]
    );
    f.stop().await;
}

#[tokio::test]
async fn history_of_another_tenants_job_is_empty() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let s = &f.service;
    let theirs = s.history(&b.id, &team_a(), 100).await;
    let unknown = s.history(UNKNOWN, &team_a(), 100).await;
    assert_eq!(about(&b.id, &theirs), about(UNKNOWN, &unknown));
    assert!(theirs.unwrap().is_empty());
    assert!(!s.history(&b.id, &team_b(), 100).await.unwrap().is_empty());
    f.stop().await;
}

#[tokio::test]
async fn runs_of_another_tenants_job_are_empty() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let s = &f.service;
    assert!(s.runs(&b.id, &team_a()).await.unwrap().is_empty());
    assert!(s.runs(UNKNOWN, &team_a()).await.unwrap().is_empty());
    assert_eq!(s.runs(&b.id, &team_b()).await.unwrap().len(), 1);
    f.stop().await;
}

#[tokio::test]
async fn logs_of_another_tenants_job_are_not_found() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let s = &f.service;
    // The owner's stream shows the job's first line: the job has output to hide.
    let mut own = s
        .log_stream(&b.id, &team_b(), 10, true, None)
        .await
        .unwrap()
        .expect("the owner sees the job")
        .boxed();
    let line = tokio::time::timeout(WAIT, own.next())
        .await
        .expect("a line comes")
        .expect("the stream goes on")
        .expect("no error");
    assert_eq!(line.1.text, "secret of team-b");
    assert_eq!(s.logs(&b.id, &team_b(), 10).await.unwrap(), ["secret of team-b"]);
    for theirs in [
        s.log_page(&b.id, &team_a(), 10, None).await.map(|_| ()),
        s.log_archive(&b.id, &team_a()).await.map(|_| ()),
    ] {
        assert!(matches!(theirs, Err(ServiceError::NotFound { .. })));
    }

    let theirs = s.logs(&b.id, &team_a(), 10).await;
    let unknown = s.logs(UNKNOWN, &team_a(), 10).await;
    assert_eq!(about(&b.id, &theirs), about(UNKNOWN, &unknown));
    assert!(matches!(theirs, Err(ServiceError::NotFound { .. })));
    for follow in [false, true] {
        assert!(
            s.log_stream(&b.id, &team_a(), 10, follow, None)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            s.log_stream(UNKNOWN, &team_a(), 10, follow, None)
                .await
                .unwrap()
                .is_none()
        );
    }
    drop(own);
    f.stop().await;
}

#[tokio::test]
async fn watch_job_and_job_status_of_another_tenants_job_are_none() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let s = &f.service;
    assert!(s.watch_job(&b.id, &team_a()).await.unwrap().is_none());
    assert!(s.watch_job(UNKNOWN, &team_a()).await.unwrap().is_none());
    assert!(s.job_status(&b.id, &team_a()).await.unwrap().is_none());
    assert!(s.job_status(UNKNOWN, &team_a()).await.unwrap().is_none());

    // The owner gets the job's state first, then its cancellation, and the stream ends.
    let mut status = s
        .job_status(&b.id, &team_b())
        .await
        .unwrap()
        .expect("the owner sees the job")
        .boxed();
    let current = next_event(&mut status).await;
    assert_eq!(
        (current.job_id.as_str(), current.previous_phase),
        (b.id.as_str(), None)
    );
    s.cancel(&b.id, &team_b()).await.unwrap();
    loop {
        let event = next_event(&mut status).await;
        if event.phase == JobPhase::Cancelled {
            break;
        }
    }
    assert!(status.next().await.is_none());
    f.stop().await;
}

#[tokio::test]
async fn events_replay_only_the_callers_events() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let a = f.submit(&team_a(), "team-a").await;
    let s = &f.service;
    // B's job came first: a replay from the start that showed it would begin with it.
    let mut mine = s.events(JobFilter::default(), &team_a(), Some(0)).boxed();
    let first = next_event(&mut mine).await;
    assert_eq!(first.job_id, a.id);
    let mut admin = s.events(JobFilter::default(), &Scope::All, Some(0)).boxed();
    assert_eq!(next_event(&mut admin).await.job_id, b.id);
    f.stop().await;
}

#[tokio::test]
async fn live_events_skip_other_tenants() {
    let f = Fixture::start().await;
    let s = &f.service;
    let b = f.submit(&team_b(), "team-b").await;
    let mut mine = s.events(JobFilter::default(), &team_a(), None).boxed();
    f.submit(&team_b(), "team-b").await;
    s.cancel(&b.id, &team_b()).await.unwrap();
    // An event of the caller's namespace that only the live channel carries (no store has
    // it), published after B's: the stream can only reach it live, past B's events there,
    // so it must come first.
    s.bus()
        .publish(crate::jobs::bus::tests::event(i64::MAX, "team-a"));
    let first = next_event(&mut mine).await;
    assert_eq!(first.seq, i64::MAX, "{first:?}");
    let mut admin = s.events(JobFilter::default(), &Scope::All, Some(0)).boxed();
    assert_eq!(next_event(&mut admin).await.job_id, b.id);
    f.stop().await;
}

#[tokio::test]
async fn cancel_of_another_tenants_job_is_not_found_and_changes_nothing() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let s = &f.service;
    let theirs = s.cancel(&b.id, &team_a()).await;
    let unknown = s.cancel(UNKNOWN, &team_a()).await;
    assert_eq!(about(&b.id, &theirs), about(UNKNOWN, &unknown));
    assert!(matches!(theirs, Err(ServiceError::NotFound { .. })));
    let still = s.job(&b.id, &team_b()).await.unwrap().expect("the owner sees it");
    assert!(!still.phase.is_terminal(), "{:?}", still.phase);
    assert_eq!(
        s.cancel(&b.id, &team_b()).await.unwrap().phase,
        JobPhase::Cancelled
    );
    f.stop().await;
}

#[tokio::test]
async fn submit_may_neither_use_nor_depend_on_another_tenants_namespace() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let refused = f.try_submit(&team_a(), "team-b", Vec::new()).await;
    assert!(matches!(refused, Err(ServiceError::Forbidden(_))), "{refused:?}");

    let theirs = f.try_submit(&team_a(), "team-a", vec![b.id.clone()]).await;
    let unknown = f.try_submit(&team_a(), "team-a", vec![UNKNOWN.into()]).await;
    assert_eq!(
        about(&b.id, &theirs.map(|_| ())),
        about(UNKNOWN, &unknown.map(|_| ()))
    );
    let theirs = f.try_submit(&team_a(), "team-a", vec![b.id.clone()]).await;
    assert!(matches!(theirs, Err(ServiceError::Invalid(_))), "{theirs:?}");
    // The owner may depend on it.
    let dependent = f.try_submit(&team_b(), "team-b", vec![b.id.clone()]).await;
    assert!(dependent.is_ok(), "{dependent:?}");
    assert_eq!(
        f.service
            .jobs(&JobFilter::default(), &team_a(), 10, None)
            .await
            .unwrap()
            .total_count,
        0
    );
    f.stop().await;
}

#[tokio::test]
async fn submit_many_may_neither_use_nor_depend_on_another_tenants_namespace() {
    let f = Fixture::start().await;
    let b = f.submit(&team_b(), "team-b").await;
    let request = |namespace: &str, depends_on: Option<&str>| SubmitRequest {
        namespace: Some(namespace.to_owned()),
        command: Some(vec!["sleep".into(), "60".into()]),
        depends_on: depends_on.map(|id| vec![id.to_owned()]),
        ..SubmitRequest::default()
    };
    let answers = f
        .service
        .submit_many(
            vec![
                request("team-a", None),
                request("team-b", None),
                request("team-a", Some(&b.id)),
                request("team-a", Some(UNKNOWN)),
            ],
            None,
            &team_a(),
        )
        .await
        .expect("the call is answered");
    assert!(matches!(&answers[0], Ok(s) if s.created && s.job.spec.namespace == "team-a"));
    assert!(
        matches!(answers[1], Err(ServiceError::Forbidden(_))),
        "{:?}",
        answers[1]
    );
    // Another tenant's job is as unknown as one that never was.
    assert_eq!(
        about(&b.id, &answers[2].as_ref().map(|_| ())),
        about(UNKNOWN, &answers[3].as_ref().map(|_| ()))
    );
    assert!(
        matches!(answers[2], Err(ServiceError::Invalid(_))),
        "{:?}",
        answers[2]
    );
    let count = |scope: Scope| {
        let service = f.service.clone();
        async move {
            service
                .jobs(&JobFilter::default(), &scope, 10, None)
                .await
                .unwrap()
                .total_count
        }
    };
    assert_eq!(count(team_a()).await, 1);
    assert_eq!(count(team_b()).await, 1, "nothing was submitted to team-b");
    f.stop().await;
}
