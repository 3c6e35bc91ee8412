//! The batch/v1 Job controller, following the real one (`pkg/controller/job`, Kubernetes ≥ 1.31):
//!
//! - creates pods from the template (`generateName` `<job>-` or `<job>-<index>-`, the template's
//!   labels, an ownerReference with `controller: true`, the `batch.kubernetes.io/job-tracking`
//!   finalizer; Indexed: completion-index label and annotation, `JOB_COMPLETION_INDEX`, hostname),
//!   honouring `parallelism`, `completions` (lowest missing indexes first), `suspend` and the
//!   pod-failure back-off;
//! - counts finished pods through `status.uncountedTerminatedPods` and the tracking finalizer (add
//!   the uid, remove the finalizer, move the uid into `succeeded`/`failed`), so every step is its
//!   own status write as in a real cluster;
//! - decides the outcome in the real order: `podFailurePolicy` (`FailJob`, `Ignore`), then
//!   `backoffLimit` (failed pods, or container restarts with `restartPolicy: OnFailure`), then
//!   `activeDeadlineSeconds` (a timer from `startTime`), then the limits per index
//!   (`maxFailedIndexes`, failed indexes), then completions; writes the interim
//!   condition (`SuccessCriteriaMet` / `FailureTarget`), deletes the active pods, and writes the
//!   final one (`Complete` + `completionTime` / `Failed`) once no pod is terminating;
//! - emits the real Events (SuccessfulCreate, SuccessfulDelete, Completed, BackoffLimitExceeded,
//!   DeadlineExceeded, PodFailurePolicy, MaxFailedIndexesExceeded, FailedIndexes, Suspended,
//!   Resumed, FailedCreate).
//!
//! Indexed Jobs with `backoffLimitPerIndex` (and `maxFailedIndexes`, the `FailIndex` action) count
//! failures per index, keep `status.failedIndexes` and back off per index (`per_index`).
//!
//! Not emulated: `successPolicy`, adoption of orphan
//! pods that match the selector, and expectations (the store is read-your-writes, so they are not
//! needed). It must not write pod status (the kubelet's) nor delete Jobs (TTL and GC do).
//!
//! # Layout
//! - this module: the reconciler and one sync (reading the spec, deciding the outcome).
//! - `pods`: creating pods from the template, `manageJob`, choosing and deleting pods.
//! - `tracking`: counting finished pods with the tracking finalizer, writing the final condition.
//! - `backoff`: the pod-failure back-off.
//! - `failure_policy`: `podFailurePolicy` rules matched against a failed pod.
//! - `per_index`: `backoffLimitPerIndex`, `maxFailedIndexes`, failed indexes, per-index back-off.
//! - `indexes`: sets of completion indexes (`completedIndexes`).
//! - `status`: the Job status and its conditions as types.

mod backoff;
mod failure_policy;
mod indexes;
mod per_index;
mod pods;
mod status;
mod tracking;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::Value;
use tokio::time::Instant;

use self::backoff::BackoffRecord;
use self::indexes::Intervals;
use self::status::{Condition, FAILED, FAILURE_TARGET, JobStatus, SUCCESS_CRITERIA_MET, SUSPENDED};
use self::tracking::has_tracking_finalizer;
use super::Shared;
use super::events::{EventType, JOB_CONTROLLER};
use super::objects::{self, is_deleting, pod_is_terminal, pod_phase, str_at};
use super::runner::Reconciler;
use crate::store::{Change, ChangeKind, Store, StoreError, now_timestamp};

/// Label and annotation carrying a pod's completion index.
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// `(namespace, name)` of a Job.
type JobKey = (String, String);

#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    #[error("job {job} has a status this controller cannot read: {source}")]
    ReadStatus { job: String, source: serde_json::Error },
    #[error("writing the status of job {job}: {source}")]
    WriteStatus { job: String, source: StoreError },
    #[error("creating a pod for job {job}: {source}")]
    CreatePod { job: String, source: StoreError },
    #[error("deleting pod {pod} of job {job}: {source}")]
    DeletePod {
        job: String,
        pod: String,
        source: StoreError,
    },
    #[error("removing the tracking finalizer of pod {pod}: {source}")]
    RemoveFinalizer { pod: String, source: StoreError },
}

