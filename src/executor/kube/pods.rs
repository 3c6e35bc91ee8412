//! What the pod watcher saw of each job's pods: its runs, the log tails captured as each pod
//! of a tracked job ended, the attempts a tracked job's pods make (recomputed as they change,
//! at most `MAX_ATTEMPTS`, and read by every report), and waiting for a finishing job's pods
//! to end.
//!
//! Pods of jobs this executor does not track are kept too (without log captures): with
//! replicas on one database, another replica launched the job, and this one must still show
//! its runs and logs to its own clients. They go when their pods are deleted.
//!
//! Pods are how a job's result, failure cause and output are known: a Job's own status only
//! counts them. A pod that ends gets its log tail captured at once, because a Job removed by
//! its TTL right after finishing takes its pods, and their logs, with it. Every change bumps
//! `pods_version`, so that whoever waits for pods needs no polling.
//!
//! It owns the executor's part that keeps them ([`PodBook`]) and the pure state machine of
//! one job's pods ([`JobPods::apply`]): one pod event in (a pod applied or deleted, as plain
//! [`PodInfo`] values), what to do out ([`PodAction`]s: a change to announce, a log tail to
//! capture, a follow for the archive to consider or forget, a record to drop). The pod
//! watcher's glue (`watch.rs`) carries the actions out; plain event sequences test it.
//!
//! It must not report observations (`reconcile.rs` and `workloads.rs` read what is kept here
//! when they finish a job), nor talk to the API server or spawn: the glue does.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use tokio_util::sync::CancellationToken;

use super::pod_attempts;
use super::status::{PodInfo, PodPhase};
use crate::executor::RunInfo;
use crate::model::JobAttempt;

/// The pods of one tracked job, and the log tails captured as they ended: a Job removed by
/// its TTL right after finishing takes its pods' logs with it.
///
/// The pods are a `Vec` sorted by name, not a map: nearly every job has one pod at a time,
/// and a `BTreeMap` allocates a whole node (room for 11 pods, about 2 KiB) for the first:
/// most of the executor's memory per tracked job would go there.
#[derive(Default)]
pub(super) struct JobPods {
    /// Sorted by name (pod names are unique in a job's namespace).
    pods: Vec<PodInfo>,
    /// Log tails of the most recently ended pods, by pod name.
    pub(super) logs: BTreeMap<String, Vec<String>>,
    /// Log captures in flight.
    capturing: usize,
    /// The attempts its pods make (`pod_attempts.rs`), kept as they change while the job is
    /// tracked here, so that a report reads them rather than every pod; `None` for a job
    /// tracked elsewhere (it is never reported from here).
    attempts: Option<Vec<JobAttempt>>,
    /// When the Job controller decided the job's deadline had passed, as a report of its
    /// status said: its pods stopped after it failed for that.
    deadline: Option<DateTime<Utc>>,
}

/// One event of a job's pod, as the pod watcher saw it.
#[derive(Clone, Debug)]
pub(super) enum PodEvent {
    /// The pod was added or changed, or a (re-)list shows it.
    Applied(PodInfo),
    /// The pod was deleted; this is its last state.
    Deleted(PodInfo),
}

/// What the pod watcher's glue does after an event, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PodAction {
    /// What is known of the job's pods changed: whoever waits for them looks again.
    Changed,
    /// The archive considers following this pod's log (or letting go of it).
    ConsiderFollow(PodInfo),
    /// The pod of a tracked job has just ended: its log tail is captured now, before a TTL
    /// or a clean-up deletes it (counted in flight until [`JobPods::captured`]).
    CaptureLog {
        namespace: String,
        pod: String,
        container: Option<String>,
    },
    /// The pod is deleted: the archive forgets it once its log is archived.
    ForgetFollow { namespace: String, pod: String },
    /// The job is not tracked and nothing of it is left: its record may go.
    Forget,
}

/// How many ended pods' log tails are kept per job.
pub(super) const CAPTURED_PODS: usize = 5;

impl JobPods {
    pub(super) fn infos(&self) -> Vec<PodInfo> {
        self.pods.clone()
    }

    /// What one event of the job's pods means, given whether the job is tracked here (only
    /// a tracked job's final report reads captured tails and ended pods).
    pub(super) fn apply(&mut self, event: PodEvent, tracked: bool) -> Vec<PodAction> {
        match event {
            PodEvent::Applied(info) => self.applied(info, tracked),
            // A deleted pod's last state stays known: it may prove the outcome of a Job
            // deleted with it. One deleted before it ended will never end: nothing should
            // wait for it.
            PodEvent::Deleted(info) => {
                let name = info.name.clone();
                let namespace = info.namespace.clone();
                let mut actions = self.applied(info, tracked);
                if let Some(namespace) = namespace {
                    actions.push(PodAction::ForgetFollow {
                        namespace,
                        pod: name.clone(),
                    });
                }
                // A tracked job keeps its ended pods for its final report; nothing else does.
                let remove = !tracked || self.get(&name).is_some_and(|p| !p.phase.is_terminal());
                if remove {
                    self.remove(&name);
                }
                if !tracked && self.is_idle() {
                    actions.push(PodAction::Forget);
                }
                if remove {
                    actions.push(PodAction::Changed);
                }
                actions
            }
        }
    }

