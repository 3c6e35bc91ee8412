//! Simulated operators of the workload CRDs jobgate's templates create: the Kubeflow Training
//! Operator (TFJob, PyTorchJob, MPIJob), Kubeflow Trainer (TrainJob), Argo Workflows
//! (Workflow), Tekton Pipelines (PipelineRun), KubeRay (RayJob) and the Spark Operator
//! (SparkApplication).
//!
//! Like the real operators, each creates the object's pods (ownerReferences with `controller:
//! true`, so the garbage collector removes them with the object), lets the kubelet run them (so
//! `EMULATOR_*` variables in a container's `env` script its outcome, log and termination
//! message), and writes the object's `status` from its pods' phases in the upstream shapes
//! (`../shared/reference/workload-status.md`): conditions, states, counts, messages, results.
//! A kind whose CRD is not registered has no objects, so its simulation does nothing.
//!
//! Simplified, on purpose: one pod per replica with no services or gang scheduling; Argo runs
//! a `container` entrypoint only (other templates end `Error`); Tekton runs its tasks one after
//! another; a RayJob's head pod stands for the Ray job (no workers, no submitter Job); Spark
//! executors are plain pods; suspend is not simulated. A malformed spec never panics: the
//! object gets a failure status or is skipped.
//!
//! It must not write pod status (the kubelet's) nor delete the objects (their owners' and GC's).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Shared;
use super::objects::{self, is_deleting, pod_is_terminal, str_at};
use super::runner::Reconciler;
use crate::store::{Change, ChangeKind, Store, StoreError, now_timestamp};

/// The kinds simulated here: (store key, apiVersion, kind).
pub const KINDS: &[(&str, &str, &str)] = &[
    ("pytorchjobs.kubeflow.org", "kubeflow.org/v1", "PyTorchJob"),
    ("tfjobs.kubeflow.org", "kubeflow.org/v1", "TFJob"),
    ("mpijobs.kubeflow.org", "kubeflow.org/v1", "MPIJob"),
    (
        "trainjobs.trainer.kubeflow.org",
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
    ),
    ("workflows.argoproj.io", "argoproj.io/v1alpha1", "Workflow"),
    ("pipelineruns.tekton.dev", "tekton.dev/v1", "PipelineRun"),
    ("rayjobs.ray.io", "ray.io/v1", "RayJob"),
    (
        "sparkapplications.sparkoperator.k8s.io",
        "sparkoperator.k8s.io/v1beta2",
        "SparkApplication",
    ),
];

/// `(resource, namespace, name)` of a workload object.
type Key = (String, String, String);

#[derive(Debug, thiserror::Error)]
pub(crate) enum OperatorError {
    #[error("creating pod {pod}: {source}")]
    CreatePod { pod: String, source: StoreError },
    #[error("writing the status of {object}: {source}")]
    WriteStatus { object: String, source: StoreError },
}

pub(crate) struct Operators {
    #[allow(dead_code)]
    shared: Arc<Shared>,
}

impl Operators {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

fn resource_of(api_version: &str, kind: &str) -> Option<&'static str> {
    KINDS
        .iter()
        .find(|(_, v, k)| *v == api_version && *k == kind)
        .map(|(r, _, _)| *r)
}

/// The workload object that controls `pod`, if one of ours.
fn owner_key(pod: &Value) -> Option<Key> {
    let owner = objects::controller_ref(pod)?;
    let resource = resource_of(owner.get("apiVersion")?.as_str()?, owner.get("kind")?.as_str()?)?;
    Some((
        resource.to_owned(),
        objects::namespace(pod)?.to_owned(),
        owner.get("name")?.as_str()?.to_owned(),
    ))
}

impl Reconciler for Operators {
    type Key = Key;
    type Nudge = ();
    type Error = OperatorError;
    const NAME: &'static str = "workload-operators";

    fn resync(&mut self, store: &Store) -> Vec<Key> {
        let mut keys = Vec::new();
        for (resource, _, _) in KINDS {
            let (items, _) = store.list(resource, None, &|_| true);
            keys.extend(items.iter().map(|o| {
                (
                    (*resource).to_owned(),
                    objects::namespace(o).unwrap_or_default().to_owned(),
                    objects::name(o).to_owned(),
                )
            }));
        }
        keys
    }

    fn keys_for(&mut self, change: &Change, keys: &mut Vec<Key>) {
        let object = &change.object;
        if change.resource == "pods" {
            keys.extend(owner_key(object));
        } else if KINDS.iter().any(|(r, _, _)| *r == change.resource) && change.kind != ChangeKind::Deleted {
            keys.push((
                change.resource.clone(),
                objects::namespace(object).unwrap_or_default().to_owned(),
                objects::name(object).to_owned(),
            ));
        }
    }

