//! Simulated operators of the workload CRDs jobgate's templates create: the Kubeflow Training
//! Operator (TFJob, PyTorchJob, MPIJob), Kubeflow Trainer (TrainJob), Argo Workflows
//! (Workflow), Tekton Pipelines (PipelineRun), KubeRay (RayJob) and the Spark Operator
//! (SparkApplication).
//!
//! Like the real operators, each creates the object's pods (ownerReferences with `controller:
//! true`, so the garbage collector removes them with the object), lets the kubelet run them (so
//! `EMULATOR_*` variables in a container's `env` script its outcome, log and termination
//! message), and writes the object's `status` from its pods' phases in the shapes the upstream
//! projects' CRD types and controllers define: conditions, states, counts, messages, results
//! (the emulator's README lists the fields each kind gets). A kind whose CRD is not registered
//! has no objects, so its simulation does nothing.
//!
//! Simplified, on purpose: one pod per replica with no services or gang scheduling; Argo runs
//! a `container` entrypoint only (other templates end `Error`); Tekton runs its tasks one after
//! another; a RayJob's head pod stands for the Ray job (no workers, no submitter Job); Spark
//! executors are plain pods; suspend is not simulated. A malformed spec never panics: the
//! object gets a failure status or is skipped.
//!
//! It must not write pod status (the kubelet's) nor delete the objects (their owners' and GC's).
//!
//! # Layout
//! - this module: the reconciler shared by every kind (keys, the pods of an object, conditions,
//!   the status write).
//! - `kubeflow`: TFJob, PyTorchJob, MPIJob and TrainJob.
//! - `argo`: Workflow.
//! - `tekton`: PipelineRun.
//! - `kuberay`: RayJob.
//! - `spark`: SparkApplication.

mod argo;
mod kubeflow;
mod kuberay;
mod spark;
mod tekton;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Shared;
use super::objects::{self, is_deleting, pod_is_terminal, str_at};
use super::runner::Reconciler;
use crate::store::{Change, ChangeKind, Store, StoreError, now_timestamp};

use argo::workflow;
use kubeflow::{kubeflow, trainjob};
use kuberay::rayjob;
use spark::spark;
use tekton::pipelinerun;

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
