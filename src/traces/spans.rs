//! What each span of a job says: its ids (the job's stored trace and root span, a segment's
//! id derived from them), its times (from the job's record, never from a clock: spans are
//! emitted after the fact), its name, attributes and status.
//!
//! It builds spans only; queueing and sending them is `export`'s, choosing when is
//! `emitter`'s.

use std::borrow::Cow;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use sha2::{Digest, Sha256};

use crate::model::{AttemptState, Job, JobPhase, JobTrace, SegmentKind, TimelineSegment};

/// The name of the root span of every job.
pub const JOB_SPAN: &str = "job";

/// The id of a job's segment span: derived from the job's root span and the segment's name,
/// so that whichever process emits it gives it the same id.
pub fn segment_span_id(trace: &JobTrace, segment_name: &str) -> String {
    let digest = Sha256::digest(format!("{}/{segment_name}", trace.span_id));
    let mut id = hex::encode(&digest[..8]);
    if id.bytes().all(|b| b == b'0') {
        id = "0000000000000001".to_owned();
    }
    id
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("jobgate")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

fn time(t: DateTime<Utc>) -> SystemTime {
    t.into()
}

fn trace_id(trace: &JobTrace) -> TraceId {
    TraceId::from_hex(&trace.trace_id).unwrap_or(TraceId::INVALID)
}

fn span_id(hex: &str) -> SpanId {
    SpanId::from_hex(hex).unwrap_or(SpanId::INVALID)
}

fn trace_state(trace: &JobTrace) -> TraceState {
    trace
        .trace_state
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or_default()
}

/// One span, as the exporter takes it.
#[allow(clippy::too_many_arguments)]
fn span(
    trace: &JobTrace,
    id: &str,
    parent: Option<&str>,
    kind: SpanKind,
    name: impl Into<Cow<'static, str>>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    attributes: Vec<KeyValue>,
    status: Status,
) -> SpanData {
    SpanData {
        span_context: SpanContext::new(
            trace_id(trace),
            span_id(id),
            TraceFlags::SAMPLED,
            false,
            trace_state(trace),
        ),
        parent_span_id: parent.map_or(SpanId::INVALID, span_id),
        parent_span_is_remote: false,
        span_kind: kind,
        name: name.into(),
        start_time: time(start),
        end_time: time(end.max(start)),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope(),
    }
}

fn job_attributes(job: &Job) -> Vec<KeyValue> {
    vec![
        KeyValue::new("jobgate.job.id", job.id.clone()),
        KeyValue::new("jobgate.job.namespace", job.spec.namespace.clone()),
        KeyValue::new("jobgate.job.template", job.spec.template.clone()),
    ]
}

/// The job's root span, from its submission to its end; `None` until it ended.
pub fn job_span(job: &Job, trace: &JobTrace) -> Option<SpanData> {
    let end = job.finished_at.filter(|_| job.phase.is_terminal())?;
    let mut attributes = job_attributes(job);
    attributes.push(KeyValue::new("jobgate.job.phase", job.phase.as_str()));
    attributes.push(KeyValue::new("jobgate.job.attempts", job.attempts.len() as i64));
    if let Some(message) = &job.message {
        attributes.push(KeyValue::new("jobgate.job.message", message.clone()));
    }
    let status = match job.phase {
        JobPhase::Failed => Status::error(job.message.clone().unwrap_or_else(|| "the job failed".to_owned())),
        _ => Status::Unset,
    };
    let mut span = span(
        trace,
        &trace.span_id,
        trace.parent_span_id.as_deref(),
        SpanKind::Internal,
        JOB_SPAN,
        job.submitted_at,
        end,
        attributes,
        status,
    );
    span.parent_span_is_remote = trace.parent_span_id.is_some();
    Some(span)
}

/// An ended segment of the job's timeline, as a child of its root span.
pub fn segment_span(job: &Job, trace: &JobTrace, segment: &TimelineSegment) -> Option<SpanData> {
    let end = segment.end?;
    let mut attributes = job_attributes(job);
    let mut status = Status::Unset;
    if segment.kind == SegmentKind::Attempt
        && let Some(attempt) = &segment.attempt
    {
        attributes.push(KeyValue::new("jobgate.attempt.name", attempt.name.clone()));
        attributes.push(KeyValue::new("jobgate.attempt.index", i64::from(attempt.index)));
        attributes.push(KeyValue::new("jobgate.attempt.number", i64::from(attempt.number)));
        if let Some(code) = attempt.exit_code {
            attributes.push(KeyValue::new("jobgate.attempt.exit_code", i64::from(code)));
        }
        if let Some(signal) = attempt.signal {
            attributes.push(KeyValue::new("jobgate.attempt.signal", i64::from(signal)));
        }
        if let Some(cause) = attempt.cause {
            attributes.push(KeyValue::new("jobgate.attempt.failure_cause", cause.as_str()));
        }
        if let Some(pod) = &attempt.pod {
            attributes.push(KeyValue::new("k8s.pod.name", pod.clone()));
        }
        if attempt.state == AttemptState::Failed {
            status = Status::error(
                attempt
                    .message
                    .clone()
                    .unwrap_or_else(|| "the attempt failed".to_owned()),
            );
        }
    }
    if segment.kind == SegmentKind::Finishing {
        attributes.push(KeyValue::new("jobgate.job.phase", job.phase.as_str()));
    }
    Some(span(
        trace,
        &segment_span_id(trace, &segment.name),
        Some(&trace.span_id),
        SpanKind::Internal,
        segment.kind.as_str(),
        segment.start,
        end,
        attributes,
        status,
    ))
}

/// The times of one `submitJob` call that created a job, as the GraphQL resolver saw them.
#[derive(Clone, Debug)]
pub struct SubmitTimes {
    /// The resolver's start.
    pub received: DateTime<Utc>,
    /// Its answer, once the job was committed.
    pub answered: DateTime<Utc>,
}

/// The spans of the request that submitted `job`: `submitJob` (a server span, the job's
/// root span's parent), and its parts `validate` (until the job was accepted in memory:
/// `submitted_at`) and `commit` (the writer's transaction, until the answer).
pub fn request_spans(
    job: &Job,
    trace: &JobTrace,
    caller: Option<&str>,
    times: &SubmitTimes,
) -> Vec<SpanData> {
    let Some(request) = trace.parent_span_id.as_deref() else {
        return Vec::new();
    };
    // Within the request's own times, whatever the clock did meanwhile.
    let validated = job.submitted_at.min(times.answered).max(times.received);
    let mut root = span(
        trace,
        request,
        caller,
        SpanKind::Server,
        "submitJob",
        times.received,
        times.answered,
        job_attributes(job),
        Status::Unset,
    );
    root.parent_span_is_remote = caller.is_some();
    let part = |name: &'static str, start, end| {
        span(
            trace,
            &segment_span_id(trace, name),
            Some(request),
            SpanKind::Internal,
            name,
            start,
            end,
            job_attributes(job),
            Status::Unset,
        )
    };
    vec![
        root,
        part("validate", times.received, validated),
        part("commit", validated, times.answered),
    ]
}
