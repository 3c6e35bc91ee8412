//! Status errors as kube-rs surfaces them: codes, reasons, details and causes.
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use super::*;

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

/// Leases in namespace `team` for jobgate's service account, as deploy/'s `ha` overlay grants
/// them (its verb list in `verbs`).
fn lease_rights(verbs: &str) -> String {
    format!(
        "kind: Role\nmetadata: {{name: leases, namespace: team}}\nrules: [{{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [{verbs}]}}]\n---\n\
         kind: RoleBinding\nmetadata: {{name: leases, namespace: team}}\nroleRef: {{kind: Role, name: leases}}\n\
         subjects: [{{kind: ServiceAccount, name: jobgate, namespace: jobgate}}]\n"
    )
}

#[tokio::test]
async fn rbac_applied_at_run_time_decides_the_next_request() {
    use k8s_openapi::api::coordination::v1::Lease;
    let options = Options {
        rbac: Some(lease_rights("get")),
        ..Options::default()
    };
    let emulator = Emulator::start_with(options).await.expect("emulator starts");
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&emulator.kubeconfig_yaml("team")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let leases: Api<Lease> = Api::namespaced(Client::try_from(config).expect("client"), "team");
    assert!(leases.get_opt("member").await.expect("get is granted").is_none());
    let status = api_error(leases.list(&ListParams::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:jobgate:jobgate\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"team\""
    );

    // Granted while the client runs: its next request is allowed.
    emulator.apply_rbac(&lease_rights("get, list")).expect("apply");
    assert!(
        leases
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    // Taken away again.
    emulator.apply_rbac(&lease_rights("list")).expect("apply");
    let status = api_error(leases.get("member").await);
    assert_eq!(status.code, 403, "{status:?}");
    // An emulator without RBAC has no policy to change.
    let open = Emulator::start().await.expect("emulator starts");
    assert!(open.apply_rbac(&lease_rights("get")).is_err());
}
