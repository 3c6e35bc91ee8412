//! The emulated node: binds every pod to it (the scheduler's part: `spec.nodeName` and
//! `PodScheduled`), then runs each container as a timeline chosen by its environment (see
//! [`super::behaviour`]), writing the pod status the real kubelet writes at each step:
//!
//! Pending (ContainerCreating) → Running (ready, `podIP`) → Succeeded (`Completed`, exit 0) or
//! Failed (`Error`, non-zero exit; `OOMKilled`, exit 137), with `containerStatuses[].state.{waiting,running,terminated}`,
//! `startedAt`/`finishedAt`, `containerID`, `imageID`, conditions with their reasons, and the
//! termination message (`terminationMessagePolicy: FallbackToLogsOnError` uses the log tail).
//! `restartPolicy: OnFailure`/`Always` restarts a failed container in place after a crash-loop
//! back-off (`restartCount`, `lastState.terminated`, `waiting.reason: CrashLoopBackOff`). A pod
//! marked for deletion is stopped (exit 143, reason `Error`, phase Failed; exit 137 when its grace
//! period ends first), unless its own run ends sooner (then its own exit code); the store removes it
//! once it is terminal and has no finalizers left. Log lines go to the store (`pods/{name}/log`).
//! With [`SimConfig::kubelet_gc`], a pod that is deleted and whose containers have all stopped
//! has them removed that long after, whatever finalizers keep the object: its log becomes
//! unreadable (`Store::collect_log`), as on a node. A run may also end in a node-pressure eviction
//! or a preemption (`eviction`). Pod conditions the kubelet does not own (`DisruptionTarget`
//! from the Eviction API or the scheduler) are kept in front of its own, as its status manager
//! keeps them.
//!
//! It owns pod *status*, `spec.nodeName` and the removal of containers, nothing else: it never
//! deletes pods, never touches finalizers and never reads Jobs. What it remembers about a pod (timers, attempts, container
//! ids) lives in memory only; the status it writes is derived from that memory.
//!
//! # Layout
//! - this module: the pod's run (its timeline, restarts, kills) and the reconciler.
//! - `pod_status`: the status written for a run's current state.
//! - `eviction`: node-pressure eviction and the scheduler's preemption of a run.
//! - `container_runtime`: image references and ids, container ids, Go durations.

mod container_runtime;
mod eviction;
mod pod_status;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::behaviour::{Behaviour, BehaviourError, RunEnd};
use super::events::{EventType, SCHEDULER, Source};
use super::objects::{self, is_deleting, pod_is_terminal, str_at};
use super::runner::Reconciler;
use super::{Shared, SimConfig};
use crate::store::{Change, Store, StoreError, now_timestamp};

use container_runtime::{normalize_image, random_hex};
use pod_status::{build_status, keep_foreign_conditions, oom_killed, terminated, unknown_terminated};

type PodKey = (String, String);

#[derive(Debug, thiserror::Error)]
pub(crate) enum KubeletError {
    #[error("binding pod {pod} to the node: {source}")]
    Bind { pod: String, source: StoreError },
    #[error("writing the status of pod {pod}: {source}")]
    WriteStatus { pod: String, source: StoreError },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

#[derive(Debug)]
enum ContainerState {
    /// Not started yet (sandbox and image being prepared).
    Creating,
    /// `EMULATOR_IMAGE_PULL_ERROR`: stays waiting.
    PullError,
    /// A broken `EMULATOR_*` value: stays waiting.
    ConfigError(String),
    Running {
        started_at: String,
        exit_at: Instant,
        attempt: u32,
    },
    /// Exited and waiting to be restarted in place.
    BackOff { until: Instant, delay: Duration },
    /// The `terminated` state object.
    Terminated(Value),
}

#[derive(Debug)]
struct ContainerRun {
    name: String,
    image: String,
    fallback_to_logs: bool,
    behaviour: Result<Behaviour, BehaviourError>,
    restart_count: u32,
    state: ContainerState,
    last_state: Value,
    container_id: Option<String>,
    /// The current instance's log lines (for the `FallbackToLogsOnError` tail).
    log: Vec<String>,
}

/// What the kubelet remembers about one pod incarnation.
#[derive(Debug)]
struct PodRun {
    uid: String,
    name: String,
    namespace: String,
    pod_ip: String,
    start_time: String,
    pending_until: Instant,
    started: bool,
    kill_at: Option<Instant>,
    restart_policy: RestartPolicy,
    /// The Job completion index, for `EMULATOR_FAIL_INDEXES` and `{index}`.
    index: Option<u64>,
    /// Whose runs `EMULATOR_FAIL_ATTEMPTS` counts: the controlling owner's uid, else the pod's.
    attempt_owner: String,
    /// The node-pressure eviction's message once the kubelet evicted the pod (`Evicted`).
    evicted: Option<String>,
    /// The scheduler preempted the pod: its containers run until the deletion stops them.
    preempted: bool,
    qos_class: String,
    containers: Vec<ContainerRun>,
}

impl PodRun {
    fn is_terminal(&self) -> bool {
        self.started_or_killed()
            && self
                .containers
                .iter()
                .all(|c| matches!(c.state, ContainerState::Terminated(_)))
    }

