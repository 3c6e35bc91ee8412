//! The workload kinds templates create: each kind's identity, what discovery found of it,
//! whether its jobs can run now, and its list epoch; and what a tracked job of a workload
//! template keeps to decode its object ([`Decoding`]). The executor's part holding them all,
//! by (group, version, kind), is [`WorkloadKinds`].
//!
//! It must not talk to the API server: discovery and the kinds' watchers are `workloads.rs`'s,
//! which write what they find here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, PoisonError, RwLock};

use kube::api::{ApiResource, GroupVersionKind};

use crate::model::MappedPhase;
use crate::templates::{TemplateSet, WorkloadTemplate};

/// The workload kinds templates create, by (group, version, kind), and the templates.
pub(super) struct WorkloadKinds {
    templates: Arc<TemplateSet>,
    by_key: BTreeMap<(String, String, String), Arc<Kind>>,
}

impl WorkloadKinds {
    /// The kinds `templates` create, none discovered yet.
    pub(super) fn new(templates: Arc<TemplateSet>) -> Self {
        let by_key = templates
            .iter()
            .map(|t| {
                let (group, version, kind) = Kind::key(t);
                let gvk = GroupVersionKind::gvk(&group, &version, &kind);
                ((group, version, kind), Kind::new(gvk))
            })
            .collect();
        Self { templates, by_key }
    }

    /// The kind jobs of `template` run as, when it is a workload template.
    pub(super) fn kind_of(&self, template: &str) -> Option<(Arc<WorkloadTemplate>, Arc<Kind>)> {
        let t = self.templates.get(template)?.clone();
        let kind = self.by_key.get(&Kind::key(&t))?.clone();
        Some((t, kind))
    }

    /// Every kind.
    pub(super) fn all(&self) -> impl Iterator<Item = &Arc<Kind>> {
        self.by_key.values()
    }

    /// No template creates a workload kind.
    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

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
