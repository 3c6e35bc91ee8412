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
//!
//! # Layout
//!
//! This file holds the executor's shared state ([`KubeExecutor`] and its `KubeShared`: one
//! named part per concern, each a type of the file of its concern, and the context every part
//! uses), its construction, and its [`Executor`] implementation, whose methods hand over to
//! the file of their concept:
//!
//! - `launch_cancel.rs`: launching and cancelling every job; creating its batch Job (adopting
//!   the one a retried create finds), deleting it on cancel, and the Kubernetes Events that
//!   say so;
//! - `watch.rs`: the one watch loop every watcher runs over a stream of watcher events, the
//!   Job and pod watchers of each scope (the pod watcher's glue carrying out what `pods.rs`
//!   decides), and their health for `/readyz` (the `watches` part);
//! - `tracking.rs`: the pure state machine deciding what a watched Job or workload object
//!   means for its tracked job (what it keeps per job, stale events, changes, decisions,
//!   deletions, what a re-list shows vanished), as actions for the executor to carry out;
//!   and the `jobs` part holding the tracked jobs;
//! - `reconcile.rs`: carrying out those actions for batch Jobs: a change reported, a decided
//!   job finished (result, log tail), a vanished one reported with what its pods prove;
//! - `pods.rs`: the pure state machine of what the pod watcher saw of each job's pods (runs,
//!   log tails to capture as pods end) and the `pods` part keeping it, waited on as pods end;
//! - `pod_logs.rs`: reading pods' logs: tails, following, and the tail kept when a job
//!   finishes;
//! - `archive.rs`: following every running pod's log into the archive (the [`LogSink`]),
//!   resuming cut streams, and letting the pods go once their logs are archived (the
//!   `archive` part);
//! - `kinds.rs`: the workload kinds templates create (the `kinds` part), and what a job of
//!   one keeps to decode its object;
//! - `workloads.rs`: jobs of workload templates, all of the above for other kinds: discovery,
//!   watchers, decoding, cancelling;
//! - `workload_retention.rs`: the deletion timers of finished workloads (the `retention`
//!   part);
//! - `manifest.rs`: the batch Job a job becomes, and the names and labels jobgate stamps;
//! - `membership.rs`: with replicas sharing a database, this replica's Lease, the others',
//!   and the shards of the job space it acts for;
//! - `fence.rs`: what those shards allow now: every action on a job asks it first
//!   (`KubeShared::acts_for`), and a layer of the client refuses writes made for a job of
//!   another replica's shard, or begun before the shard last changed hands, retries included;
//! - `shard_ownership.rs`: the `ownership` part: the membership, the fence and the
//!   membership's task, or nothing without replicas;
//! - `kueue.rs`: with Kueue, the one watcher of its Workloads, linked to jobs by their
//!   owner, and the pure state machine of what a Workload's conditions say of a queued job;
//! - `kueue_positions.rs`: with Kueue, the one refresher of waiting jobs' places in line
//!   (Kueue's visibility API, once per LocalQueue in use per interval), read by every
//!   `queue_place` (the `positions` part);
//! - `priority_classes.rs`: the WorkloadPriorityClass and PriorityClass a job's priority maps
//!   to, as configured;
//! - `status.rs`: reading a Job's status and a pod's run;
//! - `requests.rs`: counting API requests for `/metrics`.
//!
//! Every watcher and spawned task holds an `Arc` of the `KubeShared`, is tracked by its
//! context's `tasks`, and ends at its `shutdown`.

