//! Signed webhooks (Standard Webhooks): endpoints that receive every status event of the jobs
//! their filter matches, within their creator's scope, as signed HTTP POSTs.
//!
//! It owns the endpoints' life (create, list, delete, replay, for their creator only) and the
//! delivery runtime: a claim loop that takes endpoints in the store for this process (one
//! process at a time delivers an endpoint, across replicas sharing a database; a claim not
//! renewed expires and another process takes it over), and one delivery loop per claimed
//! endpoint (`delivery`). The event log is the outbox: each endpoint's cursor is stored, so
//! deliveries resume after a restart with nothing skipped; the event bus only wakes loops up.
//!
//! - `signing`: secrets and signatures;
//! - `addresses`: which IP addresses are public (the IANA special-purpose registries);
//! - `target`: which URLs may be targets (SSRF), resolving them, and pinning the checked address;
//! - `delivery`: the per-endpoint loop, retries and parking.
//!
//! It must not know about GraphQL or HTTP requests to jobgate: callers get domain types and
//! [`WebhookError`].

pub mod addresses;
mod delivery;
pub mod signing;
pub mod target;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::jobs::bus::EventBus;
use crate::metrics::Metrics;
use crate::model::{JobEvent, JobFilter, Scope};
use crate::store::{Store, StoreError, Webhook};
use target::{Target, TargetError};

/// How many endpoints one principal may have: each costs a delivery loop.
pub const MAX_ENDPOINTS_PER_OWNER: usize = 100;

/// How long a claim lasts unless renewed (every third of it): after a crash, another process
/// takes the endpoints over within this.
const CLAIM_TTL: Duration = Duration::from_secs(30);

/// Events counted at most for an endpoint's `lag`.
pub const MAX_LAG_COUNTED: i64 = 10_000;