    fn reconcile(&mut self, store: &Store, key: &Key) -> Result<Option<Duration>, OperatorError> {
        let (resource, namespace, name) = key;
        let Some(object) = store.get(resource, Some(namespace), name) else {
            return Ok(None); // deleted: the garbage collector removes its pods
        };
        if is_deleting(&object) {
            return Ok(None);
        }
        let kind = str_at(&object, "/kind").unwrap_or_default().to_owned();
        let mut ctx = Ctx {
            store,
            object: &object,
            namespace,
            name,
            previous: object
                .get("status")
                .cloned()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({})),
        };
        let status = match kind.as_str() {
            "PyTorchJob" => kubeflow(&mut ctx, "PyTorchJob", "pytorchReplicaSpecs", &["Master"])?,
            "TFJob" => kubeflow(&mut ctx, "TFJob", "tfReplicaSpecs", &["Chief", "Master"])?,
            "MPIJob" => kubeflow(&mut ctx, "MPIJob", "mpiReplicaSpecs", &["Launcher"])?,
            "TrainJob" => trainjob(&mut ctx)?,
            "Workflow" => workflow(&mut ctx)?,
            "PipelineRun" => pipelinerun(&mut ctx)?,
            "RayJob" => rayjob(&mut ctx)?,
            "SparkApplication" => spark(&mut ctx)?,
            _ => return Ok(None),
        };
        ctx.write_status(resource, status)?;
        Ok(None)
    }
}

/// What an operator sees of one of its pods.
struct PodView {
    phase: String,
    exit_code: Option<i64>,
    message: Option<String>,
    log: Vec<String>,
}

impl PodView {
    fn terminal(&self) -> bool {
        self.phase == "Succeeded" || self.phase == "Failed"
    }
}

struct Ctx<'a> {
    store: &'a Store,
    object: &'a Value,
    namespace: &'a str,
    name: &'a str,
    previous: Value,
}

impl Ctx<'_> {
    fn labels(&self) -> Map<String, Value> {
        self.object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    fn pod(&self, name: &str) -> Option<PodView> {
        let pod = self.store.get("pods", Some(self.namespace), name)?;
        let statuses = pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let terminated: Vec<&Value> = statuses
            .iter()
            .filter_map(|c| c.pointer("/state/terminated"))
            .collect();
        let failed = terminated
            .iter()
            .find(|t| t.get("exitCode").and_then(Value::as_i64).unwrap_or(0) != 0);
        let shown = failed.or(terminated.last());
        Some(PodView {
            phase: objects::pod_phase(&pod).to_owned(),
            exit_code: shown.and_then(|t| t.get("exitCode")).and_then(Value::as_i64),
            message: shown
                .and_then(|t| t.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            log: self.store.logs(self.namespace, name).unwrap_or_default(),
        })
    }

    /// Creates pod `name` unless it exists, from a pod template's `metadata.labels` and `spec`.
    fn ensure_pod(
        &self,
        name: &str,
        mut labels: Map<String, Value>,
        template: &Value,
        restart_policy: &str,
    ) -> Result<(), OperatorError> {
        if self.store.get("pods", Some(self.namespace), name).is_some() {
            return Ok(());
        }
        if let Some(own) = template.pointer("/metadata/labels").and_then(Value::as_object) {
            for (k, v) in own {
                labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let mut spec = template
            .get("spec")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        spec["restartPolicy"] = json!(restart_policy);
        if !spec.get("containers").is_some_and(Value::is_array) {
            spec["containers"] = json!([]);
        }
        // Stored as the API server stores a created pod: with its spec's defaults, so that a
        // later update through the API (a finalizer added by merge patch) changes no spec field.
        crate::api::kinds::default_pod_spec(&mut spec);
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": str_at(self.object, "/apiVersion").unwrap_or_default(),
                    "kind": str_at(self.object, "/kind").unwrap_or_default(),
                    "name": self.name,
                    "uid": objects::uid(self.object),
                    "controller": true,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": spec,
        });
        match self.store.create("pods", Some(self.namespace), pod) {
            Ok(_) | Err(StoreError::AlreadyExists) => Ok(()),
            Err(source) => Err(OperatorError::CreatePod {
                pod: name.to_owned(),
                source,
            }),
        }
    }

    /// Stops the pods that still run (the operator's clean-up of a finished or stopped object).
    fn stop_pods<'n>(&self, names: impl IntoIterator<Item = &'n String>) {
        for name in names {
            let running = self
                .store
                .get("pods", Some(self.namespace), name)
                .is_some_and(|p| !pod_is_terminal(&p) && !is_deleting(&p));
            if running {
                // Best effort, as a real operator's clean-up: a pod gone meanwhile is fine.
                let _ = objects::delete_gracefully(self.store, "pods", Some(self.namespace), name, None);
            }
        }
    }

    fn prev(&self, pointer: &str) -> Option<Value> {
        self.previous.pointer(pointer).cloned().filter(|v| !v.is_null())
    }

    /// The previous value at `pointer`, or now.
    fn since(&self, pointer: &str) -> Value {
        self.prev(pointer).unwrap_or_else(|| json!(now_timestamp()))
    }

    fn write_status(&self, resource: &str, status: Value) -> Result<(), OperatorError> {
        if status == self.previous {
            return Ok(());
        }
        self.store
            .modify(resource, Some(self.namespace), self.name, &mut |o| {
                o["status"] = status.clone();
                Ok(())
            })
            .map(|_| ())
            .or_else(|e| match e {
                StoreError::NotFound => Ok(()),
                source => Err(OperatorError::WriteStatus {
                    object: format!("{resource} {}/{}", self.namespace, self.name),
                    source,
                }),
            })
    }
}

