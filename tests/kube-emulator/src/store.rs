//! The emulator's object store: every object of every served kind, one store-wide
//! `resourceVersion` counter, a bounded history of changes for watches, and pod logs.
//!
//! It owns the rules that hold for *every* writer (the HTTP API and the simulated controllers
//! alike): resourceVersion assignment and preconditions, `generation` bumps, immutable metadata,
//! finalizers and deferred deletion, and the atomic "history + live receiver" hand-off that makes a
//! watch from a resourceVersion gap-free and duplicate-free.
//!
//! It must not know HTTP, selectors, defaulting or validation of particular kinds: those belong to
//! the API layer (`crate::api`) and the controllers. It never blocks on I/O and never awaits while
//! holding its lock.
//!
//! Why a `std::sync::Mutex`: every critical section is short, CPU-only work on in-memory maps, so a
//! blocking lock is cheaper than a tokio one and can be taken from sync code (controllers, tests).
//! Broadcast sends happen *under* the lock so that changes reach receivers in resourceVersion
//! order and a new watcher can never miss or repeat a change between its history and its receiver.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// How many changes the store retains for watches unless told otherwise.
pub const DEFAULT_HISTORY: usize = 10_000;
/// Capacity of the live change channel. Large so that only a truly stuck watcher lags; a lagging
/// receiver is ended by the API layer and the client re-watches from its last resourceVersion.
pub const DEFAULT_BROADCAST_CAPACITY: usize = 65_536;

/// Characters the real API server uses for `generateName` suffixes (no vowels, no confusables).
const NAME_SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A kind the emulator serves: built in (namespaces, pods, pods/log, configmaps, events (core/v1
/// and events.k8s.io/v1), batch/v1 jobs, coordination.k8s.io/v1 leases,
/// apiextensions.k8s.io/v1 customresourcedefinitions) or registered from a CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    pub short_names: Vec<String>,
}

impl ResourceType {
    /// `"batch/v1"`, or `"v1"` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The store key and the resource's name in API messages: `"jobs.batch"`, or `"pods"` for core.
    pub fn key(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn builtin(
        group: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        status_subresource: bool,
        short_names: &[&str],
    ) -> Self {
        ResourceType {
            group: group.to_owned(),
            version: "v1".to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_ascii_lowercase(),
            namespaced,
            status_subresource,
            short_names: short_names.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// The kinds every emulator serves from the start.
    pub fn builtins() -> Vec<ResourceType> {
        vec![
            Self::builtin("", "Namespace", "namespaces", false, true, &["ns"]),
            Self::builtin("", "Pod", "pods", true, true, &["po"]),
            Self::builtin("", "ConfigMap", "configmaps", true, false, &["cm"]),
            Self::builtin("", "Event", "events", true, false, &["ev"]),
            Self::builtin("events.k8s.io", "Event", "events", true, false, &["ev"]),
            Self::builtin("batch", "Job", "jobs", true, true, &[]),
            Self::builtin("coordination.k8s.io", "Lease", "leases", true, false, &[]),
            Self::builtin(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
                true,
                &["crd", "crds"],
            ),
        ]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One committed change. `rv` is the object's new resourceVersion (for Deleted: the deletion's rv,
/// which is also written into the object's `metadata.resourceVersion`).
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    pub kind: ChangeKind,
    /// `ResourceType::key` of the object's kind.
    pub resource: String,
    pub object: Arc<Value>,
    /// The object's state before this change (`None` for `Added`): lets a watch tell an update
    /// that moves an object into or out of its selector (sent as `ADDED`/`DELETED`).
    pub previous: Option<Arc<Value>>,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("already exists")]
    AlreadyExists,
    /// Stale `metadata.resourceVersion` or a failed uid precondition.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
}

/// Tunables of a [`Store`].
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    /// Changes retained for watches; older resourceVersions answer `Expired`.
    pub history: usize,
    /// Capacity of the live change channel (per-receiver backlog before it lags).
    pub broadcast_capacity: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            history: DEFAULT_HISTORY,
            broadcast_capacity: DEFAULT_BROADCAST_CAPACITY,
        }
    }
}

/// `(namespace or "" for cluster-scoped, name)`: BTreeMap order is the real server's list order.
type ObjectKey = (String, String);

struct PodLog {
    lines: Vec<(DateTime<Utc>, String)>,
    /// Bumped on every new line and every change of the pod; dropped (closing every receiver)
    /// when the pod is deleted.
    notify: tokio::sync::watch::Sender<u64>,
}

struct State {
    types: BTreeMap<String, ResourceType>,
    objects: HashMap<String, BTreeMap<ObjectKey, Arc<Value>>>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Every change with an rv above this is in `history`; a watch may start from any rv ≥ it.
    compacted_through: u64,
    logs: HashMap<ObjectKey, PodLog>,
}

/// The in-memory object store. Cloning is cheap (an `Arc`); all clones share one state.
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
    changes: broadcast::Sender<Arc<Change>>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("rv", &self.current_rv())
            .finish_non_exhaustive()
    }
}

