//! The watchers of batch Jobs and of the pods of managed workloads: one of each per watched
//! namespace (or one of each for the whole cluster), label-selected on
//! `app.kubernetes.io/managed-by=jobgate`, whatever the number of jobs or clients.
//!
//! It owns starting them (after every job launched before a restart has been adopted),
//! their loops (kube-rs' watcher, restarted with back-off and re-listing on `410 Gone`),
//! the list epochs and "seen" sets that let a re-list reveal what vanished, and each
//! watcher's health for `/readyz` and `/metrics`. Workload kinds' watchers live in
//! `workloads.rs`, and use [`WatcherHealth`] too.
//!
//! It must not interpret what it sees: each event goes to `reconcile.rs` (Jobs) or
//! `pods.rs` (pods).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::manifest::{JOB_ID_LABEL, MANAGED_SELECTOR};
use super::{Inner, label};

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
            self.tasks
                .spawn(self.clone().watch_jobs(jobs, scope.clone(), jobs_health));
            self.tasks.spawn(self.clone().watch_pods(pods, pods_health));
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

    /// Follows the Jobs in one namespace (or all): the only source of job observations.
    async fn watch_jobs(
        self: Arc<Self>,
        api: Api<K8sJob>,
        namespace: Option<String>,
        health: Arc<WatcherHealth>,
    ) {
        let config = watcher::Config::default().labels(MANAGED_SELECTOR);
        let mut events = std::pin::pin!(watcher(api, config).default_backoff());
        let mut list_epoch = 0;
        let mut seen = HashSet::new();
        loop {
            let item = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                item = events.next() => item,
            };
            let Some(item) = item else { return };
            match item {
                Ok(event) => {
                    // Init comes before the list request: no proof that the server answers.
                    health.seen(matches!(event, watcher::Event::Init));
                    match event {
                        watcher::Event::Init => {
                            list_epoch = self.list_epoch.fetch_add(1, Ordering::SeqCst) + 1;
                            seen.clear();
                        }
                        watcher::Event::InitApply(job) => {
                            if let Some(id) = label(&job.metadata, JOB_ID_LABEL) {
                                seen.insert(id.to_owned());
                            }
                            self.on_job(job).await;
                        }
                        watcher::Event::InitDone => {
                            self.reconcile(namespace.as_deref(), list_epoch, &seen);
                            seen = HashSet::new();
                            health.list_done();
                        }
                        watcher::Event::Apply(job) => self.on_job(job).await,
                        watcher::Event::Delete(job) => self.on_job_deleted(job),
                    }
                }
                Err(e) => health.failed(&e),
            }
        }
    }

    /// Follows the pods of managed Jobs: results, failure causes and where logs are.
    async fn watch_pods(self: Arc<Self>, api: Api<Pod>, health: Arc<WatcherHealth>) {
        let config = watcher::Config::default().labels(MANAGED_SELECTOR);
        let mut events = std::pin::pin!(watcher(api, config).default_backoff());
        loop {
            let item = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                item = events.next() => item,
            };
            let Some(item) = item else { return };
            match item {
                Ok(event) => {
                    // Init comes before the list request: no proof that the server answers.
                    health.seen(matches!(event, watcher::Event::Init));
                    match event {
                        watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => self.on_pod(&pod),
                        watcher::Event::InitDone => {
                            health.list_done();
                        }
                        // A deleted pod's last state stays known: it may prove the outcome
                        // of a Job deleted with it. One deleted before it ended will never end:
                        // nothing should wait for it.
                        watcher::Event::Delete(pod) => self.on_pod_deleted(&pod),
                        watcher::Event::Init => {}
                    }
                }
                Err(e) => health.failed(&e),
            }
        }
    }
}
