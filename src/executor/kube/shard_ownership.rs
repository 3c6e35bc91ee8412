//! Which jobs this replica acts for: with replicas, its membership (which assigns it shards,
//! `membership.rs`), the fence (what those shards allow now, `fence.rs`) and the membership's
//! task; without replicas, every job.
//!
//! It owns [`ShardOwnership`], the executor's part that every action on a job asks first. It
//! must not decide the assignment (the membership does) nor act on jobs.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::fence::Fence;
use super::membership::Membership;
use crate::model::ShardSet;

/// The membership, the fence and the membership's task (all empty without replicas).
pub(super) struct ShardOwnership {
    /// With replicas: this replica's membership, which assigns it shards,
    membership: Option<Arc<Membership>>,
    /// and what they allow it now.
    fence: Option<Arc<Fence>>,
    /// Ends the membership (it deletes this replica's Lease) once every other task ended.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    stop: CancellationToken,
}

impl ShardOwnership {
    pub(super) fn new(membership: Option<Arc<Membership>>, fence: Option<Arc<Fence>>) -> Self {
        Self {
            membership,
            fence,
            task: Mutex::new(None),
            stop: CancellationToken::new(),
        }
    }

    /// Whether replicas share the jobs (a membership assigns this one its shards).
    pub(super) fn has_replicas(&self) -> bool {
        self.membership.is_some()
    }

    /// With replicas: why this replica is not ready as a member (its Lease not renewed, or
    /// the watch of the others' failing: see [`Membership::unready_reason`]); `None` when it
    /// is, or without replicas.
    pub(super) fn membership_problem(&self) -> Option<String> {
        self.membership.as_ref().and_then(|m| m.unready_reason())
    }

    /// Whether this replica may act on the job now (always, without replicas): asked right
    /// before every action on a job, so that a replica whose shard moved on acts no more.
    pub(super) fn acts_for(&self, job_id: &str) -> bool {
        self.fence.as_ref().is_none_or(|f| f.acts_for(job_id))
    }

    /// Runs `action` on the job `job_id`, its writes to the cluster fenced (see `fence.rs`).
    pub(super) async fn acting_for<F: Future>(&self, job_id: &str, action: F) -> F::Output {
        match &self.fence {
            Some(fence) => fence.acting_for(job_id, action).await,
            None => action.await,
        }
    }

    /// The shards assigned to this replica as they change; `None` without replicas.
    pub(super) fn shards(&self) -> Option<watch::Receiver<ShardSet>> {
        self.membership.as_ref().map(|m| m.shards())
    }

    /// Starts the membership, with replicas.
    pub(super) fn start(&self) {
        if let Some(membership) = &self.membership {
            let task = tokio::spawn(membership.clone().run(self.stop.clone()));
            *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        }
    }

    /// Ends the membership and waits for it (it deletes this replica's Lease). Called last
    /// at shutdown: nothing acts any more, so the shards may move at once.
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}
