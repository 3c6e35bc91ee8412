//! The flags of `jobgate submit` and `jobgate schedule create` beyond a name, an image and a
//! command (the job's args, counts, deadline, resources, service account, TTL, dependencies,
//! Kueue queue, retry policy, idempotency key), run as the real binary against a jobgate on
//! the Kubernetes API emulator with Kueue: each must reach the stored job, as the server
//! answers for it over GraphQL.

mod common;

use common::cluster::Cluster;
use common::{Server, cli};
use serde_json::json;

/// Runs the client against `server`; it must exit 0. Returns its standard output, trimmed.
async fn ok(server: &Server, args: &[&str]) -> String {
    cli::ok(server, args).await.trim().to_owned()
}

/// A cluster with Kueue and a LocalQueue `team-a`; `None` (skipped) on a real cluster.
async fn kueue_cluster() -> Option<Cluster> {
    let cluster = Cluster::emulated_as("it installs the emulator's Kueue", "kueue").await?;
    cluster.emu().register_kueue().unwrap();
    cluster
        .emu()
        .create_kueue_queue(cluster.namespace(), "team-a", "cluster-queue", 4)
        .unwrap();
    Some(cluster)
}

const SPEC: &str = "spec { image command args env { name value } parallelism completions backoffLimit \
     activeDeadlineSeconds parameters idempotencyKey resources { requests { cpu memory } limits { cpu memory } } \
     serviceAccountName ttlSecondsAfterFinished queueName dependsOn \
     retryPolicy { rules { action exitCodes { operator values } } backoffLimitPerIndex maxFailedIndexes } }";

#[tokio::test]
async fn every_flag_of_submit_reaches_the_stored_job() {
    let Some(cluster) = kueue_cluster().await else {
        return;
    };
    let server = cluster
        .jobgate(&["--kueue", "--service-accounts", "trainer"])
        .await;
    let first = server
        .submit(json!({"name": "first", "image": "busybox:1.36", "command": ["true"]}))
        .await;
    let policy = r#"{"rules":[{"action":"FAIL_JOB","exitCodes":{"operator":"IN","values":[42]}}],"backoffLimitPerIndex":1}"#;
    let args = [
        "submit",
        "--name",
        "flags",
        "--image",
        "busybox:1.36",
        "--arg=--verbose",
        "--arg",
        "two words",
        "--env",
        "MODE=fast",
        "--parallelism",
        "2",
        "--completions",
        "4",
        "--backoff-limit",
        "3",
        "--active-deadline-seconds",
        "600",
        "--cpu-request",
        "250m",
        "--memory-request",
        "64Mi",
        "--cpu-limit",
        "1",
        "--memory-limit",
        "128Mi",
        "--service-account",
        "trainer",
        "--ttl-seconds-after-finished",
        "120",
        "--depends-on",
        &first,
        "--queue",
        "team-a",
        "--retry-policy",
        policy,
        "--idempotency-key",
        "flags-once",
        "--",
        "sh",
        "-c",
        "echo hi",
    ];
    let id = ok(&server, &args).await;
    let job = server.job_with(&id, SPEC).await;
    assert_eq!(
        job["spec"],
        json!({
            "image": "busybox:1.36",
            "command": ["sh", "-c", "echo hi"],
            "args": ["--verbose", "two words"],
            "env": [{"name": "MODE", "value": "fast"}],
            "parallelism": 2,
            "completions": 4,
            "backoffLimit": 3,
            "activeDeadlineSeconds": 600,
            "parameters": null,
            "idempotencyKey": "flags-once",
            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
            "serviceAccountName": "trainer",
            "ttlSecondsAfterFinished": 120,
            "queueName": "team-a",
            "dependsOn": [first],
            "retryPolicy": {
                "rules": [{"action": "FAIL_JOB", "exitCodes": {"operator": "IN", "values": [42]}}],
                "backoffLimitPerIndex": 1,
                "maxFailedIndexes": null,
            },
        })
    );
    // The same key and the same job: the first job again, not a second one.
    assert_eq!(ok(&server, &args).await, id);
}

#[tokio::test]
async fn schedule_create_takes_the_same_flags_over_its_file() {
    let Some(cluster) = kueue_cluster().await else {
        return;
    };
    let server = cluster.jobgate(&["--kueue"]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nightly.toml");
    std::fs::write(
        &file,
        "name = \"nightly\"\ncron = \"0 3 1 1 *\"\n\n[job]\nimage = \"busybox:1.36\"\ncommand = [\"true\"]\n\n\
         [job.resources.limits]\nmemory = \"128Mi\"\n",
    )
    .unwrap();
    let id = ok(
        &server,
        &[
            "schedule",
            "create",
            "--file",
            file.to_str().unwrap(),
            "--parallelism",
            "2",
            "--cpu-request",
            "250m",
            "--queue",
            "team-a",
            "--arg",
            "x",
        ],
    )
    .await;
    // The job a run of it starts, as the server stored it.
    let job_id = ok(&server, &["schedule", "trigger", &id]).await;
    let spec = &server.job_with(&job_id, SPEC).await["spec"];
    assert_eq!(spec["parallelism"], 2, "{spec}");
    assert_eq!(spec["queueName"], "team-a", "{spec}");
    assert_eq!(spec["args"], json!(["x"]), "{spec}");
    // A resource flag sets its one quantity; the file's others stay.
    assert_eq!(
        spec["resources"],
        json!({"requests": {"cpu": "250m", "memory": null}, "limits": {"cpu": null, "memory": "128Mi"}}),
        "{spec}"
    );
}