/// The parts of a Job's spec the controller acts on, with the API's defaults.
struct Spec<'a> {
    parallelism: i64,
    completions: Option<i64>,
    indexed: bool,
    backoff_limit: i64,
    /// `backoffLimitPerIndex` (Indexed Jobs only).
    backoff_limit_per_index: Option<i64>,
    max_failed_indexes: Option<i64>,
    active_deadline: Option<i64>,
    suspend: bool,
    restart_policy: &'a str,
    failure_policy: Option<&'a Value>,
    /// `podReplacementPolicy: Failed` (the default with a `podFailurePolicy`): a pod counts as
    /// failed, and is replaced, only once it is terminal.
    only_replace_failed: bool,
}

impl<'a> Spec<'a> {
    fn read(job: &'a Value) -> Spec<'a> {
        let spec = job.get("spec").unwrap_or(&Value::Null);
        let int = |k: &str| spec.get(k).and_then(Value::as_i64);
        let failure_policy = spec.get("podFailurePolicy").filter(|v| !v.is_null());
        let completions = int("completions");
        let parallelism = int("parallelism").unwrap_or(1).max(0);
        let indexed = str_at(spec, "/completionMode") == Some("Indexed");
        Spec {
            parallelism,
            completions,
            indexed,
            // The API's default: unlimited when failures are limited per index.
            backoff_limit: int("backoffLimit").unwrap_or(if int("backoffLimitPerIndex").is_some() {
                i64::from(i32::MAX)
            } else {
                6
            }),
            backoff_limit_per_index: int("backoffLimitPerIndex").filter(|_| indexed),
            max_failed_indexes: int("maxFailedIndexes"),
            active_deadline: int("activeDeadlineSeconds"),
            suspend: spec.get("suspend").and_then(Value::as_bool).unwrap_or(false),
            restart_policy: str_at(spec, "/template/spec/restartPolicy").unwrap_or("Never"),
            failure_policy,
            only_replace_failed: failure_policy.is_some()
                || str_at(spec, "/podReplacementPolicy") == Some("Failed"),
        }
    }

    /// The completion index of an Indexed Job's pod, if it is in range.
    fn valid_index(&self, pod: &Value) -> Option<u64> {
        let ix = completion_index(pod)?;
        (ix < u64::try_from(self.completions?).unwrap_or(0)).then_some(ix)
    }

    fn is_pod_failed(&self, pod: &Value) -> bool {
        let phase = pod_phase(pod);
        phase == "Failed" || (!self.only_replace_failed && is_deleting(pod) && phase != "Succeeded")
    }
}

fn completion_index(pod: &Value) -> Option<u64> {
    objects::annotation(pod, COMPLETION_INDEX).and_then(|i| i.parse().ok())
}

/// The Job that controls a pod, from its controller ownerReference.
fn owning_job(pod: &Value) -> Option<JobKey> {
    let owner = objects::controller_ref(pod)?;
    if str_at(owner, "/kind") != Some("Job") || str_at(owner, "/apiVersion") != Some("batch/v1") {
        return None;
    }
    Some((
        objects::namespace(pod)?.to_owned(),
        str_at(owner, "/name")?.to_owned(),
    ))
}

fn owner_uid(pod: &Value) -> Option<&str> {
    objects::controller_ref(pod).and_then(|r| r.get("uid")?.as_str())
}

/// Everything one sync works with.
struct Sync<'a> {
    job: &'a Value,
    spec: Spec<'a>,
    pods: Vec<Value>,
    now: String,
    active: i64,
    ready: i64,
    terminating: i64,
    succeeded: i64,
    prev_indexes: Intervals,
    succeeded_indexes: Intervals,
    /// With `backoffLimitPerIndex`: the failed indexes, and the failed pods awaiting their
    /// replacement, by index.
    failed_indexes: Option<Intervals>,
    replaced: HashMap<u64, per_index::Replaced>,
    backoff: BackoffRecord,
    requeue: Option<Duration>,
    error: Option<JobError>,
}

impl Sync<'_> {
    fn requeue_after(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    fn fail(&mut self, e: JobError) {
        self.error.get_or_insert(e);
    }

    fn job_name(&self) -> String {
        objects::display(self.job)
    }
}

