//! The garbage collector, event-driven like the real one (a graph of owners and dependents fed by
//! the change stream, every decision verified against the store before acting):
//!
//! - **dangling owners** (Background propagation): an object whose `ownerReferences` all name
//!   uids that no longer exist is deleted (gracefully, with a uid precondition); references to
//!   some absent owners among present ones are removed;
//! - **`orphan` finalizer**: the dependents of a deleting owner lose their reference to it, then
//!   the finalizer is removed;
//! - **`foregroundDeletion` finalizer**: the dependents of a deleting owner are deleted; the
//!   finalizer is removed once no dependent with `blockOwnerDeletion: true` is left.
//!
//! The API layer may handle `propagationPolicy` itself; whatever finalizers it leaves are
//! finished here, and handling one twice is harmless. Events are neither owners nor dependents
//! and are not tracked. The collector never creates objects and never writes status.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::Value;

use super::objects::{self, Deletion, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, is_deleting, str_at};
use super::runner::Reconciler;
use crate::store::{Change, ChangeKind, Store, StoreError};

/// Where an object lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjRef {
    resource: String,
    namespace: Option<String>,
    name: String,
}

impl ObjRef {
    fn of(resource: &str, object: &Value) -> ObjRef {
        ObjRef {
            resource: resource.to_owned(),
            namespace: objects::namespace(object).map(str::to_owned),
            name: objects::name(object).to_owned(),
        }
    }
}

impl std::fmt::Display for ObjRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.resource, self.name),
            None => write!(f, "{} {}", self.resource, self.name),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum GcKey {
    /// Check whether this object's owners still exist.
    Dependent(ObjRef),
    /// This object is being deleted with an `orphan` or `foregroundDeletion` finalizer.
    Owner(ObjRef),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum GcError {
    #[error("deleting {object}: {source}")]
    Delete { object: ObjRef, source: StoreError },
    #[error("updating {object}: {source}")]
    Update { object: ObjRef, source: StoreError },
}

enum Owner {
    Exists,
    Absent,
    /// Of a kind the store does not serve: never treated as gone.
    Unknown,
}

/// The owner/dependent graph. Written only by the collector's own task.
#[derive(Default)]
pub(crate) struct GarbageCollector {
    /// Every tracked object by uid.
    objects: HashMap<String, ObjRef>,
    /// Owner uid → the objects naming it in `ownerReferences`.
    dependents: HashMap<String, HashSet<ObjRef>>,
    /// Object → the owner uids it names (to keep `dependents` right when it changes or goes).
    owners_of: HashMap<ObjRef, Vec<String>>,
}

fn tracked(resource: &str) -> bool {
    !resource.starts_with("events")
}

fn owner_uids(object: &Value) -> Vec<String> {
    objects::owner_references(object)
        .iter()
        .filter_map(|r| str_at(r, "/uid"))
        .map(str::to_owned)
        .collect()
}

impl GarbageCollector {
    fn observe(&mut self, resource: &str, object: &Value, deleted: bool, keys: &mut Vec<GcKey>) {
        let me = ObjRef::of(resource, object);
        let uid = objects::uid(object).to_owned();
        if let Some(old) = self.owners_of.remove(&me) {
            for owner in old {
                if let Some(set) = self.dependents.get_mut(&owner) {
                    set.remove(&me);
                    if set.is_empty() {
                        self.dependents.remove(&owner);
                    }
                }
            }
        }
        if deleted {
            if self.objects.get(&uid) == Some(&me) {
                self.objects.remove(&uid);
            }
            // Its dependents may now be dangling; owners waiting for it may now finish.
            if let Some(deps) = self.dependents.get(&uid) {
                keys.extend(deps.iter().cloned().map(GcKey::Dependent));
            }
            for owner in owner_uids(object) {
                if let Some(owner) = self.objects.get(&owner) {
                    keys.push(GcKey::Owner(owner.clone()));
                }
            }
            return;
        }
        self.objects.insert(uid, me.clone());
        let owners = owner_uids(object);
        if !owners.is_empty() {
            for owner in &owners {
                self.dependents
                    .entry(owner.clone())
                    .or_default()
                    .insert(me.clone());
            }
            if owners.iter().any(|o| !self.objects.contains_key(o)) {
                keys.push(GcKey::Dependent(me.clone()));
            }
            self.owners_of.insert(me.clone(), owners);
        }
        if is_deleting(object)
            && (objects::has_finalizer(object, ORPHAN_FINALIZER)
                || objects::has_finalizer(object, FOREGROUND_FINALIZER))
        {
            keys.push(GcKey::Owner(me));
        }
    }

    fn owner_state(store: &Store, reference: &Value, namespace: Option<&str>) -> Owner {
        let (Some(api_version), Some(kind), Some(name), Some(uid)) = (
            str_at(reference, "/apiVersion"),
            str_at(reference, "/kind"),
            str_at(reference, "/name"),
            str_at(reference, "/uid"),
        ) else {
            return Owner::Unknown;
        };
        let Some(rt) = store
            .resources()
            .into_iter()
            .find(|rt| rt.kind == kind && rt.api_version() == api_version)
        else {
            return Owner::Unknown;
        };
        let namespace = if rt.namespaced { namespace } else { None };
        match store.get(&rt.key(), namespace, name) {
            Some(owner) if objects::uid(&owner) == uid => Owner::Exists,
            _ => Owner::Absent,
        }
    }

    fn check_dependent(&self, store: &Store, me: &ObjRef) -> Result<(), GcError> {
        let Some(object) = store.get(&me.resource, me.namespace.as_deref(), &me.name) else {
            return Ok(());
        };
        if is_deleting(&object) {
            return Ok(());
        }
        let references = objects::owner_references(&object);
        if references.is_empty() {
            return Ok(());
        }
        let mut dangling = Vec::new();
        for reference in references {
            if let Owner::Absent = Self::owner_state(store, reference, me.namespace.as_deref()) {
                dangling.extend(str_at(reference, "/uid").map(str::to_owned));
            }
        }
        if dangling.is_empty() {
            return Ok(());
        }
        if dangling.len() == references.len() {
            tracing::debug!(object = %me, "deleting a dependent whose owners are gone");
            return match objects::delete_gracefully(
                store,
                &me.resource,
                me.namespace.as_deref(),
                &me.name,
                Some(objects::uid(&object)),
            ) {
                Ok(_) | Err(StoreError::Conflict(_)) => Ok(()),
                Err(source) => Err(GcError::Delete {
                    object: me.clone(),
                    source,
                }),
            };
        }
        self.drop_references(store, me, &dangling)
    }

    /// Removes the ownerReferences naming any of `uids` from `me`.
    fn drop_references(&self, store: &Store, me: &ObjRef, uids: &[String]) -> Result<(), GcError> {
        let result = store.modify(&me.resource, me.namespace.as_deref(), &me.name, &mut |o| {
            if let Some(refs) = o
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| !str_at(r, "/uid").is_some_and(|u| uids.iter().any(|x| x == u)));
                if refs.is_empty()
                    && let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut)
                {
                    meta.remove("ownerReferences");
                }
            }
            Ok(())
        });
        match result {
            Ok(_) | Err(StoreError::NotFound) => Ok(()),
            Err(source) => Err(GcError::Update {
                object: me.clone(),
                source,
            }),
        }
    }

    fn finish_owner(&self, store: &Store, me: &ObjRef) -> Result<(), GcError> {
        let Some(owner) = store.get(&me.resource, me.namespace.as_deref(), &me.name) else {
            return Ok(());
        };
        if !is_deleting(&owner) {
            return Ok(());
        }
        let uid = objects::uid(&owner).to_owned();
        let dependents: Vec<ObjRef> = self
            .dependents
            .get(&uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let remove = |finalizer: &str| {
            objects::remove_finalizer(store, &me.resource, me.namespace.as_deref(), &me.name, finalizer)
                .map_err(|source| GcError::Update {
                    object: me.clone(),
                    source,
                })
        };
        if objects::has_finalizer(&owner, ORPHAN_FINALIZER) {
            for dependent in &dependents {
                self.drop_references(store, dependent, std::slice::from_ref(&uid))?;
            }
            return remove(ORPHAN_FINALIZER);
        }
        if objects::has_finalizer(&owner, FOREGROUND_FINALIZER) {
            let mut blocking = 0;
            for dependent in &dependents {
                let Some(object) = store.get(
                    &dependent.resource,
                    dependent.namespace.as_deref(),
                    &dependent.name,
                ) else {
                    continue;
                };
                let Some(reference) = objects::owner_references(&object)
                    .iter()
                    .find(|r| str_at(r, "/uid") == Some(&uid))
                else {
                    continue;
                };
                let blocks = reference.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true);
                let outcome = if is_deleting(&object) {
                    Deletion::Deferred
                } else {
                    objects::delete_gracefully(
                        store,
                        &dependent.resource,
                        dependent.namespace.as_deref(),
                        &dependent.name,
                        Some(objects::uid(&object)),
                    )
                    .map_err(|source| GcError::Delete {
                        object: dependent.clone(),
                        source,
                    })?
                };
                if outcome == Deletion::Deferred && blocks {
                    blocking += 1;
                }
            }
            if blocking == 0 {
                return remove(FOREGROUND_FINALIZER);
            }
        }
        Ok(())
    }
}

