//! Tekton Pipelines' PipelineRun (`tekton.dev/v1`): each task of `pipelineSpec` runs as one pod
//! (a `step-<name>` container per step), one task after another; the status carries the
//! `Succeeded` condition with Tekton's reasons and messages, and `results` read from a task's
//! termination message. `spec.status: Cancelled` stops the pods.
//!
//! It must not write pod status nor delete the objects (see the parent module).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Conditions, Ctx, OperatorError};
use crate::controllers::objects::str_at;
use crate::store::now_timestamp;

/// Tekton PipelineRun: each task of `pipelineSpec` as one pod (a container per step), in order.
pub(super) fn pipelinerun(ctx: &mut Ctx) -> Result<Value, OperatorError> {
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
