//! Validating admission webhooks as a client sees them: ValidatingWebhookConfigurations served
//! like other kinds (and validated), the AdmissionReview a webhook receives, denials with the
//! real wording and codes, warnings, and a webhook that cannot be called under each
//! `failurePolicy`. The webhooks are small receivers on 127.0.0.1 (plain HTTP, which the
//! emulator accepts for loopback URLs only).
//!
//! It must not define fixtures other areas need: those live in `main.rs`.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;

use super::*;

/// What a receiver answers to a review: allowed, or the `status` of a denial, and warnings.
#[derive(Clone)]
enum Answer {
    Allow(Vec<&'static str>),
    Deny(Value),
    /// Never answers (holds the request open).
    Hang,
}

/// A webhook on 127.0.0.1: answers every review as told, and keeps what it received.
struct Receiver {
    url: String,
    reviews: Arc<Mutex<Vec<Value>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(answer: Answer) -> Receiver {
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let state = (answer, reviews.clone());
        let app = axum::Router::new()
            .fallback(
                |State((answer, reviews)): State<(Answer, Arc<Mutex<Vec<Value>>>)>,
                 uri: axum::http::Uri,
                 body: axum::body::Bytes| async move {
                    let mut review: Value = serde_json::from_slice(&body).expect("a review");
                    review["query"] = json!(uri.query());
                    let uid = review["request"]["uid"].clone();
                    reviews.lock().unwrap().push(review);
                    let response = match answer {
                        Answer::Allow(warnings) => json!({"uid": uid, "allowed": true, "warnings": warnings}),
                        Answer::Deny(status) => json!({"uid": uid, "allowed": false, "status": status}),
                        Answer::Hang => std::future::pending().await,
                    };
                    axum::Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
                },
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/validate", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Receiver {
            url,
            reviews,
            _task: task,
        }
    }

    fn reviews(&self) -> Vec<Value> {
        self.reviews.lock().unwrap().clone()
    }
}

/// A URL nothing listens on.
async fn closed_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}/validate")
}

fn configuration(name: &str, hook: &str, url: &str, extra: Value) -> ValidatingWebhookConfiguration {
    let mut webhook = json!({
        "name": hook,
        "clientConfig": {"url": url},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        webhook[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [webhook],
    }))
    .expect("a configuration")
}

async fn install(client: &Client, configuration: &ValidatingWebhookConfiguration) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.create(&PostParams::default(), configuration)
        .await
        .expect("the configuration is accepted");
}

fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))
    .expect("a config map")
}

#[tokio::test]
async fn configurations_are_served_defaulted_and_validated() {
    let (_emulator, client) = start().await;
    let discovery = Discovery::new(client.clone()).run().await.expect("discovery");
    let (resource, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        ))
        .expect("the kind is discovered");
    assert_eq!(resource.plural, "validatingwebhookconfigurations");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);

    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let created = api
        .create(
            &PostParams::default(),
            &configuration(
                "policy",
                "deny.example.com",
                "https://webhook.example.com/x",
                json!({}),
            ),
        )
        .await
        .expect("created");
    let hook = &created.webhooks.as_ref().expect("webhooks")[0];
    assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(hook.match_policy.as_deref(), Some("Equivalent"));
    assert_eq!(hook.timeout_seconds, Some(10));
    assert_eq!(hook.rules.as_ref().expect("rules")[0].scope.as_deref(), Some("*"));
    assert_eq!(
        api.list(&ListParams::default()).await.expect("list").items.len(),
        1
    );
    api.delete("policy", &DeleteParams::default())
        .await
        .expect("delete");

    // A cluster calls https:// URLs only; the emulator also takes http:// on loopback.
    let status = api_error(
        api.create(
            &PostParams::default(),
            &configuration(
                "plain",
                "deny.example.com",
                "http://webhook.example.com/x",
                json!({}),
            ),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains(
            "webhooks[0].clientConfig.url: Invalid value: \"http://webhook.example.com/x\": 'https' is the only allowed URL scheme"
        ),
        "{}",
        status.message
    );
    let mut bad = configuration(
        "bad",
        "deny",
        "https://webhook.example.com/x",
        json!({"timeoutSeconds": 31}),
    );
    bad.webhooks.as_mut().expect("webhooks")[0].side_effects = String::new();
    let status = api_error(api.create(&PostParams::default(), &bad).await);
    assert_eq!(status.code, 422);
    for part in [
        "webhooks[0].name: Invalid value: \"deny\": should be a domain with at least three segments separated by dots",
        "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        "webhooks[0].sideEffects: Unsupported value: \"\"",
    ] {
        assert!(status.message.contains(part), "{part} in {}", status.message);
    }
}