    fn started_or_killed(&self) -> bool {
        self.started || self.kill_at.is_some()
    }

    fn phase(&self) -> &'static str {
        if self.evicted.is_some() {
            "Failed"
        } else if self.is_terminal() {
            let all_ok = self.containers.iter().all(|c| match &c.state {
                ContainerState::Terminated(t) => t.get("exitCode").and_then(Value::as_i64) == Some(0),
                _ => false,
            });
            if all_ok { "Succeeded" } else { "Failed" }
        } else if self.started {
            "Running"
        } else {
            "Pending"
        }
    }
}

pub(crate) struct Kubelet {
    shared: Arc<Shared>,
    pods: HashMap<PodKey, PodRun>,
    /// Runs started per (owner uid, completion index, container name), for `EMULATOR_FAIL_ATTEMPTS`.
    attempts: HashMap<(String, Option<u64>, String), u32>,
    /// Pods whose container waits on a closed gate, by gate name.
    gated: HashMap<String, HashSet<PodKey>>,
    /// Deleted pods whose containers have stopped: the pod's uid and when its containers go
    /// ([`SimConfig::kubelet_gc`]).
    collect_at: HashMap<PodKey, (String, Instant)>,
    next_ip: u32,
}

impl Kubelet {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Kubelet {
            shared,
            pods: HashMap::new(),
            attempts: HashMap::new(),
            gated: HashMap::new(),
            collect_at: HashMap::new(),
            next_ip: 0,
        }
    }

    fn source(&self) -> Source<'_> {
        Source {
            component: "kubelet",
            host: Some(&self.shared.config.node_name),
        }
    }

    fn new_run(&mut self, pod: &Value) -> PodRun {
        let config = &self.shared.config;
        let containers: Vec<ContainerRun> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| ContainerRun {
                name: str_at(c, "/name").unwrap_or("main").to_owned(),
                image: str_at(c, "/image").unwrap_or_default().to_owned(),
                fallback_to_logs: str_at(c, "/terminationMessagePolicy") == Some("FallbackToLogsOnError"),
                behaviour: Behaviour::from_container(c, config),
                restart_count: 0,
                state: ContainerState::Creating,
                last_state: json!({}),
                container_id: None,
                log: Vec::new(),
            })
            .collect();
        let pending = containers
            .iter()
            .filter_map(|c| c.behaviour.as_ref().ok().map(|b| b.pending))
            .max()
            .unwrap_or(config.pending);
        let restart_policy = match str_at(pod, "/spec/restartPolicy") {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        };
        let index = objects::label(pod, "batch.kubernetes.io/job-completion-index")
            .or_else(|| objects::annotation(pod, "batch.kubernetes.io/job-completion-index"))
            .and_then(|i| i.parse().ok());
        let attempt_owner = objects::controller_ref(pod)
            .and_then(|r| r.get("uid")?.as_str())
            .unwrap_or(objects::uid(pod))
            .to_owned();
        let has_resources = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("resources")
                        .and_then(Value::as_object)
                        .is_some_and(|r| !r.is_empty())
                })
            });
        self.next_ip += 1;
        let n = self.next_ip;
        PodRun {
            uid: objects::uid(pod).to_owned(),
            name: objects::name(pod).to_owned(),
            namespace: objects::namespace(pod).unwrap_or("default").to_owned(),
            pod_ip: format!("10.244.{}.{}", (n / 250) % 256, n % 250 + 2),
            start_time: now_timestamp(),
            pending_until: Instant::now() + pending,
            started: false,
            kill_at: None,
            restart_policy,
            index,
            attempt_owner,
            evicted: None,
            preempted: false,
            qos_class: str_at(pod, "/status/qosClass")
                .map(str::to_owned)
                .unwrap_or_else(|| if has_resources { "Burstable" } else { "BestEffort" }.to_owned()),
            containers,
        }
    }

    fn forget(&mut self, key: &PodKey) {
        self.pods.remove(key);
    }

    /// The scheduler's part: binds the pod to the node.
    fn bind(&self, store: &Store, pod: &Value) -> Result<Option<Value>, KubeletError> {
        let node = self.shared.config.node_name.clone();
        let uid = objects::uid(pod).to_owned();
        let now = now_timestamp();
        let result = store.modify("pods", objects::namespace(pod), objects::name(pod), &mut |o| {
            if objects::uid(o) != uid {
                return Err(StoreError::Conflict("the pod was replaced".into()));
            }
            if str_at(o, "/spec/nodeName").is_some_and(|n| !n.is_empty()) {
                return Ok(());
            }
            if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("nodeName".into(), json!(node));
            }
            let mut st = o
                .get("status")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            if st.get("phase").is_none() {
                st["phase"] = json!("Pending");
            }
            st["conditions"] = json!([{
                "type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now,
            }]);
            o["status"] = st;
            Ok(())
        });
        match result {
            Ok(bound) => {
                self.shared.recorder.record(
                    store,
                    &bound,
                    EventType::Normal,
                    "Scheduled",
                    &format!("Successfully assigned {} to {node}", objects::display(&bound)),
                    SCHEDULER,
                );
                Ok(Some(bound))
            }
            Err(StoreError::NotFound | StoreError::Conflict(_)) => Ok(None),
            Err(source) => Err(KubeletError::Bind {
                pod: objects::display(pod),
                source,
            }),
        }
    }

    /// Starts (or restarts) container `i`: a new container id, the next attempt number, and its
    /// log lines written to the store.
    fn start_container(&mut self, store: &Store, run: &mut PodRun, i: usize, now: Instant) {
        let owner = run.attempt_owner.clone();
        let Some(c) = run.containers.get_mut(i) else {
            return;
        };
        let Ok(behaviour) = &c.behaviour else { return };
        let attempt = self
            .attempts
            .entry((owner, run.index, c.name.clone()))
            .or_insert(0);
        *attempt += 1;
        c.container_id = Some(format!("containerd://{}", random_hex(64)));
        c.state = ContainerState::Running {
            started_at: now_timestamp(),
            exit_at: now + behaviour.run,
            attempt: *attempt,
        };
        c.log.clone_from(&behaviour.log);
        for line in &behaviour.log {
            store.append_log(&run.namespace, &run.name, line);
        }
    }

    /// Kills every container of the run at once: a running one ends with `exit_code` (137 for
    /// SIGKILL, 143 for SIGTERM) and a `Killing` Event; one that already ended keeps its
    /// termination, one that never ran gets the kubelet's unknown one. The one kill path of
    /// a deletion's grace period and of a node-pressure eviction.
    fn kill_containers(&mut self, store: &Store, pod: &Value, run: &mut PodRun, exit_code: i32) {
        let stamp = now_timestamp();
        let mut stopped = Vec::new();
        for c in &mut run.containers {
            let killed = match std::mem::replace(&mut c.state, ContainerState::Creating) {
                ContainerState::Running { started_at, .. } => {
                    stopped.push(c.name.clone());
                    terminated(c, run.index, &run.name, exit_code, &started_at, &stamp)
                }
                ContainerState::Terminated(t) => t,
                ContainerState::BackOff { .. } => c
                    .last_state
                    .get("terminated")
                    .cloned()
                    .unwrap_or_else(|| unknown_terminated(&stamp)),
                ContainerState::Creating | ContainerState::PullError | ContainerState::ConfigError(_) => {
                    unknown_terminated(&stamp)
                }
            };
            c.state = ContainerState::Terminated(killed);
        }
        for name in stopped {
            self.shared.recorder.record(
                store,
                pod,
                EventType::Normal,
                "Killing",
                &format!("Stopping container {name}"),
                self.source(),
            );
        }
    }

    fn step(
        &mut self,
        store: &Store,
        key: &PodKey,
        pod: &Value,
        run: &mut PodRun,
    ) -> Result<Option<Duration>, KubeletError> {
        let now = Instant::now();
        let config = self.shared.config.clone();
        if is_deleting(pod) {
            // SIGTERM now; a container that has not exited when the grace period ends is killed.
            let grace = pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_u64)
                .map_or(config.termination, Duration::from_secs);
            let killed_at_grace = config.termination >= grace;
            let kill_at = *run.kill_at.get_or_insert(now + config.termination.min(grace));
            let exit_code = if killed_at_grace { 137 } else { 143 };
            // A container whose own run ends before it is killed exits then, with its own code,
            // as a program that finishes during its grace period does.
            let own_exit = self.exit_on_their_own(key, run, kill_at, now);
            if run.is_terminal() {
                self.write_status(store, pod, run)?;
                return Ok(None);
            }
            if now < kill_at {
                self.write_status(store, pod, run)?;
                let wake = own_exit.map_or(kill_at, |at| at.min(kill_at));
                return Ok(Some(wake.saturating_duration_since(now)));
            }
            self.kill_containers(store, pod, run, exit_code);
            self.write_status(store, pod, run)?;
            return Ok(None);
        }

        if !run.started {
            let mut failed_to_start = false;
            for c in &mut run.containers {
                let was_creating = matches!(c.state, ContainerState::Creating);
                let problem = match &c.behaviour {
                    Err(e) => Some(("CreateContainerConfigError", e.to_string())),
                    Ok(b) if b.image_pull_error => Some((
                        "ErrImagePull",
                        format!(
                            "failed to pull and unpack image \"{}\": emulated pull error ({}=1)",
                            normalize_image(&c.image),
                            super::behaviour::IMAGE_PULL_ERROR
                        ),
                    )),
                    Ok(_) => None,
                };
                let Some((reason, message)) = problem else {
                    continue;
                };
                failed_to_start = true;
                if was_creating {
                    let note = if reason == "ErrImagePull" {
                        format!("Failed to pull image \"{}\": {message}", c.image)
                    } else {
                        format!("Error: {message}")
                    };
                    self.shared.recorder.record(
                        store,
                        pod,
                        EventType::Warning,
                        "Failed",
                        &note,
                        Source {
                            component: "kubelet",
                            host: Some(&config.node_name),
                        },
                    );
                    c.state = if reason == "ErrImagePull" {
                        ContainerState::PullError
                    } else {
                        ContainerState::ConfigError(message)
                    };
                }
            }
            if failed_to_start {
                self.write_status(store, pod, run)?;
                return Ok(None);
            }
            if now < run.pending_until {
                self.write_status(store, pod, run)?;
                return Ok(Some(run.pending_until - now));
            }
            for i in 0..run.containers.len() {
                self.start_container(store, run, i, now);
                let (name, image) = (run.containers[i].name.clone(), run.containers[i].image.clone());
                for (reason, note) in [
                    (
                        "Pulled",
                        format!("Container image \"{image}\" already present on machine"),
                    ),
                    ("Created", format!("Created container: {name}")),
                    ("Started", format!("Started container {name}")),
                ] {
                    self.shared
                        .recorder
                        .record(store, pod, EventType::Normal, reason, &note, self.source());
                }
            }
            run.started = true;
        }

        let mut next: Option<Instant> = None;
        for i in 0..run.containers.len() {
            let now = Instant::now();
            match &run.containers[i].state {
                ContainerState::Running {
                    exit_at,
                    started_at,
                    attempt,
                } if now >= *exit_at => {
                    let gate = run.containers[i]
                        .behaviour
                        .as_ref()
                        .ok()
                        .and_then(|b| b.gate_for(run.index));
                    if let Some(gate) = gate
                        && !self.shared.gate_open(&gate)
                    {
                        self.gated.entry(gate).or_default().insert(key.clone());
                        continue;
                    }
                    let (started_at, attempt) = (started_at.clone(), *attempt);
                    let end = run.containers[i]
                        .behaviour
                        .as_ref()
                        .map_or(RunEnd::Exit(1), |b| b.run_end(run.index, attempt));
                    let stamp = now_timestamp();
                    let (code, t) = match end {
                        RunEnd::Evicted => return self.evict_for_node_pressure(store, pod, run, i),
                        RunEnd::Preempted => {
                            self.preempt(store, pod, run);
                            continue;
                        }
                        RunEnd::OomKilled => (
                            137,
                            oom_killed(&run.containers[i], run.index, &run.name, &started_at, &stamp),
                        ),
                        RunEnd::Exit(code) => (
                            code,
                            terminated(
                                &run.containers[i],
                                run.index,
                                &run.name,
                                code,
                                &started_at,
                                &stamp,
                            ),
                        ),
                    };
                    let c = &mut run.containers[i];
                    let restart = match run.restart_policy {
                        RestartPolicy::Always => true,
                        RestartPolicy::OnFailure => code != 0,
                        RestartPolicy::Never => false,
                    };
                    if restart {
                        c.restart_count += 1;
                        c.last_state = json!({"terminated": t});
                        let delay = SimConfig::backoff(
                            config.crash_loop_backoff,
                            config.crash_loop_backoff_max,
                            c.restart_count,
                        );
                        c.state = ContainerState::BackOff {
                            until: now + delay,
                            delay,
                        };
                        if code != 0 {
                            let note = format!(
                                "Back-off restarting failed container {} in pod {}",
                                c.name,
                                objects::display(pod)
                            );
                            self.shared.recorder.record(
                                store,
                                pod,
                                EventType::Warning,
                                "BackOff",
                                &note,
                                self.source(),
                            );
                        }
                    } else {
                        c.state = ContainerState::Terminated(t);
                    }
                }
                ContainerState::BackOff { until, .. } if now >= *until => {
                    self.start_container(store, run, i, now);
                }
                _ => {}
            }
            match &run.containers[i].state {
                ContainerState::Running { exit_at, .. } if *exit_at > now => {
                    next = Some(next.map_or(*exit_at, |n| n.min(*exit_at)));
                }
                ContainerState::BackOff { until, .. } => next = Some(next.map_or(*until, |n| n.min(*until))),
                _ => {}
            }
        }
        self.write_status(store, pod, run)?;
        Ok(next.map(|at| at.saturating_duration_since(Instant::now())))
    }

    /// For a pod being deleted: ends the running containers whose run is over (and whose gate,
    /// if any, is open) before `kill_at`, with their own exit code and without a restart.
    /// Returns when the next of the others would end on its own before `kill_at`.
    fn exit_on_their_own(
        &mut self,
        key: &PodKey,
        run: &mut PodRun,
        kill_at: Instant,
        now: Instant,
    ) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for c in &mut run.containers {
            let ContainerState::Running {
                exit_at,
                started_at,
                attempt,
            } = &c.state
            else {
                continue;
            };
            if *exit_at >= kill_at {
                continue;
            }
            if *exit_at > now {
                next = Some(next.map_or(*exit_at, |n| n.min(*exit_at)));
                continue;
            }
            if let Some(gate) = c.behaviour.as_ref().ok().and_then(|b| b.gate_for(run.index))
                && !self.shared.gate_open(&gate)
            {
                self.gated.entry(gate).or_default().insert(key.clone());
                continue;
            }
            let (started_at, attempt) = (started_at.clone(), *attempt);
            let end = c
                .behaviour
                .as_ref()
                .map_or(RunEnd::Exit(1), |b| b.run_end(run.index, attempt));
            let stamp = now_timestamp();
            c.state = ContainerState::Terminated(match end {
                RunEnd::OomKilled => oom_killed(c, run.index, &run.name, &started_at, &stamp),
                // Already being deleted: a disruption has nothing left to do, the run goes on
                // until the deletion stops it.
                RunEnd::Evicted | RunEnd::Preempted => continue,
                RunEnd::Exit(code) => terminated(c, run.index, &run.name, code, &started_at, &stamp),
            });
        }
        next
    }

    fn write_status(&self, store: &Store, pod: &Value, run: &PodRun) -> Result<(), KubeletError> {
        let status = build_status(run, pod, &self.shared.config);
        if pod.get("status") == Some(&status) {
            return Ok(());
        }
        let uid = run.uid.clone();
        let result = store.modify("pods", Some(&run.namespace), &run.name, &mut |o| {
            if objects::uid(o) != uid {
                return Err(StoreError::Conflict("the pod was replaced".into()));
            }
            // Conditions other components wrote since `pod` was read are kept too.
            let mut status = status.clone();
            keep_foreign_conditions(&mut status, o);
            o["status"] = status;
            Ok(())
        });
        match result {
            Ok(_) | Err(StoreError::NotFound | StoreError::Conflict(_)) => Ok(()),
            Err(source) => Err(KubeletError::WriteStatus {
                pod: objects::display(pod),
                source,
            }),
        }
    }
}

