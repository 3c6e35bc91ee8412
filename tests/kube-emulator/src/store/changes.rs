//! The store's committed changes: assigning the next resourceVersion, the bounded history a watch
//! replays, the live channel that carries every later change, and the atomic "history + receiver"
//! subscription that makes a watch from a resourceVersion gap-free and duplicate-free.
//!
//! It must not decide what a change is (the object operations do) nor filter changes for a
//! client (the API's watch does).

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::broadcast;

use super::metadata::metadata_mut;
use super::{State, Store, StoreError};

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
    /// When the change was committed (history older than `StoreOptions::history_age` is forgotten).
    pub at: Instant,
}

impl State {
    /// Drops the changes beyond the retained count and, with a `history_age`, those older than
    /// it: the watch cache's window (kube-apiserver keeps at least 75 s of events and evicts
    /// them once its capacity is reached).
    pub(super) fn forget_old_changes(&mut self) {
        let now = Instant::now();
        while let Some(oldest) = self.history.front() {
            let too_many = self.history.len() > self.history_limit;
            let too_old = self
                .history_age
                .is_some_and(|age| now.saturating_duration_since(oldest.at) > age);
            if !(too_many || too_old) {
                break;
            }
            self.compacted_through = oldest.rv;
            self.history.pop_front();
        }
    }

    /// Assigns the next rv, records the change and publishes it. Must be called with the lock held.
    pub(super) fn commit(
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
            at: Instant::now(),
        });
        self.history.push_back(change.clone());
        self.forget_old_changes();
        // No receivers is fine: nobody watches right now.
        let _ = changes.send(change);
        object
    }
}

impl Store {
    /// Sets how many changes are retained for watches (older rvs then answer `Expired`).
    pub fn set_history_limit(&self, limit: usize) {
        let mut st = self.lock();
        st.history_limit = limit.max(1);
        st.forget_old_changes();
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// The oldest resourceVersion a watch may still start from.
    pub fn oldest_rv(&self) -> u64 {
        let mut st = self.lock();
        st.forget_old_changes();
        st.compacted_through
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
        let mut st = self.lock();
        st.forget_old_changes();
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
}