/// Delivery settings (from `config`).
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// Deliver to loopback, private, link-local and other non-public addresses (tests,
    /// laptops); off by default.
    pub allow_private_targets: bool,
    /// How long deliveries of one event are retried before the endpoint is parked.
    pub retry_window: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// The whole request, connection included.
    pub request_timeout: Duration,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            allow_private_targets: false,
            retry_window: Duration::from_secs(24 * 3600),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(600),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// What a client can be told went wrong.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("url {0}")]
    Target(#[from] TargetError),
    #[error("no webhook with id {id:?}")]
    NotFound { id: String },
    #[error("at most {MAX_ENDPOINTS_PER_OWNER} webhooks per caller; delete one first")]
    TooMany,
    #[error("after: {0}")]
    BadCursor(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How an endpoint's deliveries stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryState {
    /// Delivering, or caught up.
    Active,
    /// The last attempt failed; another comes at `next_attempt_at`.
    Retrying,
    /// Attempts failed for the whole retry window: nothing is delivered until a replay.
    Parked,
}

/// An endpoint as its creator sees it.
#[derive(Clone, Debug)]
pub struct EndpointStatus {
    pub webhook: Webhook,
    pub state: DeliveryState,
    /// Events matching the endpoint after its cursor, counted up to [`MAX_LAG_COUNTED`].
    pub lag: i64,
}

/// State shared by the runtime and the delivery loops.
pub(crate) struct Shared {
    store: Arc<dyn Store>,
    bus: Arc<EventBus>,
    settings: WebhookSettings,
    metrics: Arc<Metrics>,
    /// This process, as recorded in its claims.
    claimant: String,
    /// Wakes the claim loop (an endpoint created or replayed, a delivery loop ended).
    wake: Notify,
    stop: CancellationToken,
}

/// The webhooks service; cloning it is cheap.
#[derive(Clone)]
pub struct Webhooks {
    shared: Arc<Shared>,
    tasks: TaskTracker,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("claimant", &self.shared.claimant)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// Starts the delivery runtime over an open store and the service's event bus.
    pub fn start(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        settings: WebhookSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let shared = Arc::new(Shared {
            store,
            bus,
            settings,
            metrics,
            claimant: uuid::Uuid::now_v7().to_string(),
            wake: Notify::new(),
            stop: CancellationToken::new(),
        });
        let tasks = TaskTracker::new();
        tasks.spawn(claim_loop(shared.clone(), tasks.clone()));
        Self { shared, tasks }
    }

    /// Stops every delivery (an attempt in flight is abandoned, so sent again later) and
    /// gives up this process's claims, so that another process or the next start takes the
    /// endpoints at once. Call before the store closes.
    pub async fn shutdown(&self, grace: Duration) {
        self.shared.stop.cancel();
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait()).await.is_err() {
            tracing::warn!("webhook deliveries did not stop within {grace:?}");
        }
        if let Err(e) = self.shared.store.release_webhooks(&self.shared.claimant).await {
            tracing::warn!(error = %e, "releasing webhook claims failed; they expire by themselves");
        }
    }

    /// Creates an endpoint for `owner`, delivering what `scope` may see of the jobs matching
    /// `filter` from now on; returns it with its secret (shown this once).
    pub async fn create(
        &self,
        owner: &str,
        scope: &Scope,
        url: &str,
        filter: JobFilter,
    ) -> Result<Webhook, WebhookError> {
        let target = Target::parse(url)?;
        target.resolve(self.shared.settings.allow_private_targets).await?;
        let store = &self.shared.store;
        if store.webhooks(Some(owner)).await?.len() >= MAX_ENDPOINTS_PER_OWNER {
            return Err(WebhookError::TooMany);
        }
        let webhook = Webhook {
            id: uuid::Uuid::now_v7().to_string(),
            owner: owner.to_owned(),
            url: target.url.to_string(),
            filter,
            scope: scope.clone(),
            secret: signing::new_secret(),
            created_at: delivery::now_ms(),
            cursor: store.last_event_seq().await?,
            revision: 0,
            attempts: 0,
            failing_since: None,
            last_error: None,
            last_attempt_at: None,
            next_attempt_at: None,
            parked: false,
            claimed_by: None,
        };
        store.insert_webhook(&webhook).await?;
        self.shared.wake.notify_one();
        Ok(webhook)
    }

    /// `owner`'s endpoints, oldest first, with their delivery state.
    pub async fn list(&self, owner: &str) -> Result<Vec<EndpointStatus>, WebhookError> {
        let mut out = Vec::new();
        for webhook in self.shared.store.webhooks(Some(owner)).await? {
            out.push(self.status(webhook).await?);
        }
        Ok(out)
    }

    /// One of `owner`'s endpoints; another's is not found, as one that does not exist.
    async fn owned(&self, owner: &str, id: &str) -> Result<Webhook, WebhookError> {
        match self.shared.store.webhook(id).await? {
            Some(w) if w.owner == owner => Ok(w),
            _ => Err(WebhookError::NotFound { id: id.to_owned() }),
        }
    }

    /// Deletes one of `owner`'s endpoints; its delivery stops (an attempt in flight may
    /// still arrive).
    pub async fn delete(&self, owner: &str, id: &str) -> Result<(), WebhookError> {
        self.owned(owner, id).await?;
        if !self.shared.store.delete_webhook(id).await? {
            return Err(WebhookError::NotFound { id: id.to_owned() });
        }
        Ok(())
    }

    /// Delivers again every event after `after` (at least once each), unparking the endpoint.
    pub async fn replay(&self, owner: &str, id: &str, after: i64) -> Result<EndpointStatus, WebhookError> {
        let webhook = self.owned(owner, id).await?;
        let head = self.shared.store.last_event_seq().await?;
        if after > head {
            return Err(WebhookError::BadCursor(format!(
                "{after} is past the newest event ({head})"
            )));
        }
        let oldest = self.shared.store.retention_horizon(&webhook.scope).await?;
        if after < oldest {
            return Err(StoreError::CursorExpired { after, oldest }.into());
        }
        if !self.shared.store.replay_webhook(id, after).await? {
            return Err(WebhookError::NotFound { id: id.to_owned() });
        }
        self.shared.wake.notify_one();
        let webhook = self.owned(owner, id).await?;
        self.status(webhook).await
    }

    async fn status(&self, webhook: Webhook) -> Result<EndpointStatus, WebhookError> {
        let state = if webhook.parked {
            DeliveryState::Parked
        } else if webhook.attempts > 0 {
            DeliveryState::Retrying
        } else {
            DeliveryState::Active
        };
        let lag = self.lag(&webhook).await?;
        Ok(EndpointStatus { webhook, state, lag })
    }

    /// Events after the endpoint's cursor that it will deliver, up to [`MAX_LAG_COUNTED`].
    async fn lag(&self, webhook: &Webhook) -> Result<i64, WebhookError> {
        const PAGE: i64 = 1_000;
        let (mut cursor, mut lag) = (webhook.cursor, 0);
        while lag < MAX_LAG_COUNTED {
            let page = match self
                .shared
                .store
                .events_after(cursor, PAGE, None, &webhook.scope)
                .await
            {
                Ok(page) => page,
                // Retention deleted some (the endpoint is parked, saying so): what is left
                // is what a replay from the oldest cursor would deliver.
                Err(StoreError::CursorExpired { oldest, .. }) => {
                    cursor = oldest;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            lag += page.iter().filter(|e| webhook.filter.matches(&e.job)).count() as i64;
            match page.last() {
                Some(last) if page.len() as i64 == PAGE => cursor = last.seq,
                _ => break,
            }
        }
        Ok(lag.min(MAX_LAG_COUNTED))
    }
}

/// Claims endpoints for this process and runs a delivery loop for each one it holds, renewing
/// the claims every third of their lifetime. A loop ends by itself when its endpoint is
/// deleted, parked or taken over; it is started again when the endpoint is claimed again.
async fn claim_loop(shared: Arc<Shared>, tasks: TaskTracker) {
    let mut running: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let now = delivery::now_ms();
        match shared
            .store
            .claim_webhooks(&shared.claimant, now, now + CLAIM_TTL.as_millis() as i64)
            .await
        {
            Ok(held) => {
                running.retain(|_, task| !task.is_finished());
                for webhook in held {
                    running.entry(webhook.id.clone()).or_insert_with(|| {
                        let shared = shared.clone();
                        tasks.spawn(async move {
                            delivery::run(shared.clone(), webhook.id).await;
                            shared.wake.notify_one();
                        })
                    });
                }
            }
            // Claims already held last until they expire; the next round tries again.
            Err(e) => tracing::warn!(error = %e, "claiming webhook endpoints failed; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(CLAIM_TTL / 3) => {}
            _ = shared.wake.notified() => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

/// The body of the message for one event (Standard Webhooks' `type`, `timestamp`, `data`):
/// the event as `jobEvents` gives it, with its cursor, and the job as it was right after it.
pub fn payload(event: &JobEvent) -> serde_json::Value {
    let job = &event.job;
    serde_json::json!({
        "type": "job.event",
        "timestamp": event.at,
        "data": {
            "cursor": event.seq.to_string(),
            "jobId": event.job_id,
            "phase": event.phase,
            "previousPhase": event.previous_phase,
            "at": event.at,
            "reason": event.reason,
            "message": event.message,
            "job": {
                "id": job.id,
                "name": job.spec.name,
                "namespace": job.spec.namespace,
                "phase": job.phase,
                "submittedAt": job.submitted_at,
                "startedAt": job.started_at,
                "finishedAt": job.finished_at,
                "message": job.message,
                "result": job.result,
            },
        },
    })
}
