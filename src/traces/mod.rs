//! OpenTelemetry traces of jobs, exported over OTLP/HTTP (protobuf) when `--otlp-endpoint`
//! is set: one trace per job (see docs/TRACING.md).
//!
//! - this file: [`Traces`], the handle the server starts and stops, and [`TraceSettings`];
//! - `spans`: what each span says (ids, times, attributes, status), from the job's record;
//! - `emitter`: when spans are emitted, from the events the service publishes;
//! - `export`: the bounded queue and the task that sends spans to the collector.
//!
//! It never holds a span open: every span is built after the fact from what the job records
//! (its stored trace ids, its timeline), so a job that runs for hours costs nothing here
//! while it runs, and a restart in between loses none of its spans. It must not change jobs,
//! and exporting must never wait on the collector where a request or the service would.

mod emitter;
mod export;
mod spans;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::jobs::bus::EventBus;
use crate::metrics::Metrics;
use crate::model::{Job, TraceParent};
use crate::store::Store;

pub use spans::{JOB_SPAN, SubmitTimes, segment_span_id};

/// Where and how spans are exported.
#[derive(Clone, Debug)]
pub struct TraceSettings {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is added).
    pub endpoint: String,
    /// The resource's `service.name`.
    pub service_name: String,
    /// Headers sent with every export (e.g. an `Authorization`).
    pub headers: Vec<(String, String)>,
    /// Most spans waiting for export; more are dropped and counted.
    pub queue_spans: usize,
}

/// Exporting jobs' spans: started by the server when an endpoint is configured.
#[derive(Debug)]
pub struct Traces {
    queue: Arc<export::ExportQueue>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Traces {
    /// Starts following `bus` after the event `after` and exporting to the collector `settings` name. Fails only on
    /// a malformed endpoint or header: a collector that cannot be reached costs dropped spans,
    /// never jobgate's readiness.
    pub fn start(
        settings: &TraceSettings,
        bus: Arc<EventBus>,
        store: Arc<dyn Store>,
        after: i64,
        metrics: &Metrics,
        grace: Duration,
    ) -> anyhow::Result<Arc<Self>> {
        let exporter = export::exporter(settings)?;
        let queue = export::ExportQueue::new(settings.queue_spans, metrics.trace_spans_dropped.clone());
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(export::export_loop(
            queue.clone(),
            exporter,
            metrics.trace_spans_exported.clone(),
            stop.clone(),
            grace,
        ));
        tasks.spawn(emitter::follow(
            bus,
            store,
            after,
            queue.clone(),
            stop.child_token(),
        ));
        tasks.close();
        tracing::info!(endpoint = %export::traces_url(&settings.endpoint), service = %settings.service_name, "exporting job traces over OTLP/HTTP");
        Ok(Arc::new(Self { queue, stop, tasks }))
    }

    /// The parent a `submitJob` call gives the job it submits: a new span standing for the
    /// request, in the caller's trace (`caller`) or a new one.
    pub fn request_parent(caller: Option<&TraceParent>) -> TraceParent {
        let mut random = [0u8; 24];
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random).is_err() {
            random[..16].copy_from_slice(uuid::Uuid::now_v7().as_bytes());
            random[16..].copy_from_slice(&uuid::Uuid::now_v7().as_bytes()[8..]);
        }
        let (trace_bytes, span_bytes) = random.split_at(16);
        TraceParent {
            trace_id: caller.map_or_else(|| hex::encode(trace_bytes), |c| c.trace_id.clone()),
            span_id: hex::encode(span_bytes),
            trace_state: caller.and_then(|c| c.trace_state.clone()),
        }
    }

    /// Queues the spans of the `submitJob` call that created `job` (see `spans`); `caller` is
    /// the span the request named in its `traceparent`.
    pub fn submitted(&self, job: &Job, caller: Option<&TraceParent>, times: &SubmitTimes) {
        if let Some(trace) = &job.trace {
            self.queue.push(spans::request_spans(
                job,
                trace,
                caller.map(|c| c.span_id.as_str()),
                times,
            ));
        }
    }

    /// Stops following events and sends what is queued, for at most the grace given at start.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.wait().await;
    }
}
