//! Argo Workflows' Workflow (`argoproj.io/v1alpha1`): a `container` entrypoint template runs as
//! one pod; the status carries `phase`, `progress`, `nodes` (with outputs), `message` and the
//! `PodRunning`/`Completed` conditions, and the object gets the `workflows.argoproj.io/phase` and
//! `…/completed` labels the workflow controller sets. `spec.shutdown` stops the pods.
//!
//! It must not write pod status nor delete the objects (see the parent module).

use serde_json::{Map, Value, json};

use super::{Ctx, OperatorError};
use crate::controllers::objects::str_at;
use crate::store::now_timestamp;

/// Argo Workflow: a `container` entrypoint template as one pod.
pub(super) fn workflow(ctx: &mut Ctx) -> Result<Value, OperatorError> {
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
