//! The Kubernetes executor: each job runs as a batch/v1 Job, observed through watches.
//!
//! It owns the Kubernetes client, one label-selected watcher per kind and scope (Jobs, and
//! the Pods of managed Jobs), the small per-job state needed to map what they see to
//! observations, and the capture of a finished job's result and log tail. Nothing polls:
//! after the first list, the API server pushes every change, whatever the number of jobs
//! or clients. After every list or re-list, a tracked job whose Job vanished unobserved is
//! reported with its true outcome where its pods prove it, else failed `WorkloadDeleted`.
//!
//! It must not write the store or decide phases: it reports [`WorkloadStatus`]es shaped by
//! the Job's own conditions, and the job model derives the phase.

pub mod manifest;
mod requests;
pub mod status;
mod workloads;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use dashmap::DashMap;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{AsyncBufReadExt, FutureExt, StreamExt};
use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::manifest::{CONTAINER_NAME, JOB_ID_LABEL, MANAGED_SELECTOR, ManifestDefaults, workload_name};
use self::status::{PodInfo, PodPhase};
use super::{Executor, ExecutorError, LogLine, Observation, ObservationSender, RunInfo};
use crate::model::{Job, WorkloadStatus};
use crate::templates::TemplateSet;

/// Settings of the Kubernetes executor.
#[derive(Clone, Debug)]
pub struct KubeConfig {
    /// A kubeconfig file; otherwise `$KUBECONFIG`, `~/.kube/config` or the in-cluster
    /// service account, as kubectl would.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; its current context otherwise.
    pub context: Option<String>,
    /// Namespaces to watch, one watcher per kind in each; empty watches the whole cluster
    /// (which needs cluster-wide RBAC).
    pub watch_namespaces: Vec<String>,
    pub manifest: ManifestDefaults,
    /// How long a finished Job's pods may take to be seen terminal before its result and
    /// log tail are captured anyway.
    pub finish_grace: Duration,
    /// Lines of output kept in jobgate when a job finishes (its pods may be deleted later).
    pub captured_log_lines: usize,
    /// The workload templates: jobs of these run as their kinds' objects.
    pub templates: Arc<TemplateSet>,
    /// Watcher restarts, relists and events, and API requests, are counted here.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl Default for KubeConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            watch_namespaces: Vec::new(),
            manifest: ManifestDefaults::default(),
            finish_grace: Duration::from_secs(5),
            captured_log_lines: 200,
            templates: Arc::new(TemplateSet::default()),
            metrics: crate::metrics::Metrics::new(),
        }
    }
}