mod archive;
mod fence;
mod kinds;
mod kueue;
mod kueue_positions;
mod launch_cancel;
pub mod manifest;
pub mod membership;
mod pod_attempts;
mod pod_logs;
mod pods;
pub mod priority_classes;
mod reconcile;
mod requests;
mod shard_ownership;
pub mod status;
mod tracking;
mod watch;
mod workload_retention;
mod workloads;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::archive::PodLogArchiver;
use self::fence::Fence;
use self::kinds::WorkloadKinds;
use self::manifest::ManifestDefaults;
use self::membership::{Membership, MembershipConfig};
use self::pods::PodBook;
use self::shard_ownership::ShardOwnership;
use self::tracking::JobTracking;
use self::watch::Watches;
use self::workload_retention::RetentionTimers;
use super::{Executor, ExecutorError, LogLine, LogSink, Observation, ObservationSender, RunInfo};
use crate::model::{Job, ShardSet, WorkloadStatus};
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
    /// Set when replicas share the store: they divide the jobs' shards through Leases.
    pub membership: Option<MembershipConfig>,
    /// Jobs may be queued in Kueue: Kueue's Workloads are watched (see `kueue.rs`).
    pub kueue: bool,
    /// How often waiting jobs' places in Kueue's queues are read (see `kueue_positions.rs`).
    pub kueue_positions_interval: Duration,
    /// Most pod logs followed at once to archive them (others wait for a slot).
    pub log_follow_concurrency: usize,
}

