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
//! carried out by `reconcile.rs`; pod events go to `pods.rs`.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use super::Inner;
use super::manifest::MANAGED_SELECTOR;
use super::tracking::{BatchJobs, Tracker};

/// The health of one watcher, for `/readyz`.
pub(super) struct WatcherHealth {
    name: String,
    /// Its first full list is done.
    listed: AtomicBool,
    /// Its last item was not an error.
    healthy: AtomicBool,
    metrics: Arc<crate::metrics::Metrics>,
    /// When it last received anything (Unix milliseconds), read by `/metrics`.
    last_event: Arc<std::sync::atomic::AtomicU64>,
}

impl WatcherHealth {
    pub(super) fn new(name: String, metrics: &Arc<crate::metrics::Metrics>) -> Arc<Self> {
        let last_event = metrics.watcher_clock(&name);
        Arc::new(Self {
            name,
            listed: AtomicBool::new(false),
            healthy: AtomicBool::new(true),
            metrics: metrics.clone(),
            last_event,
        })
    }

    /// An item arrived; `relist` when it begins a full list.
    pub(super) fn seen(&self, relist: bool) {
        self.last_event
            .store(crate::metrics::unix_millis(), Ordering::Relaxed);
        if relist {
            self.metrics.watcher_relist(&self.name);
        } else if !self.healthy.swap(true, Ordering::Relaxed) {
            tracing::info!(watcher = %self.name, "watch recovered");
        }
    }

    /// A full list is done; the first one makes the watcher count as ready.
    pub(super) fn list_done(&self) {
        if !self.listed.swap(true, Ordering::Relaxed) {
            tracing::info!(watcher = %self.name, "first list done");
        }
    }

    /// The watch failed; kube-rs' watcher retries with back-off.
    pub(super) fn failed(&self, error: &watcher::Error) {
        self.metrics.watcher_restart(&self.name);
        self.healthy.store(false, Ordering::Relaxed);
        tracing::warn!(watcher = %self.name, %error, "watch failed; retrying with back-off");
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
    inner: Arc<Inner>,
    tracker: Tracker<BatchJobs>,
}

impl Handler<K8sJob> for JobEvents {
    async fn event(&mut self, event: watcher::Event<K8sJob>) {
        let actions = self.tracker.apply(&self.inner.tracked, event);
        self.inner.carry_out_job_actions(actions).await;
    }
}

/// The pod watcher of one scope: results, failure causes and where logs are.
struct PodEvents(Arc<Inner>);

impl Handler<Pod> for PodEvents {
    async fn event(&mut self, event: watcher::Event<Pod>) {
        match event {
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => self.0.on_pod(&pod),
            // A deleted pod's last state stays known: it may prove the outcome of a Job
            // deleted with it. One deleted before it ended will never end: nothing should
            // wait for it.
            watcher::Event::Delete(pod) => self.0.on_pod_deleted(&pod),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

impl Inner {
    /// The scopes to watch: each configured namespace, else the whole cluster (`None`).
    pub(super) fn watch_scopes(&self) -> Vec<Option<String>> {
        if self.config.watch_namespaces.is_empty() {
            vec![None]
        } else {
            self.config.watch_namespaces.iter().cloned().map(Some).collect()
        }
    }

    /// Starts every watcher, once: workload kinds' (after their discovery), then Jobs' and
    /// pods' in each scope.
    pub(super) async fn start_watchers(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let scopes = self.watch_scopes();
        self.start_workload_kinds().await;
        let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        for scope in scopes {
            let where_ = scope.as_deref().unwrap_or("all namespaces").to_owned();
            let (jobs, pods): (Api<K8sJob>, Api<Pod>) = match &scope {
                Some(ns) => (self.jobs_api(ns), self.pods_api(ns)),
                None => (Api::all(self.client.clone()), Api::all(self.client.clone())),
            };
            let jobs_health = WatcherHealth::new(format!("jobs in {where_}"), &self.config.metrics);
            let pods_health = WatcherHealth::new(format!("pods in {where_}"), &self.config.metrics);
            watchers.push(jobs_health.clone());
            watchers.push(pods_health.clone());
            let config = watcher::Config::default().labels(MANAGED_SELECTOR);
            let mut job_events = JobEvents {
                inner: self.clone(),
                tracker: Tracker::new(BatchJobs, scope, self.list_epoch.clone()),
            };
            let inner = self.clone();
            let job_stream = watch_stream(jobs, config.clone());
            self.tasks.spawn(async move {
                follow_events(job_stream, Some(&jobs_health), &inner.shutdown, &mut job_events).await;
            });
            let mut pod_events = PodEvents(self.clone());
            let inner = self.clone();
            let pod_stream = watch_stream(pods, config);
            self.tasks.spawn(async move {
                follow_events(pod_stream, Some(&pods_health), &inner.shutdown, &mut pod_events).await;
            });
        }
    }

    /// Ready once started, not shutting down, and every Job and pod watcher has done its
    /// first list and is not failing.
    pub(super) fn is_ready(&self) -> bool {
        let watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        !self.shutdown.is_cancelled()
            && self.started.load(Ordering::SeqCst)
            && watchers
                .iter()
                .all(|w| w.listed.load(Ordering::Relaxed) && w.healthy.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
