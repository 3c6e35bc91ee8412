//! An emulator of the Kubernetes API server (plus a simulated Job controller, kubelet, TTL
//! controller and garbage collector) for jobgate's tests. kube-rs and kubectl talk to it over real
//! HTTP exactly as to a cluster; tests start one with [`Emulator::start`] and steer it through the
//! handle: the store, the simulation, injected faults, and request counts.
//!
//! # Layout
//! - [`store`]: every object, the store-wide resourceVersion, the change history that watches
//!   replay, pod logs. The single source of truth; API and controllers both write through it.
//! - [`api`]: the HTTP API server (discovery, CRUD, patch, watch, logs, Status errors). Reads and
//!   writes the store; subscribes to its change channel for watches.
//! - [`controllers`]: the simulated cluster components; they follow the store's change channel and
//!   write back through the store.
//! - [`faults`]: injected failures, dropped watches, request counters; shared by `api` and
//!   [`Emulator`].
//!
//! Channels: the store's `broadcast` of committed changes feeds every watch stream and every
//! controller; a `watch` channel in `faults` ends all watch streams at once.

pub mod api;
pub mod controllers;
pub mod faults;
pub mod store;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use controllers::SimConfig;
pub use faults::RequestCounts;

use api::authn::UserInfo;
use api::rbac::Policy;
use api::{ApiConfig, ApiState};
use controllers::Simulation;
use store::{Store, StoreOptions};

/// The workload kinds whose CRDs and operators the emulator can simulate.
pub const WORKLOAD_CRD_KINDS: &[&str] = &[
    "TFJob",
    "PyTorchJob",
    "MPIJob",
    "TrainJob",
    "Workflow",
    "PipelineRun",
    "RayJob",
    "SparkApplication",
];

/// The CRD fixtures (tests/kube-emulator/crds), one file per project.
const WORKLOAD_CRDS: &[&str] = &[
    include_str!("../crds/kubeflow-training.yaml"),
    include_str!("../crds/kubeflow-trainer.yaml"),
    include_str!("../crds/argo-workflows.yaml"),
    include_str!("../crds/tekton-pipelines.yaml"),
    include_str!("../crds/kuberay.yaml"),
    include_str!("../crds/spark-operator.yaml"),
];

/// Kueue's CRDs (crds/kueue.yaml).
const KUEUE_CRDS: &str = include_str!("../crds/kueue.yaml");

/// How to start an [`Emulator`]. `Default` is test-friendly: an ephemeral port on 127.0.0.1,
/// bookmarks every 500 ms, 10,000 changes of history, fast controller timings.
/// [`Options::real_cluster`] has kube-apiserver's and the controllers' own values.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Interval of BOOKMARK events on idle watches that asked for them.
    pub bookmark_interval: Duration,
    /// Up to this much is added at random to each watch's bookmark interval.
    pub bookmark_jitter: Duration,
    /// Changes retained for watches; a watch from an older resourceVersion gets `410 Expired`.
    pub history: usize,
    /// How long a change is retained for watches at most (`None`: only `history` counts).
    pub history_age: Option<Duration>,
    /// `429` answers are plain text, as kube-apiserver's API Priority and Fairness filter
    /// writes them, instead of a `TooManyRequests` Status.
    pub flow_control_429: bool,
    /// Timings of the simulated controllers.
    pub simulation: SimConfig,
    /// RBAC objects (multi-document YAML: Roles, ClusterRoles and their bindings; other kinds
    /// are ignored) every request is authorized against; requests must then carry a known
    /// bearer token (401 otherwise). `None` allows every request.
    pub rbac: Option<String>,
    /// The user [`Emulator::kubeconfig_yaml`] authenticates as.
    pub user: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            bookmark_interval: Duration::from_millis(500),
            bookmark_jitter: Duration::ZERO,
            history: store::DEFAULT_HISTORY,
            history_age: None,
            flow_control_429: false,
            simulation: SimConfig::default(),
            rbac: None,
            user: api::authn::DEFAULT_USER.to_owned(),
        }
    }
}

/// The profiles `kube-emulator --profile` offers.
pub const PROFILES: &[&str] = &["fast", "real-cluster"];

impl Options {
    /// The pace of a real cluster (the values and their upstream sources are listed in the
    /// crate's README): bookmarks about every minute, 75 s of watch history (at most 102,400
    /// changes), plain-text 429s from flow control, and [`SimConfig::real_cluster`] timings.
    pub fn real_cluster() -> Options {
        Options {
            bookmark_interval: Duration::from_secs(60),
            bookmark_jitter: Duration::from_millis(1250),
            history: 100 * 1024,
            history_age: Some(Duration::from_secs(75)),
            flow_control_429: true,
            simulation: SimConfig::real_cluster(),
            ..Options::default()
        }
    }

