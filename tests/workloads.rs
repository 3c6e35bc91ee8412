//! Workload templates end to end, with jobgate on the Kubernetes API emulator: template files, availability per kind, parameter and field validation, the
//! object a job becomes, status decoding (including statuses nobody understands), cancel
//! and retention. Here the test itself plays the operator of a made-up kind (a `Widget`,
//! from a template file), writing its status through kube-rs as a controller would; the
//! built-in templates against the emulator's simulated operators are in
//! tests/workload_operators.rs.
//!
//! jobgate runs in the test's process (`Server::start`); the binary is spawned where a test
//! kills it (`Server::spawn`) or reads how it refuses to start.

mod common;

use common::cluster::{Cluster, overlay_rbac};
use common::{Polling, Server};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// A CustomResourceDefinition of a namespaced kind with a status subresource and no schema.
fn crd(group: &str, version: &str, kind: &str, plural: &str) -> String {
    let singular = kind.to_lowercase();
    format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: {plural}, singular: {singular}, kind: {kind}, listKind: {kind}List}}
  versions:
    - name: {version}
      served: true
      storage: true
      subresources: {{status: {{}}}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#
    )
}

const WIDGET_TEMPLATE: &str = r#"
name: widget
description: A Widget, spun by its operator.
apiVersion: example.jobgate.io/v1
kind: Widget
fields: [image, command, ttlSecondsAfterFinished]
required: [image]
parameters:
  type: object
  additionalProperties: false
  properties:
    size: {type: integer, minimum: 1, maximum: 10, default: 2}
manifest:
  spec:
    image: ${job.image}
    command: ${job.command}
    size: ${params.size}
    greeting: hello from ${job.name}
children:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: ${workload.name}-input
    data:
      size: ${params.size | string}
status:
  phase:
    - phase: SUCCEEDED
      when: {field: status.state, in: [Done]}
    - phase: FAILED
      message: {from: status.error}
      when: {field: status.state, in: [Broken]}
    - phase: RUNNING
      when: {field: status.state, in: [Spinning]}
    - phase: PENDING
      when: {field: status.state, in: [""]}
  progress:
    succeeded: {sum: status.done}
    total: {sum: spec.size}
  startTime: status.startedAt
  result: [status.output]
cancel:
  patch:
    spec:
      stop: true
retentionSeconds: ${job.ttlSecondsAfterFinished}
"#;

/// deploy/overlays/workload-kinds's RBAC with what a template of one's own needs on top
/// (docs/TEMPLATES.md, "RBAC"): the widget template's kind as the overlay grants each built-in
/// kind (`patch`: it cancels by patch), and its child ConfigMap (created, or read back).
fn widget_rbac() -> Vec<Value> {
    let mut rbac = overlay_rbac("workload-kinds");
    let role = rbac
        .iter_mut()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "jobgate-workloads")
        .expect("the workload-kinds overlay's Role");
    let rules = role["rules"].as_array_mut().unwrap();
    rules.push(json!({
        "apiGroups": ["example.jobgate.io"],
        "resources": ["widgets"],
        "verbs": ["create", "get", "list", "watch", "delete", "patch"],
    }));
    rules.push(json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}));
    rbac
}

/// A cluster that serves Widgets, and a template directory with the widget template; `None`
/// (skipped) on a real cluster.
async fn widget_cluster() -> Option<(Cluster, tempfile::TempDir)> {
    let cluster = Cluster::emulated_with_rbac(
        "it serves kinds whose operators the emulator simulates",
        widget_rbac(),
    )
    .await?;
    cluster
        .emu()
        .register_crd_yaml(&crd("example.jobgate.io", "v1", "Widget", "widgets"))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("widget.yaml"), WIDGET_TEMPLATE).unwrap();
    Some((cluster, dir))
}

fn widgets(cluster: &Cluster) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.jobgate.io", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(cluster.client.clone(), cluster.namespace(), &resource)
}

/// Waits until jobgate has made job `id`'s Widget; returns its name.
async fn widget_of(cluster: &Cluster, id: &str) -> String {
    let name = format!("jobgate-{id}");
    cluster
        .until(&format!("the Widget {name} exists"), || async {
            widgets(cluster).get_opt(&name).await.unwrap().is_some()
        })
        .await;
    name
}

const JOB_FIELDS: &str = "id phase message result template progress { succeeded active total } \
    conditions { type status reason message } logs(tailLines: 10)";

