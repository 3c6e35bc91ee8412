//! What watch events mean for the tracked jobs: a pure state machine, one per watcher of
//! objects that carry jobs (batch Jobs, and each workload kind).
//!
//! It owns the per-job record ([`Tracked`]) and every decision made from a watched object:
//! a stale event (an older resourceVersion) is ignored, a changed status is reported once, a
//! decided one finishes its job, a finishing batch Job's newer decided status is kept (its
//! final condition and counts come after the decision), an object deleted before its job
//! finished makes the job vanish (unless a batch Job's own status decided it), and after each
//! (re-)list a job known to exist before the list began but missing from it vanished. Each
//! decision is an [`Action`] for the executor to carry out (`reconcile.rs` for batch Jobs,
//! `workloads.rs` for other kinds); what differs between kinds (which jobs a watcher follows,
//! how an object's status reads) is a [`Follow`].
//!
//! It also owns the executor's part that holds those records ([`JobTracking`]).
//!
//! It must stay pure: no client, no I/O, no clock, no spawning. It only reads the events
//! given to it and changes the tracked jobs' records, so that plain event sequences test it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use k8s_openapi::api::batch::v1::Job as K8sJob;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::watcher;

use super::kinds::{Decoding, Kind};
use super::manifest::JOB_ID_LABEL;
use super::{label, resource_version, status};
use crate::model::{Job, QueueStatus, WorkloadStatus};

/// The executor's part that tracks jobs: every unfinished job it is responsible for, and
/// what the watches of their objects need to share.
#[derive(Default)]
pub(super) struct JobTracking {
    /// Unfinished jobs this executor is responsible for.
    pub(super) tracked: DashMap<String, Tracked>,
    /// Jobs cancelled while their Job was being created (at most the launches in flight).
    cancelled_while_creating: DashMap<String, ()>,
    /// Bumped when a finishing job's status changes.
    pub(super) version: tokio::sync::watch::Sender<u64>,
    /// Bumped at the start of every (re-)list of Jobs: a job confirmed before a list began
    /// must appear in it, or it vanished.
    pub(super) list_epoch: Arc<AtomicU64>,
}

impl JobTracking {
    /// Starts tracking `job` (once: a job tracked already keeps its state).
    /// `confirmed_epoch` is the list epoch from which its workload is known to exist, `None`
    /// while it is being created; `decoding`, for jobs of workload templates, how their
    /// object's status decodes; `ttl_seconds`, its workload's `ttlSecondsAfterFinished`.
    pub(super) fn track(
        &self,
        job: &Job,
        confirmed_epoch: Option<u64>,
        decoding: Option<Decoding>,
        ttl_seconds: Option<i32>,
    ) {
        // A job the store already holds a status for (adopted after a restart) is reported
        // again only when the watch shows something else: a re-list of unchanged jobs
        // costs the job service nothing.
        let recorded = (job.workload != WorkloadStatus::default()).then(|| digest(&job.workload));
        let queue = job
            .spec
            .queue_name
            .as_ref()
            .map(|_| QueueTrack::new(&job.workload));
        self.tracked.entry(job.id.clone()).or_insert_with(|| {
            Tracked::new(
                job.spec.namespace.clone(),
                job.spec.completions,
                confirmed_epoch,
                decoding,
                ttl_seconds,
                recorded,
            )
            .queued(queue)
        });
    }

    /// The job's workload exists, known since list epoch `epoch`. True when the job was
    /// cancelled while it was being created: the cancel found nothing to delete yet.
    pub(super) fn created(&self, job_id: &str, epoch: u64) -> bool {
        if let Some(mut t) = self.tracked.get_mut(job_id) {
            t.confirmed_epoch = Some(epoch);
        }
        self.cancelled_while_creating.remove(job_id).is_some()
    }

    /// The job's workload could not be created: it is tracked no more (the launcher retries,
    /// or fails the job), and a cancel that came meanwhile is forgotten with it.
    pub(super) fn not_created(&self, job_id: &str) {
        self.tracked.remove_if(job_id, |_, t| t.confirmed_epoch.is_none());
        self.cancelled_while_creating.remove(job_id);
    }

    /// The job is cancelled: tracked no more, so that its workload's deletion is not
    /// reported as vanishing; one whose create is in flight is remembered, for the launch
    /// to delete its workload once it exists.
    pub(super) fn cancelled(&self, job_id: &str) {
        if let Some((_, t)) = self.tracked.remove(job_id)
            && t.confirmed_epoch.is_none()
        {
            self.cancelled_while_creating.insert(job_id.to_owned(), ());
        }
    }

    /// Whether the job's outcome is decided (its final report is being made).
    pub(super) fn is_finishing(&self, job_id: &str) -> bool {
        self.tracked.get(job_id).is_some_and(|t| t.finishing)
    }