pub(crate) struct JobController {
    shared: Arc<Shared>,
    /// Names of the pods each Job controls, fed by the change stream (the store stays the truth:
    /// every pod is read again before use).
    pods_by_job: HashMap<JobKey, BTreeSet<String>>,
    /// Each indexed pod's Job, to unindex it when it goes or changes owner.
    owner_of: HashMap<(String, String), JobKey>,
    backoff: HashMap<JobKey, BackoffRecord>,
    /// When each pod of a Job was first seen finished (the pod-failure back-off counts from
    /// there, as upstream counts from the pod's finish time), and whether it had ended then or
    /// was only being deleted (a deleted pod's finish is estimated from its deletion until it ends).
    finished: HashMap<(String, String), (Instant, bool)>,
    /// When this controller set a Job's `startTime` (by uid): `startTime` has second precision,
    /// the deadline timer uses the instant.
    started: HashMap<String, (String, Instant)>,
}

impl JobController {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        JobController {
            shared,
            pods_by_job: HashMap::new(),
            owner_of: HashMap::new(),
            backoff: HashMap::new(),
            finished: HashMap::new(),
            started: HashMap::new(),
        }
    }

    fn index_pod(&mut self, namespace: &str, name: &str, owner: Option<JobKey>) -> Option<JobKey> {
        let pod_key = (namespace.to_owned(), name.to_owned());
        let previous = self.owner_of.remove(&pod_key);
        if let Some(prev) = &previous
            && Some(prev) != owner.as_ref()
            && let Some(set) = self.pods_by_job.get_mut(prev)
        {
            set.remove(name);
            if set.is_empty() {
                self.pods_by_job.remove(prev);
            }
        }
        if let Some(owner) = owner {
            self.pods_by_job
                .entry(owner.clone())
                .or_default()
                .insert(name.to_owned());
            self.owner_of.insert(pod_key, owner);
        }
        previous
    }

    fn event(&self, store: &Store, job: &Value, kind: EventType, reason: &str, message: &str) {
        self.shared
            .recorder
            .record(store, job, kind, reason, message, JOB_CONTROLLER);
    }

    /// How long the Job has been active (since `startTime`).
    fn elapsed(&self, uid: &str, start_time: &str) -> Option<Duration> {
        if let Some((stamp, at)) = self.started.get(uid)
            && stamp == start_time
        {
            return Some(at.elapsed());
        }
        let start = objects::parse_time(start_time)?;
        Some((Utc::now() - start).to_std().unwrap_or_default())
    }

    fn write_status(&self, store: &Store, job: &Value, status: &JobStatus) -> Result<(), JobError> {
        let value = serde_json::to_value(status).map_err(|source| JobError::ReadStatus {
            job: objects::display(job),
            source,
        })?;
        let uid = objects::uid(job).to_owned();
        store
            .modify(
                "jobs.batch",
                objects::namespace(job),
                objects::name(job),
                &mut |o| {
                    if objects::uid(o) != uid {
                        return Err(StoreError::Conflict("the job was replaced".into()));
                    }
                    o["status"] = value.clone();
                    Ok(())
                },
            )
            .map(|_| ())
            .map_err(|source| JobError::WriteStatus {
                job: objects::display(job),
                source,
            })
    }
}

