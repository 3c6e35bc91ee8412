//! A job's trace on Kubernetes: the batch/v1 Job's container gets the job's `TRACEPARENT` and
//! `OTEL_*` variables (the job's own `env` entry of the same name winning), and the job's
//! spans (its root, each pod's attempt with its exit code) reach the OTLP collector in the
//! caller's trace.

use serde_json::{Value, json};

use crate::common::cluster::Cluster;
use crate::common::otlp::Collector;
use crate::support::input;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

#[tokio::test]
async fn the_jobs_container_gets_its_trace_context_and_its_pods_are_attempt_spans() {
    let Some(cluster) = Cluster::emulated("it scripts its pods through EMULATOR_EXIT_CODE").await else {
        return;
    };
    let collector = Collector::start().await;
    let server = cluster.jobgate(&["--otlp-endpoint", &collector.endpoint]).await;
    server.wait_ready_is(200).await;
    let answer: Value = server
        .http()
        .post(server.url("/graphql"))
        .header("traceparent", format!("00-{CALLER_TRACE}-00f067aa0ba902b7-01"))
        .json(&json!({
            "query": "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id traceId } } }",
            "variables": {"input": input(&[("OTEL_SERVICE_NAME", "mine")], json!({"name": "traced"}))},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job = &answer["data"]["submitJob"]["job"];
    let id = job["id"].as_str().expect("a job").to_owned();
    assert_eq!(job["traceId"], CALLER_TRACE);
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");

    let spans = collector.wait_for_span(CALLER_TRACE, "job").await;
    let root = spans.iter().find(|s| s.name == "job").unwrap();
    let attempts: Vec<_> = spans.iter().filter(|s| s.name == "attempt").collect();
    assert_eq!(attempts.len(), 1, "{spans:#?}");
    assert_eq!(attempts[0].parent_span_id, root.span_id);
    assert_eq!(attempts[0].attributes["jobgate.attempt.exit_code"], 0);
    assert!(
        attempts[0].attributes["k8s.pod.name"].is_string(),
        "{:?}",
        attempts[0]
    );

    let k = cluster.jobs().get(&format!("jobgate-{id}")).await.unwrap();
    let container = &k.spec.unwrap().template.spec.unwrap().containers[0];
    let env: Vec<(String, String)> = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    let value = |name: &str| -> Vec<&str> {
        env.iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(
        value("TRACEPARENT"),
        [format!("00-{CALLER_TRACE}-{}-01", root.span_id)],
        "{env:?}"
    );
    assert_eq!(
        value("OTEL_SERVICE_NAME"),
        ["mine"],
        "the job's own entry wins, once: {env:?}"
    );
    let attributes = value("OTEL_RESOURCE_ATTRIBUTES");
    assert_eq!(attributes.len(), 1);
    assert!(attributes[0].contains(&format!("jobgate.job.id={id}")), "{env:?}");
}