    /// The job's namespace, while it is tracked.
    pub(super) fn namespace(&self, job_id: &str) -> Option<String> {
        self.tracked.get(job_id).map(|t| t.namespace.clone())
    }

    /// Tells the watchers that a finishing job's decided status changed.
    pub(super) fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// For an event of a queued job's object or Workload (`job_id`): the job's report order,
    /// held until the report is sent; `None` for other jobs.
    pub(super) async fn queue_order(&self, job_id: Option<&str>) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let order = self.tracked.get(job_id?)?.queue.as_ref()?.order.clone();
        Some(order.lock_owned().await)
    }
}

/// What the executor keeps per unfinished job: about a hundred bytes inline, since every
/// tracked job has one in a hash table. The job service keeps the job itself (its spec and
/// its last status); this record keeps only what the watch needs to decide, and a digest of
/// the last status it reported rather than a second copy of it.
pub(super) struct Tracked {
    pub(super) namespace: String,
    pub(super) completions: i32,
    /// The list epoch when the workload was known to exist; `None` while it is being created.
    pub(super) confirmed_epoch: Option<u64>,
    /// The newest resourceVersion applied: older events are stale and ignored.
    pub(super) last_rv: u64,
    /// The outcome is decided (or the workload is gone): its final report is being made.
    pub(super) finishing: bool,
    /// While finishing: the newest decided status, whose counts settle once the controller
    /// writes its final condition (Complete or Failed) after the interim one. Boxed: only a
    /// job finishing has one, for a few seconds.
    pub(super) settled: Option<Box<WorkloadStatus>>,
    /// The [`digest`] of the last status reported (or, after a restart, of the status the
    /// store holds), to report only changes.
    pub(super) last_sent: Option<u64>,
    /// For jobs of workload templates: how their object's status decodes.
    pub(super) decoding: Option<Box<Decoding>>,
    /// The job's `ttlSecondsAfterFinished` (or the server's default).
    pub(super) ttl_seconds: Option<i32>,
    /// For jobs queued in Kueue: what its Workload says, merged into every report.
    pub(super) queue: Option<Box<QueueTrack>>,
}

impl Tracked {
    /// A job not yet seen by any watcher; `last_sent` is the digest of the status already
    /// recorded for it, if any.
    pub(super) fn new(
        namespace: String,
        completions: i32,
        confirmed_epoch: Option<u64>,
        decoding: Option<Decoding>,
        ttl_seconds: Option<i32>,
        last_sent: Option<u64>,
    ) -> Self {
        Self {
            namespace,
            completions,
            confirmed_epoch,
            last_rv: 0,
            finishing: false,
            settled: None,
            last_sent,
            decoding: decoding.map(Box::new),
            ttl_seconds,
            queue: None,
        }
    }

    /// The same record, for a job queued in Kueue when `queue` is given.
    pub(super) fn queued(mut self, queue: Option<QueueTrack>) -> Self {
        self.queue = queue.map(Box::new);
        self
    }

    /// `status`, read from the job's workload object, with what Kueue says of the job; the
    /// workload's part is kept for the reports of Kueue's changes.
    fn with_queue(&mut self, mut status: WorkloadStatus) -> WorkloadStatus {
        if let Some(queue) = self.queue.as_mut() {
            status.queue = None;
            queue.workload.clone_from(&status);
            status.queue.clone_from(&queue.status);
        }
        status
    }
}

/// What a tracked queued job keeps of Kueue (boxed in its record: only queued jobs have one).
pub(super) struct QueueTrack {
    /// The newest resourceVersion of its Workload applied; older events are stale.
    pub(super) rv: u64,
    /// What its Workload says, once seen.
    pub(super) status: Option<Box<QueueStatus>>,
    /// The last status its own object showed (without the queue), to report with a change
    /// of the queue.
    pub(super) workload: WorkloadStatus,
    /// Held by a watcher from reading an event of the job until its report is sent: the
    /// object's watcher and the Workload's report the job in the order they merged.
    pub(super) order: Arc<tokio::sync::Mutex<()>>,
}

impl QueueTrack {
    /// For a job whose recorded status is `recorded` (after a restart, what the store holds).
    pub(super) fn new(recorded: &WorkloadStatus) -> Self {
        let mut workload = recorded.clone();
        let status = workload.queue.take();
        Self {
            rv: 0,
            status,
            workload,
            order: Arc::default(),
        }
    }
}

