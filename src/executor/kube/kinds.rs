//! The workload kinds templates create: each kind's identity, what discovery found of it,
//! whether its jobs can run now, and its list epoch; and what a tracked job of a workload
//! template keeps to decode its object ([`Decoding`]).
//!
//! It must not talk to the API server: discovery and the kinds' watchers are `workloads.rs`'s,
//! which write what they find here.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, PoisonError, RwLock};

use kube::api::{ApiResource, GroupVersionKind};

use crate::model::MappedPhase;
use crate::templates::WorkloadTemplate;

/// One workload kind (group, version, kind) that templates create.
///
/// A poisoned lock of it is used anyway: each writer replaces the whole value at once, so a
/// panic elsewhere cannot leave it half-written.
pub(super) struct Kind {
    pub gvk: GroupVersionKind,
    /// What discovery found; `None` until it has (or while the kind is missing).
    pub(super) resource: RwLock<Option<ApiResource>>,
    /// Why jobs of this kind cannot run now; `None` while available or not known yet.
    unavailable: RwLock<Option<String>>,
    /// Bumped at the start of every (re-)list of this kind.
    pub list_epoch: Arc<AtomicU64>,
    pub(super) watching: AtomicBool,
}

impl Kind {
    pub fn new(gvk: GroupVersionKind) -> Arc<Self> {
        Arc::new(Self {
            gvk,
            resource: RwLock::new(None),
            unavailable: RwLock::new(None),
            list_epoch: Arc::new(AtomicU64::new(0)),
            watching: AtomicBool::new(false),
        })
    }

    pub fn key(t: &WorkloadTemplate) -> (String, String, String) {
        let (group, version) = t.group_version();
        (group.to_owned(), version.to_owned(), t.kind.clone())
    }

    pub fn name(&self) -> String {
        format!("{}/{} {}", self.gvk.group, self.gvk.version, self.gvk.kind)
    }

    pub fn availability(&self) -> Result<(), String> {
        match self
            .unavailable
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            None => Ok(()),
            Some(why) => Err(why),
        }
    }

    pub fn set_unavailable(&self, why: Option<String>) {
        let mut current = self.unavailable.write().unwrap_or_else(PoisonError::into_inner);
        if *current != why {
            match &why {
                Some(why) => tracing::warn!(kind = %self.name(), %why, "workload kind unavailable"),
                None => tracing::info!(kind = %self.name(), "workload kind available"),
            }
            *current = why;
        }
    }

    pub fn resource(&self) -> Option<ApiResource> {
        self.resource
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The object's phase as last decoded, and the template that decodes it.
pub(super) struct Decoding {
    pub template: Arc<WorkloadTemplate>,
    pub kind: Arc<Kind>,
    pub mapped: MappedPhase,
}
