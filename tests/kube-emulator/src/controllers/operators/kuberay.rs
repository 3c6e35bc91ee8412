//! KubeRay's RayJob (`ray.io/v1`): the head pod's run stands for the Ray job; the status carries
//! `jobDeploymentStatus`, `jobStatus`, `jobId`, `rayClusterName`, times and counts.
//!
//! It must not write pod status nor delete the objects (see the parent module).

use serde_json::{Map, Value, json};

use super::{Ctx, OperatorError};
use crate::controllers::objects;
use crate::store::now_timestamp;

/// KubeRay RayJob: the head pod's run stands for the Ray job.
pub(super) fn rayjob(ctx: &mut Ctx) -> Result<Value, OperatorError> {
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
