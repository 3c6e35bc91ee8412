//! Custom resources held to their CRD's structural schema, as kube-apiserver holds them: unknown
//! fields pruned on create, update, patch and `/status` (a `Warning` each, or a 400 with
//! `fieldValidation=Strict`), fields under `x-kubernetes-preserve-unknown-fields` kept, and an
//! invalid object refused with 422 and the real field errors. The bundled operator CRDs carry
//! upstream's schemas, so a PyTorchJob is held to upstream's types.

use super::*;

const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [image]
            properties:
              image: {type: string, minLength: 1}
              replicas: {type: integer, format: int32, minimum: 0, maximum: 8}
              mode: {type: string, enum: [Fast, Slow]}
              port: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}
              labels: {type: object, additionalProperties: {type: string}}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
              note: {type: string, nullable: true}
          status:
            type: object
            properties:
              phase: {type: string}
              ready: {type: integer}
"#;

fn gadgets(client: &Client) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Gadget"), "gadgets");
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn gadget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": spec,
    }))
    .expect("a gadget")
}

async fn start_gadgets() -> (Emulator, Client) {
    let (emulator, client) = start().await;
    emulator.register_crd_yaml(GADGET_CRD).expect("gadget CRD");
    (emulator, client)
}

/// Sends a JSON body and returns the status, the `Warning` headers and the body.
async fn send(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> (u16, Vec<String>, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("a request");
    let response = client.send(request).await.expect("an answer");
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().expect("ASCII").to_owned())
        .collect();
    let bytes = response.into_body().collect_bytes().await.expect("a body");
    (
        status,
        warnings,
        serde_json::from_slice(&bytes).expect("a JSON body"),
    )
}

const GADGETS: &str = "/apis/example.com/v1/namespaces/default/gadgets";

#[tokio::test]
async fn create_prunes_unknown_fields_with_a_warning_each() {
    let (_emulator, client) = start_gadgets().await;
    let body = json!({
        "apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g", "labels": {"a": "b"}},
        "spec": {"image": "x", "imagePullPolicy": "Always", "labels": {"free": "form"},
                 "extra": {"anything": {"goes": [1]}}},
        "colour": "blue",
    });
    let (code, warnings, created) = send(&client, "POST", GADGETS, "application/json", body).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        warnings,
        [
            r#"299 - "unknown field \"colour\"""#,
            r#"299 - "unknown field \"spec.imagePullPolicy\"""#
        ]
    );
    let stored = gadgets(&client).get("g").await.expect("get");
    assert_eq!(
        stored.data,
        json!({"spec": {"image": "x", "labels": {"free": "form"}, "extra": {"anything": {"goes": [1]}}}})
    );
    assert_eq!(created["spec"], stored.data["spec"]);
    assert_eq!(stored.metadata.labels.expect("labels")["a"], "b");

    // Strict refuses the same body; Ignore drops silently.
    let (code, _, status) = send(
        &client,
        "POST",
        &format!("{GADGETS}?fieldValidation=Strict"),
        "application/json",
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "s"},
               "spec": {"image": "x", "imagePullPolicy": "Always"}}),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (400, Some("BadRequest")),
        "{status}"
    );
    assert_eq!(
        status["message"],
        r#"strict decoding error: unknown field "spec.imagePullPolicy""#
    );
    let (code, warnings, _) = send(
        &client,
        "POST",
        &format!("{GADGETS}?fieldValidation=Ignore"),
        "application/json",
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "i"},
               "spec": {"image": "x", "imagePullPolicy": "Always"}}),
    )
    .await;
    assert_eq!((code, warnings.len()), (201, 0));
}

#[tokio::test]
async fn an_invalid_object_is_refused_with_the_field_errors() {
    let (_emulator, client) = start_gadgets().await;
    let api = gadgets(&client);
    let status = api_error(
        api.create(
            &PostParams::default(),
            &gadget("g", json!({"image": "x", "replicas": "2"})),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        r#"Gadget.example.com "g" is invalid: spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#
    );
    let details = status.details.expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("g", "example.com", "Gadget")
    );
    assert_eq!(details.causes[0].reason, "FieldValueTypeInvalid");
    assert_eq!(details.causes[0].field, "spec.replicas");

    let status = api_error(
        api.create(
            &PostParams::default(),
            &gadget(
                "h",
                json!({"replicas": 9, "mode": "Medium", "port": true, "labels": {"k": 1}}),
            ),
        )
        .await,
    );
    assert_eq!(
        status.message,
        concat!(
            r#"Gadget.example.com "h" is invalid: [spec.image: Required value, "#,
            r#"spec.labels.k: Invalid value: "integer": spec.labels.k in body must be of type string: "integer", "#,
            r#"spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow", "#,
            r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean", "#,
            r#"spec.replicas: Invalid value: 9: spec.replicas in body should be less than or equal to 8]"#
        )
    );
    assert!(api.get_opt("g").await.expect("get").is_none());
    assert!(api.get_opt("h").await.expect("get").is_none());

    // What the schema allows: int-or-string either way, null where nullable, an absent null
    // where not.
    for (name, port) in [("a", json!(8080)), ("b", json!("http"))] {
        api.create(
            &PostParams::default(),
            &gadget(
                name,
                json!({"image": "x", "port": port, "note": null, "mode": null}),
            ),
        )
        .await
        .expect("valid");
    }
    assert_eq!(
        api.get("a").await.expect("get").data["spec"],
        json!({"image": "x", "port": 8080, "note": null})
    );
}