/// Kubernetes-style conditions kept across reconciles: a type's `lastTransitionTime` moves only
/// when its status does.
struct Conditions(Vec<Value>);

impl Conditions {
    fn from(previous: Option<Value>) -> Self {
        Self(previous.and_then(|v| v.as_array().cloned()).unwrap_or_default())
    }

    fn set(&mut self, type_: &str, status: &str, reason: &str, message: &str) {
        let now = now_timestamp();
        match self.0.iter_mut().find(|c| c["type"] == type_) {
            // Unchanged: no write, or every status write would wake the operator again.
            Some(c) if c["status"] == status && c["reason"] == reason && c["message"] == message => {}
            Some(c) => {
                if c["status"] != status {
                    c["lastTransitionTime"] = json!(now);
                }
                c["status"] = json!(status);
                c["reason"] = json!(reason);
                c["message"] = json!(message);
                c["lastUpdateTime"] = json!(now);
            }
            None => self.0.push(json!({
                "type": type_, "status": status, "reason": reason, "message": message,
                "lastUpdateTime": now, "lastTransitionTime": now,
            })),
        }
    }

    fn is_true(&self, type_: &str) -> bool {
        self.0.iter().any(|c| c["type"] == type_ && c["status"] == "True")
    }
}

fn restart_policy(value: Option<&str>) -> &'static str {
    match value {
        Some("OnFailure") => "OnFailure",
        Some("Always") => "Always",
        // ExitCode: the operator decides per exit code; the pod itself never restarts.
        _ => "Never",
    }
}

