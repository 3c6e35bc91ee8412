//! Signed webhooks (Standard Webhooks): endpoints that receive every status event of the jobs
//! their filter matches, within what their owner (their creator) may read now, as signed HTTP
//! POSTs.
//!
//! It owns the endpoints' life (create, list, delete, disable, replay: for their owner, and
//! every endpoint's listing, disabling and deleting for admins, callers whose scope is every
//! namespace) and the delivery runtime: a claim loop that takes endpoints in the store for
//! this process (one process at a time delivers an endpoint, across replicas sharing a
//! database; a claim not renewed expires and another process takes it over), and one delivery
//! loop per claimed endpoint (`delivery`). The event log is the outbox: each endpoint's cursor is stored, so
//! deliveries resume after a restart with nothing skipped; the event bus only wakes loops up.
//!
//! - `signing`: secrets and signatures;
//! - `addresses`: which IP addresses are public (the IANA special-purpose registries);
//! - `target`: which URLs may be targets (SSRF), resolving them, and pinning the checked address;
//! - `delivery`: the per-endpoint loop, retries and parking;
//! - `owners`: what an endpoint's owner may read now ([`Owners`], told by the server), and the
//!   narrowing of JWT owners' endpoints.
//!
//! It must not know about GraphQL or HTTP requests to jobgate: callers get domain types and
//! [`WebhookError`].

pub mod addresses;
mod delivery;
mod owners;
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

pub use owners::{Owners, Rights};

/// How many endpoints one principal may have: each costs a delivery loop.
pub const MAX_ENDPOINTS_PER_OWNER: usize = 100;

/// How long a claim lasts unless renewed (every third of it): after a crash, another process
/// takes the endpoints over within this.
const CLAIM_TTL: Duration = Duration::from_secs(30);

/// The longest reason `disable` records.
pub const MAX_DISABLE_REASON_BYTES: usize = 1_000;

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
    #[error("{0}")]
    Forbidden(String),
    #[error("at most {MAX_DISABLE_REASON_BYTES} bytes")]
    ReasonTooLong,
    #[error("webhook {id:?} is disabled ({reason}); delete it and create another")]
    Disabled { id: String, reason: String },
    /// A stored row that cannot be decoded: the store's description of it.
    #[error("{0}")]
    UnreadableRow(String),
    /// Events after `after` were deleted by retention: a replay from there would have gaps.
    /// `oldest` is the oldest cursor a replay can start after.
    #[error(
        "events after cursor {after} were deleted by retention; the oldest cursor to resume after is {oldest}"
    )]
    CursorExpired { after: i64, oldest: i64 },
    #[error(transparent)]
    Store(StoreError),
}

/// The store's errors as the webhooks service's: the facts a client is told (an expired
/// cursor, a row that cannot be read) become errors of their own.
impl From<StoreError> for WebhookError {
    fn from(cause: StoreError) -> Self {
        match cause {
            StoreError::CursorExpired { after, oldest } => Self::CursorExpired { after, oldest },
            cause @ StoreError::Unreadable { .. } => Self::UnreadableRow(cause.to_string()),
            cause => Self::Store(cause),
        }
    }
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
    /// Its owner no longer exists, or its owner or an admin disabled it: nothing is
    /// delivered any more (`Webhook::disabled_reason` says why).
    Disabled,
}

/// Who calls the webhooks API: a principal (an endpoint's owner when it creates one) and
/// its scope now.
#[derive(Clone, Copy, Debug)]
pub struct Caller<'a> {
    pub principal: &'a str,
    pub scope: &'a Scope,
}

impl Caller<'_> {
    /// An admin may use every namespace, and so list, disable and delete every endpoint.
    pub fn is_admin(&self) -> bool {
        *self.scope == Scope::All
    }
}