    /// A pod was added or changed. A pod that has just ended gets its log tail captured at
    /// once, before a TTL or a clean-up can delete it.
    fn applied(&mut self, info: PodInfo, tracked: bool) -> Vec<PodAction> {
        let previous = self.get(&info.name);
        if previous == Some(&info) {
            return Vec::new();
        }
        let ended = tracked
            && info.phase.is_terminal()
            && info.started
            && !previous.is_some_and(|p| p.phase.is_terminal());
        let capture = match (ended, &info.namespace) {
            (true, Some(namespace)) => Some(PodAction::CaptureLog {
                namespace: namespace.clone(),
                pod: info.name.clone(),
                container: info.container.clone(),
            }),
            _ => None,
        };
        let considered = info.clone();
        self.insert(info);
        if capture.is_some() {
            self.capturing += 1;
        }
        let mut actions = vec![PodAction::Changed, PodAction::ConsiderFollow(considered)];
        actions.extend(capture);
        actions
    }

    /// Recomputes the attempts of a tracked job's pods; true when they changed (a run
    /// started or ended, or what is known of one did).
    fn refresh_attempts(&mut self) -> bool {
        let attempts = pod_attempts::of_pods(&self.pods, self.deadline);
        let changed = self.attempts.as_deref().unwrap_or_default() != attempts.as_slice();
        self.attempts = Some(attempts);
        changed
    }

    /// A log capture ended: with the pod's log tail, or without (it could not be read).
    pub(super) fn captured(&mut self, pod: String, lines: Option<Vec<String>>) {
        self.capturing -= 1;
        if let Some(lines) = lines {
            self.logs.insert(pod, lines);
            self.keep_recent_logs();
        }
    }

    /// No pod known and no capture in flight.
    fn is_idle(&self) -> bool {
        self.pods.is_empty() && self.capturing == 0
    }

    /// Every pod known is terminal (and at least `counted` of them), and no capture is in
    /// flight.
    fn settled(&self, counted: Option<i32>) -> bool {
        let terminal = self.pods.iter().filter(|p| p.phase.is_terminal()).count() as i32;
        terminal == self.pods.len() as i32 && counted.is_none_or(|c| terminal >= c) && self.capturing == 0
    }

    /// Where the pod named `name` is, or would be inserted.
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.pods.binary_search_by(|p| p.name.as_str().cmp(name))
    }

    fn get(&self, name: &str) -> Option<&PodInfo> {
        self.find(name).ok().map(|i| &self.pods[i])
    }

    /// Adds the pod, or replaces what was known of it.
    fn insert(&mut self, info: PodInfo) {
        match self.find(&info.name) {
            Ok(i) => self.pods[i] = info,
            Err(i) => self.pods.insert(i, info),
        }
    }

    fn remove(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.pods.remove(i);
        }
    }

    /// Keeps the log tails of the [`CAPTURED_PODS`] latest runs.
    fn keep_recent_logs(&mut self) {
        while self.logs.len() > CAPTURED_PODS {
            let oldest = self
                .logs
                .keys()
                .min_by_key(|name| {
                    let info = self.get(name);
                    (info.and_then(|p| p.index), info.and_then(|p| p.finished_at))
                })
                .cloned();
            match oldest {
                Some(name) => self.logs.remove(&name),
                None => break,
            };
        }
    }
}

/// The executor's part that keeps what the pod watcher saw, per job.
#[derive(Default)]
pub(super) struct PodBook {
    jobs: DashMap<String, JobPods>,
    /// Bumped on every pod change, so that waiters for pods need no polling.
    version: tokio::sync::watch::Sender<u64>,
}

impl PodBook {
    /// Applies one event of a pod of job `job_id` to the job's record (see
    /// [`JobPods::apply`]), dropping the record when told to, and returns what is left to do.
    pub(super) fn apply(&self, job_id: &str, event: PodEvent, tracked: bool) -> Vec<PodAction> {
        let actions = self
            .jobs
            .entry(job_id.to_owned())
            .or_default()
            .apply(event, tracked);
        if actions.contains(&PodAction::Forget) {
            self.jobs.remove_if(job_id, |_, job| job.is_idle());
        }
        actions
    }

    /// After an event of a pod of job `job_id`: whether the attempts its pods make changed.
    /// Only a job tracked here keeps them; any other's are let go of.
    pub(super) fn refresh_attempts(&self, job_id: &str, tracked: bool) -> bool {
        let Some(mut job) = self.jobs.get_mut(job_id) else {
            return false;
        };
        if !tracked {
            job.attempts = None;
            return false;
        }
        job.refresh_attempts()
    }