/// Why the executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeSetupError {
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("finding a Kubernetes configuration (kubeconfig or in-cluster): {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("creating the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

#[derive(Clone)]
pub struct KubeExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    config: KubeConfig,
    observations: ObservationSender,
    /// Unfinished jobs this executor is responsible for.
    tracked: DashMap<String, Tracked>,
    /// Jobs cancelled while their Job was being created (at most the launches in flight).
    cancelled_while_creating: DashMap<String, ()>,
    /// What the pod watcher saw of each tracked job's pods.
    pods: DashMap<String, JobPods>,
    /// Bumped on every pod change, so that waiters for pods need no polling.
    pods_version: tokio::sync::watch::Sender<u64>,
    /// Bumped when a finishing job's status changes.
    jobs_version: tokio::sync::watch::Sender<u64>,
    /// Bumped at the start of every (re-)list of Jobs: a job confirmed before a list began
    /// must appear in it, or it vanished.
    list_epoch: AtomicU64,
    watchers: std::sync::Mutex<Vec<Arc<WatcherHealth>>>,
    /// The workload kinds templates create, by (group, version, kind).
    kinds: BTreeMap<(String, String, String), Arc<workloads::Kind>>,
    /// Finished workloads whose deletion is scheduled (namespace/name/uid).
    retention_timers: DashMap<String, ()>,
    started: AtomicBool,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// What the executor keeps per unfinished job (a few hundred bytes).
struct Tracked {
    namespace: String,
    completions: i32,
    /// The list epoch when the Job was known to exist; `None` while it is being created.
    confirmed_epoch: Option<u64>,
    /// The newest resourceVersion applied: older events are stale and ignored.
    last_rv: u64,
    /// The outcome is decided; its result and logs are being captured.
    finishing: bool,
    /// While finishing: the newest status, whose counts settle once the controller writes
    /// its final condition (Complete or Failed) after the interim one.
    settled: Option<WorkloadStatus>,
    /// The last status reported, to report only changes.
    last_sent: Option<WorkloadStatus>,
    /// For jobs of workload templates: how their object's status decodes.
    decoding: Option<workloads::Decoding>,
    /// The job's `ttlSecondsAfterFinished` (or the server's default).
    ttl_seconds: Option<i32>,
}

/// The pods of one tracked job, and the log tails captured as they ended: a Job removed by
/// its TTL right after finishing takes its pods' logs with it.
#[derive(Default)]
struct JobPods {
    pods: BTreeMap<String, PodInfo>,
    /// Log tails of the most recently ended pods, by pod name.
    logs: BTreeMap<String, Vec<String>>,
    /// Log captures in flight.
    capturing: usize,
}

/// How many ended pods' log tails are kept per job.
const CAPTURED_PODS: usize = 5;

impl JobPods {
    fn infos(&self) -> Vec<PodInfo> {
        self.pods.values().cloned().collect()
    }

    /// Keeps the log tails of the [`CAPTURED_PODS`] latest runs.
    fn keep_recent_logs(&mut self) {
        while self.logs.len() > CAPTURED_PODS {
            let oldest = self
                .logs
                .keys()
                .min_by_key(|name| {
                    let info = self.pods.get(*name);
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

/// The health of one watcher, for `/readyz`.
struct WatcherHealth {
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
    fn new(name: String, metrics: &Arc<crate::metrics::Metrics>) -> Arc<Self> {
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
    fn seen(&self, relist: bool) {
        self.last_event
            .store(crate::metrics::unix_millis(), Ordering::Relaxed);
        if relist {
            self.metrics.watcher_relist(&self.name);
        } else if !self.healthy.swap(true, Ordering::Relaxed) {
            tracing::info!(watcher = %self.name, "watch recovered");
        }
    }

    fn failed(&self, error: &watcher::Error) {
        self.metrics.watcher_restart(&self.name);
        self.healthy.store(false, Ordering::Relaxed);
        tracing::warn!(watcher = %self.name, %error, "watch failed; retrying with back-off");
    }
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn resource_version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// How a failed API call is reported to the launcher.
fn launch_error(action: &str, e: kube::Error) -> ExecutorError {
    match e {
        kube::Error::Api(s) => {
            let message = format!("{action}: {} ({} {})", s.message, s.code, s.reason);
            match s.code {
                429 => ExecutorError::Unavailable {
                    reason: "ApiServerThrottling",
                    message,
                },
                401 => ExecutorError::Unavailable {
                    reason: "Unauthorized",
                    message,
                },
                // RBAC can be fixed by an operator; the job waits for it.
                403 => ExecutorError::Unavailable {
                    reason: "Forbidden",
                    message,
                },
                404 => ExecutorError::Rejected {
                    reason: "NamespaceNotFound",
                    message,
                },
                400 | 422 => ExecutorError::Rejected {
                    reason: "InvalidWorkload",
                    message,
                },
                _ => ExecutorError::Unavailable {
                    reason: "ApiServerUnavailable",
                    message,
                },
            }
        }
        other => ExecutorError::Unavailable {
            reason: "ApiServerUnreachable",
            message: format!("{action}: {other}"),
        },
    }
}

impl KubeExecutor {
    /// Connects to the cluster. Watchers start with [`Executor::start`], once jobs launched
    /// before a restart have been adopted.
    pub async fn connect(
        config: KubeConfig,
        observations: ObservationSender,
    ) -> Result<Self, KubeSetupError> {
        let options = KubeConfigOptions {
            context: config.context.clone(),
            ..KubeConfigOptions::default()
        };
        let client_config = match &config.kubeconfig {
            Some(path) => {
                kube::Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &options).await?
            }
            None if config.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
            None => kube::Config::infer().await?,
        };
        let client = kube::client::ClientBuilder::try_from(client_config)?
            .with_layer(&requests::CountRequestsLayer(config.metrics.clone()))
            .build();
        let kinds = config
            .templates
            .iter()
            .map(|t| {
                let (group, version, kind) = workloads::Kind::key(t);
                let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind);
                ((group, version, kind), workloads::Kind::new(gvk))
            })
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                config,
                observations,
                tracked: DashMap::new(),
                cancelled_while_creating: DashMap::new(),
                pods: DashMap::new(),
                pods_version: tokio::sync::watch::Sender::new(0),
                jobs_version: tokio::sync::watch::Sender::new(0),
                list_epoch: AtomicU64::new(0),
                watchers: std::sync::Mutex::new(Vec::new()),
                kinds,
                retention_timers: DashMap::new(),
                started: AtomicBool::new(false),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        })
    }

    fn track(&self, job: &Job, confirmed_epoch: Option<u64>) {
        let decoding = self
            .inner
            .kind_of(&job.spec.template)
            .map(|(template, kind)| workloads::Decoding {
                template,
                kind,
                mapped: job.workload.mapped.clone().unwrap_or_default(),
            });
        let ttl_seconds =
            job.spec
                .ttl_seconds_after_finished
                .or(self.inner.config.manifest.ttl_seconds_after_finished);
        self.inner
            .tracked
            .entry(job.id.clone())
            .or_insert_with(|| Tracked {
                decoding,
                ttl_seconds,
                namespace: job.spec.namespace.clone(),
                completions: job.spec.completions,
                confirmed_epoch,
                last_rv: 0,
                finishing: false,
                settled: None,
                last_sent: None,
            });
    }
}

impl KubeExecutor {
    /// Creates the object of a workload template's job, as `launch` does a Job.
    async fn launch_workload(
        &self,
        job: &Arc<Job>,
        template: &Arc<crate::templates::WorkloadTemplate>,
        kind: &Arc<workloads::Kind>,
    ) -> Result<(), ExecutorError> {
        let inner = &self.inner;
        self.track(job, None);
        match inner.create_workload(job, template, kind).await {
            Ok(()) => {
                // Known to exist from now on: every list that begins later must show it.
                let epoch = kind.list_epoch.load(Ordering::SeqCst);
                if let Some(mut t) = inner.tracked.get_mut(&job.id) {
                    t.confirmed_epoch = Some(epoch);
                }
                if inner.cancelled_while_creating.remove(&job.id).is_some() {
                    return self.cancel(job).await;
                }
                Ok(())
            }
            Err(e) => {
                inner
                    .tracked
                    .remove_if(&job.id, |_, t| t.confirmed_epoch.is_none());
                inner.cancelled_while_creating.remove(&job.id);
                Err(e)
            }
        }
    }
}

impl Inner {
    fn jobs_api(&self, namespace: &str) -> Api<K8sJob> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn send(&self, job_id: String, status: WorkloadStatus) {
        let observation = Observation { job_id, status };
        if self.observations.send(observation).await.is_err() {
            tracing::debug!("job service is gone; observation dropped");
        }
    }

    /// A Job was added or changed.
    async fn on_job(self: &Arc<Self>, job: K8sJob) {
        let Some(id) = label(&job.metadata, JOB_ID_LABEL).map(str::to_owned) else {
            return;
        };
        let status = status::workload_status(&job);
        let decided = status::is_decided(&status);
        {
            let Some(mut t) = self.tracked.get_mut(&id) else {
                return; // not ours, or already finished
            };
            if t.decoding.is_some() {
                return; // a workload template's job: its object is another kind's
            }
            if let Some(rv) = resource_version(&job.metadata) {
                if rv <= t.last_rv {
                    return; // stale: never move backward
                }
                t.last_rv = rv;
            }
            if t.finishing {
                if decided {
                    t.settled = Some(status);
                    drop(t);
                    self.jobs_version.send_modify(|v| *v += 1);
                }
                return;
            }
            if decided {
                t.finishing = true;
                t.settled = Some(status.clone());
            } else if t.last_sent.as_ref() == Some(&status) {
                return;
            } else {
                t.last_sent = Some(status.clone());
            }
        }
        if decided {
            self.spawn_finish(id);
        } else {
            self.send(id, status).await;
        }
    }

    /// A Job was deleted. Ours are deleted by their TTL after jobgate saw them finish (and
    /// untracked them), or by a cancel (untracked first); any other deletion of an
    /// unfinished job is reported.
    fn on_job_deleted(self: &Arc<Self>, job: K8sJob) {
        let Some(id) = label(&job.metadata, JOB_ID_LABEL).map(str::to_owned) else {
            return;
        };
        let status = status::workload_status(&job);
        {
            let Some(mut t) = self.tracked.get_mut(&id) else {
                return;
            };
            if t.finishing || t.decoding.is_some() {
                return;
            }
            t.finishing = true;
            if status::is_decided(&status) {
                t.settled = Some(status.clone());
            }
        }
        if status::is_decided(&status) {
            self.spawn_finish(id);
        } else {
            self.spawn_vanished(id);
        }
    }

    /// After a full list of `namespace` (all namespaces when `None`): every job known to
    /// exist before the list began and missing from it vanished while nobody watched.
    fn reconcile(self: &Arc<Self>, namespace: Option<&str>, list_epoch: u64, seen: &HashSet<String>) {
        let vanished = self.vanished_from_list(namespace, list_epoch, seen, |t| t.decoding.is_none());
        for id in vanished {
            tracing::warn!(job = %id, "its Kubernetes Job is gone though it never finished");
            self.spawn_vanished(id);
        }
    }

    /// The tracked jobs `of_list` selects that were known to exist before the list
    /// `list_epoch` of `namespace` began and are missing from it (`seen`): they vanished while
    /// nobody watched. Each is marked finishing, so that it is reported once.
    fn vanished_from_list(
        &self,
        namespace: Option<&str>,
        list_epoch: u64,
        seen: &HashSet<String>,
        of_list: impl Fn(&Tracked) -> bool,
    ) -> Vec<String> {
        self.tracked
            .iter_mut()
            .filter_map(|mut t| {
                let eligible = of_list(&t)
                    && namespace.is_none_or(|ns| t.namespace == ns)
                    && !t.finishing
                    && t.confirmed_epoch.is_some_and(|e| e < list_epoch)
                    && !seen.contains(t.key());
                eligible.then(|| {
                    t.finishing = true;
                    t.key().clone()
                })
            })
            .collect()
    }

    fn spawn_vanished(self: &Arc<Self>, id: String) {
        let inner = self.clone();
        self.tasks.spawn(async move {
            let Some(completions) = inner.tracked.get(&id).map(|t| t.completions) else {
                return;
            };
            // Pods deleted with the Job may still be on their way through the pod watch.
            inner.wait_for_pods(&id, None).await;
            let pods: Vec<PodInfo> = inner.pods.get(&id).map(|p| p.infos()).unwrap_or_default();
            let status = status::vanished(completions, &pods, Utc::now());
            inner.send(id.clone(), status).await;
            inner.untrack(&id);
        });
    }

    /// Captures a decided job's result, failure cause and log tail, then reports it.
    fn spawn_finish(self: &Arc<Self>, id: String) {
        let inner = self.clone();
        self.tasks.spawn(async move {
            let Some(mut status) = inner.wait_for_final_status(&id).await else {
                return; // shutting down: the next start re-lists and finishes it
            };
            let counted = status.succeeded + status.failed;
            if !inner.wait_for_pods(&id, Some(counted)).await {
                return;
            }
            let Some(namespace) = inner.tracked.get(&id).map(|t| t.namespace.clone()) else {
                return;
            };
            let pods: Vec<PodInfo> = inner.pods.get(&id).map(|p| p.infos()).unwrap_or_default();
            if status::is_success(&status) {
                status.result = status::result_of(&pods);
            } else {
                status.message = status::failure_of(&pods);
            }
            let lines = inner.capture_logs(&id, &namespace, &pods).await;
            status.executor_state = serde_json::json!({ "logTail": lines });
            inner.send(id.clone(), status).await;
            inner.untrack(&id);
        });
    }

    /// The job's decided status once the controller has written its final condition
    /// (counts settle then), or the newest one when the finish grace passes first (the Job
    /// was deleted, or the controller predates the interim conditions). `None` when shutting
    /// down.
    async fn wait_for_final_status(&self, id: &str) -> Option<WorkloadStatus> {
        let deadline = tokio::time::Instant::now() + self.config.finish_grace;
        let mut changes = self.jobs_version.subscribe();
        loop {
            let settled = self.tracked.get(id)?.settled.clone()?;
            let is_final = settled
                .conditions
                .iter()
                .any(|c| c.is_true() && (c.type_ == "Complete" || c.type_ == "Failed"));
            if is_final {
                return Some(settled);
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Some(settled),
                _ = self.shutdown.cancelled() => return None,
            }
        }
    }

    /// Waits until the pod watch shows every pod of the job terminal (and at least
    /// `counted` of them), or the finish grace passes. False when shutting down.
    async fn wait_for_pods(&self, id: &str, counted: Option<i32>) -> bool {
        let deadline = tokio::time::Instant::now() + self.config.finish_grace;
        let mut changes = self.pods_version.subscribe();
        loop {
            let settled = self.pods.get(id).is_some_and(|job| {
                let terminal = job.pods.values().filter(|p| p.phase.is_terminal()).count() as i32;
                terminal == job.pods.len() as i32
                    && counted.is_none_or(|c| terminal >= c)
                    && job.capturing == 0
            });
            if settled || counted == Some(0) {
                return true;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return true,
                _ = self.shutdown.cancelled() => return false,
            }
        }
    }

    fn untrack(&self, id: &str) {
        self.tracked.remove(id);
        self.pods.remove(id);
    }

    /// The last lines of the job's most recent runs, kept in jobgate once it has finished:
    /// those captured as each pod ended, else read now.
    async fn capture_logs(&self, id: &str, namespace: &str, pods: &[PodInfo]) -> Vec<String> {
        let limit = self.config.captured_log_lines;
        let mut started: Vec<&PodInfo> = pods.iter().filter(|p| p.started).collect();
        started.sort_by_key(|p| (p.index, p.finished_at, p.created_at));
        let recent = &started[started.len().saturating_sub(CAPTURED_PODS)..];
        let mut lines = Vec::new();
        for pod in recent {
            let captured = self.pods.get(id).and_then(|p| p.logs.get(&pod.name).cloned());
            match captured {
                Some(mut more) => lines.append(&mut more),
                None => match self
                    .pod_log(namespace, &pod.name, pod.container.clone(), limit)
                    .await
                {
                    Ok(mut more) => lines.append(&mut more),
                    Err(e) => tracing::debug!(pod = %pod.name, error = %e, "no log to capture"),
                },
            }
        }
        let cut = lines.len().saturating_sub(limit);
        lines.split_off(cut)
    }

    async fn pod_log(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<String>,
        tail: usize,
    ) -> Result<Vec<String>, kube::Error> {
        let params = LogParams {
            container: container.or_else(|| Some(CONTAINER_NAME.into())),
            tail_lines: Some(tail as i64),
            ..LogParams::default()
        };
        let text = self.pods_api(namespace).logs(pod, &params).await?;
        Ok(text.lines().map(str::to_owned).collect())
    }

    /// Records a Kubernetes Event on `job`, so that `kubectl describe` tells what jobgate did
    /// to it. Best effort: an Event that cannot be written is only logged.
    async fn record_event(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<String>,
        reason: &str,
        message: &str,
    ) {
        self.record_event_about(namespace, name, ("batch/v1", "Job"), uid, reason, message)
            .await;
    }

    /// [`Inner::record_event`] on an object of a workload kind.
    async fn record_event_on(
        &self,
        namespace: &str,
        name: &str,
        resource: &kube::api::ApiResource,
        uid: Option<String>,
        reason: &str,
        message: &str,
    ) {
        let kind = (resource.api_version.as_str(), resource.kind.as_str());
        self.record_event_about(namespace, name, kind, uid, reason, message)
            .await;
    }

    async fn record_event_about(
        &self,
        namespace: &str,
        name: &str,
        (api_version, kind): (&str, &str),
        uid: Option<String>,
        reason: &str,
        message: &str,
    ) {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                uid,
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some("jobgate".into()),
                ..EventSource::default()
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        if let Err(e) = events.create(&PostParams::default(), &event).await {
            tracing::warn!(error = %e, "could not record a Kubernetes Event");
        }
    }

    fn on_pod_deleted(self: &Arc<Self>, pod: &Pod) {
        self.on_pod(pod);
        let (Some(id), Some(name)) = (label(&pod.metadata, JOB_ID_LABEL), pod.metadata.name.as_deref())
        else {
            return;
        };
        let removed = self.pods.get_mut(id).is_some_and(|mut job| {
            let unfinished = job.pods.get(name).is_some_and(|p| !p.phase.is_terminal());
            if unfinished {
                job.pods.remove(name);
            }
            unfinished
        });
        if removed {
            self.pods_version.send_modify(|v| *v += 1);
        }
    }

    /// A pod was added or changed. A pod that has just ended gets its log tail captured at
    /// once, before a TTL or a clean-up can delete it.
    fn on_pod(self: &Arc<Self>, pod: &Pod) {
        let Some(id) = label(&pod.metadata, JOB_ID_LABEL) else {
            return;
        };
        if !self.tracked.contains_key(id) {
            return;
        }
        let Some(info) = status::pod_info(pod) else {
            return;
        };
        let mut job = self.pods.entry(id.to_owned()).or_default();
        let previous = job.pods.get(&info.name);
        if previous == Some(&info) {
            return;
        }
        let ended = info.phase.is_terminal()
            && info.started
            && !previous.is_some_and(|p| p.phase.is_terminal())
            && pod.metadata.namespace.is_some();
        let name = info.name.clone();
        let container = info.container.clone();
        job.pods.insert(info.name.clone(), info);
        if ended {
            job.capturing += 1;
        }
        drop(job);
        self.pods_version.send_modify(|v| *v += 1);
        if let (true, Some(namespace)) = (ended, pod.metadata.namespace.clone()) {
            let inner = self.clone();
            let id = id.to_owned();
            self.tasks.spawn(async move {
                let lines = inner
                    .pod_log(&namespace, &name, container, inner.config.captured_log_lines)
                    .await;
                if let Some(mut job) = inner.pods.get_mut(&id) {
                    job.capturing -= 1;
                    match lines {
                        Ok(lines) => {
                            job.logs.insert(name, lines);
                            job.keep_recent_logs();
                        }
                        Err(e) => tracing::debug!(pod = %name, error = %e, "no log to capture"),
                    }
                }
                inner.pods_version.send_modify(|v| *v += 1);
            });
        }
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
                            if !health.listed.swap(true, Ordering::Relaxed) {
                                tracing::info!(watcher = %health.name, "first list done");
                            }
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
                            if !health.listed.swap(true, Ordering::Relaxed) {
                                tracing::info!(watcher = %health.name, "first list done");
                            }
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

    /// The job's pods whose container has started, in index then creation order.
    fn started_pods(&self, id: &str) -> Vec<PodInfo> {
        let mut pods: Vec<PodInfo> = self
            .pods
            .get(id)
            .map(|p| p.pods.values().filter(|p| p.started).cloned().collect())
            .unwrap_or_default();
        pods.sort_by_key(|p| (p.index, p.created_at));
        pods
    }

    /// Streams every line of the job's pods as they come, pod after pod as the controller
    /// creates them, until `until` resolves and every pod stream has ended.
    async fn follow_logs(
        self: Arc<Self>,
        job: Arc<Job>,
        tail_lines: usize,
        until: BoxFuture<'static, ()>,
        lines: mpsc::Sender<Result<LogLine, ExecutorError>>,
    ) {
        let namespace = job.spec.namespace.clone();
        let mut streamed = HashSet::new();
        let mut streams = tokio::task::JoinSet::new();
        let mut changes = self.pods_version.subscribe();
        let mut until = std::pin::pin!(until.fuse());
        let mut finished = false;
        loop {
            for pod in self.started_pods(&job.id) {
                if streamed.insert(pod.name.clone()) {
                    streams.spawn(stream_pod_log(
                        self.pods_api(&namespace),
                        pod.name,
                        pod.container,
                        tail_lines,
                        lines.clone(),
                    ));
                }
            }
            if finished && streams.is_empty() {
                return;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = &mut until, if !finished => finished = true,
                Some(_) = streams.join_next() => {}
                _ = lines.closed() => return,
                _ = self.shutdown.cancelled() => return,
            }
        }
    }
}

/// Streams one pod's log until the pod ends (the API server closes a followed log then).
async fn stream_pod_log(
    api: Api<Pod>,
    pod: String,
    container: Option<String>,
    tail_lines: usize,
    lines: mpsc::Sender<Result<LogLine, ExecutorError>>,
) {
    let params = LogParams {
        container: container.or_else(|| Some(CONTAINER_NAME.into())),
        follow: true,
        tail_lines: Some(tail_lines as i64),
        ..LogParams::default()
    };
    let reader = match api.log_stream(&pod, &params).await {
        Ok(reader) => reader,
        Err(e) => {
            tracing::debug!(%pod, error = %e, "cannot follow the pod's log");
            return;
        }
    };
    let mut reader = std::pin::pin!(reader.lines());
    while let Some(line) = reader.next().await {
        let item = line
            .map(|text| LogLine {
                source: Some(pod.clone()),
                text,
            })
            .map_err(|e| ExecutorError::Cluster(format!("reading the log of pod {pod}: {e}")));
        let failed = item.is_err();
        if lines.send(item).await.is_err() || failed {
            return;
        }
    }
}

/// The log tail kept when the job finished.
fn captured_lines(workload: &WorkloadStatus, tail_lines: usize) -> Vec<String> {
    let lines: Vec<String> = workload
        .executor_state
        .get("logTail")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let cut = lines.len().saturating_sub(tail_lines);
    lines[cut..].to_vec()
}

#[async_trait]
impl Executor for KubeExecutor {
    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    async fn launch(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        let inner = &self.inner;
        if inner.shutdown.is_cancelled() {
            return Err(ExecutorError::ShuttingDown);
        }
        if let Some((template, kind)) = inner.kind_of(&job.spec.template) {
            return self.launch_workload(&job, &template, &kind).await;
        }
        let name = workload_name(&job.id);
        let namespace = &job.spec.namespace;
        self.track(&job, None);
        let api = inner.jobs_api(namespace);
        let manifest = manifest::build(&job, &inner.config.manifest);
        let created = match api.create(&PostParams::default(), &manifest).await {
            Ok(created) => Ok(created),
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                // A create retried after a crash or a lost answer: the Job is ours if it
                // carries our id; anything else under that name is a conflict.
                match api.get(&name).await {
                    Ok(existing) if label(&existing.metadata, JOB_ID_LABEL) == Some(job.id.as_str()) => {
                        tracing::info!(job = %job.id, %name, "Job already exists; adopting it");
                        Ok(existing)
                    }
                    Ok(_) => Err(ExecutorError::Rejected {
                        reason: "WorkloadConflict",
                        message: format!(
                            "a Job named {name} already exists in namespace {namespace} and does not belong to this job"
                        ),
                    }),
                    Err(e) => Err(launch_error("reading the existing Job", e)),
                }
            }
            Err(e) => Err(launch_error("creating the Job", e)),
        };
        match created {
            Ok(created) => {
                let epoch = inner.list_epoch.load(Ordering::SeqCst);
                if let Some(mut t) = inner.tracked.get_mut(&job.id) {
                    t.confirmed_epoch = Some(epoch);
                }
                if inner.cancelled_while_creating.remove(&job.id).is_some() {
                    // Cancelled while being created: the cancel found nothing to delete yet.
                    return self.cancel(&job).await;
                }
                // The watch reports it too; this only saves waiting for it.
                inner.on_job(created).await;
                Ok(())
            }
            Err(e) => {
                inner
                    .tracked
                    .remove_if(&job.id, |_, t| t.confirmed_epoch.is_none());
                inner.cancelled_while_creating.remove(&job.id);
                Err(e)
            }
        }
    }

    async fn adopt(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        // Known to exist before any list: the first list shows it, or it vanished.
        self.track(&job, Some(0));
        Ok(())
    }

    async fn start(&self) {
        let inner = &self.inner;
        if inner.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let scopes: Vec<Option<String>> = if inner.config.watch_namespaces.is_empty() {
            vec![None]
        } else {
            inner.config.watch_namespaces.iter().cloned().map(Some).collect()
        };
        inner.start_workload_kinds().await;
        let mut watchers = inner.watchers.lock().expect("poisoned");
        for scope in scopes {
            let where_ = scope.as_deref().unwrap_or("all namespaces").to_owned();
            let (jobs, pods): (Api<K8sJob>, Api<Pod>) = match &scope {
                Some(ns) => (inner.jobs_api(ns), inner.pods_api(ns)),
                None => (Api::all(inner.client.clone()), Api::all(inner.client.clone())),
            };
            let jobs_health = WatcherHealth::new(format!("jobs in {where_}"), &inner.config.metrics);
            let pods_health = WatcherHealth::new(format!("pods in {where_}"), &inner.config.metrics);
            watchers.push(jobs_health.clone());
            watchers.push(pods_health.clone());
            inner
                .tasks
                .spawn(inner.clone().watch_jobs(jobs, scope.clone(), jobs_health));
            inner.tasks.spawn(inner.clone().watch_pods(pods, pods_health));
        }
    }

    async fn cancel(&self, job: &Job) -> Result<(), ExecutorError> {
        let inner = &self.inner;
        let job_id = &job.id;
        // Untracked first, so the deletion is not reported as a vanished workload.
        if let Some((_, t)) = inner.tracked.remove(job_id)
            && t.confirmed_epoch.is_none()
        {
            // Its create is in flight: the launch deletes the Job once it exists.
            inner.cancelled_while_creating.insert(job_id.to_owned(), ());
        }
        inner.pods.remove(job_id);
        // The job, not the tracking, says where its workload is: after a restart a cancelled
        // job is tracked by no one, and its workload must still be stopped (a workload never
        // created answers 404, which is stopped too).
        let namespace = &job.spec.namespace;
        if let Some((template, kind)) = inner.kind_of(&job.spec.template) {
            let ttl_seconds = job
                .spec
                .ttl_seconds_after_finished
                .or(inner.config.manifest.ttl_seconds_after_finished);
            return inner
                .cancel_workload(job_id, namespace, &template, &kind, ttl_seconds)
                .await;
        }
        let api = inner.jobs_api(namespace);
        let name = workload_name(job_id);
        // Retried until it lands: a cancelled job must not keep running in the cluster.
        let mut delays = backon::BackoffBuilder::build(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(30))
                .with_jitter()
                .without_max_times(),
        );
        loop {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(deleted) => {
                    // The API answers with the object, or a Status once it is gone already.
                    let uid = deleted.left().and_then(|job| job.metadata.uid);
                    let message = format!("jobgate job {job_id} was cancelled; its Job is deleted");
                    inner
                        .record_event(namespace, &name, uid, "Cancelled", &message)
                        .await;
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => {
                    tracing::warn!(job = %job_id, error = %e, "deleting the cancelled job's Job failed; retrying");
                    let delay = delays.next().unwrap_or(Duration::from_secs(30));
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = inner.shutdown.cancelled() => return Err(ExecutorError::ShuttingDown),
                    }
                }
            }
        }
    }

    fn template_available(&self, template: &str) -> Result<(), String> {
        if template == crate::templates::CONTAINER {
            return Ok(());
        }
        match self.inner.kind_of(template) {
            Some((_, kind)) => kind.availability(),
            None => Err(format!("no template named {template}")),
        }
    }

    fn has_finished(&self, job_id: &str) -> bool {
        self.inner.tracked.get(job_id).is_some_and(|t| t.finishing)
    }

    fn runs(&self, job_id: &str) -> Vec<RunInfo> {
        let mut pods = self.inner.pods.get(job_id).map(|p| p.infos()).unwrap_or_default();
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

    async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ExecutorError> {
        if job.phase.is_terminal() {
            return Ok(captured_lines(&job.workload, tail_lines));
        }
        let mut lines = Vec::new();
        for pod in self.inner.started_pods(&job.id) {
            match self
                .inner
                .pod_log(&job.spec.namespace, &pod.name, pod.container.clone(), tail_lines)
                .await
            {
                Ok(mut more) => lines.append(&mut more),
                // Gone or not yet readable: nothing to show from it.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 400 => {}
                Err(e) => {
                    return Err(ExecutorError::Cluster(format!(
                        "reading the log of pod {}: {e}",
                        pod.name
                    )));
                }
            }
        }
        let cut = lines.len().saturating_sub(tail_lines);
        Ok(lines.split_off(cut))
    }

    fn log_stream(
        &self,
        job: Arc<Job>,
        tail_lines: usize,
        follow_until: Option<BoxFuture<'static, ()>>,
    ) -> BoxStream<'static, Result<LogLine, ExecutorError>> {
        match follow_until {
            Some(until) if !job.phase.is_terminal() => {
                let (tx, rx) = mpsc::channel(256);
                self.inner
                    .tasks
                    .spawn(self.inner.clone().follow_logs(job, tail_lines, until, tx));
                tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
            }
            _ => {
                let this = self.clone();
                super::lines_once(async move { this.logs(&job, tail_lines).await })
            }
        }
    }

    fn is_ready(&self) -> bool {
        let inner = &self.inner;
        let watchers = inner.watchers.lock().expect("poisoned");
        !inner.shutdown.is_cancelled()
            && inner.started.load(Ordering::SeqCst)
            && watchers
                .iter()
                .all(|w| w.listed.load(Ordering::Relaxed) && w.healthy.load(Ordering::Relaxed))
    }

    async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}
