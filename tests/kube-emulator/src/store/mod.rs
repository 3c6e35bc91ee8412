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
//!
//! # Layout
//! - `resource_type`: the served kinds ([`ResourceType`]) and the built-in ones.
//! - `metadata`: reading and stamping object metadata (resourceVersion, timestamps, generated
//!   names, finalizers, the deletion state).
//! - `objects`: the object operations (get, list, create, modify, delete) and their rules.
//! - `changes`: the committed changes: resourceVersion assignment, the bounded history, the live
//!   channel, and the atomic subscription a watch starts from.
//! - `pod_logs`: pod log lines (rotated files and the current one, collection by the kubelet)
//!   and the wake-ups `follow=true` waits on.

mod changes;
mod metadata;
mod objects;
mod pod_logs;
mod resource_type;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

pub use changes::{Change, ChangeKind};
pub use metadata::{now_timestamp, random_suffix, resource_version};
pub use resource_type::ResourceType;

use pod_logs::PodLog;
pub use pod_logs::PodLogView;

/// How many changes the store retains for watches unless told otherwise.
pub const DEFAULT_HISTORY: usize = 10_000;
/// Capacity of the live change channel. Large so that only a truly stuck watcher lags; a lagging
/// receiver is ended by the API layer and the client re-watches from its last resourceVersion.
pub const DEFAULT_BROADCAST_CAPACITY: usize = 65_536;

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
    /// The kubelet's `containerLogMaxSize`: a pod's log file is rotated when a line would take
    /// it past this many bytes (see `pod_logs`). `None`: never rotated.
    pub log_max_bytes: Option<usize>,
    /// How long a change stays in the history at most (`None`: until `history` newer ones push
    /// it out); a watch from a resourceVersion that aged out answers `Expired`.
    pub history_age: Option<Duration>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            history: DEFAULT_HISTORY,
            broadcast_capacity: DEFAULT_BROADCAST_CAPACITY,
            log_max_bytes: None,
            history_age: None,
        }
    }
}

/// `(namespace or "" for cluster-scoped, name)`: BTreeMap order is the real server's list order.
type ObjectKey = (String, String);

struct State {
    types: BTreeMap<String, ResourceType>,
    objects: HashMap<String, BTreeMap<ObjectKey, Arc<Value>>>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    history_age: Option<Duration>,
    /// Every change with an rv above this is in `history`; a watch may start from any rv ≥ it.
    compacted_through: u64,
    logs: HashMap<ObjectKey, PodLog>,
    log_max_bytes: Option<usize>,
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

impl State {
    fn resource(&self, resource: &str) -> Result<&ResourceType, StoreError> {
        self.types.get(resource).ok_or(StoreError::NotFound)
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.objects
            .get("namespaces")
            .is_some_and(|m| m.contains_key(&(String::new(), namespace.to_owned())))
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
                history_age: options.history_age,
                compacted_through: 0,
                logs: HashMap::new(),
                log_max_bytes: options.log_max_bytes,
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
}
