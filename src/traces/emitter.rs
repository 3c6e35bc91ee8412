//! When a job's spans are emitted: each segment of its timeline once it has ended, the root
//! span at its end, all from the events the service publishes. Nothing stays open while a
//! job runs: a span is built after the fact, from the job's record, with its stored ids.
//!
//! Which segments an event ended is the difference between the job in this event and in its
//! previous one: remembered for each unfinished job (the names of its ended segments), or,
//! the first time this process sees the job (after a restart), read from the store's
//! previous event of it. So a restart between two events of a job still yields every span,
//! each once.
//!
//! It must not write anything: it reads the bus and the store only.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use super::export::ExportQueue;
use super::spans::{JOB_SPAN, job_span, segment_span};
use crate::jobs::bus::EventBus;
use crate::model::{Job, JobEvent, Scope};
use crate::store::Store;

/// How many of a job's latest events are read to find the one before an event, after a
/// restart.
const HISTORY: i64 = 64;

/// The names of the parts of `job` that have ended: its ended segments, and `job` once the
/// job has.
fn ended(job: &Job) -> HashSet<String> {
    let mut names: HashSet<String> = job
        .timeline()
        .into_iter()
        .filter(|s| s.end.is_some())
        .map(|s| s.name)
        .collect();
    if job.phase.is_terminal() {
        names.insert(JOB_SPAN.to_owned());
    }
    names
}

/// Follows the bus from the event after `after` until `stop`, queueing the spans each event ends.
pub(super) async fn follow(
    bus: Arc<EventBus>,
    store: Arc<dyn Store>,
    after: i64,
    queue: Arc<ExportQueue>,
    stop: CancellationToken,
) {
    let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
    // The first subscription starts at `after`; one after a read error, at the present.
    let mut from = Some(after);
    loop {
        let mut events = Box::pin(bus.events(from.take(), None, Scope::All));
        loop {
            let next = tokio::select! {
                next = events.next() => next,
                () = stop.cancelled() => return,
            };
            match next {
                Some(Ok(event)) => {
                    let before = match seen.remove(&event.job_id) {
                        Some(before) => before,
                        None => previously_ended(store.as_ref(), &event).await,
                    };
                    let now = emit(&event.job, &before, &queue);
                    if !event.job.phase.is_terminal() {
                        seen.insert(event.job_id.clone(), now);
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "traces: could not read the job events; following from the present");
                    break;
                }
                None => return,
            }
        }
    }
}

/// Queues the spans of the parts of `job` that ended since `before`; returns what has ended.
fn emit(job: &Job, before: &HashSet<String>, queue: &ExportQueue) -> HashSet<String> {
    let Some(trace) = &job.trace else {
        return HashSet::new();
    };
    let now = ended(job);
    let mut spans = Vec::new();
    for segment in job.timeline() {
        if segment.end.is_some() && !before.contains(&segment.name) {
            spans.extend(segment_span(job, trace, &segment));
        }
    }
    if now.contains(JOB_SPAN) && !before.contains(JOB_SPAN) {
        spans.extend(job_span(job, trace));
    }
    if !spans.is_empty() {
        queue.push(spans);
    }
    now
}

/// What had ended of the event's job at its previous event, read from the store: the job's
/// first event had nothing before it; an event whose predecessor cannot be read (deleted,
/// unreadable) counts as having nothing before it either, so its spans are sent rather than
/// lost.
async fn previously_ended(store: &dyn Store, event: &JobEvent) -> HashSet<String> {
    if event.previous_phase.is_none() {
        return HashSet::new();
    }
    match store.job_history(&event.job_id, &Scope::All, HISTORY).await {
        Ok(history) => history
            .iter()
            .filter(|e| e.seq < event.seq)
            .max_by_key(|e| e.seq)
            .map(|e| ended(&e.job))
            .unwrap_or_default(),
        Err(e) => {
            tracing::debug!(job = %event.job_id, error = %e, "traces: the job's previous event could not be read");
            HashSet::new()
        }
    }
}
