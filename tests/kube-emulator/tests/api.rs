//! The emulated API server as kube-rs sees it, over real HTTP: discovery, CRUD and every patch
//! flavour, the status subresource, resourceVersions, list-then-watch, bookmarks, 410 and the
//! watcher's relist, selectors, pagination, deletion rules, Status errors, pod logs, and each
//! injected fault.
//!
//! Most object tests use a custom kind (`widgets.example.com`) because no simulated controller
//! touches it, so every change a test sees is one the test made.

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

#[tokio::test]
async fn discovery_serves_builtin_kinds_and_registered_crds() {
    let emulator = Emulator::start().await.expect("start");
    let client = client(&emulator, true);
    let version = client.apiserver_version().await.expect("version");
    assert_eq!(version.git_version, "v1.33.0");

    let discovery = Discovery::new(client.clone()).run().await.expect("discovery");
    let (jobs, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("batch", "v1", "Job"))
        .expect("batch/v1 Job is served");
    assert_eq!(jobs.plural, "jobs");
    assert!(
        caps.subresources.iter().any(|(sub, _)| sub.plural == "status"),
        "jobs/status listed"
    );
    let (_, pod_caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
        .expect("pods");
    assert!(
        pod_caps.subresources.iter().any(|(sub, _)| sub.plural == "log"),
        "pods/log listed"
    );
    assert!(discovery.has_group("events.k8s.io"));
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
            .is_none()
    );

    emulator.register_crd_yaml(WIDGET_CRD).expect("register");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery again");
    let (widget, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .expect("the CRD's kind is served");
    assert_eq!(widget.plural, "widgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    // The CRD itself is Established.
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd = crds.get("widgets.example.com").await.expect("crd");
    let conditions = crd.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );

    // OpenAPI is declined with a Status, so kubectl falls back.
    let status = api_error(raw(&client, "GET", "/openapi/v2", "application/json", "").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    emulator.shutdown().await;
}

#[tokio::test]
async fn jobs_are_defaulted_and_patched_with_each_patch_type() {
    let (emulator, client) = start().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let created = jobs
        .create(&PostParams::default(), &job("pi"))
        .await
        .expect("create");
    let uid = created.metadata.uid.clone().expect("uid");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.creation_timestamp.is_some());
    let spec = created.spec.clone().expect("spec");
    assert_eq!(
        (spec.completions, spec.parallelism, spec.backoff_limit),
        (Some(1), Some(1), Some(6))
    );
    let selector = spec.selector.and_then(|s| s.match_labels).unwrap_or_default();
    assert_eq!(selector.get("batch.kubernetes.io/controller-uid"), Some(&uid));
    let template_labels = spec.template.metadata.and_then(|m| m.labels).unwrap_or_default();
    for key in [
        "batch.kubernetes.io/controller-uid",
        "batch.kubernetes.io/job-name",
        "controller-uid",
        "job-name",
    ] {
        assert!(template_labels.contains_key(key), "template label {key}");
    }
    assert_eq!(
        created.status,
        Some(Default::default()),
        "status is reset to {{}} on create"
    );
    assert_eq!(
        jobs.get("pi").await.expect("get").metadata.uid.as_deref(),
        Some(uid.as_str())
    );

    // Merge patch: labels and a spec field; generation follows spec only.
    let merged = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}, "spec": {"parallelism": 2}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(merged.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(merged.metadata.generation, Some(2));
    let relabelled = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}})),
        )
        .await
        .expect("label only");
    assert_eq!(
        relabelled.metadata.generation,
        Some(2),
        "labels do not bump generation"
    );

    // JSON patch, including a failing test op (422).
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"note": "x"}},
    ]))
    .expect("ops");
    let patched = jobs
        .patch("pi", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .expect("json patch");
    assert_eq!(patched.annotations().get("note").map(String::as_str), Some("x"));
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/spec/parallelism", "value": 9}]))
            .expect("ops");
    let status = api_error(
        jobs.patch("pi", &PatchParams::default(), &Patch::<()>::Json(failing))
            .await,
    );
    assert_eq!(status.code, 422);

    // Strategic merge: maps merge; the template is immutable (422).
    let smp = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"tier": "x"}}})),
        )
        .await
        .expect("strategic");
    assert_eq!(smp.labels().get("team").map(String::as_str), Some("b"));
    assert_eq!(smp.labels().get("tier").map(String::as_str), Some("x"));
    let immutable = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "other"}]}}}}),
            ),
        )
        .await;
    let status = api_error(immutable);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("field is immutable"),
        "{}",
        status.message
    );

    // Server-side apply: merges into the live object, creates when absent (201).
    let applied = jobs
        .patch(
            "pi",
            &PatchParams::apply("tests"),
            &Patch::Apply(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "labels": {"applied": "yes"}}})),
        )
        .await
        .expect("apply");
    assert_eq!(applied.labels().get("applied").map(String::as_str), Some("yes"));
    assert_eq!(applied.labels().get("team").map(String::as_str), Some("b"));
    let mut fresh = serde_json::to_value(job("applied")).expect("json");
    fresh["metadata"]["labels"] = json!({"via": "apply"});
    let created_by_apply = jobs
        .patch("applied", &PatchParams::apply("tests"), &Patch::Apply(fresh))
        .await
        .expect("apply creates");
    assert!(created_by_apply.metadata.uid.is_some());

    // The main endpoint never changes status; /status never changes spec.
    let ignored = jobs
        .patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"succeeded": 42}})),
        )
        .await
        .expect("status via main endpoint");
    assert_ne!(ignored.status.and_then(|s| s.succeeded), Some(42));
    let status_write = jobs
        .patch_status(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 7}})),
        )
        .await
        .expect("spec via /status");
    assert_eq!(status_write.spec.and_then(|s| s.parallelism), Some(2));
    emulator.shutdown().await;
}