    /// Hands the job's attempts to `report`, which must not wait: no pod change can come in
    /// between, so that reports made in turn show the attempts in the order they changed.
    /// `deadline` is when the job's deadline passed, if the status reported with them says
    /// so (a status that does not say keeps what an earlier one said).
    pub(super) fn with_attempts<R>(
        &self,
        job_id: &str,
        deadline: Option<DateTime<Utc>>,
        report: impl FnOnce(Vec<JobAttempt>) -> R,
    ) -> R {
        let Some(mut job) = self.jobs.get_mut(job_id) else {
            return report(Vec::new());
        };
        if deadline.is_some() && deadline != job.deadline {
            job.deadline = deadline;
            job.attempts = None;
        }
        if job.attempts.is_none() {
            job.refresh_attempts();
        }
        report(job.attempts.clone().unwrap_or_default())
    }

    /// A log capture of the job's pod ended (see [`JobPods::captured`]).
    pub(super) fn captured(&self, job_id: &str, pod: String, lines: Option<Vec<String>>) {
        if let Some(mut job) = self.jobs.get_mut(job_id) {
            job.captured(pod, lines);
        }
        self.bump();
    }

    /// Tells whoever waits for pods to look again.
    pub(super) fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Changes to what is kept, announced as they happen.
    pub(super) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Forgets the job's pods and log tails.
    pub(super) fn forget_job(&self, job_id: &str) {
        self.jobs.remove(job_id);
    }

    /// Whether any pod of the job has been seen.
    pub(super) fn knows(&self, job_id: &str) -> bool {
        self.jobs.contains_key(job_id)
    }

    /// What is known of the job's pods.
    pub(super) fn infos(&self, job_id: &str) -> Vec<PodInfo> {
        self.jobs.get(job_id).map(|p| p.infos()).unwrap_or_default()
    }

    /// The jobs whose id `keep` accepts, with what is known of their pods.
    pub(super) fn jobs_where(&self, keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<PodInfo>)> {
        self.jobs
            .iter()
            .filter(|job| keep(job.key()))
            .map(|job| (job.key().clone(), job.infos()))
            .collect()
    }

    /// The log tail captured as the job's pod `pod` ended, if any.
    pub(super) fn captured_log(&self, job_id: &str, pod: &str) -> Option<Vec<String>> {
        self.jobs.get(job_id).and_then(|p| p.logs.get(pod).cloned())
    }

    /// Whether the pod watch shows the job's pod `pod` over (its log will not grow).
    pub(super) fn pod_ended(&self, job_id: &str, pod: &str) -> bool {
        self.jobs
            .get(job_id)
            .is_some_and(|job| job.pods.iter().any(|p| p.name == pod && p.phase.is_terminal()))
    }

    /// Whether a pod of the job still holds jobgate's log finalizer.
    pub(super) fn any_archiving(&self, job_id: &str) -> bool {
        self.jobs
            .get(job_id)
            .is_some_and(|job| job.pods.iter().any(|p| p.archiving))
    }

    /// The job's pods whose container has started, in index then creation order.
    pub(super) fn started_pods(&self, id: &str) -> Vec<PodInfo> {
        let mut pods: Vec<PodInfo> = self
            .jobs
            .get(id)
            .map(|p| p.pods.iter().filter(|p| p.started).cloned().collect())
            .unwrap_or_default();
        pods.sort_by_key(|p| (p.index, p.created_at));
        pods
    }

    /// Waits until the pod watch shows every pod of the job terminal (and at least
    /// `counted` of them), or `grace` passes. False when `shutdown` comes first.
    pub(super) async fn wait_for_pods(
        &self,
        id: &str,
        counted: Option<i32>,
        grace: std::time::Duration,
        shutdown: &CancellationToken,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        let mut changes = self.version.subscribe();
        loop {
            let settled = self.jobs.get(id).is_some_and(|job| job.settled(counted));
            if settled || counted == Some(0) {
                return true;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return true,
                _ = shutdown.cancelled() => return false,
            }
        }
    }

    /// The job's runs as the pod watcher saw them, oldest first.
    pub(super) fn runs(&self, job_id: &str) -> Vec<RunInfo> {
        let mut pods = self.infos(job_id);
        pods.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        pods.into_iter()
            .map(|p| RunInfo {
                name: p.name,
                index: p.index,
                phase: match p.phase {
                    PodPhase::Pending => "Pending",
                    PodPhase::Running => "Running",
                    PodPhase::Succeeded => "Succeeded",
                    PodPhase::Failed => "Failed",
                },
                exit_code: p.exit_code,
                reason: p.reason,
                message: p.message,
                created_at: p.created_at,
                finished_at: p.finished_at,
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