impl JobController {
    fn sync(
        &mut self,
        store: &Store,
        key: &JobKey,
        job: &Value,
        stored: JobStatus,
        pods: Vec<Value>,
    ) -> Result<Option<Duration>, JobError> {
        let spec = Spec::read(job);
        let uid = objects::uid(job).to_owned();
        let now_instant = Instant::now();
        let now = now_timestamp();
        let mut st = stored.clone();
        let uncounted_succeeded: HashSet<String> = st
            .uncounted_terminated_pods
            .as_ref()
            .map(|u| u.succeeded.iter().cloned().collect())
            .unwrap_or_default();
        let uncounted_failed: HashSet<String> = st
            .uncounted_terminated_pods
            .as_ref()
            .map(|u| u.failed.iter().cloned().collect())
            .unwrap_or_default();
        if st.uncounted_terminated_pods.is_none() {
            st.uncounted_terminated_pods = Some(Default::default());
        }

        let active_pods: Vec<Value> = pods
            .iter()
            .filter(|p| !pod_is_terminal(p) && !is_deleting(p))
            .cloned()
            .collect();
        let counts_as_new = |p: &Value, uncounted: &HashSet<String>| {
            has_tracking_finalizer(p)
                && !uncounted.contains(objects::uid(p))
                && (!spec.indexed || spec.valid_index(p).is_some())
        };
        let finished_at = |p: &&Value| {
            let at = objects::namespace(p)
                .and_then(|ns| self.finished.get(&(ns.to_owned(), objects::name(p).to_owned())));
            at.map_or(now_instant, |(at, _)| *at)
        };
        let new_succeeded_at: Vec<Instant> = pods
            .iter()
            .filter(|p| counts_as_new(p, &uncounted_succeeded) && pod_phase(p) == "Succeeded")
            .map(|p| finished_at(&p))
            .collect();
        let new_succeeded = new_succeeded_at.len();
        let new_failed: Vec<&Value> = pods
            .iter()
            .filter(|p| counts_as_new(p, &uncounted_failed) && spec.is_pod_failed(p))
            .collect();
        let new_failed_counted_at: Vec<Instant> = new_failed
            .iter()
            .filter(|p| failure_policy::match_pod(spec.failure_policy, p).count)
            .map(finished_at)
            .collect();
        let new_failed_counted = new_failed_counted_at.len();
        let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let failed = st.failed + as_i64(new_failed_counted) + as_i64(uncounted_failed.len());

        if st.start_time.is_none() && !spec.suspend {
            st.start_time = Some(now.clone());
            self.started.insert(uid.clone(), (now.clone(), now_instant));
        }
        let previous_backoff = self.backoff.get(key).cloned().unwrap_or_default();
        let mut sync = Sync {
            job,
            active: as_i64(active_pods.len()),
            ready: as_i64(active_pods.iter().filter(|p| objects::pod_is_ready(p)).count()),
            terminating: as_i64(
                pods.iter()
                    .filter(|p| is_deleting(p) && !pod_is_terminal(p))
                    .count(),
            ),
            succeeded: st.succeeded + as_i64(new_succeeded) + as_i64(uncounted_succeeded.len()),
            prev_indexes: Intervals::default(),
            succeeded_indexes: Intervals::default(),
            failed_indexes: None,
            replaced: HashMap::new(),
            backoff: previous_backoff.updated(&uid, &new_succeeded_at, &new_failed_counted_at),
            requeue: None,
            error: None,
            now: now.clone(),
            pods,
            spec,
        };

        // The outcome, in the real order: a decision already written, the pod failure policy,
        // the backoff limit, the deadline; success last.
        let mut finished: Option<Condition> = st
            .condition(SUCCESS_CRITERIA_MET)
            .filter(|c| c.is_true())
            .cloned();
        if finished.is_none() {
            if let Some(target) = st.condition(FAILURE_TARGET).filter(|c| c.is_true()) {
                finished = Some(Condition::new(
                    FAILED,
                    "True",
                    &target.reason,
                    &target.message,
                    &now,
                ));
            } else if let Some(message) = sync
                .pods
                .iter()
                .filter(|p| sync.spec.is_pod_failed(p))
                .find_map(|p| failure_policy::match_pod(sync.spec.failure_policy, p).fail_job)
            {
                finished = Some(Condition::new(
                    FAILURE_TARGET,
                    "True",
                    "PodFailurePolicy",
                    &message,
                    &now,
                ));
            }
        }
        if finished.is_none() {
            if failed > sync.spec.backoff_limit || past_backoff_limit_on_failure(&sync.spec, &sync.pods) {
                finished = Some(Condition::new(
                    FAILURE_TARGET,
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    &now,
                ));
            } else if let Some(deadline) = sync.spec.active_deadline
                && !sync.spec.suspend
                && let Some(elapsed) = st.start_time.as_deref().and_then(|s| self.elapsed(&uid, s))
            {
                let allowed = Duration::from_secs(u64::try_from(deadline).unwrap_or(0));
                if elapsed >= allowed {
                    finished = Some(Condition::new(
                        FAILURE_TARGET,
                        "True",
                        "DeadlineExceeded",
                        "Job was active longer than specified deadline",
                        &now,
                    ));
                } else {
                    sync.requeue_after(allowed - elapsed);
                }
            }
        }
        if sync.spec.indexed {
            let completions = sync
                .spec
                .completions
                .and_then(|c| u64::try_from(c).ok())
                .unwrap_or(0);
            sync.prev_indexes = Intervals::parse(&st.completed_indexes, completions);
            let mut current = sync.prev_indexes.clone();
            for pod in &sync.pods {
                if pod_phase(pod) == "Succeeded"
                    && has_tracking_finalizer(pod)
                    && let Some(ix) = sync.spec.valid_index(pod)
                {
                    current.insert(ix);
                }
            }
            sync.succeeded = i64::try_from(current.total()).unwrap_or(i64::MAX);
            sync.succeeded_indexes = current;
            if sync.spec.backoff_limit_per_index.is_some() {
                let failed = per_index::failed_indexes(&sync.spec, st.failed_indexes.as_deref(), &sync.pods);
                if finished.is_none()
                    && let Some((reason, message)) =
                        per_index::outcome(&sync.spec, &failed, &sync.succeeded_indexes)
                {
                    finished = Some(Condition::new(FAILURE_TARGET, "True", reason, message, &now));
                }
                sync.replaced = per_index::replaced_pods(
                    &sync.spec,
                    &sync.pods,
                    &active_pods,
                    &sync.succeeded_indexes,
                    &failed,
                    &|p| finished_at(&p),
                );
                sync.failed_indexes = Some(failed);
            }
        }

        if finished.is_some() {
            // Decided: stop every active pod; their tracking finalizers stay until counted.
            let (deleted, deleted_ready) = self.delete_pods(store, &mut sync, &active_pods, false);
            if deleted != sync.active {
                finished = None;
            }
            sync.active -= deleted;
            sync.terminating += deleted;
            sync.ready -= deleted_ready;
        } else {
            let mut managed = false;
            if !is_deleting(job) {
                sync.active = self.manage(store, &mut sync, &active_pods);
                managed = true;
            }
            let complete = match sync.spec.completions {
                None => sync.succeeded > 0 && sync.active == 0,
                Some(c) => sync.succeeded >= c && sync.active == 0,
            };
            if complete {
                finished = Some(Condition::new(
                    SUCCESS_CRITERIA_MET,
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    &now,
                ));
            } else if managed {
                if sync.spec.suspend {
                    if st.ensure_condition(SUSPENDED, "True", "JobSuspended", "Job suspended", &now) {
                        self.event(store, job, EventType::Normal, "Suspended", "Job suspended");
                    }
                } else if st.ensure_condition(SUSPENDED, "False", "JobResumed", "Job resumed", &now) {
                    self.event(store, job, EventType::Normal, "Resumed", "Job resumed");
                    // The deadline counts time continuously active: it restarts on resume.
                    st.start_time = Some(now.clone());
                    self.started.insert(uid.clone(), (now.clone(), now_instant));
                }
            }
        }
        st.active = sync.active;
        st.ready = Some(sync.ready);
        st.terminating = Some(sync.terminating);

        self.track(
            store,
            key,
            &mut sync,
            &mut st,
            &stored,
            finished,
            &uncounted_succeeded,
            &uncounted_failed,
        )?;
        match sync.error {
            Some(e) => Err(e),
            None => Ok(sync.requeue),
        }
    }
}

