//! Discovery as kube-rs reads it: the built-in kinds and the kinds of registered CRDs.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

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