impl KubeConfig {
    /// The defaults, counting into `metrics`: the process's one registry, so that there is no
    /// way to start an executor whose metrics nobody scrapes.
    pub fn new(metrics: Arc<crate::metrics::Metrics>) -> Self {
        Self {
            kubeconfig: None,
            context: None,
            watch_namespaces: Vec::new(),
            manifest: ManifestDefaults::default(),
            finish_grace: Duration::from_secs(5),
            captured_log_lines: 200,
            templates: Arc::new(TemplateSet::default()),
            metrics,
            membership: None,
            kueue: false,
            kueue_positions_interval: Duration::from_secs(5),
            log_follow_concurrency: 256,
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

/// The Kubernetes executor; cloning it is cheap (one shared state).
#[derive(Clone)]
pub struct KubeExecutor {
    shared: Arc<KubeShared>,
}

/// The executor's state, shared by its API, its watchers and the tasks they spawn: one part
/// per concern, each owned (and changed) by its module.
struct KubeShared {
    /// The client, the settings, where observations go, shutdown and the spawned tasks.
    ctx: ExecutorContext,
    /// The jobs tracked and what their watches decided (`tracking.rs`).
    jobs: JobTracking,
    /// What the pod watcher saw of each job's pods (`pods.rs`).
    pods: PodBook,
    /// The pods whose logs this process archives (`archive.rs`).
    archive: PodLogArchiver,
    /// The watchers and their health (`watch.rs`).
    watches: Watches,
    /// With replicas, the shards this replica acts for (`shard_ownership.rs`).
    ownership: ShardOwnership,
    /// The workload kinds templates create (`kinds.rs`).
    kinds: WorkloadKinds,
    /// Finished workloads' deletion timers (`workload_retention.rs`).
    retention: RetentionTimers,
    /// Waiting jobs' places in Kueue's queues (`kueue_positions.rs`).
    positions: kueue_positions::QueuePositions,
}

/// What every part of the executor uses: the client, the settings, where observations go,
/// and the end of it all.
struct ExecutorContext {
    client: kube::Client,
    config: KubeConfig,
    /// Where every observation goes; the job service reads the other end.
    observations: ObservationSender,
    /// Cancelled at shutdown: every loop and retry ends.
    shutdown: CancellationToken,
    /// Every task the executor spawns, awaited at shutdown.
    tasks: TaskTracker,
}

impl ExecutorContext {
    fn jobs_api(&self, namespace: &str) -> Api<K8sJob> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn pods_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The scopes to watch: each configured namespace, else the whole cluster (`None`).
    fn watch_scopes(&self) -> Vec<Option<String>> {
        if self.config.watch_namespaces.is_empty() {
            vec![None]
        } else {
            self.config.watch_namespaces.iter().cloned().map(Some).collect()
        }
    }

    /// The `ttlSecondsAfterFinished` of `job`'s workload: its own, else the server's default.
    fn ttl_seconds(&self, job: &Job) -> Option<i32> {
        job.spec
            .ttl_seconds_after_finished
            .or(self.config.manifest.ttl_seconds_after_finished)
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
        let fence = config
            .membership
            .as_ref()
            .map(|_| Fence::new(config.metrics.clone()));
        // kube-rs's retries of 429/503/504, rebuilt around the fence so that every attempt
        // is fenced: a paused replica must not resume a create its successor made moot.
        let mut client_config = client_config;
        client_config.default_retry = false;
        let client = kube::client::ClientBuilder::try_from(client_config)?
            // The retry layer clones the service below it: a buffer makes the client's one
            // service shareable (its worker only hands each call's future back).
            .with_layer(&tower::buffer::BufferLayer::new(1024))
            .with_layer(&fence::FenceLayer(fence.clone()))
            .with_layer(&tower::retry::RetryLayer::new(
                kube::client::retry::RetryPolicy::server_retry(),
            ))
            .with_layer(&requests::CountRequestsLayer(config.metrics.clone()))
            .build();
        let membership = config
            .membership
            .as_ref()
            .zip(fence.clone())
            .map(|(m, fence)| Membership::new(client.clone(), m, fence, config.metrics.clone()));
        Ok(Self {
            shared: Arc::new(KubeShared {
                jobs: JobTracking::default(),
                pods: PodBook::default(),
                archive: PodLogArchiver::new(config.log_follow_concurrency),
                watches: Watches::default(),
                ownership: ShardOwnership::new(membership, fence),
                kinds: WorkloadKinds::new(config.templates.clone()),
                retention: RetentionTimers::default(),
                positions: kueue_positions::QueuePositions::default(),
                ctx: ExecutorContext {
                    client,
                    observations,
                    shutdown: CancellationToken::new(),
                    tasks: TaskTracker::new(),
                    config,
                },
            }),
        })
    }

    /// From now on, pods' logs are archived through `sink` (set once, before
    /// [`Executor::start`]; a second call changes nothing).
    pub fn archive_to(&self, sink: Arc<dyn LogSink>) {
        self.shared.archive.set_sink(sink);
    }
}

impl KubeShared {
    /// Starts tracking `job` (once: a job tracked already keeps its state).
    /// `confirmed_epoch` is the list epoch from which its workload is known to exist, `None`
    /// while it is being created.
    fn track(&self, job: &Job, confirmed_epoch: Option<u64>) {
        let decoding = self
            .kinds
            .kind_of(&job.spec.template)
            .map(|(template, kind)| kinds::Decoding {
                template,
                kind,
                mapped: job.workload.mapped.clone().unwrap_or_default(),
            });
        self.jobs
            .track(job, confirmed_epoch, decoding, self.ctx.ttl_seconds(job));
    }

    /// Whether this replica may act on the job now (always, without replicas): asked right
    /// before every action on a job, so that a replica whose shard moved on acts no more.
    fn acts_for(&self, job_id: &str) -> bool {
        self.ownership.acts_for(job_id)
    }

    /// Runs `action` on the job `job_id`, its writes to the cluster fenced (see `fence.rs`).
    async fn acting_for<F: std::future::Future>(&self, job_id: &str, action: F) -> F::Output {
        self.ownership.acting_for(job_id, action).await
    }

    /// Reports what was observed of a job's workload to the job service, with the attempts
    /// its pods make as the pod watch last showed them.
    async fn send(&self, job_id: String, mut status: WorkloadStatus) {
        if !self.acts_for(&job_id) {
            return;
        }
        let Ok(permit) = self.ctx.observations.reserve().await else {
            tracing::debug!("job service is gone; observation dropped");
            return;
        };
        let deadline = pod_attempts::deadline_passed(&status);
        let key = job_id.clone();
        self.pods.with_attempts(&key, deadline, |attempts| {
            status.attempts = attempts;
            permit.send(Observation::of_status(job_id, status));
        });
    }

    /// Reports a tracked job's attempts alone, as a change of its pods changed them: a run's
    /// start or end is not held until its Job's status next changes (the Job controller
    /// writes that later, or the Job watch showed it before the pod watch did). A job whose
    /// outcome is decided is left to its final report, made once its pods are over.
    async fn send_attempts(&self, job_id: &str) {
        let reported = self.jobs.tracked.get(job_id).is_some_and(|t| !t.finishing);
        if !reported || !self.acts_for(job_id) {
            return;
        }
        let Ok(permit) = self.ctx.observations.reserve().await else {
            tracing::debug!("job service is gone; observation dropped");
            return;
        };
        self.pods.with_attempts(job_id, None, |attempts| {
            permit.send(Observation::of_attempts(job_id.to_owned(), attempts));
        });
    }

    /// The job is done with: its final status is reported, or it is no longer ours.
    fn untrack(&self, id: &str) {
        self.jobs.tracked.remove(id);
        self.pods.forget_job(id);
    }
}

/// The value of one of an object's labels.
fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// An object's resourceVersion as a number, to tell a stale event from a newer one.
fn resource_version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// An API call's failure in words for people (`/readyz`, logs, a job's log): the API server's
/// own message and code for a refusal (kube-rs' display of one repeats the whole Status),
/// else the error as it displays.
fn api_error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

/// The back-off between attempts of an action retried until it lands (a cancel's delete or
/// patch, a kind's discovery): from 200 ms up to 30 s, with jitter, never giving up.
fn retry_delays() -> impl Iterator<Item = Duration> {
    backon::BackoffBuilder::build(
        backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(30))
            .with_jitter()
            .without_max_times(),
    )
}

#[async_trait]
impl Executor for KubeExecutor {
    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    async fn launch(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        let id = job.id.clone();
        self.shared.acting_for(&id, self.shared.launch(job)).await
    }

    async fn adopt(&self, job: Arc<Job>) -> Result<(), ExecutorError> {
        // Known to exist before any list: the first list shows it, or it vanished.
        self.shared.track(&job, Some(0));
        Ok(())
    }

    async fn start(&self) {
        self.shared.start_watchers().await;
        self.shared.start_queue_positions();
        self.shared.ownership.start();
    }

    fn shards(&self) -> Option<tokio::sync::watch::Receiver<ShardSet>> {
        self.shared.ownership.shards()
    }

    async fn follow_shards(&self, shards: ShardSet) {
        self.shared.follow_shards(shards);
    }

    async fn cancel(&self, job: &Job) -> Result<(), ExecutorError> {
        self.shared.acting_for(&job.id, self.shared.cancel(job)).await
    }

    fn queue_place(&self, job: &Job) -> Option<crate::model::QueuePlace> {
        self.shared.queue_place(&job.id)
    }

    fn template_available(&self, template: &str) -> Result<(), String> {
        if template == crate::templates::CONTAINER {
            return Ok(());
        }
        match self.shared.kinds.kind_of(template) {
            Some((_, kind)) => kind.availability(),
            None => Err(format!("no template named {template}")),
        }
    }

    fn output_pending(&self, job_id: &str) -> bool {
        self.shared.output_pending(job_id)
    }

    fn has_finished(&self, job_id: &str) -> bool {
        self.shared.jobs.is_finishing(job_id)
    }

    fn runs(&self, job_id: &str) -> Vec<RunInfo> {
        self.shared.pods.runs(job_id)
    }

    async fn logs(&self, job: &Job, tail_lines: usize) -> Result<Vec<String>, ExecutorError> {
        self.shared.tail_logs(job, tail_lines).await
    }

    fn log_stream(
        &self,
        job: Arc<Job>,
        tail_lines: usize,
        follow_until: Option<BoxFuture<'static, ()>>,
    ) -> BoxStream<'static, Result<LogLine, ExecutorError>> {
        self.shared.log_stream(job, tail_lines, follow_until)
    }

    fn is_ready(&self) -> bool {
        self.shared.unready_reason().is_none()
    }

    fn unready_reason(&self) -> Option<String> {
        self.shared.unready_reason()
    }

    async fn shutdown(&self) {
        self.shared.ctx.shutdown.cancel();
        self.shared.ctx.tasks.close();
        self.shared.ctx.tasks.wait().await;
        // Last: nothing acts any more, so the shards may move at once.
        self.shared.ownership.stop().await;
    }
}
