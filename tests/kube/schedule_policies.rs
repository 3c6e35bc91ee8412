//! A schedule's concurrency policies on Kubernetes: the scenarios of
//! `tests/scenarios/schedule_concurrency.rs` (which `tests/schedules.rs` runs on the local
//! executor), with runs whose pods the emulated kubelet holds RUNNING, and what the cluster
//! shows of them: FORBID sees a run RUNNING on the cluster as active; REPLACE deletes the
//! replaced run's Job and pods.

use serde_json::json;

use crate::common::cluster::Cluster;
use crate::schedule_concurrency::{
    forbid_skips_ticks_while_a_run_is_active, replace_cancels_the_active_run_then_starts_the_next,
};
use crate::support::input;

/// Flags that let a test's rules fire every second.
const FAST: &[&str] = &["--schedule-min-interval-secs", "1"];

#[tokio::test]
async fn forbid_skips_ticks_while_a_job_runs_on_the_cluster() {
    let Some(cluster) = Cluster::emulated("it holds the runs' pods RUNNING through EMULATOR_GATE").await
    else {
        return;
    };
    let server = cluster.jobgate(FAST).await;
    let seen =
        forbid_skips_ticks_while_a_run_is_active(&server, input(&[("EMULATOR_GATE", "held")], json!({})))
            .await;
    for job in [&seen.blocking, &seen.next] {
        let name = format!("jobgate-{job}");
        cluster
            .until(&format!("the Job of cancelled run {job} is deleted"), || async {
                cluster.jobs().get_opt(&name).await.unwrap().is_none()
            })
            .await;
    }
}

#[tokio::test]
async fn replace_deletes_the_replaced_jobs_kubernetes_job() {
    let Some(cluster) = Cluster::emulated("it holds the runs' pods RUNNING through EMULATOR_GATE").await
    else {
        return;
    };
    let server = cluster.jobgate(FAST).await;
    let seen = replace_cancels_the_active_run_then_starts_the_next(
        &server,
        input(&[("EMULATOR_GATE", "held")], json!({})),
    )
    .await;
    for job in [&seen.running, &seen.ticked] {
        let name = format!("jobgate-{job}");
        cluster
            .until(&format!("the Job of replaced run {job} is deleted"), || async {
                cluster.jobs().get_opt(&name).await.unwrap().is_none()
            })
            .await;
        cluster
            .until(&format!("the pods of replaced run {job} are deleted"), || async {
                cluster.pods_of(job).await.is_empty()
            })
            .await;
    }
}
