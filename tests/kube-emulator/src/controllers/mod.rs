//! The simulated cluster behind the emulated API server: a Job controller, a kubelet (with the
//! scheduler's binding step), the TTL-after-finished controller and the garbage collector.
//!
//! # What this module owns
//! Everything that happens to objects *after* a client wrote them: pods appearing for a Job, pods
//! going Pending → Running → Succeeded/Failed with the real status shapes, Job status and
//! conditions, finished Jobs expiring, dependents of removed owners going away, and the core/v1
//! Events those controllers emit. What a pod *does* (how long it runs, how it exits, what it logs)
//! is chosen by the test through the container's environment, see [`behaviour`].
//!
//! # What it must not do
//! It never touches HTTP and never bypasses the store's rules: every write goes through
//! [`Store`] (`create`, `modify`, `delete`), so it bumps resourceVersions and produces the same
//! watch events an API write would. It never sweeps all objects periodically: each controller
//! follows the store's change stream after one initial list, keys its work by object, and keeps
//! per-object timers for what is due later (a pod's exit, a Job's deadline, a TTL).
//!
//! # Layout
//! - `runner`: the shared event loop (change stream → keys → reconcile, per-key timers,
//!   relist after a lagged receiver, shutdown).
//! - `job`: the batch/v1 Job controller (pods, counting with the tracking finalizer, conditions).
//! - `kubelet`: binds pods to the emulated node and runs their containers as timelines.
//! - `behaviour`: the `EMULATOR_*` environment variables a test uses to script a container.
//! - `ttl`: deletes finished Jobs `ttlSecondsAfterFinished` after they finished.
//! - `operators`: the operators of the workload CRDs (Kubeflow, Argo, Tekton, KubeRay, Spark)
//!   whose CRDs a test registers (`Emulator::register_workload_crds`).
//! - `kueue`: a minimal Kueue (Workloads for queued Jobs, admission by a ClusterQueue's
//!   quota, eviction on demand), active once a test registers Kueue's CRDs; `kueue_order`:
//!   the order its ClusterQueues hold pending workloads in (priority, then queue time).
//! - `disruption`: the Eviction API and the scheduler's preemption (`DisruptionTarget`, then a
//!   graceful delete).
//! - `gc`: the garbage collector (dangling owners, `orphan` and `foregroundDeletion` finalizers).
//! - `events`: writes core/v1 Events the way the real components do.
//! - `objects`: small JSON accessors and the graceful-deletion rules shared by the controllers.
//!
//! Each controller runs as one tokio task; [`start`] spawns them and [`Simulation::shutdown`]
//! stops them. The tasks hold no reference to the [`Simulation`], so dropping it stops them too.

pub mod behaviour;
pub mod disruption;
mod events;
mod gc;
mod job;
mod kubelet;
pub mod kueue;
pub(crate) mod kueue_order;
mod objects;
pub mod operators;
mod runner;
#[cfg(test)]
mod simulation_tests;
mod ttl;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::store::Store;