/// A 64-bit digest of a status, standing for it when telling whether it changed: the job
/// service holds the status itself. Computed over its JSON form, so that every field counts,
/// with a fixed-key hasher, so that a restarted process (of the same build; otherwise one
/// change too many is reported) finds the digest of the status the store holds equal to the
/// one it last reported. Two different statuses
/// of one job with the same digest (odds of 2^-64 per change) would hide one interim change;
/// a job's decided status is never compared this way.
pub(super) fn digest(status: &WorkloadStatus) -> u64 {
    use std::hash::Hasher;
    struct Feed(std::hash::DefaultHasher);
    impl std::io::Write for Feed {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut feed = Feed(std::hash::DefaultHasher::new());
    // Writing to a hasher cannot fail, and a status always serialises (no non-string keys).
    let _ = serde_json::to_writer(&mut feed, status);
    feed.0.finish()
}

/// What the executor must do about one event.
#[derive(Debug)]
pub(super) enum Action<K> {
    /// Report this changed, undecided status of the job.
    Report { job_id: String, status: WorkloadStatus },
    /// The job's outcome is decided by `status`, read from `object`: capture its pods'
    /// result, failure cause and log tail, then report it.
    Finish {
        job_id: String,
        status: WorkloadStatus,
        object: K,
    },
    /// A finishing job's decided status changed: whoever waits for its final condition
    /// should look again.
    Settled { job_id: String },
    /// The job's workload is gone before its outcome was decided.
    Vanished { job_id: String, how: Vanish },
    /// An object of ours that no job tracked here follows (finished, or never ours to
    /// follow): only what is done to finished objects (retention) may apply.
    Untracked { object: K },
}

/// How a workload was found gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Vanish {
    /// Its deletion was watched.
    Deleted,
    /// A (re-)list did not show it: it went while nobody watched.
    Unlisted,
}

/// What differs between the kinds of objects that carry jobs.
pub(super) trait Follow {
    type Object: Resource;
    /// Whether a finishing job's newer decided status is kept (batch Jobs write their final
    /// condition, with settled counts, after the one that decides), and whether a deleted
    /// object's own decided status finishes its job rather than making it vanish.
    const SETTLES: bool;
    /// Whether the tracked job's workload is an object of this watcher.
    fn follows(&self, tracked: &Tracked) -> bool;
    /// The job's status as the object shows it, and whether its outcome is decided. It may
    /// keep what it decoded in the record (a workload's last phase).
    fn read(&self, object: &Self::Object, tracked: &mut Tracked) -> (WorkloadStatus, bool);
}

/// Batch Jobs: jobs of the `container` template, read from the Job's own status.
pub(super) struct BatchJobs;

impl Follow for BatchJobs {
    type Object = K8sJob;
    const SETTLES: bool = true;

    fn follows(&self, tracked: &Tracked) -> bool {
        tracked.decoding.is_none()
    }

    fn read(&self, object: &K8sJob, _: &mut Tracked) -> (WorkloadStatus, bool) {
        let status = status::workload_status(object);
        let decided = status::is_decided(&status);
        (status, decided)
    }
}

/// Objects of one workload kind, decoded by their job's template's status rules.
pub(super) struct KindObjects(pub(super) Arc<Kind>);

impl Follow for KindObjects {
    type Object = DynamicObject;
    const SETTLES: bool = false;

    fn follows(&self, tracked: &Tracked) -> bool {
        tracked
            .decoding
            .as_ref()
            .is_some_and(|d| Arc::ptr_eq(&d.kind, &self.0))
    }

    fn read(&self, object: &DynamicObject, tracked: &mut Tracked) -> (WorkloadStatus, bool) {
        let Some(decoding) = tracked.decoding.as_mut() else {
            return (WorkloadStatus::default(), false); // not followed: never asked
        };
        let value = serde_json::to_value(object).unwrap_or_default();
        let decoded = decoding.template.status.decode(&value, &decoding.mapped);
        decoding.mapped = decoded.mapped.clone().unwrap_or_default();
        let decided = decoding.mapped.phase.is_terminal();
        (decoded, decided)
    }
}

/// The job an object belongs to.
fn job_id(meta: &kube::api::ObjectMeta) -> Option<String> {
    label(meta, JOB_ID_LABEL).map(str::to_owned)
}