#[tokio::test]
async fn pods_merge_containers_by_name_and_need_name_and_image() {
    let (emulator, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", &[("EMULATOR_GATE", "never")]))
        .await
        .expect("create");
    let patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}})),
        )
        .await
        .expect("image update");
    let container = &patched.spec.expect("spec").containers[0];
    assert_eq!(container.image.as_deref(), Some("busybox:1.37"));
    assert_eq!(
        container.command,
        Some(vec!["sleep".to_owned(), "1".to_owned()]),
        "other fields kept"
    );

    let mut bad = serde_json::to_value(pod("bad", &[])).expect("json");
    bad["spec"]["containers"] = json!([{"name": "main"}]);
    let bad: Pod = serde_json::from_value(bad).expect("pod");
    let status = api_error(pods.create(&PostParams::default(), &bad).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let causes = status.details.expect("details").causes;
    assert!(
        causes
            .iter()
            .any(|c| c.field == "spec.containers[0].image" && c.reason == "FieldValueRequired")
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn updates_check_resource_version_and_respect_the_status_subresource() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let created = api
        .create(&PostParams::default(), &widget("w", json!({})))
        .await
        .expect("create");

    let mut next = created.clone();
    next.data["spec"]["size"] = json!(2);
    next.data["status"] = json!({"ready": true});
    let updated = api
        .replace("w", &PostParams::default(), &next)
        .await
        .expect("replace with the current rv");
    assert!(rv(&updated.metadata) > rv(&created.metadata));
    assert_eq!(updated.metadata.generation, Some(2));
    assert!(
        updated
            .data
            .get("status")
            .is_none_or(|s| s.get("ready").is_none()),
        "main endpoint ignores status"
    );

    let status = api_error(api.replace("w", &PostParams::default(), &next).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );

    let mut no_rv = updated.clone();
    no_rv.metadata.resource_version = None;
    let status = api_error(api.replace("w", &PostParams::default(), &no_rv).await);
    assert_eq!(status.code, 422, "custom kinds need a resourceVersion on update");

    let mut with_status = updated.clone();
    with_status.data["status"] = json!({"ready": true});
    with_status.data["spec"]["size"] = json!(99);
    let after = api
        .replace_status("w", &PostParams::default(), &with_status)
        .await
        .expect("replace status");
    assert_eq!(after.data["status"]["ready"], true);
    assert_eq!(after.data["spec"]["size"], 2, "/status ignores spec");
    assert_eq!(
        after.metadata.generation,
        Some(2),
        "status writes do not bump generation"
    );

    // A write that changes nothing keeps the resourceVersion.
    let same = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .expect("no-op patch");
    assert_eq!(same.metadata.resource_version, after.metadata.resource_version);
    // Strategic merge is for built-in kinds only.
    let status = api_error(
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 3}})),
        )
        .await,
    );
    assert_eq!(status.code, 415);
    emulator.shutdown().await;
}

