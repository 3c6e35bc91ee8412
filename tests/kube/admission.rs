//! What jobgate does when admission refuses its workload: a validating admission webhook (a
//! receiver in the test, on 127.0.0.1) configured on the emulated API server, seen through
//! GraphQL as a user sees it. A denial fails the job with the API server's message after one
//! create; a webhook that cannot be called (`failurePolicy: Fail`, so every create is a 500)
//! is retried, then fails the job with the last message once `--launch-retry-limit-secs` has
//! passed; with `failurePolicy: Ignore` the job runs.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::common::Server;
use crate::common::cluster::Cluster;
use crate::support::{JOB_FIELDS, input};

/// A validating webhook on 127.0.0.1 that denies every review with `status`, keeping them.
struct DenyingWebhook {
    url: String,
    reviews: Arc<Mutex<Vec<Value>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl DenyingWebhook {
    async fn start(status: Value) -> DenyingWebhook {
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let kept = reviews.clone();
        let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
            let (kept, status) = (kept.clone(), status.clone());
            async move {
                let review: Value = serde_json::from_slice(&body).unwrap();
                let uid = review["request"]["uid"].clone();
                kept.lock().unwrap().push(review);
                axum::Json(json!({
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": uid, "allowed": false, "status": status},
                }))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/validate", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        DenyingWebhook {
            url,
            reviews,
            _task: task,
        }
    }
}

/// A URL on 127.0.0.1 that nothing listens on: a webhook that is down.
async fn down_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/validate")
}

/// Installs a ValidatingWebhookConfiguration whose one webhook `name` at `url` validates
/// creates of `resource` in `group`, with `failure_policy`.
async fn install(
    cluster: &Cluster,
    name: &str,
    url: &str,
    group: &str,
    resource: &str,
    failure_policy: &str,
) {
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "policy"},
        "webhooks": [{
            "name": name,
            "clientConfig": {"url": url},
            "rules": [{"operations": ["CREATE"], "apiGroups": [group], "apiVersions": ["*"], "resources": [resource]}],
            "failurePolicy": failure_policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(cluster.client.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .unwrap();
}

/// The job's recorded events: (phase, reason, message).
async fn events(server: &Server, id: &str) -> Vec<Value> {
    let data = server
        .gql_ok(
            "query($id: ID!) { job(id: $id) { events(last: 100) { phase reason message } } }",
            json!({"id": id}),
        )
        .await;
    data["job"]["events"].as_array().unwrap().clone()
}

/// The job's FAILED event.
async fn failed_event(server: &Server, id: &str) -> Value {
    let events = events(server, id).await;
    events
        .iter()
        .find(|e| e["phase"] == "FAILED")
        .cloned()
        .unwrap_or_else(|| panic!("no FAILED event: {events:?}"))
}

#[tokio::test]
async fn a_job_denied_by_an_admission_webhook_fails_with_the_api_servers_message_once() {
    let Some(cluster) = Cluster::emulated("an admission webhook of the test's").await else {
        return;
    };
    let webhook =
        DenyingWebhook::start(json!({"message": "jobs must name a cost center", "code": 403})).await;
    install(
        &cluster,
        "jobs.policy.example.com",
        &webhook.url,
        "batch",
        "jobs",
        "Fail",
    )
    .await;
    let server = cluster.jobgate(&[]).await;
    let id = server.submit(input(&[], json!({}))).await;
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("FAILED")
    );
    let expected =
        "admission webhook \"jobs.policy.example.com\" denied the request: jobs must name a cost center";
    let job = server.job_with(&id, JOB_FIELDS).await;
    assert!(job["message"].as_str().unwrap().contains(expected), "{job}");
    let failed = failed_event(&server, &id).await;
    assert_eq!(failed["reason"], "Forbidden", "{failed}");
    assert!(failed["message"].as_str().unwrap().contains(expected), "{failed}");
    // Denied once, not asked again; the webhook saw jobgate's Job.
    assert_eq!(cluster.emu().requests().of("jobs.batch", "create"), 1);
    assert!(cluster.managed_jobs().await.is_empty());
    let reviews = webhook.reviews.lock().unwrap().clone();
    assert_eq!(reviews.len(), 1);
    let request = &reviews[0]["request"];
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["namespace"], cluster.namespace());
    assert_eq!(
        request["object"]["metadata"]["labels"]["jobgate.io/job-id"],
        id.as_str()
    );
}

