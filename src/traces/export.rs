//! The export queue: spans wait here, bounded, for the one task that sends them to the OTLP
//! collector in batches. Queueing never waits: a full queue drops the span and counts it
//! (`trace_spans_dropped`), so a slow or dead collector costs at most the queue's memory and
//! never slows a request or the job service.
//!
//! It owns the OTLP/HTTP exporter and its batches; it must not decide what a span says
//! (`spans` does).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::TraceSettings;

/// Most spans one export request carries.
const BATCH: usize = 512;

/// How long one export request may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The queue between the emitters and the export task.
#[derive(Debug)]
pub(super) struct ExportQueue {
    spans: Mutex<VecDeque<SpanData>>,
    capacity: usize,
    ready: Notify,
    dropped: Counter,
}

impl ExportQueue {
    pub(super) fn new(capacity: usize, dropped: Counter) -> Arc<Self> {
        Arc::new(Self {
            spans: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            ready: Notify::new(),
            dropped,
        })
    }

    /// Queues spans for export; those that do not fit are dropped and counted.
    pub(super) fn push(&self, spans: impl IntoIterator<Item = SpanData>) {
        let mut dropped = 0u64;
        {
            let mut queue = self.spans.lock().unwrap_or_else(|e| e.into_inner());
            for span in spans {
                if queue.len() >= self.capacity {
                    dropped += 1;
                } else {
                    queue.push_back(span);
                }
            }
        }
        if dropped > 0 {
            self.dropped.inc_by(dropped);
        }
        self.ready.notify_one();
    }

    fn take(&self) -> Vec<SpanData> {
        let mut queue = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        let n = queue.len().min(BATCH);
        queue.drain(..n).collect()
    }
}

/// The OTLP/HTTP (protobuf) exporter `settings` describe: `<endpoint>/v1/traces`, with its
/// headers, the resource's `service.name`.
pub(super) fn exporter(settings: &TraceSettings) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    let endpoint = traces_url(&settings.endpoint);
    let headers: HashMap<String, String> = settings.headers.iter().cloned().collect();
    // The system's proxy settings are not followed: the collector is reached directly.
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(EXPORT_TIMEOUT)
        .build()?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .with_headers(headers)
        .build()?;
    exporter.set_resource(
        &Resource::builder_empty()
            .with_attributes([KeyValue::new("service.name", settings.service_name.clone())])
            .build(),
    );
    Ok(exporter)
}

/// `--otlp-endpoint` as the URL spans are posted to: the OTLP/HTTP traces path is added
/// unless the URL names it already.
pub(super) fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Sends queued spans until `stop`, then what is left for at most `grace`.
pub(super) async fn export_loop(
    queue: Arc<ExportQueue>,
    exporter: opentelemetry_otlp::SpanExporter,
    exported: Counter,
    stop: CancellationToken,
    grace: Duration,
) {
    let mut failing = false;
    loop {
        let batch = queue.take();
        if batch.is_empty() {
            tokio::select! {
                () = queue.ready.notified() => continue,
                () = stop.cancelled() => break,
            }
        }
        let n = batch.len() as u64;
        match exporter.export(batch).await {
            Ok(()) => {
                exported.inc_by(n);
                if failing {
                    tracing::info!("the OTLP collector takes spans again");
                    failing = false;
                }
            }
            Err(e) => {
                queue.dropped.inc_by(n);
                // Said once per outage, not once per batch.
                if !failing {
                    tracing::warn!(error = %e, "the OTLP collector did not take spans; they are dropped (trace_spans_dropped) until it does");
                    failing = true;
                }
            }
        }
    }
    let flush = async {
        loop {
            let batch = queue.take();
            if batch.is_empty() {
                break;
            }
            let n = batch.len() as u64;
            match exporter.export(batch).await {
                Ok(()) => {
                    exported.inc_by(n);
                }
                Err(_) => {
                    queue.dropped.inc_by(n);
                    break;
                }
            }
        }
    };
    if tokio::time::timeout(grace, flush).await.is_err() {
        tracing::warn!("spans not sent to the OTLP collector within {grace:?} of shutdown were dropped");
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
    }
}