/// The object's `metadata.resourceVersion` as a number, if it has a valid one.
pub fn resource_version(object: &Value) -> Option<u64> {
    object
        .pointer("/metadata/resourceVersion")?
        .as_str()?
        .parse()
        .ok()
}

/// Now, as the API writes timestamps (RFC 3339, UTC, second precision).
pub fn now_timestamp() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A random `generateName` suffix of `n` characters from the real server's alphabet.
pub fn random_suffix(n: usize) -> String {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        // Each v4 UUID carries 122 random bits; bytes 6 and 8 hold the fixed version/variant bits.
        let uuid = uuid::Uuid::new_v4();
        for (i, b) in uuid.as_bytes().iter().enumerate() {
            if i == 6 || i == 8 || out.len() == n {
                continue;
            }
            // Rejection sampling keeps the distribution uniform: 27 * 9 = 243.
            if *b < 243 {
                out.push(NAME_SUFFIX_ALPHABET[(*b as usize) % NAME_SUFFIX_ALPHABET.len()] as char);
            }
        }
    }
    out
}

fn ns_key(rt: &ResourceType, namespace: Option<&str>) -> String {
    if rt.namespaced {
        namespace.unwrap_or_default().to_owned()
    } else {
        String::new()
    }
}

fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn pod_is_terminal(object: &Value) -> bool {
    matches!(
        object.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// Whether a deleting object may leave the store now: no finalizers left, and for a pod, it has
/// stopped running (terminal phase) or its deletion was immediate (grace period 0).
fn may_be_removed(resource: &str, object: &Value) -> bool {
    if !is_deleting(object) || !finalizers(object).is_empty() {
        return false;
    }
    resource != "pods"
        || pod_is_terminal(object)
        || object
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            == Some(0)
}

fn metadata_mut(object: &mut Value) -> Result<&mut serde_json::Map<String, Value>, StoreError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| StoreError::Invalid("object must be a JSON object".into()))?;
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| StoreError::Invalid("metadata must be a JSON object".into()))
}

impl State {
    fn resource(&self, resource: &str) -> Result<&ResourceType, StoreError> {
        self.types.get(resource).ok_or(StoreError::NotFound)
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.objects
            .get("namespaces")
            .is_some_and(|m| m.contains_key(&(String::new(), namespace.to_owned())))
    }

    /// Assigns the next rv, records the change and publishes it. Must be called with the lock held.
    fn commit(
        &mut self,
        changes: &broadcast::Sender<Arc<Change>>,
        resource: &str,
        kind: ChangeKind,
        mut object: Value,
        previous: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        if let Ok(meta) = metadata_mut(&mut object) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let object = Arc::new(object);
        let change = Arc::new(Change {
            rv,
            kind,
            resource: resource.to_owned(),
            object: object.clone(),
            previous,
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted_through = old.rv;
            }
        }
        // No receivers is fine: nobody watches right now.
        let _ = changes.send(change);
        object
    }

    fn touch_log(&mut self, key: &ObjectKey) {
        if let Some(log) = self.logs.get(key) {
            log.notify.send_modify(|v| *v += 1);
        }
    }
}

