//! A job's place in a distributed trace: the W3C Trace Context a caller sends (`TraceParent`,
//! read from a `traceparent` and an optional `tracestate`), and the ids a job keeps for the
//! whole of its life (`JobTrace`: its trace and the span that stands for the job).
//!
//! It owns the text forms of those ids and their checks; it must not pick ids itself (the
//! caller of [`JobTrace::new`] gives the random bytes) nor know how spans are exported.

use serde::{Deserialize, Serialize};

/// Longest `tracestate` kept, in bytes (the W3C limit is 32 members of at most 256 bytes; a
/// longer one is dropped, not cut).
pub const MAX_TRACE_STATE: usize = 512;

/// A caller's span, as its `traceparent` (and `tracestate`) said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: String,
    /// 16 lowercase hex digits, not all zero.
    pub span_id: String,
    pub trace_state: Option<String>,
}

impl TraceParent {
    /// Reads a `traceparent` (`00-<trace id>-<span id>-<flags>`; a later version's extra
    /// fields after the flags are ignored, as the W3C text asks). Anything malformed gives
    /// `None`: the caller starts a new trace, never an error.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let text = traceparent.trim();
        let mut fields = text.split('-');
        let version = fields.next()?;
        let trace_id = fields.next()?;
        let span_id = fields.next()?;
        let flags = fields.next()?;
        let rest = fields.next();
        let ok = is_hex(version, 2)
            && version != "ff"
            && (version != "00" || rest.is_none())
            && is_hex(trace_id, 32)
            && is_hex(span_id, 16)
            && is_hex(flags, 2)
            && !is_zero(trace_id)
            && !is_zero(span_id);
        if !ok {
            return None;
        }
        let trace_state = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACE_STATE && s.is_ascii())
            .map(str::to_owned);
        Some(Self {
            trace_id: trace_id.to_owned(),
            span_id: span_id.to_owned(),
            trace_state,
        })
    }
}

/// The trace a job belongs to and the id of its root span ("job"), kept with the job so that
/// its spans can be emitted after the fact, by any process, with the same ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobTrace {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// The job's root span: 16 lowercase hex digits.
    pub span_id: String,
    /// The caller's span the job's root span is a child of, when the submission carried a
    /// `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_state: Option<String>,
}

impl JobTrace {
    /// A job's trace: the caller's, when it sent one, or a new one (from `random`'s first 16
    /// bytes); its root span's id from `random`'s last 8.
    pub fn new(parent: Option<TraceParent>, random: [u8; 24]) -> Self {
        let (trace_bytes, span_bytes) = random.split_at(16);
        let mut span_id = hex::encode(span_bytes);
        if is_zero(&span_id) {
            span_id = "0000000000000001".to_owned();
        }
        match parent {
            Some(parent) => Self {
                trace_id: parent.trace_id,
                span_id,
                parent_span_id: Some(parent.span_id),
                trace_state: parent.trace_state,
            },
            None => {
                let mut trace_id = hex::encode(trace_bytes);
                if is_zero(&trace_id) {
                    trace_id = "00000000000000000000000000000001".to_owned();
                }
                Self {
                    trace_id,
                    span_id,
                    parent_span_id: None,
                    trace_state: None,
                }
            }
        }
    }

    /// The `traceparent` that names `span_id` (the job's root span, or one of its segments)
    /// in this trace, sampled.
    pub fn traceparent_of(&self, span_id: &str) -> String {
        format!("00-{}-{span_id}-01", self.trace_id)
    }

    /// The `traceparent` of the job's root span.
    pub fn traceparent(&self) -> String {
        self.traceparent_of(&self.span_id)
    }
}

/// The variables a job's processes get so that their own telemetry joins the job's trace:
/// `TRACEPARENT` (the job's root span), `TRACESTATE` when the caller sent one,
/// `OTEL_SERVICE_NAME` (the job's name, or its template's) and `OTEL_RESOURCE_ATTRIBUTES`
/// (the job's id, namespace and template). A variable of the same name in the job's own
/// `env` outranks these: the executors apply the job's `env` after them.
pub fn trace_env(job: &super::Job) -> Vec<(String, String)> {
    let mut env = Vec::with_capacity(4);
    if let Some(trace) = &job.trace {
        env.push(("TRACEPARENT".to_owned(), trace.traceparent()));
        if let Some(state) = &trace.trace_state {
            env.push(("TRACESTATE".to_owned(), state.clone()));
        }
    }
    let service = job.spec.name.clone().unwrap_or_else(|| job.spec.template.clone());
    env.push(("OTEL_SERVICE_NAME".to_owned(), service));
    // Resource attribute values are percent-encoded in this variable (W3C Baggage rules);
    // ids, namespaces and template names need none but `%` itself.
    let encode = |s: &str| s.replace('%', "%25").replace(',', "%2C").replace('=', "%3D");
    env.push((
        "OTEL_RESOURCE_ATTRIBUTES".to_owned(),
        format!(
            "jobgate.job.id={},jobgate.job.namespace={},jobgate.job.template={}",
            encode(&job.id),
            encode(&job.spec.namespace),
            encode(&job.spec.template)
        ),
    ));
    env
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_zero(s: &str) -> bool {
    s.bytes().all(|b| b == b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_well_formed_traceparent_is_read() {
        let p = TraceParent::parse(GOOD, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(p.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id, "00f067aa0ba902b7");
        assert_eq!(p.trace_state.as_deref(), Some("congo=t61rcWkgMzE"));
        // A later version may add fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", None).is_some()
        );
    }

    #[test]
    fn a_malformed_traceparent_is_ignored() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceParent::parse(bad, None), None, "{bad:?}");
        }
    }

    #[test]
    fn a_stored_job_keeps_its_trace_and_launch_and_an_older_one_reads_without_them() {
        use crate::model::{Job, SubmitRequest, ValidationLimits};
        let spec = SubmitRequest {
            command: Some(vec!["true".into()]),
            ..SubmitRequest::default()
        }
        .validate(&ValidationLimits::default())
        .unwrap();
        let mut job = Job::accepted("0193-abc".into(), spec, None, chrono::Utc::now());
        let older = serde_json::to_string(&job).unwrap();
        assert!(
            !older.contains("trace") && !older.contains("launchedAt"),
            "{older}"
        );
        job.trace = Some(JobTrace::new(TraceParent::parse(GOOD, Some("a=1")), [9u8; 24]));
        job.launched_at = Some(chrono::Utc::now());
        let stored = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<Job>(&stored).unwrap(), job);
        let read: Job = serde_json::from_str(&older).unwrap();
        assert_eq!((&read.trace, read.launched_at), (&None, None));
        assert_eq!(read.trace_id(), "0193abc");
    }

    #[test]
    fn a_job_joins_its_callers_trace_or_starts_one() {
        let random = [7u8; 24];
        let joined = JobTrace::new(TraceParent::parse(GOOD, None), random);
        assert_eq!(joined.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(joined.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(joined.span_id, "0707070707070707");
        let fresh = JobTrace::new(None, random);
        assert_eq!(fresh.trace_id, "07".repeat(16));
        assert_eq!(
            fresh.traceparent(),
            format!("00-{}-0707070707070707-01", "07".repeat(16))
        );
    }
}