async fn set_status(cluster: &Cluster, name: &str, status: Value) {
    widgets(cluster)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_template_file_turns_a_job_into_its_kind_and_its_status_into_phases() {
    let Some((cluster, dir)) = widget_cluster().await else {
        return;
    };
    let server = cluster
        .jobgate(&["--template-dir", dir.path().to_str().unwrap()])
        .await;
    let id = server
        .submit(json!({"template": "widget", "name": "spin", "image": "widgets:1", "command": ["spin", "--fast"], "parameters": {"size": 3}}))
        .await;
    let name = widget_of(&cluster, &id).await;
    let widget = widgets(&cluster).get(&name).await.unwrap();
    let labels = widget.metadata.labels.clone().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "jobgate");
    assert_eq!(labels["jobgate.io/job-id"], id);
    assert_eq!(
        widget.metadata.annotations.as_ref().unwrap()["jobgate.io/template"],
        "widget"
    );
    // Its child, owned by it (and so deleted with it). Children are created after the main
    // object (their owner reference needs its uid), so wait for it too.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.client.clone(), cluster.namespace());
    let child = format!("{name}-input");
    cluster
        .until("the Widget's ConfigMap exists", || async {
            configmaps.get_opt(&child).await.unwrap().is_some()
        })
        .await;
    let input = configmaps.get(&child).await.unwrap();
    assert_eq!(input.data.as_ref().unwrap()["size"], "3");
    assert_eq!(input.metadata.labels.as_ref().unwrap()["jobgate.io/job-id"], id);
    let owner = &input.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), Some(&owner.uid)),
        ("Widget", name.as_str(), widget.metadata.uid.as_ref())
    );
    assert_eq!(
        widget.data["spec"],
        json!({"image": "widgets:1", "command": ["spin", "--fast"], "size": 3, "greeting": "hello from spin"})
    );

    set_status(
        &cluster,
        &name,
        json!({"state": "Spinning", "done": 1, "startedAt": "2026-01-01T00:00:00Z"}),
    )
    .await;
    let running = server
        .job_until(&id, JOB_FIELDS, "RUNNING", |j| j["phase"] == "RUNNING")
        .await;
    assert_eq!(running["progress"]["total"], 3);
    cluster
        .until("progress reaches jobgate", || async {
            server.job_with(&id, JOB_FIELDS).await["progress"]["succeeded"] == 1
        })
        .await;

    // A state no rule knows: the phase stays, and a condition says what was seen.
    set_status(&cluster, &name, json!({"state": "Wobbling", "done": 2})).await;
    let odd = server
        .job_until(&id, JOB_FIELDS, "the status is reported not understood", |j| {
            common::condition(j, "StatusUnderstood").is_some_and(|c| c["status"] == "False")
        })
        .await;
    assert_eq!(odd["phase"], "RUNNING");
    let c = common::condition(&odd, "StatusUnderstood").unwrap();
    assert_eq!(c["reason"], "UnknownStatus");
    assert!(c["message"].as_str().unwrap().contains("Wobbling"), "{c}");
    // Malformed, not merely unknown: still no crash, no stall.
    set_status(
        &cluster,
        &name,
        json!({"state": {"nested": true}, "done": "lots"}),
    )
    .await;
    set_status(
        &cluster,
        &name,
        json!({"state": "Done", "done": 3, "output": "42 widgets"}),
    )
    .await;
    let done = server
        .job_until(&id, JOB_FIELDS, "SUCCEEDED", |j| j["phase"] == "SUCCEEDED")
        .await;
    assert_eq!(done["result"], "42 widgets");
    assert_eq!(done["progress"]["succeeded"], 3);
    assert!(
        common::condition(&done, "StatusUnderstood").is_none(),
        "the understood status replaced the condition: {done}"
    );
}

