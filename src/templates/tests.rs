//! The built-in templates against the upstream status shapes (statuses as each kind's operator
//! writes them; docs/TEMPLATES.md, "Status shapes"), and the load-time checks that stop jobgate
//! on a bad template.

use serde_json::{Value, json};

use super::*;
use crate::model::{JobPhase, JobSpec, MappedPhase, WorkloadStatus};

fn builtin(name: &str) -> Arc<WorkloadTemplate> {
    TemplateSet::load(None).unwrap().get(name).unwrap().clone()
}

fn decode(template: &str, object: Value) -> WorkloadStatus {
    builtin(template).status.decode(&object, &MappedPhase::default())
}

fn phase(s: &WorkloadStatus) -> (JobPhase, Option<&str>) {
    let m = s.mapped.as_ref().unwrap();
    (m.phase, m.reason.as_deref())
}

#[test]
fn every_builtin_template_loads() {
    let set = TemplateSet::load(None).unwrap();
    let names: Vec<&str> = set.names().collect();
    assert_eq!(
        names,
        [
            "argo-workflow",
            "mpijob",
            "pytorchjob",
            "rayjob",
            "sparkapplication",
            "tekton-pipelinerun",
            "tfjob",
            "trainjob"
        ]
    );
}

#[test]
fn pytorchjob_running_succeeded_and_failed() {
    let spec = json!({"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}});
    let running = decode(
        "pytorchjob",
        json!({"spec": spec, "status": {"conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "PyTorchJob gw-7xk2p is created."},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "PyTorchJob gw-7xk2p is running."}],
          "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},
          "startTime": "2025-06-02T09:00:01Z"}}),
    );
    assert_eq!(phase(&running), (JobPhase::Running, Some("PyTorchJobRunning")));
    assert_eq!((running.active, running.total), (3, Some(3)));
    assert!(running.start_time.is_some());
    assert_eq!(running.conditions.len(), 2, "native conditions are copied");

    let failed = decode(
        "pytorchjob",
        json!({"spec": spec, "status": {"conditions": [
            {"type": "Created", "status": "True"},
            {"type": "Running", "status": "False"},
            {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "Job gw-7xk2p has failed because it has reached the specified backoff limit"}],
          "replicaStatuses": {"Master": {"failed": 1}, "Worker": {}}}}),
    );
    let m = failed.mapped.as_ref().unwrap();
    assert_eq!(m.phase, JobPhase::Failed);
    assert_eq!(m.reason.as_deref(), Some("PyTorchJobFailed"));
    assert!(m.message.as_deref().unwrap().contains("backoff limit"));
    assert_eq!(failed.failed, 1);

    let created = decode("pytorchjob", json!({"spec": spec, "status": {}}));
    assert_eq!(phase(&created).0, JobPhase::Pending);
}

#[test]
fn trainjob_runs_once_its_node_job_is_ready() {
    let pending = decode(
        "trainjob",
        json!({"status": {"jobsStatus": [{"name": "node", "ready": 0, "active": 1}]}}),
    );
    assert_eq!(phase(&pending).0, JobPhase::Pending);
    let running = decode(
        "trainjob",
        json!({"status": {"jobsStatus": [{"name": "node", "ready": 1, "active": 1}]}}),
    );
    assert_eq!(phase(&running), (JobPhase::Running, Some("Running")));
    let done = decode(
        "trainjob",
        json!({"status": {"conditions": [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed successfully"}],
          "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}]}}),
    );
    assert_eq!(phase(&done), (JobPhase::Succeeded, Some("AllJobsCompleted")));
    assert_eq!((done.succeeded, done.total), (1, Some(1)));
}

#[test]
fn argo_workflow_phases_progress_result_and_shutdown() {
    let running = decode(
        "argo-workflow",
        json!({"status": {"phase": "Running", "startedAt": "2025-06-02T09:00:00Z", "progress": "0/1",
          "nodes": {"gw": {"type": "Pod", "phase": "Running"}}}}),
    );
    assert_eq!(phase(&running), (JobPhase::Running, Some("Running")));
    assert_eq!(
        (running.succeeded, running.active, running.total),
        (0, 1, Some(1))
    );
    let done = decode(
        "argo-workflow",
        json!({"status": {"phase": "Succeeded", "progress": "1/1", "finishedAt": "2025-06-02T09:00:31Z",
          "nodes": {"gw": {"type": "Pod", "phase": "Succeeded", "outputs": {"result": "42", "exitCode": "0"}}}}}),
    );
    assert_eq!(phase(&done).0, JobPhase::Succeeded);
    assert_eq!(done.result.as_deref(), Some("42"));
    assert_eq!(done.succeeded, 1);
    assert!(done.completion_time.is_some());
    let failed = decode(
        "argo-workflow",
        json!({"status": {"phase": "Failed", "message": "Error (exit code 1)", "progress": "0/1"}}),
    );
    let m = failed.mapped.unwrap();
    assert_eq!(
        (m.phase, m.reason.as_deref(), m.message.as_deref()),
        (JobPhase::Failed, Some("Failed"), Some("Error (exit code 1)"))
    );
    assert_eq!(failed.result, None, "a failed workload has no result");
    let stopped = decode(
        "argo-workflow",
        json!({"spec": {"shutdown": "Terminate"}, "status": {"phase": "Failed", "message": "Stopped with strategy 'Terminate'"}}),
    );
    assert_eq!(phase(&stopped).0, JobPhase::Cancelled);
}

#[test]
fn tekton_pipelinerun_condition_reasons_and_task_counts() {
    let cond = |status: &str, reason: &str, message: &str| {
        json!({"status": {"conditions": [{"type": "Succeeded", "status": status, "reason": reason, "message": message}],
          "results": [{"name": "result", "value": "42"}]}})
    };
    let running = decode(
        "tekton-pipelinerun",
        cond(
            "Unknown",
            "Running",
            "Tasks Completed: 1 (Failed: 0, Cancelled 0), Incomplete: 2, Skipped: 0",
        ),
    );
    assert_eq!(phase(&running), (JobPhase::Running, Some("Running")));
    assert_eq!(
        (running.succeeded, running.active, running.total),
        (1, 2, Some(3))
    );
    let pending = decode("tekton-pipelinerun", cond("Unknown", "PipelineRunPending", ""));
    assert_eq!(phase(&pending).0, JobPhase::Pending);
    let done = decode(
        "tekton-pipelinerun",
        cond(
            "True",
            "Succeeded",
            "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0",
        ),
    );
    assert_eq!(phase(&done).0, JobPhase::Succeeded);
    assert_eq!(
        done.result.as_deref(),
        Some(r#"[{"name":"result","value":"42"}]"#)
    );
    assert_eq!((done.succeeded, done.total), (1, Some(1)));
    let failed = decode(
        "tekton-pipelinerun",
        cond(
            "False",
            "Failed",
            "Tasks Completed: 1 (Failed: 1, Cancelled 0), Skipped: 0",
        ),
    );
    assert_eq!(phase(&failed), (JobPhase::Failed, Some("Failed")));
    assert_eq!((failed.succeeded, failed.failed), (0, 1));
    let timeout = decode(
        "tekton-pipelinerun",
        cond(
            "False",
            "PipelineRunTimeout",
            "PipelineRun \"gw\" failed to finish within \"2h0m0s\"",
        ),
    );
    assert_eq!(phase(&timeout), (JobPhase::Failed, Some("PipelineRunTimeout")));
    let cancelled = decode(
        "tekton-pipelinerun",
        cond("False", "Cancelled", "PipelineRun \"gw\" was cancelled"),
    );
    assert_eq!(phase(&cancelled).0, JobPhase::Cancelled);
    let fresh = decode("tekton-pipelinerun", json!({"status": {}}));
    assert_eq!(phase(&fresh).0, JobPhase::Pending);
}

#[test]
fn rayjob_deployment_and_job_status() {
    let running = decode(
        "rayjob",
        json!({"status": {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running", "message": "Job is currently running.", "startTime": "2025-06-02T09:00:01Z"}}),
    );
    assert_eq!(phase(&running).0, JobPhase::Running);
    let cluster_up = decode(
        "rayjob",
        json!({"status": {"jobStatus": "PENDING", "jobDeploymentStatus": "Running"}}),
    );
    assert_eq!(phase(&cluster_up).0, JobPhase::Pending);
    let done = decode(
        "rayjob",
        json!({"status": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete", "message": "Job finished successfully.", "succeeded": 1, "endTime": "2025-06-02T09:05:40Z"}}),
    );
    assert_eq!(phase(&done).0, JobPhase::Succeeded);
    assert_eq!(done.result.as_deref(), Some("Job finished successfully."));
    let failed = decode(
        "rayjob",
        json!({"status": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "reason": "AppFailed",
          "message": "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\nTraceback", "failed": 1}}),
    );
    let m = failed.mapped.as_ref().unwrap();
    assert_eq!(
        (m.phase, m.reason.as_deref()),
        (JobPhase::Failed, Some("AppFailed"))
    );
    assert!(m.message.as_deref().unwrap().contains("exit code 1"));
    assert_eq!(failed.failed, 1);
}

#[test]
fn sparkapplication_states_and_executors() {
    let running = decode(
        "sparkapplication",
        json!({"spec": {"executor": {"instances": 2}}, "status": {"applicationState": {"state": "RUNNING"},
          "executorState": {"a-exec-1": "RUNNING", "a-exec-2": "PENDING"}, "lastSubmissionAttemptTime": "2025-06-02T09:00:03Z", "terminationTime": null}}),
    );
    assert_eq!(phase(&running), (JobPhase::Running, Some("RUNNING")));
    assert_eq!((running.active, running.total), (2, Some(2)));
    assert!(running.start_time.is_some() && running.completion_time.is_none());
    let failed = decode(
        "sparkapplication",
        json!({"status": {"applicationState": {"state": "FAILED", "errorMessage": "driver container failed with ExitCode: 1, Reason: Error"},
          "executorState": {"a-exec-1": "FAILED"}}}),
    );
    let m = failed.mapped.as_ref().unwrap();
    assert_eq!(
        m.message.as_deref(),
        Some("driver container failed with ExitCode: 1, Reason: Error")
    );
    assert_eq!(failed.failed, 1);
}

#[test]
fn a_status_nobody_understands_keeps_the_phase_and_says_why() {
    let previous = MappedPhase {
        phase: JobPhase::Running,
        reason: Some("Running".into()),
        message: None,
    };
    let t = builtin("argo-workflow");
    for weird in [
        json!({"status": {"phase": "Hibernating"}}),
        json!({"status": {"phase": ["not", "text"], "progress": 7, "nodes": "oops"}}),
        json!({"status": "garbage"}),
        json!([1, 2, 3]),
    ] {
        let s = t.status.decode(&weird, &previous);
        assert_eq!(s.mapped.as_ref(), Some(&previous), "{weird}");
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == rules::STATUS_UNDERSTOOD)
            .unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("UnknownStatus"))
        );
        assert!(c.message.as_deref().unwrap().contains("stays RUNNING"), "{c:?}");
    }
}

fn job(template: &str, parameters: Option<Value>) -> Job {
    let spec = JobSpec {
        name: Some("train".into()),
        namespace: "ml".into(),
        template: template.into(),
        image: Some("ghcr.io/example/train:1.0".into()),
        command: vec!["python3".into(), "train.py".into()],
        args: vec!["--epochs".into(), "3 4".into()],
        env: vec![],
        parallelism: 1,
        completions: 1,
        backoff_limit: 3,
        active_deadline_seconds: None,
        parameters,
        resources: None,
        service_account_name: None,
        ttl_seconds_after_finished: None,
        depends_on: Vec::new(),
        queue_name: None,
        retry_policy: None,
        priority: 0,
    };
    Job::accepted("0193-abc".into(), spec, None, chrono::Utc::now())
}

fn stamp() -> Stamp {
    Stamp {
        name: "jobgate-0193-abc".into(),
        labels: BTreeMap::from([("jobgate.io/job-id".to_owned(), "0193-abc".to_owned())]),
        annotations: BTreeMap::new(),
        env: vec![("JOBGATE_JOB_ID".into(), "0193-abc".into())],
        default_ttl_seconds: Some(600),
    }
}

#[test]
fn rendering_fills_the_manifest_with_the_job() {
    let t = builtin("pytorchjob");
    let object = t.render(&job("pytorchjob", Some(json!({"workers": 3}))), &stamp());
    assert_eq!(object["apiVersion"], "kubeflow.org/v1");
    assert_eq!(object["kind"], "PyTorchJob");
    assert_eq!(object["metadata"]["name"], "jobgate-0193-abc");
    assert_eq!(object["metadata"]["namespace"], "ml");
    assert_eq!(object["metadata"]["labels"]["jobgate.io/job-id"], "0193-abc");
    let spec = &object["spec"];
    assert_eq!(spec["pytorchReplicaSpecs"]["Worker"]["replicas"], 3);
    assert_eq!(
        spec["pytorchReplicaSpecs"]["Master"]["restartPolicy"], "OnFailure",
        "schema default"
    );
    assert_eq!(
        spec["runPolicy"]["ttlSecondsAfterFinished"], 600,
        "server default TTL"
    );
    assert_eq!(spec["runPolicy"]["backoffLimit"], 3);
    assert!(
        spec["runPolicy"].get("activeDeadlineSeconds").is_none(),
        "absent values drop their key"
    );
    let container = &spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0];
    assert_eq!(container["args"], json!(["--epochs", "3 4"]));
    assert_eq!(
        container["env"],
        json!([{"name": "JOBGATE_JOB_ID", "value": "0193-abc"}, {"name": "JOBGATE_RESULT_FILE", "value": "/dev/termination-log"}])
    );
    assert_eq!(
        spec["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"]["jobgate.io/job-id"],
        "0193-abc"
    );
    let ray = builtin("rayjob").render(&job("rayjob", None), &stamp());
    assert_eq!(ray["spec"]["entrypoint"], "python3 train.py --epochs '3 4'");
}

#[test]
fn parameters_are_checked_against_the_schema() {
    let t = builtin("pytorchjob");
    assert!(t.validate_parameters(None).is_ok());
    assert!(t.validate_parameters(Some(&json!({"workers": 4}))).is_ok());
    let e = t.validate_parameters(Some(&json!({"workers": 65}))).unwrap_err();
    assert_eq!(e.field, "input.parameters.workers");
    assert!(e.message.contains("65"), "{e}");
    let e = t.validate_parameters(Some(&json!({"wrokers": 4}))).unwrap_err();
    assert_eq!(e.field, "input.parameters");
    assert!(e.message.contains("wrokers"), "{e}");
    let e = builtin("sparkapplication").validate_parameters(None).unwrap_err();
    assert!(e.message.contains("mainApplicationFile"), "{e}");
    let e = builtin("argo-workflow")
        .validate_parameters(Some(&json!({"x": 1})))
        .unwrap_err();
    assert!(e.message.contains("takes no parameters"), "{e}");
}

#[test]
fn bad_templates_are_refused_with_the_problem() {
    let base = |extra: &str| {
        format!(
            "name: t\ndescription: d\napiVersion: example.com/v1\nkind: Thing\nfields: [image]\nmanifest:\n  spec:\n    image: ${{job.image}}\nstatus:\n  phase:\n    - phase: RUNNING\n{extra}"
        )
    };
    assert!(WorkloadTemplate::parse("t.yaml", &base("")).is_ok());
    for (extra, expected) in [
        ("cancel: {remove: true}\n", "unknown field `remove`"),
        ("retentionSeconds: soon\n", "retentionSeconds"),
        ("parameters: {type: array}\n", "must describe an object"),
        (
            "parameters: {type: object, properties: {n: {type: 12}}}\n",
            "not a valid JSON Schema",
        ),
    ] {
        let e = WorkloadTemplate::parse("t.yaml", &base(extra)).unwrap_err();
        assert_eq!(e.file, "t.yaml");
        assert!(e.problem.contains(expected), "{extra}: {e}");
    }
    let bad = [
        (
            base("").replace("${job.image}", "${job.imag}"),
            "unknown value ${job.imag}",
        ),
        (
            base("").replace("${job.image}", "${job.command}"),
            "uses command, which is not in fields",
        ),
        (
            base("").replace("${job.image}", "${params.x}"),
            "unknown value ${params.x}",
        ),
        (base("").replace("${job.image}", "${job.image"), "unclosed"),
        (base("").replace("phase: RUNNING", "phase: DONE"), "unknown phase"),
        (
            base("").replace(
                "    - phase: RUNNING\n",
                "    - phase: RUNNING\n      when: {field: status.x}\n",
            ),
            "needs `in` or `exists`",
        ),
        (base("").replace("name: t\n", "name: container\n"), "reserved"),
        (
            base("").replace("fields: [image]", "fields: [image, colour]"),
            "unknown field \"colour\"",
        ),
        (
            base("  progress:\n    total: {pattern: '(', of: status.x}\n"),
            "regex",
        ),
    ];
    for (text, expected) in bad {
        let e = WorkloadTemplate::parse("t.yaml", &text).unwrap_err();
        assert!(e.to_string().contains(expected), "expected {expected:?} in {e}");
    }
}

#[test]
fn a_queued_job_of_a_kind_kueue_queues_is_labelled_and_suspended() {
    for (template, suspend) in [
        ("pytorchjob", "/spec/runPolicy/suspend"),
        ("tfjob", "/spec/runPolicy/suspend"),
        ("mpijob", "/spec/runPolicy/suspend"),
        ("trainjob", "/spec/suspend"),
        ("rayjob", "/spec/suspend"),
    ] {
        let t = builtin(template);
        assert_eq!(t.kueue_suspend_field(), Ok(suspend), "{template}");
        let mut queued = job(template, None);
        queued.spec.queue_name = Some("team-a".into());
        let object = t.render(&queued, &stamp());
        assert_eq!(
            object["metadata"]["labels"][KUEUE_QUEUE_LABEL], "team-a",
            "{template}"
        );
        assert_eq!(object.pointer(suspend), Some(&json!(true)), "{template}");
        let plain = t.render(&job(template, None), &stamp());
        assert!(
            plain["metadata"]["labels"].get(KUEUE_QUEUE_LABEL).is_none(),
            "{template}"
        );
    }
    for template in ["argo-workflow", "tekton-pipelinerun", "sparkapplication"] {
        let why = builtin(template).kueue_suspend_field().unwrap_err();
        assert!(why.contains("Kueue has no"), "{template}: {why}");
    }
}
