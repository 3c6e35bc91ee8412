//! Whose rights bound an endpoint: what its owner may read now, asked of whoever knows the
//! current credentials (`auth`, wired in by the server: this module must not import it), and
//! the narrowing of JWT owners' endpoints to the narrowest scope their tokens have shown
//! (`store::owner_scopes`, shared with schedules, over the endpoints' stored scopes).
//!
//! A static token's or anonymous access's rights are known at every moment (the tokens file,
//! read again when it changes; the configuration): each delivery takes them. A JWT's claims
//! are known only while its bearer calls: its endpoints keep the scope of the token that
//! created them, narrowed for good whenever the owner calls with a token allowing fewer
//! namespaces; an admin disables an endpoint whose owner lost its rights otherwise.
//!
//! It decides nothing about delivery (`delivery` asks [`Owners`] before each batch).

use async_trait::async_trait;

use crate::model::Scope;
use crate::store::Store;
use crate::store::owner_scopes::{OwnedScopes, narrow_owned};

/// What an endpoint's owner may read now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rights {
    /// These namespaces; the endpoint delivers what both they and its stored scope allow.
    Scope(Scope),
    /// The owner no longer exists (its token was removed, anonymous access turned off): the
    /// endpoint is disabled with this reason.
    Gone(String),
    /// Not knowable without the owner's credential (a JWT): the stored scope stands.
    Unknown,
}

/// Who tells the webhooks service what an owner (a principal) may read now.
pub trait Owners: Send + Sync {
    fn rights(&self, owner: &str) -> Rights;
}

/// Webhook endpoints as records their owner's tokens narrow ([`narrow_owned`]).
struct Endpoints<'a>(&'a dyn Store);

#[async_trait]
impl OwnedScopes for Endpoints<'_> {
    async fn owned(&self, owner: &str) -> crate::store::Result<Vec<(String, Scope)>> {
        Ok(self
            .0
            .webhooks(Some(owner))
            .await?
            .into_iter()
            .map(|w| (w.id, w.scope))
            .collect())
    }

    async fn scope_of(&self, id: &str) -> crate::store::Result<Option<Scope>> {
        Ok(self.0.webhook(id).await?.map(|w| w.scope))
    }

    async fn replace_scope(&self, id: &str, from: &Scope, to: &Scope) -> crate::store::Result<bool> {
        self.0.narrow_webhook_scope(id, from, to).await
    }
}

/// Narrows every endpoint of `owner` to what `scope` allows; how many changed.
pub(super) async fn narrow(store: &dyn Store, owner: &str, scope: &Scope) -> crate::store::Result<usize> {
    narrow_owned(&Endpoints(store), owner, scope).await
}
