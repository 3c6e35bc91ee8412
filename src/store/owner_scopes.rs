//! The narrowing of a JWT owner's stored scopes, shared by every kind of record a principal
//! owns and that acts for it while it is away (webhook endpoints, schedules).
//!
//! A JWT's claims are known only while its bearer calls, so such a record keeps the scope of
//! the token that created it, narrowed for good whenever the owner calls with a token allowing
//! fewer namespaces ([`narrow_owned`]); [`ScopesSeen`] remembers which narrowings a process has
//! already applied, so that a caller's every request costs a map lookup, not a read of the
//! store. Each kind of record says how its scopes are read and changed ([`OwnedScopes`]); this
//! module decides nothing about what a scope allows the record to do.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::Result;
use crate::model::Scope;

/// One kind of record a principal owns, each with a stored scope.
#[async_trait]
pub trait OwnedScopes: Send + Sync {
    /// The records `owner` owns: (id, stored scope).
    async fn owned(&self, owner: &str) -> Result<Vec<(String, Scope)>>;

    /// A record's stored scope now; `None` when it is gone.
    async fn scope_of(&self, id: &str) -> Result<Option<Scope>>;

    /// Sets a record's scope to `to` if it is still `from` (so that two narrowings at once
    /// never widen one another's result); whether it did.
    async fn replace_scope(&self, id: &str, from: &Scope, to: &Scope) -> Result<bool>;
}

/// Narrows every record of `owner` to what `scope` allows; how many changed.
pub async fn narrow_owned(records: &dyn OwnedScopes, owner: &str, scope: &Scope) -> Result<usize> {
    let mut changed = 0;
    for (id, stored) in records.owned(owner).await? {
        let mut current = Some(stored);
        // A narrowing by another request in between makes the write miss: read it again and
        // narrow what it left.
        while let Some(stored) = current.take() {
            let narrower = stored.intersection(scope);
            if narrower == stored {
                break;
            }
            if records.replace_scope(&id, &stored, &narrower).await? {
                changed += 1;
            } else {
                current = records.scope_of(&id).await?;
            }
        }
    }
    Ok(changed)
}

/// JWT principals' scopes already applied to their records in this process.
#[derive(Default)]
pub struct ScopesSeen {
    seen: Mutex<HashMap<String, Scope>>,
}

/// The most JWT principals remembered; past it the map starts again (each principal's next
/// request reads its records once more).
const MAX_REMEMBERED: usize = 10_000;

impl ScopesSeen {
    /// Whether `owner`'s records still need narrowing to `scope` (remembered as done).
    pub fn first_sight(&self, owner: &str, scope: &Scope) -> bool {
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

    /// Forgets `owner`, so that its next request narrows its records again.
    pub fn forget(&self, owner: &str) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).remove(owner);
    }
}