impl Store {
    /// A store with the built-in resource types and the namespaces `default`, `kube-system` and
    /// `kube-public`.
    pub fn new() -> Self {
        Self::with_options(StoreOptions::default())
    }

    pub fn with_options(options: StoreOptions) -> Self {
        let types = ResourceType::builtins()
            .into_iter()
            .map(|rt| (rt.key(), rt))
            .collect();
        let (changes, _) = broadcast::channel(options.broadcast_capacity.max(1));
        let store = Store {
            state: Arc::new(Mutex::new(State {
                types,
                objects: HashMap::new(),
                rv: 0,
                history: VecDeque::new(),
                history_limit: options.history.max(1),
                compacted_through: 0,
                logs: HashMap::new(),
            })),
            changes,
        };
        for ns in ["default", "kube-system", "kube-public"] {
            let namespace = json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            // Cannot fail: a fresh store, distinct names, a known kind.
            let _ = store.create("namespaces", None, namespace);
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves maps that are still structurally valid (every
        // mutation is a single insert/remove), so recovering the guard is sound.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets how many changes are retained for watches (older rvs then answer `Expired`).
    pub fn set_history_limit(&self, limit: usize) {
        let mut st = self.lock();
        st.history_limit = limit.max(1);
        while st.history.len() > st.history_limit {
            if let Some(old) = st.history.pop_front() {
                st.compacted_through = old.rv;
            }
        }
    }

    /// Registers (or replaces) a kind, e.g. from a CRD.
    pub fn register(&self, rt: ResourceType) {
        self.lock().types.insert(rt.key(), rt);
    }

    /// Forgets a registered kind and drops its objects (no watch events: a CRD deletion).
    pub fn unregister(&self, key: &str) {
        let mut st = self.lock();
        st.types.remove(key);
        st.objects.remove(key);
    }

    pub fn resource(&self, key: &str) -> Option<ResourceType> {
        self.lock().types.get(key).cloned()
    }

    /// Every served kind, sorted by key.
    pub fn resources(&self) -> Vec<ResourceType> {
        self.lock().types.values().cloned().collect()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// The oldest resourceVersion a watch may still start from.
    pub fn oldest_rv(&self) -> u64 {
        self.lock().compacted_through
    }

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

    /// The retained changes with rv > `after` plus a receiver for later ones, taken atomically (no
    /// gap, no duplicate). `after` older than the retained window → `Expired`. `None` = from now.
    ///
    /// `after` may lie in the future; the receiver then also yields changes with rv ≤ `after`,
    /// which the caller skips (the real server waits until `after` exists).
    #[allow(clippy::type_complexity)]
    pub fn watch(
        &self,
        after: Option<u64>,
    ) -> Result<(Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>), StoreError> {
        let st = self.lock();
        let rx = self.changes.subscribe();
        let Some(after) = after else {
            return Ok((Vec::new(), rx));
        };
        if after < st.compacted_through {
            return Err(StoreError::Expired {
                requested: after,
                oldest: st.compacted_through,
            });
        }
        // History is sorted by rv: skip what is not newer than `after`.
        let start = st.history.partition_point(|c| c.rv <= after);
        Ok((st.history.range(start..).cloned().collect(), rx))
    }

    /// Forgets history: every rv below the current one becomes `Expired` (a restarted API server or
    /// an etcd compaction).
    pub fn compact(&self) {
        let mut st = self.lock();
        st.history.clear();
        st.compacted_through = st.rv;
    }

    /// Appends a line to a pod's log (written by the kubelet). Ignored if the pod does not exist.
    pub fn append_log(&self, namespace: &str, pod: &str, line: &str) {
        let mut st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if !st.objects.get("pods").is_some_and(|m| m.contains_key(&key)) {
            return;
        }
        let log = st.logs.entry(key).or_insert_with(|| PodLog {
            lines: Vec::new(),
            notify: tokio::sync::watch::Sender::new(0),
        });
        log.lines.push((Utc::now(), line.to_owned()));
        log.notify.send_modify(|v| *v += 1);
    }

    /// A pod's log lines, oldest first; `None` if the pod does not exist.
    pub fn logs(&self, namespace: &str, pod: &str) -> Option<Vec<String>> {
        self.log_entries(namespace, pod)
            .map(|l| l.into_iter().map(|(_, line)| line).collect())
    }

    /// A pod's log lines with the time each was written; `None` if the pod does not exist.
    pub fn log_entries(&self, namespace: &str, pod: &str) -> Option<Vec<(DateTime<Utc>, String)>> {
        let st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if !st.objects.get("pods").is_some_and(|m| m.contains_key(&key)) {
            return None;
        }
        Some(st.logs.get(&key).map(|l| l.lines.clone()).unwrap_or_default())
    }

    /// Resolves when the pod gets new log lines, is modified (e.g. turns terminal) or is deleted
    /// (for `follow=true`). Resolves at once if the pod does not exist.
    pub fn log_changed(&self, namespace: &str, pod: &str) -> impl Future<Output = ()> + Send + 'static {
        let mut st = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        let rx = if st.objects.get("pods").is_some_and(|m| m.contains_key(&key)) {
            let log = st.logs.entry(key).or_insert_with(|| PodLog {
                lines: Vec::new(),
                notify: tokio::sync::watch::Sender::new(0),
            });
            Some(log.notify.subscribe())
        } else {
            None
        };
        async move {
            if let Some(mut rx) = rx {
                // Err means the pod was deleted (sender dropped): resolve as well.
                let _ = rx.changed().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"parallelism": 1}})
    }

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    }

    fn rv(o: &Value) -> u64 {
        resource_version(o).expect("object has an rv")
    }

    #[test]
    fn new_store_has_builtins_and_namespaces() {
        let store = Store::new();
        for key in [
            "namespaces",
            "pods",
            "events",
            "events.events.k8s.io",
            "jobs.batch",
        ] {
            assert!(store.resource(key).is_some(), "{key}");
        }
        assert_eq!(
            store.resource("jobs.batch").map(|r| r.api_version()),
            Some("batch/v1".to_owned())
        );
        let (names, _) = store.list("namespaces", None, &|_| true);
        let names: Vec<_> = names
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(names, ["default", "kube-public", "kube-system"]);
    }

    #[test]
    fn create_fills_metadata_and_rejects_duplicates() {
        let store = Store::new();
        let created = store
            .create("jobs.batch", Some("default"), job("a"))
            .expect("create");
        assert_eq!(created["metadata"]["namespace"], "default");
        assert_eq!(created["metadata"]["generation"], 1);
        let mut given = job("given-uid");
        given["metadata"]["uid"] = json!("0b5e0000-0000-4000-8000-000000000000");
        let kept = store
            .create("jobs.batch", Some("default"), given)
            .expect("create with uid");
        assert_eq!(kept["metadata"]["uid"], "0b5e0000-0000-4000-8000-000000000000");
        assert!(created["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
        assert!(
            created["metadata"]["creationTimestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
        assert!(rv(&created) < store.current_rv());
        assert_eq!(rv(&kept), store.current_rv());
        assert_eq!(
            store.create("jobs.batch", Some("default"), job("a")),
            Err(StoreError::AlreadyExists)
        );
        // Same name in another namespace is fine.
        store
            .create("namespaces", None, json!({"metadata": {"name": "other"}}))
            .expect("namespace");
        store
            .create("jobs.batch", Some("other"), job("a"))
            .expect("other namespace");
        // Missing namespace.
        assert_eq!(
            store.create("jobs.batch", Some("nope"), job("a")),
            Err(StoreError::NotFound)
        );
        // Neither name nor generateName.
        assert!(matches!(
            store.create("jobs.batch", Some("default"), json!({"metadata": {}})),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn generate_name_appends_five_chars_from_the_alphabet() {
        let store = Store::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            let p = store
                .create(
                    "pods",
                    Some("default"),
                    json!({"metadata": {"generateName": "pi-"}}),
                )
                .expect("create");
            let name = p["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let suffix = name.strip_prefix("pi-").expect("prefix kept");
            assert_eq!(suffix.len(), 5);
            assert!(
                suffix.bytes().all(|b| NAME_SUFFIX_ALPHABET.contains(&b)),
                "{name}"
            );
            assert!(seen.insert(name));
        }
    }

    #[test]
    fn resource_version_is_monotonic_across_all_objects() {
        let store = Store::new();
        let mut last = store.current_rv();
        let mut check = |o: &Value| {
            let r = rv(o);
            assert!(r > last, "{r} after {last}");
            last = r;
        };
        check(&store.create("jobs.batch", Some("default"), job("a")).expect("a"));
        check(&store.create("pods", Some("default"), pod("p")).expect("p"));
        check(&store.create("jobs.batch", Some("default"), job("b")).expect("b"));
        check(
            &store
                .modify("jobs.batch", Some("default"), "a", &mut |o| {
                    o["status"] = json!({"active": 1});
                    Ok(())
                })
                .expect("modify"),
        );
        check(&store.delete("pods", Some("default"), "p", None).expect("delete"));
        assert_eq!(last, store.current_rv());
    }

    #[test]
    fn modify_bumps_generation_only_for_spec_and_skips_noops() {
        let store = Store::new();
        let created = store
            .create("jobs.batch", Some("default"), job("a"))
            .expect("create");
        let same = store
            .modify("jobs.batch", Some("default"), "a", &mut |_| Ok(()))
            .expect("noop");
        assert_eq!(same, created);
        assert_eq!(store.current_rv(), rv(&created));

        let labelled = store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                o["metadata"]["labels"] = json!({"x": "y"});
                o["metadata"]["generation"] = json!(42); // clients cannot set it
                o["metadata"]["uid"] = json!("forged");
                Ok(())
            })
            .expect("labels");
        assert_eq!(labelled["metadata"]["generation"], 1);
        assert_eq!(labelled["metadata"]["uid"], created["metadata"]["uid"]);
        assert!(rv(&labelled) > rv(&created));

        let respec = store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                o["spec"]["parallelism"] = json!(2);
                Ok(())
            })
            .expect("spec");
        assert_eq!(respec["metadata"]["generation"], 2);
        assert_eq!(
            store.modify("jobs.batch", Some("default"), "zz", &mut |_| Ok(())),
            Err(StoreError::NotFound)
        );
        // An error from `f` commits nothing.
        let before = store.current_rv();
        let err = store.modify("jobs.batch", Some("default"), "a", &mut |o| {
            o["spec"]["parallelism"] = json!(9);
            Err(StoreError::Invalid("no".into()))
        });
        assert_eq!(err, Err(StoreError::Invalid("no".into())));
        assert_eq!(store.current_rv(), before);
    }

    #[test]
    fn stale_resource_version_conflicts() {
        let store = Store::new();
        let created = store
            .create("jobs.batch", Some("default"), job("a"))
            .expect("create");
        let mut stale = created.clone();
        let updated = store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                let mut body = created.clone();
                body["spec"]["parallelism"] = json!(3);
                *o = body;
                Ok(())
            })
            .expect("update with the current rv");
        assert_eq!(updated["spec"]["parallelism"], 3);
        stale["spec"]["parallelism"] = json!(4);
        let err = store.modify("jobs.batch", Some("default"), "a", &mut |o| {
            *o = stale.clone();
            Ok(())
        });
        assert!(matches!(err, Err(StoreError::Conflict(_))), "{err:?}");
        // Without a resourceVersion the write is unconditional.
        let forced = store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                let mut body = stale.clone();
                if let Some(m) = body["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                *o = body;
                Ok(())
            })
            .expect("unconditional");
        assert_eq!(forced["spec"]["parallelism"], 4);
    }

    #[test]
    fn delete_with_uid_precondition() {
        let store = Store::new();
        let created = store
            .create("jobs.batch", Some("default"), job("a"))
            .expect("create");
        assert!(matches!(
            store.delete("jobs.batch", Some("default"), "a", Some("other-uid")),
            Err(StoreError::Conflict(_))
        ));
        let uid = created["metadata"]["uid"].as_str().map(str::to_owned);
        let deleted = store
            .delete("jobs.batch", Some("default"), "a", uid.as_deref())
            .expect("delete");
        assert_eq!(rv(&deleted), store.current_rv());
        assert!(store.get("jobs.batch", Some("default"), "a").is_none());
        assert_eq!(
            store.delete("jobs.batch", Some("default"), "a", None),
            Err(StoreError::NotFound)
        );
    }

    #[test]
    fn finalizers_defer_deletion_until_the_last_one_goes() {
        let store = Store::new();
        let mut body = job("a");
        body["metadata"]["finalizers"] = json!(["x", "y"]);
        store.create("jobs.batch", Some("default"), body).expect("create");
        let deleting = store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                o["metadata"]["deletionTimestamp"] = json!(now_timestamp());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                Ok(())
            })
            .expect("mark deleting");
        assert_eq!(
            deleting["metadata"]["generation"], 2,
            "deferred deletion bumps generation"
        );
        // Cannot add finalizers or clear the deletion mark.
        let err = store.modify("jobs.batch", Some("default"), "a", &mut |o| {
            o["metadata"]["finalizers"] = json!(["x", "y", "z"]);
            Ok(())
        });
        assert!(matches!(err, Err(StoreError::Invalid(_))));
        let kept = store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                o["metadata"]["finalizers"] = json!(["y"]);
                if let Some(m) = o["metadata"].as_object_mut() {
                    m.remove("deletionTimestamp");
                }
                Ok(())
            })
            .expect("remove one finalizer");
        assert!(kept["metadata"]["deletionTimestamp"].is_string());
        assert!(store.get("jobs.batch", Some("default"), "a").is_some());

        let (_, mut rx) = store.watch(None).expect("watch");
        let gone = store
            .modify("jobs.batch", Some("default"), "a", &mut |o| {
                o["metadata"]["finalizers"] = json!([]);
                Ok(())
            })
            .expect("remove the last finalizer");
        assert!(store.get("jobs.batch", Some("default"), "a").is_none());
        let change = rx.try_recv().expect("a change");
        assert_eq!(change.kind, ChangeKind::Deleted);
        assert_eq!(rv(&gone), change.rv);
    }

    #[test]
    fn deleting_pod_goes_when_terminal() {
        let store = Store::new();
        store.create("pods", Some("default"), pod("p")).expect("create");
        store
            .modify("pods", Some("default"), "p", &mut |o| {
                o["metadata"]["deletionTimestamp"] = json!(now_timestamp());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(30);
                o["status"] = json!({"phase": "Running"});
                Ok(())
            })
            .expect("graceful delete");
        assert!(
            store.get("pods", Some("default"), "p").is_some(),
            "a running pod stays while terminating"
        );
        let (_, mut rx) = store.watch(None).expect("watch");
        let last = store
            .modify("pods", Some("default"), "p", &mut |o| {
                o["status"]["phase"] = json!("Succeeded");
                Ok(())
            })
            .expect("terminal");
        assert!(store.get("pods", Some("default"), "p").is_none());
        let change = rx.try_recv().expect("a change");
        assert_eq!(change.kind, ChangeKind::Deleted);
        assert_eq!(change.object["status"]["phase"], "Succeeded");
        assert_eq!(
            change.previous.as_ref().map(|p| p["status"]["phase"].clone()),
            Some(json!("Running"))
        );
        assert_eq!(last["status"]["phase"], "Succeeded");
    }

    #[test]
    fn watch_from_rv_has_no_gap_and_no_duplicate() {
        let store = Store::new();
        store.create("jobs.batch", Some("default"), job("a")).expect("a");
        let from = store.current_rv();
        store.create("jobs.batch", Some("default"), job("b")).expect("b");
        store.create("jobs.batch", Some("default"), job("c")).expect("c");
        let (history, mut rx) = store.watch(Some(from)).expect("watch");
        store
            .delete("jobs.batch", Some("default"), "b", None)
            .expect("delete b");
        let mut seen: Vec<u64> = history.iter().map(|c| c.rv).collect();
        while let Ok(c) = rx.try_recv() {
            seen.push(c.rv);
        }
        let expected: Vec<u64> = (from + 1..=store.current_rv()).collect();
        assert_eq!(seen, expected);
        assert_eq!(history.len(), 2);

        // From "now": nothing old.
        let (history, _rx) = store.watch(None).expect("watch now");
        assert!(history.is_empty());
        let (history, _rx) = store.watch(Some(store.current_rv())).expect("watch current");
        assert!(history.is_empty());
    }

    #[test]
    fn concurrent_writers_and_a_watcher_see_every_rv_once() {
        let store = Store::new();
        let from = store.current_rv();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        store
                            .create("pods", Some("default"), pod(&format!("w{w}-{i}")))
                            .expect("create");
                    }
                })
            })
            .collect();
        // Start the watch while writes are in flight.
        let (history, mut rx) = store.watch(Some(from)).expect("watch");
        for w in writers {
            w.join().expect("writer");
        }
        let mut seen: Vec<u64> = history.iter().map(|c| c.rv).collect();
        while let Ok(c) = rx.try_recv() {
            seen.push(c.rv);
        }
        let expected: Vec<u64> = (from + 1..=store.current_rv()).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn old_rv_expires_after_compaction_or_window() {
        let store = Store::new();
        let old = store.current_rv();
        store.create("jobs.batch", Some("default"), job("a")).expect("a");
        store.compact();
        let now = store.current_rv();
        assert_eq!(
            store.watch(Some(old)).map(|(h, _)| h.len()),
            Err(StoreError::Expired {
                requested: old,
                oldest: now
            })
        );
        assert!(store.watch(Some(now)).is_ok());

        let small = Store::with_options(StoreOptions {
            history: 2,
            ..StoreOptions::default()
        });
        let start = small.current_rv();
        for n in ["a", "b", "c"] {
            small
                .create("jobs.batch", Some("default"), job(n))
                .expect("create");
        }
        assert!(matches!(
            small.watch(Some(start)),
            Err(StoreError::Expired { .. })
        ));
        let (history, _) = small
            .watch(Some(small.current_rv() - 2))
            .expect("within the window");
        assert_eq!(history.len(), 2);
    }

    #[test]
    fn list_is_sorted_filtered_and_scoped() {
        let store = Store::new();
        store
            .create("namespaces", None, json!({"metadata": {"name": "a-ns"}}))
            .expect("ns");
        for (ns, name) in [("default", "z"), ("a-ns", "y"), ("default", "b")] {
            store.create("jobs.batch", Some(ns), job(name)).expect("create");
        }
        let names = |items: Vec<Value>| -> Vec<String> {
            items
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o["metadata"]["namespace"].as_str().unwrap_or(""),
                        o["metadata"]["name"]
                    )
                })
                .collect()
        };
        let (all, rv) = store.list("jobs.batch", None, &|_| true);
        assert_eq!(rv, store.current_rv());
        assert_eq!(names(all), ["a-ns/\"y\"", "default/\"b\"", "default/\"z\""]);
        let (def, _) = store.list("jobs.batch", Some("default"), &|o| o["metadata"]["name"] != "b");
        assert_eq!(names(def), ["default/\"z\""]);
    }

    #[tokio::test]
    async fn logs_append_and_wake_followers() {
        let store = Store::new();
        assert!(store.logs("default", "p").is_none());
        store.create("pods", Some("default"), pod("p")).expect("pod");
        assert_eq!(store.logs("default", "p"), Some(vec![]));
        let woke = store.log_changed("default", "p");
        store.append_log("default", "p", "hello");
        tokio::time::timeout(std::time::Duration::from_secs(10), woke)
            .await
            .expect("woken by a line");
        assert_eq!(store.logs("default", "p"), Some(vec!["hello".to_owned()]));

        let woke = store.log_changed("default", "p");
        store.delete("pods", Some("default"), "p", None).expect("delete");
        tokio::time::timeout(std::time::Duration::from_secs(10), woke)
            .await
            .expect("woken by deletion");
        assert!(store.logs("default", "p").is_none());
        // A pod that does not exist resolves at once.
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            store.log_changed("default", "p"),
        )
        .await
        .expect("missing pod");
    }
}