/// An endpoint as its owner (or an admin) sees it.
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
    /// What each endpoint's owner may read now.
    owners: Arc<dyn Owners>,
    /// JWT owners' scopes already applied to their endpoints.
    narrowed: crate::store::owner_scopes::ScopesSeen,
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
    /// The runtime it was started on, where its background work runs (a WebSocket session,
    /// which tells it of JWT callers, may run on a runtime of its own).
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("claimant", &self.shared.claimant)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// Starts the delivery runtime over an open store and the service's event bus; `owners`
    /// tells what each endpoint's owner may read now.
    pub fn start(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        settings: WebhookSettings,
        metrics: Arc<Metrics>,
        owners: Arc<dyn Owners>,
    ) -> Self {
        let shared = Arc::new(Shared {
            store,
            bus,
            settings,
            metrics,
            owners,
            narrowed: crate::store::owner_scopes::ScopesSeen::default(),
            claimant: uuid::Uuid::now_v7().to_string(),
            wake: Notify::new(),
            stop: CancellationToken::new(),
        });
        let tasks = TaskTracker::new();
        tasks.spawn(claim_loop(shared.clone(), tasks.clone()));
        Self {
            shared,
            tasks,
            runtime: tokio::runtime::Handle::current(),
        }
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

    /// Creates an endpoint owned by `caller`, delivering what its scope may see of the jobs
    /// matching `filter` from now on; returns it with its secret (shown this once). A filter
    /// naming a namespace outside the caller's scope is refused.
    pub async fn create(
        &self,
        caller: Caller<'_>,
        url: &str,
        filter: JobFilter,
    ) -> Result<Webhook, WebhookError> {
        let (owner, scope) = (caller.principal, caller.scope);
        if let Some(namespace) = filter.namespace.as_deref().filter(|ns| !scope.allows(ns)) {
            return Err(WebhookError::Forbidden(format!(
                "filter.namespace: the caller may not read namespace {namespace:?}"
            )));
        }
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
            disabled_reason: None,
            disabled_at: None,
        };
        store.insert_webhook(&webhook).await?;
        self.shared.wake.notify_one();
        Ok(webhook)
    }

    /// The caller's endpoints, or with `all_owners` every owner's (admins only), oldest
    /// first, with their delivery state.
    pub async fn list(
        &self,
        caller: Caller<'_>,
        all_owners: bool,
    ) -> Result<Vec<EndpointStatus>, WebhookError> {
        if all_owners && !caller.is_admin() {
            return Err(WebhookError::Forbidden(
                "allOwners: only an admin (a caller of every namespace) lists every owner's webhooks".into(),
            ));
        }
        let owner = (!all_owners).then_some(caller.principal);
        let mut out = Vec::new();
        for webhook in self.shared.store.webhooks(owner).await? {
            out.push(self.status(webhook).await?);
        }
        Ok(out)
    }

    /// An endpoint the caller owns, or any endpoint for an admin when `admins` may act on
    /// it; another's is not found, as one that does not exist.
    async fn reachable(&self, caller: Caller<'_>, id: &str, admins: bool) -> Result<Webhook, WebhookError> {
        match self.shared.store.webhook(id).await? {
            Some(w) if w.owner == caller.principal || (admins && caller.is_admin()) => Ok(w),
            _ => Err(WebhookError::NotFound { id: id.to_owned() }),
        }
    }

    /// Deletes an endpoint of the caller's (any, for an admin); its delivery stops (an
    /// attempt in flight may still arrive).
    pub async fn delete(&self, caller: Caller<'_>, id: &str) -> Result<(), WebhookError> {
        self.reachable(caller, id, true).await?;
        if !self.shared.store.delete_webhook(id).await? {
            return Err(WebhookError::NotFound { id: id.to_owned() });
        }
        Ok(())
    }

    /// Disables an endpoint of the caller's (any, for an admin), recording who did and
    /// `reason`: nothing more is delivered (an attempt in flight may still arrive), and it
    /// stays listed, DISABLED, until deleted. Disabling a disabled endpoint keeps its first
    /// reason.
    pub async fn disable(
        &self,
        caller: Caller<'_>,
        id: &str,
        reason: Option<&str>,
    ) -> Result<EndpointStatus, WebhookError> {
        if reason.is_some_and(|r| r.len() > MAX_DISABLE_REASON_BYTES) {
            return Err(WebhookError::ReasonTooLong);
        }
        self.reachable(caller, id, true).await?;
        let reason = match reason.map(str::trim).filter(|r| !r.is_empty()) {
            Some(reason) => format!("disabled by {}: {reason}", caller.principal),
            None => format!("disabled by {}", caller.principal),
        };
        self.shared
            .store
            .disable_webhook(id, &reason, delivery::now_ms())
            .await?;
        tracing::info!(webhook = %id, by = %caller.principal, "webhook endpoint disabled");
        let webhook = self.reachable(caller, id, true).await?;
        self.status(webhook).await
    }

    /// Delivers again every event after `after` (at least once each), unparking the
    /// endpoint; the owner's only, and not once disabled.
    pub async fn replay(
        &self,
        caller: Caller<'_>,
        id: &str,
        after: i64,
    ) -> Result<EndpointStatus, WebhookError> {
        let webhook = self.reachable(caller, id, false).await?;
        if let Some(reason) = webhook.disabled_reason {
            return Err(WebhookError::Disabled {
                id: id.to_owned(),
                reason,
            });
        }
        let head = self.shared.store.last_event_seq().await?;
        if after > head {
            return Err(WebhookError::BadCursor(format!(
                "{after} is past the newest event ({head})"
            )));
        }
        let oldest = self.shared.store.retention_horizon(&webhook.scope).await?;
        if after < oldest {
            return Err(WebhookError::CursorExpired { after, oldest });
        }
        if !self.shared.store.replay_webhook(id, after).await? {
            return Err(WebhookError::NotFound { id: id.to_owned() });
        }
        self.shared.wake.notify_one();
        let webhook = self.reachable(caller, id, false).await?;
        self.status(webhook).await
    }

    /// A JWT holder called with `scope`: its endpoints are narrowed to it for good, at the
    /// first request of each scope seen by this process (in the background: the request does
    /// not wait). Static tokens' and anonymous callers' rights are read at every delivery
    /// instead.
    pub fn saw_jwt_caller(&self, principal: &str, scope: &Scope) {
        if !self.shared.narrowed.first_sight(principal, scope) {
            return;
        }
        let (shared, principal, scope) = (self.shared.clone(), principal.to_owned(), scope.clone());
        let narrowing = async move {
            match owners::narrow(shared.store.as_ref(), &principal, &scope).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(owner = %principal, endpoints = n, "webhook endpoints narrowed to their owner's token")
                }
                Err(e) => {
                    shared.narrowed.forget(&principal);
                    tracing::warn!(owner = %principal, error = %e, "narrowing webhook endpoints failed; the owner's next request tries again");
                }
            }
        };
        self.tasks.spawn_on(narrowing, &self.runtime);
    }

    async fn status(&self, webhook: Webhook) -> Result<EndpointStatus, WebhookError> {
        if webhook.disabled_at.is_some() {
            return Ok(EndpointStatus {
                webhook,
                state: DeliveryState::Disabled,
                lag: 0,
            });
        }
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
        let rights = self.shared.owners.rights(&webhook.owner);
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
            lag += page.iter().filter(|e| delivers(webhook, &rights, e)).count() as i64;
            match page.last() {
                Some(last) if page.len() as i64 == PAGE => cursor = last.seq,
                _ => break,
            }
        }
        Ok(lag.min(MAX_LAG_COUNTED))
    }
}

/// Whether the endpoint delivers `event` (one of its stored scope's) while its owner has
/// `rights`: the filter matches the job, and the owner may read its namespace now.
pub(crate) fn delivers(webhook: &Webhook, rights: &Rights, event: &JobEvent) -> bool {
    let allowed = match rights {
        Rights::Scope(scope) => scope.sees(&event.job),
        Rights::Gone(_) => false,
        Rights::Unknown => true,
    };
    allowed && webhook.filter.matches(&event.job)
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