/// TFJob, PyTorchJob and MPIJob (Training Operator v1).
fn kubeflow(ctx: &mut Ctx, kind: &str, specs_field: &str, deciding: &[&str]) -> Result<Value, OperatorError> {
    let specs: BTreeMap<String, Value> = ctx
        .object
        .pointer(&format!("/spec/{specs_field}"))
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let name = ctx.name;
    let mut conditions = Conditions::from(ctx.prev("/conditions"));
    let finished = conditions.is_true("Succeeded") || conditions.is_true("Failed");
    if !conditions.0.iter().any(|c| c["type"] == "Created") {
        conditions.set(
            "Created",
            "True",
            &format!("{kind}Created"),
            &format!("{kind} {name} is created."),
        );
    }
    let mut replica_statuses = Map::new();
    let mut pods: Vec<(String, u64, String, Option<PodView>)> = Vec::new();
    for (role, spec) in &specs {
        let replicas = spec.get("replicas").and_then(Value::as_u64).unwrap_or(1);
        let role_lower = role.to_lowercase();
        let policy = restart_policy(spec.get("restartPolicy").and_then(Value::as_str));
        let template = spec.get("template").cloned().unwrap_or_default();
        for i in 0..replicas {
            let pod = format!("{name}-{role_lower}-{i}");
            if !finished {
                let mut labels = Map::new();
                labels.insert("training.kubeflow.org/job-name".into(), json!(name));
                labels.insert("training.kubeflow.org/replica-type".into(), json!(role_lower));
                labels.insert("training.kubeflow.org/replica-index".into(), json!(i.to_string()));
                labels.insert(
                    "training.kubeflow.org/operator-name".into(),
                    json!(format!("{}-controller", kind.to_lowercase())),
                );
                ctx.ensure_pod(&pod, labels, &template, policy)?;
            }
            let view = ctx.pod(&pod);
            pods.push((role.clone(), i, pod, view));
        }
        let count = |phases: &[&str]| {
            pods.iter()
                .filter(|(r, _, _, v)| {
                    r == role && v.as_ref().is_some_and(|v| phases.contains(&v.phase.as_str()))
                })
                .count()
        };
        let previous = ctx.prev(&format!("/replicaStatuses/{role}"));
        let kept = |field: &str, now: usize| {
            // Pods removed after the end leave their last counts.
            let before = previous
                .as_ref()
                .and_then(|p| p.get(field))
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize;
            if finished { before.max(now) } else { now }
        };
        let mut entry = Map::new();
        for (field, phases) in [
            ("active", &["Pending", "Running"][..]),
            ("succeeded", &["Succeeded"]),
            ("failed", &["Failed"]),
        ] {
            let n = kept(field, count(phases));
            if n > 0 {
                entry.insert(field.into(), json!(n));
            }
        }
        entry.insert(
            "selector".into(),
            json!(format!(
                "training.kubeflow.org/job-name={name},training.kubeflow.org/operator-name={}-controller,training.kubeflow.org/replica-type={role_lower}",
                kind.to_lowercase()
            )),
        );
        replica_statuses.insert(role.clone(), Value::Object(entry));
    }
    if !finished {
        let deciding_pod = deciding
            .iter()
            .find_map(|role| pods.iter().find(|(r, i, _, _)| r == role && *i == 0))
            .or_else(|| pods.iter().find(|(r, i, _, _)| r == "Worker" && *i == 0));
        let failed = pods
            .iter()
            .find(|(role, _, _, v)| {
                let policy = specs[role].get("restartPolicy").and_then(Value::as_str);
                v.as_ref().is_some_and(|v| v.phase == "Failed") && restart_policy(policy) != "Always"
            })
            .map(|(role, ..)| role.clone());
        if let Some(role) = failed {
            conditions.set(
                "Running",
                "False",
                &format!("{kind}Running"),
                &format!("{kind} {name} is running."),
            );
            conditions.set(
                "Failed",
                "True",
                &format!("{kind}Failed"),
                &format!("{kind} {name} is failed because 1 {role} replica(s) failed."),
            );
        } else if deciding_pod.is_some_and(|(_, _, _, v)| v.as_ref().is_some_and(|v| v.phase == "Succeeded"))
        {
            conditions.set(
                "Running",
                "False",
                &format!("{kind}Running"),
                &format!("{kind} {name} is running."),
            );
            conditions.set(
                "Succeeded",
                "True",
                &format!("{kind}Succeeded"),
                &format!("{kind} {name} is successfully completed."),
            );
        } else if pods
            .iter()
            .any(|(_, _, _, v)| v.as_ref().is_some_and(|v| v.phase == "Running"))
        {
            conditions.set(
                "Running",
                "True",
                &format!("{kind}Running"),
                &format!("{kind} {name} is running."),
            );
        }
    }
    let done = conditions.is_true("Succeeded") || conditions.is_true("Failed");
    if done {
        ctx.stop_pods(pods.iter().map(|(_, _, p, _)| p));
    }
    let mut status = json!({
        "conditions": conditions.0,
        "replicaStatuses": replica_statuses,
        "startTime": ctx.since("/startTime"),
        "lastReconcileTime": ctx.since("/lastReconcileTime"),
    });
    if done {
        status["completionTime"] = ctx.since("/completionTime");
    }
    Ok(status)
}

