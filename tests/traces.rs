//! Traces of jobs, end to end: jobgate exports each job's spans over OTLP/HTTP to a collector
//! on 127.0.0.1 that decodes the protobuf itself (`common::otlp`), and the test checks what a
//! tracing backend would show: one trace per job with the caller's trace id when its request
//! (HTTP header, or WebSocket `connection_init` / `subscribe` payload) named one, the spans'
//! names and parent links, attempts with their exit codes, error status on failure, a whole
//! trace across a restart, the trace context inside the job's process and on its webhook
//! deliveries, and nothing sent without `--otlp-endpoint`.

mod common;

use std::collections::HashMap;

use common::otlp::{CollectedSpan, Collector};
use common::receiver::Receiver;
use common::{GqlWs, Polling, Server};
use serde_json::{Value, json};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

const SUBMIT: &str = "mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id traceId } } }";

/// Submits over HTTP with these headers; returns (job id, traceId).
async fn submit_with_headers(server: &Server, input: Value, headers: &[(&str, &str)]) -> (String, String) {
    let mut request = server
        .http()
        .post(server.url("/graphql"))
        .json(&json!({"query": SUBMIT, "variables": {"input": input}}));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer: Value = request.send().await.unwrap().json().await.unwrap();
    let job = &answer["data"]["submitJob"]["job"];
    assert!(job.is_object(), "{answer}");
    (
        job["id"].as_str().unwrap().to_owned(),
        job["traceId"].as_str().unwrap().to_owned(),
    )
}

fn by_name<'a>(spans: &'a [CollectedSpan], name: &str) -> Vec<&'a CollectedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [CollectedSpan], name: &str) -> &'a CollectedSpan {
    let found = by_name(spans, name);
    assert_eq!(found.len(), 1, "one span {name:?}, got {spans:#?}");
    found[0]
}

/// The job's spans once its root span arrived, checked for shape: every span of the job is a
/// child of its root span, itself a child of `submitJob` when the job came from one.
async fn job_trace(collector: &Collector, trace_id: &str, job_id: &str) -> Vec<CollectedSpan> {
    let spans: Vec<CollectedSpan> = collector
        .wait_for_span(trace_id, "job")
        .await
        .into_iter()
        .filter(|s| s.attributes.get("jobgate.job.id") == Some(&json!(job_id)))
        .collect();
    let root = one(&spans, "job");
    for name in ["queued", "launching", "finishing"] {
        assert_eq!(one(&spans, name).parent_span_id, root.span_id, "{name}");
    }
    for attempt in by_name(&spans, "attempt") {
        assert_eq!(attempt.parent_span_id, root.span_id);
    }
    // Spans are unique.
    let mut ids: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), spans.len(), "a span was sent twice: {spans:#?}");
    spans
}

