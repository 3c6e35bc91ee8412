//! Archiving pods' logs: one follow stream per running pod of the jobs this replica acts for,
//! its lines handed to the [`LogSink`], resumed without repeating or skipping a line when the
//! stream is cut, and the pod let go (its [`LOG_FINALIZER`] removed) once its whole log is
//! committed.
//!
//! - **Which pods.** The pod watch shows every pod of every job; a pod is followed once its
//!   container has started, by the replica that acts for its job's shard (every pod, without
//!   replicas), at most `--log-follow-concurrency` at a time (others wait for a slot). A pod
//!   that never started and is ending has nothing to read: it is let go at once.
//! - **Resuming.** Streams ask for `timestamps=true`; each line's kubelet timestamp and how
//!   many lines carried that exact timestamp make the source's position, committed with the
//!   lines (`"<RFC 3339 nanos> <count>"`). A stream that ends before its pod did (cut, API
//!   server away), a follow taken over from another replica, or a restarted jobgate opens the
//!   log again with `sinceTime` (whole seconds, floored) and drops what the position already
//!   covers: older lines, and as many lines of the position's timestamp as it counts.
//!   Appends are conditional on the stored position, so two followers of one pod (a shard
//!   moving between replicas) never archive a line twice: the one behind re-reads the
//!   position and resumes from it.
//! - **Holding.** A batch Job's pods are created with the finalizer (its pod template has it).
//!   Pods that a workload template's operator creates (Kubeflow, Argo, Tekton, Ray, Spark)
//!   come without: when this process first sees such a pod of a job it tracks and acts for,
//!   it adds the finalizer itself (a merge patch conditional on the pod's resourceVersion, so
//!   no other finalizer change is undone and a pod deleted meanwhile is read again). It adds
//!   none to a pod being deleted (the API server refuses new finalizers then: what the log
//!   holds until the pod goes is read as before), to a pod that ended without starting, to a
//!   pod whose log the archive already has whole (a restart), nor to pods of jobs it does not
//!   track (finished before it started, or another replica's): those are followed as before,
//!   unheld. The hold is tried once per pod and process; the follow waits for its outcome
//!   before letting go, so that a hold landing after the log was archived is removed too.
//! - **Gaps.** What the kubelet no longer serves is recorded, in order, as a gap (a marker
//!   line, and an archive that no longer reads as whole), never skipped silently. A stream
//!   opened again from a position whose first line is later than the position's time found
//!   the position's line rotated away (a read serves only the current log file): the lines
//!   between are lost, how many the kubelet does not say (a rotation that fell right after
//!   the position's line looks the same, and is counted as a gap too). A pod that is gone
//!   (404), or whose containers the kubelet removed (its answer is `unable to retrieve
//!   container logs for …`, sent as a `200` body, never a log line), before its log was read
//!   to the end is a gap of unknown size, unless the last stream ended cleanly after the
//!   container had stopped. A log rotated before its first read cannot be told apart from a
//!   whole one.
//! - **Refused.** While the API server refuses jobgate a running pod's log (`403`: RBAC
//!   without `get` on `pods/log`), the read is tried again with back-off (up to 5 s apart),
//!   and said once in jobgate's log until a read is allowed again: a right granted meanwhile
//!   loses nothing. A pod that has ended with its log still refused has its archive record a
//!   gap quoting the API server's answer ([`LogLoss::Forbidden`]), and is let go: its log is
//!   not archived, the job says why, and the pod is not kept for a right that may never come.
//! - **Ending.** A stream that ends after the pod was seen terminal has everything: the
//!   position becomes `done`, and once the sink has committed it, the finalizer goes (a
//!   merge patch conditional on the pod's resourceVersion, retried). A TTL deletion of the
//!   Job (or an operator's clean-up of its pods) waits for that; nothing is lost with
//!   `ttlSecondsAfterFinished: 0`.
//!
//! It owns the executor's part for this ([`PodLogArchiver`]: the sink, the pods followed, the
//! holds, the follow slots).
//!
//! It must not decide what a job's output is for the job (the service reads the archive),
//! nor write the store (the sink does).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use futures::AsyncBufReadExt;
use kube::api::{LogParams, Patch, PatchParams};

