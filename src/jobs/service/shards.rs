//! The shard keeper: with replicas, the task that hands the executor the jobs of the shards
//! this replica is assigned, as the assignment changes.
//!
//! For each new set of shards it adopts, from the store, the unfinished jobs already launched
//! in the shards gained (their workloads exist: the executor follows and reconciles them),
//! then tells the executor to follow exactly that set (it forgets jobs of the shards lost and
//! restarts its watches with the new selection), and wakes the launcher and the canceller,
//! whose outboxes it filters by the same set. A store that cannot be read delays the shards
//! gained, retried with back-off; the shards kept are followed meanwhile.
//!
//! It must not decide the assignment (the executor's membership does) nor write the store.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::ServiceState;
use crate::model::ShardSet;

pub(super) async fn shard_keeper(inner: Arc<ServiceState>, mut shards: watch::Receiver<ShardSet>) {
    let mut adopted = ShardSet::NONE;
    let mut delays = super::executor_tasks::launch_backoff();
    loop {
        let assigned = *shards.borrow_and_update();
        let gained = assigned.minus(adopted);
        let ready = if gained.is_empty() {
            true
        } else {
            match inner.store.unfinished_jobs().await {
                Ok(unfinished) => {
                    let mut count = 0;
                    for r in unfinished
                        .into_iter()
                        .filter(|r| r.launched && gained.holds(&r.job.id))
                    {
                        let id = r.job.id.clone();
                        count += 1;
                        if let Err(e) = inner.executor.adopt(Arc::new(r.job)).await {
                            tracing::error!(job = %id, error = %e, "could not adopt a job of a shard gained");
                        }
                    }
                    tracing::info!(shards = %gained.to_list(), jobs = count, "adopted the running jobs of the shards gained");
                    true
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the jobs of the shards gained; retrying");
                    false
                }
            }
        };
        // Until the gained shards' jobs are adopted, only the shards kept are followed: a
        // watch of a shard whose jobs are unknown would take their workloads for strangers.
        let followed = if ready {
            assigned
        } else {
            ShardSet::from_iter(assigned.iter().filter(|s| adopted.contains(*s)))
        };
        inner.executor.follow_shards(followed).await;
        adopted = followed;
        inner.launch_wanted.notify_one();
        inner.cancel_wanted.notify_one();
        let retry = if ready {
            delays = super::executor_tasks::launch_backoff();
            None
        } else {
            Some(delays.next().unwrap_or(Duration::from_secs(30)))
        };
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            changed = shards.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => {}
        }
    }
}
