//! The one watch loop every watcher runs, the watchers of batch Jobs and of the pods of
//! managed workloads (one of each per watched namespace, or one of each for the whole
//! cluster, label-selected on `app.kubernetes.io/managed-by=jobgate`, whatever the number of
//! jobs or clients), and each watcher's health for `/readyz` and `/metrics`.
//!
//! It owns starting the watchers (after every job launched before a restart has been
//! adopted) and [`follow_events`]: the loop that takes any stream of watcher events (kube-rs'
//! watcher, restarted with back-off and re-listing on `410 Gone`, or a plain sequence in
//! tests), keeps its watcher's health, and hands each event to a [`Handler`]. Workload
//! kinds' and CustomResourceDefinitions' handlers live in `workloads.rs`.
//!
//! It must not interpret what it sees: what Job events mean is decided by `tracking.rs` and
//! carried out by `reconcile.rs`; what pod events mean is decided by `pods.rs`, and this
//! file's glue only carries that out (announcing changes, capturing an ended pod's log tail,
//! the archive's follows).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use super::kinds::Kind;
use super::manifest::{JOB_ID_LABEL, MANAGED_SELECTOR};
use super::pods::{PodAction, PodEvent};
use super::tracking::{BatchJobs, Tracker};
use super::{KubeShared, label, status};
use crate::model::{SHARD_LABEL, ShardSet};

/// The executor's part that holds its watchers: started once, each with its health.
#[derive(Default)]
pub(super) struct Watches {
    /// The pod and Kueue watchers, pushed once at start and read by `/readyz`. A poisoned
    /// lock is used anyway: a push cannot leave the list half-changed.
    unsharded: std::sync::Mutex<Vec<Arc<WatcherHealth>>>,
    /// The Job and workload-kind watchers, which follow the shards this replica acts for
    /// (every job, without replicas) and restart when those change.
    sharded: std::sync::Mutex<ShardedWatches>,
    /// The watchers have been started (they start once).
    started: AtomicBool,
}

/// The watchers of what carries jobs (batch Jobs, workload kinds' objects), for the shards
/// this replica acts for: one generation at a time, replaced whole when the shards change.
#[derive(Default)]
struct ShardedWatches {
    /// The shards followed; `None` before the first generation.
    shards: Option<ShardSet>,
    /// Ends this generation's watchers.
    stop: CancellationToken,
    health: Vec<Arc<WatcherHealth>>,
    /// The workload kinds watched in this generation (by address), so that a kind
    /// discovered while a generation starts is watched once.
    kinds: std::collections::HashSet<usize>,
}

/// The health of one watcher, for `/readyz`.
pub(super) struct WatcherHealth {
    name: String,
    /// The API server answered its list: it is reachable and lets jobgate list.
    answered: AtomicBool,
    /// Its first full list is done: every job it follows is reconciled with the cluster.
    listed: AtomicBool,
    /// Its last item was not an error.
    healthy: AtomicBool,
    /// Its last failure, in words, until an item arrives: for `/readyz`, and so that a
    /// failure repeated at every retry is logged once.
    failure: std::sync::Mutex<Option<String>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// When it last received anything (Unix milliseconds), read by `/metrics`.
    last_event: Arc<std::sync::atomic::AtomicU64>,
}

impl WatcherHealth {
    pub(super) fn new(name: String, metrics: &Arc<crate::metrics::Metrics>) -> Arc<Self> {
        let last_event = metrics.watcher_clock(&name);
        metrics.kube_first_lists_pending.inc();
        Arc::new(Self {
            name,
            answered: AtomicBool::new(false),
            listed: AtomicBool::new(false),
            healthy: AtomicBool::new(true),
            failure: std::sync::Mutex::new(None),
            metrics: metrics.clone(),
            last_event,
        })
    }

    /// The API server answered its list and its last item was not an error. Its first
    /// list need not be done: after a restart with many jobs, going through them all takes
    /// a while, and the jobs it reconciles are already known from the store (see
    /// [`KubeShared::is_ready`]).
    pub(super) fn is_ready(&self) -> bool {
        self.answered.load(Ordering::Relaxed) && self.healthy.load(Ordering::Relaxed)
    }

    /// Its last item was not an error.
    pub(super) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Why it is not ready (see [`WatcherHealth::is_ready`]), in words for `/readyz`; `None`
    /// when it is.
    pub(super) fn unready_reason(&self) -> Option<String> {
        if self.is_ready() {
            return None;
        }
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Some(match failure {
            Some(failure) => format!("the watch of {} fails: {failure}", self.name),
            None => format!("the watch of {} has had no answer to its list yet", self.name),
        })
    }