/// TrainJob (Kubeflow Trainer v2): one replicated job `node` of `numNodes` pods.
fn trainjob(ctx: &mut Ctx) -> Result<Value, OperatorError> {
    let name = ctx.name;
    let trainer = ctx.object.pointer("/spec/trainer").cloned().unwrap_or_default();
    let nodes = trainer.get("numNodes").and_then(Value::as_u64).unwrap_or(1);
    let mut conditions = Conditions::from(ctx.prev("/conditions"));
    let finished = conditions.is_true("Complete") || conditions.is_true("Failed");
    let mut container = json!({"name": "node", "image": trainer.get("image").cloned().unwrap_or(json!(""))});
    for field in ["command", "args", "env"] {
        if let Some(v) = trainer.get(field) {
            container[field] = v.clone();
        }
    }
    if let Some(r) = trainer.get("resourcesPerNode") {
        container["resources"] = r.clone();
    }
    let template = json!({"spec": {"containers": [container]}});
    let mut views = Vec::new();
    let mut names = Vec::new();
    for i in 0..nodes {
        let pod = format!("{name}-node-0-{i}");
        if !finished {
            let mut labels = ctx.labels();
            labels.insert("jobset.sigs.k8s.io/jobset-name".into(), json!(name));
            labels.insert("jobset.sigs.k8s.io/replicatedjob-name".into(), json!("node"));
            labels.insert(
                "batch.kubernetes.io/job-completion-index".into(),
                json!(i.to_string()),
            );
            ctx.ensure_pod(&pod, labels, &template, "Never")?;
        }
        views.push(ctx.pod(&pod));
        names.push(pod);
    }
    let any = |phase: &str| views.iter().any(|v| v.as_ref().is_some_and(|v| v.phase == phase));
    let all_succeeded = views
        .iter()
        .all(|v| v.as_ref().is_some_and(|v| v.phase == "Succeeded"));
    if !finished {
        if any("Failed") {
            conditions.set(
                "Failed",
                "True",
                "FailedJobs",
                &format!("jobset failed due to one or more job failures (first failed job: {name}-node-0)"),
            );
        } else if all_succeeded {
            conditions.set(
                "Complete",
                "True",
                "AllJobsCompleted",
                "jobset completed successfully",
            );
        }
    }
    let done = conditions.is_true("Complete") || conditions.is_true("Failed");
    if done {
        ctx.stop_pods(&names);
    }
    let previous = ctx.prev("/jobsStatus/0");
    let node = if done {
        let was = |f: &str| {
            previous
                .as_ref()
                .and_then(|p| p.get(f))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        json!({"name": "node", "ready": 0, "active": 0, "suspended": 0,
            "succeeded": u64::from(conditions.is_true("Complete")).max(was("succeeded")),
            "failed": u64::from(conditions.is_true("Failed")).max(was("failed"))})
    } else {
        json!({"name": "node", "ready": u64::from(any("Running")), "active": 1, "succeeded": 0, "failed": 0, "suspended": 0})
    };
    let mut status = json!({"jobsStatus": [node]});
    if !conditions.0.is_empty() {
        status["conditions"] = json!(conditions.0);
    }
    Ok(status)
}

/// Argo Workflow: a `container` entrypoint template as one pod.
fn workflow(ctx: &mut Ctx) -> Result<Value, OperatorError> {
    let name = ctx.name;
    let phase = ctx
        .prev("/phase")
        .and_then(|p| p.as_str().map(str::to_owned))
        .unwrap_or_default();
    let finished = matches!(phase.as_str(), "Succeeded" | "Failed" | "Error");
    if finished {
        return Ok(ctx.previous.clone());
    }
    let entrypoint = str_at(ctx.object, "/spec/entrypoint").unwrap_or_default();
    let template = ctx
        .object
        .pointer("/spec/templates")
        .and_then(Value::as_array)
        .and_then(|ts| {
            ts.iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some(entrypoint))
        })
        .cloned();
    let started = ctx.since("/startedAt");
    let Some(container) = template.as_ref().and_then(|t| t.get("container")).cloned() else {
        return Ok(json!({
            "phase": "Error", "startedAt": started, "finishedAt": now_timestamp(), "progress": "0/0",
            "message": format!("the emulator simulates container templates only; entrypoint {entrypoint:?} is not one"),
        }));
    };
    let mut container = container;
    container["name"] = json!("main");
    let mut labels = Map::new();
    labels.insert("workflows.argoproj.io/workflow".into(), json!(name));
    if let Some(extra) = ctx
        .object
        .pointer("/spec/podMetadata/labels")
        .and_then(Value::as_object)
    {
        labels.extend(extra.clone());
    }
    if let Some(shutdown) = str_at(ctx.object, "/spec/shutdown") {
        ctx.stop_pods([&name.to_owned()]);
        let message = format!("Stopped with strategy '{shutdown}'");
        let status = json!({
            "phase": "Failed", "startedAt": started, "finishedAt": now_timestamp(), "progress": "0/1",
            "message": message,
            "nodes": {name: {"id": name, "name": name, "displayName": name, "type": "Pod", "templateName": entrypoint,
                "phase": "Failed", "message": message, "progress": "0/1"}},
            "conditions": [{"type": "PodRunning", "status": "False"}, {"type": "Completed", "status": "True"}],
        });
        set_workflow_labels(ctx, "Failed", true);
        return Ok(status);
    }
    ctx.ensure_pod(
        name,
        labels,
        &json!({"spec": {"containers": [container]}}),
        "Never",
    )?;
    let pod = ctx.pod(name);
    let pod_phase = pod.as_ref().map(|p| p.phase.as_str()).unwrap_or("Pending");
    let (wf_phase, progress) = match pod_phase {
        "Succeeded" => ("Succeeded", "1/1"),
        "Failed" => ("Failed", "0/1"),
        "Running" => ("Running", "0/1"),
        _ => ("Running", "0/1"),
    };
    let mut node = json!({"id": name, "name": name, "displayName": name, "type": "Pod", "templateName": entrypoint,
        "phase": if pod_phase == "Running" || pod_phase == "Succeeded" || pod_phase == "Failed" { pod_phase } else { "Pending" },
        "startedAt": started, "progress": progress});
    let mut status = json!({"phase": wf_phase, "startedAt": started, "finishedAt": null, "progress": progress,
        "conditions": [{"type": "PodRunning", "status": if pod_phase == "Running" { "True" } else { "False" }}]});
    if let Some(p) = pod.as_ref().filter(|p| p.terminal()) {
        let code = p.exit_code.unwrap_or(0);
        let mut outputs = json!({"exitCode": code.to_string()});
        if let Some(m) = p.message.as_ref().filter(|m| !m.is_empty()) {
            outputs["result"] = json!(m);
        }
        node["outputs"] = outputs;
        node["finishedAt"] = json!(now_timestamp());
        status["finishedAt"] = json!(now_timestamp());
        status["conditions"] =
            json!([{"type": "PodRunning", "status": "False"}, {"type": "Completed", "status": "True"}]);
        if p.phase == "Failed" {
            let message = format!("Error (exit code {code})");
            node["message"] = json!(message);
            status["message"] = json!(message);
        }
        set_workflow_labels(ctx, wf_phase, true);
    } else {
        set_workflow_labels(ctx, wf_phase, false);
    }
    status["nodes"] = json!({ name: node });
    Ok(status)
}

