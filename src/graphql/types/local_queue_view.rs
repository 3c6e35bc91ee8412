//! `Job.queue` for jobs of jobgate's local queue: why a job waits (its reason, recorded with
//! the job) and where it stands (read from the queue when asked). It must not change the
//! queue.

use super::{JobQueue, QueueStateView};
use crate::jobs::service::JobService;
use crate::model::Job;

/// The local queue's view of `job`: PENDING with its reason while it waits; `None` once it
/// left the queue or where jobgate keeps no queue.
pub(super) fn local_queue(service: &JobService, job: &Job) -> Option<JobQueue> {
    if !service.has_local_queue() || job.phase != crate::model::JobPhase::Pending {
        return None;
    }
    let place = service.queue_place(job);
    // A job that has just joined (or is about to start) has a place but no reason recorded.
    let wait = service.local_queue_wait(job).map(|(_, wait)| wait);
    if wait.is_none() && place.is_none() {
        return None;
    }
    Some(
        JobQueue {
            name: job.spec.namespace.clone(),
            state: QueueStateView::Pending,
            reason: wait.as_ref().map(|w| w.reason.clone()),
            message: wait.as_ref().and_then(|w| w.message.clone()),
            cluster_queue: None,
            since: wait.and_then(|w| w.since),
            position: None,
            local_queue_position: None,
            estimated_start_at: None,
            estimate: None,
        }
        .placed(place),
    )
}