use super::manifest::{CONTAINER_NAME, LOG_FINALIZER};
use super::status::PodInfo;
use super::{KubeShared, retry_delays};
use crate::executor::{LogLine, LogSink, SinkState};
use crate::model::{LogGap, LogLoss, MAX_LOG_LINE, clip_log_line};

/// The executor's part that archives pods' logs: where to, and the pods this process follows
/// or has finished with.
pub(super) struct PodLogArchiver {
    /// Where pods' logs are archived, once set.
    sink: std::sync::OnceLock<Arc<dyn LogSink>>,
    /// The pods this process follows or has finished with, by `namespace/name`: `true`
    /// once the pod's log is archived (the pod is let go next).
    follows: DashMap<String, bool>,
    /// Follows not yet done, per job.
    per_job: DashMap<String, usize>,
    /// Pods this process put (or tried to put) [`LOG_FINALIZER`] on, by `namespace/name`:
    /// `Some(true)` once it holds, `Some(false)` if it was not added, `None` until known.
    holds: DashMap<String, tokio::sync::watch::Receiver<Option<bool>>>,
    /// Slots for pod log streams (`--log-follow-concurrency`).
    slots: Arc<tokio::sync::Semaphore>,
    /// The API server refused the last log read: said once, until a read is allowed again.
    refused: std::sync::atomic::AtomicBool,
}

