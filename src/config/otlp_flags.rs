//! The trace export flags (`--otlp-endpoint`, `--otlp-service-name`, `--otlp-header`,
//! `--otlp-queue-spans`) and the settings they make. It must not decide what is traced
//! (`traces` does).

use clap::Args;

use crate::traces::TraceSettings;

/// Where jobs' spans go; nothing is sent without `--otlp-endpoint`.
#[derive(Args, Clone, Debug, Default)]
pub struct OtlpFlags {
    /// Export each job's trace over OTLP/HTTP (protobuf) to this collector, e.g.
    /// `http://otel-collector:4318` (`/v1/traces` is added unless the URL ends with it).
    /// Traces are not exported without it.
    #[arg(long, env = "JOBGATE_OTLP_ENDPOINT", value_parser = parse_endpoint)]
    pub otlp_endpoint: Option<String>,

    /// The `service.name` of jobgate's spans.
    #[arg(long, env = "JOBGATE_OTLP_SERVICE_NAME", default_value = "jobgate")]
    pub otlp_service_name: String,

    /// A header sent with every export, `NAME=VALUE` (e.g. `authorization=Bearer …`); may be
    /// repeated (comma-separated in the variable).
    #[arg(long = "otlp-header", env = "JOBGATE_OTLP_HEADERS", value_delimiter = ',', value_parser = parse_header)]
    pub otlp_headers: Vec<(String, String)>,

    /// Most spans waiting to be exported; more are dropped and counted
    /// (`trace_spans_dropped`), so a slow or unreachable collector costs bounded memory.
    #[arg(long, env = "JOBGATE_OTLP_QUEUE_SPANS", default_value_t = 8192, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub otlp_queue_spans: u32,
}

impl OtlpFlags {
    /// The export settings, when an endpoint is set.
    pub fn trace_settings(&self) -> Option<TraceSettings> {
        Some(TraceSettings {
            endpoint: self.otlp_endpoint.clone()?,
            service_name: self.otlp_service_name.clone(),
            headers: self.otlp_headers.clone(),
            queue_spans: self.otlp_queue_spans as usize,
        })
    }
}

fn parse_endpoint(text: &str) -> Result<String, String> {
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Ok(text.to_owned()),
        _ => Err(format!("{text:?} is not an http:// or https:// URL")),
    }
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    let Some((name, value)) = text.split_once('=') else {
        return Err(format!("{text:?} is not NAME=VALUE"));
    };
    let name = name.trim();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
    if !valid {
        return Err(format!("{name:?} is not a header name"));
    }
    Ok((name.to_ascii_lowercase(), value.trim().to_owned()))
}