impl Kubelet {
    /// Removes the containers of a deleted, terminal pod once [`SimConfig::kubelet_gc`] has
    /// passed since it was first seen so; until then, when to look again.
    fn collect_if_due(&mut self, store: &Store, key: &PodKey, pod: &Value) -> Option<Duration> {
        let delay = self.shared.config.kubelet_gc?;
        if !is_deleting(pod) || store.log_collected(&key.0, &key.1) {
            return None;
        }
        let uid = objects::uid(pod);
        let now = Instant::now();
        let due = match self.collect_at.get(key) {
            Some((seen, due)) if seen == uid => *due,
            _ => {
                self.collect_at.insert(key.clone(), (uid.to_owned(), now + delay));
                now + delay
            }
        };
        if now < due {
            return Some(due - now);
        }
        self.collect_at.remove(key);
        store.collect_log(&key.0, &key.1);
        None
    }
}

impl Reconciler for Kubelet {
    type Key = PodKey;
    type Nudge = String;
    type Error = KubeletError;
    const NAME: &'static str = "kubelet";

    fn resync(&mut self, store: &Store) -> Vec<PodKey> {
        let (pods, _) = store.list("pods", None, &|_| true);
        pods.iter()
            .map(|p| {
                (
                    objects::namespace(p).unwrap_or_default().to_owned(),
                    objects::name(p).to_owned(),
                )
            })
            .collect()
    }

