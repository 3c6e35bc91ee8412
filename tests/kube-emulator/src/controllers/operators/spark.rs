//! The Spark Operator's SparkApplication (`sparkoperator.k8s.io/v1beta2`): a driver pod, then
//! `executor.instances` executor pods once the driver runs; the status carries
//! `applicationState`, `executorState`, `driverInfo` and times.
//!
//! It must not write pod status nor delete the objects (see the parent module).

use serde_json::{Map, Value, json};

use super::{Ctx, OperatorError, PodView};
use crate::controllers::objects;
use crate::store::now_timestamp;

/// Spark Operator SparkApplication: a driver pod, then `executor.instances` executor pods.
pub(super) fn spark(ctx: &mut Ctx) -> Result<Value, OperatorError> {
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
