//! The Kubeflow operators: the Training Operator v1 (TFJob, PyTorchJob, MPIJob, `kubeflow.org/v1`)
//! and Kubeflow Trainer (TrainJob, `trainer.kubeflow.org/v1alpha1`). One pod per replica; the
//! status carries the upstream `JobStatus` conditions (Created, Running, Succeeded, Failed),
//! `replicaStatuses` and times, or, for a TrainJob, `jobsStatus` with `Complete`/`Failed`.
//!
//! It must not write pod status nor delete the objects (see the parent module).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Conditions, Ctx, OperatorError, PodView};

fn restart_policy(value: Option<&str>) -> &'static str {
    match value {
        Some("OnFailure") => "OnFailure",
        Some("Always") => "Always",
        // ExitCode: the operator decides per exit code; the pod itself never restarts.
        _ => "Never",
    }
}

/// TFJob, PyTorchJob and MPIJob (Training Operator v1).
pub(super) fn kubeflow(
    ctx: &mut Ctx,
    kind: &str,
    specs_field: &str,
    deciding: &[&str],
) -> Result<Value, OperatorError> {
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
pub(super) fn trainjob(ctx: &mut Ctx) -> Result<Value, OperatorError> {
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