#[tokio::test]
async fn a_denial_is_the_clients_error_with_the_webhooks_message_and_code() {
    let (_emulator, client) = start().await;
    let receiver = Receiver::start(Answer::Deny(
        json!({"message": "config maps are closed today", "code": 403}),
    ))
    .await;
    install(
        &client,
        &configuration("policy", "deny.example.com", &receiver.url, json!({})),
    )
    .await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let status = api_error(
        maps.create(&PostParams::default(), &config_map("c", json!({})))
            .await,
    );
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "admission webhook \"deny.example.com\" denied the request: config maps are closed today"
    );
    assert!(maps.get_opt("c").await.expect("get").is_none(), "nothing stored");

    let reviews = receiver.reviews();
    assert_eq!(reviews.len(), 1);
    let review = &reviews[0];
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["query"], "timeout=10s");
    let request = &review["request"];
    assert!(
        request["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{request}"
    );
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["name"], "c");
    assert_eq!(
        request["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(request["object"]["data"], json!({"k": "v"}));
    assert_eq!(request["dryRun"], false);
    assert_eq!(request["options"]["kind"], "CreateOptions");

    // Other kinds and operations are not the webhook's.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &job("j"))
        .await
        .expect("a job is not matched");
    assert_eq!(receiver.reviews().len(), 1);
}

#[tokio::test]
async fn a_denial_without_a_code_is_400_and_without_a_message_says_so() {
    let (_emulator, client) = start().await;
    let receiver = Receiver::start(Answer::Deny(json!({}))).await;
    install(
        &client,
        &configuration("policy", "quiet.example.com", &receiver.url, json!({})),
    )
    .await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let status = api_error(
        maps.create(&PostParams::default(), &config_map("c", json!({})))
            .await,
    );
    assert_eq!(status.code, 400);
    assert_eq!(
        status.message,
        "admission webhook \"quiet.example.com\" denied the request without explanation"
    );
}

#[tokio::test]
async fn an_allowed_write_carries_the_webhooks_warnings() {
    let (emulator, client) = start().await;
    let receiver = Receiver::start(Answer::Allow(vec!["config maps are deprecated here"])).await;
    install(
        &client,
        &configuration("policy", "warn.example.com", &receiver.url, json!({})),
    )
    .await;
    let response = reqwest::Client::new()
        .post(format!("{}/api/v1/namespaces/default/configmaps", emulator.url()))
        .header("content-type", "application/json")
        .body(serde_json::to_string(&config_map("c", json!({}))).expect("json"))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 201);
    let warnings: Vec<&str> = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(warnings, ["299 - \"config maps are deprecated here\""]);
}

#[tokio::test]
async fn a_webhook_that_cannot_be_called_fails_the_write_unless_it_is_ignored() {
    let (_emulator, client) = start().await;
    let url = closed_url().await;
    install(
        &client,
        &configuration("policy", "down.example.com", &url, json!({})),
    )
    .await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let status = api_error(
        maps.create(&PostParams::default(), &config_map("c", json!({})))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (500, "InternalError"));
    let address = url.trim_start_matches("http://").trim_end_matches("/validate");
    assert_eq!(
        status.message,
        format!(
            "Internal error occurred: failed calling webhook \"down.example.com\": failed to call webhook: Post \"{url}?timeout=10s\": dial tcp {address}: connect: connection refused"
        )
    );
    assert!(maps.get_opt("c").await.expect("get").is_none());

    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configurations
        .delete("policy", &DeleteParams::default())
        .await
        .expect("delete");
    install(
        &client,
        &configuration(
            "lenient",
            "down.example.com",
            &url,
            json!({"failurePolicy": "Ignore"}),
        ),
    )
    .await;
    maps.create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .expect("an ignored webhook lets the write through");
}

#[tokio::test]
async fn a_webhook_that_does_not_answer_in_time_fails_the_write() {
    let (_emulator, client) = start().await;
    let receiver = Receiver::start(Answer::Hang).await;
    install(
        &client,
        &configuration(
            "policy",
            "slow.example.com",
            &receiver.url,
            json!({"timeoutSeconds": 1}),
        ),
    )
    .await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let status = api_error(
        maps.create(&PostParams::default(), &config_map("c", json!({})))
            .await,
    );
    assert_eq!(status.code, 500);
    assert_eq!(
        status.message,
        format!(
            "Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \"{}?timeout=1s\": context deadline exceeded",
            receiver.url
        )
    );
}

#[tokio::test]
async fn updates_and_patches_are_admitted_with_the_old_object_and_selectors_apply() {
    let (_emulator, client) = start().await;
    let receiver = Receiver::start(Answer::Deny(
        json!({"message": "frozen", "code": 422, "reason": "Invalid"}),
    ))
    .await;
    let rules = json!([{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]);
    install(
        &client,
        &configuration(
            "policy",
            "freeze.example.com",
            &receiver.url,
            json!({"rules": rules, "objectSelector": {"matchLabels": {"frozen": "yes"}}}),
        ),
    )
    .await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    maps.create(&PostParams::default(), &config_map("free", json!({})))
        .await
        .expect("creates are not matched");
    maps.create(
        &PostParams::default(),
        &config_map("ice", json!({"frozen": "yes"})),
    )
    .await
    .expect("creates are not matched");
    // Not selected: the webhook is not asked.
    maps.patch(
        "free",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .expect("an unselected object is not sent");
    assert!(receiver.reviews().is_empty());

    let status = api_error(
        maps.patch(
            "ice",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "admission webhook \"freeze.example.com\" denied the request: frozen"
    );
    let mut ice = maps.get("ice").await.expect("get");
    assert_eq!(ice.data.as_ref().expect("data")["k"], "v", "nothing stored");
    ice.data = Some([("k".to_owned(), "x".to_owned())].into());
    let status = api_error(maps.replace("ice", &PostParams::default(), &ice).await);
    assert_eq!(status.code, 422);
    let reviews = receiver.reviews();
    assert_eq!(reviews.len(), 2);
    let request = &reviews[1]["request"];
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(request["options"]["kind"], "UpdateOptions");
    assert_eq!(request["object"]["data"]["k"], "x");
    assert_eq!(request["oldObject"]["data"]["k"], "v");

    // A namespace selector the namespace does not match: not asked.
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut policy = configurations.get("policy").await.expect("get");
    policy.webhooks.as_mut().expect("webhooks")[0].namespace_selector =
        Some(serde_json::from_value(json!({"matchLabels": {"team": "ice"}})).expect("selector"));
    configurations
        .replace("policy", &PostParams::default(), &policy)
        .await
        .expect("replace");
    maps.replace("ice", &PostParams::default(), &ice)
        .await
        .expect("the namespace is not selected");
    assert_eq!(receiver.reviews().len(), 2);
}