/// With `restartPolicy: OnFailure`, the Job fails once its running or pending pods' containers
/// have restarted `backoffLimit` times in total (any restart when the limit is 0).
fn past_backoff_limit_on_failure(spec: &Spec<'_>, pods: &[Value]) -> bool {
    if spec.restart_policy != "OnFailure" {
        return false;
    }
    let restarts: i64 = pods
        .iter()
        .filter(|p| matches!(pod_phase(p), "Running" | "Pending"))
        .flat_map(|p| {
            ["/status/initContainerStatuses", "/status/containerStatuses"]
                .into_iter()
                .filter_map(|list| p.pointer(list).and_then(Value::as_array))
                .flatten()
        })
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .sum();
    if spec.backoff_limit == 0 {
        restarts > 0
    } else {
        restarts >= spec.backoff_limit
    }
}

impl Reconciler for JobController {
    type Key = JobKey;
    type Nudge = ();
    type Error = JobError;
    const NAME: &'static str = "job-controller";

    fn resync(&mut self, store: &Store) -> Vec<JobKey> {
        self.pods_by_job.clear();
        self.owner_of.clear();
        let (pods, _) = store.list("pods", None, &|p| owning_job(p).is_some());
        let present: HashSet<(String, String)> = pods
            .iter()
            .filter_map(|p| Some((objects::namespace(p)?.to_owned(), objects::name(p).to_owned())))
            .collect();
        self.finished.retain(|pod, _| present.contains(pod));
        for pod in &pods {
            if let (Some(ns), Some(owner)) = (objects::namespace(pod), owning_job(pod)) {
                self.index_pod(ns, objects::name(pod), Some(owner));
            }
        }
        let (jobs, _) = store.list("jobs.batch", None, &|_| true);
        let mut keys: BTreeSet<JobKey> = jobs
            .iter()
            .map(|j| {
                (
                    objects::namespace(j).unwrap_or_default().to_owned(),
                    objects::name(j).to_owned(),
                )
            })
            .collect();
        keys.extend(self.pods_by_job.keys().cloned());
        keys.into_iter().collect()
    }

