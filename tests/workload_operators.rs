//! Every built-in workload template end to end: jobgate, in the test's process
//! (`Server::start`), creates the kind's
//! object on the Kubernetes API emulator, whose simulated operator (Kubeflow Training Operator
//! and Trainer, Argo, Tekton, KubeRay, Spark Operator) runs its pods and writes the upstream
//! status shapes; jobgate must decode them into RUNNING → SUCCEEDED (with the result and the
//! pods' logs), a failure with its reason and message, and a cancel that stops the workload.
//! What a pod does is scripted through `EMULATOR_*` variables in the job's `env`.

mod common;

use common::cluster::Cluster;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// One built-in template and what its operator says.
struct Case {
    template: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    /// Input besides image, command and env.
    extra: Value,
    /// The failed job's condition reason, and a piece of its message.
    failure: (&'static str, &'static str),
    /// The result of a successful job.
    result: Option<&'static str>,
    /// How the cancelled object ends: deleted, or kept and stopped (the patch's field).
    cancel_patch: Option<(&'static str, Value)>,
}

impl Case {
    fn objects(&self, cluster: &Cluster) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(self.group, self.version, self.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, self.plural);
        Api::namespaced_with(cluster.client.clone(), cluster.namespace(), &resource)
    }

    fn input(&self, env: &[(&str, &str)]) -> Value {
        let mut input = json!({
            "template": self.template,
            "image": "example/work:1",
            "command": ["python3", "main.py"],
            "env": env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
        });
        if self.template == "sparkapplication" {
            input.as_object_mut().unwrap().remove("command");
        }
        input
            .as_object_mut()
            .unwrap()
            .extend(self.extra.as_object().unwrap().clone());
        input
    }
}

const FIELDS: &str = "id phase message result logs(tailLines: 50) progress { succeeded failed active total } \
    conditions { type status reason message }";

async fn run_case(case: Case) {
    let Some(cluster) = Cluster::emulated_as("it serves kinds whose operators the emulator simulates, scripts its pods through EMULATOR_EXIT_CODE, EMULATOR_GATE, EMULATOR_LOG, EMULATOR_RUN_MS, EMULATOR_TERMINATION_MESSAGE", "workload-kinds").await else {
        return;
    };
    cluster.emu().register_workload_crds(&[case.kind]).unwrap();
    let server = cluster.jobgate(&[]).await;
    let succeeding = server
        .submit(case.input(&[
            ("EMULATOR_RUN_MS", "300"),
            ("EMULATOR_LOG", &format!("hello from {}", case.template)),
            (
                "EMULATOR_TERMINATION_MESSAGE",
                if case.template == "tekton-pipelinerun" {
                    r#"[{"key":"result","value":"42"}]"#
                } else {
                    "42"
                },
            ),
        ]))
        .await;
    let failing = server
        .submit(case.input(&[
            ("EMULATOR_EXIT_CODE", "3"),
            ("EMULATOR_LOG", "Traceback: it broke"),
        ]))
        .await;
    let gate = format!("hold-{}", case.template);
    let cancelled = server.submit(case.input(&[("EMULATOR_GATE", &gate)])).await;

    // Success: RUNNING first (seen over the subscription's history), then SUCCEEDED.
    let done = server
        .job_until(&succeeding, FIELDS, "SUCCEEDED", |j| j["phase"] == "SUCCEEDED")
        .await;
    let history = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { events { phase } } }",
            json!({"id": succeeding}),
        )
        .await;
    let phases: Vec<&str> = history["job"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["phase"].as_str().unwrap())
        .collect();
    let running = phases.iter().position(|p| *p == "RUNNING");
    let succeeded = phases.iter().position(|p| *p == "SUCCEEDED");
    assert!(
        running.is_some() && running < succeeded,
        "{}: went through {phases:?}",
        case.template
    );
    if let Some(result) = case.result {
        assert!(
            done["result"].as_str().is_some_and(|r| r.contains(result)),
            "{}: result {}",
            case.template,
            done["result"]
        );
    }
    let logs = done["logs"].as_str().unwrap();
    assert!(
        logs.contains(&format!("hello from {}", case.template)),
        "{}: logs {logs:?}",
        case.template
    );
    assert!(
        done["progress"]["succeeded"].as_i64().unwrap() >= 1,
        "{}: {done}",
        case.template
    );
    let object = case
        .objects(&cluster)
        .get(&format!("jobgate-{succeeding}"))
        .await
        .unwrap();
    assert_eq!(
        object.metadata.labels.as_ref().unwrap()["jobgate.io/job-id"],
        succeeding
    );

    // Failure, with the operator's reason and message.
    let failed = server
        .job_until(&failing, FIELDS, "FAILED", |j| j["phase"] == "FAILED")
        .await;
    let condition = common::condition(&failed, "Failed").unwrap();
    assert_eq!(condition["reason"], case.failure.0, "{}: {failed}", case.template);
    assert!(
        failed["message"].as_str().unwrap().contains(case.failure.1),
        "{}: message {}",
        case.template,
        failed["message"]
    );
    assert_eq!(failed["result"], Value::Null);

    // Cancel: CANCELLED at once; the workload is stopped the template's way and its pods go.
    server
        .job_until(&cancelled, FIELDS, "RUNNING", |j| j["phase"] == "RUNNING")
        .await;
    assert_eq!(server.cancel(&cancelled).await, "CANCELLED");
    let name = format!("jobgate-{cancelled}");
    match &case.cancel_patch {
        None => {
            cluster
                .until("the cancelled object is deleted", || async {
                    case.objects(&cluster).get_opt(&name).await.unwrap().is_none()
                })
                .await
        }
        Some((pointer, value)) => {
            cluster
                .until("the cancelled object is stopped", || async {
                    case.objects(&cluster)
                        .get(&name)
                        .await
                        .unwrap()
                        .data
                        .pointer(pointer)
                        .is_some_and(|v| v == value)
                })
                .await
        }
    }
    cluster
        .until("the cancelled job's pods are gone", || async {
            cluster.pods_of(&cancelled).await.is_empty()
        })
        .await;
    assert_eq!(server.job_with(&cancelled, FIELDS).await["phase"], "CANCELLED");
}