/// Timings and identity of the simulated cluster. `Default` is fast and test-friendly; every
/// duration that the real cluster counts in seconds is counted here in milliseconds.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The node every pod is bound to (`spec.nodeName`).
    pub node_name: String,
    /// The node's address (`status.hostIP`).
    pub host_ip: String,
    /// How long a pod stays Pending (ContainerCreating) unless `EMULATOR_PENDING_MS` says otherwise.
    pub pending: Duration,
    /// How long a container runs unless `EMULATOR_RUN_MS` says otherwise.
    pub run: Duration,
    /// How long a container takes to exit after its pod is marked for deletion (SIGTERM → exit
    /// 143); bounded by the pod's grace period, at whose end it is killed (exit 137).
    pub termination: Duration,
    /// The Job controller's pod-failure back-off before it replaces a failed pod (real: 10 s),
    /// doubling with each consecutive failure.
    pub pod_failure_backoff: Duration,
    /// Cap of the pod-failure back-off (real: 10 min).
    pub pod_failure_backoff_max: Duration,
    /// The kubelet's back-off before restarting a failed container in place (`restartPolicy:
    /// OnFailure`; real: 10 s), doubling with each restart.
    pub crash_loop_backoff: Duration,
    /// Cap of the crash-loop back-off (real: 5 min).
    pub crash_loop_backoff_max: Duration,
    /// The Job controller's batching of syncs triggered by pod changes and by Job status
    /// updates (real: 1 s, `syncJobBatchPeriod`); a new Job or a spec change syncs at once.
    pub job_sync_batch: Duration,
    /// Whether the controllers write core/v1 Events (SuccessfulCreate, Completed, Scheduled, …).
    /// Benchmarks that create many Jobs may turn them off to keep the store's history for watches.
    pub events: bool,
    /// How long after a pod is deleted and all its containers have stopped the kubelet removes
    /// them, and their log with them, whatever finalizers keep the pod object (`--kubelet-gc-secs`).
    /// `None`: never; the log lives as long as the object.
    pub kubelet_gc: Option<Duration>,
    /// The kubelet's `containerLogMaxSize` (`--kubelet-log-max-bytes`): a pod's log file is
    /// rotated when a line would take it past this many bytes. `None`: never rotated. Applied
    /// by the store, where the lines are written ([`crate::store::StoreOptions::log_max_bytes`]).
    pub log_max_bytes: Option<usize>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            node_name: "emulator-node".to_owned(),
            host_ip: "10.0.0.2".to_owned(),
            pending: Duration::from_millis(20),
            run: Duration::from_millis(50),
            termination: Duration::from_millis(20),
            pod_failure_backoff: Duration::from_millis(100),
            pod_failure_backoff_max: Duration::from_secs(2),
            crash_loop_backoff: Duration::from_millis(50),
            crash_loop_backoff_max: Duration::from_secs(1),
            job_sync_batch: Duration::ZERO,
            events: true,
            kubelet_gc: None,
            log_max_bytes: None,
        }
    }
}

impl SimConfig {
    /// The real components' timings: the Job controller's 1 s sync batching and 10 s pod-failure
    /// back-off (capped at 10 min), the kubelet's 10 s crash-loop back-off (capped at 5 min), and
    /// a container that does not exit on SIGTERM (as a process running as PID 1 without a
    /// handler): a deleted running pod stops when its grace period (30 s by default) ends.
    pub fn real_cluster() -> SimConfig {
        SimConfig {
            termination: Duration::from_secs(30),
            pod_failure_backoff: Duration::from_secs(10),
            pod_failure_backoff_max: Duration::from_secs(600),
            crash_loop_backoff: Duration::from_secs(10),
            crash_loop_backoff_max: Duration::from_secs(300),
            job_sync_batch: Duration::from_secs(1),
            ..SimConfig::default()
        }
    }

    /// `base` doubled `n - 1` times, capped at `max` (`n == 0` → zero), the back-off formula of
    /// both the Job controller and the kubelet.
    pub(crate) fn backoff(base: Duration, max: Duration, n: u32) -> Duration {
        if n == 0 {
            return Duration::ZERO;
        }
        let mut d = base;
        for _ in 1..n {
            d = d.saturating_mul(2);
            if d >= max {
                return max;
            }
        }
        d.min(max)
    }
}

/// State the controllers share with the [`Simulation`] handle. Written by: the kubelet
/// (`gates` read), the Job controller (`pods_created`), [`Simulation::open_gate`] (`gates`).
pub(crate) struct Shared {
    pub config: SimConfig,
    /// Pods the Job controller created since start.
    pub pods_created: AtomicU64,
    /// Gates opened by the test; a gated container exits only once its gate is in here.
    pub gates: Mutex<HashSet<String>>,
    pub recorder: events::Recorder,
}

impl Shared {
    pub(crate) fn gate_open(&self, name: &str) -> bool {
        self.gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }
}

/// The running simulated controllers. Returned by [`start`]; dropping it stops them.
pub struct Simulation {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    /// While `true`, the Job controller syncs no Job (see [`Simulation::pause_job_controller`]).
    job_controller_paused: watch::Sender<bool>,
    gate_opened: mpsc::UnboundedSender<String>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("config", &self.shared.config)
            .field("pods_created", &self.pods_created())
            .finish_non_exhaustive()
    }
}