#[tokio::test]
async fn a_failed_workload_fails_the_job_with_its_message_and_cancel_uses_the_templates_patch() {
    let Some((cluster, dir)) = widget_cluster().await else {
        return;
    };
    let server = cluster
        .jobgate(&["--template-dir", dir.path().to_str().unwrap()])
        .await;
    let broken = server
        .submit(json!({"template": "widget", "image": "widgets:1"}))
        .await;
    let name = widget_of(&cluster, &broken).await;
    set_status(
        &cluster,
        &name,
        json!({"state": "Broken", "error": "the spindle snapped"}),
    )
    .await;
    let failed = server
        .job_until(&broken, JOB_FIELDS, "FAILED", |j| j["phase"] == "FAILED")
        .await;
    assert_eq!(failed["message"], "the spindle snapped");
    assert_eq!(failed["result"], Value::Null);

    let cancelled = server
        .submit(json!({"template": "widget", "image": "widgets:1"}))
        .await;
    let name = widget_of(&cluster, &cancelled).await;
    set_status(&cluster, &name, json!({"state": "Spinning"})).await;
    server
        .job_until(&cancelled, JOB_FIELDS, "RUNNING", |j| j["phase"] == "RUNNING")
        .await;
    assert_eq!(server.cancel(&cancelled).await, "CANCELLED");
    cluster
        .until("the Widget is told to stop", || async {
            widgets(&cluster).get(&name).await.unwrap().data["spec"]["stop"] == true
        })
        .await;
    // The operator ends it as it likes; jobgate keeps CANCELLED. A later Widget finishing is
    // the barrier: one watch delivers this kind's events in order.
    set_status(&cluster, &name, json!({"state": "Broken", "error": "stopped"})).await;
    let barrier = server
        .submit(json!({"template": "widget", "image": "widgets:1"}))
        .await;
    let barrier_name = widget_of(&cluster, &barrier).await;
    set_status(&cluster, &barrier_name, json!({"state": "Done"})).await;
    server
        .job_until(&barrier, JOB_FIELDS, "the barrier SUCCEEDED", |j| {
            j["phase"] == "SUCCEEDED"
        })
        .await;
    let after = server.job_with(&cancelled, JOB_FIELDS).await;
    assert_eq!(after["phase"], "CANCELLED", "{after}");
    assert_eq!(after["message"], "cancelled by request");
}

#[tokio::test]
async fn finished_workloads_of_kinds_without_ttl_are_deleted_after_their_retention() {
    let Some((cluster, dir)) = widget_cluster().await else {
        return;
    };
    let server = cluster
        .jobgate(&["--template-dir", dir.path().to_str().unwrap()])
        .await;
    let short = server
        .submit(json!({"template": "widget", "image": "widgets:1", "ttlSecondsAfterFinished": 1}))
        .await;
    let kept = server
        .submit(json!({"template": "widget", "image": "widgets:1", "ttlSecondsAfterFinished": 3600}))
        .await;
    for id in [&short, &kept] {
        let name = widget_of(&cluster, id).await;
        set_status(&cluster, &name, json!({"state": "Done"})).await;
        server
            .job_until(id, JOB_FIELDS, "SUCCEEDED", |j| j["phase"] == "SUCCEEDED")
            .await;
    }
    let short_name = format!("jobgate-{short}");
    cluster
        .until("the short-lived Widget is deleted", || async {
            widgets(&cluster).get_opt(&short_name).await.unwrap().is_none()
        })
        .await;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.client.clone(), cluster.namespace());
    cluster
        .until("its child ConfigMap is garbage-collected with it", || async {
            configmaps
                .get_opt(&format!("{short_name}-input"))
                .await
                .unwrap()
                .is_none()
        })
        .await;
    assert!(
        widgets(&cluster)
            .get_opt(&format!("jobgate-{kept}"))
            .await
            .unwrap()
            .is_some(),
        "a Widget with an hour to live is kept"
    );
    // jobgate keeps the job's history after its object is gone.
    assert_eq!(server.job_with(&short, JOB_FIELDS).await["phase"], "SUCCEEDED");
}