#[tokio::test]
async fn update_and_patch_are_pruned_and_validated_after_the_patch() {
    let (_emulator, client) = start_gadgets().await;
    let api = gadgets(&client);
    api.create(
        &PostParams::default(),
        &gadget("g", json!({"image": "x", "replicas": 1})),
    )
    .await
    .expect("create");

    // Merge patch: an unknown field is dropped, a wrong type refused.
    let (code, warnings, patched) = send(
        &client,
        "PATCH",
        &format!("{GADGETS}/g"),
        "application/merge-patch+json",
        json!({"spec": {"replicas": 2, "replica": 3}}),
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.replica\"""#]);
    assert_eq!(patched["spec"], json!({"image": "x", "replicas": 2}));
    let status = api_error(
        api.patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "3"}})),
        )
        .await,
    );
    assert_eq!(
        status.message,
        r#"Gadget.example.com "g" is invalid: spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#
    );
    // JSON patch: judged on the object it produces.
    let status = api_error(
        api.patch(
            "g",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([{"op": "remove", "path": "/spec/image"}])).expect("patch"),
            ),
        )
        .await,
    );
    assert_eq!(
        status.message,
        r#"Gadget.example.com "g" is invalid: spec.image: Required value"#
    );

    // PUT: the same rules.
    let mut current = api.get("g").await.expect("get");
    current.data["spec"]["mode"] = json!("Fast");
    current.data["spec"]["speed"] = json!(11);
    let replaced = api
        .replace("g", &PostParams::default(), &current)
        .await
        .expect("replace");
    assert_eq!(
        replaced.data["spec"],
        json!({"image": "x", "replicas": 2, "mode": "Fast"})
    );
    let mut current = replaced;
    current.data["spec"]["mode"] = json!("fast");
    let status = api_error(api.replace("g", &PostParams::default(), &current).await);
    assert_eq!(
        status.message,
        r#"Gadget.example.com "g" is invalid: spec.mode: Unsupported value: "fast": supported values: "Fast", "Slow""#
    );
    assert_eq!(api.get("g").await.expect("get").data["spec"]["mode"], "Fast");
}

#[tokio::test]
async fn the_status_subresource_is_held_to_the_schema_too() {
    let (_emulator, client) = start_gadgets().await;
    let api = gadgets(&client);
    api.create(&PostParams::default(), &gadget("g", json!({"image": "x"})))
        .await
        .expect("create");
    let patched = api
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "ready": 1, "readyy": 2}})),
        )
        .await
        .expect("patch status");
    assert_eq!(patched.data["status"], json!({"phase": "Running", "ready": 1}));
    let status = api_error(
        api.patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": "one"}})),
        )
        .await,
    );
    assert_eq!(
        status.message,
        r#"Gadget.example.com "g" is invalid: status.ready: Invalid value: "string": status.ready in body must be of type integer: "string""#
    );
    let mut current = api.get_status("g").await.expect("get");
    current.data["status"]["ready"] = json!(true);
    let status = api_error(api.replace_status("g", &PostParams::default(), &current).await);
    assert_eq!(status.details.expect("details").causes[0].field, "status.ready");
}

fn pytorchjob(replicas: Value, container: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train"},
        "spec": {
            "runPolicy": {"backoffLimit": 1},
            "pytorchReplicaSpecs": {"Master": {
                "replicas": replicas, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [container]}},
            }},
        },
    }))
    .expect("a PyTorchJob")
}

#[tokio::test]
async fn the_bundled_operator_crds_carry_upstream_types() {
    let (emulator, client) = start().await;
    emulator.register_workload_crds(&["PyTorchJob"]).expect("CRDs");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeflow.org", "v1", "PyTorchJob"),
        "pytorchjobs",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let status = api_error(
        api.create(
            &PostParams::default(),
            &pytorchjob(json!("1"), json!({"name": "pytorch", "image": "i"})),
        )
        .await,
    );
    assert_eq!(
        status.message,
        r#"PyTorchJob.kubeflow.org "train" is invalid: spec.pytorchReplicaSpecs.Master.replicas: Invalid value: "string": spec.pytorchReplicaSpecs.Master.replicas in body must be of type integer: "string""#
    );
    let status = api_error(
        api.create(
            &PostParams::default(),
            &pytorchjob(
                json!(1),
                json!({"name": "pytorch", "image": "i", "resources": {"limits": {"cpu": "lots"}}}),
            ),
        )
        .await,
    );
    assert!(
        status.message.contains("spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits.cpu in body should match"),
        "{}",
        status.message
    );
    // A misspelled container field is pruned; the pod template's labels are kept.
    let created = api
        .create(
            &PostParams::default(),
            &pytorchjob(
                json!(1),
                json!({"name": "pytorch", "image": "i", "commands": ["python3"]}),
            ),
        )
        .await
        .expect("create");
    let master = &created.data["spec"]["pytorchReplicaSpecs"]["Master"]["template"];
    assert_eq!(
        master["spec"]["containers"][0],
        json!({"name": "pytorch", "image": "i"})
    );
    assert_eq!(master["metadata"]["labels"]["a"], "b");
}
