//! Whose rights bound an endpoint: what its owner may read now, asked of whoever knows the
//! current credentials (`auth`, wired in by the server: this module must not import it), and
//! the narrowing of JWT owners' endpoints to the narrowest scope their tokens have shown.
//!
//! A static token's or anonymous access's rights are known at every moment (the tokens file,
//! read again when it changes; the configuration): each delivery takes them. A JWT's claims
//! are known only while its bearer calls: its endpoints keep the scope of the token that
//! created them, narrowed for good whenever the owner calls with a token allowing fewer
//! namespaces; an admin disables an endpoint whose owner lost its rights otherwise.
//!
//! It decides nothing about delivery (`delivery` asks [`Owners`] before each batch).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::Scope;
use crate::store::Store;

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

/// JWT principals' scopes already applied to their endpoints in this process, so that a
/// caller's every request costs a map lookup, not a read of the store.
#[derive(Default)]
pub(super) struct Narrowed {
    seen: Mutex<HashMap<String, Scope>>,
}

/// The most JWT principals remembered; past it the map starts again (each principal's next
/// request reads its endpoints once more).
const MAX_REMEMBERED: usize = 10_000;

impl Narrowed {
    /// Whether `owner`'s endpoints still need narrowing to `scope` (remembered as done).
    pub(super) fn first_sight(&self, owner: &str, scope: &Scope) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.get(owner) == Some(scope) {
            return false;
        }
        if seen.len() >= MAX_REMEMBERED {
            seen.clear();
        }
        seen.insert(owner.to_owned(), scope.clone());
        true
    }

    /// Forgets `owner`, so that its next request narrows its endpoints again.
    pub(super) fn forget(&self, owner: &str) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).remove(owner);
    }
}

/// Narrows every endpoint of `owner` to what `scope` allows; how many changed.
pub(super) async fn narrow(store: &dyn Store, owner: &str, scope: &Scope) -> crate::store::Result<usize> {
    let mut changed = 0;
    for webhook in store.webhooks(Some(owner)).await? {
        let mut current = Some(webhook);
        // A narrowing by another request in between makes the write miss: read it again and
        // narrow what it left.
        while let Some(webhook) = current.take() {
            let narrower = webhook.scope.intersection(scope);
            if narrower == webhook.scope {
                break;
            }
            if store
                .narrow_webhook_scope(&webhook.id, &webhook.scope, &narrower)
                .await?
            {
                changed += 1;
            } else {
                current = store.webhook(&webhook.id).await?;
            }
        }
    }
    Ok(changed)
}
