//! The emulated API server as kube-rs sees it, over real HTTP: discovery, CRUD and every patch
//! flavour, the status subresource, resourceVersions, list-then-watch, bookmarks, 410 and the
//! watcher's relist, selectors, pagination, deletion rules, Status errors, pod logs, and each
//! injected fault.
//!
//! Most object tests use a custom kind (`widgets.example.com`) because no simulated controller
//! touches it, so every change a test sees is one the test made.
//!
//! One module per API area: `admission` (validating webhooks), `discovery`, `objects` (writes and patches), `lists` (selectors,
//! pagination, metadata-only), `watches`, `deletion`, `errors`, `logs`, `faults`; the shared
//! fixtures live here.

mod admission;
mod deletion;
mod discovery;
mod errors;
mod faults;
mod lists;
mod logs;
mod objects;
mod pace;
mod schemas;
mod watches;

use std::time::Duration;

use futures::{AsyncBufReadExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, LogParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, Discovery, ResourceExt};
use kube_emulator::{Emulator, Options};
use serde_json::{Value, json};

/// Generous: only reached when the behaviour under test is broken.
const WAIT: Duration = Duration::from_secs(30);

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

fn client(emulator: &Emulator, retry: bool) -> Client {
    let mut config = kube::Config::new(emulator.url().parse().expect("emulator url"));
    config.default_retry = retry;
    Client::try_from(config).expect("client")
}

async fn start() -> (Emulator, Client) {
    start_with(Options::default()).await
}

async fn start_with(options: Options) -> (Emulator, Client) {
    let emulator = Emulator::start_with(options).await.expect("emulator starts");
    emulator.register_crd_yaml(WIDGET_CRD).expect("widget CRD");
    let client = client(&emulator, true);
    (emulator, client)
}

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Widget"), "widgets")
}

fn widgets(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &widget_resource())
}

fn widget(name: &str, labels: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "labels": labels},
        "spec": {"size": 1},
    }))
    .expect("a widget")
}

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["echo", "hi"]}],
        }}},
    }))
    .expect("a job")
}

fn pod(name: &str, env: &[(&str, &str)]) -> Pod {
    let env: Vec<Value> = env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "busybox:1.36", "command": ["sleep", "1"], "env": env}]},
    }))
    .expect("a pod")
}

fn rv(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("a numeric resourceVersion")
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn next<T>(stream: &mut (impl Stream<Item = T> + Unpin)) -> T {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("an item in time")
        .expect("the stream goes on")
}

/// The non-bookmark events of a watch until it ends.
async fn collect_until_end<K>(stream: impl Stream<Item = kube::Result<WatchEvent<K>>>) -> Vec<WatchEvent<K>> {
    let events: Vec<_> = tokio::time::timeout(WAIT, stream.try_collect::<Vec<_>>())
        .await
        .expect("the watch ends in time")
        .expect("no error in the watch");
    events
        .into_iter()
        .filter(|e| !matches!(e, WatchEvent::Bookmark(_)))
        .collect()
}

fn name_of(event: &WatchEvent<DynamicObject>) -> (String, String) {
    match event {
        WatchEvent::Added(o) => ("ADDED".into(), o.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Modified(o) => ("MODIFIED".into(), o.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Deleted(o) => ("DELETED".into(), o.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(b) => ("BOOKMARK".into(), b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR".into(), e.message.clone()),
    }
}

/// A raw request through kube's client (for what typed `Api`s cannot send).
async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> kube::Result<String> {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body.as_bytes().to_vec())
        .expect("a request");
    client.request_text(request).await
}