/// The labels Argo's controller keeps on a Workflow (usable in selectors).
fn set_workflow_labels(ctx: &Ctx, phase: &str, completed: bool) {
    let current = (
        str_at(ctx.object, "/metadata/labels/workflows.argoproj.io~1phase"),
        str_at(ctx.object, "/metadata/labels/workflows.argoproj.io~1completed"),
    );
    let completed = if completed { "true" } else { "false" };
    if current == (Some(phase), Some(completed)) {
        return;
    }
    let _ = ctx
        .store
        .modify("workflows.argoproj.io", Some(ctx.namespace), ctx.name, &mut |o| {
            o["metadata"]["labels"]["workflows.argoproj.io/phase"] = json!(phase);
            o["metadata"]["labels"]["workflows.argoproj.io/completed"] = json!(completed);
            Ok(())
        });
}

/// Tekton PipelineRun: each task of `pipelineSpec` as one pod (a container per step), in order.
fn pipelinerun(ctx: &mut Ctx) -> Result<Value, OperatorError> {
    let name = ctx.name;
    let mut conditions = Conditions::from(ctx.prev("/conditions"));
    let succeeded = ctx
        .previous
        .pointer("/conditions/0/status")
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
        .to_owned();
    if succeeded != "Unknown" {
        return Ok(ctx.previous.clone()); // done
    }
    let tasks = ctx
        .object
        .pointer("/spec/pipelineSpec/tasks")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let started = ctx.since("/startTime");
    let child_refs: Vec<Value> = tasks
        .iter()
        .map(|t| {
            let task = t.get("name").and_then(Value::as_str).unwrap_or("task");
            json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": format!("{name}-{task}"), "pipelineTaskName": task})
        })
        .collect();
    let pod_names: Vec<String> = tasks
        .iter()
        .map(|t| {
            format!(
                "{name}-{}-pod",
                t.get("name").and_then(Value::as_str).unwrap_or("task")
            )
        })
        .collect();
    if str_at(ctx.object, "/spec/status")
        .is_some_and(|s| s.starts_with("Cancelled") || s == "StoppedRunFinally")
    {
        ctx.stop_pods(&pod_names);
        conditions.set(
            "Succeeded",
            "False",
            "Cancelled",
            &format!("PipelineRun \"{name}\" was cancelled"),
        );
        return Ok(
            json!({"conditions": conditions.0, "startTime": started, "completionTime": now_timestamp(), "childReferences": child_refs}),
        );
    }
    let (mut completed, mut failed) = (0, 0);
    let mut task_results: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for (task, pod_name) in tasks.iter().zip(&pod_names) {
        let task_name = task.get("name").and_then(Value::as_str).unwrap_or("task");
        let steps = task
            .pointer("/taskSpec/steps")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let containers: Vec<Value> = steps
            .iter()
            .map(|s| {
                let mut c = s.clone();
                c["name"] = json!(format!(
                    "step-{}",
                    s.get("name").and_then(Value::as_str).unwrap_or("step")
                ));
                if let Some(script) = s.get("script").and_then(Value::as_str) {
                    c.as_object_mut().map(|m| m.remove("script"));
                    c["command"] = json!(["sh", "-c", script]);
                }
                if let Some(r) = s.get("computeResources") {
                    c.as_object_mut().map(|m| m.remove("computeResources"));
                    c["resources"] = r.clone();
                }
                c
            })
            .collect();
        let mut labels = ctx.labels();
        labels.insert("tekton.dev/pipelineRun".into(), json!(name));
        labels.insert("tekton.dev/pipelineTask".into(), json!(task_name));
        ctx.ensure_pod(
            pod_name,
            labels,
            &json!({"spec": {"containers": containers}}),
            "Never",
        )?;
        let Some(pod) = ctx.pod(pod_name) else { break };
        if !pod.terminal() {
            break; // the next task waits for this one
        }
        completed += 1;
        if pod.phase == "Failed" {
            failed += 1;
            break;
        }
        if let Some(Ok(Value::Array(results))) = pod.message.as_deref().map(serde_json::from_str::<Value>) {
            let task_map = task_results.entry(task_name.to_owned()).or_default();
            for r in results {
                if let (Some(k), Some(v)) = (r.get("key").and_then(Value::as_str), r.get("value")) {
                    task_map.insert(k.to_owned(), v.clone());
                }
            }
        }
    }
    let total = tasks.len();
    let mut status = json!({"startTime": started, "childReferences": child_refs});
    if failed > 0 {
        let skipped = total - completed;
        conditions.set(
            "Succeeded",
            "False",
            "Failed",
            &format!("Tasks Completed: {completed} (Failed: {failed}, Cancelled 0), Skipped: {skipped}"),
        );
        status["completionTime"] = json!(now_timestamp());
    } else if completed == total {
        conditions.set(
            "Succeeded",
            "True",
            "Succeeded",
            &format!("Tasks Completed: {completed} (Failed: 0, Cancelled 0), Skipped: 0"),
        );
        status["completionTime"] = json!(now_timestamp());
        let results: Vec<Value> = ctx
            .object
            .pointer("/spec/pipelineSpec/results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let reference = r.get("value")?.as_str()?;
                let inner = reference.strip_prefix("$(tasks.")?.strip_suffix(')')?;
                let (task, result) = inner.split_once(".results.")?;
                let value = task_results.get(task)?.get(result)?;
                Some(json!({"name": r.get("name")?, "value": value}))
            })
            .collect();
        if !results.is_empty() {
            status["results"] = json!(results);
        }
    } else {
        conditions.set(
            "Succeeded",
            "Unknown",
            "Running",
            &format!(
                "Tasks Completed: {completed} (Failed: 0, Cancelled 0), Incomplete: {}, Skipped: 0",
                total - completed
            ),
        );
    }
    status["conditions"] = json!(conditions.0);
    Ok(status)
}

