//! The object operations every writer goes through: get, list (copied or shared), create,
//! modify (the atomic read-modify-write with the rules for resourceVersion preconditions,
//! immutable metadata, `generation` and finalizers) and delete.
//!
//! Each operation is one critical section under the store's lock and commits at most one change
//! through `State::commit`. It must not know HTTP or per-kind defaulting and
//! validation (the API layer's).

use std::sync::Arc;

use serde_json::{Value, json};

use super::metadata::{finalizers, is_deleting, may_be_removed, metadata_mut, ns_key};
use super::{ChangeKind, Store, StoreError, now_timestamp, random_suffix};

impl Store {
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let st = self.lock();
        let rt = st.types.get(resource)?;
        let key = (ns_key(rt, namespace), name.to_owned());
        st.objects.get(resource)?.get(&key).map(|o| (**o).clone())
    }

    /// Items (sorted by namespace, name) matching `filter`, with the collection's resourceVersion.
    /// `namespace: None` lists every namespace.
    pub fn list(
        &self,
        resource: &str,
        namespace: Option<&str>,
        filter: &dyn Fn(&Value) -> bool,
    ) -> (Vec<Value>, u64) {
        let (items, rv) = self.list_shared(resource, namespace, filter);
        (items.into_iter().map(|o| (*o).clone()).collect(), rv)
    }

    /// [`Store::list`] sharing the stored objects instead of copying them: a list answered in
    /// pages keeps its snapshot this way, so that its first page costs what a page costs, as
    /// an API server serving from its watch cache, not a copy of the whole collection.
    pub fn list_shared(
        &self,
        resource: &str,
        namespace: Option<&str>,
        filter: &dyn Fn(&Value) -> bool,
    ) -> (Vec<Arc<Value>>, u64) {
        let st = self.lock();
        let rv = st.rv;
        let Some(rt) = st.types.get(resource) else {
            return (Vec::new(), rv);
        };
        let Some(objects) = st.objects.get(resource) else {
            return (Vec::new(), rv);
        };
        let items = match namespace.filter(|_| rt.namespaced) {
            Some(ns) => objects
                .range((ns.to_owned(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, o)| o)
                .filter(|o| filter(o))
                .cloned()
                .collect(),
            None => objects.values().filter(|o| filter(o)).cloned().collect(),
        };
        (items, rv)
    }

    /// Stores a new object and returns it as stored. Sets `uid` (unless one is given), `creationTimestamp`,
    /// `resourceVersion`, `generation: 1`, `apiVersion`/`kind` if absent, and the namespace (a
    /// namespaced kind must name an existing namespace: `NotFound` otherwise); honours
    /// `metadata.generateName`; `AlreadyExists` if the name is taken.
    pub fn create(
        &self,
        resource: &str,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, StoreError> {
        let mut object = object;
        let mut st = self.lock();
        let rt = st.resource(resource)?.clone();
        let ns = ns_key(&rt, namespace);
        if rt.namespaced {
            if ns.is_empty() {
                return Err(StoreError::Invalid("metadata.namespace: Required value".into()));
            }
            if !st.namespace_exists(&ns) {
                return Err(StoreError::NotFound);
            }
        }
        {
            let map = object
                .as_object_mut()
                .ok_or_else(|| StoreError::Invalid("object must be a JSON object".into()))?;
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(rt.api_version()));
            map.entry("kind")
                .or_insert_with(|| Value::String(rt.kind.clone()));
        }
        let meta = metadata_mut(&mut object)?;
        let mut name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if name.is_empty() {
            let prefix = meta
                .get("generateName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if prefix.is_empty() {
                return Err(StoreError::Invalid(
                    "metadata.name: Required value: name or generateName is required".into(),
                ));
            }
            let prefix: String = prefix.chars().take(58).collect();
            name = format!("{prefix}{}", random_suffix(5));
            meta.insert("name".into(), Value::String(name.clone()));
        }
        if rt.namespaced {
            meta.insert("namespace".into(), Value::String(ns.clone()));
        } else {
            meta.remove("namespace");
        }
        // A uid chosen by the caller is kept: the API layer picks it first because Job defaulting
        // writes it into the selector. Clients' own uids are replaced by the API layer.
        if meta.get("uid").and_then(Value::as_str).is_none_or(str::is_empty) {
            meta.insert("uid".into(), Value::String(uuid::Uuid::new_v4().to_string()));
        }
        meta.insert("creationTimestamp".into(), Value::String(now_timestamp()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        let key = (ns, name);
        if st.objects.get(resource).is_some_and(|m| m.contains_key(&key)) {
            return Err(StoreError::AlreadyExists);
        }
        let stored = st.commit(&self.changes, resource, ChangeKind::Added, object, None);
        st.objects
            .entry(resource.to_owned())
            .or_default()
            .insert(key, stored.clone());
        Ok((*stored).clone())
    }

    /// Atomic read-modify-write of one object. `f` gets the current object; `Ok(())` commits
    /// (new rv, generation+1 if `spec` changed; a write that changes nothing commits nothing and
    /// returns the object unchanged).
    ///
    /// Rules every writer gets: a `metadata.resourceVersion` left in the object that differs from
    /// the stored one is a precondition → `Conflict` (remove it for an unconditional write);
    /// `uid`, `name`, `namespace`, `creationTimestamp`, `generation`, `kind` and `apiVersion` cannot
    /// be changed; a `deletionTimestamp` cannot be removed, and setting one bumps `generation`; a
    /// deleting object may not gain finalizers (`Invalid`). A write that leaves a deleting object
    /// with no finalizers (and, for a pod, a terminal phase or a zero grace period) removes it:
    /// one `Deleted` change carrying the object's final state, which is also what is returned.
    pub fn modify(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        f: &mut dyn FnMut(&mut Value) -> Result<(), StoreError>,
    ) -> Result<Value, StoreError> {
        let mut st = self.lock();
        let rt = st.resource(resource)?;
        let key = (ns_key(rt, namespace), name.to_owned());
        let current = st
            .objects
            .get(resource)
            .and_then(|m| m.get(&key))
            .cloned()
            .ok_or(StoreError::NotFound)?;
        let mut next = (*current).clone();
        f(&mut next)?;

        let cur_meta = current.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let cur_rv = cur_meta.get("resourceVersion").cloned().unwrap_or(Value::Null);
        {
            let map = next
                .as_object_mut()
                .ok_or_else(|| StoreError::Invalid("object must be a JSON object".into()))?;
            for field in ["apiVersion", "kind"] {
                if let Some(v) = current.get(field) {
                    map.insert(field.into(), v.clone());
                }
            }
        }
        let was_deleting = is_deleting(&current);
        let meta = metadata_mut(&mut next)?;
        match meta.get("resourceVersion") {
            Some(rv) if !rv.is_null() && rv.as_str() != Some("") && *rv != cur_rv => {
                // The real server's OptimisticLockErrorMsg, word for word: clients match on it.
                return Err(StoreError::Conflict(
                    "the object has been modified; please apply your changes to the latest version and try again"
                        .to_owned(),
                ));
            }
            _ => {}
        }
        meta.insert("resourceVersion".into(), cur_rv);
        for field in ["uid", "name", "namespace", "creationTimestamp", "generation"] {
            match cur_meta.get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
        if was_deleting {
            for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
                if meta.get(field).is_none_or(Value::is_null)
                    && let Some(v) = cur_meta.get(field)
                {
                    meta.insert(field.into(), v.clone());
                }
            }
        }
        if was_deleting {
            let before = finalizers(&current);
            let added: Vec<String> = finalizers(&next)
                .into_iter()
                .filter(|f| !before.contains(f))
                .map(str::to_owned)
                .collect();
            if !added.is_empty() {
                return Err(StoreError::Invalid(format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being \
                     deleted, found new finalizers {added:?}"
                )));
            }
        }
        let spec_changed = current.get("spec") != next.get("spec");
        let newly_deleting = !was_deleting && is_deleting(&next);
        if (spec_changed || newly_deleting)
            && let Some(generation) = next.pointer_mut("/metadata/generation")
            && let Some(g) = generation.as_i64()
        {
            *generation = json!(g + 1);
        }
        if next == *current {
            return Ok(next);
        }
        if resource == "pods" {
            st.touch_log(&key);
        }
        if may_be_removed(resource, &next) {
            let removed = st.commit(&self.changes, resource, ChangeKind::Deleted, next, Some(current));
            if let Some(m) = st.objects.get_mut(resource) {
                m.remove(&key);
            }
            st.logs.remove(&key);
            return Ok((*removed).clone());
        }
        let stored = st.commit(&self.changes, resource, ChangeKind::Modified, next, Some(current));
        st.objects
            .entry(resource.to_owned())
            .or_default()
            .insert(key, stored.clone());
        Ok((*stored).clone())
    }

    /// Removes the object now (finalizers and grace periods are the caller's business: use
    /// [`Store::modify`] to defer). With a uid precondition that does not match → `Conflict`.
    /// Returns the object with the deletion's resourceVersion.
    pub fn delete(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        uid: Option<&str>,
    ) -> Result<Value, StoreError> {
        let mut st = self.lock();
        let rt = st.resource(resource)?;
        let key = (ns_key(rt, namespace), name.to_owned());
        let current = st
            .objects
            .get(resource)
            .and_then(|m| m.get(&key))
            .cloned()
            .ok_or(StoreError::NotFound)?;
        if let Some(uid) = uid {
            let actual = current
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if actual != uid {
                return Err(StoreError::Conflict(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                )));
            }
        }
        if let Some(m) = st.objects.get_mut(resource) {
            m.remove(&key);
        }
        if resource == "pods" {
            st.logs.remove(&key);
        }
        let removed = st.commit(
            &self.changes,
            resource,
            ChangeKind::Deleted,
            (*current).clone(),
            Some(current.clone()),
        );
        Ok((*removed).clone())
    }
}