    fn keys_for(&mut self, change: &Change, keys: &mut Vec<PodKey>) {
        if change.resource == "pods" {
            let pod = &change.object;
            keys.push((
                objects::namespace(pod).unwrap_or_default().to_owned(),
                objects::name(pod).to_owned(),
            ));
        }
    }

    fn nudged(&mut self, gate: String, keys: &mut Vec<PodKey>) {
        if let Some(pods) = self.gated.remove(&gate) {
            keys.extend(pods);
        }
    }

    fn reconcile(&mut self, store: &Store, key: &PodKey) -> Result<Option<Duration>, KubeletError> {
        let (namespace, name) = key;
        let Some(mut pod) = store.get("pods", Some(namespace), name) else {
            self.forget(key);
            self.collect_at.remove(key);
            return Ok(None);
        };
        if pod_is_terminal(&pod) {
            self.forget(key);
            return Ok(self.collect_if_due(store, key, &pod));
        }
        if self.pods.get(key).is_some_and(|r| r.uid != objects::uid(&pod)) {
            self.forget(key);
        }
        if str_at(&pod, "/spec/nodeName").is_none_or(str::is_empty) {
            if is_deleting(&pod) {
                // Unbound and held by a finalizer: it will never run. The pod GC of a real
                // cluster marks such pods Failed; do the same so that their owner can count them.
                let mut run = self.new_run(&pod);
                run.kill_at = Some(Instant::now());
                let stamp = now_timestamp();
                for c in &mut run.containers {
                    c.state = ContainerState::Terminated(unknown_terminated(&stamp));
                }
                return self.write_status(store, &pod, &run).map(|()| None);
            }
            match self.bind(store, &pod)? {
                Some(bound) => pod = bound,
                None => return Ok(None),
            }
        }
        let mut run = match self.pods.remove(key) {
            Some(run) => run,
            None => self.new_run(&pod),
        };
        let result = self.step(store, key, &pod, &mut run);
        if !run.is_terminal() {
            self.pods.insert(key.clone(), run);
        }
        result
    }
}
