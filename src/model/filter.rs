//! `JobFilter`: which jobs a `jobs` query or `jobEvents` subscription asks for.
//!
//! It is what the client asked, nothing more: it carries no `Scope`, so it cannot widen or
//! forget one. The job service takes the caller's scope beside it and applies both.

use serde::{Deserialize, Serialize};

use super::job::Job;
use super::phase::JobPhase;

/// A filter on jobs, shared by the `jobs` query and the `jobEvents` subscription. Empty (the
/// default) matches every job; the caller's scope is applied separately. Serialisable because
/// a webhook endpoint stores the filter it was created with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobFilter {
    pub phases: Option<Vec<JobPhase>>,
    pub namespace: Option<String>,
    pub name_contains: Option<String>,
}

impl JobFilter {
    pub fn matches(&self, job: &Job) -> bool {
        self.phases.as_ref().is_none_or(|p| p.contains(&job.phase))
            && self.namespace.as_ref().is_none_or(|ns| *ns == job.spec.namespace)
            && self.name_contains.as_ref().is_none_or(|n| {
                job.spec
                    .name
                    .as_deref()
                    .is_some_and(|name| name.contains(n.as_str()))
            })
    }
}