impl Reconciler for GarbageCollector {
    type Key = GcKey;
    type Nudge = ();
    type Error = GcError;
    const NAME: &'static str = "garbage-collector";

    fn resync(&mut self, store: &Store) -> Vec<GcKey> {
        self.objects.clear();
        self.dependents.clear();
        self.owners_of.clear();
        let mut all = Vec::new();
        for rt in store.resources() {
            let key = rt.key();
            if tracked(&key) {
                let (items, _) = store.list(&key, None, &|_| true);
                all.extend(items.into_iter().map(|o| (key.clone(), o)));
            }
        }
        // Know every uid first, so present owners are not mistaken for missing ones.
        for (resource, object) in &all {
            self.objects
                .insert(objects::uid(object).to_owned(), ObjRef::of(resource, object));
        }
        let mut keys = Vec::new();
        for (resource, object) in &all {
            self.observe(resource, object, false, &mut keys);
        }
        keys
    }

    fn keys_for(&mut self, change: &Change, keys: &mut Vec<GcKey>) {
        if tracked(&change.resource) {
            self.observe(
                &change.resource,
                &change.object,
                change.kind == ChangeKind::Deleted,
                keys,
            );
        }
    }

    fn reconcile(&mut self, store: &Store, key: &GcKey) -> Result<Option<Duration>, GcError> {
        match key {
            GcKey::Dependent(me) => self.check_dependent(store, me)?,
            GcKey::Owner(me) => self.finish_owner(store, me)?,
        }
        Ok(None)
    }
}
