//! `/metrics` in the OpenMetrics text format (Prometheus).
//!
//! It owns the metric names and how each is read. Values are read from the job service when
//! scraped (collector style), so nothing on a hot path updates a counter for them. For now it
//! says which workload templates can run (their kind installed and watchable); the rest of
//! jobgate's metrics are still to come (see docs/ARCHITECTURE.md). It must not change state.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::jobs::service::JobService;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TemplateLabels {
    template: String,
    kind: String,
}

/// Every metric, as text.
pub fn render(service: &JobService) -> String {
    let mut registry = Registry::with_prefix("jobgate");
    let available = Family::<TemplateLabels, Gauge>::default();
    registry.register(
        "template_available",
        "Whether jobs of a template can run now: 1, or 0 when its kind is not installed or not watchable",
        available.clone(),
    );
    for t in service.templates() {
        let labels = TemplateLabels {
            template: t.name.clone(),
            kind: t.kind.clone(),
        };
        available.get_or_create(&labels).set(i64::from(t.available));
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}
