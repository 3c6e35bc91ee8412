//! `JobFilter`: which jobs a `jobs` query or `jobEvents` subscription asks for.

use super::job::Job;
use super::phase::JobPhase;
use super::scope::Scope;

/// A filter on jobs, shared by the `jobs` query and the `jobEvents` subscription.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub phases: Option<Vec<JobPhase>>,
    pub namespace: Option<String>,
    pub name_contains: Option<String>,
    /// The caller's namespaces: jobs outside them never match.
    pub scope: Scope,
}

impl JobFilter {
    pub fn matches(&self, job: &Job) -> bool {
        self.scope.sees(job)
            && self.phases.as_ref().is_none_or(|p| p.contains(&job.phase))
            && self.namespace.as_ref().is_none_or(|ns| *ns == job.spec.namespace)
            && self.name_contains.as_ref().is_none_or(|n| {
                job.spec
                    .name
                    .as_deref()
                    .is_some_and(|name| name.contains(n.as_str()))
            })
    }
}