#[tokio::test]
async fn resource_versions_increase_across_all_kinds() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut last = 0;
    for i in 0..3 {
        let w = api
            .create(&PostParams::default(), &widget(&format!("w{i}"), json!({})))
            .await
            .expect("widget");
        assert!(rv(&w.metadata) > last);
        last = rv(&w.metadata);
        let p = pods
            .create(&PostParams::default(), &pod(&format!("p{i}"), &[]))
            .await
            .expect("pod");
        assert!(rv(&p.metadata) > last);
        last = rv(&p.metadata);
    }
    let list = api.list(&ListParams::default()).await.expect("list");
    let list_rv: u64 = list
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("list rv");
    assert!(
        list_rv >= last,
        "a list carries the store's current resourceVersion"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn watch_from_a_list_gets_exactly_the_later_changes() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(&PostParams::default(), &widget("a", json!({})))
        .await
        .expect("a");
    let list = api.list(&ListParams::default()).await.expect("list");
    let from = list.metadata.resource_version.clone().expect("list rv");

    api.create(&PostParams::default(), &widget("b", json!({})))
        .await
        .expect("b");
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .expect("patch a");
    api.delete("b", &DeleteParams::default()).await.expect("delete b");
    // Another namespace is not part of this watch.
    widgets(&client, "kube-public")
        .create(&PostParams::default(), &widget("c", json!({})))
        .await
        .expect("c");

    let stream = api
        .watch(&WatchParams::default().timeout(2), &from)
        .await
        .expect("watch");
    let events = collect_until_end(stream).await;
    let seen: Vec<(String, String)> = events.iter().map(name_of).collect();
    assert_eq!(
        seen,
        [
            ("ADDED".into(), "b".into()),
            ("MODIFIED".into(), "a".into()),
            ("DELETED".into(), "b".into())
        ]
    );
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => rv(&o.metadata),
            _ => 0,
        })
        .collect();
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]) && rvs[0] > from.parse::<u64>().expect("rv"),
        "{rvs:?}"
    );

    // Without a resourceVersion the watch starts with the current state.
    let stream = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch from 0");
    let events = collect_until_end(stream).await;
    assert_eq!(
        events.iter().map(name_of).collect::<Vec<_>>(),
        [("ADDED".into(), "a".into())]
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn selectors_filter_lists_and_watches_with_transitions() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(
        &PostParams::default(),
        &widget("dev", json!({"env": "dev", "n": "3"})),
    )
    .await
    .expect("dev");
    api.create(&PostParams::default(), &widget("prod", json!({"env": "prod"})))
        .await
        .expect("prod");
    api.create(&PostParams::default(), &widget("none", json!({})))
        .await
        .expect("none");
    let names = |list: kube::api::ObjectList<DynamicObject>| -> Vec<String> {
        list.items.into_iter().filter_map(|o| o.metadata.name).collect()
    };
    for (selector, expected) in [
        ("env=dev", vec!["dev"]),
        ("env==dev", vec!["dev"]),
        ("env!=dev", vec!["none", "prod"]),
        ("env in (dev,prod)", vec!["dev", "prod"]),
        ("env notin (dev)", vec!["none", "prod"]),
        ("env", vec!["dev", "prod"]),
        ("!env", vec!["none"]),
        ("n>2", vec!["dev"]),
    ] {
        let list = api
            .list(&ListParams::default().labels(selector))
            .await
            .expect(selector);
        assert_eq!(names(list), expected, "{selector}");
    }
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=prod"))
        .await
        .expect("field selector");
    assert_eq!(names(by_name), ["prod"]);
    let status = api_error(api.list(&ListParams::default().labels("env in dev")).await);
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    let status = api_error(api.list(&ListParams::default().fields("spec.size=1")).await);
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("field label not supported"),
        "{}",
        status.message
    );

    // Moving into and out of a selector is ADDED and DELETED.
    let from = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = api
        .watch(
            &WatchParams::default().labels("env=dev").disable_bookmarks(),
            &from,
        )
        .await
        .expect("watch")
        .boxed();
    api.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"env": "dev"}}})),
    )
    .await
    .expect("into");
    api.patch(
        "dev",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"env": "prod"}}})),
    )
    .await
    .expect("out of");
    api.patch(
        "none",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .expect("unrelated");
    api.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 5}})),
    )
    .await
    .expect("within");
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(name_of(&next(&mut stream).await.expect("event")));
    }
    assert_eq!(
        seen,
        [
            ("ADDED".into(), "prod".into()),
            ("DELETED".into(), "dev".into()),
            ("MODIFIED".into(), "prod".into())
        ]
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn bookmarks_report_progress_when_nothing_matches() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let from = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = api
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch")
        .boxed();
    let other = widgets(&client, "kube-system")
        .create(&PostParams::default(), &widget("elsewhere", json!({})))
        .await
        .expect("create elsewhere");
    let bookmark = match next(&mut stream).await.expect("event") {
        WatchEvent::Bookmark(b) => b,
        other => panic!("only a bookmark expected, got {:?}", name_of(&other)),
    };
    assert_eq!(bookmark.types.kind, "Widget");
    assert_eq!(bookmark.types.api_version, "example.com/v1");
    let at: u64 = bookmark.metadata.resource_version.parse().expect("rv");
    assert!(
        at >= rv(&other.metadata),
        "the bookmark covers the change it skipped"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn timeout_seconds_ends_a_watch_cleanly_with_a_bookmark() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let from = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let stream = api
        .watch(&WatchParams::default().timeout(1), &from)
        .await
        .expect("watch");
    let all: Vec<_> = tokio::time::timeout(WAIT, stream.try_collect::<Vec<_>>())
        .await
        .expect("ends in time")
        .expect("no errors");
    assert!(
        matches!(all.last(), Some(WatchEvent::Bookmark(_))),
        "the last event is a bookmark"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn an_expired_resource_version_is_a_410_event_and_the_watcher_relists() {
    // Long bookmark interval: the watcher's resume point must stay behind the compaction.
    let options = Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let (emulator, client) = start_with(options).await;
    let api = widgets(&client, "default");
    let old = api
        .create(&PostParams::default(), &widget("old", json!({})))
        .await
        .expect("create");

    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut initial = Vec::new();
    loop {
        match next(&mut events).await.expect("watcher event") {
            watcher::Event::InitDone => break,
            watcher::Event::InitApply(o) => initial.push(o.metadata.name.unwrap_or_default()),
            _ => {}
        }
    }
    assert_eq!(initial, ["old"]);

    // Something else moves the store on, then the server forgets its history.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("mover", &[]))
        .await
        .expect("pod");
    emulator.restart_compacted();

    // A raw watch from the old resourceVersion gets HTTP 200 and an ERROR event with 410.
    let mut raw_watch = api
        .watch(&WatchParams::default(), &rv(&old.metadata).to_string())
        .await
        .expect("watch")
        .boxed();
    match next(&mut raw_watch).await.expect("event") {
        WatchEvent::Error(status) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {:?}", name_of(&other)),
    }

    api.create(&PostParams::default(), &widget("new", json!({})))
        .await
        .expect("create after restart");
    let mut relisted = Vec::new();
    let mut saw_init = false;
    loop {
        match next(&mut events).await {
            Ok(watcher::Event::Init) => saw_init = true,
            Ok(watcher::Event::InitApply(o)) if saw_init => {
                relisted.push(o.metadata.name.unwrap_or_default())
            }
            Ok(watcher::Event::InitDone) if saw_init => break,
            // The 410 surfaces as an error item before the relist.
            Ok(_) | Err(_) => {}
        }
    }
    relisted.sort();
    assert_eq!(relisted, ["new", "old"]);
    emulator.shutdown().await;
}

#[tokio::test]
async fn the_watcher_recovers_after_dropped_watches() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    while !matches!(next(&mut events).await.expect("event"), watcher::Event::InitDone) {}
    let lists_before = emulator.requests().of("widgets.example.com", "list");
    let watches_before = emulator.requests().of("widgets.example.com", "watch");

    emulator.drop_watches();
    api.create(&PostParams::default(), &widget("after-drop", json!({})))
        .await
        .expect("create");
    loop {
        if let watcher::Event::Apply(o) = next(&mut events).await.expect("event")
            && o.metadata.name.as_deref() == Some("after-drop")
        {
            break;
        }
    }
    let counts = emulator.requests();
    assert!(
        counts.of("widgets.example.com", "watch") > watches_before,
        "re-watched"
    );
    assert_eq!(
        counts.of("widgets.example.com", "list"),
        lists_before,
        "resumed without a relist"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn status_errors_surface_as_kube_rs_api_errors() {
    let (emulator, client) = start().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");

    let status = api_error(jobs.get("missing").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    let details = status.details.expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("missing", "batch", "jobs")
    );
    assert!(jobs.get_opt("missing").await.expect("get_opt").is_none());

    jobs.create(&PostParams::default(), &job("dup"))
        .await
        .expect("first");
    let status = api_error(jobs.create(&PostParams::default(), &job("dup")).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(status.message, "jobs.batch \"dup\" already exists");

    let mut always = serde_json::to_value(job("always")).expect("json");
    always["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    let status = api_error(
        jobs.create(
            &PostParams::default(),
            &serde_json::from_value(always).expect("job"),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let details = status.details.expect("details");
    assert_eq!(details.kind, "Job");
    assert_eq!(details.causes[0].field, "spec.template.spec.restartPolicy");
    assert_eq!(details.causes[0].reason, "FieldValueNotSupported");

    let mut unnamed = serde_json::to_value(job("x")).expect("json");
    unnamed["metadata"] = json!({});
    let status = api_error(
        jobs.create(
            &PostParams::default(),
            &serde_json::from_value(unnamed).expect("job"),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("metadata.name: Required value"),
        "{}",
        status.message
    );

    let mut generated = serde_json::to_value(job("x")).expect("json");
    generated["metadata"] = json!({"generateName": "gen-"});
    let generated: Job = serde_json::from_value(generated).expect("job");
    let a = jobs
        .create(&PostParams::default(), &generated)
        .await
        .expect("generateName");
    let b = jobs
        .create(&PostParams::default(), &generated)
        .await
        .expect("generateName again");
    assert_ne!(a.metadata.name, b.metadata.name);
    assert_eq!(a.metadata.name.as_deref().map(str::len), Some("gen-".len() + 5));

    let mut elsewhere = serde_json::to_value(job("elsewhere")).expect("json");
    elsewhere["metadata"]["namespace"] = json!("kube-system");
    let status = api_error(
        jobs.create(
            &PostParams::default(),
            &serde_json::from_value(elsewhere).expect("job"),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        status.message,
        "the namespace of the provided object does not match the namespace sent on the request"
    );

    let nowhere: Api<Job> = Api::namespaced(client.clone(), "nope");
    let status = api_error(nowhere.create(&PostParams::default(), &job("j")).await);
    assert_eq!(
        (status.code, status.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );

    let status = api_error(raw(&client, "POST", "/apis/batch/v1/jobs", "application/json", "{}").await);
    assert_eq!((status.code, status.reason.as_str()), (405, "MethodNotAllowed"));
    let status = api_error(
        raw(
            &client,
            "PATCH",
            "/apis/batch/v1/namespaces/default/jobs/dup",
            "application/json",
            "{}",
        )
        .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
    let status = api_error(
        raw(
            &client,
            "PATCH",
            "/apis/batch/v1/namespaces/default/jobs/dup",
            "application/apply-patch+yaml",
            "{}",
        )
        .await,
    );
    assert_eq!(status.code, 422, "apply needs a fieldManager");

    // Wrongly typed fields are a 400, whatever the kind.
    for (path, body) in [
        (
            "/apis/batch/v1/namespaces/default/jobs",
            r#"{"metadata": {"name": "x", "labels": "oops"}}"#,
        ),
        ("/apis/batch/v1/namespaces/default/jobs", r#"{"metadata": 5}"#),
        (
            "/apis/batch/v1/namespaces/default/jobs",
            r#"{"metadata": {"name": "x"}, "spec": {"template": 1}}"#,
        ),
        (
            "/api/v1/namespaces",
            r#"{"metadata": {"name": "x", "labels": ["a"]}}"#,
        ),
        ("/api/v1/namespaces/default/pods", r#"[1, 2]"#),
    ] {
        let status = api_error(raw(&client, "POST", path, "application/json", body).await);
        assert_eq!(status.code, 400, "{body}: {}", status.message);
    }
    let status = api_error(
        raw(
            &client,
            "PUT",
            "/apis/batch/v1/namespaces/default/jobs/dup",
            "application/json",
            r#"{"metadata": {"name": "dup"}, "spec": "x"}"#,
        )
        .await,
    );
    assert_eq!(status.code, 400);
    let status = api_error(
        raw(
            &client,
            "PATCH",
            "/apis/batch/v1/namespaces/default/jobs/dup",
            "application/merge-patch+json",
            r#"{"metadata": {"annotations": {"a": 1}}}"#,
        )
        .await,
    );
    assert_eq!(status.code, 400);
    let shadow = WIDGET_CRD
        .replace("widgets.example.com", "jobs.batch")
        .replace("group: example.com", "group: batch")
        .replace("plural: widgets", "plural: jobs");
    assert!(
        emulator.register_crd_yaml(&shadow).is_err(),
        "a CRD cannot shadow a built-in kind"
    );

    // Injected 500s surface (never retried); the next request is fine.
    emulator.fail_next(1, 500);
    let status = api_error(jobs.get("dup").await);
    assert_eq!((status.code, status.reason.as_str()), (500, "InternalError"));
    jobs.get("dup").await.expect("recovered");

    // 429 with Retry-After: visible without retries, retried transparently by a default client.
    let no_retry = self::client(&emulator, false);
    emulator.fail_next(1, 429);
    let status = api_error(Api::<Job>::namespaced(no_retry, "default").get("dup").await);
    assert_eq!((status.code, status.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(1));
    emulator.fail_next(1, 429);
    jobs.get("dup").await.expect("kube-rs retries a 429");
    assert_eq!(emulator.requests().injected_failures, 3);

    // Throttling one verb of one resource: only those requests get 429 with the Retry-After
    // asked for, until lifted.
    emulator.throttle("jobs.batch", "create", 30);
    let no_retry_jobs = Api::<Job>::namespaced(self::client(&emulator, false), "default");
    let status = api_error(
        no_retry_jobs
            .create(&PostParams::default(), &job("throttled"))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(30));
    jobs.get("dup").await.expect("other verbs pass");
    emulator.unthrottle();
    no_retry_jobs
        .create(&PostParams::default(), &job("throttled"))
        .await
        .expect("lifted");
    assert_eq!(emulator.requests().injected_failures, 4);
    emulator.shutdown().await;
}

#[tokio::test]
async fn pagination_keeps_one_snapshot_and_tokens_expire_on_restart() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &widget(&format!("w{i}"), json!({})))
            .await
            .expect("create");
    }
    let first = api.list(&ListParams::default().limit(2)).await.expect("page 1");
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let snapshot_rv = first.metadata.resource_version.clone();
    api.create(&PostParams::default(), &widget("w9", json!({})))
        .await
        .expect("created mid-list");
    let mut names: Vec<String> = first.items.into_iter().filter_map(|o| o.metadata.name).collect();
    let mut token = first.metadata.continue_.clone();
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&t))
            .await
            .expect("next page");
        assert_eq!(
            page.metadata.resource_version, snapshot_rv,
            "every page has the first page's rv"
        );
        names.extend(page.items.into_iter().filter_map(|o| o.metadata.name));
        token = page.metadata.continue_;
    }
    assert_eq!(names, ["w0", "w1", "w2", "w3", "w4"], "a consistent snapshot");

    let first = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1 again");
    emulator.restart_compacted();
    let token = first.metadata.continue_.expect("a token");
    let status = api_error(
        api.list(&ListParams::default().limit(2).continue_token(&token))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(
        status
            .metadata
            .and_then(|m| m.continue_)
            .is_some_and(|c| !c.is_empty()),
        "a fresh token"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn deletion_follows_propagation_finalizers_and_preconditions() {
    let (emulator, client) = start().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");

    // batch/v1 Jobs default to Orphan: the Job comes back with the orphan finalizer.
    jobs.create(&PostParams::default(), &job("orphaned"))
        .await
        .expect("create");
    match jobs
        .delete("orphaned", &DeleteParams::default())
        .await
        .expect("delete")
    {
        either::Either::Left(job) => {
            assert!(job.metadata.deletion_timestamp.is_some());
            assert!(
                job.finalizers().iter().any(|f| f == "orphan"),
                "{:?}",
                job.finalizers()
            );
        }
        either::Either::Right(status) => panic!("expected the Job, got {status:?}"),
    }
    // The garbage collector finishes it.
    tokio::time::timeout(WAIT, async {
        while jobs.get_opt("orphaned").await.expect("get").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the orphaned job goes away");

    jobs.create(&PostParams::default(), &job("bg"))
        .await
        .expect("create");
    match jobs
        .delete("bg", &DeleteParams::background())
        .await
        .expect("delete")
    {
        either::Either::Right(status) => {
            assert_eq!(status.details.as_ref().map(|d| d.kind.as_str()), Some("jobs"));
            assert!(status.is_success());
        }
        either::Either::Left(_) => panic!("expected a Status"),
    }

    // Finalizers defer deletion; removing the last one removes the object.
    let api = widgets(&client, "default");
    let mut held = widget("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    let created = api.create(&PostParams::default(), &held).await.expect("create");
    let status = api_error(
        api.delete(
            "held",
            &DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some("other".into()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            },
        )
        .await,
    );
    assert_eq!(status.code, 409, "uid precondition");
    api.delete("held", &DeleteParams::default().dry_run())
        .await
        .expect("dry run");
    assert!(
        api.get("held")
            .await
            .expect("still there")
            .metadata
            .deletion_timestamp
            .is_none(),
        "dry run changes nothing"
    );

    let mut stream = api
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &rv(&created.metadata).to_string(),
        )
        .await
        .expect("watch")
        .boxed();
    match api
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete")
    {
        either::Either::Left(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        either::Either::Right(s) => panic!("deferred deletion answers the object, got {s:?}"),
    }
    assert!(
        api.get("held")
            .await
            .expect("still there")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    assert!(api.get_opt("held").await.expect("get").is_none());
    let kinds: Vec<String> = [
        next(&mut stream).await.expect("e1"),
        next(&mut stream).await.expect("e2"),
    ]
    .iter()
    .map(|e| name_of(e).0)
    .collect();
    assert_eq!(kinds, ["MODIFIED", "DELETED"]);

    // A running pod is deleted gracefully: the kubelet stops it, then it is gone.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("runner", &[("EMULATOR_GATE", "never")]),
    )
    .await
    .expect("pod");
    tokio::time::timeout(WAIT, async {
        loop {
            let p = pods.get("runner").await.expect("get");
            if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the pod runs");
    match pods
        .delete("runner", &DeleteParams::default())
        .await
        .expect("delete pod")
    {
        either::Either::Left(p) => assert!(p.metadata.deletion_timestamp.is_some()),
        either::Either::Right(s) => panic!("a pod delete answers the pod, got {s:?}"),
    }
    tokio::time::timeout(WAIT, async {
        while pods.get_opt("runner").await.expect("get").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the terminated pod goes away");
    emulator.shutdown().await;
}

#[tokio::test]
async fn go_down_cuts_clients_and_come_up_restores_them() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    while !matches!(next(&mut events).await.expect("event"), watcher::Event::InitDone) {}

    emulator.go_down().await;
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => panic!("expected a connection failure, got an API answer {s:?}"),
        Err(_) => {}
        Ok(_) => panic!("the server is down"),
    }
    assert_eq!(
        emulator.requests().open_watches,
        0,
        "live watch connections are cut"
    );
    emulator.come_up().await.expect("come up");
    api.create(&PostParams::default(), &widget("back", json!({})))
        .await
        .expect("create after coming up");
    loop {
        if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = next(&mut events).await
            && o.metadata.name.as_deref() == Some("back")
        {
            break;
        }
    }
    emulator.shutdown().await;
}

#[tokio::test]
async fn requests_are_counted_by_verb_and_resource() {
    let (emulator, client) = start().await;
    emulator.reset_requests();
    let api = widgets(&client, "default");
    api.list(&ListParams::default()).await.expect("list");
    api.list(&ListParams::default()).await.expect("list");
    let stream = api.watch(&WatchParams::default(), "0").await.expect("watch");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let _ = jobs.get_opt("none").await.expect("get");
    client.apiserver_version().await.expect("version");
    let counts = emulator.requests();
    assert_eq!(counts.of("widgets.example.com", "list"), 2);
    assert_eq!(counts.of("widgets.example.com", "watch"), 1);
    assert_eq!(counts.of("jobs.batch", "get"), 1);
    assert_eq!((counts.verb("list"), counts.discovery), (2, 1));
    assert_eq!(counts.open_watches, 1);
    drop(stream);
    tokio::time::timeout(WAIT, async {
        while emulator.requests().open_watches > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the watch closes when the client goes");
    emulator.shutdown().await;
}

#[tokio::test]
async fn pod_logs_tail_and_follow_until_the_container_stops() {
    let (emulator, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod(
            "talker",
            &[
                ("EMULATOR_GATE", "stop"),
                ("EMULATOR_LOG", "one\ntwo\nthree"),
                ("EMULATOR_RUN_MS", "0"),
            ],
        ),
    )
    .await
    .expect("pod");
    let all = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(text) = pods.logs("talker", &LogParams::default()).await
                && text.lines().count() == 3
            {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the container logs");
    assert_eq!(all, "one\ntwo\nthree\n");
    let tail = pods
        .logs(
            "talker",
            &LogParams {
                tail_lines: Some(2),
                ..LogParams::default()
            },
        )
        .await
        .expect("tail");
    assert_eq!(tail, "two\nthree\n");

    let stream = pods
        .log_stream(
            "talker",
            &LogParams {
                follow: true,
                tail_lines: Some(1),
                ..LogParams::default()
            },
        )
        .await
        .expect("follow");
    let mut lines = stream.lines();
    assert_eq!(next(&mut lines).await.expect("line"), "three");
    emulator.store().append_log("default", "talker", "four");
    assert_eq!(next(&mut lines).await.expect("line"), "four");
    emulator.simulation().open_gate("stop");
    let rest: Vec<String> = tokio::time::timeout(WAIT, lines.try_collect())
        .await
        .expect("ends")
        .expect("lines");
    assert!(rest.is_empty(), "{rest:?}");

    let status = api_error(pods.logs("missing", &LogParams::default()).await);
    assert_eq!(status.code, 404);
    emulator.shutdown().await;
}

#[tokio::test]
async fn events_are_one_store_seen_through_both_apis() {
    let (emulator, client) = start().await;
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "pi.1"},
        "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "namespace": "default"},
        "reason": "Tested", "message": "hello", "type": "Normal", "source": {"component": "tests"},
    }))
    .expect("event");
    core.create(&PostParams::default(), &event)
        .await
        .expect("core event");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let seen = events.get("pi.1").await.expect("events.k8s.io view");
    assert_eq!(seen.note.as_deref(), Some("hello"));
    assert_eq!(seen.regarding.and_then(|r| r.name).as_deref(), Some("pi"));

    let bad: k8s_openapi::api::events::v1::Event =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "reason": "R"})).expect("event");
    let status = api_error(events.create(&PostParams::default(), &bad).await);
    assert_eq!(
        status.code, 422,
        "events.k8s.io/v1 needs eventTime, action, reporting fields"
    );
    let by_object = core
        .list(&ListParams::default().fields("involvedObject.name=pi,involvedObject.kind=Job"))
        .await
        .expect("field selector on events");
    assert_eq!(by_object.items.len(), 1);
    emulator.shutdown().await;
}

#[tokio::test]
async fn dry_run_and_cluster_wide_lists() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    let dry = api
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &widget("ghost", json!({})),
        )
        .await;
    assert!(dry.expect("dry run").metadata.uid.is_some());
    assert!(
        api.get_opt("ghost").await.expect("get").is_none(),
        "nothing stored"
    );

    api.create(&PostParams::default(), &widget("here", json!({})))
        .await
        .expect("default ns");
    widgets(&client, "kube-public")
        .create(&PostParams::default(), &widget("there", json!({})))
        .await
        .expect("other ns");
    let everywhere: Api<DynamicObject> = Api::all_with(client.clone(), &widget_resource());
    let list = everywhere
        .list(&ListParams::default())
        .await
        .expect("all namespaces");
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, ["here", "there"], "sorted by namespace, then name");
    emulator.shutdown().await;
}

#[tokio::test]
async fn metadata_only_lists_and_watches_and_the_legacy_watch_path() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(&PostParams::default(), &widget("meta", json!({"a": "b"})))
        .await
        .expect("create");
    let list = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list_metadata");
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("a"))
            .map(String::as_str),
        Some("b")
    );
    let stream = api
        .watch_metadata(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch_metadata");
    let events = collect_until_end(stream).await;
    assert!(
        matches!(&events[..], [WatchEvent::Added(o)] if o.metadata.name.as_deref() == Some("meta")),
        "one ADDED with the object's metadata"
    );

    let request =
        http::Request::get("/apis/example.com/v1/watch/namespaces/default/widgets?timeoutSeconds=1")
            .body(Vec::new())
            .expect("request");
    let legacy = client
        .request_events::<DynamicObject>(request)
        .await
        .expect("legacy watch");
    let events = collect_until_end(legacy).await;
    assert_eq!(
        events.iter().map(name_of).collect::<Vec<_>>(),
        [("ADDED".into(), "meta".into())]
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn the_watcher_in_streaming_list_mode_gets_its_initial_state() {
    let (emulator, client) = start().await;
    let api = widgets(&client, "default");
    api.create(&PostParams::default(), &widget("first", json!({})))
        .await
        .expect("create");
    let mut events = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match next(&mut events).await.expect("watcher event") {
            watcher::Event::InitApply(o) => initial.push(o.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(initial, ["first"]);
    api.create(&PostParams::default(), &widget("second", json!({})))
        .await
        .expect("create");
    match next(&mut events).await.expect("watcher event") {
        watcher::Event::Apply(o) => assert_eq!(o.metadata.name.as_deref(), Some("second")),
        other => panic!("expected the new widget, got {other:?}"),
    }
    assert_eq!(
        emulator.requests().of("widgets.example.com", "list"),
        0,
        "no list in streaming mode"
    );
    emulator.shutdown().await;
}
