//! The GraphQL views of webhook endpoints: their state, filter, owner and the payloads of the
//! webhook mutations. They map names and nothing else: who may see or change an endpoint is
//! the webhooks service's to decide.

use async_graphql::{Enum, ID, InputObject, Object, SimpleObject};
use chrono::{DateTime, Utc};

use crate::graphql::types::{JobFilterInput, JobPhaseView};
use crate::webhooks;

/// Where a webhook endpoint's deliveries stand.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookState {
    /// Delivering, or caught up.
    Active,
    /// The last attempt failed; another comes at `nextAttemptAt`.
    Retrying,
    /// Attempts failed for the whole retry window, or retention deleted events the endpoint had
    /// not been sent (`lastError` says which): nothing is delivered until `replayWebhook`.
    Parked,
    /// Its owner no longer exists (its API token was removed, anonymous access turned off), or
    /// its owner or an admin disabled it (`disabledReason` says which): nothing is delivered
    /// any more, and it stays listed until deleted.
    Disabled,
}

impl From<webhooks::DeliveryState> for WebhookState {
    fn from(s: webhooks::DeliveryState) -> Self {
        match s {
            webhooks::DeliveryState::Active => Self::Active,
            webhooks::DeliveryState::Retrying => Self::Retrying,
            webhooks::DeliveryState::Parked => Self::Parked,
            webhooks::DeliveryState::Disabled => Self::Disabled,
        }
    }
}

#[derive(InputObject, Clone, Debug)]
pub struct CreateWebhookInput {
    /// Where to POST each event: an http:// or https:// URL on a public address.
    pub url: String,
    /// Which jobs' events to deliver (as for `jobEvents`); every job in the caller's
    /// namespaces when omitted.
    pub filter: Option<JobFilterInput>,
}

/// The filter a webhook endpoint was created with.
#[derive(SimpleObject, Clone, Debug)]
pub struct WebhookFilter {
    pub phases: Option<Vec<JobPhaseView>>,
    pub namespace: Option<String>,
    pub name_contains: Option<String>,
}

/// A webhook endpoint: it receives every status event of the jobs its filter matches in the
/// namespaces its owner (its creator) may read now, signed as the Standard Webhooks
/// specification says.
pub struct WebhookObject(pub webhooks::EndpointStatus);

fn from_millis(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}

#[Object(name = "Webhook")]
impl WebhookObject {
    async fn id(&self) -> ID {
        ID(self.0.webhook.id.clone())
    }

    async fn url(&self) -> &str {
        &self.0.webhook.url
    }

    /// Who created it and owns it: `token:<name>`, `jwt:["<iss>","<sub>"]` or `anonymous`.
    /// Its deliveries are bounded by what the owner may read now.
    async fn owner(&self) -> &str {
        &self.0.webhook.owner
    }

    /// The namespaces it may deliver at most: its owner's when it was created (for a JWT
    /// owner, narrowed since by narrower tokens); null for every namespace. Deliveries are
    /// further bounded by what the owner may read now.
    async fn namespaces(&self) -> Option<Vec<String>> {
        self.0
            .webhook
            .scope
            .list()
            .map(|set| set.iter().cloned().collect())
    }

    /// Why it was disabled, once DISABLED.
    async fn disabled_reason(&self) -> Option<&str> {
        self.0.webhook.disabled_reason.as_deref()
    }

    async fn disabled_at(&self) -> Option<DateTime<Utc>> {
        from_millis(self.0.webhook.disabled_at)
    }

    async fn filter(&self) -> WebhookFilter {
        let f = &self.0.webhook.filter;
        WebhookFilter {
            phases: f
                .phases
                .as_ref()
                .map(|p| p.iter().copied().map(Into::into).collect()),
            namespace: f.namespace.clone(),
            name_contains: f.name_contains.clone(),
        }
    }

    async fn created_at(&self) -> DateTime<Utc> {
        from_millis(Some(self.0.webhook.created_at)).unwrap_or_default()
    }

    async fn state(&self) -> WebhookState {
        self.0.state.into()
    }

    /// The cursor of the last event delivered (or passed over as not matching the filter):
    /// delivery resumes after it.
    async fn cursor(&self) -> String {
        self.0.webhook.cursor.to_string()
    }

    /// Events waiting for delivery (counted up to 10,000).
    async fn lag(&self) -> i32 {
        self.0.lag.try_into().unwrap_or(i32::MAX)
    }

    /// Failed attempts since the last successful delivery.
    async fn attempts(&self) -> i32 {
        self.0.webhook.attempts.try_into().unwrap_or(i32::MAX)
    }

    /// Why the last attempt failed, while deliveries are failing.
    async fn last_error(&self) -> Option<&str> {
        self.0.webhook.last_error.as_deref()
    }

    async fn last_attempt_at(&self) -> Option<DateTime<Utc>> {
        from_millis(self.0.webhook.last_attempt_at)
    }

    /// When the next retry comes, while RETRYING.
    async fn next_attempt_at(&self) -> Option<DateTime<Utc>> {
        if self.0.webhook.parked {
            return None;
        }
        from_millis(self.0.webhook.next_attempt_at)
    }
}

#[derive(SimpleObject)]
pub struct CreateWebhookPayload {
    pub webhook: WebhookObject,
    /// The signing secret (`whsec_…`), shown only here: keep it to verify signatures.
    pub secret: String,
}

#[derive(SimpleObject)]
pub struct DeleteWebhookPayload {
    /// The deleted endpoint's id.
    pub id: ID,
}

#[derive(SimpleObject)]
pub struct ReplayWebhookPayload {
    pub webhook: WebhookObject,
}

#[derive(SimpleObject)]
pub struct DisableWebhookPayload {
    pub webhook: WebhookObject,
}