/// The job an event's object belongs to (none for the markers of a list).
pub(super) fn event_job_id<K: Resource>(event: &watcher::Event<K>) -> Option<String> {
    match event {
        watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
            job_id(o.meta())
        }
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

/// What an added or changed object means for its job (also how a Job the launcher has just
/// created is taken in, before the watch shows it).
pub(super) fn applied<F: Follow>(
    follow: &F,
    tracked: &DashMap<String, Tracked>,
    object: F::Object,
) -> Vec<Action<F::Object>> {
    let Some(job_id) = job_id(object.meta()) else {
        return Vec::new();
    };
    let mut record = match tracked.get_mut(&job_id) {
        Some(record) => record,
        None => return vec![Action::Untracked { object }],
    };
    let t = &mut *record;
    if !follow.follows(t) {
        return Vec::new(); // a job of another kind's watcher
    }
    if let Some(rv) = resource_version(object.meta()) {
        if rv <= t.last_rv {
            return Vec::new(); // stale: never move backward
        }
        t.last_rv = rv;
    }
    if t.finishing {
        if F::SETTLES {
            let (status, decided) = follow.read(&object, t);
            let status = t.with_queue(status);
            if decided {
                t.settled = Some(Box::new(status));
                return vec![Action::Settled { job_id }];
            }
        }
        return Vec::new();
    }
    let (status, decided) = follow.read(&object, t);
    let status = t.with_queue(status);
    if decided {
        t.finishing = true;
        t.settled = Some(Box::new(status.clone()));
        return vec![Action::Finish {
            job_id,
            status,
            object,
        }];
    }
    let sent = digest(&status);
    if t.last_sent == Some(sent) {
        return Vec::new();
    }
    t.last_sent = Some(sent);
    vec![Action::Report { job_id, status }]
}

/// What a deleted object means for its job. Ours are deleted after jobgate saw them finish
/// (and untracked them), or by a cancel (which untracks first): any other deletion of an
/// unfinished job's workload is reported, with the outcome its status proves if any.
fn deleted<F: Follow>(
    follow: &F,
    tracked: &DashMap<String, Tracked>,
    object: F::Object,
) -> Vec<Action<F::Object>> {
    let Some(job_id) = job_id(object.meta()) else {
        return Vec::new();
    };
    let Some(mut record) = tracked.get_mut(&job_id) else {
        return Vec::new();
    };
    let t = &mut *record;
    if t.finishing || !follow.follows(t) {
        return Vec::new();
    }
    t.finishing = true;
    if F::SETTLES {
        let (status, decided) = follow.read(&object, t);
        let status = t.with_queue(status);
        if decided {
            t.settled = Some(Box::new(status.clone()));
            return vec![Action::Finish {
                job_id,
                status,
                object,
            }];
        }
    }
    vec![Action::Vanished {
        job_id,
        how: Vanish::Deleted,
    }]
}

/// One watcher's side of tracking: what its events mean for the jobs it follows, in its
/// scope, across its (re-)lists.
pub(super) struct Tracker<F> {
    follow: F,
    /// The namespace watched; `None` for the whole cluster.
    scope: Option<String>,
    /// Bumped at the start of every (re-)list by every watcher of the same kind; the
    /// launcher reads it once a workload exists.
    epochs: Arc<AtomicU64>,
    /// The epoch of the list under way or last done.
    list_epoch: u64,
    /// The jobs whose objects the list under way has shown.
    seen: HashSet<String>,
}

impl<F: Follow> Tracker<F> {
    pub(super) fn new(follow: F, scope: Option<String>, epochs: Arc<AtomicU64>) -> Self {
        Self {
            follow,
            scope,
            epochs,
            list_epoch: 0,
            seen: HashSet::new(),
        }
    }

    pub(super) fn follow(&self) -> &F {
        &self.follow
    }

    /// What `event` means for the tracked jobs, changing their records accordingly.
    pub(super) fn apply(
        &mut self,
        tracked: &DashMap<String, Tracked>,
        event: watcher::Event<F::Object>,
    ) -> Vec<Action<F::Object>> {
        match event {
            // Sent before the list request: every workload confirmed before now must be in
            // the list, or it vanished.
            watcher::Event::Init => {
                self.list_epoch = self.epochs.fetch_add(1, Ordering::SeqCst) + 1;
                self.seen.clear();
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                if let Some(id) = job_id(object.meta()) {
                    self.seen.insert(id);
                }
                applied(&self.follow, tracked, object)
            }
            watcher::Event::InitDone => {
                let vanished = self.unlisted(tracked);
                self.seen = HashSet::new();
                vanished
            }
            watcher::Event::Apply(object) => applied(&self.follow, tracked, object),
            watcher::Event::Delete(object) => deleted(&self.follow, tracked, object),
        }
    }

    /// After a full list: the followed jobs in scope known to exist before it began and
    /// missing from it vanished while nobody watched. Each is marked finishing, so that it
    /// is reported once.
    fn unlisted(&self, tracked: &DashMap<String, Tracked>) -> Vec<Action<F::Object>> {
        tracked
            .iter_mut()
            .filter_map(|mut t| {
                let vanished = self.follow.follows(&t)
                    && self.scope.as_deref().is_none_or(|ns| t.namespace == ns)
                    && !t.finishing
                    && t.confirmed_epoch.is_some_and(|e| e < self.list_epoch)
                    && !self.seen.contains(t.key());
                vanished.then(|| {
                    t.finishing = true;
                    Action::Vanished {
                        job_id: t.key().clone(),
                        how: Vanish::Unlisted,
                    }
                })
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "tracking_tests.rs"]
mod tests;