    /// An item arrived; `relist` when it begins a full list.
    pub(super) fn seen(&self, relist: bool) {
        self.last_event
            .store(crate::metrics::unix_millis(), Ordering::Relaxed);
        if relist {
            // Sent before the list request: no proof that the server answers.
            self.metrics.watcher_relist(&self.name);
            return;
        }
        self.answered.store(true, Ordering::Relaxed);
        if !self.healthy.swap(true, Ordering::Relaxed) {
            tracing::info!(watcher = %self.name, "watch recovered");
        }
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// A full list is done; after the first one, every job the watcher follows has been
    /// reconciled with the cluster.
    pub(super) fn list_done(&self) {
        if !self.listed.swap(true, Ordering::Relaxed) {
            self.metrics.kube_first_lists_pending.dec();
            tracing::info!(watcher = %self.name, "first list done");
        }
    }

    /// The watch failed; kube-rs' watcher retries with back-off.
    /// Logged when the failure starts or its words change, not at every retry.
    pub(super) fn failed(&self, error: &watcher::Error) {
        self.metrics.watcher_restart(&self.name);
        let was_healthy = self.healthy.swap(false, Ordering::Relaxed);
        let text = watch_error_text(error);
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if !was_healthy && failure.as_deref() == Some(text.as_str()) {
            tracing::debug!(watcher = %self.name, error = %text, "watch failed again");
        } else {
            tracing::warn!(watcher = %self.name, error = %text, "watch failed; retrying with back-off");
        }
        *failure = Some(text);
    }
}

impl Drop for WatcherHealth {
    /// A watcher ended before its first list was done (its shards changed, or shutdown):
    /// it no longer counts as pending.
    fn drop(&mut self) {
        if !self.listed.load(Ordering::Relaxed) {
            self.metrics.kube_first_lists_pending.dec();
        }
    }
}

/// A watcher's failure in words: what it was doing, and the API server's message for a
/// refusal (see [`super::api_error_text`]).
fn watch_error_text(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(e) => format!("listing: {}", super::api_error_text(e)),
        watcher::Error::WatchStartFailed(e) => format!("watching: {}", super::api_error_text(e)),
        watcher::Error::WatchFailed(e) => format!("watching: {}", super::api_error_text(e)),
        watcher::Error::WatchError(s) => format!("watching: {} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

/// kube-rs' watcher of `api`'s objects matching `config`: it re-lists after `410 Gone` (an
/// `Init` … `InitDone` again) and restarts a failed watch with its default back-off.
pub(super) fn watch_stream<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    watcher(api, config).default_backoff()
}

/// What a watcher does with what it sees.
pub(super) trait Handler<K> {
    /// One event of the watch.
    async fn event(&mut self, event: watcher::Event<K>);

    /// The watch failed; the stream retries with back-off unless this says to stop.
    fn failed(&mut self, _error: &watcher::Error) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// Hands every event of `events` to `handler` until the stream ends, `handler` stops after a
/// failure, or `shutdown`; `health` (when the watcher has one) follows what arrives.
pub(super) async fn follow_events<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    health: Option<&WatcherHealth>,
    shutdown: &CancellationToken,
    handler: &mut impl Handler<K>,
) {
    let mut events = std::pin::pin!(events);
    loop {
        let item = tokio::select! {
            // Shutdown first: a busy stream must not delay it.
            biased;
            _ = shutdown.cancelled() => return,
            item = events.next() => item,
        };
        let Some(item) = item else { return };
        match item {
            Ok(event) => {
                let list_done = matches!(event, watcher::Event::InitDone);
                // Init comes before the list request: no proof that the server answers.
                if let Some(health) = health {
                    health.seen(matches!(event, watcher::Event::Init));
                }
                handler.event(event).await;
                if let (true, Some(health)) = (list_done, health) {
                    health.list_done();
                }
            }
            Err(e) => {
                if let Some(health) = health {
                    health.failed(&e);
                }
                if handler.failed(&e).is_break() {
                    return;
                }
            }
        }
    }
}

/// The Job watcher of one scope: the only source of batch Jobs' observations.
struct JobEvents {
    shared: Arc<KubeShared>,
    tracker: Tracker<BatchJobs>,
}

impl Handler<K8sJob> for JobEvents {
    async fn event(&mut self, event: watcher::Event<K8sJob>) {
        let _order = self
            .shared
            .jobs
            .queue_order(super::tracking::event_job_id(&event).as_deref())
            .await;
        let actions = self.tracker.apply(&self.shared.jobs.tracked, event);
        self.shared.carry_out_job_actions(actions).await;
    }
}

/// The pod watcher of one scope: results, failure causes and where logs are.
struct PodEvents(Arc<KubeShared>);

impl Handler<Pod> for PodEvents {
    async fn event(&mut self, event: watcher::Event<Pod>) {
        let attempts_of = match event {
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => self.0.on_pod(&pod, false),
            watcher::Event::Delete(pod) => self.0.on_pod(&pod, true),
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        if let Some(job_id) = attempts_of {
            self.0.send_attempts(&job_id).await;
        }
    }
}

impl KubeShared {
    /// Hands a pod's event to its job's record (`pods.rs` decides what it means) and
    /// carries out what that says: announcing the change, capturing an ended pod's log tail,
    /// and the archive's follows. Returns the job whose attempts the event changed, to report
    /// them.
    fn on_pod(self: &Arc<Self>, pod: &Pod, deleted: bool) -> Option<String> {
        let Some(id) = label(&pod.metadata, JOB_ID_LABEL) else {
            if let (true, Some(namespace), Some(name)) =
                (deleted, &pod.metadata.namespace, &pod.metadata.name)
            {
                self.archive.forget_follow(namespace, name);
            }
            return None;
        };
        let info = status::pod_info(pod)?;
        let event = if deleted {
            PodEvent::Deleted(info)
        } else {
            PodEvent::Applied(info)
        };
        let tracked = self.jobs.tracked.contains_key(id);
        let actions = self.pods.apply(id, event, tracked);
        let changed = !actions.is_empty();
        for action in actions {
            match action {
                PodAction::Changed => self.pods.bump(),
                PodAction::ConsiderFollow(info) => self.consider_follow(&info, id),
                PodAction::CaptureLog {
                    namespace,
                    pod,
                    container,
                } => {
                    let shared = self.clone();
                    let id = id.to_owned();
                    self.ctx.tasks.spawn(async move {
                        let lines = shared
                            .pod_log(&namespace, &pod, container, shared.ctx.config.captured_log_lines)
                            .await;
                        let lines = lines
                            .inspect_err(|e| tracing::debug!(%pod, error = %e, "no log to capture"))
                            .ok();
                        shared.pods.captured(&id, pod, lines);
                    });
                }
                PodAction::ForgetFollow { namespace, pod } => self.archive.forget_follow(&namespace, &pod),
                PodAction::Forget => {}
            }
        }
        (changed && self.pods.refresh_attempts(id, tracked)).then(|| id.to_owned())
    }
}

impl KubeShared {
    /// Starts every watcher, once: workload kinds' discovery, pods' in each scope, and,
    /// without replicas, the Job and workload watchers of every shard (with replicas they
    /// start with the first shards assigned, see [`KubeShared::follow_shards`]).
    pub(super) async fn start_watchers(self: &Arc<Self>) {
        if self.watches.started.swap(true, Ordering::SeqCst) {
            return;
        }
        self.start_workload_kinds().await;
        let mut watchers = self
            .watches
            .unsharded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for scope in self.ctx.watch_scopes() {
            let where_ = scope.as_deref().unwrap_or("all namespaces").to_owned();
            let pods: Api<Pod> = match &scope {
                Some(ns) => self.ctx.pods_api(ns),
                None => Api::all(self.ctx.client.clone()),
            };
            // Every replica watches every managed pod: any of them serves a job's runs and
            // logs. Only what decides a job's outcome is sharded.
            let pods_health = WatcherHealth::new(format!("pods in {where_}"), &self.ctx.config.metrics);
            watchers.push(pods_health.clone());
            let config = watcher::Config::default().labels(MANAGED_SELECTOR);
            let mut pod_events = PodEvents(self.clone());
            let shared = self.clone();
            let pod_stream = watch_stream(pods, config);
            self.ctx.tasks.spawn(async move {
                follow_events(
                    pod_stream,
                    Some(&pods_health),
                    &shared.ctx.shutdown,
                    &mut pod_events,
                )
                .await;
            });
        }
        self.start_kueue_watchers(&mut watchers);
        drop(watchers);
        if !self.ownership.has_replicas() {
            self.follow_shards(ShardSet::ALL);
        }
    }

    /// The label selector of the Job and workload watches of `shards`: every managed object
    /// without replicas; with them, those of `shards` (`None`: nothing to watch).
    fn shard_selector(&self, shards: ShardSet) -> Option<String> {
        if !self.ownership.has_replicas() {
            return Some(MANAGED_SELECTOR.to_owned());
        }
        (!shards.is_empty()).then(|| format!("{MANAGED_SELECTOR},{SHARD_LABEL} in ({})", shards.to_list()))
    }

    /// From now on follows exactly the jobs of `shards`: jobs of other shards are forgotten
    /// (another replica acts for them), and the Job and workload watchers start again,
    /// selecting these shards. The jobs of shards gained are adopted before this is called,
    /// so that the new watchers' first list reconciles them.
    pub(super) fn follow_shards(self: &Arc<Self>, shards: ShardSet) {
        let mut sharded = self
            .watches
            .sharded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if sharded.shards == Some(shards) {
            return;
        }
        self.jobs.tracked.retain(|id, _| shards.holds(id));
        sharded.stop.cancel();
        sharded.stop = self.ctx.shutdown.child_token();
        sharded.shards = Some(shards);
        sharded.health.clear();
        sharded.kinds.clear();
        let Some(selector) = self.shard_selector(shards) else {
            return;
        };
        for scope in self.ctx.watch_scopes() {
            let where_ = scope.as_deref().unwrap_or("all namespaces").to_owned();
            let jobs: Api<K8sJob> = match &scope {
                Some(ns) => self.ctx.jobs_api(ns),
                None => Api::all(self.ctx.client.clone()),
            };
            let health = WatcherHealth::new(format!("jobs in {where_}"), &self.ctx.config.metrics);
            sharded.health.push(health.clone());
            let mut job_events = JobEvents {
                shared: self.clone(),
                tracker: Tracker::new(BatchJobs, scope, self.jobs.list_epoch.clone()),
            };
            let stream = watch_stream(jobs, watcher::Config::default().labels(&selector));
            let stop = sharded.stop.clone();
            self.ctx.tasks.spawn(async move {
                follow_events(stream, Some(&health), &stop, &mut job_events).await;
            });
        }
        for kind in self.kinds.all() {
            if kind.watching.load(Ordering::SeqCst) {
                self.spawn_kind_watchers_in(kind, &mut sharded);
            }
        }
        drop(sharded);
        // The pods of the shards gained are this replica's to archive now; the pod watch
        // will not show them again until they change.
        let held = self.pods.jobs_where(|id| shards.holds(id));
        for (id, pods) in held {
            for pod in &pods {
                self.consider_follow(pod, &id);
            }
        }
    }

    /// Starts the watchers of a workload kind just discovered, in the current generation.
    pub(super) fn spawn_kind_watchers(self: &Arc<Self>, kind: &Arc<Kind>) {
        let mut sharded = self
            .watches
            .sharded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.spawn_kind_watchers_in(kind, &mut sharded);
    }

    fn spawn_kind_watchers_in(self: &Arc<Self>, kind: &Arc<Kind>, sharded: &mut ShardedWatches) {
        let Some(shards) = sharded.shards else { return };
        let Some(selector) = self.shard_selector(shards) else {
            return;
        };
        if !sharded.kinds.insert(Arc::as_ptr(kind) as usize) {
            return;
        }
        for (health, task) in self.kind_watchers(kind, &selector, &sharded.stop) {
            sharded.health.push(health);
            self.ctx.tasks.spawn(task);
        }
    }

    /// Ready once started, not shutting down, and every Job and pod watcher has had its list
    /// answered by the API server and is not failing.
    ///
    /// Ready does not wait for the first lists to be done. Every job they reconcile is
    /// already known, adopted from the store, and its state as last recorded is what
    /// clients read meanwhile; a job whose workload changed (or finished, or vanished) while
    /// jobgate was down gets its true state as the list reaches it, and jobs submitted
    /// meanwhile are accepted and launched at once, their progress observed once the list
    /// is done (the watch follows it). `jobgate_kube_first_lists_pending` counts the
    /// watchers still listing. Waiting instead would keep a restarted jobgate with 100,000
    /// jobs unready for the tens of seconds its lists take.
    ///
    /// With replicas, it also needs its Lease renewed; its Job and workload watchers then
    /// need only not to fail, so that a change of shards does not make it unready while the
    /// new ones list.
    ///
    /// Returns why it is not ready, in words for `/readyz` (the first reason found); `None`
    /// when it is.
    pub(super) fn unready_reason(&self) -> Option<String> {
        if self.ctx.shutdown.is_cancelled() {
            return Some("shutting down".to_owned());
        }
        if !self.watches.started.load(Ordering::SeqCst) {
            return Some("the Kubernetes watchers have not started yet".to_owned());
        }
        if let Some(problem) = self.ownership.membership_problem() {
            return Some(problem);
        }
        let watchers = self
            .watches
            .unsharded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(reason) = watchers.iter().find_map(|w| w.unready_reason()) {
            return Some(reason);
        }
        let sharded = self
            .watches
            .sharded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.ownership.has_replicas() {
            // Only not failing: a change of shards must not make it unready while the new
            // watchers list.
            return sharded
                .health
                .iter()
                .find(|w| !w.is_healthy())
                .and_then(|w| w.unready_reason());
        }
        if sharded.shards.is_none() {
            return Some("the Job watchers have not started yet".to_owned());
        }
        sharded.health.iter().find_map(|w| w.unready_reason())
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