/// Starts the Job controller, kubelet, TTL controller and garbage collector on `store`. Must be
/// called from within a tokio runtime; the controllers run as tasks on it.
///
/// Each controller subscribes to the store's changes here, before this function returns, and
/// then lists what already exists, so no write made after `start` returns can be missed.
pub fn start(store: Store, config: SimConfig) -> Arc<Simulation> {
    let (stop, stop_rx) = watch::channel(false);
    let (gate_opened, gate_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        recorder: events::Recorder::new(config.events),
        config,
        pods_created: AtomicU64::new(0),
        gates: Mutex::new(HashSet::new()),
    });
    let (job_controller_paused, paused_rx) = watch::channel(false);
    let tasks = vec![
        runner::spawn_pausable(
            job::JobController::new(shared.clone()),
            &store,
            None,
            stop_rx.clone(),
            Some(paused_rx),
        ),
        runner::spawn(
            kubelet::Kubelet::new(shared.clone()),
            &store,
            Some(gate_rx),
            stop_rx.clone(),
        ),
        runner::spawn(ttl::TtlController, &store, None, stop_rx.clone()),
        runner::spawn(
            operators::Operators::new(shared.clone()),
            &store,
            None,
            stop_rx.clone(),
        ),
        runner::spawn(kueue::Kueue, &store, None, stop_rx.clone()),
        runner::spawn(gc::GarbageCollector::default(), &store, None, stop_rx),
    ];
    Arc::new(Simulation {
        shared,
        stop,
        job_controller_paused,
        gate_opened,
        tasks: Mutex::new(tasks),
    })
}

impl Simulation {
    /// Opens gate `name`: containers started with `EMULATOR_GATE=name` may now exit (once their
    /// run time is over). A gate stays open; pods that reach it later pass at once.
    pub fn open_gate(&self, name: &str) {
        let newly = self
            .shared
            .gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned());
        if newly {
            // The kubelet wakes the containers waiting on this gate. It only fails once the
            // simulation has stopped, when nobody waits any more.
            let _ = self.gate_opened.send(name.to_owned());
        }
    }

    /// Closes gate `name` again for containers that have not passed it yet.
    pub fn close_gate(&self, name: &str) {
        self.shared
            .gates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// The scheduler preempts pod `namespace/name` for a higher-priority pod: the
    /// `DisruptionTarget` condition (`PreemptionByScheduler`), a graceful delete, and the
    /// `Preempted` Event; the kubelet then stops its containers as for any deleted pod.
    pub fn preempt_pod(
        &self,
        store: &Store,
        namespace: &str,
        name: &str,
    ) -> Result<disruption::Disrupted, crate::store::StoreError> {
        disruption::preempt(
            store,
            &self.shared.recorder,
            &self.shared.config.node_name,
            namespace,
            name,
        )
    }

    /// The Job controller syncs no Job until [`Simulation::resume_job_controller`], as when
    /// kube-controller-manager is down or has lost its leader lease: Jobs' statuses stay as
    /// they are, no pod is created or deleted for them, while the kubelet goes on running
    /// (and ending) the pods that exist. Changes meanwhile are synced on resuming.
    pub fn pause_job_controller(&self) {
        self.job_controller_paused.send_replace(true);
    }

    /// The Job controller syncs again, beginning with every Job that changed while paused.
    pub fn resume_job_controller(&self) {
        self.job_controller_paused.send_replace(false);
    }

    /// How many pods the Job controller has created since the simulation started.
    pub fn pods_created(&self) -> u64 {
        self.shared.pods_created.load(Ordering::Relaxed)
    }

    /// The timings this simulation runs with.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// Asks every controller to stop; returns at once. Use [`Simulation::stopped`] to wait.
    pub fn shutdown(&self) {
        // Err only if every receiver is gone, i.e. all controllers have already stopped.
        let _ = self.stop.send(true);
    }

    /// Resolves once every controller task has ended (after [`Simulation::shutdown`]).
    pub async fn stopped(&self) {
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for task in tasks {
            if let Err(e) = task.await
                && e.is_panic()
            {
                tracing::error!(error = %e, "a simulated controller panicked");
            }
        }
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_millis(100);
        let max = Duration::from_millis(500);
        let steps: Vec<u128> = (0..6)
            .map(|n| SimConfig::backoff(base, max, n).as_millis())
            .collect();
        assert_eq!(steps, [0, 100, 200, 400, 500, 500]);
    }
}