#[tokio::test]
async fn pytorchjob() {
    run_case(Case {
        template: "pytorchjob",
        group: "kubeflow.org",
        version: "v1",
        kind: "PyTorchJob",
        plural: "pytorchjobs",
        extra: json!({"parameters": {"workers": 2, "restartPolicy": "Never"}}),
        // Every replica fails: the operator names whichever replica type it finds failed first
        // (Master or Worker), as Kubeflow's does.
        failure: ("PyTorchJobFailed", "replica(s) failed"),
        result: Some("42"),
        cancel_patch: None,
    })
    .await;
}

#[tokio::test]
async fn tfjob() {
    run_case(Case {
        template: "tfjob",
        group: "kubeflow.org",
        version: "v1",
        kind: "TFJob",
        plural: "tfjobs",
        extra: json!({"parameters": {"workers": 2, "ps": 1, "restartPolicy": "Never"}}),
        failure: ("TFJobFailed", "replica(s) failed"),
        result: Some("42"),
        cancel_patch: None,
    })
    .await;
}

#[tokio::test]
async fn mpijob() {
    run_case(Case {
        template: "mpijob",
        group: "kubeflow.org",
        version: "v1",
        kind: "MPIJob",
        plural: "mpijobs",
        extra: json!({"parameters": {"workers": 2}}),
        failure: ("MPIJobFailed", "replica(s) failed"),
        result: Some("42"),
        cancel_patch: None,
    })
    .await;
}

#[tokio::test]
async fn trainjob() {
    run_case(Case {
        template: "trainjob",
        group: "trainer.kubeflow.org",
        version: "v1alpha1",
        kind: "TrainJob",
        plural: "trainjobs",
        extra: json!({"parameters": {"numNodes": 2}}),
        failure: ("FailedJobs", "jobset failed due to one or more job failures"),
        result: Some("42"),
        cancel_patch: None,
    })
    .await;
}

#[tokio::test]
async fn argo_workflow() {
    run_case(Case {
        template: "argo-workflow",
        group: "argoproj.io",
        version: "v1alpha1",
        kind: "Workflow",
        plural: "workflows",
        extra: json!({}),
        failure: ("Failed", "Error (exit code 3)"),
        result: Some("42"),
        cancel_patch: Some(("/spec/shutdown", json!("Terminate"))),
    })
    .await;
}

#[tokio::test]
async fn tekton_pipelinerun() {
    run_case(Case {
        template: "tekton-pipelinerun",
        group: "tekton.dev",
        version: "v1",
        kind: "PipelineRun",
        plural: "pipelineruns",
        extra: json!({}),
        failure: ("Failed", "Tasks Completed: 1 (Failed: 1"),
        result: Some(r#"[{"name":"result","value":"42"}]"#),
        cancel_patch: Some(("/spec/status", json!("Cancelled"))),
    })
    .await;
}

#[tokio::test]
async fn rayjob() {
    run_case(Case {
        template: "rayjob",
        group: "ray.io",
        version: "v1",
        kind: "RayJob",
        plural: "rayjobs",
        extra: json!({}),
        failure: ("AppFailed", "Job entrypoint command failed with exit code 3"),
        result: Some("Job finished successfully."),
        cancel_patch: None,
    })
    .await;
}

#[tokio::test]
async fn sparkapplication() {
    run_case(Case {
        template: "sparkapplication",
        group: "sparkoperator.k8s.io",
        version: "v1beta2",
        kind: "SparkApplication",
        plural: "sparkapplications",
        extra: json!({
            "parallelism": 2,
            "args": ["1000"],
            "parameters": {"mainClass": "org.apache.spark.examples.SparkPi", "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar"},
        }),
        failure: ("FAILED", "driver container failed with ExitCode: 3, Reason: Error"),
        result: Some("42"),
        cancel_patch: None,
    })
    .await;
}
