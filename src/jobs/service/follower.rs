//! The follower: with a store that other replicas write too, the one task that learns every
//! committed change, this replica's own included, by reading the event log, and passes it to
//! the cache and the bus.
//!
//! It reads events after its cursor whenever the store says something was committed (a
//! wake-up from any replica), when this replica's writer has committed, and once a second
//! (a wake-up lost while the listener reconnected only delays an event). The store hands
//! cursors out in commit order, so reading "after the last one seen" never skips an event,
//! and the bus gets them in order, once each. It also wakes the launcher and the canceller
//! for work another replica accepted.
//!
//! It must not write the store: the writer alone does. With a store only this process
//! writes (SQLite), there is no follower: the writer publishes what it committed itself.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;

use super::ServiceState;
use crate::model::{JobEvent, JobPhase, Scope};

/// How many events one read of the log takes.
const FOLLOW_BATCH: i64 = 512;

/// How often the log is read without a wake-up.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

pub(super) async fn follower(inner: Arc<ServiceState>, mut wakeups: BoxStream<'static, ()>, mut cursor: i64) {
    let mut timer = tokio::time::interval(FOLLOW_INTERVAL);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            biased;
            // The writer has ended: nothing of this replica's is left to publish.
            _ = inner.writer_stop.cancelled() => return,
            _ = inner.committed.notified() => {}
            _ = wakeups.next() => {}
            _ = timer.tick() => {}
        }
        loop {
            match inner
                .store
                .events_after(cursor, FOLLOW_BATCH, None, &Scope::All)
                .await
            {
                Ok(events) => {
                    if failing {
                        failing = false;
                        tracing::info!("reading the event log works again");
                    }
                    let full = events.len() as i64 == FOLLOW_BATCH;
                    for event in events {
                        cursor = event.seq;
                        apply(&inner, event);
                    }
                    if !full {
                        break;
                    }
                }
                Err(e) => {
                    inner.metrics.event_log_read_failures.inc();
                    // Logged once per outage; the next wake-up or tick reads again.
                    if !failing {
                        failing = true;
                        tracing::error!(error = %e, "cannot read the event log; subscribers get later events once it can");
                    }
                    break;
                }
            }
        }
    }
}

/// Passes one committed event on: the cache first, then the bus (a reader that sees an event
/// finds the cache as new), then wakes whoever has work because of it.
fn apply(inner: &ServiceState, event: JobEvent) {
    let job = event.job.clone();
    if job.phase.is_terminal() {
        inner.active.remove(&job.id);
    } else {
        // Events come in cursor order, each with the job as it was right after it.
        inner.active.insert(job.id.clone(), job);
    }
    let accepted = event.previous_phase.is_none();
    let cancelled = event.phase == JobPhase::Cancelled && event.previous_phase != Some(JobPhase::Cancelled);
    inner.bus.publish(Arc::new(event));
    if accepted {
        inner.launch_wanted.notify_one();
    }
    if cancelled {
        inner.cancel_wanted.notify_one();
    }
}