/// KubeRay RayJob: the head pod's run stands for the Ray job.
fn rayjob(ctx: &mut Ctx) -> Result<Value, OperatorError> {
    let name = ctx.name;
    let deployment = ctx
        .prev("/jobDeploymentStatus")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    if deployment == "Complete" || deployment == "Failed" {
        return Ok(ctx.previous.clone());
    }
    let uid = objects::uid(ctx.object);
    let suffix: String = uid.chars().filter(char::is_ascii_alphanumeric).take(5).collect();
    let cluster = format!("{name}-raycluster");
    let template = ctx
        .object
        .pointer("/spec/rayClusterSpec/headGroupSpec/template")
        .cloned()
        .unwrap_or_default();
    let head = format!("{name}-head");
    let mut labels = Map::new();
    labels.insert("ray.io/cluster".into(), json!(cluster));
    labels.insert("ray.io/node-type".into(), json!("head"));
    ctx.ensure_pod(&head, labels, &template, "Never")?;
    let pod = ctx.pod(&head);
    let mut status = json!({
        "jobId": format!("{name}-{suffix}"),
        "rayClusterName": cluster,
        "dashboardURL": format!("{cluster}-head-svc.{}.svc.cluster.local:8265", ctx.namespace),
        "startTime": ctx.since("/startTime"),
        "succeeded": 0, "failed": 0, "observedGeneration": 1,
    });
    match pod.as_ref().map(|p| p.phase.as_str()) {
        Some("Running") => {
            status["jobDeploymentStatus"] = json!("Running");
            status["jobStatus"] = json!("RUNNING");
            status["message"] = json!("Job is currently running.");
            status["rayJobInfo"] = json!({"startTime": ctx.since("/rayJobInfo/startTime")});
        }
        Some("Succeeded") => {
            status["jobDeploymentStatus"] = json!("Complete");
            status["jobStatus"] = json!("SUCCEEDED");
            status["message"] = json!("Job finished successfully.");
            status["endTime"] = json!(now_timestamp());
            status["succeeded"] = json!(1);
        }
        Some("Failed") => {
            let p = pod.as_ref().expect("matched");
            let logs = p.log.join("\n");
            status["jobDeploymentStatus"] = json!("Failed");
            status["jobStatus"] = json!("FAILED");
            status["reason"] = json!("AppFailed");
            status["message"] = json!(format!(
                "Job entrypoint command failed with exit code {}, last available logs (truncated to 20,000 chars):\n{}",
                p.exit_code.unwrap_or(1),
                &logs[logs.len().saturating_sub(20_000)..]
            ));
            status["endTime"] = json!(now_timestamp());
            status["failed"] = json!(1);
        }
        _ => {
            status["jobDeploymentStatus"] = json!("Initializing");
            status["jobStatus"] = json!("");
        }
    }
    Ok(status)
}

