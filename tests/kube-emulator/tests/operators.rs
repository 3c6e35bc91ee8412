//! The simulated workload operators through kube-rs, as any client of the CRDs sees them:
//! only the registered kinds are served, and an object's pods, labels, owner and status follow
//! the upstream operator (jobgate's own end-to-end tests drive every kind further).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::discovery::Discovery;
use kube_emulator::{Emulator, WORKLOAD_CRD_KINDS};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

async fn emulator() -> (Emulator, kube::Client) {
    let emulator = Emulator::start().await.expect("emulator starts");
    let config = kube::Config::new(emulator.url().parse().expect("emulator url"));
    (emulator, kube::Client::try_from(config).expect("client"))
}

fn api(client: &kube::Client, group: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), "default", &resource)
}

async fn until<F: Fn(&DynamicObject) -> bool>(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    check: F,
) -> DynamicObject {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let obj = api.get(name).await.unwrap();
        if check(&obj) {
            return obj;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never: {what}; last {:?}",
            obj.data.get("status")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn only_the_registered_workload_kinds_are_served() {
    let (emu, client) = emulator().await;
    emu.register_workload_crds(&["Workflow", "PyTorchJob"]).unwrap();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let kinds: Vec<String> = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .map(|(r, _)| r.kind)
        .collect();
    assert!(
        kinds.contains(&"Workflow".to_owned()) && kinds.contains(&"PyTorchJob".to_owned()),
        "{kinds:?}"
    );
    for missing in WORKLOAD_CRD_KINDS
        .iter()
        .filter(|k| !["Workflow", "PyTorchJob"].contains(k))
    {
        assert!(
            !kinds.contains(&(*missing).to_owned()),
            "{missing} is not registered: {kinds:?}"
        );
    }
    let rayjobs = api(&client, "ray.io", "v1", "RayJob", "rayjobs");
    let e = rayjobs.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 404), "{e}");
    assert!(emu.register_workload_crds(&["Gadget"]).is_err());
}

#[tokio::test]
async fn a_pytorchjob_gets_labelled_owned_pods_and_the_operators_status() {
    let (emu, client) = emulator().await;
    emu.register_workload_crds(&["PyTorchJob"]).unwrap();
    let jobs = api(&client, "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs");
    let replica = |replicas: u32| {
        json!({"replicas": replicas, "restartPolicy": "Never", "template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {"containers": [{"name": "pytorch", "image": "train:1", "env": [{"name": "EMULATOR_RUN_MS", "value": "100"}]}]}}})
    };
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &object).await.unwrap();
    let running = until(&jobs, "train", "Running", |o| {
        o.data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Running" && c["status"] == "True"))
    })
    .await;
    assert_eq!(
        running.data["status"]["conditions"][0]["reason"],
        "PyTorchJobCreated"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let listed = pods
        .list(&ListParams::default().labels("training.kubeflow.org/job-name=train"))
        .await
        .unwrap();
    let mut names: Vec<String> = listed
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["train-master-0", "train-worker-0", "train-worker-1"]);
    let pod = &listed.items[0];
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["team"], "ml", "the template's labels");
    assert!(labels.contains_key("training.kubeflow.org/replica-type"));
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("PyTorchJob", "train", Some(true))
    );
    let done = until(&jobs, "train", "Succeeded", |o| {
        o.data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Succeeded" && c["status"] == "True")
            })
    })
    .await;
    let status = &done.data["status"];
    assert_eq!(status["replicaStatuses"]["Master"]["succeeded"], 1);
    assert!(status["completionTime"].is_string());
    let running = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Running")
        .unwrap();
    assert_eq!(running["status"], "False", "Succeeded flips Running to False");
}

#[tokio::test]
async fn an_argo_workflow_stops_when_shut_down() {
    let (emu, client) = emulator().await;
    emu.register_workload_crds(&["Workflow"]).unwrap();
    let workflows = api(&client, "argoproj.io", "v1alpha1", "Workflow", "workflows");
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {
            "image": "alpine:3.20", "command": ["sleep", "1000"], "env": [{"name": "EMULATOR_GATE", "value": "never"}]}}]},
    }))
    .unwrap();
    workflows.create(&PostParams::default(), &object).await.unwrap();
    until(&workflows, "wf", "Running with its pod running", |o| {
        o.data.pointer("/status/conditions/0/status") == Some(&json!("True"))
    })
    .await;
    workflows
        .patch(
            "wf",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"shutdown": "Terminate"}})),
        )
        .await
        .unwrap();
    let stopped = until(&workflows, "wf", "Failed", |o| {
        o.data.pointer("/status/phase") == Some(&json!("Failed"))
    })
    .await;
    assert_eq!(
        stopped.data["status"]["message"],
        "Stopped with strategy 'Terminate'"
    );
    assert_eq!(
        stopped.metadata.labels.as_ref().unwrap()["workflows.argoproj.io/completed"],
        "true"
    );
}