async fn templates(server: &Server) -> Vec<Value> {
    server
        .gql_ok(
            "{ templates { name kind available unavailableReason parameterSchema fields { name label required } } }",
            json!({}),
        )
        .await["templates"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn templates_report_each_kind_the_cluster_lacks_and_notice_one_installed_later() {
    let Some((cluster, dir)) = widget_cluster().await else {
        return;
    };
    let server = cluster
        .jobgate(&["--template-dir", dir.path().to_str().unwrap()])
        .await;
    let all = templates(&server).await;
    let by_name = |all: &[Value], name: &str| all.iter().find(|t| t["name"] == name).cloned().unwrap();
    let names: Vec<&str> = all.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in [
        "container",
        "widget",
        "pytorchjob",
        "tfjob",
        "mpijob",
        "trainjob",
        "argo-workflow",
        "tekton-pipelinerun",
        "rayjob",
        "sparkapplication",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let widget = by_name(&all, "widget");
    assert_eq!(widget["available"], true);
    assert_eq!(widget["kind"], "example.jobgate.io/v1 Widget");
    assert_eq!(widget["parameterSchema"]["properties"]["size"]["maximum"], 10);
    let fields: Vec<&str> = widget["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "name",
            "namespace",
            "image",
            "command",
            "ttlSecondsAfterFinished",
            "dependsOn",
            "priority"
        ]
    );
    let workflow = by_name(&all, "argo-workflow");
    assert_eq!(workflow["available"], false);
    assert!(
        workflow["unavailableReason"]
            .as_str()
            .unwrap()
            .contains("argoproj.io/v1alpha1 Workflow"),
        "{workflow}"
    );
    let spark = by_name(&all, "sparkapplication");
    let executors = spark["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "parallelism")
        .unwrap();
    assert_eq!(
        executors["label"], "Executors",
        "a template labels the fields it uses"
    );

    // Metrics say the same, per template.
    let scraped = common::metrics_text(&server).await;
    assert!(
        scraped.contains(
            r#"jobgate_template_available{template="widget",kind="example.jobgate.io/v1 Widget"} 1"#
        ),
        "{scraped}"
    );
    assert!(
        scraped.contains(
            r#"jobgate_template_available{template="argo-workflow",kind="argoproj.io/v1alpha1 Workflow"} 0"#
        ),
        "{scraped}"
    );

    // A job of a kind the cluster lacks is refused, and nothing is created.
    let refused = server
        .submit_answer(json!({"template": "argo-workflow", "image": "alpine:3.20", "command": ["true"]}))
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "UNAVAILABLE",
        "{refused}"
    );
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("CustomResourceDefinition")
    );
    let count = server.gql_ok("{ jobs { totalCount } }", json!({})).await;
    assert_eq!(count["jobs"]["totalCount"], 0);

    // Installing the CRD while jobgate runs makes the kind available, with no restart.
    cluster
        .emu()
        .register_crd_yaml(&crd("argoproj.io", "v1alpha1", "Workflow", "workflows"))
        .unwrap();
    let polling = Polling::start();
    loop {
        let all = templates(&server).await;
        if by_name(&all, "argo-workflow")["available"] == true {
            break;
        }
        polling
            .pause(|| "argo-workflow never became available".to_owned())
            .await;
    }
    assert!(common::metrics_text(&server).await.contains(
        r#"jobgate_template_available{template="argo-workflow",kind="argoproj.io/v1alpha1 Workflow"} 1"#
    ));
    // And /readyz never depended on the missing kinds.
    let ready = server.http().get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn bad_input_for_a_template_names_the_field_and_creates_nothing() {
    let Some((cluster, dir)) = widget_cluster().await else {
        return;
    };
    let server = cluster
        .jobgate(&["--template-dir", dir.path().to_str().unwrap()])
        .await;
    for (input, field, text) in [
        (
            json!({"template": "widget", "image": "w:1", "parameters": {"size": 11}}),
            "input.parameters.size",
            "10",
        ),
        (
            json!({"template": "widget", "image": "w:1", "parameters": {"colour": "red"}}),
            "input.parameters",
            "colour",
        ),
        (
            json!({"template": "widget", "image": "w:1", "parallelism": 2}),
            "input.parallelism",
            "does not use parallelism",
        ),
        (
            json!({"template": "widget", "command": ["spin"]}),
            "input.image",
            "required",
        ),
        (
            json!({"template": "pytorchjob", "image": "t:1", "command": ["t"], "parameters": {"workers": 65}}),
            "input.parameters.workers",
            "65",
        ),
        (
            json!({"template": "nope", "image": "t:1", "command": ["t"]}),
            "input.template",
            "unknown template",
        ),
    ] {
        let answer = server.submit_answer(input.clone()).await;
        let e = &answer["errors"][0];
        assert_eq!(e["extensions"]["code"], "BAD_USER_INPUT", "{input}: {answer}");
        assert_eq!(e["extensions"]["field"], field, "{input}: {answer}");
        assert!(e["message"].as_str().unwrap().contains(text), "{input}: {answer}");
    }
    let count = server.gql_ok("{ jobs { totalCount } }", json!({})).await;
    assert_eq!(count["jobs"]["totalCount"], 0);
    let objects = widgets(&cluster).list(&ListParams::default()).await.unwrap();
    assert!(objects.items.is_empty());
}

#[tokio::test]
async fn a_bad_template_file_stops_jobgate_with_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, WIDGET_TEMPLATE.replace("${job.command}", "${job.comand}")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let output = tokio::task::spawn_blocking({
        let dir = dir.path().to_owned();
        let data = data.path().to_owned();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_jobgate"))
                .args(["--listen", "127.0.0.1:0", "--data-dir"])
                .arg(&data)
                .arg("--template-dir")
                .arg(&dir)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains("unknown value ${job.comand}"), "{stderr}");
}

#[tokio::test]
async fn on_the_local_executor_workload_templates_are_listed_but_unavailable() {
    let server = Server::start(&[]).await;
    let all = server
        .gql_ok("{ templates { name available unavailableReason } }", json!({}))
        .await["templates"]
        .as_array()
        .unwrap()
        .clone();
    let container = all.iter().find(|t| t["name"] == "container").unwrap();
    assert_eq!(container["available"], true);
    let ray = all.iter().find(|t| t["name"] == "rayjob").unwrap();
    assert_eq!(ray["available"], false);
    assert!(
        ray["unavailableReason"]
            .as_str()
            .unwrap()
            .contains("local executor"),
        "{ray}"
    );
    let refused = server
        .submit_answer(
            json!({"template": "rayjob", "image": "rayproject/ray:2.52.0", "command": ["python", "-c", "1"]}),
        )
        .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "UNAVAILABLE",
        "{refused}"
    );
}

#[tokio::test]
async fn after_a_restart_jobgate_finds_what_happened_to_its_workloads_meanwhile() {
    let Some((cluster, dir)) = widget_cluster().await else {
        return;
    };
    let args = cluster.args(&["--template-dir", dir.path().to_str().unwrap()]);
    let mut server = Server::spawn(&args).await;
    let finished = server
        .submit(json!({"template": "widget", "image": "widgets:1"}))
        .await;
    let deleted = server
        .submit(json!({"template": "widget", "image": "widgets:1"}))
        .await;
    let expiring = server
        .submit(json!({"template": "widget", "image": "widgets:1", "ttlSecondsAfterFinished": 1}))
        .await;
    for id in [&finished, &deleted, &expiring] {
        let name = widget_of(&cluster, id).await;
        set_status(&cluster, &name, json!({"state": "Spinning"})).await;
        server
            .job_until(id, JOB_FIELDS, "RUNNING", |j| j["phase"] == "RUNNING")
            .await;
    }
    server.kill9();

    // While jobgate is down: one finishes, one is deleted, one finishes with 1 s to live.
    set_status(
        &cluster,
        &format!("jobgate-{finished}"),
        json!({"state": "Done", "output": "ok"}),
    )
    .await;
    widgets(&cluster)
        .delete(&format!("jobgate-{deleted}"), &Default::default())
        .await
        .unwrap();
    set_status(&cluster, &format!("jobgate-{expiring}"), json!({"state": "Done"})).await;

    let server = server.start_again(&args).await;
    let done = server
        .job_until(&finished, JOB_FIELDS, "SUCCEEDED after the restart", |j| {
            j["phase"] == "SUCCEEDED"
        })
        .await;
    assert_eq!(done["result"], "ok");
    let gone = server
        .job_until(&deleted, JOB_FIELDS, "FAILED after the restart", |j| {
            j["phase"] == "FAILED"
        })
        .await;
    let failed = common::condition(&gone, "Failed").unwrap();
    assert_eq!(failed["reason"], "WorkloadDeleted", "{gone}");
    server
        .job_until(&expiring, JOB_FIELDS, "SUCCEEDED after the restart", |j| {
            j["phase"] == "SUCCEEDED"
        })
        .await;
    let name = format!("jobgate-{expiring}");
    cluster
        .until("the expired Widget is deleted by the new jobgate", || async {
            widgets(&cluster).get_opt(&name).await.unwrap().is_none()
        })
        .await;
}

#[tokio::test]
async fn a_child_of_a_kind_the_cluster_does_not_serve_fails_the_job_and_removes_its_workload() {
    let Some((cluster, dir)) = widget_cluster().await else {
        return;
    };
    let template = WIDGET_TEMPLATE
        .replace("name: widget\n", "name: geared-widget\n")
        .replace(
            "apiVersion: v1\n    kind: ConfigMap",
            "apiVersion: example.jobgate.io/v1\n    kind: Sprocket",
        );
    std::fs::write(dir.path().join("geared.yaml"), template).unwrap();
    let server = cluster
        .jobgate(&["--template-dir", dir.path().to_str().unwrap()])
        .await;
    let id = server
        .submit(json!({"template": "geared-widget", "image": "widgets:1"}))
        .await;
    let failed = server
        .job_until(&id, JOB_FIELDS, "FAILED", |j| j["phase"] == "FAILED")
        .await;
    let condition = common::condition(&failed, "Failed").unwrap();
    assert_eq!(condition["reason"], "InvalidWorkload", "{failed}");
    assert!(
        failed["message"].as_str().unwrap().contains("Sprocket"),
        "{failed}"
    );
    let name = format!("jobgate-{id}");
    cluster
        .until("the Widget without its Sprocket is removed", || async {
            widgets(&cluster).get_opt(&name).await.unwrap().is_none()
        })
        .await;
}