impl PodLogArchiver {
    /// Archiving nowhere yet, following at most `concurrency` pods' logs at once.
    pub(super) fn new(concurrency: usize) -> Self {
        Self {
            sink: std::sync::OnceLock::new(),
            follows: DashMap::new(),
            per_job: DashMap::new(),
            holds: DashMap::new(),
            slots: Arc::new(tokio::sync::Semaphore::new(concurrency.max(1))),
            refused: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// From now on, logs are archived through `sink` (set once; a second call changes
    /// nothing).
    pub(super) fn set_sink(&self, sink: Arc<dyn LogSink>) {
        let _ = self.sink.set(sink);
    }

    fn sink(&self) -> Option<Arc<dyn LogSink>> {
        self.sink.get().cloned()
    }

    /// Whether this process follows a pod of the job now.
    fn follows_job(&self, job_id: &str) -> bool {
        self.per_job.get(job_id).is_some_and(|n| *n > 0)
    }

    /// Forgets a deleted pod.
    pub(super) fn forget_follow(&self, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        self.follows.remove_if(&key, |_, done| *done);
        self.holds.remove(&key);
    }
}

/// Lines handed to the sink at once, at most.
const BATCH_LINES: usize = 256;
/// How long a partial batch waits for more lines before it is handed over.
const BATCH_WAIT: Duration = Duration::from_millis(50);
/// The position of a source whose log is wholly archived.
const DONE: &str = "done";

impl KubeShared {
    /// Whether output of the job may still reach the archive: a pod of it still holds
    /// jobgate's finalizer (whichever replica follows it), or this process follows one.
    pub(super) fn output_pending(&self, job_id: &str) -> bool {
        self.archive.follows_job(job_id) || self.pods.any_archiving(job_id)
    }

    /// Waits until the job's output is archived (see [`KubeShared::output_pending`]) or the finish
    /// grace passes, so that a finished job's report comes with its output. False when
    /// shutting down.
    pub(super) async fn wait_for_archive(&self, job_id: &str) -> bool {
        let deadline = tokio::time::Instant::now() + self.ctx.config.finish_grace;
        let mut changes = self.pods.subscribe();
        while self.output_pending(job_id) {
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return true,
                _ = self.ctx.shutdown.cancelled() => return false,
            }
        }
        true
    }

    /// Called with every pod event: starts following the pod's log if it is this replica's
    /// to archive, or lets go of a pod that never ran and is ending.
    pub(super) fn consider_follow(self: &Arc<Self>, info: &PodInfo, job_id: &str) {
        if self.archive.sink.get().is_none() || !self.acts_for(job_id) {
            return;
        }
        let Some(namespace) = info.namespace.clone() else {
            return;
        };
        let key = format!("{namespace}/{}", info.name);
        self.hold_if_needed(info, job_id, &namespace, &key);
        let deleting = info.deleting;
        if !info.started {
            // Nothing to read, and nothing ever will be: let it go.
            if info.archiving
                && (info.phase.is_terminal() || deleting)
                && !self.archive.follows.contains_key(&key)
            {
                self.archive.follows.insert(key.clone(), true);
                let shared = self.clone();
                let name = info.name.clone();
                self.ctx
                    .tasks
                    .spawn(async move { shared.let_go(&namespace, &name).await });
            }
            return;
        }
        // A pod that is done and let go is followed no more (after a restart: its position).
        if !info.archiving && info.phase.is_terminal() && self.archive.follows.contains_key(&key) {
            return;
        }
        if self.archive.follows.contains_key(&key) {
            return;
        }
        self.archive.follows.insert(key, false);
        *self.archive.per_job.entry(job_id.to_owned()).or_default() += 1;
        let shared = self.clone();
        let job_id = job_id.to_owned();
        let name = info.name.clone();
        let container = info.container.clone();
        let holds = info.archiving;
        self.ctx.tasks.spawn(async move {
            // Tens of thousands of pods may wait for a slot at once: each waits in this small
            // task, and the follow's much larger future is made (on the heap) only once the
            // pod has its slot.
            let slot = tokio::select! {
                slot = shared.archive.slots.clone().acquire_owned() => slot.ok(),
                _ = shared.ctx.shutdown.cancelled() => None,
            };
            if let Some(slot) = slot {
                Box::pin(shared.follow_pod(&namespace, &name, container, &job_id, holds, slot)).await;
            }
            if let Some(mut n) = shared.archive.per_job.get_mut(&job_id) {
                *n = n.saturating_sub(1);
            }
            shared.archive.per_job.remove_if(&job_id, |_, n| *n == 0);
            // Whoever waits for the job's output to be archived looks again.
            shared.pods.bump();
        });
    }

    /// Starts holding a pod that should carry [`LOG_FINALIZER`] and does not (see the module
    /// docs, "Holding"), once per pod.
    fn hold_if_needed(self: &Arc<Self>, info: &PodInfo, job_id: &str, namespace: &str, key: &str) {
        if info.archiving
            || info.deleting
            || (info.phase.is_terminal() && !info.started)
            || !self.ctx.config.manifest.archive_logs
            || self.archive.holds.contains_key(key)
            || !self.jobs.tracked.contains_key(job_id)
        {
            return;
        }
        let outcome = match self.archive.holds.entry(key.to_owned()) {
            dashmap::mapref::entry::Entry::Occupied(_) => return,
            dashmap::mapref::entry::Entry::Vacant(slot) => {
                // Checked under the entry's lock: a follow marks its pod done before it looks
                // for a hold to wait for (`follow_pod`), so a hold is either found there or
                // never started.
                if self.archive.follows.get(key).is_some_and(|done| *done) {
                    return;
                }
                let (outcome, hold) = tokio::sync::watch::channel(None);
                slot.insert(hold);
                outcome
            }
        };
        let shared = self.clone();
        let (namespace, pod, job_id) = (namespace.to_owned(), info.name.clone(), job_id.to_owned());
        self.ctx.tasks.spawn(async move {
            let held = shared.hold(&namespace, &pod, &job_id).await;
            outcome.send_replace(Some(held));
        });
    }

    /// Adds [`LOG_FINALIZER`] to the pod, conditional on its resourceVersion, retried until
    /// it holds, the pod is gone or being deleted, the job's shard is no longer this
    /// replica's, or shutdown. True if the pod holds it.
    async fn hold(&self, namespace: &str, pod: &str, job_id: &str) -> bool {
        let Some(sink) = self.archive.sink() else {
            return false;
        };
        let api = self.ctx.pods_api(namespace);
        let mut delays = retry_delays();
        loop {
            if !self.acts_for(job_id) {
                return false;
            }
            let result = async {
                // A log archived whole already (before a restart) needs no holding.
                if sink.position(job_id, pod).await.ok().flatten().as_deref() == Some(DONE) {
                    return Ok(false);
                }
                let current = api.get(pod).await?;
                if current.metadata.deletion_timestamp.is_some() {
                    return Ok(false);
                }
                let mut finalizers = current.metadata.finalizers.unwrap_or_default();
                if finalizers.iter().any(|f| f == LOG_FINALIZER) {
                    return Ok(true);
                }
                finalizers.push(LOG_FINALIZER.to_owned());
                let patch = serde_json::json!({
                    "metadata": {"finalizers": finalizers, "resourceVersion": current.metadata.resource_version}
                });
                self.acting_for(
                    job_id,
                    api.patch(pod, &PatchParams::default(), &Patch::Merge(patch)),
                )
                .await
                .map(|_| true)
            }
            .await;
            match result {
                Ok(held) => return held,
                Err(kube::Error::Api(s)) if s.code == 404 => return false,
                Err(e) => {
                    tracing::debug!(%pod, error = %e, "cannot add the log finalizer yet; retrying");
                    if !self.pause(&mut delays).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Follows one pod's log into the sink until it is all archived, then lets the pod go.
    async fn follow_pod(
        self: &Arc<Self>,
        namespace: &str,
        pod: &str,
        container: Option<String>,
        job_id: &str,
        holds: bool,
        _slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let key = format!("{namespace}/{pod}");
        let Some(sink) = self.archive.sink() else { return };
        self.ctx.config.metrics.log_follows.inc();
        let _open = scopeguard(self.ctx.config.metrics.clone());
        let api = self.ctx.pods_api(namespace);
        let mut delays = retry_delays();
        // Whether the last read ended with a clean end of body after the container had stopped
        // (as the kubelet ends a followed log), not a cut.
        let mut clean_end = false;
        'resume: loop {
            // Where the archive of this pod ends.
            let stored = loop {
                match sink.position(job_id, pod).await {
                    Ok(stored) => break stored,
                    Err(e) => {
                        tracing::warn!(%pod, error = %e, "cannot read where the pod's archived log ends; retrying");
                        if !self.pause(&mut delays).await {
                            self.archive.follows.remove(&key);
                            return;
                        }
                    }
                }
            };
            let mut cursor = Cursor::parse(stored.as_deref());
            cursor.stored = stored;
            if !cursor.done {
                loop {
                    if self.ctx.shutdown.is_cancelled() || !self.acts_for(job_id) {
                        // Another replica (or the next start) takes it from the stored position.
                        self.archive.follows.remove(&key);
                        return;
                    }
                    let ended_before = self.pods.pod_ended(job_id, pod);
                    let params = LogParams {
                        container: container.clone().or_else(|| Some(CONTAINER_NAME.into())),
                        follow: true,
                        timestamps: true,
                        since_time: cursor.since(),
                        ..LogParams::default()
                    };
                    cursor.taken = 0;
                    let outcome = match api.log_stream(pod, &params).await {
                        Ok(reader) => {
                            self.log_allowed();
                            self.read_stream(reader, &*sink, job_id, pod, &mut cursor).await
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 => Read::Gone,
                        Err(e @ kube::Error::Api(_)) if is_forbidden(&e) => {
                            Read::Forbidden(super::api_error_text(&e))
                        }
                        Err(e) => {
                            tracing::debug!(%pod, error = %e, "cannot follow the pod's log; retrying");
                            Read::Cut
                        }
                    };
                    if let Read::Gone | Read::Collected = outcome
                        && !(clean_end && self.pods.pod_ended(job_id, pod))
                    {
                        let gap = LogGap {
                            source: Some(pod.to_owned()),
                            lines: None,
                            cause: if matches!(outcome, Read::Gone) {
                                LogLoss::PodGone
                            } else {
                                LogLoss::Collected
                            },
                            detail: None,
                        };
                        tracing::warn!(%pod, "the pod's log went before jobgate read all of it: its archive records a gap");
                        match self.record_gap(&*sink, job_id, pod, &mut cursor, gap) {
                            SinkState::Open | SinkState::Closed => {}
                            SinkState::Stale => continue 'resume,
                        }
                    }
                    clean_end = matches!(outcome, Read::Ended)
                        && (self.pods.pod_ended(job_id, pod)
                            || self.container_stopped(namespace, pod, &container).await);
                    match outcome {
                        // The run was over before this read began, and the read found nothing
                        // new: that is all. (A read that found lines may have been cut short
                        // with a clean end of body: read once more.)
                        Read::Ended if ended_before && cursor.taken == 0 => break,
                        Read::Ended | Read::Cut => {
                            if cursor.taken > 0 {
                                // Progress: open it again at once, and back off afresh later.
                                delays = retry_delays();
                                if !ended_before {
                                    self.ctx.config.metrics.log_follow_resumes.inc();
                                }
                            } else if !self.pause(&mut delays).await {
                                self.archive.follows.remove(&key);
                                return;
                            }
                        }
                        Read::Stale => continue 'resume,
                        // Refused after the pod ended: what it wrote is lost to the archive,
                        // which says so where it would stand; the pod is let go.
                        Read::Forbidden(refusal) if ended_before => {
                            let gap = LogGap {
                                source: Some(pod.to_owned()),
                                lines: None,
                                cause: LogLoss::Forbidden,
                                detail: Some(refusal),
                            };
                            tracing::warn!(%pod, "the pod ended with its log refused to jobgate: its archive records a gap");
                            match self.record_gap(&*sink, job_id, pod, &mut cursor, gap) {
                                SinkState::Open | SinkState::Closed => break,
                                SinkState::Stale => continue 'resume,
                            }
                        }
                        // Refused while it runs: a right granted meanwhile loses nothing.
                        Read::Forbidden(refusal) => {
                            self.log_refused(pod, &refusal);
                            if !self.pause(&mut delays).await {
                                self.archive.follows.remove(&key);
                                return;
                            }
                        }
                        // The containers are gone, the pod not yet: nothing more to read.
                        Read::Closed | Read::Collected => break,
                        // Gone: its log went with it; what was read is archived.
                        Read::Gone => {
                            self.archive.follows.insert(key, true);
                            return;
                        }
                        Read::Shutdown => {
                            self.archive.follows.remove(&key);
                            return;
                        }
                    }
                }
                if sink.append(
                    job_id,
                    pod,
                    Some((cursor.stored.clone(), DONE.to_owned())),
                    Vec::new(),
                ) == SinkState::Stale
                {
                    continue 'resume;
                }
            }
            break;
        }
        // Let go only of what is committed: the finalizer is what keeps the log readable.
        sink.synced(job_id).await;
        self.archive.follows.insert(key.clone(), true);
        // A hold this process is adding may land after the log was all read: wait for it.
        let hold = self.archive.holds.get(&key).map(|hold| hold.clone());
        let held = match hold {
            Some(mut hold) => tokio::select! {
                outcome = hold.wait_for(Option::is_some) => outcome.is_ok_and(|o| *o == Some(true)),
                _ = self.ctx.shutdown.cancelled() => false,
            },
            None => false,
        };
        if (holds || held) && !self.ctx.shutdown.is_cancelled() {
            self.let_go(namespace, pod).await;
        }
    }

    /// Reads one log stream into the sink, until it ends or fails.
    async fn read_stream(
        &self,
        reader: impl futures::AsyncBufRead + Send,
        sink: &dyn LogSink,
        job_id: &str,
        pod: &str,
        cursor: &mut Cursor,
    ) -> Read {
        let mut reader = std::pin::pin!(reader);
        let mut raw = Vec::new();
        let mut batch = Vec::new();
        cursor.seen = 0;
        let mut first = true;
        loop {
            let next = tokio::select! {
                next = next_line(&mut reader, &mut raw) => Some(next),
                _ = tokio::time::sleep(BATCH_WAIT), if !batch.is_empty() => None,
                _ = self.ctx.shutdown.cancelled() => return Read::Shutdown,
            };
            let ended = match next {
                // Quiet for a moment: hand over what was read.
                None => false,
                Some(Ok(true)) => {
                    let text = String::from_utf8_lossy(&raw).into_owned();
                    raw.clear();
                    if std::mem::take(&mut first) {
                        if is_collected_notice(&text) {
                            return Read::Collected;
                        }
                        if cursor.skipped_to(&text) {
                            let gap = LogGap {
                                source: Some(pod.to_owned()),
                                lines: None,
                                cause: LogLoss::Rotated,
                                detail: None,
                            };
                            tracing::warn!(%pod, "the kubelet rotated the pod's log before jobgate read all of it: its archive records a gap");
                            match self.record_gap(sink, job_id, pod, cursor, gap) {
                                SinkState::Open => {}
                                SinkState::Closed => return Read::Closed,
                                SinkState::Stale => return Read::Stale,
                            }
                        }
                    }
                    if let Some(text) = cursor.accept(&text) {
                        cursor.taken += 1;
                        batch.push(LogLine {
                            source: Some(pod.to_owned()),
                            text: clip_log_line(text),
                        });
                    }
                    if batch.len() < BATCH_LINES {
                        continue;
                    }
                    false
                }
                Some(Ok(false)) => true,
                Some(Err(e)) => {
                    tracing::debug!(%pod, error = %e, "the pod's log stream failed");
                    if !batch.is_empty() {
                        match self.hand_over(sink, job_id, pod, cursor, &mut batch) {
                            SinkState::Open => {}
                            SinkState::Closed => return Read::Closed,
                            SinkState::Stale => return Read::Stale,
                        }
                    }
                    return Read::Cut;
                }
            };
            if !batch.is_empty() {
                match self.hand_over(sink, job_id, pod, cursor, &mut batch) {
                    SinkState::Open => {}
                    SinkState::Closed => return Read::Closed,
                    SinkState::Stale => return Read::Stale,
                }
            }
            if ended {
                return Read::Ended;
            }
        }
    }

    fn hand_over(
        &self,
        sink: &dyn LogSink,
        job_id: &str,
        pod: &str,
        cursor: &mut Cursor,
        batch: &mut Vec<LogLine>,
    ) -> SinkState {
        let now = cursor.position();
        let state = sink.append(
            job_id,
            pod,
            Some((cursor.stored.clone(), now.clone())),
            std::mem::take(batch),
        );
        if state == SinkState::Open {
            cursor.stored = Some(now);
        }
        state
    }

    /// Whether the pod's container has stopped, as the API server has it now (the pod watch
    /// may not have said so yet when a followed log ends). False when that cannot be read.
    async fn container_stopped(&self, namespace: &str, pod: &str, container: &Option<String>) -> bool {
        let name = container.as_deref().unwrap_or(CONTAINER_NAME);
        let Ok(current) = self.ctx.pods_api(namespace).get(pod).await else {
            return false;
        };
        let Some(status) = current.status else {
            return false;
        };
        matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
            || status
                .container_statuses
                .unwrap_or_default()
                .iter()
                .any(|c| c.name == name && c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
    }

    /// The API server refused a pod's log: logged once, until a read is allowed again.
    fn log_refused(&self, pod: &str, refusal: &str) {
        if self
            .archive
            .refused
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::debug!(%pod, error = %refusal, "the pod's log is refused to jobgate; retrying");
        } else {
            tracing::warn!(%pod, error = %refusal, "the API server refuses jobgate pods' logs; retrying with back-off while each pod runs (the archive of a pod that ends refused records a gap)");
        }
    }

    /// A log read was allowed: a later refusal is logged again.
    fn log_allowed(&self) {
        if self
            .archive
            .refused
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::info!("the API server lets jobgate read pods' logs again");
        }
    }

    /// Queues a gap at the cursor's position (which it leaves where it is).
    fn record_gap(
        &self,
        sink: &dyn LogSink,
        job_id: &str,
        pod: &str,
        cursor: &mut Cursor,
        gap: LogGap,
    ) -> SinkState {
        let now = cursor.position();
        let state = sink.gap(job_id, pod, Some((cursor.stored.clone(), now.clone())), gap);
        if state == SinkState::Open {
            cursor.stored = Some(now);
        }
        state
    }

    /// Waits the next retry delay; false when shutting down.
    async fn pause(&self, delays: &mut impl Iterator<Item = Duration>) -> bool {
        let delay = delays
            .next()
            .unwrap_or(Duration::from_secs(30))
            .min(Duration::from_secs(5));
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = self.ctx.shutdown.cancelled() => false,
        }
    }

    /// Removes [`LOG_FINALIZER`] from the pod (conditional on its resourceVersion, so that
    /// no other finalizer change is undone), retried until done, the pod gone, or shutdown.
    async fn let_go(&self, namespace: &str, pod: &str) {
        let api = self.ctx.pods_api(namespace);
        let mut delays = retry_delays();
        loop {
            let result = async {
                let current = api.get(pod).await?;
                let finalizers = current.metadata.finalizers.unwrap_or_default();
                if !finalizers.iter().any(|f| f == LOG_FINALIZER) {
                    return Ok(());
                }
                let rest: Vec<&String> = finalizers.iter().filter(|f| *f != LOG_FINALIZER).collect();
                let patch = serde_json::json!({
                    "metadata": {"finalizers": rest, "resourceVersion": current.metadata.resource_version}
                });
                api.patch(pod, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| ())
            }
            .await;
            match result {
                Ok(()) => return,
                Err(kube::Error::Api(s)) if s.code == 404 => return,
                Err(e) => {
                    tracing::debug!(%pod, error = %e, "cannot remove the log finalizer yet; retrying");
                    if !self.pause(&mut delays).await {
                        return;
                    }
                }
            }
        }
    }
}

/// How one log stream ended.
enum Read {
    /// The stream ended (the API server closes a followed log when the container stops,
    /// or when it cuts the connection: the caller tells which).
    Ended,
    /// It failed, or could not be opened.
    Cut,
    /// The sink no longer takes the pod's lines from this follower's position.
    Stale,
    /// The job's archive is closed.
    Closed,
    /// The pod is gone.
    Gone,
    /// The kubelet removed the pod's containers, and their log.
    Collected,
    /// The API server refused the read (`403`), in its words.
    Forbidden(String),
    Shutdown,
}

/// Whether the API server refused the request (`403`: RBAC, or an admission or authorization
/// webhook): asking again gets the same answer until someone changes a right.
fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Decrements the open-follows gauge when a follow ends, however it ends.
struct OpenFollow(Arc<crate::metrics::Metrics>);

fn scopeguard(metrics: Arc<crate::metrics::Metrics>) -> OpenFollow {
    OpenFollow(metrics)
}

impl Drop for OpenFollow {
    fn drop(&mut self) {
        self.0.log_follows.dec();
    }
}

/// Where a pod's archived log ends: the last line's kubelet timestamp, and how many lines
/// with exactly that timestamp are archived.
#[derive(Debug, Default, PartialEq)]
struct Cursor {
    last: Option<DateTime<Utc>>,
    count: u64,
    done: bool,
    /// Lines with the timestamp `last` seen in the current stream.
    seen: u64,
    /// The position stored (or queued to be) for this source: the next append's expected one.
    stored: Option<String>,
    /// Lines the current stream added.
    taken: usize,
}

impl Cursor {
    fn parse(position: Option<&str>) -> Self {
        match position {
            Some(DONE) => Self {
                done: true,
                ..Self::default()
            },
            Some(p) => {
                let (at, count) = p.split_once(' ').unwrap_or((p, "0"));
                Self {
                    last: DateTime::parse_from_rfc3339(at)
                        .ok()
                        .map(|t| t.with_timezone(&Utc)),
                    count: count.parse().unwrap_or(0),
                    ..Self::default()
                }
            }
            None => Self::default(),
        }
    }

    fn position(&self) -> String {
        match self.last {
            Some(at) => format!(
                "{} {}",
                at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
                self.count
            ),
            None => "0 0".to_owned(),
        }
    }

    /// Where to open the log again: the position's second, floored (the API takes whole
    /// seconds, and kube-rs rounds), so that nothing after the position is left out.
    fn since(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        self.last
            .and_then(|at| k8s_openapi::jiff::Timestamp::from_second(at.timestamp()).ok())
    }

    /// Whether `line`, the first of a stream opened again from the position, is later than
    /// the position's time: the line there (and maybe more) is no longer served.
    fn skipped_to(&self, line: &str) -> bool {
        let at = line
            .split_once(' ')
            .and_then(|(at, _)| DateTime::parse_from_rfc3339(at).ok());
        matches!((self.last, at), (Some(last), Some(at)) if at.with_timezone(&Utc) > last)
    }

    /// The text of a `timestamps=true` line, if it is past the position (which moves).
    fn accept<'a>(&mut self, line: &'a str) -> Option<&'a str> {
        let Some((at, text)) = line
            .split_once(' ')
            .and_then(|(at, text)| Some((DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc), text)))
        else {
            // No timestamp (never, with timestamps=true): keep it, the position stays.
            return Some(line);
        };
        match self.last {
            Some(last) if at < last => None,
            Some(last) if at == last => {
                self.seen += 1;
                if self.seen <= self.count {
                    None
                } else {
                    self.count += 1;
                    Some(text)
                }
            }
            _ => {
                self.last = Some(at);
                self.count = 1;
                self.seen = 1;
                Some(text)
            }
        }
    }
}

