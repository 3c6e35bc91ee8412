//! An OTLP/HTTP trace collector for tests: an axum server on 127.0.0.1 that decodes each
//! `ExportTraceServiceRequest` (protobuf, with the OpenTelemetry project's own generated
//! types, not jobgate's code) and keeps the spans, for a test to wait on and read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use serde_json::{Value, json};

use super::Polling;

/// One span as the collector received it.
#[derive(Clone, Debug)]
pub struct CollectedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub attributes: HashMap<String, Value>,
    /// 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    /// The resource's `service.name`.
    pub service: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

#[derive(Default)]
struct Collected {
    spans: Vec<CollectedSpan>,
    /// Each export request's headers.
    requests: Vec<HeaderMap>,
}

/// A collector on 127.0.0.1; its `endpoint` is what `--otlp-endpoint` takes.
pub struct Collector {
    pub endpoint: String,
    collected: Arc<Mutex<Collected>>,
    _server: tokio::task::JoinHandle<()>,
}

fn any_value(value: Option<AnyValue>) -> Value {
    match value {
        Some(AnyValue::StringValue(s)) => json!(s),
        Some(AnyValue::IntValue(i)) => json!(i),
        Some(AnyValue::BoolValue(b)) => json!(b),
        Some(AnyValue::DoubleValue(d)) => json!(d),
        other => json!(format!("{other:?}")),
    }
}

async fn export(
    State(collected): State<Arc<Mutex<Collected>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.clone())
            .map(|v| any_value(v.value))
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                let status = span.status.unwrap_or_default();
                spans.push(CollectedSpan {
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    name: span.name,
                    attributes: span
                        .attributes
                        .into_iter()
                        .map(|kv| (kv.key, any_value(kv.value.and_then(|v| v.value))))
                        .collect(),
                    status_code: status.code,
                    status_message: status.message,
                    service: service.clone(),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                });
            }
        }
    }
    let mut collected = collected.lock().unwrap();
    collected.spans.extend(spans);
    collected.requests.push(headers);
    StatusCode::OK
}

impl Collector {
    pub async fn start() -> Collector {
        let collected = Arc::new(Mutex::new(Collected::default()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(collected.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Collector {
            endpoint: format!("http://{addr}"),
            collected,
            _server: server,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<CollectedSpan> {
        self.collected.lock().unwrap().spans.clone()
    }

    /// The spans of one trace.
    pub fn trace(&self, trace_id: &str) -> Vec<CollectedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }

    /// How many export requests arrived.
    pub fn requests(&self) -> usize {
        self.collected.lock().unwrap().requests.len()
    }

    /// The header `name` of every export request.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.collected
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter_map(|h| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned))
            .collect()
    }

    /// Waits until the trace `trace_id` has a span named `name` (with the attribute
    /// `jobgate.job.id` = `job_id` when given), and returns the trace.
    pub async fn wait_for_span(&self, trace_id: &str, name: &str) -> Vec<CollectedSpan> {
        let polling = Polling::start();
        loop {
            let spans = self.trace(trace_id);
            if spans.iter().any(|s| s.name == name) {
                return spans;
            }
            polling
                .pause(|| format!("no span {name:?} in trace {trace_id} arrived; got {spans:#?}"))
                .await;
        }
    }
}