#[tokio::test]
async fn a_workload_denied_by_an_admission_webhook_fails_with_the_api_servers_message_once() {
    // Under the RBAC of the overlay that lets jobgate run workload kinds.
    let Some(cluster) = Cluster::emulated_as("an admission webhook of the test's", "workload-kinds").await
    else {
        return;
    };
    cluster.emu().register_workload_crds(&["PyTorchJob"]).unwrap();
    // No code: the API server answers 400.
    let webhook = DenyingWebhook::start(json!({"message": "no GPUs for PyTorch today"})).await;
    install(
        &cluster,
        "training.policy.example.com",
        &webhook.url,
        "kubeflow.org",
        "pytorchjobs",
        "Fail",
    )
    .await;
    let server = cluster.jobgate(&[]).await;
    let id = server
        .submit(json!({
            "template": "pytorchjob",
            "image": "example/work:1",
            "command": ["python3", "main.py"],
        }))
        .await;
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("FAILED")
    );
    let failed = failed_event(&server, &id).await;
    assert_eq!(failed["reason"], "InvalidWorkload", "{failed}");
    assert!(
        failed["message"].as_str().unwrap().contains(
            "admission webhook \"training.policy.example.com\" denied the request: no GPUs for PyTorch today"
        ),
        "{failed}"
    );
    assert_eq!(
        cluster.emu().requests().of("pytorchjobs.kubeflow.org", "create"),
        1
    );
    assert_eq!(webhook.reviews.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_webhook_that_is_down_fails_the_job_after_the_retry_limit_with_the_last_message() {
    let Some(cluster) = Cluster::emulated("an admission webhook of the test's").await else {
        return;
    };
    let url = down_url().await;
    install(&cluster, "jobs.policy.example.com", &url, "batch", "jobs", "Fail").await;
    let server = cluster.jobgate(&["--launch-retry-limit-secs", "1"]).await;
    let id = server.submit(input(&[], json!({}))).await;
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("FAILED")
    );
    let expected =
        "Internal error occurred: failed calling webhook \"jobs.policy.example.com\": failed to call webhook";
    let failed = failed_event(&server, &id).await;
    assert_eq!(failed["reason"], "ApiServerError", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains(expected), "{failed}");
    assert!(message.contains("connection refused"), "{failed}");
    assert!(message.contains("gave up after retrying for 1s"), "{failed}");
    // Retried meanwhile, PENDING with the reason, then no more.
    let events = events(&server, &id).await;
    assert!(
        events
            .iter()
            .any(|e| e["phase"] == "PENDING" && e["reason"] == "ApiServerError"),
        "{events:?}"
    );
    let creates = cluster.emu().requests().of("jobs.batch", "create");
    assert!(creates >= 2, "created {creates} times");
    assert!(cluster.managed_jobs().await.is_empty());
    let job = server.job_with(&id, JOB_FIELDS).await;
    let condition = job["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "WorkloadCreated")
        .cloned()
        .unwrap_or_else(|| panic!("no WorkloadCreated condition: {job}"));
    assert_eq!(condition["status"], "False", "{job}");
    assert_eq!(condition["reason"], "ApiServerError", "{job}");
}

#[tokio::test]
async fn a_webhook_that_is_down_and_ignored_lets_the_job_run() {
    let Some(cluster) = Cluster::emulated("an admission webhook of the test's").await else {
        return;
    };
    let url = down_url().await;
    install(
        &cluster,
        "jobs.policy.example.com",
        &url,
        "batch",
        "jobs",
        "Ignore",
    )
    .await;
    let server = cluster.jobgate(&["--launch-retry-limit-secs", "1"]).await;
    let id = server.submit(input(&[], json!({}))).await;
    assert_eq!(
        server.wait_terminal(&id).await.last().map(String::as_str),
        Some("SUCCEEDED")
    );
    assert_eq!(cluster.emu().requests().of("jobs.batch", "create"), 1);
}