/// Spark Operator SparkApplication: a driver pod, then `executor.instances` executor pods.
fn spark(ctx: &mut Ctx) -> Result<Value, OperatorError> {
    let name = ctx.name;
    let state = ctx
        .prev("/applicationState/state")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    if state == "COMPLETED" || state == "FAILED" {
        return Ok(ctx.previous.clone());
    }
    let spec = ctx.object.get("spec").cloned().unwrap_or_default();
    let image = spec.get("image").cloned().unwrap_or(json!(""));
    let role = |role: &str, container: &str| {
        let part = spec.get(role).cloned().unwrap_or_default();
        let mut c = json!({"name": container, "image": image});
        if let Some(env) = part.get("env") {
            c["env"] = env.clone();
        }
        let labels = part.get("labels").cloned().unwrap_or(json!({}));
        json!({"metadata": {"labels": labels}, "spec": {"containers": [c]}})
    };
    let driver = format!("{name}-driver");
    let mut labels = Map::new();
    labels.insert("spark-role".into(), json!("driver"));
    labels.insert("sparkoperator.k8s.io/app-name".into(), json!(name));
    ctx.ensure_pod(
        &driver,
        labels,
        &role("driver", "spark-kubernetes-driver"),
        "Never",
    )?;
    let driver_pod = ctx.pod(&driver);
    let instances = spec
        .pointer("/executor/instances")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let executors: Vec<String> = (1..=instances).map(|i| format!("{name}-exec-{i}")).collect();
    let driver_phase = driver_pod.as_ref().map(|p| p.phase.clone()).unwrap_or_default();
    if driver_phase == "Running" {
        for executor in &executors {
            let mut labels = Map::new();
            labels.insert("spark-role".into(), json!("executor"));
            labels.insert("sparkoperator.k8s.io/app-name".into(), json!(name));
            ctx.ensure_pod(
                executor,
                labels,
                &role("executor", "spark-kubernetes-executor"),
                "Never",
            )?;
        }
    }
    let mut executor_state = ctx
        .prev("/executorState")
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    for executor in &executors {
        if let Some(p) = ctx.pod(executor) {
            let s = match p.phase.as_str() {
                "Running" => "RUNNING",
                "Succeeded" => "COMPLETED",
                "Failed" => "FAILED",
                _ => "PENDING",
            };
            // An executor stopped with its driver keeps the state it had.
            let stopping =
                driver_pod.as_ref().is_some_and(PodView::terminal) && executor_state.contains_key(executor);
            if !stopping {
                executor_state.insert(executor.clone(), json!(s));
            }
        }
    }
    let mut status = json!({
        "sparkApplicationId": format!("spark-{}", objects::uid(ctx.object).replace('-', "")),
        "submissionID": objects::uid(ctx.object),
        "lastSubmissionAttemptTime": ctx.since("/lastSubmissionAttemptTime"),
        "terminationTime": null,
        "driverInfo": {"podName": driver, "webUIServiceName": format!("{name}-ui-svc"), "webUIPort": 4040},
        "submissionAttempts": 1,
        "executionAttempts": 1,
    });
    let app_state = match driver_pod.as_ref() {
        Some(p) if p.phase == "Succeeded" => json!({"state": "COMPLETED"}),
        Some(p) if p.phase == "Failed" => json!({
            "state": "FAILED",
            "errorMessage": format!("driver container failed with ExitCode: {}, Reason: Error", p.exit_code.unwrap_or(1)),
        }),
        Some(p) if p.phase == "Running" => json!({"state": "RUNNING"}),
        _ => json!({"state": "SUBMITTED"}),
    };
    if driver_pod.as_ref().is_some_and(PodView::terminal) {
        for executor in &executors {
            let state = executor_state
                .get(executor)
                .and_then(Value::as_str)
                .unwrap_or("PENDING");
            if state == "RUNNING" || state == "PENDING" {
                executor_state.insert(
                    executor.clone(),
                    json!(if app_state["state"] == "COMPLETED" {
                        "COMPLETED"
                    } else {
                        "FAILED"
                    }),
                );
            }
        }
        ctx.stop_pods(&executors);
        status["terminationTime"] = json!(now_timestamp());
    }
    status["applicationState"] = app_state;
    status["executorState"] = Value::Object(executor_state);
    Ok(status)
}
