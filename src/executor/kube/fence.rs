//! Fencing: a replica acts on a job only while the job's shard is its own, checked right
//! before every request that changes the cluster, retries included.
//!
//! It owns the [`Fence`] (the shards this replica acts for and until when, set by
//! `membership.rs`), the task-local naming the job an action is for ([`Fence::acting_for`]),
//! and a tower layer on the Kubernetes client that refuses a write made for a job whose shard
//! is not this replica's now. The layer sits *inside* kube-rs's retry layer, so a create that
//! was waiting out a `429 Retry-After` when the process was paused (SIGSTOP, a stalled node)
//! is refused when it resumes rather than creating a workload the new owner has already run
//! and deleted. Each shard has an epoch, bumped whenever this replica stops acting for it: an
//! action is refused once the epoch it began in is over, even if the shard came back since
//! (a paused replica rejoins and may be assigned the same shards again). Reads, and requests
//! made outside an action (the Leases themselves), pass.
//!
//! It must not decide the assignment (membership does) nor know what the requests are for
//! beyond the job they name.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::http::{Method, Request, Response};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::model::{SHARD_COUNT, ShardSet, shard_of};

tokio::task_local! {
    /// The job the requests of the current task are made for, and its shard's epoch then.
    static ACTING_FOR: (String, u64);
}

/// The shards this replica acts for, and until when it may.
pub struct Fence {
    shards: watch::Sender<ShardSet>,
    /// Past this instant the replica acts for nothing, whatever `shards` says, until the
    /// membership renews it; `None` while it may not act at all.
    acting_until: Mutex<Option<Instant>>,
    /// The shards acted for as last set, and each shard's epoch (bumped when it stops
    /// being acted for).
    epochs: Mutex<(ShardSet, [u64; SHARD_COUNT as usize])>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl Fence {
    pub(super) fn new(metrics: Arc<crate::metrics::Metrics>) -> Arc<Self> {
        Arc::new(Self {
            shards: watch::Sender::new(ShardSet::NONE),
            acting_until: Mutex::new(None),
            epochs: Mutex::new((ShardSet::NONE, [0; SHARD_COUNT as usize])),
            metrics,
        })
    }

    /// Runs `action` as an action on the job `job_id`: every write it makes to the cluster
    /// is refused unless the job's shard is still acted for, in the same epoch as now.
    pub(super) async fn acting_for<F: Future>(&self, job_id: &str, action: F) -> F::Output {
        let epoch = self.epoch(shard_of(job_id));
        ACTING_FOR.scope((job_id.to_owned(), epoch), action).await
    }

    fn epoch(&self, shard: u32) -> u64 {
        self.epochs.lock().unwrap_or_else(PoisonError::into_inner).1[shard as usize]
    }

    /// Whether a write for `job_id`, by an action begun in `epoch`, may be made now.
    fn allows(&self, job_id: &str, epoch: u64) -> bool {
        if self.epoch(shard_of(job_id)) != epoch {
            self.metrics.shard_actions_fenced.inc();
            tracing::debug!(job = %job_id, "not acting: its shard changed hands since the action began");
            return false;
        }
        self.acts_for(job_id)
    }

    /// Whether the job with this id may be acted on now; a refusal is counted.
    pub(super) fn acts_for(&self, job_id: &str) -> bool {
        let until = *self.acting_until.lock().unwrap_or_else(PoisonError::into_inner);
        let acting = self.shards.borrow().holds(job_id) && until.is_some_and(|until| Instant::now() < until);
        if !acting {
            self.metrics.shard_actions_fenced.inc();
            tracing::debug!(job = %job_id, shard = shard_of(job_id), "not acting: its shard is not this replica's now");
        }
        acting
    }

    /// The shards as they change.
    pub(super) fn shards(&self) -> watch::Receiver<ShardSet> {
        self.shards.subscribe()
    }

    /// Acts for `shards` until `until` (nothing when `None`); true when the shards changed.
    pub(super) fn set(&self, shards: ShardSet, until: Option<Instant>) -> bool {
        *self.acting_until.lock().unwrap_or_else(PoisonError::into_inner) = until;
        let shards = if until.is_some() { shards } else { ShardSet::NONE };
        {
            let mut epochs = self.epochs.lock().unwrap_or_else(PoisonError::into_inner);
            for lost in epochs.0.minus(shards).iter() {
                epochs.1[lost as usize] += 1;
            }
            epochs.0 = shards;
        }
        self.metrics.shards_owned.set(shards.len() as i64);
        for shard in 0..SHARD_COUNT {
            let acted_for = self
                .metrics
                .shard_acted_for
                .get_or_create(&crate::metrics::ShardLabels { shard });
            acted_for.set(i64::from(shards.contains(shard)));
        }
        self.shards.send_if_modified(|current| {
            let changed = *current != shards;
            *current = shards;
            changed
        })
    }
}

/// A write refused because its job's shard is not this replica's now.
#[derive(Debug, thiserror::Error)]
#[error("refused: job {0}'s shard is not this replica's now")]
pub(super) struct Fenced(pub String);

/// Whether a client error is a refusal of [`FenceLayer`].
pub(super) fn is_fenced(error: &kube::Error) -> bool {
    match error {
        kube::Error::Service(e) => e.downcast_ref::<Fenced>().is_some(),
        _ => false,
    }
}

/// The fencing layer; `None` (no replicas) lets everything pass.
#[derive(Clone)]
pub(super) struct FenceLayer(pub Option<Arc<Fence>>);

impl<S> tower::Layer<S> for FenceLayer {
    type Service = FenceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FenceService {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct FenceService<S> {
    inner: S,
    fence: Option<Arc<Fence>>,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for FenceService<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: From<Fenced> + Send + 'static,
    ResBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if let Some(fence) = &self.fence
            && request.method() != Method::GET
            && let Ok((job_id, epoch)) = ACTING_FOR.try_with(Clone::clone)
            && !fence.allows(&job_id, epoch)
        {
            return Box::pin(std::future::ready(Err(Fenced(job_id).into())));
        }
        Box::pin(self.inner.call(request))
    }
}