    /// The options of a named profile (`fast` = [`Options::default`], `real-cluster` =
    /// [`Options::real_cluster`]); `None` for an unknown name.
    pub fn profile(name: &str) -> Option<Options> {
        match name {
            "fast" => Some(Options::default()),
            "real-cluster" => Some(Options::real_cluster()),
            _ => None,
        }
    }
}

/// The running accept loop.
struct Server {
    task: JoinHandle<()>,
    stop: oneshot::Sender<()>,
}

impl Server {
    fn spawn(listener: TcpListener, api: &Arc<ApiState>) -> Server {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(api::server::serve(listener, api::app(api.clone()), stopped));
        Server { task, stop }
    }
}

/// A running emulator: API server, store and simulated controllers.
pub struct Emulator {
    addr: SocketAddr,
    store: Store,
    api: Arc<ApiState>,
    simulation: Arc<Simulation>,
    /// Who [`Emulator::kubeconfig_yaml`] authenticates as.
    user: UserInfo,
    /// The accept loop and its stop signal while the server is up. A std mutex: only swapped,
    /// never held across an `.await`.
    server: Mutex<Option<Server>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Emulator {
    /// Starts an emulator with [`Options::default`].
    pub async fn start() -> anyhow::Result<Emulator> {
        Self::start_with(Options::default()).await
    }

    /// Starts an emulator with `options`; fails on RBAC YAML it cannot read.
    pub async fn start_with(options: Options) -> anyhow::Result<Emulator> {
        let rbac = match &options.rbac {
            Some(yaml) => Some(Arc::new(
                Policy::from_yaml(yaml).context("loading the RBAC policy")?,
            )),
            None => None,
        };
        let store = Store::with_options(StoreOptions {
            history: options.history,
            log_max_bytes: options.simulation.log_max_bytes,
            history_age: options.history_age,
            ..StoreOptions::default()
        });
        let listener = TcpListener::bind(options.listen)
            .await
            .with_context(|| format!("binding {}", options.listen))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let api = ApiState::new(
            store.clone(),
            Arc::new(faults::Faults::default()),
            ApiConfig {
                bookmark_interval: options.bookmark_interval,
                rbac,
                bookmark_jitter: options.bookmark_jitter,
                flow_control_429: options.flow_control_429,
            },
        );
        *api.advertise.lock().unwrap_or_else(|p| p.into_inner()) = addr.to_string();
        let simulation = controllers::start(store.clone(), options.simulation);
        let server = Server::spawn(listener, &api);
        tracing::info!(%addr, "kube emulator listening");
        Ok(Emulator {
            addr,
            store,
            api,
            simulation,
            user: UserInfo::named(&options.user, &[]),
            server: Mutex::new(Some(server)),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig (cluster `emulator`, plain HTTP) whose context uses `namespace`, with the
    /// bearer token of the configured user ([`Options::user`]).
    pub fn kubeconfig_yaml(&self, namespace: &str) -> String {
        kubeconfig_yaml(&self.url(), namespace, &self.api.tokens.token_for(&self.user))
    }

    /// A kubeconfig like [`Emulator::kubeconfig_yaml`] for a cluster administrator
    /// (`system:admin` in `system:masters`, allowed everything): a test's own look at the
    /// cluster, as kubectl with admin rights.
    pub fn admin_kubeconfig_yaml(&self, namespace: &str) -> String {
        let admin = UserInfo::named(api::authn::ADMIN_USER, &[api::authn::MASTERS]);
        kubeconfig_yaml(&self.url(), namespace, &self.api.tokens.token_for(&admin))
    }

    /// The user [`Emulator::kubeconfig_yaml`] authenticates as.
    pub fn user(&self) -> &str {
        &self.user.name
    }

    /// Writes [`Emulator::kubeconfig_yaml`] to `path` atomically (a temporary file renamed into
    /// place), so a process polling for the file never reads half of it.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) -> std::io::Result<()> {
        write_atomically(path, &self.kubeconfig_yaml(namespace))
    }

    /// Writes [`Emulator::admin_kubeconfig_yaml`] to `path` atomically.
    pub fn write_admin_kubeconfig(&self, path: &Path, namespace: &str) -> std::io::Result<()> {
        write_atomically(path, &self.admin_kubeconfig_yaml(namespace))
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn simulation(&self) -> &Simulation {
        &self.simulation
    }

    /// Creates or replaces the RBAC objects in `yaml` (Roles, ClusterRoles and their bindings,
    /// as [`Options::rbac`] takes them), as a cluster admin's `kubectl apply` would: each
    /// replaces the object of its kind, namespace and name, and the next request is decided by
    /// the new policy (to grant or take away a right while clients run). Fails, changing
    /// nothing, on YAML it cannot read or an emulator started without RBAC (which allows every
    /// request).
    pub fn apply_rbac(&self, yaml: &str) -> anyhow::Result<()> {
        let Some(policy) = &self.api.config.rbac else {
            anyhow::bail!("this emulator was started without RBAC: every request is allowed");
        };
        policy.apply_yaml(yaml).context("applying RBAC objects")
    }

    /// Registers the CustomResourceDefinitions in `yaml` (one or more documents) through the
    /// API's create path, so their kinds are served at once.
    pub fn register_crd_yaml(&self, yaml: &str) -> anyhow::Result<()> {
        for document in serde_yaml_ng::Deserializer::from_str(yaml) {
            let value = <Value as serde::Deserialize>::deserialize(document).context("parsing CRD YAML")?;
            if value.is_null() {
                continue;
            }
            api::resources::create_from_value(&self.api, value, None)
                .map_err(|e| anyhow::anyhow!("registering a CRD: {e}"))?;
        }
        Ok(())
    }

    /// Registers the CRDs of the workload `kinds` (e.g. `["Workflow", "PyTorchJob"]`, from
    /// [`WORKLOAD_CRD_KINDS`]), from the fixtures in `crds/`; their simulated operators act on
    /// the kinds' objects from then on.
    pub fn register_workload_crds(&self, kinds: &[&str]) -> anyhow::Result<()> {
        for kind in kinds {
            if !WORKLOAD_CRD_KINDS.contains(kind) {
                anyhow::bail!("no workload CRD for kind {kind:?}; known: {WORKLOAD_CRD_KINDS:?}");
            }
        }
        for yaml in WORKLOAD_CRDS {
            for document in serde_yaml_ng::Deserializer::from_str(yaml) {
                let value =
                    <Value as serde::Deserialize>::deserialize(document).context("parsing CRD YAML")?;
                let kind = value
                    .pointer("/spec/names/kind")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if kind.as_deref().is_some_and(|k| kinds.contains(&k)) {
                    api::resources::create_from_value(&self.api, value, None)
                        .map_err(|e| anyhow::anyhow!("registering the CRD of {kind:?}: {e}"))?;
                }
            }
        }
        Ok(())
    }

    /// Installs the simulated Kueue: registers Kueue's CRDs (Workload, LocalQueue,
    /// ClusterQueue, ResourceFlavor); from then on Jobs labelled `kueue.x-k8s.io/queue-name`
    /// get Workloads and wait for admission (see `controllers::kueue`).
    pub fn register_kueue(&self) -> anyhow::Result<()> {
        self.register_crd_yaml(KUEUE_CRDS)
    }

    /// Creates a ResourceFlavor `default-flavor`, a ClusterQueue `cluster_queue` whose quota
    /// admits `pods` pods at once, and a LocalQueue `local_queue` in `namespace` pointing at
    /// it, as a cluster admin would (after [`Emulator::register_kueue`]).
    pub fn create_kueue_queue(
        &self,
        namespace: &str,
        local_queue: &str,
        cluster_queue: &str,
        pods: u32,
    ) -> anyhow::Result<()> {
        let objects = [
            serde_json::json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                "metadata": {"name": "default-flavor"}, "spec": {}}),
            serde_json::json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue},
                "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                    "resourceGroups": [{"coveredResources": ["pods", "cpu"], "flavors": [{"name": "default-flavor",
                        "resources": [{"name": "pods", "nominalQuota": pods}, {"name": "cpu", "nominalQuota": 1000}]}]}]}}),
            serde_json::json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                "metadata": {"name": local_queue, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue}}),
        ];
        for object in objects {
            match api::resources::create_from_value(&self.api, object, None) {
                Ok(_) => {}
                Err(e) if e.to_string().contains("already exists") => {}
                Err(e) => anyhow::bail!("creating a Kueue object: {e}"),
            }
        }
        Ok(())
    }

    /// Evicts the Kueue workload of Job `job` now (preempted, or deactivated when
    /// `!preempted`): the Job is suspended, its quota released once its pods are gone, and
    /// it is requeued. Returns the workload's name, or `None` when the Job holds no quota.
    pub fn evict_workload(&self, namespace: &str, job: &str, preempted: bool) -> Option<String> {
        controllers::kueue::evict(&self.store, namespace, job, preempted)
    }

    /// Evicts pod `namespace/name` through the Eviction API, as `kubectl drain` does: the
    /// `DisruptionTarget` condition (`EvictionByEvictionAPI`, "Eviction API: evicting"), then a
    /// graceful delete; the kubelet stops its containers and the pod ends `Failed`.
    pub fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<controllers::disruption::Disrupted> {
        controllers::disruption::evict(&self.store, namespace, name)
            .map_err(|e| anyhow::anyhow!("evicting pod {namespace}/{name}: {e}"))
    }

    /// The scheduler preempts pod `namespace/name` (see [`Simulation::preempt_pod`]).
    pub fn preempt_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<controllers::disruption::Disrupted> {
        self.simulation
            .preempt_pod(&self.store, namespace, name)
            .map_err(|e| anyhow::anyhow!("preempting pod {namespace}/{name}: {e}"))
    }

    /// Registers every workload CRD the emulator simulates.
    pub fn register_all_workload_crds(&self) -> anyhow::Result<()> {
        self.register_workload_crds(WORKLOAD_CRD_KINDS)
    }

    /// Ends every open watch stream now; clients re-watch from their last resourceVersion.
    pub fn drop_watches(&self) {
        self.api.faults.drop_watches();
    }

    /// Ends every open pod log stream now (`follow=true` included): a clean end of body
    /// before the container stopped, as a cut connection looks to a client.
    pub fn drop_log_streams(&self) {
        self.api.faults.drop_log_streams();
    }

    /// The next `answers` pod log answers each end after `lines` lines (a clean end of body,
    /// as a connection cut mid-stream looks to a client), whether or not they follow.
    pub fn cut_log_answers(&self, answers: usize, lines: usize) {
        self.api.faults.cut_log_answers(answers, lines);
    }

    /// The next `n` API requests (discovery excluded) are answered with a `status` Status (500,
    /// 429 with `Retry-After: 1`, 503, …).
    pub fn fail_next(&self, n: usize, status: u16) {
        self.api.faults.fail_next(n, status);
    }

    /// Every `verb` request (`create`, `delete`, …) on `resource` (`jobs.batch`, `pods`, …) is
    /// answered `429 Too Many Requests` with `Retry-After: seconds` until [`Emulator::unthrottle`]:
    /// a client that honours it waits that long before trying again.
    pub fn throttle(&self, resource: &str, verb: &str, seconds: u64) {
        self.api.faults.throttle(resource, verb, seconds);
    }

    /// Lifts [`Emulator::throttle`].
    pub fn unthrottle(&self) {
        self.api.faults.unthrottle();
    }

    /// Makes the server unreachable: the listener is closed and live connections are cut before
    /// this returns.
    pub async fn go_down(&self) {
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(server) = server {
            let _ = server.stop.send(());
            if let Err(e) = server.task.await
                && e.is_panic()
            {
                tracing::error!(error = %e, "the accept loop panicked");
            }
        }
    }

    /// Serves again on the same address after [`Emulator::go_down`].
    pub async fn come_up(&self) -> anyhow::Result<()> {
        if self.server.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Ok(());
        }
        let listener = TcpListener::bind(self.addr)
            .await
            .with_context(|| format!("re-binding {}", self.addr))?;
        *self.server.lock().unwrap_or_else(|p| p.into_inner()) = Some(Server::spawn(listener, &self.api));
        Ok(())
    }

    /// A restart that forgot history: watches are dropped, every older resourceVersion and every
    /// outstanding `continue` token expires (clients relist).
    pub fn restart_compacted(&self) {
        self.store.compact();
        self.api.forget_snapshots();
        self.api.faults.drop_watches();
    }

    pub fn requests(&self) -> RequestCounts {
        self.api.faults.counts()
    }

    pub fn reset_requests(&self) {
        self.api.faults.reset_counts();
    }

    /// Stops the server and the simulated controllers and waits for them.
    pub async fn shutdown(self) {
        self.go_down().await;
        self.simulation.shutdown();
        self.simulation.stopped().await;
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(server) = self.server.lock().unwrap_or_else(|p| p.into_inner()).take() {
            server.task.abort();
        }
        self.simulation.shutdown();
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM: when the standalone emulator should stop.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminate = async {
        match term.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

/// Writes `text` to a temporary file renamed to `path`, so a process polling for the file
/// never reads half of it.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// A kubeconfig for an API server at `url` whose user presents bearer `token` (used by
/// [`Emulator::kubeconfig_yaml`]).
pub fn kubeconfig_yaml(url: &str, namespace: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {url}\n\
         contexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: emulator\n    namespace: {namespace}\n\
         current-context: emulator\nusers:\n- name: emulator\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}