/// Whether `line`, the first of an answer, is the kubelet's word that the container is gone
/// (removed with its log): a real API server relays it as the body of a `200`, without a
/// timestamp even when asked for them, so it can never be a log line.
pub(super) fn is_collected_notice(line: &str) -> bool {
    line.starts_with("unable to retrieve container logs for ")
}

/// Reads one line into `raw` (without its newline), keeping at most [`MAX_LOG_LINE`] bytes
/// of it and the timestamp; `false` at the end of the stream with nothing read. Safe to
/// cancel between reads: what was read stays in `raw`.
async fn next_line<R: futures::AsyncBufRead + ?Sized>(
    reader: &mut std::pin::Pin<&mut R>,
    raw: &mut Vec<u8>,
) -> std::io::Result<bool> {
    const MAX_RAW: usize = MAX_LOG_LINE + 64;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(!raw.is_empty());
        }
        let (take, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_RAW.saturating_sub(raw.len());
        let keep = if end { take - 1 } else { take };
        raw.extend_from_slice(&buf[..keep.min(room)]);
        reader.consume_unpin(take);
        if end {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_stream_drops_exactly_what_the_position_covers() {
        let mut first = Cursor::default();
        let lines = [
            "2025-01-01T00:00:05.000000001Z a",
            "2025-01-01T00:00:05.000000001Z b",
            "2025-01-01T00:00:05.000000002Z c",
            "2025-01-01T00:00:05.000000002Z d",
        ];
        assert_eq!(first.accept(lines[0]), Some("a"));
        assert_eq!(first.accept(lines[1]), Some("b"));
        assert_eq!(first.accept(lines[2]), Some("c"));
        // Cut here: the stream resumes from the stored position, from the whole second.
        let mut resumed = Cursor::parse(Some(&first.position()));
        assert_eq!(resumed.since().unwrap().as_second(), 1_735_689_605);
        let kept: Vec<&str> = lines.iter().filter_map(|l| resumed.accept(l)).collect();
        assert_eq!(kept, ["d"]);
        // Lines sharing a timestamp are counted, not lost.
        let mut again = Cursor::parse(Some("2025-01-01T00:00:05.000000001Z 1"));
        let kept: Vec<&str> = lines.iter().filter_map(|l| again.accept(l)).collect();
        assert_eq!(kept, ["b", "c", "d"]);
        assert!(Cursor::parse(Some(DONE)).done);
    }
}