    fn keys_for(&mut self, change: &Change, keys: &mut Vec<JobKey>) {
        let object = &change.object;
        let Some(ns) = objects::namespace(object) else {
            return;
        };
        match change.resource.as_str() {
            "jobs.batch" => keys.push((ns.to_owned(), objects::name(object).to_owned())),
            "pods" => {
                let owner = if change.kind == ChangeKind::Deleted {
                    None
                } else {
                    owning_job(object)
                };
                let pod_key = (ns.to_owned(), objects::name(object).to_owned());
                if owner.is_none() {
                    self.finished.remove(&pod_key);
                } else if pod_is_terminal(object) {
                    let seen = self.finished.entry(pod_key).or_insert((Instant::now(), true));
                    if !seen.1 {
                        *seen = (Instant::now(), true);
                    }
                } else if is_deleting(object) {
                    self.finished.entry(pod_key).or_insert((Instant::now(), false));
                }
                let previous = self.index_pod(ns, objects::name(object), owner.clone());
                if let Some(previous) = previous
                    && Some(&previous) != owner.as_ref()
                {
                    keys.push(previous);
                }
                if let Some(owner) = owner {
                    keys.push(owner);
                }
            }
            _ => {}
        }
    }

    /// The real controller's batching: pod changes and Job updates that keep the generation
    /// (its own status writes among them) sync after `job_sync_batch`; a new Job or a spec
    /// change syncs at once.
    fn batch_delay(&self, change: &Change) -> Duration {
        let batch = self.shared.config.job_sync_batch;
        match change.resource.as_str() {
            "pods" => batch,
            "jobs.batch" if change.kind == ChangeKind::Modified => {
                let generation = |o: &Value| o.pointer("/metadata/generation").cloned();
                let same = change
                    .previous
                    .as_deref()
                    .is_some_and(|p| generation(p) == generation(&change.object));
                if same { batch } else { Duration::ZERO }
            }
            _ => Duration::ZERO,
        }
    }

    fn reconcile(&mut self, store: &Store, key: &JobKey) -> Result<Option<Duration>, JobError> {
        let (ns, name) = key;
        let job = store.get("jobs.batch", Some(ns), name);
        let job_uid = job.as_ref().map(|j| objects::uid(j).to_owned());
        let names: Vec<String> = self
            .pods_by_job
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let mut pods = Vec::with_capacity(names.len());
        for pod_name in names {
            let Some(pod) = store.get("pods", Some(ns), &pod_name) else {
                continue;
            };
            if job_uid.is_some() && owner_uid(&pod) == job_uid.as_deref() {
                pods.push(pod);
            } else if has_tracking_finalizer(&pod) {
                // An orphan (its Job is gone or was replaced): nobody will count it.
                self.remove_tracking_finalizer(store, &pod)?;
            }
        }
        let Some(job) = job else {
            self.backoff.remove(key);
            return Ok(None);
        };
        let stored: JobStatus = match job.get("status").filter(|s| !s.is_null()) {
            None => JobStatus::default(),
            Some(s) => serde_json::from_value(s.clone()).map_err(|source| JobError::ReadStatus {
                job: objects::display(&job),
                source,
            })?,
        };
        if stored.is_finished() {
            for pod in pods.iter().filter(|p| has_tracking_finalizer(p)) {
                self.remove_tracking_finalizer(store, pod)?;
            }
            self.backoff.remove(key);
            self.started.remove(objects::uid(&job));
            return Ok(None);
        }
        if str_at(&job, "/spec/managedBy").is_some_and(|m| m != "kubernetes.io/job-controller") {
            return Ok(None);
        }
        let spec = Spec::read(&job);
        if spec.indexed && spec.completions.is_none() {
            tracing::warn!(job = %objects::display(&job), "Indexed job without completions; skipped");
            return Ok(None);
        }
        self.sync(store, key, &job, stored, pods)
    }
}