#[tokio::test]
async fn a_job_is_one_trace_that_joins_its_callers_and_reaches_its_process() {
    let collector = Collector::start().await;
    let server = Server::start(&[
        "--otlp-endpoint",
        &collector.endpoint,
        "--otlp-service-name",
        "jobgate-under-test",
        "--otlp-header",
        "authorization=Bearer collector-token",
    ])
    .await;
    let (id, trace_id) = submit_with_headers(
        &server,
        json!({"command": sh("printf %s \"$TRACEPARENT\" > \"$JOBGATE_RESULT_FILE\"")}),
        &[
            ("traceparent", &traceparent(CALLER_TRACE, CALLER_SPAN)),
            ("tracestate", "vendor=1"),
        ],
    )
    .await;
    assert_eq!(trace_id, CALLER_TRACE, "the job joins its caller's trace");
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");

    let spans = job_trace(&collector, CALLER_TRACE, &id).await;
    let request = one(&spans, "submitJob");
    assert_eq!(
        request.parent_span_id, CALLER_SPAN,
        "the request is a child of the caller's span"
    );
    assert_eq!(one(&spans, "validate").parent_span_id, request.span_id);
    assert_eq!(one(&spans, "commit").parent_span_id, request.span_id);
    let root = one(&spans, "job");
    assert_eq!(root.parent_span_id, request.span_id);
    assert_eq!(root.attributes["jobgate.job.phase"], "SUCCEEDED");
    assert_eq!(root.status_code, 0);
    assert_eq!(root.service, "jobgate-under-test");
    let attempts = by_name(&spans, "attempt");
    assert_eq!(attempts.len(), 1, "{spans:#?}");
    assert_eq!(attempts[0].attributes["jobgate.attempt.exit_code"], 0);
    assert!(root.start_unix_nano <= one(&spans, "queued").start_unix_nano);
    assert!(root.end_unix_nano >= one(&spans, "finishing").end_unix_nano);
    assert!(
        collector
            .header_values("authorization")
            .iter()
            .all(|h| h == "Bearer collector-token")
    );

    // The process saw the job's root span as its parent.
    let job = server
        .job_with(
            &id,
            "result traceId timeline { kind name startedAt endedAt attempt exitCode failed }",
        )
        .await;
    assert_eq!(job["result"], json!(traceparent(CALLER_TRACE, &root.span_id)));
    let kinds: Vec<&str> = job["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["QUEUED", "LAUNCHING", "ATTEMPT", "FINISHING"], "{job}");
    assert!(
        job["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["endedAt"].is_string())
    );
    assert_eq!(job["timeline"][2]["exitCode"], 0);
}

#[tokio::test]
async fn a_failed_job_has_error_status_and_each_attempt_its_exit_code() {
    let collector = Collector::start().await;
    let server = Server::start(&["--otlp-endpoint", &collector.endpoint]).await;
    // No traceparent: a trace of its own.
    let (id, trace_id) = submit_with_headers(
        &server,
        json!({"command": sh("exit 3"), "backoffLimit": 1}),
        &[("traceparent", "not-a-traceparent")],
    )
    .await;
    assert_eq!(trace_id.len(), 32);
    assert_ne!(trace_id, CALLER_TRACE);
    assert_eq!(server.terminal_phase(&id).await, "FAILED");
    let spans = job_trace(&collector, &trace_id, &id).await;
    let request = one(&spans, "submitJob");
    assert_eq!(
        request.parent_span_id, "",
        "a malformed traceparent starts a new trace"
    );
    let root = one(&spans, "job");
    assert_eq!(root.status_code, 2, "error status: {root:#?}");
    assert_eq!(root.attributes["jobgate.job.phase"], "FAILED");
    let attempts = by_name(&spans, "attempt");
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    for attempt in attempts {
        assert_eq!(attempt.attributes["jobgate.attempt.exit_code"], 3);
        assert_eq!(attempt.attributes["jobgate.attempt.failure_cause"], "ERROR");
        assert_eq!(attempt.status_code, 2);
    }
}

#[tokio::test]
async fn over_a_websocket_the_connections_or_the_operations_traceparent_is_joined() {
    let collector = Collector::start().await;
    let server = Server::start(&["--otlp-endpoint", &collector.endpoint]).await;
    let connection_trace = "11111111111111111111111111111111";
    let operation_trace = "22222222222222222222222222222222";
    let mut ws = GqlWs::connect_with(
        &server,
        json!({"traceparent": traceparent(connection_trace, CALLER_SPAN)}),
    )
    .await;
    let input = json!({"input": {"command": ["true"]}});
    ws.subscribe("1", SUBMIT, input.clone()).await;
    let first = ws.recv().await;
    let first_id = first["payload"]["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        first["payload"]["data"]["submitJob"]["job"]["traceId"], connection_trace,
        "{first}"
    );
    ws.send(json!({"id": "2", "type": "subscribe", "payload": {
        "query": SUBMIT,
        "variables": input,
        "extensions": {"traceparent": traceparent(operation_trace, "1234567890abcdef")},
    }}))
    .await;
    let second = loop {
        let message = ws.recv().await;
        if message["id"] == "2" && message["type"] == "next" {
            break message;
        }
    };
    let second_id = second["payload"]["data"]["submitJob"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        second["payload"]["data"]["submitJob"]["job"]["traceId"], operation_trace,
        "{second}"
    );
    assert_eq!(server.terminal_phase(&first_id).await, "SUCCEEDED");
    assert_eq!(server.terminal_phase(&second_id).await, "SUCCEEDED");
    let first_spans = job_trace(&collector, connection_trace, &first_id).await;
    assert_eq!(one(&first_spans, "submitJob").parent_span_id, CALLER_SPAN);
    let second_spans = job_trace(&collector, operation_trace, &second_id).await;
    assert_eq!(one(&second_spans, "submitJob").parent_span_id, "1234567890abcdef");
}

#[tokio::test]
async fn a_restart_between_submit_and_end_still_yields_the_whole_trace() {
    let collector = Collector::start().await;
    let endpoint = collector.endpoint.clone();
    let args = ["--otlp-endpoint", endpoint.as_str()];
    let mut server = Server::spawn(&args).await;
    // The first run hangs until jobgate dies; the retry after the restart succeeds.
    let (id, trace_id) = submit_with_headers(
        &server,
        json!({
            "command": sh("if [ -e attempted ]; then exit 0; fi; touch attempted; sleep 300"),
            "backoffLimit": 1,
        }),
        &[],
    )
    .await;
    // What ended before the restart was sent before it.
    collector.wait_for_span(&trace_id, "launching").await;
    server.kill9();
    let server = server.start_again(&args).await;
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    let spans = job_trace(&collector, &trace_id, &id).await;
    let names: HashMap<&str, usize> = spans.iter().fold(HashMap::new(), |mut counts, s| {
        *counts.entry(s.name.as_str()).or_default() += 1;
        counts
    });
    assert_eq!(names["queued"], 1, "{spans:#?}");
    assert_eq!(names["launching"], 1);
    assert_eq!(names["attempt"], 2);
    assert_eq!(names["finishing"], 1);
    let root = one(&spans, "job");
    assert_eq!(root.parent_span_id, one(&spans, "submitJob").span_id);
    assert_eq!(server.job_with(&id, "traceId").await["traceId"], json!(trace_id));
}

#[tokio::test]
async fn a_webhook_delivery_carries_the_jobs_traceparent() {
    let collector = Collector::start().await;
    let server = Server::start(&[
        "--webhook-allow-private-targets",
        "--otlp-endpoint",
        &collector.endpoint,
    ])
    .await;
    let receiver = Receiver::start().await;
    let created = server
        .gql_ok(
            "mutation($input: CreateWebhookInput!) { createWebhook(input: $input) { secret } }",
            json!({"input": {"url": receiver.url}}),
        )
        .await;
    receiver.trust(created["createWebhook"]["secret"].as_str().unwrap());
    let (id, trace_id) = submit_with_headers(&server, json!({"command": ["true"]}), &[]).await;
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    let spans = job_trace(&collector, &trace_id, &id).await;
    let root = one(&spans, "job");
    let polling = Polling::start();
    loop {
        let delivered: Vec<_> = receiver
            .accepted()
            .into_iter()
            .filter(|r| r.body["data"]["jobId"] == id.as_str())
            .collect();
        if delivered.iter().any(|r| r.body["data"]["phase"] == "SUCCEEDED") {
            for r in &delivered {
                assert_eq!(
                    r.traceparent.as_deref(),
                    Some(traceparent(&trace_id, &root.span_id).as_str())
                );
            }
            break;
        }
        polling
            .pause(|| format!("the job's end was not delivered: {delivered:?}"))
            .await;
    }
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_sent_and_the_job_still_has_its_trace() {
    let collector = Collector::start().await;
    // The standard variables name the collector; without --otlp-endpoint they are not read.
    let traces_url = format!("{}/v1/traces", collector.endpoint);
    let mut server = Server::spawn_with_env(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces_url.as_str()),
        ],
    )
    .await;
    let (id, trace_id) = submit_with_headers(
        &server,
        json!({"command": sh("printf %s \"$TRACEPARENT\" > \"$JOBGATE_RESULT_FILE\"")}),
        &[("traceparent", &traceparent(CALLER_TRACE, CALLER_SPAN))],
    )
    .await;
    assert_eq!(trace_id, CALLER_TRACE);
    assert_eq!(server.terminal_phase(&id).await, "SUCCEEDED");
    let job = server.job_with(&id, "result").await;
    let result = job["result"].as_str().unwrap();
    assert!(result.starts_with(&format!("00-{CALLER_TRACE}-")), "{result}");
    // Once jobgate has exited (a graceful stop sends what an exporter holds), nothing more
    // can arrive.
    server.stop().await;
    assert_eq!(collector.requests(), 0);
}
